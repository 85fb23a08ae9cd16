//! The one shutdown signal. Every long-lived task holds a `Shutdown` and selects on
//! `wait()`, so stopping is decided in one place (`ShutdownTrigger::trigger`) and every task
//! sees it, including ones started after the trigger.

use std::future::Future;
use std::pin::Pin;

use tokio::sync::watch;

/// Fires the shutdown. Dropping it without firing does nothing.
#[derive(Debug)]
pub struct ShutdownTrigger {
    tx: watch::Sender<bool>,
}

/// A task's view of the shutdown signal; cheap to clone.
pub struct Shutdown {
    rx: watch::Receiver<bool>,
    /// The wait in progress, kept between calls: a session selects on the signal at every
    /// read, and registering a waiter each time (and removing it when the read wins) costs
    /// more than the read's own bookkeeping.
    waiting: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    fired: bool,
}

impl Shutdown {
    fn of(rx: watch::Receiver<bool>) -> Shutdown {
        Shutdown {
            rx,
            waiting: None,
            fired: false,
        }
    }
}

impl Clone for Shutdown {
    fn clone(&self) -> Shutdown {
        Shutdown::of(self.rx.clone())
    }
}

impl std::fmt::Debug for Shutdown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shutdown")
            .field("fired", &self.fired)
            .finish()
    }
}

/// A new signal, not fired.
pub fn channel() -> (ShutdownTrigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (ShutdownTrigger { tx }, Shutdown::of(rx))
}

impl ShutdownTrigger {
    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }

    pub fn subscribe(&self) -> Shutdown {
        Shutdown::of(self.tx.subscribe())
    }
}

impl Shutdown {
    /// Whether shutdown has been triggered, now.
    pub fn fired(&self) -> bool {
        self.fired || *self.rx.borrow()
    }

    /// Resolves once shutdown is triggered (at once if it already was). Cancel-safe: a wait
    /// cut short goes on at the next call.
    pub async fn wait(&mut self) {
        if self.fired {
            return;
        }
        let waiting = match &mut self.waiting {
            Some(waiting) => waiting,
            None => {
                let mut rx = self.rx.clone();
                self.waiting.insert(Box::pin(async move {
                    // An error means the trigger is gone without firing: then shutdown never
                    // comes.
                    if rx.wait_for(|fired| *fired).await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }))
            }
        };
        waiting.await;
        self.fired = true;
        self.waiting = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wait cut short (a read won the select) goes on at the next call, and once fired the
    /// signal stays fired.
    #[tokio::test]
    async fn a_wait_cut_short_still_sees_the_trigger() {
        let (trigger, mut shutdown) = channel();
        for _ in 0..3 {
            tokio::select! {
                biased;
                _ = shutdown.wait() => panic!("not fired yet"),
                _ = std::future::ready(()) => {}
            }
        }
        trigger.trigger();
        shutdown.wait().await;
        shutdown.wait().await;
        assert!(shutdown.fired());
        let mut copy = shutdown.clone();
        copy.wait().await;
    }

    #[tokio::test]
    async fn late_subscribers_see_an_earlier_trigger() {
        let (trigger, mut early) = channel();
        assert!(!early.fired());
        trigger.trigger();
        early.wait().await;
        let mut late = trigger.subscribe();
        late.wait().await;
        assert!(late.fired());
    }
}
