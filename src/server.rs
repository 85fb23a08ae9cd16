//! Accepting connections: the connection bound, one task per session, and graceful shutdown.
//! Everything a session needs is in `Context`, built once from `Deps`; nothing is global, so
//! tests run several relays in one process.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;

use crate::config::{Config, Cost};
use crate::policy::LayerPolicy;
use crate::shutdown::Shutdown;
use crate::smtp::{self, reply};
use crate::throttle::{Throttle, TokioClock};
use crate::upstream::Forwarder;

/// What `run` needs from outside: the config, the upstream and the throttle. Built by
/// `main` (or a test, which keeps a handle on the throttle to peek at its buckets).
pub struct Deps {
    pub config: Arc<Config>,
    pub forwarder: Arc<dyn Forwarder>,
    pub throttle: Arc<Throttle>,
}

impl Deps {
    /// The throttle built from the config's layers (and `[redis]`), on the real (tokio) clock.
    pub fn new(config: Arc<Config>, forwarder: Arc<dyn Forwarder>) -> Deps {
        let clock = Arc::new(TokioClock::new());
        let throttle = Arc::new(crate::throttle::from_config(&config, clock));
        Deps {
            config,
            forwarder,
            throttle,
        }
    }
}

/// Shared by every session of one relay.
pub struct Context {
    pub config: Arc<Config>,
    pub forwarder: Arc<dyn Forwarder>,
    pub throttle: Arc<Throttle>,
    /// The key and cost rules of each throttle layer, in the throttle's layer order.
    pub layers: Vec<LayerPolicy>,
    /// What EHLO advertises as `LIMITS RCPTMAX` (RFC 9422).
    pub rcpt_max: usize,
}

impl Context {
    pub fn new(deps: Deps) -> Context {
        let rcpt_max = rcpt_max(&deps.config);
        let layers = deps
            .config
            .throttle
            .iter()
            .map(LayerPolicy::from_config)
            .collect();
        Context {
            config: deps.config,
            forwarder: deps.forwarder,
            throttle: deps.throttle,
            layers,
            rcpt_max,
        }
    }
}

/// The smallest of `max_recipients` and the bursts of recipient-cost layers that apply to
/// every message: more recipients than that could never pass in one message.
fn rcpt_max(config: &Config) -> usize {
    config
        .throttle
        .iter()
        .filter(|l| l.cost == Cost::Recipients && l.match_.is_none())
        .map(|l| usize::try_from(l.burst()).unwrap_or(usize::MAX))
        .fold(config.smtp.max_recipients.get(), usize::min)
}

/// Serves SMTP on `listeners` until `shutdown` fires, then stops accepting, lets sessions in
/// flight finish within `shutdown_grace_ms`, and returns. Sessions still running after the
/// grace period are left to the caller, which is about to exit the process.
pub async fn run(listeners: Vec<TcpListener>, deps: Deps, shutdown: Shutdown) {
    let ctx = Arc::new(Context::new(deps));
    let limit = Arc::new(Semaphore::new(ctx.config.smtp.max_connections.get()));
    let sessions = TaskTracker::new();
    let accepts = TaskTracker::new();
    for listener in listeners {
        let (ctx, limit) = (ctx.clone(), limit.clone());
        let (sessions, shutdown) = (sessions.clone(), shutdown.clone());
        accepts.spawn(accept_loop(listener, ctx, limit, sessions, shutdown));
    }
    accepts.close();
    accepts.wait().await;
    // Waiters in the throttle's queues are answered 421 now; transactions in flight go on.
    ctx.throttle.dispose();
    sessions.close();
    let grace = Duration::from_millis(ctx.config.smtp.shutdown_grace_ms);
    if tokio::time::timeout(grace, sessions.wait()).await.is_err() {
        tracing::warn!(
            left = sessions.len(),
            "grace period over with sessions in flight"
        );
    }
}

async fn accept_loop(
    listener: TcpListener,
    ctx: Arc<Context>,
    limit: Arc<Semaphore>,
    sessions: TaskTracker,
    mut shutdown: Shutdown,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait() => return,
        };
        match accepted {
            Ok((stream, peer)) => start_session(&sessions, stream, peer, &ctx, &limit, &shutdown),
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

fn start_session(
    sessions: &TaskTracker,
    stream: TcpStream,
    peer: SocketAddr,
    ctx: &Arc<Context>,
    limit: &Arc<Semaphore>,
    shutdown: &Shutdown,
) {
    let _ = stream.set_nodelay(true);
    let ctx = ctx.clone();
    let shutdown = shutdown.clone();
    match limit.clone().try_acquire_owned() {
        Ok(permit) => {
            sessions.spawn(async move {
                smtp::serve(ctx, Box::new(stream), peer, shutdown).await;
                drop(permit);
            });
        }
        Err(_) => {
            tracing::warn!(%peer, "connection refused: max_connections reached");
            sessions.spawn(async move {
                let mut stream = stream;
                smtp::refuse(&mut stream, &reply::too_many_connections()).await;
            });
        }
    }
}
