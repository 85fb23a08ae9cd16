//! SIGHUP: a new configuration for new messages, without dropping anything. Connections and
//! waiters in flight keep the context they started with; a session moves to the newest one at
//! its next MAIL, and new connections start on it. An unusable new config is refused whole
//! and the old one stays in force.

use std::sync::{Arc, RwLock, Weak};

use crate::config::Config;
use crate::server::Context;
use crate::throttle::Throttle;
use crate::tls::Tls;

/// The relay's current context, swapped by `reload`.
#[derive(Default)]
pub struct Live {
    current: RwLock<Option<Arc<Context>>>,
    /// Every throttle a context used, so that shutdown reaches waiters of older configs too.
    throttles: RwLock<Vec<Weak<Throttle>>>,
}

impl Live {
    pub fn new() -> Arc<Live> {
        Arc::new(Live::default())
    }

    /// The newest context, once the relay runs.
    pub fn current(&self) -> Option<Arc<Context>> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn install(&self, ctx: Arc<Context>) {
        let mut throttles = self.throttles.write().unwrap_or_else(|e| e.into_inner());
        throttles.retain(|t| t.strong_count() > 0);
        throttles.push(Arc::downgrade(&ctx.throttle));
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Some(ctx);
    }

    /// Answers every waiter, of this config and of older ones, with the shutdown error.
    pub(crate) fn dispose(&self) {
        let throttles = self.throttles.read().unwrap_or_else(|e| e.into_inner());
        for throttle in throttles.iter().filter_map(Weak::upgrade) {
            throttle.dispose();
        }
    }

    /// Puts `config` in force for new messages. Returns notes on what it could not change
    /// (listeners need a restart); `Err` when it cannot be used, the old config staying.
    pub fn reload(&self, config: Config) -> Result<Vec<String>, String> {
        let old = self.current().ok_or("the relay is not running yet")?;
        let notes = restart_notes(&old.config, &config);
        let next = Arc::new(reloaded(&old, config)?);
        self.install(next);
        Ok(notes)
    }
}

/// A context for `config` that keeps what must outlive a reload: the metrics, the per-address
/// tables, the clock, and the buckets of unchanged layers.
fn reloaded(old: &Context, config: Config) -> Result<Context, String> {
    let config = Arc::new(config);
    let helo = config
        .upstream
        .helo_name
        .as_deref()
        .unwrap_or(&config.smtp.hostname);
    let forwarder = crate::upstream::build_forwarder(&config.upstream, helo)?;
    let throttle =
        crate::throttle::from_config(&config, old.clock.clone()).keeping_unchanged(&old.throttle);
    let tls = match (&config.smtp.tls, &old.tls) {
        (None, _) => None,
        (Some(new), Some(tls)) if new.cert == tls.cert() && new.key == tls.key() => {
            tls.reload().map_err(|e| e.to_string())?;
            Some(tls.clone())
        }
        (Some(new), _) => Some(Arc::new(Tls::load(new).map_err(|e| e.to_string())?)),
    };
    Ok(old.successor(config, forwarder, Arc::new(throttle), tls))
}

/// What a reload cannot change in a running process.
fn restart_notes(old: &Config, new: &Config) -> Vec<String> {
    let mut notes = Vec::new();
    if old.smtp.listen != new.smtp.listen || old.smtp.tls_listen != new.smtp.tls_listen {
        notes.push("smtp.listen / smtp.tls_listen changed: takes effect after a restart".into());
    }
    if old.admin.as_ref().map(|a| a.listen) != new.admin.as_ref().map(|a| a.listen) {
        notes.push("[admin] listen changed: takes effect after a restart".into());
    }
    if old.smtp.max_connections != new.smtp.max_connections
        || old.smtp.max_connections_per_ip != new.smtp.max_connections_per_ip
    {
        notes.push("connection bounds changed: take effect after a restart".into());
    }
    notes
}
