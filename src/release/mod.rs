//! The spool's driver, as `smtp/deliver.rs` is a session's: one task per spool that takes the
//! held messages as they become due and runs each one's journey through `pipeline`, with
//! nobody waiting on it.
//!
//! - here: the loop. The spool's index gives the messages that may go: a key's in the order
//!   they came, up to its route's concurrency (its upstream's `pool_size`, learned from its
//!   first attempt) at once, so that a key's release is bound by its layers' rate, not by
//!   upstream's round trip; one that failed for now steps aside until its own time, and the
//!   key's others go on. Up to [`MAX_IN_FLIGHT`] at once in all, each in its layers' FIFO
//!   queues with the live clients, so held messages and live clients share the buckets (and
//!   `fair_by` shares them between tenants) and neither starves the other. At shutdown it
//!   stops taking messages; those in flight finish within the grace, the rest stay held for
//!   the next start (with S3 and SQS: put back at once for the other replicas). With S3 and
//!   SQS the spool's receiver, started here, fills the index from the shared queue.
//! - `turns`: a key's messages out at once take their tokens in the order they were taken.
//! - `client`: the pipeline's client for a message nobody waits on.
//! - `probe`: while an upstream's breaker is open, one message waiting for it made due per
//!   probe interval.
//! - `attempt`: one attempt: read back, handed to the pipeline's intake, and what its
//!   verdict's fate (`pipeline::Fate`) makes of it (removed, again after a backoff, given up
//!   with a report).
//! - `dsn`: the delivery status notification (RFC 3464) a given-up message's sender gets.
//! - `report`: the attempt's result counted, a give-up warned of; its verdict's account (the
//!   `release` line, the spans, the `released` event) is `crate::pipeline::account`'s.

mod attempt;
mod client;
pub mod dsn;
mod probe;
mod report;
mod turns;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;

use crate::spool::Spool;
use crate::state::context::Live;
use crate::state::shutdown::Shutdown;
use turns::Turns;

/// Held messages with upstream (or waiting for their tokens) at once, all keys together.
pub const MAX_IN_FLIGHT: usize = 64;

/// How often failed messages past `max_hold_ms` are looked for.
const SWEEP: Duration = Duration::from_secs(60);

/// Releases `spool`'s messages until `shutdown`; each attempt runs on `tasks` (the sessions'
/// tracker: the shutdown waits for it within the grace as for a session), with the context
/// in force when it starts.
pub async fn run(live: Arc<Live>, spool: Arc<Spool>, mut shutdown: Shutdown, tasks: TaskTracker) {
    let room = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let clock = spool.clock().clone();
    let mut sweep = tokio::time::interval(SWEEP);
    let mut turns = Turns::default();
    let mut probes = probe::Probes::default();
    // With S3 and SQS, the entries this replica releases are received from the shared queue.
    let mut stop = shutdown.clone();
    let receiving = spool.start_receiving(async move { stop.wait().await });
    loop {
        let Some(ctx) = live.current() else {
            return;
        };
        turns.forget_passed();
        let probe_at = probes.nudge(&ctx, &spool);
        for ticket in spool.take_due(room.available_permits()) {
            let permit = room.clone().try_acquire_owned().expect("room counted");
            let turn = turns.next(&ticket.key);
            let (ctx, spool, bell) = (ctx.clone(), spool.clone(), live.grace_bell());
            tasks.spawn(async move {
                attempt::attempt(&ctx, &spool, ticket, bell, turn).await;
                drop(permit);
                spool.nudge();
            });
        }
        let next = spool.next_due().filter(|_| room.available_permits() > 0);
        let due = async {
            match next {
                Some(at) => tokio::time::sleep_until(clock.deadline(at)).await,
                None => std::future::pending().await,
            }
        };
        let probe = async {
            match probe_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.wait() => break,
            _ = probe => {}
            // An attempt ended, a message was held, an operator let one go.
            _ = spool.changed() => {}
            _ = due => {}
            _ = sweep.tick() => {
                for id in spool.failed_expired() {
                    tracing::warn!(target: "mailsluice::release", id = &*id, "spool.failed_expired: a failed message held past max_hold_ms is removed");
                    spool.remove(&id).await;
                }
            }
        }
    }
    if let Some(receiving) = receiving {
        let _ = receiving.await;
    }
    spool.put_back_unstarted().await;
}
