//! Redis failing under load: killed while messages flow, restarted, then slowed
//! past `[redis] timeout_ms` (`CLIENT PAUSE`, `DEBUG SLEEP`). For each `on_error`, every
//! answer is what it promises (`local` and `allow`: mail keeps flowing; `reject`: `451 4.4.3`
//! while Redis cannot answer), the relay goes back to Redis by itself, and the invariant
//! (`support::invariant`) holds over every message. Real time, a private `redis-server`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::config::TestConfig;
use crate::support::invariant::{assert_holds, settle, ClientLog, Seen};
use crate::support::redis::RedisServer;
use crate::support::relay::{upstream_relay, Relay};
use crate::support::traffic::{self, Leave};
use crate::support::upstream::TestUpstream;
use crate::support::wait::until;

/// The phases of a run, in order (the first, Redis up, is 0).
const KILLED: usize = 1;
const RESTARTED: usize = 2;
const SLOW: usize = 3;
const BACK: usize = 4;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Slow {
    /// `CLIENT PAUSE <ms> ALL`: every command waits.
    Pause,
    /// `DEBUG SLEEP <s>`: the whole server stops.
    Sleep,
}

/// How long Redis is made slow; `timeout_ms` is 300.
const SLOW_FOR: Duration = Duration::from_millis(1500);

/// Where each message started and ended, by phase.
#[derive(Default)]
struct Phases {
    now: AtomicUsize,
    done: AtomicUsize,
    seen: Mutex<Vec<(usize, usize, Seen)>>,
}

async fn relay(up: &TestUpstream, redis: &RedisServer, on_error: &str) -> Relay {
    // A generous shared limit: the layer itself never refuses here, only Redis's state can.
    let text = TestConfig::new()
        .upstream(&up.url())
        .then("tls = \"none\"\ntimeout_ms = 5000")
        .then(
            "[[throttle]]\nname = \"account\"\nkey = \"none\"\ncost = \"message\"\nlimit = 100000\n\
             interval_ms = 1000\nstore = \"redis\"",
        )
        .then(&format!(
            "[redis]\nurl = \"{}\"\ntimeout_ms = 300\non_error = \"{on_error}\"",
            redis.url()
        ))
        .text();
    upstream_relay(&text).await
}

/// Waits until `n` more messages were answered.
async fn more(phases: &Phases, n: usize) {
    let target = phases.done.load(Ordering::SeqCst) + n;
    until(&format!("{target} messages answered"), async || {
        phases.done.load(Ordering::SeqCst) >= target
    })
    .await;
}

/// Redis 7 disables DEBUG unless told; older servers neither have nor need the option.
fn debug_allowed() -> bool {
    let out = std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let major = out
        .split("v=")
        .nth(1)
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.parse::<u32>().ok());
    major.is_some_and(|m| m >= 7)
}

async fn outage_under_load(on_error: &str, slow: Slow) {
    let args: &[&str] = match debug_allowed() {
        true => &["--enable-debug-command", "local"],
        false => &[],
    };
    let Some(mut redis) = RedisServer::start_with(args) else {
        return;
    };
    let up = TestUpstream::start().await;
    let r = relay(&up, &redis, on_error).await;
    let log = ClientLog::new();
    let phases = Arc::new(Phases::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut senders = tokio::task::JoinSet::new();
    for s in 0..4 {
        let (addr, log, phases, stop) = (r.addr, log.clone(), phases.clone(), stop.clone());
        senders.spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                let id = format!("s{s}-{n}");
                let start = phases.now.load(Ordering::SeqCst);
                let seen = traffic::send(addr, &log, &id, "acme", Leave::Never).await;
                let end = phases.now.load(Ordering::SeqCst);
                phases.seen.lock().unwrap().push((start, end, seen.clone()));
                phases.done.fetch_add(1, Ordering::SeqCst);
                n += 1;
                if seen.code() != Some(250) {
                    // As a client would, take a breath before the next try.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        });
    }
    more(&phases, 40).await;
    assert!(
        redis.calls("evalsha") + redis.calls("eval") > 0,
        "Redis in use"
    );

    // Killed during load.
    redis.stop();
    phases.now.store(KILLED, Ordering::SeqCst);
    more(&phases, 40).await;

    // Restarted (empty): the relay finds it again by itself.
    redis.restart();
    phases.now.store(RESTARTED, Ordering::SeqCst);
    until("the relay uses the restarted Redis", async || {
        redis.calls("evalsha") + redis.calls("eval") > 0
    })
    .await;
    more(&phases, 40).await;

    // Slowed past the timeout.
    let before = redis.calls("evalsha");
    let slowed = {
        let port = redis.port.to_string();
        let ms = SLOW_FOR.as_millis().to_string();
        let secs = format!("{}", SLOW_FOR.as_secs_f64());
        std::thread::spawn(move || {
            let args: Vec<&str> = match slow {
                Slow::Pause => vec!["CLIENT", "PAUSE", &ms, "ALL"],
                Slow::Sleep => vec!["DEBUG", "SLEEP", &secs],
            };
            let out = std::process::Command::new("redis-cli")
                .args(["-h", "127.0.0.1", "-p", &port])
                .args(&args)
                .output()
                .expect("redis-cli runs");
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        })
    };
    phases.now.store(SLOW, Ordering::SeqCst);
    more(&phases, 20).await;
    let answer = tokio::task::spawn_blocking(move || slowed.join().unwrap())
        .await
        .unwrap();
    assert_eq!(answer, "OK", "{slow:?}");
    // A PING waits for the end of the pause (or sleep): from here Redis answers again.
    assert_eq!(redis.cli(&["PING"]).trim(), "PONG");
    until(
        "the relay uses Redis again after the slow spell",
        async || redis.calls("evalsha") > before,
    )
    .await;
    phases.now.store(BACK, Ordering::SeqCst);
    more(&phases, 40).await;

    stop.store(true, Ordering::SeqCst);
    while let Some(done) = senders.join_next().await {
        done.unwrap();
    }
    r.stop().await;
    settle(&up).await;

    let summary = assert_holds(on_error, &log, &up);
    eprintln!("on_error = {on_error}, {slow:?}: {summary:?}");
    let seen = phases.seen.lock().unwrap();
    let store_refusal = |s: &Seen| matches!(s, Seen::Reply(451, t) if t.starts_with("4.4.3"));
    for (start, end, s) in seen.iter() {
        match on_error {
            "reject" => assert!(
                s.code() == Some(250) || store_refusal(s),
                "{start}..{end}: {s:?}"
            ),
            _ => assert_eq!(s.code(), Some(250), "{on_error} {start}..{end}: {s:?}"),
        }
        if *start == BACK {
            assert_eq!(s.code(), Some(250), "after recovery: {s:?}");
        }
    }
    let refused_in = |phase: usize| {
        seen.iter()
            .filter(|(start, end, s)| *start <= phase && phase <= *end && store_refusal(s))
            .count()
    };
    if on_error == "reject" {
        assert!(refused_in(KILLED) > 0, "451 4.4.3 while Redis was down");
        assert!(refused_in(SLOW) > 0, "451 4.4.3 while Redis was slow");
    } else {
        // Mail flowed while Redis could not answer.
        let during_kill = seen.iter().filter(|(s, e, _)| *s == KILLED && *e == KILLED);
        assert!(during_kill.count() > 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_and_slow_under_load_on_error_local() {
    outage_under_load("local", Slow::Sleep).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_and_slow_under_load_on_error_reject() {
    outage_under_load("reject", Slow::Pause).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_and_slow_under_load_on_error_allow() {
    outage_under_load("allow", Slow::Pause).await;
}
