//! The guard with its state in Redis (`[redis]` set), so that every replica and every event
//! consumer agree: a tenant paused by events read on one replica is refused by all of them,
//! an address suppressed through one is refused by all, an event delivered twice (to two
//! consumers) counts once, and an operator's resume on one resumes everywhere.
//!
//! What lives where: Redis holds the counts, the attribution, the feedback ids and the
//! suppressions (`store`, which says the keys); the verdict is judged here, by the same pure
//! math as in process (`ledger::in_window`, `ledger::breach`). Each replica keeps its recent
//! verdicts (`cache`): a message asks Redis its tenant's standing at most once a [`REFRESH`],
//! and each message forwarded is one script call, whose answer refreshes that verdict too.
//! A suppression is one `HGET` per RCPT. Slots are numbered on each replica's clock, in Unix
//! time: replicas whose clocks differ by seconds agree on hour-long slots.
//!
//! **When Redis does not answer** (down, or past `[redis] timeout_ms`), the guard fails open:
//! no tenant is paused and no address suppressed by it, the messages forwarded meanwhile are
//! not counted, a warning is logged when Redis goes away and a note when it is back, and each
//! call that failed counts in `mailsluice_reputation_store_errors_total`. After a failure
//! Redis is left alone for [`RETRY`] (mail then goes at once, not after a timeout each). An
//! event is the exception: it is refused ([`EventError::Unavailable`]), so that SQS delivers
//! it again (and SNS posts it again) rather than lose it.

mod cache;
pub mod store;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;

use cache::VerdictCache;
pub use cache::REFRESH;
pub use store::{Bounds, Held, RedisLedger};

use super::events::Event;
use super::ledger::{self, breach, in_window, Breach, Change, Counts, Limits};
use super::suppression::Suppression;
use super::{Applied, Standing};
use crate::clock::{nanos, Clock, Nanos};
use crate::redis::RedisUnavailable;

/// How long Redis is left alone after a failed call (as the throttle's shared layers do).
pub const RETRY: Duration = Duration::from_secs(1);

pub struct Shared {
    store: RedisLedger,
    limits: Limits,
    slot_ms: u64,
    suppress: bool,
    clock: Arc<dyn Clock>,
    cache: Mutex<VerdictCache>,
    /// The clock's instant before which Redis is not asked (after a failure).
    retry_at: AtomicU64,
    down: AtomicBool,
    errors: Counter,
    unattributed: AtomicU64,
}

impl Shared {
    pub fn new(
        store: RedisLedger,
        limits: Limits,
        max_tenants: usize,
        suppress: bool,
        clock: Arc<dyn Clock>,
        errors: Counter,
    ) -> Shared {
        Shared {
            store,
            slot_ms: slot_ms(limits.window),
            limits,
            suppress,
            clock,
            cache: Mutex::new(VerdictCache::new(max_tenants)),
            retry_at: AtomicU64::new(0),
            down: AtomicBool::new(false),
            errors,
            unattributed: AtomicU64::new(0),
        }
    }

    fn cache(&self) -> MutexGuard<'_, VerdictCache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Unix milliseconds on the injected clock.
    fn now_ms(&self) -> u64 {
        unix_ms(self.clock.as_ref())
    }

    /// Runs `call` unless Redis failed within [`RETRY`]; `None` when it did not answer.
    async fn guarded<T>(
        &self,
        what: &'static str,
        call: impl std::future::Future<Output = Result<T, RedisUnavailable>>,
    ) -> Option<T> {
        let now = self.clock.now();
        if now < self.retry_at.load(Ordering::Relaxed) {
            self.errors.inc();
            return None;
        }
        match call.await {
            Ok(answer) => {
                if self.down.swap(false, Ordering::Relaxed) {
                    tracing::info!(target: "mailsluice::reputation", "reputation.store_back");
                }
                Some(answer)
            }
            Err(e) => {
                self.errors.inc();
                let retry = self.clock.now().saturating_add(nanos(RETRY));
                self.retry_at.store(retry, Ordering::Relaxed);
                if !self.down.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        target: "mailsluice::reputation",
                        error = %e,
                        call = what,
                        "reputation.store_unavailable: no tenant paused, no address suppressed \
                         by the guard until Redis answers"
                    );
                }
                None
            }
        }
    }

    /// `key`'s verdict from its hash, remembered; the change, when this replica made it.
    async fn judge(&self, key: &str, held: Held, now: Nanos) -> (Option<Breach>, Change) {
        let counts = in_window(held.slots.iter().copied(), self.now_ms() / self.slot_ms);
        let breach = breach(self.limits, counts);
        self.cache().put(key, breach, now);
        let change = ledger::change(held.over, breach.as_ref());
        if change == Change::None {
            return (breach, Change::None);
        }
        match self
            .guarded("flip", self.store.flip(key, breach.is_some()))
            .await
        {
            Some(true) => (breach, change),
            _ => (breach, Change::None),
        }
    }

    pub async fn standing(&self, key: &str) -> (Option<Breach>, Change) {
        let now = self.clock.now();
        if self.cache().in_good_standing(key, now) {
            return (None, Change::None);
        }
        match self.guarded("standing", self.store.read(key)).await {
            Some(held) => self.judge(key, held, now).await,
            None => (None, Change::None),
        }
    }

    /// Counts `counts` for `key` (and remembers its message); its verdict after.
    pub async fn add(
        &self,
        key: &str,
        counts: Counts,
        message_id: Option<&str>,
    ) -> (Option<Breach>, Change) {
        let now = self.clock.now();
        let added = self.store.add(key, counts, message_id, self.now_ms());
        match self.guarded("count", added).await {
            Some(held) => self.judge(key, held, now).await,
            None => (None, Change::None),
        }
    }

    /// Suppresses `addresses` (fails open: not suppressed when Redis does not answer).
    pub async fn suppress_all(&self, addresses: &[String], why: Suppression) {
        let lower: Vec<String> = addresses.iter().map(|a| a.to_ascii_lowercase()).collect();
        let call = self.store.suppress(&lower, Some(&why), self.now_ms());
        self.guarded("suppress", call).await;
    }

    /// One event, new or a repeat; an error when Redis does not answer (the event is then
    /// not applied, and may come again).
    pub async fn apply(&self, event: &Event, date: String) -> Result<Applied, RedisUnavailable> {
        if let Some(feedback) = &event.feedback_id {
            let seen = self
                .guarded("feedback", self.store.first_seen(feedback))
                .await;
            match seen {
                Some(true) => {}
                Some(false) => return Ok(Applied::Repeat(event.kind)),
                None => return Err(RedisUnavailable::Unanswered),
            }
        }
        let applied = self.apply_new(event, date).await;
        if let (None, Some(feedback)) = (&applied, &event.feedback_id) {
            // Counted in part at most: let it come again (its suppressions are idempotent).
            let _ = self.store.forget_feedback(feedback).await;
        }
        applied.ok_or(RedisUnavailable::Unanswered)
    }

    async fn apply_new(&self, event: &Event, date: String) -> Option<Applied> {
        let recorded = self.store.tenant_of(&event.message_id);
        let tenant = self.guarded("attribution", recorded).await?;
        let tenant = tenant.or_else(|| event.tenant.clone());
        if self.suppress && !event.recipients.is_empty() {
            let lower: Vec<String> = (event.recipients.iter())
                .map(|a| a.to_ascii_lowercase())
                .collect();
            let why = Suppression {
                reason: event.kind,
                date,
            };
            let call = self.store.suppress(&lower, Some(&why), self.now_ms());
            self.guarded("suppress", call).await?;
        }
        let Some(tenant) = tenant else {
            self.unattributed.fetch_add(1, Ordering::Relaxed);
            return Some(Applied::Counted {
                kind: event.kind,
                tenant: None,
                change: Change::None,
                breach: None,
            });
        };
        let now = self.clock.now();
        let added = self
            .store
            .add(&tenant, super::event_counts(event), None, self.now_ms());
        let held = self.guarded("count", added).await?;
        let (breach, change) = self.judge(&tenant, held, now).await;
        Some(Applied::Counted {
            kind: event.kind,
            tenant: Some(Arc::from(tenant)),
            change,
            breach,
        })
    }

    /// Why `address` is refused at RCPT (fails open).
    pub async fn suppressed(&self, address: &str) -> Option<Suppression> {
        let lower = address.to_ascii_lowercase();
        let call = self.store.suppression(&lower, self.now_ms());
        self.guarded("suppressed", call).await.flatten()
    }

    pub async fn unsuppress(&self, address: &str) -> Result<bool, RedisUnavailable> {
        self.store.unsuppress(&address.to_ascii_lowercase()).await
    }

    pub async fn resume(&self, key: &str) -> Result<bool, RedisUnavailable> {
        let resumed = self.store.resume(key).await?;
        self.cache().forget(key);
        Ok(resumed)
    }

    pub async fn standings(&self) -> Result<Vec<Standing>, RedisUnavailable> {
        let now_slot = self.now_ms() / self.slot_ms;
        let tenants = self.store.tenants(self.now_ms()).await?;
        Ok((tenants.into_iter())
            .map(|(key, held)| {
                let counts = in_window(held.slots, now_slot);
                super::standing_of(key, counts, breach(self.limits, counts))
            })
            .collect())
    }

    pub async fn suppressed_count(&self) -> Result<usize, RedisUnavailable> {
        let held = self.store.suppress(&[], None, self.now_ms()).await?;
        Ok(usize::try_from(held).unwrap_or(usize::MAX))
    }

    /// Tenants paused as this replica last read them (for the gauge, read without Redis).
    pub fn paused_here(&self) -> usize {
        self.cache().paused()
    }

    /// Events read by this replica whose message no tenant was known for.
    pub fn unattributed(&self) -> u64 {
        self.unattributed.load(Ordering::Relaxed)
    }
}

/// A slot's length in whole milliseconds (Redis's slots are numbered in Unix milliseconds).
pub fn slot_ms(window: Duration) -> u64 {
    ledger::slot_len(window).div_ceil(1_000_000).max(1)
}

/// Unix milliseconds at `clock`'s now: its Unix origin plus its monotonic time.
pub fn unix_ms(clock: &dyn Clock) -> u64 {
    (clock.unix_secs_at(0).saturating_mul(1000)).saturating_add(clock.now() / 1_000_000)
}
