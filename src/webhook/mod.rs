//! Tenant event webhooks: what became of a tenant's messages, posted to its URL as signed
//! JSON batches (docs/webhooks.md).
//!
//! - `event`: one event and a batch, as the receiver reads them.
//! - `queue`: a webhook's queue, bounded in events and bytes (oldest dropped, counted);
//!   pushing never waits.
//! - `post`: one POST, each address checked against the webhook's rules, over rustls.
//! - `sign`: the `Mailsluice-Signature` header.
//! - `deliver`: a webhook's task: batches, retries with a capped backoff over a window.
//!
//! Events come from where the relay learns them, once: a message's verdict where the session
//! logs it (`accepted`, `refused`), the reputation guard (`bounced`, `complained`,
//! `suppressed` from SES's events; `paused`, `resumed` where the guard logs the change). With
//! `[redis]` each of those happens on one replica (the one that had the message, took the
//! SES event, or flipped the tenant's standing), which sends it: no event goes twice.

use std::sync::Arc;

use rustls_pki_types::CertificateDer;

use crate::clock::Clock;
use crate::config::{EventType, WebhookConfig};
use crate::observe::metrics::Metrics;
use crate::observe::webhooks::WebhookCounters;

pub mod deliver;
pub mod event;
pub mod post;
pub mod queue;
pub mod sign;

pub use event::Event;

use deliver::LastError;
use post::Poster;
use queue::Queue;

/// One webhook: its config, its queue, how it posts, what it counted.
pub struct Hook {
    pub config: WebhookConfig,
    queue: Queue,
    poster: Poster,
    counters: WebhookCounters,
    last_error: LastError,
}

impl Hook {
    fn wants(&self, tenant: &str, kind: EventType) -> bool {
        let t = self.config.tenant.get_ref();
        (t == "*" || t == tenant) && self.config.events.get_ref().contains(&kind)
    }
}

/// One webhook's row on the status page.
#[derive(Debug, Clone)]
pub struct Row {
    pub name: String,
    pub tenant: String,
    /// Where it posts: the URL's host and port (its path may hold a token).
    pub host: String,
    pub queued: usize,
    pub sent: u64,
    pub failed: u64,
    pub dropped: u64,
    pub last_error: Option<String>,
}

/// Every webhook of the config, and the clock events are timed and signed by.
pub struct Webhooks {
    hooks: Vec<Arc<Hook>>,
    clock: Arc<dyn Clock>,
}

impl Webhooks {
    /// The webhooks of `configs`; their tasks start with [`Webhooks::start`].
    pub fn new(configs: &[WebhookConfig], clock: Arc<dyn Clock>, metrics: &Metrics) -> Webhooks {
        let roots: Vec<CertificateDer<'static>> = match configs.is_empty() {
            true => Vec::new(),
            false => rustls_native_certs::load_native_certs().certs,
        };
        let hooks = (configs.iter())
            .filter_map(|config| {
                let counters = metrics.webhooks().counters(&config.name);
                let Some(poster) = Poster::new(config, &roots) else {
                    tracing::error!(webhook = config.name.as_str(), "webhook off: no TLS setup");
                    return None;
                };
                let queue = Queue::new(
                    config.max_queue.get(),
                    config.max_queue_bytes.get(),
                    counters.dropped.clone(),
                    counters.queued.clone(),
                );
                Some(Arc::new(Hook {
                    config: config.clone(),
                    queue,
                    poster,
                    counters,
                    last_error: LastError::default(),
                }))
            })
            .collect();
        Webhooks { hooks, clock }
    }

    /// Starts each webhook's delivery task; they run until aborted.
    pub fn start(&self) -> Vec<tokio::task::JoinHandle<()>> {
        (self.hooks.iter())
            .map(|hook| tokio::spawn(deliver::run(hook.clone(), self.clock.clone())))
            .collect()
    }

    /// Whether any webhook wants `kind` of `tenant`: nothing is built for an event none wants.
    pub fn wants(&self, tenant: &str, kind: EventType) -> bool {
        self.hooks.iter().any(|h| h.wants(tenant, kind))
    }

    /// A new event of `kind` for `tenant`, timed now.
    pub fn event(&self, kind: EventType, tenant: &str) -> Event {
        Event::new(kind, tenant, self.clock.unix_now_secs())
    }

    /// Hands `event` to every webhook that wants it, without waiting.
    pub fn emit(&self, event: Event) {
        for hook in self
            .hooks
            .iter()
            .filter(|h| h.wants(&event.tenant, event.kind))
        {
            hook.queue.push(event.clone());
        }
    }

    /// **Tests only**: every webhook's host name asked of `nameservers` (the tests' own DNS
    /// server) instead of the system's resolver.
    #[cfg(feature = "test-support")]
    pub fn resolve_through(&self, nameservers: &[std::net::SocketAddr]) {
        for hook in &self.hooks {
            hook.poster.resolve_through(nameservers);
        }
    }

    /// The status page's rows.
    pub fn rows(&self) -> Vec<Row> {
        (self.hooks.iter())
            .map(|h| {
                let url = h.config.target().ok();
                Row {
                    name: h.config.name.clone(),
                    tenant: h.config.tenant.get_ref().clone(),
                    host: url.map_or_else(String::new, |u| format!("{}:{}", u.host, u.port)),
                    queued: h.queue.len(),
                    sent: h.counters.sent.get(),
                    failed: h.counters.failed.get(),
                    dropped: h.counters.dropped.get(),
                    last_error: h.last_error.get(),
                }
            })
            .collect()
    }
}
