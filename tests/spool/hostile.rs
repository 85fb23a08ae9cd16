//! Hostile input against the spool and its reports: a report is no weapon (its copy of the
//! original bounded, the relay's key fields never in it, its own `From:` checked against an
//! SES tenant's identities, a report the spool cannot hold never makes its message go again),
//! and what is found in the spool's directories that the spool did not write (a FIFO, a
//! device, a directory, a second file of one id) is set aside at start, never waited on.

use std::path::Path;
use std::time::Duration;

use mailsluice::upstream::UpstreamError;

use crate::common::*;
use crate::support::config::TestConfig;
use crate::support::host::scratch_path;
use crate::support::memory::subject_of;
use crate::support::relay::{config_text, memory_relay, Client, Relay};
use crate::support::ses::{forwarder, FakeSes, GOOD_KEY};
use crate::support::wait::until;

const SEC: Duration = Duration::from_secs(1);

/// `[spool]` with reports from `postmaster@relay.test`, and `extra`.
fn reporting(dir: &Path, extra: &str) -> String {
    spool_section(
        dir,
        &format!("report_from = \"postmaster@relay.test\"\n{extra}"),
    )
}

/// A message of tenant `acme` that is all header section (no blank line, no body): `fields`
/// filler fields after its key field and `Subject: m1`.
fn all_header(fields: usize) -> Vec<u8> {
    let mut message = b"X-Tenant: acme\r\nSubject: m1\r\n".to_vec();
    for i in 0..fields {
        message.extend_from_slice(format!("X-Filler-{i:05}: {}\r\n", "f".repeat(60)).as_bytes());
    }
    message
}

/// The text of a report's `text/rfc822-headers` part.
fn copied_headers(report: &str) -> &str {
    let (_, copied) = report
        .split_once("Content-Type: text/rfc822-headers\r\n\r\n")
        .unwrap();
    let end = copied.rfind("\r\n--").unwrap();
    &copied[..end]
}

/// A given-up message that is all header section (200 KB here) gets a report that copies at
/// most 50,000 bytes of it (Postfix's `bounce_size_limit`), and never the relay's key field
/// (`X-Tenant`, stripped everywhere else); the report is still keyed as its original.
#[tokio::test(start_paused = true)]
async fn a_report_copies_at_most_50_kb_and_never_a_key_field() {
    let dir = scratch_path("spool-report-copy");
    let rest = hold_layer(1, 1, 0, "") + &reporting(&dir, "");
    let fwd = Refusing::new(&["gone@example.net"]);
    let relay = Relay::start(&config_text("file://unused", "", &rest), fwd.clone()).await;
    let mut c = relay.memory_client().await;
    let m0 = message("acme", "m0");
    assert_eq!(
        c.send_mail("app@acme.example", &["ok@example.net"], &m0)
            .await
            .0,
        250
    );
    let m1 = all_header(3000);
    assert!(m1.len() > 200_000);
    let (code, text) = c
        .send_mail("app@acme.example", &["gone@example.net"], &m1)
        .await;
    assert_eq!(code, 250, "{text}");
    run_until("the report upstream", SEC / 10, 30 * SEC, || {
        fwd.messages().len() >= 2
    })
    .await;
    let (envelope, report) = &fwd.messages()[1];
    assert_eq!(envelope.rcpts, ["app@acme.example"]);
    let report = String::from_utf8_lossy(report);
    let copied = copied_headers(&report);
    assert!(
        copied.starts_with("Subject: m1\r\nX-Filler-00000: "),
        "{copied:.200}"
    );
    assert!(copied.len() <= 50_002, "{} bytes copied", copied.len());
    assert!(report.len() < 55_000, "{} bytes of report", report.len());
    assert!(!report.contains("X-Tenant"), "no key field in the report");
    // Keyed as its original: the same hold-mode key, held behind it.
    assert_eq!(
        relay.metric("mailsluice_spool_held_total{kind=\"report\"}"),
        1.0
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A report the spool cannot hold (here its `max_bytes`, the original still in it) is logged
/// and counted, and its message is kept in `failed/`: given up, never sent upstream again.
#[tokio::test(start_paused = true)]
async fn a_report_that_cannot_be_held_keeps_its_message_in_failed() {
    let dir = scratch_path("spool-report-not-held");
    // m1 (about 2.5 KB held) fits; its report beside it does not.
    // One key may take the whole spool here (`max_key_share = 1.0`): the bound met is max_bytes.
    let rest = hold_layer(1, 1, 0, "") + &reporting(&dir, "max_bytes = 4000\nmax_key_share = 1.0");
    let fwd = Refusing::new(&["gone@example.net"]);
    let relay = Relay::start(&config_text("file://unused", "", &rest), fwd.clone()).await;
    let mut c = relay.memory_client().await;
    let m0 = message("acme", "m0");
    assert_eq!(
        c.send_mail("app@acme.example", &["ok@example.net"], &m0)
            .await
            .0,
        250
    );
    let m1 = all_header(30);
    let (code, text) = c
        .send_mail("app@acme.example", &["gone@example.net"], &m1)
        .await;
    assert_eq!(code, 250, "{text}");
    run_until("m1 given up", SEC / 10, 30 * SEC, || {
        files(&dir, "failed") == 1
    })
    .await;
    // Well past every backoff: m1 went upstream once.
    tokio::time::sleep(60 * SEC).await;
    assert_eq!(*fwd.tried.lock().unwrap(), 2, "m0, and m1 once");
    assert_eq!(fwd.messages().len(), 1, "m0 alone delivered; no report");
    assert_eq!(files(&dir, "held"), 0);
    assert_eq!(relay.metric("mailsluice_spool_reports_not_held_total"), 1.0);
    assert_eq!(
        relay.metric("mailsluice_spool_given_up_total{reason=\"refused\"}"),
        1.0
    );
    assert_eq!(relay.metric("mailsluice_spool_failed"), 1.0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A report on a route to an SES tenant is checked against the tenant's identities by its
/// own `From:` (`report_from`, an identity here), not by its original's (`ceo@globex.example`,
/// none): it goes to SES.
#[tokio::test]
async fn a_report_on_an_ses_tenant_route_is_checked_by_its_own_from() {
    let dir = scratch_path("spool-ses-report");
    let fake = FakeSes::start().await;
    fake.tenants.add("acme", &["acme.example", "relay.test"]);
    let text = TestConfig::new()
        .then(&format!("[upstream]\n{}", fake.upstream_toml("")))
        .then("[[route]]\nupstream = \"default\"\nses_tenant = \"acme\"")
        // A refused message keeps its token: its report waits a second for the next one.
        .then(&hold_layer(1, 1, 0, "charge_failures = true"))
        .then(&reporting(&dir, ""))
        .text();
    let relay = Relay::start(&text, forwarder(&text, GOOD_KEY)).await;
    let mut c = Client::connect(relay.addr).await;
    let m0 = message("acme", "m0");
    assert_eq!(
        c.send_mail("app@acme.example", &["a@example.net"], &m0)
            .await
            .0,
        250
    );
    // Held: m0 took the layer's token for this second. SES refuses it for good at release.
    fake.fail_with(Some((
        400,
        "MessageRejected",
        "Email address is not verified.",
    )));
    let m1 = b"X-Tenant: acme\r\nFrom: ceo@globex.example\r\nSubject: m1\r\n\r\nhi\r\n";
    let (code, text) = c
        .send_mail("app@acme.example", &["b@example.net"], m1)
        .await;
    assert!(code == 250 && text.contains("held"), "{text}");
    let refused = "mailsluice_spool_given_up_total{reason=\"refused\"}";
    until("m1 refused at release", async || {
        relay.metric(refused) == 1.0
    })
    .await;
    fake.fail_with(None);
    until("the tenant's identities read", async || {
        fake.tenants.count("ListTenantResources") >= 1
    })
    .await;
    until("the report sent to SES", async || fake.sent().len() >= 2).await;
    let report = &fake.sent()[1];
    assert_eq!(report.tenant.as_deref(), Some("acme"));
    let raw = String::from_utf8_lossy(&report.raw);
    assert!(
        raw.contains("From: Mail Delivery System <postmaster@relay.test>\r\n"),
        "{raw}"
    );
    assert!(
        raw.contains("Subject: Undelivered Mail Returned to Sender\r\n"),
        "{raw}"
    );
    relay.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A relay's spool at `dir` with `m0` delivered and `m1`..`m3` held (upstream down).
async fn three_held(rest: &str) {
    let (relay, fwd) = memory_relay("", rest).await;
    let mut c = relay.memory_client().await;
    for subject in ["m0", "m1", "m2", "m3"] {
        let msg = message("acme", subject);
        let (code, text) = c
            .send_mail("app@acme.example", &["u@example.net"], &msg)
            .await;
        assert_eq!(code, 250, "{text}");
        if subject == "m0" {
            fwd.fail_with(Some(UpstreamError::Unavailable("down".into())));
        }
    }
    drop(c);
    relay.stop().await;
}

/// Runs `program` with `args`; whether it succeeded.
fn run(program: &str, args: &[&Path]) -> bool {
    std::process::Command::new(program)
        .args(args)
        .status()
        .is_ok_and(|s| s.success())
}

/// What the spool did not write is set aside in `damaged/` at start, never waited on nor a
/// reason to refuse the start: a FIFO, a device and a directory named as messages in `held/`,
/// a directory in `tmp/`, and a second file of a held message's id (which would wedge its
/// key). The held messages go, each once, and the key takes new ones.
#[tokio::test(start_paused = true)]
async fn what_the_spool_did_not_write_is_set_aside_at_start() {
    let dir = scratch_path("spool-strangers");
    let rest = hold_layer(1, 1, 0, "") + &spool_section(&dir, "");
    three_held(&rest).await;
    let held = dir.join("held");
    let mut names: Vec<String> = (std::fs::read_dir(&held).unwrap())
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 3);
    // m1's file again, later in arrival order, under its own id (its meta saying so).
    let (seq, m1_id) = names[0].split_once('-').unwrap();
    let seq = u64::from_str_radix(seq, 16).unwrap();
    let copy = held.join(format!("{:016x}-{m1_id}", 0xffff));
    let file = String::from_utf8(std::fs::read(held.join(&names[0])).unwrap()).unwrap();
    let file = file.replacen(&format!("\"seq\":{seq},"), "\"seq\":65535,", 1);
    assert!(file.contains("\"seq\":65535,"));
    std::fs::write(&copy, file).unwrap();
    let mut strangers = 2;
    assert!(run("mkfifo", &[&held.join("00000000000000f0-fifo")]));
    std::fs::create_dir(held.join("00000000000000f1-dir")).unwrap();
    std::fs::create_dir(dir.join("tmp").join("0000000000000009-x")).unwrap();
    // A device needs root: where it cannot be made, the rest is still checked.
    let device = held.join("00000000000000f2-dev");
    if run(
        "mknod",
        &[&device, Path::new("c"), Path::new("1"), Path::new("3")],
    ) {
        strangers += 1;
    }

    let (relay, fwd) = memory_relay("", &rest).await;
    run_until("m1..m3 upstream", SEC / 10, 30 * SEC, || {
        fwd.messages().len() >= 3
    })
    .await;
    let mut c = relay.memory_client().await;
    let m4 = message("acme", "m4");
    assert_eq!(
        c.send_mail("app@acme.example", &["u@example.net"], &m4)
            .await
            .0,
        250
    );
    run_until("m4 upstream", SEC / 10, 30 * SEC, || {
        fwd.messages().len() >= 4
    })
    .await;
    tokio::time::sleep(10 * SEC).await;
    let subjects: Vec<String> = fwd.messages().iter().map(|(_, m)| subject_of(m)).collect();
    assert_eq!(subjects, ["m1", "m2", "m3", "m4"], "each once, in order");
    assert_eq!(
        files(&dir, "damaged"),
        strangers + 2,
        "the strangers, tmp/'s, the copy"
    );
    assert!(dir.join("damaged").join(copy.file_name().unwrap()).exists());
    assert_eq!((files(&dir, "held"), files(&dir, "tmp")), (0, 0));
    relay.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
