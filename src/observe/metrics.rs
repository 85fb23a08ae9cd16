//! Prometheus metrics, names prefixed `mailsluice_`. The registry is an object handed to the
//! parts that record (no global recorder), so several relays in one process (the tests) each
//! count their own. Labels are per layer or per outcome, never per key: keys are unbounded.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Metric, Registry};

use super::activity::Activities;
use super::labels::{
    KindLabel, LayerLabel, OnErrorLabel, OutcomeLabel, ProxyLabel, ReasonLabel, PROXY_REFUSALS,
};
use super::ses_metrics::SesMetrics;
use super::spool_metrics::SpoolMetrics;
use super::spool_store_metrics::SpoolStoreMetrics;
use super::token_metrics::TokenMetrics;
use super::upstream_states::{UpstreamLabel, UpstreamStates};
use super::webhooks::WebhookFamilies;
use crate::config::OnError;
use crate::message::Outcome;
use crate::throttle::Throttle;

/// Registers a metric made with `Default` under `name`; the handle kept for recording.
fn add<M: Metric + Clone + Default>(r: &mut Registry, name: &str, help: &str) -> M {
    add_metric(r, name, help, M::default())
}

fn add_metric<M: Metric + Clone>(r: &mut Registry, name: &str, help: &str, metric: M) -> M {
    r.register(name, help, metric.clone());
    metric
}

pub struct Metrics {
    registry: Registry,
    proxy_refused: Family<ProxyLabel, Counter>,
    reputation_events: Family<KindLabel, Counter>,
    reputation_paused: Gauge,
    reputation_store_errors: Counter,
    suppressed: Counter,
    messages: Family<OutcomeLabel, Counter>,
    wait_seconds: Family<LayerLabel, Histogram>,
    throttled: Family<LayerLabel, Counter>,
    waiting: Family<LayerLabel, Gauge>,
    keys: Family<LayerLabel, Gauge>,
    evictions: Family<LayerLabel, Gauge>,
    upstream_seconds: Family<UpstreamLabel, Histogram>,
    connections: Gauge,
    activities: Activities,
    webhooks: WebhookFamilies,
    layer_limit: Family<LayerLabel, Gauge>,
    upstream_throttled: Family<ReasonLabel, Counter>,
    upstreams: UpstreamStates,
    listening: Gauge,
    spool: SpoolMetrics,
    spool_store: SpoolStoreMetrics,
    /// Each forwarder's count of "too many connections" last added (see `upstream_crowded`).
    crowded_seen: std::sync::Mutex<std::collections::HashMap<String, u64>>,
    store_errors: Family<OnErrorLabel, Counter>,
    /// The shared store whose count of errors was last added, and that count.
    store_errors_seen: std::sync::Mutex<(u64, u64)>,
    ses: SesMetrics,
    tokens: TokenMetrics,
}

fn seconds_histogram() -> Histogram {
    // 1 ms .. ~65 s: waits and upstream round trips both live in that range.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

impl Metrics {
    pub fn new() -> Arc<Metrics> {
        let mut registry = Registry::with_prefix("mailsluice");
        let r = &mut registry;
        let wait_seconds = Family::<LayerLabel, Histogram>::new_with_constructor(
            seconds_histogram as fn() -> Histogram,
        );
        let layer = "The limit a layer runs at now (an adaptive layer's learned one)";
        let evicted = "Buckets dropped before they were full (max_keys reached), since start";
        let by_reason = "Upstream throttle replies by reason (rate, quota, connections)";
        let reputation_events = Family::<KindLabel, Counter>::default();
        // Every kind from 0, so that a rate over them works before the first event.
        for kind in ["bounce", "complaint", "ignored", "malformed"] {
            reputation_events
                .get_or_create(&KindLabel { kind })
                .inc_by(0);
        }
        let store_errors = Family::<OnErrorLabel, Counter>::default();
        // Every mode from 0, as the events' kinds: a rate over them works before the first.
        for on_error in [OnError::Local, OnError::Reject, OnError::Allow] {
            let on_error = on_error.as_str();
            store_errors
                .get_or_create(&OnErrorLabel { on_error })
                .inc_by(0);
        }
        let proxy_refused = Family::<ProxyLabel, Counter>::default();
        for reason in PROXY_REFUSALS {
            proxy_refused
                .get_or_create(&ProxyLabel { reason })
                .inc_by(0);
        }
        Arc::new(Metrics {
            proxy_refused: add_metric(
                r,
                "proxy_refused",
                "Connections closed for their PROXY header, by reason",
                proxy_refused,
            ),
            messages: add(
                r,
                "messages",
                "Messages answered, by outcome (at their final dot, after their data, at DATA \
                 or at MAIL)",
            ),
            wait_seconds: add_metric(
                r,
                "throttle_wait_seconds",
                "Time messages waited for tokens, per layer",
                wait_seconds,
            ),
            throttled: add(r, "throttled", "Messages refused 451 by a layer"),
            waiting: add(
                r,
                "throttle_waiting",
                "Messages waiting in a layer's queues",
            ),
            keys: add(r, "throttle_keys", "Buckets held by a layer"),
            evictions: add(r, "throttle_evictions", evicted),
            upstream_seconds: add_metric(
                r,
                "upstream_seconds",
                "Time upstream took per message",
                Family::new_with_constructor(seconds_histogram as fn() -> Histogram),
            ),
            connections: add(r, "connections_open", "Client connections open"),
            activities: Activities::register(r),
            webhooks: WebhookFamilies::register(r),
            layer_limit: add(r, "layer_limit", layer),
            upstream_throttled: add(r, "upstream_throttled", by_reason),
            upstreams: UpstreamStates::register(r),
            listening: add(
                r,
                "listening",
                "1 while the SMTP listeners accept connections (0 before the start and during \
                 a shutdown's drain)",
            ),
            crowded_seen: Default::default(),
            store_errors: add_metric(
                r,
                "throttle_store_errors",
                "Messages the shared store (Redis) could not meter (it failed, or rests after \
                 failing), by what on_error did with them",
                store_errors,
            ),
            store_errors_seen: Default::default(),
            ses: SesMetrics::register(r),
            tokens: TokenMetrics::register(r),
            spool: SpoolMetrics::register(r),
            spool_store: SpoolStoreMetrics::register(r),
            reputation_events: add_metric(
                r,
                "reputation_events",
                "SES events read by the reputation guard, by kind (bounce, complaint, ignored, malformed)",
                reputation_events,
            ),
            reputation_paused: add(
                r,
                "reputation_paused",
                "Tenants past a bounce or complaint limit now",
            ),
            reputation_store_errors: add(
                r,
                "reputation_store_errors",
                "Calls of the reputation guard to Redis that failed (it then fails open)",
            ),
            suppressed: add(
                r,
                "suppressed",
                "Recipients refused at RCPT because they hard-bounced or complained",
            ),
            registry,
        })
    }

    pub fn message(&self, outcome: Outcome) {
        self.messages
            .get_or_create(&OutcomeLabel {
                outcome: outcome.as_str(),
            })
            .inc();
    }

    pub fn waited(&self, layer: &str, waited: Duration) {
        self.wait_seconds
            .get_or_create(&LayerLabel {
                layer: layer.to_string(),
            })
            .observe(waited.as_secs_f64());
    }

    pub fn throttled(&self, layer: &str) {
        self.throttled
            .get_or_create(&LayerLabel {
                layer: layer.to_string(),
            })
            .inc();
    }

    pub fn upstream_throttled(&self, upstream: &str, reason: &'static str) {
        let upstream = upstream.to_string();
        self.upstream_throttled
            .get_or_create(&ReasonLabel { reason, upstream })
            .inc();
    }

    /// A forwarder's own count of "too many connections" (it retries those itself): what
    /// is new since the last reading is added to `upstream_throttled{reason="connections"}`.
    pub fn upstream_crowded(&self, upstream: &str, total: u64) {
        let mut seen = self.crowded_seen.lock().unwrap_or_else(|e| e.into_inner());
        let before = seen.insert(upstream.to_string(), total).unwrap_or(0);
        // A reload may bring a new forwarder, counting from 0 again.
        let new = if total >= before {
            total - before
        } else {
            total
        };
        if new > 0 {
            let label = ReasonLabel {
                reason: "connections",
                upstream: upstream.to_string(),
            };
            self.upstream_throttled.get_or_create(&label).inc_by(new);
        }
    }

    /// The throttle's store errors since the last reading, added by `on_error`.
    fn store_errors_read(&self, throttle: &Throttle) {
        let Some(errors) = throttle.store_errors() else {
            return;
        };
        let mut seen = self
            .store_errors_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let before = if seen.0 == errors.store { seen.1 } else { 0 };
        *seen = (errors.store, errors.total);
        let label = OnErrorLabel {
            on_error: errors.on_error.as_str(),
        };
        let new = errors.total.saturating_sub(before);
        (self.store_errors.get_or_create(&label)).inc_by(new);
    }

    /// Each upstream's state: paused, reachable, failing (read when the metrics are served).
    pub fn upstreams(&self) -> &UpstreamStates {
        &self.upstreams
    }

    /// Whether the SMTP listeners accept connections now.
    pub fn listening(&self, on: bool) {
        self.listening.set(i64::from(on));
    }

    pub fn upstream(&self, upstream: &str, took: Duration) {
        let label = UpstreamLabel {
            upstream: upstream.to_string(),
        };
        self.upstream_seconds
            .get_or_create(&label)
            .observe(took.as_secs_f64());
    }

    /// One SES event read: `bounce`, `complaint`, `ignored` or `malformed`.
    pub fn reputation_event(&self, kind: &'static str) {
        self.reputation_events
            .get_or_create(&KindLabel { kind })
            .inc();
    }

    /// Tenants past a limit (read when the metrics are served).
    pub fn reputation_paused(&self, tenants: usize) {
        (self.reputation_paused).set(i64::try_from(tenants).unwrap_or(i64::MAX));
    }

    /// The counter of the reputation guard's failed calls to Redis, which the guard increments.
    pub fn reputation_store_errors(&self) -> Counter {
        self.reputation_store_errors.clone()
    }

    /// A recipient refused as suppressed.
    pub fn suppressed(&self) {
        self.suppressed.inc();
    }

    /// A connection closed for its PROXY header (a reason of [`PROXY_REFUSALS`]).
    pub fn proxy_refused(&self, reason: &'static str) {
        self.proxy_refused
            .get_or_create(&ProxyLabel { reason })
            .inc();
    }

    pub fn connection_opened(&self) {
        self.connections.inc();
    }

    pub fn connection_closed(&self) {
        self.connections.dec();
    }

    /// SES tenants' metrics.
    pub fn ses(&self) -> &SesMetrics {
        &self.ses
    }

    /// The XOAUTH2 upstreams' token requests.
    pub fn tokens(&self) -> &TokenMetrics {
        &self.tokens
    }

    /// The spool's metrics.
    pub fn spool(&self) -> &SpoolMetrics {
        &self.spool
    }

    /// The s3 store's calls (a handle the store keeps).
    pub fn spool_store(&self) -> SpoolStoreMetrics {
        self.spool_store.clone()
    }

    /// What the sessions are doing (each session holds its place, see `activity`).
    /// The webhooks' metrics.
    pub fn webhooks(&self) -> &WebhookFamilies {
        &self.webhooks
    }

    pub fn activities(&self) -> &Activities {
        &self.activities
    }

    /// The text exposition, with the throttle's gauges read now.
    pub fn encode(&self, throttle: &Throttle) -> String {
        for (i, spec) in throttle.specs().iter().enumerate() {
            let label = LayerLabel {
                layer: spec.name.clone(),
            };
            let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
            self.waiting
                .get_or_create(&label)
                .set(gauge(throttle.waiting(i) as u64));
            self.keys
                .get_or_create(&label)
                .set(gauge(throttle.keys(i) as u64));
            self.evictions
                .get_or_create(&label)
                .set(gauge(throttle.evictions(i)));
            let limit = throttle.effective_limit(i).unwrap_or(spec.limit);
            self.layer_limit.get_or_create(&label).set(gauge(limit));
        }
        self.store_errors_read(throttle);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}
