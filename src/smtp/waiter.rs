//! A message's wait for its tokens: in its keys' FIFO queues, while the client's connection
//! and the upstream's pause are watched. A client that closes the connection has abandoned the
//! message, which then leaves the queue, takes nothing and is not forwarded, so a client that
//! saw a failure never finds the message delivered too.

use tokio::time::Instant;

use super::conn::Conn;
use super::verdict::{Held, Record};
use crate::observe::activity::{Activity, Doing};
use crate::policy::Charge;
use crate::state::context::Context;
use crate::throttle::{Again, Permit};
use crate::upstream::Upstream;

/// What a message asks the throttle for: its first tokens, or tokens again after upstream
/// throttled it.
pub(super) enum Tokens {
    First(Vec<Charge>),
    Again(Again),
}

/// What a message's waits need of its session: the throttle, the client's connection, and
/// where the session is counted (waiting, then with upstream once the tokens came).
pub(super) struct Waiter<'a> {
    pub ctx: &'a Context,
    pub conn: &'a mut Conn,
    pub doing: &'a mut Doing,
}

impl Waiter<'_> {
    /// Takes `tokens`, holding the client while the buckets refill; `None` when no layer
    /// applies. The time waited is added to `record`.
    pub async fn take(
        &mut self,
        tokens: Tokens,
        upstream: &Upstream,
        record: &mut Record,
    ) -> Result<Option<Permit>, Held> {
        if matches!(&tokens, Tokens::First(charges) if charges.is_empty()) {
            self.doing.set(Activity::Upstream);
            return Ok(None);
        }
        self.doing.set(Activity::Waiting);
        let throttle = self.ctx.setup.throttle.clone();
        let arrived = Instant::now();
        // Boxed: only a message with charges waits here, and a session's task would otherwise
        // keep room for the throttle's future (over a kilobyte) in every state.
        let acquire = Box::pin(async {
            match tokens {
                Tokens::First(charges) => throttle.acquire(charges).await,
                Tokens::Again(again) => throttle.acquire_again(again).await,
            }
        });
        // Biased: a message the buckets let through at once goes, as it would with no layer
        // at all, even if the client already half-closed after a pipelined QUIT; only a
        // real wait is abandoned when the client leaves.
        let pause = upstream.pause.clone();
        let outcome = tokio::select! {
            biased;
            outcome = acquire => outcome.map_err(Held::Refused),
            _ = self.conn.closed() => Err(Held::Abandoned),
            left = pause.paused() => Err(Held::Paused(left)),
        };
        let permit = match outcome {
            Ok(permit) => permit,
            Err(held) => {
                record.waited += arrived.elapsed();
                return Err(held);
            }
        };
        self.doing.set(Activity::Upstream);
        record.waited += permit.waited();
        for charge in permit.charges() {
            let layer = &self.ctx.setup.layers[charge.layer].name;
            self.ctx.services.metrics.waited(layer, permit.waited());
        }
        Ok(Some(permit))
    }
}
