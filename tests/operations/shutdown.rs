//! The relay stopped under load. SIGTERM to the binary with messages waiting in the throttle
//! queue whose tokens cannot come within the grace (one a minute, a grace of 20 s) and others
//! in flight upstream: the waiters get `421 4.3.2` at once, `/readyz` says 503, the forwards
//! finish with `250`, idle clients are told to go, a message whose DATA ends after the signal
//! goes if its bucket allows it at once (`421 4.3.2` if it would wait past the grace), and the
//! process exits 0 within its grace period. In process: waiters whose tokens come within the
//! grace (of an hour) all go, and `run` returns when the last one is answered.
//! SIGKILL with traffic flowing: no message a client saw `250` for is missing upstream. The
//! invariant (`support::invariant`) is checked over every message of both.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::config::TestConfig;
use crate::support::http::get;
use crate::support::invariant::{self, assert_holds, settle, ClientLog, Seen};
use crate::support::memory::MemoryForwarder;
use crate::support::process::RelayProcess;
use crate::support::relay::{config_text, sum_metric, Client, Relay};
use crate::support::traffic::{self, Leave};
use crate::support::upstream::{Fault, Step, TestUpstream};
use crate::support::wait::until;

/// One tenant layer: `burst` messages at once, then `limit` a second (0: one a minute);
/// waits of up to an hour.
fn config(up: &TestUpstream, limit: u64, burst: u64) -> String {
    let (limit, interval) = match limit {
        0 => (1, 60_000),
        n => (n, 1000),
    };
    TestConfig::new()
        .smtp("shutdown_grace_ms = 20000")
        .upstream(&up.url())
        .then("tls = \"none\"\ntimeout_ms = 10000\npool_size = 8")
        .then(&format!(
            "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\ncost = \"message\"\n\
             limit = {limit}\ninterval_ms = {interval}\nburst = {burst}\nmax_wait_ms = 3600000\n\
             [admin]\nlisten = \"127.0.0.1:0\""
        ))
        .text()
}

async fn metric(relay: &RelayProcess, name: &str) -> f64 {
    let (status, text) = get(relay.admin.unwrap(), "/metrics").await;
    assert_eq!(status, 200);
    sum_metric(&text, name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_answers_waiters_421_finishes_forwards_and_exits_0() {
    const IN_FLIGHT: usize = 4;
    const WAITING: usize = 20;
    let up = TestUpstream::start().await;
    // Upstream takes 3 s to accept each message: the first ones are in flight at SIGTERM.
    up.set_fault(Fault::stall(Step::EndOfData, Duration::from_secs(3)));
    let mut relay = RelayProcess::start(&config(&up, 0, IN_FLIGHT as u64), "info");
    let addr = relay.addr;
    let log = ClientLog::new();
    let mut clients = tokio::task::JoinSet::new();
    for i in 0..IN_FLIGHT {
        let log = log.clone();
        clients.spawn(async move {
            let id = format!("flight-{i}");
            (
                id.clone(),
                traffic::send(addr, &log, &id, "acme", Leave::Never).await,
            )
        });
    }
    until(
        "every burst message is upstream, awaiting its reply",
        async || up.commands().iter().filter(|c| *c == "DATA").count() == IN_FLIGHT,
    )
    .await;
    for i in 0..WAITING {
        let log = log.clone();
        clients.spawn(async move {
            let id = format!("wait-{i}");
            (
                id.clone(),
                traffic::send(addr, &log, &id, "acme", Leave::Never).await,
            )
        });
    }
    until("every other message waits in the queue", async || {
        metric(&relay, "mailsluice_throttle_waiting").await == WAITING as f64
    })
    .await;
    // And a client between transactions, and two in the middle of DATA: one of a tenant
    // with tokens to spare, one of the tenant whose queue is full of waiters.
    let mut idle = Client::connect(addr).await;
    assert_eq!(idle.cmd("EHLO idle.test").await.0, 250);
    let mut late = Vec::new();
    for (id, tenant) in [("late-free", "other"), ("late-empty", "acme")] {
        let mut c = Client::connect(addr).await;
        assert_eq!(c.cmd("EHLO late.test").await.0, 250);
        assert_eq!(c.cmd("MAIL FROM:<app@example.com>").await.0, 250);
        assert_eq!(c.cmd("RCPT TO:<user@example.net>").await.0, 250);
        assert_eq!(c.cmd("DATA").await.0, 354);
        let body = invariant::message(id, tenant);
        let half = body.len() / 2;
        c.send(&body[..half]).await;
        late.push((id, c, body[half..].to_vec()));
    }

    assert!(up.messages().is_empty(), "the burst is still in flight");
    // Each session is counted under what it is doing.
    for (activity, count) in [
        ("command", 1),
        ("data", 2),
        ("waiting", WAITING),
        ("upstream", IN_FLIGHT),
    ] {
        let series = format!("mailsluice_sessions{{activity=\"{activity}\"}}");
        assert_eq!(metric(&relay, &series).await, count as f64, "{series}");
    }
    relay.signal(libc::SIGTERM);
    // Draining (the forwards take 3 s more): a load balancer is told to stop sending.
    until("/readyz says 503", async || {
        get(relay.admin.unwrap(), "/readyz").await.0 == 503
    })
    .await;
    let mut answers = std::collections::BTreeMap::new();
    while let Some(done) = clients.join_next().await {
        let (id, seen) = done.unwrap();
        answers.insert(id, seen);
    }
    for (id, seen) in &answers {
        if id.starts_with("flight") {
            assert_eq!(
                seen.code(),
                Some(250),
                "{id}: in flight, it finishes: {seen:?}"
            );
        } else {
            assert!(
                matches!(seen, Seen::Reply(421, t) if t.starts_with("4.3.2")),
                "{id}: waiting, it is told to come back: {seen:?}"
            );
        }
    }
    assert_eq!(idle.reply().await.0, 421, "the idle client is told too");
    // The waiters were answered: the throttle is disposed of. The transactions in flight
    // finish: a message that can go at once goes, one that would wait is told to come back.
    for (id, mut c, rest) in late {
        c.send(&rest).await;
        c.send(b".\r\n").await;
        let (code, text) = c.reply().await;
        log.record(id, Seen::Reply(code, text.clone()));
        match id {
            "late-free" => assert_eq!(code, 250, "{id}: {text}"),
            _ => assert!(
                code == 421 && text.starts_with("4.3.2"),
                "{id}: {code} {text}"
            ),
        }
    }
    // The listener is closed: nobody new gets in.
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    let status = relay.wait(Duration::from_secs(60)).await;
    assert_eq!(status.code(), Some(0), "{:?}", relay.logs());
    let logs = relay.logs();
    assert!(logs.iter().any(|l| l.contains("stopped")), "{logs:?}");
    assert!(
        !logs.iter().any(|l| l.contains("grace period over")),
        "it exited within the grace period, not at its end: {logs:?}"
    );
    settle(&up).await;
    let summary = assert_holds("sigterm", &log, &up);
    assert_eq!(
        (summary.acknowledged, summary.refused),
        (IN_FLIGHT + 1, WAITING + 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_waiters_within_the_grace_and_returns_when_the_last_is_answered() {
    const WAITING: usize = 8;
    let layer = "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\n\
                 cost = \"message\"\nlimit = 4\ninterval_ms = 1000\nburst = 1\n";
    let text = config_text("file://unused", "shutdown_grace_ms = 3600000", layer);
    let fwd = MemoryForwarder::new();
    let relay = Relay::start(&text, fwd.clone()).await;
    let mut clients = tokio::task::JoinSet::new();
    for i in 0..=WAITING {
        let addr = relay.addr;
        clients.spawn(async move {
            let mut c = Client::connect(addr).await;
            let msg = invariant::message(&format!("m{i}"), "acme");
            c.send_mail("app@example.com", &["user@example.net"], &msg)
                .await
        });
    }
    let waiting = || relay.throttle.peek("tenant", "acme").unwrap().waiting;
    until("all but one wait", async || {
        fwd.messages().len() + waiting() == WAITING + 1 && waiting() >= 2
    })
    .await;
    relay.trigger_shutdown();
    while let Some(answer) = clients.join_next().await {
        let (code, text) = answer.unwrap();
        assert_eq!(code, 250, "{text}");
    }
    assert_eq!(fwd.messages().len(), WAITING + 1);
    // The grace is an hour: `run` returning now means it ended with the last transaction.
    let stopped = tokio::time::timeout(Duration::from_secs(600), relay.stop()).await;
    assert!(stopped.is_ok(), "run waited for the end of the grace");
}

/// A message that waited through the signal goes, and its client, told `250`, says QUIT: it
/// gets `221`, not the drain's `421` (which swaks reports as an error, though the message
/// went). A client that says anything else then is told `421`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quit_after_a_250_during_the_drain_gets_221() {
    let layer = "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\n\
                 cost = \"message\"\nlimit = 4\ninterval_ms = 1000\nburst = 1\n";
    let text = config_text("file://unused", "shutdown_grace_ms = 3600000", layer);
    let fwd = MemoryForwarder::new();
    let relay = Relay::start(&text, fwd.clone()).await;
    let mut first = relay.client().await;
    let msg = |id: &str| invariant::message(id, "acme");
    let to = ["user@example.net"];
    assert_eq!(
        first.send_mail("app@example.com", &to, &msg("m0")).await.0,
        250
    );
    let mut clients = tokio::task::JoinSet::new();
    for (i, next) in ["QUIT", "NOOP"].into_iter().enumerate() {
        let addr = relay.addr;
        let message = msg(&format!("m{}", i + 1));
        clients.spawn(async move {
            let mut c = Client::connect(addr).await;
            let sent = c.send_mail("app@example.com", &to, &message).await;
            (next, sent, c.cmd(next).await)
        });
    }
    let waiting = || relay.throttle.peek("tenant", "acme").unwrap().waiting;
    until("both wait", async || waiting() == 2).await;
    relay.trigger_shutdown();
    while let Some(answer) = clients.join_next().await {
        let (next, (code, text), (after, said)) = answer.unwrap();
        assert_eq!(code, 250, "{text}");
        match next {
            "QUIT" => assert_eq!(after, 221, "QUIT after the 250: {said}"),
            _ => assert_eq!((after, &said[..5]), (421, "4.3.2"), "{next}: {said}"),
        }
    }
    relay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_load_loses_no_acknowledged_message() {
    let up = TestUpstream::start().await;
    // Slow acceptance: at any instant several messages are in flight upstream.
    up.set_fault(Fault::stall(Step::EndOfData, Duration::from_millis(100)));
    // 20 messages a second per tenant: the four senders of tenant "shared" (10 a second
    // each at most) wait in its queue, the four others do not.
    let mut relay = RelayProcess::start(&config(&up, 20, 2), "info,mailsluice::message=warn");
    let addr = relay.addr;
    let log = ClientLog::new();
    let done = Arc::new(AtomicUsize::new(0));
    let dead = Arc::new(AtomicBool::new(false));
    let mut senders = tokio::task::JoinSet::new();
    for s in 0..8 {
        let (log, done, dead) = (log.clone(), done.clone(), dead.clone());
        senders.spawn(async move {
            let mut n = 0;
            // Half the senders share one tenant (so some wait), the others have their own.
            let tenant = if s % 2 == 0 {
                "shared".to_string()
            } else {
                format!("t{s}")
            };
            while !dead.load(Ordering::SeqCst) {
                let id = format!("s{s}-{n}");
                let seen = traffic::send(addr, &log, &id, &tenant, Leave::Never).await;
                if seen.code() == Some(250) {
                    done.fetch_add(1, Ordering::SeqCst);
                }
                n += 1;
            }
        });
    }
    until("traffic flows", async || done.load(Ordering::SeqCst) >= 40).await;
    relay.signal(libc::SIGKILL);
    dead.store(true, Ordering::SeqCst);
    while let Some(s) = senders.join_next().await {
        s.unwrap();
    }
    let status = relay.wait(Duration::from_secs(10)).await;
    assert_eq!(status.code(), None, "killed by a signal");
    settle(&up).await;
    let summary = assert_holds("sigkill", &log, &up);
    eprintln!("{summary:?}");
    assert!(summary.acknowledged >= 40, "{summary:?}");
    assert!(
        summary.no_reply > 0,
        "some messages were cut off by the kill: {summary:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grace_that_ends_with_sessions_in_flight_says_what_they_were_doing() {
    let up = TestUpstream::start().await;
    let text = config(&up, 0, 1).replace("shutdown_grace_ms = 20000", "shutdown_grace_ms = 500");
    let mut relay = RelayProcess::start(&text, "info");
    // A client that stops halfway through its message: the grace cannot end it.
    let mut c = Client::connect(relay.addr).await;
    assert_eq!(c.cmd("EHLO slow.test").await.0, 250);
    assert_eq!(c.cmd("MAIL FROM:<app@example.com>").await.0, 250);
    assert_eq!(c.cmd("RCPT TO:<user@example.net>").await.0, 250);
    assert_eq!(c.cmd("DATA").await.0, 354);
    c.send(b"Subject: half\r\n").await;
    until("the session reads the message", async || {
        metric(&relay, "mailsluice_sessions{activity=\"data\"}").await == 1.0
    })
    .await;
    relay.signal(libc::SIGTERM);
    let status = relay.wait(Duration::from_secs(60)).await;
    assert_eq!(status.code(), Some(0));
    let logs = relay.logs();
    let over = logs.iter().find(|l| l.contains("grace period over"));
    let over = over.unwrap_or_else(|| panic!("no grace line: {logs:?}"));
    assert!(
        over.contains("command=0 data=1 waiting=0 upstream=0"),
        "{over}"
    );
    assert!(up.messages().is_empty(), "half a message is no message");
}

/// A message whose upstream has not answered when the grace ends is answered before the
/// process exits: `421 4.3.2`, saying it may have been delivered (its final dot went), never
/// a connection dropped without a word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_still_with_upstream_when_the_grace_ends_is_answered() {
    let up = TestUpstream::start().await;
    up.set_fault(Fault::stall(Step::EndOfData, Duration::from_secs(120)));
    let text = config(&up, 0, 1).replace("shutdown_grace_ms = 20000", "shutdown_grace_ms = 500");
    let text = text.replace("timeout_ms = 10000", "timeout_ms = 60000");
    let mut relay = RelayProcess::start(&text, "info");
    let mut c = Client::connect(relay.addr).await;
    let sending = tokio::spawn(async move {
        let reply = (c.send_mail(
            "app@example.com",
            &["user@example.net"],
            b"X-Tenant: a\r\n\r\nhi\r\n",
        ))
        .await;
        (reply, c.reply().await)
    });
    until("the message is with upstream", async || {
        metric(&relay, "mailsluice_sessions{activity=\"upstream\"}").await == 1.0
    })
    .await;
    relay.signal(libc::SIGTERM);
    let ((code, text), after) = sending.await.unwrap();
    assert_eq!(code, 421, "{text}");
    assert!(
        text.contains("4.3.2") && text.contains("may have been delivered"),
        "{text}"
    );
    assert_eq!(after, (0, String::new()), "then the connection is closed");
    let status = relay.wait(Duration::from_secs(60)).await;
    assert_eq!(status.code(), Some(0));
    let logs = relay.logs();
    let line = logs.iter().find(|l| l.contains("outcome=shutdown"));
    assert!(line.is_some(), "the message is logged: {logs:?}");
}
