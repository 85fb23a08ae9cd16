//! What happened lately, for the status page: the last refusals (a ring of fixed size) and how
//! many messages each layer refused in the last minute (sixty one-second counters per layer).
//! Memory stays bounded whatever the traffic, and nothing here holds content or addresses:
//! only the time, the layer, the key and the reply code.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::time::Instant;

use crate::message::Outcome;

/// Refusals kept for the page.
pub const KEPT: usize = 50;
/// Layers whose minute is counted at once (names come from the config; a reload may add some).
const MAX_LAYERS: usize = 1000;

/// One message that did not go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub at: SystemTime,
    /// The layer that refused it, or `upstream` when upstream did.
    pub layer: String,
    pub key: String,
    /// The reply code the client got.
    pub code: u16,
}

/// Counts per second over the last sixty seconds.
#[derive(Debug, Clone)]
struct Minute {
    /// `(second since start, count)` per slot `second % 60`.
    slots: [(u64, u32); 60],
}

impl Default for Minute {
    fn default() -> Minute {
        Minute {
            slots: [(0, 0); 60],
        }
    }
}

impl Minute {
    fn add(&mut self, second: u64) {
        let slot = &mut self.slots[(second % 60) as usize];
        if slot.0 != second {
            *slot = (second, 0);
        }
        slot.1 += 1;
    }

    fn total(&self, second: u64) -> u32 {
        (self.slots.iter())
            .filter(|(s, _)| *s + 60 > second && *s <= second)
            .map(|(_, n)| n)
            .sum()
    }
}

#[derive(Debug, Default)]
struct Inner {
    ring: VecDeque<Refusal>,
    per_layer: HashMap<String, Minute>,
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

    fn second(&self) -> u64 {
        Instant::now().duration_since(self.started).as_secs()
    }

    /// Notes how a message ended; `code` is upstream's reply code when it answered.
    pub fn message(&self, outcome: Outcome, layer: &str, key: &str, code: Option<u16>) {
        let (code, layer) = match (outcome, code) {
            (Outcome::Delivered | Outcome::Abandoned | Outcome::Held, _) => return,
            (Outcome::SpoolFull, _) => (452, layer),
            (Outcome::Throttled | Outcome::StoreUnavailable, _) => (451, layer),
            (Outcome::Rejected, _) => (554, layer),
            (Outcome::Shutdown, _) => (421, layer),
            (_, Some(code)) => (code, "upstream"),
            (_, None) => (451, "upstream"),
        };
        let refusal = Refusal {
            at: SystemTime::now(),
            layer: layer.to_string(),
            key: key.to_string(),
            code,
        };
        let second = self.second();
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if outcome == Outcome::Throttled {
            if !inner.per_layer.contains_key(layer) && inner.per_layer.len() >= MAX_LAYERS {
                inner.per_layer.retain(|_, m| m.total(second) > 0);
            }
            if inner.per_layer.len() < MAX_LAYERS || inner.per_layer.contains_key(layer) {
                inner
                    .per_layer
                    .entry(layer.to_string())
                    .or_default()
                    .add(second);
            }
        }
        if inner.ring.len() == KEPT {
            inner.ring.pop_front();
        }
        inner.ring.push_back(refusal);
    }

    /// The refusals kept, newest first.
    pub fn refusals(&self) -> Vec<Refusal> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.ring.iter().rev().cloned().collect()
    }

    /// Messages `layer` refused (451 4.7.1) in the last minute.
    pub fn refused_last_minute(&self, layer: &str) -> u32 {
        let second = self.second();
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.per_layer.get(layer).map_or(0, |m| m.total(second))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn the_ring_keeps_the_last_refusals_and_the_minute_forgets() {
        let recent = Recent::new();
        for i in 0..(KEPT + 10) {
            recent.message(Outcome::Throttled, "tenant", &format!("k{i}"), None);
        }
        recent.message(Outcome::Delivered, "tenant", "ok", Some(250));
        recent.message(Outcome::UpstreamPermFail, "tenant", "x", Some(554));
        let kept = recent.refusals();
        assert_eq!(kept.len(), KEPT);
        assert_eq!((kept[0].layer.as_str(), kept[0].code), ("upstream", 554));
        assert_eq!(kept[1].key, format!("k{}", KEPT + 9));
        assert_eq!(recent.refused_last_minute("tenant"), (KEPT + 10) as u32);
        tokio::time::advance(Duration::from_secs(30)).await;
        recent.message(Outcome::Throttled, "tenant", "late", None);
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
