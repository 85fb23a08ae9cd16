//! What sessions, the message pipeline and the admin endpoint read, in two parts: what a
//! reload replaces and what outlives it, so that adding a service touches one struct.
//!
//! - [`Setup`]: the config and what is built from it (upstreams, throttle, TLS, the layers'
//!   key rules). A reload makes a new one; parts that did not change are carried into it.
//! - [`Services`]: what outlives a reload (metrics, traces, per-address tables, the password
//!   checks, the DATA byte budget, the clock, the reputation guard, the spool, this process's
//!   id, what the admission steps keep).
//! - [`Context`]: one of each, what a session reads; built at start from `Deps` (`deps`) and at each
//!   reload from a new [`Setup`] and the same [`Services`].
//! - [`Live`]: the current context, swapped by a reload. Sessions and waiters in flight keep the
//!   context they started with; new connections, new messages and the admin endpoint read the
//!   current one.

use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::clock::Clock;
use crate::config::{Config, Cost};
use crate::inbound::auth_lockout::LockoutRule;
use crate::inbound::connection_limit::Connections;
use crate::inbound::login::Logins;
use crate::inbound::tls::Tls;
use crate::observe::metrics::Metrics;
use crate::observe::recent::Recent;
use crate::observe::traces::Traces;
use crate::policy::{KeyRule, LayerPolicy, Rules};
use crate::reputation::sns_verifier::SnsVerifier;
use crate::reputation::Reputation;
use crate::spool::Spool;
use crate::throttle::Throttle;
use crate::upstream::Upstreams;
use crate::webhook::Webhooks;

use super::grace_over::{Bell, GraceOver};
use super::health::Health;
use super::kept::Kept;

/// The config and what is built from it: what a reload replaces.
#[derive(Clone)]
pub struct Setup {
    pub config: Arc<Config>,
    /// Every upstream of the config, each with its forwarder and its quota pause.
    pub upstreams: Arc<Upstreams>,
    pub throttle: Arc<Throttle>,
    /// STARTTLS and implicit TLS; `None` when `[smtp.tls]` is not set.
    pub tls: Option<Arc<Tls>>,
    /// The key and cost rules of each throttle layer, in the throttle's layer order.
    pub layers: Vec<LayerPolicy>,
    /// What EHLO advertises as `LIMITS RCPTMAX` (RFC 9422).
    pub rcpt_max: usize,
}

impl Setup {
    /// The one constructor: what is derived from the config is derived here.
    pub fn new(
        config: Arc<Config>,
        upstreams: Arc<Upstreams>,
        throttle: Arc<Throttle>,
        tls: Option<Arc<Tls>>,
    ) -> Setup {
        Setup {
            layers: config
                .throttle
                .iter()
                .map(LayerPolicy::from_config)
                .collect(),
            rcpt_max: rcpt_max(&config),
            config,
            upstreams,
            throttle,
            tls,
        }
    }
}

/// What outlives a reload: made once at start, shared by every context since.
pub struct Services {
    pub metrics: Arc<Metrics>,
    /// The last refusals, for the status page.
    pub recent: Arc<Recent>,
    /// OTLP traces (`[telemetry]`); `None` when off. `[telemetry]` changes need a restart.
    pub traces: Option<Arc<Traces>>,
    /// `max_connections_per_ip`.
    pub connections_per_ip: Arc<Connections>,
    /// SMTP AUTH's password checks (a bounded number at once for the whole process) and
    /// failed attempts per client address.
    pub auth: Logins,
    /// The admin endpoint's own: guessing there never takes SMTP AUTH's check slots.
    pub admin_logins: Logins,
    /// Bytes of DATA the sessions of the process may still hold (`max_buffered_bytes`),
    /// one permit a byte.
    pub buffered: Arc<Semaphore>,
    /// The monotonic clock of the throttle (kept across reloads, so buckets carry over).
    pub clock: Arc<dyn Clock>,
    /// Where a newer context is found after a reload.
    pub live: Weak<Live>,
    /// This process among relays: random, written in our `Received:` fields, so a message
    /// that comes back is known (a mail loop) even when two relays share a hostname.
    pub instance: Arc<str>,
    /// The tenant reputation guard of `[reputation]` (its counts are the window's history).
    pub reputation: Option<Arc<Reputation>>,
    /// Checks SNS's posts to `/ses/events` (SNS's own host; tests swap in a local one).
    pub sns: Arc<SnsVerifier>,
    pub health: Arc<Health>,
    /// Where hold-mode layers keep messages (`[spool]`, opened at start: see
    /// [`Deps::with_spool`]); `None` without one.
    pub spool: Option<Arc<Spool>>,
    /// `[[webhook]]`: tenants' events posted to their URLs; their tasks start with `run`.
    /// Changes need a restart.
    pub webhooks: Arc<Webhooks>,
    /// What the admission steps keep between messages, each step its own.
    pub kept: Kept,
}

impl Services {
    /// The services of a relay starting with `config`.
    pub fn new(config: &Config, clock: Arc<dyn Clock>, live: &Arc<Live>) -> Services {
        let smtp = &config.smtp;
        let metrics = Metrics::new();
        let webhooks = Arc::new(Webhooks::new(&config.webhooks, clock.clone(), &metrics));
        Services {
            reputation: reputation(config, &clock, &metrics, &webhooks),
            webhooks,
            traces: traces(config),
            metrics,
            recent: Recent::new(),
            connections_per_ip: Connections::new(smtp.max_connections_per_ip.get()),
            auth: Logins::new(
                smtp.auth.as_ref().map_or(1, |a| a.parallel_checks()),
                lockout_rule(config),
            ),
            admin_logins: admin_logins(config),
            buffered: Arc::new(Semaphore::new(
                smtp.max_buffered_bytes.get().min(Semaphore::MAX_PERMITS),
            )),
            clock,
            live: Arc::downgrade(live),
            instance: uuid::Uuid::new_v4().simple().to_string()[..16].into(),
            sns: Arc::new(SnsVerifier::sns()),
            health: Arc::new(Health::default()),
            spool: None,
            kept: Kept::default(),
        }
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
    webhooks: &Arc<Webhooks>,
) -> Option<Arc<Reputation>> {
    let r = config.reputation.as_ref()?;
    let guard = match &config.redis {
        None => Reputation::new(r, clock.clone()),
        Some(redis) => {
            let options = crate::redis::redis_options(redis);
            let errors = metrics.reputation_store_errors();
            Reputation::with_redis(r, clock.clone(), &options, errors).unwrap_or_else(|e| {
                tracing::error!(error = %e, "redis unusable; the reputation guard runs in process");
                Reputation::new(r, clock.clone())
            })
        }
    };
    Some(Arc::new(guard.with_webhooks(webhooks.clone())))
}

/// What one session reads: the setup in force when it began (or at its last MAIL), and the
/// services every context shares.
pub struct Context {
    pub setup: Setup,
    pub services: Arc<Services>,
}

impl Context {
    /// The context of a reloaded config: a new setup, the same services.
    pub fn successor(&self, setup: Setup) -> Context {
        Context {
            setup,
            services: self.services.clone(),
        }
    }

    /// What the policy reads a message's identity with: the setup's layers and routes, its
    /// tenant's key (`[tenant]`), the reputation guard's (the tenant's unless it has its
    /// own), this process's mark.
    pub fn rules(&self) -> Rules<'_> {
        let tenant = &self.setup.config.tenant;
        let tenant = KeyRule {
            source: &tenant.key.0,
            default_key: &tenant.default_key,
        };
        let guard = self.services.reputation.as_deref();
        Rules {
            layers: &self.setup.layers,
            routes: &self.setup.config.routes,
            first_upstream: self.setup.upstreams.first().name(),
            tenant,
            reputation_key: guard.map(|guard| match &guard.key {
                Some(source) => KeyRule {
                    source,
                    default_key: &guard.default_key,
                },
                None => tenant,
            }),
            instance: &self.services.instance,
        }
    }

    /// The newest context (this one unless a reload came since).
    pub fn latest(self: &Arc<Context>) -> Arc<Context> {
        self.services
            .live
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

/// The admin endpoint's logins, by `[admin]`'s keys (its defaults without the section).
fn admin_logins(config: &Config) -> Logins {
    let admin = config.admin.clone().unwrap_or_default();
    let rule = LockoutRule {
        max_failures: admin.max_failures.get(),
        window: Duration::from_millis(admin.failure_window_ms.get()),
        lockout: Duration::from_millis(admin.lockout_ms.get()),
    };
    Logins::new(admin.max_parallel_checks.get(), rule)
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
        throttles.push(Arc::downgrade(&ctx.setup.throttle));
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
