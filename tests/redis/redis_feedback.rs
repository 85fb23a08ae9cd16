//! What adaptive layers learn from upstream, shared in Redis: the learned limit lives in one
//! key per layer (per hash tag), is read and cut by the take script in its one round trip, and
//! so slows every replica, a new one included. The script's numbers are those of the pure
//! `Aimd` of the local layers.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::support::hidden_rate::HiddenRate;
use crate::support::memory::subject_of;
use crate::support::redis::{store_options, RedisServer};
use crate::support::relay::{config_text, Relay};
use crate::support::throttle::{ch, cut as throttled};
use mailsluice::clock::{FakeClock, Nanos};
use mailsluice::config::OnError;
use mailsluice::throttle::adaptive::{Adapt, Aimd, Learned};
use mailsluice::throttle::store::redis::RedisStore;
use mailsluice::throttle::store::{Decision, Store};
use mailsluice::throttle::{Charge, LayerSpec, SharedLayers, Teaches, Throttle};

const US: Nanos = 1_000;
const SEC: Nanos = 1_000_000_000;

fn adaptive_spec() -> LayerSpec {
    LayerSpec {
        adaptive: Some(1),
        adapt: Adapt::Multiplicative,
        ..LayerSpec::new("account", 10, Duration::from_secs(1))
    }
}

#[tokio::test]
async fn a_cut_seen_by_one_replica_slows_the_other_in_the_same_round_trip() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let clock = Arc::new(FakeClock::new(1_700_000_000));
    let replica = || {
        RedisStore::new(
            &store_options(vec![server.url()], false),
            &[adaptive_spec()],
        )
        .unwrap()
        .with_test_clock(clock.clone())
    };
    let (a, b) = (replica(), replica());
    for _ in 0..10 {
        assert_eq!(a.take(&[ch(0, "", 1)], 0).await.unwrap(), Decision::Granted);
    }
    assert_eq!(
        b.take(&[ch(0, "", 1)], 0).await.unwrap(),
        Decision::Refused {
            charge: 0,
            retry_after: 100_000 * US
        }
    );
    let before = server.calls("evalsha");
    // Upstream throttled a message of replica a: its next take cuts 10 -> 7 and reserves the
    // next token, 1/7 s away.
    let d = a.take(&[throttled(0, "", 1)], 10 * SEC).await.unwrap();
    assert_eq!(d, Decision::Reserved { wait: 142_858 * US });
    assert_eq!(a.learned_limit(0), Some(7));
    // Replica b, which saw no throttle reply, takes at 7/s too: behind a's token.
    let d = b.take(&[ch(0, "", 1)], 10 * SEC).await.unwrap();
    assert_eq!(d, Decision::Reserved { wait: 285_715 * US });
    assert_eq!(b.learned_limit(0), Some(7));
    assert_eq!(
        server.calls("evalsha") - before,
        2,
        "one round trip per take"
    );
    // A second reply within the interval is no second cut.
    a.take(&[throttled(0, "", 1)], 10 * SEC).await.unwrap();
    assert_eq!(a.learned_limit(0), Some(7));
    // Ten quiet intervals later the limit climbs, as the local layers' math says.
    clock.advance(Duration::from_secs(10));
    b.take(&[ch(0, "", 1)], 10 * SEC).await.unwrap();
    let aimd = Aimd {
        limit: 10,
        min: 1,
        interval: SEC,
        rule: Adapt::Multiplicative,
    };
    let (learned, _) = aimd.throttled(Learned::default(), 0, 1);
    assert_eq!(b.learned_limit(0), Some(aimd.effective(learned, 10 * SEC)));
    assert_eq!(b.learned_limit(0), Some(8));
    let peek = b.peek(0, "").await.unwrap();
    assert_eq!(peek.effective_limit, Some(8));
}

/// The measured rule in Redis is the pure one: a cut to 90 % of what was accepted over the
/// last interval (the window before counted by its part still inside), with the burst; a
/// lone reply after three messages cuts nothing.
#[tokio::test]
async fn the_script_measures_as_the_local_layers_do() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let spec = |name: &str| LayerSpec {
        adaptive: Some(2),
        ..LayerSpec::new(name, 100, Duration::from_secs(1))
    };
    let clock = Arc::new(FakeClock::new(SEC));
    let store = RedisStore::new(
        &store_options(vec![server.url()], false),
        &[spec("account"), spec("quiet")],
    )
    .unwrap()
    .with_test_clock(clock.clone());
    let aimd = spec("account").aimd().unwrap();
    let mut l = Learned::default();
    for _ in 0..40 {
        assert_eq!(
            store.take(&[ch(0, "", 1)], 0).await.unwrap(),
            Decision::Granted
        );
        l = aimd.granted(l, SEC, 1);
    }
    clock.advance(Duration::from_millis(1_500));
    store.take(&[throttled(0, "", 1)], 0).await.unwrap();
    let (l, cut) = aimd.throttled(l, SEC * 5 / 2, 1);
    assert_eq!(cut, Some((100, 17)));
    assert_eq!(store.learned_limit(0), Some(aimd.effective(l, SEC * 5 / 2)));
    let peek = store.peek(0, "").await.unwrap();
    assert_eq!((peek.limit, peek.effective_limit), (17, Some(17)));
    assert!(peek.remaining < 17, "{peek:?}");
    for _ in 0..3 {
        store.take(&[ch(1, "q", 1)], 0).await.unwrap();
    }
    store.take(&[throttled(1, "q", 1)], 0).await.unwrap();
    assert_eq!(store.learned_limit(1), Some(100));
}

/// Two replicas, each tenant on its own: bob's messages on the first, mallory's on the
/// second, where upstream throttles one of hers. The account layer (`key = "none"`) knows from
/// Redis that bob was granted meanwhile, so the reply is mallory's alone: her message waits
/// and the account's limit stays. A layer where mallory was alone is cut, as before.
#[tokio::test]
async fn one_tenants_reply_on_one_replica_does_not_cut_a_layer_another_replica_uses() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let clock = Arc::new(FakeClock::new(1_700_000_000));
    let spec = |name: &str| LayerSpec {
        adaptive: Some(1),
        max_wait: Duration::from_secs(30),
        ..LayerSpec::new(name, 100, Duration::from_secs(1))
    };
    let specs = vec![spec("account"), spec("alone")];
    let replica = || {
        let store = RedisStore::new(&store_options(vec![server.url()], false), &specs)
            .unwrap()
            .with_test_clock(clock.clone());
        let store = Arc::new(store);
        let shared = SharedLayers {
            store: store.clone(),
            layers: vec![0, 1],
            on_error: OnError::Reject,
        };
        (
            Throttle::with_shared(specs.clone(), clock.clone(), shared),
            store,
        )
    };
    let ((a, _), (b, b_store)) = (replica(), replica());
    let charge = |layer: usize, tenant: &str| Charge {
        layer,
        key: String::new(),
        cost: 1,
        fair: String::new(),
        blame: tenant.to_string(),
    };
    for _ in 0..10 {
        let permit = b
            .acquire(vec![charge(0, "mallory"), charge(1, "mallory")])
            .await;
        permit.expect("granted").delivered();
    }
    a.acquire(vec![charge(0, "bob")])
        .await
        .expect("granted")
        .delivered();
    let mallory = b
        .acquire(vec![charge(0, "mallory"), charge(1, "mallory")])
        .await;
    let again = mallory.expect("granted").throttled(true, Teaches::Every);
    b.acquire_again(again)
        .await
        .expect("granted after its wait")
        .delivered();
    let account = b_store.peek(0, "").await.unwrap().effective_limit;
    assert_eq!(
        account,
        Some(100),
        "bob was granted on the other replica: not cut"
    );
    let alone = b_store.peek(1, "").await.unwrap().effective_limit;
    assert_eq!(alone, Some(9), "90 % of the 11 mallory was granted");
}

async fn redis_relay(redis: &RedisServer, upstream: Arc<HiddenRate>) -> Relay {
    let layer = format!(
        "[[throttle]]\nname = \"account\"\nkey = \"none\"\ncost = \"recipients\"\nlimit = 20\n\
         interval_ms = 1000\nmax_wait_ms = 60000\nstore = \"redis\"\n\
         [redis]\nurl = \"{}\"\ntimeout_ms = 2000\n",
        redis.url()
    );
    Relay::start(&config_text("file://unused", "", &layer), upstream).await
}

async fn burst(relay: &Relay, prefix: &str, n: usize) -> Vec<u16> {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let mut c = relay.memory_connect();
            let msg = format!("Subject: {prefix}{i}\r\n\r\nbody\r\n");
            tokio::spawn(async move {
                c.greeting().await;
                let rcpt = ["user@example.net"];
                c.send_mail("app@example.com", &rcpt, msg.as_bytes())
                    .await
                    .0
            })
        })
        .collect();
    let mut codes = Vec::new();
    for t in tasks {
        codes.push(t.await.unwrap());
    }
    codes
}

/// Real time, no timing asserted: counts and learned limits only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_on_one_redis_layer_both_slow_down_after_one_sees_454s() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let upstream = HiddenRate::new(10);
    let a = redis_relay(&redis, upstream.clone()).await;
    let b = redis_relay(&redis, upstream.clone()).await;
    // Loads the take script, so the counts below are EVALSHA only.
    assert_eq!(burst(&b, "warm", 1).await, vec![250]);
    let before = redis.calls("evalsha");
    let codes = burst(&a, "a", 30).await;
    assert!(codes.iter().all(|&c| c == 250), "{codes:?}");
    let seen = upstream.rate_refusals();
    assert!(seen > 0, "relay a met upstream's 454s");
    let limit_a = a.throttle.effective_limit(0).unwrap();
    assert!(limit_a < 20, "{limit_a}");
    // Relay b never met a 454: it runs at the limit learned in Redis from its first take.
    assert_eq!(burst(&b, "b", 5).await, vec![250; 5]);
    let limit_b = b.throttle.effective_limit(0).unwrap();
    assert!(limit_b < 20, "{limit_b}");
    assert_eq!(
        upstream.rate_refusals(),
        seen,
        "b sent nothing upstream refused"
    );
    // Exactly once upstream; one take (one round trip) before each send, and nothing else.
    let accepted = upstream.accepted();
    let subjects: HashSet<String> = accepted.iter().map(|(_, m, _)| subject_of(m)).collect();
    assert_eq!((accepted.len(), subjects.len()), (36, 36));
    let sends = 35 + seen;
    assert_eq!(redis.calls("evalsha") - before, sends);
}
