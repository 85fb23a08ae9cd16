//! A message's wait for its tokens, in its keys' FIFO queues (after its turn to join them, for
//! a held message released beside others of its key), while whoever waits for the verdict and
//! the upstream's pause are watched. A client that goes has abandoned the message,
//! which then leaves the queue, takes nothing and is not forwarded.

use tokio::time::Instant;

use super::client::Client;
use super::verdict::{Record, Unanswered};
use crate::observe::activity::Activity;
use crate::state::context::Context;
use crate::throttle::{Again, Charge, Permit};
use crate::upstream::Upstream;

/// What a message asks the throttle for: its first tokens, or tokens again after upstream
/// throttled it.
pub(super) enum Tokens {
    First(Vec<Charge>),
    Again(Again),
}

/// What a message's waits need: the relay, and whoever waits for the verdict.
pub(super) struct Wait<'a, C> {
    pub ctx: &'a Context,
    pub client: &'a mut C,
}

impl<C: Client> Wait<'_, C> {
    /// Takes `tokens`, holding the message while the buckets refill; `None` when no layer
    /// applies. The time waited is added to `record`.
    pub async fn take(
        &mut self,
        tokens: Tokens,
        upstream: &Upstream,
        record: &mut Record,
    ) -> Result<Option<Permit>, Unanswered> {
        if matches!(&tokens, Tokens::First(charges) if charges.is_empty()) {
            self.client.doing(Activity::Upstream);
            self.client.has_tokens();
            return Ok(None);
        }
        self.client.doing(Activity::Waiting);
        if matches!(tokens, Tokens::First(_)) {
            self.client.turn().await;
        }
        let throttle = &self.ctx.setup.throttle;
        let patient = self.client.patient();
        let arrived = Instant::now();
        // Boxed: only a message with charges waits here, and the session's task would
        // otherwise keep room for the throttle's future (over a kilobyte) in every state.
        let acquire = Box::pin(async {
            match tokens {
                Tokens::First(charges) if patient => throttle.acquire_patient(charges).await,
                Tokens::First(charges) => throttle.acquire(charges).await,
                Tokens::Again(again) => throttle.acquire_again(again).await,
            }
        });
        // Biased: a message the buckets let through at once goes, as it would with no layer
        // at all, even if the client already half-closed after a pipelined QUIT; only a
        // real wait is abandoned when the client leaves.
        let outcome = tokio::select! {
            biased;
            outcome = acquire => outcome.map_err(Unanswered::Refused),
            _ = self.client.gone() => Err(Unanswered::Abandoned),
            left = upstream.pause.paused() => Err(Unanswered::Paused(left)),
        };
        let permit = match outcome {
            Ok(permit) => permit,
            Err(unanswered) => {
                record.waited += arrived.elapsed();
                return Err(unanswered);
            }
        };
        self.client.doing(Activity::Upstream);
        self.client.has_tokens();
        record.waited += permit.waited();
        for charge in permit.charges() {
            let layer = &self.ctx.setup.layers[charge.layer].name;
            self.ctx.services.metrics.waited(layer, permit.waited());
        }
        Ok(Some(permit))
    }
}
