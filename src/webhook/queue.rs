//! A webhook's bounded queue of events. Pushing never waits (a short lock, no await): it is
//! done on the mail's path, and a receiver that is down must cost that path nothing. Past
//! either bound, its events or their bytes (as posted), the oldest event is dropped and
//! counted; the delivery task takes batches off the front.

use std::collections::VecDeque;
use std::sync::Mutex;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;

use super::event::Event;

/// The events waiting, each with its size as posted, and the sum of those sizes.
#[derive(Default)]
struct Waiting {
    events: VecDeque<(Event, usize)>,
    bytes: usize,
}

impl Waiting {
    fn pop_front(&mut self) -> Option<Event> {
        let (event, size) = self.events.pop_front()?;
        self.bytes -= size;
        Some(event)
    }
}

pub struct Queue {
    waiting: Mutex<Waiting>,
    bound: usize,
    max_bytes: usize,
    ready: Notify,
    dropped: Counter,
    depth: Gauge,
}

impl Queue {
    /// A queue of at most `bound` events and `max_bytes` of them, counting what it drops in
    /// `dropped` and showing its length in `depth`.
    pub fn new(bound: usize, max_bytes: usize, dropped: Counter, depth: Gauge) -> Queue {
        Queue {
            waiting: Mutex::new(Waiting::default()),
            bound: bound.max(1),
            max_bytes,
            ready: Notify::new(),
            dropped,
            depth,
        }
    }

    /// Adds `event` at the back; when full, the front (oldest) events are dropped first. An
    /// event larger alone than `max_bytes` is dropped itself.
    pub fn push(&self, event: Event) {
        let size = serde_json::to_vec(&event).map_or(0, |json| json.len());
        if size > self.max_bytes {
            self.dropped.inc();
            return;
        }
        let mut waiting = self.lock();
        while waiting.events.len() >= self.bound || waiting.bytes + size > self.max_bytes {
            waiting.pop_front();
            self.dropped.inc();
        }
        waiting.events.push_back((event, size));
        waiting.bytes += size;
        self.depth.set(waiting.events.len() as i64);
        drop(waiting);
        self.ready.notify_one();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Up to `max` events from the front, waiting until there is one.
    pub async fn take(&self, max: usize) -> Vec<Event> {
        loop {
            {
                let mut waiting = self.lock();
                if !waiting.events.is_empty() {
                    let n = waiting.events.len().min(max.max(1));
                    let batch: Vec<Event> = (0..n).filter_map(|_| waiting.pop_front()).collect();
                    self.depth.set(waiting.events.len() as i64);
                    return batch;
                }
            }
            self.ready.notified().await;
        }
    }

    pub fn len(&self) -> usize {
        self.lock().events.len()
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
        let queue = Queue::new(3, usize::MAX, dropped.clone(), depth.clone());
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

    #[tokio::test]
    async fn past_its_bytes_the_oldest_are_dropped_and_counted() {
        let size = serde_json::to_vec(&event(0)).unwrap().len();
        let dropped = Counter::default();
        // Room for two events' bytes, however many events it may hold.
        let queue = Queue::new(100, 2 * size + 1, dropped.clone(), Gauge::default());
        for n in 0..5 {
            queue.push(event(n));
        }
        assert_eq!((dropped.get(), queue.len()), (3, 2));
        let batch = queue.take(10).await;
        let tenants: Vec<&str> = batch.iter().map(|e| e.tenant.as_str()).collect();
        assert_eq!(tenants, ["t3", "t4"]);
        // Taken off, their bytes are free again.
        queue.push(event(5));
        queue.push(event(6));
        assert_eq!((dropped.get(), queue.len()), (3, 2));
        // One event past the bound by itself is dropped, not the others.
        let small = Queue::new(100, size - 1, dropped.clone(), Gauge::default());
        small.push(event(7));
        assert_eq!((dropped.get(), small.len()), (4, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_taker_waits_for_the_next_push() {
        let queue = Queue::new(3, usize::MAX, Counter::default(), Gauge::default());
        let queue = std::sync::Arc::new(queue);
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
