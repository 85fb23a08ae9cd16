//! The tenant a message is sent as, paused at its upstream (SES paused that tenant's
//! sending): refused in the upstream's own words, as if upstream had answered. A pause that
//! is over lets one message through as its probe.

use super::{Message, NotAdmitted, Paused, Scope};
use crate::message::Outcome;
use crate::reply::{self, Reply};
use crate::upstream::{Probe, Upstream, UpstreamError};

pub(super) const OUTCOME: Outcome = Outcome::UpstreamTenantPaused;

/// Go (as the probe of a pause that is over, maybe), or upstream's refusal of the tenant.
pub(super) async fn check(
    message: &Message<'_>,
    upstream: &Upstream,
) -> Result<Option<Probe>, NotAdmitted> {
    let tenant = (message.identity.route.as_ref()).and_then(|r| r.upstream_tenant.as_deref());
    let (Some(tenants), Some(tenant)) = (upstream.forwarder.offers().tenants, tenant) else {
        return Ok(None);
    };
    tenants.admit(tenant).await.map_err(|error| {
        NotAdmitted::Paused(Paused {
            scope: Scope::UpstreamTenant(error),
            left: None,
        })
    })
}

/// Upstream's refusal, as the client would get it from upstream.
pub(super) fn reply(error: &UpstreamError) -> Reply {
    reply::upstream_verdict(&Err(error.clone()))
}
