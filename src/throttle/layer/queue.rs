//! The FIFO wait of a local layer: take at once, or queue and wait for the exact instant.
//!
//! - **Timers, not polling.** The head computes the exact instant its tokens will be there and
//!   sleeps until then (`sleep_until`); the others park on their own `Notify`. When the head is
//!   granted it wakes the next one, which may be grantable at once. A give-back wakes the head
//!   too, since its tokens may now come sooner. tokio's timer wheel rounds a deadline up to the
//!   next millisecond, so a head may run up to 1 ms late: it takes at the instant it runs,
//!   never early, so the limit holds; the price is at most 1 ms of refill per grant, and only
//!   when the bucket is exactly full then (a cost equal to the burst).
//! - **Cancel-safe.** Tokens are taken only in the poll that returns the grant, so a dropped
//!   future took nothing; its drop guard removes it from the queue and wakes the new head, whose
//!   timer is recomputed when it polls.
//! - **Estimates.** A newcomer's wait is the time until the queue ahead and itself would be
//!   served: [`Bucket::reserve`] folded over the queue. The fold's end (the projected tail) is
//!   cached and extended in O(1) per arrival; a cancellation, a give-back or a grant that
//!   differs from its projection (a timer waking late) clears it, and the next arrival refolds.
//!
//! [`Bucket::reserve`]: crate::throttle::bucket::Bucket::reserve

use std::sync::Arc;

use tokio::sync::Notify;

use super::waiters::project_place;
use super::{ceil_ms, CancelOnDrop, Layer, Turn};
use crate::clock::Nanos;
use crate::throttle::bucket::Take;
use crate::throttle::error::{LimitReason, ThrottleError};
use crate::throttle::key_table::TableFull;

enum Step {
    /// Granted at this instant.
    Granted(Nanos),
    Shutdown,
    /// Head of the queue: the tokens are there at this instant.
    Sleep(Nanos),
    /// Behind someone: wait for a notification.
    Park,
}

struct Queued {
    slot: u32,
    id: u64,
    notify: Arc<Notify>,
}

impl Layer {
    /// Takes `cost` from `key`'s bucket: at once, or after waiting in FIFO order (not past
    /// `deadline`). Cancel-safe: dropping the future takes nothing and leaves the queue.
    /// `now` is the caller's reading of the clock (one read per message on the fast path; an
    /// early reading only makes the bucket stricter). Returns the instant of a grant that
    /// waited, `None` for one at once.
    pub(crate) async fn acquire(
        &self,
        (key, fair): (&str, &str),
        cost: u64,
        deadline: Nanos,
        now: Nanos,
        turn: Turn,
    ) -> Result<Option<Nanos>, ThrottleError> {
        let Some(q) = self.enter((key, fair), cost, deadline, now, turn)? else {
            return Ok(None);
        };
        let mut guard = CancelOnDrop {
            layer: self,
            slot: q.slot,
            id: q.id,
            armed: true,
        };
        loop {
            match self.poll(q.slot, q.id, key) {
                Step::Granted(at) => {
                    guard.armed = false;
                    return Ok(Some(at));
                }
                Step::Shutdown => {
                    guard.armed = false;
                    return Err(ThrottleError::Shutdown);
                }
                Step::Sleep(due) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(self.clock.deadline(due)) => {}
                        _ = q.notify.notified() => {}
                    }
                }
                Step::Park => q.notify.notified().await,
            }
        }
    }

    /// Arrival: granted now (`None`), queued, or refused.
    fn enter(
        &self,
        (key, fair): (&str, &str),
        cost: u64,
        deadline: Nanos,
        now: Nanos,
        turn: Turn,
    ) -> Result<Option<Queued>, ThrottleError> {
        self.check_cost(cost)?;
        let mut guard = self.lock();
        let st = &mut *guard;
        let slot = (st.table.find_or_insert(key, now))
            .map_err(|TableFull| self.limited(key, cost, self.hint(), LimitReason::MaxKeys))?;
        self.refresh(st, slot, now);
        let b = *st.table.bucket_of(slot);
        let queued = match turn.again {
            true => st.table.extra(slot).ahead_of(turn.order),
            false => st.table.extra(slot).len(),
        };
        if queued == 0 {
            let taken = st.table.modify(slot, now, |s, _| {
                let (taken, next) = b.take(*s, now, cost);
                *s = next;
                taken
            });
            if taken == Take::Granted {
                self.count_granted(st, slot, now, cost);
                return Ok(None);
            }
        }
        // Shutting down: a message that can go at once still goes (it is a transaction in
        // flight, like one with no layer at all); after the grace none starts to wait, and
        // during it only one whose tokens come before the grace ends.
        if st.disposed {
            return Err(ThrottleError::Shutdown);
        }
        let placed = self.spec.fair_of(fair, cost);
        let ((tail, from), place) = match turn.again {
            true => {
                let q = st.table.extra(slot);
                (q.fold_first(&b, queued, (st.table.state(slot), now)), None)
            }
            false => project_place(&b, &mut st.table, slot, now, placed),
        };
        let (at, next) = b.reserve(tail, from, cost).expect("cost checked");
        if st.past_drain(at) {
            return Err(ThrottleError::Shutdown);
        }
        self.admit(key, cost, at - now, queued, now, deadline)?;
        let (id, notify) = st.enqueue((slot, fair, place), cost, now, (next, at), turn);
        tracing::debug!(
            target: "ratelimit",
            layer = %self.spec.name,
            key,
            cost,
            position = place.map_or(queued, |p| p.1),
            estimate_ms = ceil_ms(at - now),
            "ratelimit.waiting"
        );
        Ok(Some(Queued { slot, id, notify }))
    }

    /// A waiter's turn: granted (and popped, the next head woken), or when to look again.
    fn poll(&self, slot: u32, id: u64, key: &str) -> Step {
        let mut guard = self.lock();
        let st = &mut *guard;
        if st.disposed {
            return Step::Shutdown;
        }
        let q = st.table.extra(slot);
        let head = match q.head() {
            Some(head) if head.id == id => head,
            // Not queued any more: a drain told it its tokens would come too late.
            _ if !q.contains(id) => return Step::Shutdown,
            _ => return Step::Park,
        };
        let (cost, arrived) = (head.cost, head.arrived);
        let now = self.clock.now();
        self.refresh(st, slot, now);
        let next = match st
            .table
            .bucket_of(slot)
            .take(st.table.state(slot), now, cost)
        {
            (Take::NotYet { wait }, _) => return Step::Sleep(now.saturating_add(wait)),
            (_, next) => next,
        };
        st.table.modify(slot, now, |s, q| {
            *s = next;
            if q.pop_head().is_some_and(|w| w.proj != next) {
                q.invalidate();
            }
            q.wake_head();
        });
        st.waiting -= 1;
        self.count_granted(st, slot, now, cost);
        let waited_ms = ceil_ms(now - arrived);
        let layer = &self.spec.name;
        tracing::debug!(target: "ratelimit", layer = %layer, key, cost, waited_ms, "ratelimit.waited");
        Step::Granted(now)
    }
}
