//! A loop: the message names this relay in a `Received:` field already (it came back), or
//! holds more of them than `smtp.max_received`. Refused for good: sent again, it would loop
//! again.

use super::{Message, NotAdmitted};
use crate::message::received::Loop;
use crate::message::Outcome;
use crate::reply::Reply;
use crate::state::context::Context;

pub(super) const OUTCOME: Outcome = Outcome::Loop;

/// Go, or the loop it is in.
pub(super) fn check(ctx: &Context, message: &Message<'_>) -> Result<(), NotAdmitted> {
    let max = ctx.setup.config.smtp.max_received.get();
    match message.identity.hops.looping(max) {
        Some(looped) => Err(NotAdmitted::Loop(looped)),
        None => Ok(()),
    }
}

/// `554 5.4.6`, saying which loop.
pub(super) fn reply(looped: Loop) -> Reply {
    match looped {
        Loop::CameBack => Reply::new(
            554,
            "5.4.6",
            "Mail loop: the message already went through this relay",
        ),
        Loop::TooManyHops => Reply::new(554, "5.4.6", "Too many hops (mail loop?)"),
    }
}
