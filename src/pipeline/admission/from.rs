//! The `From:` field against the AUTH user's `senders`: a user may write only as the
//! addresses it was given (its MAIL FROM is held to them at MAIL, `smtp/mail.rs`). A message
//! without a `From:`, or with one that is not exactly an address list, is refused too: what
//! a mail reader shows must be what was checked. Refused for good: nothing was forwarded.

use super::{Message, NotAdmitted, StepRefusal};
use crate::message::Outcome;
use crate::policy::FromRefusal;
use crate::reply::Reply;

const OUTCOME: Outcome = Outcome::SenderRefused;

/// Go, or why the `From:` fields fail the user's `senders`.
pub(super) fn check(message: &Message<'_>) -> Result<(), NotAdmitted> {
    let Some(binding) = &message.identity.binding else {
        return Ok(());
    };
    match binding.refusal(&message.identity.from) {
        None => Ok(()),
        Some(why) => Err(NotAdmitted::Step(Box::new(refusal(why, &binding.user)))),
    }
}

/// `550 5.7.1`, naming the address (when there is one) and the user: for good, and never
/// held.
fn refusal(why: FromRefusal<'_>, user: &str) -> StepRefusal {
    let text = match why {
        FromRefusal::Missing => "From: missing".to_string(),
        FromRefusal::Unreadable => format!("From: unreadable address for user {user}"),
        FromRefusal::Outside(address) => {
            format!("From: <{address}> not allowed for user {user}")
        }
    };
    StepRefusal {
        outcome: OUTCOME,
        reply: Reply::new(550, "5.7.1", text),
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
        let refusal = refusal(FromRefusal::Outside("a@b.example"), "app");
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

    #[test]
    fn a_missing_or_unreadable_from_is_refused_in_its_words() {
        let text = |why| refusal(why, "app").reply.text();
        assert_eq!(text(FromRefusal::Missing), "550 5.7.1 From: missing");
        assert_eq!(
            text(FromRefusal::Unreadable),
            "550 5.7.1 From: unreadable address for user app"
        );
    }
}
