//! One layer as the engine sees it (`[[throttle]]` after `setup`): its numbers and rules, and
//! the bucket parameters they make. Apart because the key table, the stores and the layers
//! all read it.

use std::collections::BTreeMap;
use std::time::Duration;

use super::adaptive::{Adapt, Aimd};
use super::bucket::Bucket;
use crate::clock::nanos;
use crate::config::{Mode, Refill};

/// One layer of buckets, as configured (`[[throttle]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerSpec {
    pub name: String,
    /// Tokens gained every `interval` (drip), or held per window (fixed window).
    pub limit: u64,
    pub interval: Duration,
    /// Tokens held (drip, none); ignored by a fixed window, which holds `limit`.
    pub burst: u64,
    pub mode: Mode,
    pub max_wait: Duration,
    pub max_queue: usize,
    pub max_keys: usize,
    pub refill: Refill,
    /// A bucket unused this long is forgotten once it is full (it then reads the same as an
    /// absent one). For `Refill::None` it is also when the lifetime cap expires.
    pub idle_ttl: Duration,
    /// Keep the tokens of a message upstream refused.
    pub charge_failures: bool,
    /// `Some(min_limit)`: the layer learns its effective limit from upstream's throttle
    /// replies (see `adaptive`), never below this floor. `None`: the limit is fixed.
    pub adaptive: Option<u64>,
    /// How an adaptive layer learns from a throttle reply (`adapt`).
    pub adapt: Adapt,
    /// `fair_by` is set: the waiters of a bucket are served in turn by fair key (see
    /// `layer/waiters.rs`) instead of in one FIFO.
    pub fair: bool,
    /// A fair key's share of the turns (default 1).
    pub weights: BTreeMap<String, u64>,
    /// The layer's key is the recipient domain: the only layers an `mx://` upstream's
    /// throttle reply teaches (the reply is about that domain's servers).
    pub rcpt_domain: bool,
}

impl LayerSpec {
    /// The AIMD numbers of an adaptive layer.
    pub fn aimd(&self) -> Option<Aimd> {
        self.adaptive.map(|min| Aimd {
            limit: self.limit,
            min,
            interval: nanos(self.interval),
            rule: self.adapt,
        })
    }

    /// A drip layer with the defaults of the configuration: burst = limit, wait mode, 25 s
    /// max_wait, 10,000 waiters and keys, 7 days idle_ttl, failures given back.
    pub fn new(name: &str, limit: u64, interval: Duration) -> LayerSpec {
        LayerSpec {
            name: name.to_string(),
            limit,
            interval,
            burst: limit,
            mode: Mode::Wait,
            max_wait: Duration::from_millis(25_000),
            max_queue: 10_000,
            max_keys: 10_000,
            refill: Refill::Drip,
            idle_ttl: Duration::from_secs(7 * 86_400),
            charge_failures: false,
            adaptive: None,
            adapt: Adapt::default(),
            fair: false,
            weights: BTreeMap::new(),
            rcpt_domain: false,
        }
    }

    /// The weight of fair key `key` (1 unless `weights` names it).
    pub fn weight(&self, key: &str) -> u64 {
        self.weights.get(key).copied().unwrap_or(1).max(1)
    }

    /// The fair placement of a charge: its fair key, cost and weight, when the layer is fair.
    pub(crate) fn fair_of<'a>(&self, fair: &'a str, cost: u64) -> Option<(&'a str, u64, u64)> {
        self.fair.then(|| (fair, cost, self.weight(fair)))
    }

    /// The bucket parameters of this layer.
    pub fn bucket(&self) -> Bucket {
        self.bucket_at(self.limit)
    }

    /// The bucket parameters with `limit` in force (an adaptive layer's effective limit).
    /// Below the configured limit the burst follows it down, in proportion (see
    /// [`Bucket::learned`]: a message costing more than that burst takes all of it).
    pub fn bucket_at(&self, limit: u64) -> Bucket {
        match self.refill {
            Refill::Drip if limit < self.limit => {
                Bucket::drip(self.burst, limit, nanos(self.interval))
                    .learned(learned_burst(self.burst, limit, self.limit))
            }
            Refill::Drip => Bucket::drip(self.burst, limit, nanos(self.interval)),
            Refill::FixedWindow => Bucket::fixed_window(self.limit, nanos(self.interval)),
            Refill::None => Bucket::lifetime(self.burst, nanos(self.idle_ttl)),
        }
    }
}

/// The burst of an adaptive layer at `limit` in force: `burst * limit / configured`, at
/// least 1 (the Redis script computes the same).
pub fn learned_burst(burst: u64, limit: u64, configured: u64) -> u64 {
    let scaled = u128::from(burst) * u128::from(limit) / u128::from(configured.max(1));
    u64::try_from(scaled)
        .unwrap_or(u64::MAX)
        .clamp(1, burst.max(1))
}
