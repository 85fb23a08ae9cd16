//! `bench/spool_release.sh`: how fast the spool gives one key's held messages back to a
//! distant upstream. One hold-mode layer (`key = "none"`, so one key) of `limit` a second
//! with a `burst`; `held` messages held in a spool by a first relay whose layer lets one
//! message a day through; then a second relay on that spool, its layer at `limit`, releases
//! them to upstream `delay_ms` away (a proxy holding what the relay sends, as a network with
//! that round-trip time would): `ses://` (the SESv2 stand-in) or `smtp://` (the test upstream,
//! PIPELINING), each with `pool_size` connections or requests at once. Printed, from when the
//! relay handed each message to its forwarder (its tokens taken): the release rate (messages
//! over the time from the first to the last) and the most sent in any 1 s window, against
//! `limit + burst` (upstream sees them later, by the round trip and its jitter).
//!
//! ```text
//! spool_release <smtp|ses> <delay_ms> <limit> <burst> <held> <pool_size>
//! ```

use mailsluice_test_support as support;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mailsluice::config::Config;
use mailsluice::upstream::{
    CheckFuture, ForwardFuture, Forwarder, Offers, Outgoing, SmtpForwarder,
};
use tokio::net::TcpListener;
use tokio::time::Instant;

use support::config::TestConfig;
use support::host::scratch_path;
use support::memory::MemoryForwarder;
use support::relay::Relay;
use support::ses::{forwarder, FakeSes, GOOD_KEY};
use support::upstream::TestUpstream;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [kind, rest @ ..] = args.as_slice() else {
        panic!("usage: spool_release <smtp|ses> <delay_ms> <limit> <burst> <held> <pool_size>");
    };
    let numbers: Vec<u64> = rest.iter().map(|a| a.parse().expect("a number")).collect();
    let [delay, limit, burst, held, pool] = numbers.as_slice() else {
        panic!("usage: spool_release <smtp|ses> <delay_ms> <limit> <burst> <held> <pool_size>");
    };
    let (delay, held) = (Duration::from_millis(*delay), *held as usize);
    let dir = scratch_path("bench-spool-release");
    fill(&dir, held).await;

    let layer = hold_layer(*limit, 1000, *burst) + &spool_section(&dir);
    let upstream_keys = format!("pool_size = {pool}\ntimeout_ms = 30000");
    let (text, inner, count): (String, Arc<dyn Forwarder>, Box<dyn Fn() -> usize>) =
        match kind.as_str() {
            "smtp" => {
                let up = Arc::new(TestUpstream::start().await);
                let far = delayed(up.addr(), delay).await;
                let text = TestConfig::new()
                    .upstream(&format!("smtp://{far}"))
                    .then(&upstream_keys)
                    .then("tls = \"none\"")
                    .then(&layer)
                    .text();
                let config = Config::parse(&text).unwrap().upstreams.remove(0);
                let fwd = Arc::new(SmtpForwarder::new(&config).unwrap());
                (text, fwd, Box::new(move || up.messages().len()))
            }
            "ses" => {
                let ses = FakeSes::start().await;
                ses.set_account(1_000_000.0, true);
                let far = delayed(ses.addr, delay).await;
                let text = TestConfig::new()
                    .upstream("ses://eu-west-1")
                    .then(&format!("endpoint_url = \"http://{far}\""))
                    .then(&upstream_keys)
                    .then(&layer)
                    .text();
                let fwd = forwarder(&text, GOOD_KEY);
                (text, fwd, Box::new(move || ses.sent().len()))
            }
            other => panic!("no such kind {other:?}: smtp or ses"),
        };
    let timed = Arc::new(Timed {
        inner,
        at: Mutex::default(),
    });
    let relay = Relay::start(&text, timed.clone()).await;
    let start = Instant::now();
    while count() < held {
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "not all released"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    relay.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
    let sent = timed.at.lock().unwrap().clone();
    assert_eq!(sent.len(), held, "each sent once");
    let rate = (held - 1) as f64 / (sent[held - 1] - sent[0]).as_secs_f64();
    println!(
        "{kind:<5} delay {:>3} ms  pool {pool:>3}  layer {limit}/s burst {burst}  {held} held:  \
         {rate:6.1} msg/s  most sent in 1 s {:>4} (limit + burst {})",
        delay.as_millis(),
        most_in_a_second(&sent),
        limit + burst
    );
}

/// A forwarder that notes when the relay hands it each message.
struct Timed {
    inner: Arc<dyn Forwarder>,
    at: Mutex<Vec<Instant>>,
}

impl Forwarder for Timed {
    fn send<'a>(&'a self, message: &'a Outgoing<'a>) -> ForwardFuture<'a> {
        self.at.lock().unwrap().push(Instant::now());
        self.inner.send(message)
    }

    fn check(&self) -> CheckFuture<'_> {
        self.inner.check()
    }

    fn offers(&self) -> Offers<'_> {
        self.inner.offers()
    }
}

/// Holds `held` messages in the spool at `dir`: a relay whose hold layer lets one message a
/// day through (the first message, which goes to a forwarder in memory) holds the rest.
async fn fill(dir: &Path, held: usize) {
    let text = TestConfig::new()
        .upstream("file://unused")
        .then(&hold_layer(1, 86_400_000, 1))
        .then(&spool_section(dir))
        .text();
    let relay = Relay::start(&text, MemoryForwarder::new()).await;
    let body = format!("Subject: bench\r\n\r\n{}\r\n", "x".repeat(1000));
    let mut tasks = Vec::new();
    for batch in 0..20 {
        let mut c = relay.memory_client().await;
        let body = body.clone();
        let n = (held + 1) / 20 + usize::from(batch < (held + 1) % 20);
        tasks.push(tokio::spawn(async move {
            for _ in 0..n {
                let (code, text) = c
                    .send_mail("app@example.com", &["to@example.net"], body.as_bytes())
                    .await;
                assert_eq!(code, 250, "{text}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    relay.stop().await;
    let files = std::fs::read_dir(dir.join("held")).unwrap().count();
    assert_eq!(files, held, "held in the spool");
}

fn hold_layer(limit: u64, interval_ms: u64, burst: u64) -> String {
    format!(
        "[[throttle]]\nname = \"hold\"\nkey = \"none\"\ncost = \"message\"\nlimit = {limit}\n\
         interval_ms = {interval_ms}\nburst = {burst}\nmode = \"hold\"\nmax_wait_ms = 0\n\
         max_held = 1000000\n"
    )
}

fn spool_section(dir: &Path) -> String {
    format!("[spool]\ndir = \"{}\"\nmin_free_bytes = 0\n", dir.display())
}

/// The most of `times` (in order) in any 1 s window.
fn most_in_a_second(times: &[Instant]) -> usize {
    let mut most = 0;
    let mut first = 0;
    for (i, t) in times.iter().enumerate() {
        while times[first] + Duration::from_secs(1) <= *t {
            first += 1;
        }
        most = most.max(i + 1 - first);
    }
    most
}

/// A port whose connections reach `target` with what the client sends held `delay`.
async fn delayed(target: SocketAddr, delay: Duration) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    support::delay::serve(listener, target, delay);
    addr
}
