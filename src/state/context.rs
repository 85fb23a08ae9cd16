//! What sessions and the admin endpoint read, built in one place for start and reload.
//!
//! - [`Deps`]: what `run` needs from outside (the config, the upstreams, the throttle), made by
//!   `main` or a test; nothing is global, so tests run several relays in one process.
//! - [`Context`]: everything one session reads, made from `Deps` at start and from a new
//!   config at reload, both through [`Context::assemble`]; what must outlive a reload (metrics,
//!   the per-address tables, the clock) is carried over.
//! - [`Live`]: the current context, swapped by a reload. Sessions and waiters in flight keep the
//!   context they started with; new connections, new messages and the admin endpoint read the
//!   current one.
//! - [`Health`]: whether the SMTP listeners accept, for readiness.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::clock::{Clock, TokioClock};
use crate::config::{Config, Cost};
use crate::inbound::auth_lockout::{AuthFailures, LockoutRule};
use crate::inbound::connection_limit::Connections;
use crate::inbound::password::Verifier;
use crate::inbound::tls::{Tls, TlsError};
use crate::observe::metrics::Metrics;
use crate::observe::recent::Recent;
use crate::observe::traces::Traces;
use crate::policy::LayerPolicy;
use crate::reputation::sns_verifier::SnsVerifier;
use crate::reputation::Reputation;
use crate::throttle::Throttle;
use crate::upstream::Upstreams;

use super::grace_over::{Bell, GraceOver};

/// What `run` needs from outside. Built by `main`, or by a test, which keeps handles on the
/// throttle (to peek at buckets) and on `live` (to reload as SIGHUP does).
#[derive(Clone)]
pub struct Deps {
    pub config: Arc<Config>,
    /// Every upstream of the config, each with its forwarder and its quota pause.
    pub upstreams: Arc<Upstreams>,
    pub throttle: Arc<Throttle>,
    pub metrics: Arc<Metrics>,
    /// The last refusals, for the status page.
    pub recent: Arc<Recent>,
    /// OTLP traces (`[telemetry]`); `None` when off.
    pub traces: Option<Arc<Traces>>,
    pub health: Arc<Health>,
    /// The monotonic clock of the throttle (kept across reloads, so buckets carry over).
    pub clock: Arc<dyn Clock>,
    /// The current context; `run` installs the first one.
    pub live: Arc<Live>,
    /// Inbound TLS from `[smtp.tls]`, loaded by `with_tls`.
    pub tls: Option<Arc<Tls>>,
    /// This process among relays: random, written in our `Received:` fields, so a message
    /// that comes back is known (a mail loop) even when two relays share a hostname.
    pub instance: Arc<str>,
    /// The tenant reputation guard of `[reputation]` (kept across reloads: its counts are
    /// the window's history).
    pub reputation: Option<Arc<Reputation>>,
    /// Checks SNS's posts to `/ses/events` (SNS's own host; tests swap in a local one).
    pub sns: Arc<SnsVerifier>,
}

impl Deps {
    /// The throttle built from the config's layers (and `[redis]`), on the real (tokio)
    /// clock, and fresh metrics.
    pub fn new(config: Arc<Config>, upstreams: Upstreams) -> Deps {
        let clock: Arc<dyn Clock> = Arc::new(TokioClock::new());
        let throttle = Arc::new(crate::throttle::from_config(&config, clock.clone()));
        let traces = traces(&config);
        let metrics = Metrics::new();
        let reputation = reputation(&config, &clock, &metrics);
        Deps {
            reputation,
            sns: Arc::new(SnsVerifier::sns()),
            config,
            upstreams: Arc::new(upstreams),
            throttle,
            metrics,
            recent: Recent::new(),
            traces,
            health: Arc::new(Health::default()),
            clock,
            live: Live::new(),
            tls: None,
            instance: uuid::Uuid::new_v4().simple().to_string()[..16].into(),
        }
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

/// The tracer of `[telemetry]`; an exporter that cannot be set up is logged and traces stay
/// off (the relay's work does not depend on them).
fn traces(config: &Config) -> Option<Arc<Traces>> {
    let telemetry = config.telemetry.as_ref()?;
    Traces::new(telemetry)
        .map_err(|e| tracing::error!(error = %e, "traces off"))
        .ok()
        .map(Arc::new)
}

/// The guard of `[reputation]`: in Redis when `[redis]` is set (every replica agrees), else in
/// this process. A Redis section that cannot be used (checked at load, so rare) is logged and
/// the guard runs in process.
fn reputation(
    config: &Config,
    clock: &Arc<dyn Clock>,
    metrics: &Metrics,
) -> Option<Arc<Reputation>> {
    let r = config.reputation.as_ref()?;
    let Some(redis) = &config.redis else {
        return Some(Arc::new(Reputation::new(r, clock.clone())));
    };
    let options = crate::redis::redis_options(redis);
    let errors = metrics.reputation_store_errors();
    match Reputation::with_redis(r, clock.clone(), &options, errors) {
        Ok(guard) => Some(Arc::new(guard)),
        Err(e) => {
            tracing::error!(error = %e, "redis unusable; the reputation guard runs in process");
            Some(Arc::new(Reputation::new(r, clock.clone())))
        }
    }
}

/// The parts of a context that a reload replaces.
pub struct Parts {
    pub config: Arc<Config>,
    pub upstreams: Arc<Upstreams>,
    pub throttle: Arc<Throttle>,
    pub tls: Option<Arc<Tls>>,
}

/// Shared by every session of one relay.
pub struct Context {
    pub config: Arc<Config>,
    pub upstreams: Arc<Upstreams>,
    pub throttle: Arc<Throttle>,
    /// STARTTLS and implicit TLS; `None` when `[smtp.tls]` is not set.
    pub tls: Option<Arc<Tls>>,
    /// The key and cost rules of each throttle layer, in the throttle's layer order.
    pub layers: Vec<LayerPolicy>,
    /// What EHLO advertises as `LIMITS RCPTMAX` (RFC 9422).
    pub rcpt_max: usize,
    pub metrics: Arc<Metrics>,
    pub recent: Arc<Recent>,
    /// Kept across reloads: `[telemetry]` changes need a restart.
    pub traces: Option<Arc<Traces>>,
    /// `max_connections_per_ip`.
    pub connections_per_ip: Arc<Connections>,
    /// Failed AUTH attempts per client address, for the lockout.
    pub auth_failures: Arc<AuthFailures>,
    /// Checks AUTH passwords, a bounded number at once for the whole process.
    pub password_checks: Arc<Verifier>,
    /// Bytes of DATA the sessions of the process may still hold (`max_buffered_bytes`),
    /// one permit a byte.
    pub buffered: Arc<Semaphore>,
    pub clock: Arc<dyn Clock>,
    /// Where a newer context is found after a reload.
    pub live: Weak<Live>,
    /// This process's id in our `Received:` fields (see [`Deps::instance`]).
    pub instance: Arc<str>,
    /// The tenant reputation guard, when `[reputation]` is set at start.
    pub reputation: Option<Arc<Reputation>>,
}

/// What a context carries over from the one before it.
struct Kept {
    metrics: Arc<Metrics>,
    recent: Arc<Recent>,
    traces: Option<Arc<Traces>>,
    connections_per_ip: Arc<Connections>,
    auth_failures: Arc<AuthFailures>,
    password_checks: Arc<Verifier>,
    buffered: Arc<Semaphore>,
    clock: Arc<dyn Clock>,
    live: Weak<Live>,
    instance: Arc<str>,
    reputation: Option<Arc<Reputation>>,
}

impl Context {
    /// The first context, from `deps`.
    pub fn new(deps: Deps) -> Context {
        let smtp = &deps.config.smtp;
        let kept = Kept {
            metrics: deps.metrics,
            recent: deps.recent,
            traces: deps.traces,
            connections_per_ip: Connections::new(smtp.max_connections_per_ip.get()),
            auth_failures: Arc::new(AuthFailures::new(lockout_rule(&deps.config))),
            password_checks: Verifier::new(smtp.auth.as_ref().map_or(1, |a| a.parallel_checks())),
            buffered: Arc::new(Semaphore::new(
                smtp.max_buffered_bytes.get().min(Semaphore::MAX_PERMITS),
            )),
            clock: deps.clock,
            live: Arc::downgrade(&deps.live),
            instance: deps.instance,
            reputation: deps.reputation,
        };
        // `Deps::with_tls` reports a bad certificate at startup; a caller that skipped it
        // still gets TLS, or a logged reason why not.
        let tls = deps.tls.or_else(|| {
            let config = smtp.tls.as_ref()?;
            Tls::load(config)
                .map_err(|e| tracing::error!(error = %e, "TLS not available"))
                .ok()
                .map(Arc::new)
        });
        let parts = Parts {
            config: deps.config,
            upstreams: deps.upstreams,
            throttle: deps.throttle,
            tls,
        };
        Context::assemble(parts, kept)
    }

    /// The context of a reloaded config: new parts, the rest carried over.
    pub fn successor(&self, parts: Parts) -> Context {
        let kept = Kept {
            metrics: self.metrics.clone(),
            recent: self.recent.clone(),
            traces: self.traces.clone(),
            connections_per_ip: self.connections_per_ip.clone(),
            auth_failures: self.auth_failures.clone(),
            password_checks: self.password_checks.clone(),
            buffered: self.buffered.clone(),
            clock: self.clock.clone(),
            live: self.live.clone(),
            instance: self.instance.clone(),
            reputation: self.reputation.clone(),
        };
        Context::assemble(parts, kept)
    }

    /// The one constructor: what is derived from the config is derived here.
    fn assemble(parts: Parts, kept: Kept) -> Context {
        let layers = parts.config.throttle.iter().map(LayerPolicy::from_config);
        Context {
            rcpt_max: rcpt_max(&parts.config),
            layers: layers.collect(),
            config: parts.config,
            upstreams: parts.upstreams,
            throttle: parts.throttle,
            tls: parts.tls,
            metrics: kept.metrics,
            recent: kept.recent,
            traces: kept.traces,
            connections_per_ip: kept.connections_per_ip,
            auth_failures: kept.auth_failures,
            password_checks: kept.password_checks,
            buffered: kept.buffered,
            clock: kept.clock,
            live: kept.live,
            instance: kept.instance,
            reputation: kept.reputation,
        }
    }

    /// What the policy plans a message with.
    pub fn rules(&self) -> crate::policy::Rules<'_> {
        crate::policy::Rules {
            layers: &self.layers,
            routes: &self.config.routes,
            first_upstream: self.upstreams.first().name(),
        }
    }

    /// The newest context (this one unless a reload came since).
    pub fn latest(self: &Arc<Context>) -> Arc<Context> {
        self.live
            .upgrade()
            .and_then(|live| live.current())
            .unwrap_or_else(|| self.clone())
    }
}

/// The lockout rule of `[smtp.auth]`; without AUTH, nothing is ever counted.
fn lockout_rule(config: &Config) -> LockoutRule {
    match &config.smtp.auth {
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
    }
}

/// The smallest of `max_recipients` and the bursts of recipient-cost layers that apply to
/// every message: more recipients than that could never pass in one message.
fn rcpt_max(config: &Config) -> usize {
    config
        .throttle
        .iter()
        .filter(|l| l.cost == Cost::Recipients && l.match_.is_none() && l.upstream.is_none())
        .map(|l| usize::try_from(l.burst()).unwrap_or(usize::MAX))
        .fold(config.smtp.max_recipients.get(), usize::min)
}

/// The relay's current context, swapped by a reload.
#[derive(Default)]
pub struct Live {
    current: RwLock<Option<Arc<Context>>>,
    /// Every throttle a context used, so that shutdown reaches waiters of older configs too.
    throttles: RwLock<Vec<Weak<Throttle>>>,
    /// Rung when the shutdown's grace is over (see [`Live::dispose`]).
    grace_over: GraceOver,
}

impl Live {
    pub fn new() -> Arc<Live> {
        Arc::new(Live::default())
    }

    /// A session's bell, rung when the shutdown's grace is over: a message still with
    /// upstream then is given up, and its client answered before the process exits.
    pub fn grace_bell(&self) -> Arc<Bell> {
        self.grace_over.bell()
    }

    /// The newest context, once the relay runs.
    pub fn current(&self) -> Option<Arc<Context>> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Puts `ctx` in force for new connections and messages.
    pub fn install(&self, ctx: Arc<Context>) {
        let mut throttles = self.throttles.write().unwrap_or_else(|e| e.into_inner());
        throttles.retain(|t| t.strong_count() > 0);
        throttles.push(Arc::downgrade(&ctx.throttle));
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Some(ctx);
    }

    /// Starts the drain of every throttle, of this config and of older ones: waiters whose
    /// tokens come within `grace` keep their place (see `Throttle::drain`).
    pub fn drain(&self, grace: Duration) {
        for throttle in self.throttles() {
            throttle.drain(grace);
        }
    }

    /// Answers every waiter, of this config and of older ones, with the shutdown error, and
    /// tells every message still with upstream that the grace is over.
    pub fn dispose(&self) {
        for throttle in self.throttles() {
            throttle.dispose();
        }
        self.grace_over.ring();
    }

    fn throttles(&self) -> Vec<Arc<Throttle>> {
        let throttles = self.throttles.read().unwrap_or_else(|e| e.into_inner());
        throttles.iter().filter_map(Weak::upgrade).collect()
    }
}

/// What readiness depends on besides upstream: whether the SMTP listeners are accepting.
#[derive(Debug, Default)]
pub struct Health {
    listening: AtomicBool,
}

impl Health {
    pub fn set_listening(&self, on: bool) {
        self.listening.store(on, Ordering::SeqCst);
    }

    pub fn listening(&self) -> bool {
        self.listening.load(Ordering::SeqCst)
    }
}
