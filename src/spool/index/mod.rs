//! The spool in memory: every held message's place, without its bytes. A FIFO queue per
//! [`HeldKey`], whose head alone may be released (so a key's messages leave in the order they
//! came), the heads that may go ordered by when, and the counts the bounds and the operators
//! read. About a hundred bytes a message: 100,000 held take some ten megabytes.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use super::error::{Refusal, Storage};
use super::record::HeldKey;
use crate::clock::Nanos;

/// Where a held message stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Being written: not yet on stable storage, never released.
    Writing,
    /// On stable storage, waiting for its turn.
    Held,
    /// Taken by the releaser: with upstream now.
    Releasing,
    /// Given up without a report (no `report_from`): kept for the operator.
    Failed,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Writing => "writing",
            State::Held => "held",
            State::Releasing => "releasing",
            State::Failed => "failed",
        }
    }
}

/// One held message.
#[derive(Debug, Clone)]
pub struct Entry {
    pub id: Box<str>,
    pub seq: u64,
    pub bytes: u64,
    /// When it was held, in Unix milliseconds.
    pub accepted_ms: u64,
    pub state: State,
    /// Attempts to release it so far.
    pub attempts: u32,
    /// When it may go next (monotonic).
    pub next: Nanos,
    /// Upstream's last answer, or why it did not go.
    pub last: Option<Box<str>>,
    /// A delivery status notification the relay wrote.
    pub report: bool,
    /// The upstream whose failure (not its own) keeps it back: it goes again as soon as that
    /// upstream answers (`Index::upstream_back`).
    pub waits_for: Option<Box<str>>,
}

/// A message the releaser took: its place and what its attempt needs to know.
#[derive(Debug, Clone)]
pub struct Ticket {
    pub id: Box<str>,
    pub seq: u64,
    pub key: HeldKey,
    pub accepted_ms: u64,
    /// This attempt's number, from 1.
    pub attempt: u32,
}

/// One key's messages, for the operators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyCount {
    pub key: HeldKey,
    pub messages: usize,
    pub bytes: u64,
    pub oldest_ms: u64,
}

/// The spool in memory.
#[derive(Default)]
pub struct Index {
    queues: HashMap<HeldKey, VecDeque<Entry>>,
    /// The heads that may go, by when, then by arrival.
    due: BTreeMap<(Nanos, u64), HeldKey>,
    /// The key each message waits in.
    ids: HashMap<Box<str>, HeldKey>,
    /// Failed messages kept for the operator, by id.
    failed: HashMap<Box<str>, (HeldKey, Entry)>,
    /// Keys an operator stopped: their heads are not released.
    stopped: HashSet<HeldKey>,
    next_seq: u64,
    bytes: u64,
}

impl Index {
    /// Places a message being written at the back of its key's queue, within the bounds:
    /// `max_held` messages for the key (`None`: none, for a report), `max_bytes` for all.
    /// Its place in arrival order (its `seq`).
    pub fn reserve(
        &mut self,
        key: &HeldKey,
        id: &str,
        bytes: u64,
        accepted_ms: u64,
        bounds: (Option<usize>, u64),
    ) -> Result<u64, Refusal> {
        let (max_held, max_bytes) = bounds;
        let held = self.queues.get(key).map_or(0, VecDeque::len);
        if max_held.is_some_and(|max| held >= max) {
            return Err(Refusal::KeyFull { held });
        }
        if self.bytes.saturating_add(bytes) > max_bytes {
            return Err(Refusal::Storage(Storage::MaxBytes { max: max_bytes }));
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.push(
            key,
            Entry {
                id: id.into(),
                seq,
                bytes,
                accepted_ms,
                state: State::Writing,
                attempts: 0,
                next: 0,
                last: None,
                report: false,
                waits_for: None,
            },
        );
        Ok(seq)
    }

    /// A message read back at start (in arrival order), on stable storage already.
    pub fn recovered(&mut self, key: &HeldKey, entry: Entry) {
        self.next_seq = self.next_seq.max(entry.seq + 1);
        match entry.state {
            State::Failed => {
                self.bytes += entry.bytes;
                self.failed.insert(entry.id.clone(), (key.clone(), entry));
            }
            _ => {
                self.push(key, entry);
                self.schedule_head(key);
            }
        }
    }

    fn push(&mut self, key: &HeldKey, entry: Entry) {
        self.bytes += entry.bytes;
        self.ids.insert(entry.id.clone(), key.clone());
        self.queues.entry(key.clone()).or_default().push_back(entry);
    }

    /// The message `id` is on stable storage: it may go from `now`.
    pub fn written(&mut self, id: &str, report: bool, now: Nanos) {
        let Some(key) = self.ids.get(id).cloned() else {
            return;
        };
        if let Some(entry) = self.entry_mut(&key, id) {
            (entry.state, entry.next, entry.report) = (State::Held, now, report);
        }
        self.schedule_head(&key);
    }

    /// Puts the head of `key`'s queue among the due when it waits for its turn.
    fn schedule_head(&mut self, key: &HeldKey) {
        if self.stopped.contains(key) {
            return;
        }
        let Some(head) = self.queues.get(key).and_then(VecDeque::front) else {
            return;
        };
        if head.state == State::Held {
            self.due.insert((head.next, head.seq), key.clone());
        }
    }

    fn entry_mut(&mut self, key: &HeldKey, id: &str) -> Option<&mut Entry> {
        (self.queues.get_mut(key)?.iter_mut()).find(|e| &*e.id == id)
    }

    /// Whether `key` has messages held (or being written): its new ones are held too.
    pub fn holds(&self, key: &HeldKey) -> bool {
        self.queues.contains_key(key)
    }

    /// When the first due head may go.
    pub fn next_due(&self) -> Option<Nanos> {
        self.due.keys().next().map(|(at, _)| *at)
    }

    /// Takes up to `max` heads due by `now`, earliest first, for release.
    pub fn take_due(&mut self, now: Nanos, max: usize) -> Vec<Ticket> {
        let mut taken = Vec::new();
        while taken.len() < max {
            let Some(entry) = self.due.first_entry() else {
                break;
            };
            if entry.key().0 > now {
                break;
            }
            let key = entry.remove();
            let Some(head) = self.queues.get_mut(&key).and_then(VecDeque::front_mut) else {
                continue;
            };
            head.state = State::Releasing;
            head.attempts += 1;
            taken.push(Ticket {
                id: head.id.clone(),
                seq: head.seq,
                key,
                accepted_ms: head.accepted_ms,
                attempt: head.attempts,
            });
        }
        taken
    }

    /// A released (or given up) message's attempt failed for now: it may go again at `at`.
    pub fn retry(&mut self, id: &str, at: Nanos, answer: String) {
        let Some(key) = self.ids.get(id).cloned() else {
            return;
        };
        if let Some(entry) = self.entry_mut(&key, id) {
            (entry.state, entry.next, entry.last) = (State::Held, at, Some(answer.into()));
            entry.waits_for = None;
        }
        self.schedule_head(&key);
    }

    /// As [`Index::retry`], for a message kept back by `upstream`'s failure.
    pub fn wait_for(&mut self, id: &str, at: Nanos, answer: String, upstream: &str) {
        self.retry(id, at, answer);
        if let Some(entry) = (self.ids.get(id).cloned()).and_then(|k| self.entry_mut(&k, id)) {
            entry.waits_for = Some(upstream.into());
        }
    }

    /// `upstream` answers again: up to `max` of the messages waiting for it (the heads of
    /// their keys) may go from `now`. How many were.
    pub fn upstream_back(&mut self, upstream: &str, now: Nanos, max: usize) -> usize {
        let mut keys: Vec<(u64, HeldKey)> = (self.queues.iter())
            .filter_map(|(key, q)| q.front().map(|head| (head, key)))
            .filter(|(head, _)| head.state == State::Held)
            .filter(|(head, _)| head.waits_for.as_deref() == Some(upstream))
            .map(|(head, key)| (head.seq, key.clone()))
            .collect();
        keys.sort();
        keys.truncate(max);
        for (_, key) in &keys {
            let Some(head) = self.queues.get_mut(key).and_then(VecDeque::front_mut) else {
                continue;
            };
            let was = (head.next, head.seq);
            (head.next, head.waits_for) = (head.next.min(now), None);
            if self.due.remove(&was).is_some() {
                self.schedule_head(key);
            }
        }
        keys.len()
    }

    /// How many messages wait for `upstream` to answer again.
    pub fn waiting_for(&self, upstream: &str) -> usize {
        (self.queues.values().flatten())
            .filter(|e| e.waits_for.as_deref() == Some(upstream))
            .count()
    }

    /// Removes `id` wherever it is (held or failed); its entry and key. The next message of
    /// its key becomes the head.
    pub fn remove(&mut self, id: &str) -> Option<(HeldKey, Entry)> {
        if let Some((key, entry)) = self.failed.remove(id) {
            self.bytes -= entry.bytes;
            return Some((key, entry));
        }
        let key = self.ids.remove(id)?;
        let queue = self.queues.get_mut(&key)?;
        let at = queue.iter().position(|e| &*e.id == id)?;
        let entry = queue.remove(at)?;
        if at == 0 && entry.state == State::Held {
            self.due.remove(&(entry.next, entry.seq));
        }
        if queue.is_empty() {
            self.queues.remove(&key);
        } else if at == 0 {
            self.schedule_head(&key);
        }
        self.bytes -= entry.bytes;
        Some((key, entry))
    }

    /// Moves `id` to the failed messages kept for the operator, with why.
    pub fn failed(&mut self, id: &str, answer: String) {
        if let Some((key, mut entry)) = self.remove(id) {
            (entry.state, entry.last) = (State::Failed, Some(answer.into()));
            self.bytes += entry.bytes;
            self.failed.insert(entry.id.clone(), (key, entry));
        }
    }

    /// Takes failed message `id` out of the failed ones, to be put back in its key's queue.
    pub fn take_failed(&mut self, id: &str) -> Option<(HeldKey, Entry)> {
        let (key, entry) = self.failed.remove(id)?;
        self.bytes -= entry.bytes;
        Some((key, entry))
    }

    /// Puts a message taken by [`Index::take_failed`] back among the failed.
    pub fn put_failed(&mut self, key: HeldKey, entry: Entry) {
        self.bytes += entry.bytes;
        self.failed.insert(entry.id.clone(), (key, entry));
    }

    /// A failed message back in `key`'s queue, to go from `now`: in its place by arrival, as
    /// at a restart, but never before a head being written or released.
    pub fn requeue(&mut self, key: &HeldKey, mut entry: Entry, now: Nanos) {
        (entry.state, entry.next, entry.attempts) = (State::Held, now, 0);
        self.bytes += entry.bytes;
        self.ids.insert(entry.id.clone(), key.clone());
        let queue = self.queues.entry(key.clone()).or_default();
        let busy = queue.front().is_some_and(|head| head.state != State::Held);
        let later = queue.iter().position(|e| e.seq > entry.seq);
        let at = later.unwrap_or(queue.len()).max(usize::from(busy));
        if let Some(head) = queue.front().filter(|_| at == 0) {
            self.due.remove(&(head.next, head.seq));
        }
        queue.insert(at, entry);
        self.schedule_head(key);
    }

    /// The failed messages held since before `before_ms` (Unix milliseconds).
    pub fn failed_before(&self, before_ms: u64) -> Vec<(HeldKey, Entry)> {
        (self.failed.values())
            .filter(|(_, e)| e.accepted_ms < before_ms)
            .cloned()
            .collect()
    }

    /// Stops releasing `key` (an operator's hold) or lets it go again.
    pub fn stop(&mut self, key: &HeldKey, stopped: bool, now: Nanos) {
        match stopped {
            true => {
                self.stopped.insert(key.clone());
                self.due.retain(|_, k| k != key);
            }
            false => {
                self.stopped.remove(key);
                if let Some(head) = self.queues.get_mut(key).and_then(VecDeque::front_mut) {
                    head.next = head.next.min(now);
                }
                self.schedule_head(key);
            }
        }
    }

    /// Lets `id` go at once (an operator's release), if it waits.
    pub fn now(&mut self, id: &str, now: Nanos) -> bool {
        let Some(key) = self.ids.get(id).cloned() else {
            return false;
        };
        let head = self.queues.get(&key).and_then(VecDeque::front);
        let Some(head) = head.filter(|h| &*h.id == id && h.state == State::Held) else {
            return false;
        };
        self.due.remove(&(head.next, head.seq));
        if let Some(head) = self.queues.get_mut(&key).and_then(VecDeque::front_mut) {
            head.next = now;
        }
        self.schedule_head(&key);
        true
    }

    /// One message's entry and key, held or failed.
    pub fn get(&self, id: &str) -> Option<(HeldKey, Entry)> {
        if let Some(found) = self.failed.get(id) {
            return Some(found.clone());
        }
        let key = self.ids.get(id)?;
        let entry = self.queues.get(key)?.iter().find(|e| &*e.id == id)?;
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
                messages: q.len(),
                bytes: q.iter().map(|e| e.bytes).sum(),
                oldest_ms: q.front().map_or(0, |e| e.accepted_ms),
            })
            .collect();
        keys.sort_by(|a, b| a.key.cmp(&b.key));
        keys
    }

    /// The oldest held message's `accepted_ms` (a key's first is its oldest).
    pub fn oldest_ms(&self) -> Option<u64> {
        (self.queues.values())
            .filter_map(|q| q.front().map(|e| e.accepted_ms))
            .min()
    }

    /// Whether `key` is stopped by an operator.
    pub fn is_stopped(&self, key: &HeldKey) -> bool {
        self.stopped.contains(key)
    }
}

#[cfg(test)]
mod tests;
