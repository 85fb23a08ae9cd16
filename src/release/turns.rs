//! A key's messages released side by side take their tokens in the order they were released:
//! each waits, before it joins its layers' queues, until the one of its key released before it
//! has its tokens (or its attempt is over). Without this the second could reach a layer's
//! queue first (its file read sooner, its checks done sooner) and take the first's tokens.

use std::collections::HashMap;

use tokio::sync::oneshot;

use crate::spool::HeldKey;

/// One attempt's place in its key's order.
pub struct Turn {
    /// Told (or dropped) once the attempt released before it has its tokens or is over.
    after: Option<oneshot::Receiver<()>>,
    /// Tells the attempt released next that this one has its tokens; dropped, it tells that
    /// this one is over.
    passed: Option<oneshot::Sender<()>>,
}

impl Turn {
    /// Completes when the attempt released before it has its tokens or is over.
    /// Cancel-safe: a wait dropped before then keeps its place.
    pub async fn wait(&mut self) {
        if let Some(after) = &mut self.after {
            let _ = after.await;
            self.after = None;
        }
    }

    /// This attempt has its tokens: the next may queue for its own.
    pub fn pass(&mut self) {
        if let Some(passed) = self.passed.take() {
            let _ = passed.send(());
        }
    }
}

/// The last attempt released of each key whose turn has not passed yet.
#[derive(Default)]
pub struct Turns {
    last: HashMap<HeldKey, oneshot::Receiver<()>>,
}

impl Turns {
    /// The turn of an attempt of `key` released now, behind the key's last one.
    pub fn next(&mut self, key: &HeldKey) -> Turn {
        let (passed, after) = oneshot::channel();
        Turn {
            after: self.last.insert(key.clone(), after),
            passed: Some(passed),
        }
    }

    /// Forgets the keys whose last attempt has its tokens or is over: their next one goes
    /// at once.
    pub fn forget_passed(&mut self) {
        self.last.retain(|_, after| {
            matches!(after.try_recv(), Err(oneshot::error::TryRecvError::Empty))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    fn key(k: &str) -> HeldKey {
        HeldKey {
            layer: "tenant".into(),
            key: k.into(),
        }
    }

    /// The second of a key waits for the first to pass (or be over); another key's does not.
    #[tokio::test]
    async fn a_turn_waits_for_the_one_released_before_it_of_its_key() {
        let mut turns = Turns::default();
        let mut first = turns.next(&key("a"));
        let mut second = turns.next(&key("a"));
        let mut third = turns.next(&key("a"));
        let mut other = turns.next(&key("b"));
        first.wait().await;
        other.wait().await;
        assert!(second.wait().now_or_never().is_none());
        first.pass();
        second.wait().await;
        drop(second);
        third.wait().await;
        turns.forget_passed();
        assert_eq!(turns.last.len(), 2, "third and other have not passed");
        third.pass();
        drop(other);
        turns.forget_passed();
        assert!(turns.last.is_empty());
    }
}
