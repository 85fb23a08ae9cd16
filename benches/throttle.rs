//! Throttle engine benchmarks (issue 3): decisions per second on one key and over 100,000
//! keys, and the memory an idle key costs.
//!
//! Run: `cargo bench --bench throttle -- --warm-up-time 1 --measurement-time 3`
//!
//! - A "decision" is one `Throttle::acquire` of one charge that completes at once (granted,
//!   or refused in reject mode), including building its `Vec<Charge>` and key `String`, as the
//!   SMTP session does. The future is polled once with a no-op waker: no runtime is needed on
//!   the path that does not wait.
//! - The clock is `std::time::Instant` (a bench-local `Clock`): `TokioClock` in this binary
//!   would pay for tokio's `test-util` (a dev-dependency) on every read, which production
//!   builds do not have.
//! - Memory per idle key is counted by a global allocator in this binary that tracks the bytes
//!   live: the growth after one take on each of 100,000 keys, divided by 100,000. It includes
//!   the map, the slab, the key strings and the eviction indexes (allocator size classes and
//!   capacity doubling included; no per-allocation malloc header).

use std::alloc::{GlobalAlloc, Layout, System};
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use criterion::{criterion_group, Criterion, Throughput};
use mailsluice::clock::{Clock, Nanos};
use mailsluice::throttle::bucket::{Bucket, State};
use mailsluice::throttle::{Charge, LayerSpec, Mode, Throttle};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Monotonic time from `std::time::Instant`.
struct StdClock(Instant, u64);

impl Clock for StdClock {
    fn now(&self) -> Nanos {
        self.0.elapsed().as_nanos() as u64
    }

    fn unix_secs_at(&self, at: Nanos) -> u64 {
        self.1 + at.div_ceil(1_000_000_000)
    }
}

fn clock() -> Arc<dyn Clock> {
    let unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    Arc::new(StdClock(Instant::now(), unix))
}

/// A layer that (practically) always grants: measures the decision, not the waiting.
fn open_layer(max_keys: usize, mode: Mode) -> LayerSpec {
    let mut s = LayerSpec::new("bench", u64::from(u32::MAX), Duration::from_millis(1));
    s.max_keys = max_keys;
    s.mode = mode;
    s
}

/// Runs an acquire that must complete without waiting; true when granted.
fn decide(t: &Throttle, key: String) -> bool {
    let fut = t.acquire(vec![Charge {
        layer: 0,
        key,
        cost: 1,
        fair: String::new(),
        blame: String::new(),
    }]);
    let mut fut = pin!(fut);
    match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(Ok(p)) => {
            p.delivered();
            true
        }
        Poll::Ready(Err(_)) => false,
        Poll::Pending => panic!("a bench decision must not wait"),
    }
}

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("tenant-{i:06}")).collect()
}

fn bench_decisions(c: &mut Criterion) {
    let mut g = c.benchmark_group("throttle");
    g.throughput(Throughput::Elements(1));

    // The math alone: 14 per second, burst 1000, a take every 50 ms (always granted).
    let b = Bucket::drip(1_000, 14, 1_000_000_000);
    let (mut st, mut now) = (State::default(), 0u64);
    g.bench_function("bucket_take_pure", |bench| {
        bench.iter(|| {
            now += 50_000_000;
            let (d, next) = b.take(black_box(st), black_box(now), 1);
            st = next;
            d
        })
    });

    let t = Throttle::new(vec![open_layer(10_000, Mode::Wait)], clock());
    g.bench_function("acquire_one_key", |bench| {
        bench.iter(|| decide(&t, "tenant-000001".to_string()))
    });

    let mut spec = LayerSpec::new("bench", 1, Duration::from_secs(3600));
    spec.mode = Mode::Reject;
    let t = Throttle::new(vec![spec], clock());
    decide(&t, "tenant-000001".to_string());
    g.bench_function("acquire_one_key_refused", |bench| {
        bench.iter(|| decide(&t, "tenant-000001".to_string()))
    });

    let names = keys(100_000);
    let t = Throttle::new(vec![open_layer(100_000, Mode::Wait)], clock());
    let mut i = 0;
    g.bench_function("acquire_100k_keys", |bench| {
        bench.iter(|| {
            i = (i + 1) % names.len();
            decide(&t, names[i].clone())
        })
    });
    g.finish();
}

/// Bytes per idle key: growth of live heap bytes after one take on each of `n` keys.
fn memory_per_idle_key(n: usize) {
    let names = keys(n);
    let t = Throttle::new(vec![open_layer(n, Mode::Wait)], clock());
    let before = LIVE.load(Ordering::SeqCst);
    for name in &names {
        assert!(decide(&t, name.clone()));
    }
    let after = LIVE.load(Ordering::SeqCst);
    assert_eq!(t.keys(0), n);
    let per_key = (after - before) as f64 / n as f64;
    println!(
        "memory per idle key: {per_key:.1} bytes ({n} keys, key length 13, counting allocator)"
    );
    drop(t);
}

criterion_group!(benches, bench_decisions);

fn main() {
    memory_per_idle_key(100_000);
    benches();
    Criterion::default().configure_from_args().final_summary();
}
