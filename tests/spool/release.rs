//! What release does with what it meets: a permanent refusal (a report to the sender, none
//! for the null sender, the message kept as failed without `report_from`), a tenant paused by
//! the reputation guard, a damaged file.

use std::time::Duration;

use mailsluice::upstream::UpstreamError;

use crate::common::*;
use crate::support::host::scratch_path;
use crate::support::memory::subject_of;
use crate::support::relay::{config_text, memory_relay, Relay};
use crate::support::ses_events::bounce;

const SEC: Duration = Duration::from_secs(1);

/// A held message upstream refuses for good is removed, and its sender gets a delivery status
/// notification (RFC 3464) from `report_from`, with the null sender, through the message's
/// route and at its key's rate. A message from the null sender gets none.
#[tokio::test(start_paused = true)]
async fn a_permanent_refusal_at_release_sends_a_report_to_the_sender() {
    let dir = scratch_path("spool-dsn");
    let rest =
        hold_layer(1, 1, 0, "") + &spool_section(&dir, "report_from = \"postmaster@relay.test\"");
    let fwd = Refusing::new(&["gone@example.net"]);
    let relay = Relay::start(&config_text("file://unused", "", &rest), fwd.clone()).await;
    let sends = [
        ("app@acme.example", "ok@example.net", "m0"),
        ("app@acme.example", "gone@example.net", "m1"),
        ("", "gone@example.net", "m2"),
        ("app@acme.example", "ok@example.net", "m3"),
    ];
    let mut c = relay.memory_client().await;
    for (from, rcpt, subject) in sends {
        let (code, text) = c.send_mail(from, &[rcpt], &message("acme", subject)).await;
        assert_eq!(code, 250, "{subject}: {text}");
    }
    run_until("m3 and the report upstream", SEC / 10, 30 * SEC, || {
        fwd.messages().len() >= 3
    })
    .await;
    tokio::time::sleep(10 * SEC).await;
    let got = fwd.messages();
    let subjects: Vec<String> = got.iter().map(|(_, m)| subject(m)).collect();
    assert_eq!(
        subjects,
        ["m0", "m3", "Undelivered Mail Returned to Sender"],
        "the report behind m3 in the key's queue; none for the null sender's m2"
    );
    let (envelope, report) = &got[2];
    assert_eq!(envelope.from, None, "sent with the null sender");
    assert_eq!(envelope.rcpts, ["app@acme.example"]);
    let report = String::from_utf8_lossy(report);
    for part in [
        "From: Mail Delivery System <postmaster@relay.test>\r\n",
        "To: <app@acme.example>\r\n",
        "Content-Type: multipart/report; report-type=delivery-status;",
        "Content-Type: message/delivery-status\r\n",
        "Final-Recipient: rfc822; gone@example.net\r\nAction: failed\r\nStatus: 5.1.1\r\n",
        "Diagnostic-Code: smtp; 550 5.1.1 upstream: mailbox unavailable\r\n",
        "Content-Type: text/rfc822-headers\r\n\r\nSubject: m1\r\n",
    ] {
        assert!(report.contains(part), "{part:?} in {report}");
    }
    assert!(!report.contains("body of m1"), "headers only");
    assert_eq!(
        relay.metric("mailsluice_spool_given_up_total{reason=\"refused\"}"),
        2.0
    );
    assert_eq!(
        relay.metric("mailsluice_spool_held_total{kind=\"report\"}"),
        1.0
    );
    assert_eq!(files(&dir, "held"), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A message upstream keeps refusing for now is tried again after a doubling backoff, and
/// once held past `max_hold_ms` it is given up: its sender gets a report saying so (4.4.7,
/// with the last answer).
#[tokio::test(start_paused = true)]
async fn a_message_held_past_max_hold_ms_is_given_up_with_a_report() {
    let dir = scratch_path("spool-expired");
    let spool = "report_from = \"postmaster@relay.test\"\nmax_hold_ms = 20000";
    let rest = hold_layer(1, 1, 0, "") + &spool_section(&dir, spool);
    let fwd = Refusing::new(&[]);
    fwd.deferred
        .lock()
        .unwrap()
        .push("later@example.net".into());
    let relay = Relay::start(&config_text("file://unused", "", &rest), fwd.clone()).await;
    let mut c = relay.memory_client().await;
    for (rcpt, subject) in [("ok@example.net", "m0"), ("later@example.net", "m1")] {
        let (code, text) = c
            .send_mail("app@acme.example", &[rcpt], &message("acme", subject))
            .await;
        assert_eq!(code, 250, "{text}");
    }
    run_until("the report upstream", SEC / 10, 60 * SEC, || {
        fwd.messages().len() >= 2
    })
    .await;
    // Tried at 1 s, then after 1, 2, 4, 5, 5 s: six attempts before 20 s, then given up.
    let tried = *fwd.tried.lock().unwrap();
    assert_eq!(tried, 1 + 6 + 1, "m0, m1's attempts, the report");
    let (envelope, report) = &fwd.messages()[1];
    assert_eq!(
        (envelope.from.as_deref(), envelope.rcpts.as_slice()),
        (None, &["app@acme.example".to_string()][..])
    );
    let report = String::from_utf8_lossy(report);
    assert!(
        report.contains(
            "Final-Recipient: rfc822; later@example.net\r\nAction: failed\r\nStatus: 4.4.7\r\n"
        ),
        "{report}"
    );
    assert!(
        report.contains("Diagnostic-Code: smtp; 451 4.2.0 upstream: try again later\r\n"),
        "{report}"
    );
    assert_eq!(
        relay.metric("mailsluice_spool_given_up_total{reason=\"expired\"}"),
        1.0
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// While upstream is paused after a quota reply, a hold-mode message is held, not refused
/// (`451 4.7.1 Upstream sending quota exhausted`), the message that met the reply too; both
/// are released once the pause is over.
#[tokio::test(start_paused = true)]
async fn messages_are_held_while_upstream_is_paused_and_released_after() {
    let dir = scratch_path("spool-quota");
    let rest = format!(
        "quota_pause_ms = 5000\n{}{}",
        hold_layer(100, 100, 0, ""),
        spool_section(&dir, "")
    );
    let fwd = Refusing::new(&[]);
    *fwd.quota.lock().unwrap() = 1;
    let relay = Relay::start(&config_text("file://unused", "", &rest), fwd.clone()).await;
    let mut c = relay.memory_client().await;
    let start = tokio::time::Instant::now();
    for (tenant, subject) in [("acme", "m0"), ("beta", "b0")] {
        let (code, text) = c
            .send_mail(
                "app@acme.example",
                &["u@example.net"],
                &message(tenant, subject),
            )
            .await;
        assert!(
            code == 250 && text.ends_with("(held for later delivery)"),
            "{subject}: {text}"
        );
    }
    run_until("both upstream", SEC / 10, 30 * SEC, || {
        fwd.messages().len() == 2
    })
    .await;
    assert!(
        start.elapsed() >= 5 * SEC,
        "not before the pause ends: {:?}",
        start.elapsed()
    );
    let mut subjects: Vec<String> = fwd.messages().iter().map(|(_, m)| subject(m)).collect();
    subjects.sort();
    assert_eq!(subjects, ["b0", "m0"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without `report_from` no report is sent: the refused message is kept in `failed/`, counted,
/// and no longer holds its key's new messages back; past `max_hold_ms` it is removed.
#[tokio::test(start_paused = true)]
async fn without_report_from_a_refused_message_is_kept_as_failed() {
    let dir = scratch_path("spool-failed");
    let rest = hold_layer(1, 1, 0, "") + &spool_section(&dir, "max_hold_ms = 20000");
    let fwd = Refusing::new(&["gone@example.net"]);
    let relay = Relay::start(&config_text("file://unused", "", &rest), fwd.clone()).await;
    let mut c = relay.memory_client().await;
    for (rcpt, subject) in [("ok@example.net", "m0"), ("gone@example.net", "m1")] {
        let (code, text) = c
            .send_mail("app@acme.example", &[rcpt], &message("acme", subject))
            .await;
        assert_eq!(code, 250, "{text}");
    }
    run_until("m1 tried", SEC / 10, 30 * SEC, || {
        *fwd.tried.lock().unwrap() >= 2
    })
    .await;
    tokio::time::sleep(2 * SEC).await;
    assert_eq!(files(&dir, "failed"), 1);
    assert_eq!(files(&dir, "held"), 0);
    assert_eq!(relay.metric("mailsluice_spool_failed"), 1.0);
    assert_eq!(relay.metric("mailsluice_spool_messages"), 0.0);
    let (code, text) = c
        .send_mail(
            "app@acme.example",
            &["ok@example.net"],
            &message("acme", "m2"),
        )
        .await;
    assert_eq!((code, text.contains("held")), (250, false), "{text}");
    assert_eq!(fwd.messages().len(), 2);
    // Kept until max_hold_ms (20 s here), then removed (looked for once a minute).
    tokio::time::sleep(70 * SEC).await;
    assert_eq!(files(&dir, "failed"), 0);
    assert_eq!(relay.metric("mailsluice_spool_failed"), 0.0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A tenant the reputation guard paused: its held messages are not released (each attempt
/// is refused for now and tried again after the backoff) until an operator resumes it.
#[tokio::test(start_paused = true)]
async fn a_paused_tenants_held_messages_wait_for_its_resume() {
    let dir = scratch_path("spool-paused");
    let reputation = "[reputation]\nkey = \"header:X-Tenant\"\nmin_messages = 1\nmin_bounces = 1\n";
    let rest = hold_layer(1, 1, 0, "") + &spool_section(&dir, "") + reputation;
    let fwd = Refusing::new(&[]);
    let relay = Relay::start(&config_text("file://unused", "", &rest), fwd.clone()).await;
    let mut c = relay.memory_client().await;
    for subject in ["m0", "m1", "m2"] {
        let msg = message("acme", subject);
        let (code, text) = c
            .send_mail("app@acme.example", &["u@example.net"], &msg)
            .await;
        assert_eq!(code, 250, "{text}");
    }
    // Its first message bounced: the tenant is paused.
    let guard = relay.reputation().unwrap();
    guard
        .apply_text(&bounce("up-1", "f-up-1", "u@example.net"))
        .await
        .unwrap();
    assert!(guard.standing("acme").await.is_some());
    tokio::time::sleep(30 * SEC).await;
    let subjects = || -> Vec<String> { fwd.messages().iter().map(|(_, m)| subject(m)).collect() };
    assert!(!subjects().contains(&"m2".to_string()), "{:?}", subjects());
    assert_eq!(relay.metric("mailsluice_spool_messages"), 1.0);
    assert!(relay.metric("mailsluice_spool_released_total{result=\"retry\"}") >= 3.0);
    assert!(guard.resume("acme").await.unwrap());
    run_until("m2 upstream", SEC / 10, 10 * SEC, || {
        subjects().contains(&"m2".into())
    })
    .await;
    assert_eq!(relay.metric("mailsluice_spool_messages"), 0.0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `[reputation] action = "hold"`: a paused tenant's new messages are held (`250`), not
/// refused, and none is released until the tenant is resumed.
#[tokio::test(start_paused = true)]
async fn reputation_action_hold_holds_a_paused_tenants_messages_until_its_resume() {
    let dir = scratch_path("spool-reputation-hold");
    let reputation =
        "[reputation]\nkey = \"header:X-Tenant\"\nmin_messages = 1\nmin_bounces = 1\naction = \"hold\"\n";
    let rest = hold_layer(100, 100, 0, "") + &spool_section(&dir, "") + reputation;
    let fwd = Refusing::new(&[]);
    let relay = Relay::start(&config_text("file://unused", "", &rest), fwd.clone()).await;
    let mut c = relay.memory_client().await;
    let m0 = message("acme", "m0");
    assert_eq!(
        c.send_mail("app@acme.example", &["u@example.net"], &m0)
            .await
            .0,
        250
    );
    let guard = relay.reputation().unwrap();
    guard
        .apply_text(&bounce("up-1", "f-up-1", "u@example.net"))
        .await
        .unwrap();
    for subject in ["m1", "m2"] {
        let msg = message("acme", subject);
        let (code, text) = c
            .send_mail("app@acme.example", &["v@example.net"], &msg)
            .await;
        assert!(
            code == 250 && text.ends_with("(held for later delivery)"),
            "{subject}: {text}"
        );
    }
    // Another tenant goes on.
    let (code, text) = c
        .send_mail(
            "app@beta.example",
            &["v@example.net"],
            &message("beta", "b0"),
        )
        .await;
    assert!(code == 250 && !text.contains("held"), "{text}");
    tokio::time::sleep(30 * SEC).await;
    let subjects = || -> Vec<String> { fwd.messages().iter().map(|(_, m)| subject(m)).collect() };
    assert_eq!(subjects(), ["m0", "b0"]);
    assert!(guard.resume("acme").await.unwrap());
    run_until("m1 and m2 upstream", SEC / 10, 10 * SEC, || {
        subjects().len() == 4
    })
    .await;
    assert_eq!(subjects(), ["m0", "b0", "m1", "m2"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A held message whose file was damaged on disk is set aside in `damaged/` (counted, with an
/// error log) when it is read for release; the key's other messages are released.
#[tokio::test(start_paused = true)]
async fn a_damaged_file_is_set_aside_and_the_rest_released() {
    let dir = scratch_path("spool-damaged");
    let rest = hold_layer(1, 1, 0, "") + &spool_section(&dir, "");
    let (relay, fwd) = memory_relay("", &rest).await;
    let mut c = relay.memory_client().await;
    for subject in ["m0", "m1", "m2", "m3"] {
        let msg = message("acme", subject);
        let (code, text) = c
            .send_mail("app@acme.example", &["u@example.net"], &msg)
            .await;
        assert_eq!(code, 250, "{text}");
        if subject == "m0" {
            // Upstream cannot be reached: what is held stays held.
            fwd.fail_with(Some(UpstreamError::Unavailable("down".into())));
        }
    }
    drop(c);
    relay.stop().await;
    assert_eq!(files(&dir, "held"), 3);
    let held: Vec<_> = (std::fs::read_dir(dir.join("held")).unwrap())
        .map(|e| e.unwrap().path())
        .collect();
    let m2 = (held.iter())
        .find(|p| String::from_utf8_lossy(&std::fs::read(p).unwrap()).contains("Subject: m2"))
        .unwrap();
    let mut bytes = std::fs::read(m2).unwrap();
    let at = bytes.len() - 4;
    bytes[at] ^= 0x01;
    std::fs::write(m2, bytes).unwrap();

    let (relay, fwd) = memory_relay("", &rest).await;
    run_until("m1 and m3 upstream", SEC / 10, 30 * SEC, || {
        fwd.messages().len() >= 2
    })
    .await;
    tokio::time::sleep(5 * SEC).await;
    let subjects: Vec<String> = fwd.messages().iter().map(|(_, m)| subject_of(m)).collect();
    assert_eq!(subjects, ["m1", "m3"]);
    assert_eq!(files(&dir, "damaged"), 1);
    assert_eq!(files(&dir, "held"), 0);
    assert_eq!(
        relay.metric("mailsluice_spool_given_up_total{reason=\"damaged\"}"),
        1.0
    );
    let _ = std::fs::remove_dir_all(&dir);
}
