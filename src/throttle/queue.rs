//! The keyed FIFO queues of one layer: a bucket per key, its waiters in arrival order.
//!
//! Why this design: one `std::sync::Mutex` per layer holds the bucket table and every queue, so
//! "is it my turn, and are the tokens there?" is one short critical section, never held across
//! an `await`. Only the head of a queue takes: a later, cheaper message never overtakes.
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
//! - **max_keys.** The table drops a full bucket, else the least recently used one without
//!   waiters (see `store::table`). When every bucket has waiters, a new key is refused with
//!   `retry_after = max_wait` (at least 1 ms): by then every present waiter has been served or
//!   refused, so a bucket can be dropped.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use super::bucket::{Bucket, State, Take};
use super::clock::{Clock, Nanos};
use super::layers::{LayerSpec, Peek, ThrottleError};
use super::store::local::peek_of;
use super::store::table::{KeyTable, TableFull};
pub use crate::config::Mode;
use waiters::{project, Queue, Waiter};

mod gate;
mod waiters;

struct LayerState {
    table: KeyTable<Queue>,
    disposed: bool,
    waiting: usize,
    next_id: u64,
}

impl LayerState {
    /// Puts a waiter at the back of `slot`'s queue; `proj` and `at` are the bucket state and
    /// instant projected for its grant.
    pub(super) fn enqueue(
        &mut self,
        slot: u32,
        cost: u64,
        now: Nanos,
        proj: State,
        at: Nanos,
    ) -> (u64, Arc<Notify>) {
        let (id, notify) = (self.next_id, Arc::new(Notify::new()));
        self.next_id += 1;
        let w = Waiter {
            id,
            cost,
            arrived: now,
            notify: notify.clone(),
            proj,
        };
        self.table.modify(slot, now, |_, q| q.push(w, (proj, at)));
        self.waiting += 1;
        (id, notify)
    }
}

/// One layer: its spec, its bucket parameters, and its keyed queues.
pub(crate) struct Layer {
    spec: LayerSpec,
    bucket: Bucket,
    clock: Arc<dyn Clock>,
    state: Mutex<LayerState>,
    /// The buckets are in a shared store: this layer only queues (see `gate`).
    shared: bool,
}

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

/// Removes a waiter whose future was dropped (the client went away).
struct CancelOnDrop<'a> {
    layer: &'a Layer,
    slot: u32,
    id: u64,
    armed: bool,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.layer.cancel(self.slot, self.id);
        }
    }
}

fn ceil_ms(n: Nanos) -> u64 {
    n.div_ceil(1_000_000)
}

impl Layer {
    pub(crate) fn new(spec: LayerSpec, clock: Arc<dyn Clock>, shared: bool) -> Layer {
        let bucket = spec.bucket();
        let table = KeyTable::new(&spec.name, bucket, spec.max_keys);
        let state = LayerState {
            table,
            disposed: false,
            waiting: 0,
            next_id: 0,
        };
        Layer {
            spec,
            bucket,
            clock,
            state: Mutex::new(state),
            shared,
        }
    }

    fn lock(&self) -> MutexGuard<'_, LayerState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn spec(&self) -> &LayerSpec {
        &self.spec
    }

    pub(crate) fn is_shared(&self) -> bool {
        self.shared
    }

    /// A cost this layer can never grant is a permanent refusal.
    pub(crate) fn check_cost(&self, cost: u64) -> Result<(), ThrottleError> {
        let burst = self.bucket.capacity();
        if cost <= burst {
            return Ok(());
        }
        Err(ThrottleError::CostOverBurst {
            layer: self.spec.name.clone(),
            cost,
            burst,
        })
    }

    pub(crate) fn limited(
        &self,
        key: &str,
        cost: u64,
        retry_after: Nanos,
        reason: &str,
    ) -> ThrottleError {
        tracing::info!(
            target: "ratelimit",
            layer = %self.spec.name,
            key,
            cost,
            retry_after_ms = ceil_ms(retry_after),
            reason,
            "ratelimit.limited"
        );
        ThrottleError::Limited {
            layer: self.spec.name.clone(),
            key: key.to_string(),
            retry_after: Duration::from_nanos(retry_after),
        }
    }

    /// Whether a message that would wait `wait` behind `queued` others may queue.
    fn admit(
        &self,
        key: &str,
        cost: u64,
        wait: Nanos,
        queued: usize,
        now: Nanos,
        deadline: Nanos,
    ) -> Result<(), ThrottleError> {
        let reason = match self.spec.mode {
            Mode::Reject => "reject",
            Mode::Wait if queued >= self.spec.max_queue => "max_queue",
            Mode::Wait if now.saturating_add(wait) > deadline => "max_wait",
            Mode::Wait => return Ok(()),
        };
        Err(self.limited(key, cost, wait, reason))
    }

    /// The checks of [`Layer::acquire`] without taking or queueing: refuses now what would be
    /// refused at arrival, so a multi-layer message takes nothing when any layer would refuse.
    pub(crate) fn precheck(
        &self,
        key: &str,
        cost: u64,
        deadline: Nanos,
        now: Nanos,
    ) -> Result<(), ThrottleError> {
        self.check_cost(cost)?;
        let mut guard = self.lock();
        let st = &mut *guard;
        if st.disposed && self.shared {
            return Err(ThrottleError::Shutdown);
        }
        let Some(slot) = st.table.find(key) else {
            return Ok(()); // a fresh bucket is full
        };
        if self.shared {
            return self.gate_admits(st, slot, key, cost);
        }
        let (tail, from) = project(&self.bucket, &mut st.table, slot, now);
        let (at, _) = self.bucket.reserve(tail, from, cost).expect("cost checked");
        let queued = st.table.extra(slot).len();
        if at == now && queued == 0 {
            return Ok(());
        }
        if st.disposed {
            return Err(ThrottleError::Shutdown);
        }
        self.admit(key, cost, at - now, queued, now, deadline)
    }

    /// Takes `cost` from `key`'s bucket: at once, or after waiting in FIFO order (not past
    /// `deadline`). Cancel-safe: dropping the future takes nothing and leaves the queue.
    /// `now` is the caller's reading of the clock (one read per message on the fast path; an
    /// early reading only makes the bucket stricter). Returns the instant of a grant that
    /// waited, `None` for one at once.
    pub(crate) async fn acquire(
        &self,
        key: &str,
        cost: u64,
        deadline: Nanos,
        now: Nanos,
    ) -> Result<Option<Nanos>, ThrottleError> {
        let Some(q) = self.enter(key, cost, deadline, now)? else {
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
        key: &str,
        cost: u64,
        deadline: Nanos,
        now: Nanos,
    ) -> Result<Option<Queued>, ThrottleError> {
        self.check_cost(cost)?;
        let mut guard = self.lock();
        let st = &mut *guard;
        let hint = self.spec.max_wait.max(Duration::from_millis(1));
        let slot = (st.table.find_or_insert(key, now))
            .map_err(|TableFull| self.limited(key, cost, super::clock::nanos(hint), "max_keys"))?;
        let b = self.bucket;
        if st.table.extra(slot).len() == 0 {
            let taken = st.table.modify(slot, now, |s, _| {
                let (taken, next) = b.take(*s, now, cost);
                *s = next;
                taken
            });
            if taken == Take::Granted {
                return Ok(None);
            }
        }
        // Shutting down: a message that can go at once still goes (it is a transaction in
        // flight, like one with no layer at all); none starts to wait.
        if st.disposed {
            return Err(ThrottleError::Shutdown);
        }
        let (tail, from) = project(&b, &mut st.table, slot, now);
        let (at, next) = b.reserve(tail, from, cost).expect("cost checked");
        let queued = st.table.extra(slot).len();
        self.admit(key, cost, at - now, queued, now, deadline)?;
        let (id, notify) = st.enqueue(slot, cost, now, next, at);
        tracing::debug!(
            target: "ratelimit",
            layer = %self.spec.name,
            key,
            cost,
            position = queued,
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
        let Some(head) = st.table.extra(slot).head() else {
            debug_assert!(false, "a live waiter is always queued");
            return Step::Shutdown;
        };
        if head.id != id {
            return Step::Park;
        }
        let (cost, arrived) = (head.cost, head.arrived);
        let now = self.clock.now();
        let next = match self.bucket.take(st.table.state(slot), now, cost) {
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
        let waited_ms = ceil_ms(now - arrived);
        let layer = &self.spec.name;
        tracing::debug!(target: "ratelimit", layer = %layer, key, cost, waited_ms, "ratelimit.waited");
        Step::Granted(now)
    }

    fn cancel(&self, slot: u32, id: u64) {
        let mut guard = self.lock();
        let st = &mut *guard;
        if st.disposed {
            return;
        }
        let now = self.clock.now();
        let removed = st.table.modify(slot, now, |_, q| {
            let pos = q.remove(id);
            if pos == Some(0) {
                q.wake_head();
            }
            pos.is_some()
        });
        if removed {
            st.waiting -= 1;
        }
    }

    /// Returns tokens (rollback, upstream failure), capped at the capacity; wakes the head.
    pub(crate) fn give_back(&self, key: &str, cost: u64) {
        let mut guard = self.lock();
        let st = &mut *guard;
        let Some(slot) = st.table.find(key) else {
            return; // dropped meanwhile: it reads as full
        };
        let now = self.clock.now();
        let b = self.bucket;
        st.table.modify(slot, now, |s, q| {
            *s = b.give_back(*s, now, cost);
            q.invalidate();
            q.wake_head();
        });
    }

    pub(crate) fn peek(&self, key: &str) -> Peek {
        let st = self.lock();
        let now = self.clock.now();
        let (state, waiting) = match st.table.find(key) {
            Some(id) => (st.table.state(id), st.table.extra(id).len()),
            None => (State::default(), 0),
        };
        Peek {
            waiting,
            ..peek_of(&self.bucket, state, now, &*self.clock)
        }
    }

    pub(crate) fn waiting(&self) -> usize {
        self.lock().waiting
    }

    pub(crate) fn keys(&self) -> usize {
        self.lock().table.len()
    }

    pub(crate) fn evicted(&self) -> u64 {
        self.lock().table.evicted()
    }

    pub(crate) fn holds(&self, key: &str) -> bool {
        self.lock().table.find(key).is_some()
    }

    /// Releases every waiter with [`ThrottleError::Shutdown`]; later arrivals get it too,
    /// unless the bucket grants them at once (a local layer).
    pub(crate) fn dispose(&self) {
        let mut guard = self.lock();
        let st = &mut *guard;
        st.disposed = true;
        let now = self.clock.now();
        for id in st.table.ids() {
            if st.table.extra(id).len() > 0 {
                st.table.modify(id, now, |_, q| {
                    while let Some(w) = q.pop_head() {
                        w.notify.notify_one();
                    }
                });
            }
        }
        st.waiting = 0;
    }
}
