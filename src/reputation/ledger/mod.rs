//! Per tenant: messages sent, hard bounces and complaints over a sliding window, and the
//! verdict on them. The window is cut into `SLOTS` slots, so a tenant costs the same memory
//! however much it sends, and the window slides one slot (1/24 of it) at a time. Pure: the
//! caller passes `now`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Nanos;

use super::events::Kind;

/// Slots of one window: with 24 h, hourly.
pub const SLOTS: usize = 24;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub sent: u64,
    pub bounces: u64,
    pub complaints: u64,
}

impl Counts {
    pub fn add(&mut self, other: Counts) {
        self.sent = self.sent.saturating_add(other.sent);
        self.bounces = self.bounces.saturating_add(other.bounces);
        self.complaints = self.complaints.saturating_add(other.complaints);
    }
}

/// The limits a tenant is held to.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_bounce_rate: f64,
    pub max_complaint_rate: f64,
    pub min_messages: u64,
    /// Fewer bounces (or complaints) than this are no verdict, whatever their rate.
    pub min_bounces: u64,
    pub min_complaints: u64,
    pub window: Duration,
}

/// A tenant past a limit: which one, and by how much.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Breach {
    pub kind: Kind,
    pub rate: f64,
    pub sent: u64,
    pub limit: f64,
    pub window: Duration,
}

/// How a tenant's standing changed with a verdict, for the one warn line the caller logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    None,
    Paused,
    Resumed,
}

/// One reputation key's counts over the sliding window.
#[derive(Debug)]
struct TenantWindow {
    slots: [Counts; SLOTS],
    /// The absolute slot number each slot holds (`now / slot_len`).
    epochs: [u64; SLOTS],
    last_used: Nanos,
    over: bool,
}

#[derive(Debug)]
pub struct Ledger {
    tenants: HashMap<Arc<str>, TenantWindow>,
    limits: Limits,
    slot_len: Nanos,
    max_tenants: usize,
}

impl Ledger {
    pub fn new(limits: Limits, max_tenants: usize) -> Ledger {
        Ledger {
            tenants: HashMap::new(),
            limits,
            slot_len: slot_len(limits.window),
            max_tenants: max_tenants.max(1),
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    pub fn len(&self) -> usize {
        self.tenants.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds `counts` to `key` at `now`; the key as held (shared by the attribution map).
    pub fn add(&mut self, key: &str, counts: Counts, now: Nanos) -> Arc<str> {
        let slot = now / self.slot_len;
        if !self.tenants.contains_key(key) && self.tenants.len() >= self.max_tenants {
            self.evict();
        }
        let (held, tenant) = match self.tenants.get_key_value(key) {
            Some((held, _)) => (held.clone(), self.tenants.get_mut(key).unwrap()),
            None => {
                let held: Arc<str> = key.into();
                let fresh = TenantWindow {
                    slots: [Counts::default(); SLOTS],
                    epochs: [u64::MAX; SLOTS],
                    last_used: now,
                    over: false,
                };
                (held.clone(), self.tenants.entry(held).or_insert(fresh))
            }
        };
        let i = (slot % SLOTS as u64) as usize;
        if tenant.epochs[i] != slot {
            (tenant.epochs[i], tenant.slots[i]) = (slot, Counts::default());
        }
        tenant.slots[i].add(counts);
        tenant.last_used = now;
        held
    }

    /// Past `max_tenants`: the tenant used longest ago is forgotten (a linear scan, only when
    /// a new tenant comes to a full ledger).
    fn evict(&mut self) {
        let oldest = (self.tenants.iter())
            .min_by_key(|(_, t)| t.last_used)
            .map(|(k, _)| k.clone());
        if let Some(key) = oldest {
            tracing::warn!(
                target: "mailsluice::reputation",
                tenant = &*key,
                max_tenants = self.max_tenants,
                "reputation.evicted"
            );
            self.tenants.remove(&key);
        }
    }

    /// The counts of `key` over the window ending at `now`.
    pub fn totals(&self, key: &str, now: Nanos) -> Counts {
        self.tenants
            .get(key)
            .map_or_else(Counts::default, |t| self.sum(t, now))
    }

    fn sum(&self, tenant: &TenantWindow, now: Nanos) -> Counts {
        let slots = tenant
            .epochs
            .iter()
            .copied()
            .zip(tenant.slots.iter().copied());
        in_window(slots, now / self.slot_len)
    }

    /// Whether `key` is past a limit now, and whether that changed since its last verdict.
    pub fn verdict(&mut self, key: &str, now: Nanos) -> (Option<Breach>, Change) {
        let Some(tenant) = self.tenants.get(key) else {
            return (None, Change::None);
        };
        let breach = breach(self.limits, self.sum(tenant, now));
        let tenant = self.tenants.get_mut(key).unwrap();
        let change = change(tenant.over, breach.as_ref());
        tenant.over = breach.is_some();
        (breach, change)
    }

    /// An operator's resume: the tenant's window starts afresh (false: not known).
    pub fn resume(&mut self, key: &str) -> bool {
        self.tenants.remove(key).is_some()
    }

    /// Every tenant with its counts and breach now, sorted by key.
    pub fn snapshot(&self, now: Nanos) -> Vec<(Arc<str>, Counts, Option<Breach>)> {
        let mut all: Vec<_> = (self.tenants.iter())
            .map(|(k, t)| {
                let counts = self.sum(t, now);
                (k.clone(), counts, breach(self.limits, counts))
            })
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }
}

/// The length of one slot of `window` (never 0).
pub fn slot_len(window: Duration) -> Nanos {
    let window = crate::clock::nanos(window).max(SLOTS as u64);
    window.div_ceil(SLOTS as u64)
}

/// The sum of `slots` (absolute slot number, counts) that lie in the window ending in slot
/// `now_slot`: the last `SLOTS` slots. A slot ahead of `now_slot` (another replica's clock a
/// little ahead) is not counted yet.
pub fn in_window(slots: impl IntoIterator<Item = (u64, Counts)>, now_slot: u64) -> Counts {
    let mut total = Counts::default();
    for (epoch, counts) in slots {
        if epoch <= now_slot && now_slot - epoch < SLOTS as u64 {
            total.add(counts);
        }
    }
    total
}

/// How the standing changed from `was_over` to `breach`.
pub fn change(was_over: bool, breach: Option<&Breach>) -> Change {
    match (was_over, breach.is_some()) {
        (false, true) => Change::Paused,
        (true, false) => Change::Resumed,
        _ => Change::None,
    }
}

/// The first limit `counts` is past, bounces first; none under `min_messages` sent, and none
/// of a kind under its minimum count (`min_bounces`, `min_complaints`): no single event
/// pauses a tenant.
pub fn breach(limits: Limits, counts: Counts) -> Option<Breach> {
    if counts.sent < limits.min_messages || counts.sent == 0 {
        return None;
    }
    let rate = |n: u64| n as f64 / counts.sent as f64;
    let least = |kind| match kind {
        Kind::Bounce => limits.min_bounces,
        Kind::Complaint => limits.min_complaints,
    };
    let over = |kind, n, limit| {
        (n >= least(kind) && rate(n) > limit).then_some(Breach {
            kind,
            rate: rate(n),
            sent: counts.sent,
            limit,
            window: limits.window,
        })
    };
    over(Kind::Bounce, counts.bounces, limits.max_bounce_rate).or_else(|| {
        over(
            Kind::Complaint,
            counts.complaints,
            limits.max_complaint_rate,
        )
    })
}

#[cfg(test)]
mod tests;
