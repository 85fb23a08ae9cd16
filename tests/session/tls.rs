//! STARTTLS and implicit TLS: with a Rust client that trusts only the test certificate, and
//! with Python's smtplib as a real client; AUTH through both; certificate reload; handshakes
//! that stall or are garbage.

use std::sync::Arc;
use std::time::Duration;

use crate::support::auth::{auth_config, plain};
use crate::support::host::have_program;
use crate::support::memory::MemoryForwarder;
use crate::support::relay::{memory_relay, Client, Relay};
use crate::support::tls::{connect_implicit, handshake, starttls, TestCert};
use tokio::process::Command;
use tokio::time::Instant;

/// A relay with the certificate and one user; the test client is in `trusted_networks`
/// only when it says `127.0.0.0/8`.
async fn tls_relay(cert: &TestCert, trusted: &str) -> (Relay, Arc<MemoryForwarder>) {
    let trusted = if trusted.is_empty() {
        "192.0.2.0/24"
    } else {
        trusted
    };
    let smtp = format!(
        "trusted_networks = [\"{trusted}\"]\n{}{}",
        cert.config("handshake_timeout_ms = 2000"),
        auth_config(
            &[("app", "s3cret", "tenant = \"acme\"")],
            "failure_delay_ms = 0"
        )
    );
    memory_relay(&smtp, "").await
}

#[tokio::test]
async fn starttls_resets_the_session_and_only_then_offers_auth() {
    let cert = TestCert::new();
    let (relay, fwd) = tls_relay(&cert, "").await;
    let mut c = relay.client().await;
    let (_, ehlo) = c.cmd("EHLO client.test").await;
    assert!(ehlo.lines().any(|l| l == "STARTTLS"), "{ehlo}");
    assert!(!ehlo.contains("AUTH"), "no AUTH in clear: {ehlo}");
    let (code, text) = c
        .cmd(&format!("AUTH PLAIN {}", plain("app", "s3cret")))
        .await;
    assert_eq!((code, text.starts_with("5.7.11")), (538, true), "{text}");
    let mut c = starttls(c, &cert.der).await;
    // Everything before TLS is forgotten; EHLO now lists AUTH and not STARTTLS.
    let (_, ehlo) = c.cmd("EHLO client.test").await;
    assert!(!ehlo.contains("STARTTLS"), "{ehlo}");
    assert!(ehlo.lines().any(|l| l == "AUTH PLAIN LOGIN"), "{ehlo}");
    assert_eq!(c.cmd("STARTTLS").await.0, 503);
    assert_eq!(c.cmd("MAIL FROM:<a@example.com>").await.0, 530);
    let (code, text) = c
        .cmd(&format!("AUTH PLAIN {}", plain("app", "s3cret")))
        .await;
    assert_eq!((code, text.starts_with("2.7.0")), (235, true), "{text}");
    let (code, text) = c
        .send_mail(
            "a@example.com",
            &["b@example.com"],
            b"Subject: tls\r\n\r\nx\r\n",
        )
        .await;
    assert_eq!(code, 250, "{text}");
    let got = fwd.messages();
    assert_eq!(got.len(), 1);
    let head = String::from_utf8_lossy(&got[0].1);
    assert!(head.contains("with ESMTPSA id"), "RFC 3848: {head}");
    relay.stop().await;
}

#[tokio::test]
async fn plaintext_pipelined_after_starttls_is_discarded() {
    let cert = TestCert::new();
    let (relay, fwd) = tls_relay(&cert, "127.0.0.0/8").await;
    let mut c = relay.client().await;
    c.cmd("EHLO x").await;
    // CVE-2011-0411: commands sent in clear behind STARTTLS must not run inside TLS.
    c.send(b"STARTTLS\r\nMAIL FROM:<evil@example.com>\r\nRCPT TO:<v@example.com>\r\n")
        .await;
    assert_eq!(c.reply().await.0, 220);
    let mut c = Client::over(handshake(c.into_stream(), &cert.der).await.unwrap());
    assert_eq!(c.cmd("EHLO x").await.0, 250, "the first reply is EHLO's");
    assert_eq!(c.cmd("RCPT TO:<v@example.com>").await.0, 503, "no MAIL ran");
    assert_eq!(c.cmd("DATA").await.0, 503);
    assert!(fwd.messages().is_empty());
    relay.stop().await;
}

#[tokio::test]
async fn implicit_tls_with_auth_login() {
    let cert = TestCert::new();
    let (relay, fwd) = tls_relay(&cert, "").await;
    let mut c = connect_implicit(relay.tls_addr.unwrap(), &cert.der).await;
    let (_, ehlo) = c.cmd("EHLO client.test").await;
    assert!(
        !ehlo.contains("STARTTLS") && ehlo.contains("AUTH PLAIN LOGIN"),
        "{ehlo}"
    );
    assert_eq!(c.cmd("AUTH LOGIN").await, (334, "VXNlcm5hbWU6".into()));
    assert_eq!(c.cmd("YXBw").await, (334, "UGFzc3dvcmQ6".into()));
    assert_eq!(c.cmd("czNjcmV0").await.0, 235);
    let (code, _) = c
        .send_mail("a@example.com", &["b@example.com"], b"x\r\n")
        .await;
    assert_eq!(code, 250);
    assert_eq!(fwd.messages().len(), 1);
    relay.stop().await;
}

#[tokio::test]
async fn certificate_reload_serves_the_new_one_and_keeps_open_connections() {
    let cert = TestCert::new();
    let (relay, _) = tls_relay(&cert, "").await;
    let mut old = connect_implicit(relay.tls_addr.unwrap(), &cert.der).await;
    assert_eq!(old.cmd("EHLO x").await.0, 250);
    let renewed = cert.renew();
    relay.tls.as_ref().unwrap().reload().unwrap();
    // New handshakes get the new certificate: trusting only the old one fails.
    let tcp = tokio::net::TcpStream::connect(relay.tls_addr.unwrap())
        .await
        .unwrap();
    assert!(handshake(Box::new(tcp), &cert.der).await.is_err());
    let mut new = connect_implicit(relay.tls_addr.unwrap(), &renewed).await;
    assert_eq!(new.cmd("NOOP").await.0, 250);
    // The connection made before the reload goes on.
    assert_eq!(old.cmd("NOOP").await.0, 250);
    relay.stop().await;
}

#[tokio::test]
async fn starttls_not_configured_is_502() {
    let (relay, _) = memory_relay("", "").await;
    let mut c = relay.client().await;
    let (_, ehlo) = c.cmd("EHLO x").await;
    assert!(!ehlo.contains("STARTTLS"), "{ehlo}");
    assert_eq!(c.cmd("STARTTLS").await.0, 502);
    assert_eq!(c.cmd("NOOP").await.0, 250);
    relay.stop().await;
}

#[tokio::test]
async fn garbage_handshakes_close_the_connection() {
    let cert = TestCert::new();
    let (relay, _) = tls_relay(&cert, "").await;
    let mut implicit = Client::connect_raw(relay.tls_addr.unwrap()).await;
    implicit.send(b"EHLO this is not TLS\r\n").await;
    assert!(implicit.reads_to_close().await);
    let mut c = relay.client().await;
    assert_eq!(c.cmd("STARTTLS").await.0, 220);
    let _ = c
        .try_send(&[0x16, 0x03, 0x01, 0xff, 0xff, 1, 2, 3, 4])
        .await;
    let _ = c.try_send(b"\r\n\r\ngarbage").await;
    assert!(c.reads_to_close().await);
    // The relay is unharmed.
    assert_eq!(relay.client().await.cmd("NOOP").await.0, 250);
    relay.stop().await;
}

#[tokio::test(start_paused = true)]
async fn handshakes_that_never_finish_time_out() {
    let cert = TestCert::new();
    let (relay, _) = tls_relay(&cert, "").await;
    // Paused time: the runtime jumps to the handshake timeout (2 s) when all is idle, so
    // the elapsed time below is the relay's own timer, exactly.
    let t0 = Instant::now();
    let mut implicit = Client::connect_raw(relay.tls_addr.unwrap()).await;
    assert!(implicit.is_closed().await);
    assert!(
        t0.elapsed() >= Duration::from_secs(2),
        "closed by the timeout"
    );
    let mut c = relay.client().await;
    assert_eq!(c.cmd("STARTTLS").await.0, 220);
    let t1 = Instant::now();
    c.send(&[0x16, 0x03, 0x01]).await; // the start of a ClientHello, and then nothing
    assert!(c.is_closed().await);
    assert!(
        t1.elapsed() >= Duration::from_secs(2),
        "closed by the timeout"
    );
    relay.stop().await;
}

const SMTPLIB_TLS: &str = r#"
import smtplib, ssl, sys
port, cafile, mode, mech = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
ctx = ssl.create_default_context(cafile=cafile)
if mode == "implicit":
    s = smtplib.SMTP_SSL("127.0.0.1", port, context=ctx, timeout=30)
else:
    s = smtplib.SMTP("127.0.0.1", port, timeout=30)
    s.starttls(context=ctx)
s.ehlo("smtplib.test")
if mech == "PLAIN":
    s.login("app", "s3cret")
else:
    s.user, s.password = "app", "s3cret"
    s.auth("LOGIN", s.auth_login, initial_response_ok=False)
s.sendmail("a@example.com", ["b@example.net"], "Subject: " + mode + "\r\n\r\nhello\r\n")
s.quit()
print("sent")
"#;

async fn smtplib(port: u16, cert: &TestCert, mode: &str, mech: &str) {
    let out = Command::new("python3")
        .args(["-c", SMTPLIB_TLS, &port.to_string()])
        .arg(&cert.cert_path)
        .args([mode, mech])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "smtplib {mode} {mech}: {stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "sent");
}

#[tokio::test]
async fn python_smtplib_starttls_and_implicit_tls_with_auth_plain_and_login() {
    if !have_program("python3") {
        return;
    }
    let cert = TestCert::new();
    let (relay, fwd) = tls_relay(&cert, "").await;
    smtplib(relay.addr.port(), &cert, "starttls", "PLAIN").await;
    smtplib(relay.addr.port(), &cert, "starttls", "LOGIN").await;
    let implicit = relay.tls_addr.unwrap().port();
    smtplib(implicit, &cert, "implicit", "PLAIN").await;
    smtplib(implicit, &cert, "implicit", "LOGIN").await;
    let got = fwd.messages();
    assert_eq!(got.len(), 4);
    for (i, mode) in ["starttls", "starttls", "implicit", "implicit"]
        .iter()
        .enumerate()
    {
        let text = String::from_utf8_lossy(&got[i].1);
        assert!(text.contains("with ESMTPSA id"), "{text}");
        assert!(text.contains(&format!("Subject: {mode}\r\n")), "{text}");
    }
    relay.stop().await;
}
