//! The `From:` field against the AUTH user's `senders`: a user may write only as the
//! addresses it was given (its MAIL FROM is held to them at MAIL, `smtp/mail.rs`). Refused
//! for good: nothing was forwarded.

use super::{Message, NotAdmitted, StepRefusal};
use crate::message::Outcome;
use crate::reply::Reply;

const OUTCOME: Outcome = Outcome::SenderRefused;

/// Go, or the first `From:` address outside the user's `senders`.
pub(super) fn check(message: &Message<'_>) -> Result<(), NotAdmitted> {
    let Some(binding) = &message.identity.binding else {
        return Ok(());
    };
    match binding.first_outside(&message.identity.from) {
        None => Ok(()),
        Some(address) => Err(NotAdmitted::Step(Box::new(refusal(address, &binding.user)))),
    }
}

/// `550 5.7.1`, naming the address and the user: for good, and never held.
fn refusal(address: &str, user: &str) -> StepRefusal {
    StepRefusal {
        outcome: OUTCOME,
        reply: Reply::new(
            550,
            "5.7.1",
            format!("From: <{address}> not allowed for user {user}"),
        ),
        key: None,
        again: None,
        holdable: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_from_outside_the_senders_is_refused_for_good_in_its_words() {
        let refusal = refusal("a@b.example", "app");
        assert_eq!(refusal.outcome, Outcome::SenderRefused);
        assert_eq!(
            refusal.reply.text(),
            "550 5.7.1 From: <a@b.example> not allowed for user app"
        );
        assert_eq!(
            (refusal.key, refusal.again, refusal.holdable),
            (None, None, false)
        );
    }
}
