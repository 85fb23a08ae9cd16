//! Accepting connections: the connection bounds, a balancer's PROXY header (read by
//! `inbound::proxy`), one task per session, graceful shutdown.
//! Everything a session needs is in its `Context` (see `state::context`); this file only
//! accepts, counts and spawns.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;

use crate::admin::endpoint::Admin;
use crate::inbound::proxy::{self, Attempt, PeerStream};
use crate::reply;
use crate::smtp;
use crate::state::context::Context;
use crate::state::deps::Deps;
use crate::state::shutdown::Shutdown;

/// The sockets `run` serves: plain SMTP (with STARTTLS when `[smtp.tls]` is set), implicit
/// TLS (`tls_listen`, RFC 8314) and the admin endpoint. A bare `Vec` is plain SMTP only.
#[derive(Default)]
pub struct Listeners {
    pub smtp: Vec<TcpListener>,
    pub implicit_tls: Vec<TcpListener>,
    pub admin: Option<TcpListener>,
}

impl From<Vec<TcpListener>> for Listeners {
    fn from(smtp: Vec<TcpListener>) -> Listeners {
        Listeners {
            smtp,
            ..Listeners::default()
        }
    }
}

/// How long, after the grace, the waiters then told to go have to be answered.
const LAST_WORDS: Duration = Duration::from_secs(1);

/// The most of the grace kept at its end for the forwards of the last messages to take their
/// tokens (see [`drain_within`]).
const LAST_FORWARDS: Duration = Duration::from_secs(2);

/// How long, from the signal, a waiter may still get its tokens and go: the grace less its
/// last quarter (at most [`LAST_FORWARDS`]). A message needs upstream's answer after its
/// tokens come; one granted at the grace's last instant would be cut off with its final dot
/// sent and told it may have been delivered, and its client's retry would send it twice.
fn drain_within(grace: Duration) -> Duration {
    grace - (grace / 4).min(LAST_FORWARDS)
}

/// Serves SMTP on `listeners` until `shutdown` fires, then stops accepting (and `/readyz`
/// says 503), drains the sessions in flight within `shutdown_grace_ms`, and returns as soon
/// as the last one ends. Draining: a message waiting for tokens keeps its place and goes when
/// they come; only one whose tokens cannot come in time to be forwarded within the grace
/// ([`drain_within`]) is told `421 4.3.2`, at once. Sessions still running after the grace
/// (and [`LAST_WORDS`]) are left to the caller, which is about to exit the process.
pub async fn run(listeners: impl Into<Listeners>, deps: Deps, shutdown: Shutdown) {
    let listeners = listeners.into();
    let (health, live) = (deps.services.health.clone(), deps.live.clone());
    // The admin endpoint outlives the listeners, so a load balancer sees `/readyz` say 503
    // during the drain (not a refused connection it might retry); it stops when `run` ends.
    let (admin_stop, admin_shutdown) = crate::state::shutdown::channel();
    let admin = listeners.admin.map(|listener| {
        let (admin, shutdown) = (Admin::new(&deps), admin_shutdown);
        tokio::spawn(async move {
            if let Err(e) = crate::admin::endpoint::serve(listener, admin, shutdown).await {
                tracing::error!(error = %e, "admin endpoint failed");
            }
        })
    });
    let bound: Vec<SocketAddr> = (listeners.smtp.iter())
        .chain(&listeners.implicit_tls)
        .filter_map(|l| l.local_addr().ok())
        .collect();
    deps.setup.upstreams.listening_on(&bound);
    deps.setup.upstreams.start_learning();
    let events = super::events::start(&deps, shutdown.clone());
    let webhooks = deps.services.webhooks.start();
    let ctx = Arc::new(Context::new(deps));
    live.install(ctx.clone());
    let accounts = tokio::spawn(super::account::keep(live.clone()));
    let ses_sync = super::ses_sync::start(&live, &ctx);
    let limit = Arc::new(Semaphore::new(ctx.setup.config.smtp.max_connections.get()));
    let sessions = TaskTracker::new();
    let releaser = (ctx.services.spool.clone()).map(|spool| {
        let release = crate::release::run(live.clone(), spool, shutdown.clone(), sessions.clone());
        tokio::spawn(release)
    });
    let accepts = TaskTracker::new();
    let plain = listeners.smtp.into_iter().map(|l| (l, false));
    for (listener, implicit_tls) in
        plain.chain(listeners.implicit_tls.into_iter().map(|l| (l, true)))
    {
        if implicit_tls && ctx.setup.tls.is_none() {
            tracing::error!("not serving implicit TLS: no certificate loaded");
            continue;
        }
        let (ctx, limit) = (ctx.clone(), limit.clone());
        let (sessions, shutdown) = (sessions.clone(), shutdown.clone());
        let accepting = Accepting {
            ctx,
            limit,
            sessions,
            implicit_tls,
        };
        accepts.spawn(accept_loop(listener, accepting, shutdown));
    }
    accepts.close();
    health.set_listening(true);
    accepts.wait().await;
    health.set_listening(false);
    // Waiters in the throttle's queues (of every config since start) go if their tokens come
    // in time to be forwarded within the grace, and are told 421 now otherwise; transactions
    // in flight go on.
    let grace = Duration::from_millis(ctx.setup.config.smtp.shutdown_grace_ms);
    live.drain(drain_within(grace));
    sessions.close();
    if tokio::time::timeout(grace, sessions.wait()).await.is_err() {
        tracing::warn!(
            left = sessions.len(),
            doing = %ctx.services.metrics.activities().summary(),
            "grace period over with sessions in flight"
        );
        live.dispose();
        let _ = tokio::time::timeout(LAST_WORDS, sessions.wait()).await;
    }
    // The releaser ends on its own at shutdown; with S3 and SQS it first puts back the entries
    // it received and did not start, bounded by the store's calls: it is given that long.
    let releaser = match releaser {
        Some(mut releaser) => {
            let s3 = (ctx.setup.config.spool.as_ref()).and_then(|spool| spool.s3());
            let bound = s3.map_or(LAST_WORDS, |s3| 2 * s3.timeout + LAST_WORDS);
            let ended = tokio::time::timeout(bound, &mut releaser).await.is_ok();
            (!ended).then_some(releaser)
        }
        None => None,
    };
    // Gone before `run` returns, with what they hold (the spool and its lock among it): a
    // relay started again in this process finds the spool free.
    let tasks = [accounts].into_iter().chain(events).chain(ses_sync);
    for task in tasks.chain(webhooks).chain(releaser) {
        task.abort();
        let _ = task.await;
    }
    admin_stop.trigger();
    if let Some(admin) = admin {
        let _ = tokio::time::timeout(LAST_WORDS, admin).await;
    }
}

/// What one accept loop shares with the sessions it starts.
struct Accepting {
    ctx: Arc<Context>,
    limit: Arc<Semaphore>,
    sessions: TaskTracker,
    implicit_tls: bool,
}

async fn accept_loop(listener: TcpListener, accepting: Accepting, mut shutdown: Shutdown) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait() => return,
        };
        match accepted {
            Ok((stream, peer)) => start_session(&accepting, stream, peer, &shutdown),
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

fn start_session(accepting: &Accepting, stream: TcpStream, peer: SocketAddr, shutdown: &Shutdown) {
    let _ = stream.set_nodelay(true);
    let ctx = accepting.ctx.latest();
    let implicit_tls = accepting.implicit_tls;
    let Ok(permit) = accepting.limit.clone().try_acquire_owned() else {
        tracing::warn!(%peer, "connection refused: max_connections reached");
        let refusal = reply::too_many_connections();
        accepting
            .sessions
            .spawn(refuse(stream, refusal, implicit_tls));
        return;
    };
    let shutdown = shutdown.clone();
    accepting.sessions.spawn(async move {
        // A balancer's client is known only once its header is read.
        let Some((stream, client, attempt)) = open(&ctx, stream, peer).await else {
            return;
        };
        let Some(slot) = ctx.services.connections_per_ip.try_acquire(client.ip()) else {
            tracing::warn!(peer = %client, "connection refused: max_connections_per_ip reached");
            let refusal = reply::too_many_connections_from_address();
            return refuse(stream, refusal, implicit_tls).await;
        };
        let metrics = ctx.services.metrics.clone();
        metrics.connection_opened();
        serve(ctx.clone(), stream, client, shutdown, implicit_tls).await;
        metrics.connection_closed();
        drop((slot, permit));
        if attempt.is_some_and(|a| a.seen()) {
            tracing::warn!(%peer, "connection closed: a PROXY header from outside proxy_from");
            metrics.proxy_refused("not_allowed");
        }
    });
}

/// Tells a client why it is turned away, then closes. On an implicit-TLS port a plaintext
/// reply would be noise: the client just sees a close.
async fn refuse(mut stream: impl smtp::AsyncStream, refusal: reply::Reply, implicit_tls: bool) {
    if !implicit_tls {
        smtp::refuse(&mut stream, &refusal).await;
    }
}

/// The client's stream and address. From `proxy_from`: the address its PROXY header names
/// (the balancer's own for `LOCAL`, unless trusted: `proxy::client`), or `None` when the
/// header is refused (logged, counted, closed). From anywhere else: the socket's, watched for a header it may not send.
async fn open(
    ctx: &Context,
    mut stream: TcpStream,
    peer: SocketAddr,
) -> Option<(PeerStream<TcpStream>, SocketAddr, Option<Attempt>)> {
    let smtp = &ctx.setup.config.smtp;
    let balancer = peer.ip().to_canonical();
    if !smtp.proxy_from.iter().any(|net| net.contains(&balancer)) {
        let (stream, attempt) = PeerStream::watched(stream);
        return Some((stream, peer, Some(attempt)));
    }
    let timeout = Duration::from_millis(smtp.proxy_timeout_ms.get());
    let read = proxy::read_header(&mut stream, timeout).await;
    let read = read.and_then(|h| Ok((proxy::client(h.claim, peer, &smtp.trusted_networks)?, h)));
    match read {
        Ok((client, header)) => {
            tracing::debug!(%client, balancer = %peer, "PROXY header");
            Some((PeerStream::after_header(stream, header.rest), client, None))
        }
        Err(e) => {
            let reason = e.reason();
            tracing::warn!(%peer, reason, error = %e, "connection closed: PROXY header refused");
            ctx.services.metrics.proxy_refused(reason);
            None
        }
    }
}

/// One session; on an implicit-TLS port the handshake comes first, within its timeout.
async fn serve(
    ctx: Arc<Context>,
    stream: PeerStream<TcpStream>,
    peer: SocketAddr,
    shutdown: Shutdown,
    implicit_tls: bool,
) {
    if !implicit_tls {
        return smtp::serve(ctx, Box::new(stream), peer, shutdown, false).await;
    }
    let Some(tls) = ctx.setup.tls.clone() else {
        return;
    };
    // The handshake's result is boxed before the session starts, so the session's task does
    // not keep room for it beside the session.
    let stream = match tls.accept(stream).await {
        Ok(stream) => Box::new(stream),
        Err(e) => return tracing::info!(%peer, error = %e, "TLS handshake failed"),
    };
    smtp::serve(ctx, stream, peer, shutdown, true).await
}
