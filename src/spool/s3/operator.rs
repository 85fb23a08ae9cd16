//! What the operators read of the s3 store and do to it (`GET /spool`, `mailsluice spool`,
//! the status page, the spool's gauges), on the bucket and the queue every replica shares.
//!
//! **What it costs.** The count of held messages is the queue's (its attributes, read every
//! 5 s with `max_messages`'s count: one cheap GetQueueAttributes). The listings of `held/`
//! and `failed/` (the failed count, the bytes, the oldest) are made only when an operator asks
//! and reused for [`LISTING_KEPT`]: listing every 5 s all the time would cost $5 to $52 a month
//! per replica in LIST requests. A listed message's meta is read from the head of its object
//! (a ranged GetObject), [`AT_ONCE`] at a time, for at most `MAX_LISTED` objects.
//!
//! An operator finds a message by its object; its state, attempts and last answer are known
//! only to the replica that received its entry (this one's are shown, the others' read as
//! `held`). Releasing now and stopping a key are refused with this store (`NotWithS3`).

use std::sync::Mutex;
use std::time::Duration;

use super::entries::EntryBody;
use super::objects::Place;
use super::{CallFailed, S3Store};
use crate::clock::Nanos;
use crate::observe::cause;
use crate::spool::index::{Entry, State};
use crate::spool::operator::{Listed, OperatorError, Removed, Summary, MAX_LISTED};
use crate::spool::record::{self, HeldKey, Meta, MAX_META};
use crate::spool::Spool;

/// How long a listing of the bucket is reused for the summary.
pub const LISTING_KEPT: Duration = Duration::from_secs(5);
/// Objects whose heads are read at once.
const AT_ONCE: usize = 16;
/// The first bytes read of an object for its meta; a longer meta is read again, up to
/// `MAX_META`.
const HEAD: usize = 8192;
/// S3's largest page of a listing.
const PAGE: usize = 1000;

/// One object of a listing.
struct Listing {
    id: String,
    size: u64,
    /// Its LastModified, Unix milliseconds: when it was held (or failed).
    modified_ms: u64,
}

/// What the last listing of the bucket found, for the summary.
#[derive(Debug, Clone, Copy, Default)]
struct Figures {
    failed: usize,
    /// Of the objects under `held/` and `failed/`.
    bytes: u64,
    /// The oldest held object's age when listed.
    oldest_ms: u64,
}

/// The last listing made for the summary, and when (the spool's clock).
#[derive(Default)]
pub struct Listings {
    last: Mutex<Option<(Nanos, Figures)>>,
    /// Held while one is made: requests at once share it.
    making: tokio::sync::Mutex<()>,
}

/// One message as an operator finds it: its key, entry, meta, and where its object is.
pub struct Found {
    pub key: HeldKey,
    pub entry: Entry,
    pub meta: Meta,
    place: Place,
}

impl From<CallFailed> for OperatorError {
    fn from(failed: CallFailed) -> OperatorError {
        OperatorError::Store(failed.0)
    }
}

impl S3Store {
    /// The summary: the held messages from the queue's attributes; the failed ones, the bytes
    /// and the oldest from the last listing (see [`S3Store::refresh_listings`]); the oldest
    /// received here counts too, its age now.
    pub fn summary(&self, spool: &Spool) -> Summary {
        let figures = self.last_figures();
        let received_oldest =
            (spool.index().oldest_ms()).map(|ms| spool.wall_ms().saturating_sub(ms));
        Summary {
            messages: self.count.queued.load(std::sync::atomic::Ordering::Relaxed) as usize,
            failed: figures.failed,
            bytes: figures.bytes,
            oldest_ms: figures.oldest_ms.max(received_oldest.unwrap_or(0)),
        }
    }

    fn last_figures(&self) -> Figures {
        let last = self.listings.last.lock().unwrap_or_else(|e| e.into_inner());
        last.map(|(_, figures)| figures).unwrap_or_default()
    }

    /// Lists `held/` and `failed/` for the summary, unless a listing is younger than
    /// [`LISTING_KEPT`].
    pub async fn refresh_listings(&self, spool: &Spool) -> Result<(), CallFailed> {
        let fresh = || {
            let last = self.listings.last.lock().unwrap_or_else(|e| e.into_inner());
            last.is_some_and(|(at, _)| {
                spool.clock.now().saturating_sub(at) < LISTING_KEPT.as_nanos() as u64
            })
        };
        if fresh() {
            return Ok(());
        }
        let _making = self.listings.making.lock().await;
        if fresh() {
            return Ok(());
        }
        let (held, _) = self.list_place(Place::Held, MAX_LISTED).await?;
        let (failed, _) = self.list_place(Place::Failed, MAX_LISTED).await?;
        let now_ms = spool.wall_ms();
        let figures = Figures {
            failed: failed.len(),
            bytes: held.iter().chain(&failed).map(|o| o.size).sum(),
            oldest_ms: (held
                .iter()
                .map(|o| now_ms.saturating_sub(o.modified_ms))
                .max())
            .unwrap_or(0),
        };
        let mut last = self.listings.last.lock().unwrap_or_else(|e| e.into_inner());
        *last = Some((spool.clock.now(), figures));
        Ok(())
    }

    /// Up to `max` objects of `place` (ListObjectsV2, page by page), and whether there are
    /// more.
    async fn list_place(
        &self,
        place: Place,
        max: usize,
    ) -> Result<(Vec<Listing>, bool), CallFailed> {
        let prefix = self.objects.name(place, "");
        let (c, mut listed, mut token) = (&self.clients, Vec::new(), None);
        loop {
            let page = (max - listed.len()).min(PAGE);
            if page == 0 {
                return Ok((listed, token.is_some()));
            }
            let list = (c.s3.list_objects_v2())
                .bucket(&self.objects.bucket)
                .prefix(&prefix)
                .max_keys(page as i32)
                .set_continuation_token(token.take())
                .send();
            let got = c.call("s3", "ListObjectsV2", list).await;
            let got = got.map_err(|e| CallFailed::of(&e))?;
            for object in got.contents.unwrap_or_default() {
                let Some(id) = (object.key.as_deref()).and_then(|k| k.strip_prefix(&prefix)) else {
                    continue;
                };
                let modified = object.last_modified.and_then(|t| t.to_millis().ok());
                listed.push(Listing {
                    id: id.to_string(),
                    size: object.size.unwrap_or(0).max(0) as u64,
                    modified_ms: modified.unwrap_or(0).max(0) as u64,
                });
            }
            token = got
                .next_continuation_token
                .filter(|_| got.is_truncated == Some(true));
            if token.is_none() {
                return Ok((listed, false));
            }
        }
    }

    /// The meta of object `name`, read from its head (a ranged GetObject); `None` when there
    /// is no such object or its head is not a spool record's.
    async fn head_meta(&self, name: &str) -> Result<Option<Meta>, CallFailed> {
        let mut len = HEAD;
        loop {
            let Some(head) = self.get_head(name, len).await? else {
                return Ok(None);
            };
            match record::meta_of(&head) {
                Ok(meta) => return Ok(Some(meta)),
                Err(_) if head.len() == len && len < MAX_META => len = MAX_META,
                Err(_) => return Ok(None),
            }
        }
    }

    /// The first `len` bytes of object `name`; `None` when there is none.
    async fn get_head(&self, name: &str, len: usize) -> Result<Option<Vec<u8>>, CallFailed> {
        let c = &self.clients;
        let get = (c.s3.get_object())
            .bucket(&self.objects.bucket)
            .key(name)
            .range(format!("bytes=0-{}", len - 1))
            .send();
        let got = match c.call("s3", "GetObject", get).await {
            Ok(got) => got,
            Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => return Ok(None),
            Err(e) => return Err(CallFailed::of(&e)),
        };
        let bytes = got.body.collect().await;
        let bytes = bytes.map_err(|e| CallFailed(cause::short(&e)))?;
        Ok(Some(bytes.to_vec()))
    }

    /// What an operator sees of message `id` of `place`, from its meta: this replica's entry
    /// when it received it, else one made from the meta (never tried here).
    fn found(&self, spool: &Spool, place: Place, meta: Meta) -> Found {
        let here = spool.index().get(&meta.id).map(|(_, entry)| entry);
        let entry = here.unwrap_or_else(|| Entry {
            id: meta.id.as_str().into(),
            seq: meta.seq,
            bytes: meta.lens.iter().sum(),
            accepted_ms: meta.accepted_ms,
            state: match place {
                Place::Failed => State::Failed,
                _ => State::Held,
            },
            attempts: 0,
            next: 0,
            last: None,
            report: meta.report,
            waits_for: None,
        });
        Found {
            key: meta.key.clone(),
            entry,
            meta,
            place,
        }
    }

    /// Message `id`, held or failed, as its object says.
    pub async fn find(&self, spool: &Spool, id: &str) -> Result<Option<Found>, CallFailed> {
        for place in [Place::Held, Place::Failed] {
            let name = self.objects.name(place, id);
            if let Some(meta) = self.head_meta(&name).await? {
                return Ok(Some(self.found(spool, place, meta)));
            }
        }
        Ok(None)
    }

    /// The messages of `key` (every key when `None`) among the first `MAX_LISTED` objects:
    /// held ones by key in their order, then failed ones by arrival (only those with
    /// `failed_only`).
    pub async fn list(
        &self,
        spool: &Spool,
        key: Option<&HeldKey>,
        failed_only: bool,
    ) -> Result<Listed, CallFailed> {
        let (found, truncated) = self.find_all(spool, key, failed_only).await?;
        Ok(Listed {
            total: found.len(),
            messages: found.into_iter().map(|f| (f.key, f.entry)).collect(),
            truncated,
        })
    }

    /// As [`S3Store::list`], each with its meta and place; and whether objects were left
    /// unlisted.
    async fn find_all(
        &self,
        spool: &Spool,
        key: Option<&HeldKey>,
        failed_only: bool,
    ) -> Result<(Vec<Found>, bool), CallFailed> {
        let places = match failed_only {
            true => &[Place::Failed][..],
            false => &[Place::Held, Place::Failed][..],
        };
        let (mut found, mut more) = (Vec::new(), false);
        let mut listed = 0;
        for &place in places {
            let (objects, more_here) = self.list_place(place, MAX_LISTED - listed).await?;
            (listed, more) = (listed + objects.len(), more || more_here);
            for batch in objects.chunks(AT_ONCE) {
                let names: Vec<String> = (batch.iter())
                    .map(|o| self.objects.name(place, &o.id))
                    .collect();
                let metas = names.iter().map(|name| self.head_meta(name));
                for meta in futures_util::future::join_all(metas).await {
                    // Gone since the listing (released, removed): not listed.
                    if let Some(meta) = meta? {
                        found.push(self.found(spool, place, meta));
                    }
                }
            }
        }
        found.retain(|f| key.is_none_or(|key| *key == f.key));
        found.sort_by_key(|f| match f.place {
            Place::Failed => (true, None, f.entry.seq),
            _ => (false, Some(f.key.clone()), f.entry.seq),
        });
        Ok((found, more))
    }

    /// Removes message `found`: a held one received here with its entry, one held elsewhere
    /// by its object (its entry, when received, finds it gone and is dropped), a failed one by
    /// its object. Not one with upstream here (`false`).
    pub async fn remove_found(&self, spool: &Spool, found: &Found) -> Result<bool, CallFailed> {
        if matches!(found.entry.state, State::Releasing | State::Writing) {
            return Ok(false);
        }
        if found.place == Place::Held && spool.index().get(&found.meta.id).is_some() {
            self.remove(spool, &found.meta.id).await;
            return Ok(true);
        }
        let name = self.objects.name(found.place, &found.meta.id);
        self.objects.delete(&self.clients, &name).await?;
        Ok(true)
    }

    /// Removes the messages of `key` among the first `MAX_LISTED` objects; those with
    /// upstream here stay.
    pub async fn remove_key(&self, spool: &Spool, key: &HeldKey) -> Result<Removed, CallFailed> {
        let (found, _) = self.find_all(spool, Some(key), false).await?;
        let mut done = Removed {
            removed: 0,
            busy: 0,
        };
        for one in &found {
            match self.remove_found(spool, one).await? {
                true => done.removed += 1,
                false => done.busy += 1,
            }
        }
        Ok(done)
    }

    /// Puts failed message `id` back: its object copied to `held/`, a new entry sent (tried
    /// now by whichever replica receives it), its `failed/` object deleted. Whether it was a
    /// failed message.
    pub async fn requeue(&self, id: &str) -> Result<bool, CallFailed> {
        let c = &self.clients;
        let failed = self.objects.name(Place::Failed, id);
        let Some(meta) = self.head_meta(&failed).await? else {
            return Ok(false);
        };
        let held = self.objects.name(Place::Held, id);
        self.objects.copy(c, &failed, &held).await?;
        let entry = EntryBody::of(&meta);
        if let Err(e) = self.entries.send(c, &entry, &meta.key).await {
            // Still failed: the copy, without an entry, would never go.
            let _ = self.objects.delete(c, &held).await;
            return Err(e);
        }
        if let Err(e) = self.objects.delete(c, &failed).await {
            tracing::warn!(target: "mailsluice::spool", id, error = %e, "spool.requeue: its failed/ object stays (the bucket's lifecycle rule expires it)");
        }
        Ok(true)
    }

    /// Puts every failed message back (the first `MAX_LISTED`); how many. Stops at the first
    /// that cannot be.
    pub async fn requeue_failed(&self) -> Result<usize, CallFailed> {
        let (failed, _) = self.list_place(Place::Failed, MAX_LISTED).await?;
        let mut requeued = 0;
        for object in failed {
            if self.requeue(&object.id).await? {
                requeued += 1;
            }
        }
        Ok(requeued)
    }
}
