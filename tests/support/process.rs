//! The `mailsluice` binary as a process of its own, for what only a process shows: signals
//! (SIGTERM, SIGKILL), its exit code, its resident memory. It listens on 127.0.0.1 port 0;
//! the addresses are read from its log. Killed when dropped.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::host::scratch_path;

/// The binary: `MAILSLUICE_BIN`; else cargo's, which `cargo test` names in the environment of
/// the integration tests it runs; else the release build, for the drivers in `examples/`.
pub fn bin() -> PathBuf {
    if let Ok(path) = std::env::var("MAILSLUICE_BIN") {
        return path.into();
    }
    match std::env::var("CARGO_BIN_EXE_mailsluice") {
        Ok(path) => path.into(),
        Err(_) => {
            let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
            PathBuf::from(target).join("release/mailsluice")
        }
    }
}

pub struct RelayProcess {
    child: Child,
    pub addr: SocketAddr,
    /// The admin endpoint, when the config has `[admin]`.
    pub admin: Option<SocketAddr>,
    logs: Arc<Mutex<Vec<String>>>,
    dir: PathBuf,
}

/// The address in a log line's `addr=` (text) field.
fn addr_in(line: &str) -> Option<SocketAddr> {
    let rest = line.split("addr=").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

impl RelayProcess {
    /// Starts the binary on `config` (written to a private directory, also its working
    /// directory) with `RUST_LOG` as given, and waits until it listens: the filter must let
    /// the `mailsluice` target's info lines through (they carry the addresses).
    pub fn start(config: &str, rust_log: &str) -> RelayProcess {
        RelayProcess::start_with(config, rust_log, &[])
    }

    /// As [`RelayProcess::start`], the binary run by `wrapper` (a program and its arguments,
    /// to which the binary and its own arguments are appended: `unshare`, say).
    pub fn start_with(config: &str, rust_log: &str, wrapper: &[&str]) -> RelayProcess {
        RelayProcess::launch(config, rust_log, wrapper, &[])
    }

    /// As [`RelayProcess::start`], with `env` added to its environment (credentials, say).
    pub fn start_env(config: &str, rust_log: &str, env: &[(&str, &str)]) -> RelayProcess {
        RelayProcess::launch(config, rust_log, &[], env)
    }

    fn launch(
        config: &str,
        rust_log: &str,
        wrapper: &[&str],
        env: &[(&str, &str)],
    ) -> RelayProcess {
        let dir = scratch_path("proc");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("relay.toml");
        std::fs::write(&path, config).unwrap();
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(bin());
                c
            }
            None => Command::new(bin()),
        };
        let mut child = command
            .arg("--config")
            .arg(&path)
            .current_dir(&dir)
            .env("RUST_LOG", rust_log)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                let _ = std::fs::remove_dir_all(&dir);
                panic!("the relay binary {} starts: {e}", bin().display())
            });
        let stderr = child.stderr.take().unwrap();
        // Drain stderr for the whole run (so the relay never blocks on a full pipe), keeping
        // every line and handing them over until the addresses are known.
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (sink, (tx, rx)) = (logs.clone(), std::sync::mpsc::channel());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line.clone());
                let _ = tx.send(line);
            }
        });
        let wants_admin = config.contains("[admin]");
        let (mut addr, mut admin) = (None, None);
        while addr.is_none() || (wants_admin && admin.is_none()) {
            let line = match rx.recv_timeout(Duration::from_secs(30)) {
                Ok(line) => line,
                Err(e) => {
                    let _ = child.kill();
                    let _ = std::fs::remove_dir_all(&dir);
                    panic!(
                        "the relay did not log its addresses ({e}; RUST_LOG must let the \
                         mailsluice target's info through): {:?}",
                        logs.lock().unwrap()
                    );
                }
            };
            if line.contains("listening for SMTP") {
                addr = addr_in(&line);
            } else if line.contains("admin endpoint listening") {
                admin = addr_in(&line);
            }
        }
        RelayProcess {
            child,
            addr: addr.unwrap(),
            admin,
            logs,
            dir,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid.
        let r = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(r, 0, "kill: {}", std::io::Error::last_os_error());
    }

    /// Every log line so far.
    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().unwrap().clone()
    }

    /// Waits (at most 30 s) for a log line containing `needle`.
    pub async fn wait_for_log(&self, needle: &str) {
        for _ in 0..3000 {
            if self.logs.lock().unwrap().iter().any(|l| l.contains(needle)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no log line with {needle:?} within 30 s");
    }

    /// Waits for the process to exit, at most `limit` (then it is killed and this panics).
    pub async fn wait(&mut self, limit: Duration) -> ExitStatus {
        let steps = limit.as_millis() / 10;
        for _ in 0..steps.max(1) {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let _ = self.child.kill();
        panic!("the relay did not exit within {limit:?}");
    }

    /// Its exit status, if it has exited (without waiting).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// Waits for the exit of a process sent SIGKILL (which it cannot outlive).
    pub fn reap(&mut self) -> ExitStatus {
        self.child.wait().unwrap()
    }

    /// Resident memory of the process now, in KiB (`VmRSS` in `/proc/<pid>/status`).
    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.pid()).expect("the relay runs")
    }
}

/// `VmRSS` of a process, in KiB.
pub fn rss_kib(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
