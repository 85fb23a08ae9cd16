//! The shared [`Store`]: buckets in Redis (or Valkey), so that N replicas share one limit.
//!
//! Why Lua scripts: a message charged to several layers must take from all of them in **one
//! atomic step**, or two replicas could each take half; a script runs alone in Redis, on
//! Redis's clock (`TIME`, in microseconds), so replicas whose clocks disagree still agree on
//! every bucket. One `EVALSHA` per message (the `redis` crate's [`Script`] loads the script and
//! retries once on `NOSCRIPT`, e.g. after a Redis restart): the script is the bucket math of
//! `bucket/` (see `redis/bucket.lua`), and it answers granted now; **reserved** (taken now as
//! of instant T within `max_wait`: the replica sleeps until T, and anyone who takes the bucket
//! after it, on any replica, is served after T — FIFO across replicas with no polling); or
//! refused with the time all tokens would be there, writing nothing.
//!
//! Keys: see [`keys`]. In **Redis Cluster** all buckets of one key share a slot (hash tag), so a
//! message whose layers use the same key is one script call in one slot. A message whose layers
//! use different keys (a tenant layer and an account-wide one) may span slots: it is then one
//! call per slot, in slot order, and atomic per slot; a refusal in a later slot gives back what
//! the earlier ones took, and the message goes at the latest reservation — the same
//! "take in order, hold, roll back" a multi-layer message has with local layers.
//!
//! Errors (Redis unreachable, a timeout past `timeout`) are [`StoreError::Redis`]; the
//! throttle's `on_error` decides. A timeout after Redis ran the script may have taken tokens
//! that no message uses: the limit still holds, some quota is lost.
//!
//! Files under `redis/`: `keys.rs` (key names, a layer's script parameters, cluster slots);
//! `api.rs` (the [`Store`] trait over the calls here); `learned.rs` (the limits in force of
//! adaptive layers, as answered); `bucket.lua` (the bucket math, put in front of each script);
//! `adaptive.lua` (adaptive layers' learned limit, likewise); `take.lua`, `give_back.lua`
//! and `peek.lua` (the three calls). Here: script calls and cluster slot groups. The
//! connection (one server, a cluster or Sentinel, following the primary) is `crate::redis`'s.

mod api;
pub(crate) mod keys;
mod learned;

use ::redis::{Script, ScriptInvocation};

use super::{Decision, StoreCharge, StoreError};
use crate::clock::Nanos;
use crate::redis::{Connection, RedisOptions};
use crate::throttle::peek::Peek;
use crate::throttle::spec::LayerSpec;
pub use keys::slot;
use keys::LayerKeys;
use learned::Heard;

/// The clock a test gives the store in place of Redis `TIME`.
#[cfg(any(test, feature = "test-support"))]
pub type TestClock = std::sync::Arc<dyn crate::clock::Clock>;

const BUCKET_LUA: &str = include_str!("bucket.lua");
const BLAME_LUA: &str = include_str!("blame.lua");
const ADAPTIVE_LUA: &str = include_str!("adaptive.lua");

/// Buckets in Redis behind the [`Store`] trait; see the module doc.
pub struct RedisStore {
    /// Connects on first use (Redis may be down when the relay starts), and follows the
    /// primary (see `crate::redis`).
    conn: Connection,
    cluster: bool,
    /// Per throttle layer index.
    layers: Vec<LayerKeys>,
    /// The limits in force of adaptive layers, as last answered.
    heard: Heard,
    take: Script,
    give_back: Script,
    peek: Script,
    /// Tests only: the scripts' `now` from this clock instead of Redis `TIME`.
    #[cfg(any(test, feature = "test-support"))]
    test_clock: Option<(TestClock, u64)>,
}

impl RedisStore {
    /// Checks the URLs; connects lazily, on the first call. `specs` are all the throttle's
    /// layers, indexed as in [`StoreCharge::layer`], with numbers that configuration loading
    /// accepts for a redis layer (exact in the scripts' Lua doubles).
    pub fn new(opts: &RedisOptions, specs: &[LayerSpec]) -> Result<RedisStore, StoreError> {
        let conn = Connection::new(opts)?;
        let layers = specs
            .iter()
            .map(|s| LayerKeys::new(&opts.prefix, s))
            .collect();
        let script =
            |body: &str| Script::new(&format!("{BUCKET_LUA}{BLAME_LUA}{ADAPTIVE_LUA}{body}"));
        Ok(RedisStore {
            heard: Heard::new(specs.len()),
            conn,
            cluster: opts.cluster,
            layers,
            take: script(include_str!("take.lua")),
            give_back: script(include_str!("give_back.lua")),
            peek: script(include_str!("peek.lua")),
            #[cfg(any(test, feature = "test-support"))]
            test_clock: None,
        })
    }

    /// **Tests only**: the scripts read `now` from `clock` (microseconds, from its unix origin)
    /// instead of Redis `TIME`, so bucket math can be checked with a fake clock. Production
    /// never calls this.
    #[cfg(any(test, feature = "test-support"))]
    pub fn with_test_clock(mut self, clock: TestClock) -> RedisStore {
        let origin = clock.unix_secs_at(0) * 1_000_000;
        self.test_clock = Some((clock, origin));
        self
    }

    /// The Redis key of `key`'s bucket in layer `layer`, for tests that read Redis directly.
    #[cfg(any(test, feature = "test-support"))]
    pub fn key_of(&self, layer: usize, key: &str) -> Option<String> {
        Some(self.layers.get(layer)?.key(key))
    }

    /// The scripts' `now`: empty for Redis `TIME`, a test clock's reading in tests.
    fn now_arg(&self) -> String {
        #[cfg(any(test, feature = "test-support"))]
        if let Some((clock, origin)) = &self.test_clock {
            return (origin + clock.now() / 1_000).to_string();
        }
        String::new()
    }

    fn layer(&self, layer: usize) -> Result<&LayerKeys, StoreError> {
        let k = self
            .layers
            .get(layer)
            .ok_or(StoreError::UnknownLayer(layer))?;
        debug_assert!(
            k.exact(),
            "layer {layer}: config validation lets no such layer through"
        );
        Ok(k)
    }

    /// Keys and per-charge arguments of `charges`, for the take and give-back scripts.
    fn charge_args<'s>(
        &self,
        inv: &mut ScriptInvocation<'s>,
        charges: &[StoreCharge<'_>],
    ) -> Result<(), StoreError> {
        for c in charges {
            let k = self.layer(c.layer)?;
            inv.key(k.key(c.key))
                .arg(k.mode_arg(c.cut, c.blame))
                .arg(c.cost)
                .arg(k.cap)
                .arg(k.p1)
                .arg(k.p2);
        }
        // The learned keys of adaptive layers follow the buckets, then their blame keys (see
        // `redis/adaptive.lua`).
        for c in charges {
            let k = self.layer(c.layer)?;
            if k.adaptive.is_some() {
                inv.key(k.learned_key(c.key));
            }
        }
        for c in charges {
            let k = self.layer(c.layer)?;
            if k.adaptive.is_some() {
                inv.key(k.blame_key(c.key));
            }
        }
        Ok(())
    }

    async fn invoke(&self, inv: &ScriptInvocation<'_>) -> Result<Vec<i64>, StoreError> {
        Ok(self.conn.invoke(inv).await?)
    }

    /// One take script call for `charges` (all in one slot in cluster mode).
    async fn take_one(
        &self,
        charges: &[StoreCharge<'_>],
        max_wait: Nanos,
    ) -> Result<Decision, StoreError> {
        let mut inv = self.take.prepare_invoke();
        inv.arg(max_wait / 1_000).arg(self.now_arg());
        self.charge_args(&mut inv, charges)?;
        let r = self.invoke(&inv).await?;
        let fixed = match r.first() {
            Some(0) => 1,
            Some(1 | 4) => 2,
            _ => 3,
        };
        (self.heard).note(&self.layers, charges, r.get(fixed..).unwrap_or(&[]));
        let at = |i: usize| r.get(i).copied().map(|v| u64::try_from(v).unwrap_or(0));
        let bad =
            || StoreError::Unavailable(format!("unexpected answer from the take script: {r:?}"));
        let us = |v: u64| v.saturating_mul(1_000);
        Ok(match (at(0), at(1), at(2)) {
            (Some(0), _, _) => Decision::Granted,
            (Some(1), Some(wait), _) => Decision::Reserved { wait: us(wait) },
            (Some(2), Some(charge), Some(retry)) => Decision::Refused {
                charge: charge as usize,
                retry_after: us(retry),
            },
            (Some(3), Some(charge), Some(capacity)) => Decision::OverCapacity {
                charge: charge as usize,
                capacity,
            },
            (Some(4), Some(charge), _) => Decision::Blamed {
                charge: charge as usize,
            },
            _ => return Err(bad()),
        })
    }

    async fn take_all(
        &self,
        charges: &[StoreCharge<'_>],
        max_wait: Nanos,
    ) -> Result<Decision, StoreError> {
        if !self.cluster {
            return self.take_one(charges, max_wait).await;
        }
        let groups = by_slot(self, charges)?;
        if groups.len() == 1 {
            return self.take_one(charges, max_wait).await;
        }
        // Several slots: one call each, holding what earlier slots took (see the module doc).
        let mut held: Vec<StoreCharge<'_>> = Vec::new();
        let mut wait = 0;
        for group in &groups {
            let part: Vec<StoreCharge<'_>> = group.iter().map(|&i| charges[i]).collect();
            let d = self.take_one(&part, max_wait).await;
            let refusal = match d {
                Ok(Decision::Granted) => None,
                Ok(Decision::Reserved { wait: w }) => {
                    wait = wait.max(w);
                    None
                }
                Ok(Decision::Refused {
                    charge,
                    retry_after,
                }) => Some(Ok(Decision::Refused {
                    charge: group[charge],
                    retry_after,
                })),
                Ok(Decision::OverCapacity { charge, capacity }) => {
                    Some(Ok(Decision::OverCapacity {
                        charge: group[charge],
                        capacity,
                    }))
                }
                Ok(Decision::Blamed { charge }) => Some(Ok(Decision::Blamed {
                    charge: group[charge],
                })),
                other => Some(other),
            };
            if let Some(answer) = refusal {
                if !held.is_empty() {
                    let _ = self.give_back_all(&held).await;
                }
                return answer;
            }
            held.extend(part);
        }
        Ok(match wait {
            0 => Decision::Granted,
            wait => Decision::Reserved { wait },
        })
    }

    async fn give_back_all(&self, charges: &[StoreCharge<'_>]) -> Result<(), StoreError> {
        let groups: Vec<Vec<usize>> = if self.cluster {
            by_slot(self, charges)?
        } else {
            vec![(0..charges.len()).collect()]
        };
        for group in groups {
            // Giving back never cuts a limit.
            let part: Vec<StoreCharge<'_>> = (group.iter())
                .map(|&i| StoreCharge {
                    cut: false,
                    ..charges[i]
                })
                .collect();
            let mut inv = self.give_back.prepare_invoke();
            inv.arg(self.now_arg());
            self.charge_args(&mut inv, &part)?;
            self.invoke(&inv).await?;
        }
        Ok(())
    }

    async fn peek_one(&self, layer: usize, key: &str) -> Result<Peek, StoreError> {
        let k = self.layer(layer)?;
        let mut inv = self.peek.key(k.key(key));
        if k.adaptive.is_some() {
            inv.key(k.learned_key(key));
        }
        inv.arg(self.now_arg())
            .arg(k.mode_arg(false, ""))
            .arg(0)
            .arg(k.cap)
            .arg(k.p1)
            .arg(k.p2);
        let r = self.invoke(&inv).await?;
        let v = |i: usize| r.get(i).map_or(0, |&v| u64::try_from(v).unwrap_or(0));
        Ok(Peek {
            limit: v(0),
            remaining: v(1),
            reset: v(2).div_ceil(1_000_000),
            waiting: 0,
            effective_limit: k.adaptive.map(|_| v(3)),
        })
    }
}

/// Charge indices grouped by cluster slot, groups in slot order, charges in their order.
fn by_slot(store: &RedisStore, charges: &[StoreCharge<'_>]) -> Result<Vec<Vec<usize>>, StoreError> {
    let mut slots = std::collections::BTreeMap::<u16, Vec<usize>>::new();
    for (i, c) in charges.iter().enumerate() {
        let key = store.layer(c.layer)?.key(c.key);
        slots.entry(slot(&key)).or_default().push(i);
    }
    Ok(slots.into_values().collect())
}
