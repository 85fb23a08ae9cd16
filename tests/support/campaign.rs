//! The fault campaign: several relays sharing a `key = "none"` layer and a per-tenant layer in
//! Redis (a primary, its replica and a sentinel), one recording upstream, and clients that
//! retry like a legacy app; faults one after another with recovery between them; then the
//! checker (`support::campaign_check`) over every message. Run short by the CI test
//! (`tests/redis/redis_campaign.rs`) and long by `bench/faults.sh`.
//!
//! Each relay is the `mailsluice` binary as a process of its own (`support::process`), so a
//! kill is a real `kill -9`: no destructor runs, the kernel closes its sockets, a Redis
//! reservation it held is never given back. A client whose connection was cut after its final
//! dot cannot tell whether upstream got the message (the checker accounts for it). Each
//! process's resident memory is sampled through the run and bounded (`Plan::memory`). The
//! failover is Sentinel's own: the primary killed, the sentinel left to notice.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::campaign_check::{
    self, Attempt, FailoverTimes, MemoryBound, Phase, Report, RssSample, Shared,
};
use super::config::TestConfig;
use super::invariant::{id_of, ClientLog};
use super::process::{rss_kib, RelayProcess};
use super::redis::RedisServer;
use super::traffic::{self, Leave};
use super::upstream::{Fault, Step, TestUpstream};
use super::wait::until;

/// The faults, in the order they are run.
pub const FAULTS: [&str; 7] = [
    "relay killed, restarted",
    "rolling graceful restart",
    "redis SIGSTOP 3 s",
    "redis restart, data lost",
    "sentinel failover",
    "upstream stalls past timeout",
    "upstream drops mid-DATA",
];

/// The size of a campaign.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub relays: usize,
    pub clients: usize,
    pub tenants: usize,
    /// How long each fault lasts (the Redis pause always lasts 3 s), and the recovery after
    /// it; the baseline lasts `recovery` too.
    pub hold: Duration,
    pub recovery: Duration,
    /// The shared layer's limit (per second) and burst.
    pub shared: Shared,
    /// How often each relay's resident memory is sampled, and what it may reach.
    pub sample_every: Duration,
    pub memory: MemoryBound,
}

impl Plan {
    /// The CI form: about a minute.
    pub fn short() -> Plan {
        Plan {
            relays: 2,
            clients: 12,
            tenants: 6,
            hold: Duration::from_secs(2),
            recovery: Duration::from_secs(3),
            shared: Shared {
                limit: 20,
                burst: 10,
            },
            sample_every: Duration::from_millis(250),
            memory: MemoryBound {
                peak_kib: 128 * 1024,
                growth_kib: 32 * 1024,
            },
        }
    }

    /// The bench form over about `seconds` in all, with three relays and 40 clients.
    pub fn long(seconds: u64) -> Plan {
        let per_fault = Duration::from_secs(seconds.max(16) / 8);
        Plan {
            relays: 3,
            clients: 40,
            tenants: 10,
            hold: per_fault / 2,
            recovery: per_fault - per_fault / 2,
            ..Plan::short()
        }
    }
}

/// The sentinel's down-after for the failover: it notices the dead primary by itself.
pub const FAILOVER_DOWN_AFTER_MS: u64 = 1000;

/// The upstream's timeout; its stalls last longer.
const UPSTREAM_TIMEOUT_MS: u64 = 1000;

/// A relay: the `mailsluice` binary as a process of its own (see the module doc).
struct Host {
    config: String,
    running: Option<RelayProcess>,
    /// How many times it was started, so that each process's memory samples stay apart.
    lives: usize,
}

/// The relays' log filter: their addresses (info), not a line per message.
const RELAY_LOG: &str = "warn,mailsluice=info,mailsluice::message=warn";

impl Host {
    async fn start(&mut self) -> SocketAddr {
        let config = self.config.clone();
        let relay = tokio::task::spawn_blocking(move || RelayProcess::start(&config, RELAY_LOG))
            .await
            .unwrap();
        let addr = relay.addr;
        self.running = Some(relay);
        self.lives += 1;
        addr
    }

    /// `kill -9`: the process gone at once, its sockets closed by the kernel.
    fn kill(&mut self) {
        let mut relay = self.running.take().expect("running");
        relay.signal(libc::SIGKILL);
        relay.reap();
    }

    /// SIGTERM, then waits until the process exits (drained): within the grace and a margin.
    async fn stop(&mut self) -> Option<String> {
        let mut relay = self.running.take().expect("running");
        relay.signal(libc::SIGTERM);
        let status = relay.wait(Duration::from_secs(30)).await;
        (!status.success()).then(|| format!("exited {status} after SIGTERM"))
    }

    /// False when the process exited without being asked to.
    fn alive(&mut self) -> bool {
        self.running.as_mut().is_none_or(|r| r.exited().is_none())
    }

    /// The running process's id and this life's number.
    fn pid(&self) -> Option<(i32, usize)> {
        self.running.as_ref().map(|r| (r.pid(), self.lives))
    }
}

/// What the clients share with the campaign.
struct Clients {
    /// Where each relay listens; `None` while it is down (a load balancer's view).
    addrs: Mutex<Vec<Option<SocketAddr>>>,
    /// Each running relay's process id and life (see `Host::lives`), for the memory sampler.
    pids: Mutex<Vec<Option<(i32, usize)>>>,
    /// Resident memory of every relay process, sampled through the run.
    rss: Mutex<Vec<RssSample>>,
    phase: AtomicUsize,
    stop: AtomicBool,
    attempts: Mutex<Vec<Attempt>>,
    unfinished: Mutex<Vec<String>>,
    log: ClientLog,
}

/// One client: message after message, each retried after a 4xx or a cut connection (250 ms
/// later, on the next relay) until it gets 250 or a 5xx; after `stop`, it leaves the one in
/// hand unfinished.
async fn client(c: usize, tenants: usize, shared: Arc<Clients>) {
    let tenant = format!("t{}", c % tenants);
    let mut n = 0;
    let mut pick = c;
    while !shared.stop.load(Ordering::SeqCst) {
        let id = format!("c{c}-{n}");
        n += 1;
        loop {
            pick += 1;
            let addr = {
                let addrs = shared.addrs.lock().unwrap();
                let up: Vec<SocketAddr> = addrs.iter().flatten().copied().collect();
                (!up.is_empty()).then(|| up[pick % up.len()])
            };
            let Some(addr) = addr else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let phase = shared.phase.load(Ordering::SeqCst);
            let seen = traffic::send(addr, &shared.log, &id, &tenant, Leave::Never).await;
            let code = seen.code();
            shared.attempts.lock().unwrap().push(Attempt {
                id: id.clone(),
                phase,
                seen,
                at: Instant::now(),
            });
            if code == Some(250) || matches!(code, Some(500..=599)) {
                break;
            }
            if shared.stop.load(Ordering::SeqCst) {
                shared.unfinished.lock().unwrap().push(id.clone());
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// Samples every running relay's resident memory (`VmRSS`) every `every`, with the phase.
async fn sample_memory(shared: Arc<Clients>, every: Duration) {
    loop {
        let phase = shared.phase.load(Ordering::SeqCst);
        let pids = shared.pids.lock().unwrap().clone();
        for (relay, up) in pids.into_iter().enumerate() {
            let Some((pid, life)) = up else { continue };
            if let Some(kib) = rss_kib(pid) {
                shared.rss.lock().unwrap().push(RssSample {
                    phase,
                    relay,
                    life,
                    kib,
                });
            }
        }
        tokio::time::sleep(every).await;
    }
}

/// The relays' config: the shared and the per-tenant layer in Redis through the sentinel.
fn config(up: &TestUpstream, sentinel: &RedisServer, shared: Shared) -> String {
    TestConfig::new()
        .smtp("shutdown_grace_ms = 5000")
        .upstream(&up.url())
        .then(&format!(
            "tls = \"none\"\ntimeout_ms = {UPSTREAM_TIMEOUT_MS}"
        ))
        .then(&format!(
            "[[throttle]]\nname = \"account\"\nkey = \"none\"\ncost = \"message\"\nlimit = {}\n\
             interval_ms = 1000\nburst = {}\nmax_wait_ms = 4000\nstore = \"redis\"\n\
             [[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\ncost = \"message\"\n\
             limit = 4\ninterval_ms = 1000\nburst = 4\nmode = \"reject\"\nstore = \"redis\"\n\
             [redis]\nsentinel = {{ master = \"mymaster\", nodes = [\"127.0.0.1:{}\"] }}\n\
             timeout_ms = 300\non_error = \"reject\"",
            shared.limit, shared.burst, sentinel.port
        ))
        .text()
}

/// Everything the campaign runs on.
struct World {
    plan: Plan,
    up: TestUpstream,
    redis: [RedisServer; 2],
    sentinel: RedisServer,
    hosts: Vec<Host>,
    clients: Arc<Clients>,
    violations: Vec<String>,
    failover: Option<FailoverTimes>,
}

/// Runs the campaign; `None` without `redis-server` (a skip: see `support::redis`).
pub async fn run(plan: Plan) -> Option<Report> {
    let primary = RedisServer::start()?;
    let replica = RedisServer::replica_of(&primary)?;
    // Slower to call the primary down than the 3 s pause lasts: the pause is a partition,
    // not a failover. The failover phase lowers it (see `World::fail_over`).
    let sentinel = RedisServer::sentinel_after(&primary, 5000)?;
    until("the sentinel knows the replica", async || {
        sentinel
            .cli(&["SENTINEL", "replicas", "mymaster"])
            .contains(&replica.port.to_string())
    })
    .await;
    let up = TestUpstream::start().await;
    let text = config(&up, &sentinel, plan.shared);
    let clients = Arc::new(Clients {
        addrs: Mutex::new(vec![None; plan.relays]),
        pids: Mutex::new(vec![None; plan.relays]),
        rss: Mutex::new(Vec::new()),
        phase: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
        attempts: Mutex::new(Vec::new()),
        unfinished: Mutex::new(Vec::new()),
        log: ClientLog::new(),
    });
    let mut w = World {
        plan,
        up,
        redis: [primary, replica],
        sentinel,
        hosts: Vec::new(),
        clients: clients.clone(),
        violations: Vec::new(),
        failover: None,
    };
    for i in 0..plan.relays {
        w.hosts.push(Host {
            config: text.clone(),
            running: None,
            lives: 0,
        });
        w.start(i).await;
    }
    let sampler = tokio::spawn(sample_memory(clients.clone(), plan.sample_every));
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..plan.clients {
        tasks.spawn(client(c, plan.tenants, clients.clone()));
    }
    let mut phases = Vec::new();
    let start = Instant::now();
    tokio::time::sleep(plan.recovery).await;
    phases.push(Phase {
        name: "baseline".into(),
        start,
        healed: start,
        end: Instant::now(),
    });
    for (i, name) in FAULTS.iter().enumerate() {
        clients.phase.store(i + 1, Ordering::SeqCst);
        let start = Instant::now();
        w.inject(i).await;
        let healed = Instant::now();
        tokio::time::sleep(w.plan.recovery).await;
        w.check_alive(name);
        phases.push(Phase {
            name: name.to_string(),
            start,
            healed,
            end: Instant::now(),
        });
    }
    clients.stop.store(true, Ordering::SeqCst);
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    sampler.abort();
    for r in 0..w.hosts.len() {
        w.stop(r).await;
    }
    super::invariant::settle(&w.up).await;
    let upstream: Vec<(Option<String>, Instant)> =
        w.up.messages()
            .iter()
            .map(|m| (id_of(&m.data), m.at))
            .collect();
    let attempts = clients.attempts.lock().unwrap().clone();
    let unfinished = clients.unfinished.lock().unwrap().clone();
    let mut report = campaign_check::check(&phases, &attempts, &upstream, &unfinished, plan.shared);
    let rss = clients.rss.lock().unwrap().clone();
    campaign_check::check_memory(&mut report, &rss, plan.memory);
    report.violations.extend(w.violations);
    report.failover = w
        .failover
        .map(|times| campaign_check::failover_cost(times, &attempts, &upstream));
    Some(report)
}

impl World {
    /// Injects fault `i` of [`FAULTS`] and undoes it; returns once healed.
    async fn inject(&mut self, i: usize) {
        let hold = self.plan.hold;
        match i {
            0 => {
                self.set_down(0);
                self.hosts[0].kill();
                tokio::time::sleep(hold).await;
                self.start(0).await;
            }
            1 => {
                for r in 0..self.hosts.len() {
                    self.stop(r).await;
                    self.start(r).await;
                }
            }
            2 => {
                self.redis[0].signal(libc::SIGSTOP);
                tokio::time::sleep(Duration::from_secs(3)).await;
                self.redis[0].signal(libc::SIGCONT);
            }
            3 => {
                self.redis[0].stop();
                self.redis[0].restart();
                let replica = &self.redis[1];
                until("the replica synced from the empty primary", async || {
                    replica
                        .cli(&["INFO", "replication"])
                        .contains("master_link_status:up")
                })
                .await;
            }
            4 => self.fail_over().await,
            5 => {
                let stall = Duration::from_millis(UPSTREAM_TIMEOUT_MS + 500);
                self.up.set_fault(Fault::stall(Step::EndOfData, stall));
                tokio::time::sleep(hold).await;
                self.up.set_fault(Fault::None);
            }
            _ => {
                self.up.set_fault(Fault::DropMidData);
                tokio::time::sleep(hold).await;
                self.up.set_fault(Fault::None);
            }
        }
    }

    /// The primary killed and the sentinel left to notice: its down-after is lowered to
    /// [`FAILOVER_DOWN_AFTER_MS`] first (it stays longer than the 3 s pause until then, so
    /// that the pause is a partition), and no `SENTINEL FAILOVER` is asked for. Returns once
    /// the replica is the primary, having noted when each step was seen.
    async fn fail_over(&mut self) {
        let down_after = FAILOVER_DOWN_AFTER_MS.to_string();
        let set = [
            "SENTINEL",
            "SET",
            "mymaster",
            "down-after-milliseconds",
            &down_after,
        ];
        let answer = self.sentinel.cli(&set);
        if !answer.contains("OK") {
            self.violations.push(format!("SENTINEL SET: {answer}"));
        }
        let killed = Instant::now();
        self.redis[0].stop();
        let (sentinel, replica) = (&self.sentinel, &self.redis[1]);
        let port = replica.port.to_string();
        until("the sentinel names the replica", async || {
            sentinel
                .cli(&["SENTINEL", "get-master-addr-by-name", "mymaster"])
                .contains(&port)
        })
        .await;
        let detected = Instant::now();
        until("the replica is primary", async || {
            replica.cli(&["ROLE"]).starts_with("master")
        })
        .await;
        self.failover = Some(FailoverTimes {
            killed,
            detected,
            promoted: Instant::now(),
        });
    }

    /// Starts relay `r` and tells the clients and the memory sampler.
    async fn start(&mut self, r: usize) {
        let addr = self.hosts[r].start().await;
        self.clients.addrs.lock().unwrap()[r] = Some(addr);
        self.clients.pids.lock().unwrap()[r] = self.hosts[r].pid();
    }

    /// Relay `r` out of the clients' and the sampler's view (a load balancer's health check).
    fn set_down(&self, r: usize) {
        self.clients.addrs.lock().unwrap()[r] = None;
        self.clients.pids.lock().unwrap()[r] = None;
    }

    /// SIGTERM to relay `r`, until it exits.
    async fn stop(&mut self, r: usize) {
        self.set_down(r);
        if let Some(e) = self.hosts[r].stop().await {
            self.violations.push(format!("relay {r} {e}"));
        }
    }

    /// Every relay still runs (none exited unasked).
    fn check_alive(&mut self, phase: &str) {
        for (r, h) in self.hosts.iter_mut().enumerate() {
            if !h.alive() {
                self.violations
                    .push(format!("relay {r} exited unasked during {phase}"));
            }
        }
    }
}
