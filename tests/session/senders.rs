//! Who may send as whom: an AUTH user with `senders` may give only those as MAIL FROM, and
//! every address of its `From:` field must be inside them too; a user without `senders` sends
//! as anyone, as before.

use std::sync::Arc;

use crate::support::auth::{auth_config, plain};
use crate::support::memory::MemoryForwarder;
use crate::support::relay::{memory_relay, Client, Relay};

async fn start() -> (Relay, Arc<MemoryForwarder>) {
    let users = [
        (
            "acme",
            "s3cret",
            "tenant = \"acme\", senders = [\"billing@shared.example\", \"@Acme.Example\"]",
        ),
        ("bare", "b4re", ""),
    ];
    let smtp = format!(
        "trusted_networks = [\"192.0.2.0/24\"]\nallow_plaintext_auth = true\n{}",
        auth_config(&users, "failure_delay_ms = 0")
    );
    memory_relay(&smtp, "").await
}

async fn logged_in(relay: &Relay, user: &str, password: &str) -> Client {
    let mut c = relay.client().await;
    c.cmd("EHLO client.test").await;
    let (code, text) = c
        .cmd(&format!("AUTH PLAIN {}", plain(user, password)))
        .await;
    assert_eq!(code, 235, "{text}");
    c
}

#[tokio::test]
async fn mail_from_outside_the_users_senders_gets_553() {
    let (relay, _) = start().await;
    let mut c = logged_in(&relay, "acme", "s3cret").await;
    let (code, text) = c.cmd("MAIL FROM:<ceo@globex.example>").await;
    assert_eq!(
        (code, text.as_str()),
        (
            553,
            "5.7.1 <ceo@globex.example>: sender not allowed for user acme"
        )
    );
    for outside in [
        "Billing@shared.example",
        "other@shared.example",
        "x@sub.acme.example",
    ] {
        let (code, text) = c.cmd(&format!("MAIL FROM:<{outside}>")).await;
        assert_eq!(code, 553, "{outside}: {text}");
    }
    for inside in ["billing@SHARED.example", "anyone@ACME.example", ""] {
        let (code, text) = c.cmd(&format!("MAIL FROM:<{inside}>")).await;
        assert_eq!(code, 250, "{inside}: {text}");
        assert_eq!(c.cmd("RSET").await.0, 250);
    }
    relay.stop().await;
}

#[tokio::test]
async fn a_from_address_outside_the_users_senders_gets_550_at_the_dot_and_nothing_goes() {
    let (relay, fwd) = start().await;
    let mut c = logged_in(&relay, "acme", "s3cret").await;
    let rcpt = ["to@example.net"];
    for (envelope, from) in [
        ("billing@shared.example", "ceo@globex.example"),
        // A null envelope sender claims no one, but its From: still must be inside.
        ("", "ceo@globex.example"),
        (
            "a@acme.example",
            "\"Acme\" <a@acme.example>, ceo@globex.example",
        ),
        (
            "a@acme.example",
            "team: a@acme.example, ceo@globex.example;",
        ),
    ] {
        let message = format!("From: {from}\r\nSubject: x\r\n\r\nbody\r\n");
        let (code, text) = c.send_mail(envelope, &rcpt, message.as_bytes()).await;
        assert_eq!(
            (code, text.as_str()),
            (
                550,
                "5.7.1 From: <ceo@globex.example> not allowed for user acme"
            ),
            "{envelope} / {from}"
        );
    }
    assert!(fwd.messages().is_empty(), "nothing forwarded");
    assert_eq!(
        relay.metric("mailsluice_messages_total{outcome=\"sender_refused\"}"),
        4.0
    );
    let message = b"From: Billing <billing@shared.example>, a@ACME.example\r\n\r\nok\r\n";
    let (code, text) = c.send_mail("", &rcpt, message).await;
    assert_eq!(code, 250, "{text}");
    assert_eq!(fwd.messages().len(), 1);
    relay.stop().await;
}

#[tokio::test]
async fn a_user_without_senders_sends_as_anyone() {
    let (relay, fwd) = start().await;
    let mut c = logged_in(&relay, "bare", "b4re").await;
    let message = b"From: ceo@globex.example\r\nSubject: x\r\n\r\nbody\r\n";
    let (code, text) = c
        .send_mail("ceo@globex.example", &["to@example.net"], message)
        .await;
    assert_eq!(code, 250, "{text}");
    assert_eq!(fwd.messages().len(), 1);
    relay.stop().await;
}

/// `From:` values a mail reader reads as `ceo@globex.example` (or as two addresses) while a
/// lenient parser keeps the `acme.example` text after a comment, quote or angle address.
const READ_TWO_WAYS: [&str; 9] = [
    "ceo@globex.example (@acme.example",
    "ceo@globex.example\r\n (@acme.example",
    "<ceo@globex.example>@acme.example",
    "<ceo@globex.example>billing@acme.example",
    "\"CEO\" <ceo@globex.example>x@acme.example",
    "CEO <ceo@globex.example> billing@acme.example",
    "ceo@globex.example\"@acme.example",
    "<ceo@globex.example billing@acme.example",
    "ceo@globex.example <billing@acme.example>",
];

#[tokio::test]
async fn a_from_that_reads_two_ways_gets_550_and_nothing_goes() {
    let (relay, fwd) = start().await;
    let mut c = logged_in(&relay, "acme", "s3cret").await;
    for from in READ_TWO_WAYS {
        let message = format!("From: {from}\r\nSubject: x\r\n\r\nbody\r\n");
        let (code, text) = c
            .send_mail(
                "billing@acme.example",
                &["to@example.net"],
                message.as_bytes(),
            )
            .await;
        assert_eq!(
            (code, text.as_str()),
            (550, "5.7.1 From: unreadable address for user acme"),
            "{from:?}"
        );
        assert!(fwd.messages().is_empty(), "{from:?} went upstream");
    }
    assert_eq!(
        relay.metric("mailsluice_messages_total{outcome=\"sender_refused\"}"),
        READ_TWO_WAYS.len() as f64
    );
    relay.stop().await;
}

#[tokio::test]
async fn a_bound_users_message_without_from_gets_550() {
    let (relay, fwd) = start().await;
    let mut c = logged_in(&relay, "acme", "s3cret").await;
    let message = b"Subject: x\r\n\r\nFrom: billing@acme.example\r\n";
    let (code, text) = c
        .send_mail("billing@acme.example", &["to@example.net"], message)
        .await;
    assert_eq!((code, text.as_str()), (550, "5.7.1 From: missing"));
    assert!(fwd.messages().is_empty());
    relay.stop().await;
}

#[tokio::test]
async fn legitimate_from_forms_still_go() {
    let (relay, fwd) = start().await;
    let mut c = logged_in(&relay, "acme", "s3cret").await;
    let forms = [
        "Billing <billing@acme.example>",
        "\"Acme, Inc.\" <billing@acme.example>",
        "billing@acme.example (Billing)",
        "billing@acme.example, Team <team@acme.example>",
        "\"Acme, Inc.\"\r\n <billing@acme.example>,\r\n\tteam@acme.example",
        "=?utf-8?q?Acme_S=C3=A0rl?= <billing@acme.example>",
    ];
    for from in forms {
        let message = format!("From: {from}\r\nSubject: x\r\n\r\nbody\r\n");
        let (code, text) = c
            .send_mail(
                "billing@acme.example",
                &["to@example.net"],
                message.as_bytes(),
            )
            .await;
        assert_eq!(code, 250, "{from:?}: {text}");
    }
    assert_eq!(fwd.messages().len(), forms.len());
    relay.stop().await;
}
