//! SmtpForwarder: what arrives upstream, and how connections are reused.

use std::sync::Arc;

use mailsluice::message::Envelope;
use mailsluice::upstream::{build_forwarder, Forwarder, SmtpSetupError, UpstreamError};

use super::{envelope, smtp_forwarder, upstream_config, SIMPLE};
use crate::support::host::scratch_path;
use crate::support::replies;
use crate::support::upstream::{Fault, Step, TestUpstream};

#[tokio::test]
async fn delivers_the_exact_bytes() {
    let up = TestUpstream::start().await;
    let fwd = smtp_forwarder(&up.url(), "");
    let message: &[u8] = b"Subject: =?utf-8?q?x?= \xc3\xa9t\xc3\xa9 caf\xc3\xa9\r\n\
        X-Raw: 8-bit \xff\xfe bytes\r\n\
        \r\n\
        .leading dot\r\n\
        ..\r\n\
        .\r\n\
        . \r\n\
        a line with a bare\rCR and a bare\nLF inside\r\n\
        \r\n\
        trailing spaces   \r\n";
    let mut env = envelope(Some("a@example.com"), &["b@example.net"]);
    env.body_8bit = true;
    let accepted = fwd.forward(&env, message).await.expect("accepted");
    assert_eq!(accepted.text, "2.0.0 Ok: queued as TEST1");
    let got = up.wait_for(1).await;
    assert_eq!(got[0].data, message, "bytes changed on the way");
    assert_eq!(got[0].from, "a@example.com");
    assert_eq!(got[0].rcpts, ["b@example.net"]);
    assert_eq!(got[0].mail_params, ["BODY=8BITMIME"]);
}

#[tokio::test]
async fn delivers_ten_mib() {
    let up = TestUpstream::start().await;
    let fwd = smtp_forwarder(&up.url(), "timeout_ms = 20000");
    let mut message = b"Subject: big\r\n\r\n".to_vec();
    let line: Vec<u8> = (0..998).map(|i| b"..abcdefghij"[i % 12]).collect();
    while message.len() < 10 * 1024 * 1024 {
        message.extend_from_slice(&line);
        message.extend_from_slice(b"\r\n");
    }
    fwd.forward(&envelope(Some("a@x.test"), &["b@y.test"]), &message)
        .await
        .expect("accepted");
    let got = up.wait_for(1).await;
    assert_eq!(got[0].data.len(), message.len());
    assert!(got[0].data == message, "10 MiB message altered");
}

#[tokio::test]
async fn a_message_without_final_crlf_gets_one() {
    let up = TestUpstream::start().await;
    let fwd = smtp_forwarder(&up.url(), "");
    let env = envelope(Some("a@x.test"), &["b@y.test"]);
    fwd.forward(&env, b"Subject: x\r\n\r\nno newline")
        .await
        .unwrap();
    let got = up.wait_for(1).await;
    assert_eq!(got[0].data, b"Subject: x\r\n\r\nno newline\r\n");
}

#[tokio::test]
async fn null_sender_stays_null() {
    let up = TestUpstream::start().await;
    let fwd = smtp_forwarder(&up.url(), "");
    fwd.forward(&envelope(None, &["postmaster@y.test"]), SIMPLE)
        .await
        .unwrap();
    let got = up.wait_for(1).await;
    assert_eq!(got[0].from, "");
    assert!(up.commands().contains(&"MAIL FROM:<>".to_string()));
}

#[tokio::test]
async fn fifty_recipients() {
    let up = TestUpstream::start().await;
    let fwd = smtp_forwarder(&up.url(), "");
    let rcpts: Vec<String> = (0..50).map(|i| format!("user{i}@y.test")).collect();
    let rcpt_refs: Vec<&str> = rcpts.iter().map(String::as_str).collect();
    fwd.forward(&envelope(Some("a@x.test"), &rcpt_refs), SIMPLE)
        .await
        .unwrap();
    assert_eq!(up.wait_for(1).await[0].rcpts, rcpts);
}

#[tokio::test]
async fn utf8_addresses_need_smtputf8_upstream() {
    let up = TestUpstream::start().await;
    let fwd = smtp_forwarder(&up.url(), "");
    let mut env = envelope(
        Some("josé@exämple.test"),
        &["\"odd user\"@[127.0.0.1]", "зоя@y.test"],
    );
    env.smtputf8 = true;
    fwd.forward(&env, SIMPLE).await.unwrap();
    let got = up.wait_for(1).await;
    assert_eq!(got[0].from, "josé@exämple.test");
    assert_eq!(got[0].rcpts, ["\"odd user\"@[127.0.0.1]", "зоя@y.test"]);
    assert_eq!(got[0].mail_params, ["SMTPUTF8"]);

    up.set_extensions(&["8BITMIME"]);
    let fwd = smtp_forwarder(&up.url(), ""); // a new pool, so a new EHLO
    let err = fwd.forward(&env, SIMPLE).await.unwrap_err();
    assert!(
        matches!(err, UpstreamError::Rejected { code: 553, .. }),
        "{err:?}"
    );
    // Without SMTPUTF8 upstream, 8-bit headers still go, declared as 8BITMIME.
    let mut ascii = envelope(Some("a@x.test"), &["b@y.test"]);
    ascii.smtputf8 = true;
    fwd.forward(&ascii, "Subject: é\r\n\r\n".as_bytes())
        .await
        .unwrap();
    assert_eq!(up.wait_for(2).await[1].mail_params, ["BODY=8BITMIME"]);
}

#[tokio::test]
async fn eight_bit_body_needs_8bitmime_upstream() {
    let up = TestUpstream::start().await;
    up.set_extensions(&["PIPELINING"]);
    let fwd = smtp_forwarder(&up.url(), "");
    let env = envelope(Some("a@x.test"), &["b@y.test"]);
    let err = fwd
        .forward(&env, "Subject: é\r\n\r\n".as_bytes())
        .await
        .unwrap_err();
    assert!(
        matches!(err, UpstreamError::Rejected { code: 554, .. }),
        "{err:?}"
    );
    fwd.forward(&env, SIMPLE).await.expect("7-bit still goes");
    assert_eq!(up.messages().len(), 1);
}

/// docs/replies.md's row for the guard, matched by its full text (the session refuses such a
/// message first, so no client sees it: tests/session/outcomes.rs names it here).
const SMUGGLING: &str =
    "554 5.6.0 message has a bare CR or LF next to a dot; not relayed (SMTP smuggling)";

#[tokio::test]
async fn smuggling_dots_are_refused_not_sent() {
    let rows = replies::section(&replies::docs(), "## From the upstream leg");
    assert!(rows.iter().any(|r| r == SMUGGLING), "no row `{SMUGGLING}`");
    let up = TestUpstream::start().await;
    let fwd = smtp_forwarder(&up.url(), "");
    let env = envelope(Some("a@x.test"), &["b@y.test"]);
    for evil in [
        &b"Subject: x\r\n\r\nhi\n.\nMAIL FROM:<evil@x>\r\n"[..],
        b"Subject: x\r\n\r\nhi\n.\r\nMAIL FROM:<evil@x>\r\n",
        b"Subject: x\r\n\r\nhi\r.\r\nMAIL FROM:<evil@x>\r\n",
        b"Subject: x\r\n\r\nhi\r\n\n.\r\nMAIL FROM:<evil@x>\r\n",
    ] {
        let err = fwd.forward(&env, evil).await.unwrap_err();
        let (code, status, text) = err.reply().expect("a refusal");
        let text = format!("{} {text}", status.unwrap_or_default());
        assert!(replies::matches(SMUGGLING, code, &text), "{code} {text}");
    }
    assert!(up.messages().is_empty());
    assert!(!up.commands().iter().any(|c| c.starts_with("MAIL")));
    // After a CRLF lettre stuffs the dot itself, so this one is safe and goes unchanged.
    let safe = b"Subject: x\r\n\r\nhi\r\n.\rnot an end\r\n";
    fwd.forward(&env, safe).await.unwrap();
    assert_eq!(up.wait_for(1).await[0].data, safe);
}

#[tokio::test]
async fn bad_addresses_are_refused_before_mail() {
    let up = TestUpstream::start().await;
    let fwd = smtp_forwarder(&up.url(), "");
    let bad_rcpt = envelope(Some("a@x.test"), &["b@y.test>\r\nRCPT TO:<c@z.test"]);
    let err = fwd.forward(&bad_rcpt, SIMPLE).await.unwrap_err();
    assert!(
        matches!(err, UpstreamError::Rejected { code: 553, .. }),
        "{err:?}"
    );
    let bad_from = envelope(Some("no-domain"), &["b@y.test"]);
    let err = fwd.forward(&bad_from, SIMPLE).await.unwrap_err();
    assert!(
        matches!(err, UpstreamError::Rejected { code: 553, .. }),
        "{err:?}"
    );
    assert_eq!(up.connections(), 0);
}

#[tokio::test]
async fn two_messages_share_one_connection() {
    let up = TestUpstream::start().await;
    let fwd = smtp_forwarder(&up.url(), "");
    let env = envelope(Some("a@x.test"), &["b@y.test"]);
    fwd.forward(&env, SIMPLE).await.unwrap();
    fwd.forward(&env, SIMPLE).await.unwrap();
    let got = up.wait_for(2).await;
    assert_eq!((got[0].conn, got[1].conn), (1, 1));
    assert_eq!(up.connections(), 1);
}

/// After a refusal the connection is reset (off the message's path) and parked again. With
/// one slot, the next message waits for that reset and must get the same connection.
#[tokio::test]
async fn rejected_transaction_leaves_the_connection_usable() {
    let up = TestUpstream::start().await;
    let fwd = smtp_forwarder(&up.url(), "pool_size = 1");
    let env = envelope(Some("a@x.test"), &["b@y.test"]);
    up.set_fault(Fault::reply(Step::Rcpt, 550, "5.1.1 no such user"));
    fwd.forward(&env, SIMPLE).await.unwrap_err();
    up.set_fault(Fault::None);
    fwd.forward(&env, SIMPLE).await.unwrap();
    assert_eq!(up.wait_for(1).await[0].conn, 1);
    assert_eq!(up.connections(), 1);
    let commands = up.commands();
    let rset = commands
        .iter()
        .position(|c| c == "RSET")
        .expect("RSET sent");
    let second_mail = commands
        .iter()
        .rposition(|c| c.starts_with("MAIL"))
        .unwrap();
    assert!(rset < second_mail);
}

#[tokio::test]
async fn pool_size_bounds_open_connections() {
    let up = TestUpstream::start().await;
    let fwd = Arc::new(smtp_forwarder(
        &up.url(),
        "pool_size = 2\ntimeout_ms = 10000",
    ));
    let sends: Vec<_> = (0..8)
        .map(|i| {
            let fwd = Arc::clone(&fwd);
            tokio::spawn(async move {
                let env = envelope(Some("a@x.test"), &[&format!("r{i}@y.test")]);
                fwd.forward(&env, SIMPLE).await
            })
        })
        .collect();
    for send in sends {
        send.await.unwrap().expect("accepted");
    }
    assert_eq!(up.wait_for(8).await.len(), 8);
    assert!(up.connections() <= 2, "opened {}", up.connections());
}

#[tokio::test]
async fn idle_connection_closed_by_upstream_is_replaced() {
    for notice in [
        None,
        Some("421 4.4.2 test.upstream Error: timeout exceeded"),
    ] {
        let up = TestUpstream::start().await;
        let fwd = smtp_forwarder(&up.url(), "");
        let env = envelope(Some("a@x.test"), &["b@y.test"]);
        fwd.forward(&env, b"Subject: 1\r\n\r\n").await.unwrap();
        up.close_idle_connections(notice).await;
        let accepted = fwd.forward(&env, b"Subject: 2\r\n\r\n").await;
        assert!(accepted.is_ok(), "{notice:?}: {accepted:?}");
        let got = up.messages();
        assert_eq!(got.len(), 2, "delivered exactly once each");
        assert_eq!(got[1].data, b"Subject: 2\r\n\r\n");
        assert_eq!((got[0].conn, got[1].conn), (1, 2));
    }
}

#[tokio::test]
async fn authenticates_with_password_from_env() {
    let up = TestUpstream::start().await;
    up.require_auth("relay", "s3cret");
    let var = "MAILSLUICE_TEST_UPSTREAM_PASSWORD_OK";
    std::env::set_var(var, "s3cret");
    let fwd = smtp_forwarder(
        &up.url(),
        &format!("username = \"relay\"\npassword_env = \"{var}\""),
    );
    fwd.forward(&envelope(Some("a@x.test"), &["b@y.test"]), SIMPLE)
        .await
        .unwrap();
    assert_eq!(up.wait_for(1).await[0].auth.as_deref(), Some("relay"));

    let wrong = smtp_forwarder(&up.url(), "username = \"relay\"\npassword = \"nope\"");
    let err = wrong
        .forward(&envelope(Some("a@x.test"), &["b@y.test"]), SIMPLE)
        .await
        .unwrap_err();
    // The relay's own login refused: the operator's problem, not the message's.
    match err {
        UpstreamError::Credentials(why) => {
            assert!(why.contains("AUTH refused") && why.contains("535"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    assert!(wrong.check().await.is_err(), "its check logs in");
    assert!(fwd.check().await.is_ok());
}

#[tokio::test]
async fn setup_errors_are_clear() {
    let url = "smtp://127.0.0.1:1";
    let missing = upstream_config(
        url,
        "username = \"u\"\npassword_env = \"MAILSLUICE_TEST_UNSET_VAR\"",
    );
    let err = mailsluice::upstream::SmtpForwarder::new(&missing)
        .err()
        .unwrap();
    assert!(
        matches!(err, SmtpSetupError::MissingPasswordEnv(ref v) if v == "MAILSLUICE_TEST_UNSET_VAR")
    );
    assert!(
        err.to_string().contains("MAILSLUICE_TEST_UNSET_VAR"),
        "{err}"
    );
    let no_user = upstream_config(url, "password = \"p\"");
    assert!(build_forwarder(&no_user, &own()).is_err());
    let no_pass = upstream_config(url, "username = \"u\"");
    assert!(build_forwarder(&no_pass, &own()).is_err());
}

#[tokio::test]
async fn build_forwarder_picks_by_url() {
    let up = TestUpstream::start().await;
    let smtp = build_forwarder(&upstream_config(&up.url(), "tls = \"none\""), &own()).unwrap();
    smtp.forward(&envelope(Some("a@x.test"), &["b@y.test"]), SIMPLE)
        .await
        .unwrap();
    assert!(up.commands().contains(&"EHLO relay.test".to_string()));

    let dir = scratch_path("build");
    let file = build_forwarder(
        &upstream_config(&format!("file://{}", dir.display()), ""),
        &own(),
    )
    .unwrap();
    let accepted = file
        .forward(
            &Envelope {
                rcpts: vec!["b@y.test".into()],
                ..Default::default()
            },
            SIMPLE,
        )
        .await
        .unwrap();
    assert!(accepted.text.starts_with("2.0.0 Ok: queued as "));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn tls_required_but_not_offered_is_the_relays_credentials_refused() {
    let up = TestUpstream::start().await;
    let fwd = smtp_forwarder(&up.url(), "tls = \"required\"");
    let err = fwd
        .forward(&envelope(Some("a@x.test"), &["b@y.test"]), SIMPLE)
        .await
        .unwrap_err();
    // The operator's setting, not the message: 451 4.7.0 for the client, unready.
    assert!(
        matches!(&err, UpstreamError::Credentials(why) if why.contains("STARTTLS")),
        "{err:?}"
    );
    assert!(!up.commands().iter().any(|c| c.starts_with("MAIL")));

    let opportunistic = smtp_forwarder(&up.url(), "tls = \"opportunistic\"");
    opportunistic
        .forward(&envelope(Some("a@x.test"), &["b@y.test"]), SIMPLE)
        .await
        .expect("plain when STARTTLS is not offered");
}

#[tokio::test]
async fn smtps_to_a_plain_server_is_unavailable() {
    let up = TestUpstream::start().await;
    let url = format!("smtps://{}", up.addr());
    let fwd = smtp_forwarder(&url, "");
    let err = fwd
        .forward(&envelope(Some("a@x.test"), &["b@y.test"]), SIMPLE)
        .await
        .unwrap_err();
    assert!(matches!(err, UpstreamError::Unavailable(_)), "{err:?}");
    assert!(up.messages().is_empty());
}

/// Where the relay listens, for a forwarder built alone: nowhere yet.
fn own() -> mailsluice::upstream::OwnAddresses {
    mailsluice::upstream::OwnAddresses::default()
}
