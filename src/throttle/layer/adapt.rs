//! An adaptive layer's effective limit in process, per key: what upstream's throttle replies
//! taught each bucket (the pure math is `adaptive`), applied to it.
//!
//! Why the bucket is converted rather than read with a second limit: the bucket math stays
//! one pure function of (parameters, state, now); when a key's effective limit changes, its
//! bucket is re-expressed at the new limit holding the tokens it held, and its queue's
//! projection is refolded. What a key learned lives in its slot of the table, so it is
//! forgotten with the bucket (idle and full for `idle_ttl`, or evicted past `max_keys`).

use super::{ceil_ms, Layer, LayerState};
use crate::clock::Nanos;

impl Layer {
    /// The limit `slot`'s key runs at, at `now`.
    pub(super) fn limit_of(&self, st: &LayerState, slot: u32, now: Nanos) -> u64 {
        match self.spec.aimd() {
            Some(aimd) => aimd.effective(st.table.learned(slot), now),
            None => st.fixed_limit,
        }
    }

    /// Brings `slot`'s bucket to its effective limit at `now` (no-op for a fixed limit).
    pub(super) fn refresh(&self, st: &mut LayerState, slot: u32, now: Nanos) {
        if self.spec.aimd().is_none() {
            return;
        }
        let limit = self.limit_of(st, slot, now);
        let to = self.spec.bucket_at(limit);
        if to == *st.table.bucket_of(slot) {
            return;
        }
        st.table
            .set_bucket_of(slot, to, now, |from, s| to.converted(from, s, now));
        if st.table.extra(slot).len() > 0 {
            st.table.modify(slot, now, |_, q| {
                q.invalidate();
                q.wake_head();
            });
        }
    }

    /// Sets a fixed-limit layer's limit at run time (a provider account's own rate, read from
    /// the provider): every bucket re-expressed at it, holding the tokens it held, as an
    /// adaptive key's is when its limit changes; logged as `ratelimit.adapted` when it
    /// changes. An adaptive layer's limits are its learning's: left alone. Returns whether
    /// the limit changed.
    pub(crate) fn set_limit(&self, limit: u64) -> bool {
        let mut guard = self.lock();
        let st = &mut *guard;
        let old = st.fixed_limit;
        if self.spec.aimd().is_some() || limit == old || limit == 0 {
            return false;
        }
        let now = self.clock.now();
        let to = self.spec.bucket_at(limit);
        st.table
            .set_bucket(to, now, |from, s| to.converted(from, s, now));
        for id in st.table.ids() {
            if st.table.extra(id).len() > 0 {
                st.table.modify(id, now, |_, q| {
                    q.invalidate();
                    q.wake_head();
                });
            }
        }
        st.fixed_limit = limit;
        drop(guard);
        self.adapted("", old, limit);
        true
    }

    /// Tokens granted: counted by an adaptive layer, to measure what upstream accepts.
    pub(super) fn count_granted(&self, st: &mut LayerState, slot: u32, now: Nanos, cost: u64) {
        if let Some(aimd) = self.spec.aimd() {
            let learned = aimd.granted(st.table.learned(slot), now, cost);
            st.table.set_learned(slot, learned);
        }
    }

    /// Tokens granted to a message of `tenant` (an adaptive layer notes it, see `blame`).
    pub(crate) fn granted_to(&self, tenant: &str) {
        if self.spec.adaptive.is_none() || tenant.is_empty() {
            return;
        }
        let now = self.clock.now();
        self.lock().blame.granted(tenant, now);
    }

    /// A throttle reply to a message of `tenant` that this adaptive layer charged: whether it
    /// is that tenant's alone (see `blame`), so the layer does not learn from it.
    pub(crate) fn blames(&self, tenant: &str) -> bool {
        if self.spec.adaptive.is_none() {
            return false;
        }
        let now = self.clock.now();
        let interval = crate::clock::nanos(self.spec.interval);
        self.lock().blame.replied(tenant, now, interval)
    }

    /// Upstream refused a message this layer charged (`cost` of `key`'s bucket) with a
    /// throttle reply: an adaptive layer cuts that key's limit (logged `ratelimit.adapted`).
    /// Returns the key's effective limit after it (`None`: not adaptive, or the key is gone).
    pub(crate) fn throttled(&self, key: &str, cost: u64) -> Option<u64> {
        let aimd = self.spec.aimd()?;
        let mut guard = self.lock();
        let st = &mut *guard;
        let slot = st.table.find(key)?;
        let now = self.clock.now();
        let (learned, cut) = aimd.throttled(st.table.learned(slot), now, cost);
        st.table.set_learned(slot, learned);
        self.refresh(st, slot, now);
        if let Some((old, new)) = cut {
            self.adapted(key, old, new);
        }
        Some(self.limit_of(st, slot, now))
    }

    /// The `ratelimit.adapted` event.
    pub(crate) fn adapted(&self, key: &str, old: u64, new: u64) {
        tracing::info!(
            target: "ratelimit",
            layer = %self.spec.name,
            key,
            old_limit = old,
            new_limit = new,
            interval_ms = ceil_ms(crate::clock::nanos(self.spec.interval)),
            "ratelimit.adapted"
        );
    }

    /// The limit in force now: an adaptive layer's lowest learned one over its keys (one key
    /// for `key = "none"`), else the configured one.
    pub(crate) fn effective_limit(&self) -> u64 {
        let guard = self.lock();
        let now = self.clock.now();
        (guard.table.ids().into_iter())
            .map(|id| self.limit_of(&guard, id, now))
            .min()
            .unwrap_or(guard.fixed_limit)
    }
}
