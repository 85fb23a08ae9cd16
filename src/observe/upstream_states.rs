//! What the relay shows of each upstream's state, read when the metrics are served: paused
//! after a quota reply, reachable at the last readiness check, failing (its breaker open) and
//! since when. Gauges by upstream name, apart from the counts of what went to them.

use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Which upstream (names come from the config, so the label set is bounded).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamLabel {
    pub upstream: String,
}

pub struct UpstreamStates {
    paused: Family<UpstreamLabel, Gauge>,
    up: Family<UpstreamLabel, Gauge>,
    breaker_open: Family<UpstreamLabel, Gauge>,
    failing_since: Family<UpstreamLabel, Gauge>,
}

impl UpstreamStates {
    pub fn register(r: &mut Registry) -> UpstreamStates {
        let states = UpstreamStates {
            paused: Family::default(),
            up: Family::default(),
            breaker_open: Family::default(),
            failing_since: Family::default(),
        };
        r.register(
            "upstream_paused",
            "1 while upstream is paused after a quota reply",
            states.paused.clone(),
        );
        r.register(
            "upstream_up",
            "1 when the upstream's last readiness check (by /readyz or the status page) found it \
             reachable, 0 when not",
            states.up.clone(),
        );
        r.register(
            "upstream_breaker_open",
            "1 while the upstream's breaker is open (it failed: hold-mode messages for it are \
             held at once)",
            states.breaker_open.clone(),
        );
        r.register(
            "upstream_failing_since_seconds",
            "When the upstream's breaker opened (Unix seconds); 0 while it answers",
            states.failing_since.clone(),
        );
        states
    }

    /// Whether an upstream is paused.
    pub fn paused(&self, upstream: &str, paused: bool) {
        (self.paused.get_or_create(&label(upstream))).set(i64::from(paused));
    }

    /// Whether an upstream's last readiness check found it reachable.
    pub fn up(&self, upstream: &str, up: bool) {
        self.up.get_or_create(&label(upstream)).set(i64::from(up));
    }

    /// Whether an upstream is failing (its breaker open), and since when.
    pub fn breaker(&self, upstream: &str, failing_since: Option<SystemTime>) {
        let since = failing_since
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs() as i64);
        let label = label(upstream);
        (self.breaker_open.get_or_create(&label)).set(i64::from(failing_since.is_some()));
        self.failing_since.get_or_create(&label).set(since);
    }
}

fn label(upstream: &str) -> UpstreamLabel {
    UpstreamLabel {
        upstream: upstream.to_string(),
    }
}
