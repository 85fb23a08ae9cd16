//! The final dot: the message handed to the pipeline (`pipeline::intake`: its identity, our
//! fields, its journey, or its hold in the spool), the verdict answered (`reply`) and
//! accounted for once (`account`).

use std::sync::Arc;
use std::time::SystemTime;

use tokio::time::Instant;

use super::conn::Conn;
use super::place::Place;
use super::session::{Flow, Session};
use super::transaction::Transaction;
use crate::observe::activity::Activity;
use crate::pipeline::account::{self, Account, Driver, Journey};
use crate::pipeline::{self, Intake, Received};
use crate::state::grace_over::Bell;

impl Session {
    pub async fn deliver(&mut self, transaction: Transaction, body: Vec<u8>) -> Flow {
        let started = Instant::now();
        let dot = SystemTime::now();
        let envelope = transaction.envelope();
        let hop = self.client.hop(
            &self.ctx.setup.config.smtp.hostname,
            &self.ctx.services.instance,
        );
        let intake = Intake {
            envelope,
            body: &body,
            key_fields: 0,
            submitter: self.client.submitter(),
            received: Received::New(&hop),
            can_hold: true,
        };
        let mut client = SessionClient {
            conn: &mut self.conn,
            place: &mut self.place,
        };
        // Pinned where it is made: the journey's future is large, and is not moved again.
        let judged = std::pin::pin!(pipeline::intake(&self.ctx, intake, &mut client)).await;
        self.place.doing(Activity::Command);
        let reply = pipeline::answer(&judged.verdict.end);
        let journey = Journey {
            judged: &judged,
            envelope,
            started: dot,
        };
        let (rcpts, suppressed) = transaction.counts();
        let driver = Driver::Session {
            peer: self.client.peer(),
            rcpts,
            suppressed,
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
        self.place.message_answered();
        match judged.verdict.closes() {
            true => Flow::Close,
            false => Flow::Continue,
        }
    }
}

/// The session's client as the pipeline sees it: its connection (closed means gone), its
/// place in the sessions' gauge, and its bell for the shutdown's grace.
struct SessionClient<'a> {
    conn: &'a mut Conn,
    place: &'a mut Place,
}

impl pipeline::Client for SessionClient<'_> {
    async fn gone(&mut self) {
        self.conn.closed().await
    }

    fn doing(&mut self, activity: Activity) {
        self.place.doing(activity);
    }

    fn grace_over(&self) -> Option<Arc<Bell>> {
        self.place.grace_over()
    }
}
