//! A real MTA in front: a private Postfix instance (Debian's `postfix` package,
//! started with `postfix -c DIR start` on its own config, queue and data directories and a
//! free 127.0.0.1 port) relays through mailsluice (`relayhost = [127.0.0.1]:<port>`) to the
//! test upstream. With a layer in reject mode Postfix gets `451 4.7.1`, defers, retries and
//! delivers everything; in wait mode nothing is deferred. Postfix's log is the client log of
//! the invariant (`support::invariant`): each delivery attempt, its reply, by Message-ID.
//!
//! Postfix's backoff is shortened to 1–2 s in its config, so a run takes seconds. Starting a
//! Postfix master needs root (it drops to `mail_owner` itself); CI runs as root.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::host::{free_port, have_program, scratch_path, skip};
use crate::support::invariant::{self, settle, Seen};
use crate::support::relay::{smtp_relay, Relay};
use crate::support::traffic::{self, Leave};
use crate::support::upstream::TestUpstream;

/// A Postfix of our own; stopped and removed when dropped.
struct PrivatePostfix {
    dir: PathBuf,
    /// Where its smtpd listens.
    port: u16,
}

/// `postfix -c DIR <verb>`; its output (Postfix writes errors to the terminal only, and to
/// `maillog_file`, which the caller prints on failure).
fn postfix(conf: &Path, verb: &str) -> std::process::Output {
    Command::new("postfix")
        .arg("-c")
        .arg(conf)
        .arg(verb)
        .output()
        .expect("postfix runs")
}

const MASTER_CF: &str = "\
pickup    unix  n       -       n       60      1       pickup
cleanup   unix  n       -       n       -       0       cleanup
qmgr      unix  n       -       n       300     1       qmgr
rewrite   unix  -       -       n       -       -       trivial-rewrite
bounce    unix  -       -       n       -       0       bounce
defer     unix  -       -       n       -       0       bounce
trace     unix  -       -       n       -       0       bounce
verify    unix  -       -       n       -       1       verify
flush     unix  n       -       n       1000?   0       flush
proxymap  unix  -       -       n       -       -       proxymap
smtp      unix  -       -       n       -       -       smtp
relay     unix  -       -       n       -       -       smtp
error     unix  -       -       n       -       -       error
retry     unix  -       -       n       -       -       error
discard   unix  -       -       n       -       -       discard
anvil     unix  -       -       n       -       1       anvil
scache    unix  -       -       n       -       1       scache
postlog   unix-dgram n  -       n       -       1       postlogd
";

impl PrivatePostfix {
    /// A Postfix relaying everything to `relayhost`; `None` (a skip, `support::host::skip`)
    /// when Postfix is not installed or we are not root.
    fn start(relayhost: std::net::SocketAddr) -> Option<PrivatePostfix> {
        if !have_program("postfix") {
            return None;
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            skip("starting a Postfix master needs root");
            return None;
        }
        let dir = scratch_path("postfix");
        let (conf, queue, data) = (dir.join("conf"), dir.join("queue"), dir.join("data"));
        for d in [&conf, &queue, &data] {
            std::fs::create_dir_all(d).unwrap();
        }
        // The data directory (master.lock, caches) belongs to mail_owner.
        let chown = Command::new("chown")
            .arg("postfix:postfix")
            .arg(&data)
            .status()
            .unwrap();
        assert!(chown.success(), "chown postfix: is the postfix user there?");
        let port = free_port();
        let main_cf = format!(
            "compatibility_level = 3.6\n\
             queue_directory = {queue}\n\
             data_directory = {data}\n\
             mail_owner = postfix\n\
             setgid_group = postdrop\n\
             myhostname = postfix.test\n\
             mydomain = test\n\
             inet_interfaces = loopback-only\n\
             inet_protocols = ipv4\n\
             mydestination =\n\
             local_recipient_maps =\n\
             alias_maps =\n\
             alias_database =\n\
             relayhost = [{relay_ip}]:{relay_port}\n\
             mynetworks = 127.0.0.0/8\n\
             smtpd_relay_restrictions = permit_mynetworks, reject\n\
             maillog_file_prefixes = {dir}\n\
             maillog_file = {dir}/maillog\n\
             minimal_backoff_time = 1s\n\
             maximal_backoff_time = 2s\n\
             queue_run_delay = 1s\n\
             smtp_tls_security_level = none\n\
             smtpd_tls_security_level = none\n\
             biff = no\n",
            queue = queue.display(),
            data = data.display(),
            dir = dir.display(),
            relay_ip = relayhost.ip(),
            relay_port = relayhost.port(),
        );
        std::fs::write(conf.join("main.cf"), main_cf).unwrap();
        let master_cf = format!("127.0.0.1:{port} inet n - n - - smtpd\n{MASTER_CF}");
        std::fs::write(conf.join("master.cf"), master_cf).unwrap();
        let pf = PrivatePostfix { dir, port };
        let out = postfix(&conf, "start");
        if !out.status.success() {
            panic!(
                "postfix start failed: {}{}\nmaillog:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                pf.maillog()
            );
        }
        for _ in 0..500 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(pf);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("Postfix's smtpd never listened:\n{}", pf.maillog());
    }

    fn addr(&self) -> std::net::SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    fn maillog(&self) -> String {
        std::fs::read_to_string(self.dir.join("maillog")).unwrap_or_default()
    }

    /// Every delivery attempt Postfix logged, as the invariant's client log: the message's
    /// id (from its Message-ID) and the reply it got. An attempt that never reached the
    /// relay's final dot (no connection) counts as unsent.
    fn attempts(&self) -> Vec<(String, Seen)> {
        let log = self.maillog();
        let mut ids: BTreeMap<String, String> = BTreeMap::new();
        let mut attempts = Vec::new();
        for line in log.lines() {
            if let Some((queue_id, rest)) = queue_line(line) {
                if let Some(mid) = rest.strip_prefix("message-id=<") {
                    let id = mid.split('@').next().unwrap_or("").to_string();
                    ids.insert(queue_id.to_string(), id);
                } else if rest.starts_with("to=<") {
                    let Some(status) = rest.split(", status=").nth(1) else {
                        continue;
                    };
                    let text = status
                        .split_once(" (")
                        .map_or("", |(_, t)| t.trim_end_matches(')'));
                    let id = ids.get(queue_id).cloned().unwrap_or_default();
                    attempts.push((id, seen_of(text)));
                }
            }
        }
        attempts
    }

    /// Lines of `status=<status>` in the log.
    fn count(&self, status: &str) -> usize {
        let needle = format!("status={status} ");
        self.maillog()
            .lines()
            .filter(|l| l.contains(&needle))
            .count()
    }
}

/// `... postfix/smtp[123]: 4F2A19A011A: to=<...>` → (`4F2A19A011A`, `to=<...>`).
fn queue_line(line: &str) -> Option<(&str, &str)> {
    let (_, after) = line.split_once("]: ")?;
    let (queue_id, rest) = after.split_once(": ")?;
    queue_id
        .bytes()
        .all(|b| b.is_ascii_hexdigit())
        .then_some((queue_id, rest))
}

/// A status text: `250 2.0.0 Ok: ...` (sent), `host ... said: 451 4.7.1 ... (in reply to end
/// of DATA command)` (deferred), or a connection failure (no reply: unsent).
fn seen_of(text: &str) -> Seen {
    let reply = text.split_once("said: ").map_or(text, |(_, r)| r);
    match reply.get(..3).and_then(|c| c.parse::<u16>().ok()) {
        Some(code) => Seen::Reply(code, reply.get(4..).unwrap_or("").to_string()),
        None => Seen::Unsent,
    }
}

impl Drop for PrivatePostfix {
    fn drop(&mut self) {
        let conf = self.dir.join("conf");
        let _ = postfix(&conf, "stop");
        // Wait for the master to go (it removes nothing we need; its pid file says).
        let pid_file = self.dir.join("queue/pid/master.pid");
        for _ in 0..200 {
            let alive = std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|p| p.trim().parse::<i32>().ok())
                // SAFETY: signal 0 only checks that the process exists.
                .is_some_and(|pid| unsafe { libc::kill(pid, 0) } == 0);
            if !alive {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const MESSAGES: usize = 12;

/// Hands `MESSAGES` messages to Postfix, waits until it delivered them all (or gave up on
/// one), stops the relay and checks the invariant over Postfix's log.
async fn through_postfix(relay: Relay, up: &TestUpstream, pf: &PrivatePostfix) {
    let log = invariant::ClientLog::new();
    for i in 0..MESSAGES {
        let id = format!("pf{i}");
        let seen = traffic::send(pf.addr(), &log, &id, "acme", Leave::Never).await;
        assert_eq!(seen.code(), Some(250), "Postfix took {id}: {seen:?}");
    }
    for _ in 0..1200 {
        if pf.count("sent") + pf.count("bounced") >= MESSAGES {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        pf.count("sent"),
        MESSAGES,
        "Postfix delivered everything:\n{}",
        pf.maillog()
    );
    relay.stop().await;
    settle(up).await;
    let attempts = pf.attempts();
    let summary = match invariant::check(&attempts, &invariant::upstream_ids(up)) {
        Ok(s) => s,
        Err(e) => panic!("the invariant does not hold:\n{e}\n{}", pf.maillog()),
    };
    assert_eq!(summary.acknowledged, MESSAGES, "{summary:?}");
    assert_eq!(up.messages().len(), MESSAGES);
}

fn layer(mode: &str) -> String {
    format!(
        "[[throttle]]\nname = \"account\"\nkey = \"none\"\ncost = \"message\"\nlimit = 4\n\
         interval_ms = 1000\nburst = 2\nmode = \"{mode}\"\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postfix_in_front_reject_mode_defers_then_delivers_everything() {
    let up = TestUpstream::start().await;
    let relay = smtp_relay(&up.url(), "", &layer("reject")).await;
    let Some(pf) = PrivatePostfix::start(relay.addr) else {
        return;
    };
    through_postfix(relay, &up, &pf).await;
    let deferred: Vec<(String, Seen)> = pf
        .attempts()
        .into_iter()
        .filter(|(_, s)| s.code() != Some(250))
        .collect();
    assert!(
        !deferred.is_empty(),
        "12 messages at 4 a second in reject mode: some were refused"
    );
    for (id, seen) in &deferred {
        assert!(
            matches!(seen, Seen::Reply(451, t) if t.starts_with("4.7.1")),
            "{id}: {seen:?}"
        );
    }
    assert_eq!(pf.count("deferred"), deferred.len());
    eprintln!(
        "reject mode: {} deferrals, all {MESSAGES} delivered",
        deferred.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postfix_in_front_wait_mode_defers_nothing() {
    let up = TestUpstream::start().await;
    let relay = smtp_relay(&up.url(), "", &layer("wait")).await;
    let Some(pf) = PrivatePostfix::start(relay.addr) else {
        return;
    };
    through_postfix(relay, &up, &pf).await;
    assert_eq!(pf.count("deferred"), 0, "{}", pf.maillog());
    assert_eq!(pf.attempts().len(), MESSAGES, "one attempt each");
}
