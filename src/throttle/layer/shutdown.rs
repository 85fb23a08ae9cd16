//! A layer at shutdown: the drain, during the grace, and the disposal at its end.

use super::Layer;
use crate::clock::Nanos;

impl Layer {
    /// Starts draining: from now until `end` a waiter keeps its place and goes when its
    /// tokens come; those the bucket cannot serve by `end` (the tail of each queue, by the
    /// same projection as a newcomer's estimate) are told `Shutdown` at once, since waiting
    /// could not help them, and so is a newcomer whose wait would pass `end`. A shared layer
    /// only records `end`: its tokens are in the store, which decides (`shared_layers`).
    pub(crate) fn drain(&self, end: Nanos) {
        let mut guard = self.lock();
        let st = &mut *guard;
        let end = st.drain_end.map_or(end, |e| e.min(end));
        st.drain_end = Some(end);
        if self.shared {
            return;
        }
        let now = self.clock.now();
        let mut cut = 0;
        for id in st.table.ids() {
            if st.table.extra(id).len() == 0 {
                continue;
            }
            self.refresh(st, id, now);
            let b = *st.table.bucket_of(id);
            let state = st.table.state(id);
            cut += st.table.modify(id, now, |_, q| {
                let gone = q.cut_after(&b, (state, now), end);
                for w in &gone {
                    w.notify.notify_one();
                }
                gone.len()
            });
        }
        st.waiting -= cut;
    }

    /// Releases every waiter with [`ThrottleError::Shutdown`]; later arrivals get it too,
    /// unless the bucket grants them at once (a local layer).
    pub(crate) fn dispose(&self) {
        let mut guard = self.lock();
        let st = &mut *guard;
        st.disposed = true;
        let now = self.clock.now();
        for id in st.table.ids() {
            if st.table.extra(id).len() > 0 {
                st.table.modify(id, now, |_, q| {
                    while let Some(w) = q.pop_head() {
                        w.notify.notify_one();
                    }
                });
            }
        }
        st.waiting = 0;
    }
}
