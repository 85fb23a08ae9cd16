//! Helpers shared by the throttle tests: a throttle on tokio's paused clock, spawned acquires,
//! and a tracing layer that records events.

use std::cell::RefCell;
use std::fmt::{Debug, Write as _};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use mailsluice::clock::{Clock, TokioClock};
use mailsluice::throttle::store::StoreCharge;
use mailsluice::throttle::{Charge, LayerSpec, Permit, Throttle, ThrottleError};
use tokio::task::JoinHandle;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A drip layer, `limit` per second, burst = limit, wait mode, defaults otherwise.
pub fn per_sec(name: &str, limit: u64) -> LayerSpec {
    LayerSpec::new(name, limit, Duration::from_secs(1))
}

pub struct Env {
    pub t: Arc<Throttle>,
    pub clock: Arc<TokioClock>,
}

impl Env {
    /// Call inside a runtime with paused time: the clock starts at 0 there.
    pub fn new(specs: Vec<LayerSpec>) -> Env {
        Events::install();
        let clock = Arc::new(TokioClock::new());
        let t = Arc::new(Throttle::new(specs, clock.clone()));
        Env { t, clock }
    }

    /// The time since the throttle was made.
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.clock.now())
    }

    pub async fn take(&self, layer: usize, key: &str, cost: u64) -> Result<Permit, ThrottleError> {
        self.t.acquire(vec![charge(layer, key, cost)]).await
    }

    /// Takes and keeps (delivered); panics on refusal.
    pub async fn spend(&self, layer: usize, key: &str, cost: u64) {
        self.take(layer, key, cost)
            .await
            .expect("granted")
            .delivered();
    }

    /// Starts an acquire in a task, lets it reach its queue, and returns its handle, which
    /// yields the instant of the grant.
    pub async fn spawn(&self, charges: Vec<Charge>) -> JoinHandle<Result<Duration, ThrottleError>> {
        let (t, clock) = (self.t.clone(), self.clock.clone());
        let h = tokio::spawn(async move {
            let p = t.acquire(charges).await?;
            p.delivered();
            Ok(Duration::from_nanos(clock.now()))
        });
        settle().await;
        h
    }

    pub fn remaining(&self, layer: &str, key: &str) -> u64 {
        self.t.peek(layer, key).expect("layer").remaining
    }
}

/// A charge of the store tests (`Store::take`): `cost` tokens of `key` in layer `layer`.
pub fn ch(layer: usize, key: &str, cost: u64) -> StoreCharge<'_> {
    StoreCharge {
        layer,
        key,
        cost,
        ..StoreCharge::default()
    }
}

/// [`ch`] of a message upstream just throttled, teaching its adaptive layer.
pub fn cut(layer: usize, key: &str, cost: u64) -> StoreCharge<'_> {
    StoreCharge {
        cut: true,
        ..ch(layer, key, cost)
    }
}

pub fn charge(layer: usize, key: &str, cost: u64) -> Charge {
    Charge {
        layer,
        key: key.to_string(),
        cost,
        fair: String::new(),
        blame: String::new(),
    }
}

/// A charge of a layer with `fair_by`: `fair` is the message's fair key.
pub fn fair_charge(layer: usize, key: &str, fair: &str, cost: u64) -> Charge {
    Charge {
        fair: fair.to_string(),
        ..charge(layer, key, cost)
    }
}

/// Lets spawned tasks run until they block (no time passes).
pub async fn settle() {
    for _ in 0..8 {
        tokio::task::yield_now().await;
    }
}

pub fn limited_after(r: Result<impl Debug, ThrottleError>) -> (String, Duration) {
    match r {
        Err(ThrottleError::Limited {
            layer, retry_after, ..
        }) => (layer, retry_after),
        other => panic!("expected Limited, got {other:?}"),
    }
}

/// Events recorded: (level, message, "field=value " list).
#[derive(Clone, Default)]
pub struct Events(pub Arc<Mutex<Vec<(tracing::Level, String, String)>>>);

thread_local! {
    static CAPTURE: RefCell<Option<Events>> = const { RefCell::new(None) };
}

/// Stops recording on drop.
pub struct CaptureGuard;

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        CAPTURE.with(|c| c.borrow_mut().take());
    }
}

/// The one global subscriber of a test binary: it records into the capture of the thread the
/// event happens on. (A per-test scoped subscriber races with tests on other threads over
/// tracing's cached callsite interest; one global subscriber does not.)
struct ToCapture;

impl<S: tracing::Subscriber> Layer<S> for ToCapture {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        CAPTURE.with(|c| {
            if let Some(events) = &*c.borrow() {
                let mut f = Fields::default();
                event.record(&mut f);
                let level = *event.metadata().level();
                events.0.lock().unwrap().push((level, f.message, f.fields));
            }
        });
    }
}

impl Events {
    /// Records the events of this thread (a current-thread runtime's tasks) until the guard
    /// drops.
    pub fn capture() -> (Events, CaptureGuard) {
        Events::install();
        let events = Events::default();
        CAPTURE.with(|c| *c.borrow_mut() = Some(events.clone()));
        (events, CaptureGuard)
    }

    /// Installs the global subscriber (every `Env::new` does, before any event can fire).
    pub fn install() {
        static INIT: Once = Once::new();
        INIT.call_once(|| {
            let sub = tracing_subscriber::registry().with(ToCapture);
            tracing::subscriber::set_global_default(sub).expect("one global subscriber");
        });
    }

    pub fn named(&self, message: &str) -> Vec<(tracing::Level, String)> {
        let all = self.0.lock().unwrap();
        all.iter()
            .filter(|(_, m, _)| m == message)
            .map(|(l, _, f)| (*l, f.clone()))
            .collect()
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    fields: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        let _ = write!(self.fields, "{}={} ", field.name(), value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            let _ = write!(self.fields, "{}={:?} ", field.name(), value);
        }
    }
}
