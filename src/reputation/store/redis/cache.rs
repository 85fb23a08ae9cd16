//! Each replica's recent verdicts on its tenants, so that a message does not ask Redis again
//! what the last one learned: a tenant in good standing is taken on its cached verdict for
//! [`REFRESH`]; a paused one is asked of Redis at each message, so that an operator's resume
//! or a window that slid is seen at once. Every count this replica writes refreshes the entry
//! from Redis's answer. At most `max` tenants (past it, stale entries go, then any one).

use std::collections::HashMap;
use std::time::Duration;

use crate::clock::{nanos, Nanos};
use crate::reputation::ledger::Breach;

/// How long a good standing is taken without asking Redis: the longest another replica's
/// pause of a tenant goes unseen here.
pub const REFRESH: Duration = Duration::from_secs(1);

pub struct VerdictCache {
    entries: HashMap<String, (Option<Breach>, Nanos)>,
    max: usize,
}

impl VerdictCache {
    pub fn new(max: usize) -> VerdictCache {
        VerdictCache {
            entries: HashMap::new(),
            max: max.max(1),
        }
    }

    /// The tenant's good standing, when it was read within [`REFRESH`] of `now`.
    pub fn in_good_standing(&self, key: &str, now: Nanos) -> bool {
        matches!(self.entries.get(key), Some((None, at)) if fresh(*at, now))
    }

    pub fn put(&mut self, key: &str, verdict: Option<Breach>, now: Nanos) {
        if let Some(entry) = self.entries.get_mut(key) {
            *entry = (verdict, now);
            return;
        }
        if self.entries.len() >= self.max {
            self.entries.retain(|_, (_, at)| fresh(*at, now));
        }
        if self.entries.len() >= self.max {
            let any = self.entries.keys().next().cloned();
            if let Some(any) = any {
                self.entries.remove(&any);
            }
        }
        self.entries.insert(key.to_string(), (verdict, now));
    }

    pub fn forget(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// Tenants paused as this replica last read them.
    pub fn paused(&self) -> usize {
        self.entries.values().filter(|(b, _)| b.is_some()).count()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

fn fresh(at: Nanos, now: Nanos) -> bool {
    now.saturating_sub(at) < nanos(REFRESH)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reputation::events::Kind;

    const SEC: Nanos = 1_000_000_000;

    fn breach() -> Option<Breach> {
        Some(Breach {
            kind: Kind::Bounce,
            rate: 0.5,
            sent: 100,
            limit: 0.05,
            window: Duration::from_secs(60),
        })
    }

    #[test]
    fn a_good_standing_is_kept_for_refresh_a_pause_never() {
        let mut c = VerdictCache::new(10);
        c.put("acme", None, 0);
        c.put("beta", breach(), 0);
        assert!(c.in_good_standing("acme", SEC - 1));
        assert!(!c.in_good_standing("acme", SEC), "stale after REFRESH");
        assert!(
            !c.in_good_standing("beta", 0),
            "a paused tenant is asked again"
        );
        assert!(!c.in_good_standing("other", 0));
        assert_eq!(c.paused(), 1);
        c.forget("beta");
        assert_eq!(c.paused(), 0);
    }

    #[test]
    fn at_its_bound_stale_entries_go_first_then_any_one() {
        let mut c = VerdictCache::new(2);
        c.put("a", None, 0);
        c.put("b", None, 2 * SEC);
        c.put("c", None, 2 * SEC);
        assert_eq!(c.len(), 2);
        assert!(!c.in_good_standing("a", 2 * SEC), "the stale one went");
        assert!(c.in_good_standing("b", 2 * SEC) && c.in_good_standing("c", 2 * SEC));
        c.put("d", None, 2 * SEC);
        assert_eq!(c.len(), 2, "none stale: one went all the same");
        assert!(c.in_good_standing("d", 2 * SEC));
    }
}
