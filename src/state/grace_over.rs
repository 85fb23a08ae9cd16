//! The end of the shutdown's grace, as each session hears it: a bell per session, rung once
//! for all. A session looks at its bell every time its final dot is woken while it waits for
//! upstream, so that look is two atomic loads and, while it waits, one uncontended lock; a
//! `watch` receiver would take the channel's waiter list lock on every poll instead.

use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Poll, Waker};

/// Rings every session's bell at the grace's end; a bell made after that is rung already.
#[derive(Default)]
pub struct GraceOver {
    over: AtomicBool,
    bells: Mutex<Bells>,
}

#[derive(Default)]
struct Bells {
    list: Vec<Weak<Bell>>,
    /// The list's length after the last sweep of dropped bells: the next sweep comes when it
    /// has doubled, so a session's bell costs O(1) however many sessions came and went.
    swept: usize,
}

/// One session's bell.
#[derive(Default)]
pub struct Bell {
    rung: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl GraceOver {
    /// A new bell, rung already if the grace is over.
    pub fn bell(&self) -> Arc<Bell> {
        let bell = Arc::new(Bell::default());
        let mut bells = self.bells.lock().unwrap_or_else(|e| e.into_inner());
        if bells.list.len() >= 2 * bells.swept.max(16) {
            bells.list.retain(|b| b.strong_count() > 0);
            bells.swept = bells.list.len();
        }
        bells.list.push(Arc::downgrade(&bell));
        if self.over.load(Ordering::SeqCst) {
            bell.ring();
        }
        bell
    }

    /// The grace is over: every bell rings.
    pub fn ring(&self) {
        self.over.store(true, Ordering::SeqCst);
        let bells = self.bells.lock().unwrap_or_else(|e| e.into_inner());
        for bell in bells.list.iter().filter_map(Weak::upgrade) {
            bell.ring();
        }
    }
}

impl Bell {
    fn ring(&self) {
        self.rung.store(true, Ordering::SeqCst);
        let waker = self.waker.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    pub fn rung(&self) -> bool {
        self.rung.load(Ordering::SeqCst)
    }

    /// Resolves once the bell rings (at once if it has). Cancel-safe.
    pub async fn wait(&self) {
        poll_fn(|cx| {
            if self.rung() {
                return Poll::Ready(());
            }
            let mut waker = self.waker.lock().unwrap_or_else(|e| e.into_inner());
            match &mut *waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                slot => *slot = Some(cx.waker().clone()),
            }
            drop(waker);
            // Rung between the first look and the waker's registration: seen now.
            match self.rung() {
                true => Poll::Ready(()),
                false => Poll::Pending,
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_bell_rings_once_the_grace_is_over_and_later_ones_at_once() {
        let grace = Arc::new(GraceOver::default());
        let bells: Vec<Arc<Bell>> = (0..40).map(|_| grace.bell()).collect();
        let waiting: Vec<_> = (bells.iter().cloned())
            .map(|bell| tokio::spawn(async move { bell.wait().await }))
            .collect();
        tokio::task::yield_now().await;
        assert!(bells.iter().all(|b| !b.rung()));
        grace.ring();
        for w in waiting {
            w.await.unwrap();
        }
        let late = grace.bell();
        assert!(late.rung());
        late.wait().await;
    }

    /// Dropped sessions' bells are swept from the list as it grows: it stays within twice the
    /// bells alive (and 32).
    #[test]
    fn the_list_of_bells_is_swept_as_it_grows() {
        let grace = GraceOver::default();
        let kept: Vec<Arc<Bell>> = (0..10).map(|_| grace.bell()).collect();
        for _ in 0..10_000 {
            drop(grace.bell());
        }
        let len = grace.bells.lock().unwrap().list.len();
        assert!(len <= 2 * 32, "{len}");
        assert_eq!(kept.len(), 10);
    }
}
