//! The waiters of one bucket, and the projection that estimates a newcomer's wait.
//!
//! Why apart from `queue.rs` and `gate.rs`: this is the data (who waits, in which order, and
//! when each would be served); they are the waiting itself (locks, timers, cancellation).
//!
//! **Fair share** (`fair_by`): the list stays the serving order, but a newcomer is placed by
//! a virtual finish tag (self-clocked fair queueing, the cost-weighted form of round robin):
//! `max(tag of the last waiter served, last tag of its fair key) + cost / weight`, after every
//! waiter with a tag not above it. So one tenant's backlog does not delay another's newcomer
//! by more than about one turn per active tenant, a 10-token message counts as ten 1-token
//! ones, and tags only grow within a fair key, so its own order stays FIFO. Without
//! `fair_by` every waiter goes to the back, as before.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use tokio::sync::Notify;

use crate::clock::Nanos;
use crate::throttle::bucket::{Bucket, State};
use crate::throttle::key_table::{KeyTable, Pin};

pub(super) struct Waiter {
    pub(super) id: u64,
    pub(super) cost: u64,
    pub(super) arrived: Nanos,
    pub(super) notify: Arc<Notify>,
    /// The bucket state right after this waiter's projected grant.
    pub(super) proj: State,
    /// Its place in arrival order (see `Turn`).
    pub(super) order: u64,
    /// Its fair key (empty for a layer without `fair_by`) and virtual finish tag.
    pub(super) fair: Box<str>,
    pub(super) tag: u64,
}

/// Virtual time per token of weight 1: fine enough that weights up to this divide well.
const TAG_SCALE: u64 = 1 << 20;

#[derive(Default)]
struct Waiters {
    list: VecDeque<Waiter>,
    /// Projected bucket state and instant after the last waiter's grant; `None`: refold.
    tail: Option<(State, Nanos)>,
    /// The tag of the last waiter served: the virtual time a newcomer starts from.
    vtime: u64,
    /// Per fair key with waiters: how many, and its last tag. Bounded by the waiters.
    flows: HashMap<Box<str>, (usize, u64)>,
}

impl Waiters {
    fn left(&mut self, w: &Waiter) {
        if let Some(f) = self.flows.get_mut(&w.fair) {
            f.0 -= 1;
            if f.0 == 0 {
                self.flows.remove(&w.fair);
            }
        }
    }
}

/// The waiters of one bucket: boxed, and absent when empty, so an idle key costs one pointer.
#[derive(Default)]
pub(crate) struct Queue(Option<Box<Waiters>>);

impl Pin for Queue {
    fn pinned(&self) -> bool {
        self.0.is_some()
    }
}

impl Queue {
    pub(super) fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |q| q.list.len())
    }

    /// When its longest waiter arrived (with `fair_by`, not always the head).
    pub(super) fn oldest(&self) -> Option<Nanos> {
        self.0.as_ref()?.list.iter().map(|w| w.arrived).min()
    }

    pub(super) fn head(&self) -> Option<&Waiter> {
        self.0.as_ref()?.list.front()
    }

    pub(super) fn wake_head(&self) {
        if let Some(w) = self.head() {
            w.notify.notify_one();
        }
    }

    pub(super) fn invalidate(&mut self) {
        if let Some(q) = &mut self.0 {
            q.tail = None;
        }
    }

    pub(super) fn push(&mut self, w: Waiter, tail: (State, Nanos)) {
        let q = self.0.get_or_insert_with(Default::default);
        q.list.push_back(w);
        q.tail = Some(tail);
    }

    /// A fair newcomer's tag and its place in the serving order (see the module doc).
    pub(super) fn place(&self, fair: &str, cost: u64, weight: u64) -> (u64, usize) {
        let Some(q) = &self.0 else {
            return (cost.saturating_mul(TAG_SCALE) / weight.max(1), 0);
        };
        let last = q.flows.get(fair).map_or(0, |f| f.1);
        let step = cost.saturating_mul(TAG_SCALE) / weight.max(1);
        let tag = q.vtime.max(last).saturating_add(step);
        (tag, q.list.partition_point(|w| w.tag <= tag))
    }

    /// Inserts a fair waiter at `pos` (from [`Queue::place`]); `tail` is the projection after
    /// it, kept only when it goes to the back.
    pub(super) fn insert_fair(&mut self, w: Waiter, pos: usize, tail: (State, Nanos)) {
        let q = self.0.get_or_insert_with(Default::default);
        let flow = q.flows.entry(w.fair.clone()).or_default();
        *flow = (flow.0 + 1, flow.1.max(w.tag));
        q.tail = (pos == q.list.len()).then_some(tail);
        q.list.insert(pos, w);
    }

    /// Puts a message sent again ahead of every waiter that arrived after it.
    pub(super) fn insert_in_order(&mut self, mut w: Waiter) {
        let q = self.0.get_or_insert_with(Default::default);
        let pos = q.list.iter().position(|o| o.order > w.order);
        let pos = pos.unwrap_or(q.list.len());
        // The tag of its neighbours keeps the list sorted by tag for fair placements.
        w.tag = (q.list.get(pos).or(q.list.back())).map_or(q.vtime, |o| o.tag);
        if let Some(f) = q.flows.get_mut(&w.fair) {
            f.0 += 1;
        } else if !w.fair.is_empty() {
            q.flows.insert(w.fair.clone(), (1, w.tag));
        }
        q.list.insert(pos, w);
        q.tail = None;
    }

    /// Waiters that arrived before `order`.
    pub(super) fn ahead_of(&self, order: u64) -> usize {
        let Some(q) = &self.0 else { return 0 };
        q.list.iter().take_while(|w| w.order < order).count()
    }

    /// The bucket state and instant after the first `n` waiters are served, from `(st, at)`.
    pub(super) fn fold_first(
        &self,
        b: &Bucket,
        n: usize,
        (mut st, mut at): (State, Nanos),
    ) -> (State, Nanos) {
        for w in self.0.iter().flat_map(|q| q.list.iter()).take(n) {
            (at, st) = b.reserve(st, at, w.cost).expect("cost checked at entry");
        }
        (st, at)
    }

    /// Whether waiter `id` is still queued (one told to go by a drain is not).
    pub(super) fn contains(&self, id: u64) -> bool {
        self.0
            .as_ref()
            .is_some_and(|q| q.list.iter().any(|w| w.id == id))
    }

    /// Removes, and returns, every waiter the bucket cannot serve by `end`, starting from
    /// `(st, at)`: a suffix, since grants come in queue order.
    pub(super) fn cut_after(
        &mut self,
        b: &Bucket,
        (mut st, mut at): (State, Nanos),
        end: Nanos,
    ) -> Vec<Waiter> {
        let Some(q) = self.0.as_mut() else {
            return Vec::new();
        };
        let mut keep = q.list.len();
        for (i, w) in q.list.iter().enumerate() {
            (at, st) = b.reserve(st, at, w.cost).expect("cost checked at entry");
            if at > end {
                keep = i;
                break;
            }
        }
        let gone: Vec<Waiter> = q.list.split_off(keep).into();
        for w in &gone {
            q.left(w);
        }
        if !gone.is_empty() {
            q.tail = None;
        }
        if q.list.is_empty() {
            self.0 = None;
        }
        gone
    }

    pub(super) fn pop_head(&mut self) -> Option<Waiter> {
        let q = self.0.as_mut()?;
        let w = q.list.pop_front()?;
        q.vtime = q.vtime.max(w.tag);
        q.left(&w);
        if q.list.is_empty() {
            self.0 = None;
        }
        Some(w)
    }

    /// Removes waiter `id`; its position, if it was there.
    pub(super) fn remove(&mut self, id: u64) -> Option<usize> {
        let q = self.0.as_mut()?;
        let pos = q.list.iter().position(|w| w.id == id)?;
        if let Some(w) = q.list.remove(pos) {
            q.left(&w);
        }
        q.tail = None;
        if q.list.is_empty() {
            self.0 = None;
        }
        Some(pos)
    }
}

/// The projected state and instant after every waiter of `slot` is served (cached).
pub(super) fn project(
    b: &Bucket,
    table: &mut KeyTable<Queue>,
    slot: u32,
    now: Nanos,
) -> (State, Nanos) {
    let state = table.state(slot);
    let Some(q) = table
        .pinned_extra_mut(slot)
        .and_then(|q| q.0.as_deref_mut())
    else {
        return (state, now);
    };
    if let Some((st, at)) = q.tail {
        return (st, at.max(now));
    }
    let (mut st, mut at) = (state, now);
    for w in q.list.iter_mut() {
        (at, st) = b.reserve(st, at, w.cost).expect("cost checked at entry");
        w.proj = st;
    }
    q.tail = Some((st, at));
    (st, at)
}

/// Where a newcomer of fair key `fair` (cost, weight) would go, and the projected state and
/// instant it starts from: after the waiters ahead of it only. `fair = None`: the back.
pub(super) fn project_place(
    b: &Bucket,
    table: &mut KeyTable<Queue>,
    slot: u32,
    now: Nanos,
    fair: Option<(&str, u64, u64)>,
) -> ((State, Nanos), Option<(u64, usize)>) {
    let Some((key, cost, weight)) = fair else {
        return (project(b, table, slot, now), None);
    };
    let q = table.extra(slot);
    let (tag, pos) = q.place(key, cost, weight);
    if pos == q.len() {
        return (project(b, table, slot, now), Some((tag, pos)));
    }
    let from = table
        .extra(slot)
        .fold_first(b, pos, (table.state(slot), now));
    (from, Some((tag, pos)))
}
