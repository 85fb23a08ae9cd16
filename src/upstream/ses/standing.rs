//! Each SES tenant's standing as SES last said it (`GetReputationEntity`, read by the
//! reputation guard's SES sync), and the ARN its reputation entity is named by: a tenant whose
//! aggregate status is `DISABLED` has its messages paused in the relay before SES refuses any.
//! After a write of the customer-managed status the aggregate is worked out as SES does (it is
//! `DISABLED` when either status is), so a resume takes effect without waiting for a read.
//!
//! At most `max` tenants are held; past it the one read longest ago is forgotten.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::upstream::{TenantStatus, UpstreamError};

#[derive(Default)]
struct Entry {
    arn: Option<String>,
    status: Option<TenantStatus>,
    /// When it was last stored (a counter), for the eviction.
    at: u64,
}

pub struct Standing {
    max: usize,
    entries: Mutex<HashMap<String, Entry>>,
    stored: std::sync::atomic::AtomicU64,
}

impl Standing {
    pub fn new(max: usize) -> Standing {
        Standing {
            max: max.max(1),
            entries: Mutex::default(),
            stored: Default::default(),
        }
    }

    /// Runs `change` on `tenant`'s entry, made when missing (forgetting the oldest at the
    /// bound).
    fn with<T>(&self, tenant: &str, change: impl FnOnce(&mut Entry) -> T) -> T {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if !entries.contains_key(tenant) && entries.len() >= self.max {
            let oldest = (entries.iter())
                .min_by_key(|(_, e)| e.at)
                .map(|(t, _)| t.clone());
            if let Some(oldest) = oldest {
                entries.remove(&oldest);
            }
        }
        let entry = entries.entry(tenant.to_string()).or_default();
        entry.at = (self.stored).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        change(entry)
    }

    pub fn arn(&self, tenant: &str) -> Option<String> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.get(tenant).and_then(|e| e.arn.clone())
    }

    /// Keeps `arn`, or forgets it (`None`: a read failed; the tenant may have been made anew).
    pub fn set_arn(&self, tenant: &str, arn: Option<String>) {
        self.with(tenant, |e| e.arn = arn);
    }

    /// What SES said of `tenant`.
    pub fn stored(&self, tenant: &str, status: TenantStatus) {
        self.with(tenant, |e| e.status = Some(status));
    }

    /// The relay set `tenant`'s customer-managed status.
    pub fn wrote(&self, tenant: &str, enabled: bool) {
        self.with(tenant, |e| {
            let status = e.status.get_or_insert_default();
            let set = if enabled { "ENABLED" } else { "DISABLED" };
            status.customer_managed = Some(set.to_string());
            let by_ses = status.upstream_managed.as_deref() == Some("DISABLED");
            let aggregate = if by_ses || !enabled {
                "DISABLED"
            } else {
                "ENABLED"
            };
            status.aggregate = Some(aggregate.to_string());
        });
    }

    /// The refusal of a message of `tenant` while SES says it may not send.
    pub fn refusal(&self, tenant: &str) -> Option<UpstreamError> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let status = entries.get(tenant)?.status.as_ref()?;
        let text = || format!("SES tenant {tenant} disabled at SES");
        status
            .disabled()
            .then(|| UpstreamError::TenantPaused(text()))
    }

    /// Every tenant read, sorted.
    pub fn known(&self) -> Vec<(String, TenantStatus)> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let mut known: Vec<_> = (entries.iter())
            .filter_map(|(t, e)| Some((t.clone(), e.status.clone()?)))
            .collect();
        known.sort_by(|a, b| a.0.cmp(&b.0));
        known
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(customer: &str, managed: &str, aggregate: &str) -> TenantStatus {
        TenantStatus {
            customer_managed: Some(customer.into()),
            upstream_managed: Some(managed.into()),
            aggregate: Some(aggregate.into()),
            impact: Some("HIGH".into()),
        }
    }

    #[test]
    fn a_tenant_disabled_at_ses_is_refused_until_it_may_send_again() {
        let standing = Standing::new(10);
        assert!(standing.refusal("acme").is_none(), "never read: it goes");
        standing.stored("acme", status("ENABLED", "DISABLED", "DISABLED"));
        let refusal = standing.refusal("acme").unwrap();
        assert_eq!(
            refusal.reply(),
            Some((451, Some("4.7.1"), "SES tenant acme disabled at SES"))
        );
        standing.wrote("acme", true);
        assert!(standing.refusal("acme").is_some(), "SES itself disabled it");
        standing.stored("acme", status("DISABLED", "ENABLED", "DISABLED"));
        standing.wrote("acme", true);
        assert!(
            standing.refusal("acme").is_none(),
            "our own DISABLED lifted"
        );
        standing.wrote("acme", false);
        assert!(standing.refusal("acme").is_some());
    }

    #[test]
    fn past_max_the_tenant_stored_longest_ago_is_forgotten() {
        let standing = Standing::new(2);
        standing.stored("a", status("ENABLED", "ENABLED", "ENABLED"));
        standing.set_arn("b", Some("arn-b".into()));
        standing.stored("a", status("ENABLED", "ENABLED", "ENABLED"));
        standing.set_arn("c", Some("arn-c".into()));
        assert_eq!(standing.arn("b"), None);
        assert_eq!(standing.arn("c").as_deref(), Some("arn-c"));
        assert_eq!(standing.known().len(), 1);
    }
}
