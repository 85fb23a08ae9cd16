//! Throttling in the SMTP dialogue on tokio's paused clock: the runtime jumps to the next
//! timer whenever every task is idle, so waits of seconds take no real time and the
//! forwarder's timestamps are exact. The sessions run over in-memory streams: over TCP the
//! runtime cannot see bytes in flight in the kernel and may jump the clock mid-dialogue
//! (firing the idle timeout). `tests/throttle/throttling_tcp.rs` covers the same path over real TCP in
//! real time, with upper bounds only.

use std::time::Duration;

use crate::support::host::scratch_path;
use crate::support::memory::{subject_of, without_received, MemoryForwarder};
use crate::support::relay::{config_text, memory_relay, Relay};
use mailsluice::upstream::UpstreamError;
use tokio::task::JoinHandle;
use tokio::time::Instant;

fn tenant_layer(limit: u64, burst: u64, extra: &str) -> String {
    format!(
        "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\ncost = \"message\"\n\
         limit = {limit}\ninterval_ms = 1000\nburst = {burst}\n{extra}\n"
    )
}

fn message(tenant: &str, subject: &str) -> Vec<u8> {
    format!("X-Tenant: {tenant}\r\nSubject: {subject}\r\n\r\nbody\r\n").into_bytes()
}

/// Sends one message on a new connection, in a task of its own.
pub(crate) fn send(relay: &Relay, tenant: &str, subject: &str) -> JoinHandle<(u16, String)> {
    let msg = message(tenant, subject);
    let mut c = relay.memory_connect();
    tokio::spawn(async move {
        c.greeting().await;
        c.send_mail("app@example.com", &["user@example.net"], &msg)
            .await
    })
}

/// Lets the relay run, without moving the clock, until `cond` holds.
pub(crate) async fn until(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..200_000 {
        if cond() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("never happened: {what}");
}

fn waiting(relay: &Relay, layer: &str, key: &str) -> usize {
    relay.throttle.peek(layer, key).unwrap().waiting
}

fn remaining(relay: &Relay, layer: &str, key: &str) -> u64 {
    relay.throttle.peek(layer, key).unwrap().remaining
}

/// Over every window [t_i, t_j], grants never exceed `burst + limit * t / interval`.
fn assert_within_rate(times: &[Instant], burst: u128, limit: u128, interval: Duration) {
    let interval = interval.as_nanos();
    for i in 0..times.len() {
        for j in i..times.len() {
            let n = (j - i + 1) as u128;
            let t = (times[j] - times[i]).as_nanos();
            assert!(
                n * interval <= burst * interval + limit * t,
                "{n} grants within {t} ns exceed burst {burst} + limit {limit}"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn wait_mode_sends_all_in_arrival_order_within_the_rate() {
    let (relay, fwd) = memory_relay("", &tenant_layer(5, 5, "")).await;
    let mut clients = Vec::new();
    for i in 0..15 {
        clients.push(send(&relay, "acme", &format!("m{i:02}")));
        // Message i has reached the throttle: forwarded, or waiting in the queue.
        until("message reached the throttle", || {
            fwd.messages().len() + waiting(&relay, "tenant", "acme") == i + 1
        })
        .await;
    }
    for c in clients {
        let (code, text) = c.await.unwrap();
        assert_eq!(code, 250, "{text}");
    }
    let subjects: Vec<String> = fwd.messages().iter().map(|(_, m)| subject_of(m)).collect();
    let expected: Vec<String> = (0..15).map(|i| format!("m{i:02}")).collect();
    assert_eq!(subjects, expected, "upstream saw them in arrival order");
    let times = fwd.times();
    assert_within_rate(&times, 5, 5, Duration::from_secs(1));
    // Under saturation the grants are not late either: 10 after the burst take 2 s.
    assert_eq!(times[14] - times[0], Duration::from_secs(2));
    relay.stop().await;
}

#[tokio::test(start_paused = true)]
async fn one_tenants_burst_does_not_delay_another() {
    let (relay, fwd) = memory_relay("", &tenant_layer(1, 1, "")).await;
    let first = send(&relay, "busy", "b0");
    until("b0 forwarded", || fwd.messages().len() == 1).await;
    let queued: Vec<_> = (1..4)
        .map(|i| send(&relay, "busy", &format!("b{i}")))
        .collect();
    until("three waiting", || waiting(&relay, "tenant", "busy") == 3).await;
    let start = Instant::now();
    let (code, _) = send(&relay, "calm", "c0").await.unwrap();
    assert_eq!(code, 250);
    assert_eq!(
        Instant::now(),
        start,
        "the other tenant's first message did not wait"
    );
    assert_eq!(waiting(&relay, "tenant", "busy"), 3);
    first.await.unwrap();
    for q in queued {
        assert_eq!(q.await.unwrap().0, 250);
    }
    relay.stop().await;
}

#[tokio::test(start_paused = true)]
async fn reject_mode_answers_451_with_the_time_until_tokens() {
    let (relay, fwd) = memory_relay("", &tenant_layer(1, 2, "mode = \"reject\"")).await;
    for i in 0..2 {
        let r = send(&relay, "acme", &format!("ok{i}")).await.unwrap();
        assert_eq!(r.0, 250, "{r:?}");
    }
    tokio::time::advance(Duration::from_millis(250)).await;
    let (code, text) = send(&relay, "acme", "refused").await.unwrap();
    assert_eq!(code, 451);
    assert!(text.starts_with("4.7.1 "), "{text}");
    // A quarter of a token came back in 250 ms: the next whole token is 750 ms away.
    assert!(text.ends_with("retry after 0.750 s"), "{text}");
    assert_eq!(fwd.messages().len(), 2);
    relay.stop().await;
}

#[tokio::test(start_paused = true)]
async fn wait_longer_than_max_wait_is_refused_at_once_with_the_estimate() {
    let (relay, fwd) = memory_relay("", &tenant_layer(1, 1, "max_wait_ms = 1500")).await;
    assert_eq!(send(&relay, "acme", "now").await.unwrap().0, 250);
    let second = send(&relay, "acme", "in 1 s");
    until("second waiting", || waiting(&relay, "tenant", "acme") == 1).await;
    let start = Instant::now();
    let (code, text) = send(&relay, "acme", "in 2 s").await.unwrap();
    assert_eq!(Instant::now(), start, "refused at once, not after waiting");
    assert_eq!(code, 451);
    assert!(text.ends_with("retry after 2.000 s"), "{text}");
    assert_eq!(second.await.unwrap().0, 250);
    assert_eq!(fwd.messages().len(), 2);
    relay.stop().await;
}

#[tokio::test(start_paused = true)]
async fn full_queue_answers_451() {
    let (relay, _) = memory_relay("", &tenant_layer(1, 1, "max_queue = 1")).await;
    assert_eq!(send(&relay, "acme", "now").await.unwrap().0, 250);
    let second = send(&relay, "acme", "waits");
    until("second waiting", || waiting(&relay, "tenant", "acme") == 1).await;
    let (code, text) = send(&relay, "acme", "no room").await.unwrap();
    assert_eq!(code, 451, "{text}");
    assert!(text.contains("retry after"), "{text}");
    assert_eq!(second.await.unwrap().0, 250);
    relay.stop().await;
}

#[tokio::test(start_paused = true)]
async fn cost_over_burst_is_554_and_limits_rcptmax_is_advertised() {
    let layer =
        "[[throttle]]\nname = \"rcpts\"\nkey = \"none\"\ncost = \"recipients\"\nlimit = 3\n\
                 [[throttle]]\nname = \"tier\"\nkey = \"none\"\nlimit = 1\n\
                 match = { header = \"X-Tier\", value = \"basic\" }\n";
    let (relay, fwd) = memory_relay("", layer).await;
    let mut c = relay.memory_client().await;
    let (_, ehlo) = c.cmd("EHLO x").await;
    // The matched layer (burst 1) applies only to some messages: it does not lower RCPTMAX.
    assert!(ehlo.lines().any(|l| l == "LIMITS RCPTMAX=3"), "{ehlo}");
    let rcpts = ["a@x.example", "b@x.example", "c@x.example", "d@x.example"];
    let (code, text) = c
        .send_mail("s@example.com", &rcpts, b"Subject: big\r\n\r\nx\r\n")
        .await;
    assert_eq!(code, 554);
    assert!(
        text.starts_with("5.5.3") && text.contains("costs 4") && text.contains("at most 3"),
        "{text}"
    );
    assert!(fwd.messages().is_empty());
    assert_eq!(remaining(&relay, "rcpts", ""), 3, "nothing taken");
    relay.stop().await;
}

#[tokio::test(start_paused = true)]
async fn refusal_by_a_second_layer_gives_back_the_first() {
    let layers = format!(
        "{}[[throttle]]\nname = \"account\"\nkey = \"none\"\ncost = \"message\"\nlimit = 1\nmode = \"reject\"\n",
        tenant_layer(10, 10, "")
    );
    let (relay, _) = memory_relay("", &layers).await;
    assert_eq!(send(&relay, "acme", "1").await.unwrap().0, 250);
    assert_eq!(remaining(&relay, "tenant", "acme"), 9);
    let (code, _) = send(&relay, "acme", "2").await.unwrap();
    assert_eq!(code, 451);
    assert_eq!(
        remaining(&relay, "tenant", "acme"),
        9,
        "the tenant layer's token came back"
    );
    relay.stop().await;
}

fn tier_layers() -> String {
    let mut s = String::new();
    for (tier, cap) in [("basic", 2), ("cx", 5)] {
        s.push_str(&format!(
            "[[throttle]]\nname = \"daily-{tier}\"\nkey = \"header:X-Tenant\"\ncost = \"message\"\n\
             limit = {cap}\ninterval_ms = 86400000\nrefill = \"fixed_window\"\nmode = \"reject\"\n\
             match = {{ header = \"X-Tier\", value = \"{tier}\" }}\n"
        ));
    }
    s
}

async fn send_tier(relay: &Relay, tier: &str) -> (u16, String) {
    let msg = format!("X-Tenant: acme\r\nX-Tier: {tier}\r\nSubject: t\r\n\r\nx\r\n");
    relay
        .memory_client()
        .await
        .send_mail("a@example.com", &["b@example.net"], msg.as_bytes())
        .await
}

#[tokio::test(start_paused = true)]
async fn tiers_are_separate_buckets_and_the_window_refills_at_first_take_plus_interval() {
    let (relay, _) = memory_relay("", &tier_layers()).await;
    let first_take = Instant::now();
    assert_eq!(send_tier(&relay, "basic").await.0, 250);
    tokio::time::advance(Duration::from_secs(3600)).await;
    let r = send_tier(&relay, "basic").await;
    assert_eq!(r.0, 250, "{r:?}");
    let (code, text) = send_tier(&relay, "basic").await;
    assert_eq!(code, 451, "basic is exhausted: {text}");
    assert!(
        text.ends_with("retry after 82800.000 s"),
        "the window ends 24 h after the first take: {text}"
    );
    assert_eq!(
        send_tier(&relay, "cx").await.0,
        250,
        "a bump to cx starts a fresh window"
    );
    let day = Duration::from_secs(86400);
    tokio::time::advance(first_take + day - Duration::from_millis(1) - Instant::now()).await;
    assert_eq!(
        send_tier(&relay, "basic").await.0,
        451,
        "not extended, not early"
    );
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(
        send_tier(&relay, "basic").await.0,
        250,
        "full again at first take + interval"
    );
    relay.stop().await;
}

#[tokio::test(start_paused = true)]
async fn upstream_failure_gives_tokens_back_unless_charge_failures() {
    for (charge_failures, expected) in [(false, 5), (true, 4)] {
        let (relay, fwd) = memory_relay(
            "",
            &tenant_layer(5, 5, &format!("charge_failures = {charge_failures}")),
        )
        .await;
        fwd.fail_with(Some(UpstreamError::Rejected {
            code: 450,
            enhanced: Some("4.2.0".into()),
            text: "busy".into(),
        }));
        assert_eq!(send(&relay, "acme", "x").await.unwrap().0, 450);
        assert_eq!(
            remaining(&relay, "tenant", "acme"),
            expected,
            "charge_failures = {charge_failures}"
        );
        relay.stop().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_waiting_client_that_leaves_takes_nothing_and_the_next_moves_up() {
    let (relay, fwd) = memory_relay("", &tenant_layer(1, 1, "")).await;
    let start = Instant::now();
    assert_eq!(send(&relay, "acme", "first").await.unwrap().0, 250);
    let mut leaver = relay.memory_client().await;
    leaver.cmd("EHLO x").await;
    leaver.cmd("MAIL FROM:<a@example.com>").await;
    leaver.cmd("RCPT TO:<b@example.net>").await;
    leaver.cmd("DATA").await;
    leaver.send(&message("acme", "abandoned")).await;
    leaver.send(b".\r\n").await;
    until("leaver waiting", || waiting(&relay, "tenant", "acme") == 1).await;
    let stayer = send(&relay, "acme", "stayer");
    until("stayer waiting", || waiting(&relay, "tenant", "acme") == 2).await;
    drop(leaver);
    until("leaver gone", || waiting(&relay, "tenant", "acme") == 1).await;
    assert_eq!(stayer.await.unwrap().0, 250);
    assert_eq!(
        Instant::now() - start,
        Duration::from_secs(1),
        "the stayer took the leaver's turn"
    );
    let subjects: Vec<String> = fwd.messages().iter().map(|(_, m)| subject_of(m)).collect();
    assert_eq!(subjects, ["first", "stayer"]);
    relay.stop().await;
}

#[tokio::test(start_paused = true)]
async fn quit_pipelined_after_the_dot_is_answered_after_the_message() {
    let (relay, fwd) = memory_relay("", &tenant_layer(1, 1, "")).await;
    assert_eq!(send(&relay, "acme", "first").await.unwrap().0, 250);
    let mut c = relay.memory_client().await;
    c.cmd("EHLO x").await;
    c.cmd("MAIL FROM:<a@example.com>").await;
    c.cmd("RCPT TO:<b@example.net>").await;
    c.cmd("DATA").await;
    c.send(&message("acme", "waits")).await;
    c.send(b".\r\nQUIT\r\n").await;
    let (code, text) = c.reply().await;
    assert_eq!(code, 250, "{text}");
    assert_eq!(c.reply().await.0, 221);
    assert_eq!(fwd.messages().len(), 2);
    relay.stop().await;
}

/// Tokens at 1, 2 and 3 s, a grace of half a second: none can go (`throttle_drain.rs` has
/// the waiters that can).
#[tokio::test(start_paused = true)]
async fn shutdown_answers_421_to_every_waiter_whose_tokens_come_after_the_grace() {
    let (relay, fwd) = memory_relay("shutdown_grace_ms = 500", &tenant_layer(1, 1, "")).await;
    assert_eq!(send(&relay, "acme", "first").await.unwrap().0, 250);
    let waiters: Vec<_> = (0..3)
        .map(|i| send(&relay, "acme", &format!("w{i}")))
        .collect();
    until("three waiting", || waiting(&relay, "tenant", "acme") == 3).await;
    relay.trigger_shutdown();
    for w in waiters {
        let (code, text) = w.await.unwrap();
        assert_eq!(code, 421, "{text}");
        assert!(text.starts_with("4.3.2"), "{text}");
    }
    assert_eq!(fwd.messages().len(), 1);
    relay.stop().await;
}

#[tokio::test(start_paused = true)]
async fn key_header_is_stripped_unless_configured_otherwise() {
    for (strip, present) in [("", false), ("strip_key_header = false", true)] {
        let (relay, fwd) = memory_relay("", &tenant_layer(5, 5, strip)).await;
        assert_eq!(send(&relay, "acme", "s").await.unwrap().0, 250);
        let (_, msg) = &fwd.messages()[0];
        let client_part = String::from_utf8_lossy(without_received(msg)).to_string();
        assert_eq!(
            client_part.contains("X-Tenant: acme\r\n"),
            present,
            "{client_part}"
        );
        assert!(client_part.starts_with(if present { "X-Tenant" } else { "Subject: s" }));
        relay.stop().await;
    }
}

#[tokio::test(start_paused = true)]
async fn reload_keeps_unchanged_buckets_and_starts_changed_ones_fresh() {
    // After a reload the relay forwards through the config's own upstream: a scratch dir.
    let outbox = scratch_path("reload");
    let url = format!("file://{}", outbox.display());
    let layer = |limit: u64, extra: &str| {
        config_text(
            &url,
            extra,
            &tenant_layer(limit, limit, "mode = \"reject\"\ninterval_ms_unused = 0"),
        )
        .replace("interval_ms_unused = 0\n", "")
    };
    let fwd = MemoryForwarder::new();
    let relay = Relay::start(&layer(2, ""), fwd.clone()).await;
    for i in 0..2 {
        assert_eq!(send(&relay, "acme", &format!("{i}")).await.unwrap().0, 250);
    }
    assert_eq!(send(&relay, "acme", "over").await.unwrap().0, 451);
    // Another key changes, the layer does not: its buckets carry over.
    let same = mailsluice::config::Config::parse(&layer(2, "max_recipients = 50")).unwrap();
    assert!(mailsluice::serve::reload::reload(&relay.live, same)
        .unwrap()
        .is_empty());
    assert_eq!(send(&relay, "acme", "still over").await.unwrap().0, 451);
    let current = relay.live.current().unwrap();
    assert_eq!(current.setup.config.smtp.max_recipients.get(), 50);
    assert_eq!(
        current
            .setup
            .throttle
            .peek("tenant", "acme")
            .unwrap()
            .remaining,
        0
    );
    // A changed layer starts on fresh buckets at the new limit.
    let changed = mailsluice::config::Config::parse(&layer(3, "")).unwrap();
    mailsluice::serve::reload::reload(&relay.live, changed).unwrap();
    assert_eq!(send(&relay, "acme", "fresh").await.unwrap().0, 250);
    assert_eq!(
        relay
            .live
            .current()
            .unwrap()
            .setup
            .throttle
            .peek("tenant", "acme")
            .unwrap()
            .remaining,
        2
    );
    relay.stop().await;
    let _ = std::fs::remove_dir_all(&outbox);
}

#[tokio::test]
async fn a_rcpt_domain_layer_charges_each_domain_of_a_message_its_own_recipients() {
    let layer = "[[throttle]]\nname = \"domain\"\nkey = \"rcpt-domain\"\ncost = \"recipients\"\n\
                 limit = 2\ninterval_ms = 3600000\nmode = \"reject\"\n";
    let (relay, fwd) = memory_relay("", layer).await;
    let mut client = relay.client().await;
    let rcpts = ["a@x.example", "b@X.example", "c@y.example"];
    let (code, text) = client
        .send_mail("app@example.com", &rcpts, b"Subject: split\r\n\r\nbody\r\n")
        .await;
    assert_eq!(
        code, 250,
        "three recipients, but at most two per domain: {text}"
    );
    assert_eq!(fwd.messages().len(), 1);
    let remaining = |key: &str| relay.throttle.peek("domain", key).unwrap().remaining;
    assert_eq!((remaining("x.example"), remaining("y.example")), (0, 1));
    let (code, text) = client
        .send_mail(
            "app@example.com",
            &["d@y.example", "e@x.example"],
            b"Subject: x full\r\n\r\n.\r\n",
        )
        .await;
    assert_eq!(code, 451, "x.example's bucket is empty: {text}");
    assert_eq!(remaining("y.example"), 1, "a refused message takes nothing");
}
