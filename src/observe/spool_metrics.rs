//! The spool's metrics: what it holds now (read at each scrape), the messages held, the
//! release attempts by result and the messages given up by reason. Registered whether or not
//! the relay has a spool, so dashboards and alerts read zeros rather than nothing.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// A release attempt's result: `delivered`, `retry` or `given_up`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

/// Why a held message was given up: `refused`, `rejected`, `expired` or `damaged`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GivenUpLabel {
    pub reason: &'static str,
}

/// What was held: a client's `message`, or a `report` the relay wrote.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HeldLabel {
    pub kind: &'static str,
}

pub struct SpoolMetrics {
    held: Family<HeldLabel, Counter>,
    released: Family<ResultLabel, Counter>,
    given_up: Family<GivenUpLabel, Counter>,
    reports_not_held: Counter,
    messages: Gauge,
    failed: Gauge,
    bytes: Gauge,
    oldest_seconds: Gauge,
}

impl SpoolMetrics {
    pub fn register(r: &mut Registry) -> SpoolMetrics {
        let m = SpoolMetrics {
            held: Family::default(),
            released: Family::default(),
            given_up: Family::default(),
            reports_not_held: Counter::default(),
            messages: Gauge::default(),
            failed: Gauge::default(),
            bytes: Gauge::default(),
            oldest_seconds: Gauge::default(),
        };
        // Every label from 0, so that rates and alerts work before the first event.
        for kind in ["message", "report"] {
            m.held.get_or_create(&HeldLabel { kind }).inc_by(0);
        }
        for result in ["delivered", "retry", "given_up"] {
            m.released.get_or_create(&ResultLabel { result }).inc_by(0);
        }
        for reason in ["refused", "rejected", "expired", "damaged"] {
            m.given_up.get_or_create(&GivenUpLabel { reason }).inc_by(0);
        }
        let held = "Messages written to the spool (hold mode), and reports the relay wrote";
        r.register("spool_held", held, m.held.clone());
        let released = "Release attempts of held messages, by result";
        r.register("spool_released", released, m.released.clone());
        let given_up = "Held messages given up, by reason (refused for good, expired, damaged)";
        r.register("spool_given_up", given_up, m.given_up.clone());
        let not_held = "Reports the spool could not hold (its bounds, its disk): each given-up \
                        message is kept in failed/ instead";
        let reports_not_held = m.reports_not_held.clone();
        r.register("spool_reports_not_held", not_held, reports_not_held);
        let messages = "Messages held in the spool now (failed ones apart)";
        r.register("spool_messages", messages, m.messages.clone());
        let failed = "Messages given up without a report (no report_from, or a report not \
                      held), kept in failed/";
        r.register("spool_failed", failed, m.failed.clone());
        r.register(
            "spool_bytes",
            "Bytes of the messages in the spool",
            m.bytes.clone(),
        );
        let oldest = "Age of the oldest message held, in seconds (0 when none)";
        r.register("spool_oldest_seconds", oldest, m.oldest_seconds.clone());
        m
    }

    pub fn held(&self, report: bool) {
        let kind = if report { "report" } else { "message" };
        self.held.get_or_create(&HeldLabel { kind }).inc();
    }

    pub fn released(&self, result: &'static str) {
        self.released.get_or_create(&ResultLabel { result }).inc();
    }

    pub fn given_up(&self, reason: &'static str) {
        self.given_up.get_or_create(&GivenUpLabel { reason }).inc();
    }

    pub fn report_not_held(&self) {
        self.reports_not_held.inc();
    }

    /// What the spool holds now.
    pub fn read(&self, messages: usize, failed: usize, bytes: u64, oldest_ms: u64) {
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.messages.set(gauge(messages as u64));
        self.failed.set(gauge(failed as u64));
        self.bytes.set(gauge(bytes));
        self.oldest_seconds.set(gauge(oldest_ms / 1000));
    }
}
