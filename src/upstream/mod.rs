//! Where a message goes once it may go. One trait, [`Forwarder`], whose core is sending one
//! message, so the pipeline never knows whether it talks to SES, another relay or a
//! directory: it only needs the upstream's answer, typed, which it relays. What only some
//! kinds have, they offer as capabilities ([`Offers`]).
//!
//! - `smtp`: `smtp://` and `smtps://`, each step checked (MAIL, RCPT and DATA pipelined when
//!   upstream offers it).
//! - `client`: one SMTP connection to upstream, ours from the socket up (replies, EHLO's
//!   keywords, STARTTLS, AUTH).
//! - `pool`: our pool of those connections (bounded, with timeouts on every step), and the
//!   connector that opens them.
//! - `oauth`: the bearer tokens of an XOAUTH2 login (`auth = "xoauth2"`): asked of the
//!   provider's token endpoint, kept, renewed before they expire.
//! - `mx`: `mx://`, straight to each recipient domain's MX hosts (hickory-resolver).
//! - `ses`: `ses://REGION`, Amazon SES over its v2 API (the AWS SDK), SES tenants.
//! - `file`: `file://DIR`, the embedded default: one `.eml` and one `.json` per message.
//! - `offers`: the capabilities a kind may offer: pauses of its own tenants, the account's
//!   own limits, its pool's "too many connections" count.
//! - `feedback`: what a refusal says about our sending (too fast, quota, paused, too many
//!   connections), typed; SMTP replies classified by the configured patterns where they
//!   become errors (the pool's connector, the transaction).
//! - `pause`: the pause after a quota reply, and its probe.
//! - `breaker`: an upstream that fails (no connection, temporary failures in a row): hold-mode
//!   messages held at once, one probe at a time.
//! - `reply`: upstream's answers and our client's errors as [`UpstreamError`]s.
//! - `upstreams`: the configured upstreams by name, each with its forwarder and its pause.

pub mod breaker;
mod client;
pub mod feedback;
pub mod file;
pub mod mx;
pub mod oauth;
mod offers;
pub mod pause;
mod pool;
pub mod reply;
pub mod ses;
pub mod smtp;
pub mod upstreams;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub use breaker::Breaker;
pub use feedback::{Classifier, Feedback};
pub use file::FileForwarder;
pub use mx::{MxForwarder, MxSetupError};
pub use offers::{
    Account, AccountError, AdmitFuture, CallFailed, FailedCalls, IdentityCheck, IdentityFuture,
    IdentityRefusal, Offers, QuotaFuture, SendQuota, StandingFuture, SuppressReason,
    TenantIdentities, TenantPauses, TenantStanding, TenantStatus,
};
pub use pause::{Admission, Pause, Probe};
pub use ses::{SesForwarder, SesSetupError};
pub use smtp::{SmtpForwarder, SmtpSetupError};
pub use upstreams::{OwnAddresses, Upstream, Upstreams, UpstreamsError};

use crate::config::{UpstreamConfig, UpstreamKind};
use crate::message::{Envelope, Outcome};

/// Why the forwarder a configuration asks for could not be built; each names the key, for
/// the operator at startup (bad URL, missing password variable).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Smtp(#[from] SmtpSetupError),
    #[error(transparent)]
    Mx(#[from] MxSetupError),
    #[error(transparent)]
    Ses(#[from] SesSetupError),
}

/// The forwarder the configuration asks for. `own` is where the relay listens, once bound: a
/// kind that must never deliver to the relay itself (direct delivery) keeps it.
pub fn build_forwarder(
    cfg: &UpstreamConfig,
    own: &OwnAddresses,
) -> Result<Arc<dyn Forwarder>, SetupError> {
    Ok(match &cfg.kind {
        UpstreamKind::File(file) => Arc::new(FileForwarder::new(file.dir.clone())),
        UpstreamKind::Smtp(_) => Arc::new(SmtpForwarder::new(cfg)?),
        UpstreamKind::Mx(_) => Arc::new(MxForwarder::new(cfg, own.clone())?),
        UpstreamKind::Ses(_) => Arc::new(SesForwarder::new(cfg)?),
    })
}

/// Upstream took the message; `text` is its reply text (carries the upstream's message id,
/// which users grep for in their provider's logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    pub text: String,
    /// Taken for some recipients and refused after its end for others (direct delivery to
    /// several domains): the client still gets `250`, since a retry would duplicate the
    /// accepted copies, and the sender a delivery report.
    pub partial: bool,
    /// Of a partial delivery, the recipients refused for good for a bad mailbox
    /// ([`UpstreamError::is_hard_bounce`]): bounces the relay saw itself.
    pub bounced: Vec<String>,
}

impl Accepted {
    pub fn new(text: impl Into<String>) -> Accepted {
        Accepted {
            text: text.into(),
            partial: false,
            bounced: Vec::new(),
        }
    }

    /// Upstream's id of the message, when its reply says `Ok <id>` (SES over SMTP: `250 Ok
    /// <id>`; our `ses://` forwarder: `2.0.0 Ok <MessageId>`): the link from SES's events
    /// back to the message.
    pub fn message_id(&self) -> Option<&str> {
        let text = match reply::split_enhanced(&self.text) {
            Some((_, rest)) => rest,
            None => self.text.trim(),
        };
        // Exactly `Ok <id>`: a smarthost's `Ok queued as X` names no SES message.
        let mut words = text.strip_prefix("Ok ")?.split_whitespace();
        let id = words.next().filter(|_| words.next().is_none())?;
        Some(id).filter(|id| id.len() <= crate::message::MAX_ID_BYTES)
    }

    /// The id its reply names, the one the client was told: SES's `Ok <id>`
    /// ([`Accepted::message_id`]) or a smarthost's `queued as <id>` (Postfix, Exim, ...).
    pub fn named_id(&self) -> Option<&str> {
        self.message_id().or_else(|| {
            let (_, rest) = self.text.split_once("queued as ")?;
            let id = rest.split_whitespace().next()?;
            let id = id.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
            let printable = id.bytes().all(|b| b.is_ascii_graphic());
            Some(id).filter(|id| {
                !id.is_empty() && printable && id.len() <= crate::message::MAX_ID_BYTES
            })
        })
    }
}

/// Why upstream did not take a message. The session maps each variant to the client's reply,
/// keeping the class of upstream's own answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    /// Upstream answered with a 4xx or 5xx at some step; its code and text are passed on.
    #[error("upstream replied {code} {text}")]
    Rejected {
        code: u16,
        /// Enhanced status code such as `4.2.1`, when upstream gave one.
        enhanced: Option<String>,
        text: String,
    },
    /// Upstream refused the message for how we send, not for what it is: too fast, quota
    /// used up, sending paused, too many connections. Its reply is kept for the client and
    /// the log.
    #[error("upstream replied {code} {text} ({})", feedback.as_str())]
    Pushback {
        feedback: Feedback,
        code: u16,
        enhanced: Option<String>,
        text: String,
    },
    /// No answer to relay: connection refused, dropped, TLS failed, or timed out, before
    /// the message was sent: upstream cannot have accepted it.
    #[error("upstream unavailable: {0}")]
    Unavailable(String),
    /// The whole message was sent, but upstream's answer to its end never came (the
    /// connection dropped, or the timeout passed): upstream may or may not have accepted it
    /// (RFC 1047). The client gets a `451` that says so; a retry may then duplicate it.
    #[error("no answer from upstream after the message was sent: {0}")]
    Uncertain(String),
    /// Upstream refused the relay's own credentials (its login, its TLS, its signature), or
    /// credentials are configured and it offers no way to use them. Nothing was sent: the
    /// operator must act, not the client, so the client keeps the message (`451 4.7.0`).
    #[error("upstream refused the relay's credentials: {0}")]
    Credentials(String),
    /// The relay found no credentials to give upstream (SES: the AWS SDK's default chain
    /// found none). Nothing was sent; the operator must act (`451 4.7.0`).
    #[error("no credentials for upstream: {0}")]
    NoCredentials(String),
    /// Upstream paused sending for the tenant the message is sent as (SES's tenant), with its
    /// words: `451 4.7.1`, that tenant's messages only.
    #[error("upstream paused the tenant: {0}")]
    TenantPaused(String),
}

impl UpstreamError {
    /// What the refusal says about our sending, when it is about that.
    pub fn feedback(&self) -> Option<Feedback> {
        match self {
            UpstreamError::Pushback { feedback, .. } => Some(*feedback),
            _ => None,
        }
    }

    /// Upstream refused the message for good: its reply is a `5xx` (a `421` or an odd code
    /// reads as a temporary refusal, as the client is told). Anything else is temporary.
    pub fn for_good(&self) -> bool {
        matches!(self.reply(), Some((500..=599, ..)))
    }

    /// A refusal for good of a bad mailbox (`5xx` with `5.1.x`): what the reputation guard
    /// counts as a hard bounce the relay saw itself.
    pub fn is_hard_bounce(&self) -> bool {
        self.reply()
            .is_some_and(|(code, esc, _)| code >= 500 && esc.is_some_and(|e| e.starts_with("5.1.")))
    }

    /// Upstream's reply (code, enhanced code, text) when it refused, whether or not the
    /// refusal was about our sending: what a refusal means for the message does not depend
    /// on that.
    pub fn reply(&self) -> Option<(u16, Option<&str>, &str)> {
        match self {
            UpstreamError::Rejected {
                code,
                enhanced,
                text,
            }
            | UpstreamError::Pushback {
                code,
                enhanced,
                text,
                ..
            } => Some((*code, enhanced.as_deref(), text)),
            UpstreamError::TenantPaused(text) => Some((451, Some("4.7.1"), text)),
            UpstreamError::Unavailable(_)
            | UpstreamError::Uncertain(_)
            | UpstreamError::Credentials(_)
            | UpstreamError::NoCredentials(_) => None,
        }
    }
}

/// What a message that upstream answered (or did not) counts as in the metrics and the log:
/// the class of upstream's own answer kept.
pub fn outcome(result: &Result<Accepted, UpstreamError>) -> Outcome {
    match result {
        Ok(accepted) if accepted.partial => Outcome::Partial,
        Ok(_) => Outcome::Delivered,
        Err(UpstreamError::Unavailable(_)) => Outcome::UpstreamUnavailable,
        Err(UpstreamError::Credentials(_) | UpstreamError::NoCredentials(_)) => {
            Outcome::UpstreamCredentials
        }
        Err(UpstreamError::TenantPaused(_)) => Outcome::UpstreamTenantPaused,
        Err(UpstreamError::Pushback { feedback, .. }) if feedback.pauses() => {
            Outcome::UpstreamPaused
        }
        Err(UpstreamError::Uncertain(_)) => Outcome::UpstreamUncertain,
        Err(refused) => match refused.reply() {
            Some((code, ..)) if code >= 500 => Outcome::UpstreamPermFail,
            _ => Outcome::UpstreamTempFail,
        },
    }
}

pub type ForwardFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Accepted, UpstreamError>> + Send + 'a>>;

/// One message as it goes upstream.
pub struct Outgoing<'a> {
    /// The envelope as the client gave it.
    pub envelope: &'a Envelope,
    /// The message in pieces, to be sent one after the other (our trace and route fields,
    /// then runs of the client's bytes), so a forwarder that can send them as they are never
    /// joins them into one more copy. Together they are the exact bytes to deliver (headers
    /// and body, CRLF line endings, not dot-stuffed, without the final `.`).
    pub pieces: &'a [&'a [u8]],
    /// The upstream's own tenant the message is sent as (SES's `TenantName`, from the route's
    /// `ses_tenant`); kinds without tenants ignore it.
    pub upstream_tenant: Option<&'a str>,
    /// The process's byte budget (`max_buffered_bytes`, a permit a byte) that the message's
    /// own bytes are held in: a kind that makes copies of the message to send it (`ses://`:
    /// the request) takes room for them there too, or does not send. `None`: unbounded.
    pub room: Option<&'a std::sync::Arc<tokio::sync::Semaphore>>,
}

/// Hands one complete message to the next hop.
pub trait Forwarder: Send + Sync {
    /// Sends `message`; upstream's answer, typed.
    fn send<'a>(&'a self, message: &'a Outgoing<'a>) -> ForwardFuture<'a>;

    /// The message in one piece, as no tenant.
    fn forward<'a>(&'a self, envelope: &'a Envelope, message: &'a [u8]) -> ForwardFuture<'a> {
        Box::pin(async move {
            let pieces = [message];
            let outgoing = Outgoing {
                envelope,
                pieces: &pieces,
                upstream_tenant: None,
                room: None,
            };
            self.send(&outgoing).await
        })
    }

    /// Whether upstream looks reachable now, for `/readyz`; takes nothing and sends nothing.
    /// A reachable upstream may say more about itself (SES: its account's sending status).
    fn check(&self) -> CheckFuture<'_> {
        Box::pin(async { Ok(None) })
    }

    /// What this kind offers beyond sending (most kinds: nothing).
    fn offers(&self) -> Offers<'_> {
        Offers::default()
    }
}

/// Why an upstream is not ready, in words for `/readyz` and the status page.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unready(pub String);

/// A readiness check's result: reachable (with what upstream says of itself, if anything), or
/// why not.
pub type Checked = Result<Option<String>, Unready>;

pub type CheckFuture<'a> = Pin<Box<dyn Future<Output = Checked> + Send + 'a>>;
