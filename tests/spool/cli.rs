//! `mailsluice spool`, the binary run against a relay in this process: each subcommand (list,
//! show, release, delete, requeue, hold, unhold) through the admin endpoint, a table for
//! people and `--json` for scripts; usage errors exit 2, refusals 1 with the endpoint's words.
//! The binary runs on a blocking thread: tokio's paused clock stands still meanwhile.

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::common::*;
use crate::support::auth::cheap_hash;
use crate::support::host::scratch_path;
use crate::support::memory::subject_of;
use crate::support::relay::{config_text, Client, Relay};

const BIN: &str = env!("CARGO_BIN_EXE_mailsluice");
const SEC: Duration = Duration::from_secs(1);
const PASSWORD: &str = "s3cret";

/// What one run of the binary came to.
struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `mailsluice spool ARGS --admin http://ADMIN` with the admin password in its variable.
async fn spool(admin: SocketAddr, args: &[&str]) -> Ran {
    let url = format!("http://{admin}");
    run(args, &[("--admin", url.as_str())], Some(PASSWORD)).await
}

/// `mailsluice spool ARGS EXTRA...`, with `password` in `MAILSLUICE_ADMIN_PASSWORD` or none.
async fn run(args: &[&str], extra: &[(&str, &str)], password: Option<&str>) -> Ran {
    let mut command = Command::new(BIN);
    command.arg("spool").args(args);
    for (name, value) in extra {
        command.args([name, value]);
    }
    command.env_remove("MAILSLUICE_ADMIN_PASSWORD");
    command.env_remove("MAILSLUICE_CONFIG");
    if let Some(password) = password {
        command.env("MAILSLUICE_ADMIN_PASSWORD", password);
    }
    let out = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Asserts the run exited 0; its standard output.
fn ok(ran: Ran) -> String {
    assert_eq!(
        ran.code, 0,
        "stdout: {}\nstderr: {}",
        ran.stdout, ran.stderr
    );
    ran.stdout
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The id in `250 2.0.0 Ok: queued as <id> (held for later delivery)`.
fn queued_id(text: &str) -> String {
    let rest = text.split("queued as ").nth(1).expect("a held reply");
    rest.split_whitespace().next().unwrap().to_string()
}

/// A relay with a hold-mode layer of one message per `interval_ms` (burst 1, no wait), the
/// `[spool]` section `spool`, an admin password, and `fwd` as its upstream.
async fn relay(interval_ms: u64, spool: &str, fwd: &Arc<Refusing>) -> (Relay, SocketAddr) {
    let layer = hold_layer(1, 1, 0, "").replace(
        "interval_ms = 1000",
        &format!("interval_ms = {interval_ms}"),
    );
    // No delay after a wrong password: the paused clock stands still while the binary runs.
    let admin = format!(
        "[admin]\npassword_hash = \"{}\"\nfailure_delay_ms = 0\n",
        cheap_hash(PASSWORD)
    );
    let rest = layer + spool + &admin;
    let relay = Relay::start(&config_text("file://unused", "", &rest), fwd.clone()).await;
    let admin = relay.start_admin().await;
    (relay, admin)
}

/// Sends `subject` for `tenant` to `rcpt`; its `250` reply's text.
async fn send(c: &mut Client, tenant: &str, subject: &str, rcpt: &str) -> String {
    let msg = message(tenant, subject);
    let (code, text) = c.send_mail("app@acme.example", &[rcpt], &msg).await;
    assert_eq!(code, 250, "{text}");
    text
}

fn subjects(fwd: &Refusing) -> Vec<String> {
    fwd.messages().iter().map(|(_, m)| subject_of(m)).collect()
}

/// `list` prints a key's messages in a table, `--key` and `--failed` narrow it, `--json` is
/// the endpoint's answer; `show` prints one message; the endpoint comes from the config's
/// `[admin] listen` when `--admin` is not given.
#[tokio::test(start_paused = true)]
async fn list_and_show_print_the_held_messages() {
    let dir = scratch_path("spool-cli-list");
    let fwd = Refusing::new(&[]);
    // One token an hour: what is held stays held.
    let (relay, admin) = relay(3_600_000, &spool_section(&dir, ""), &fwd).await;
    let mut c = relay.memory_client().await;
    send(&mut c, "acme", "m0", "u@example.net").await;
    let mut ids = Vec::new();
    for subject in ["m1", "m2", "m3"] {
        ids.push(queued_id(
            &send(&mut c, "acme", subject, "u@example.net").await,
        ));
    }

    let table = ok(spool(admin, &["list"]).await);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("ID "), "{table}");
    // The first waits for its tokens (taken for release), the others behind it.
    for ((line, id), state) in lines[1..4]
        .iter()
        .zip(&ids)
        .zip(["releasing", "held", "held"])
    {
        assert!(line.starts_with(id.as_str()), "{table}");
        let row = format!(" tenant/acme  {state} ");
        assert!(line.contains(&row), "{table}");
    }
    assert_eq!(lines[4], "-- 3 messages", "{table}");
    let other = ok(spool(admin, &["list", "--key", "tenant/other"]).await);
    assert_eq!(other, "-- no messages\n");
    let failed = ok(spool(admin, &["list", "--failed"]).await);
    assert_eq!(failed, "-- no messages\n");
    let answer = json(&ok(spool(
        admin,
        &["list", "--key", "tenant/acme", "--json"],
    )
    .await));
    let listed: Vec<&str> = (answer["messages"].as_array().unwrap().iter())
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ids);
    assert_eq!(answer["total"], 3);

    let shown = ok(spool(admin, &["show", &ids[1]]).await);
    for line in [
        format!("id           {}", ids[1]),
        "key          tenant/acme".into(),
        "state        held".into(),
        "from         <app@acme.example>".into(),
        "to           u@example.net".into(),
        "attempts     0".into(),
    ] {
        assert!(shown.lines().any(|l| l == line), "{line:?} in {shown}");
    }
    let answer = json(&ok(spool(admin, &["show", &ids[1], "--json"]).await));
    assert_eq!(answer["rcpts"][0], "u@example.net");

    // The endpoint from the config's [admin] listen.
    let config = dir.join("relay.toml");
    std::fs::write(&config, format!("[admin]\nlisten = \"{admin}\"\n")).unwrap();
    let config = config.display().to_string();
    let via_config = run(&["list"], &[("--config", config.as_str())], Some(PASSWORD)).await;
    assert_eq!(ok(via_config), table);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `release ID`, `release --key` and `release --all` let messages waiting out a backoff of a
/// minute go now.
#[tokio::test(start_paused = true)]
async fn release_tries_a_message_a_key_or_every_key_now() {
    let dir = scratch_path("spool-cli-release");
    let fwd = Refusing::new(&[]);
    fwd.deferred
        .lock()
        .unwrap()
        .push("later@example.net".into());
    // A minute between attempts.
    let minute = spool_section(&dir, "").replace("retry_min_ms = 1000", "retry_min_ms = 60000");
    let minute = minute.replace("retry_max_ms = 5000", "retry_max_ms = 60000");
    let (relay, admin) = relay(1000, &minute, &fwd).await;
    let mut c = relay.memory_client().await;
    let mut ids = Vec::new();
    for tenant in ["acme", "globex", "initech"] {
        send(&mut c, tenant, &format!("{tenant}-0"), "ok@example.net").await;
        let text = send(&mut c, tenant, &format!("{tenant}-1"), "later@example.net").await;
        ids.push(queued_id(&text));
    }
    run_until("each deferred once", SEC / 10, 10 * SEC, || {
        *fwd.tried.lock().unwrap() == 6
    })
    .await;
    fwd.deferred.lock().unwrap().clear();
    tokio::time::sleep(5 * SEC).await;
    assert_eq!(fwd.messages().len(), 3, "they wait out their minute");

    let said = ok(spool(admin, &["release", &ids[0]]).await);
    assert_eq!(
        said,
        format!("{} released: it goes once its tokens come\n", ids[0])
    );
    run_until("acme-1 upstream", SEC / 10, 5 * SEC, || {
        fwd.messages().len() == 4
    })
    .await;
    let said = ok(spool(admin, &["release", "--key", "tenant/globex"]).await);
    assert_eq!(said, "tenant/globex let go: its first message goes now\n");
    run_until("globex-1 upstream", SEC / 10, 5 * SEC, || {
        fwd.messages().len() == 5
    })
    .await;
    let said = ok(spool(admin, &["release", "--all"]).await);
    assert_eq!(said, "1 messages tried now\n");
    run_until("initech-1 upstream", SEC / 10, 5 * SEC, || {
        fwd.messages().len() == 6
    })
    .await;
    assert_eq!(subjects(&fwd)[3..], ["acme-1", "globex-1", "initech-1"]);
    // Nothing is left to release.
    let answer = json(&ok(spool(admin, &["release", "--all", "--json"]).await));
    assert_eq!(answer["released"], 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `delete ID` removes one message, `delete --key` a key's; neither is sent.
#[tokio::test(start_paused = true)]
async fn delete_removes_a_message_or_a_keys() {
    let dir = scratch_path("spool-cli-delete");
    let fwd = Refusing::new(&[]);
    let (relay, admin) = relay(3_600_000, &spool_section(&dir, ""), &fwd).await;
    let mut c = relay.memory_client().await;
    let mut ids = Vec::new();
    for (tenant, subject) in [
        ("acme", "a0"),
        ("acme", "a1"),
        ("acme", "a2"),
        ("acme", "a3"),
        ("globex", "g0"),
        ("globex", "g1"),
    ] {
        let text = send(&mut c, tenant, subject, "u@example.net").await;
        if text.contains("held") {
            ids.push(queued_id(&text));
        }
    }
    assert_eq!(ids.len(), 4, "a1, a2, a3 and g1 held");
    assert_eq!(files(&dir, "held"), 4);
    // a1 and g1, their keys' first, wait for their tokens: being released, they stay.
    let busy = spool(admin, &["delete", &ids[0]]).await;
    assert_eq!(busy.code, 1, "{}", busy.stderr);
    assert!(
        busy.stderr.contains("being written or released"),
        "{}",
        busy.stderr
    );
    let said = ok(spool(admin, &["delete", &ids[1]]).await);
    assert_eq!(said, format!("{} removed\n", ids[1]));
    assert_eq!(files(&dir, "held"), 3);
    let said = ok(spool(admin, &["delete", "--key", "tenant/acme"]).await);
    assert_eq!(
        said,
        "1 messages of tenant/acme removed; 1 being released, left\n"
    );
    assert_eq!(files(&dir, "held"), 2);
    let answer = json(&ok(spool(admin, &["list", "--json"]).await));
    assert_eq!(answer["total"], 2);
    let left: Vec<&str> = (answer["messages"].as_array().unwrap().iter())
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(left, [ids[0].as_str(), ids[3].as_str()]);
    // Gone: a second delete is refused with the endpoint's words.
    let again = spool(admin, &["delete", &ids[1]]).await;
    assert_eq!(again.code, 1, "{}", again.stderr);
    assert!(
        again.stderr.contains("no such message in the spool"),
        "{}",
        again.stderr
    );
    assert_eq!(subjects(&fwd), ["a0", "g0"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `requeue ID` and `requeue --all` put failed messages (refused for good, no
/// `report_from`) back, and they go; a held message is not requeued.
#[tokio::test(start_paused = true)]
async fn requeue_puts_failed_messages_back() {
    let dir = scratch_path("spool-cli-requeue");
    let fwd = Refusing::new(&["gone@example.net"]);
    let (relay, admin) = relay(1000, &spool_section(&dir, ""), &fwd).await;
    let mut c = relay.memory_client().await;
    send(&mut c, "acme", "m0", "ok@example.net").await;
    let m1 = queued_id(&send(&mut c, "acme", "m1", "gone@example.net").await);
    let m2 = queued_id(&send(&mut c, "acme", "m2", "gone@example.net").await);
    run_until("m1 and m2 failed", SEC / 10, 30 * SEC, || {
        files(&dir, "failed") == 2
    })
    .await;
    let failed = ok(spool(admin, &["list", "--failed"]).await);
    assert!(failed.contains(&m1) && failed.contains(&m2), "{failed}");
    assert!(failed.contains("failed"), "{failed}");
    assert!(
        failed.contains("550 5.1.1"),
        "upstream's last answer: {failed}"
    );

    fwd.refused.lock().unwrap().clear();
    let said = ok(spool(admin, &["requeue", &m1]).await);
    assert_eq!(said, "1 failed messages put back\n");
    run_until("m1 upstream", SEC / 10, 10 * SEC, || {
        fwd.messages().len() == 2
    })
    .await;
    let said = ok(spool(admin, &["requeue", "--all"]).await);
    assert_eq!(said, "1 failed messages put back\n");
    run_until("m2 upstream", SEC / 10, 10 * SEC, || {
        fwd.messages().len() == 3
    })
    .await;
    assert_eq!(subjects(&fwd), ["m0", "m1", "m2"]);

    // A held message is not a failed one.
    fwd.deferred
        .lock()
        .unwrap()
        .push("later@example.net".into());
    send(&mut c, "acme", "m3", "ok@example.net").await;
    let m4 = send(&mut c, "acme", "m4", "later@example.net").await;
    let m4 = queued_id(&m4);
    let refused = spool(admin, &["requeue", &m4]).await;
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("it is not a failed message"),
        "{}",
        refused.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `hold` stops a key's release (the list says so) and `unhold` lets it go again.
#[tokio::test(start_paused = true)]
async fn hold_stops_a_key_and_unhold_lets_it_go() {
    let dir = scratch_path("spool-cli-hold");
    let fwd = Refusing::new(&[]);
    let (relay, admin) = relay(1000, &spool_section(&dir, ""), &fwd).await;
    let said = ok(spool(admin, &["hold", "tenant/acme"]).await);
    assert!(said.starts_with("tenant/acme stopped"), "{said}");
    let mut c = relay.memory_client().await;
    for subject in ["m0", "m1", "m2"] {
        send(&mut c, "acme", subject, "u@example.net").await;
    }
    tokio::time::sleep(30 * SEC).await;
    assert_eq!(subjects(&fwd), ["m0"]);
    let listed = ok(spool(admin, &["list"]).await);
    assert_eq!(listed.matches("held (key stopped)").count(), 2, "{listed}");
    let said = ok(spool(admin, &["unhold", "tenant/acme"]).await);
    assert_eq!(said, "tenant/acme let go: its first message goes now\n");
    run_until("m1 and m2 upstream", SEC / 10, 10 * SEC, || {
        fwd.messages().len() == 3
    })
    .await;
    assert_eq!(subjects(&fwd), ["m0", "m1", "m2"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A command with no target, two targets or a key without its layer is a usage error (exit
/// 2); the endpoint's refusals exit 1 with its words: a missing password, a relay without a
/// spool; and one that does not answer says so.
#[tokio::test(start_paused = true)]
async fn usage_errors_exit_2_and_refusals_exit_1_with_the_endpoints_words() {
    for args in [
        &["release"][..],
        &["release", "0123", "--all"],
        &["delete"],
        &["requeue"],
        &["hold", "acme"],
        &["list", "--key", "acme"],
        &["frobnicate"],
    ] {
        let ran = run(args, &[("--admin", "http://127.0.0.1:9")], None).await;
        assert_eq!(ran.code, 2, "{args:?}: {}", ran.stderr);
    }
    let ran = run(&["list"], &[("--admin", "https://127.0.0.1:9")], None).await;
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(ran.stderr.contains("plain HTTP"), "{}", ran.stderr);

    let dir = scratch_path("spool-cli-refusals");
    let fwd = Refusing::new(&[]);
    let (_relay, admin) = relay(1000, &spool_section(&dir, ""), &fwd).await;
    let url = format!("http://{admin}");
    let ran = run(&["list"], &[("--admin", url.as_str())], None).await;
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert!(ran.stderr.contains("401"), "{}", ran.stderr);
    assert!(
        ran.stderr.contains("set MAILSLUICE_ADMIN_PASSWORD"),
        "{}",
        ran.stderr
    );
    let ran = run(&["list"], &[("--admin", url.as_str())], Some("wrong")).await;
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("401: authentication required"),
        "{}",
        ran.stderr
    );

    let (no_spool, _) = crate::support::relay::memory_relay("", "").await;
    let bare = no_spool.start_admin().await;
    let ran = spool(bare, &["list"]).await;
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("the relay has no spool"),
        "{}",
        ran.stderr
    );

    let ran = run(&["list"], &[("--admin", "http://127.0.0.1:9")], None).await;
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("is the relay running?"),
        "{}",
        ran.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
}
