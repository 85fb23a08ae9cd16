//! The reputation guard's admin endpoints, and the admin password: open reads and 403 for
//! changes without `[admin] password_hash`; Basic authentication for all but the probes with it.

use std::net::SocketAddr;

use crate::support::auth::cheap_hash;
use crate::support::http::request;
use crate::support::relay::{memory_relay, sum_metric, Relay};
use crate::support::ses_events::bounce;

const REPUTATION: &str =
    "[reputation]\nkey = \"header:X-Tenant\"\nmin_messages = 1\nmin_bounces = 1\n";

/// A relay with the reputation guard and `admin` (an `[admin]` section, or none) whose tenant
/// `acme` is paused (one message, one hard bounce), and its admin endpoint's address.
pub(crate) async fn acme_paused(admin: &str) -> (Relay, SocketAddr) {
    let (relay, _) = memory_relay("", &format!("{REPUTATION}{admin}")).await;
    let endpoint = relay.start_admin().await;
    let guard = relay.reputation().unwrap();
    guard.forwarded("acme", Some("m1"), 1).await;
    guard
        .apply_text(&bounce("m1", "f-m1", "gone@example.com"))
        .await
        .unwrap();
    (relay, endpoint)
}

#[tokio::test]
async fn without_a_password_reads_are_open_and_changes_are_refused() {
    let (relay, admin) = acme_paused("").await;
    let guard = relay.reputation().unwrap();
    let (status, body) = request(admin, "GET", "/reputation", None).await;
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["tenants"][0]["key"], "acme");
    assert_eq!(json["tenants"][0]["paused"], true);
    assert_eq!(
        (json["paused"].as_u64(), json["suppressed"].as_u64()),
        (Some(1), Some(1))
    );
    let (status, body) = request(admin, "GET", "/suppressions/gone@example.com", None).await;
    assert_eq!(status, 200);
    assert!(
        body.contains("hard bounce") && body.contains("2026-12-01"),
        "{body}"
    );
    assert_eq!(
        request(admin, "POST", "/reputation/acme/resume", None)
            .await
            .0,
        403
    );
    assert_eq!(
        request(admin, "DELETE", "/suppressions/gone@example.com", None)
            .await
            .0,
        403
    );
    assert!(guard.standing("acme").await.is_some(), "nothing changed");
    let (_, metrics) = request(admin, "GET", "/metrics", None).await;
    assert_eq!(
        sum_metric(&metrics, "mailsluice_reputation_paused"),
        1.0,
        "{metrics}"
    );
}

#[tokio::test]
async fn with_a_password_every_path_but_the_probes_asks_for_it() {
    let admin_section = format!("[admin]\npassword_hash = \"{}\"\n", cheap_hash("s3cret"));
    let (relay, admin) = acme_paused(&admin_section).await;
    let guard = relay.reputation().unwrap();
    for path in ["/healthz", "/readyz"] {
        assert_ne!(request(admin, "GET", path, None).await.0, 401, "{path}");
    }
    for path in [
        "/",
        "/metrics",
        "/reputation",
        "/suppressions/gone@example.com",
    ] {
        let (status, _) = request(admin, "GET", path, None).await;
        assert_eq!(status, 401, "{path}");
        assert_eq!(
            request(admin, "GET", path, Some("wrong")).await.0,
            401,
            "{path}"
        );
    }
    let pw = Some("s3cret");
    assert_eq!(request(admin, "GET", "/reputation", pw).await.0, 200);
    assert_eq!(
        request(admin, "POST", "/reputation/acme/resume", None)
            .await
            .0,
        401
    );
    assert_eq!(
        request(admin, "POST", "/reputation/acme/resume", pw)
            .await
            .0,
        200
    );
    assert!(guard.standing("acme").await.is_none(), "resumed");
    assert_eq!(
        request(admin, "POST", "/reputation/nobody/resume", pw)
            .await
            .0,
        404
    );
    let address = "/suppressions/gone@example.com";
    assert_eq!(request(admin, "DELETE", address, pw).await.0, 200);
    assert_eq!(request(admin, "GET", address, pw).await.0, 404);
    assert!(guard.suppressed("gone@example.com").await.is_none());
}
