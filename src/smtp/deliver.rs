//! The final dot: the message handed to the pipeline (`pipeline::intake`: its identity, our
//! fields, its journey, or its hold in the spool), the verdict answered (`reply`) and
//! accounted for once (`account`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use tokio::time::Instant;

use super::conn::Conn;
use super::received::{self, Repeats, Trace};
use super::session::{AuthUser, Flow, Greeting, Session};
use crate::message::Envelope;
use crate::observe::activity::{Activity, Doing};
use crate::pipeline::account::{self, Account, Driver, Journey};
use crate::pipeline::{self, Client, Hop, Intake, Received, Submitter};
use crate::policy::MessageFacts;
use crate::state::grace_over::Bell;

impl Session {
    pub async fn deliver(&mut self, envelope: Envelope, body: Vec<u8>) -> Flow {
        let started = Instant::now();
        let dot = SystemTime::now();
        let hop = SessionHop {
            greeting: self.greeting.as_ref(),
            peer: self.peer,
            hostname: &self.ctx.setup.config.smtp.hostname,
            instance: &self.ctx.services.instance,
            protocol: received::protocol(
                self.greeting.as_ref().is_some_and(|g| g.esmtp),
                self.tls,
                self.auth.is_some(),
            ),
            repeats: &self.repeats,
        };
        let intake = Intake {
            envelope: &envelope,
            body: &body,
            key_fields: 0,
            submitter: submitter(self.auth.as_ref(), self.trusted, self.peer),
            received: Received::New(&hop),
            can_hold: true,
        };
        let mut client = SessionClient {
            conn: &mut self.conn,
            doing: &mut self.doing,
            grace_over: &self.grace_over,
        };
        // Pinned where it is made: the journey's future is large, and is not moved again.
        let judged = std::pin::pin!(pipeline::intake(&self.ctx, intake, &mut client)).await;
        self.doing.set(Activity::Command);
        let reply = pipeline::answer(&judged.verdict.end);
        let journey = Journey {
            judged: &judged,
            envelope: &envelope,
            started: dot,
        };
        let driver = Driver::Session {
            peer: self.peer,
            rcpts: envelope.rcpts.len(),
            suppressed: self.suppressed,
        };
        let took = started.elapsed();
        account::record(
            &self.ctx,
            &Account::of(journey, reply.as_ref(), took),
            &driver,
        );
        if let Some(reply) = reply {
            self.verdict(reply);
        }
        self.after_message = Some(Instant::now());
        match judged.verdict.closes() {
            true => Flow::Close,
            false => Flow::Continue,
        }
    }

    /// What the policy may look at (at MAIL: the envelope so far, no bytes).
    pub(super) fn facts<'a>(&'a self, envelope: &'a Envelope, body: &'a [u8]) -> MessageFacts<'a> {
        submitter(self.auth.as_ref(), self.trusted, self.peer).facts(envelope, body)
    }
}

/// Who gives the message: the AUTH user (its tenant, its `senders`), or a client `trusted` by
/// its address. An authenticated client has its user's rights, whatever its address: it may
/// choose its key with a header only if its user has `trust_key_header`.
fn submitter(auth: Option<&AuthUser>, trusted: bool, peer: SocketAddr) -> Submitter<'_> {
    Submitter {
        auth_tenant: auth.map(|u| u.tenant.as_str()),
        header_trusted: auth.map_or(trusted, |u| u.trust_key_header),
        peer,
        binding: auth.and_then(|u| u.binding.as_ref()),
    }
}

/// The session's hop, as our `Received:` field tells it.
struct SessionHop<'a> {
    greeting: Option<&'a Greeting>,
    peer: SocketAddr,
    hostname: &'a str,
    instance: &'a str,
    protocol: &'static str,
    repeats: &'a Repeats,
}

impl Hop for SessionHop<'_> {
    /// Our `Received:` field, written in front of the client's bytes (then the fields the
    /// route adds).
    fn received(&self, id: &str, envelope: &Envelope) -> Vec<u8> {
        let trace = Trace {
            helo: self.greeting.map_or("", |g| g.name.as_str()),
            peer: self.peer.ip(),
            hostname: self.hostname,
            instance: self.instance,
            protocol: self.protocol,
            id,
            for_rcpt: match envelope.rcpts.as_slice() {
                [one] => Some(one.as_str()),
                _ => None,
            },
            repeats: self.repeats,
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
