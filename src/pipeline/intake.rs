//! The one way into the pipeline, for both drivers (a session's final dot, the spool's
//! release): the driver hands over what it has ([`Intake`]: the envelope, the bytes, who gave
//! them, our `Received:` field) and gets the verdict. Here the message's facts are read into
//! its identity, our fields written in front of it, and its journey run, or the message held
//! in the spool when its driver can hold it (`hold`). One place, so a held message is read at
//! release exactly as it was at its final dot.

use std::net::SocketAddr;

use super::hold::{self, Holding, ToSpool};
use super::{deliver, Client, Message, Record, Unanswered, Verdict};
use crate::message::Envelope;
use crate::policy::{self, Binding, MessageFacts};
use crate::spool::Origin;
use crate::state::context::Context;

/// A message as its driver hands it to the pipeline.
pub struct Intake<'a> {
    pub envelope: &'a Envelope,
    /// The message as the client sent it; a held report's starts with the fields read only
    /// for its identity (`key_fields` bytes of them).
    pub body: &'a [u8],
    /// The length of the fields at the start of `body` that are read, never sent (a report's:
    /// its original's header section, so it is keyed as its original); 0 for a live message.
    pub key_fields: usize,
    pub submitter: Submitter<'a>,
    pub received: Received<'a>,
    /// The driver can hold the message in the spool (hold mode): a session can (its client
    /// gets the `250`), a release cannot (the message is held already).
    pub can_hold: bool,
}

/// Who gave the relay the message, as its identity is read. The spool keeps it with a held
/// message as an [`Origin`] (owned, on disk); this is the borrowed view a session makes for
/// every message without copying, with the AUTH user's `senders`: only the final dot checks
/// them, and a message is checked against them before the spool takes it.
#[derive(Clone, Copy)]
pub struct Submitter<'a> {
    /// The AUTH user's tenant.
    pub auth_tenant: Option<&'a str>,
    /// Whether the client may choose its key with a header.
    pub header_trusted: bool,
    pub peer: SocketAddr,
    /// The AUTH user's `senders`, when it has them.
    pub binding: Option<&'a Binding>,
}

impl<'a> Submitter<'a> {
    /// A held message's submitter, as the spool kept it.
    pub fn held(origin: &'a Origin) -> Submitter<'a> {
        Submitter {
            auth_tenant: origin.auth_tenant.as_deref(),
            header_trusted: origin.header_trusted,
            peer: origin.peer,
            binding: None,
        }
    }

    /// What the policy may look at of `envelope` and `body` from this submitter.
    pub fn facts(&self, envelope: &'a Envelope, body: &'a [u8]) -> MessageFacts<'a> {
        MessageFacts {
            auth_tenant: self.auth_tenant,
            header_trusted: self.header_trusted,
            sender: envelope.from.as_deref(),
            rcpts: &envelope.rcpts,
            client_ip: self.peer.ip(),
            message: body,
            binding: self.binding,
        }
    }

    /// As the spool keeps it with a held message.
    fn origin(&self) -> Origin {
        Origin {
            auth_tenant: self.auth_tenant.map(str::to_string),
            header_trusted: self.header_trusted,
            peer: self.peer,
        }
    }
}

/// Our `Received:` field.
pub enum Received<'a> {
    /// A new message's: written by the hop that received it, for the id the intake gives it.
    New(&'a (dyn Hop + Sync)),
    /// A held message's, written at its final dot, with its id.
    Held { id: &'a str, field: &'a [u8] },
}

/// The hop a new message made to us, as our `Received:` field tells it (the session's EHLO
/// name, the client's address, the protocol): the receiver knows it, the pipeline does not.
pub trait Hop {
    /// Our `Received:` field for message `id` (CRLF at its end).
    fn received(&self, id: &str, envelope: &Envelope) -> Vec<u8>;
}

/// A message's verdict, with what its account names of the message.
pub struct Judged {
    pub verdict: Verdict,
    /// The relay's id of the message (in our `Received:` field).
    pub id: String,
    /// Its tenant (`[tenant]`), for its webhooks.
    pub tenant: String,
    /// Its `traceparent` header, for its spans.
    pub traceparent: Option<String>,
}

/// Takes `intake` in: its identity read, our fields written, its journey run (with `client`
/// waiting for it) or the message held; the verdict, which its driver answers and accounts
/// for once.
pub async fn intake<C: Client>(ctx: &Context, intake: Intake<'_>, client: &mut C) -> Judged {
    let Intake {
        envelope,
        body,
        key_fields,
        submitter,
        received,
        can_hold,
    } = intake;
    let mut identity = policy::identify(ctx.rules(), &submitter.facts(envelope, body));
    // A report's identity fields are read, never sent.
    if key_fields > 0 {
        identity.key_headers.retain(|r| r.start >= key_fields);
        identity.key_headers.insert(0, 0..key_fields);
    }
    let (id, mut added) = match received {
        Received::New(hop) => {
            let id = crate::message::new_id();
            let field = hop.received(&id, envelope);
            (id, field)
        }
        Received::Held { id, field } => (id.to_string(), field.to_vec()),
    };
    let received_len = added.len();
    // The route's fields follow ours (the client's fields of those names are left out of its
    // bytes by `Identity::forwarded`).
    added.extend_from_slice(&identity.route_fields());
    let message = Message {
        id: &id,
        envelope,
        body,
        identity: &identity,
        added: &added,
        peer: submitter.peer,
    };
    let spooled = || ToSpool {
        received: &added[..received_len],
        origin: submitter.origin(),
    };
    let verdict = journey_or_hold(ctx, &message, client, can_hold, spooled).await;
    Judged {
        verdict,
        id,
        tenant: identity.tenant,
        traceparent: identity.traceparent,
    }
}

/// The message's journey, or (a driver that can hold) the message held: at once while its key
/// has messages held or its upstream is failing, or when its journey ends in anything
/// temporary. A held message whose upstream is failing goes only as that upstream's probe.
async fn journey_or_hold<'a, C: Client>(
    ctx: &Context,
    message: &Message<'_>,
    client: &mut C,
    can_hold: bool,
    spooled: impl FnOnce() -> ToSpool<'a>,
) -> Verdict {
    let holding = match can_hold {
        true => Holding::of(ctx, message.identity),
        false => None,
    };
    let failing = hold::failing_upstream(ctx, message.identity);
    match (holding, failing) {
        // Its key has messages held (it goes behind them, in order), or its upstream is
        // failing (it would only meet the same failure): held at once.
        (Some(holding), failing) if holding.at_once() || failing.is_some() => {
            hold::at_once(ctx, holding, message, spooled()).await
        }
        // A held message while its upstream is failing: only the probe tries it.
        (None, Some(upstream)) if !can_hold => match hold::probe(&upstream) {
            Ok(()) => std::pin::pin!(deliver(ctx, message, client)).await,
            Err(next) => {
                let mut record = Record::new(ctx, &message.identity.charges);
                record.via = upstream.name().to_string();
                Verdict::unanswered(Unanswered::UpstreamFailing(next), record)
            }
        },
        (holding, _) => {
            // Pinned where it is made: the journey's future is large, and is not moved again.
            let verdict = std::pin::pin!(deliver(ctx, message, client)).await;
            match holding {
                Some(holding) if hold::holdable(ctx, &verdict.end) => {
                    holding.hold(ctx, message, spooled(), verdict.record).await
                }
                _ => verdict,
            }
        }
    }
}
