//! A shared store's outages as each of its users sees them. After a call that failed the store
//! is left alone for [`RETRY`]: meanwhile calls do not go (mail goes at once on the user's
//! fallback rather than after a timeout each), and the next call after it tries again. The
//! start and the end of an outage are each told once, for one log line each (the user writes
//! it, in its own words).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{nanos, Clock};

/// How long a store is left alone after a failed call.
pub const RETRY: Duration = Duration::from_secs(1);

/// One user's view of whether its store is out.
pub struct Outage {
    clock: Arc<dyn Clock>,
    /// The clock's instant before which the store is not asked.
    retry_at: AtomicU64,
    down: AtomicBool,
}

impl Outage {
    pub fn new(clock: Arc<dyn Clock>) -> Outage {
        Outage {
            clock,
            retry_at: AtomicU64::new(0),
            down: AtomicBool::new(false),
        }
    }

    /// Whether the store is left alone now (it failed within [`RETRY`]).
    pub fn resting(&self) -> bool {
        self.clock.now() < self.retry_at.load(Ordering::Relaxed)
    }

    /// A call answered; true when that ends an outage (the store was out).
    pub fn answered(&self) -> bool {
        self.down.swap(false, Ordering::Relaxed)
    }

    /// A call failed: the store rests for [`RETRY`]; true when that begins an outage.
    pub fn failed(&self) -> bool {
        let retry = self.clock.now().saturating_add(nanos(RETRY));
        self.retry_at.store(retry, Ordering::Relaxed);
        !self.down.swap(true, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;

    /// A failure rests the store for [`RETRY`] and is told once; an answer after it ends the
    /// outage, told once.
    #[test]
    fn an_outage_is_told_once_each_way_and_rests_the_store() {
        let clock = Arc::new(FakeClock::new(0));
        let outage = Outage::new(clock.clone());
        assert!(!outage.resting());
        assert!(!outage.answered(), "no outage to end");
        assert!(outage.failed(), "an outage begins");
        assert!(outage.resting());
        clock.advance(RETRY - Duration::from_nanos(1));
        assert!(outage.resting());
        clock.advance(Duration::from_nanos(1));
        assert!(!outage.resting());
        assert!(!outage.failed(), "told once");
        assert!(outage.answered(), "the outage ends");
        assert!(!outage.answered(), "told once");
    }
}
