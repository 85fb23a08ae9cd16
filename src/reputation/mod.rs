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
//!
//! [`Reputation`] holds them behind one lock, on an injected clock; the session asks it at
//! MAIL, RCPT and the final dot, the event sources (SQS, SNS) feed it, the admin endpoint
//! reads and resets it. It answers; its callers reply, count and log.

use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;

use crate::config::{Action, KeySource, ReputationConfig};
use crate::throttle::clock::nanos;
use crate::throttle::Clock;

pub mod attribution;
pub mod events;
mod expiring;
pub mod ledger;
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
}

impl Reputation {
    pub fn new(config: &ReputationConfig, clock: Arc<dyn Clock>) -> Reputation {
        let limits = Limits {
            max_bounce_rate: *config.max_bounce_rate.get_ref(),
            max_complaint_rate: *config.max_complaint_rate.get_ref(),
            min_messages: config.min_messages.get(),
            window: config.window(),
        };
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
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `key` is past a limit now. A change of its standing is logged at warn here,
    /// once, whichever message or event saw it first.
    pub fn standing(&self, key: &str) -> Option<Breach> {
        let (breach, change) = self.lock().ledger.verdict(key, self.clock.now());
        log_change(key, change, breach.as_ref(), self.action);
        breach
    }

    /// `key` had a message of `recipients` recipients taken by upstream, whose id there is
    /// `message_id` when upstream said it.
    pub fn forwarded(&self, key: &str, message_id: Option<&str>, recipients: usize) {
        let now = self.clock.now();
        let mut state = self.lock();
        let sent = Counts {
            sent: recipients as u64,
            ..Counts::default()
        };
        let held = state.ledger.add(key, sent, now);
        if let Some(id) = message_id {
            state.attribution.record(id, held, now);
        }
    }

    /// Upstream itself refused `rcpts` of `key`'s message for good (a `5.1.x` from a
    /// smarthost or an MX host): one hard bounce of one message sent, and a lone recipient
    /// suppressed, as SES's event would have done.
    pub fn refused_by_upstream(&self, key: &str, rcpts: &[String]) {
        let now = self.clock.now();
        let date = self.today();
        let mut state = self.lock();
        let counts = Counts {
            sent: rcpts.len() as u64,
            bounces: 1,
            complaints: 0,
        };
        state.ledger.add(key, counts, now);
        if let ([rcpt], true) = (rcpts, self.suppress) {
            let reason = Kind::Bounce;
            state
                .suppressions
                .add(rcpt, Suppression { reason, date }, now);
        }
    }

    /// Parses and applies one event record (an SQS message body, an SNS post).
    pub fn apply_text(&self, text: &str) -> Result<Applied, EventError> {
        match events::parse(text)? {
            Parsed::Counts(event) => Ok(self.apply(event)),
            Parsed::Ignored => Ok(Applied::Ignored),
        }
    }

    /// Counts one bounce or complaint for the tenant of its message, suppresses its
    /// addresses; a repeat of a feedback id seen within the window counts nothing.
    pub fn apply(&self, event: Event) -> Applied {
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
        let n = event.recipients.len().max(1) as u64;
        let counts = match event.kind {
            Kind::Bounce => Counts {
                bounces: n,
                ..Counts::default()
            },
            Kind::Complaint => Counts {
                complaints: n,
                ..Counts::default()
            },
        };
        let tenant = state.ledger.add(&tenant, counts, now);
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
    pub fn suppressed(&self, address: &str) -> Option<Suppression> {
        if !self.suppress {
            return None;
        }
        self.lock()
            .suppressions
            .get(address, self.clock.now())
            .cloned()
    }

    /// An operator lifts a suppression; false when the address was not suppressed.
    pub fn unsuppress(&self, address: &str) -> bool {
        let removed = self.lock().suppressions.remove(address);
        if removed {
            tracing::warn!(target: "mailsluice::reputation", address, "reputation.unsuppressed");
        }
        removed
    }

    /// An operator resumes a tenant: its window starts afresh. False when it was not known.
    pub fn resume(&self, key: &str) -> bool {
        let resumed = self.lock().ledger.resume(key);
        if resumed {
            tracing::warn!(target: "mailsluice::reputation", tenant = key, "reputation.resumed by an operator");
        }
        resumed
    }

    /// Every tenant counted, sorted by key.
    pub fn standings(&self) -> Vec<Standing> {
        let now = self.clock.now();
        let rate = |n: u64, of: u64| if of == 0 { 0.0 } else { n as f64 / of as f64 };
        (self.lock().ledger.snapshot(now).into_iter())
            .map(|(key, c, breach)| Standing {
                key: key.to_string(),
                sent: c.sent,
                bounces: c.bounces,
                complaints: c.complaints,
                bounce_rate: rate(c.bounces, c.sent),
                complaint_rate: rate(c.complaints, c.sent),
                paused: breach.is_some(),
            })
            .collect()
    }

    /// Tenants past a limit now.
    pub fn paused(&self) -> usize {
        self.standings().iter().filter(|s| s.paused).count()
    }

    /// Addresses suppressed now.
    pub fn suppressed_count(&self) -> usize {
        let now = self.clock.now();
        let mut state = self.lock();
        state.suppressions.expire(now);
        state.suppressions.len()
    }

    /// Events whose message no tenant was known for.
    pub fn unattributed(&self) -> u64 {
        self.lock().unattributed
    }

    /// Messages whose id is held for attribution now.
    pub fn tracked(&self) -> usize {
        self.lock().attribution.len()
    }

    /// Today's date (UTC), `YYYY-MM-DD`, on the injected clock.
    fn today(&self) -> String {
        date_of(self.clock.unix_now_secs())
    }
}

fn log_change(key: &str, change: Change, breach: Option<&Breach>, action: Action) {
    let action = match action {
        Action::Pause => "pause",
        Action::Reject => "reject",
        Action::Warn => "warn",
    };
    match (change, breach) {
        (Change::Paused, Some(b)) => tracing::warn!(
            target: "mailsluice::reputation",
            tenant = key,
            kind = b.kind.as_str(),
            rate = b.rate,
            sent = b.sent,
            limit = b.limit,
            action,
            "reputation.paused"
        ),
        (Change::Resumed, _) => tracing::warn!(
            target: "mailsluice::reputation",
            tenant = key,
            action,
            "reputation.resumed: the rate fell back under the limit"
        ),
        _ => {}
    }
}

/// `YYYY-MM-DD` (UTC) of Unix seconds (Howard Hinnant's days-to-civil).
pub fn date_of(unix_secs: u64) -> String {
    let z = (unix_secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests;
