//! The tenant reputation guard in the dialogue, before the message: a tenant past a limit is
//! refused at MAIL when its key is known by then (AUTH, the client's address, the sender),
//! else at the final dot (a step of the pipeline's admission); a suppressed recipient is
//! refused at RCPT, the others of the message go on. A refusal at MAIL is logged here (the
//! transaction's one `message` line); each check returns its reply for the verb to answer.

use tokio::time::Instant;

use super::session::Session;
use crate::config::Action;
use crate::message::{Envelope, Outcome};
use crate::pipeline;
use crate::pipeline::account;
use crate::policy;
use crate::reply::{self, Reply};

impl Session {
    /// At MAIL: the refusal of a tenant past a limit, when its key is known now, with the
    /// transaction it would have opened logged as one message (`reputation_paused`).
    /// With `action = "hold"` none: the message may be held at its final dot.
    pub(super) async fn reputation_at_mail(&mut self, sender: Option<&str>) -> Option<Reply> {
        let started = Instant::now();
        let guard = self.ctx.services.reputation.clone()?;
        if guard.action == Action::Hold {
            return None;
        }
        let envelope = Envelope {
            from: sender.map(str::to_string),
            rcpts: Vec::new(),
            smtputf8: false,
            body_8bit: false,
        };
        let key = policy::reputation_key_early(self.ctx.rules(), &self.facts(&envelope, &[]))?;
        let paused = pipeline::reputation(&guard, &key, "MAIL", self.peer)
            .await
            .err()?;
        let refusal = paused.reply();
        let outcome = Outcome::ReputationPaused;
        let took = started.elapsed();
        account::refused(&self.ctx, outcome, &refusal, &key, self.peer, (0, 0), took);
        Some(refusal)
    }

    /// At RCPT: the refusal of an address that hard-bounced or complained.
    pub(super) async fn suppressed_rcpt(&mut self, address: &str) -> Option<Reply> {
        let guard = self.ctx.services.reputation.clone()?;
        let suppression = guard.suppressed(address).await?;
        self.ctx.services.metrics.suppressed();
        self.suppressed += 1;
        Some(reply::suppressed(address, &suppression))
    }
}
