//! The tenant reputation guard in the dialogue, before the message: a tenant past a limit is
//! refused at MAIL when its key is known by then (AUTH, the client's address, the sender),
//! else at the final dot (a step of the pipeline's admission); a suppressed recipient is
//! refused at RCPT, the others of the message go on. A refusal at MAIL is answered and logged
//! here (the transaction's one `message` line); one at RCPT is returned for the verb to
//! answer, and counted in the transaction's line.

use tokio::time::Instant;

use super::reply::{self, Reply};
use super::report;
use super::session::Session;
use crate::message::{Envelope, Outcome};
use crate::pipeline;
use crate::policy::{self, TenantKey};

impl Session {
    /// At MAIL: a tenant past a limit, when its key is known now, is refused, and the
    /// transaction it would have opened logged as one message (`reputation_paused`): true
    /// when it was.
    pub(super) async fn reputation_at_mail(&mut self, sender: Option<&str>) -> bool {
        let started = Instant::now();
        let Some(guard) = self.ctx.services.reputation.clone() else {
            return false;
        };
        let envelope = Envelope {
            from: sender.map(str::to_string),
            rcpts: Vec::new(),
            smtputf8: false,
            body_8bit: false,
        };
        let key = {
            let facts = self.facts(&envelope, &[]);
            let rule = TenantKey {
                source: &guard.key,
                default_key: &guard.default_key,
            };
            policy::tenant_key_early(rule, &facts)
        };
        let Some(key) = key else {
            return false;
        };
        let Err(paused) = pipeline::reputation(&guard, &key, "MAIL", self.peer).await else {
            return false;
        };
        let refusal = reply::paused_reply(&paused);
        let outcome = Outcome::ReputationPaused;
        report::refused(
            &self.ctx,
            outcome,
            &refusal,
            (0, 0),
            &key,
            self.peer,
            started,
        );
        self.reply(refusal);
        true
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
