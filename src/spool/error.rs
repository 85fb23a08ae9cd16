//! Why the spool could not open, why it would not hold a message, why a directory sync did
//! not happen, and why a held message could not be read back.

use std::path::PathBuf;
use std::sync::Arc;

/// The spool could not be opened at start: the relay does not start. Each says its cause in
/// its text and has no `source`: `main` prints the whole chain, which would say it twice.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("spool directory {dir}: {error}")]
    Io { dir: PathBuf, error: std::io::Error },
    #[error(
        "spool directory {dir} is in use by another mailsluice process{}: one process per spool directory",
        pid.as_deref().map_or(String::new(), |p| format!(" (pid {p})"))
    )]
    Locked { dir: PathBuf, pid: Option<String> },
    #[error(transparent)]
    Stopped(#[from] StoppedUnreadable),
    /// `Spool::open` was given a `store = "s3"` config: the s3 store opens apart.
    #[error("spool.store is not \"dir\": no directory to open")]
    NotADirectory,
    /// `Spool::open_s3` was given a config without the s3 store's settings.
    #[error("spool.store is not \"s3\"")]
    NotS3,
}

/// The keys an operator stopped (`DIR/stopped`) are there but cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("{path} (the keys an operator stopped) cannot be read: {why}; fix or remove it")]
pub struct StoppedUnreadable {
    pub path: String,
    pub why: String,
}

/// Why a message was not held.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The key holds `max_held` messages already: the layer's `451 4.7.1`.
    #[error("{held} messages held for this key, its max_held")]
    KeyFull { held: usize },
    /// The key holds its share of the spool already (`max_key_share`): the layer's `451
    /// 4.7.1`, as for a full key.
    #[error("{bytes} bytes held for this key, its share of the spool ({share} bytes)")]
    OverShare { bytes: u64, share: u64 },
    /// The spool's bounds or its disk: `452 4.3.1 Insufficient system storage`.
    #[error("{0}")]
    Storage(Storage),
}

/// What of the spool's storage refused a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Storage {
    #[error("the spool would pass its max_bytes ({max} bytes)")]
    MaxBytes { max: u64 },
    #[error("the spool's filesystem would keep less than min_free_bytes ({min} bytes) free")]
    MinFree { min: u64 },
    /// Writing or syncing failed (a full disk, a read-only filesystem, an I/O error; S3 or
    /// SQS failing or past `timeout_ms`).
    #[error("the spool cannot be written: {0}")]
    Unwritable(String),
    /// The s3 store holds `max_messages` already (its queue's approximate count).
    #[error("the spool would pass its max_messages ({max} messages)")]
    MaxMessages { max: u64 },
}

/// A directory sync did not happen: what was renamed into the directory may not last.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SyncFailed {
    /// The spool's sync task is gone (the runtime shutting down).
    #[error("the spool is closed")]
    Closed,
    /// Opening or syncing the directory failed; shared by every caller the sync answers.
    #[error("{0}")]
    Io(Arc<std::io::Error>),
}

/// Why a held message was not read back for its attempt.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unread {
    /// Not whole or not ours: set aside.
    #[error(transparent)]
    Damaged(#[from] Damaged),
    /// Its object is gone (an entry whose hold was answered `452`, or removed by an
    /// operator): its entry is dropped already, it is never sent.
    #[error("its object is gone")]
    Gone,
    /// The store did not answer: tried again later.
    #[error("the spool cannot be read: {0}")]
    Unavailable(String),
}

/// A held message's file could not be read back whole: set aside.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Damaged(pub String);
