//! Load: thousands of concurrent connections to the binary, some waiting in one
//! tenant's queue, every one answered correctly, the invariant held, and the relay's resident
//! memory per connection measured (printed, and bounded loosely: this is a debug build;
//! `bench/scale.sh` records the release build's figures). The full size of the issue runs in
//! CI: 10,000 connections, 2,000 of them waiting (`MAILSLUICE_LOAD_CONNECTIONS` and
//! `MAILSLUICE_LOAD_WAITING` change it). It takes about 15 s, 10 of them the waiters' wait.

use std::time::Duration;

use crate::support::load::{run, LoadSpec};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).map_or(default, |v| v.parse().expect(name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_connections_some_waiting_all_answered() {
    let spec = LoadSpec {
        connections: env("MAILSLUICE_LOAD_CONNECTIONS", 10_000),
        waiting: env("MAILSLUICE_LOAD_WAITING", 2000),
        window: Duration::from_secs(10),
    };
    let report = run(spec).await;
    report.print();
    // Loose bounds (a debug build): a waiting connection costs kilobytes, not megabytes.
    assert!(
        report.per_waiting_bytes() < 256 * 1024,
        "{} bytes per waiting connection",
        report.per_waiting_bytes()
    );
    assert!(
        report.per_idle_connection_bytes() < 256 * 1024,
        "{} bytes per idle connection",
        report.per_idle_connection_bytes()
    );
}
