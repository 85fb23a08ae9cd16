//! The one shutdown signal. Every long-lived task holds a `Shutdown` and selects on
//! `wait()`, so stopping is decided in one place (`ShutdownTrigger::trigger`) and every task
//! sees it, including ones started after the trigger.

use tokio::sync::watch;

/// Fires the shutdown. Dropping it without firing does nothing.
#[derive(Debug)]
pub struct ShutdownTrigger {
    tx: watch::Sender<bool>,
}

/// A task's view of the shutdown signal; cheap to clone.
#[derive(Debug, Clone)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
}

/// A new signal, not fired.
pub fn channel() -> (ShutdownTrigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (ShutdownTrigger { tx }, Shutdown { rx })
}

impl ShutdownTrigger {
    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }

    pub fn subscribe(&self) -> Shutdown {
        Shutdown {
            rx: self.tx.subscribe(),
        }
    }
}

impl Shutdown {
    /// Resolves once shutdown is triggered (at once if it already was). Cancel-safe.
    pub async fn wait(&mut self) {
        // An error means the trigger is gone without firing: then shutdown never comes.
        if self.rx.wait_for(|fired| *fired).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_triggered(shutdown: &Shutdown) -> bool {
        *shutdown.rx.borrow()
    }

    #[tokio::test]
    async fn late_subscribers_see_an_earlier_trigger() {
        let (trigger, mut early) = channel();
        assert!(!is_triggered(&early));
        trigger.trigger();
        early.wait().await;
        let mut late = trigger.subscribe();
        late.wait().await;
        assert!(is_triggered(&late));
    }
}
