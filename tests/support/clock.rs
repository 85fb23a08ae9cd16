//! Tokio's paused clock next to real sockets. A paused clock jumps to the next timer as soon
//! as the runtime looks idle, and a runtime waiting on a socket looks idle even when the
//! bytes are on their way; while a blocking task is in flight it does not jump. [`hold`]
//! keeps one in flight, so the clock moves only by `tokio::time::advance` until the hold is
//! dropped.

use std::sync::mpsc;

/// The paused clock held still; dropping it lets the clock jump again.
pub struct ClockHeld {
    _release: mpsc::Sender<()>,
}

/// Holds the paused clock still (see the module's comment).
pub fn hold() -> ClockHeld {
    let (release, held) = mpsc::channel::<()>();
    tokio::task::spawn_blocking(move || {
        let _ = held.recv();
    });
    ClockHeld { _release: release }
}

/// Waits (real time, at most 30 s, looking every 10 ms, the first time after 10 ms) until
/// `cond` holds, the paused clock held or not: the waits are a blocking thread's, not timers
/// of the clock.
pub async fn until_held(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..3000 {
        let nap = || std::thread::sleep(std::time::Duration::from_millis(10));
        tokio::task::spawn_blocking(nap).await.unwrap();
        if cond() {
            return;
        }
    }
    panic!("never happened: {what}");
}
