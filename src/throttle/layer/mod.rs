//! One layer of the throttle: a bucket per key and, in front of each, its waiters in arrival
//! order. The local layers take here; a shared layer (`store = "redis"`) only queues here and
//! takes from its store (see `shared_layers`).
//!
//! Why this design: one `std::sync::Mutex` per layer holds the bucket table and every queue, so
//! "is it my turn, and are the tokens there?" is one short critical section, never held across
//! an `await`. Only the head of a queue takes: a later, cheaper message never overtakes. With
//! `fair_by` the queue is kept in fair order (see `waiters`): FIFO within a fair key, in
//! turn across them; the head is still the only one that takes.
//!
//! **max_keys.** The table drops a full bucket, else the least recently used one without
//! waiters (see `key_table`). When every bucket has waiters, a new key is refused with
//! `retry_after = max_wait` (at least 1 ms): by then every present waiter has been served or
//! refused, so a bucket can be dropped.
//!
//! Files (each depends only on this one and the modules below the layer):
//! - `waiters`: the waiters of one bucket and the projection that estimates a newcomer's wait.
//! - `queue`: [`Layer::acquire`], the FIFO wait of a local layer (timers, cancellation).
//! - `gate`: [`Layer::gate`], the FIFO turn of a shared layer in front of its store.
//! - `shutdown`: the drain (waiters served within the grace stay) and the disposal.
//! - here: the layer itself, its refusal rules, give-backs, peeks and metrics.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use super::blame::Blame;
use super::bucket::{Bucket, State};
use super::error::{LimitReason, ThrottleError};
use super::key_table::KeyTable;
use super::peek::{peek_of, Peek};
use super::spec::LayerSpec;
use crate::clock::{nanos, Clock, Nanos};
use crate::config::Mode;
use waiters::{project_place, Queue, Waiter};

mod adapt;
pub(super) mod gate;
mod queue;
mod shutdown;
mod waiters;

struct LayerState {
    table: KeyTable<Queue>,
    disposed: bool,
    /// Draining (shutdown under way): the instant the grace ends. A message that cannot be
    /// granted by then is refused with `Shutdown`; the others keep their place.
    drain_end: Option<Nanos>,
    waiting: usize,
    next_id: u64,
    /// Whose messages were granted and throttled lately (an adaptive layer's; see `blame`).
    blame: Blame,
    /// A fixed layer's limit: the configured one, or the one set at run time (`set_limit`).
    fixed_limit: u64,
}

impl LayerState {
    /// Whether a grant at `at` comes after the drain's end.
    fn past_drain(&self, at: Nanos) -> bool {
        self.drain_end.is_some_and(|end| at > end)
    }

    /// Puts a waiter at the back of `slot`'s queue (`proj` and `at` are the bucket state and
    /// instant projected for its grant), at its fair place (`place`: tag and position), or,
    /// for a message sent again (`turn.again`), ahead of every waiter that arrived after it.
    fn enqueue(
        &mut self,
        (slot, fair, place): (u32, &str, Option<(u64, usize)>),
        cost: u64,
        now: Nanos,
        (proj, at): (State, Nanos),
        turn: Turn,
    ) -> (u64, Arc<Notify>) {
        let (id, notify) = (self.next_id, Arc::new(Notify::new()));
        self.next_id += 1;
        let w = Waiter {
            id,
            cost,
            arrived: now,
            notify: notify.clone(),
            proj,
            order: turn.order,
            fair: fair.into(),
            tag: place.map_or(0, |p| p.0),
        };
        self.table
            .modify(slot, now, |_, q| match (turn.again, place) {
                (true, _) => q.insert_in_order(w),
                (false, None) => q.push(w, (proj, at)),
                (false, Some((_, pos))) => q.insert_fair(w, pos, (proj, at)),
            });
        self.waiting += 1;
        (id, notify)
    }
}

/// A key with waiters, for the status page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyWaiting {
    pub key: String,
    /// Messages waiting for its bucket.
    pub waiting: usize,
    /// How long the one that has waited longest has waited so far.
    pub oldest_waited: Duration,
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

/// Where a message stands in the queues: `order` is its place in arrival order (given once,
/// at its final dot); `again` when it is sent again after an upstream throttle reply, and so
/// goes ahead of every waiter that arrived after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Turn {
    pub(crate) order: u64,
    pub(crate) again: bool,
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

/// Milliseconds, rounded up, for logs.
fn ceil_ms(n: Nanos) -> u64 {
    n.div_ceil(1_000_000)
}

impl Layer {
    pub(crate) fn new(spec: LayerSpec, clock: Arc<dyn Clock>, shared: bool) -> Layer {
        let bucket = spec.bucket();
        let table = KeyTable::new(&spec.name, bucket, spec.max_keys, nanos(spec.idle_ttl));
        let state = LayerState {
            table,
            disposed: false,
            drain_end: None,
            waiting: 0,
            next_id: 0,
            blame: Blame::default(),
            fixed_limit: spec.limit,
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

    /// The refusal of a message, logged (`ratelimit.limited`).
    pub(crate) fn limited(
        &self,
        key: &str,
        cost: u64,
        retry_after: Nanos,
        reason: LimitReason,
    ) -> ThrottleError {
        tracing::info!(
            target: "ratelimit",
            layer = %self.spec.name,
            key,
            cost,
            retry_after_ms = ceil_ms(retry_after),
            reason = reason.as_str(),
            "ratelimit.limited"
        );
        ThrottleError::Limited {
            layer: self.spec.name.clone(),
            key: key.to_string(),
            retry_after: Duration::from_nanos(retry_after),
            reason,
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
            Mode::Reject => LimitReason::Reject,
            Mode::Wait | Mode::Hold if queued >= self.spec.max_queue => LimitReason::MaxQueue,
            Mode::Wait | Mode::Hold if now.saturating_add(wait) > deadline => LimitReason::MaxWait,
            Mode::Wait | Mode::Hold => return Ok(()),
        };
        Err(self.limited(key, cost, wait, reason))
    }

    /// A shared layer's `max_queue`: the messages already queued for this key (the one asking
    /// the store included) must be fewer. The hint is `max_wait`: by then the queue has moved.
    fn gate_admits(
        &self,
        st: &LayerState,
        slot: u32,
        key: &str,
        cost: u64,
    ) -> Result<(), ThrottleError> {
        let queued = st.table.extra(slot).len();
        if queued > 0 && queued >= self.spec.max_queue {
            return Err(self.limited(key, cost, self.hint(), LimitReason::MaxQueue));
        }
        Ok(())
    }

    /// The retry hint of a refusal whose wait nobody can estimate (a full queue or table).
    fn hint(&self) -> Nanos {
        nanos(self.spec.max_wait.max(Duration::from_millis(1)))
    }

    /// The checks of [`Layer::acquire`] without taking or queueing: refuses now what would be
    /// refused at arrival, so a multi-layer message takes nothing when any layer would refuse.
    pub(crate) fn precheck(
        &self,
        (key, fair): (&str, &str),
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
        self.refresh(st, slot, now);
        let b = *st.table.bucket_of(slot);
        let placed = self.spec.fair_of(fair, cost);
        let ((tail, from), _) = project_place(&b, &mut st.table, slot, now, placed);
        let (at, _) = b.reserve(tail, from, cost).expect("cost checked");
        let queued = st.table.extra(slot).len();
        if at == now && queued == 0 {
            return Ok(());
        }
        if st.disposed || st.past_drain(at) {
            return Err(ThrottleError::Shutdown);
        }
        self.admit(key, cost, at - now, queued, now, deadline)
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
        self.refresh(st, slot, now);
        let b = *st.table.bucket_of(slot);
        st.table.modify(slot, now, |s, q| {
            *s = b.give_back(*s, now, cost);
            q.invalidate();
            q.wake_head();
        });
    }

    pub(crate) fn peek(&self, key: &str) -> Peek {
        let mut guard = self.lock();
        let st = &mut *guard;
        let now = self.clock.now();
        let slot = st.table.find(key);
        if let Some(id) = slot {
            self.refresh(st, id, now);
        }
        let (state, waiting, bucket) = match slot {
            Some(id) => (
                st.table.state(id),
                st.table.extra(id).len(),
                st.table.bucket_of(id),
            ),
            None => (State::default(), 0, st.table.bucket()),
        };
        let limit = slot.map_or(st.fixed_limit, |id| self.limit_of(st, id, now));
        Peek {
            waiting,
            effective_limit: self.spec.adaptive.map(|_| limit),
            ..peek_of(bucket, state, now, &*self.clock)
        }
    }

    /// The `n` keys with the most waiters, most first (ties by key).
    pub(crate) fn most_waiting(&self, n: usize) -> Vec<KeyWaiting> {
        let now = self.clock.now();
        let st = self.lock();
        let mut keys: Vec<KeyWaiting> = (st.table.pinned())
            .map(|(key, queue)| KeyWaiting {
                key: key.to_string(),
                waiting: queue.len(),
                oldest_waited: Duration::from_nanos(
                    queue.oldest().map_or(0, |at| now.saturating_sub(at)),
                ),
            })
            .collect();
        keys.sort_by(|a, b| b.waiting.cmp(&a.waiting).then_with(|| a.key.cmp(&b.key)));
        keys.truncate(n);
        keys
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
}
