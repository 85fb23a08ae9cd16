//! What the operator sees and does: the admin endpoint's and status page's reads (standings,
//! paused tenants, suppressed addresses) and actions (resume a tenant, lift a suppression),
//! in process or in Redis alike.

use super::{Reputation, Standing};
use crate::redis::RedisUnavailable;

impl Reputation {
    /// An operator lifts a suppression; false when the address was not suppressed.
    pub async fn unsuppress(&self, address: &str) -> Result<bool, RedisUnavailable> {
        let removed = self.store.unsuppress(address).await?;
        if removed {
            tracing::warn!(target: "mailsluice::reputation", address, "reputation.unsuppressed");
        }
        Ok(removed)
    }

    /// An operator resumes a tenant: its window starts afresh (on every replica, with
    /// `[redis]`). False when it was not known.
    pub async fn resume(&self, key: &str) -> Result<bool, RedisUnavailable> {
        let resumed = self.store.resume(key).await?;
        if resumed {
            tracing::warn!(target: "mailsluice::reputation", tenant = key, "reputation.resumed by an operator");
            if let Some(ses) = &self.ses {
                ses.changed(key);
            }
            if let Some(webhooks) = &self.webhooks {
                super::notify::changed(webhooks, key, super::Change::Resumed, None);
            }
        }
        Ok(resumed)
    }

    /// Every tenant counted, sorted by key.
    pub async fn standings(&self) -> Result<Vec<Standing>, RedisUnavailable> {
        self.store.standings().await
    }

    /// Tenants past a limit now; with `[redis]`, as this replica last read them (read
    /// without a call to Redis: it is the gauge's).
    pub fn paused(&self) -> usize {
        self.store.paused()
    }

    /// Addresses suppressed now.
    pub async fn suppressed_count(&self) -> Result<usize, RedisUnavailable> {
        self.store.suppressed_count().await
    }

    /// Events whose message no tenant was known for (read by this replica, with `[redis]`).
    pub fn unattributed(&self) -> u64 {
        self.store.unattributed()
    }

    /// Messages whose id is held for attribution now; `None` with `[redis]` (there they are
    /// keys that expire by themselves, not counted).
    pub fn tracked(&self) -> Option<usize> {
        self.store.tracked()
    }

    /// Whether the state is in Redis (`[redis]` set).
    pub fn is_shared(&self) -> bool {
        self.store.is_shared()
    }
}
