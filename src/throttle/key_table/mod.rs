//! The buckets of one layer held in process: a bucket state per key, at most `max_keys` of them.
//!
//! Why this shape: memory must stay bounded and small per idle key, and the two eviction
//! choices must be cheap. Slots live in a slab (`Vec`) addressed by `u32`, the map only turns a
//! key into a slot, and each slot carries a payload `W` (the queue's waiters) so that the queue
//! and its buckets share one lock and one lookup.
//!
//! **Eviction index.** A slot whose payload is *pinned* (it has waiters) is in no index and is
//! never dropped. Every unpinned slot is
//! - in the LRU list (intrusive, `prev`/`next`): the least recently used one with no waiter;
//! - and in exactly one of `filling` (by the instant it becomes full, `full_at`) or `full` (by
//!   its last use, `seq`). Fullness is a function of time, so slots move from `filling` to
//!   `full` lazily: when room is needed (pop `filling` while `full_at <= now`), and a few at a
//!   time by the idle sweep.
//!
//! The `filling` key may be *early*: a take only moves `full_at` later, so a take leaves the
//! entry where it is (no B-tree work on the hot path), and the entry is checked when it comes
//! up: re-entered at the true `full_at`, or moved to `full`. A give-back (which can make it
//! full sooner) re-enters it at once. Each slot is re-entered at most once per use, so both
//! choices are amortised O(log n).
//!
//! Past `max_keys`, the least recently used full slot goes (lossless: a full bucket reads the
//! same as an absent one); when none is full, the least recently used unpinned slot goes and
//! `ratelimit.evicted` is logged at warn; when every slot is pinned, the insert is refused
//! ([`TableFull`]) and the caller answers with a retry hint.
//!
//! **Idle buckets.** A bucket that is full and unused for `idle_ttl` is forgotten without any
//! pressure on `max_keys`, so a table's memory follows the keys in use, not every key ever
//! seen. No thread scans the table: each [`KeyTable::find_or_insert`] (one per message) first
//! does a bounded sweep of at most [`SWEEP_STEPS`] index entries, the oldest full slot first,
//! moving slots that became full from `filling` to `full` on the way. A use adds at most a few
//! entries of such work (enter an index, be re-entered once, move to `full`, go), so the sweep
//! keeps up with the traffic that makes it. A slot's `seq` tells its last use *and* orders
//! `full`: it is a strictly increasing instant, `max(now, previous seq + 1)`, so one word per
//! slot serves both (it runs ahead of the clock only by one nanosecond per use within the
//! same nanosecond, or when callers' readings of the clock arrive out of order).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::clock::Nanos;
use crate::throttle::adaptive::Learned;
use crate::throttle::bucket::{Bucket, State};

const NIL: u32 = u32::MAX;

/// `Slot::idx` of a slot in `full` (keyed by its `seq`).
const IN_FULL: Nanos = u64::MAX;

/// Index entries the idle sweep examines per call (see the module doc).
pub(crate) const SWEEP_STEPS: usize = 4;

/// A slot's payload; a pinned slot (one with waiters) is never evicted.
pub trait Pin: Default {
    fn pinned(&self) -> bool;
}

impl Pin for () {
    fn pinned(&self) -> bool {
        false
    }
}

/// Every slot holds a waiter, so no key can be added now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("every bucket of the layer has waiters")]
pub struct TableFull;

#[derive(Debug)]
struct Slot<W> {
    key: Option<Arc<str>>,
    state: State,
    /// Its last use (see the module doc: an instant, strictly increasing across the table).
    seq: Nanos,
    /// Its `filling` key (≤ its `full_at`), or [`IN_FULL`]; unused while pinned.
    idx: Nanos,
    prev: u32,
    next: u32,
    extra: W,
    /// What an adaptive layer learned for this key, and the bucket it runs at (`None`: nothing
    /// learned yet, the table's bucket).
    learned: Option<Box<Learned>>,
    bucket: Option<Box<Bucket>>,
}

/// The bucket table of one layer; see the module doc.
#[derive(Debug)]
pub struct KeyTable<W> {
    name: Arc<str>,
    bucket: Bucket,
    max_keys: usize,
    map: HashMap<Arc<str>, u32>,
    slots: Vec<Slot<W>>,
    free: Vec<u32>,
    filling: BTreeSet<(Nanos, u32)>,
    full: BTreeSet<(u64, u32)>,
    lru_head: u32,
    lru_tail: u32,
    /// The last use of any slot.
    seq: Nanos,
    /// A full bucket unused this long is forgotten.
    idle_ttl: Nanos,
    /// Buckets dropped before they were full (lossy evictions), for metrics.
    evicted: u64,
}

impl<W: Pin> KeyTable<W> {
    /// `name` is the layer's, for logs. `idle_ttl`: see the module doc (`Nanos::MAX`: never
    /// forget a bucket but to make room).
    pub fn new(name: &str, bucket: Bucket, max_keys: usize, idle_ttl: Nanos) -> KeyTable<W> {
        KeyTable {
            name: name.into(),
            bucket,
            max_keys,
            map: HashMap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            filling: BTreeSet::new(),
            full: BTreeSet::new(),
            lru_head: NIL,
            lru_tail: NIL,
            seq: 0,
            idle_ttl,
            evicted: 0,
        }
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// How many buckets were dropped before they were full, since the table was made.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// The keys whose payload is pinned (they have waiters), with it.
    pub fn pinned(&self) -> impl Iterator<Item = (&str, &W)> {
        self.map.iter().filter_map(|(key, &id)| {
            let extra = &self.slots[id as usize].extra;
            extra.pinned().then_some((&**key, extra))
        })
    }

    pub fn find(&self, key: &str) -> Option<u32> {
        self.map.get(key).copied()
    }

    pub fn state(&self, id: u32) -> State {
        self.slots[id as usize].state
    }

    pub fn extra(&self, id: u32) -> &W {
        &self.slots[id as usize].extra
    }

    /// The payload of a pinned slot, for changes that keep it pinned (no index moves). `None`
    /// when the slot is not pinned: use [`KeyTable::modify`] then.
    pub fn pinned_extra_mut(&mut self, id: u32) -> Option<&mut W> {
        let extra = &mut self.slots[id as usize].extra;
        extra.pinned().then_some(extra)
    }

    /// The ids of every key held (for dispose).
    pub fn ids(&self) -> Vec<u32> {
        self.map.values().copied().collect()
    }

    /// The slot of `key`, adding a fresh (full) bucket when absent, evicting one if needed.
    /// Sweeps idle buckets first, so a slot id from before this call may be gone.
    pub fn find_or_insert(&mut self, key: &str, now: Nanos) -> Result<u32, TableFull> {
        self.sweep(now);
        if let Some(id) = self.find(key) {
            return Ok(id);
        }
        self.make_room(now)?;
        let key: Arc<str> = key.into();
        let slot = Slot {
            key: Some(key.clone()),
            state: State::default(),
            seq: 0,
            idx: 0,
            prev: NIL,
            next: NIL,
            extra: W::default(),
            learned: None,
            bucket: None,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = slot;
                id
            }
            None => {
                self.slots.push(slot);
                u32::try_from(self.slots.len() - 1).expect("more than u32::MAX keys")
            }
        };
        self.map.insert(key, id);
        self.slots[id as usize].seq = self.next_seq(now);
        self.index(id, 0, now);
        self.lru_push_back(id);
        Ok(id)
    }

    /// Changes a slot's state or payload: the one way to mutate, so the indexes stay right.
    /// Counts as a use of the bucket (moves it to the back of the LRU order).
    pub fn modify<R>(&mut self, id: u32, now: Nanos, f: impl FnOnce(&mut State, &mut W) -> R) -> R {
        let seq = self.next_seq(now);
        let slot = &mut self.slots[id as usize];
        let (was_pinned, old_seq, idx) = (slot.extra.pinned(), slot.seq, slot.idx);
        let out = f(&mut slot.state, &mut slot.extra);
        slot.seq = seq;
        let bucket = slot.bucket.as_deref().unwrap_or(&self.bucket);
        let (pinned, full_at) = (slot.extra.pinned(), bucket.full_at(slot.state));
        match (was_pinned, pinned) {
            (true, true) => {}
            (true, false) => {
                self.index(id, full_at, now);
                self.lru_push_back(id);
            }
            (false, true) => {
                self.unindex(id, idx, old_seq);
                self.lru_unlink(id);
            }
            (false, false) => {
                if self.lru_tail != id {
                    self.lru_unlink(id);
                    self.lru_push_back(id);
                }
                if idx == IN_FULL || full_at < idx {
                    self.unindex(id, idx, old_seq);
                    self.index(id, full_at, now);
                }
            }
        }
        out
    }

    /// The `seq` of a use at `now`.
    fn next_seq(&mut self, now: Nanos) -> Nanos {
        self.seq = now.max(self.seq.saturating_add(1));
        self.seq
    }

    fn index(&mut self, id: u32, full_at: Nanos, now: Nanos) {
        let slot = &mut self.slots[id as usize];
        if full_at <= now {
            self.full.insert((slot.seq, id));
            slot.idx = IN_FULL;
        } else {
            self.filling.insert((full_at, id));
            slot.idx = full_at;
        }
    }

    fn unindex(&mut self, id: u32, idx: Nanos, seq: Nanos) {
        if idx == IN_FULL {
            self.full.remove(&(seq, id));
        } else {
            self.filling.remove(&(idx, id));
        }
    }

    /// Moves the slots full by `now` from `filling` to `full`, re-entering early entries.
    fn sort_out_full(&mut self, now: Nanos) {
        while self.sort_out_one(now) {}
    }

    /// Takes the first `filling` entry if it is due: into `full`, or back into `filling` at its
    /// true `full_at` (an early entry). False when none is due.
    fn sort_out_one(&mut self, now: Nanos) -> bool {
        match self.filling.first() {
            Some(&(idx, id)) if idx <= now => {
                self.filling.pop_first();
                let full_at = self.bucket_of(id).full_at(self.slots[id as usize].state);
                self.index(id, full_at, now);
                true
            }
            _ => false,
        }
    }

    /// Forgets full buckets unused for `idle_ttl`, examining at most [`SWEEP_STEPS`] entries.
    /// Lossless: a full bucket reads the same as an absent one.
    fn sweep(&mut self, now: Nanos) {
        for _ in 0..SWEEP_STEPS {
            let idle = self.full.first().copied();
            match idle {
                Some((seq, id)) if seq.saturating_add(self.idle_ttl) <= now => self.remove(id),
                _ if self.sort_out_one(now) => {}
                _ => return,
            }
        }
    }

    fn make_room(&mut self, now: Nanos) -> Result<(), TableFull> {
        if self.map.len() < self.max_keys {
            return Ok(());
        }
        self.sort_out_full(now);
        if let Some(&(_, id)) = self.full.first() {
            self.remove(id);
            return Ok(());
        }
        if self.lru_head == NIL {
            return Err(TableFull);
        }
        let id = self.lru_head;
        let slot = &self.slots[id as usize];
        tracing::warn!(
            target: "ratelimit",
            layer = %self.name,
            key = slot.key.as_deref().unwrap_or(""),
            remaining = self.bucket_of(id).remaining(slot.state, now),
            max_keys = self.max_keys,
            "ratelimit.evicted"
        );
        self.evicted += 1;
        self.remove(id);
        Ok(())
    }

    fn remove(&mut self, id: u32) {
        let Slot { idx, seq, .. } = self.slots[id as usize];
        self.unindex(id, idx, seq);
        self.lru_unlink(id);
        let slot = &mut self.slots[id as usize];
        if let Some(key) = slot.key.take() {
            self.map.remove(&key);
        }
        slot.extra = W::default();
        (slot.learned, slot.bucket) = (None, None);
        self.free.push(id);
    }

    fn lru_push_back(&mut self, id: u32) {
        let tail = self.lru_tail;
        let slot = &mut self.slots[id as usize];
        slot.prev = tail;
        slot.next = NIL;
        match tail {
            NIL => self.lru_head = id,
            t => self.slots[t as usize].next = id,
        }
        self.lru_tail = id;
    }

    fn lru_unlink(&mut self, id: u32) {
        let Slot { prev, next, .. } = self.slots[id as usize];
        match prev {
            NIL => self.lru_head = next,
            p => self.slots[p as usize].next = next,
        }
        match next {
            NIL => self.lru_tail = prev,
            n => self.slots[n as usize].prev = prev,
        }
        let slot = &mut self.slots[id as usize];
        slot.prev = NIL;
        slot.next = NIL;
    }
}

mod limits;
#[cfg(test)]
mod tests;
