//! The tenant reputation guard in the dialogue, before the message: a tenant past a limit is
//! refused at MAIL when its key is known by then (AUTH, the client's address, the sender),
//! else at the final dot (a step of the pipeline's admission); a suppressed recipient is
//! refused at RCPT, the others of the message go on. A refusal at MAIL is logged here (the
//! transaction's one `message` line); each check returns its reply for the verb to answer,
//! and RCPT counts a suppressed recipient in its transaction.

use tokio::time::Instant;

use super::client::Client;
use crate::config::Action;
use crate::message::{Envelope, Outcome};
use crate::pipeline;
use crate::pipeline::account;
use crate::policy;
use crate::reply::{self, Reply};
use crate::state::context::Context;

/// At MAIL: the refusal of a tenant past a limit, when its key is known now, with the
/// transaction it would have opened logged as one message (`reputation_paused`).
/// With `action = "hold"` none: the message may be held at its final dot.
pub async fn at_mail(ctx: &Context, client: &Client, sender: Option<&str>) -> Option<Reply> {
    let started = Instant::now();
    let guard = ctx.services.reputation.clone()?;
    if guard.action == Action::Hold {
        return None;
    }
    let envelope = Envelope {
        from: sender.map(str::to_string),
        rcpts: Vec::new(),
        smtputf8: false,
        body_8bit: false,
    };
    let facts = client.submitter().facts(&envelope, &[]);
    let key = policy::reputation_key_early(ctx.rules(), &facts)?;
    let peer = client.peer();
    let paused = pipeline::reputation(&guard, &key, "MAIL", peer)
        .await
        .err()?;
    let refusal = paused.reply();
    let outcome = Outcome::ReputationPaused;
    let took = started.elapsed();
    account::refused(ctx, outcome, &refusal, &key, peer, (0, 0), took);
    Some(refusal)
}

/// At RCPT: the refusal of an address that hard-bounced or complained.
pub async fn suppressed_rcpt(ctx: &Context, address: &str) -> Option<Reply> {
    let guard = ctx.services.reputation.clone()?;
    let suppression = guard.suppressed(address).await?;
    ctx.services.metrics.suppressed();
    Some(reply::suppressed(address, &suppression))
}
