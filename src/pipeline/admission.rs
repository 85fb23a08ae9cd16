//! The checks a message passes before it waits for tokens: one ordered list of steps, each
//! saying go, or why not ([`NotAdmitted`], typed). A message refused here takes no tokens and
//! nothing of it goes upstream.
//!
//! The steps, in order ([`Step`]):
//! 1. `Loop`: the message came back to this relay, or made more hops than `max_received`.
//! 2. `From`: an address of its `From:` field is outside its AUTH user's `senders`.
//! 3. `Reputation`: its tenant is past a limit of the reputation guard.
//! 4. `UpstreamIdentity`: its sender (the `From:` addresses of a null sender) is not a sending
//!    identity of the upstream's tenant it is sent as, or upstream does not know that tenant
//!    (SES; asked at MAIL too, when the route is known by then).
//! 5. `UpstreamPause`: its route's upstream is paused (a quota reply; the SES account's day
//!    quota, read by `serve::account`). With a fallback, the message goes there instead.
//! 6. `UpstreamTenantPause`: the upstream paused the tenant the message is sent as (SES).
//!
//! The last three need the route (a message with none is refused between them, `451 4.3.5`).
//! A pause that is over lets one message through as its probe; its verdict ends the pause or
//! renews it (`upstream::Pause`).
//!
//! Every pause a message can meet is a [`Paused`], scoped: an upstream, an upstream's tenant,
//! a reputation tenant. A new rule (a per-tenant daily cap, say) is one more [`Step`] here,
//! and its words where the driver answers (`crate::reply`).

use std::net::SocketAddr;
use std::time::Duration;

use super::message::Message;
use crate::config::Action;
use crate::message::received::Loop;
use crate::message::Outcome;
use crate::reputation::{Breach, Reputation};
use crate::state::context::Context;
use crate::upstream::{Admission, IdentityCheck, IdentityRefusal, Probe, Upstream, UpstreamError};

/// One check before the wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Loop,
    From,
    Reputation,
    UpstreamIdentity,
    UpstreamPause,
    UpstreamTenantPause,
}

impl Step {
    /// The steps that need no route, in order.
    pub const OF_MESSAGE: [Step; 3] = [Step::Loop, Step::From, Step::Reputation];
    /// The steps at the route's upstream, in order.
    pub const AT_UPSTREAM: [Step; 3] = [
        Step::UpstreamIdentity,
        Step::UpstreamPause,
        Step::UpstreamTenantPause,
    ];
}

/// Why a message may not go now.
pub enum NotAdmitted {
    /// It came back to this relay, or made too many hops: refused for good.
    Loop(Loop),
    /// A `From:` address outside its AUTH user's `senders`: refused for good.
    From { address: String, user: String },
    /// Its sender is no sending identity of the upstream's tenant, or upstream does not know
    /// the tenant.
    Identity(IdentityRefusal),
    /// A pause holds it back.
    Paused(Paused),
}

/// A pause in force: whom it holds back, and for how long when it has an end of its own.
pub struct Paused {
    pub scope: Scope,
    pub left: Option<Duration>,
}

/// Whom a pause holds back.
pub enum Scope {
    /// Every message to one upstream (after its quota reply; its account's day quota).
    Upstream,
    /// The tenant a message is sent as at its upstream (SES paused that tenant's sending):
    /// the refusal in the upstream's words.
    UpstreamTenant(UpstreamError),
    /// A tenant past a reputation limit, until its rates fall or an operator resumes it;
    /// `reject`: refused for good (`action = "reject"`) rather than paused.
    Tenant {
        key: String,
        breach: Breach,
        reject: bool,
    },
}

impl NotAdmitted {
    /// What the refusal counts as in the metrics and the log line.
    pub fn outcome(&self) -> Outcome {
        match self {
            NotAdmitted::Loop(_) => Outcome::Loop,
            NotAdmitted::From { .. } => Outcome::SenderRefused,
            NotAdmitted::Identity(IdentityRefusal::NotIdentity { .. }) => Outcome::IdentityRefused,
            // The tenant must be created at upstream first: the client keeps the message.
            NotAdmitted::Identity(IdentityRefusal::UnknownTenant { .. }) => {
                Outcome::UpstreamTenantUnknown
            }
            NotAdmitted::Paused(Paused { scope, .. }) => match scope {
                Scope::Upstream => Outcome::UpstreamPaused,
                Scope::UpstreamTenant(_) => Outcome::UpstreamTenantPaused,
                Scope::Tenant { .. } => Outcome::ReputationPaused,
            },
        }
    }
}

/// The steps of [`Step::OF_MESSAGE`], in order: the first refusal, or go.
pub async fn of_message(ctx: &Context, message: &Message<'_>) -> Result<(), NotAdmitted> {
    for step in Step::OF_MESSAGE {
        check(step, ctx, message, None).await?;
    }
    Ok(())
}

/// The probes a message carries past the checks at its upstream: a pause there is over, and
/// this message tests it.
#[derive(Default)]
pub struct Probes {
    upstream: Option<Probe>,
    tenant: Option<Probe>,
}

impl Probes {
    /// Upstream answered the message without pausing again: the upstream's pause is over;
    /// its tenant's too when upstream `took` the message. A probe dropped unanswered lets the
    /// next message probe.
    pub fn answered(self, took: bool) {
        if let Some(probe) = self.upstream {
            probe.open();
        }
        if let (Some(probe), true) = (self.tenant, took) {
            probe.open();
        }
    }
}

/// The steps of [`Step::AT_UPSTREAM`], in order, at the route's `upstream`: the first
/// refusal, or go with the probes the message carries.
pub async fn at_upstream(
    ctx: &Context,
    message: &Message<'_>,
    upstream: &Upstream,
) -> Result<Probes, NotAdmitted> {
    let mut probes = Probes::default();
    for step in Step::AT_UPSTREAM {
        let probe = check(step, ctx, message, Some(upstream)).await?;
        match step {
            Step::UpstreamPause => probes.upstream = probe,
            Step::UpstreamTenantPause => probes.tenant = probe,
            _ => {}
        }
    }
    Ok(probes)
}

/// One step: go (as a probe, maybe), or why not.
async fn check(
    step: Step,
    ctx: &Context,
    message: &Message<'_>,
    upstream: Option<&Upstream>,
) -> Result<Option<Probe>, NotAdmitted> {
    match step {
        Step::Loop => {
            let max = ctx.setup.config.smtp.max_received.get();
            match message.identity.hops.looping(max) {
                Some(looped) => Err(NotAdmitted::Loop(looped)),
                None => Ok(None),
            }
        }
        Step::From => {
            let Some(binding) = &message.identity.binding else {
                return Ok(None);
            };
            match binding.first_outside(&message.identity.from) {
                None => Ok(None),
                Some(address) => Err(NotAdmitted::From {
                    address: address.to_string(),
                    user: binding.user.clone(),
                }),
            }
        }
        Step::Reputation => {
            let (Some(guard), Some(key)) =
                (&ctx.services.reputation, &message.identity.reputation_key)
            else {
                return Ok(None);
            };
            let standing = reputation(guard, key, "DATA", message.peer).await;
            standing.map(|()| None).map_err(NotAdmitted::Paused)
        }
        Step::UpstreamIdentity => {
            let upstream = upstream.expect("a step at the upstream");
            let identity = message.identity;
            let tenant = (identity.route.as_ref()).and_then(|r| r.upstream_tenant.as_deref());
            let Some(tenant) = tenant else {
                return Ok(None);
            };
            // SES takes the From: field's address when the envelope sender is null.
            let senders = match &message.envelope.from {
                Some(from) => std::slice::from_ref(from),
                None => identity.from.as_slice(),
            };
            for sender in senders {
                sender_identity(ctx, upstream, tenant, sender).map_err(NotAdmitted::Identity)?;
            }
            Ok(None)
        }
        Step::UpstreamPause => {
            let upstream = upstream.expect("a step at the upstream");
            match upstream.pause.admit().await {
                Admission::Open => Ok(None),
                Admission::Probe(probe) => Ok(Some(probe)),
                Admission::Paused(left) => Err(NotAdmitted::Paused(Paused {
                    scope: Scope::Upstream,
                    left: Some(left),
                })),
            }
        }
        Step::UpstreamTenantPause => {
            let upstream = upstream.expect("a step at the upstream");
            let tenant =
                (message.identity.route.as_ref()).and_then(|r| r.upstream_tenant.as_deref());
            let (Some(tenants), Some(tenant)) = (upstream.forwarder.offers().tenants, tenant)
            else {
                return Ok(None);
            };
            tenants.admit(tenant).await.map_err(|error| {
                NotAdmitted::Paused(Paused {
                    scope: Scope::UpstreamTenant(error),
                    left: None,
                })
            })
        }
    }
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

/// Whether the reputation guard lets `key` send now (asked at MAIL too, when the key is known
/// by then; `at` says where, for the log line). Logs a refusal.
pub async fn reputation(
    guard: &Reputation,
    key: &str,
    at: &'static str,
    peer: SocketAddr,
) -> Result<(), Paused> {
    let Some(breach) = guard.standing(key).await else {
        return Ok(());
    };
    let reject = match guard.action {
        Action::Warn => return Ok(()),
        // A hold-mode message is held instead by its driver (it knows of the spool).
        Action::Pause | Action::Hold => false,
        Action::Reject => true,
    };
    tracing::info!(
        target: "mailsluice::reputation",
        tenant = key,
        at,
        peer = %peer,
        "reputation.refused"
    );
    Err(Paused {
        scope: Scope::Tenant {
            key: key.to_string(),
            breach,
            reject,
        },
        left: None,
    })
}
