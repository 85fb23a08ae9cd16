//! `bench/spool_store.sh`: the spool on S3 and SQS (`store = "s3"`: moto's server, started
//! here, behind a proxy in this process that counts and times every call) against the
//! directory store (`store = "dir"`). Two runs:
//!
//! - `store <dir|s3> <held> <sessions>`: `held` messages of 1 KiB held by one relay (a hold
//!   layer of one message a day, one key), sent over `sessions` SMTP sessions at once; then
//!   released by a relay on the same spool whose layer does not bind, to a forwarder in
//!   memory. Per phase (hold; the releasing relay's start, its spool opened; release): the
//!   wall time, CPU time per held message, and with S3 and SQS the calls per held message by
//!   operation and how much of the wall time moto was answering the relay.
//! - `replicas <limit> <burst> <held>`: `held` messages held, then released by two relays in
//!   this process, each with its own spool on the one queue and bucket, sharing a hold layer
//!   of `limit` a second (with `burst`) on one Redis. Printed: the release rate, each
//!   replica's share, messages sent twice, and the most messages that reached upstream in any
//!   1 s window (sliding, from upstream's arrival times) against limit + burst.
//!
//! What is whose (`measure`). The relay's CPU time is this process's (`getrusage`: user +
//! system) less the threads of the proxy and of the SMTP clients, which run on runtimes of
//! their own and are timed by their threads' CPU clocks: the relay's own, its S3 and SQS
//! clients (signing, checksums, HTTP) included. moto and Redis are processes of their own,
//! timed from `/proc`. Wall time: the proxy times each call from its connect to moto's whole
//! answer; "moto answering" is the time during which at least one of the relay's calls was at
//! moto (a long poll that found nothing, which waits by design, left out); the rest of the
//! wall time is the relay's. The sum of moto's answer times is printed too: calls overlap,
//! so it can exceed the wall time.
//!
//! ```text
//! spool_store store <dir|s3> <held> <sessions>
//! spool_store replicas <limit> <burst> <held>
//! ```

mod measure;
mod store;

use mailsluice_test_support as support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mailsluice::upstream::{CheckFuture, ForwardFuture, Forwarder, Offers, Outgoing};

use measure::{answered_within, most_in_a_second, per_message, report, Mark, Side};
use store::{hold_layer, Store};
use support::host::scratch_path;
use support::memory::{subject_of, MemoryForwarder};
use support::redis::RedisServer;
use support::relay::{Client, Relay};

const USAGE: &str = "usage: spool_store store <dir|s3> <held> <sessions> \
                     | spool_store replicas <limit> <burst> <held>";
const FROM: &str = "app@example.com";
const TO: &str = "to@example.net";

#[tokio::main]
async fn main() {
    std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize| -> usize { args.get(i).expect(USAGE).parse().expect(USAGE) };
    match args.first().map(String::as_str) {
        Some("store") => store_run(args.get(1).expect(USAGE), number(2), number(3)).await,
        Some("replicas") => replicas_run(number(1), number(2), number(3)).await,
        _ => panic!("{USAGE}"),
    }
}

/// `held` messages held, then released, by one relay on `kind`'s store.
async fn store_run(kind: &str, held: usize, sessions: usize) {
    let (proxy, clients) = (Side::start("proxy"), Side::start("clients"));
    let store = match kind {
        "dir" => Store::Dir(scratch_path("bench-spool-store")),
        "s3" => Store::s3(&proxy).await,
        other => panic!("no such store {other:?}: dir or s3"),
    };
    let mark = || Mark::now(&proxy, &clients);

    let relay = start_holding(&store).await;
    let before = mark();
    send(&clients, relay.addr, held, sessions).await;
    let hold = mark();
    relay.stop().await;
    store.wait_visible(held).await;

    let upstream = MemoryForwarder::new();
    let text = store.config(&hold_layer(1_000_000, 1000, 1_000_000, ""), "");
    let starting = mark();
    let relay = Relay::start(&text, upstream.clone()).await;
    let started = mark();
    // Upstream's count first: a directory is listed only once all are upstream.
    wait_until("all released", || {
        upstream.times().len() >= held && store.released(held)
    })
    .await;
    let release = mark();
    relay.stop().await;
    assert_eq!(upstream.times().len(), held, "each sent once");

    println!("{kind:<3}  {held} held over {sessions} sessions at once, released to memory");
    let answered = store.answered();
    report("hold", held, (&before, &hold), "moto", &answered);
    report("start", held, (&starting, &started), "moto", &answered);
    report("release", held, (&started, &release), "moto", &answered);
    let cpu = hold.relay_cpu_since(&before) + release.relay_cpu_since(&starting);
    let mut line = format!(
        "  all      relay CPU {:.0} µs/msg",
        cpu.as_secs_f64() * 1e6 / held as f64
    );
    if store.is_s3() {
        let calls = answered_within(&answered, &before, &release);
        line += &format!("; calls per message: {}", per_message(&calls, held));
    }
    println!("{line}");
}

/// A relay holding every message on `store` (after a first one that its layer lets through).
/// On S3 and SQS its receiver takes at most one entry, so that the accept's calls are counted
/// apart from a release's; that entry, waiting for its tokens at the stop, is put back for
/// `retry_min_ms`: one second here.
async fn start_holding(store: &Store) -> Relay {
    let receive = if store.is_s3() {
        "receive_max = 1\nretry_min_ms = 1000"
    } else {
        ""
    };
    let text = store.config(&hold_layer(1, 86_400_000, 1, ""), receive);
    let relay = Relay::start(&text, MemoryForwarder::new()).await;
    let mut c = Client::connect(relay.addr).await;
    let (code, text) = c.send_mail(FROM, &[TO], &message("first")).await;
    assert_eq!(code, 250, "{text}");
    relay
}

/// `held` messages held, then released by two relays sharing a layer on Redis.
async fn replicas_run(limit: usize, burst: usize, held: usize) {
    let redis = RedisServer::start().expect("redis-server is installed");
    let (proxy, clients) = (Side::start("proxy"), Side::start("clients"));
    let store = Store::s3(&proxy).await;
    let relay = start_holding(&store).await;
    send(&clients, relay.addr, held, 20).await;
    relay.stop().await;
    store.wait_visible(held).await;

    let shared = format!("store = \"redis\"\n[redis]\nurl = \"{}\"\n", redis.url());
    let text = store.config(&hold_layer(limit, 1000, burst, &shared), "");
    let upstream = MemoryForwarder::new();
    let replicas = [Replica::new(&upstream), Replica::new(&upstream)];
    let start = Mark::now(&proxy, &clients);
    let relays = [
        Relay::start(&text, replicas[0].clone()).await,
        Relay::start(&text, replicas[1].clone()).await,
    ];
    wait_until("all released", || {
        store.released(held) && sent_by(&replicas).len() >= held
    })
    .await;
    let end = Mark::now(&proxy, &clients);
    for relay in relays {
        relay.stop().await;
    }

    let times: Vec<Instant> = upstream.times().iter().map(|t| t.into_std()).collect();
    let rate = (times.len() - 1) as f64 / (times[times.len() - 1] - times[0]).as_secs_f64();
    let twice: Vec<String> = (sent_by(&replicas).into_iter())
        .filter(|(_, by)| by.len() > 1)
        .map(|(subject, by)| format!("{subject} by replicas {by:?}"))
        .collect();
    let shares = replicas.map(|r| r.subjects.lock().unwrap().len());
    println!(
        "2 replicas, layer {limit}/s burst {burst} on Redis, {held} held:  {rate:.1} msg/s  \
         (replicas {} + {}, {} sent twice{})  most in any 1 s {} (limit + burst {})",
        shares[0],
        shares[1],
        twice.len(),
        if twice.is_empty() {
            String::new()
        } else {
            format!(": {}", twice.join(", "))
        },
        most_in_a_second(&times),
        limit + burst
    );
    report(
        "release",
        held,
        (&start, &end),
        "moto+Redis",
        &store.answered(),
    );
}

/// Each message upstream got, with the replicas that sent it (1 and 2), by subject.
fn sent_by(replicas: &[Arc<Replica>; 2]) -> BTreeMap<String, Vec<usize>> {
    let mut by: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, r) in replicas.iter().enumerate() {
        for subject in r.subjects.lock().unwrap().iter() {
            by.entry(subject.clone()).or_default().push(i + 1);
        }
    }
    by
}

fn message(subject: &str) -> Vec<u8> {
    format!("Subject: {subject}\r\n\r\n{}\r\n", "x".repeat(1000)).into_bytes()
}

/// Sends `count` messages over `sessions` SMTP sessions at once to `addr`, on the clients'
/// runtime; each must be answered `250`.
async fn send(clients: &Side, addr: SocketAddr, count: usize, sessions: usize) {
    let mut tasks = Vec::new();
    for session in 0..sessions {
        let n = count / sessions + usize::from(session < count % sessions);
        tasks.push(clients.handle.spawn(async move {
            let mut c = Client::connect(addr).await;
            for i in 0..n {
                let body = message(&format!("m{session}-{i}"));
                let (code, text) = c.send_mail(FROM, &[TO], &body).await;
                assert_eq!(code, 250, "{text}");
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

/// Waits (real time, at most 10 minutes) until `done`.
async fn wait_until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(600), "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One replica's upstream: the shared forwarder in memory, and the subjects this replica
/// handed it.
struct Replica {
    upstream: Arc<MemoryForwarder>,
    subjects: Mutex<Vec<String>>,
}

impl Replica {
    fn new(upstream: &Arc<MemoryForwarder>) -> Arc<Replica> {
        Arc::new(Replica {
            upstream: upstream.clone(),
            subjects: Mutex::default(),
        })
    }
}

impl Forwarder for Replica {
    fn send<'a>(&'a self, message: &'a Outgoing<'a>) -> ForwardFuture<'a> {
        let subject = subject_of(&message.pieces.concat());
        self.subjects.lock().unwrap().push(subject);
        self.upstream.send(message)
    }

    fn check(&self) -> CheckFuture<'_> {
        self.upstream.check()
    }

    fn offers(&self) -> Offers<'_> {
        self.upstream.offers()
    }
}
