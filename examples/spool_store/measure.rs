//! What a phase of a run cost, and whose it was: CPU time by thread and process, and moto's
//! time on the relay's calls as the proxy timed them.

use std::collections::BTreeMap;
use std::future::Future;
use std::os::unix::thread::JoinHandleExt;
use std::time::{Duration, Instant};

use mailsluice_test_support::aws_fault::{Answered, Service};

/// An empty `ReceiveMessage` answer is `{}`; one with an entry carries its receipt handle.
const EMPTY_RECEIVE_BYTES: usize = 64;

/// A tokio runtime on a thread of its own: what runs on it (the proxy, the SMTP clients) is
/// timed apart from the relay, by the thread's CPU clock.
pub struct Side {
    pub handle: tokio::runtime::Handle,
    clock: libc::clockid_t,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Side {
    pub fn start(name: &str) -> Side {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                tx.send(runtime.handle().clone()).unwrap();
                let _ = runtime.block_on(stopped);
            })
            .unwrap();
        let handle = rx.recv().unwrap();
        let mut clock: libc::clockid_t = 0;
        // SAFETY: the thread is running (it waits for `stop`), and `clock` is ours to write.
        let rc = unsafe { libc::pthread_getcpuclockid(thread.as_pthread_t(), &mut clock) };
        assert_eq!(rc, 0, "the thread's CPU clock");
        Side {
            handle,
            clock,
            stop: Some(stop),
        }
    }

    /// Runs `work` on this side's runtime; its output.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl Future<Output = T> + Send + 'static,
    ) -> T {
        self.handle.spawn(work).await.unwrap()
    }

    fn cpu(&self) -> Duration {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a clock id of a live thread, and a timespec of ours.
        assert_eq!(unsafe { libc::clock_gettime(self.clock, &mut t) }, 0);
        Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A point in a run: the time, and the CPU time so far of this process, of its proxy and
/// clients threads, and of its child processes (moto's server; Redis too when started).
pub struct Mark {
    at: Instant,
    process: Duration,
    proxy: Duration,
    clients: Duration,
    children: Duration,
}

impl Mark {
    pub fn now(proxy: &Side, clients: &Side) -> Mark {
        // SAFETY: `getrusage` writes into the zeroed struct we own.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) }, 0);
        let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
        Mark {
            at: Instant::now(),
            process: time(usage.ru_utime) + time(usage.ru_stime),
            proxy: proxy.cpu(),
            clients: clients.cpu(),
            children: children_cpu(),
        }
    }

    /// The relay's CPU time from `from` to this mark: the process's less the side threads'.
    pub fn relay_cpu_since(&self, from: &Mark) -> Duration {
        let sides = (self.proxy + self.clients).saturating_sub(from.proxy + from.clients);
        (self.process - from.process).saturating_sub(sides)
    }
}

/// The CPU time (user + system) of this process's descendants, from `/proc`.
fn children_cpu() -> Duration {
    let mut procs = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // After the command's `)`: state, ppid, ... utime and stime are the 12th and 13th.
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..]
            .split_whitespace()
            .collect();
        let ticks = |i: usize| fields[i].parse::<u64>().unwrap_or(0);
        procs.push((pid, ticks(1) as u32, ticks(11) + ticks(12)));
    }
    let mut family = vec![std::process::id()];
    let mut ticks = 0;
    while let Some(parent) = family.pop() {
        for &(pid, ppid, t) in &procs {
            if ppid == parent {
                family.push(pid);
                ticks += t;
            }
        }
    }
    // SAFETY: sysconf reads a constant of the system.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Duration::from_secs_f64(ticks as f64 / per_second)
}

/// A phase's lines: its wall time; CPU per held message of the relay, the proxy, the clients
/// and the child processes (`children` names them); with S3 and SQS, how long moto was
/// answering the relay and the calls per message.
pub fn report(
    phase: &str,
    held: usize,
    span: (&Mark, &Mark),
    children: &str,
    answered: &[Answered],
) {
    let (from, to) = span;
    let wall = to.at - from.at;
    let per = |d: Duration| d.as_secs_f64() * 1e6 / held as f64;
    let mut line = format!(
        "  {phase:<8} wall {:6.2} s  CPU µs/msg: relay {:5.0}, proxy {:4.0}, clients {:4.0}, \
         {children} {:5.0}",
        wall.as_secs_f64(),
        per(to.relay_cpu_since(from)),
        per(to.proxy.saturating_sub(from.proxy)),
        per(to.clients.saturating_sub(from.clients)),
        per(to.children.saturating_sub(from.children)),
    );
    let calls = answered_within(answered, from, to);
    if !calls.is_empty() {
        let waited: Vec<&Answered> = calls.iter().filter(|a| !is_idle(a)).collect();
        let at_moto = busy(&waited);
        let sum: Duration = waited.iter().map(|a| a.took).sum();
        line += &format!(
            "\n{:11}moto answering {:.2} s of it ({:.1} %; sum of its answer times {:.2} s); \
             calls per message: {}",
            "",
            at_moto.as_secs_f64(),
            100.0 * at_moto.as_secs_f64() / wall.as_secs_f64(),
            sum.as_secs_f64(),
            per_message(&calls, held)
        );
    }
    println!("{line}");
}

/// The calls made between `from` and `to`, each one's time at moto cut at `to`.
pub fn answered_within(answered: &[Answered], from: &Mark, to: &Mark) -> Vec<Answered> {
    (answered.iter())
        .filter(|a| a.at >= from.at && a.at < to.at)
        .map(|a| Answered {
            took: a.took.min(to.at - a.at),
            ..a.clone()
        })
        .collect()
}

/// A long poll that found nothing: it waits at moto by design, for the relay's receiver.
fn is_idle(a: &Answered) -> bool {
    a.operation == "ReceiveMessage" && a.bytes < EMPTY_RECEIVE_BYTES
}

/// The time during which at least one of `calls` was at moto.
fn busy(calls: &[&Answered]) -> Duration {
    let mut spans: Vec<(Instant, Instant)> = calls.iter().map(|a| (a.at, a.at + a.took)).collect();
    spans.sort();
    let mut total = Duration::ZERO;
    let mut current: Option<(Instant, Instant)> = None;
    for (start, end) in spans {
        match current {
            Some((s, e)) if start <= e => current = Some((s, e.max(end))),
            _ => {
                total += current.map_or(Duration::ZERO, |(s, e)| e - s);
                current = Some((start, end));
            }
        }
    }
    total + current.map_or(Duration::ZERO, |(s, e)| e - s)
}

/// `s3 PutObject 1.000, sqs SendMessage 1.000, ...; all 2.000`: each operation's calls over
/// `held` (empty long polls apart).
pub fn per_message(calls: &[Answered], held: usize) -> String {
    let mut by: BTreeMap<(Service, String), usize> = BTreeMap::new();
    for a in calls {
        let op = if is_idle(a) {
            "ReceiveMessage (empty)".to_string()
        } else {
            a.operation.clone()
        };
        *by.entry((a.service, op)).or_default() += 1;
    }
    let total: usize = by.values().sum();
    let each: Vec<String> = (by.iter())
        .map(|((service, op), n)| {
            let service = if *service == Service::S3 { "s3" } else { "sqs" };
            format!("{service} {op} {:.3}", *n as f64 / held as f64)
        })
        .collect();
    format!("{}; all {:.3}", each.join(", "), total as f64 / held as f64)
}

/// The most of `times` (in order) in any 1 s window.
pub fn most_in_a_second(times: &[Instant]) -> usize {
    let mut most = 0;
    let mut first = 0;
    for (i, t) in times.iter().enumerate() {
        while times[first] + Duration::from_secs(1) <= *t {
            first += 1;
        }
        most = most.max(i + 1 - first);
    }
    most
}
