//! The tenant reputation guard in the dialogue: a paused tenant refused at MAIL when AUTH
//! named it, at the final dot when a header does; a suppressed recipient refused at RCPT
//! while the others go on; upstream's own `5.1.1` counted as a bounce.

use std::sync::Arc;

use mailsluice::upstream::UpstreamError;

use crate::support::auth::{auth_config, plain};
use crate::support::relay::{config_text, Client, Relay};
use crate::support::ses_events::{bounce, complaint};
use crate::support::ses_like::SesLike;

const REPUTATION: &str =
    "[reputation]\nkey = \"header:X-Tenant\"\nmin_messages = 20\nmin_bounces = 1\n";

async fn start(rest: &str) -> (Relay, Arc<SesLike>) {
    let users = [("app", "s3cret", "tenant = \"acme\"")];
    let smtp = format!("allow_plaintext_auth = true\n{}", auth_config(&users, ""));
    let fwd = SesLike::new();
    let config = config_text("file://unused", &smtp, rest);
    (Relay::start(&config, fwd.clone()).await, fwd)
}

const MESSAGE: &[u8] = b"X-Tenant: beta\r\nSubject: hi\r\n\r\nbody\r\n";

/// 40 messages of `app` (tenant acme, by AUTH: its header is not trusted), then 6 of them
/// bounce: 15 % of 40.
async fn pause_acme(relay: &Relay) -> Client {
    let mut c = relay.client().await;
    c.cmd("EHLO x").await;
    assert_eq!(
        c.cmd(&format!("AUTH PLAIN {}", plain("app", "s3cret")))
            .await
            .0,
        235
    );
    for i in 0..40 {
        let (code, text) = c
            .send_mail("a@acme.example", &[&format!("r{i}@example.com")], MESSAGE)
            .await;
        assert_eq!(code, 250, "{text}");
    }
    let guard = relay.reputation().unwrap();
    for i in 0..6 {
        guard
            .apply_text(&bounce(
                &format!("ses-{i}"),
                &format!("f{i}"),
                &format!("r{i}@example.com"),
            ))
            .await
            .unwrap();
    }
    c
}

#[tokio::test]
async fn an_authenticated_tenant_past_the_bounce_rate_is_paused_at_mail() {
    let (relay, fwd) = start(REPUTATION).await;
    let mut c = pause_acme(&relay).await;
    let (code, text) = c.cmd("MAIL FROM:<a@acme.example>").await;
    assert_eq!(
        (code, text.as_str()),
        (
            451,
            "4.7.1 Tenant acme paused: bounce rate 15.0 % of 40 messages over 24 h (limit 5.0 %)"
        )
    );
    assert_eq!(fwd.sent(), 40);
    // A resume by the operator lets it go again.
    assert!(relay.reputation().unwrap().resume("acme").await.unwrap());
    assert_eq!(c.cmd("MAIL FROM:<a@acme.example>").await.0, 250);
    // The header of an untrusted user did not move its messages to its tenant `beta`.
    let standings = relay.reputation().unwrap().standings().await.unwrap();
    assert!(standings.iter().all(|s| s.key == "acme"), "{standings:?}");
}

#[tokio::test]
async fn reject_answers_550_and_warn_lets_it_go() {
    let (relay, _) = start(&format!("{REPUTATION}action = \"reject\"\n")).await;
    let mut c = pause_acme(&relay).await;
    let (code, text) = c.cmd("MAIL FROM:<a@acme.example>").await;
    assert_eq!(code, 550, "{text}");
    assert!(
        text.starts_with("5.7.1 Tenant acme paused: bounce rate 15.0 %"),
        "{text}"
    );
    let (relay, _) = start(&format!("{REPUTATION}action = \"warn\"\n")).await;
    let mut c = pause_acme(&relay).await;
    assert!(relay.reputation().unwrap().standing("acme").await.is_some());
    assert_eq!(c.cmd("MAIL FROM:<a@acme.example>").await.0, 250);
}

#[tokio::test]
async fn a_header_keyed_tenant_is_refused_at_the_final_dot() {
    let (relay, fwd) = start(REPUTATION).await;
    let mut c = relay.client().await;
    for i in 0..20 {
        let (code, _) = c
            .send_mail("a@b.example", &[&format!("r{i}@example.com")], MESSAGE)
            .await;
        assert_eq!(code, 250);
    }
    let guard = relay.reputation().unwrap();
    for i in 0..2 {
        guard
            .apply_text(&bounce(
                &format!("ses-{i}"),
                &format!("f{i}"),
                "x@example.com",
            ))
            .await
            .unwrap();
    }
    let (code, text) = c
        .send_mail("a@b.example", &["new@example.com"], MESSAGE)
        .await;
    assert_eq!(code, 451, "{text}");
    assert_eq!(
        text,
        "4.7.1 Tenant beta paused: bounce rate 10.0 % of 20 messages over 24 h (limit 5.0 %)"
    );
    assert_eq!(fwd.sent(), 20, "nothing of it went upstream");
    let (code, _) = c
        .send_mail(
            "a@b.example",
            &["new@example.com"],
            b"X-Tenant: gamma\r\n\r\nx\r\n",
        )
        .await;
    assert_eq!(code, 250, "another tenant goes on");
}

#[tokio::test]
async fn a_suppressed_recipient_is_refused_and_the_others_go_on() {
    let (relay, fwd) = start(REPUTATION).await;
    relay
        .reputation()
        .unwrap()
        .apply_text(&bounce("old", "f", "Gone@Example.com"))
        .await
        .unwrap();
    let mut c = relay.client().await;
    c.cmd("EHLO x").await;
    assert_eq!(c.cmd("MAIL FROM:<a@b.example>").await.0, 250);
    let (code, text) = c.cmd("RCPT TO:<gone@example.com>").await;
    assert_eq!(
        (code, text.as_str()),
        (
            550,
            "5.1.1 <gone@example.com> suppressed: hard bounce on 2026-12-01"
        )
    );
    assert_eq!(c.cmd("RCPT TO:<here@example.com>").await.0, 250);
    assert_eq!(c.cmd("DATA").await.0, 354);
    c.send(b"Subject: x\r\n\r\nx\r\n.\r\n").await;
    assert_eq!(c.reply().await.0, 250);
    assert_eq!(fwd.rcpts(), vec![vec!["here@example.com".to_string()]]);
    assert_eq!(relay.metric("mailsluice_suppressed_total"), 1.0);
}

#[tokio::test]
async fn upstreams_own_hard_bounce_counts_and_suppresses() {
    let (relay, fwd) = start(&REPUTATION.replace("min_messages = 20", "min_messages = 1")).await;
    fwd.refuse(Some(UpstreamError::Rejected {
        code: 550,
        enhanced: Some("5.1.1".into()),
        text: "Mailbox does not exist".into(),
    }));
    let mut c = relay.client().await;
    let (code, _) = c
        .send_mail("a@b.example", &["nobody@example.com"], MESSAGE)
        .await;
    assert_eq!(code, 550);
    let guard = relay.reputation().unwrap();
    let standing = guard.standings().await.unwrap();
    assert_eq!((standing[0].key.as_str(), standing[0].bounces), ("beta", 1));
    assert!(guard.suppressed("nobody@example.com").await.is_some());
}

/// Under the default limits no single event pauses a tenant: one complaint after 100
/// messages (0.1 % is the limit, 1 % is past it) and one bounce of a small sender (with
/// `min_messages = 1`) leave it sending; `min_complaints` complaints pause it.
#[tokio::test]
async fn one_complaint_or_one_bounce_never_pauses_a_tenant_by_default() {
    let (relay, _) = start("[reputation]\nkey = \"header:X-Tenant\"\nsuppress = false\n").await;
    let mut c = relay.client().await;
    let send = async |c: &mut Client| {
        c.send_mail("a@b.example", &["r@example.com"], MESSAGE)
            .await
            .0
    };
    for _ in 0..100 {
        assert_eq!(send(&mut c).await, 250);
    }
    let guard = relay.reputation().unwrap();
    guard
        .apply_text(&complaint("ses-0", "c0", "r@example.com"))
        .await
        .unwrap();
    assert_eq!(send(&mut c).await, 250, "one complaint: no verdict");
    for i in 1..3 {
        let id = format!("ses-{i}");
        guard
            .apply_text(&complaint(&id, &format!("c{i}"), "r@example.com"))
            .await
            .unwrap();
    }
    assert_eq!(send(&mut c).await, 451, "three complaints of 101: paused");

    let small = "[reputation]\nkey = \"header:X-Tenant\"\nmin_messages = 1\nsuppress = false\n";
    let (relay, _) = start(small).await;
    let mut c = relay.client().await;
    assert_eq!(send(&mut c).await, 250);
    let guard = relay.reputation().unwrap();
    guard
        .apply_text(&bounce("ses-0", "f0", "r@example.com"))
        .await
        .unwrap();
    assert_eq!(
        send(&mut c).await,
        250,
        "one bounce of one message: no verdict"
    );
}
