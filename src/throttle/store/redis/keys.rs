//! Redis key names and the script parameters of a layer.
//!
//! A bucket's key is `<prefix><layer>:<params>:{<key>}`, e.g. `mailsluice:tenant:6f1c09ab:{acme}`:
//! - the hash tag `{<key>}` puts every bucket of one key (its tenant layer, its daily cap...)
//!   in one Redis Cluster slot, so one script call takes from all of them atomically;
//! - `<params>` is a short hash of the layer's parameters (name, refill, limit, interval,
//!   burst, idle_ttl), so a changed config starts on fresh keys and never misreads old state
//!   (the old keys expire by themselves);
//! - the layer's name keeps keys readable in `redis-cli --scan`.
//!
//! The scripts compute in Lua doubles, exact for integers below 2^53: configuration loading
//! (`config::redis`) refuses a redis layer whose numbers would not be exact, so here that is
//! only asserted, in debug builds, when a layer is used ([`LayerKeys::exact`]). The store is
//! given every layer of the throttle, local ones included (never used, never checked).

use std::time::Duration;

use crate::config::{Adapt, Refill};
use crate::throttle::spec::LayerSpec;

/// What the scripts need of one layer: its key prefix and its five bucket parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LayerKeys {
    /// `<prefix><layer>:<params>:`
    pub(crate) prefix: String,
    pub(crate) mode: &'static str,
    pub(crate) cap: u64,
    pub(crate) p1: u64,
    pub(crate) p2: u64,
    /// The floor of an adaptive drip layer: its limit in force lives in Redis too, so `p1`
    /// and `p2` are the configured limit and the interval, not reduced (see `adaptive.lua`).
    pub(crate) adaptive: Option<u64>,
    /// The rule of an adaptive layer: `m` measured, `x` multiplicative.
    pub(crate) rule: char,
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl LayerKeys {
    /// The layer's keys and parameters.
    pub(crate) fn new(prefix: &str, spec: &LayerSpec) -> LayerKeys {
        let adaptive = spec.adaptive.filter(|_| spec.refill == Refill::Drip);
        let (mode, cap, p1, p2) = match spec.refill {
            Refill::Drip => {
                let (l, i) = (spec.limit.max(1), micros(spec.interval));
                let g = if adaptive.is_some() { 1 } else { gcd(l, i) };
                ("d", spec.burst, l / g, i / g)
            }
            Refill::FixedWindow => ("w", spec.limit, micros(spec.interval), 0),
            Refill::None => ("n", spec.burst, micros(spec.idle_ttl), 0),
        };
        // An adaptive layer's state is stored at its limit in force: other keys than a fixed one.
        let mode_tag = if adaptive.is_some() { "a" } else { mode };
        let hash = fnv1a(&format!(
            "{}|{mode_tag}|{}|{}|{}|{}",
            spec.name,
            spec.limit,
            micros(spec.interval),
            spec.burst,
            micros(spec.idle_ttl)
        ));
        LayerKeys {
            prefix: format!("{prefix}{}:{:08x}:", spec.name, hash as u32),
            mode,
            cap,
            p1,
            p2,
            adaptive,
            rule: match spec.adapt {
                Adapt::Measured => 'm',
                Adapt::Multiplicative => 'x',
            },
        }
    }

    /// The script's mode argument: `a:<min>:<rule>:<tenant>` for an adaptive layer (`A:...` when the
    /// charge's `cut`: upstream's throttle reply taught it, so the script cuts the limit in
    /// this call).
    pub(crate) fn mode_arg(&self, cut: bool, tenant: &str) -> String {
        match self.adaptive {
            Some(min) if cut => format!("A:{min}:{}:{tenant}", self.rule),
            Some(min) => format!("a:{min}:{}:{tenant}", self.rule),
            None => self.mode.to_string(),
        }
    }

    /// The key of what an adaptive layer learned, in `key`'s slot (its hash tag).
    pub(crate) fn learned_key(&self, key: &str) -> String {
        format!("{}learned:{{{key}}}", self.prefix)
    }

    /// The key of an adaptive layer's recent grants and throttle replies by tenant (see
    /// `redis/blame.lua`), in `key`'s slot.
    pub(crate) fn blame_key(&self, key: &str) -> String {
        format!("{}blame:{{{key}}}", self.prefix)
    }

    /// A loose form of the load-time check (`config::redis`), for debug assertions: the
    /// largest products the scripts compute stay below 2^52.
    pub(crate) fn exact(&self) -> bool {
        u128::from(self.cap) * u128::from(self.p2.max(1)) < 1 << 52 && self.p1 < 1 << 52
    }

    /// The Redis key of `key`'s bucket in this layer.
    pub(crate) fn key(&self, key: &str) -> String {
        format!("{}{{{key}}}", self.prefix)
    }
}

/// FNV-1a, 64 bits: stable across builds and platforms (std's hasher is seeded per process).
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The Redis Cluster slot of a key: CRC16 (XMODEM) of its hash tag, modulo 16384.
pub fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|&b| b == b'{').and_then(|open| {
        let close = bytes[open + 1..].iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &bytes[open + 1..open + 1 + close])
    });
    crc16(tagged.unwrap_or(bytes)) % 16384
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis_cluster_keyslot() {
        // Values of `CLUSTER KEYSLOT` on Redis 7.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("user1000"));
        assert_eq!(slot("foo{}{bar}"), slot("foo{}{bar}")); // empty tag: whole key
        assert_eq!(slot("a:{acme}"), slot("b:{acme}"));
    }

    #[test]
    fn params_hash_changes_with_the_limit_and_reduces_drip_by_gcd() {
        let spec = LayerSpec::new("tenant", 20, Duration::from_secs(1));
        let a = LayerKeys::new("mailsluice:", &spec);
        assert_eq!((a.mode, a.cap, a.p1, a.p2), ("d", 20, 1, 50_000));
        assert!(a.key("acme").starts_with("mailsluice:tenant:"));
        assert!(a.key("acme").ends_with(":{acme}"));
        let b = LayerKeys::new(
            "mailsluice:",
            &LayerSpec {
                limit: 21,
                ..spec.clone()
            },
        );
        assert_ne!(a.prefix, b.prefix);
        assert_eq!(a, LayerKeys::new("mailsluice:", &spec));
    }

    #[test]
    fn too_wide_a_drip_is_not_exact() {
        let spec = LayerSpec {
            burst: 1 << 40,
            ..LayerSpec::new("huge", 7, Duration::from_secs(86_400))
        };
        assert!(!LayerKeys::new("m:", &spec).exact());
        assert!(LayerKeys::new("m:", &LayerSpec::new("t", 7, Duration::from_secs(1))).exact());
    }
}
