//! AUTH in clear (refused unless allowed), relay permission, the failure delay and lockout,
//! and the tenant a header cannot override. TLS itself is tested in `tls.rs`; here
//! `allow_plaintext_auth` keeps the dialogue readable.

use std::sync::Arc;
use std::time::Duration;

use crate::support::auth::{auth_config, b64, plain};
use crate::support::memory::MemoryForwarder;
use crate::support::relay::{memory_relay, Client, Relay};
use tokio::time::Instant;

const UNTRUSTED: &str = "trusted_networks = [\"192.0.2.0/24\"]\n";

async fn start(smtp_extra: &str, auth_extra: &str, rest: &str) -> (Relay, Arc<MemoryForwarder>) {
    let users = [
        ("app", "s3cret", "tenant = \"acme\""),
        (
            "platform",
            "pl4tform",
            "tenant = \"plat\", trust_key_header = true",
        ),
        ("bare", "b4re", ""),
    ];
    let smtp = format!("{smtp_extra}\n{}", auth_config(&users, auth_extra));
    memory_relay(&smtp, rest).await
}

async fn login(c: &mut Client, user: &str, password: &str) -> (u16, String) {
    c.cmd(&format!("AUTH PLAIN {}", plain(user, password)))
        .await
}

#[tokio::test]
async fn auth_is_refused_in_clear_unless_allowed() {
    let (relay, _) = start(UNTRUSTED, "", "").await;
    let mut c = relay.client().await;
    let (_, ehlo) = c.cmd("EHLO x").await;
    assert!(!ehlo.contains("AUTH"), "{ehlo}");
    let (code, text) = login(&mut c, "app", "s3cret").await;
    assert_eq!((code, text.starts_with("5.7.11")), (538, true), "{text}");
    assert_eq!(c.cmd("AUTH LOGIN").await.0, 538);
    relay.stop().await;

    let (relay, _) = start(&format!("{UNTRUSTED}allow_plaintext_auth = true"), "", "").await;
    let mut c = relay.client().await;
    let (_, ehlo) = c.cmd("EHLO x").await;
    assert!(ehlo.lines().any(|l| l == "AUTH PLAIN LOGIN"), "{ehlo}");
    assert_eq!(login(&mut c, "app", "s3cret").await.0, 235);
    relay.stop().await;
}

#[tokio::test]
async fn untrusted_client_gets_530_until_it_authenticates() {
    let smtp = format!("{UNTRUSTED}allow_plaintext_auth = true");
    let (relay, fwd) = start(&smtp, "failure_delay_ms = 0", "").await;
    let mut c = relay.client().await;
    c.cmd("EHLO client.test").await;
    let (code, text) = c.cmd("MAIL FROM:<a@example.com>").await;
    assert_eq!((code, text.starts_with("5.7.0")), (530, true), "{text}");
    assert_eq!(login(&mut c, "app", "wrong").await.0, 535);
    assert_eq!(c.cmd("MAIL FROM:<a@example.com>").await.0, 530);
    // PLAIN without an initial response: an empty 334 challenge first.
    assert_eq!(c.cmd("AUTH PLAIN").await, (334, String::new()));
    let (code, text) = c.cmd(&plain("app", "s3cret")).await;
    assert_eq!((code, text.starts_with("2.7.0")), (235, true), "{text}");
    assert_eq!(login(&mut c, "app", "s3cret").await.0, 503, "only once");
    let (code, text) = c
        .send_mail(
            "a@example.com",
            &["b@example.com"],
            b"Subject: a\r\n\r\nx\r\n",
        )
        .await;
    assert_eq!(code, 250, "{text}");
    let got = fwd.messages();
    assert_eq!(got.len(), 1);
    assert!(String::from_utf8_lossy(&got[0].1).contains("with ESMTPA id"));
    relay.stop().await;
}

#[tokio::test]
async fn auth_exchange_edge_cases() {
    let smtp = format!("{UNTRUSTED}allow_plaintext_auth = true");
    let (relay, _) = start(&smtp, "failure_delay_ms = 0\nmax_failures = 100", "").await;
    let mut c = relay.client().await;
    assert_eq!(login(&mut c, "app", "s3cret").await.0, 503, "EHLO first");
    c.cmd("EHLO x").await;
    assert_eq!(c.cmd("AUTH CRAM-MD5").await.0, 504);
    assert_eq!(c.cmd("AUTH LOGIN").await.0, 334);
    assert_eq!(c.cmd("*").await.0, 501, "cancelled");
    assert_eq!(c.cmd("AUTH PLAIN !!!notbase64").await.0, 501);
    assert_eq!(
        c.cmd(&format!("AUTH PLAIN {}", b64(b"no-nuls"))).await.0,
        501
    );
    // Acting for another user (authzid) is not supported: it fails like a bad password.
    let other = b64(b"bare\0app\0s3cret");
    assert_eq!(c.cmd(&format!("AUTH PLAIN {other}")).await.0, 535);
    assert_eq!(login(&mut c, "nobody", "s3cret").await.0, 535);
    // LOGIN with the user name as the initial response.
    assert_eq!(c.cmd(&format!("AUTH LOGIN {}", b64(b"app"))).await.0, 334);
    assert_eq!(c.cmd(&b64(b"s3cret")).await.0, 235);
    relay.stop().await;
}

#[tokio::test(start_paused = true)]
async fn wrong_passwords_are_delayed_then_locked_out() {
    let smtp = format!("{UNTRUSTED}allow_plaintext_auth = true\nmax_errors = 100");
    let auth =
        "failure_delay_ms = 1000\nmax_failures = 3\nfailure_window_ms = 60000\nlockout_ms = 600000";
    let (relay, _) = start(&smtp, auth, "").await;
    let mut c = relay.client().await;
    c.cmd("EHLO x").await;
    // Paused time: the elapsed time is the relay's own timer, exactly.
    let t0 = Instant::now();
    let (code, text) = login(&mut c, "app", "guess1").await;
    assert_eq!((code, text.starts_with("5.7.8")), (535, true), "{text}");
    assert!(t0.elapsed() >= Duration::from_millis(1000), "delayed");
    assert_eq!(login(&mut c, "app", "guess2").await.0, 535);
    // The third failure within the window: 421 4.7.0 and closed.
    let (code, text) = login(&mut c, "app", "guess3").await;
    assert_eq!((code, text.starts_with("4.7.0")), (421, true), "{text}");
    assert!(c.is_closed().await);
    // Locked out: even the right password is answered 421 at once, on a new connection.
    let mut c = relay.client().await;
    c.cmd("EHLO x").await;
    let t1 = Instant::now();
    assert_eq!(login(&mut c, "app", "s3cret").await.0, 421);
    assert!(
        t1.elapsed() < Duration::from_millis(1000),
        "no delay needed"
    );
    assert!(c.is_closed().await);
    // After the lockout it works again.
    tokio::time::sleep(Duration::from_secs(601)).await;
    let mut c = relay.client().await;
    c.cmd("EHLO x").await;
    assert_eq!(login(&mut c, "app", "s3cret").await.0, 235);
    relay.stop().await;
}

/// One layer keyed on `X-Tenant`, one token and no refill: a second message of the same key
/// is refused at once, which shows over TCP which key a message was charged to.
const TENANT_LAYER: &str = "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\n\
    cost = \"message\"\nlimit = 1\nrefill = \"none\"\nmode = \"reject\"\n";

#[tokio::test]
async fn header_cannot_override_an_authenticated_tenant() {
    let smtp = format!("{UNTRUSTED}allow_plaintext_auth = true");
    let (relay, fwd) = start(&smtp, "", TENANT_LAYER).await;
    let mut c = relay.client().await;
    c.cmd("EHLO x").await;
    assert_eq!(login(&mut c, "app", "s3cret").await.0, 235);
    let msg = |tenant: &str| format!("X-Tenant: {tenant}\r\nSubject: s\r\n\r\nx\r\n");
    let (code, _) = c
        .send_mail("a@example.com", &["b@example.com"], msg("other").as_bytes())
        .await;
    assert_eq!(code, 250);
    assert!(
        relay.throttle.holds(0, "acme"),
        "charged to the user's tenant"
    );
    assert!(
        !relay.throttle.holds(0, "other"),
        "the header was not honoured"
    );
    // Another header value does not escape the tenant's (now empty) bucket.
    let (code, text) = c
        .send_mail("a@example.com", &["b@example.com"], msg("fresh").as_bytes())
        .await;
    assert_eq!((code, text.starts_with("4.7.1")), (451, true), "{text}");
    assert_eq!(fwd.messages().len(), 1);
    relay.stop().await;
}

#[tokio::test]
async fn user_with_trust_key_header_chooses_its_key() {
    let smtp = format!("{UNTRUSTED}allow_plaintext_auth = true");
    let (relay, fwd) = start(&smtp, "", TENANT_LAYER).await;
    let mut c = relay.client().await;
    c.cmd("EHLO x").await;
    assert_eq!(login(&mut c, "platform", "pl4tform").await.0, 235);
    for tenant in ["t1", "t2"] {
        let msg = format!("X-Tenant: {tenant}\r\n\r\nx\r\n");
        let (code, text) = c
            .send_mail("a@example.com", &["b@example.com"], msg.as_bytes())
            .await;
        assert_eq!(code, 250, "{text}");
        assert!(relay.throttle.holds(0, tenant));
    }
    // Without the header: the user's tenant.
    let (code, _) = c
        .send_mail("a@example.com", &["b@example.com"], b"\r\nx\r\n")
        .await;
    assert_eq!(code, 250);
    assert!(relay.throttle.holds(0, "plat"));
    // The key header is stripped before forwarding either way.
    assert!(fwd
        .messages()
        .iter()
        .all(|(_, m)| !String::from_utf8_lossy(m).contains("X-Tenant")));
    relay.stop().await;
}

#[tokio::test]
async fn user_without_tenant_is_keyed_by_name_and_trusted_network_header_is_honoured() {
    let smtp = "allow_plaintext_auth = true".to_string();
    let (relay, _) = start(&smtp, "", TENANT_LAYER).await;
    // Loopback is trusted here and did not AUTH: its header is honoured.
    let mut c = relay.client().await;
    let (code, _) = c
        .send_mail(
            "a@example.com",
            &["b@example.com"],
            b"X-Tenant: lo\r\n\r\nx\r\n",
        )
        .await;
    assert_eq!(code, 250);
    assert!(relay.throttle.holds(0, "lo"));
    // Once authenticated, the user's rights apply, whatever the address.
    let mut c = relay.client().await;
    c.cmd("EHLO x").await;
    assert_eq!(login(&mut c, "bare", "b4re").await.0, 235);
    let (code, _) = c
        .send_mail(
            "a@example.com",
            &["b@example.com"],
            b"X-Tenant: lo2\r\n\r\nx\r\n",
        )
        .await;
    assert_eq!(code, 250);
    assert!(relay.throttle.holds(0, "bare") && !relay.throttle.holds(0, "lo2"));
    relay.stop().await;
}
