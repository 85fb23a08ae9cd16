//! The spool on S3 and SQS (`store = "s3"`), shared by every replica: a held message is an
//! object in S3 (`objects`), its place in line an entry in an SQS standard queue
//! (`entries`). Any replica receives entries (`receive`), keeps them invisible to the others
//! while it has them (a heartbeat extends their visibility), releases them through the same
//! index and releaser as the directory store, and deletes entry then object once done.
//!
//! - `client`: the S3 and SQS clients, every call bounded by `timeout_ms` and counted.
//! - `objects`: `<prefix>held/<id>` (the record of `record::encode`), `failed/`, `damaged/`.
//! - `entries`: the entry's JSON, its group (the held key), and the SQS calls.
//! - `receive`: the receiver (long polls while this replica holds fewer than
//!   `receive_max`) and the heartbeat; at shutdown the entries not started are put back.
//! - `releasing`: the releaser's side: an entry taken in, its object read, and what an
//!   attempt did to it (deleted, put back, copied to `failed/` or `damaged/`).
//! - `operator`: what the operators read and do (the summary, lists, one message, removing,
//!   putting failed ones back), and what that costs in requests.
//! - `probe`: whether it can be written (`/readyz`, `mailsluice check`).
//!
//! **What a `250` promises.** [`S3Store::hold`] returns `Ok` only once the object is written
//! (S3 checked its checksum) and its entry sent. Either failing: `452 4.3.1`, and the object
//! deleted; an entry SQS kept although its answer was lost finds no object when received and
//! is dropped, never sent. A replica killed while releasing: its entries come back to the
//! others after `visibility_ms`; the ones it had with upstream then may go twice.

mod client;
mod entries;
mod objects;
pub mod operator;
mod probe;
mod receive;
mod releasing;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_credential_types::provider::SharedCredentialsProvider;
use tokio::sync::Notify;

use super::error::{Refusal, Storage};
use super::index::Index;
use super::record::Meta;
use super::{Spool, SpoolError, Store, ToHold};
use crate::clock::Clock;
use crate::config::{S3Settings, SpoolConfig};
use crate::observe::cause;
use crate::observe::spool_store_metrics::SpoolStoreMetrics;
use client::Clients;
use entries::{Entries, EntryBody};
use objects::{Objects, Place};
pub use probe::ProbeFailed;

/// How often the queue's count (`max_messages`) is read.
const COUNT_EVERY: Duration = Duration::from_secs(5);

impl Spool {
    /// Opens the spool of `config` (`store = "s3"`): its clients built, the queue's count
    /// read. `credentials` when given (tests), else the SDK's default chain.
    pub async fn open_s3(
        config: &SpoolConfig,
        clock: Arc<dyn Clock>,
        metrics: SpoolStoreMetrics,
        credentials: Option<SharedCredentialsProvider>,
    ) -> Result<Arc<Spool>, SpoolError> {
        let settings = config.s3().ok_or(SpoolError::NotS3)?;
        let store = S3Store::open(settings, metrics, credentials).await;
        Ok(Spool::with_store(
            config,
            clock,
            Index::default(),
            Store::S3(store),
        ))
    }

    /// The s3 store, when the spool is one.
    fn s3_store(&self) -> Option<&S3Store> {
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
        Some(receive::start(self.clone(), stop))
    }

    /// At shutdown, once no longer receiving: with S3 and SQS, the entries received and not
    /// started are made visible at once for the other replicas. With a directory they stay
    /// held for the next start: nothing to do.
    pub async fn put_back_unstarted(&self) {
        if let Some(s3) = self.s3_store() {
            s3.put_back_unstarted(self).await;
        }
    }
}

/// An S3 or SQS call that failed or passed `timeout_ms`, in a few words.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct CallFailed(pub String);

impl CallFailed {
    fn of(error: &(dyn std::error::Error + 'static)) -> CallFailed {
        CallFailed(cause::short(error))
    }
}

/// Why a message could not be held: which of its two writes failed.
#[derive(Debug, thiserror::Error)]
enum WriteFailed {
    #[error("S3: {0}")]
    Object(CallFailed),
    #[error("SQS: {0}")]
    Entry(CallFailed),
}

/// The held messages, as this replica counts them against `max_messages`.
#[derive(Default)]
struct Count {
    /// The queue's approximate count at its last read.
    queued: AtomicU64,
    /// This replica's holds since.
    since: AtomicU64,
}

/// The s3 store of one replica.
pub struct S3Store {
    clients: Clients,
    settings: S3Settings,
    objects: Objects,
    entries: Entries,
    /// The receipt handle of each entry this replica holds received, by message id.
    received: Mutex<HashMap<Box<str>, String>>,
    /// An entry this replica held is gone: the receiver may take more.
    freed: Notify,
    /// Makes each `seq` of this process unique within a millisecond.
    counter: AtomicU64,
    count: Arc<Count>,
    /// The receiver stopped (shutdown): the heartbeat ends once no entry is held here.
    stopping: AtomicBool,
    /// Held while visibilities change: a heartbeat's extension never lands after a put-back
    /// made since it read the entries held here.
    visibility: tokio::sync::Mutex<()>,
    /// The operators' last listing of the bucket.
    listings: Box<operator::Listings>,
}

impl S3Store {
    /// The store of `settings`; its queue's count is read now and every [`COUNT_EVERY`]
    /// (a bucket or queue that does not answer is logged, not fatal: `/readyz` says it).
    pub async fn open(
        settings: S3Settings,
        metrics: SpoolStoreMetrics,
        credentials: Option<SharedCredentialsProvider>,
    ) -> S3Store {
        let clients = Clients::build(&settings, credentials, metrics).await;
        let store = S3Store {
            objects: Objects {
                bucket: settings.bucket.clone(),
                prefix: settings.prefix.clone(),
            },
            entries: Entries {
                queue_url: settings.queue_url.clone(),
            },
            clients,
            settings,
            received: Mutex::new(HashMap::new()),
            freed: Notify::new(),
            counter: AtomicU64::new(0),
            count: Arc::new(Count::default()),
            stopping: AtomicBool::new(false),
            visibility: tokio::sync::Mutex::new(()),
            listings: Box::default(),
        };
        match store.entries.count(&store.clients).await {
            Ok(n) => store.count.queued.store(n, Ordering::Relaxed),
            Err(e) => tracing::warn!(
                target: "mailsluice::spool",
                queue = store.settings.queue_url.as_str(),
                error = %e,
                "spool.s3_unreachable: the queue's count could not be read at start"
            ),
        }
        tracing::info!(
            target: "mailsluice::spool",
            bucket = store.settings.bucket.as_str(),
            prefix = store.settings.prefix.as_str(),
            queue = store.settings.queue_url.as_str(),
            "spool opened on S3 and SQS"
        );
        store.count_every(COUNT_EVERY);
        store
    }

    /// Whether a write can be made now (see `probe`).
    pub async fn probe(&self) -> Result<(), ProbeFailed> {
        probe::probe(&self.clients, &self.objects, &self.entries).await
    }

    /// The probe of `settings`'s bucket and queue, with no store opened (`mailsluice check`).
    pub async fn check(
        settings: &S3Settings,
        metrics: SpoolStoreMetrics,
    ) -> Result<(), ProbeFailed> {
        let clients = Clients::build(settings, None, metrics).await;
        let objects = Objects {
            bucket: settings.bucket.clone(),
            prefix: settings.prefix.clone(),
        };
        let entries = Entries {
            queue_url: settings.queue_url.clone(),
        };
        probe::probe(&clients, &objects, &entries).await
    }

    /// Reads the queue's count every `every` while the store lives.
    fn count_every(&self, every: Duration) {
        let (count, clients) = (Arc::downgrade(&self.count), self.clients.clone());
        let entries = Entries {
            queue_url: self.settings.queue_url.clone(),
        };
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(count) = count.upgrade() else {
                    return;
                };
                if let Ok(n) = entries.count(&clients).await {
                    count.queued.store(n, Ordering::Relaxed);
                    count.since.store(0, Ordering::Relaxed);
                }
            }
        });
    }

    fn received(&self) -> std::sync::MutexGuard<'_, HashMap<Box<str>, String>> {
        self.received.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Holds a message: its object written, then its entry sent (see the module doc).
    pub async fn hold(&self, spool: &Spool, message: ToHold<'_>) -> Result<(), Refusal> {
        let max = self.settings.max_messages;
        let held =
            self.count.queued.load(Ordering::Relaxed) + self.count.since.load(Ordering::Relaxed);
        if held >= max {
            return Err(Refusal::Storage(Storage::MaxMessages { max }));
        }
        let accepted_ms = spool.wall_ms();
        let seq = accepted_ms * 1000 + self.counter.fetch_add(1, Ordering::Relaxed) % 1000;
        let (meta, file) = message.record(seq, accepted_ms);
        match self.write(&meta, file).await {
            Ok(()) => {
                spool.writable.store(true, Ordering::Relaxed);
                self.count.since.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(why) => {
                spool.writable.store(false, Ordering::Relaxed);
                tracing::error!(
                    target: "mailsluice::spool",
                    bucket = self.settings.bucket.as_str(),
                    queue = self.settings.queue_url.as_str(),
                    error = %why,
                    "spool.unwritable"
                );
                Err(Refusal::Storage(Storage::Unwritable(why.to_string())))
            }
        }
    }

    /// Writes the object of `meta`'s message, then sends its entry; when the entry is not
    /// sent the object is deleted (its entry, if SQS kept it, finds no object). Why not.
    async fn write(&self, meta: &Meta, file: Vec<u8>) -> Result<(), WriteFailed> {
        let entry = EntryBody::of(meta);
        let name = self.objects.name(Place::Held, &meta.id);
        let c = &self.clients;
        (self.objects.put_new(c, &name, file).await).map_err(WriteFailed::Object)?;
        if let Err(e) = self.entries.send(c, &entry, &meta.key).await {
            let _ = self.objects.delete(c, &name).await;
            return Err(WriteFailed::Entry(e));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
