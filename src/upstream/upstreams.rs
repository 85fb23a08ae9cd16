//! The configured upstreams by name: each with its own forwarder (pool, credentials, TLS), its
//! settings (reply patterns, quota pause) and its own pause after a quota reply, since each
//! provider account has its own quota.

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use super::{build_forwarder, Breaker, Checked, Forwarder, Pause, SetupError};
use crate::config::{Config, UpstreamConfig, UpstreamKind};

/// How long a readiness check's result is reused: asking `/readyz` or the status page costs
/// upstream nothing in between, however often and however many at once.
pub const CHECK_MAX_AGE: Duration = Duration::from_secs(5);

/// One named upstream.
pub struct Upstream {
    pub config: UpstreamConfig,
    pub forwarder: Arc<dyn Forwarder>,
    pub pause: Arc<Pause>,
    /// Whether it is failing: hold-mode messages for it are then held at once.
    pub breaker: Arc<Breaker>,
    /// The last check and when it ended; the lock is held through a check, so one runs at a
    /// time and those who asked meanwhile read its result.
    last_check: tokio::sync::Mutex<Option<(Instant, Checked)>>,
}

impl Upstream {
    pub fn name(&self) -> &str {
        self.config.name()
    }

    /// Whether its throttle replies speak for one recipient domain's servers (direct
    /// delivery) rather than for everything it carries: then only that domain's buckets learn.
    pub fn throttles_per_domain(&self) -> bool {
        matches!(self.config.kind, UpstreamKind::Mx(_))
    }

    /// Whether its last check (by `/readyz` or the status page) found it reachable; `None`
    /// before the first, or while one runs. Runs none.
    pub fn last_check_ok(&self) -> Option<bool> {
        let last = self.last_check.try_lock().ok()?;
        last.as_ref().map(|(_, checked)| checked.is_ok())
    }

    /// The forwarder's check (`Forwarder::check`), at most one at a time and at most once per
    /// [`CHECK_MAX_AGE`]: in between, the last result.
    pub async fn check(&self) -> Checked {
        let mut last = self.last_check.lock().await;
        if let Some((at, result)) = &*last {
            if at.elapsed() < CHECK_MAX_AGE {
                return result.clone();
            }
        }
        let result = self.forwarder.check().await;
        *last = Some((Instant::now(), result.clone()));
        result
    }
}

/// The addresses the relay listens on, once bound: shared by every forwarder that must never
/// deliver to the relay itself, and by those of a reload.
#[derive(Debug, Clone, Default)]
pub struct OwnAddresses(Arc<RwLock<Vec<SocketAddr>>>);

impl OwnAddresses {
    pub fn set(&self, addrs: &[SocketAddr]) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = addrs.to_vec();
    }

    /// Whether any of them matches `to`.
    pub fn any(&self, to: impl Fn(SocketAddr) -> bool) -> bool {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|a| to(*a))
    }
}

/// An upstream whose forwarder could not be built, named, with why (the key at fault). The
/// why is in the text and is no `source`, so a printed chain says it once.
#[derive(Debug, thiserror::Error)]
#[error("upstream {name:?}: {error}")]
pub struct UpstreamsError {
    pub name: String,
    pub error: SetupError,
}

/// Every upstream of a config, in config order (the first carries messages when there are no
/// routes).
pub struct Upstreams {
    list: Vec<Arc<Upstream>>,
    /// Where the relay listens, once bound.
    own: OwnAddresses,
}

impl Upstreams {
    /// A forwarder for each `[[upstream]]`. Errors name the upstream and the key (bad TLS
    /// setup, missing password variable), for the operator at startup or reload.
    pub fn from_config(config: &Config) -> Result<Upstreams, UpstreamsError> {
        Upstreams::rebuilt(config, None, None)
    }

    /// As [`Upstreams::from_config`], but the first upstream forwards through `forwarder`
    /// (tests and embedders that bring their own).
    pub fn with_first(
        config: &Config,
        forwarder: Arc<dyn Forwarder>,
    ) -> Result<Upstreams, UpstreamsError> {
        Upstreams::rebuilt(config, None, Some(forwarder))
    }

    /// The upstreams of a reloaded `config`: one whose settings did not change is kept whole
    /// (its open connections, its pause); a changed one gets a new forwarder but keeps its
    /// pause and its breaker, which are about the account behind the name.
    pub fn reloaded(config: &Config, old: &Upstreams) -> Result<Upstreams, UpstreamsError> {
        Upstreams::rebuilt(config, Some(old), None)
    }

    fn rebuilt(
        config: &Config,
        old: Option<&Upstreams>,
        first: Option<Arc<dyn Forwarder>>,
    ) -> Result<Upstreams, UpstreamsError> {
        let own = old.map_or_else(OwnAddresses::default, |old| old.own.clone());
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
                None => build_forwarder(cfg, &own).map_err(|error| UpstreamsError {
                    name: cfg.name().to_string(),
                    error,
                })?,
            };
            list.push(Arc::new(Upstream {
                config: cfg.clone(),
                forwarder,
                pause: before.map_or_else(Arc::default, |b| b.pause.clone()),
                breaker: before.map_or_else(Arc::default, |b| b.breaker.clone()),
                last_check: tokio::sync::Mutex::new(None),
            }));
        }
        Ok(Upstreams { list, own })
    }

    /// The addresses the relay listens on, as bound, for the forwarders that must never
    /// deliver to the relay itself.
    pub fn listening_on(&self, addrs: &[SocketAddr]) {
        self.own.set(addrs);
    }

    /// Starts what each upstream learns in the background (SES: its tenants and their
    /// identities), at start and after a reload; readiness never waits for it.
    pub fn start_learning(&self) {
        for upstream in &self.list {
            if let Some(identities) = upstream.forwarder.offers().identities {
                identities.start();
            }
        }
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::upstream::{CheckFuture, ForwardFuture, Outgoing, Unready};

    /// Counts its checks, each of which takes a second.
    #[derive(Default)]
    struct Counting(AtomicUsize);

    impl Forwarder for Counting {
        fn send<'a>(&'a self, _: &'a Outgoing<'a>) -> ForwardFuture<'a> {
            unreachable!("only checked")
        }
        fn check(&self) -> CheckFuture<'_> {
            Box::pin(async {
                let n = self.0.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(1)).await;
                Err(Unready(format!("check {n}")))
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn checks_run_one_at_a_time_and_their_result_is_reused_for_a_while() {
        let config =
            Config::parse("[smtp]\nlisten = [\"127.0.0.1:0\"]\n[upstream]\nurl = \"file://x\"\n")
                .unwrap();
        let counting = Arc::new(Counting::default());
        let upstreams = Upstreams::with_first(&config, counting.clone()).unwrap();
        let upstream = upstreams.first().clone();
        let asks = (0..50).map(|_| {
            let upstream = upstream.clone();
            tokio::spawn(async move { upstream.check().await })
        });
        for result in futures_util::future::join_all(asks).await {
            assert_eq!(result.unwrap(), Err(Unready("check 0".into())));
        }
        assert_eq!(counting.0.load(Ordering::SeqCst), 1, "single flight");
        tokio::time::advance(CHECK_MAX_AGE - Duration::from_millis(1)).await;
        assert_eq!(
            upstream.check().await,
            Err(Unready("check 0".into())),
            "reused"
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(
            upstream.check().await,
            Err(Unready("check 1".into())),
            "checked again"
        );
        assert_eq!(counting.0.load(Ordering::SeqCst), 2);
    }
}
