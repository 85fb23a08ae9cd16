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
//! - `operator`: what the operators read and do (counts, lists, one message, a key stopped).
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

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

pub use error::{Damaged, Refusal, SpoolError, Storage, Unread};
use index::Bounds;
pub use index::{Entry, State, Ticket};
pub use record::{Held, HeldKey, Meta, Origin};

use aws_credential_types::provider::SharedCredentialsProvider;

use crate::clock::Clock;
use crate::config::SpoolConfig;
use crate::message::Envelope;
use crate::observe::spool_store_metrics::SpoolStoreMetrics;
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

/// A message to hold.
pub struct ToHold<'a> {
    pub id: &'a str,
    pub key: HeldKey,
    pub envelope: &'a Envelope,
    pub origin: Origin,
    /// Our `Received:` field.
    pub received: &'a [u8],
    /// Fields read only for the identity at release (a report's: its original's header).
    pub key_fields: &'a [u8],
    pub body: &'a [u8],
    /// The key's `max_held`; `None` for a report, which a full key (or one past its share
    /// of the spool) still takes.
    pub max_held: Option<usize>,
    pub report: bool,
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

/// Where the held messages are kept.
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

    /// Opens the spool of `config` (`store = "s3"`): its clients built, its bucket and queue
    /// tried (an error names them). `credentials` when given (tests), else the SDK's chain.
    pub async fn open_s3(
        config: &SpoolConfig,
        clock: Arc<dyn Clock>,
        metrics: SpoolStoreMetrics,
        credentials: Option<SharedCredentialsProvider>,
    ) -> Result<Arc<Spool>, SpoolError> {
        let settings = config.s3().ok_or(SpoolError::NotS3)?;
        let store = s3::S3Store::open(settings, metrics, credentials).await;
        Ok(Spool::with_store(
            config,
            clock,
            Index::default(),
            Store::S3(store),
        ))
    }

    /// The s3 store, when the spool is one.
    fn s3_store(&self) -> Option<&s3::S3Store> {
        match &self.store {
            Store::Dir(_) => None,
            Store::S3(s3) => Some(s3),
        }
    }

    /// With S3 and SQS: starts receiving entries (and extending their visibility) until
    /// `stop` completes; the task ends then. With a directory, nothing to receive: `None`.
    pub fn start_receiving(
        self: &Arc<Self>,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Option<tokio::task::JoinHandle<()>> {
        self.s3_store()?;
        Some(s3::receive::start(self.clone(), stop))
    }

    /// At shutdown, once no longer receiving: with S3 and SQS, the entries received and not
    /// started are made visible at once for the other replicas. With a directory they stay
    /// held for the next start: nothing to do.
    pub async fn put_back_unstarted(&self) {
        if let Some(s3) = self.s3_store() {
            s3.put_back_unstarted(self).await;
        }
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
            Store::S3(s3) => return s3.hold(self, message).await,
        };
        let accepted_ms = self.wall_ms();
        let runs = [message.received, message.key_fields, message.body];
        let bytes: u64 = runs.iter().map(|r| r.len() as u64).sum();
        let bounds = Bounds {
            max_held: message.max_held,
            share: (!message.report).then(|| self.config.key_share_bytes()),
            max_bytes: self.config.max_bytes,
        };
        let seq = (self.index()).reserve(&message.key, message.id, bytes, accepted_ms, bounds)?;
        let mut meta = Meta {
            id: message.id.to_string(),
            seq,
            accepted_ms,
            key: message.key,
            from: message.envelope.from.clone(),
            rcpts: message.envelope.rcpts.clone(),
            smtputf8: message.envelope.smtputf8,
            body_8bit: message.envelope.body_8bit,
            origin: message.origin,
            report: message.report,
            lens: [0; 3],
        };
        let file = record::encode(&mut meta, runs);
        let name = file_name(seq, message.id);
        match self.write(dir, name, file).await {
            Ok(()) => {
                self.writable.store(true, Ordering::Relaxed);
                (self.index()).written(message.id, message.report, self.clock.now());
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
                self.index().remove(message.id);
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
    /// synced and removed), so that `/readyz` sees the spool come back.
    pub async fn writable(&self) -> bool {
        if self.writable.load(Ordering::Relaxed) {
            return true;
        }
        let Some(dir) = self.dir_store() else {
            return false;
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
