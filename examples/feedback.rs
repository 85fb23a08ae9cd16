//! Upstream feedback benchmark, run by `bench/feedback.sh`: an SES-like upstream in memory
//! (`HiddenRate`, 10 recipients a second, `454 Throttling failure` when empty) behind the relay
//! with one adaptive `key = "none"` layer set at 2x, 4x, 10x, 1x and 0.5x of it, with the
//! measured rule and the multiplicative one side by side in one run. 40 clients send 5
//! messages each (in-memory sessions, real time), `max_wait_ms = 60000`. Then the hidden rate
//! (20/s, the relay at 40/s, 20 clients sending without pause) halves at 12 s and comes back at
//! 22 s: how long each rule takes to follow.
//!
//! ```text
//! feedback [clients] [messages_each] [hidden_rate]
//! ```

use mailsluice_test_support as support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::hidden_rate::HiddenRate;
use support::relay::{config_text, Relay};

const RULES: [&str; 2] = ["measured", "multiplicative"];

struct Run {
    delivered: usize,
    offered: usize,
    refusals: u64,
    rate: f64,
    lowest: u64,
    limit: u64,
    took: Duration,
}

fn layer(limit: u64, rule: &str) -> String {
    format!(
        "[[throttle]]\nname = \"account\"\nkey = \"none\"\ncost = \"recipients\"\nlimit = {limit}\n\
         interval_ms = 1000\nmax_wait_ms = 60000\nadapt = \"{rule}\"\n"
    )
}

/// Samples the layer's limit every 50 ms until `stop`: `(since start, limit)`.
fn watch(relay: &Arc<Relay>, stop: &Arc<AtomicBool>) -> tokio::task::JoinHandle<Vec<(f64, u64)>> {
    let (relay, stop) = (relay.clone(), stop.clone());
    tokio::spawn(async move {
        let (started, mut seen) = (Instant::now(), Vec::new());
        while !stop.load(Ordering::SeqCst) {
            let limit = relay.throttle.effective_limit(0).unwrap_or(0);
            seen.push((started.elapsed().as_secs_f64(), limit));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        seen
    })
}

async fn run(limit: u64, rule: &str, clients: usize, each: usize, hidden: u64) -> Run {
    let upstream = HiddenRate::new(hidden);
    let text = config_text("file://unused", "", &layer(limit, rule));
    let relay = Arc::new(Relay::start(&text, upstream.clone()).await);
    let stop = Arc::new(AtomicBool::new(false));
    let limits = watch(&relay, &stop);
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let mut client = relay.memory_connect();
            tokio::spawn(async move {
                client.greeting().await;
                let mut out = Vec::new();
                for m in 0..each {
                    let msg = format!("Subject: c{c}m{m}\r\n\r\nbody\r\n");
                    let rcpt = ["user@example.net"];
                    let (code, _) = client
                        .send_mail("a@example.com", &rcpt, msg.as_bytes())
                        .await;
                    out.push(code);
                }
                out
            })
        })
        .collect();
    let mut replies = Vec::new();
    for t in tasks {
        replies.extend(t.await.unwrap());
    }
    let span = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    let seen = limits.await.unwrap();
    let accepted = upstream.accepted();
    let mut subjects: Vec<_> = accepted.iter().map(|(_, m, _)| m.clone()).collect();
    subjects.sort();
    subjects.dedup();
    assert_eq!(subjects.len(), accepted.len(), "a message went twice");
    Run {
        delivered: replies.iter().filter(|&&c| c == 250).count(),
        offered: replies.len(),
        refusals: upstream.rate_refusals(),
        rate: accepted.len() as f64 / span.as_secs_f64().max(1e-9),
        lowest: seen.iter().map(|s| s.1).min().unwrap_or(limit),
        limit: relay.throttle.effective_limit(0).unwrap_or(limit),
        took: span,
    }
}

/// The hidden rate halves at 12 s and is back at 22 s: `(seconds from the halving until the
/// limit is within 80-100 % of the new rate and stays there until the return, seconds from
/// the return until the limit is at 85 % of it again, 454s)`.
async fn follow(rule: &str) -> (Option<f64>, Option<f64>, u64) {
    let upstream = HiddenRate::new(20);
    let text = config_text("file://unused", "", &layer(40, rule));
    let relay = Arc::new(Relay::start(&text, upstream.clone()).await);
    let stop = Arc::new(AtomicBool::new(false));
    let limits = watch(&relay, &stop);
    let senders: Vec<_> = (0..20)
        .map(|c| {
            let mut client = relay.memory_connect();
            let stop = stop.clone();
            tokio::spawn(async move {
                client.greeting().await;
                let mut m = 0;
                while !stop.load(Ordering::SeqCst) {
                    let msg = format!("Subject: f{c}m{m}\r\n\r\nbody\r\n");
                    let rcpt = ["user@example.net"];
                    client
                        .send_mail("a@example.com", &rcpt, msg.as_bytes())
                        .await;
                    m += 1;
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(12)).await;
    upstream.set_rate(10);
    tokio::time::sleep(Duration::from_secs(10)).await;
    upstream.set_rate(20);
    tokio::time::sleep(Duration::from_secs(20)).await;
    stop.store(true, Ordering::SeqCst);
    for s in senders {
        s.await.unwrap();
    }
    let seen = limits.await.unwrap();
    let low: Vec<_> = seen
        .iter()
        .filter(|s| (12.0..22.0).contains(&s.0))
        .collect();
    let settled = (0..low.len())
        .find(|&i| low[i..].iter().all(|s| (8..=10).contains(&s.1)))
        .map(|i| low[i].0 - 12.0);
    let up = (seen.iter().find(|s| s.0 >= 22.0 && s.1 >= 17)).map(|s| s.0 - 22.0);
    (settled, up, upstream.rate_refusals())
}

#[tokio::main]
async fn main() {
    let arg = |i: usize, default: u64| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(default)
    };
    let (clients, each, hidden) = (arg(1, 40) as usize, arg(2, 5) as usize, arg(3, 10));
    println!("{clients} clients x {each} messages, hidden rate {hidden}/s, max_wait 60 s");
    println!(
        "| relay limit | rule | delivered/offered | upstream 454s | delivered rate / hidden | lowest limit | limit at end | run |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for times in [2.0, 4.0, 10.0, 1.0, 0.5] {
        let limit = (hidden as f64 * times).round() as u64;
        for rule in RULES {
            let r = run(limit, rule, clients, each, hidden).await;
            println!(
                "| {limit}/s ({times}x) | {rule} | {}/{} | {} ({:.1} %) | {:.2} | {} | {} | {:.1} s |",
                r.delivered,
                r.offered,
                r.refusals,
                100.0 * r.refusals as f64 / r.offered as f64,
                r.rate / hidden as f64,
                r.lowest,
                r.limit,
                r.took.as_secs_f64()
            );
        }
    }
    println!();
    println!(
        "Hidden 20/s, relay at 40/s, 20 clients; halved to 10/s at 12 s, back to 20/s at 22 s"
    );
    println!("| rule | settled at 8-10/s after the halving | back at >= 17/s after the return | upstream 454s |");
    println!("|---|---|---|---|");
    let secs = |s: Option<f64>| s.map_or("never".to_string(), |s| format!("{s:.2} s"));
    for rule in RULES {
        let (down, up, refusals) = follow(rule).await;
        println!("| {rule} | {} | {} | {refusals} |", secs(down), secs(up));
    }
}
