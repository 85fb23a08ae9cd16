//! Upstream feedback benchmark, run by `bench/feedback.sh`: an SES-like upstream in memory
//! (`HiddenRate`, 10 recipients a second, `454 Throttling failure` when empty) behind the relay
//! with one `key = "none"` layer at 10, 20 and 40/s, adaptive on and off, side by side in one
//! run. 40 clients send 5 messages each (in-memory sessions, real time), `max_wait_ms = 60000`.
//!
//! ```text
//! feedback [clients] [messages_each] [hidden_rate]
//! ```

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use support::hidden_rate::HiddenRate;
use support::relay::{config_text, Relay};

struct Run {
    delivered: usize,
    offered: usize,
    refusals: u64,
    rate: f64,
    p99: Duration,
    limit: u64,
    took: Duration,
}

async fn run(limit: u64, adaptive: bool, clients: usize, each: usize, hidden: u64) -> Run {
    let upstream = HiddenRate::new(hidden);
    let layer = format!(
        "[[throttle]]\nname = \"account\"\nkey = \"none\"\ncost = \"recipients\"\nlimit = {limit}\n\
         interval_ms = 1000\nmax_wait_ms = 60000\nadaptive = {adaptive}\n"
    );
    let relay = Relay::start(&config_text("file://unused", "", &layer), upstream.clone()).await;
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let mut client = relay.memory_connect();
            tokio::spawn(async move {
                client.greeting().await;
                let mut out = Vec::new();
                for m in 0..each {
                    let msg = format!("Subject: c{c}m{m}\r\n\r\nbody\r\n");
                    let sent = Instant::now();
                    let rcpt = ["user@example.net"];
                    let (code, _) = client
                        .send_mail("a@example.com", &rcpt, msg.as_bytes())
                        .await;
                    out.push((code, sent.elapsed()));
                }
                out
            })
        })
        .collect();
    let mut replies = Vec::new();
    for t in tasks {
        replies.extend(t.await.unwrap());
    }
    // Over the whole run: from the first message to the last client's last reply.
    let span = started.elapsed();
    let accepted = upstream.accepted();
    let mut waits: Vec<Duration> = replies.iter().map(|(_, w)| *w).collect();
    waits.sort();
    let p99 = waits[(waits.len() * 99).div_ceil(100).saturating_sub(1)];
    let delivered = replies.iter().filter(|(c, _)| *c == 250).count();
    Run {
        delivered,
        offered: replies.len(),
        refusals: upstream.rate_refusals(),
        rate: accepted.len() as f64 / span.as_secs_f64().max(1e-9),
        p99,
        limit: relay.throttle.effective_limit(0).unwrap_or(limit),
        took: span,
    }
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
        "| relay limit | adaptive | delivered/offered | upstream 454s | delivered rate / hidden | p99 wait | limit at end | run |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for limit in [10, 20, 40] {
        for adaptive in [true, false] {
            let r = run(limit, adaptive, clients, each, hidden).await;
            println!(
                "| {limit}/s | {} | {}/{} ({:.0} %) | {} | {} | {:.1} s | {} | {:.1} s |",
                if adaptive { "on" } else { "off" },
                r.delivered,
                r.offered,
                100.0 * r.delivered as f64 / r.offered as f64,
                r.refusals,
                // Under a second the upstream's burst alone decides: no rate to speak of.
                match r.took < Duration::from_secs(1) {
                    true => "— (run under 1 s)".to_string(),
                    false => format!("{:.2}", r.rate / hidden as f64),
                },
                r.p99.as_secs_f64(),
                r.limit,
                r.took.as_secs_f64()
            );
        }
    }
}
