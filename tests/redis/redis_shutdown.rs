//! Shutdown with a message asleep on its Redis reservation (`store = "redis"`): due after the
//! grace, it is told `421 4.3.2` at once like a local waiter, and its reserved tokens go back
//! to Redis before it is answered; due within the grace, it goes. Real time, a private `redis-server` on 127.0.0.1, real SMTP.

use std::time::Duration;

use crate::support::redis::RedisServer;
use crate::support::relay::{smtp_relay, Relay};
use crate::support::upstream::TestUpstream;

/// One token a minute, two held, charged per recipient, waits of up to two minutes: after a
/// one-recipient message the bucket holds one token, so a two-recipient one is reserved for
/// about a minute on.
const LAYER: &str = "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\n\
                     cost = \"recipients\"\nlimit = 1\ninterval_ms = 60000\nburst = 2\n\
                     max_wait_ms = 120000\nstore = \"redis\"\n";

fn message(id: &str) -> Vec<u8> {
    format!("Subject: {id}\r\nX-Tenant: acme\r\n\r\nhello {id}\r\n").into_bytes()
}

/// Tokens left in acme's bucket, read from Redis.
async fn remaining(relay: &Relay) -> u64 {
    let peek = relay.throttle.peek_async("tenant", "acme").await.unwrap();
    peek.expect("redis answers").remaining
}

#[tokio::test]
async fn shutdown_answers_a_reserved_message_421_and_gives_its_tokens_back() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let up = TestUpstream::start().await;
    let rest = format!(
        "{LAYER}\n[redis]\nurl = \"{}\"\ntimeout_ms = 2000\n",
        redis.url()
    );
    let relay = smtp_relay(&up.url(), "", &rest).await;

    let mut first = relay.client().await;
    let (code, text) = first
        .send_mail("a@example.com", &["b@example.com"], &message("first"))
        .await;
    assert_eq!(code, 250, "{text}");
    assert_eq!(remaining(&relay).await, 1);

    let addr = relay.addr;
    let second = tokio::spawn(async move {
        let mut c = crate::support::relay::Client::connect(addr).await;
        let rcpts = ["b@example.com", "c@example.com"];
        c.send_mail("a@example.com", &rcpts, &message("second"))
            .await
    });
    // Its reservation is made when Redis shows the bucket owing: both tokens are taken.
    for _ in 0..1000 {
        if remaining(&relay).await == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        remaining(&relay).await,
        0,
        "the second message reserved its tokens"
    );
    assert!(
        !second.is_finished(),
        "it sleeps until its instant, a minute away"
    );

    relay.trigger_shutdown();
    let (code, text) = second.await.unwrap();
    assert!(code == 421 && text.starts_with("4.3.2"), "{code} {text}");
    // Given back before the reply: the bucket is as the first message left it.
    assert_eq!(remaining(&relay).await, 1, "the reservation was given back");
    assert_eq!(
        up.messages().len(),
        1,
        "only the first message went upstream"
    );
    relay.stop().await;
}

#[tokio::test]
async fn shutdown_lets_a_message_reserved_within_the_grace_go() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let up = TestUpstream::start().await;
    // One token every two seconds: the second message is reserved about two seconds on,
    // well within the grace of 30 s.
    let layer = LAYER
        .replace(
            "limit = 1\ninterval_ms = 60000",
            "limit = 1\ninterval_ms = 2000",
        )
        .replace("cost = \"recipients\"", "cost = \"message\"")
        .replace("burst = 2", "burst = 1");
    let rest = format!(
        "{layer}\n[redis]\nurl = \"{}\"\ntimeout_ms = 2000\n",
        redis.url()
    );
    let relay = smtp_relay(&up.url(), "shutdown_grace_ms = 30000", &rest).await;
    let mut first = relay.client().await;
    let (code, text) = first
        .send_mail("a@example.com", &["b@example.com"], &message("first"))
        .await;
    assert_eq!(code, 250, "{text}");
    // The second message reaches its final dot before the signal: it is reserved (or
    // asks Redis during the drain, and is reserved then).
    let mut second = relay.client().await;
    for (line, want) in [
        ("EHLO c.test", 250),
        ("MAIL FROM:<a@example.com>", 250),
        ("RCPT TO:<b@example.com>", 250),
        ("DATA", 354),
    ] {
        assert_eq!(second.cmd(line).await.0, want, "{line}");
    }
    second.send(&message("second")).await;
    second.send(b".\r\n").await;
    for _ in 0..100 {
        if relay.throttle.peek("tenant", "acme").unwrap().waiting > 0 {
            break; // at its gate: asking Redis, or asleep on its reservation
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    relay.trigger_shutdown();
    let (code, text) = second.reply().await;
    assert_eq!(code, 250, "{text}");
    assert_eq!(up.messages().len(), 2);
    relay.stop().await;
}
