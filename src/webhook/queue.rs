//! A webhook's bounded queue of events. Pushing never waits (a short lock, no await): it is
//! done on the mail's path, and a receiver that is down must cost that path nothing. Past its
//! bound the oldest event is dropped and counted; the delivery task takes batches off the
//! front.

use std::collections::VecDeque;
use std::sync::Mutex;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;

use super::event::Event;

pub struct Queue {
    events: Mutex<VecDeque<Event>>,
    bound: usize,
    ready: Notify,
    dropped: Counter,
    depth: Gauge,
}

impl Queue {
    /// A queue of at most `bound` events, counting what it drops in `dropped` and showing its
    /// length in `depth`.
    pub fn new(bound: usize, dropped: Counter, depth: Gauge) -> Queue {
        Queue {
            events: Mutex::new(VecDeque::new()),
            bound: bound.max(1),
            ready: Notify::new(),
            dropped,
            depth,
        }
    }

    /// Adds `event` at the back; when full, the front (oldest) event is dropped first.
    pub fn push(&self, event: Event) {
        let mut events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        if events.len() >= self.bound {
            events.pop_front();
            self.dropped.inc();
        }
        events.push_back(event);
        self.depth.set(events.len() as i64);
        drop(events);
        self.ready.notify_one();
    }

    /// Up to `max` events from the front, waiting until there is one.
    pub async fn take(&self, max: usize) -> Vec<Event> {
        loop {
            {
                let mut events = self.events.lock().unwrap_or_else(|e| e.into_inner());
                if !events.is_empty() {
                    let n = events.len().min(max.max(1));
                    let batch: Vec<Event> = events.drain(..n).collect();
                    self.depth.set(events.len() as i64);
                    return batch;
                }
            }
            self.ready.notified().await;
        }
    }

    pub fn len(&self) -> usize {
        self.events.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EventType;

    fn event(n: u64) -> Event {
        Event::new(EventType::Accepted, &format!("t{n}"), n)
    }

    #[tokio::test]
    async fn at_its_bound_the_oldest_is_dropped_and_counted() {
        let (dropped, depth) = (Counter::default(), Gauge::default());
        let queue = Queue::new(3, dropped.clone(), depth.clone());
        for n in 0..5 {
            queue.push(event(n));
        }
        assert_eq!((dropped.get(), depth.get()), (2, 3));
        let batch = queue.take(2).await;
        let tenants: Vec<&str> = batch.iter().map(|e| e.tenant.as_str()).collect();
        assert_eq!(tenants, ["t2", "t3"]);
        assert_eq!(depth.get(), 1);
        assert_eq!(queue.take(10).await[0].tenant, "t4");
        assert!(queue.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_taker_waits_for_the_next_push() {
        let queue = std::sync::Arc::new(Queue::new(3, Counter::default(), Gauge::default()));
        let taker = tokio::spawn({
            let queue = queue.clone();
            async move { queue.take(10).await }
        });
        tokio::task::yield_now().await;
        assert!(!taker.is_finished());
        queue.push(event(7));
        assert_eq!(taker.await.unwrap()[0].tenant, "t7");
    }
}
