//! The `mailsluice` binary itself: `check`, the embedded default, and SIGTERM.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;

use mailsluice::inbound::password;

use crate::support::config::TestConfig;
use crate::support::host::{free_port, scratch_path};
use crate::support::relay::Client;

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
    let dir = scratch_path("cli");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The variables the shipped configs name (`password_env`): `check` reads them as the start
/// does, so it is run where they are set.
const SHIPPED_ENV: [&str; 6] = [
    "SES_SMTP_PASSWORD",
    "SES_EU_PASSWORD",
    "SES_US_PASSWORD",
    "BACKUP_PASSWORD",
    "ACME_WEBHOOK_SECRET",
    "OPS_WEBHOOK_SECRET",
];

/// The XOAUTH2 examples' secrets: a client secret, and a service account's key (made now: a
/// test key) that `check` reads as the start does.
fn xoauth2_env() -> [(&'static str, String); 2] {
    let key = crate::support::token_endpoint::TestKey::new();
    [
        ("M365_CLIENT_SECRET", "x".to_string()),
        ("GMAIL_SERVICE_ACCOUNT_KEY", key.service_account_json()),
    ]
}

#[test]
fn check_accepts_the_shipped_configs() {
    let xoauth2 = xoauth2_env();
    for path in [
        "config/mailsluice.toml",
        "config/container.toml",
        "config/examples/ses.toml",
        "config/examples/tiers.toml",
        "config/examples/lifetime.toml",
        "config/examples/replicas.toml",
        "config/examples/ses-multi.toml",
        "config/examples/mx.toml",
        "config/examples/hold.toml",
        "config/examples/webhooks.toml",
        "config/examples/microsoft365.toml",
        "config/examples/gmail.toml",
    ] {
        // `check` opens a spool as the start does (making it): a scratch one, not the host's.
        let text = std::fs::read_to_string(path).unwrap();
        let spool = tempdir().join("spool");
        let text = text.replace(
            "dir = \"/var/spool/mailsluice\"",
            &format!("dir = \"{}\"", spool.display()),
        );
        let copy = tempdir().join("shipped.toml");
        std::fs::write(&copy, text).unwrap();
        let out = Command::new(BIN)
            .args(["check", "--config"])
            .arg(&copy)
            .envs(SHIPPED_ENV.map(|var| (var, "x")))
            .envs(xoauth2.clone())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The SES examples take what SES takes: 40 MB a message (its quota, over SMTP as over its
/// API), not a smaller cap of their own.
#[test]
fn the_ses_examples_take_messages_as_large_as_ses_does() {
    for path in ["config/examples/ses.toml", "config/examples/ses-multi.toml"] {
        let text = std::fs::read_to_string(path).unwrap();
        let config = mailsluice::config::Config::parse(&text).unwrap();
        assert_eq!(
            config.smtp.max_message_bytes.get(),
            mailsluice::upstream::ses::MAX_MESSAGE_BYTES,
            "{path}"
        );
    }
}

/// What `check` passes starts: a config with what the start reads besides the config (an
/// upstream's password variable, a certificate and key, an admin password hash) passes
/// `check`, and the binary then starts on it, listens and stops.
#[tokio::test]
async fn a_config_that_check_passes_starts() {
    let dir = tempdir();
    let tls = crate::support::tls::TestCert::new();
    let hash = password::hash("admin secret").unwrap();
    let config = TestConfig::new()
        .smtp(&tls.config(""))
        .upstream("smtp://127.0.0.1:9")
        .then("username = \"relay\"\npassword_env = \"MAILSLUICE_TEST_SET_PASSWORD\"")
        .then(&format!(
            "[admin]\nlisten = \"127.0.0.1:0\"\npassword_hash = \"{hash}\""
        ))
        .text();
    let path = dir.join("relay.toml");
    std::fs::write(&path, &config).unwrap();
    let env = ("MAILSLUICE_TEST_SET_PASSWORD", "s3cret");
    let checked = Command::new(BIN)
        .args(["check", "--config"])
        .arg(&path)
        .env(env.0, env.1)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&checked.stderr);
    assert!(checked.status.success(), "{said}");
    let child = Command::new(BIN)
        .arg("--config")
        .arg(&path)
        .env(env.0, env.1)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Running(child);
    let lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut lines = lines.map_while(Result::ok);
    assert!(
        lines.any(|l| l.contains("listening for SMTP")),
        "the relay started"
    );
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

/// Every check the start makes without the network is `check`'s too: each config below fails
/// `check` and the start alike, with the same words (the key or file at fault), said once;
/// the spool is opened as the start opens it (made, locked, written).
#[test]
fn every_check_that_fails_the_start_fails_check() {
    let dir = tempdir();
    let (a, b) = (
        crate::support::tls::TestCert::new(),
        crate::support::tls::TestCert::new(),
    );
    let file = || TestConfig::new().upstream("file://outbox");
    let tls = |cert: &std::path::Path, key: &std::path::Path| {
        TestConfig::new()
            .smtp(&format!(
                "[smtp.tls]\ncert = \"{}\"\nkey = \"{}\"",
                cert.display(),
                key.display()
            ))
            .upstream("file://outbox")
            .text()
    };
    let weak = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls");
    // A spool directory whose lock this test holds, as a running relay would.
    let locked = dir.join("spool-in-use");
    std::fs::create_dir_all(&locked).unwrap();
    let lock = std::fs::File::create(locked.join("lock")).unwrap();
    lock.try_lock().unwrap();
    let cases: Vec<(&str, Option<String>, String)> = vec![
        ("a missing config file", None, "(os error 2)".into()),
        (
            "an upstream's password variable not set",
            Some(
                TestConfig::new()
                    .upstream("smtp://127.0.0.1:9")
                    .then("username = \"u\"\npassword_env = \"MAILSLUICE_TEST_UNSET_PASSWORD\"")
                    .text(),
            ),
            "MAILSLUICE_TEST_UNSET_PASSWORD` is not set".into(),
        ),
        (
            "Redis's password variable not set",
            Some(
                file()
                    .then(
                        "[redis]\nurl = \"redis://127.0.0.1:9\"\n\
                         password_env = \"MAILSLUICE_TEST_UNSET_REDIS\"",
                    )
                    .text(),
            ),
            "MAILSLUICE_TEST_UNSET_REDIS".into(),
        ),
        (
            "a certificate file missing",
            Some(tls(&dir.join("missing.pem"), &a.key_path)),
            "missing.pem".into(),
        ),
        (
            "a key that is not the certificate's",
            Some(tls(&a.cert_path, &b.key_path)),
            "does not match".into(),
        ),
        (
            "an RSA key under 2048 bits",
            Some(tls(
                &weak.join("weak-rsa1024.pem"),
                &weak.join("weak-rsa1024.key"),
            )),
            "an RSA key of 1024 bits".into(),
        ),
        (
            "an admin password hash that is no argon2 hash",
            Some(file().then("[admin]\npassword_hash = \"secret\"").text()),
            "admin.password_hash".into(),
        ),
        (
            "a spool directory that cannot be made",
            Some(file().then("[spool]\ndir = \"/proc/nope/spool\"").text()),
            "opening [spool]: spool directory /proc/nope/spool: No such file or directory (os error 2)"
                .into(),
        ),
        (
            "a spool directory another process holds",
            Some(
                file()
                    .then(&format!("[spool]\ndir = \"{}\"", locked.display()))
                    .text(),
            ),
            format!(
                "opening [spool]: spool directory {} is in use by another mailsluice process",
                locked.display()
            ),
        ),
    ];
    for (i, (case, config, says)) in cases.into_iter().enumerate() {
        let path = dir.join(format!("case{i}.toml"));
        if let Some(config) = config {
            std::fs::write(&path, config).unwrap();
        }
        for args in [&["check", "--config"][..], &["--config"][..]] {
            let out = Command::new(BIN)
                .args(args)
                .arg(&path)
                .current_dir(&dir)
                .env_remove("MAILSLUICE_TEST_UNSET_PASSWORD")
                .env_remove("MAILSLUICE_TEST_UNSET_REDIS")
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{case}, {args:?}: {err}");
            assert_eq!(err.matches(&says).count(), 1, "{case}, {args:?}: {err}");
            // The cause is said once, not again as the error's source.
            let cause = "No such file or directory (os error 2)";
            if says.contains(cause) {
                assert_eq!(err.matches(cause).count(), 1, "{case}, {args:?}: {err}");
            }
        }
    }
}

#[test]
fn check_warns_when_no_route_is_a_catch_all_and_refuses_unknown_names() {
    // The minimal head: the test names the line of the route's `upstream`.
    let upstreams = TestConfig::minimal().named_upstream("eu", "file://x");
    let routed = "[[route]]\nkey = \"header:X-Tenant\"\nvalues = [\"acme\"]\nupstream = \"eu\"\n";
    let out = check(&upstreams.clone().then(routed).text());
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning") && err.contains("catch-all"),
        "{err}"
    );
    let out = check(&upstreams.then("[[route]]\nupstream = \"us\"").text());
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no upstream named \"us\"") && err.contains("line 7"),
        "{err}"
    );
}

/// A balancer inside `trusted_networks` (here loopback, their default): `check` passes and
/// warns, naming both; apart, no warning.
#[test]
fn check_warns_when_proxy_from_overlaps_trusted_networks() {
    let config = |smtp: &str| TestConfig::new().smtp(smtp).upstream("file://x").text();
    let out = check(&config("proxy_from = [\"127.0.0.1/32\"]"));
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning") && err.contains("smtp.proxy_from (127.0.0.1/32) overlaps"),
        "{err}"
    );
    assert!(err.contains("smtp.trusted_networks (127.0.0.0/8)"), "{err}");
    let apart = "proxy_from = [\"127.0.0.1/32\"]\ntrusted_networks = [\"127.0.0.2/32\"]";
    let out = check(&config(apart));
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("warning"), "{err}");
}

#[test]
fn check_names_the_key_and_line_of_an_error() {
    // The minimal head: the test names the lines of the keys at fault.
    let out = check(
        &TestConfig::minimal()
            .smtp("max_recipients = 0")
            .upstream("file://x")
            .text(),
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 3") && err.contains("max_recipients"),
        "{err}"
    );
    let out = check(
        &TestConfig::minimal()
            .upstream("file://x")
            .then("pool = 3")
            .text(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(err.contains("line 5") && err.contains("pool"), "{err}");
}

/// `check` refuses a malformed `senders` pattern, naming the key and the pattern's own line.
#[test]
fn check_names_the_line_of_a_malformed_sender_pattern() {
    let user = "[[smtp.auth.users]]\nuser = \"acme\"\n\
                password_hash = \"$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$hRh5UbO5V5zAcTz1r34tZgRfrqBvAdiE/lw+J3iU+Ls\"\n";
    // The minimal head: the test names the line of the pattern.
    let config = |senders: &str| {
        TestConfig::minimal()
            .smtp(&format!(
                "{user}senders = [\n  \"@acme.example\",\n  {senders},\n]"
            ))
            .upstream("file://x")
            .text()
    };
    assert!(check(&config("\"billing@shared.example\""))
        .status
        .success());
    let out = check(&config("\"billing at acme.example\""));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("smtp.auth.users.senders")
            && err.contains("billing at acme.example")
            && err.contains("line 8"),
        "{err}"
    );
}

/// The relay process, killed when the test ends however it ends (a failed assertion must not
/// leave it running, holding the test's output pipe open).
struct Running(Child);

impl std::ops::Deref for Running {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(config: &str, dir: &std::path::Path) -> (Running, SocketAddr, Receiver<String>) {
    start_with(config, dir, &[])
}

/// Starts the binary on port 0; returns it, the address it logged, and its log lines from the
/// first (those before the address included).
fn start_with(
    config: &str,
    dir: &std::path::Path,
    args: &[&str],
) -> (Running, SocketAddr, Receiver<String>) {
    let path = dir.join("relay.toml");
    std::fs::write(&path, config).unwrap();
    let child = Command::new(BIN)
        .args(args)
        .arg("--config")
        .arg(&path)
        .current_dir(dir)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Running(child);
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let mut before = Vec::new();
    let addr = loop {
        let line = lines
            .next()
            .expect("relay exited before listening")
            .unwrap();
        if !line.contains("listening for SMTP") {
            before.push(line);
            continue;
        }
        if let Some(rest) = line.split("addr=").nth(1) {
            break rest.split_whitespace().next().unwrap().parse().unwrap();
        }
        if let Some(rest) = line.split("\"addr\":\"").nth(1) {
            break rest.split('"').next().unwrap().parse().unwrap();
        }
    };
    // Keep draining stderr so the relay never blocks on a full pipe; hand lines to the test.
    let (tx, rx) = std::sync::mpsc::channel();
    for line in before {
        tx.send(line).unwrap();
    }
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (child, addr, rx)
}

/// Sends one small message; returns the reply's code.
async fn send_one(c: &mut Client) -> u16 {
    let message = b"Subject: 1\r\n\r\nx\r\n";
    c.send_mail("a@example.com", &["b@example.com"], message)
        .await
        .0
}

#[tokio::test]
async fn default_file_upstream_then_sigterm_finishes_the_transaction_and_exits_0() {
    let dir = tempdir();
    let config = TestConfig::new().upstream("file://outbox").text();
    let (mut child, addr, logs) = start(&config, &dir);
    let mut c = Client::connect(addr).await;
    assert_eq!(send_one(&mut c).await, 250);
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

#[tokio::test]
async fn workers_sets_the_runtime_threads_and_zero_is_refused() {
    let dir = tempdir();
    let config = TestConfig::new().upstream("file://outbox").text();
    std::fs::write(dir.join("zero.toml"), &config).unwrap();
    let out = Command::new(BIN)
        .args(["--workers", "0", "--config"])
        .arg(dir.join("zero.toml"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--workers"), "{err}");
    // The runtime reports its own thread count; the relay logs it before it listens.
    let (mut child, addr, logs) = start_with(&config, &dir, &["--workers", "1"]);
    let started = loop {
        let line = logs.recv().unwrap();
        if line.contains("runtime started") {
            break line;
        }
    };
    assert!(started.contains("workers=1"), "{started}");
    let mut c = Client::connect(addr).await;
    assert_eq!(send_one(&mut c).await, 250);
    child.kill().unwrap();
    let _ = child.wait();
}

#[tokio::test]
async fn json_logs_have_one_object_per_line_with_the_message_fields() {
    let dir = tempdir();
    let config = TestConfig::new()
        .upstream("file://outbox")
        .then("[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\nlimit = 5")
        .text();
    let (mut child, addr, logs) = start_with(&config, &dir, &["--log-format", "json"]);
    let mut c = Client::connect(addr).await;
    let msg = b"X-Tenant: acme\r\nSubject: secret subject\r\n\r\nsecret body\r\n";
    assert_eq!(
        c.send_mail("a@example.com", &["b@example.net"], msg)
            .await
            .0,
        250
    );
    let message_line = loop {
        let line = logs.recv().unwrap();
        let json: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        if json["fields"]["message"] == "message" {
            break json;
        }
    };
    let f = &message_line["fields"];
    assert_eq!(f["outcome"], "delivered", "{message_line}");
    assert_eq!(f["layer"], "", "no layer refused it: {message_line}");
    assert_eq!(f["key"], "acme");
    assert_eq!(f["cost"], 1);
    assert!(f["waited_ms"].is_u64() && f["duration_ms"].is_u64());
    assert!(f["upstream"].as_str().unwrap().starts_with("250 "));
    assert!(
        !message_line.to_string().contains("secret"),
        "no message content in logs"
    );
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

/// `hash-password` reads no config: its help does not offer `--config`.
#[test]
fn hash_password_takes_no_config() {
    let out = Command::new(BIN)
        .args(["hash-password", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && help.contains("argon2id"), "{help}");
    assert!(!help.contains("--config"), "{help}");
    let out = Command::new(BIN)
        .args(["check", "--help"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("--config"));
}

#[test]
fn hash_password_reads_stdin_and_prints_an_argon2id_hash() {
    use std::io::Write;
    let mut child = Command::new(BIN)
        .arg("hash-password")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"correct horse\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let hash = String::from_utf8(out.stdout).unwrap();
    let hash = hash.trim();
    assert!(hash.starts_with("$argon2id$v=19$"), "{hash}");
    assert!(password::matches(hash, "correct horse"));
    assert!(!password::matches(hash, "correct horse\n"));
    // A config with that hash is valid.
    let config = TestConfig::new()
        .smtp(&format!(
            "[smtp.auth]\nusers = [{{ user = \"u\", password_hash = \"{hash}\" }}]"
        ))
        .upstream("file://x")
        .text();
    assert!(check(&config).status.success());
}

#[test]
fn check_names_a_missing_certificate_and_a_mismatched_key() {
    let dir = tempdir();
    let a = crate::support::tls::TestCert::new();
    let b = crate::support::tls::TestCert::new();
    let tls = |cert: &std::path::Path, key: &std::path::Path| {
        TestConfig::new()
            .smtp(&format!(
                "[smtp.tls]\ncert = \"{}\"\nkey = \"{}\"",
                cert.display(),
                key.display()
            ))
            .upstream("file://x")
            .text()
    };
    assert!(check(&tls(&a.cert_path, &a.key_path)).status.success());
    let out = check(&tls(&a.cert_path, &b.key_path));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(err.contains("does not match"), "{err}");
    let out = check(&tls(&dir.join("missing.pem"), &a.key_path));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("missing.pem"), "{err}");
}

#[tokio::test]
async fn sighup_reloads_the_certificate_without_dropping_connections() {
    let dir = tempdir();
    let cert = crate::support::tls::TestCert::new();
    let config = TestConfig::new()
        .smtp(&cert.config(""))
        .upstream("file://outbox")
        .text();
    let (mut child, addr, logs) = start(&config, &dir);
    let mut before = crate::support::tls::starttls(Client::connect(addr).await, &cert.der).await;
    assert_eq!(before.cmd("EHLO x").await.0, 250);
    let renewed = cert.renew();
    let hup = Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    while !logs.recv().unwrap().contains("configuration reloaded") {}
    let mut after = crate::support::tls::starttls(Client::connect(addr).await, &renewed).await;
    assert_eq!(after.cmd("EHLO x").await.0, 250);
    assert_eq!(
        before.cmd("NOOP").await.0,
        250,
        "the older connection is still up"
    );
    child.kill().unwrap();
    let _ = child.wait();
}

#[tokio::test]
async fn peek_reads_a_local_layer_through_the_admin_endpoint_and_takes_nothing() {
    let dir = tempdir();
    let config = TestConfig::new()
        .upstream("file://outbox")
        .then(&format!("[admin]\nlisten = \"127.0.0.1:{}\"", free_port()))
        .then("[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\nlimit = 5\ninterval_ms = 3600000")
        .text();
    let (mut child, addr, logs) = start(&config, &dir);
    while !logs.recv().unwrap().contains("admin endpoint listening") {}
    let mut c = Client::connect(addr).await;
    let msg = b"X-Tenant: a/b c\r\nSubject: s\r\n\r\nx\r\n";
    assert_eq!(
        c.send_mail("a@example.com", &["b@example.net", "c@example.net"], msg)
            .await
            .0,
        250
    );
    for _ in 0..2 {
        let out = Command::new(BIN)
            .args(["peek", "--config"])
            .arg(dir.join("relay.toml"))
            .args(["tenant", "a/b c"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            (json["limit"].as_u64(), json["remaining"].as_u64()),
            (Some(5), Some(3)),
            "{json}"
        );
    }
    let out = Command::new(BIN)
        .args(["peek", "--config"])
        .arg(dir.join("relay.toml"))
        .args(["nosuch", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

fn hup(child: &Running) {
    let status = Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn sighup_with_a_lower_limit_throttles_the_next_messages_and_a_bad_config_is_refused() {
    let dir = tempdir();
    // The minimal head: the test names the line of `limit`.
    let layer = |limit: &str| {
        TestConfig::minimal()
            .upstream("file://outbox")
            .then(&format!(
                "[[throttle]]\nname = \"tenant\"\nkey = \"none\"\ncost = \"message\"\nlimit = {limit}\n\
                 interval_ms = 3600000\nmode = \"reject\""
            ))
            .text()
    };
    let (mut child, addr, logs) = start(&layer("100"), &dir);
    let mut c = Client::connect(addr).await;
    // A session open across the reload moves to the new config at its next MAIL.
    for _ in 0..2 {
        assert_eq!(
            c.send_mail("a@example.com", &["b@example.net"], b"x\r\n")
                .await
                .0,
            250
        );
    }
    std::fs::write(dir.join("relay.toml"), layer("1")).unwrap();
    hup(&child);
    while !logs.recv().unwrap().contains("configuration reloaded") {}
    assert_eq!(
        c.send_mail("a@example.com", &["b@example.net"], b"x\r\n")
            .await
            .0,
        250
    );
    let (code, text) = c
        .send_mail("a@example.com", &["b@example.net"], b"x\r\n")
        .await;
    assert_eq!(code, 451, "the lower limit is in force: {text}");
    std::fs::write(dir.join("relay.toml"), layer("0")).unwrap();
    hup(&child);
    loop {
        let line = logs.recv().unwrap();
        assert!(
            !line.contains("configuration reloaded"),
            "a bad config was taken: {line}"
        );
        if line.contains("refused") {
            assert!(
                line.contains("line 9"),
                "the error names the line of `limit`: {line}"
            );
            break;
        }
    }
    let mut fresh = Client::connect(addr).await;
    let (code, text) = fresh
        .send_mail("a@example.com", &["b@example.net"], b"x\r\n")
        .await;
    assert_eq!(
        code, 451,
        "the old config (limit 1, spent) still works: {text}"
    );
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

/// Every `bench/*.sh` starts from another directory with no environment but `PATH` and
/// `HOME` (a fresh clone's user): `--help` prints its usage and the binaries' directory,
/// which must be absolute, since the scripts start relays in scratch directories.
#[test]
fn every_bench_script_starts_from_anywhere_with_no_environment() {
    let bench = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bench");
    let mut scripts: Vec<_> = std::fs::read_dir(&bench)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sh"))
        .filter(|p| !p.ends_with("common.sh"))
        .collect();
    scripts.sort();
    assert!(scripts.len() >= 8, "{scripts:?}");
    let elsewhere = tempdir();
    for script in scripts {
        let out = Command::new("bash")
            .arg(&script)
            .arg("--help")
            .current_dir(&elsewhere)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap())
            .env("HOME", std::env::var("HOME").unwrap())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{script:?}: {text}{err}");
        assert!(text.contains("Usage: bench/"), "{script:?}: {text}");
        let dir = text.lines().find_map(|l| l.strip_prefix("Binaries: "));
        assert!(
            dir.is_some_and(|d| d.starts_with('/')),
            "{script:?}: the binaries' directory is absolute: {text}"
        );
    }
}

/// The role ARN the manifests ship (AWS's example account `123456789012`) cannot send: `check`
/// and the start warn of it, and `/readyz` names it in the SES upstream's detail, without
/// asking AWS (its endpoint here is a closed port on loopback).
#[tokio::test]
async fn the_placeholder_role_is_named_by_check_and_readyz() {
    let dir = tempdir();
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = TestConfig::new()
        .upstream("ses://eu-west-1")
        .then("endpoint_url = \"http://127.0.0.1:9\"")
        .then(&format!("[admin]\nlisten = \"{admin}\""))
        .text();
    let path = dir.join("relay.toml");
    std::fs::write(&path, &config).unwrap();
    let command = |args: &[&str]| {
        let mut command = Command::new(BIN);
        command
            .args(args)
            .arg(&path)
            .current_dir(&dir)
            .env(
                "AWS_ROLE_ARN",
                "arn:aws:iam::123456789012:role/mailsluice-ses",
            )
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env_remove("AWS_WEB_IDENTITY_TOKEN_FILE")
            .env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .env_remove("AWS_PROFILE");
        command
    };
    let checked = command(&["check", "--config"]).output().unwrap();
    let said = String::from_utf8_lossy(&checked.stderr);
    assert!(checked.status.success(), "{said}");
    assert!(
        said.contains("warning") && said.contains("placeholder account 123456789012"),
        "{said}"
    );
    let child = command(&["--config"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Running(child);
    let lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut lines = lines.map_while(Result::ok);
    assert!(
        lines.any(|l| l.contains("admin endpoint listening")),
        "the relay started"
    );
    let (status, body) = crate::support::http::get(admin, "/readyz").await;
    assert_eq!(status, 200, "this replica takes mail: {body}");
    assert!(body.contains("placeholder account 123456789012"), "{body}");
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let _ = child.wait();
}
