//! What a kind of upstream may offer beyond sending one message, each a small capability the
//! pipeline and the admin endpoint ask for by name, never by kind.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicU64;

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
