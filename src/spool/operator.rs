//! What the operators read of the spool and do to it: its counts and its keys, its messages
//! listed, one message's entry and meta, messages tried now (a failed one put back in its
//! queue), a key's messages removed, a key stopped (kept across restarts: `stopped`)
//! (`admin::spool`, the status page, the metrics); and the failed messages past their time.
//! With S3 and SQS the same, on the shared bucket and queue (`s3::operator`), but for what
//! only the directory store can do ([`NotWithS3`]).

use super::index::{Entry, KeyCount, State};
use super::layout::file_name;
use super::record::{self, HeldKey, Meta};
use super::{recover, stopped, Spool, Store};

/// Messages listed at most in one answer: the list is built in memory.
pub const MAX_LISTED: usize = 10_000;

/// Some messages of the spool, and how many there are in all.
#[derive(Debug, Clone)]
pub struct Listed {
    pub messages: Vec<(HeldKey, Entry)>,
    pub total: usize,
    /// Messages were left out: past `MAX_LISTED` (with S3, objects left unlisted).
    pub truncated: bool,
}

/// What removing a key's messages did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    pub removed: usize,
    /// Being written or with upstream: left in place.
    pub busy: usize,
}

/// What removing one message did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemovedOne {
    Removed,
    NotFound,
    /// Being written or with upstream: left in place.
    Busy,
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

/// What an operator may not do with `store = "s3"`, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotWithS3 {
    #[error(
        "not with spool.store = \"s3\": a held message's next try is its entry's visibility in \
         SQS, and its entry may be invisible, received by another replica; a failed message is \
         put back with requeue"
    )]
    Release,
    #[error(
        "not with spool.store = \"s3\": a key's entries are in SQS, received by whichever \
         replica asks next; no replica can stop or let go a key"
    )]
    StopKey,
}

/// Why an operator's request was not done.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error(transparent)]
    NotWithS3(#[from] NotWithS3),
    /// The directory store's file could not be moved.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// S3 or SQS failed, or did not answer within `timeout_ms` (a call's error, in a few
    /// words).
    #[error("S3 or SQS: {0}")]
    Store(String),
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

    /// One message's key and entry, as this process's index has it.
    pub fn get(&self, id: &str) -> Option<(HeldKey, Entry)> {
        self.index().get(id)
    }

    /// One message: its key, entry and meta (with S3, read from its object).
    pub async fn message(&self, id: &str) -> Result<Option<(HeldKey, Entry, Meta)>, OperatorError> {
        if let Store::S3(s3) = &self.store {
            let found = s3.find(self, id).await?;
            return Ok(found.map(|f| (f.key, f.entry, f.meta)));
        }
        let Some((key, entry)) = self.get(id) else {
            return Ok(None);
        };
        Ok(self.meta(id).await.map(|meta| (key, entry, meta)))
    }

    /// The meta of message `id` (its envelope and origin), read from its file.
    async fn meta(&self, id: &str) -> Option<Meta> {
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

    /// Whether the spool is on S3 and SQS, shared by every replica (`store = "s3"`).
    pub fn shared(&self) -> bool {
        matches!(self.store, Store::S3(_))
    }

    /// `refused` with `store = "s3"` (see [`NotWithS3`]).
    fn dir_only(&self, refused: NotWithS3) -> Result<(), NotWithS3> {
        match &self.store {
            Store::Dir(_) => Ok(()),
            Store::S3(_) => Err(refused),
        }
    }

    /// Lets message `id` go now (an operator's release); whether it was waiting at its key's
    /// head. Refused with S3 and SQS.
    pub fn release_now(&self, id: &str) -> Result<bool, NotWithS3> {
        self.dir_only(NotWithS3::Release)?;
        let now = self.clock.now();
        let moved = self.index().now(id, now);
        self.changed.notify_one();
        Ok(moved)
    }

    /// Puts failed message `id` back in its key's queue, to be tried now, as `postsuper -r`
    /// does: its file moved back to `held/` (with S3, its object copied back and a new entry
    /// sent). Whether it was a failed message.
    pub async fn requeue(&self, id: &str) -> Result<bool, OperatorError> {
        let dir = match &self.store {
            Store::Dir(dir) => dir,
            Store::S3(s3) => return Ok(s3.requeue(id).await?),
        };
        let Some((key, entry)) = self.index().take_failed(id) else {
            return Ok(false);
        };
        let name = file_name(entry.seq, id);
        let (from, to) = (dir.layout.failed.join(&name), dir.layout.held.join(&name));
        let moved = tokio::task::spawn_blocking(move || std::fs::rename(from, to)).await;
        if let Err(e) = moved.map_err(std::io::Error::other).and_then(|moved| moved) {
            self.index().put_failed(key, entry);
            return Err(e.into());
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
    /// error when that write failed (the change holds until the relay stops). Refused with S3
    /// and SQS.
    pub async fn stop_key(&self, key: &HeldKey, stop: bool) -> Result<(), OperatorError> {
        self.dir_only(NotWithS3::StopKey)?;
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
        Ok(written.map_err(std::io::Error::other)??)
    }

    /// The first [`MAX_LISTED`] messages of `key` (every key when `None`): held ones by key
    /// in their order, then failed ones (only those with `failed_only`).
    pub async fn list(
        &self,
        key: Option<&HeldKey>,
        failed_only: bool,
    ) -> Result<Listed, OperatorError> {
        if let Store::S3(s3) = &self.store {
            return Ok(s3.list(self, key, failed_only).await?);
        }
        let (messages, total) = self.index().list(key, failed_only, MAX_LISTED);
        let truncated = total > messages.len();
        Ok(Listed {
            messages,
            total,
            truncated,
        })
    }

    /// Lets the messages of `key` (every key when `None`) that wait out a backoff go now,
    /// as `postqueue -f` does; a stopped key's stay. How many were made due. Refused with S3
    /// and SQS.
    pub fn release_waiting(&self, key: Option<&HeldKey>) -> Result<usize, NotWithS3> {
        self.dir_only(NotWithS3::Release)?;
        let now = self.clock.now();
        let mut index = self.index();
        let (held, _) = index.list(key, false, usize::MAX);
        let released = (held.iter())
            .filter(|(key, entry)| !index.is_stopped(key) && index.now(&entry.id, now))
            .count();
        drop(index);
        self.changed.notify_one();
        Ok(released)
    }

    /// Removes message `id`, held or failed, as `postsuper -d` does; not one being written or
    /// with upstream now. With S3, its object is deleted: its entry, when received, finds it
    /// gone and is dropped.
    pub async fn remove_one(&self, id: &str) -> Result<RemovedOne, OperatorError> {
        if let Store::S3(s3) = &self.store {
            let Some(found) = s3.find(self, id).await? else {
                return Ok(RemovedOne::NotFound);
            };
            return Ok(match s3.remove_found(self, &found).await? {
                true => RemovedOne::Removed,
                false => RemovedOne::Busy,
            });
        }
        match self.get(id).map(|(_, e)| e.state) {
            None => Ok(RemovedOne::NotFound),
            Some(State::Releasing | State::Writing) => Ok(RemovedOne::Busy),
            Some(State::Held | State::Failed) => {
                self.remove(id).await;
                Ok(RemovedOne::Removed)
            }
        }
    }

    /// Removes every message of `key`, held or failed, as `postsuper -d` does; those being
    /// written or with upstream now stay.
    pub async fn remove_key(&self, key: &HeldKey) -> Result<Removed, OperatorError> {
        if let Store::S3(s3) = &self.store {
            return Ok(s3.remove_key(self, key).await?);
        }
        let (entries, _) = self.index().list(Some(key), false, usize::MAX);
        let (idle, busy): (Vec<_>, Vec<_>) = (entries.into_iter())
            .partition(|(_, e)| matches!(e.state, State::Held | State::Failed));
        // Side by side: their directory syncs are shared.
        let removals = idle.iter().map(|(_, e)| self.remove(&e.id));
        let removed = futures_util::future::join_all(removals).await;
        Ok(Removed {
            removed: removed.into_iter().filter(|&r| r).count(),
            busy: busy.len(),
        })
    }

    /// Puts every failed message back in its key's queue (`postsuper -r ALL`); how many.
    /// Stops at the first that cannot be moved back (it stays failed).
    pub async fn requeue_failed(&self) -> Result<usize, OperatorError> {
        if let Store::S3(s3) = &self.store {
            return Ok(s3.requeue_failed().await?);
        }
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

    /// The spool's counts. With S3: the queue's count, and what the last listing found
    /// ([`Spool::refresh`]).
    pub fn summary(&self) -> Summary {
        if let Store::S3(s3) = &self.store {
            return s3.summary(self);
        }
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

    /// Before an operator reads the summary: with S3, the bucket listed (failed, bytes, the
    /// oldest) unless it was a moment ago; with a directory, nothing to do.
    pub async fn refresh(&self) -> Result<(), OperatorError> {
        if let Store::S3(s3) = &self.store {
            s3.refresh_listings(self).await?;
        }
        Ok(())
    }

    /// Each key's messages (`oldest_ms`: Unix milliseconds of its first); with S3, of the
    /// entries this replica has received.
    pub fn keys(&self) -> Vec<KeyCount> {
        self.index().keys()
    }
}
