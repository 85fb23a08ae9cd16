//! Each SES tenant's email identities, so that a sender SES would refuse for a tenant is
//! refused before DATA (SES answers a generic `BadRequest` only after the whole body went up).
//!
//! A tenant is learned when a message of its first comes (that message goes unchecked), read
//! with `ListTenantResources` (every page) by a task of this forwarder, and read again every
//! `tenant_refresh_ms`. A sender the cache refuses (a miss) asks for one early read of its
//! tenant, at most one a minute per tenant, so an identity associated since is taken soon
//! after. Nothing here calls SES on a client's path: a check reads the cache, and a tenant
//! whose identities are not known (not read yet, SES's API failing) lets the message go, for
//! SES to judge. A failed read keeps what was known and is tried again at the next refresh.
//!
//! At most `max` tenants are held; past it the one asked for longest ago is forgotten.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::api::Api;
use crate::upstream::{CallFailed, IdentityCheck, IdentityRefusal};

/// The least time between two early reads of one tenant.
pub const EARLY_EVERY: Duration = Duration::from_secs(60);

pub struct Identities {
    refresh: Duration,
    max: usize,
    tenants: Mutex<HashMap<String, SesTenantEntry>>,
    /// Wakes the reading task: a tenant to learn, an early read.
    wake: Arc<Notify>,
    started: AtomicBool,
}

/// What is known of one SES tenant: its identities, and when it is read.
#[derive(Debug)]
struct SesTenantEntry {
    known: Known,
    /// When it is read next.
    due: Instant,
    /// A read of it is out.
    reading: bool,
    /// When a miss last asked for an early read.
    early: Option<Instant>,
    /// When a message last asked about it.
    used: Instant,
}

#[derive(Debug)]
enum Known {
    /// Not read yet (or every read so far failed).
    NotYet,
    /// SES does not know the tenant.
    Unknown,
    /// Its identities: domains and addresses, lower-cased.
    Names(HashSet<String>),
}

impl Identities {
    pub fn new(refresh: Duration, max: usize) -> Identities {
        Identities {
            refresh,
            max: max.max(1),
            tenants: Mutex::default(),
            wake: Arc::new(Notify::new()),
            started: AtomicBool::new(false),
        }
    }

    /// Whether `sender` may send as `tenant`, from the cache; starts the reading task on the
    /// first check (it reads through `api`, and ends when the forwarder goes).
    pub fn check(self: &Arc<Self>, tenant: &str, sender: &str, api: &Arc<Api>) -> IdentityCheck {
        if !self.started.swap(true, Ordering::SeqCst) {
            tokio::spawn(read_on(
                Arc::downgrade(self),
                api.clone(),
                self.wake.clone(),
            ));
        }
        let now = Instant::now();
        let mut tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
        if !tenants.contains_key(tenant) {
            if tenants.len() >= self.max {
                forget_oldest(&mut tenants, self.max);
            }
            let fresh = SesTenantEntry {
                known: Known::NotYet,
                due: now,
                reading: false,
                early: None,
                used: now,
            };
            tenants.insert(tenant.to_string(), fresh);
            self.wake.notify_one();
            return IdentityCheck::Unchecked;
        }
        let entry = tenants.get_mut(tenant).expect("just looked");
        entry.used = now;
        let refusal = match &entry.known {
            Known::NotYet => return IdentityCheck::Unchecked,
            Known::Names(names) if allowed(names, sender) => return IdentityCheck::Allowed,
            Known::Names(_) => IdentityRefusal::NotIdentity {
                domain: domain_of(sender),
                tenant: tenant.to_string(),
            },
            Known::Unknown => IdentityRefusal::UnknownTenant {
                tenant: tenant.to_string(),
            },
        };
        if !entry.reading && entry.early.is_none_or(|at| now - at >= EARLY_EVERY) {
            (entry.early, entry.due) = (Some(now), now);
            self.wake.notify_one();
        }
        IdentityCheck::Refused(refusal)
    }

    /// The tenants SES said it does not know, sorted.
    pub fn unknown(&self) -> Vec<String> {
        let tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
        let mut unknown: Vec<String> = (tenants.iter())
            .filter(|(_, t)| matches!(t.known, Known::Unknown))
            .map(|(name, _)| name.clone())
            .collect();
        unknown.sort();
        unknown
    }

    /// The tenants due for a read at `now`, marked as being read.
    fn take_due(&self, now: Instant) -> Vec<String> {
        let mut tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
        (tenants.iter_mut())
            .filter(|(_, t)| !t.reading && t.due <= now)
            .map(|(name, t)| {
                t.reading = true;
                name.clone()
            })
            .collect()
    }

    /// When the next read is due; `None` when no tenant is held.
    fn next_due(&self) -> Option<Instant> {
        let tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
        tenants.values().filter(|t| !t.reading).map(|t| t.due).min()
    }

    /// What a read of `tenant` found; it is read again a refresh later, whatever it found.
    fn learned(&self, tenant: &str, read: Result<Option<Vec<String>>, CallFailed>) {
        let mut tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
        let Some(entry) = tenants.get_mut(tenant) else {
            return;
        };
        (entry.reading, entry.due) = (false, Instant::now() + self.refresh);
        let known = match read {
            Ok(Some(names)) => Known::Names(names.into_iter().collect()),
            Ok(None) => {
                if !matches!(entry.known, Known::Unknown) {
                    tracing::warn!(target: "mailsluice::upstream", tenant, "ses.tenant_unknown");
                }
                Known::Unknown
            }
            Err(e) => {
                tracing::warn!(
                    target: "mailsluice::upstream",
                    tenant,
                    error = %e,
                    "ses.tenant_identities_unread: its senders go unchecked until a read succeeds"
                );
                return;
            }
        };
        entry.known = known;
    }
}

/// Starts a read of each tenant due (each its own task, so that a slow read holds back no
/// other tenant's; the API bounds how many are out at once), then sleeps until the next is
/// due or a check or a finished read wakes it; ends when the identities' forwarder is gone.
async fn read_on(identities: Weak<Identities>, api: Arc<Api>, wake: Arc<Notify>) {
    loop {
        let next = {
            let Some(strong) = identities.upgrade() else {
                return;
            };
            for tenant in strong.take_due(Instant::now()) {
                let (identities, api, wake) = (identities.clone(), api.clone(), wake.clone());
                tokio::spawn(async move {
                    let read = api.identities(&tenant).await;
                    if let Some(identities) = identities.upgrade() {
                        identities.learned(&tenant, read);
                        wake.notify_one();
                    }
                });
            }
            strong.next_due()
        };
        match next {
            Some(at) => tokio::select! {
                _ = tokio::time::sleep_until(at) => {}
                _ = wake.notified() => {}
            },
            None => wake.notified().await,
        }
    }
}

/// Forgets the tenant asked about longest ago (a linear scan, only when a new tenant comes to
/// a full cache).
fn forget_oldest(tenants: &mut HashMap<String, SesTenantEntry>, max: usize) {
    let oldest = (tenants.iter())
        .min_by_key(|(_, t)| t.used)
        .map(|(name, _)| name.clone());
    if let Some(name) = oldest {
        tracing::warn!(
            target: "mailsluice::upstream",
            tenant = name.as_str(),
            max,
            "ses.tenant_forgotten: more SES tenants than are held"
        );
        tenants.remove(&name);
    }
}

/// Whether `sender`'s address, its domain or a parent of its domain is an identity (SES lets
/// a verified domain's subdomains send): erring towards SES's own judgment.
fn allowed(names: &HashSet<String>, sender: &str) -> bool {
    let sender = sender.to_lowercase();
    if names.contains(&sender) {
        return true;
    }
    let mut domain = domain_of(&sender);
    loop {
        if names.contains(&domain) {
            return true;
        }
        match domain.split_once('.') {
            Some((_, parent)) if parent.contains('.') => domain = parent.to_string(),
            _ => return false,
        }
    }
}

/// The domain of an address, lower-cased (the whole text when it has no `@`).
fn domain_of(address: &str) -> String {
    let domain = address.rsplit_once('@').map_or(address, |(_, d)| d);
    domain.to_lowercase()
}

#[cfg(test)]
mod tests;
