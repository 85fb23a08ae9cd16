//! The final dot: the message's identity read (`policy`), our fields written in front of it
//! (`received`), its journey run (`pipeline`) or, for a hold-mode layer, the message held in
//! the spool (`hold`), and the verdict answered (`reply`) and logged (`report`) once.

use std::sync::Arc;
use std::time::SystemTime;

use tokio::time::Instant;

use super::conn::Conn;
use super::hold::{self, Holding};
use super::received::{self, Trace};
use super::report::{self, Answered};
use super::session::{Flow, Session};
use crate::message::Envelope;
use crate::observe::activity::{Activity, Doing};
use crate::pipeline::{self, Client, Message, Verdict};
use crate::policy::{self, MessageFacts};
use crate::state::grace_over::Bell;

impl Session {
    pub async fn deliver(&mut self, envelope: Envelope, body: Vec<u8>) -> Flow {
        let started = Instant::now();
        let dot = SystemTime::now();
        let identity = policy::identify(self.ctx.rules(), &self.facts(&envelope, &body));
        let id = crate::message::new_id();
        let mut added = self.received_field(&id, &envelope);
        let received_len = added.len();
        added.extend_from_slice(&identity.route_fields());
        let received = &added[..received_len];
        let message = Message {
            id: &id,
            envelope: &envelope,
            body: &body,
            identity: &identity,
            added: &added,
            peer: self.peer,
        };
        let holding = Holding::of(&self.ctx, &identity);
        let verdict = match holding {
            // Its key has messages held: it goes behind them, in order.
            Some(holding) if holding.at_once() => {
                let it = self.spooled(&id, received);
                hold::at_once(&self.ctx, holding, &message, it).await
            }
            holding => {
                let verdict = self.journey(&message).await;
                match holding {
                    Some(holding) if hold::holdable(&self.ctx, &verdict.end) => {
                        let it = self.spooled(&id, received);
                        holding.hold(&self.ctx, &message, it, verdict.record).await
                    }
                    _ => verdict,
                }
            }
        };
        self.doing.set(Activity::Command);
        let reply = pipeline::answer(&verdict.end);
        let answered = Answered {
            verdict: &verdict,
            reply: reply.as_ref(),
        };
        report::message(
            &self.ctx,
            &message,
            &answered,
            self.suppressed,
            started,
            dot,
        );
        if let Some(reply) = reply {
            self.verdict(reply);
        }
        self.after_message = Some(Instant::now());
        match verdict.closes() {
            true => Flow::Close,
            false => Flow::Continue,
        }
    }

    /// The message's journey through the pipeline, with this session as its client.
    async fn journey(&mut self, message: &Message<'_>) -> Verdict {
        let mut client = SessionClient {
            conn: &mut self.conn,
            doing: &mut self.doing,
            grace_over: &self.grace_over,
        };
        // Pinned where it is made: the journey's future is large, and is not moved again.
        let journey = std::pin::pin!(pipeline::deliver(&self.ctx, message, &mut client));
        journey.await
    }

    /// What the policy may look at.
    pub(super) fn facts<'a>(&'a self, envelope: &'a Envelope, body: &'a [u8]) -> MessageFacts<'a> {
        MessageFacts {
            auth_tenant: self.auth.as_ref().map(|u| u.tenant.as_str()),
            header_trusted: self.header_trusted(),
            sender: envelope.from.as_deref(),
            rcpts: &envelope.rcpts,
            client_ip: self.peer.ip(),
            message: body,
            binding: self.auth.as_ref().and_then(|u| u.binding.as_ref()),
        }
    }

    /// Whether the client may choose its key with a header. An authenticated client has its
    /// user's rights, whatever its address.
    pub(super) fn header_trusted(&self) -> bool {
        match &self.auth {
            Some(user) => user.trust_key_header,
            None => self.trusted,
        }
    }

    /// Our `Received:` field, written in front of the client's bytes (then the fields the
    /// route adds: the key headers and the client's fields of those names are left out of the
    /// client's bytes by `Identity::forwarded`).
    fn received_field(&self, id: &str, envelope: &Envelope) -> Vec<u8> {
        let greeting = self.greeting.as_ref();
        let trace = Trace {
            helo: greeting.map_or("", |g| g.name.as_str()),
            peer: self.peer.ip(),
            hostname: &self.ctx.setup.config.smtp.hostname,
            instance: &self.ctx.services.instance,
            protocol: received::protocol(
                greeting.is_some_and(|g| g.esmtp),
                self.tls,
                self.auth.is_some(),
            ),
            id,
            for_rcpt: match envelope.rcpts.as_slice() {
                [one] => Some(one.as_str()),
                _ => None,
            },
            repeats: &self.repeats,
        };
        received::header(&trace, SystemTime::now())
    }
}

/// The session's client as the pipeline sees it: its connection (closed means gone), its
/// place in the sessions' gauge, and its bell for the shutdown's grace.
struct SessionClient<'a> {
    conn: &'a mut Conn,
    doing: &'a mut Doing,
    grace_over: &'a Option<Arc<Bell>>,
}

impl Client for SessionClient<'_> {
    async fn gone(&mut self) {
        self.conn.closed().await
    }

    fn doing(&mut self, activity: Activity) {
        self.doing.set(activity);
    }

    fn grace_over(&self) -> Option<Arc<Bell>> {
        self.grace_over.clone()
    }
}
