//! One recipient domain's share of a message: a connection to the first of its MX hosts that
//! takes one, the transaction brought to upstream's 354 (`open`), then the final dot
//! (`Leg::finish`). The domain's permit is held from before the connection to after it is
//! parked again, so the bound counts every connection a domain's messages hold.

use std::net::SocketAddr;
use std::sync::Arc;

use super::connections::{Connections, DomainPermit};
use super::resolve::{MxResolver, Route};
use crate::upstream::pool::{Lease, Pool};
use crate::upstream::smtp::{settle_failed, Transaction};
use crate::upstream::{Accepted, UpstreamError};

/// A domain's transaction waiting for its final dot.
pub(super) struct Leg {
    pool: Arc<Pool>,
    lease: Lease,
    permit: DomainPermit,
    timeout: std::time::Duration,
    /// The MX host that said 354, for the report of a refusal.
    pub host: String,
}

/// Connects to the best MX host of `domain` that answers and plays `tx` up to 354. A pooled
/// connection found dead is replaced once, as for a smarthost.
pub(super) async fn open(
    resolver: &MxResolver,
    conns: &Connections,
    (domain, route): (&str, &Route),
    tx: &mut Transaction<'_>,
) -> Result<Leg, UpstreamError> {
    let permit = conns.permit(domain).await?;
    let (pool, mut lease, host) = connect(resolver, conns, route).await?;
    let mut retried = false;
    loop {
        tx.pipelining = lease.pipelining;
        match tx.prepare(&mut lease.conn).await {
            Ok(()) => {
                return Ok(Leg {
                    pool,
                    lease,
                    permit,
                    timeout: conns.timeout,
                    host,
                })
            }
            Err(f) if f.stale && lease.reused && !retried => {
                retried = true;
                lease = pool.reconnect(lease).await?;
            }
            Err(f) => {
                settle_failed(pool, lease, &f, conns.timeout, permit);
                return Err(f.error);
            }
        }
    }
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
    route: &Route,
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
            let pool = conns.pool(SocketAddr::new(ip, conns.port), name)?;
            match pool.checkout().await {
                Ok(lease) => return Ok((pool, lease, name.clone())),
                Err(e) => {
                    let e = UpstreamError::from(e);
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
                settle_failed(self.pool, self.lease, &f, self.timeout, self.permit);
                Err(f.error)
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
