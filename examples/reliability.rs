//! Reliability benchmarks, run by `bench/scale.sh` and `bench/soak.sh` against the
//! release binary (`MAILSLUICE_BIN`, default `$CARGO_TARGET_DIR/release/mailsluice`). It
//! shares the test harness (`tests/support`): the test upstream, the invariant checker, the
//! tolerant client. Every run ends with the invariant checked over every message.
//!
//! ```text
//! reliability scale <connections> <waiting>   resident memory with that many connections,
//!                                             of which <waiting> wait in one tenant's queue
//! reliability faults <seconds> <one_in> [fast] throughput with 1 upstream transaction in
//!                                             <one_in> failing, beside a run without faults
//!                                             (`fast`: no stalls among the faults)
//! reliability soak <seconds>                  mixed traffic with injected faults; resident
//!                                             memory sampled every 10 s
//! reliability campaign <seconds>              the fault campaign (`support::campaign`):
//!                                             three relay processes, Sentinel-managed
//!                                             Redis, seven faults in turn; its table
//! ```

use mailsluice_test_support as support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::config::TestConfig;
use support::invariant::{self, settle, ClientLog, Seen};
use support::load::{self, LoadSpec};
use support::process::RelayProcess;
use support::traffic::{self, Leave};
use support::upstream::{Fault, Step, TestUpstream};

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: u64| -> u64 {
        args.get(i)
            .map_or(default, |s| s.parse().expect("a number"))
    };
    match args.first().map(String::as_str) {
        Some("scale") => {
            let spec = LoadSpec {
                connections: num(1, 10_000) as usize,
                waiting: num(2, 2_000) as usize,
                window: Duration::from_secs(num(3, 10)),
            };
            load::run(spec).await.print();
        }
        Some("faults") => {
            let stalls = args.get(3).map(String::as_str) != Some("fast");
            faults(Duration::from_secs(num(1, 20)), num(2, 20) as usize, stalls).await
        }
        Some("soak") => soak(Duration::from_secs(num(1, 600))).await,
        Some("campaign") => campaign(num(1, 600)).await,
        _ => {
            eprintln!("usage: reliability scale|faults|soak ... (see the source's doc)");
            std::process::exit(2);
        }
    }
}

/// The faults an upstream injects in the benchmarks, in turn; `stalls`: with two that hold
/// a connection past the relay's timeout.
fn fault_mix(stalls: bool) -> Vec<Fault> {
    let mut faults = vec![
        Fault::CloseOnConnect,
        Fault::reply(Step::Greeting, 421, "4.3.2 too busy"),
        Fault::reply(Step::Mail, 451, "4.3.0 try later"),
        Fault::reply(Step::Rcpt, 550, "5.1.1 no such user"),
        Fault::reply(Step::Data, 451, "4.3.0 try later"),
        Fault::reply(Step::EndOfData, 452, "4.3.1 insufficient storage"),
        Fault::DropMidData,
    ];
    if stalls {
        faults.push(Fault::stall(Step::EndOfData, Duration::from_millis(1500)));
        faults.push(Fault::stall(Step::Rcpt, Duration::from_millis(1500)));
    }
    faults
}

fn relay_config(up: &TestUpstream, layers: &str) -> String {
    // The minimal head: the benchmark's relay has a name of its own.
    TestConfig::minimal()
        .smtp("hostname = \"relay.bench\"\nmax_connections = 20000\nmax_connections_per_ip = 20000")
        .upstream(&up.url())
        .then("tls = \"none\"\ntimeout_ms = 1000\npool_size = 32")
        .then("[admin]\nlisten = \"127.0.0.1:0\"")
        .then(layers)
        .text()
}

/// `clients` senders for `duration`, each sending message after message on new connections;
/// what they saw is in the log. Messages per second.
async fn drive(
    relay: &RelayProcess,
    log: &ClientLog,
    clients: usize,
    duration: Duration,
    tenant: impl Fn(usize) -> String + Send + Sync + 'static,
    leave: impl Fn(usize) -> Leave + Send + Sync + 'static,
) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicUsize::new(0));
    let (tenant, leave) = (Arc::new(tenant), Arc::new(leave));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let (addr, log, stop, next) = (relay.addr, log.clone(), stop.clone(), next.clone());
        let (tenant, leave) = (tenant.clone(), leave.clone());
        tasks.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let id = format!("m{i}");
                traffic::send(addr, &log, &id, &tenant(i), leave(i)).await;
            }
        });
    }
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    while let Some(t) = tasks.join_next().await {
        t.unwrap();
    }
    log.len() as f64 / started.elapsed().as_secs_f64()
}

/// Stops the relay (SIGTERM, exit 0), lets upstream settle, checks the invariant.
async fn finish(mut relay: RelayProcess, up: &TestUpstream, log: &ClientLog) -> invariant::Summary {
    relay.signal(libc::SIGTERM);
    let status = relay.wait(Duration::from_secs(60)).await;
    assert_eq!(status.code(), Some(0), "the relay exits 0");
    settle(up).await;
    invariant::assert_holds("bench", log, up)
}

async fn faults(duration: Duration, one_in: usize, stalls: bool) {
    let mut rates = Vec::new();
    for faulty in [false, true] {
        let up = TestUpstream::start().await;
        if faulty {
            up.set_fault_mix(one_in, fault_mix(stalls));
        }
        let relay = RelayProcess::start(&relay_config(&up, ""), "warn,mailsluice=info");
        let log = ClientLog::new();
        let rate = drive(
            &relay,
            &log,
            64,
            duration,
            |i| format!("t{}", i % 50),
            |_| Leave::Never,
        )
        .await;
        let summary = finish(relay, &up, &log).await;
        let delivered = summary.acknowledged as f64 / duration.as_secs_f64();
        let label = if faulty {
            let kind = if stalls { "with stalls" } else { "no stalls" };
            format!("1 in {one_in} transactions failing ({kind})")
        } else {
            "no faults".to_string()
        };
        println!("{label:<42} {rate:>8.0} answers/s {delivered:>8.0} delivered/s");
        println!("  {summary:?}");
        print_refusals(&log);
        rates.push(rate);
    }
    println!(
        "answers/s with faults / without: {:.2}",
        rates[1] / rates[0]
    );
}

/// The long form of the fault campaign; exits 1 on any broken invariant.
async fn campaign(seconds: u64) {
    let plan = support::campaign::Plan::long(seconds);
    println!(
        "{} relays, {} clients, {} tenants; shared layer {}/s burst {}, per tenant 4/s burst 4; \
         each fault held {:?}, then {:?} of recovery",
        plan.relays,
        plan.clients,
        plan.tenants,
        plan.shared.limit,
        plan.shared.burst,
        plan.hold,
        plan.recovery
    );
    let Some(report) = support::campaign::run(plan).await else {
        eprintln!("campaign: redis-server is not installed");
        std::process::exit(2);
    };
    print!("{}", report.table());
    if !report.violations.is_empty() {
        println!("BROKEN INVARIANTS:\n{}", report.violations.join("\n"));
        std::process::exit(1);
    }
    println!("every invariant holds");
}

async fn soak(duration: Duration) {
    let up = TestUpstream::start().await;
    up.set_fault_mix(20, fault_mix(true));
    // Per-tenant layer (wait; one hot tenant always waits), and an account-wide layer, on
    // Redis when it is installed (then killed and restarted every two minutes).
    let redis = support::redis::RedisServer::start().map(|r| Arc::new(std::sync::Mutex::new(r)));
    let account_store = match &redis {
        Some(r) => format!(
            "store = \"redis\"\n[redis]\nurl = \"{}\"\ntimeout_ms = 300\n",
            r.lock().unwrap().url()
        ),
        None => String::new(),
    };
    let layers = format!(
        "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\ncost = \"message\"\n\
         limit = 20\ninterval_ms = 1000\nburst = 5\nmax_wait_ms = 20000\n\
         [[throttle]]\nname = \"account\"\nkey = \"none\"\ncost = \"message\"\n\
         limit = 400\ninterval_ms = 1000\nmax_wait_ms = 20000\n{account_store}"
    );
    let relay = RelayProcess::start(&relay_config(&up, &layers), "warn,mailsluice=info");
    let log = ClientLog::new();
    let pid = relay.pid();
    let started = Instant::now();
    let samples = Arc::new(std::sync::Mutex::new(Vec::<(u64, u64, usize)>::new()));
    let sampler = {
        let (samples, log) = (samples.clone(), log.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(10));
            loop {
                tick.tick().await;
                let Some(rss) = support::process::rss_kib(pid) else {
                    return;
                };
                let t = started.elapsed().as_secs();
                println!("t={t:>4}s rss={rss:>7} KiB messages={}", log.len());
                samples.lock().unwrap().push((t, rss, log.len()));
            }
        })
    };
    // Every 15 s: upstream closes its connections (with a 421), or (one round in four) stops
    // listening for 2 s; every 2 minutes Redis is killed for 5 s.
    let chaos_stop = Arc::new(AtomicBool::new(false));
    let chaos = {
        let stop = chaos_stop.clone();
        let up = Arc::new(up);
        let up2 = up.clone();
        let task = tokio::spawn(async move {
            let mut round = 0u64;
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_secs(15)).await;
                round += 1;
                if round.is_multiple_of(4) {
                    up2.stop_listening().await;
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    up2.resume_listening().await;
                } else {
                    up2.kick_connections(Some("421 4.4.2 idle timeout"));
                }
                if let (0, Some(redis)) = (round % 8, &redis) {
                    let redis = redis.clone();
                    tokio::task::spawn_blocking(move || {
                        redis.lock().unwrap().stop();
                        std::thread::sleep(Duration::from_secs(5));
                        redis.lock().unwrap().restart();
                    })
                    .await
                    .unwrap();
                }
            }
        });
        (task, up)
    };
    let leave = |i: usize| match i % 50 {
        0 => Leave::DuringData,
        1 => Leave::AfterDot,
        _ => Leave::Never,
    };
    // 40 senders; one message in twenty is of the hot tenant.
    let rate = drive(
        &relay,
        &log,
        40,
        duration,
        |i| match i % 20 {
            0 => "hot".to_string(),
            _ => format!("t{}", i % 30),
        },
        leave,
    )
    .await;
    chaos_stop.store(true, Ordering::Relaxed);
    let (task, up) = chaos;
    task.await.unwrap();
    sampler.abort();
    let summary = finish(relay, &up, &log).await;
    println!("soak: {:.0} s, {rate:.0} answers/s", duration.as_secs_f64());
    println!("{summary:?}");
    let samples = samples.lock().unwrap();
    // Flat: after the first minute (warm-up), the last third's peak against the first's.
    let settled: Vec<u64> = samples
        .iter()
        .filter(|(t, _, _)| *t >= 60)
        .map(|(_, rss, _)| *rss)
        .collect();
    if settled.len() >= 3 {
        let third = settled.len() / 3;
        let first = settled[..third].iter().max().unwrap();
        let last = settled[settled.len() - third..].iter().max().unwrap();
        println!(
            "rss after warm-up: first third peak {first} KiB, last third peak {last} KiB ({:+.1}%)",
            (*last as f64 / *first as f64 - 1.0) * 100.0
        );
    }
    let cut_off = log
        .entries()
        .iter()
        .filter(|(_, s)| *s == Seen::NoReply)
        .count();
    println!("messages cut off by their client: {cut_off}");
    print_refusals(&log);
}

/// How many of each refusal the clients saw.
fn print_refusals(log: &ClientLog) {
    let mut texts = std::collections::BTreeMap::<String, usize>::new();
    for (_, seen) in log.entries() {
        if let Seen::Reply(code, text) = seen {
            if code != 250 {
                *texts.entry(format!("{code} {text:.48}")).or_default() += 1;
            }
        }
    }
    for (text, n) in texts {
        println!("  {n:>7} × {text}");
    }
}
