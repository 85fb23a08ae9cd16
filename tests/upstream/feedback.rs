//! Upstream feedback on tokio's paused clock: an SES-like upstream with a hidden bucket
//! (`HiddenRate`, in memory, on the same clock) behind a relay whose account layer is set
//! above, at or below the hidden rate. Throttle replies are absorbed (the message waits again
//! and goes again), adaptive layers learn the real rate, a message whose budget runs out gets
//! the relay's own `451 4.7.1`, and a quota reply pauses the upstream.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::hidden_rate::{ses_refusal, HiddenRate, SES_QUOTA, SES_RATE};
use crate::support::http::get;
use crate::support::memory::{subject_of, MemoryForwarder};
use crate::support::relay::{config_text, smtp_relay, Client, Relay};
use crate::support::upstream::TestUpstream;
use mailsluice::upstream::{Feedback, Forwarder, UpstreamError};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// One `key = "none"` layer (adaptive by default) of `limit` recipients a second.
fn account_layer(limit: u64, extra: &str) -> String {
    format!(
        "[[throttle]]\nname = \"account\"\nkey = \"none\"\ncost = \"recipients\"\n\
         limit = {limit}\ninterval_ms = 1000\nmax_wait_ms = 60000\n{extra}\n"
    )
}

async fn relay(layer: &str, upstream: &str, forwarder: Arc<dyn Forwarder>) -> Relay {
    Relay::start(
        &config_text("file://unused", "", &format!("{upstream}\n{layer}")),
        forwarder,
    )
    .await
}

/// `clients` clients on their own connections, each sending `each` messages in turn;
/// every reply, in order per client.
fn clients(relay: &Relay, clients: usize, each: usize) -> Vec<JoinHandle<Vec<(u16, String)>>> {
    (0..clients)
        .map(|c| {
            let mut client = relay.memory_connect();
            tokio::spawn(async move {
                client.greeting().await;
                let mut replies = Vec::new();
                for m in 0..each {
                    let msg = format!("Subject: c{c}m{m}\r\n\r\nbody\r\n");
                    let rcpt = ["user@example.net"];
                    replies.push(
                        client
                            .send_mail("app@example.com", &rcpt, msg.as_bytes())
                            .await,
                    );
                }
                replies
            })
        })
        .collect()
}

async fn replies(tasks: Vec<JoinHandle<Vec<(u16, String)>>>) -> Vec<(u16, String)> {
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}

/// 200 messages from 40 clients against a hidden rate of 10/s, the relay at `limit`/s.
async fn run(limit: u64) -> (Relay, Arc<HiddenRate>, Vec<(u16, String)>, Duration) {
    let hidden = HiddenRate::new(10);
    let relay = relay(&account_layer(limit, ""), "", hidden.clone()).await;
    let started = Instant::now();
    let replies = replies(clients(&relay, 40, 5)).await;
    (relay, hidden, replies, started.elapsed())
}

fn assert_each_once(hidden: &HiddenRate, n: usize) {
    let subjects: HashSet<String> = hidden
        .accepted()
        .iter()
        .map(|(_, m, _)| subject_of(m))
        .collect();
    assert_eq!(
        hidden.accepted().len(),
        n,
        "upstream holds each message once"
    );
    assert_eq!(subjects.len(), n, "no message twice upstream");
}

#[tokio::test(start_paused = true)]
async fn at_twice_the_hidden_rate_every_message_goes_once_and_the_layer_learns() {
    let (relay, hidden, replies, took) = run(20).await;
    let refused: Vec<_> = replies.iter().filter(|(c, _)| *c != 250).collect();
    assert!(refused.is_empty(), "every client gets 250: {refused:?}");
    assert_each_once(&hidden, 200);
    let rate_454 = hidden.rate_refusals();
    assert!(
        rate_454 <= 30,
        "{rate_454} upstream 454s for 200 messages (> 15 %)"
    );
    let rate = 200.0 / took.as_secs_f64();
    assert!(rate >= 8.0, "delivered {rate:.2}/s against a hidden 10/s");
    let limit = relay.throttle.effective_limit(0).unwrap();
    assert!(limit < 20, "the layer learned a lower limit: {limit}");
    let peek = relay.throttle.peek("account", "").unwrap();
    assert_eq!(peek.effective_limit, Some(limit));
    assert!(
        relay.metric("mailsluice_upstream_throttled_total{reason=\"rate\",upstream=\"default\"}")
            >= 1.0
    );
    assert_eq!(
        relay.metric("mailsluice_layer_limit{layer=\"account\"}"),
        limit as f64
    );
}

#[tokio::test(start_paused = true)]
async fn at_half_the_hidden_rate_nothing_is_throttled_and_nothing_cut() {
    let (relay, hidden, replies, _) = run(5).await;
    assert!(replies.iter().all(|(c, _)| *c == 250), "{replies:?}");
    assert_each_once(&hidden, 200);
    assert_eq!(hidden.rate_refusals(), 0);
    assert_eq!(relay.throttle.effective_limit(0), Some(5));
}

#[tokio::test(start_paused = true)]
async fn a_message_whose_budget_runs_out_gets_the_relays_451_and_nothing_goes_upstream() {
    let fwd = MemoryForwarder::new();
    fwd.fail_with(Some(ses_refusal(454, SES_RATE)));
    let layer = account_layer(20, "max_wait_ms = 5000");
    let layer = layer.replace("max_wait_ms = 60000\n", "");
    let relay = relay(&layer, "", fwd.clone()).await;
    let replies = replies(clients(&relay, 1, 1)).await;
    let (code, text) = &replies[0];
    assert_eq!(*code, 451, "{text}");
    assert!(
        text.starts_with("4.7.1 Upstream rate limit reached, retry after "),
        "{text}"
    );
    assert!(
        !text.contains("454") && !text.contains("Throttling"),
        "{text}"
    );
    assert!(fwd.messages().is_empty());
    assert!(
        relay.metric("mailsluice_upstream_throttled_total{reason=\"rate\",upstream=\"default\"}")
            >= 2.0
    );
}

/// An upstream that says in its own type that it has stopped sending for the account (as an
/// API does): paused like a quota reply, whatever its words.
#[tokio::test(start_paused = true)]
async fn an_upstream_that_says_paused_is_paused_like_a_quota() {
    let fwd = MemoryForwarder::new();
    fwd.fail_with(Some(UpstreamError::Pushback {
        feedback: Feedback::Paused,
        code: 454,
        enhanced: Some("4.7.0".into()),
        text: "Sending paused for this account.".into(),
    }));
    let (layer, upstream) = quota_config();
    let relay = relay(&layer, upstream, fwd.clone()).await;
    let (code, text) = replies_of(&relay).await;
    assert_eq!(code, 451, "{text}");
    assert!(
        text.starts_with("4.7.1 Upstream sending quota exhausted, retry after 600.000 s"),
        "{text}"
    );
    assert_eq!(relay.metric("mailsluice_upstream_paused"), 1.0);
    assert_eq!(
        relay.metric("mailsluice_upstream_throttled_total{reason=\"paused\",upstream=\"default\"}"),
        1.0
    );
    // Paused: the next message is refused without being sent, even once upstream would take it.
    fwd.fail_with(None);
    assert_eq!(replies_of(&relay).await.0, 451);
    assert!(fwd.messages().is_empty());
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(replies_of(&relay).await.0, 250);
    assert_eq!(fwd.messages().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn with_adaptive_off_upstreams_454_is_relayed_as_before() {
    let fwd = MemoryForwarder::new();
    fwd.fail_with(Some(ses_refusal(454, SES_RATE)));
    let relay = relay(&account_layer(20, "adaptive = false"), "", fwd.clone()).await;
    let replies = replies(clients(&relay, 1, 1)).await;
    let (code, text) = &replies[0];
    assert_eq!(*code, 454, "{text}");
    assert!(text.contains("upstream: Throttling failure"), "{text}");
    assert_eq!(relay.throttle.effective_limit(0), Some(20));
    // The tokens went back, as for any upstream failure.
    assert_eq!(relay.throttle.peek("account", "").unwrap().remaining, 20);
}

fn quota_config() -> (String, &'static str) {
    let layer = "[[throttle]]\nname = \"account\"\nkey = \"none\"\ncost = \"message\"\n\
                 limit = 1\ninterval_ms = 1000\nmax_wait_ms = 60000\n";
    (layer.to_string(), "quota_pause_ms = 600000")
}

#[tokio::test(start_paused = true)]
async fn a_quota_reply_pauses_upstream_then_one_probe_goes() {
    let hidden = HiddenRate::new(100);
    hidden.set_quota(Some(1));
    let (layer, upstream) = quota_config();
    let relay = relay(&layer, upstream, hidden.clone()).await;
    let started = Instant::now();
    // One a second: the first goes, the second meets the quota, the other two wait.
    let tasks = clients(&relay, 4, 1);
    let mut replies = Vec::new();
    for t in tasks {
        let r = t.await.unwrap().remove(0);
        replies.push((r, started.elapsed()));
    }
    let ok = replies.iter().filter(|((c, _), _)| *c == 250).count();
    assert_eq!(ok, 1, "{replies:?}");
    for ((code, text), at) in replies.iter().filter(|((c, _), _)| *c != 250) {
        assert_eq!(*code, 451, "{text}");
        assert!(
            text.starts_with("4.7.1 Upstream sending quota exhausted, retry after "),
            "{text}"
        );
        // Waiters were told when the quota reply came (at 1 s), not at their turn.
        assert!(*at <= Duration::from_millis(1_001), "answered at {at:?}");
    }
    assert_eq!(
        hidden.quota_refusals(),
        1,
        "nothing else was sent meanwhile: {replies:?}"
    );
    assert_eq!(relay.metric("mailsluice_upstream_paused"), 1.0);
    assert_eq!(
        relay.metric("mailsluice_upstream_throttled_total{reason=\"quota\",upstream=\"default\"}"),
        1.0
    );
    // A new message during the pause: refused at once, nothing sent.
    let before = Instant::now();
    let (code, text) = replies_of(&relay).await;
    assert_eq!((code, before.elapsed()), (451, Duration::ZERO), "{text}");
    // After the pause, the probe meets the quota again: paused again.
    tokio::time::sleep(Duration::from_secs(600)).await;
    let (code, text) = replies_of(&relay).await;
    assert!(code == 451 && text.contains("quota exhausted"), "{text}");
    assert_eq!(hidden.quota_refusals(), 2);
    let (code, _) = replies_of(&relay).await;
    assert_eq!(
        (code, hidden.quota_refusals()),
        (451, 2),
        "paused again, nothing sent"
    );
    // The quota is back: after the pause the probe goes, and so does the next.
    hidden.set_quota(Some(10));
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(replies_of(&relay).await.0, 250);
    assert_eq!(relay.metric("mailsluice_upstream_paused"), 0.0);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(replies_of(&relay).await.0, 250);
    assert_eq!(hidden.accepted().len(), 3);
}

async fn replies_of(relay: &Relay) -> (u16, String) {
    replies(clients(relay, 1, 1)).await.remove(0)
}

/// Real time over TCP (the admin endpoint), no timing asserted.
#[tokio::test]
async fn readyz_stays_200_and_says_paused() {
    let fwd = MemoryForwarder::new();
    fwd.fail_with(Some(ses_refusal(454, SES_QUOTA)));
    let (layer, upstream) = quota_config();
    let text = config_text(
        "file://unused",
        "",
        &format!("{upstream}\n{layer}\n[admin]\n"),
    );
    let relay = Relay::start(&text, fwd.clone()).await;
    let admin = relay.start_admin().await;
    let (_, body) = get(admin, "/readyz").await;
    assert!(body.contains("\"paused\":false"), "{body}");
    let mut c = relay.client().await;
    let (code, _) = c
        .send_mail(
            "a@example.com",
            &["b@example.net"],
            b"Subject: q\r\n\r\nx\r\n",
        )
        .await;
    assert_eq!(code, 451);
    let (status, body) = get(admin, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"paused\":true"), "{body}");
}

/// Real time over TCP, no timing asserted: an upstream that allows 2 connections, a pool of 6.
#[tokio::test]
async fn too_many_connections_closes_one_retries_on_a_pooled_one_and_shrinks_the_pool() {
    let up = TestUpstream::start().await;
    up.set_max_connections(Some(2));
    let relay = smtp_relay(&up.url(), "", "pool_size = 6\n").await;
    every_one_delivered(&relay, 12, "p").await;
    assert_eq!(up.messages().len(), 12, "each message once");
    assert!(up.crowded() > 0, "upstream refused connections");
    let counted = relay
        .metric("mailsluice_upstream_throttled_total{reason=\"connections\",upstream=\"default\"}");
    assert!(counted >= 1.0, "{counted}");
    assert!(up.open_connections() <= 2);
}

/// Real time over TCP, upper bounds only: the TCP test upstream with SES's hidden rate, the
/// relay at twice it. Every message gets 250, each once upstream.
#[tokio::test]
async fn over_tcp_the_relay_absorbs_the_hidden_rate_of_the_test_upstream() {
    let up = TestUpstream::start().await;
    up.set_hidden_rate(Some(20));
    let relay = smtp_relay(&up.url(), "", &account_layer(40, "")).await;
    every_one_delivered(&relay, 60, "t").await;
    let subjects: HashSet<String> = up.messages().iter().map(|m| subject_of(&m.data)).collect();
    assert_eq!((up.messages().len(), subjects.len()), (60, 60));
    assert!(up.rate_refusals() > 0, "upstream throttled");
    assert!(relay.throttle.effective_limit(0).unwrap() < 40);
}

/// Sends `n` messages over TCP at once, one connection each (subjects `<prefix><i>`), and
/// asserts that every client got 250.
async fn every_one_delivered(relay: &Relay, n: usize, prefix: &str) {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let addr = relay.addr;
            let msg = format!("Subject: {prefix}{i}\r\n\r\nbody\r\n");
            tokio::spawn(async move {
                let mut c = Client::connect(addr).await;
                c.send_mail("a@example.com", &["b@example.net"], msg.as_bytes())
                    .await
            })
        })
        .collect();
    for t in tasks {
        let (code, text) = t.await.unwrap();
        assert_eq!(code, 250, "{text}");
    }
}

/// 10x over: the first throttle replies cut the limit to what upstream took, with its burst,
/// so at most one burst of `454`s, not one per interval of a 70 % cut.
#[tokio::test(start_paused = true)]
async fn at_ten_times_the_hidden_rate_one_step_learns_it_with_few_454s() {
    let (relay, hidden, replies, took) = run(100).await;
    assert!(replies.iter().all(|(c, _)| *c == 250), "{replies:?}");
    assert_each_once(&hidden, 200);
    let rate_454 = hidden.rate_refusals();
    assert!(rate_454 <= 20, "{rate_454} upstream 454s for 200 messages");
    let rate = 200.0 / took.as_secs_f64();
    assert!(rate >= 8.5, "delivered {rate:.2}/s against a hidden 10/s");
    assert!(relay.throttle.effective_limit(0).unwrap() < 20);
}

/// A lone 454 while the relay sends far below its limit measures nothing: no cut.
#[tokio::test(start_paused = true)]
async fn a_lone_454_on_a_quiet_upstream_does_not_cut() {
    let hidden = HiddenRate::new(100);
    hidden.refuse_next(1);
    let relay = relay(&account_layer(50, "min_limit = 5"), "", hidden.clone()).await;
    for _ in 0..3 {
        assert_eq!(replies_of(&relay).await.0, 250);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(hidden.rate_refusals(), 1);
    assert_eq!(hidden.accepted().len(), 3);
    assert_eq!(relay.throttle.effective_limit(0), Some(50));
}

/// Clients on their own connections sending one message after another until `stop`.
fn steady(relay: &Relay, n: usize, stop: Arc<AtomicBool>) -> Vec<JoinHandle<Vec<u16>>> {
    (0..n)
        .map(|c| {
            let mut client = relay.memory_connect();
            let stop = stop.clone();
            tokio::spawn(async move {
                client.greeting().await;
                let mut codes = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    let msg = format!("Subject: s{c}m{}\r\n\r\nbody\r\n", codes.len());
                    let rcpt = ["user@example.net"];
                    let sent = client.send_mail("a@example.com", &rcpt, msg.as_bytes());
                    codes.push(sent.await.0);
                }
                codes
            })
        })
        .collect()
}

/// The hidden rate halves mid-run, then comes back: the relay follows it down in one step
/// (within an interval of its first cut) and back up additively, delivering everything.
#[tokio::test(start_paused = true)]
async fn the_relay_follows_a_hidden_rate_that_halves_and_comes_back() {
    let hidden = HiddenRate::new(20);
    let relay = Arc::new(relay(&account_layer(40, ""), "", hidden.clone()).await);
    let stop = Arc::new(AtomicBool::new(false));
    let senders = steady(&relay, 20, stop.clone());
    let watch = {
        let (relay, stop) = (relay.clone(), stop.clone());
        tokio::spawn(async move {
            let mut seen = Vec::new();
            let started = Instant::now();
            while !stop.load(Ordering::SeqCst) {
                seen.push((
                    started.elapsed(),
                    relay.throttle.effective_limit(0).unwrap(),
                ));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            seen
        })
    };
    tokio::time::sleep(Duration::from_secs(12)).await;
    hidden.set_rate(10);
    tokio::time::sleep(Duration::from_secs(10)).await;
    hidden.set_rate(20);
    tokio::time::sleep(Duration::from_secs(20)).await;
    stop.store(true, Ordering::SeqCst);
    let mut codes = Vec::new();
    for s in senders {
        codes.extend(s.await.unwrap());
    }
    assert!(codes.iter().all(|&c| c == 250), "every message delivered");
    assert_each_once(&hidden, codes.len());
    let seen = watch.await.unwrap();
    let at = |from: Duration| seen.iter().filter(move |(t, _)| *t >= from);
    let halved = Duration::from_secs(12);
    let before = at(halved).next().unwrap().1;
    let (first_cut, _) = *at(halved).find(|(_, l)| *l < before).expect("a cut");
    // Two intervals after the first cut it has settled at 80-100 % of the new rate, and stays.
    let back = Duration::from_secs(22);
    let settled = at(first_cut + Duration::from_secs(2)).take_while(|(t, _)| *t < back);
    for (t, l) in settled {
        assert!(
            (8..=10).contains(l),
            "{l} at {t:?} for a hidden 10/s (cut at {first_cut:?})"
        );
    }
    let (up, _) = *at(back).find(|(_, l)| *l >= 17).expect("back up");
    assert!(up <= Duration::from_secs(42), "back at 17/s at {up:?}");
}
