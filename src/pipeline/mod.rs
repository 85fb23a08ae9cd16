//! A message's journey, from "a message as its driver has it" to one verdict, with no SMTP
//! session in it: whoever drives it (the session, for a live client; the spool's release, for
//! a held message) hands it an [`Intake`] and a [`Client`], then answers the [`Verdict`] and
//! has it accounted for once (`crate::pipeline::account`).
//!
//! The journey, file by file:
//! 0. `intake`: the one way in: the message's facts read into its identity, our fields
//!    written in front of it; then its journey, or (`hold`, for a driver that can hold) the
//!    message held in the spool.
//! 1. `admission/`: the checks before the wait, one ordered list, one file per step (a loop,
//!    the `From:` against the user's `senders`, the tenant's reputation; at the route's
//!    upstream, the sender against its tenant's identities, its pause and its tenant's pause).
//! 2. `wait`: the wait for tokens in the FIFO queues of the message's layers.
//! 3. `forward`: the upstream leg: a throttle reply absorbed (wait again, go again), a quota
//!    reply pausing the upstream, the route's fallback when the upstream cannot be reached
//!    or is paused.
//! 4. `settle`: the tokens settled by upstream's answer; the reputation guard told.
//! 5. `verdict`: what it came to: how it ended (typed), its outcome, the record for the log
//!    line; `answer`: what the client is told of it; `fate`: what that means for a message its
//!    driver keeps (taken, not now and when again, refused for good and by whom).
//!
//! `message` holds [`Message`], and `client` [`Client`] (what the journey needs of its
//! driver).
//!
//! The client gets `250` only after upstream accepted (pass-through, never store-and-forward)
//! or, in hold mode, once the message is on stable storage: a crash here loses nothing that
//! got its `250`.

pub(crate) mod account;
mod admission;
mod answer;
mod client;
mod fate;
mod forward;
mod hold;
mod intake;
mod message;
mod settle;
mod verdict;
mod wait;

use std::future::Future;
use std::pin::Pin;

pub use admission::{reputation, sender_identity, NotAdmitted, Paused, Probes, Scope};
pub use answer::answer;
pub use client::Client;
pub use fate::{Fate, Later, Refuser};
pub use intake::{intake, Hop, Intake, Judged, Received, Submitter};
pub use message::Message;
pub use verdict::{End, Record, Unanswered, Verdict};

use crate::state::context::Context;
use crate::state::grace_over::Bell;
use crate::throttle::ThrottleError;
use forward::Sent;
use wait::{Tokens, Wait};

/// The journey of `message`: admission, the wait, upstream, the tokens settled and the
/// reputation guard told; its verdict.
async fn deliver<C: Client>(ctx: &Context, message: &Message<'_>, client: &mut C) -> Verdict {
    let charges = &message.identity.charges;
    let verdict = match admission::of_message(ctx, message).await {
        Err(refusal) => Verdict::refused(refusal, Record::new(ctx, charges)),
        Ok(()) => {
            let grace_over = client.grace_over();
            // Pinned where it is made: the journey's future is large, and is not moved again.
            let journey = std::pin::pin!(to_upstream(ctx, message, client));
            within_grace(journey, grace_over.as_deref(), || Record::new(ctx, charges)).await
        }
    };
    if let Some(key) = &message.identity.reputation_key {
        settle::reputation(ctx, key, message.envelope, &verdict.record).await;
        settle::sent_as(ctx, key, message.identity, &verdict.record);
    }
    verdict
}

/// The work past the checks of the message: its route's upstream, that upstream's checks
/// (its pause: the fallback carries what a paused upstream cannot), the tokens, the
/// forwarding, and the tokens settled by upstream's answer.
async fn to_upstream<C: Client>(ctx: &Context, message: &Message<'_>, client: &mut C) -> Verdict {
    let identity = message.identity;
    let mut record = Record::new(ctx, &identity.charges);
    let Some(route) = &identity.route else {
        tracing::warn!(
            target: "mailsluice::route",
            peer = %message.peer,
            "no [[route]] matches this message; refused with 451 4.3.5"
        );
        return Verdict::no_route(record);
    };
    let upstream = ctx.setup.upstreams.get(&route.upstream).cloned();
    let upstream = upstream.expect("route names are validated with the config");
    record.via = upstream.name().to_string();
    let pieces = message.pieces();
    let out = forward::outgoing(ctx, message.envelope, &pieces, identity);
    let mut wait = Wait { ctx, client };
    let (sent, probes) = match admission::at_upstream(ctx, message, &upstream).await {
        Ok(probes) => {
            let tokens = Tokens::First(identity.charges.clone());
            let sent = match wait.take(tokens, &upstream, &mut record).await {
                Ok(permit) => {
                    forward::on_route(&mut wait, &upstream, identity, &out, permit, &mut record)
                        .await
                }
                Err(Unanswered::Paused(left)) => {
                    forward::while_paused(&mut wait, &upstream, identity, &out, left, &mut record)
                        .await
                }
                Err(unanswered) => Err(unanswered),
            };
            (sent, probes)
        }
        Err(NotAdmitted::Paused(Paused {
            scope: Scope::Upstream,
            left,
        })) => {
            let left = left.unwrap_or_default();
            let sent =
                forward::while_paused(&mut wait, &upstream, identity, &out, left, &mut record)
                    .await;
            (sent, Probes::default())
        }
        Err(refusal) => return Verdict::refused(refusal, record),
    };
    let (result, permits): Sent = match sent {
        Ok(sent) => sent,
        Err(unanswered) => return Verdict::unanswered(unanswered, record),
    };
    // Its tenant's pause is over only if the route's upstream took the message itself.
    probes.answered(result.is_ok() && record.via == upstream.name());
    settle::tokens(permits, &result);
    Verdict::upstream(result, record)
}

/// The journey's verdict, unless the shutdown's grace ends first: then `421` (the message may
/// have been delivered), or `421` at once if the grace was already over (nothing more goes
/// upstream). Biased: what the journey came to at the grace's end (a waiter's `421`,
/// upstream's answer) is the answer when it is there. `record` makes the record anew.
async fn within_grace(
    journey: Pin<&mut impl Future<Output = Verdict>>,
    grace_over: Option<&Bell>,
    record: impl FnOnce() -> Record,
) -> Verdict {
    let Some(grace_over) = grace_over else {
        return journey.await;
    };
    if grace_over.rung() {
        return Verdict::unanswered(Unanswered::Refused(ThrottleError::Shutdown), record());
    }
    tokio::select! {
        biased;
        verdict = journey => verdict,
        _ = grace_over.wait() => Verdict::unanswered(Unanswered::GraceOver, record()),
    }
}

#[cfg(test)]
mod tests;
