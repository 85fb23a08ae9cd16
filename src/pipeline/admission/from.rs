//! The `From:` field against the AUTH user's `senders`: a user may write only as the
//! addresses it was given (its MAIL FROM is held to them at MAIL, `smtp/mail.rs`). Refused
//! for good: nothing was forwarded.

use super::{Message, NotAdmitted};
use crate::message::Outcome;
use crate::reply::Reply;

pub(super) const OUTCOME: Outcome = Outcome::SenderRefused;

/// Go, or the first `From:` address outside the user's `senders`.
pub(super) fn check(message: &Message<'_>) -> Result<(), NotAdmitted> {
    let Some(binding) = &message.identity.binding else {
        return Ok(());
    };
    match binding.first_outside(&message.identity.from) {
        None => Ok(()),
        Some(address) => Err(NotAdmitted::From {
            address: address.to_string(),
            user: binding.user.clone(),
        }),
    }
}

/// `550 5.7.1`, naming the address and the user.
pub(super) fn reply(address: &str, user: &str) -> Reply {
    Reply::new(
        550,
        "5.7.1",
        format!("From: <{address}> not allowed for user {user}"),
    )
}
