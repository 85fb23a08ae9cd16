//! The spool: where a hold-mode layer keeps the messages it answered `250` for and has not
//! forwarded yet. Without `[spool]` there is none, and the relay never owns a message.
//!
//! Two stores behind [`Spool`] (`store`): a directory of this process (`store = "dir"`, the
//! files below), or S3 and SQS shared by every replica (`store = "s3"`, `s3/`: one object per
//! message, one entry per message in a queue). Callers see one `Spool` either way; the index
//! in memory holds, with a directory, every message held, and with S3 and SQS the entries
//! this replica received.
//!
//! Files, one concept each:
//! - `layout`: the directory (`tmp/`, `held/`, `failed/`, `damaged/`, `lock`) and the file
//!   names; why one file per message.
//! - `to_hold`: a message to hold as the pipeline hands it over, and its record.
//! - `record`: one message's file: its meta ([`Meta`]: key, envelope, origin, age) and bytes,
//!   with a digest.
//! - `lock`: one process per directory.
//! - `open`: the directory made, locked and tried, as the start and `check` do it.
//! - `commit`: the directory's sync, one for the messages that arrive together.
//! - `room`: the filesystem's free space.
//! - `index`: the spool in memory: a queue per [`HeldKey`], the messages that may go, the
//!   counts and the bounds they are held to (a key's share of the spool among them).
//! - `recover`: the spool read back at start; damaged files set aside.
//! - `releasing`: the releaser's side: messages taken, read back, and put back in their place
//!   after an attempt (removed, stepped aside, failed, set aside).
//! - `operator`: what the operators read and do (counts, lists, one message, a key stopped);
//!   with S3 and SQS in `s3::operator`.
//! - `stopped`: the keys an operator stopped, kept across restarts.
//! - `error`: why it would not open, hold, or read back.
//! - `sync_log`: (the crate's tests only) each sync, in order, for the tests of the `250`.
//! - `s3`: the store on S3 and SQS (its own module doc lists its files).
//!
//! **What a `250` promises, with a directory.** [`Spool::hold`] returns only once the
//! message's file is synced and renamed into `held/` and that directory is synced: a crash at
//! any instant after loses nothing that got `250`, and a file that is not whole is never in
//! `held/` (and its digest would refuse it). The one duplicate: upstream took a released
//! message and the relay died before it removed the file; the restart sends it again. What is
//! held is on this replica's disk: while it is down, so is its mail.
//!
//! **What a `250` promises, with S3 and SQS.** [`Spool::hold`] returns only once the message's
//! object is written (S3 checked its SHA-256; never over another) and its entry is in the
//! queue: it outlives the replica, and any replica releases it. Either call failing or past
//! `timeout_ms` is `452 4.3.1`, the object deleted; an entry whose object is gone is dropped
//! unsent. Duplicates: a replica killed (or stalled past `visibility_ms`) while releasing; its
//! entries come back to the others, and those it had with upstream may go twice (at most
//! `receive_max`, and at most the releaser's 64 in flight). Order per key is the accept order
//! as the replicas' clocks allow (`seq` = `accepted_ms * 1000 + n`), kept among the entries one
//! replica has received; a standard queue does not keep it across them.
//!
//! This module only stores: the releaser (`release/`) decides when a message goes, and the
//! pipeline (`pipeline/hold.rs`, for a session) when one is held.

mod commit;
mod error;
mod index;
mod layout;
mod lock;
mod open;
mod operator;
mod record;
mod recover;
mod releasing;
mod room;
mod s3;
mod stopped;
#[cfg(test)]
mod sync_log;
mod to_hold;

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

pub use error::{Damaged, Refusal, SpoolError, Storage, Unread};
use index::Bounds;
pub use index::{Entry, State, Ticket};
pub use operator::{NotWithS3, OperatorError, RemovedOne};
pub use record::{Held, HeldKey, Meta, Origin};
pub use to_hold::ToHold;

use crate::clock::Clock;
use crate::config::SpoolConfig;
use commit::DirSync;
use index::Index;
use layout::{file_name, Layout};
use lock::DirLock;

/// What the start logs, and `check` prints, of a spool with less free space than
/// `min_free_bytes`.
fn low_space_text(layout: &Layout, low: &Storage) -> String {
    format!(
        "spool directory {}: {low}: messages are refused until there is room",
        layout.root.display()
    )
}

fn warn_low_space(layout: &Layout, low: &Storage) {
    tracing::warn!(target: "mailsluice::spool", "{}", low_space_text(layout, low));
}

/// The spool: its store, and in memory the messages this process may release (with a
/// directory: every one held; with S3 and SQS: the entries this replica received).
pub struct Spool {
    config: SpoolConfig,
    index: Mutex<Index>,
    /// The queues' clock; a message's age is read on it too (tokio's paused time in tests).
    clock: Arc<dyn Clock>,
    /// The last write succeeded (`/readyz`).
    writable: AtomicBool,
    /// A message became due, or the releaser should look again.
    changed: Notify,
    store: Store,
}

/// Where the held messages are kept. One per process: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Store {
    Dir(DirStore),
    S3(s3::S3Store),
}

/// The directory store: this process's directory, locked for it.
struct DirStore {
    layout: Layout,
    held_sync: DirSync,
    failed_sync: DirSync,
    /// Held while the stopped keys are written: the last write has the last change.
    stopped_file: tokio::sync::Mutex<()>,
    _lock: DirLock,
}

impl Spool {
    /// Opens (creating) the spool of `config`, locked for this process, read back. Must be
    /// called within a tokio runtime (its directory syncs run on it).
    pub fn open(config: &SpoolConfig, clock: Arc<dyn Clock>) -> Result<Arc<Spool>, SpoolError> {
        let dir = config.dir().ok_or(SpoolError::NotADirectory)?;
        let open::Opened {
            layout,
            lock,
            low_space,
        } = open::open_dir(dir, config)?;
        if let Some(low) = low_space {
            warn_low_space(&layout, &low);
        }
        let io = |error| SpoolError::Io {
            dir: dir.to_path_buf(),
            error,
        };
        let mut index = Index::default();
        let found = recover::recover(&layout, &mut index).map_err(io)?;
        let stopped = stopped::read(&layout)?;
        for key in &stopped {
            index.stop(key, true, 0);
        }
        tracing::info!(
            target: "mailsluice::spool",
            dir = %layout.root.display(),
            held = found.held,
            failed = found.failed,
            damaged = found.damaged,
            unfinished = found.unfinished,
            stopped_keys = stopped.len(),
            "spool opened"
        );
        let store = Store::Dir(DirStore {
            held_sync: DirSync::start(layout.held.clone()),
            failed_sync: DirSync::start(layout.failed.clone()),
            layout,
            stopped_file: tokio::sync::Mutex::new(()),
            _lock: lock,
        });
        Ok(Spool::with_store(config, clock, index, store))
    }

    fn with_store(
        config: &SpoolConfig,
        clock: Arc<dyn Clock>,
        index: Index,
        store: Store,
    ) -> Arc<Spool> {
        Arc::new(Spool {
            config: config.clone(),
            index: Mutex::new(index),
            clock,
            writable: AtomicBool::new(true),
            changed: Notify::new(),
            store,
        })
    }

    /// The directory store, when the spool is one.
    fn dir_store(&self) -> Option<&DirStore> {
        match &self.store {
            Store::Dir(dir) => Some(dir),
            Store::S3(_) => None,
        }
    }

    /// What the start would find opening the spool of `config` (`check`): an error that stops
    /// it, or the warning it would log. Takes the lock and lets it go.
    pub fn check(config: &SpoolConfig) -> Result<Option<String>, SpoolError> {
        let Some(dir) = config.dir() else {
            return Ok(None);
        };
        let opened = open::open_dir(dir, config)?;
        Ok(opened
            .low_space
            .map(|low| low_space_text(&opened.layout, &low)))
    }

    fn index(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn config(&self) -> &SpoolConfig {
        &self.config
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Unix milliseconds now, on the spool's clock.
    pub fn wall_ms(&self) -> u64 {
        self.clock.unix_ms_at(self.clock.now())
    }

    /// Holds a message: on stable storage when this returns `Ok` (see the module doc), due for
    /// release at once (behind its key's earlier messages).
    pub async fn hold(&self, message: ToHold<'_>) -> Result<(), Refusal> {
        let dir = match &self.store {
            Store::Dir(dir) => dir,
            // Boxed: the SDK's futures are deep types, kept out of the sessions' own.
            Store::S3(s3) => return Box::pin(s3.hold(self, message)).await,
        };
        let accepted_ms = self.wall_ms();
        let (id, report, bytes) = (message.id, message.report, message.bytes());
        let bounds = Bounds {
            max_held: message.max_held,
            share: (!report).then(|| self.config.key_share_bytes()),
            max_bytes: self.config.max_bytes,
        };
        let seq = (self.index()).reserve(&message.key, id, bytes, accepted_ms, bounds)?;
        let (_, file) = message.record(seq, accepted_ms);
        let name = file_name(seq, id);
        match self.write(dir, name, file).await {
            Ok(()) => {
                self.writable.store(true, Ordering::Relaxed);
                (self.index()).written(id, report, self.clock.now());
                self.changed.notify_one();
                Ok(())
            }
            Err(storage) => {
                if matches!(storage, Storage::Unwritable(_)) {
                    self.writable.store(false, Ordering::Relaxed);
                    tracing::error!(
                        target: "mailsluice::spool",
                        dir = %dir.layout.root.display(),
                        error = %storage,
                        "spool.unwritable"
                    );
                }
                self.index().remove(id);
                Err(Refusal::Storage(storage))
            }
        }
    }

    /// Writes `file` as `held/<name>`: its free space checked, written in `tmp/`, synced,
    /// renamed, and `held/` synced (with whoever else wrote meanwhile).
    async fn write(&self, dir: &DirStore, name: String, file: Vec<u8>) -> Result<(), Storage> {
        let (layout, min_free) = (dir.layout.clone(), self.config.min_free_bytes);
        let to = layout.held.join(&name);
        let target = to.clone();
        let written = tokio::task::spawn_blocking(move || {
            room::leaves_free(&layout.root, file.len() as u64, min_free)?;
            let tmp = layout.tmp.join(&name);
            let written = write_synced(&tmp, &file).and_then(|()| std::fs::rename(&tmp, &to));
            #[cfg(test)]
            if written.is_ok() {
                sync_log::record(sync_log::Step::Renamed(to.clone()));
            }
            written.map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                Storage::Unwritable(e.to_string())
            })
        });
        written
            .await
            .unwrap_or_else(|e| Err(Storage::Unwritable(e.to_string())))?;
        if let Err(e) = dir.held_sync.sync().await {
            // Not durable, so not answered `250`: it must not be sent after a restart either.
            let _ = std::fs::remove_file(target);
            return Err(Storage::Unwritable(e.to_string()));
        }
        Ok(())
    }

    /// Whether `key` has messages held: its new ones are held behind them.
    pub fn holds(&self, key: &HeldKey) -> bool {
        self.index().holds(key)
    }

    /// Whether the last write succeeded; when it did not, tries one now (a probe file written,
    /// synced and removed; with S3 and SQS a probe object put and deleted and the queue read),
    /// so that `/readyz` sees the spool come back.
    pub async fn writable(&self) -> bool {
        if self.writable.load(Ordering::Relaxed) {
            return true;
        }
        let dir = match &self.store {
            Store::Dir(dir) => dir,
            Store::S3(s3) => {
                let probed = s3.probe().await;
                if let Err(e) = &probed {
                    tracing::warn!(target: "mailsluice::spool", error = %e, "spool.probe_failed: the spool cannot be written");
                }
                self.writable.store(probed.is_ok(), Ordering::Relaxed);
                return probed.is_ok();
            }
        };
        let tmp = dir.layout.tmp.join("probe");
        let ok = tokio::task::spawn_blocking(move || {
            let ok = write_synced(&tmp, b"probe").is_ok();
            let _ = std::fs::remove_file(&tmp);
            ok
        })
        .await
        .unwrap_or(false);
        self.writable.store(ok, Ordering::Relaxed);
        ok
    }

    /// Completes when a message may have become due; the releaser looks again then.
    pub async fn changed(&self) {
        self.changed.notified().await
    }

    /// Wakes the releaser (room for another attempt).
    pub fn nudge(&self) {
        self.changed.notify_one();
    }
}

/// Writes `bytes` to a new file at `path` and syncs its data.
fn write_synced(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = (std::fs::OpenOptions::new().write(true).create_new(true)).open(path)?;
    file.write_all(bytes)?;
    file.sync_data()?;
    #[cfg(test)]
    sync_log::record(sync_log::Step::File(path.to_path_buf()));
    Ok(())
}

#[cfg(test)]
mod tests;
