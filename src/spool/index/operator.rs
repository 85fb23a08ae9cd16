//! What the operators read of the spool in memory and do to it: a failed message put back, a
//! key stopped and let go, a message let go now, one message's entry, the counts.

use super::{Entry, HeldKey, Index, KeyCount, State};
use crate::clock::Nanos;

impl Index {
    /// Takes failed message `id` out of the failed ones, to be put back in its key's queue.
    pub fn take_failed(&mut self, id: &str) -> Option<(HeldKey, Entry)> {
        let (key, entry) = self.failed.remove(id)?;
        self.free_bytes(&key, entry.bytes);
        Some((key, entry))
    }

    /// A failed message back in `key`'s queue, to go from `now`: in its place by arrival, as
    /// at a restart.
    pub fn requeue(&mut self, key: &HeldKey, mut entry: Entry, now: Nanos) {
        (entry.state, entry.next, entry.attempts) = (State::Held, now, 0);
        self.push(key, entry);
    }

    /// The failed messages held since before `before_ms` (Unix milliseconds).
    pub fn failed_before(&self, before_ms: u64) -> Vec<(HeldKey, Entry)> {
        (self.failed.values())
            .filter(|(_, e)| e.accepted_ms < before_ms)
            .cloned()
            .collect()
    }

    /// Stops releasing `key` (an operator's hold) or lets it go again: then its messages
    /// waiting for their time go from `now`.
    pub fn stop(&mut self, key: &HeldKey, stopped: bool, now: Nanos) {
        match stopped {
            true => {
                self.stopped.insert(key.clone());
            }
            false => {
                self.stopped.remove(key);
                let seqs: Vec<u64> = (self.queues.get(key).into_iter())
                    .flat_map(|q| q.entries.keys().copied())
                    .collect();
                for seq in seqs {
                    self.ready_now(key, seq, now);
                }
            }
        }
        self.rank(key);
    }

    /// Moves `key`'s message at `seq` from the waiting to the ready, if it waits for its
    /// time; whether it did.
    pub(super) fn ready_now(&mut self, key: &HeldKey, seq: u64, now: Nanos) -> bool {
        let Some(queue) = self.queues.get_mut(key) else {
            return false;
        };
        let Some(entry) = queue.entries.get_mut(&seq) else {
            return false;
        };
        if entry.state != State::Held || self.waiting.remove(&(entry.next, seq)).is_none() {
            return false;
        }
        entry.next = entry.next.min(now);
        queue.ready.insert(seq);
        true
    }

    /// Lets `id` go at once (an operator's release), if it waits for its time (after a
    /// temporary refusal); one whose time has come waits for its key's earlier messages.
    pub fn now(&mut self, id: &str, now: Nanos) -> bool {
        let Some((key, seq)) = self.ids.get(id).cloned() else {
            return false;
        };
        let moved = self.ready_now(&key, seq, now);
        self.rank(&key);
        moved
    }

    /// One message's entry and key, held or failed.
    pub fn get(&self, id: &str) -> Option<(HeldKey, Entry)> {
        if let Some(found) = self.failed.get(id) {
            return Some(found.clone());
        }
        let (key, seq) = self.ids.get(id)?;
        let entry = self.queues.get(key)?.entries.get(seq)?;
        Some((key.clone(), entry.clone()))
    }

    /// Messages held (failed ones apart), and bytes (failed ones included).
    pub fn totals(&self) -> (usize, usize, u64) {
        (self.ids.len(), self.failed.len(), self.bytes)
    }

    /// Each key's messages, bytes and oldest message.
    pub fn keys(&self) -> Vec<KeyCount> {
        let mut keys: Vec<KeyCount> = (self.queues.iter())
            .map(|(key, q)| KeyCount {
                key: key.clone(),
                messages: q.entries.len(),
                bytes: q.entries.values().map(|e| e.bytes).sum(),
                oldest_ms: q.entries.values().next().map_or(0, |e| e.accepted_ms),
            })
            .collect();
        keys.sort_by(|a, b| a.key.cmp(&b.key));
        keys
    }

    /// The oldest held message's `accepted_ms` (a key's first is its oldest).
    pub fn oldest_ms(&self) -> Option<u64> {
        (self.queues.values())
            .filter_map(|q| q.entries.values().next().map(|e| e.accepted_ms))
            .min()
    }

    /// Whether `key` is stopped by an operator.
    pub fn is_stopped(&self, key: &HeldKey) -> bool {
        self.stopped.contains(key)
    }

    /// The keys an operator stopped, sorted.
    pub fn stopped_keys(&self) -> Vec<HeldKey> {
        let mut keys: Vec<HeldKey> = self.stopped.iter().cloned().collect();
        keys.sort();
        keys
    }

    /// The first `max` messages of `of` (every key when `None`), by key and in their queue's
    /// order, then the failed ones by arrival (only those with `failed_only`); and how many
    /// there are in all.
    pub fn list(
        &self,
        of: Option<&HeldKey>,
        failed_only: bool,
        max: usize,
    ) -> (Vec<(HeldKey, Entry)>, usize) {
        let wanted = |key: &HeldKey| of.is_none_or(|of| of == key);
        let mut keys: Vec<&HeldKey> = (self.queues.keys()).filter(|k| wanted(k)).collect();
        keys.sort();
        let held = (keys.into_iter().filter(|_| !failed_only))
            .flat_map(|key| self.queues[key].entries.values().map(move |e| (key, e)));
        let mut failed: Vec<&(HeldKey, Entry)> =
            (self.failed.values()).filter(|(k, _)| wanted(k)).collect();
        failed.sort_by_key(|(_, e)| e.seq);
        let all = held.chain(failed.into_iter().map(|(key, entry)| (key, entry)));
        let mut listed = Vec::new();
        let mut total = 0;
        for (key, entry) in all {
            if listed.len() < max {
                listed.push((key.clone(), entry.clone()));
            }
            total += 1;
        }
        (listed, total)
    }
}
