//! The guard's calls to Redis, their keys, and what their answers mean. Nothing here decides a
//! verdict: a tenant's hash comes back as slots and `ledger` sums and judges it.
//!
//! Keys, all under one hash tag (`{<prefix>rep}`, e.g. `{mailsluice:rep}`), so that in a
//! Redis Cluster every call is one atomic script in one slot (the guard's keys then live on one
//! shard: about one write per message, little next to the throttle's):
//! - `{..}:t:<window_ms>:<tenant>`: a hash per tenant, `s<slot>`, `b<slot>`, `c<slot>` (sent,
//!   bounces, complaints of one slot of the window, slots numbered from the Unix epoch) and
//!   `over` (its standing as last judged); it expires one window and one slot after its last
//!   count. The window is in the name so that a changed `window_ms` never misreads old slots.
//! - `{..}:tenants:<window_ms>`: the tenants counted in the window (a sorted set by last
//!   count), for `GET /reputation`, at most `max_tenants` (past it the one used longest ago
//!   is forgotten, hash and all, as in process).
//! - `{..}:m:<message id>`: the tenant that sent the message, for the window.
//! - `{..}:f:<feedback id>`: an event applied, for the window (`SET NX`: once across replicas).
//! - `{..}:sup` and `{..}:sup:at`: suppressed addresses (`reason|date|added ms`) and when each
//!   was added, for `suppress_ttl_ms`, at most `max_suppressed` (past it the oldest goes).

use ::redis::{Cmd, Pipeline, Script};

use crate::redis::{Call, Connection, RedisOptions, RedisUnavailable};
use crate::reputation::events::Kind;
use crate::reputation::ledger::{Counts, SLOTS};
use crate::reputation::suppression::Suppression;

/// A tenant's hash: its slots, and whether it was over a limit when last judged.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct TenantHash {
    pub slots: Vec<(u64, Counts)>,
    pub over: bool,
}

/// What the guard's Redis calls need to know of the configuration.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub window_ms: u64,
    pub slot_ms: u64,
    pub suppress_ttl_ms: u64,
    pub max_tenants: usize,
    pub max_suppressed: usize,
}

pub struct RedisLedger {
    conn: Connection,
    /// `{<prefix>rep}:`
    base: String,
    bounds: Bounds,
    add: Script,
    flip: Script,
    suppress: Script,
    unsuppress: Script,
}

impl RedisLedger {
    /// Checks the URLs; connects lazily, on the first call.
    pub fn new(opts: &RedisOptions, bounds: Bounds) -> Result<RedisLedger, RedisUnavailable> {
        Ok(RedisLedger {
            conn: Connection::new(opts)?,
            base: format!("{{{}rep}}:", opts.prefix),
            bounds,
            add: Script::new(include_str!("add.lua")),
            flip: Script::new(include_str!("flip.lua")),
            suppress: Script::new(include_str!("suppress.lua")),
            unsuppress: Script::new(include_str!("unsuppress.lua")),
        })
    }

    fn tenant_prefix(&self) -> String {
        format!("{}t:{}:", self.base, self.bounds.window_ms)
    }

    /// The Redis key of `tenant`'s hash.
    pub fn tenant_key(&self, tenant: &str) -> String {
        format!("{}{tenant}", self.tenant_prefix())
    }

    fn index_key(&self) -> String {
        format!("{}tenants:{}", self.base, self.bounds.window_ms)
    }

    fn sup_keys(&self) -> (String, String) {
        (format!("{}sup", self.base), format!("{}sup:at", self.base))
    }

    /// Adds `counts` to `tenant` at `now_ms` (and remembers that it sent `message_id`);
    /// its hash after.
    pub async fn add(
        &self,
        tenant: &str,
        counts: Counts,
        message_id: Option<&str>,
        now_ms: u64,
    ) -> Result<TenantHash, RedisUnavailable> {
        let b = self.bounds;
        let mut inv = self.add.key(self.tenant_key(tenant));
        inv.key(self.index_key());
        if let Some(id) = message_id {
            inv.key(format!("{}m:{id}", self.base));
        }
        inv.arg(now_ms / b.slot_ms)
            .arg(counts.sent)
            .arg(counts.bounces)
            .arg(counts.complaints)
            .arg(b.window_ms + b.slot_ms)
            .arg(now_ms)
            .arg(b.window_ms)
            .arg(b.max_tenants)
            .arg(tenant)
            .arg(self.tenant_prefix())
            .arg(SLOTS);
        let fields: Vec<String> = self.conn.invoke(&inv).await?;
        Ok(parse_hash(&fields))
    }

    /// `tenant`'s hash as it is.
    pub async fn read(&self, tenant: &str) -> Result<TenantHash, RedisUnavailable> {
        let fields: Vec<String> = self.query(Cmd::hgetall(self.tenant_key(tenant))).await?;
        Ok(parse_hash(&fields))
    }

    /// Sets `tenant`'s `over` flag; true when this call changed it.
    pub async fn flip(&self, tenant: &str, over: bool) -> Result<bool, RedisUnavailable> {
        let mut inv = self.flip.key(self.tenant_key(tenant));
        inv.arg(if over { "1" } else { "0" });
        let changed: i64 = self.conn.invoke(&inv).await?;
        Ok(changed == 1)
    }

    /// An operator's resume: the tenant's hash goes (false: there was none).
    pub async fn resume(&self, tenant: &str) -> Result<bool, RedisUnavailable> {
        let mut pipe = Pipeline::new();
        pipe.del(self.tenant_key(tenant))
            .zrem(self.index_key(), tenant)
            .ignore();
        let (deleted,): (i64,) = self.conn.call(Call::Pipe(&pipe)).await?;
        Ok(deleted == 1)
    }

    /// The tenant that sent `message_id` within the window.
    pub async fn tenant_of(&self, message_id: &str) -> Result<Option<String>, RedisUnavailable> {
        self.query(Cmd::get(format!("{}m:{message_id}", self.base)))
            .await
    }

    /// Marks `feedback_id` applied; false when it was already (within the window).
    pub async fn first_seen(&self, feedback_id: &str) -> Result<bool, RedisUnavailable> {
        let mut cmd = Cmd::new();
        cmd.arg("SET")
            .arg(self.feedback_key(feedback_id))
            .arg(1)
            .arg("NX")
            .arg("PX")
            .arg(self.bounds.window_ms);
        let set: Option<String> = self.query(cmd).await?;
        Ok(set.is_some())
    }

    /// Forgets `feedback_id` (its event could not be applied whole: it may come again).
    pub async fn forget_feedback(&self, feedback_id: &str) -> Result<(), RedisUnavailable> {
        self.query(Cmd::del(self.feedback_key(feedback_id))).await
    }

    fn feedback_key(&self, id: &str) -> String {
        format!("{}f:{id}", self.base)
    }

    /// Suppresses `addresses` (lowercased by the caller) at `now_ms`; how many are held.
    pub async fn suppress(
        &self,
        addresses: &[String],
        why: Option<&Suppression>,
        now_ms: u64,
    ) -> Result<u64, RedisUnavailable> {
        let (hash, index) = self.sup_keys();
        let mut inv = self.suppress.key(hash);
        inv.key(index)
            .arg(now_ms)
            .arg(self.bounds.suppress_ttl_ms)
            .arg(self.bounds.max_suppressed)
            .arg(why.map_or(String::new(), |s| {
                format!("{}|{}", s.reason.as_str(), s.date)
            }));
        for a in addresses {
            inv.arg(a);
        }
        self.conn.invoke(&inv).await
    }

    /// Why `address` (lowercased) is suppressed at `now_ms`, if it is.
    pub async fn suppression(
        &self,
        address: &str,
        now_ms: u64,
    ) -> Result<Option<Suppression>, RedisUnavailable> {
        let value: Option<String> = self.query(Cmd::hget(self.sup_keys().0, address)).await?;
        let Some(value) = value else {
            return Ok(None);
        };
        let mut parts = value.split('|');
        let (reason, date, added) = (parts.next(), parts.next(), parts.next());
        let added: u64 = added.and_then(|a| a.parse().ok()).unwrap_or(0);
        let reason = match reason {
            Some("complaint") => Kind::Complaint,
            _ => Kind::Bounce,
        };
        let alive = now_ms.saturating_sub(added) < self.bounds.suppress_ttl_ms;
        Ok(alive.then(|| Suppression {
            reason,
            date: date.unwrap_or_default().to_string(),
        }))
    }

    /// Lifts the suppression of `address` (lowercased); false when there was none.
    pub async fn unsuppress(&self, address: &str) -> Result<bool, RedisUnavailable> {
        let (hash, index) = self.sup_keys();
        let mut inv = self.unsuppress.key(hash);
        inv.key(index).arg(address);
        let removed: i64 = self.conn.invoke(&inv).await?;
        Ok(removed == 1)
    }

    /// Every tenant of the index with its hash, at most `max_tenants`, by key.
    pub async fn tenants(
        &self,
        now_ms: u64,
    ) -> Result<Vec<(String, TenantHash)>, RedisUnavailable> {
        let oldest = now_ms.saturating_sub(self.bounds.window_ms);
        let mut cmd = Cmd::new();
        cmd.arg("ZRANGE")
            .arg(self.index_key())
            .arg(format!("({oldest}"))
            .arg("+inf")
            .arg("BYSCORE")
            .arg("LIMIT")
            .arg(0)
            .arg(self.bounds.max_tenants);
        let mut names: Vec<String> = self.query(cmd).await?;
        names.sort();
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = Pipeline::new();
        for name in &names {
            pipe.hgetall(self.tenant_key(name));
        }
        let hashes: Vec<Vec<String>> = self.conn.call(Call::Pipe(&pipe)).await?;
        Ok(names
            .into_iter()
            .zip(hashes.iter().map(|h| parse_hash(h)))
            .filter(|(_, hash)| !hash.slots.is_empty())
            .collect())
    }

    async fn query<T: ::redis::FromRedisValue>(&self, cmd: Cmd) -> Result<T, RedisUnavailable> {
        self.conn.call(Call::Cmd(&cmd)).await
    }
}

/// A tenant's hash from `HGETALL`'s flat answer (field, value, field, value...).
fn parse_hash(fields: &[String]) -> TenantHash {
    let mut hash = TenantHash::default();
    let mut slots = std::collections::BTreeMap::<u64, Counts>::new();
    for pair in fields.chunks_exact(2) {
        let (field, value) = (pair[0].as_str(), pair[1].as_str());
        if field == "over" {
            hash.over = value == "1";
            continue;
        }
        let (Some(kind), Ok(slot), Ok(n)) = (
            field.chars().next(),
            field.get(1..).unwrap_or_default().parse::<u64>(),
            value.parse::<u64>(),
        ) else {
            continue;
        };
        let counts = slots.entry(slot).or_default();
        match kind {
            's' => counts.sent = n,
            'b' => counts.bounces = n,
            'c' => counts.complaints = n,
            _ => {}
        }
    }
    hash.slots = slots.into_iter().collect();
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_is_read_back_as_slots_and_the_flag() {
        let fields: Vec<String> = [
            "s10", "40", "b10", "6", "s11", "2", "over", "1", "junk", "x",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let held = parse_hash(&fields);
        assert!(held.over);
        let sent = |n| Counts {
            sent: n,
            ..Counts::default()
        };
        let ten = Counts {
            bounces: 6,
            ..sent(40)
        };
        assert_eq!(held.slots, vec![(10, ten), (11, sent(2))]);
    }
}
