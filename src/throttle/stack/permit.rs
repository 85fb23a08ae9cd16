//! [`Permit`]: the tokens one message holds, and what becomes of them once upstream answered
//! (kept, given back, or kept and asked for again after a throttle reply: [`Again`]).

use std::sync::Arc;
use std::time::Duration;

use super::again::Again;
use super::Inner;
use crate::clock::Nanos;
use crate::throttle::charge::Charge;
use crate::throttle::shared_layers::SharedTaken;

/// Tokens taken on every charged layer for one message.
pub struct Permit {
    pub(super) inner: Arc<Inner>,
    pub(super) taken: Vec<Charge>,
    /// The charges of shared layers, and who granted them.
    pub(super) shared: Option<SharedTaken>,
    pub(super) waited: Duration,
    /// The instant of the message's final dot, and its place in arrival order.
    pub(super) arrival: Nanos,
    pub(super) order: u64,
    /// Throttle replies so far that were its tenant's alone (see `blame`).
    pub(super) strikes: u32,
    /// Nobody waits on the message (see [`super::Throttle::acquire_patient`]).
    pub(super) patient: bool,
}

/// Which adaptive layers a throttle reply teaches: every one the message charged, or only
/// those keyed by the recipient domain (an `mx://` upstream's reply is about one domain's
/// servers, never about the account).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Teaches {
    Every,
    RcptDomain,
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("taken", &self.taken)
            .field("waited", &self.waited)
            .finish()
    }
}

impl Permit {
    /// How long the message waited for its tokens.
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// The charges taken from local layers.
    pub fn charges(&self) -> &[Charge] {
        &self.taken
    }

    /// The charges taken from shared layers.
    pub fn shared_charges(&self) -> &[Charge] {
        self.shared.as_ref().map_or(&[], |s| &s.charges)
    }

    /// Upstream did not accept: give tokens back on every layer whose spec has
    /// `charge_failures == false`.
    pub fn upstream_failed(mut self) {
        self.not_sent_through(|_| true);
    }

    /// The message will not reach what the layers `which` picks stand for (their upstream
    /// could not be reached, and a fallback carries it): those tokens go back as for a
    /// failure, the others stay with the message.
    pub fn not_sent_through(&mut self, which: impl Fn(usize) -> bool) {
        let (back, kept) = std::mem::take(&mut self.taken)
            .into_iter()
            .partition::<Vec<_>, _>(|c| which(c.layer));
        self.taken = kept;
        for c in &back {
            let layer = &self.inner.layers[c.layer];
            if !layer.spec().charge_failures {
                layer.give_back(&c.key, c.cost);
            }
        }
        if let (Some(shared), Some(store)) = (self.shared.take(), &self.inner.shared) {
            let (back, kept) = shared.split(|c| which(c.layer));
            self.shared = Some(kept);
            let layers = &self.inner.layers;
            store.give_back(back.split(|c| !layers[c.layer].spec().charge_failures).0);
        }
    }

    /// Message delivered: keep the tokens. (Dropping the permit does the same.)
    pub fn delivered(self) {}

    /// Whether a layer charged learns from upstream's throttle replies.
    pub fn adaptive(&self) -> bool {
        let layers = &self.inner.layers;
        (self.taken.iter().chain(self.shared_charges()))
            .any(|c| layers[c.layer].spec().adaptive.is_some())
    }

    /// Upstream answered with a throttle reply: it counts more than we do, so the tokens are
    /// kept (not handed to the queue behind), each adaptive layer charged that the reply
    /// `teaches` cuts its limit when the reply was about the rate (`cut`; not for "too many
    /// connections"), and the message can ask again ([`super::Throttle::acquire_again`]).
    /// A layer that finds the reply its tenant's alone (see `blame`) does not cut: the
    /// message waits the layer's interval before it asks again, twice as long at each such
    /// reply, and its later replies are taken as its tenant's too.
    pub fn throttled(self, cut: bool, teaches: Teaches) -> Again {
        let layers = &self.inner.layers;
        let taught = |c: &&Charge| {
            let spec = layers[c.layer].spec();
            cut && spec.adaptive.is_some() && (teaches == Teaches::Every || spec.rcpt_domain)
        };
        // Once its tenant's alone, a message's later replies are too: it does not teach.
        let sticky = self.strikes > 0;
        // A bucket that is the tenant's own (its key is the tenant) learns its replies.
        let blames = |c: &Charge| c.key != c.blame && (layers[c.layer].blames(&c.blame) || sticky);
        let mut blamed: Option<&Charge> = None;
        for c in self.taken.iter().filter(taught) {
            match blames(c) {
                true => _ = blamed.get_or_insert(c),
                false => _ = layers[c.layer].throttled(&c.key, c.cost),
            }
        }
        // A shared layer's store tells whether the reply is the tenant's alone, from every
        // replica's grants and replies, in the message's next take (`StoreCharge::cut`).
        let mut shared_cut = Vec::new();
        for c in self.shared_charges().iter().filter(taught) {
            match sticky && c.key != c.blame {
                true => _ = blamed.get_or_insert(c),
                false => shared_cut.push(c.layer),
            }
        }
        // A reply that teaches none of the layers charged (an `mx://` reply with no
        // `rcpt-domain` layer to learn it) slows the message as a tenant's own does.
        let charged = || self.taken.iter().chain(self.shared_charges());
        if cut && blamed.is_none() && !charged().any(|c| taught(&c)) {
            blamed = charged().find(|c| layers[c.layer].spec().adaptive.is_some());
        }
        let strikes = self.strikes + u32::from(blamed.is_some());
        let slow = blamed.map(|c| {
            (
                c.layer,
                c.key.clone(),
                super::again::slow_until(&self.inner, c.layer, strikes),
            )
        });
        let mut charges = self.taken.clone();
        // A shared layer learns in its store, in the message's next take (`StoreCharge::cut`).
        if let Some(shared) = &self.shared {
            charges.extend(shared.charges.iter().cloned());
        }
        charges.sort_by_key(|c| c.layer);
        Again {
            charges,
            arrival: self.arrival,
            order: self.order,
            cut: shared_cut,
            strikes,
            slow,
            patient: self.patient,
        }
    }
}
