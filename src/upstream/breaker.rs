//! An upstream's breaker: after upstream fails (a connection that cannot be made, or
//! `breaker_failures` temporary failures in a row), hold-mode messages for it are held at once
//! instead of each trying it and waiting for the same failure. While it is open, the spool's
//! release tries one held message at most every `breaker_probe_ms` (the probe); the first
//! message upstream takes or refuses for good, whoever sent it, closes it.
//!
//! Per upstream (by its name), not per route: the failure is the upstream's, and every route
//! to it meets it. Kept across reloads, as its pause is. On tokio's clock (the probe's
//! interval), so tests drive it with paused time.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::{Accepted, UpstreamError};

/// What one answer did to the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing the operator or the spool needs to know.
    None,
    /// Upstream failed: it opened.
    Opened,
    /// Upstream answered again: it closed.
    Closed,
}

#[derive(Debug, Clone, Copy)]
enum State {
    /// Upstream answers; the temporary failures in a row so far.
    Closed { failures: u32 },
    /// Upstream failed at `since`; the last probe (or the failure that opened it) at `tried`.
    Open { since: SystemTime, tried: Instant },
}

/// One upstream's breaker.
pub struct Breaker {
    state: Mutex<State>,
}

impl Default for Breaker {
    fn default() -> Breaker {
        Breaker {
            state: Mutex::new(State::Closed { failures: 0 }),
        }
    }
}

/// How an answer counts: upstream failed, it answered, or it says nothing about upstream.
enum Counts {
    Failed { at_once: bool },
    Answered,
    Neither,
}

fn counts(result: &Result<Accepted, UpstreamError>) -> Counts {
    match result {
        Ok(_) => Counts::Answered,
        Err(UpstreamError::Unavailable(_)) => Counts::Failed { at_once: true },
        // About one of upstream's tenants, or about our pace (the adaptive layers and the
        // quota pause answer those): upstream itself is there.
        Err(UpstreamError::TenantPaused(_) | UpstreamError::Pushback { .. }) => Counts::Neither,
        Err(error) if error.for_good() => Counts::Answered,
        Err(_) => Counts::Failed { at_once: false },
    }
}

impl Breaker {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts upstream's answer to one message (`failures`: the upstream's `breaker_failures`).
    pub fn record(&self, result: &Result<Accepted, UpstreamError>, failures: u32) -> Change {
        let mut state = self.state();
        match (*state, counts(result)) {
            (State::Open { .. }, Counts::Answered) => {
                *state = State::Closed { failures: 0 };
                Change::Closed
            }
            (State::Open { since, .. }, Counts::Failed { .. }) => {
                *state = State::Open {
                    since,
                    tried: Instant::now(),
                };
                Change::None
            }
            (State::Closed { .. }, Counts::Answered) => {
                *state = State::Closed { failures: 0 };
                Change::None
            }
            (State::Closed { failures: before }, Counts::Failed { at_once }) => {
                let now = before + 1;
                if at_once || now >= failures {
                    *state = State::Open {
                        since: SystemTime::now(),
                        tried: Instant::now(),
                    };
                    return Change::Opened;
                }
                *state = State::Closed { failures: now };
                Change::None
            }
            (_, Counts::Neither) => Change::None,
        }
    }

    /// Whether upstream is failing now.
    pub fn is_open(&self) -> bool {
        matches!(*self.state(), State::Open { .. })
    }

    /// Since when upstream is failing, while it is.
    pub fn failing_since(&self) -> Option<SystemTime> {
        match *self.state() {
            State::Open { since, .. } => Some(since),
            State::Closed { .. } => None,
        }
    }

    /// Whether a message may try upstream now: always while closed; while open, one probe
    /// per `interval` (this call claims it).
    pub fn may_try(&self, interval: Duration) -> bool {
        let mut state = self.state();
        match *state {
            State::Closed { .. } => true,
            State::Open { since, tried } if tried.elapsed() >= interval => {
                *state = State::Open {
                    since,
                    tried: Instant::now(),
                };
                true
            }
            State::Open { .. } => false,
        }
    }

    /// When the next probe may go, while open.
    pub fn next_probe(&self, interval: Duration) -> Option<Duration> {
        match *self.state() {
            State::Open { tried, .. } => Some(interval.saturating_sub(tried.elapsed())),
            State::Closed { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: u16) -> Result<Accepted, UpstreamError> {
        Err(crate::upstream::reply::from_reply(code, "no"))
    }

    #[tokio::test(start_paused = true)]
    async fn opens_after_failures_in_a_row_or_one_lost_connection_and_closes_on_an_answer() {
        let b = Breaker::default();
        assert_eq!(b.record(&refused(451), 3), Change::None);
        assert_eq!(b.record(&refused(451), 3), Change::None);
        assert_eq!(b.record(&Ok(Accepted::new("ok")), 3), Change::None);
        assert_eq!(b.record(&refused(451), 3), Change::None);
        assert_eq!(b.record(&refused(550), 3), Change::None, "5xx: it answered");
        assert_eq!(b.record(&refused(451), 3), Change::None);
        assert_eq!(b.record(&refused(451), 3), Change::None);
        assert!(!b.is_open());
        assert_eq!(b.record(&refused(451), 3), Change::Opened);
        assert!(b.is_open() && b.failing_since().is_some());
        assert_eq!(b.record(&refused(550), 3), Change::Closed);
        let down = Err(UpstreamError::Unavailable("refused".into()));
        assert_eq!(b.record(&down, 3), Change::Opened, "no connection: at once");
        assert_eq!(b.record(&down, 3), Change::None);
        assert_eq!(b.record(&Ok(Accepted::new("ok")), 3), Change::Closed);
        assert!(!b.is_open() && b.failing_since().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn while_open_one_probe_per_interval() {
        let b = Breaker::default();
        let second = Duration::from_secs(1);
        assert!(b.may_try(second) && b.may_try(second), "closed: everyone");
        b.record(&Err(UpstreamError::Unavailable("down".into())), 5);
        assert!(
            !b.may_try(second),
            "the failure that opened it was the probe"
        );
        tokio::time::advance(second).await;
        assert!(b.may_try(second));
        assert!(!b.may_try(second), "one probe per interval");
        assert_eq!(b.next_probe(second), Some(second));
    }
}
