//! What asynchronous replication costs a shared limit, and what `WAIT` would cost instead.
//! Run by `bench/redis.sh --replicas [trials]` against private `redis-server`s (a primary and
//! its replica on 127.0.0.1), with the relay's own take script (`src/throttle/store/redis/`).
//!
//! ```text
//! replication excess <trials> <chargers> <lag_ms>
//!                                          per trial: <chargers> connections charge one
//!                                          bucket of BURST tokens (no refill to speak of) on
//!                                          the primary as fast as they can; at KILL_AT grants
//!                                          the primary gets SIGKILL, the replica is promoted, and
//!                                          they charge it until it refuses. Grants acknowledged
//!                                          beyond BURST are the excess the lag allowed. With
//!                                          <lag_ms> > 0 the replica reaches the primary through
//!                                          a proxy that holds the replication stream that long
//!                                          and loses what it holds at the kill (a link's
//!                                          latency, or the primary's host dying with it).
//! replication wait <charges>               latency per charge on one connection: the take
//!                                          script alone, then pipelined with `WAIT 1 1000`
//! ```

use mailsluice_test_support as support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::Script;

use support::redis::RedisServer;

/// The bucket of the excess trials: its capacity, and a drip of one token a day; the primary
/// is killed at `KILL_AT` grants, far from empty, so that it never refuses.
const BURST: u64 = 10_000;
const KILL_AT: u64 = 1_000;
const DAY_US: u64 = 86_400_000_000;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: u64| -> u64 {
        args.get(i)
            .map_or(default, |s| s.parse().expect("a number"))
    };
    if !support::redis::have_redis() {
        eprintln!("replication: redis-server is not installed");
        std::process::exit(2);
    }
    match args.first().map(String::as_str) {
        Some("excess") => excess(num(1, 20), num(2, 8) as usize, num(3, 0)).await,
        Some("wait") => wait(num(1, 5000) as usize).await,
        _ => {
            eprintln!("usage: replication excess|wait ... (see the source's doc)");
            std::process::exit(2);
        }
    }
}

/// The relay's take script, as the store builds it.
fn take_script() -> Script {
    Script::new(&format!(
        "{}{}{}",
        include_str!("../src/throttle/store/redis/bucket.lua"),
        include_str!("../src/throttle/store/redis/adaptive.lua"),
        include_str!("../src/throttle/store/redis/take.lua"),
    ))
}

/// One message's charge of 1 on `key`: no waiting, Redis's clock, a drip bucket of `BURST`.
fn charge<'a>(script: &'a Script, key: &str) -> redis::ScriptInvocation<'a> {
    let mut inv = script.prepare_invoke();
    inv.key(key)
        .arg(0)
        .arg("")
        .arg("d")
        .arg(1)
        .arg(BURST)
        .arg(1)
        .arg(DAY_US);
    inv
}

async fn connect(server: &RedisServer) -> MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("connects")
}

/// Trials of a failover under charges; prints each trial's grants and the excess over them.
async fn excess(trials: u64, chargers: usize, lag_ms: u64) {
    let lag = Duration::from_millis(lag_ms);
    println!(
        "bucket of {BURST} tokens, {chargers} connections charging 1 token each as fast as \
         they can; replication stream held {lag_ms} ms; primary SIGKILLed at {KILL_AT} grants, \
         replica promoted (REPLICAOF NO ONE)"
    );
    let mut excesses = Vec::new();
    for trial in 1..=trials {
        let (before, after, secs) = one_failover(chargers, lag).await;
        let excess = (before + after) as i64 - BURST as i64;
        println!(
            "trial {trial:>3}: granted {before} by the old primary ({:.0}/s), {after} by the \
             new; excess {excess}",
            before as f64 / secs
        );
        excesses.push(excess);
    }
    excesses.sort();
    let mean = excesses.iter().sum::<i64>() as f64 / excesses.len() as f64;
    println!(
        "excess over {trials} failovers: min {} median {} max {} mean {mean:.2} tokens",
        excesses[0],
        excesses[excesses.len() / 2],
        excesses[excesses.len() - 1]
    );
}

/// One trial: grants acknowledged by the old primary and by the new one, and the seconds the
/// old primary granted for.
async fn one_failover(chargers: usize, lag: Duration) -> (u64, u64, f64) {
    let mut primary = RedisServer::start().expect("redis");
    let link = LagLink::start(&primary, lag).await;
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &link.port.to_string()])
        .expect("redis");
    until_synced(&replica).await;
    let script = Arc::new(take_script());
    let old = Arc::new(AtomicU64::new(0));
    let new = Arc::new(AtomicU64::new(0));
    let promoted = Arc::new(AtomicBool::new(false));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..chargers {
        let (script, old, new, promoted) =
            (script.clone(), old.clone(), new.clone(), promoted.clone());
        let (mut conn, replica_url) = (connect(&primary).await, replica.url());
        tasks.spawn(async move {
            let mut on_new = false;
            loop {
                let r: Result<Vec<i64>, _> =
                    charge(&script, "bucket").invoke_async(&mut conn).await;
                match r {
                    Ok(r) if r.first() == Some(&0) => {
                        let n = if on_new { &new } else { &old };
                        n.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(_) if on_new => return,
                    Ok(r) => panic!("the old primary refused before the kill: {r:?}"),
                    Err(_) if on_new => panic!("the new primary failed"),
                    Err(_) => {
                        while !promoted.load(Ordering::SeqCst) {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                        conn = redis::Client::open(replica_url.as_str())
                            .unwrap()
                            .get_multiplexed_async_connection()
                            .await
                            .expect("connects to the new primary");
                        on_new = true;
                    }
                }
            }
        });
    }
    let start = Instant::now();
    while old.load(Ordering::SeqCst) < KILL_AT {
        tokio::task::yield_now().await;
    }
    let secs = start.elapsed().as_secs_f64();
    // The process and the link go down together, as with the primary's host.
    primary.signal(libc::SIGKILL);
    link.cut();
    primary.stop();
    let answer = replica.cli(&["REPLICAOF", "NO", "ONE"]);
    assert!(answer.contains("OK"), "REPLICAOF NO ONE: {answer}");
    promoted.store(true, Ordering::SeqCst);
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    (old.load(Ordering::SeqCst), new.load(Ordering::SeqCst), secs)
}

async fn until_synced(replica: &RedisServer) {
    for _ in 0..1000 {
        if replica
            .cli(&["INFO", "replication"])
            .contains("master_link_status:up")
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the replica did not sync");
}

/// The replication link: a proxy on 127.0.0.1 between the replica and the primary that holds
/// what the primary sends for `lag` and, once cut, loses what it holds.
struct LagLink {
    port: u16,
    tasks: Arc<std::sync::Mutex<tokio::task::JoinSet<()>>>,
}

impl LagLink {
    async fn start(primary: &RedisServer, lag: Duration) -> LagLink {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let target: std::net::SocketAddr = format!("127.0.0.1:{}", primary.port).parse().unwrap();
        let tasks = Arc::new(std::sync::Mutex::new(tokio::task::JoinSet::new()));
        let set = tasks.clone();
        tasks.lock().unwrap().spawn(async move {
            while let Ok((replica, _)) = listener.accept().await {
                let Ok(primary) = tokio::net::TcpStream::connect(target).await else {
                    continue;
                };
                let (mut from_replica, mut to_replica) = replica.into_split();
                let (mut from_primary, mut to_primary) = primary.into_split();
                let mut set = set.lock().unwrap();
                set.spawn(async move {
                    let _ = tokio::io::copy(&mut from_replica, &mut to_primary).await;
                });
                set.spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                    tokio::spawn(async move {
                        let mut buf = vec![0; 64 * 1024];
                        while let Ok(n @ 1..) = from_primary.read(&mut buf).await {
                            let at = tokio::time::Instant::now() + lag;
                            if tx.send((at, buf[..n].to_vec())).is_err() {
                                return;
                            }
                        }
                    });
                    while let Some((at, bytes)) = rx.recv().await {
                        tokio::time::sleep_until(at).await;
                        if to_replica.write_all(&bytes).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        LagLink { port, tasks }
    }

    /// The link gone with the primary's host: what it holds is lost.
    fn cut(&self) {
        self.tasks.lock().unwrap().abort_all();
    }
}

/// Latency per charge, one connection, without and with `WAIT 1 1000` after each charge.
async fn wait(charges: usize) {
    let primary = RedisServer::start().expect("redis");
    let _replica = RedisServer::replica_of(&primary).expect("redis");
    let script = take_script();
    let mut conn = connect(&primary).await;
    // Loads the script, so that every timed call is one EVALSHA.
    let _: Vec<i64> = charge(&script, "warm")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    let load = script.load_async(&mut conn).await.unwrap();
    println!("{charges} charges on one connection, primary and replica on 127.0.0.1");
    for with_wait in [false, true] {
        let mut took = Vec::with_capacity(charges);
        let mut short = 0;
        for i in 0..charges {
            let key = format!("k{}", i % 100);
            let start = Instant::now();
            let mut pipe = redis::pipe();
            pipe.cmd("EVALSHA")
                .arg(&load)
                .arg(1)
                .arg(&key)
                .arg(0)
                .arg("")
                .arg("d")
                .arg(1)
                .arg(BURST)
                .arg(1_000_000)
                .arg(1_000_000);
            if with_wait {
                pipe.cmd("WAIT").arg(1).arg(1000);
                let (_, acked): (Vec<i64>, i64) = pipe.query_async(&mut conn).await.unwrap();
                short += usize::from(acked < 1);
            } else {
                let (_,): (Vec<i64>,) = pipe.query_async(&mut conn).await.unwrap();
            }
            took.push(start.elapsed());
        }
        took.sort();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let mean = took.iter().map(|d| us(*d)).sum::<f64>() / took.len() as f64;
        println!(
            "{:<22} mean {mean:>7.1} us  p50 {:>7.1} us  p99 {:>7.1} us  max {:>8.1} us{}",
            if with_wait {
                "EVALSHA + WAIT 1 1000"
            } else {
                "EVALSHA"
            },
            us(took[took.len() / 2]),
            us(took[took.len() * 99 / 100]),
            us(took[took.len() - 1]),
            if with_wait {
                format!("  (WAIT timed out without the replica's ack: {short})")
            } else {
                String::new()
            }
        );
    }
}
