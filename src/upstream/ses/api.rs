//! SES's API as the forwarder and its background work reach it: one SDK client (built at the
//! first request: the SDK's configuration loads asynchronously), and the calls about SES
//! tenants beyond sending. Those calls are made by background tasks (a message may wait for
//! one tenant's read, never make it); each is bounded in time (the upstream's `timeout_ms`,
//! the SDK's own retries off) and in number at once ([`CALLS_AT_ONCE`]), and each failure is
//! counted by operation for the metrics.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_sdk_sesv2::config::retry::RetryConfig;
use aws_sdk_sesv2::config::timeout::TimeoutConfig;
use aws_sdk_sesv2::config::StalledStreamProtectionConfig;
use aws_sdk_sesv2::config::{Region, SharedCredentialsProvider};
use aws_sdk_sesv2::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_sesv2::types::{
    ListTenantResourcesFilterKey, ReputationEntityType, SendingStatus, SuppressionListReason,
};
use aws_sdk_sesv2::Client;
use tokio::sync::{OnceCell, Semaphore};

use crate::config::SesUpstream;
use crate::upstream::{CallFailed, FailedCalls, SuppressReason, TenantStatus};

/// Calls about tenants in flight at once, per upstream: background work, kept well under
/// SES's own request rate so that it never crowds out `SendEmail`.
pub const CALLS_AT_ONCE: usize = 4;

/// Entries a `ListTenantResources` page holds (SES's most).
const PAGE_SIZE: i32 = 100;

/// Entries a `ListTenants` page holds.
const TENANTS_PAGE_SIZE: i32 = 100;

/// The operations counted, in the order of [`Api::failed`].
const OPERATIONS: [&str; 6] = [
    "ListTenants",
    "ListTenantResources",
    "GetTenant",
    "GetReputationEntity",
    "UpdateReputationEntityCustomerManagedStatus",
    "PutSuppressedDestination",
];

pub struct Api {
    ses: SesUpstream,
    timeout: Duration,
    pub(super) credentials: Option<SharedCredentialsProvider>,
    pub(super) client: OnceCell<Client>,
    slots: Semaphore,
    failed: [FailedCalls; 6],
}

impl Api {
    pub fn new(ses: SesUpstream, timeout: Duration) -> Api {
        Api {
            ses,
            timeout,
            credentials: None,
            client: OnceCell::new(),
            slots: Semaphore::new(CALLS_AT_ONCE),
            failed: OPERATIONS.map(|operation| FailedCalls {
                operation,
                count: AtomicU64::new(0),
            }),
        }
    }

    /// The failed calls, by operation.
    pub fn failed(&self) -> &[FailedCalls] {
        &self.failed
    }

    pub async fn client(&self) -> &Client {
        self.client
            .get_or_init(|| async {
                let timeouts = TimeoutConfig::builder()
                    .connect_timeout(self.timeout)
                    .operation_timeout(self.timeout)
                    .build();
                let mut loader = aws_config::defaults(BehaviorVersion::latest())
                    .region(Region::new(self.ses.region.clone()))
                    .retry_config(RetryConfig::disabled())
                    .timeout_config(timeouts)
                    .stalled_stream_protection(StalledStreamProtectionConfig::disabled());
                if let Some(url) = &self.ses.keys.endpoint_url {
                    loader = loader.endpoint_url(url);
                }
                if let Some(credentials) = &self.credentials {
                    loader = loader.credentials_provider(credentials.clone());
                }
                Client::new(&loader.load().await)
            })
            .await
    }

    /// The names of the account's tenants, every page read, at most `max` of them.
    pub async fn tenants(&self, max: usize) -> Result<Vec<String>, CallFailed> {
        let client = self.client().await;
        let mut names = Vec::new();
        let mut next = None;
        loop {
            let page = {
                let _slot = self.slots.acquire().await.expect("never closed");
                (client.list_tenants())
                    .page_size(TENANTS_PAGE_SIZE)
                    .set_next_token(next)
                    .send()
                    .await
                    .map_err(|e| self.failure(0, DisplayErrorContext(e)))?
            };
            let listed = page.tenants().iter().filter_map(|t| t.tenant_name());
            names.extend(listed.map(str::to_string));
            next = page.next_token().map(str::to_string);
            if next.is_none() || names.len() >= max {
                names.truncate(max);
                return Ok(names);
            }
        }
    }

    /// The names of the email identities (domains and addresses, lower-cased) SES associates
    /// with `tenant`, every page read; `None` when SES does not know the tenant.
    pub async fn identities(&self, tenant: &str) -> Result<Option<Vec<String>>, CallFailed> {
        let _slot = self.slots.acquire().await.expect("never closed");
        let client = self.client().await;
        let mut names = Vec::new();
        let mut next = None;
        loop {
            let page = client
                .list_tenant_resources()
                .tenant_name(tenant)
                .filter(ListTenantResourcesFilterKey::ResourceType, "EMAIL_IDENTITY")
                .page_size(PAGE_SIZE)
                .set_next_token(next)
                .send()
                .await;
            let page = match page {
                Ok(page) => page,
                Err(e) if e.code() == Some("NotFoundException") => return Ok(None),
                Err(e) => return Err(self.failure(1, DisplayErrorContext(e))),
            };
            let arns = page
                .tenant_resources()
                .iter()
                .filter_map(|r| r.resource_arn());
            names.extend(arns.filter_map(identity_name));
            next = page.next_token().map(str::to_string);
            if next.is_none() {
                return Ok(Some(names));
            }
        }
    }

    /// The tenant's ARN (what its reputation entity is named by); `None` when SES does not
    /// know the tenant.
    pub async fn tenant_arn(&self, tenant: &str) -> Result<Option<String>, CallFailed> {
        let _slot = self.slots.acquire().await.expect("never closed");
        let got = self
            .client()
            .await
            .get_tenant()
            .tenant_name(tenant)
            .send()
            .await;
        match got {
            Ok(out) => Ok(out
                .tenant()
                .and_then(|t| t.tenant_arn())
                .map(str::to_string)),
            Err(e) if e.code() == Some("NotFoundException") => Ok(None),
            Err(e) => Err(self.failure(2, DisplayErrorContext(e))),
        }
    }

    /// The standing of the reputation entity `arn` (a tenant's).
    pub async fn reputation(&self, arn: &str) -> Result<TenantStatus, CallFailed> {
        let _slot = self.slots.acquire().await.expect("never closed");
        let got = (self.client().await.get_reputation_entity())
            .reputation_entity_type(ReputationEntityType::Resource)
            .reputation_entity_reference(arn)
            .send()
            .await
            .map_err(|e| self.failure(3, DisplayErrorContext(e)))?;
        let entity = got.reputation_entity();
        let status = |r: Option<&aws_sdk_sesv2::types::StatusRecord>| {
            r.and_then(|r| r.status()).map(|s| s.as_str().to_string())
        };
        Ok(TenantStatus {
            customer_managed: status(entity.and_then(|e| e.customer_managed_status())),
            upstream_managed: status(entity.and_then(|e| e.aws_ses_managed_status())),
            aggregate: (entity.and_then(|e| e.sending_status_aggregate()))
                .map(|s| s.as_str().to_string()),
            impact: (entity.and_then(|e| e.reputation_impact())).map(|i| i.as_str().to_string()),
        })
    }

    /// Sets the customer-managed status of the reputation entity `arn`.
    pub async fn set_sending(&self, arn: &str, enabled: bool) -> Result<(), CallFailed> {
        let _slot = self.slots.acquire().await.expect("never closed");
        let status = match enabled {
            true => SendingStatus::Enabled,
            false => SendingStatus::Disabled,
        };
        (self.client().await)
            .update_reputation_entity_customer_managed_status()
            .reputation_entity_type(ReputationEntityType::Resource)
            .reputation_entity_reference(arn)
            .sending_status(status)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| self.failure(4, DisplayErrorContext(e)))
    }

    /// Puts `address` on `tenant`'s suppression list.
    pub async fn suppress(
        &self,
        tenant: &str,
        address: &str,
        reason: SuppressReason,
    ) -> Result<(), CallFailed> {
        let _slot = self.slots.acquire().await.expect("never closed");
        let reason = match reason {
            SuppressReason::Bounce => SuppressionListReason::Bounce,
            SuppressReason::Complaint => SuppressionListReason::Complaint,
        };
        (self.client().await)
            .put_suppressed_destination()
            .email_address(address)
            .reason(reason)
            .tenant_name(tenant)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| self.failure(5, DisplayErrorContext(e)))
    }

    /// Counts a failed call of operation `index`; the failure in words.
    fn failure(&self, index: usize, error: impl std::fmt::Display) -> CallFailed {
        self.failed[index].count.fetch_add(1, Ordering::Relaxed);
        CallFailed(format!("SES {}: {error}", OPERATIONS[index]))
    }
}

/// The identity an ARN names (`arn:aws:ses:REGION:ACCOUNT:identity/acme.example`), lower-cased.
fn identity_name(arn: &str) -> Option<String> {
    let (_, name) = arn.split_once(":identity/")?;
    Some(name.to_lowercase()).filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_identity_is_read_from_its_arn() {
        let name = |arn| super::identity_name(arn);
        assert_eq!(
            name("arn:aws:ses:eu-west-1:123456789012:identity/Acme.Example").as_deref(),
            Some("acme.example")
        );
        assert_eq!(
            name("arn:aws:ses:eu-west-1:1:identity/billing@acme.example").as_deref(),
            Some("billing@acme.example")
        );
        assert_eq!(name("arn:aws:ses:eu-west-1:1:configuration-set/x"), None);
    }
}
