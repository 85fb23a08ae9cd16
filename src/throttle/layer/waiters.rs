//! The waiters of one bucket, and the projection that estimates a newcomer's wait.
//!
//! Why apart from `queue.rs` and `gate.rs`: this is the data (who waits, in which order, and
//! when each would be served); they are the waiting itself (locks, timers, cancellation).

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::Notify;

use crate::throttle::bucket::{Bucket, State};
use crate::throttle::clock::Nanos;
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
}

#[derive(Default)]
struct Waiters {
    list: VecDeque<Waiter>,
    /// Projected bucket state and instant after the last waiter's grant; `None`: refold.
    tail: Option<(State, Nanos)>,
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

    /// Puts a message sent again ahead of every waiter that arrived after it.
    pub(super) fn insert_in_order(&mut self, w: Waiter) {
        let q = self.0.get_or_insert_with(Default::default);
        let pos = q.list.iter().position(|o| o.order > w.order);
        q.list.insert(pos.unwrap_or(q.list.len()), w);
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

    pub(super) fn pop_head(&mut self) -> Option<Waiter> {
        let q = self.0.as_mut()?;
        let w = q.list.pop_front();
        if q.list.is_empty() {
            self.0 = None;
        }
        w
    }

    /// Removes waiter `id`; its position, if it was there.
    pub(super) fn remove(&mut self, id: u64) -> Option<usize> {
        let q = self.0.as_mut()?;
        let pos = q.list.iter().position(|w| w.id == id)?;
        q.list.remove(pos);
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
