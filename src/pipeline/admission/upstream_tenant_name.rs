//! The name of the upstream's tenant a message is sent as, as its route renders it, must be
//! one upstream takes as it is (SES: `[A-Za-z0-9_-]`, at most 64 characters). Reduced to SES's
//! alphabet, two tenants' names could become one (`a/b` and `a.b` both `a_b`), and one
//! tenant's messages would go, and count, as another's: such a message is refused instead.

use std::time::Duration;

use super::{Message, NotAdmitted, StepRefusal};
use crate::message::{Outcome, OutcomeFacts};
use crate::reply::Reply;

pub(super) const OUTCOME: Outcome = Outcome::Step(&FACTS);

const FACTS: OutcomeFacts = OutcomeFacts::refusal(
    "upstream_tenant_unfit",
    "its SES tenant's name is not one SES takes",
);

/// Go, or the refusal of a tenant name upstream does not take as it is: the client keeps the
/// message (the operator may change the route's `ses_tenant`).
pub(super) fn check(message: &Message<'_>) -> Result<(), NotAdmitted> {
    let route = message.identity.route.as_ref();
    let Some(name) = route.and_then(|r| r.unfit_tenant.as_deref()) else {
        return Ok(());
    };
    Err(NotAdmitted::Step(Box::new(StepRefusal {
        outcome: OUTCOME,
        reply: reply(name),
        key: Some(name.to_string()),
        again: Some(Duration::ZERO),
        holdable: false,
    })))
}

fn reply(name: &str) -> Reply {
    Reply::new(
        451,
        "4.3.5",
        format!("SES tenant name {name} is not one SES takes (A-Z a-z 0-9 _ -, at most 64)"),
    )
}
