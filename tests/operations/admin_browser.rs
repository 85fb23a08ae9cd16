//! The admin endpoint from a browser: another site's page cannot resume a tenant with the
//! operator's cached password, and a page whose name was rebound to the endpoint's address
//! cannot read it (`Host` checked); curl, probes by IP and configured names go on.

use tokio::net::TcpListener;

use crate::reputation_admin::acme_paused;
use crate::support::auth::cheap_hash;
use crate::support::http::raw_request;
use crate::support::relay::memory_relay;

const REPUTATION: &str =
    "[reputation]\nkey = \"header:X-Tenant\"\nmin_messages = 1\nmin_bounces = 1\n";

#[tokio::test]
async fn a_cross_site_page_cannot_resume_a_tenant() {
    let admin_section = format!("[admin]\npassword_hash = \"{}\"\n", cheap_hash("s3cret"));
    let (relay, admin) = acme_paused(&admin_section).await;
    let guard = relay.reputation().unwrap();
    let pw = Some("s3cret");
    let resume = "/reputation/acme/resume";
    let refused = [
        (("Origin", "http://evil.test"), 403),
        (("Origin", "https://evil.test"), 403),
        (("Sec-Fetch-Site", "cross-site"), 403),
        (("Sec-Fetch-Site", "same-site"), 403),
        (("Content-Type", "application/x-www-form-urlencoded"), 415),
        (("Content-Type", "multipart/form-data; boundary=x"), 415),
        (("Content-Type", "text/plain;charset=UTF-8"), 415),
    ];
    for (header, status) in refused {
        let (got, body) = raw_request(admin, "POST", resume, pw, &[header]).await;
        assert_eq!(got, status, "{header:?}: {body}");
        assert!(
            guard.standing("acme").await.is_some(),
            "{header:?}: nothing changed"
        );
    }
    // Another site's page may still read what the browser shows anyone (no change).
    let (got, _) = raw_request(
        admin,
        "GET",
        "/reputation",
        pw,
        &[("Origin", "http://evil.test")],
    )
    .await;
    assert_eq!(got, 200);
    // curl sends neither header.
    let (got, body) = raw_request(admin, "POST", resume, pw, &[]).await;
    assert_eq!(got, 200, "{body}");
    assert!(guard.standing("acme").await.is_none(), "resumed");
}

#[tokio::test]
async fn a_rebound_name_cannot_read_the_endpoint() {
    let rest = format!("{REPUTATION}[admin]\nhosts = [\"relay.internal\"]\n");
    let (relay, _) = memory_relay("", &rest).await;
    let admin = relay.start_admin().await;
    let port = admin.port();
    for path in ["/reputation", "/spool", "/metrics", "/healthz", "/"] {
        for host in [
            "evil.test".to_string(),
            format!("evil.test:{port}"),
            format!("10.1.2.3:{port}"),
        ] {
            let (got, body) = raw_request(admin, "GET", path, None, &[("Host", &host)]).await;
            assert_eq!(got, 421, "{path} for {host}: {body}");
        }
    }
    for host in [
        admin.to_string(),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        "relay.internal".into(),
        format!("Relay.Internal:{port}"),
    ] {
        let (got, body) = raw_request(admin, "GET", "/reputation", None, &[("Host", &host)]).await;
        assert_eq!(got, 200, "{host}: {body}");
    }
    // SNS posts with the name of the proxy in front; its signature is what counts.
    let (got, _) = raw_request(
        admin,
        "POST",
        "/ses/events",
        None,
        &[("Host", "sns.example.com")],
    )
    .await;
    assert_ne!(got, 421);
}

/// On `0.0.0.0` (a pod), a probe or a scrape by the pod's IP is the endpoint's own, and so is
/// an address at another port (a published container port); a name is not unless configured.
#[tokio::test]
async fn a_wildcard_listener_answers_any_address_at_its_port() {
    let (relay, _) = memory_relay("", "[admin]\n").await;
    let listener = TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = relay.start_admin_on(listener).port();
    let admin = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    for host in [
        format!("10.1.2.3:{port}"),
        format!("[fd00::7]:{port}"),
        format!("localhost:{port}"),
    ] {
        let (got, body) = raw_request(admin, "GET", "/healthz", None, &[("Host", &host)]).await;
        assert_eq!(got, 200, "{host}: {body}");
    }
    for host in [format!("mailsluice:{port}"), "mailsluice".to_string()] {
        let (got, _) = raw_request(admin, "GET", "/healthz", None, &[("Host", &host)]).await;
        assert_eq!(got, 421, "{host}");
    }
}
