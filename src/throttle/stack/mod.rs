//! [`Throttle`] and [`Permit`]: stacked layers, a message charged to several buckets at once, all
//! or nothing.
//!
//! Why stacked: a provider's quota is per account (14/s), fairness is per tenant (10/s), and a
//! plan may cap a day (fixed window). The message goes when every layer grants it; when one
//! refuses, what the others granted is given back, so a refused message costs nothing.
//!
//! **How a multi-layer message waits** (the choice, and why):
//! 1. Up front, before taking anything: every layer checks the cost (over the burst is a
//!    permanent refusal) and then its own refusal rules (reject mode without tokens, a full
//!    queue, an estimated wait past the deadline). So a refusal at arrival takes nothing.
//! 2. Reject-mode layers take first (they never wait), then wait-mode (and hold-mode, which
//!    wait alike) layers in index order,
//!    each in its FIFO queue, holding what was granted. Layers listed from specific to general
//!    (tenant, then account) mean a tenant's burst is metered by its own layer before it
//!    reaches the shared queue, so it does not flood the account's queue ahead of others.
//! 3. One deadline for the whole message: arrival + the smallest `max_wait` of its wait-mode
//!    layers. A layer reached later refuses if its own estimate would pass that deadline.
//! 4. Any refusal, a shutdown, or the future being dropped gives back every token held.
//!
//! Why not one atomic take across layers here: it would need the message at the head of every
//! queue at once, and a tenant's burst would then sit in the account queue. The store boundary
//! ([`super::store::Store`]) still takes atomically, for a shared store's layers.
//!
//! **Dropping a [`Permit`]** without calling a method keeps the tokens, like `delivered`: a
//! message whose fate is unknown may have been sent, and never going over the limit is the
//! promise; giving back is an explicit act (`upstream_failed`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::charge::Charge;
use super::error::{LimitReason, ThrottleError};
use super::layer::{KeyWaiting, Layer, Turn};
use super::peek::Peek;
use super::shared_layers::{Blamed, Shared, SharedLayers, StoreErrors, StoreUnreachable};
use super::spec::LayerSpec;
use crate::clock::{nanos, Clock, Nanos};
pub use again::Again;
pub use permit::{Permit, Teaches};

mod again;
mod permit;
use crate::config::Mode;

struct Inner {
    specs: Vec<LayerSpec>,
    /// Shared with the throttle of a reloaded config when the layer did not change.
    layers: Vec<Arc<Layer>>,
    clock: Arc<dyn Clock>,
    /// The store of the shared (`store = "redis"`) layers, if any.
    shared: Option<Shared>,
    /// The next message's place in arrival order (see `Turn`).
    next_order: AtomicU64,
}

/// The throttle: every layer's buckets and queues. `Send + Sync`; share it as `Arc<Throttle>`.
pub struct Throttle {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Throttle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Throttle")
            .field("specs", &self.inner.specs)
            .finish()
    }
}

/// Gives back what a message holds unless it is turned into a [`Permit`]: a message refused
/// by a later layer, or dropped, keeps nothing of the earlier ones.
struct Taken<'a> {
    inner: &'a Inner,
    charges: Vec<Charge>,
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        for c in self.charges.drain(..) {
            self.inner.layers[c.layer].give_back(&c.key, c.cost);
        }
    }
}

impl Throttle {
    /// Every layer in process.
    pub fn new(specs: Vec<LayerSpec>, clock: Arc<dyn Clock>) -> Throttle {
        Throttle::build(specs, clock, None)
    }

    /// The layers `shared.layers` keep their buckets in `shared.store` (see `shared_layers`).
    pub fn with_shared(
        specs: Vec<LayerSpec>,
        clock: Arc<dyn Clock>,
        shared: SharedLayers,
    ) -> Throttle {
        Throttle::build(specs, clock, Some(shared))
    }

    fn build(
        specs: Vec<LayerSpec>,
        clock: Arc<dyn Clock>,
        shared: Option<SharedLayers>,
    ) -> Throttle {
        let is_shared = |i: usize| shared.as_ref().is_some_and(|s| s.layers.contains(&i));
        let layers = (specs.iter().enumerate())
            .map(|(i, s)| Arc::new(Layer::new(s.clone(), clock.clone(), is_shared(i))))
            .collect();
        let shared = shared.map(|s| Shared::new(s.store, s.on_error, &specs, clock.clone()));
        Throttle {
            inner: Arc::new(Inner {
                specs,
                layers,
                clock,
                shared,
                next_order: AtomicU64::new(0),
            }),
        }
    }

    pub fn specs(&self) -> &[LayerSpec] {
        &self.inner.specs
    }

    /// This (freshly built) throttle for a reloaded config, keeping the buckets and waiters
    /// of `old`'s in-process layers whose spec did not change: a reload must not hand every
    /// tenant a full bucket again. Changed layers start fresh; redis layers keep their state
    /// in Redis anyway. Both throttles must run on the same clock.
    pub fn keeping_unchanged(self, old: &Throttle) -> Throttle {
        let Ok(mut inner) = Arc::try_unwrap(self.inner) else {
            unreachable!("a throttle being set up is not shared yet");
        };
        for (i, spec) in inner.specs.iter().enumerate() {
            let kept = (old.inner.specs.iter().zip(&old.inner.layers))
                .find(|(s, l)| *s == spec && !l.is_shared() && !inner.layers[i].is_shared());
            if let Some((_, layer)) = kept {
                inner.layers[i] = layer.clone();
            }
        }
        Throttle {
            inner: Arc::new(inner),
        }
    }

    pub fn layer_index(&self, name: &str) -> Option<usize> {
        self.inner.specs.iter().position(|s| s.name == name)
    }

    /// FIFO wait or refusal; cancel-safe (dropping the future takes nothing); all layers or
    /// none (see the module doc). Panics if a charge names a layer index out of range.
    pub async fn acquire(&self, charges: Vec<Charge>) -> Result<Permit, ThrottleError> {
        self.acquire_as(charges, false).await
    }

    /// [`Throttle::acquire`] for a message nobody waits on (released from the spool): its
    /// hold-mode layers let it wait past their `max_wait` (no client would give up), each
    /// in its FIFO queue with the live clients; their other bounds (`max_queue`) still hold.
    pub async fn acquire_patient(&self, charges: Vec<Charge>) -> Result<Permit, ThrottleError> {
        self.acquire_as(charges, true).await
    }

    async fn acquire_as(
        &self,
        charges: Vec<Charge>,
        patient: bool,
    ) -> Result<Permit, ThrottleError> {
        let arrival = self.inner.clock.now();
        let order = self.inner.next_order.fetch_add(1, Ordering::Relaxed);
        let turn = Turn {
            order,
            again: false,
        };
        match self.take(charges, arrival, turn, &[], patient).await? {
            Ok(permit) => Ok(permit),
            // Only a take that carries a throttle reply (`cut`) is ever blamed: a store that
            // says so otherwise is refused as the blame would be.
            Err(Blamed { layer, key }) => {
                let l = &self.inner.layers[layer];
                Err(l.limited(&key, 0, 0, LimitReason::TenantThrottled))
            }
        }
    }

    async fn take(
        &self,
        charges: Vec<Charge>,
        arrival: Nanos,
        turn: Turn,
        cut: &[usize],
        patient: bool,
    ) -> Result<Result<Permit, Blamed>, ThrottleError> {
        let inner = &self.inner;
        let deadline = self.deadline(&charges, arrival, patient);
        let arrival_now = inner.clock.now();
        if charges.len() > 1 && !turn.again {
            self.precheck(&charges, deadline, arrival_now)?;
        }
        let layers = &inner.layers;
        let (mut shared, mut charges): (Vec<_>, Vec<_>) = charges
            .into_iter()
            .partition(|c| layers[c.layer].is_shared());
        charges.sort_by_key(|c| (layers[c.layer].spec().mode != Mode::Reject, c.layer));
        let mut taken = Taken {
            inner,
            charges: Vec::with_capacity(charges.len()),
        };
        let mut now = arrival_now;
        for c in charges {
            let layer = &layers[c.layer];
            if let Some(at) = layer
                .acquire((&c.key, &c.fair), c.cost, deadline, now, turn)
                .await?
            {
                now = at;
            }
            layer.granted_to(&c.blame);
            taken.charges.push(c);
        }
        // Shared layers last, in one store call (see `shared_layers`); a refusal there gives
        // back what the local layers hold (`taken`).
        let mut shared_taken = None;
        if let (false, Some(store)) = (shared.is_empty(), &inner.shared) {
            shared.sort_by_key(|c| c.layer);
            // The store notes the grants to each tenant of its adaptive layers (see `blame`).
            let acquired = store.acquire(layers, shared, deadline, now, turn, cut);
            let (taken, at) = match acquired.await? {
                Ok(taken) => taken,
                Err(blamed) => return Ok(Err(blamed)),
            };
            now = now.max(at);
            shared_taken = Some(taken);
        }
        let waited = Duration::from_nanos(now - arrival_now);
        let taken = std::mem::take(&mut taken.charges);
        Ok(Ok(Permit {
            inner: inner.clone(),
            taken,
            shared: shared_taken,
            waited,
            arrival,
            order: turn.order,
            strikes: 0,
            patient,
        }))
    }

    /// Arrival + the smallest `max_wait` among the charged wait-mode and hold-mode layers
    /// (a `patient` message's hold-mode layers set none).
    fn deadline(&self, charges: &[Charge], arrival: Nanos, patient: bool) -> Nanos {
        let layers = &self.inner.layers;
        let n = layers.len();
        let waits = charges.iter().map(|c| {
            assert!(c.layer < n, "charge names layer {} of {n}", c.layer);
            let spec = layers[c.layer].spec();
            match spec.mode {
                Mode::Wait => nanos(spec.max_wait),
                Mode::Hold if !patient => nanos(spec.max_wait),
                Mode::Hold | Mode::Reject => u64::MAX,
            }
        });
        arrival.saturating_add(waits.min().unwrap_or(0))
    }

    /// Refuses up front, taking nothing: permanent refusals first, then any layer's refusal.
    fn precheck(
        &self,
        charges: &[Charge],
        deadline: Nanos,
        now: Nanos,
    ) -> Result<(), ThrottleError> {
        let layers = &self.inner.layers;
        for c in charges {
            layers[c.layer].check_cost(c.cost)?;
        }
        for c in charges {
            layers[c.layer].precheck((&c.key, &c.fair), c.cost, deadline, now)?;
        }
        Ok(())
    }

    /// `None` for an unknown layer; an unknown key reads as a full bucket. For a shared
    /// layer this is only this replica's in-process view (its `on_error = "local"` buckets):
    /// [`Throttle::peek_async`] reads the shared state.
    pub fn peek(&self, layer: &str, key: &str) -> Option<Peek> {
        let i = self.layer_index(layer)?;
        let local = self.inner.layers[i].peek(key);
        match &self.inner.shared {
            Some(s) if self.inner.layers[i].is_shared() => Some(Peek {
                waiting: local.waiting,
                effective_limit: local.effective_limit.and(self.effective_limit(i)),
                ..s.peek_fallback(i, key)
            }),
            _ => Some(local),
        }
    }

    /// Whether the shared store answers now (a read-only peek), for `/readyz`; `None` when no
    /// layer uses one.
    pub async fn check_store(&self) -> Option<Result<(), StoreUnreachable>> {
        let shared = self.inner.shared.as_ref()?;
        let layer = (0..self.inner.layers.len()).find(|&i| self.inner.layers[i].is_shared())?;
        Some(shared.reachable(layer).await)
    }

    /// Like [`Throttle::peek`], reading a shared layer's bucket from its store (`waiting`
    /// counts this replica's queue). `Err(StoreUnavailable)` when the store cannot answer and
    /// the layer's `on_error` is `reject`; otherwise the in-process view stands in.
    pub async fn peek_async(&self, layer: &str, key: &str) -> Option<Result<Peek, ThrottleError>> {
        let i = self.layer_index(layer)?;
        let local = self.inner.layers[i].peek(key);
        let Some(s) = (self.inner.shared.as_ref()).filter(|_| self.inner.layers[i].is_shared())
        else {
            return Some(Ok(local));
        };
        let waiting = local.waiting;
        Some(s.peek(i, key).await.map(|p| Peek { waiting, ..p }))
    }

    /// Messages waiting in a layer, across its keys (0 for an unknown layer).
    pub fn waiting(&self, layer: usize) -> usize {
        self.inner.layers.get(layer).map_or(0, |l| l.waiting())
    }

    /// The `n` keys of a layer with the most messages waiting, most first (status page).
    pub fn most_waiting(&self, layer: usize, n: usize) -> Vec<KeyWaiting> {
        (self.inner.layers.get(layer)).map_or_else(Vec::new, |l| l.most_waiting(n))
    }

    /// The limit a layer runs at now (an adaptive layer's learned one), for metrics and peek.
    pub fn effective_limit(&self, layer: usize) -> Option<u64> {
        let l = self.inner.layers.get(layer)?;
        match &self.inner.shared {
            Some(s) if l.is_shared() => Some(s.learned_limit(layer).unwrap_or(l.spec().limit)),
            _ => Some(l.effective_limit()),
        }
    }

    /// Sets a fixed-limit, in-process layer's limit at run time (see `Layer::set_limit`);
    /// whether it changed. A shared layer's buckets are in its store and keep their limit.
    pub fn set_limit(&self, layer: usize, limit: u64) -> bool {
        let Some(l) = self.inner.layers.get(layer) else {
            return false;
        };
        !l.is_shared() && l.set_limit(limit)
    }

    /// The messages the shared store could not decide since this throttle was built (it
    /// failed, or rested after failing), and the `on_error` that decided them; `None`
    /// without shared layers.
    pub fn store_errors(&self) -> Option<StoreErrors> {
        self.inner.shared.as_ref().map(Shared::undecided)
    }

    /// Buckets a layer holds (≤ `max_keys`), for metrics.
    pub fn keys(&self, layer: usize) -> usize {
        self.inner.layers.get(layer).map_or(0, |l| l.keys())
    }

    /// Buckets a layer dropped before they were full (`ratelimit.evicted`), for metrics.
    pub fn evictions(&self, layer: usize) -> u64 {
        self.inner.layers.get(layer).map_or(0, |l| l.evicted())
    }

    /// Whether a layer holds a bucket for `key` (an absent one reads as full).
    pub fn holds(&self, layer: usize, key: &str) -> bool {
        self.inner.layers.get(layer).is_some_and(|l| l.holds(key))
    }

    /// Starts the shutdown's drain: for `grace` from now, a waiter keeps its place and goes
    /// when its tokens come, and only a message whose tokens cannot come before the grace
    /// ends is refused with [`ThrottleError::Shutdown`], at once (the bucket math says so
    /// now, and a client told now can try another replica now). [`Throttle::dispose`] at the
    /// grace's end answers whoever is still waiting.
    pub fn drain(&self, grace: Duration) {
        let end = self.inner.clock.now().saturating_add(nanos(grace));
        for layer in &self.inner.layers {
            layer.drain(end);
        }
        if let Some(shared) = &self.inner.shared {
            shared.drain(end);
        }
    }

    /// Releases every waiter with [`ThrottleError::Shutdown`], a message asleep on a shared
    /// store's reservation included (its tokens go back to the store); later acquires get it
    /// too, unless every layer they charge is local and grants them at once (a message whose
    /// DATA ends during the shutdown grace then goes, as it would with no layer).
    pub fn dispose(&self) {
        for layer in &self.inner.layers {
            layer.dispose();
        }
        if let Some(shared) = &self.inner.shared {
            shared.dispose();
        }
    }
}

#[cfg(test)]
mod tests;
