//! The tenant reputation guard in the dialogue: a tenant past a limit is refused at MAIL when
//! its key is known by then (AUTH, the client's address, the sender), else at the final dot; a
//! suppressed recipient is refused at RCPT, the others of the message go on. After the final
//! dot the guard learns what upstream did: the message it took (and SES's id for it), or the
//! recipient it refused for good. Each check returns the reply; the verb answers it. The
//! guard's calls are boxed as `dyn Future`: with `[redis]` they go down to the Redis client,
//! and a session's future type would otherwise nest past the compiler's recursion limit.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use super::reply::{self, Reply};
use super::session::Session;
use super::verdict::Record;
use crate::config::Action;
use crate::message::{Envelope, Outcome};
use crate::policy::{self, MessageFacts};
use crate::reputation::Reputation;

/// The tenant of a message at its final dot, and the refusal it gets when past a limit.
pub(super) struct Tenant {
    pub key: String,
    pub refusal: Option<Reply>,
}

impl Session {
    /// At MAIL: the refusal of a tenant past a limit, when its key is known now.
    pub(super) async fn reputation_at_mail(&mut self, sender: Option<&str>) -> Option<Reply> {
        let guard = self.ctx.services.reputation.clone()?;
        let envelope = Envelope {
            from: sender.map(str::to_string),
            rcpts: Vec::new(),
            smtputf8: false,
            body_8bit: false,
        };
        let key = {
            let facts = self.facts(&envelope, &[]);
            policy::reputation_key_early(&guard.key, &guard.default_key, &facts)?
        };
        tenant_refusal(&guard, &key, "MAIL", self.peer).await
    }

    /// At the final dot: the guard and the message's tenant, for [`tenant_at_dot`].
    pub(super) fn reputation_key(
        &self,
        facts: &MessageFacts<'_>,
    ) -> Option<(Arc<Reputation>, String)> {
        let guard = self.ctx.services.reputation.clone()?;
        let key = policy::reputation_key(&guard.key, &guard.default_key, facts);
        Some((guard, key))
    }

    /// At RCPT: the refusal of an address that hard-bounced or complained.
    pub(super) async fn suppressed_rcpt(&mut self, address: &str) -> Option<Reply> {
        let guard = self.ctx.services.reputation.clone()?;
        let suppression = erased(guard.suppressed(address)).await?;
        self.ctx.services.metrics.suppressed();
        Some(reply::suppressed(address, &suppression))
    }

    /// After the final dot: what upstream did with `tenant`'s message.
    pub(super) async fn reputation_settle(
        &mut self,
        tenant: &str,
        envelope: &Envelope,
        record: &Record,
    ) {
        let Some(guard) = self.ctx.services.reputation.clone() else {
            return;
        };
        match record.outcome {
            Outcome::Delivered | Outcome::Partial => {
                let id = record.upstream_id.as_deref();
                let taken = envelope.rcpts.len().saturating_sub(record.bounced.len());
                erased(guard.forwarded(tenant, id, taken)).await;
                // Recipients an MX host refused after the final dot, as a smarthost's
                // refusal at RCPT is counted.
                if !record.bounced.is_empty() {
                    erased(guard.refused_by_upstream(tenant, &record.bounced)).await;
                }
            }
            Outcome::UpstreamPermFail if record.hard_bounce => {
                erased(guard.refused_by_upstream(tenant, &envelope.rcpts)).await;
            }
            _ => {}
        }
    }
}

/// At the final dot: the message's tenant, and its refusal when past a limit.
pub(super) async fn tenant_at_dot(guard: &Reputation, key: String, peer: SocketAddr) -> Tenant {
    let refusal = tenant_refusal(guard, &key, "DATA", peer).await;
    Tenant { key, refusal }
}

async fn tenant_refusal(
    guard: &Reputation,
    key: &str,
    at: &'static str,
    peer: SocketAddr,
) -> Option<Reply> {
    let breach = erased(guard.standing(key)).await?;
    let reject = match guard.action {
        Action::Warn => return None,
        Action::Pause => false,
        Action::Reject => true,
    };
    tracing::info!(
        target: "mailsluice::reputation",
        tenant = key,
        at,
        peer = %peer,
        "reputation.refused"
    );
    Some(reply::tenant_paused(key, &breach, reject))
}

/// `future` behind a pointer and its type erased (see the module doc).
fn erased<'a, T>(
    future: impl Future<Output = T> + Send + 'a,
) -> Pin<Box<dyn Future<Output = T> + Send + 'a>> {
    Box::pin(future)
}
