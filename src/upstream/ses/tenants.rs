//! SES tenants paused one by one. SES keeps sending status per tenant (`TenantName`), so when
//! it says a tenant's sending is paused, only that tenant's messages stop on this upstream:
//! they get `451 4.7.1` naming the tenant at once (asked before they wait for tokens, and
//! again before they go), for `quota_pause_ms`; then one of them goes as a probe (a
//! [`Pause`], one per tenant), and SES's answer to it ends the pause or renews it. Other
//! tenants go on.
//!
//! Only tenants SES paused are held here, so the map is bounded by the tenants of the account.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::upstream::{Admission, AdmitFuture, Pause, Probe, TenantPauses, UpstreamError};

pub struct Tenants {
    pause: Duration,
    paused: Mutex<HashMap<String, Arc<Pause>>>,
}

impl Tenants {
    pub fn new(pause: Duration) -> Tenants {
        Tenants {
            pause,
            paused: Mutex::default(),
        }
    }

    /// The pause of a tenant SES paused.
    fn get(&self, tenant: &str) -> Option<Arc<Pause>> {
        self.paused.lock().unwrap().get(tenant).cloned()
    }

    /// Whether a message of `tenant` may go now: yes, yes as the probe of a pause that is over,
    /// or the refusal naming the tenant. Waits only while another message probes.
    async fn admission(&self, tenant: &str) -> Result<Option<Probe>, UpstreamError> {
        let Some(pause) = self.get(tenant) else {
            return Ok(None);
        };
        match pause.admit().await {
            Admission::Open => Ok(None),
            Admission::Probe(probe) => Ok(Some(probe)),
            Admission::Paused(left) => Err(refusal(tenant, "paused by SES", left)),
        }
    }

    /// The time left of `tenant`'s pause, when it is paused now (not counting a probe out).
    pub fn left(&self, tenant: &str) -> Option<Duration> {
        self.get(tenant)?.left()
    }

    /// SES took a probe of the tenant's: it sends again.
    pub fn resumed(&self, tenant: &str) {
        if self.paused.lock().unwrap().remove(tenant).is_some() {
            tracing::info!(target: "mailsluice::upstream", tenant, "ses.tenant_resumed");
        }
    }

    /// SES paused the tenant (again): its messages wait out the pause; the refusal for this
    /// one.
    pub fn pause(&self, tenant: &str, text: &str) -> UpstreamError {
        let pause = self.pause;
        let entry = self
            .paused
            .lock()
            .unwrap()
            .entry(tenant.to_string())
            .or_default()
            .clone();
        entry.pause(pause);
        tracing::warn!(
            target: "mailsluice::upstream",
            tenant,
            pause_ms = pause.as_millis() as u64,
            ses = text,
            "ses.tenant_paused"
        );
        refusal(tenant, text, pause)
    }
}

impl TenantPauses for Tenants {
    fn admit<'a>(&'a self, tenant: &'a str) -> AdmitFuture<'a> {
        Box::pin(self.admission(tenant))
    }
}

/// `451 4.7.1` naming the tenant, with the time left of its pause.
pub fn refusal(tenant: &str, why: &str, left: Duration) -> UpstreamError {
    UpstreamError::TenantPaused(format!(
        "SES tenant {tenant} paused ({why}), retry after {:.3} s",
        left.as_secs_f64()
    ))
}
