//! `bench/spool_release.sh`: how fast the spool gives one key's held messages back to a
//! distant upstream. One hold-mode layer (`key = "none"`, so one key) of `limit` a second
//! with a `burst`; `held` messages held in a spool by a first relay whose layer lets one
//! message a day through; then a second relay on that spool, its layer at `limit`, releases
//! them to upstream `delay_ms` away (a proxy holding what the relay sends, as a network with
//! that round-trip time would): `ses://` (the SESv2 stand-in) or `smtp://` (the test upstream,
//! PIPELINING), each with `pool_size` connections or requests at once. Printed: the release
//! rate (messages over the time from the first to the last reaching upstream) and the most
//! that reached upstream in any 1 s window, against `limit + burst`.
//!
//! ```text
//! spool_release <smtp|ses> <delay_ms> <limit> <burst> <held> <pool_size>
//! ```

use mailsluice_test_support as support;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mailsluice::upstream::Forwarder;
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
    let (relay, count): (Relay, Box<dyn Fn() -> usize>) = match kind.as_str() {
        "smtp" => {
            let up = Arc::new(TestUpstream::start().await);
            let far = delayed(up.addr(), delay).await;
            let text = TestConfig::new()
                .upstream(&format!("smtp://{far}"))
                .then(&upstream_keys)
                .then("tls = \"none\"")
                .then(&layer)
                .text();
            let relay = Relay::start_configured(&text).await;
            (relay, Box::new(move || up.messages().len()))
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
            let fwd: Arc<dyn Forwarder> = forwarder(&text, GOOD_KEY);
            let relay = Relay::start(&text, fwd).await;
            (relay, Box::new(move || ses.sent().len()))
        }
        other => panic!("no such kind {other:?}: smtp or ses"),
    };
    // The count upstream, every millisecond, until every held message is there.
    let start = Instant::now();
    let mut seen: Vec<(Instant, usize)> = vec![(start, 0)];
    while seen.last().unwrap().1 < held {
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "not all released"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
        let n = count();
        if n != seen.last().unwrap().1 {
            seen.push((Instant::now(), n));
        }
    }
    relay.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
    let first = seen.iter().find(|(_, n)| *n > 0).unwrap().0;
    let last = seen.last().unwrap().0;
    let rate = (held - 1) as f64 / (last - first).as_secs_f64();
    println!(
        "{kind:<5} delay {:>3} ms  pool {pool:>3}  layer {limit}/s burst {burst}  {held} held:  \
         {rate:6.1} msg/s  most in 1 s {:>4} (limit + burst {})",
        delay.as_millis(),
        most_in_a_second(&seen),
        limit + burst
    );
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

/// The most messages that reached upstream in any 1 s window, from the counts seen.
fn most_in_a_second(seen: &[(Instant, usize)]) -> usize {
    let mut most = 0;
    let mut j = 0;
    for &(t, n) in seen {
        while seen[j].0 + Duration::from_secs(1) <= t {
            j += 1;
        }
        // The messages counted after the sample before the window opened.
        let before = if j == 0 { 0 } else { seen[j - 1].1 };
        most = most.max(n - before);
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
