//! What `lockkit bench --metrics` prints and `lockkit run --metrics-addr` serves: the metrics
//! lockkit-core records (`lockkit::metrics`), through an in-memory recorder or a Prometheus
//! endpoint.

use std::fmt::Write as _;
use std::net::SocketAddr;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use serde_json::{Map, Value};

use crate::exit::Failure;

/// Serves the metrics in Prometheus' text format at `http://ADDR/metrics` (any path) for as
/// long as `lockkit` runs, when `addr` is given.
#[cfg(feature = "prometheus")]
pub(crate) fn serve(addr: Option<SocketAddr>) -> Result<(), Failure> {
    let Some(addr) = addr else { return Ok(()) };
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|error| Failure::new(crate::exit::OS_ERROR, format!("cannot serve metrics on {addr}: {error}")))?;
    lockkit::metrics::describe();
    Ok(())
}

/// Without the `prometheus` feature, `--metrics-addr` says how to get it.
#[cfg(not(feature = "prometheus"))]
pub(crate) fn serve(addr: Option<SocketAddr>) -> Result<(), Failure> {
    match addr {
        None => Ok(()),
        Some(_) => Err(Failure::new(
            crate::exit::USAGE,
            "--metrics-addr needs lockkit built with the prometheus feature: cargo install --path lockkit-cli --features prometheus",
        )),
    }
}

/// The recorder of `lockkit bench --metrics`: every metric of the run, kept in memory.
pub(crate) struct Recorded {
    snapshotter: Snapshotter,
}

impl Recorded {
    /// Installs the in-memory recorder as the process's recorder.
    pub(crate) fn install() -> Result<Self, Failure> {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .map_err(|error| Failure::new(crate::exit::OS_ERROR, format!("cannot record metrics: {error}")))?;
        Ok(Self { snapshotter })
    }

    /// Every metric recorded so far: counters with their value, histograms with their count,
    /// p50, p99 and maximum, sorted by name and labels.
    pub(crate) fn lines(&self) -> Vec<Line> {
        let mut lines: Vec<Line> = self
            .snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter_map(|(key, _, _, value)| {
                let key = key.key();
                let labels: Vec<String> =
                    key.labels().map(|label| format!("{}={}", label.key(), label.value())).collect();
                let value = match value {
                    DebugValue::Counter(count) => Summary::Counter(count),
                    DebugValue::Histogram(mut samples) => {
                        samples.sort_unstable();
                        let at = |q: f64| {
                            let index = ((samples.len() as f64 - 1.0) * q).round() as usize;
                            samples.get(index).map_or(0.0, |sample| sample.into_inner())
                        };
                        Summary::Histogram { count: samples.len(), p50: at(0.5), p99: at(0.99), max: at(1.0) }
                    }
                    DebugValue::Gauge(_) => return None,
                };
                Some(Line { name: key.name().to_owned(), labels: labels.join(","), value })
            })
            .collect();
        lines.sort_by(|a, b| (&a.name, &a.labels).cmp(&(&b.name, &b.labels)));
        lines
    }

    /// The lines as a table for the end of the bench report.
    pub(crate) fn table(&self) -> String {
        let mut out = String::from("metrics recorded during the run (lockkit::metrics):\n");
        for line in self.lines() {
            let value = match line.value {
                Summary::Counter(count) => count.to_string(),
                Summary::Histogram { count, p50, p99, max } => {
                    let unit = |v: f64| {
                        if line.name.ends_with("_seconds") { format!("{:.3} ms", v * 1e3) } else { format!("{v}") }
                    };
                    format!("count {count}, p50 {}, p99 {}, max {}", unit(p50), unit(p99), unit(max))
                }
            };
            let _ = writeln!(out, "  {}{{{}}} {value}", line.name, line.labels);
        }
        out.trim_end().to_owned()
    }

    /// The lines as a JSON array, for `--json`.
    pub(crate) fn json(&self) -> Value {
        let lines = self.lines().into_iter().map(|line| {
            let mut entry = Map::new();
            entry.insert("name".into(), Value::from(line.name));
            entry.insert("labels".into(), Value::from(line.labels));
            match line.value {
                Summary::Counter(count) => {
                    entry.insert("value".into(), Value::from(count));
                }
                Summary::Histogram { count, p50, p99, max } => {
                    entry.insert("count".into(), Value::from(count));
                    entry.insert("p50".into(), Value::from(p50));
                    entry.insert("p99".into(), Value::from(p99));
                    entry.insert("max".into(), Value::from(max));
                }
            }
            Value::Object(entry)
        });
        Value::Array(lines.collect())
    }
}

/// One recorded metric.
pub(crate) struct Line {
    name: String,
    labels: String,
    value: Summary,
}

enum Summary {
    Counter(u64),
    Histogram { count: usize, p50: f64, p99: f64, max: f64 },
}
