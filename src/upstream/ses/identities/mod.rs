//! Each SES tenant's email identities, so that a sender SES would refuse for a tenant is
//! refused before DATA (SES answers a generic `BadRequest` only after the whole body went up).
//!
//! The account's tenants are listed (`ListTenants`, every page) when the forwarder starts and
//! every `tenant_refresh_ms`, and each one's identities read (`ListTenantResources`, every
//! page), then read again every `tenant_refresh_ms`, by a task of this forwarder (`reading`).
//! So a tenant is known before its first message; readiness never waits for it.
//!
//! A tenant not (yet) known when a message of its comes (not listed yet, or made since the
//! last list) is read at once, ahead of the background reads: the message waits at the final
//! dot for that one read, at most the upstream's `timeout_ms`, and every message of the tenant
//! that comes meanwhile waits for the same read. A read that fails or is too slow lets the
//! message go, for SES to judge (counted); a tenant whose reads failed lets its messages go
//! without waiting until a read succeeds (at the next refresh). At `MAIL` only the cache is
//! read, never a call waited for.
//!
//! A sender the cache refuses (a miss) asks for one early read of its tenant, at most one a
//! minute per tenant, so an identity associated since is taken soon after. A failed read
//! keeps what was known.
//!
//! At most `max` tenants are held; past it the one asked for longest ago is forgotten, and a
//! list longer than that is cut.

mod reading;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::api::Api;
use crate::upstream::{CallFailed, IdentityCheck, IdentityRefusal};

/// The least time between two early reads of one tenant.
pub const EARLY_EVERY: Duration = Duration::from_secs(60);

pub struct Identities {
    refresh: Duration,
    /// The longest a message waits for its tenant's first read (the upstream's `timeout_ms`).
    wait: Duration,
    max: usize,
    tenants: Mutex<HashMap<String, SesTenantEntry>>,
    /// Wakes the reading task: a tenant to read, a read done.
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
    /// A message waits for its read: it is read before the background reads.
    wanted: bool,
    /// When a miss last asked for an early read.
    early: Option<Instant>,
    /// When a message last asked about it (or the list named it).
    used: Instant,
    /// Told each time a read of it ends.
    read: watch::Sender<()>,
}

#[derive(Debug)]
enum Known {
    /// Never read yet: a message of it waits for its first read.
    NotYet,
    /// Every read so far failed: its senders go unchecked, without waiting.
    Unread,
    /// SES does not know the tenant.
    Unknown,
    /// Its identities: domains and addresses, lower-cased.
    Names(HashSet<String>),
}

/// What the cache says of a sender: judged, or its tenant's first read is out.
enum Look {
    Judged(IdentityCheck),
    Reading(watch::Receiver<()>),
}

impl Identities {
    pub fn new(refresh: Duration, wait: Duration, max: usize) -> Identities {
        Identities {
            refresh,
            wait,
            max: max.max(1),
            tenants: Mutex::default(),
            wake: Arc::new(Notify::new()),
            started: AtomicBool::new(false),
        }
    }

    /// Starts the reading task (once): it lists the account's tenants and reads them through
    /// `api`, and ends when the forwarder goes.
    pub fn start(self: &Arc<Self>, api: &Arc<Api>) {
        if !self.started.swap(true, Ordering::SeqCst) {
            let (identities, wake) = (Arc::downgrade(self), self.wake.clone());
            tokio::spawn(reading::read_on(identities, api.clone(), wake));
        }
    }

    /// Whether `sender` may send as `tenant`, from the cache alone (at `MAIL`): a tenant not
    /// read yet is asked for and goes unchecked.
    pub fn check(self: &Arc<Self>, tenant: &str, sender: &str, api: &Arc<Api>) -> IdentityCheck {
        self.start(api);
        match self.look(tenant, sender) {
            Look::Judged(check) => check,
            Look::Reading(_) => IdentityCheck::Unchecked,
        }
    }

    /// Whether `sender` may send as `tenant`, waiting for the tenant's first read when it was
    /// never read (one read shared by every message waiting for it), at most `wait`.
    pub async fn check_read(
        self: &Arc<Self>,
        tenant: &str,
        sender: &str,
        api: &Arc<Api>,
    ) -> IdentityCheck {
        self.start(api);
        let mut read = match self.look(tenant, sender) {
            Look::Judged(check) => return check,
            Look::Reading(read) => read,
        };
        // Ends at the read's end, at the bound, or when the tenant was forgotten meanwhile.
        let _ = tokio::time::timeout(self.wait, read.changed()).await;
        self.check(tenant, sender, api)
    }

    /// The cache's word on `sender` of `tenant`; a tenant never read is asked for ahead of
    /// the background reads.
    fn look(&self, tenant: &str, sender: &str) -> Look {
        let now = Instant::now();
        let mut tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
        if !tenants.contains_key(tenant) {
            if tenants.len() >= self.max {
                forget_oldest(&mut tenants, self.max);
            }
            tenants.insert(tenant.to_string(), SesTenantEntry::new(now));
        }
        let entry = tenants.get_mut(tenant).expect("just made");
        entry.used = now;
        let refusal = match &entry.known {
            Known::NotYet => {
                if !entry.reading && !entry.wanted {
                    (entry.wanted, entry.due) = (true, now);
                    self.wake.notify_one();
                }
                return Look::Reading(entry.read.subscribe());
            }
            Known::Unread => return Look::Judged(IdentityCheck::Unchecked),
            Known::Names(names) if allowed(names, sender) => {
                return Look::Judged(IdentityCheck::Allowed)
            }
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
        Look::Judged(IdentityCheck::Refused(refusal))
    }

    /// SES refused a message of `tenant` for a reason the cache should have known (the tenant
    /// gone, an identity no longer associated): read it again early.
    pub fn stale(&self, tenant: &str) {
        let now = Instant::now();
        let mut tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = tenants.get_mut(tenant) {
            if !entry.reading && entry.early.is_none_or(|at| now - at >= EARLY_EVERY) {
                (entry.early, entry.due) = (Some(now), now);
                self.wake.notify_one();
            }
        }
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

    /// The tenants to read at `now`, marked as being read: every one a message waits for, and
    /// of the others due, as many as `background` has room for (each holding its permit while
    /// it is read), so a read a message waits for never queues behind a long list.
    fn take_due(
        &self,
        now: Instant,
        background: &Arc<Semaphore>,
    ) -> Vec<(String, Option<OwnedSemaphorePermit>)> {
        let mut tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
        let mut due = Vec::new();
        for (name, t) in tenants.iter_mut() {
            if t.reading || t.due > now {
                continue;
            }
            let permit = match t.wanted {
                true => None,
                false => match background.clone().try_acquire_owned() {
                    Ok(permit) => Some(permit),
                    Err(_) => continue,
                },
            };
            t.reading = true;
            due.push((name.clone(), permit));
        }
        due
    }

    /// When the next read is due (of a tenant a message waits for only, while the
    /// background reads have no `room`); `None` when there is none.
    fn next_due(&self, room: bool) -> Option<Instant> {
        let tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
        (tenants.values())
            .filter(|t| !t.reading && (room || t.wanted))
            .map(|t| t.due)
            .min()
    }

    /// The account's tenants as SES listed them: each one not held yet is held, to be read in
    /// the background, as long as there is room (the list is cut at `max`). A failed list is
    /// logged (and counted by the API), and made again at the next refresh.
    fn listed(&self, names: Result<Vec<String>, CallFailed>) {
        let names = match names {
            Ok(names) => names,
            Err(e) => {
                tracing::warn!(
                    target: "mailsluice::upstream",
                    error = %e,
                    "ses.tenants_unlisted: a tenant is read when its first message comes until a list succeeds"
                );
                return;
            }
        };
        let now = Instant::now();
        let mut tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
        let mut cut = 0;
        for name in names {
            if tenants.contains_key(&name) {
                continue;
            }
            match tenants.len() < self.max {
                true => _ = tenants.insert(name, SesTenantEntry::new(now)),
                false => cut += 1,
            }
        }
        if cut > 0 {
            tracing::warn!(
                target: "mailsluice::upstream",
                cut,
                max = self.max,
                "ses.tenants_cut: more SES tenants than are held; the rest are read when a message comes"
            );
        }
    }

    /// What a read of `tenant` found; it is read again a refresh later, whatever it found,
    /// and whoever waits for the read is told.
    fn learned(&self, tenant: &str, read: Result<Option<Vec<String>>, CallFailed>) {
        let mut tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
        let Some(entry) = tenants.get_mut(tenant) else {
            return;
        };
        (entry.reading, entry.wanted) = (false, false);
        entry.due = Instant::now() + self.refresh;
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
                if !matches!(entry.known, Known::NotYet) {
                    entry.read.send_replace(());
                    return;
                }
                Known::Unread
            }
        };
        entry.known = known;
        entry.read.send_replace(());
    }
}

impl SesTenantEntry {
    /// A tenant never read, due for a read now.
    fn new(now: Instant) -> SesTenantEntry {
        SesTenantEntry {
            known: Known::NotYet,
            due: now,
            reading: false,
            wanted: false,
            early: None,
            used: now,
            read: watch::channel(()).0,
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
pub fn domain_of(address: &str) -> String {
    let domain = address.rsplit_once('@').map_or(address, |(_, d)| d);
    domain.to_lowercase()
}

#[cfg(test)]
mod tests;
