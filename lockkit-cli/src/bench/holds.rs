//! The holds phase (`lockkit bench --holds N`): the cost of many holds on one provider. N
//! locks are taken with a short lease (the backend's own URL option, from its profile, unless
//! the URL sets it), kept for three leases, then released. It reports the time to take and to release them all (and
//! per hold), the renewal rounds in the window with their round trips and the longest round (where the backend
//! counts them) and the server's time per round (where the floor reads it), the client's
//! resident memory per hold (its growth from a baseline read after a warm-up round of
//! [`IN_FLIGHT`] acquisitions in flight, released, so that the provider's fixed working set,
//! its connections' buffers and the transient memory of the acquisitions in flight are not
//! counted as the holds'), the client's CPU per second while the holds are kept, and every hold lost: a guard whose `is_held()` went false or
//! whose `lost()` resolved, seen by a scan of all guards every [`SCAN`]. One hold is broken
//! by another client (where the backend can break a lock), and the time until its loss is
//! seen is reported: a deleted record must be found among all the others.

use std::time::{Duration, Instant};

use futures_util::{FutureExt as _, StreamExt as _};
use lockkit::{LockGuard, LockProvider};

use super::report::Unit;
use super::state::Bench;
use super::upkeep::{cpu_time, resident_bytes};
use super::url::with_option;
use crate::exit::Failure;
use crate::target::Target;

/// Acquisitions (and releases) in flight at once: enough to fill a pipeline, few enough that
/// the resident memory after the acquisitions shows what the holds keep.
const IN_FLIGHT: usize = 100;

/// How often every guard is asked whether it is still held.
const SCAN: Duration = Duration::from_millis(250);

/// How long holds are kept on a backend with no lease: as long as three short leases.
const NO_LEASE_WINDOW: Duration = Duration::from_secs(9);

/// Holds a renewal round trip may carry, at least (the target: at most one round trip per
/// this many holds per renewal round).
const HOLDS_PER_ROUND_TRIP: u32 = 1_000;

impl Bench {
    /// `count` holds taken on one provider with a short lease, kept for three leases, released.
    pub(super) async fn holds(&mut self, count: u32) -> Result<(), Failure> {
        let section = "holds";
        let raw = self.args.url.clone().unwrap_or_else(lockkit::url_from_env);
        // The URL's own value wins over the profile's short one.
        let lease = self.profile.short_lease().map(|(key, short)| {
            let given = self.url.store.option(key).and_then(|text| lockkit::config::parse_duration(text).ok());
            (key, given.unwrap_or(short))
        });
        let url = match lease {
            Some((key, value)) => with_option(&raw, key, &duration_text(value)),
            None => raw,
        };
        let target = Target::resolve(Some(url));
        let provider = target.connect(&self.name("holds/…"), false).await?;
        let counters = self.profile.renewal_counters(&provider);
        // The connections open (and a lock's first use warmed) before the memory is read.
        let rss_empty = resident_bytes();
        let warm = self.name("holds/warm");
        let fail = self.fail(&warm, "acquire+release of");
        self.lock(&provider, &warm)?.acquire().await.map_err(&fail)?.release().await.map_err(&fail)?;
        let rss_connected = resident_bytes();
        // A warm-up round of the same concurrency, released: what it leaves resident is the
        // provider's and the allocator's fixed working set, not the holds'.
        let warm_up = self.take_all(&provider, "holds/warm", u32::try_from(IN_FLIGHT).unwrap_or(u32::MAX)).await?;
        self.release_all(warm_up, false).await?;

        let rss_before = resident_bytes();
        let started = Instant::now();
        let guards = self.take_all(&provider, "holds", count).await?;
        let acquire_time = started.elapsed();
        let rss_after = resident_bytes();

        let window = lease.map_or(NO_LEASE_WINDOW, |(_, lease)| lease * 3);
        let rounds_before = counters.as_ref().map(|c| c());
        let scripts_before = match &mut self.floor {
            Some(floor) => floor.script_totals().await,
            None => None,
        };
        // One hold is broken by another provider: its loss must be signalled among all the
        // others (Redis, PostgreSQL and etcd find a deleted record in their renewal round).
        let broken = match guards.first() {
            Some(guard) if self.provider.capabilities().break_lock => {
                let name = guard.name().as_str().to_owned();
                let fail = self.fail(&name, "holds: break of");
                self.provider.break_lock(&name).await.map_err(fail)?;
                Some(Instant::now())
            }
            _ => None,
        };
        let mut noticed = None;
        let mut lost = vec![false; guards.len()];
        let cpu_before = cpu_time();
        let window_start = Instant::now();
        let window_end = window_start + window;
        loop {
            for (guard, lost) in guards.iter().zip(lost.iter_mut()) {
                *lost |= !guard.is_held() || guard.lost().now_or_never().is_some();
            }
            if let (Some(at), None, Some(true)) = (broken, noticed, lost.first()) {
                noticed = Some(at.elapsed());
            }
            let now = Instant::now();
            if now >= window_end {
                break;
            }
            tokio::time::sleep(SCAN.min(window_end - now)).await;
        }
        let cpu = cpu_time().saturating_sub(cpu_before).as_secs_f64() * 1e3 / window_start.elapsed().as_secs_f64();
        if broken.is_some()
            && let Some(first) = lost.first_mut()
        {
            // Counted apart: its loss is the one expected.
            *first = false;
        }
        let scripts_after = match &mut self.floor {
            Some(floor) => floor.script_totals().await,
            None => None,
        };
        let rounds = rounds_before.zip(counters.as_ref().map(|c| c())).map(|(before, after)| {
            let ticks = after.ticks.saturating_sub(before.ticks);
            (ticks, after.round_trips.saturating_sub(before.round_trips), after.longest_round)
        });
        let lost = lost.iter().filter(|lost| **lost).count();

        let started = Instant::now();
        let lost_releasing = self.release_all(guards, broken.is_some()).await?;
        let release_time = started.elapsed();

        let n = f64::from(count);
        let per_hold = |d: Duration| d.as_secs_f64() * 1e6 / n;
        self.report.add(section, "holds", "holds on one provider", n, Unit::Count);
        if let Some((key, value)) = lease {
            self.report.add(
                section,
                "lease",
                format!("lease (URL option {key}), held for three"),
                value.as_secs_f64(),
                Unit::Seconds,
            );
        }
        let label = format!("acquiring them all, {IN_FLIGHT} at a time");
        self.report.add(section, "acquire_all", label, acquire_time.as_secs_f64(), Unit::Seconds);
        let a = per_hold(acquire_time);
        self.report.add(section, "acquire_per_hold", "… per hold", a, Unit::Micros);
        self.report.set_ratio(self.ratio(a));
        let label = format!("releasing them all, {IN_FLIGHT} at a time");
        self.report.add(section, "release_all", label, release_time.as_secs_f64(), Unit::Seconds);
        let r = per_hold(release_time);
        self.report.add(section, "release_per_hold", "… per hold", r, Unit::Micros);
        self.report.set_ratio(self.ratio(r));
        if let Some((ticks, trips, longest)) = rounds {
            self.report.add(section, "renewal_rounds", "renewal rounds in the three leases", ticks as f64, Unit::Count);
            let label = "the longest renewal round (each hold renewed once)";
            self.report.add(section, "longest_round", label, longest.as_secs_f64() * 1e3, Unit::Millis);
            let per_round = trips as f64 / ticks.max(1) as f64;
            self.report.add(section, "round_trips_per_round", "round trips per renewal round", per_round, Unit::Count);
            let most = f64::from(count.div_ceil(HOLDS_PER_ROUND_TRIP));
            self.report.target(format!("≤ {most} (one per {HOLDS_PER_ROUND_TRIP} holds)"), |v, _| v <= most);
            // Only renewals run in the window: the server's script time is theirs.
            if let Some(((_, usec0), (_, usec1))) = scripts_before.zip(scripts_after).filter(|_| ticks > 0) {
                let per_round = usec1.saturating_sub(usec0) as f64 / ticks as f64;
                let label = "server time per renewal round";
                self.report.add(section, "server_time_per_round", label, per_round, Unit::Micros);
            }
        }
        if let Some(note) = self.profile.renewal_note() {
            self.report.notes.push(note.to_owned());
        }
        let label = "client CPU per second held (the bench's scans of every guard included)";
        self.report.add(section, "client_cpu_per_s", label, cpu, Unit::Millis);
        match (rss_empty, rss_connected, rss_before, rss_after) {
            (Some(empty), Some(connected), Some(before), Some(after)) => {
                let per = after.saturating_sub(before) as f64 / n;
                let label = format!("client memory per hold (VmRSS growth from a warm-up round of {IN_FLIGHT})");
                self.report.add(section, "memory_per_hold", label, per, Unit::Bytes);
                if self.floor.is_some() {
                    self.report.target("≤ 1 KiB", |v, _| v <= 1024.0);
                }
                let per = after.saturating_sub(connected) as f64 / n;
                let label = "… counted from after one acquisition (with the fixed costs below)";
                self.report.add(section, "memory_per_hold_from_connected", label, per, Unit::Bytes);
                let grown = |from: u64, to: u64| to.saturating_sub(from) as f64;
                let label = "fixed: the provider's connections and one acquisition";
                self.report.add(section, "memory_connected", label, grown(empty, connected), Unit::Bytes);
                let label = format!("fixed: the warm-up round of {IN_FLIGHT} in flight, released");
                self.report.add(section, "memory_warm_up", label, grown(connected, before), Unit::Bytes);
            }
            _ => self.report.notes.push("no /proc/self/status: memory per hold not measured".to_owned()),
        }
        let label = "holds lost (is_held() false or lost() fired), but the broken one";
        self.report.add(section, "lost", label, lost as f64, Unit::Count);
        self.report.target("0", |v, _| v == 0.0);
        let label = "holds lost while releasing the others (the release said so)";
        self.report.add(section, "lost_releasing", label, lost_releasing as f64, Unit::Count);
        self.report.target("0", |v, _| v == 0.0);
        if broken.is_some() {
            // Not noticed within the window: the whole window, which misses the target.
            let after = noticed.unwrap_or(window).as_secs_f64() * 1e3;
            let label = format!("one hold broken by another client: its loss seen after (scan {SCAN:?})");
            self.report.add(section, "broken_noticed", label, after, Unit::Millis);
            if let Some((_, lease)) = lease {
                let most = lease.as_secs_f64() * 1e3;
                self.report.target(format!("≤ the lease ({lease:?})"), |v, _| v <= most);
            }
        }
        Ok(())
    }

    /// Takes the locks `<prefix>/0` … `<prefix>/<count - 1>` on `provider`, [`IN_FLIGHT`] at a
    /// time.
    async fn take_all(&self, provider: &LockProvider, prefix: &str, count: u32) -> Result<Vec<LockGuard>, Failure> {
        let fail = self.fail(&self.name(&format!("{prefix}/…")), "holds: acquire of");
        let mut handles = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
        for i in 0..count {
            handles.push(self.lock(provider, &self.name(&format!("{prefix}/{i}")))?);
        }
        let mut acquired = futures_util::stream::iter(handles)
            .map(|lock| async move { lock.acquire().await })
            .buffer_unordered(IN_FLIGHT);
        let mut guards = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
        while let Some(guard) = acquired.next().await {
            guards.push(guard.map_err(&fail)?);
        }
        Ok(guards)
    }

    /// Releases every guard, [`IN_FLIGHT`] at a time; returns how many holds were found lost
    /// by their release (still held when the release phase began). The release of a hold
    /// already lost (or of the first, when it was broken) may fail; any other failure ends the
    /// run.
    async fn release_all(&self, guards: Vec<LockGuard>, first_broken: bool) -> Result<usize, Failure> {
        let fail = self.fail(&self.name("holds/…"), "holds: release of");
        let releases = guards.into_iter().enumerate().map(|(i, guard)| {
            // The broken hold's release fails too when its loss went unseen.
            let held = guard.is_held() && !(first_broken && i == 0);
            async move { (held, guard.release().await) }
        });
        let mut released = futures_util::stream::iter(releases).buffer_unordered(IN_FLIGHT);
        let mut lost = 0;
        while let Some((held, done)) = released.next().await {
            match done {
                // A hold lost in the window was counted there; its release may say so.
                Err(_) if !held => {}
                Err(lockkit::Error::LockLost { .. }) => lost += 1,
                Err(error) => return Err(fail(error)),
                Ok(()) => {}
            }
        }
        Ok(lost)
    }
}

/// A duration as a URL option: whole seconds as `3s`, else milliseconds.
fn duration_text(value: Duration) -> String {
    if value.subsec_nanos() == 0 { format!("{}s", value.as_secs()) } else { format!("{}ms", value.as_millis()) }
}
