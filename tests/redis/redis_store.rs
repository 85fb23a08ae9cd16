//! What only the Redis store has: its keys (layout, expiry, fresh keys on a config change),
//! one round trip per message, Redis's own clock, and Redis Cluster.

use std::sync::Arc;
use std::time::Duration;

use crate::support::redis::{store_options, RedisCluster, RedisServer};
use crate::support::throttle::ch;
use mailsluice::clock::{FakeClock, Nanos};
use mailsluice::throttle::store::redis::{slot, RedisStore};
use mailsluice::throttle::store::{Decision, Store};
use mailsluice::throttle::{LayerSpec, Refill};

const MS: Nanos = 1_000_000;

/// 0 `tenant` drip 10/s; 1 `daily` fixed window 3 a day; 2 `account` drip 100/s.
fn specs() -> Vec<LayerSpec> {
    vec![
        LayerSpec::new("tenant", 10, Duration::from_secs(1)),
        LayerSpec {
            refill: Refill::FixedWindow,
            ..LayerSpec::new("daily", 3, Duration::from_secs(86_400))
        },
        LayerSpec::new("account", 100, Duration::from_secs(1)),
    ]
}

fn store(server: &RedisServer, specs: &[LayerSpec]) -> RedisStore {
    RedisStore::new(&store_options(vec![server.url()], false), specs).unwrap()
}

#[tokio::test]
async fn one_round_trip_per_message_on_redis_time() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    // 10 an hour: however slow the machine, no token comes back while the test runs.
    let mut slow = specs();
    slow[0] = LayerSpec::new("tenant", 10, Duration::from_secs(3_600));
    let s = store(&server, &slow);
    let both = [ch(0, "acme", 1), ch(2, "", 1)];
    assert_eq!(s.take(&both, 0).await.unwrap(), Decision::Granted); // loads the script
    let before = server.calls("evalsha");
    for _ in 0..9 {
        assert_eq!(s.take(&both, 0).await.unwrap(), Decision::Granted);
    }
    assert_eq!(server.calls("evalsha") - before, 9);
    // On Redis's clock: the tenant's bucket is empty, the next token comes within 360 s.
    let hour = 3_600_000 * MS;
    match s.take(&both, hour).await.unwrap() {
        Decision::Reserved { wait } => assert!(wait > 0 && wait <= hour / 10, "{wait}"),
        other => panic!("{other:?}"),
    }
    let keys = server.keys();
    let tenant = s.key_of(0, "acme").unwrap();
    assert!(keys.contains(&tenant), "{keys:?}");
    assert!(tenant.starts_with("mailsluice:tenant:") && tenant.ends_with(":{acme}"));
}

#[tokio::test]
async fn keys_expire_when_the_bucket_is_full_again() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let clock = Arc::new(FakeClock::new(1_700_000_000));
    let s = store(&server, &specs()).with_test_clock(clock.clone());
    assert_eq!(
        s.take(&[ch(0, "k", 5)], 0).await.unwrap(),
        Decision::Granted
    );
    let key = s.key_of(0, "k").unwrap();
    let pttl: i64 = server.cli(&["PTTL", &key]).trim().parse().unwrap();
    assert!(
        (400..=500).contains(&pttl),
        "drip: full again in 500 ms, {pttl}"
    );
    s.give_back(&[ch(0, "k", 5)]).await.unwrap();
    assert_eq!(
        server.cli(&["EXISTS", &key]).trim(),
        "0",
        "a full bucket needs no key"
    );
    assert_eq!(
        s.take(&[ch(1, "k", 1)], 0).await.unwrap(),
        Decision::Granted
    );
    let key = s.key_of(1, "k").unwrap();
    let pttl: i64 = server.cli(&["PTTL", &key]).trim().parse().unwrap();
    assert!(
        pttl > 86_399_000 && pttl <= 86_400_000,
        "window: at its end, {pttl}"
    );
}

#[tokio::test]
async fn a_changed_limit_uses_fresh_keys() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let old = store(&server, &specs());
    assert_eq!(
        old.take(&[ch(0, "k", 10)], 0).await.unwrap(),
        Decision::Granted
    );
    let mut changed = specs();
    changed[0].limit = 20;
    changed[0].burst = 20;
    let new = store(&server, &changed);
    assert_ne!(old.key_of(0, "k"), new.key_of(0, "k"));
    assert_eq!(new.peek(0, "k").await.unwrap().remaining, 20);
    assert_eq!(
        new.take(&[ch(0, "k", 20)], 0).await.unwrap(),
        Decision::Granted
    );
    assert_eq!(old.peek(0, "k").await.unwrap().remaining, 0);
    assert_eq!(server.keys().len(), 2);
}

#[tokio::test]
async fn cluster_grants_refuses_and_takes_one_key_in_one_slot() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let clock = Arc::new(FakeClock::new(1_700_000_000));
    let s = RedisStore::new(&store_options(cluster.urls(), true), &specs())
        .unwrap()
        .with_test_clock(clock.clone());
    // The buckets of one key share a slot (and our slot is Redis's).
    let (tenant, daily) = (s.key_of(0, "acme").unwrap(), s.key_of(1, "acme").unwrap());
    assert_eq!(cluster.keyslot(&tenant), slot(&tenant));
    assert_eq!(cluster.keyslot(&tenant), cluster.keyslot(&daily));
    let both = [ch(0, "acme", 2), ch(1, "acme", 2)];
    assert_eq!(s.take(&both, 0).await.unwrap(), Decision::Granted); // loads the script
    let before = cluster.calls("evalsha");
    let one = [ch(0, "acme", 1), ch(1, "acme", 1)];
    assert_eq!(s.take(&one, 0).await.unwrap(), Decision::Granted);
    assert_eq!(cluster.calls("evalsha") - before, 1, "one call, one slot");
    let d = s.take(&one, 0).await.unwrap();
    let refused = Decision::Refused {
        charge: 1,
        retry_after: 86_400_000 * MS,
    };
    assert_eq!(d, refused);
    assert_eq!(s.peek(0, "acme").await.unwrap().remaining, 7);
    // Drip on the cluster: 7 left, then a wait of exactly one token.
    assert_eq!(
        s.take(&[ch(0, "acme", 7)], 0).await.unwrap(),
        Decision::Granted
    );
    let d = s.take(&[ch(0, "acme", 1)], 0).await.unwrap();
    let refused = Decision::Refused {
        charge: 0,
        retry_after: 100 * MS,
    };
    assert_eq!(d, refused);
    // Layers keyed differently (a tenant and the account): one call per slot, all or nothing.
    let spread = [ch(0, "bob", 1), ch(2, "", 100)];
    assert_ne!(
        cluster.keyslot(&s.key_of(0, "bob").unwrap()),
        cluster.keyslot(&s.key_of(2, "").unwrap())
    );
    assert_eq!(s.take(&spread, 0).await.unwrap(), Decision::Granted);
    let d = s.take(&spread, 0).await.unwrap();
    assert!(matches!(d, Decision::Refused { charge: 1, .. }), "{d:?}");
    assert_eq!(s.peek(0, "bob").await.unwrap().remaining, 9, "given back");
}
