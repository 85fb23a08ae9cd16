//! Accepting connections: the connection bound, one task per session, and graceful shutdown.
//! Everything a session needs is in `Context`, built once from `Deps`; nothing is global, so
//! tests run several relays in one process.

use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;

use crate::admin::{Admin, Health};
use crate::config::{Config, Cost};
use crate::metrics::Metrics;
use crate::per_ip::{AuthFailures, Connections, LockoutRule};
use crate::policy::LayerPolicy;
use crate::reload::Live;
use crate::shutdown::Shutdown;
use crate::smtp::{self, reply};
use crate::throttle::{Clock, Throttle, TokioClock};
use crate::tls::{Tls, TlsError};
use crate::upstream::Forwarder;

/// What `run` needs from outside: the config, the upstream and the throttle. Built by
/// `main` (or a test, which keeps a handle on the throttle to peek at its buckets).
#[derive(Clone)]
pub struct Deps {
    pub config: Arc<Config>,
    pub forwarder: Arc<dyn Forwarder>,
    pub throttle: Arc<Throttle>,
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
    /// The monotonic clock of the throttle (kept across reloads, so buckets carry over).
    pub clock: Arc<dyn Clock>,
    /// The current context, for SIGHUP and the admin endpoint; filled in by `run`.
    pub live: Arc<Live>,
    /// Inbound TLS from `[smtp.tls]`, loaded by `with_tls`; main keeps a handle for SIGHUP.
    pub tls: Option<Arc<Tls>>,
}

impl Deps {
    /// The throttle built from the config's layers (and `[redis]`), on the real (tokio)
    /// clock, and fresh metrics.
    pub fn new(config: Arc<Config>, forwarder: Arc<dyn Forwarder>) -> Deps {
        let clock: Arc<dyn Clock> = Arc::new(TokioClock::new());
        let throttle = Arc::new(crate::throttle::from_config(&config, clock.clone()));
        Deps {
            config,
            forwarder,
            throttle,
            metrics: Metrics::new(),
            health: Arc::new(Health::default()),
            clock,
            live: Live::new(),
            tls: None,
        }
    }

    /// What the admin endpoint reads.
    pub fn admin(&self) -> Arc<Admin> {
        Arc::new(Admin {
            throttle: self.throttle.clone(),
            metrics: self.metrics.clone(),
            forwarder: self.forwarder.clone(),
            health: self.health.clone(),
            live: self.live.clone(),
        })
    }

    /// Reads `[smtp.tls]`'s certificate and key; a missing file or a key that is not the
    /// certificate's is a startup error.
    pub fn with_tls(mut self) -> Result<Deps, TlsError> {
        if let Some(tls) = &self.config.smtp.tls {
            self.tls = Some(Arc::new(Tls::load(tls)?));
        }
        Ok(self)
    }
}

/// Shared by every session of one relay.
pub struct Context {
    pub config: Arc<Config>,
    pub forwarder: Arc<dyn Forwarder>,
    pub throttle: Arc<Throttle>,
    pub metrics: Arc<Metrics>,
    /// The key and cost rules of each throttle layer, in the throttle's layer order.
    pub layers: Vec<LayerPolicy>,
    /// What EHLO advertises as `LIMITS RCPTMAX` (RFC 9422).
    pub rcpt_max: usize,
    /// STARTTLS and implicit TLS; `None` when `[smtp.tls]` is not set.
    pub tls: Option<Arc<Tls>>,
    /// `max_connections_per_ip`.
    pub connections_per_ip: Arc<Connections>,
    /// Failed AUTH attempts per client address, for the lockout.
    pub auth_failures: Arc<AuthFailures>,
    pub clock: Arc<dyn Clock>,
    /// Where a newer context is found after a reload.
    pub live: Weak<Live>,
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
        let smtp = &deps.config.smtp;
        // `Deps::with_tls` reports a bad certificate at startup; a caller that skipped it
        // still gets TLS, or a logged reason why not.
        let tls = deps.tls.or_else(|| {
            let config = smtp.tls.as_ref()?;
            Tls::load(config)
                .map_err(|e| tracing::error!(error = %e, "TLS not available"))
                .ok()
                .map(Arc::new)
        });
        let connections_per_ip = Connections::new(smtp.max_connections_per_ip.get());
        let auth_failures = AuthFailures::new(match &smtp.auth {
            Some(auth) => LockoutRule {
                max_failures: auth.max_failures.get(),
                window: Duration::from_millis(auth.failure_window_ms.get()),
                lockout: Duration::from_millis(auth.lockout_ms.get()),
            },
            None => LockoutRule {
                max_failures: 1,
                window: Duration::ZERO,
                lockout: Duration::ZERO,
            },
        });
        Context {
            config: deps.config,
            forwarder: deps.forwarder,
            throttle: deps.throttle,
            metrics: deps.metrics,
            layers,
            rcpt_max,
            tls,
            connections_per_ip,
            auth_failures: Arc::new(auth_failures),
            clock: deps.clock,
            live: Arc::downgrade(&deps.live),
        }
    }

    /// The newest context (this one unless a reload came since).
    pub fn latest(self: &Arc<Context>) -> Arc<Context> {
        self.live
            .upgrade()
            .and_then(|live| live.current())
            .unwrap_or_else(|| self.clone())
    }

    /// The context of a reloaded config; see `reload`.
    pub(crate) fn successor(
        &self,
        config: Arc<Config>,
        forwarder: Arc<dyn Forwarder>,
        throttle: Arc<Throttle>,
        tls: Option<Arc<Tls>>,
    ) -> Context {
        Context {
            rcpt_max: rcpt_max(&config),
            layers: config
                .throttle
                .iter()
                .map(LayerPolicy::from_config)
                .collect(),
            config,
            forwarder,
            throttle,
            metrics: self.metrics.clone(),
            tls,
            connections_per_ip: self.connections_per_ip.clone(),
            auth_failures: self.auth_failures.clone(),
            clock: self.clock.clone(),
            live: self.live.clone(),
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

/// The sockets `run` serves: plain SMTP (with STARTTLS when `[smtp.tls]` is set) and
/// implicit TLS (`tls_listen`, RFC 8314). A bare `Vec` is plain SMTP only.
#[derive(Default)]
pub struct Listeners {
    pub smtp: Vec<TcpListener>,
    pub implicit_tls: Vec<TcpListener>,
}

impl From<Vec<TcpListener>> for Listeners {
    fn from(smtp: Vec<TcpListener>) -> Listeners {
        Listeners {
            smtp,
            implicit_tls: Vec::new(),
        }
    }
}

/// Serves SMTP on `listeners` until `shutdown` fires, then stops accepting, lets sessions in
/// flight finish within `shutdown_grace_ms`, and returns. Sessions still running after the
/// grace period are left to the caller, which is about to exit the process.
pub async fn run(listeners: impl Into<Listeners>, deps: Deps, shutdown: Shutdown) {
    let listeners = listeners.into();
    let health = deps.health.clone();
    let live = deps.live.clone();
    let ctx = Arc::new(Context::new(deps));
    live.install(ctx.clone());
    let limit = Arc::new(Semaphore::new(ctx.config.smtp.max_connections.get()));
    let sessions = TaskTracker::new();
    let accepts = TaskTracker::new();
    let plain = listeners.smtp.into_iter().map(|l| (l, false));
    for (listener, implicit_tls) in
        plain.chain(listeners.implicit_tls.into_iter().map(|l| (l, true)))
    {
        if implicit_tls && ctx.tls.is_none() {
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
    // Waiters in the throttle's queues (of every config since start) are answered 421 now;
    // transactions in flight go on.
    live.dispose();
    sessions.close();
    let grace = Duration::from_millis(ctx.config.smtp.shutdown_grace_ms);
    if tokio::time::timeout(grace, sessions.wait()).await.is_err() {
        tracing::warn!(
            left = sessions.len(),
            "grace period over with sessions in flight"
        );
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
    let shutdown = shutdown.clone();
    let implicit_tls = accepting.implicit_tls;
    let refusal = match accepting.limit.clone().try_acquire_owned() {
        Err(_) => {
            tracing::warn!(%peer, "connection refused: max_connections reached");
            reply::too_many_connections()
        }
        Ok(permit) => match ctx.connections_per_ip.try_acquire(peer.ip()) {
            None => {
                tracing::warn!(%peer, "connection refused: max_connections_per_ip reached");
                reply::too_many_connections_from_address()
            }
            Some(slot) => {
                accepting.sessions.spawn(async move {
                    let metrics = ctx.metrics.clone();
                    metrics.connection_opened();
                    serve(ctx, stream, peer, shutdown, implicit_tls).await;
                    metrics.connection_closed();
                    drop((slot, permit));
                });
                return;
            }
        },
    };
    // On an implicit-TLS port a plaintext reply would be noise: the client just sees a close.
    if !implicit_tls {
        accepting.sessions.spawn(async move {
            let mut stream = stream;
            smtp::refuse(&mut stream, &refusal).await;
        });
    }
}

/// One session; on an implicit-TLS port the handshake comes first, within its timeout.
async fn serve(
    ctx: Arc<Context>,
    stream: TcpStream,
    peer: SocketAddr,
    shutdown: Shutdown,
    implicit_tls: bool,
) {
    if !implicit_tls {
        return smtp::serve(ctx, Box::new(stream), peer, shutdown, false).await;
    }
    let Some(tls) = ctx.tls.clone() else { return };
    match tls.accept(stream).await {
        Ok(stream) => smtp::serve(ctx, Box::new(stream), peer, shutdown, true).await,
        Err(e) => tracing::info!(%peer, error = %e, "TLS handshake failed"),
    }
}
