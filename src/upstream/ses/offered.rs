//! What the SES forwarder offers about SES tenants beyond sending: their pauses (SES's own
//! answers, and a tenant SES disabled), their sending identities, and their standing read and
//! set through SES's API.

use super::SesForwarder;
use crate::upstream::{
    AdmitFuture, CallFailed, IdentityCheck, IdentityFuture, StandingFuture, SuppressReason,
    TenantIdentities, TenantPauses, TenantStanding, TenantStatus,
};

/// A tenant SES disabled is refused before SES is asked; then the pauses SES's own answers
/// put on it.
impl TenantPauses for SesForwarder {
    fn admit<'a>(&'a self, tenant: &'a str) -> AdmitFuture<'a> {
        match self.standing.refusal(tenant) {
            Some(refusal) => Box::pin(async move { Err(refusal) }),
            None => self.tenants.admit(tenant),
        }
    }
}

impl TenantStanding for SesForwarder {
    fn read<'a>(&'a self, tenant: &'a str) -> StandingFuture<'a, TenantStatus> {
        Box::pin(async move {
            let arn = self.arn(tenant).await?;
            let read = self.api.reputation(&arn).await;
            match &read {
                Ok(status) => self.standing.stored(tenant, status.clone()),
                // The tenant may have been made anew, with another ARN.
                Err(_) => self.standing.set_arn(tenant, None),
            }
            read
        })
    }

    fn set_sending<'a>(&'a self, tenant: &'a str, enabled: bool) -> StandingFuture<'a, ()> {
        Box::pin(async move {
            let arn = self.arn(tenant).await?;
            self.api.set_sending(&arn, enabled).await?;
            self.standing.wrote(tenant, enabled);
            Ok(())
        })
    }

    fn suppress<'a>(
        &'a self,
        tenant: &'a str,
        address: &'a str,
        reason: SuppressReason,
    ) -> StandingFuture<'a, ()> {
        Box::pin(self.api.suppress(tenant, address, reason))
    }

    fn known(&self) -> Vec<(String, TenantStatus)> {
        self.standing.known()
    }
}

impl SesForwarder {
    /// The ARN of `tenant`'s reputation entity: kept, or read (`GetTenant`).
    async fn arn(&self, tenant: &str) -> Result<String, CallFailed> {
        if let Some(arn) = self.standing.arn(tenant) {
            return Ok(arn);
        }
        let arn = (self.api.tenant_arn(tenant).await?)
            .ok_or_else(|| CallFailed(format!("SES tenant {tenant} unknown to SES")))?;
        self.standing.set_arn(tenant, Some(arn.clone()));
        Ok(arn)
    }
}

impl TenantIdentities for SesForwarder {
    fn start(&self) {
        self.identities.start(&self.api);
    }

    fn check(&self, tenant: &str, sender: &str) -> IdentityCheck {
        self.identities.check(tenant, sender, &self.api)
    }

    fn check_read<'a>(&'a self, tenant: &'a str, sender: &'a str) -> IdentityFuture<'a> {
        Box::pin(self.identities.check_read(tenant, sender, &self.api))
    }

    fn unknown_tenants(&self) -> Vec<String> {
        self.identities.unknown()
    }
}
