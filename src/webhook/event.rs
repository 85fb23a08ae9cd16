//! One event as a webhook receives it: what happened to which tenant's message, in the JSON
//! schema of docs/webhooks.md. Every type has the same common fields (unknown ones `null`);
//! each adds its own.

use serde::Serialize;

pub use crate::config::EventType;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// Unique per event: a receiver that gets a batch twice (a retry after a lost response)
    /// drops the repeats by it.
    pub id: String,
    #[serde(rename = "type")]
    pub kind: EventType,
    pub tenant: String,
    /// The id the client's `250` named: upstream's (`accepted`), the spool's (`held`,
    /// `released`), else the relay's; `null` for SES's events.
    pub message_id: Option<String>,
    /// The relay's own id of the message (in our `Received:` field), when the relay saw it:
    /// where it differs from `message_id`, both are there.
    pub relay_message_id: Option<String>,
    /// Upstream's id of the message (SES's `MessageId`, a smarthost's `queued as`), where
    /// known.
    pub upstream_message_id: Option<String>,
    /// The envelope's sender (`""` for a bounce's null path), when known.
    pub from: Option<String>,
    /// The envelope's recipients; for `bounced`, `complained` and `suppressed` the addresses
    /// concerned.
    pub to: Vec<String>,
    /// When it happened, RFC 3339 (UTC, seconds).
    pub time: String,
    /// `accepted`, `refused`: the reply's code the client got.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<u16>,
    /// `accepted`, `refused`: the reply's text the client got (`250 2.0.0 Ok ...`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
    /// `refused`: the outcome as the relay's metrics and log name it (`throttled`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<&'static str>,
    /// `bounced`, `complained`: SES's diagnostic (a bounce's `diagnosticCode` or subtype, a
    /// complaint's feedback type), when it gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diagnostic: Option<String>,
    /// `suppressed`: `bounce` or `complaint`; `paused`: which rate went past its limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    /// `paused`: the rate over the window, and its limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<f64>,
}

impl Event {
    /// An event of `kind` for `tenant` at `unix_secs`, its own fields left empty.
    pub fn new(kind: EventType, tenant: &str, unix_secs: u64) -> Event {
        Event {
            id: uuid::Uuid::new_v4().simple().to_string(),
            kind,
            tenant: tenant.to_string(),
            message_id: None,
            relay_message_id: None,
            upstream_message_id: None,
            from: None,
            to: Vec::new(),
            time: crate::clock::rfc3339(unix_secs),
            code: None,
            reply: None,
            outcome: None,
            diagnostic: None,
            reason: None,
            rate: None,
            limit: None,
        }
    }
}

/// What one POST carries.
#[derive(Serialize)]
pub struct Batch<'a> {
    pub events: &'a [Event],
}
