//! A shared layer at shutdown: what the sleepers (on a reservation or a `Later`) watch,
//! the drain during the grace and the disposal at its end (see the parent's doc).

use super::Shared;
use crate::clock::Nanos;
use crate::throttle::error::ThrottleError;

/// How far shutdown has gone, as the sleepers see it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Ending {
    /// The grace's end, once draining.
    pub(super) drain_end: Option<Nanos>,
    pub(super) disposed: bool,
}

impl Ending {
    /// Whether a message whose tokens come at `at` must be told to go now.
    fn cuts(&self, at: Nanos) -> bool {
        self.disposed || self.drain_end.is_some_and(|end| at > end)
    }
}

impl Shared {
    /// Sleeps until `at`; `Err(Shutdown)` at once if the throttle is disposed of, or drains
    /// with its grace ending before `at`.
    pub(super) async fn sleep_until(&self, at: Nanos) -> Result<(), ThrottleError> {
        let mut ending = self.ending.subscribe();
        let cut = ending.wait_for(|e| e.cuts(at));
        tokio::select! {
            Ok(_) = cut => Err(ThrottleError::Shutdown),
            _ = tokio::time::sleep_until(self.clock.deadline(at)) => Ok(()),
        }
    }

    /// Starts draining: sleepers whose instant is past `end` are woken with `Shutdown`.
    pub(crate) fn drain(&self, end: Nanos) {
        self.ending.send_modify(|e| {
            e.drain_end = Some(e.drain_end.map_or(end, |old| old.min(end)));
        });
    }

    /// Wakes every message asleep on a reservation or a `Later` with `Shutdown`; later ones
    /// get it as soon as they would sleep.
    pub(crate) fn dispose(&self) {
        self.ending.send_modify(|e| e.disposed = true);
    }
}
