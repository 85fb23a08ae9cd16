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
//! - `store`: where that state lives, behind the [`store::ReputationStore`] trait: in this
//!   process (`store::local`: the ledger, the attribution, the feedback ids seen and the
//!   suppressions, behind one lock), or in Redis when `[redis]` is set, shared by every replica
//!   (`store::redis`).
//! - `operator`: what the admin endpoint and the status page read and change.
//! - `ses_sync`: what the guard notes for the task that keeps SES's view of each SES tenant
//!   in step (`[reputation] ses_sync`): each key's SES tenant, changes, suppressions.
//! - `intake`: one event record from SQS or SNS, applied and counted.
//! - `notify`: what the tenant's webhooks are told (bounces, complaints, suppressions, pauses).
//!
//! [`Reputation`] holds one store, on an injected clock; the session asks it at MAIL, RCPT and
//! the final dot, the event sources (SQS, SNS) feed it, the admin endpoint reads and resets it.
//! It answers, and logs a tenant's change of standing; its callers reply, count and log.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use serde::Serialize;

use crate::clock::Clock;
use crate::config::{Action, KeySource, ReputationConfig};
use crate::redis::{RedisOptions, RedisUnavailable};
use crate::webhook::Webhooks;

pub mod attribution;
pub mod events;
mod expiring;
pub mod intake;
pub mod ledger;
mod notify;
mod operator;
mod report;
pub mod ses_sync;
pub mod sns_signature;
pub mod sns_verifier;
pub mod store;
pub mod suppression;

pub use events::{EventError, Kind};
pub use ledger::{Breach, Change, Counts};
pub use suppression::Suppression;

use events::{Event, Parsed};
use ledger::Limits;
pub use report::date_of;
use report::log_change;
use ses_sync::{SesSync, SesTenant};
use store::local::LocalReputation;
use store::redis::RedisReputation;
use store::ReputationStore;

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

pub struct Reputation {
    /// Its own key source (`[reputation] key`); `None`: a message counts for its tenant.
    pub key: Option<KeySource>,
    /// The key when `key`'s source is absent.
    pub default_key: String,
    pub action: Action,
    pub suppress: bool,
    clock: Arc<dyn Clock>,
    /// In this process, or in Redis when `[redis]` is set.
    store: Box<dyn ReputationStore>,
    /// With `ses_sync`: what the SES sync task reads.
    ses: Option<SesSync>,
    /// The tenants' webhooks, told of bounces, complaints, suppressions and pauses.
    webhooks: Option<Arc<Webhooks>>,
}

fn limits(config: &ReputationConfig) -> Limits {
    Limits {
        max_bounce_rate: *config.max_bounce_rate.get_ref(),
        max_complaint_rate: *config.max_complaint_rate.get_ref(),
        min_messages: config.min_messages.get(),
        min_bounces: config.min_bounces.get(),
        min_complaints: config.min_complaints.get(),
        window: config.window(),
    }
}

impl Reputation {
    /// The guard with its state in Redis, shared by every replica (see `store::redis`);
    /// `errors` counts the calls Redis did not answer.
    pub fn with_redis(
        config: &ReputationConfig,
        clock: Arc<dyn Clock>,
        redis: &RedisOptions,
        errors: Counter,
    ) -> Result<Reputation, RedisUnavailable> {
        let store = RedisReputation::new(config, redis, clock.clone(), errors)?;
        Ok(Reputation::with_store(config, clock, Box::new(store)))
    }

    /// The guard with its state in this process.
    pub fn new(config: &ReputationConfig, clock: Arc<dyn Clock>) -> Reputation {
        let store = LocalReputation::new(config, clock.clone());
        Reputation::with_store(config, clock, Box::new(store))
    }

    fn with_store(
        config: &ReputationConfig,
        clock: Arc<dyn Clock>,
        store: Box<dyn ReputationStore>,
    ) -> Reputation {
        Reputation {
            key: config.key.as_ref().map(|k| k.0.clone()),
            default_key: config.default_key.clone(),
            action: *config.action.get_ref(),
            suppress: config.suppress,
            clock,
            store,
            ses: (config.ses_sync).then(|| SesSync::new(config.max_tenants.get())),
            webhooks: None,
        }
    }

    /// The same guard, telling `webhooks` what it learns.
    pub fn with_webhooks(mut self, webhooks: Arc<Webhooks>) -> Reputation {
        self.webhooks = Some(webhooks);
        self
    }

    /// With `[reputation] ses_sync`: what the SES sync task reads.
    pub fn ses_sync(&self) -> Option<&SesSync> {
        self.ses.as_ref()
    }

    /// `key`'s message was taken by SES as tenant `to`.
    pub fn sent_as(&self, key: &str, to: SesTenant) {
        if let Some(ses) = &self.ses {
            ses.sent_as(key, to);
        }
    }

    /// A change of `key`'s standing: logged at warn once, and noted for the SES sync.
    fn changed(&self, key: &str, change: Change, breach: Option<&Breach>) {
        log_change(key, change, breach, self.action);
        if let Some(webhooks) = &self.webhooks {
            notify::changed(webhooks, key, change, breach);
        }
        if let (Some(ses), false) = (&self.ses, change == Change::None) {
            ses.changed(key);
        }
    }

    /// Whether `key` is past a limit now. A change of its standing is logged at warn here,
    /// once, whichever message or event saw it first.
    pub async fn standing(&self, key: &str) -> Option<Breach> {
        let (breach, change) = self.store.standing(key).await;
        self.changed(key, change, breach.as_ref());
        breach
    }

    /// `key` had a message of `recipients` recipients taken by upstream, whose id there is
    /// `message_id` when upstream said it.
    pub async fn forwarded(&self, key: &str, message_id: Option<&str>, recipients: usize) {
        let sent = Counts {
            sent: recipients as u64,
            ..Counts::default()
        };
        let (breach, change) = self.store.add(key, sent, message_id).await;
        self.changed(key, change, breach.as_ref());
    }

    /// Upstream itself refused `rcpts` of `key`'s message for good (a `5.1.x` from a
    /// smarthost or an MX host): one hard bounce of one message sent, and a lone recipient
    /// suppressed, as SES's event would have done.
    pub async fn refused_by_upstream(&self, key: &str, rcpts: &[String]) {
        let date = self.today();
        let counts = Counts {
            sent: rcpts.len() as u64,
            bounces: 1,
            complaints: 0,
        };
        let (breach, change) = self.store.add(key, counts, None).await;
        self.changed(key, change, breach.as_ref());
        if let ([_], true) = (rcpts, self.suppress) {
            let reason = Kind::Bounce;
            (self.store)
                .suppress(rcpts, Suppression { reason, date })
                .await;
            if let Some(ses) = &self.ses {
                ses.suppressed(key, rcpts, reason);
            }
            if let Some(webhooks) = &self.webhooks {
                notify::addresses(webhooks, key, rcpts, reason, None);
            }
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
        let date = event.date.clone().unwrap_or_else(|| self.today());
        let applied = (self.store.apply(&event, date).await)
            .map_err(|e| EventError::Unavailable(e.to_string()))?;
        if let Applied::Counted {
            tenant: Some(tenant),
            change,
            breach,
            kind,
        } = &applied
        {
            self.changed(tenant, *change, breach.as_ref());
            if let (Some(ses), true) = (&self.ses, self.suppress) {
                ses.suppressed(tenant, &event.recipients, *kind);
            }
            if let Some(webhooks) = &self.webhooks {
                notify::feedback(webhooks, tenant, &event, self.suppress);
            }
        }
        Ok(applied)
    }

    /// Why `address` is refused at RCPT, if it is (nothing when `suppress` is off).
    pub async fn suppressed(&self, address: &str) -> Option<Suppression> {
        if !self.suppress {
            return None;
        }
        self.store.suppressed(address).await
    }

    /// Today's date (UTC), `YYYY-MM-DD`, on the injected clock.
    fn today(&self) -> String {
        date_of(self.clock.unix_now_secs())
    }
}

#[cfg(test)]
mod tests;
