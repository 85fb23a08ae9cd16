//! Tokens given back to the store that granted them: a reservation given up (`GiveBack`, on
//! drop), a message upstream refused for now (`give_back`, in the background), one woken by
//! the shutdown (`give_back_now`, awaited). A give-back that fails is logged and the quota
//! lost: the limit errs on the side of sending less.

use std::sync::Arc;

use super::{store_charges, Shared, SharedTaken, Source};
use crate::throttle::charge::Charge;
use crate::throttle::store::Store;

/// Gives shared charges back when dropped armed (a reservation given up).
pub(super) struct GiveBack<'a> {
    pub(super) shared: &'a Shared,
    pub(super) taken: Option<SharedTaken>,
}

impl Drop for GiveBack<'_> {
    fn drop(&mut self) {
        if let Some(taken) = self.taken.take() {
            self.shared.give_back(taken);
        }
    }
}

/// One give-back call; a failure is logged (`ratelimit.give_back_failed`), the quota is lost.
async fn return_tokens(store: &dyn Store, charges: &[Charge]) {
    if let Err(e) = store.give_back(&store_charges(charges, &[])).await {
        tracing::warn!(target: "ratelimit", error = %e, "ratelimit.give_back_failed");
    }
}

impl Shared {
    /// Returns tokens to whoever granted them, in the background (callers are sync: a drop,
    /// `Permit::upstream_failed`).
    pub(crate) fn give_back(&self, taken: SharedTaken) {
        let Some(store) = self.granter(&taken) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move { return_tokens(&*store, &taken.charges).await });
    }

    /// Returns tokens to whoever granted them, now.
    pub(super) async fn give_back_now(&self, taken: SharedTaken) {
        if let Some(store) = self.granter(&taken) {
            return_tokens(&*store, &taken.charges).await;
        }
    }

    /// Who granted `taken`; `None` when nothing is to be given back.
    fn granter(&self, taken: &SharedTaken) -> Option<Arc<dyn Store>> {
        match taken.source {
            _ if taken.charges.is_empty() => None,
            Source::Allowed => None,
            Source::Fallback => Some(self.fallback.clone()),
            Source::Store => Some(self.store.clone()),
        }
    }
}
