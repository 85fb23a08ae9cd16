//! The fault campaign: several relays sharing a `key = "none"` layer and a per-tenant layer in
//! Redis (a primary, its replica and a sentinel), one recording upstream, and clients that
//! retry like a legacy app; faults one after another with recovery between them; then the
//! checker (`support::campaign_check`) over every message. Run short by the CI test
//! (`tests/redis/redis_campaign.rs`) and long by `bench/faults.sh`.
//!
//! The relays run in this process, each on a tokio runtime of its own, so that a kill is the
//! runtime shut down at once: every task of that relay (sessions, upstream connections, Redis
//! calls) is dropped at its next await, its sockets closed. Unlike `kill -9`, destructors run
//! (a drop may still try to give back a Redis reservation, and fails or not) and the kernel
//! closes the sockets of a living process, not of a dead one; what clients, upstream and Redis
//! see (connections closed mid-dialogue) is the same.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use tokio::runtime::Runtime;

use super::campaign_check::{self, Attempt, Phase, Report, Shared};
use super::invariant::{id_of, ClientLog};
use super::redis::RedisServer;
use super::relay::Relay;
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

/// The upstream's timeout; its stalls last longer.
const UPSTREAM_TIMEOUT_MS: u64 = 1000;

/// A relay on a runtime of its own (see the module doc).
struct Host {
    config: String,
    running: Option<(Runtime, Relay)>,
}

impl Host {
    async fn start(&mut self) -> SocketAddr {
        let config = self.config.clone();
        let (rt, relay) = tokio::task::spawn_blocking(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("a runtime");
            let relay = rt.block_on(Relay::start_configured(&config));
            (rt, relay)
        })
        .await
        .unwrap();
        let addr = relay.addr;
        self.running = Some((rt, relay));
        addr
    }

    /// The whole relay gone at once.
    fn kill(&mut self) {
        let (rt, relay) = self.running.take().expect("running");
        rt.shutdown_background();
        drop(relay);
    }

    /// SIGTERM's path: the shutdown fired, `run` waited for until it returns (drained).
    async fn stop(&mut self) {
        let (rt, relay) = self.running.take().expect("running");
        tokio::task::spawn_blocking(move || {
            rt.block_on(relay.stop());
            rt.shutdown_background();
        })
        .await
        .unwrap();
    }

    /// False when the relay's `run` returned without being asked to.
    fn alive(&self) -> bool {
        self.running.as_ref().is_none_or(|(_, r)| r.is_running())
    }
}

/// What the clients share with the campaign.
struct Clients {
    /// Where each relay listens; `None` while it is down (a load balancer's view).
    addrs: Mutex<Vec<Option<SocketAddr>>>,
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

/// The relays' config: the shared and the per-tenant layer in Redis through the sentinel.
fn config(up: &TestUpstream, sentinel: &RedisServer, shared: Shared) -> String {
    format!(
        "[smtp]\nlisten = [\"127.0.0.1:0\"]\nhostname = \"relay.test\"\nshutdown_grace_ms = 5000\n\
         [upstream]\nurl = \"{}\"\ntls = \"none\"\ntimeout_ms = {UPSTREAM_TIMEOUT_MS}\n\
         [[throttle]]\nname = \"account\"\nkey = \"none\"\ncost = \"message\"\nlimit = {}\n\
         interval_ms = 1000\nburst = {}\nmax_wait_ms = 4000\nstore = \"redis\"\n\
         [[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\ncost = \"message\"\n\
         limit = 4\ninterval_ms = 1000\nburst = 4\nmode = \"reject\"\nstore = \"redis\"\n\
         [redis]\nsentinel = {{ master = \"mymaster\", nodes = [\"127.0.0.1:{}\"] }}\n\
         timeout_ms = 300\non_error = \"reject\"\n",
        up.url(),
        shared.limit,
        shared.burst,
        sentinel.port
    )
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
}

/// Runs the campaign; `None` without `redis-server` (not under CI: see `support::redis`).
pub async fn run(plan: Plan) -> Option<Report> {
    let primary = RedisServer::start()?;
    let replica = RedisServer::replica_of(&primary)?;
    // Slower to call the primary down than the 3 s pause lasts: the pause is a partition,
    // not a failover. The failover is asked for (`SENTINEL FAILOVER`) once the primary died.
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
    };
    for i in 0..plan.relays {
        w.hosts.push(Host {
            config: text.clone(),
            running: None,
        });
        let addr = w.hosts[i].start().await;
        clients.addrs.lock().unwrap()[i] = Some(addr);
    }
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
    for h in &mut w.hosts {
        h.stop().await;
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
    report.violations.extend(w.violations);
    Some(report)
}

impl World {
    /// Injects fault `i` of [`FAULTS`] and undoes it; returns once healed.
    async fn inject(&mut self, i: usize) {
        let hold = self.plan.hold;
        match i {
            0 => {
                self.set_addr(0, None);
                self.hosts[0].kill();
                tokio::time::sleep(hold).await;
                let addr = self.hosts[0].start().await;
                self.set_addr(0, Some(addr));
            }
            1 => {
                for r in 0..self.hosts.len() {
                    self.set_addr(r, None);
                    self.hosts[r].stop().await;
                    let addr = self.hosts[r].start().await;
                    self.set_addr(r, Some(addr));
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

    /// The primary killed, the sentinel told to fail over to the replica, until the
    /// replica is the primary.
    async fn fail_over(&mut self) {
        self.redis[0].stop();
        let answer = self.sentinel.fail_over().await;
        if !answer.contains("OK") {
            self.violations.push(format!("SENTINEL FAILOVER: {answer}"));
        }
        let (sentinel, replica) = (&self.sentinel, &self.redis[1]);
        let port = replica.port.to_string();
        until("the sentinel names the replica", async || {
            sentinel
                .cli(&["SENTINEL", "get-master-addr-by-name", "mymaster"])
                .contains(&port)
        })
        .await;
        until("the replica is primary", async || {
            replica.cli(&["ROLE"]).starts_with("master")
        })
        .await;
    }

    fn set_addr(&self, r: usize, addr: Option<SocketAddr>) {
        self.clients.addrs.lock().unwrap()[r] = addr;
    }

    /// Every relay still runs (none exited unasked).
    fn check_alive(&mut self, phase: &str) {
        for (r, h) in self.hosts.iter().enumerate() {
            if !h.alive() {
                self.violations
                    .push(format!("relay {r} exited unasked during {phase}"));
            }
        }
    }
}
