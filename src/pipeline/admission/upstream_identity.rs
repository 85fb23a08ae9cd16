//! The sender against the sending identities of the upstream's tenant it is sent as (SES): a
//! message SES would refuse after its whole body is refused here, before its tokens. Asked at
//! MAIL too, when the route is known by then (`smtp/mail.rs`, with the same words).

use super::{Message, NotAdmitted};
use crate::message::Outcome;
use crate::reply::{self, Reply};
use crate::state::context::Context;
use crate::upstream::{IdentityCheck, IdentityRefusal, Upstream};

/// A sender that is no identity of the tenant is refused for good; a tenant upstream does not
/// know must be created there first: the client keeps the message.
pub(super) fn outcome(refusal: &IdentityRefusal) -> Outcome {
    match refusal {
        IdentityRefusal::NotIdentity { .. } => Outcome::IdentityRefused,
        IdentityRefusal::UnknownTenant { .. } => Outcome::UpstreamTenantUnknown,
    }
}

/// Go, or why its sender may not send as the route's upstream tenant.
pub(super) fn check(
    ctx: &Context,
    message: &Message<'_>,
    upstream: &Upstream,
) -> Result<(), NotAdmitted> {
    let identity = message.identity;
    let tenant = (identity.route.as_ref()).and_then(|r| r.upstream_tenant.as_deref());
    let Some(tenant) = tenant else {
        return Ok(());
    };
    // SES takes the From: field's address when the envelope sender is null.
    let senders = match &message.envelope.from {
        Some(from) => std::slice::from_ref(from),
        None => identity.from.as_slice(),
    };
    for sender in senders {
        sender_identity(ctx, upstream, tenant, sender).map_err(NotAdmitted::Identity)?;
    }
    Ok(())
}

/// Whether `sender` may send as `upstream`'s tenant `tenant`, from what the upstream learned
/// before (asked at MAIL too, when the route is known by then; never a call upstream). One
/// whose identities are not known goes, for upstream to judge, and is counted.
pub fn sender_identity(
    ctx: &Context,
    upstream: &Upstream,
    tenant: &str,
    sender: &str,
) -> Result<(), IdentityRefusal> {
    let Some(identities) = upstream.forwarder.offers().identities else {
        return Ok(());
    };
    match identities.check(tenant, sender) {
        IdentityCheck::Allowed => Ok(()),
        IdentityCheck::Unchecked => {
            ctx.services.metrics.ses().identity_unchecked();
            Ok(())
        }
        IdentityCheck::Refused(refusal) => Err(refusal),
    }
}

/// The words MAIL uses too.
pub(super) fn reply(refusal: &IdentityRefusal) -> Reply {
    reply::identity_refused(refusal)
}
