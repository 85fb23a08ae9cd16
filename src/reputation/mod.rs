//! The tenant reputation guard. SES tells the account of bounces and complaints after its
//! `250`, by events; this module counts them per tenant against the messages the tenant sent,
//! and says when a tenant is past a limit, so that one tenant's stale list does not get the
//! whole shared account paused.
//!
//! - `events`: SES's event records, both shapes, parsed (pure).
//! - `ledger`: per tenant, sent / bounces / complaints over a sliding window, and the verdict.
//! - `attribution`: SES's message id -> the tenant that sent it, for the window.
//! - `suppression`: addresses refused at RCPT after a hard bounce or a complaint.
//! - `expiring`: the bounded, expiring map the last two (and the repeat check) are made of.
//! - `sns_signature`: SNS's signed messages (`POST /ses/events`) checked (pure);
//!   `sns_verifier`: their certificates fetched and kept, subscriptions confirmed.
//! - `operator`: what the admin endpoint and the status page read and change.
//! - `intake`: one event record from SQS or SNS, applied and counted.
//! - `shared`: the same state in Redis when `[redis]` is set, shared by every replica.
//!
//! [`Reputation`] holds them behind one lock (or in Redis), on an injected clock; the session
//! asks it at MAIL, RCPT and the final dot, the event sources (SQS, SNS) feed it, the admin
//! endpoint reads and resets it. It answers; its callers reply, count and log.

use std::sync::{Arc, Mutex, MutexGuard};

use prometheus_client::metrics::counter::Counter;
use serde::Serialize;

use crate::clock::nanos;
use crate::clock::Clock;
use crate::config::{Action, KeySource, ReputationConfig};
use crate::redis::{RedisOptions, RedisUnavailable};

pub mod attribution;
pub mod events;
mod expiring;
pub mod intake;
pub mod ledger;
mod operator;
mod report;
pub mod shared;
pub mod sns_signature;
pub mod sns_verifier;
pub mod suppression;

pub use events::{EventError, Kind};
pub use ledger::{Breach, Change, Counts};
pub use suppression::Suppression;

use attribution::Attribution;
use events::{Event, Parsed};
use expiring::{Expiring, Inserted};
use ledger::{Ledger, Limits};
pub use report::date_of;
use report::{event_counts, log_change, standing_of};
use shared::{Bounds, RedisLedger, Shared};
use suppression::Suppressions;

/// What applying one event record did, for the caller's log line and metric.
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    /// A bounce or complaint counted; `tenant` is `None` when no tenant is known for its
    /// message (unattributed: only its addresses are suppressed).
    Counted {
        kind: Kind,
        tenant: Option<Arc<str>>,
        /// The tenant's verdict after it, when it changed.
        change: Change,
        breach: Option<Breach>,
    },
    /// The same feedback again (SQS delivers at least once): nothing counted.
    Repeat(Kind),
    /// Not a hard bounce nor a complaint.
    Ignored,
}

/// One tenant's standing, for `GET /reputation` and the status page.
#[derive(Debug, Clone, Serialize)]
pub struct Standing {
    pub key: String,
    pub sent: u64,
    pub bounces: u64,
    pub complaints: u64,
    pub bounce_rate: f64,
    pub complaint_rate: f64,
    pub paused: bool,
}

struct State {
    ledger: Ledger,
    attribution: Attribution,
    /// Feedback ids applied within the window.
    seen: Expiring<()>,
    suppressions: Suppressions,
    unattributed: u64,
}

pub struct Reputation {
    pub key: KeySource,
    pub default_key: String,
    pub action: Action,
    pub suppress: bool,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    /// In Redis instead of `state`, when `[redis]` is set.
    shared: Option<Shared>,
}

fn limits(config: &ReputationConfig) -> Limits {
    Limits {
        max_bounce_rate: *config.max_bounce_rate.get_ref(),
        max_complaint_rate: *config.max_complaint_rate.get_ref(),
        min_messages: config.min_messages.get(),
        window: config.window(),
    }
}

impl Reputation {
    /// The guard with its state in Redis, shared by every replica (see `shared`); `errors`
    /// counts the calls Redis did not answer.
    pub fn with_redis(
        config: &ReputationConfig,
        clock: Arc<dyn Clock>,
        redis: &RedisOptions,
        errors: Counter,
    ) -> Result<Reputation, RedisUnavailable> {
        let bounds = Bounds {
            window_ms: config.window_ms.get(),
            slot_ms: shared::slot_ms(config.window()),
            suppress_ttl_ms: config.suppress_ttl_ms.get(),
            max_tenants: config.max_tenants.get(),
            max_suppressed: config.max_suppressed.get(),
        };
        let store = RedisLedger::new(redis, bounds)?;
        let max = config.max_tenants.get();
        let shared = Shared::new(
            store,
            limits(config),
            max,
            config.suppress,
            clock.clone(),
            errors,
        );
        Ok(Reputation {
            shared: Some(shared),
            ..Reputation::new(config, clock)
        })
    }

    /// The guard with its state in this process.
    pub fn new(config: &ReputationConfig, clock: Arc<dyn Clock>) -> Reputation {
        let limits = limits(config);
        let window = nanos(config.window());
        let tracked = config.max_tracked_messages.get();
        let state = State {
            ledger: Ledger::new(limits, config.max_tenants.get()),
            attribution: Attribution::new(tracked, window),
            seen: Expiring::new(tracked, window),
            suppressions: Suppressions::new(
                config.max_suppressed.get(),
                config.suppress_ttl_ms.get().saturating_mul(1_000_000),
            ),
            unattributed: 0,
        };
        Reputation {
            key: config.key.0.clone(),
            default_key: config.default_key.clone(),
            action: config.action,
            suppress: config.suppress,
            clock,
            state: Mutex::new(state),
            shared: None,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `key` is past a limit now. A change of its standing is logged at warn here,
    /// once, whichever message or event saw it first.
    pub async fn standing(&self, key: &str) -> Option<Breach> {
        let (breach, change) = match &self.shared {
            Some(shared) => shared.standing(key).await,
            None => self.lock().ledger.verdict(key, self.clock.now()),
        };
        log_change(key, change, breach.as_ref(), self.action);
        breach
    }

    /// `key` had a message of `recipients` recipients taken by upstream, whose id there is
    /// `message_id` when upstream said it.
    pub async fn forwarded(&self, key: &str, message_id: Option<&str>, recipients: usize) {
        let now = self.clock.now();
        let sent = Counts {
            sent: recipients as u64,
            ..Counts::default()
        };
        if let Some(shared) = &self.shared {
            let (breach, change) = shared.add(key, sent, message_id).await;
            return log_change(key, change, breach.as_ref(), self.action);
        }
        let mut state = self.lock();
        let held = state.ledger.add(key, sent, now);
        if let Some(id) = message_id {
            state.attribution.record(id, held, now);
        }
    }

    /// Upstream itself refused `rcpts` of `key`'s message for good (a `5.1.x` from a
    /// smarthost or an MX host): one hard bounce of one message sent, and a lone recipient
    /// suppressed, as SES's event would have done.
    pub async fn refused_by_upstream(&self, key: &str, rcpts: &[String]) {
        let now = self.clock.now();
        let date = self.today();
        let counts = Counts {
            sent: rcpts.len() as u64,
            bounces: 1,
            complaints: 0,
        };
        if let Some(shared) = &self.shared {
            let (breach, change) = shared.add(key, counts, None).await;
            log_change(key, change, breach.as_ref(), self.action);
            if let ([_], true) = (rcpts, self.suppress) {
                let reason = Kind::Bounce;
                shared
                    .suppress_all(rcpts, Suppression { reason, date })
                    .await;
            }
            return;
        }
        let mut state = self.lock();
        state.ledger.add(key, counts, now);
        if let ([rcpt], true) = (rcpts, self.suppress) {
            let reason = Kind::Bounce;
            state
                .suppressions
                .add(rcpt, Suppression { reason, date }, now);
        }
    }

    /// Parses and applies one event record (an SQS message body, an SNS post).
    pub async fn apply_text(&self, text: &str) -> Result<Applied, EventError> {
        match events::parse(text)? {
            Parsed::Counts(event) => self.apply(event).await,
            Parsed::Ignored => Ok(Applied::Ignored),
        }
    }

    /// Counts one bounce or complaint for the tenant of its message, suppresses its
    /// addresses; a repeat of a feedback id seen within the window counts nothing. Fails only
    /// when the shared store does not answer ([`EventError::Unavailable`]).
    pub async fn apply(&self, event: Event) -> Result<Applied, EventError> {
        if let Some(shared) = &self.shared {
            let date = event.date.clone().unwrap_or_else(|| self.today());
            let applied = (shared.apply(&event, date).await)
                .map_err(|e| EventError::Unavailable(e.to_string()))?;
            if let Applied::Counted {
                tenant: Some(tenant),
                change,
                breach,
                ..
            } = &applied
            {
                log_change(tenant, *change, breach.as_ref(), self.action);
            }
            return Ok(applied);
        }
        Ok(self.apply_here(event))
    }

    fn apply_here(&self, event: Event) -> Applied {
        let now = self.clock.now();
        let today = self.today();
        let mut state = self.lock();
        if let Some(feedback) = &event.feedback_id {
            if state.seen.insert(feedback, (), now) == Inserted::Known {
                return Applied::Repeat(event.kind);
            }
        }
        // The relay's own record is what it read under the key's trust rules; a client can
        // write the tag itself (`X-SES-MESSAGE-TAGS`), so the tag only fills in for a message
        // this process did not forward (another replica's) or has forgotten.
        let tenant = (state.attribution.tenant(&event.message_id, now))
            .or_else(|| event.tenant.as_deref().map(Arc::from));
        if self.suppress {
            let date = event.date.clone().unwrap_or(today);
            for rcpt in &event.recipients {
                let s = Suppression {
                    reason: event.kind,
                    date: date.clone(),
                };
                state.suppressions.add(rcpt, s, now);
            }
        }
        let Some(tenant) = tenant else {
            state.unattributed += 1;
            return Applied::Counted {
                kind: event.kind,
                tenant: None,
                change: Change::None,
                breach: None,
            };
        };
        let tenant = state.ledger.add(&tenant, event_counts(&event), now);
        let (breach, change) = state.ledger.verdict(&tenant, now);
        drop(state);
        log_change(&tenant, change, breach.as_ref(), self.action);
        Applied::Counted {
            kind: event.kind,
            tenant: Some(tenant),
            change,
            breach,
        }
    }

    /// Why `address` is refused at RCPT, if it is (nothing when `suppress` is off).
    pub async fn suppressed(&self, address: &str) -> Option<Suppression> {
        if !self.suppress {
            return None;
        }
        if let Some(shared) = &self.shared {
            return shared.suppressed(address).await;
        }
        self.lock()
            .suppressions
            .get(address, self.clock.now())
            .cloned()
    }

    /// Today's date (UTC), `YYYY-MM-DD`, on the injected clock.
    fn today(&self) -> String {
        date_of(self.clock.unix_now_secs())
    }
}

#[cfg(test)]
mod tests;
