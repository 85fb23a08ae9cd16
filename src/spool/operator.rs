//! What the operators read of the spool and do to it: its counts and its keys, one message's
//! entry and meta, a message tried now (a failed one put back in its queue), a key stopped
//! (`admin::spool`, the status page, the metrics); and the failed messages past their time.

use super::index::{Entry, KeyCount, State};
use super::layout::file_name;
use super::record::{self, HeldKey, Meta};
use super::{recover, Spool};

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
        let before = self.wall_ms().saturating_sub(self.config.max_hold_ms.get());
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
        let dir = match entry.state {
            State::Failed => &self.layout.failed,
            _ => &self.layout.held,
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
        let Some((key, entry)) = self.index().take_failed(id) else {
            return Ok(false);
        };
        let name = file_name(entry.seq, id);
        let (from, to) = (self.layout.failed.join(&name), self.layout.held.join(&name));
        let moved = tokio::task::spawn_blocking(move || std::fs::rename(from, to)).await;
        if let Err(e) = moved.map_err(std::io::Error::other).and_then(|moved| moved) {
            self.index().put_failed(key, entry);
            return Err(e);
        }
        let _ = self.held_sync.sync().await;
        let _ = self.failed_sync.sync().await;
        let now = self.clock.now();
        self.index().requeue(&key, entry, now);
        self.changed.notify_one();
        Ok(true)
    }

    /// Stops releasing `key`'s messages, or lets them go again (an operator's hold).
    pub fn stop_key(&self, key: &HeldKey, stopped: bool) {
        let now = self.clock.now();
        self.index().stop(key, stopped, now);
        self.changed.notify_one();
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
