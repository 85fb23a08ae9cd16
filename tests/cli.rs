//! The `mailsluice` binary itself: `check`, the embedded default, and SIGTERM.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;

use common::relay::Client;

const BIN: &str = env!("CARGO_BIN_EXE_mailsluice");

fn check(config: &str) -> std::process::Output {
    let dir = tempdir();
    let path = dir.join("c.toml");
    std::fs::write(&path, config).unwrap();
    Command::new(BIN)
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap()
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("mailsluice-cli-{}", uuid()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn uuid() -> String {
    format!("{}-{:?}", std::process::id(), std::thread::current().id()).replace(['(', ')'], "")
        + &format!(
            "-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        )
}

#[test]
fn check_accepts_the_shipped_configs() {
    for path in [
        "config/mailsluice.toml",
        "config/examples/ses.toml",
        "config/examples/tiers.toml",
        "config/examples/lifetime.toml",
        "config/examples/replicas.toml",
    ] {
        let out = Command::new(BIN)
            .args(["check", "--config", path])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn check_names_the_key_and_line_of_an_error() {
    let out = check(
        "[smtp]\nlisten = [\"127.0.0.1:0\"]\nmax_recipients = 0\n[upstream]\nurl = \"file://x\"\n",
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 3") && err.contains("max_recipients"),
        "{err}"
    );
    let out =
        check("[smtp]\nlisten = [\"127.0.0.1:0\"]\n[upstream]\nurl = \"file://x\"\npool = 3\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(err.contains("line 5") && err.contains("pool"), "{err}");
}

/// Starts the binary on port 0 and returns it with the address it logged.
fn start(config: &str, dir: &std::path::Path) -> (Child, SocketAddr, Receiver<String>) {
    let path = dir.join("relay.toml");
    std::fs::write(&path, config).unwrap();
    let mut child = Command::new(BIN)
        .arg("--config")
        .arg(&path)
        .current_dir(dir)
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("relay exited before listening")
            .unwrap();
        if let Some(rest) = line.split("addr=").nth(1) {
            break rest.split_whitespace().next().unwrap().parse().unwrap();
        }
    };
    // Keep draining stderr so the relay never blocks on a full pipe; hand lines to the test.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (child, addr, rx)
}

#[tokio::test]
async fn default_file_upstream_then_sigterm_finishes_the_transaction_and_exits_0() {
    let dir = tempdir();
    let config = "[smtp]\nlisten = [\"127.0.0.1:0\"]\n[upstream]\nurl = \"file://outbox\"\n";
    let (mut child, addr, logs) = start(config, &dir);
    let mut c = Client::connect(addr).await;
    assert_eq!(
        c.send_mail(
            "a@example.com",
            &["b@example.com"],
            b"Subject: 1\r\n\r\nx\r\n"
        )
        .await
        .0,
        250
    );
    // A second transaction is in flight (inside DATA) when SIGTERM comes.
    c.cmd("MAIL FROM:<a@example.com>").await;
    c.cmd("RCPT TO:<b@example.com>").await;
    assert_eq!(c.cmd("DATA").await.0, 354);
    c.send(b"Subject: 2\r\n\r\nhalf").await;
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    // The relay says when it has seen the signal (no sleeping on a guess).
    while !logs.recv().unwrap().contains("shutting down") {}
    c.send(b" and the rest\r\n.\r\n").await;
    let (code, text) = c.reply().await;
    assert_eq!(code, 250, "the transaction in flight finishes: {text}");
    // Its next command is told the service is going away.
    let (code, _) = c.cmd("NOOP").await;
    assert_eq!(code, 421);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let emls = std::fs::read_dir(dir.join("outbox"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "eml")
        })
        .count();
    assert_eq!(emls, 2);
}
