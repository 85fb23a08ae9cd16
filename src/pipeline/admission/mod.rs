//! The checks a message passes before it waits for tokens: one ordered list of steps, each in
//! a file of its own with its check, its refusal's words and its outcome, saying go, or why
//! not ([`NotAdmitted`]: typed where the rest of the journey matches on it, else a
//! [`StepRefusal`] that says it all). A message refused here takes no tokens and nothing of it
//! goes upstream.
//!
//! The steps, in order ([`of_message`], then [`at_upstream`]):
//! 1. `hops`: the message came back to this relay, or made more hops than `max_received`.
//! 2. `from`: an address of its `From:` field is outside its AUTH user's `senders`.
//! 3. `reputation`: its tenant is past a limit of the reputation guard.
//! 4. `upstream_tenant_name`: the name of the upstream's tenant it is sent as is not one
//!    upstream takes as it is (SES's alphabet).
//! 5. `upstream_identity`: its sender (the `From:` addresses of a null sender) is not a
//!    sending identity of the upstream's tenant it is sent as, or upstream does not know that
//!    tenant (SES; asked at MAIL too, when the route is known by then; at the dot, a tenant
//!    never read yet is read first).
//! 6. `upstream_pause`: its route's upstream is paused (a quota reply; the SES account's day
//!    quota, read by `serve::account`). With a fallback, the message goes there instead.
//! 7. `upstream_tenant_pause`: the upstream paused the tenant the message is sent as (SES).
//!
//! The last four need the route (a message with none is refused between them, `451 4.3.5`).
//! A pause that is over lets one message through as its probe; its verdict ends the pause or
//! renews it (`upstream::Pause`). Every pause a message can meet is a [`Paused`], scoped: an
//! upstream, an upstream's tenant, a reputation tenant; a driver may hold what a pause refused.
//!
//! A new step (a per-tenant daily cap, say) is its file here: its check, what it keeps
//! between messages (`Services::kept`), its outcome (an `Outcome::Step` with its row:
//! `OUTCOME`) and its refusal (`NotAdmitted::Step`, a [`StepRefusal`]: its outcome, its reply,
//! the key it is about, when it may go again, whether a driver may hold it). Here, its
//! `mod` line, its line in the list below and its `OUTCOME` in [`STEP_OUTCOMES`]; its config
//! row. Nothing else in the journey changes: it reads the refusal's data (`outcomes` puts the
//! outcome in `Outcome::ALL`).

mod from;
mod hops;
mod outcomes;
mod reputation;
mod step_refusal;
mod upstream_identity;
mod upstream_pause;
mod upstream_tenant_name;
mod upstream_tenant_pause;

use std::time::Duration;

use super::message::Message;
use crate::message::received::Loop;
use crate::message::Outcome;
use crate::reply::Reply;
use crate::reputation::Breach;
use crate::state::context::Context;
use crate::upstream::{IdentityRefusal, Probe, Upstream, UpstreamError};

pub use reputation::reputation;
pub use step_refusal::StepRefusal;
pub use upstream_identity::sender_identity;

/// The outcomes of the steps that declare their own (`Outcome::Step`), in the order of the
/// list: `Outcome::ALL` lists them after the relay's own admission outcomes.
const STEP_OUTCOMES: &[Outcome] = &[upstream_tenant_name::OUTCOME];

/// The steps that need no route, in order: the first refusal, or go.
pub async fn of_message(ctx: &Context, message: &Message<'_>) -> Result<(), NotAdmitted> {
    hops::check(ctx, message)?;
    from::check(message)?;
    reputation::check(ctx, message).await?;
    Ok(())
}

/// The steps at the route's `upstream`, in order: the first refusal, or go with the probes the
/// message carries.
pub async fn at_upstream(
    ctx: &Context,
    message: &Message<'_>,
    upstream: &Upstream,
) -> Result<Probes, NotAdmitted> {
    upstream_tenant_name::check(message)?;
    upstream_identity::check(ctx, message, upstream).await?;
    let upstream_probe = upstream_pause::check(upstream).await?;
    let tenant_probe = upstream_tenant_pause::check(message, upstream).await?;
    Ok(Probes {
        upstream: upstream_probe,
        tenant: tenant_probe,
    })
}

/// Why a message may not go now: a typed variant for a step whose refusal the journey
/// matches on (hold mode and the release's `fate` on the pauses; the upstream's pause for its
/// fallback), the pauses sharing [`Paused`]; any other step's refusal as it says it (`Step`).
pub enum NotAdmitted {
    /// It came back to this relay, or made too many hops: refused for good (`hops`).
    Loop(Loop),
    /// Its sender is no sending identity of the upstream's tenant, or upstream does not know
    /// the tenant (`upstream_identity`).
    Identity(IdentityRefusal),
    /// A pause holds it back (`reputation`, `upstream_pause`, `upstream_tenant_pause`).
    Paused(Paused),
    /// Any other step's refusal, in its own words and with its own outcome (boxed: a refusal
    /// is rare, and the journey's `Result`s stay small).
    Step(Box<StepRefusal>),
}

impl NotAdmitted {
    /// What the refusal counts as in the metrics and the log line.
    pub fn outcome(&self) -> Outcome {
        match self {
            NotAdmitted::Loop(_) => hops::OUTCOME,
            NotAdmitted::Identity(refusal) => upstream_identity::outcome(refusal),
            NotAdmitted::Paused(paused) => paused.outcome(),
            NotAdmitted::Step(refusal) => refusal.outcome,
        }
    }

    /// What the client is told.
    pub fn reply(&self) -> Reply {
        match self {
            NotAdmitted::Loop(looped) => hops::reply(*looped),
            NotAdmitted::Identity(refusal) => upstream_identity::reply(refusal),
            NotAdmitted::Paused(paused) => paused.reply(),
            NotAdmitted::Step(refusal) => refusal.reply.clone(),
        }
    }

    /// The key the refusal is about when it is no layer's (the reputation guard's tenant, a
    /// step's own), for the log line and the status page.
    pub fn key(&self) -> Option<&str> {
        match self {
            NotAdmitted::Paused(Paused {
                scope: Scope::Tenant { key, .. },
                ..
            }) => Some(key),
            NotAdmitted::Step(refusal) => refusal.key.as_deref(),
            _ => None,
        }
    }
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

impl Paused {
    /// What the pause counts as, by whom it holds.
    pub fn outcome(&self) -> Outcome {
        match self.scope {
            Scope::Upstream => upstream_pause::OUTCOME,
            Scope::UpstreamTenant(_) => upstream_tenant_pause::OUTCOME,
            Scope::Tenant { .. } => reputation::OUTCOME,
        }
    }

    /// What the client is told, by whom it holds (at MAIL too, for a reputation tenant).
    pub fn reply(&self) -> Reply {
        match &self.scope {
            Scope::Upstream => upstream_pause::reply(self.left),
            Scope::UpstreamTenant(error) => upstream_tenant_pause::reply(error),
            Scope::Tenant {
                key,
                breach,
                reject,
            } => reputation::reply(key, breach, *reject),
        }
    }
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
