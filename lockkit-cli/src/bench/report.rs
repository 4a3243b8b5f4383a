//! The figures of one `lockkit bench` run: latency histograms, the table for people and the
//! `--json` object, both made from one list so they always agree.

use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::{Map, Value};

/// A latency histogram in nanoseconds, from 1 ns to one hour, 3 significant digits.
#[derive(Debug, Clone)]
pub(crate) struct Latency(Histogram<u64>);

impl Latency {
    /// An empty histogram.
    pub(crate) fn new() -> Self {
        match Histogram::new_with_bounds(1, 3_600_000_000_000, 3) {
            Ok(histogram) => Self(histogram),
            Err(_) => unreachable!("constant bounds that hdrhistogram accepts"),
        }
    }

    /// Records one sample; samples beyond an hour are saturated.
    pub(crate) fn record(&mut self, sample: Duration) {
        let nanos = u64::try_from(sample.as_nanos()).unwrap_or(u64::MAX).clamp(1, 3_600_000_000_000);
        let _ = self.0.record(nanos);
    }

    /// Adds another histogram's samples.
    pub(crate) fn merge(&mut self, other: &Latency) {
        let _ = self.0.add(&other.0);
    }

    /// Samples recorded.
    pub(crate) fn len(&self) -> u64 {
        self.0.len()
    }

    /// The value at quantile `q` (0.5 for the median), in microseconds; 0 when empty.
    pub(crate) fn micros(&self, q: f64) -> f64 {
        if self.0.is_empty() { 0.0 } else { self.0.value_at_quantile(q) as f64 / 1e3 }
    }

    /// The largest sample, in microseconds.
    pub(crate) fn max_micros(&self) -> f64 {
        if self.0.is_empty() { 0.0 } else { self.0.max() as f64 / 1e3 }
    }

    /// The p50, the p99 and the largest sample, in microseconds.
    pub(crate) fn spread(&self) -> (f64, f64, f64) {
        (self.micros(0.5), self.micros(0.99), self.max_micros())
    }
}

/// How a figure's value reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    /// Microseconds.
    Micros,
    /// Milliseconds.
    Millis,
    /// Seconds.
    Seconds,
    /// Events per second.
    PerSecond,
    /// A share between 0 and 1, shown as a percentage.
    Share,
    /// A plain number.
    Count,
    /// Bytes.
    Bytes,
    /// A factor (already a ratio, such as a speed-up).
    Times,
}

impl Unit {
    /// The suffix of the JSON key, so that the unit travels with the number.
    fn key_suffix(self) -> &'static str {
        match self {
            Unit::Micros => "_us",
            Unit::Millis => "_ms",
            Unit::Seconds => "_s",
            Unit::PerSecond => "_per_s",
            Unit::Bytes => "_bytes",
            Unit::Share | Unit::Count | Unit::Times => "",
        }
    }

    fn show(self, value: f64) -> String {
        match self {
            Unit::Micros if value >= 1_000.0 => format!("{:.2} ms", value / 1e3),
            Unit::Micros => format!("{value:.1} µs"),
            Unit::Millis => format!("{value:.1} ms"),
            Unit::Seconds => format!("{value:.2} s"),
            Unit::PerSecond => format!("{value:.0}/s"),
            Unit::Share => format!("{:.1} %", value * 100.0),
            Unit::Count if value.fract() == 0.0 => format!("{value:.0}"),
            Unit::Count => format!("{value:.1}"),
            Unit::Bytes if value >= 10_240.0 => format!("{:.1} KiB", value / 1024.0),
            Unit::Bytes => format!("{value:.0} B"),
            Unit::Times => format!("{value:.2}×"),
        }
    }
}

/// A target of issue 6 checked against a figure of this run.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// What the figure must be, for people: `≤ 2.2× PING p50`.
    pub(crate) text: String,
    /// Whether this run met it.
    pub(crate) met: bool,
}

/// One measured figure.
#[derive(Debug, Clone)]
pub(crate) struct Figure {
    /// The section (the JSON object it goes in): `floor`, `uncontended`, ….
    pub(crate) section: &'static str,
    /// The JSON key, without the unit suffix.
    pub(crate) key: String,
    /// The label in the table.
    pub(crate) label: String,
    /// The value, in `unit`.
    pub(crate) value: f64,
    /// How to read it.
    pub(crate) unit: Unit,
    /// The value divided by the floor's p50 from the same run, where meaningful. For a rate
    /// it is the rate times the floor's p50: the share of one connection's raw round trips
    /// per second that the figure reaches.
    pub(crate) ratio: Option<f64>,
    /// The target this figure is checked against, if any.
    pub(crate) target: Option<Target>,
}

/// Everything one run measured.
#[derive(Debug, Default)]
pub(crate) struct Report {
    /// The store, password redacted.
    pub(crate) url: String,
    /// The backend, as its scheme names it: `redis`, `zk`, `file`, `memory`, ….
    pub(crate) backend: &'static str,
    /// The settings of the run.
    pub(crate) settings: Vec<(&'static str, Value)>,
    /// What the floor is, for people: `PING`, `create+delete of an ephemeral node`; `None`
    /// when the backend has no network floor.
    pub(crate) floor: Option<String>,
    /// The figures, in the order of the table.
    pub(crate) figures: Vec<Figure>,
    /// Remarks printed under the table (and `notes` in JSON).
    pub(crate) notes: Vec<String>,
}

impl Report {
    /// Adds a figure with no ratio and no target.
    pub(crate) fn add(
        &mut self,
        section: &'static str,
        key: impl Into<String>,
        label: impl Into<String>,
        value: f64,
        unit: Unit,
    ) {
        let (key, label) = (key.into(), label.into());
        self.figures.push(Figure { section, key, label, value, unit, ratio: None, target: None });
    }

    /// Sets the ratio to the floor of the last figure added.
    pub(crate) fn set_ratio(&mut self, ratio: Option<f64>) {
        if let Some(figure) = self.figures.last_mut() {
            figure.ratio = ratio;
        }
    }

    /// Checks the last figure added against `text` with `met(value, ratio)`.
    pub(crate) fn target(&mut self, text: impl Into<String>, met: impl FnOnce(f64, Option<f64>) -> bool) {
        if let Some(figure) = self.figures.last_mut() {
            figure.target = Some(Target { text: text.into(), met: met(figure.value, figure.ratio) });
        }
    }

    /// The table for people.
    pub(crate) fn table(&self) -> String {
        let mut out = String::new();
        let settings: Vec<String> = self.settings.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(out, "lockkit bench on {} ({}; {})", self.url, self.backend, settings.join(", "));
        match &self.floor {
            Some(floor) => {
                let _ = writeln!(out, "floor: {floor}; ratios are to the floor's p50 from this run");
            }
            None => {
                let _ = writeln!(out, "floor: none for this backend (no network round trip); no ratios");
            }
        }
        let width = self.figures.iter().map(|f| f.label.chars().count()).max().unwrap_or(0).max(6);
        let _ = writeln!(out);
        let _ = writeln!(out, "{:<width$}  {:>12}  {:>8}  target", "figure", "value", "÷ floor");
        let mut section = "";
        for figure in &self.figures {
            if figure.section != section {
                section = figure.section;
                let _ = writeln!(out, "{section}");
            }
            let ratio = figure.ratio.map_or_else(|| "—".to_owned(), |r| format!("{r:.2}×"));
            let target = figure
                .target
                .as_ref()
                .map(|t| format!("{} ({})", t.text, if t.met { "met" } else { "MISSED" }))
                .unwrap_or_default();
            let line =
                format!("  {:<width$}  {:>12}  {:>8}  {target}", figure.label, figure.unit.show(figure.value), ratio);
            let _ = writeln!(out, "{}", line.trim_end());
        }
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        out.trim_end().to_owned()
    }

    /// The `--json` object: `url`, `backend`, `settings`, `floor_kind`, one object per section
    /// with `<key><unit suffix>` and `<key>_ratio` members, `targets` and `notes`.
    pub(crate) fn json(&self) -> Value {
        let mut root = Map::new();
        root.insert("url".into(), Value::from(self.url.clone()));
        root.insert("backend".into(), Value::from(self.backend));
        root.insert(
            "settings".into(),
            Value::Object(self.settings.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect()),
        );
        root.insert("floor_kind".into(), self.floor.clone().map_or(Value::Null, Value::from));
        let mut targets = Vec::new();
        for figure in &self.figures {
            let entry = root.entry(figure.section).or_insert_with(|| Value::Object(Map::new()));
            let key = format!("{}{}", figure.key, figure.unit.key_suffix());
            if let Value::Object(section) = entry {
                section.insert(key.clone(), number(figure.value));
                if let Some(ratio) = figure.ratio {
                    section.insert(format!("{}_ratio", figure.key), number(ratio));
                }
            }
            if let Some(target) = &figure.target {
                targets.push(serde_json::json!({
                    "figure": format!("{}.{key}", figure.section),
                    "target": target.text.clone(),
                    "value": number(figure.value),
                    "ratio": figure.ratio.map_or(Value::Null, number),
                    "met": target.met,
                }));
            }
        }
        root.insert("targets".into(), Value::Array(targets));
        root.insert("notes".into(), Value::from(self.notes.clone()));
        Value::Object(root)
    }
}

/// A JSON number rounded to 3 decimals (null for a non-finite value).
fn number(value: f64) -> Value {
    serde_json::Number::from_f64((value * 1e3).round() / 1e3).map_or(Value::Null, Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_and_json_carry_the_same_figures() {
        let mut report = Report { url: "mem://x".into(), backend: "memory", ..Report::default() };
        report.add("uncontended", "p50", "cycle p50", 120.0, Unit::Micros);
        report.set_ratio(Some(1.5));
        report.target("≤ 2.2× floor p50", |_, ratio| ratio.is_some_and(|r| r <= 2.2));
        report.add("contended", "handoff_share", "hand-off share", 0.5, Unit::Share);
        let table = report.table();
        assert!(table.contains("120.0 µs") && table.contains("1.50×") && table.contains("(met)"), "{table}");
        assert!(table.contains("50.0 %"), "{table}");
        let json = report.json();
        assert_eq!(json["uncontended"]["p50_us"], 120.0);
        assert_eq!(json["uncontended"]["p50_ratio"], 1.5);
        assert_eq!(json["contended"]["handoff_share"], 0.5);
        assert_eq!(json["targets"][0]["met"], true);
    }

    #[test]
    fn latencies_have_quantiles() {
        let mut latency = Latency::new();
        for micros in 1..=100 {
            latency.record(Duration::from_micros(micros));
        }
        assert_eq!(latency.len(), 100);
        assert!((latency.micros(0.5) - 50.0).abs() < 0.1);
        assert!((latency.max_micros() - 100.0).abs() < 0.1);
    }
}
