//! What happened lately, for the status page: the last refusals (a ring of fixed size), how
//! many messages each layer refused in the last minute (sixty one-second counters per layer),
//! the messages delivered and held, and each upstream's times and last error.
//! Memory stays bounded whatever the traffic, and nothing here holds content or addresses:
//! only the time, the outcome, the layer, the key and the reply code.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::message::Outcome;
use crate::throttle::LimitReason;

/// Refusals kept for the page.
pub const KEPT: usize = 50;
/// Layers whose minute is counted at once (names come from the config; a reload may add some).
const MAX_LAYERS: usize = 1000;

/// One message that did not go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub at: SystemTime,
    /// Why, as counted in `mailsluice_messages_total{outcome}`.
    pub outcome: Outcome,
    /// The layer that refused it; empty when no layer did (a pause, upstream, its content).
    pub layer: String,
    pub key: String,
    /// The reply code the client got.
    pub code: u16,
    /// Which bound of the layer refused it, when a layer did.
    pub reason: Option<LimitReason>,
}

/// Counts per second over the last sixty seconds.
#[derive(Debug, Clone)]
struct Minute {
    /// `(second since start, sum)` per slot `second % 60`.
    slots: [(u64, u64); 60],
}

impl Default for Minute {
    fn default() -> Minute {
        Minute {
            slots: [(0, 0); 60],
        }
    }
}

impl Minute {
    fn add(&mut self, second: u64, n: u64) {
        let slot = &mut self.slots[(second % 60) as usize];
        if slot.0 != second {
            *slot = (second, 0);
        }
        slot.1 += n;
    }

    fn total(&self, second: u64) -> u64 {
        (self.slots.iter())
            .filter(|(s, _)| *s + 60 > second && *s <= second)
            .map(|(_, n)| n)
            .sum()
    }
}

/// What the messages sent to one upstream saw lately.
#[derive(Debug, Default)]
struct UpstreamTimes {
    /// Messages sent, and their time upstream in microseconds, per second.
    sent: Minute,
    micros: Minute,
    last: Duration,
    last_error: Option<(SystemTime, String)>,
}

/// One upstream as the status page shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamView {
    /// Messages sent to it in the last minute, and their mean time there.
    pub sent_last_minute: u64,
    pub mean_last_minute: Option<Duration>,
    /// The time the last message took there.
    pub last: Duration,
    /// Its last error (no answer, credentials, a pushback; not a refusal of one message), and
    /// when.
    pub last_error: Option<(SystemTime, String)>,
}

#[derive(Debug, Default)]
struct Inner {
    ring: VecDeque<Refusal>,
    per_layer: HashMap<String, Minute>,
    delivered: u64,
    delivered_minute: Minute,
    held: u64,
    held_minute: Minute,
    /// By upstream name (names come from the config; bounded like the layers).
    upstreams: HashMap<String, UpstreamTimes>,
}

/// The recent refusals of one relay; carried across reloads.
#[derive(Debug)]
pub struct Recent {
    started: Instant,
    inner: Mutex<Inner>,
}

impl Recent {
    pub fn new() -> Arc<Recent> {
        Arc::new(Recent {
            started: Instant::now(),
            inner: Mutex::default(),
        })
    }

    /// How long the relay has run (this record was made at its start).
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Messages delivered since start, and in the last minute.
    pub fn delivered(&self) -> (u64, u64) {
        let second = self.second();
        let inner = self.lock();
        (inner.delivered, inner.delivered_minute.total(second))
    }

    /// Messages held for later delivery since start, and in the last minute.
    pub fn held(&self) -> (u64, u64) {
        let second = self.second();
        let inner = self.lock();
        (inner.held, inner.held_minute.total(second))
    }

    /// A message came back from `upstream` after `took`; `error` when it failed for a reason
    /// other than upstream refusing that one message.
    pub fn upstream(&self, upstream: &str, took: Duration, error: Option<String>) {
        let second = self.second();
        let mut inner = self.lock();
        if !inner.upstreams.contains_key(upstream) && inner.upstreams.len() >= MAX_LAYERS {
            return;
        }
        let times = inner.upstreams.entry(upstream.to_string()).or_default();
        times.sent.add(second, 1);
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        times.micros.add(second, micros);
        times.last = took;
        if let Some(error) = error {
            times.last_error = Some((SystemTime::now(), error));
        }
    }

    /// What `upstream`'s messages saw lately; `None` before its first.
    pub fn upstream_view(&self, upstream: &str) -> Option<UpstreamView> {
        let second = self.second();
        let inner = self.lock();
        let times = inner.upstreams.get(upstream)?;
        let sent = times.sent.total(second);
        Some(UpstreamView {
            sent_last_minute: sent,
            mean_last_minute: (sent > 0)
                .then(|| Duration::from_micros(times.micros.total(second) / sent)),
            last: times.last,
            last_error: times.last_error.clone(),
        })
    }

    fn second(&self) -> u64 {
        Instant::now().duration_since(self.started).as_secs()
    }

    /// Notes how a message ended: `layer` names the layer that refused it (empty when none
    /// did), `code` is the reply the client got (none when it left).
    pub fn message(
        &self,
        outcome: Outcome,
        layer: &str,
        key: &str,
        code: Option<u16>,
        reason: Option<LimitReason>,
    ) {
        if outcome.delivered() {
            let second = self.second();
            let mut inner = self.lock();
            inner.delivered += 1;
            inner.delivered_minute.add(second, 1);
            return;
        }
        // A held message is not refused: its client got a `250`.
        if outcome == Outcome::Held {
            let second = self.second();
            let mut inner = self.lock();
            inner.held += 1;
            inner.held_minute.add(second, 1);
            return;
        }
        let Some(code) = code else {
            return;
        };
        let refusal = Refusal {
            at: SystemTime::now(),
            outcome,
            layer: layer.to_string(),
            key: key.to_string(),
            code,
            reason,
        };
        let second = self.second();
        let mut inner = self.lock();
        if outcome == Outcome::Throttled {
            if !inner.per_layer.contains_key(layer) && inner.per_layer.len() >= MAX_LAYERS {
                inner.per_layer.retain(|_, m| m.total(second) > 0);
            }
            if inner.per_layer.len() < MAX_LAYERS || inner.per_layer.contains_key(layer) {
                inner
                    .per_layer
                    .entry(layer.to_string())
                    .or_default()
                    .add(second, 1);
            }
        }
        if inner.ring.len() == KEPT {
            inner.ring.pop_front();
        }
        inner.ring.push_back(refusal);
    }

    /// The refusals kept, newest first.
    pub fn refusals(&self) -> Vec<Refusal> {
        self.lock().ring.iter().rev().cloned().collect()
    }

    /// Messages `layer` refused (451 4.7.1) in the last minute.
    pub fn refused_last_minute(&self, layer: &str) -> u64 {
        let second = self.second();
        self.lock()
            .per_layer
            .get(layer)
            .map_or(0, |m| m.total(second))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_ring_keeps_the_last_refusals_and_the_minute_forgets() {
        let recent = Recent::new();
        let max_wait = Some(LimitReason::MaxWait);
        for i in 0..(KEPT + 10) {
            let key = format!("k{i}");
            recent.message(Outcome::Throttled, "tenant", &key, Some(451), max_wait);
        }
        recent.message(Outcome::Delivered, "", "ok", Some(250), None);
        recent.message(Outcome::Abandoned, "", "gone", None, None);
        recent.message(Outcome::UpstreamPermFail, "", "x", Some(554), None);
        let kept = recent.refusals();
        assert_eq!(kept.len(), KEPT);
        assert_eq!(
            (kept[0].outcome, kept[0].code),
            (Outcome::UpstreamPermFail, 554)
        );
        assert_eq!(kept[1].key, format!("k{}", KEPT + 9));
        assert_eq!(kept[1].reason, max_wait);
        assert_eq!(recent.refused_last_minute("tenant"), (KEPT + 10) as u64);
        tokio::time::advance(Duration::from_secs(30)).await;
        recent.message(Outcome::Throttled, "tenant", "late", Some(451), max_wait);
        tokio::time::advance(Duration::from_secs(31)).await;
        assert_eq!(
            recent.refused_last_minute("tenant"),
            1,
            "only the late one is younger"
        );
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(recent.refused_last_minute("tenant"), 0);
    }
}

#[cfg(test)]
mod more_tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn delivered_messages_and_upstream_times_are_counted_over_the_minute() {
        let recent = Recent::new();
        for _ in 0..3 {
            recent.message(Outcome::Delivered, "", "k", Some(250), None);
        }
        recent.message(Outcome::Partial, "", "k", Some(250), None);
        assert_eq!(recent.delivered(), (4, 4));
        recent.message(Outcome::Held, "tenant", "k", Some(250), None);
        assert_eq!(recent.held(), (1, 1));
        assert!(recent.refusals().is_empty(), "a held message is no refusal");
        assert!(recent.refusals().is_empty(), "a delivery is no refusal");
        assert_eq!(recent.upstream_view("ses"), None);
        recent.upstream("ses", Duration::from_millis(100), None);
        recent.upstream(
            "ses",
            Duration::from_millis(300),
            Some("SES: timeout".into()),
        );
        let view = recent.upstream_view("ses").unwrap();
        assert_eq!(view.sent_last_minute, 2);
        assert_eq!(view.mean_last_minute, Some(Duration::from_millis(200)));
        assert_eq!(view.last, Duration::from_millis(300));
        assert_eq!(view.last_error.unwrap().1, "SES: timeout");
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(recent.delivered(), (4, 0));
        assert_eq!(recent.held(), (1, 0));
        let view = recent.upstream_view("ses").unwrap();
        assert_eq!((view.sent_last_minute, view.mean_last_minute), (0, None));
        assert!(view.last_error.is_some(), "the last error stays");
        assert_eq!(recent.uptime(), Duration::from_secs(61));
    }
}
