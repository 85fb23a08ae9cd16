//! What the guard hands to the task that keeps SES's own view of each SES tenant in step with
//! it (`serve::ses_sync`, with `[reputation] ses_sync = true`): which SES tenant each key's
//! messages went to, the keys whose standing changed since the task last looked, and the
//! addresses suppressed for a key, to be put on its SES tenant's suppression list. The guard
//! only notes; the task calls SES, never on a client's path.
//!
//! Bounded: at most `max` keys are mapped (past it the one mapped longest ago is forgotten),
//! and at most [`MAX_PENDING`] suppressions wait (past it a new one is dropped, counted).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tokio::sync::Notify;

use super::events::Kind;

/// Suppressions waiting to be written to SES at once.
pub const MAX_PENDING: usize = 10_000;

/// An SES tenant of one upstream: where a key's messages went.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SesTenant {
    pub upstream: String,
    pub tenant: String,
}

/// An address to put on an SES tenant's suppression list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingSuppression {
    pub to: SesTenant,
    pub address: String,
    pub reason: Kind,
}

pub struct SesSync {
    max: usize,
    /// Each key's SES tenant, and when it was mapped (a counter, for the eviction).
    sent_as: Mutex<HashMap<String, (SesTenant, u64)>>,
    mapped: AtomicU64,
    changed: Mutex<HashSet<String>>,
    pending: Mutex<VecDeque<PendingSuppression>>,
    /// Suppressions dropped because [`MAX_PENDING`] were waiting.
    dropped: AtomicU64,
    wake: Notify,
}

impl SesSync {
    pub fn new(max: usize) -> SesSync {
        SesSync {
            max: max.max(1),
            sent_as: Mutex::default(),
            mapped: AtomicU64::new(0),
            changed: Mutex::default(),
            pending: Mutex::default(),
            dropped: AtomicU64::new(0),
            wake: Notify::new(),
        }
    }

    /// `key`'s message went to `to`.
    pub fn sent_as(&self, key: &str, to: SesTenant) {
        let mut sent_as = self.sent_as.lock().unwrap_or_else(|e| e.into_inner());
        if sent_as.get(key).is_some_and(|(held, _)| *held == to) {
            return;
        }
        if !sent_as.contains_key(key) && sent_as.len() >= self.max {
            let oldest = (sent_as.iter())
                .min_by_key(|(_, (_, at))| *at)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                sent_as.remove(&oldest);
            }
        }
        let at = self.mapped.fetch_add(1, Ordering::Relaxed);
        sent_as.insert(key.to_string(), (to, at));
        drop(sent_as);
        // A tenant new to the sync is read at once.
        self.changed(key);
    }

    /// The SES tenant `key`'s messages went to, if any.
    pub fn tenant_of(&self, key: &str) -> Option<SesTenant> {
        let sent_as = self.sent_as.lock().unwrap_or_else(|e| e.into_inner());
        sent_as.get(key).map(|(to, _)| to.clone())
    }

    /// Every key mapped, with its SES tenant, sorted by key.
    pub fn mapped(&self) -> Vec<(String, SesTenant)> {
        let sent_as = self.sent_as.lock().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<_> = (sent_as.iter())
            .map(|(key, (to, _))| (key.clone(), to.clone()))
            .collect();
        all.sort();
        all
    }

    /// `key`'s standing changed (paused, resumed): the task looks at once.
    pub fn changed(&self, key: &str) {
        let mut changed = self.changed.lock().unwrap_or_else(|e| e.into_inner());
        if changed.len() < self.max {
            changed.insert(key.to_string());
        }
        self.wake.notify_one();
    }

    /// `addresses` were suppressed for `key`: put on its SES tenant's list, when its messages
    /// went to one.
    pub fn suppressed(&self, key: &str, addresses: &[String], reason: Kind) {
        let Some(to) = self.tenant_of(key) else {
            return;
        };
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        for address in addresses {
            if pending.len() >= MAX_PENDING {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    target: "mailsluice::reputation",
                    max = MAX_PENDING,
                    "ses.suppression_dropped: too many waiting to be written to SES"
                );
                continue;
            }
            pending.push_back(PendingSuppression {
                to: to.clone(),
                address: address.clone(),
                reason,
            });
        }
        self.wake.notify_one();
    }

    /// The keys changed since the last call.
    pub fn take_changed(&self) -> Vec<String> {
        let mut changed = self.changed.lock().unwrap_or_else(|e| e.into_inner());
        changed.drain().collect()
    }

    /// The suppressions waiting, in order.
    pub fn take_pending(&self) -> Vec<PendingSuppression> {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.drain(..).collect()
    }

    /// Puts back suppressions whose write failed, ahead of newer ones, within the bound.
    pub fn retry(&self, failed: Vec<PendingSuppression>) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        for one in failed.into_iter().rev() {
            if pending.len() >= MAX_PENDING {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            pending.push_front(one);
        }
    }

    /// Suppressions dropped at the bound, since start.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Completes when a change or a suppression was noted.
    pub async fn wanted(&self) {
        self.wake.notified().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to(tenant: &str) -> SesTenant {
        SesTenant {
            upstream: "ses".into(),
            tenant: tenant.into(),
        }
    }

    #[test]
    fn past_max_keys_the_one_mapped_longest_ago_is_forgotten() {
        let sync = SesSync::new(2);
        sync.sent_as("a", to("ta"));
        sync.sent_as("b", to("tb"));
        sync.sent_as("a", to("ta"));
        sync.sent_as("c", to("tc"));
        let keys: Vec<String> = sync.mapped().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["b", "c"]);
        sync.sent_as("b", to("tb2"));
        assert_eq!(
            sync.tenant_of("b"),
            Some(to("tb2")),
            "a key follows its messages"
        );
    }

    #[test]
    fn suppressions_wait_for_a_mapped_key_within_their_bound() {
        let sync = SesSync::new(10);
        sync.suppressed("unmapped", &["x@y".into()], Kind::Bounce);
        assert!(sync.take_pending().is_empty(), "no SES tenant to write to");
        sync.sent_as("a", to("ta"));
        let many: Vec<String> = (0..MAX_PENDING + 3).map(|i| format!("{i}@x")).collect();
        sync.suppressed("a", &many, Kind::Complaint);
        assert_eq!(sync.dropped(), 3);
        let pending = sync.take_pending();
        assert_eq!(pending.len(), MAX_PENDING);
        assert_eq!(pending[0].address, "0@x");
        assert_eq!(pending[0].to, to("ta"));
        sync.retry(pending[..2].to_vec());
        sync.suppressed("a", &["new@x".into()], Kind::Bounce);
        let again: Vec<String> = sync.take_pending().into_iter().map(|p| p.address).collect();
        assert_eq!(again, ["0@x", "1@x", "new@x"], "failed writes first");
    }
}
