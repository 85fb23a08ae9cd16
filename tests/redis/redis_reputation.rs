//! The reputation guard with `[redis]`: two relays on one private `redis-server` agree on
//! every tenant's standing, every suppression, every operator's resume and every event seen;
//! the window slides on a fake clock; with Redis down the guard fails open (mail flows, events
//! are refused so that SQS delivers them again).

use std::sync::Arc;
use std::time::Duration;

use mailsluice::clock::FakeClock;
use mailsluice::config::Config;
use mailsluice::redis::redis_options;
use mailsluice::reputation::{Applied, Reputation};
use prometheus_client::metrics::counter::Counter;

use crate::support::http::get;
use crate::support::redis::RedisServer;
use crate::support::relay::{config_text, Relay};
use crate::support::ses_events::bounce;
use crate::support::ses_like::SesLike;

fn guard_config(redis: &RedisServer, extra: &str) -> String {
    format!(
        "[reputation]\nkey = \"header:X-Tenant\"\nmin_messages = 20\nmin_bounces = 1\nmin_complaints = 1\n{extra}\n\
         [redis]\nurl = \"{}\"\ntimeout_ms = 500\n",
        redis.url()
    )
}

async fn relay(redis: &RedisServer, prefix: &'static str) -> Relay {
    let fwd = SesLike::with_prefix(prefix);
    Relay::start(
        &config_text("file://unused", "", &guard_config(redis, "")),
        fwd,
    )
    .await
}

fn message(tenant: &str) -> Vec<u8> {
    format!("X-Tenant: {tenant}\r\nSubject: hi\r\n\r\nbody\r\n").into_bytes()
}

async fn send(relay: &Relay, tenant: &str, rcpt: &str) -> (u16, String) {
    let mut c = relay.client().await;
    c.send_mail("a@example.com", &[rcpt], &message(tenant))
        .await
}

/// 40 messages of acme through `relay` (ids `<prefix>-0..39`), then 6 of them bounce,
/// applied through `relay`'s guard: 15 % of 40.
async fn pause_acme(relay: &Relay, prefix: &str) {
    for i in 0..40 {
        let (code, text) = send(relay, "acme", &format!("r{i}@example.com")).await;
        assert_eq!(code, 250, "{text}");
    }
    let guard = relay.reputation().unwrap();
    for i in 0..6 {
        let event = bounce(
            &format!("{prefix}-{i}"),
            &format!("f{i}"),
            &format!("r{i}@example.com"),
        );
        let applied = guard.apply_text(&event).await.unwrap();
        assert!(
            matches!(
                applied,
                Applied::Counted {
                    tenant: Some(_),
                    ..
                }
            ),
            "{applied:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_second_relay_refuses_a_tenant_the_first_ones_events_paused() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (a, b) = (relay(&redis, "a").await, relay(&redis, "b").await);
    pause_acme(&a, "a").await;
    let (code, text) = send(&b, "acme", "new@example.com").await;
    assert_eq!(code, 451, "{text}");
    assert!(
        text.starts_with("4.7.1 Tenant acme paused: bounce rate 15.0 % of 40 messages"),
        "{text}"
    );
    assert_eq!(
        send(&b, "beta", "new@example.com").await.0,
        250,
        "only acme is paused"
    );
    // A suppression added through the first is refused at RCPT by the second.
    let mut c = b.client().await;
    c.cmd("EHLO x").await;
    assert_eq!(c.cmd("MAIL FROM:<a@example.com>").await.0, 250);
    let (code, text) = c.cmd("RCPT TO:<R3@Example.com>").await;
    assert_eq!(code, 550, "{text}");
    assert!(
        text.starts_with("5.1.1 <R3@Example.com> suppressed: hard bounce on 2026-12-01"),
        "{text}"
    );
    assert_eq!(
        c.cmd("RCPT TO:<fine@example.com>").await.0,
        250,
        "the others go on"
    );
    // GET /reputation on the second shows what the first counted.
    let admin = b.start_admin().await;
    let (status, body) = get(admin, "/reputation").await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["paused"], 1, "{body}");
    assert_eq!(v["suppressed"], 6, "{body}");
    let acme = &v["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["key"] == "acme")
        .unwrap();
    assert_eq!(
        (acme["sent"].as_u64(), acme["bounces"].as_u64()),
        (Some(40), Some(6))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_on_one_relay_resumes_on_both_and_an_event_counts_once() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (a, b) = (relay(&redis, "a").await, relay(&redis, "b").await);
    pause_acme(&a, "a").await;
    assert_eq!(send(&a, "acme", "x@example.com").await.0, 451);
    assert_eq!(send(&b, "acme", "x@example.com").await.0, 451);
    // The same feedback id through the second relay: a repeat, nothing counted.
    let again = bounce("a-0", "f0", "r0@example.com");
    let applied = b.reputation().unwrap().apply_text(&again).await.unwrap();
    assert!(matches!(applied, Applied::Repeat(_)), "{applied:?}");
    let standings = b.reputation().unwrap().standings().await.unwrap();
    assert_eq!(standings[0].bounces, 6);
    // An operator resumes acme on the second relay (`POST /reputation/acme/resume` calls
    // this): both take it again.
    assert!(b.reputation().unwrap().resume("acme").await.unwrap());
    let (code, text) = send(&a, "acme", "x@example.com").await;
    assert_eq!(code, 250, "the first relay sees the resume: {text}");
    assert_eq!(send(&b, "acme", "x@example.com").await.0, 250);
}

fn fake_guard(redis: &RedisServer, clock: Arc<FakeClock>, errors: Counter) -> Reputation {
    let text = config_text(
        "file://o",
        "",
        &guard_config(redis, "suppress_ttl_ms = 1000"),
    );
    let config = Config::parse(&text).unwrap();
    let opts = redis_options(config.redis.as_ref().unwrap());
    Reputation::with_redis(config.reputation.as_ref().unwrap(), clock, &opts, errors).unwrap()
}

/// 2026-12-01T00:00:00Z.
const DEC_1: u64 = 1_796_083_200;

#[tokio::test]
async fn the_window_slides_on_the_clock_for_both_guards() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let clock = Arc::new(FakeClock::new(DEC_1));
    let one = fake_guard(&redis, clock.clone(), Counter::default());
    let two = fake_guard(&redis, clock.clone(), Counter::default());
    one.forwarded("acme", Some("m0"), 40).await;
    for i in 0..6 {
        two.apply_text(&bounce("m0", &format!("f{i}"), "gone@example.com"))
            .await
            .unwrap();
    }
    assert!(two.standing("acme").await.is_some());
    // The first guard took acme's good standing from its own count: it keeps it for REFRESH.
    assert!(one.standing("acme").await.is_none());
    clock.advance(mailsluice::reputation::store::redis::REFRESH);
    assert!(
        one.standing("acme").await.is_some(),
        "read again after REFRESH"
    );
    clock.advance(Duration::from_secs(12 * 3600) - mailsluice::reputation::store::redis::REFRESH);
    one.forwarded("acme", None, 40).await;
    let b = two.standing("acme").await.expect("6 of 80 is still 7.5 %");
    assert_eq!(b.sent, 80);
    clock.advance(Duration::from_secs(12 * 3600) - Duration::from_millis(1));
    assert!(
        two.standing("acme").await.is_some(),
        "the first slot is still in the window"
    );
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        two.standing("acme").await,
        None,
        "the bounces left the window"
    );
    assert_eq!(one.standing("acme").await, None);
    let standings = one.standings().await.unwrap();
    assert_eq!((standings[0].sent, standings[0].bounces), (40, 0));
    // The suppression (ttl 1 s) ended long ago on this clock.
    assert!(one.suppressed("gone@example.com").await.is_none());
    assert_eq!(one.suppressed_count().await.unwrap(), 0);
}

#[tokio::test]
async fn at_max_suppressed_and_max_tenants_the_oldest_goes_in_redis() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let clock = Arc::new(FakeClock::new(DEC_1));
    let text = config_text(
        "file://o",
        "",
        &guard_config(&redis, "max_suppressed = 3\nmax_tenants = 2"),
    );
    let config = Config::parse(&text).unwrap();
    let opts = redis_options(config.redis.as_ref().unwrap());
    let r = config.reputation.as_ref().unwrap();
    let g = Reputation::with_redis(r, clock.clone(), &opts, Counter::default()).unwrap();
    for i in 0..5 {
        clock.advance(Duration::from_millis(10));
        g.apply_text(&bounce("none", &format!("f{i}"), &format!("u{i}@x")))
            .await
            .unwrap();
    }
    assert_eq!(g.suppressed_count().await.unwrap(), 3);
    assert!(g.suppressed("u1@x").await.is_none(), "the oldest went");
    assert!(g.suppressed("u4@x").await.is_some());
    for t in ["t1", "t2", "t3"] {
        clock.advance(Duration::from_millis(10));
        g.forwarded(t, None, 1).await;
    }
    let keys: Vec<String> = g
        .standings()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.key)
        .collect();
    assert_eq!(keys, ["t2", "t3"], "t1 was used longest ago");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_the_guard_fails_open_and_events_wait() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let a = relay(&redis, "a").await;
    pause_acme(&a, "a").await;
    assert_eq!(send(&a, "acme", "x@example.com").await.0, 451);
    redis.stop();
    // Mail flows: no pause, no suppression while Redis cannot say.
    let (code, text) = send(&a, "acme", "r0@example.com").await;
    assert_eq!(code, 250, "{text}");
    let err = (a.reputation().unwrap())
        .apply_text(&bounce("a-1", "f-down", "r1@example.com"))
        .await
        .unwrap_err();
    assert!(!err.is_malformed(), "left for SQS to deliver again: {err}");
    assert!(a.metric("mailsluice_reputation_store_errors_total") >= 1.0);
    let admin = a.start_admin().await;
    assert_eq!(get(admin, "/reputation").await.0, 503);
}
