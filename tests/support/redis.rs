//! A private `redis-server` for one test: on a free port of 127.0.0.1, no persistence, killed
//! when dropped (also when the test panics). Also a three-node Redis Cluster.
//!
//! Without `redis-server` installed, `RedisServer::start` skips through `host::skip` (a
//! failure unless skips are allowed) and returns `None`; the test then returns early.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mailsluice::redis::RedisOptions;

use super::host::{free_port, have_programs, scratch_path};

/// Options of a `RedisStore` on `urls` (a cluster's nodes when `cluster`): no password, a
/// timeout of 2 s, the default key prefix.
pub fn store_options(urls: Vec<String>, cluster: bool) -> RedisOptions {
    RedisOptions {
        urls,
        cluster,
        password: None,
        timeout: Duration::from_secs(2),
        prefix: "mailsluice:".into(),
        sentinel: None,
    }
}

pub struct RedisServer {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
    extra: Vec<String>,
    /// A sentinel's configuration file (the server runs with `--sentinel`).
    sentinel_conf: Option<PathBuf>,
}

/// Whether `redis-server` and `redis-cli` are installed; see the module doc.
pub fn have_redis() -> bool {
    have_programs(&["redis-server", "redis-cli"], "redis-server redis-tools")
}

impl RedisServer {
    /// A fresh server, ready for commands; `None` when Redis is not installed (a skip).
    pub fn start() -> Option<RedisServer> {
        RedisServer::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> Option<RedisServer> {
        if !have_redis() {
            return None;
        }
        let port = free_port();
        let dir = scratch_path("redis");
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = RedisServer {
            port,
            dir,
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            sentinel_conf: None,
        };
        s.restart();
        Some(s)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the server again (same port, empty) after [`RedisServer::stop`].
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let mut command = Command::new("redis-server");
        if let Some(conf) = &self.sentinel_conf {
            command.arg(conf).arg("--sentinel");
        }
        let child = command
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .args(["--dir", self.dir.to_str().unwrap()])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.cli(&["PING"]).trim() != "PONG" {
            assert!(Instant::now() < deadline, "redis-server did not answer");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A replica of `primary`, once it has the primary's data.
    pub fn replica_of(primary: &RedisServer) -> Option<RedisServer> {
        let port = primary.port.to_string();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port])?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !replica
            .cli(&["INFO", "replication"])
            .contains("master_link_status:up")
        {
            assert!(Instant::now() < deadline, "the replica did not sync");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(replica)
    }

    /// A sentinel (the `redis-server` binary in sentinel mode) monitoring `primary` as
    /// `mymaster`, alone (quorum 1), calling a primary down after 1 s without an answer.
    pub fn sentinel_of(primary: &RedisServer) -> Option<RedisServer> {
        RedisServer::sentinel_after(primary, 1000)
    }

    /// As [`RedisServer::sentinel_of`], calling the primary down after `down_after_ms`.
    pub fn sentinel_after(primary: &RedisServer, down_after_ms: u64) -> Option<RedisServer> {
        if !have_redis() {
            return None;
        }
        let dir = scratch_path("sentinel");
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("sentinel.conf");
        let text = format!(
            "sentinel monitor mymaster 127.0.0.1 {} 1\n\
             sentinel down-after-milliseconds mymaster {down_after_ms}\n\
             sentinel failover-timeout mymaster 10000\n",
            primary.port
        );
        std::fs::write(&conf, text).unwrap();
        let mut s = RedisServer {
            port: free_port(),
            dir,
            child: None,
            extra: Vec::new(),
            sentinel_conf: Some(conf),
        };
        s.restart();
        Some(s)
    }

    /// Kills the server (as a crash would) and waits for it to be gone.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends `signal` (`libc::SIGSTOP`, `libc::SIGCONT`) to the running server.
    pub fn signal(&self, signal: i32) {
        let child = self.child.as_ref().expect("the server runs");
        // SAFETY: kill(2) on our own child's pid.
        let r = unsafe { libc::kill(child.id() as i32, signal) };
        assert_eq!(r, 0, "kill({signal})");
    }

    /// `redis-cli` against this server; its standard output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .stderr(Stdio::null())
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// On a sentinel: `SENTINEL FAILOVER mymaster`, its answer. Until the sentinel has read
    /// the replica's own INFO it answers `NOGOODSLAVE`, so the failover is asked again (for
    /// up to 30 s) until it is taken.
    pub async fn fail_over(&self) -> String {
        let mut answer = String::new();
        for _ in 0..300 {
            answer = self.cli(&["SENTINEL", "FAILOVER", "mymaster"]);
            if !answer.contains("NOGOODSLAVE") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        answer
    }

    /// Calls of `command` (lowercase, e.g. `evalsha`) since start, from `INFO commandstats`.
    pub fn calls(&self, command: &str) -> u64 {
        calls_in(&self.cli(&["INFO", "commandstats"]), command)
    }

    /// Every key, sorted.
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .cli(&["--scan"])
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect();
        keys.sort();
        keys
    }
}

/// `cmdstat_<command>:calls=N,...` of an `INFO commandstats` text.
pub fn calls_in(info: &str, command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Three masters in cluster mode, slots spread by `redis-cli --cluster create`.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> Option<RedisCluster> {
        let mut nodes = Vec::new();
        for _ in 0..3 {
            // Each node has its own directory, which holds its nodes.conf. The bus port is
            // chosen too: by default it is the node's port + 10000, and Redis refuses to
            // start a node whose port is above 55535.
            let bus = free_port().to_string();
            let args = [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-port",
                &bus,
            ];
            nodes.push(RedisServer::start_with(&args)?);
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli --cluster create runs");
        assert!(
            out.status.success(),
            "cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        let ok = |n: &RedisServer| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok");
        while !nodes.iter().all(ok) {
            assert!(Instant::now() < deadline, "cluster did not become ok");
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(RedisCluster { nodes })
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Calls of `command` summed over the nodes.
    pub fn calls(&self, command: &str) -> u64 {
        self.nodes.iter().map(|n| n.calls(command)).sum()
    }

    /// `CLUSTER KEYSLOT key`.
    pub fn keyslot(&self, key: &str) -> u16 {
        self.nodes[0]
            .cli(&["CLUSTER", "KEYSLOT", key])
            .trim()
            .parse()
            .unwrap()
    }
}
