//! The configured upstreams by name: each with its own forwarder (pool, credentials, TLS), its
//! settings (reply patterns, quota pause) and its own pause after a quota reply, since each
//! provider account has its own quota.

use std::sync::Arc;

use super::{build_forwarder, Forwarder, Pause};
use crate::config::{Config, UpstreamConfig};

/// One named upstream.
pub struct Upstream {
    pub config: UpstreamConfig,
    pub forwarder: Arc<dyn Forwarder>,
    pub pause: Arc<Pause>,
}

impl Upstream {
    pub fn name(&self) -> &str {
        self.config.name()
    }
}

/// Every upstream of a config, in config order (the first carries messages when there are no
/// routes).
pub struct Upstreams {
    list: Vec<Arc<Upstream>>,
}

impl Upstreams {
    /// A forwarder for each `[[upstream]]`. Errors name the upstream and the key (bad TLS
    /// setup, missing password variable), for the operator at startup or reload.
    pub fn from_config(config: &Config) -> Result<Upstreams, String> {
        Upstreams::rebuilt(config, None, None)
    }

    /// As [`Upstreams::from_config`], but the first upstream forwards through `forwarder`
    /// (tests and embedders that bring their own).
    pub fn with_first(config: &Config, forwarder: Arc<dyn Forwarder>) -> Result<Upstreams, String> {
        Upstreams::rebuilt(config, None, Some(forwarder))
    }

    /// The upstreams of a reloaded `config`: one whose settings did not change is kept whole
    /// (its open connections, its pause); a changed one gets a new forwarder but keeps its
    /// pause, which is about the account behind the name.
    pub fn reloaded(config: &Config, old: &Upstreams) -> Result<Upstreams, String> {
        Upstreams::rebuilt(config, Some(old), None)
    }

    fn rebuilt(
        config: &Config,
        old: Option<&Upstreams>,
        first: Option<Arc<dyn Forwarder>>,
    ) -> Result<Upstreams, String> {
        let mut first = first;
        let mut list = Vec::with_capacity(config.upstreams.len());
        for cfg in &config.upstreams {
            let before = old.and_then(|old| old.get(cfg.name()));
            if let Some(before) = before.filter(|b| b.config == *cfg) {
                list.push(before.clone());
                continue;
            }
            let forwarder = match first.take() {
                Some(forwarder) => forwarder,
                None => {
                    build_forwarder(cfg).map_err(|e| format!("upstream {:?}: {e}", cfg.name()))?
                }
            };
            list.push(Arc::new(Upstream {
                config: cfg.clone(),
                forwarder,
                pause: before.map_or_else(Arc::default, |b| b.pause.clone()),
            }));
        }
        Ok(Upstreams { list })
    }

    /// The upstream of a message when there are no routes.
    pub fn first(&self) -> &Arc<Upstream> {
        &self.list[0]
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Upstream>> {
        self.list.iter().find(|u| u.name() == name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Upstream>> {
        self.list.iter()
    }
}
