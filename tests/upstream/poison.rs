//! One tenant's throttle replies on tokio's paused clock: an upstream that answers `454 4.7.0
//! Throttling failure` only to one tenant's marked messages must not teach a layer that every
//! tenant shares. The other tenant keeps his rate; the marked messages wait again, slower each
//! time, and end with the relay's `451 4.7.1` once their budget is spent.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::memory::subject_of;
use crate::support::relay::{config_text, Relay};
use mailsluice::upstream::{Accepted, Feedback, ForwardFuture, Forwarder, Outgoing, UpstreamError};
use tokio::time::Instant;

/// Accepts every message but those marked `X-Mark: poison`, which it throttles.
#[derive(Default)]
struct Marked {
    accepted: Mutex<Vec<(String, Instant)>>,
    throttled: AtomicU64,
}

impl Forwarder for Marked {
    fn send<'a>(&'a self, outgoing: &'a Outgoing<'a>) -> ForwardFuture<'a> {
        let pieces = outgoing.pieces;
        Box::pin(async move {
            let message = pieces.concat();
            if String::from_utf8_lossy(&message).contains("X-Mark: poison") {
                self.throttled.fetch_add(1, Ordering::SeqCst);
                return Err(UpstreamError::Pushback {
                    feedback: Feedback::Rate,
                    code: 454,
                    enhanced: Some("4.7.0".into()),
                    text: "Throttling failure".into(),
                });
            }
            let mut got = self.accepted.lock().unwrap();
            got.push((subject_of(&message), Instant::now()));
            Ok(Accepted::new(format!("Ok {}", got.len())))
        })
    }
}

/// The probe's layers: a tenant layer (`header:X-Tenant`, 100/s) over an adaptive account
/// layer (`key = "none"`, 50/s); `account` is the account layer's key.
fn config(account: &str) -> String {
    config_text(
        "file://unused",
        "trusted_networks = [\"127.0.0.0/8\"]",
        &format!(
            "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\ncost = \"message\"\n\
             limit = 100\ninterval_ms = 1000\n\
             [[throttle]]\nname = \"account\"\nkey = \"{account}\"\ncost = \"message\"\n\
             limit = 50\ninterval_ms = 1000\nadaptive = true\n"
        ),
    )
}

/// One message of `tenant`, on its own connection, `after` from now; its reply.
fn send(
    relay: &Relay,
    tenant: &'static str,
    n: usize,
    after: Duration,
) -> tokio::task::JoinHandle<(u16, String)> {
    let mut client = relay.memory_connect();
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        client.greeting().await;
        let mark = if tenant == "mallory" {
            "X-Mark: poison\r\n"
        } else {
            ""
        };
        let msg = format!("X-Tenant: {tenant}\r\n{mark}Subject: {tenant}{n}\r\n\r\nbody\r\n");
        client
            .send_mail("app@example.com", &["user@example.net"], msg.as_bytes())
            .await
    })
}

/// Bob sends 20 messages a second for 20 s; from 0.5 s on, mallory sends one marked message
/// a second for 12 s. Bob's replies, mallory's replies, the upstream.
async fn probe(relay: &Relay) -> (Vec<(u16, String)>, Vec<(u16, String)>) {
    let bob: Vec<_> = (0..400)
        .map(|n| send(relay, "bob", n, Duration::from_millis(50 * n as u64)))
        .collect();
    let mallory: Vec<_> = (0..12)
        .map(|n| {
            send(
                relay,
                "mallory",
                n,
                Duration::from_millis(500 + 1000 * n as u64),
            )
        })
        .collect();
    let mut replies = (Vec::new(), Vec::new());
    for t in bob {
        replies.0.push(t.await.unwrap());
    }
    for t in mallory {
        replies.1.push(t.await.unwrap());
    }
    replies
}

#[tokio::test(start_paused = true)]
async fn one_tenants_throttle_replies_slow_that_tenant_and_not_the_shared_layer() {
    let upstream = Arc::new(Marked::default());
    let relay = Relay::start(&config("none"), upstream.clone()).await;
    let start = Instant::now();
    let (bob, mallory) = probe(&relay).await;
    let bob_ok = bob.iter().filter(|(c, _)| *c == 250).count();
    assert!(bob_ok >= 360, "bob kept {bob_ok} of 400: {:?}", &bob[..5]);
    let in_time = (upstream.accepted.lock().unwrap().iter())
        .filter(|(s, at)| s.starts_with("bob") && *at <= start + Duration::from_secs(21))
        .count();
    assert!(in_time >= 360, "bob's messages upstream in time: {in_time}");
    for (code, text) in &mallory {
        assert_eq!(*code, 451, "{text}");
        assert!(
            text.starts_with("4.7.1 Upstream rate limit reached"),
            "{text}"
        );
    }
    // Slowed: a handful of tries each, not one per grant of the shared layer.
    let tries = upstream.throttled.load(Ordering::SeqCst);
    assert!(
        tries <= 12 * 6,
        "{tries} throttle replies for 12 marked messages"
    );
    assert_eq!(relay.throttle.effective_limit(1), Some(50));
}

/// In a layer with a bucket per tenant, what a tenant's throttle replies teach is that
/// tenant's limit: mallory's replies cut hers, and bob's stays as configured.
#[tokio::test(start_paused = true)]
async fn a_per_tenant_adaptive_layer_learns_per_key() {
    let upstream = Arc::new(Marked::default());
    let config = config_text(
        "file://unused",
        "trusted_networks = [\"127.0.0.0/8\"]",
        "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\ncost = \"message\"\n\
         limit = 20\ninterval_ms = 1000\nmax_wait_ms = 5000\nadaptive = true\n",
    );
    let relay = Relay::start(&config, upstream.clone()).await;
    let bob: Vec<_> = (0..40)
        .map(|n| send(&relay, "bob", n, Duration::from_millis(100 * n as u64)))
        .collect();
    let mallory: Vec<_> = (0..3)
        .map(|n| {
            send(
                &relay,
                "mallory",
                n,
                Duration::from_millis(500 + 100 * n as u64),
            )
        })
        .collect();
    for t in bob {
        assert_eq!(t.await.unwrap().0, 250);
    }
    for t in mallory {
        let (code, text) = t.await.unwrap();
        assert_eq!(code, 451, "{text}");
    }
    let limit = |key| relay.throttle.peek("tenant", key).unwrap().effective_limit;
    assert_eq!(limit("bob"), Some(20), "bob's limit is his own");
    let mallory = limit("mallory").unwrap();
    assert!(mallory < 20, "mallory's replies cut her limit: {mallory}");
}
