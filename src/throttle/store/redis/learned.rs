//! What this replica last heard from Redis of each adaptive layer's limit in force (the take
//! script answers it in the same round trip), for metrics and peek, and the `ratelimit.adapted`
//! log line when it changes.

use std::sync::atomic::{AtomicU64, Ordering};

use super::keys::LayerKeys;
use crate::throttle::store::StoreCharge;

/// Per layer index: the last limit in force heard (0: none yet).
pub(crate) struct Heard(Vec<AtomicU64>);

impl Heard {
    pub(crate) fn new(layers: usize) -> Heard {
        Heard((0..layers).map(|_| AtomicU64::new(0)).collect())
    }

    /// The limits that end a take answer, one per adaptive charge in order.
    pub(crate) fn note(&self, layers: &[LayerKeys], charges: &[StoreCharge<'_>], limits: &[i64]) {
        let adaptive = charges
            .iter()
            .filter(|c| layers[c.layer].adaptive.is_some());
        for (c, &limit) in adaptive.zip(limits) {
            let new = u64::try_from(limit).unwrap_or(0);
            let old = self.0[c.layer].swap(new, Ordering::Relaxed);
            if old != 0 && old != new {
                tracing::info!(
                    target: "ratelimit",
                    layer = c.layer,
                    old_limit = old,
                    new_limit = new,
                    "ratelimit.adapted"
                );
            }
        }
    }

    pub(crate) fn get(&self, layer: usize) -> Option<u64> {
        let v = self.0.get(layer)?.load(Ordering::Relaxed);
        (v != 0).then_some(v)
    }
}
