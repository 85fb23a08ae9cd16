//! What the operator sees and does: the admin endpoint's and status page's reads (standings,
//! paused tenants, suppressed addresses) and actions (resume a tenant, lift a suppression),
//! in process or in Redis alike.

use super::report::standing_of;
use super::{Reputation, Standing};
use crate::redis::RedisUnavailable;

impl Reputation {
    /// An operator lifts a suppression; false when the address was not suppressed.
    pub async fn unsuppress(&self, address: &str) -> Result<bool, RedisUnavailable> {
        let removed = match &self.shared {
            Some(shared) => shared.unsuppress(address).await?,
            None => self.lock().suppressions.remove(address),
        };
        if removed {
            tracing::warn!(target: "mailsluice::reputation", address, "reputation.unsuppressed");
        }
        Ok(removed)
    }

    /// An operator resumes a tenant: its window starts afresh (on every replica, with
    /// `[redis]`). False when it was not known.
    pub async fn resume(&self, key: &str) -> Result<bool, RedisUnavailable> {
        let resumed = match &self.shared {
            Some(shared) => shared.resume(key).await?,
            None => self.lock().ledger.resume(key),
        };
        if resumed {
            tracing::warn!(target: "mailsluice::reputation", tenant = key, "reputation.resumed by an operator");
        }
        Ok(resumed)
    }

    /// Every tenant counted, sorted by key.
    pub async fn standings(&self) -> Result<Vec<Standing>, RedisUnavailable> {
        if let Some(shared) = &self.shared {
            return shared.standings().await;
        }
        let now = self.clock.now();
        Ok((self.lock().ledger.snapshot(now).into_iter())
            .map(|(key, c, breach)| standing_of(key.to_string(), c, breach))
            .collect())
    }

    /// Tenants past a limit now; with `[redis]`, as this replica last read them (read
    /// without a call to Redis: it is the gauge's).
    pub fn paused(&self) -> usize {
        if let Some(shared) = &self.shared {
            return shared.paused_here();
        }
        let now = self.clock.now();
        let snapshot = self.lock().ledger.snapshot(now);
        snapshot.iter().filter(|(_, _, b)| b.is_some()).count()
    }

    /// Addresses suppressed now.
    pub async fn suppressed_count(&self) -> Result<usize, RedisUnavailable> {
        if let Some(shared) = &self.shared {
            return shared.suppressed_count().await;
        }
        let now = self.clock.now();
        let mut state = self.lock();
        state.suppressions.expire(now);
        Ok(state.suppressions.len())
    }

    /// Events whose message no tenant was known for (read by this replica, with `[redis]`).
    pub fn unattributed(&self) -> u64 {
        match &self.shared {
            Some(shared) => shared.unattributed(),
            None => self.lock().unattributed,
        }
    }

    /// Messages whose id is held for attribution now; `None` with `[redis]` (there they are
    /// keys that expire by themselves, not counted).
    pub fn tracked(&self) -> Option<usize> {
        match &self.shared {
            Some(_) => None,
            None => Some(self.lock().attribution.len()),
        }
    }

    /// Whether the state is in Redis (`[redis]` set).
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }
}
