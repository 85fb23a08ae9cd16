//! A step's refusal as data: everything the rest of the journey asks of a refusal (what it
//! counts as, what the client is told, the key it is about, whether it may go later, whether
//! a driver may hold it instead), said by the step that refused. A step whose refusal nobody
//! needs to match on returns this, so it adds no variant to `NotAdmitted` and no arms.

use std::time::Duration;

use crate::message::Outcome;
use crate::reply::Reply;

/// What a step says when it refuses a message.
pub struct StepRefusal {
    /// What the refusal counts as: the step's own outcome (`Outcome::Step`).
    pub outcome: Outcome,
    /// What the client is told.
    pub reply: Reply,
    /// The key the refusal is about when it is no layer's (a tenant, say), for the log line
    /// and the status page.
    pub key: Option<String>,
    /// When the message may go again, for a driver that keeps it (the spool's release): not
    /// before this long (zero when the step cannot tell); `None`: refused for good, as sent
    /// again it would be refused again.
    pub again: Option<Duration>,
    /// Whether a driver that can hold (a session over a hold-mode layer) may hold the message
    /// instead of refusing it.
    pub holdable: bool,
}
