//! What a kind of upstream may offer beyond sending one message, each a small capability the
//! pipeline and the admin endpoint ask for by name, never by kind.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicU64;

use super::oauth::TokenCounts;
use super::{Probe, UpstreamError};

/// The capabilities of one forwarder; `None` where its kind has none.
#[derive(Default, Clone, Copy)]
pub struct Offers<'a> {
    /// Upstream keeps tenants of its own and pauses them one by one (SES).
    pub tenants: Option<&'a dyn TenantPauses>,
    /// Upstream states the account's own limits (SES's `GetAccount`), for a layer with
    /// `limit = "account"`.
    pub account: Option<&'a dyn Account>,
    /// How many times upstream said it had too many connections from us and the forwarder
    /// closed one and shrank its pool (and retried the message), for the metrics.
    pub crowded: Option<&'a AtomicU64>,
    /// Upstream knows which senders each of its tenants may use (SES: the email identities
    /// associated with a tenant).
    pub identities: Option<&'a dyn TenantIdentities>,
    /// Upstream's own tenants' standing, read and set through its API (SES's reputation
    /// entities and tenant suppression list).
    pub standing: Option<&'a dyn TenantStanding>,
    /// The calls to upstream's API beyond sending that failed, by operation, for the metrics.
    pub failed_calls: Option<&'a [FailedCalls]>,
    /// The OAuth tokens asked for (XOAUTH2), issued and failed, for the metrics.
    pub tokens: Option<&'a TokenCounts>,
}

/// Failed calls of one operation of upstream's API, since the forwarder was built.
#[derive(Debug)]
pub struct FailedCalls {
    pub operation: &'static str,
    pub count: AtomicU64,
}

/// What upstream knows of a sender for one of its tenants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityCheck {
    Allowed,
    /// The tenant's identities are not known (not read yet, or upstream's API failing): the
    /// message goes, and upstream judges it.
    Unchecked,
    Refused(IdentityRefusal),
}

/// Why upstream would refuse a sender for one of its tenants, in the words the client gets
/// (from the relay's check, or from upstream's own answer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityRefusal {
    /// Neither the sender's address nor its domain is an identity of the tenant.
    #[error("{domain} is not a sending identity of SES tenant {tenant}")]
    NotIdentity { domain: String, tenant: String },
    /// Upstream does not know the tenant.
    #[error("SES tenant {tenant} unknown to SES")]
    UnknownTenant { tenant: String },
}

impl IdentityRefusal {
    /// The reply's code and enhanced code: a sender that is no identity of the tenant is
    /// refused for good; a tenant upstream does not know must be created there first, so the
    /// client keeps the message.
    pub fn code(&self) -> (u16, &'static str) {
        match self {
            IdentityRefusal::NotIdentity { .. } => (550, "5.7.1"),
            IdentityRefusal::UnknownTenant { .. } => (451, "4.3.5"),
        }
    }
}

pub type IdentityFuture<'a> = Pin<Box<dyn Future<Output = IdentityCheck> + Send + 'a>>;

/// The senders each of upstream's tenants may use, learned ahead of the messages.
pub trait TenantIdentities: Send + Sync {
    /// Starts learning upstream's tenants in the background (at start and after a reload;
    /// again, nothing): readiness never waits for it.
    fn start(&self);

    /// Whether `sender` may send as `tenant`, from what was learned before: never a wait for
    /// upstream (a tenant not known yet is asked for, and goes unchecked).
    fn check(&self, tenant: &str, sender: &str) -> IdentityCheck;

    /// As [`TenantIdentities::check`], but a tenant never read yet is read first: the message
    /// waits for that one read (shared by every message of the tenant meanwhile), at most the
    /// upstream's timeout, and goes unchecked when it fails or is too slow.
    fn check_read<'a>(&'a self, tenant: &'a str, sender: &'a str) -> IdentityFuture<'a>;

    /// The tenants upstream said it does not know, sorted.
    fn unknown_tenants(&self) -> Vec<String>;
}

pub type StandingFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, CallFailed>> + Send + 'a>>;

/// A call to upstream's API that failed (timed out, refused, upstream's error), in its words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CallFailed(pub String);

/// A tenant's standing as upstream sees it (SES's `GetReputationEntity`), with its words.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct TenantStatus {
    /// The status the relay (or the operator) sets: `ENABLED`, `DISABLED`, `REINSTATED`.
    pub customer_managed: Option<String>,
    /// The status upstream sets itself.
    pub upstream_managed: Option<String>,
    /// Whether the tenant may send: `DISABLED` when either of the two is.
    pub aggregate: Option<String>,
    /// The highest impact of upstream's reputation findings: `LOW`, `HIGH`, or none.
    pub impact: Option<String>,
}

impl TenantStatus {
    /// Upstream will not send for the tenant now.
    pub fn disabled(&self) -> bool {
        self.aggregate.as_deref() == Some("DISABLED")
    }
}

/// Why an address is put on a tenant's suppression list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuppressReason {
    Bounce,
    Complaint,
}

/// Upstream's own tenants' standing, through its API; every call bounded in time and in
/// calls at once, never made on a client's path.
pub trait TenantStanding: Send + Sync {
    /// Reads the tenant's standing from upstream, and keeps it for [`TenantStanding::known`]
    /// and the admission of its messages.
    fn read<'a>(&'a self, tenant: &'a str) -> StandingFuture<'a, TenantStatus>;

    /// Sets the tenant's customer-managed status: sending enabled or disabled.
    fn set_sending<'a>(&'a self, tenant: &'a str, enabled: bool) -> StandingFuture<'a, ()>;

    /// Puts `address` on the tenant's suppression list.
    fn suppress<'a>(
        &'a self,
        tenant: &'a str,
        address: &'a str,
        reason: SuppressReason,
    ) -> StandingFuture<'a, ()>;

    /// The standing last read of each tenant read, sorted by tenant.
    fn known(&self) -> Vec<(String, TenantStatus)>;
}

pub type AdmitFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Option<Probe>, UpstreamError>> + Send + 'a>>;

/// Pauses of upstream's own tenants.
pub trait TenantPauses: Send + Sync {
    /// Whether a message sent as `tenant` may go now: `Ok(None)`, yes; `Ok(Some(probe))`,
    /// yes, as the probe of a pause that is over (opened when upstream takes it); `Err`, the
    /// tenant is paused, with the refusal in upstream's words. Waits only while a probe is out.
    fn admit<'a>(&'a self, tenant: &'a str) -> AdmitFuture<'a>;
}

pub type QuotaFuture<'a> =
    Pin<Box<dyn Future<Output = Result<SendQuota, AccountError>> + Send + 'a>>;

/// The account's own limits, as the provider states them.
pub trait Account: Send + Sync {
    fn send_quota(&self) -> QuotaFuture<'_>;
}

/// Why the account's limits could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccountError {
    /// The call failed (credentials, network, the provider's error), in its words.
    #[error("{0}")]
    Call(String),
    /// The provider answered without the limits.
    #[error("{0}: no SendQuota in the answer")]
    NoQuota(&'static str),
}

/// The account's own limits (SES's `GetAccount` `SendQuota`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SendQuota {
    /// Messages a second (SES counts recipients).
    pub max_send_rate: f64,
    /// Messages in 24 hours; -1 is unlimited.
    pub max_24_hour_send: f64,
    pub sent_last_24_hours: f64,
}

impl SendQuota {
    /// The day's quota is spent: the upstream should pause before the provider starts
    /// refusing.
    pub fn day_spent(&self) -> bool {
        self.max_24_hour_send >= 0.0 && self.sent_last_24_hours >= self.max_24_hour_send
    }

    /// The sending rate in whole messages a second, at least 1 (SES's own floor).
    pub fn rate_per_second(&self) -> u64 {
        (self.max_send_rate.floor() as u64).max(1)
    }
}
