//! One recipient domain's share of a message: a connection to the first of its MX hosts that
//! takes one, the transaction brought to upstream's 354 (`open`), then the final dot
//! (`Leg::finish`). The domain's permit is held from before the connection to after it is
//! parked again, so the bound counts every connection a domain's messages hold.

use std::net::SocketAddr;
use std::sync::Arc;

use super::connections::{Connections, DomainPermit};
use super::resolve::{MxResolver, Route};
use crate::upstream::pool::{Lease, Pool};
use crate::upstream::smtp::{settle_failed, Failure, Step, Transaction};
use crate::upstream::{Accepted, UpstreamError};

/// A domain's transaction waiting for its final dot.
pub(super) struct Leg {
    pool: Arc<Pool>,
    lease: Lease,
    permit: DomainPermit,
    /// The MX host that said 354, for the report of a refusal.
    pub host: String,
    /// The recipient domain, named in a refusal.
    domain: String,
}

/// Connects to the best MX host of `domain` that answers and plays `tx` up to 354. A pooled
/// connection found dead is replaced once, as for a smarthost.
pub(super) async fn open(
    resolver: &MxResolver,
    conns: &Connections,
    (domain, route): (&str, &Route),
    tx: &Transaction<'_>,
) -> Result<Leg, UpstreamError> {
    let permit = conns.permit(domain).await?;
    let (pool, mut lease, host) = connect(resolver, conns, (domain, route)).await?;
    let mut retried = false;
    loop {
        match tx.prepare(&mut lease.conn).await {
            Ok(()) => {
                return Ok(Leg {
                    pool,
                    lease,
                    permit,
                    host,
                    domain: domain.to_string(),
                })
            }
            Err(f) if f.stale && lease.reused && !retried => {
                retried = true;
                lease = pool.reconnect(lease).await?;
            }
            Err(f) => {
                settle_failed(pool, lease, &f, permit);
                return Err(failure_words(domain, &host, f));
            }
        }
    }
}

/// An MX host's refusal as the client sees it: its code and enhanced code, our own text
/// naming the domain. The host's text (an internal banner, a server's name and version) is
/// logged, never relayed, so that a tenant cannot read hosts through the relay.
fn in_our_words(domain: &str, host: &str, error: UpstreamError) -> UpstreamError {
    let text = format!("{domain}: refused by its mail server");
    let default = |code: u16| Some(if code >= 500 { "5.0.0" } else { "4.0.0" }.to_string());
    match error {
        UpstreamError::Rejected {
            code,
            enhanced,
            text: theirs,
        } => {
            log_refusal(domain, host, code, &theirs);
            UpstreamError::Rejected {
                code,
                enhanced: enhanced.or_else(|| default(code)),
                text,
            }
        }
        UpstreamError::Pushback {
            feedback,
            code,
            enhanced,
            text: theirs,
        } => {
            log_refusal(domain, host, code, &theirs);
            UpstreamError::Pushback {
                feedback,
                code,
                enhanced: enhanced.or_else(|| default(code)),
                text,
            }
        }
        other => other,
    }
}

/// A transaction's failure: a check of our own is in our words already.
fn failure_words(domain: &str, host: &str, failure: Failure) -> UpstreamError {
    match failure.step {
        Step::Local => failure.error,
        _ => in_our_words(domain, host, failure.error),
    }
}

fn log_refusal(domain: &str, host: &str, code: u16, text: &str) {
    tracing::info!(
        target: "mailsluice::upstream",
        domain,
        host,
        code,
        text,
        "upstream.mx_refused"
    );
}

/// Addresses tried for one message and domain at most (Postfix's `smtp_mx_address_limit`):
/// each dead one costs a connect timeout while the client waits.
const MAX_ADDRESSES: usize = 5;

/// The MX hosts in order, each of their addresses in turn: the next on a connection refused,
/// timed out, or greeted with a refusal. The answer when none takes one is a temporary
/// failure if any host's was (another try may find it back), else the last refusal.
async fn connect(
    resolver: &MxResolver,
    conns: &Connections,
    (domain, route): (&str, &Route),
) -> Result<(Arc<Pool>, Lease, String), UpstreamError> {
    let mut failure: Option<UpstreamError> = None;
    let mut note = |e: UpstreamError| {
        let temporary = |e: &UpstreamError| !matches!(e.reply(), Some((code, ..)) if code >= 500);
        if failure
            .as_ref()
            .is_none_or(|f| !temporary(f) || temporary(&e))
        {
            failure = Some(e);
        }
    };
    let mut tries = MAX_ADDRESSES;
    for name in &route.hosts {
        if tries == 0 {
            break;
        }
        let addrs = match resolver.addresses(name, route.implicit).await {
            Ok(addrs) => addrs,
            Err(e) => {
                note(e);
                continue;
            }
        };
        for ip in addrs {
            if tries == 0 {
                break;
            }
            tries -= 1;
            let addr = SocketAddr::new(ip, conns.port);
            if let Err(e) = conns.guard.check(domain, addr) {
                tracing::debug!(target: "mailsluice::upstream", %domain, host = %name, %ip, error = %e, "MX host not connected to");
                note(e);
                continue;
            }
            let pool = conns.pool(addr, name)?;
            match pool.checkout().await {
                Ok(lease) => return Ok((pool, lease, name.clone())),
                Err(e) => {
                    let e = in_our_words(domain, name, UpstreamError::from(e));
                    tracing::debug!(target: "mailsluice::upstream", host = %name, %ip, error = %e, "MX host not taken; trying the next");
                    note(e);
                }
            }
        }
    }
    Err(failure.unwrap_or_else(|| UpstreamError::Unavailable("no MX host to try".into())))
}

impl Leg {
    /// The body and the final dot; the connection is parked again when its state is known.
    pub async fn finish(mut self, tx: &Transaction<'_>) -> Result<Accepted, UpstreamError> {
        match tx.finish(&mut self.lease.conn).await {
            Ok(accepted) => {
                self.pool.checkin(self.lease);
                drop(self.permit);
                Ok(accepted)
            }
            Err(f) => {
                settle_failed(self.pool, self.lease, &f, self.permit);
                Err(failure_words(&self.domain, &self.host, f))
            }
        }
    }

    /// Given up before the final dot because another domain refused: after 354 nothing but
    /// closing the connection stops the message (RFC 5321 4.1.1.4: a message without its
    /// final dot is not delivered), so the connection goes.
    pub fn abandon(self) {
        drop(self.lease);
        drop(self.permit);
    }
}
