//! The guard with its state in Redis (`[redis]` set), so that every replica and every event
//! consumer agree: a tenant paused by events read on one replica is refused by all of them,
//! an address suppressed through one is refused by all, an event delivered twice (to two
//! consumers) counts once, and an operator's resume on one resumes everywhere.
//!
//! What lives where: Redis holds the counts, the attribution, the feedback ids and the
//! suppressions (`calls`, which says the keys); the verdict is judged here, by the same pure
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
//! Redis is left alone for [`crate::redis::RETRY`] ([`crate::redis::Outage`]: mail then goes
//! at once, not after a timeout each). An event is the exception: it is refused
//! ([`RedisUnavailable::Unanswered`]), so that SQS delivers it again (and SNS posts it again)
//! rather than lose it.
//!
//! Files: `calls.rs` ([`RedisLedger`]: the calls, their keys, what their answers mean),
//! `cache.rs` (the verdicts), the scripts `add.lua`, `flip.lua`, `suppress.lua` and
//! `unsuppress.lua`. Here: failing open, and the [`ReputationStore`] over the calls.

mod cache;
pub mod calls;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;

use cache::VerdictCache;
pub use cache::REFRESH;
pub use calls::{Bounds, RedisLedger, TenantHash};

use super::{ReputationFuture, ReputationStore};
use crate::clock::{Clock, Nanos};
use crate::config::ReputationConfig;
use crate::redis::{Outage, RedisOptions, RedisUnavailable};
use crate::reputation::events::Event;
use crate::reputation::ledger::{self, breach, in_window, Breach, Change, Counts, Limits};
use crate::reputation::report::{event_counts, standing_of};
use crate::reputation::suppression::Suppression;
use crate::reputation::{limits, Applied, Standing};

/// The guard's state in Redis; see the module doc.
pub struct RedisReputation {
    redis: RedisLedger,
    limits: Limits,
    slot_ms: u64,
    suppress: bool,
    clock: Arc<dyn Clock>,
    cache: Mutex<VerdictCache>,
    /// Redis left alone for a while after a call failed.
    outage: Outage,
    /// `mailsluice_reputation_store_errors_total`: the calls Redis did not answer.
    errors: Counter,
    unattributed: AtomicU64,
}

impl RedisReputation {
    /// Checks the URLs; connects lazily, on the first call. `errors` counts the calls Redis
    /// did not answer.
    pub fn new(
        config: &ReputationConfig,
        redis: &RedisOptions,
        clock: Arc<dyn Clock>,
        errors: Counter,
    ) -> Result<RedisReputation, RedisUnavailable> {
        let bounds = Bounds {
            window_ms: config.window_ms.get(),
            slot_ms: slot_ms(config.window()),
            suppress_ttl_ms: config.suppress_ttl_ms.get(),
            max_tenants: config.max_tenants.get(),
            max_suppressed: config.max_suppressed.get(),
        };
        let limits = limits(config);
        Ok(RedisReputation {
            redis: RedisLedger::new(redis, bounds)?,
            slot_ms: slot_ms(limits.window),
            limits,
            suppress: config.suppress,
            outage: Outage::new(clock.clone()),
            clock,
            cache: Mutex::new(VerdictCache::new(config.max_tenants.get())),
            errors,
            unattributed: AtomicU64::new(0),
        })
    }

    fn cache(&self) -> MutexGuard<'_, VerdictCache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Unix milliseconds on the injected clock.
    fn now_ms(&self) -> u64 {
        unix_ms(self.clock.as_ref())
    }

    /// Runs `call` unless Redis is resting after a failure; `None` when it did not answer.
    async fn guarded<T>(
        &self,
        what: &'static str,
        call: impl std::future::Future<Output = Result<T, RedisUnavailable>>,
    ) -> Option<T> {
        if self.outage.resting() {
            self.errors.inc();
            return None;
        }
        match call.await {
            Ok(answer) => {
                if self.outage.answered() {
                    tracing::info!(target: "mailsluice::reputation", "reputation.store_back");
                }
                Some(answer)
            }
            Err(e) => {
                self.errors.inc();
                if self.outage.failed() {
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
    async fn judge(&self, key: &str, hash: TenantHash, now: Nanos) -> (Option<Breach>, Change) {
        let counts = in_window(hash.slots.iter().copied(), self.now_ms() / self.slot_ms);
        let breach = breach(self.limits, counts);
        self.cache().put(key, breach, now);
        let change = ledger::change(hash.over, breach.as_ref());
        if change == Change::None {
            return (breach, Change::None);
        }
        match self
            .guarded("flip", self.redis.flip(key, breach.is_some()))
            .await
        {
            Some(true) => (breach, change),
            _ => (breach, Change::None),
        }
    }

    /// A new event (not a repeat): `None` when Redis did not answer.
    async fn apply_new(&self, event: &Event, date: String) -> Option<Applied> {
        let recorded = self.redis.tenant_of(&event.message_id);
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
            let call = self.redis.suppress(&lower, Some(&why), self.now_ms());
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
        let added = (self.redis).add(&tenant, event_counts(event), None, self.now_ms());
        let hash = self.guarded("count", added).await?;
        let (breach, change) = self.judge(&tenant, hash, now).await;
        Some(Applied::Counted {
            kind: event.kind,
            tenant: Some(Arc::from(tenant)),
            change,
            breach,
        })
    }
}

impl ReputationStore for RedisReputation {
    fn standing<'a>(&'a self, key: &'a str) -> ReputationFuture<'a, (Option<Breach>, Change)> {
        Box::pin(async move {
            let now = self.clock.now();
            if self.cache().in_good_standing(key, now) {
                return (None, Change::None);
            }
            match self.guarded("standing", self.redis.read(key)).await {
                Some(hash) => self.judge(key, hash, now).await,
                None => (None, Change::None),
            }
        })
    }

    fn add<'a>(
        &'a self,
        key: &'a str,
        counts: Counts,
        message_id: Option<&'a str>,
    ) -> ReputationFuture<'a, (Option<Breach>, Change)> {
        Box::pin(async move {
            let now = self.clock.now();
            let added = self.redis.add(key, counts, message_id, self.now_ms());
            match self.guarded("count", added).await {
                Some(hash) => self.judge(key, hash, now).await,
                None => (None, Change::None),
            }
        })
    }

    fn suppress<'a>(
        &'a self,
        addresses: &'a [String],
        why: Suppression,
    ) -> ReputationFuture<'a, ()> {
        Box::pin(async move {
            let lower: Vec<String> = addresses.iter().map(|a| a.to_ascii_lowercase()).collect();
            let call = self.redis.suppress(&lower, Some(&why), self.now_ms());
            self.guarded("suppress", call).await;
        })
    }

    /// An error when Redis does not answer (the event is then not applied, and may come
    /// again).
    fn apply<'a>(
        &'a self,
        event: &'a Event,
        date: String,
    ) -> ReputationFuture<'a, Result<Applied, RedisUnavailable>> {
        Box::pin(async move {
            if let Some(feedback) = &event.feedback_id {
                let seen = (self.guarded("feedback", self.redis.first_seen(feedback))).await;
                match seen {
                    Some(true) => {}
                    Some(false) => return Ok(Applied::Repeat(event.kind)),
                    None => return Err(RedisUnavailable::Unanswered),
                }
            }
            let applied = self.apply_new(event, date).await;
            if let (None, Some(feedback)) = (&applied, &event.feedback_id) {
                // Counted in part at most: let it come again (its suppressions are idempotent).
                let _ = self.redis.forget_feedback(feedback).await;
            }
            applied.ok_or(RedisUnavailable::Unanswered)
        })
    }

    fn suppressed<'a>(&'a self, address: &'a str) -> ReputationFuture<'a, Option<Suppression>> {
        Box::pin(async move {
            let lower = address.to_ascii_lowercase();
            let call = self.redis.suppression(&lower, self.now_ms());
            self.guarded("suppressed", call).await.flatten()
        })
    }

    fn unsuppress<'a>(
        &'a self,
        address: &'a str,
    ) -> ReputationFuture<'a, Result<bool, RedisUnavailable>> {
        Box::pin(async move { self.redis.unsuppress(&address.to_ascii_lowercase()).await })
    }

    fn resume<'a>(&'a self, key: &'a str) -> ReputationFuture<'a, Result<bool, RedisUnavailable>> {
        Box::pin(async move {
            let resumed = self.redis.resume(key).await?;
            self.cache().forget(key);
            Ok(resumed)
        })
    }

    fn standings(&self) -> ReputationFuture<'_, Result<Vec<Standing>, RedisUnavailable>> {
        Box::pin(async move {
            let now_slot = self.now_ms() / self.slot_ms;
            let tenants = self.redis.tenants(self.now_ms()).await?;
            Ok((tenants.into_iter())
                .map(|(key, hash)| {
                    let counts = in_window(hash.slots, now_slot);
                    standing_of(key, counts, breach(self.limits, counts))
                })
                .collect())
        })
    }

    fn suppressed_count(&self) -> ReputationFuture<'_, Result<usize, RedisUnavailable>> {
        Box::pin(async move {
            let held = self.redis.suppress(&[], None, self.now_ms()).await?;
            Ok(usize::try_from(held).unwrap_or(usize::MAX))
        })
    }

    /// As this replica last read them (for the gauge, read without Redis).
    fn paused(&self) -> usize {
        self.cache().paused()
    }

    /// Read by this replica.
    fn unattributed(&self) -> u64 {
        self.unattributed.load(Ordering::Relaxed)
    }

    fn tracked(&self) -> Option<usize> {
        None
    }

    fn is_shared(&self) -> bool {
        true
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
