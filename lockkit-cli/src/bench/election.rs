//! The election phase of `lockkit bench` (issue 16), on backends that declare elections:
//! failover time. A leader resigns while a second candidate waits and an observer follows;
//! the phase measures, from the start of the resignation, how long until the waiting
//! candidate's campaign returns (the new leader may act) and until the observer hears of the
//! new leader (followers may redirect), p50 and p99, against the floor.

use std::time::Instant;

use lockkit::LeaderEvent;

use super::report::{Latency, Unit};
use super::state::Bench;
use crate::exit::{BACKEND, Failure};

/// Failovers measured (after ten of warm-up).
const ROUNDS: usize = 200;

impl Bench {
    /// The failover phase, or a note when the backend has no elections.
    pub(super) async fn election(&mut self) -> Result<(), Failure> {
        if !self.provider.capabilities().election {
            self.report.notes.push("no election phase: the backend does not declare election".to_owned());
            return Ok(());
        }
        let name = self.name("election");
        let fail = self.fail(&name, "the election");
        let mut clients = Vec::with_capacity(3);
        for _ in 0..3 {
            clients.push(self.target.connect(&name, false).await?);
        }
        let elections: Vec<_> =
            clients.iter().map(|client| client.election(&name)).collect::<Result<_, _>>().map_err(&fail)?;
        let mut observer = elections[2].observe().map_err(&fail)?;
        let (mut to_leader, mut to_observer) = (Latency::new(), Latency::new());
        let mut leadership = elections[0].campaign("bench-a").await.map_err(&fail)?;
        // The observer has seen the first leader before the first failover; after that, each
        // round's wait for the new leader leaves it there.
        let first = leadership.token();
        loop {
            match observer.next().await {
                Some(Ok(LeaderEvent::Elected(leader))) if leader.term >= first => break,
                Some(Ok(_)) => {}
                Some(Err(error)) => return Err(fail(error)),
                None => return Err(Failure::new(BACKEND, "the election's observer ended")),
            }
        }
        for round in 0..ROUNDS + 10 {
            // The next candidate campaigns (and waits) on the other client.
            let next = elections[(round + 1) % 2].clone();
            let identity = if round % 2 == 0 { "bench-b" } else { "bench-a" };
            let campaign =
                tokio::spawn(async move { next.campaign(identity).await.map(|guard| (Instant::now(), guard)) });
            let current = leadership.token();
            self.await_queued(&clients[2], &name).await?;
            let resigned_at = Instant::now();
            leadership.resign().await.map_err(&fail)?;
            let observed_at = loop {
                match observer.next().await {
                    Some(Ok(LeaderEvent::Elected(leader))) if leader.term > current => break Instant::now(),
                    Some(Ok(_)) => {}
                    Some(Err(error)) => return Err(fail(error)),
                    None => return Err(Failure::new(BACKEND, "the election's observer ended")),
                }
            };
            let (elected_at, guard) =
                campaign.await.map_err(|e| Failure::new(BACKEND, format!("a campaign failed: {e}")))?.map_err(&fail)?;
            if round >= 10 {
                to_leader.record(elected_at.saturating_duration_since(resigned_at));
                to_observer.record(observed_at.saturating_duration_since(resigned_at));
            }
            leadership = guard;
        }
        leadership.resign().await.map_err(&fail)?;
        let section = "election";
        for (key, label, latency, quantile) in [
            ("failover_to_leader_p50", "resign → next leader's campaign returns, p50", &to_leader, 0.5),
            ("failover_to_observer_p50", "resign → an observer hears of it, p50", &to_observer, 0.5),
            ("failover_to_leader_p99", "resign → next leader, p99", &to_leader, 0.99),
            ("failover_to_observer_p99", "resign → observer, p99", &to_observer, 0.99),
        ] {
            let micros = latency.micros(quantile);
            self.report.add(section, key, label, micros, Unit::Micros);
            self.report.set_ratio(self.ratio(micros));
        }
        Ok(())
    }

    /// Waits until a candidate is queued on `name`, when the backend counts waiters (so that
    /// the failover measured is a hand-over, not a campaign racing a resignation).
    async fn await_queued(&self, client: &lockkit::LockProvider, name: &str) -> Result<(), Failure> {
        if !client.capabilities().waiter_count {
            return Ok(());
        }
        let fail = self.fail(name, "inspect");
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while client.inspect(name).await.map_err(&fail)?.waiters.unwrap_or(0) == 0 {
            if Instant::now() >= deadline {
                return Err(Failure::new(BACKEND, format!("no candidate queued on {name:?} within 10 s")));
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        Ok(())
    }
}
