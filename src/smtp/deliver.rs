//! The final dot: the message's identity read (`policy`), our fields written in front of it
//! (`received`), its journey run (`pipeline`), and the pipeline's verdict answered (`reply`)
//! and logged (`report`) once.

use std::sync::Arc;
use std::time::SystemTime;

use tokio::time::Instant;

use super::conn::Conn;
use super::received::{self, Trace};
use super::reply;
use super::report::{self, Answered};
use super::session::{Flow, Session};
use crate::message::Envelope;
use crate::observe::activity::{Activity, Doing};
use crate::pipeline::{self, Client, Message};
use crate::policy::{self, Identity, MessageFacts};
use crate::state::grace_over::Bell;

impl Session {
    pub async fn deliver(&mut self, envelope: Envelope, body: Vec<u8>) -> Flow {
        let started = Instant::now();
        let dot = SystemTime::now();
        let identity = policy::identify(self.ctx.rules(), &self.facts(&envelope, &body));
        let id = message_id();
        let added = self.added_fields(&id, &envelope, &identity);
        let message = Message {
            id: &id,
            envelope: &envelope,
            body: &body,
            identity: &identity,
            added: &added,
            peer: self.peer,
        };
        let verdict = {
            let mut client = SessionClient {
                conn: &mut self.conn,
                doing: &mut self.doing,
                grace_over: &self.grace_over,
            };
            // Pinned where it is made: the journey's future is large, and is not moved again.
            let journey = std::pin::pin!(pipeline::deliver(&self.ctx, &message, &mut client));
            journey.await
        };
        self.doing.set(Activity::Command);
        let reply = reply::verdict(&verdict.end);
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

    /// What the policy may look at.
    pub(super) fn facts<'a>(&'a self, envelope: &'a Envelope, body: &'a [u8]) -> MessageFacts<'a> {
        MessageFacts {
            auth_tenant: self.auth.as_ref().map(|u| u.tenant.as_str()),
            // An authenticated client has its user's rights, whatever its address.
            header_trusted: match &self.auth {
                Some(user) => user.trust_key_header,
                None => self.trusted,
            },
            sender: envelope.from.as_deref(),
            rcpts: &envelope.rcpts,
            client_ip: self.peer.ip(),
            message: body,
            binding: self.auth.as_ref().and_then(|u| u.binding.as_ref()),
        }
    }

    /// What goes upstream in front of the client's bytes: our `Received:` header, then the
    /// fields the route adds (the key headers and the client's fields of those names are left
    /// out of the client's bytes by `Identity::forwarded`).
    fn added_fields(&self, id: &str, envelope: &Envelope, identity: &Identity) -> Vec<u8> {
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
        let mut fields = received::header(&trace, SystemTime::now());
        for (name, value) in identity.route.iter().flat_map(|r| &r.headers) {
            fields.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
        }
        fields
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

/// The id our `Received:` field gives the message: 64 bits, new for each message. std's
/// `RandomState` is keyed from the OS once per thread and stepped on each use, so this costs
/// no system call (a `uuid` v4 cost one `getrandom` per message).
fn message_id() -> String {
    use std::hash::BuildHasher;
    let state = std::collections::hash_map::RandomState::new();
    let n = state.hash_one(());
    let mut id = String::with_capacity(16);
    for i in (0..16).rev() {
        id.push(char::from(
            b"0123456789abcdef"[(n >> (4 * i)) as usize & 0xf],
        ));
    }
    id
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::message_id;

    /// Every message gets an id of its own (16 hex digits), on one thread and across threads.
    #[test]
    fn message_ids_differ_per_message() {
        let mut ids: HashSet<String> = (0..1000).map(|_| message_id()).collect();
        let others = std::thread::spawn(|| (0..1000).map(|_| message_id()).collect::<Vec<_>>());
        ids.extend(others.join().unwrap());
        assert_eq!(ids.len(), 2000);
        assert!(ids
            .iter()
            .all(|id| id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit())));
    }
}
