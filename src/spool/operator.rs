//! What the operators read of the spool and do to it: its counts and its keys, its messages
//! listed, one message's entry and meta, messages tried now (a failed one put back in its
//! queue), a key's messages removed, a key stopped (kept across restarts: `stopped`)
//! (`admin::spool`, the status page, the metrics); and the failed messages past their time.

use super::index::{Entry, KeyCount, State};
use super::layout::file_name;
use super::record::{self, HeldKey, Meta};
use super::{recover, stopped, Spool};

/// Messages listed at most in one answer: the list is built in memory.
pub const MAX_LISTED: usize = 10_000;

/// Some messages of the spool, and how many there are in all.
#[derive(Debug, Clone)]
pub struct Listed {
    pub messages: Vec<(HeldKey, Entry)>,
    pub total: usize,
}

/// What removing a key's messages did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    pub removed: usize,
    /// Being written or with upstream: left in place.
    pub busy: usize,
}

/// The spool's counts, for `/spool` and the metrics.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub messages: usize,
    pub failed: usize,
    pub bytes: u64,
    /// The oldest held message's age, in milliseconds (0 when none).
    pub oldest_ms: u64,
}

impl Spool {
    /// The failed messages held past `max_hold_ms`.
    pub fn failed_expired(&self) -> Vec<Box<str>> {
        let before = self
            .wall_ms()
            .saturating_sub(self.config.max_hold_ms.get_ref().get());
        let failed = self.index().failed_before(before);
        failed.into_iter().map(|(_, e)| e.id).collect()
    }

    /// One message's key and entry.
    pub fn get(&self, id: &str) -> Option<(HeldKey, Entry)> {
        self.index().get(id)
    }

    /// The meta of message `id` (its envelope and origin), read from its file.
    pub async fn meta(&self, id: &str) -> Option<Meta> {
        let (_, entry) = self.get(id)?;
        let layout = &self.dir_store()?.layout;
        let dir = match entry.state {
            State::Failed => &layout.failed,
            _ => &layout.held,
        };
        let path = dir.join(file_name(entry.seq, id));
        let head = tokio::task::spawn_blocking(move || recover::read_head(&path)).await;
        record::meta_of(&head.ok()?.ok()?).ok()
    }

    /// Lets message `id` go now (an operator's release); whether it was waiting at its key's
    /// head.
    pub fn release_now(&self, id: &str) -> bool {
        let now = self.clock.now();
        let moved = self.index().now(id, now);
        self.changed.notify_one();
        moved
    }

    /// Puts failed message `id` back in its key's queue, to be tried now, as `postsuper -r`
    /// does: its file moved back to `held/`. Whether it was a failed message.
    pub async fn requeue(&self, id: &str) -> std::io::Result<bool> {
        let Some(dir) = self.dir_store() else {
            return Ok(false);
        };
        let Some((key, entry)) = self.index().take_failed(id) else {
            return Ok(false);
        };
        let name = file_name(entry.seq, id);
        let (from, to) = (dir.layout.failed.join(&name), dir.layout.held.join(&name));
        let moved = tokio::task::spawn_blocking(move || std::fs::rename(from, to)).await;
        if let Err(e) = moved.map_err(std::io::Error::other).and_then(|moved| moved) {
            self.index().put_failed(key, entry);
            return Err(e);
        }
        let _ = dir.held_sync.sync().await;
        let _ = dir.failed_sync.sync().await;
        let now = self.clock.now();
        self.index().requeue(&key, entry, now);
        self.changed.notify_one();
        Ok(true)
    }

    /// Stops releasing `key`'s messages, or lets them go again (an operator's hold), and
    /// writes the keys stopped to the spool's directory, so that a restart keeps them; an
    /// error when that write failed (the change holds until the relay stops).
    pub async fn stop_key(&self, key: &HeldKey, stop: bool) -> std::io::Result<()> {
        let now = self.clock.now();
        self.index().stop(key, stop, now);
        self.changed.notify_one();
        let Some(dir) = self.dir_store() else {
            return Ok(());
        };
        let _writing = dir.stopped_file.lock().await;
        // Read under the lock: whichever write comes last has every change made before it.
        let keys = self.index().stopped_keys();
        let layout = dir.layout.clone();
        let written = tokio::task::spawn_blocking(move || stopped::write(&layout, &keys)).await;
        written.map_err(std::io::Error::other)?
    }

    /// The first [`MAX_LISTED`] messages of `key` (every key when `None`): held ones by key
    /// in their order, then failed ones (only those with `failed_only`).
    pub fn list(&self, key: Option<&HeldKey>, failed_only: bool) -> Listed {
        let (messages, total) = self.index().list(key, failed_only, MAX_LISTED);
        Listed { messages, total }
    }

    /// Lets the messages of `key` (every key when `None`) that wait out a backoff go now,
    /// as `postqueue -f` does; a stopped key's stay. How many were made due.
    pub fn release_waiting(&self, key: Option<&HeldKey>) -> usize {
        let now = self.clock.now();
        let mut index = self.index();
        let (held, _) = index.list(key, false, usize::MAX);
        let released = (held.iter())
            .filter(|(key, entry)| !index.is_stopped(key) && index.now(&entry.id, now))
            .count();
        drop(index);
        self.changed.notify_one();
        released
    }

    /// Removes every message of `key`, held or failed, as `postsuper -d` does; those being
    /// written or with upstream now stay.
    pub async fn remove_key(&self, key: &HeldKey) -> Removed {
        let (entries, _) = self.index().list(Some(key), false, usize::MAX);
        let (idle, busy): (Vec<_>, Vec<_>) = (entries.into_iter())
            .partition(|(_, e)| matches!(e.state, State::Held | State::Failed));
        // Side by side: their directory syncs are shared.
        let removals = idle.iter().map(|(_, e)| self.remove(&e.id));
        let removed = futures_util::future::join_all(removals).await;
        Removed {
            removed: removed.into_iter().filter(|&r| r).count(),
            busy: busy.len(),
        }
    }

    /// Puts every failed message back in its key's queue (`postsuper -r ALL`); how many.
    /// Stops at the first that cannot be moved back (it stays failed).
    pub async fn requeue_failed(&self) -> std::io::Result<usize> {
        let (failed, _) = self.index().list(None, true, usize::MAX);
        let mut requeued = 0;
        for (_, entry) in failed {
            if self.requeue(&entry.id).await? {
                requeued += 1;
            }
        }
        Ok(requeued)
    }

    /// Whether an operator stopped `key`.
    pub fn is_stopped(&self, key: &HeldKey) -> bool {
        self.index().is_stopped(key)
    }

    pub fn summary(&self) -> Summary {
        let index = self.index();
        let (messages, failed, bytes) = index.totals();
        let oldest = index.oldest_ms();
        Summary {
            messages,
            failed,
            bytes,
            oldest_ms: oldest.map_or(0, |ms| self.wall_ms().saturating_sub(ms)),
        }
    }

    /// Each key's messages (`oldest_ms`: Unix milliseconds of its first).
    pub fn keys(&self) -> Vec<KeyCount> {
        self.index().keys()
    }
}
