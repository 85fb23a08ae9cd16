//! The spool in memory: every held message's place, without its bytes. A queue per
//! [`HeldKey`] (`queue`) whose messages go in the order they came, several at once up to the
//! key's width; a message that failed for now steps aside until its own time (its key's
//! others go on without it), so only the messages that have not failed keep their order.
//! Across keys, the oldest ready message goes first. Also the counts that the bounds (a key's
//! `max_held`, its share of the spool, the spool's `max_bytes`) and the operators read. About
//! a hundred bytes a message: 100,000 held take some ten megabytes. What the operators read
//! and do (a key stopped, a message let go now or put back, the counts) is in `operator`.

mod operator;
mod queue;

use std::collections::{BTreeMap, HashMap, HashSet};

use super::error::{Refusal, Storage};
use super::record::HeldKey;
use crate::clock::Nanos;
use queue::Queue;
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

/// What a new message must stay within.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The key's `max_held` messages; `None` for a report, which a full key still takes.
    pub max_held: Option<usize>,
    /// The bytes the key may hold (its share of the spool), whether or not other keys hold
    /// messages now: a key that filled an empty spool would leave none for the next tenant;
    /// `None` for a report.
    pub share: Option<u64>,
    /// The spool's `max_bytes`.
    pub max_bytes: u64,
}

/// The spool in memory.
#[derive(Default)]
pub struct Index {
    queues: HashMap<HeldKey, Queue>,
    /// Held messages waiting for their time, by when, then by arrival.
    waiting: BTreeMap<(Nanos, u64), HeldKey>,
    /// The keys (not stopped) with messages ready, by their first ready message's place.
    ready: BTreeMap<u64, HeldKey>,
    /// Where each held message is: its key and place.
    ids: HashMap<Box<str>, (HeldKey, u64)>,
    /// Failed messages kept for the operator, by id.
    failed: HashMap<Box<str>, (HeldKey, Entry)>,
    /// The bytes each key holds, held and failed (none listed holds none).
    usage: HashMap<HeldKey, u64>,
    /// Keys an operator stopped: their messages are not released.
    stopped: HashSet<HeldKey>,
    next_seq: u64,
    bytes: u64,
}

impl Index {
    /// Places a message being written at the back of its key's queue, within `bounds`. Its
    /// place in arrival order (its `seq`).
    pub fn reserve(
        &mut self,
        key: &HeldKey,
        id: &str,
        bytes: u64,
        accepted_ms: u64,
        bounds: Bounds,
    ) -> Result<u64, Refusal> {
        let held = self.queues.get(key).map_or(0, |q| q.entries.len());
        if bounds.max_held.is_some_and(|max| held >= max) {
            return Err(Refusal::KeyFull { held });
        }
        if self.bytes.saturating_add(bytes) > bounds.max_bytes {
            let max = bounds.max_bytes;
            return Err(Refusal::Storage(Storage::MaxBytes { max }));
        }
        // A full spool is the spool's `452` for everyone; short of it, the key's share.
        if let Some(share) = bounds.share {
            let mine = self.usage.get(key).copied().unwrap_or(0);
            if mine.saturating_add(bytes) > share {
                return Err(Refusal::OverShare { bytes: mine, share });
            }
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let entry = Entry {
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
        };
        self.push(key, entry);
        Ok(seq)
    }

    /// A message read back at start (in arrival order), on stable storage already.
    pub fn recovered(&mut self, key: &HeldKey, entry: Entry) {
        self.next_seq = self.next_seq.max(entry.seq + 1);
        match entry.state {
            State::Failed => self.put_failed(key.clone(), entry),
            _ => self.push(key, entry),
        }
    }

    /// Puts a message being written, or held, in its key's queue at its place.
    fn push(&mut self, key: &HeldKey, entry: Entry) {
        self.use_bytes(key, entry.bytes);
        let seq = entry.seq;
        self.ids.insert(entry.id.clone(), (key.clone(), seq));
        let queue = self.queues.entry(key.clone()).or_insert_with(Queue::new);
        match entry.state {
            State::Writing => {
                queue.writing.insert(seq);
            }
            _ => {
                self.waiting.insert((entry.next, seq), key.clone());
            }
        }
        queue.entries.insert(seq, entry);
    }

    fn use_bytes(&mut self, key: &HeldKey, bytes: u64) {
        self.bytes += bytes;
        *self.usage.entry(key.clone()).or_default() += bytes;
    }

    fn free_bytes(&mut self, key: &HeldKey, bytes: u64) {
        self.bytes -= bytes;
        if let Some(used) = self.usage.get_mut(key) {
            *used -= bytes;
            if *used == 0 {
                self.usage.remove(key);
            }
        }
    }

    /// The message `id` is on stable storage: it may go from `now`.
    pub fn written(&mut self, id: &str, report: bool, now: Nanos) {
        let Some((key, seq)) = self.ids.get(id).cloned() else {
            return;
        };
        let Some(queue) = self.queues.get_mut(&key) else {
            return;
        };
        queue.writing.remove(&seq);
        if let Some(entry) = queue.entries.get_mut(&seq) {
            (entry.state, entry.next, entry.report) = (State::Held, now, report);
            self.waiting.insert((now, seq), key);
        }
    }

    /// Ranks `key` among the keys with messages ready by its first ready one, or takes it out
    /// (none ready, or stopped).
    fn rank(&mut self, key: &HeldKey) {
        let stopped = self.stopped.contains(key);
        let Some(queue) = self.queues.get_mut(key) else {
            return;
        };
        if let Some(at) = queue.ranked.take() {
            self.ready.remove(&at);
        }
        if let Some(&first) = queue.ready.first().filter(|_| !stopped) {
            self.ready.insert(first, key.clone());
            queue.ranked = Some(first);
        }
    }

    /// Whether `key` has messages held (or being written): its new ones are held too.
    pub fn holds(&self, key: &HeldKey) -> bool {
        self.queues.contains_key(key)
    }

    /// When the first message waiting for its time may go.
    pub fn next_due(&self) -> Option<Nanos> {
        self.waiting.keys().next().map(|(at, _)| *at)
    }

    /// Sets how many of `key`'s messages may be released at once (at least one).
    pub fn set_width(&mut self, key: &HeldKey, width: usize) {
        if let Some(queue) = self.queues.get_mut(key) {
            queue.width = width.max(1);
        }
    }

    /// Takes up to `max` messages that may go by `now`, for release: the oldest ready first,
    /// each key's in the order they came and no more at once than its width.
    pub fn take_due(&mut self, now: Nanos, max: usize) -> Vec<Ticket> {
        while let Some(first) = self.waiting.first_entry() {
            if first.key().0 > now {
                break;
            }
            let ((_, seq), key) = first.remove_entry();
            if let Some(queue) = self.queues.get_mut(&key) {
                queue.ready.insert(seq);
            }
            self.rank(&key);
        }
        let mut taken = Vec::new();
        while taken.len() < max {
            let next = (self.ready.values())
                .find_map(|key| Some((key, self.queues.get(key)?.next_to_go()?)));
            let Some((key, seq)) = next.map(|(key, seq)| (key.clone(), seq)) else {
                break;
            };
            let queue = self.queues.get_mut(&key).expect("a ranked key has a queue");
            queue.ready.remove(&seq);
            queue.releasing += 1;
            let entry = queue
                .entries
                .get_mut(&seq)
                .expect("a ready message is held");
            entry.state = State::Releasing;
            entry.attempts += 1;
            taken.push(Ticket {
                id: entry.id.clone(),
                seq,
                key: key.clone(),
                accepted_ms: entry.accepted_ms,
                attempt: entry.attempts,
            });
            self.rank(&key);
        }
        taken
    }

    /// A released (or given up) message's attempt failed for now: it steps aside, to go
    /// again at `at`; its key's other messages go on meanwhile.
    pub fn retry(&mut self, id: &str, at: Nanos, answer: String) {
        let Some((key, seq)) = self.ids.get(id).cloned() else {
            return;
        };
        let Some(queue) = self.queues.get_mut(&key) else {
            return;
        };
        if let Some(entry) = queue.entries.get_mut(&seq) {
            if entry.state == State::Releasing {
                queue.releasing -= 1;
            }
            (entry.state, entry.next, entry.last) = (State::Held, at, Some(answer.into()));
            entry.waits_for = None;
            self.waiting.insert((at, seq), key);
        }
    }

    /// As [`Index::retry`], for a message kept back by `upstream`'s failure.
    pub fn wait_for(&mut self, id: &str, at: Nanos, answer: String, upstream: &str) {
        self.retry(id, at, answer);
        let Some((key, seq)) = self.ids.get(id) else {
            return;
        };
        let entry = (self.queues.get_mut(key)).and_then(|q| q.entries.get_mut(seq));
        if let Some(entry) = entry {
            entry.waits_for = Some(upstream.into());
        }
    }

    /// `upstream` answers again: up to `max` of the messages waiting for it, oldest first,
    /// may go from `now`. How many were.
    pub fn upstream_back(&mut self, upstream: &str, now: Nanos, max: usize) -> usize {
        let mut waiting: Vec<(u64, HeldKey)> = (self.queues.iter())
            .flat_map(|(key, q)| q.entries.values().map(move |e| (e, key)))
            .filter(|(e, _)| e.state == State::Held)
            .filter(|(e, _)| e.waits_for.as_deref() == Some(upstream))
            .map(|(e, key)| (e.seq, key.clone()))
            .collect();
        waiting.sort();
        waiting.truncate(max);
        for (seq, key) in &waiting {
            if let Some(entry) = (self.queues.get_mut(key)).and_then(|q| q.entries.get_mut(seq)) {
                entry.waits_for = None;
            }
            self.ready_now(key, *seq, now);
            self.rank(key);
        }
        waiting.len()
    }

    /// How many messages wait for `upstream` to answer again.
    pub fn waiting_for(&self, upstream: &str) -> usize {
        (self.queues.values().flat_map(|q| q.entries.values()))
            .filter(|e| e.waits_for.as_deref() == Some(upstream))
            .count()
    }

    /// Removes `id` wherever it is (held or failed); its entry and key.
    pub fn remove(&mut self, id: &str) -> Option<(HeldKey, Entry)> {
        if let Some((key, entry)) = self.failed.remove(id) {
            self.free_bytes(&key, entry.bytes);
            return Some((key, entry));
        }
        let (key, seq) = self.ids.remove(id)?;
        let queue = self.queues.get_mut(&key)?;
        let entry = queue.entries.remove(&seq)?;
        match entry.state {
            State::Writing => {
                queue.writing.remove(&seq);
            }
            State::Held => {
                self.waiting.remove(&(entry.next, seq));
                queue.ready.remove(&seq);
            }
            State::Releasing => queue.releasing -= 1,
            State::Failed => {}
        }
        if queue.entries.is_empty() {
            if let Some(at) = queue.ranked {
                self.ready.remove(&at);
            }
            self.queues.remove(&key);
        } else {
            self.rank(&key);
        }
        self.free_bytes(&key, entry.bytes);
        Some((key, entry))
    }

    /// Moves `id` to the failed messages kept for the operator, with why.
    pub fn failed(&mut self, id: &str, answer: String) {
        if let Some((key, mut entry)) = self.remove(id) {
            (entry.state, entry.last) = (State::Failed, Some(answer.into()));
            self.put_failed(key, entry);
        }
    }

    /// Puts a message taken by [`Index::take_failed`] back among the failed.
    pub fn put_failed(&mut self, key: HeldKey, entry: Entry) {
        self.use_bytes(&key, entry.bytes);
        self.failed.insert(entry.id.clone(), (key, entry));
    }
}

#[cfg(test)]
mod tests;
