//! Shutdown drains the queues, on tokio's paused clock: within the grace a waiter keeps its
//! place and goes when its tokens come; only one whose tokens would come too late to be
//! forwarded within the grace is told `421 4.3.2` (`ThrottleError::Shutdown`), at once. The throttle alone, then the SMTP
//! dialogue of a relay whose shutdown is triggered.

use std::time::Duration;

use tokio::time::Instant;

use crate::support::relay::{memory_relay, Client};
use crate::support::throttle::*;
use crate::throttling::{send, until};
use mailsluice::throttle::ThrottleError;

const SEC: Duration = Duration::from_secs(1);

#[tokio::test(start_paused = true)]
async fn waiters_whose_tokens_come_within_the_grace_all_go() {
    let e = Env::new(vec![per_sec("t", 2)]);
    e.spend(0, "k", 2).await;
    let mut waiters = Vec::new();
    for _ in 0..20 {
        waiters.push(e.spawn(vec![charge(0, "k", 1)]).await);
    }
    assert_eq!(e.t.waiting(0), 20);
    e.t.drain(30 * SEC);
    for (i, w) in waiters.into_iter().enumerate() {
        let at = w.await.unwrap().expect("granted within the grace");
        assert_eq!(
            at,
            ms(500 * (i as u64 + 1)),
            "waiter {i}: at its own instant"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn waiters_whose_tokens_would_come_after_the_grace_are_told_at_once() {
    let e = Env::new(vec![per_sec("t", 1)]);
    e.spend(0, "k", 1).await;
    let mut waiters = Vec::new();
    for _ in 0..10 {
        waiters.push(e.spawn(vec![charge(0, "k", 1)]).await);
    }
    e.t.drain(ms(4_500));
    // The four whose tokens come at 1..4 s stay; the six after 4.5 s leave now.
    assert_eq!(e.t.waiting(0), 4);
    let late = waiters.split_off(4);
    for w in late {
        assert_eq!(w.await.unwrap(), Err(ThrottleError::Shutdown));
        assert_eq!(e.now(), Duration::ZERO, "at once, not at the grace's end");
    }
    for (i, w) in waiters.into_iter().enumerate() {
        assert_eq!(w.await.unwrap(), Ok(ms(1_000 * (i as u64 + 1))));
    }
    // A newcomer during the drain: it would go at 5 s, after the grace.
    let r = e.take(0, "k", 1).await.map(|p| p.delivered());
    assert_eq!(r, Err(ThrottleError::Shutdown));
}

#[tokio::test(start_paused = true)]
async fn a_newcomer_during_the_drain_waits_if_its_tokens_come_in_time() {
    let e = Env::new(vec![per_sec("t", 1)]);
    e.spend(0, "k", 1).await;
    e.t.drain(10 * SEC);
    let w = e.spawn(vec![charge(0, "k", 1)]).await;
    assert_eq!(w.await.unwrap(), Ok(SEC));
    // At the grace's end (dispose) whoever still waits is told to go.
    let late = e.spawn(vec![charge(0, "k", 1)]).await;
    e.t.dispose();
    assert_eq!(late.await.unwrap(), Err(ThrottleError::Shutdown));
}

fn tenant_layer() -> String {
    "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\ncost = \"message\"\n\
     limit = 2\ninterval_ms = 1000\nburst = 1\nmax_wait_ms = 60000\n"
        .into()
}

#[tokio::test(start_paused = true)]
async fn at_shutdown_twenty_clients_waiting_in_a_2_per_second_layer_all_get_250() {
    let (relay, fwd) = memory_relay("shutdown_grace_ms = 30000", &tenant_layer()).await;
    let mut clients = vec![send(&relay, "acme", "first")];
    until("the first is forwarded", || fwd.messages().len() == 1).await;
    for i in 0..20 {
        clients.push(send(&relay, "acme", &format!("w{i:02}")));
    }
    let waiting = || relay.throttle.peek("tenant", "acme").unwrap().waiting;
    until("twenty wait", || waiting() == 20).await;
    let start = Instant::now();
    relay.trigger_shutdown();
    for c in clients {
        let (code, text) = c.await.unwrap();
        assert_eq!(code, 250, "{text}");
    }
    assert_eq!(fwd.messages().len(), 21);
    assert_eq!(
        Instant::now() - start,
        10 * SEC,
        "the last one at its own instant"
    );
}

#[tokio::test(start_paused = true)]
async fn at_shutdown_a_client_whose_tokens_come_after_the_grace_gets_421_at_once() {
    let (relay, fwd) = memory_relay("shutdown_grace_ms = 2750", &tenant_layer()).await;
    assert_eq!(send(&relay, "acme", "first").await.unwrap().0, 250);
    let clients: Vec<_> = (0..6)
        .map(|i| send(&relay, "acme", &format!("w{i}")))
        .collect();
    let waiting = || relay.throttle.peek("tenant", "acme").unwrap().waiting;
    until("six wait", || waiting() == 6).await;
    let start = Instant::now();
    relay.trigger_shutdown();
    let mut answers = Vec::new();
    for c in clients.into_iter().rev() {
        answers.push((c.await.unwrap(), Instant::now() - start));
    }
    answers.reverse();
    // Tokens at 0.5, 1, 1.5, 2 s: in time to be forwarded within the grace of 2.75 s (its
    // last quarter is kept for the forwards). The two after it are told now.
    for (i, ((code, text), when)) in answers.iter().enumerate() {
        if i < 4 {
            assert_eq!(*code, 250, "w{i}: {text}");
        } else {
            assert!(
                *code == 421 && text.starts_with("4.3.2"),
                "w{i}: {code} {text}"
            );
            assert_eq!(*when, Duration::ZERO, "w{i}: at once");
        }
    }
    assert_eq!(fwd.messages().len(), 5);
}

/// The grace's last quarter is kept for the forwards of the last messages to take their
/// tokens: with upstream taking 0.8 s to answer, no message is cut off after its final dot
/// went (a `421` saying it may have been delivered, and a copy sent twice on the retry).
/// Over TCP: the sessions the shutdown waits for (and answers at the grace's end) are those
/// its listeners accepted.
#[tokio::test(start_paused = true)]
async fn at_shutdown_no_message_is_cut_off_after_it_went_upstream() {
    let (relay, fwd) = memory_relay("shutdown_grace_ms = 4200", &tenant_layer()).await;
    fwd.answer_after(ms(800));
    let send = |subject: String| {
        let addr = relay.addr;
        tokio::spawn(async move {
            let mut c = Client::connect(addr).await;
            let msg = format!("X-Tenant: acme\r\nSubject: {subject}\r\n\r\nbody\r\n");
            (c.send_mail("app@example.com", &["user@example.net"], msg.as_bytes())).await
        })
    };
    let mut clients = vec![send("first".into())];
    until_io("the first is forwarded", || fwd.messages().len() == 1).await;
    clients.extend((0..10).map(|i| send(format!("w{i}"))));
    let waiting = || relay.throttle.peek("tenant", "acme").unwrap().waiting;
    until_io("ten wait", || waiting() == 10).await;
    let start = Instant::now();
    relay.trigger_shutdown();
    // The last first: those told at once are seen before the clock moves.
    let mut answers = Vec::new();
    for c in clients.into_iter().rev() {
        let (code, text) = c.await.unwrap();
        answers.push((code, text, Instant::now() - start));
    }
    // Tokens at 0.5 .. 3 s go (answered by 3.8 s); those at 3.5 .. 5 s would be answered
    // after the grace's 4.2 s, and are told now instead, before anything of them went.
    let delivered = answers.iter().filter(|(code, _, _)| *code == 250).count();
    assert_eq!(
        fwd.messages().len(),
        delivered,
        "every message upstream got its 250: {answers:?}"
    );
    assert_eq!(delivered, 7, "{answers:?}");
    for (code, text, when) in answers.iter().filter(|(code, _, _)| *code != 250) {
        assert_eq!(*code, 421, "{text}");
        assert!(!text.contains("may have been delivered"), "{text}");
        assert_eq!(*when, Duration::ZERO, "told at once: {text}");
    }
}

/// Lets the relay and its sockets run, the clock stepping 1 ms at a time, until `cond` holds.
async fn until_io(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..10_000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("never happened: {what}");
}

/// At shutdown a session's last reply is given time to arrive: the session waits (up to a
/// second) for its client to close before it ends, so the exiting process cannot take the reply
/// with it. A client that closes lets the relay stop at once; one that stays holds it a second.
#[tokio::test(start_paused = true)]
async fn at_shutdown_the_relay_waits_a_moment_for_its_last_reply_to_be_read() {
    for client_closes in [true, false] {
        let (relay, _fwd) = memory_relay("shutdown_grace_ms = 4000", &tenant_layer()).await;
        let mut c = Client::connect(relay.addr).await;
        assert_eq!(c.cmd("EHLO app.example").await.0, 250);
        let start = Instant::now();
        relay.trigger_shutdown();
        let (code, text) = c.reply().await;
        assert_eq!(code, 421, "{text}");
        assert!(c.is_closed().await, "our side is closed after the 421");
        assert!(relay.is_running(), "the session waits for its client");
        if client_closes {
            drop(c);
            until_io("the relay stops", || !relay.is_running()).await;
            assert!(
                Instant::now() - start < ms(50),
                "{:?}",
                Instant::now() - start
            );
        } else {
            until_io("the relay stops", || !relay.is_running()).await;
            let took = Instant::now() - start;
            assert!(took >= SEC && took < SEC + ms(50), "{took:?}");
        }
    }
}
