//! An adaptive layer's effective limit in process: what upstream's throttle replies taught it
//! (the pure math is `adaptive`), applied to the layer's buckets.
//!
//! Why the buckets are converted rather than read with a second limit: the bucket math stays
//! one pure function of (parameters, state, now); when the effective limit changes, every
//! bucket of the layer is re-expressed at the new limit holding the tokens it held, and the
//! queues' projections are refolded.

use super::{ceil_ms, Layer, LayerState};
use crate::throttle::clock::Nanos;

impl Layer {
    /// Brings the table's bucket to the effective limit at `now` (no-op for a fixed limit).
    pub(super) fn refresh(&self, st: &mut LayerState, now: Nanos) {
        let Some(aimd) = self.spec.aimd() else { return };
        let limit = aimd.effective(st.learned, now);
        if limit == st.limit {
            return;
        }
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
        st.limit = limit;
    }

    /// Tokens granted: counted by an adaptive layer, to measure what upstream accepts.
    pub(super) fn count_granted(&self, st: &mut LayerState, now: Nanos, cost: u64) {
        if let Some(aimd) = self.spec.aimd() {
            st.learned = aimd.granted(st.learned, now, cost);
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
        let interval = crate::throttle::clock::nanos(self.spec.interval);
        self.lock().blame.replied(tenant, now, interval)
    }

    /// Upstream refused a message this layer charged (`cost`) with a throttle reply: an
    /// adaptive layer cuts its limit (logged `ratelimit.adapted`). Returns the effective limit
    /// after it.
    pub(crate) fn throttled(&self, cost: u64) -> Option<u64> {
        let aimd = self.spec.aimd()?;
        let mut guard = self.lock();
        let st = &mut *guard;
        let now = self.clock.now();
        let (learned, cut) = aimd.throttled(st.learned, now, cost);
        st.learned = learned;
        self.refresh(st, now);
        if let Some((old, new)) = cut {
            self.adapted(old, new);
        }
        Some(st.limit)
    }

    /// The `ratelimit.adapted` event.
    pub(crate) fn adapted(&self, old: u64, new: u64) {
        tracing::info!(
            target: "ratelimit",
            layer = %self.spec.name,
            old_limit = old,
            new_limit = new,
            interval_ms = ceil_ms(crate::throttle::clock::nanos(self.spec.interval)),
            "ratelimit.adapted"
        );
    }

    /// The limit in force now: an adaptive layer's learned one, else the configured one.
    pub(crate) fn effective_limit(&self) -> u64 {
        let mut guard = self.lock();
        let now = self.clock.now();
        self.refresh(&mut guard, now);
        guard.limit
    }
}
