//! [`Election`]: leader election as a lock whose holder publishes who it is, with a stream of
//! the changes of leader for everyone else.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use futures_core::Stream;

use crate::backend::LockBackend;
use crate::provider::Policy;
use crate::{Error, FencingToken, HoldKind, LockGuard, LockHandle, LockName, Result};

/// The longest identity a candidate may publish, in bytes.
pub const MAX_IDENTITY_LEN: usize = 1024;

/// An election: candidates campaign, one leads at a time, and anyone can ask who leads or
/// follow every change.
///
/// Obtained from [`LockProvider::election`](crate::LockProvider::election). Leadership is a
/// hold of kind [`HoldKind::Candidate`]: [`campaign`](Self::campaign) returns a [`LockGuard`]
/// whose [`token`](LockGuard::token) is the *term* (strictly greater for every new term) and
/// whose [`lost`](LockGuard::lost), [`is_held`](LockGuard::is_held) and
/// [`valid_until`](LockGuard::valid_until) say when to stop leading, exactly as for a lock:
/// a leader learns of its loss no later than another candidate could start leading.
/// [`LockGuard::resign`] (or dropping the guard) hands leadership to the next candidate.
///
/// # Behavior
///
/// - At most one candidate leads at a time; every term carries a greater token.
/// - The leader's identity is published while it leads: [`leader`](Self::leader) answers
///   who leads (identity, term, since) for any process.
/// - [`observe`](Self::observe) delivers every change of leader in term order, a vacancy
///   included, driven by the store's notifications; where the store cannot replay a change
///   that passed while the observer was cut off, a [`LeaderEvent::Gap`] comes before the
///   current state, never a silent skip.
/// - A campaign dropped at any point leaves no trace; a campaign whose reply was lost finds
///   its own candidacy again (the backends' lost-reply handling of every acquisition).
///
/// ```
/// use lockkit_core::memory::MemoryLockProvider;
/// use lockkit_core::LeaderEvent;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lockkit_core::Result<()> {
/// let provider = MemoryLockProvider::new();
/// let election = provider.election("services/scheduler")?;
/// let mut changes = election.observe()?;
/// assert!(matches!(changes.next().await, Some(Ok(LeaderEvent::Vacant))));
///
/// let leadership = election.campaign("10.0.0.7:8080").await?;
/// let leader = election.leader().await?.expect("someone leads");
/// assert_eq!(leader.identity_str(), Some("10.0.0.7:8080"));
/// assert_eq!(leader.term, leadership.token());
/// match changes.next().await {
///     Some(Ok(LeaderEvent::Elected(now))) => assert_eq!(now.term, leadership.token()),
///     other => panic!("expected the new leader, got {other:?}"),
/// }
/// leadership.resign().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Election {
    backend: Arc<dyn LockBackend>,
    name: LockName,
    policy: Arc<Policy>,
}

impl Election {
    pub(crate) fn new(backend: Arc<dyn LockBackend>, name: LockName, policy: Arc<Policy>) -> Self {
        Self { backend, name, policy }
    }

    /// The election's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The handle of a candidate that publishes `identity` while it leads: for code that
    /// takes any [`LockHandle`] (a timed or a non-waiting campaign, say).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for an empty identity or one longer than
    /// [`MAX_IDENTITY_LEN`] bytes.
    pub fn candidate(&self, identity: impl AsRef<[u8]>) -> Result<LockHandle> {
        let identity = identity.as_ref();
        if identity.is_empty() || identity.len() > MAX_IDENTITY_LEN {
            return Err(Error::invalid_config(
                self.backend.name(),
                format!(
                    "a candidate's identity is {} bytes; give 1 to {MAX_IDENTITY_LEN} bytes, such as host:port",
                    identity.len()
                ),
            ));
        }
        let kind = HoldKind::Candidate { identity: Arc::from(identity) };
        Ok(LockHandle::new(Arc::clone(&self.backend), self.name.clone(), kind, Arc::clone(&self.policy)))
    }

    /// Waits until this candidate leads, publishing `identity` (bytes, or a string such as
    /// `host:port`) while it does, and returns the leadership guard; its token is the term.
    ///
    /// # Errors
    ///
    /// As for [`candidate`](Self::candidate) and [`LockHandle::acquire`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a campaign dropped at any point leaves no candidacy behind.
    pub async fn campaign(&self, identity: impl AsRef<[u8]>) -> Result<LockGuard> {
        self.candidate(identity)?.acquire().await
    }

    /// As [`campaign`](Self::campaign), giving up after `timeout`.
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when this candidate did not come to lead in time; otherwise as for
    /// [`campaign`](Self::campaign).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn campaign_timeout(&self, identity: impl AsRef<[u8]>, timeout: Duration) -> Result<LockGuard> {
        self.candidate(identity)?.acquire_timeout(timeout).await
    }

    /// Who leads now, as the store sees it; `None` when nobody does.
    ///
    /// # Errors
    ///
    /// Connection errors; [`Error::Unsupported`] when the backend cannot inspect.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        let info =
            self.backend.inspect(&self.name).await.map_err(|e| e.with_server(self.backend.address().as_deref()))?;
        Ok(info.holders.iter().find_map(|holder| match &holder.kind {
            HoldKind::Candidate { identity } => {
                Some(Leader { identity: Arc::clone(identity), term: holder.token, since: holder.since })
            }
            _ => None,
        }))
    }

    /// Follows the changes of leader: first the current state (the leader, or
    /// [`LeaderEvent::Vacant`]), then every change as the store notifies it, in term order.
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] when the backend cannot observe elections; the stream yields
    /// connection errors as they happen (and resumes with a [`LeaderEvent::Gap`] when the
    /// store could not replay what passed meanwhile).
    pub fn observe(&self) -> Result<Observer> {
        let events = self.backend.observe(&self.name)?;
        Ok(Observer { events, last_term: None, vacant: false, after_gap: false })
    }
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election").field("backend", &self.backend.name()).field("name", &self.name).finish()
    }
}

/// The leader of an election: who, since which term, since when.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// What the leader published about itself.
    pub identity: Arc<[u8]>,
    /// The term: the leader's fencing token, strictly greater for every new term.
    pub term: FencingToken,
    /// When the term began, when the store knows.
    pub since: Option<SystemTime>,
}

impl Leader {
    /// A leader, for backends reporting one.
    pub fn new(identity: Arc<[u8]>, term: FencingToken, since: Option<SystemTime>) -> Self {
        Self { identity, term, since }
    }

    /// The identity as text, when it is UTF-8.
    pub fn identity_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.identity).ok()
    }
}

/// A change of leader, as [`Election::observe`] delivers it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaderEvent {
    /// A candidate leads, for the term it carries.
    Elected(Leader),
    /// Nobody leads.
    Vacant,
    /// Changes passed that the store could not replay (the observer was cut off, or fell
    /// behind); the current state follows.
    Gap,
}

/// The changes of leader of one election, in term order: a [`Stream`], with an inherent
/// [`next`](Self::next) so that no stream trait needs importing.
///
/// The core keeps the order whatever the backend sends: an [`Elected`](LeaderEvent::Elected)
/// whose term is not above the last one seen is dropped, and a vacancy is reported once.
pub struct Observer {
    events: crate::backend::LeaderEvents,
    last_term: Option<FencingToken>,
    vacant: bool,
    /// A gap was just reported: the state that follows it is passed on even when it restates
    /// the last term seen, so that a gap is always followed by the current state.
    after_gap: bool,
}

impl Observer {
    /// The next change; `None` when the backend ended the stream.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: no change is lost when the future is dropped before it completed.
    pub async fn next(&mut self) -> Option<Result<LeaderEvent>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }
}

impl Stream for Observer {
    type Item = Result<LeaderEvent>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            let Some(item) = std::task::ready!(self.events.as_mut().poll_next(cx)) else {
                return Poll::Ready(None);
            };
            match &item {
                Ok(LeaderEvent::Elected(leader)) => {
                    let restated = self.after_gap && self.last_term == Some(leader.term);
                    if !restated && self.last_term.is_some_and(|last| leader.term <= last) {
                        continue;
                    }
                    self.last_term = Some(leader.term);
                    self.vacant = false;
                    self.after_gap = false;
                }
                Ok(LeaderEvent::Vacant) => {
                    if self.vacant && !self.after_gap {
                        continue;
                    }
                    self.vacant = true;
                    self.after_gap = false;
                }
                Ok(LeaderEvent::Gap) => {
                    self.vacant = false;
                    self.after_gap = true;
                }
                Err(_) => {}
            }
            return Poll::Ready(Some(item));
        }
    }
}

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observer").field("last_term", &self.last_term).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn leader(term: u64) -> LeaderEvent {
        LeaderEvent::Elected(Leader::new(Arc::from(&b"x"[..]), FencingToken::new(term), None))
    }

    /// What an observer hands out for what a backend sends.
    async fn observed(sent: Vec<LeaderEvent>) -> Vec<LeaderEvent> {
        let events: crate::backend::LeaderEvents = Box::pin(futures_util::stream::iter(sent.into_iter().map(Ok)));
        let mut observer = Observer { events, last_term: None, vacant: false, after_gap: false };
        let mut out = Vec::new();
        while let Some(event) = observer.next().await {
            out.push(event.unwrap());
        }
        out
    }

    #[tokio::test]
    async fn terms_only_go_forward_and_a_gap_is_followed_by_the_current_state() {
        use LeaderEvent::{Gap, Vacant};
        let sent =
            vec![Vacant, Vacant, leader(3), leader(2), leader(3), Vacant, leader(5), Gap, leader(5), Gap, Vacant];
        let expected = vec![Vacant, leader(3), Vacant, leader(5), Gap, leader(5), Gap, Vacant];
        assert_eq!(observed(sent).await, expected);
    }
}
