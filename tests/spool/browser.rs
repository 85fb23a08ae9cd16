//! The spool's admin changes from a browser: a cross-site page's post, with the operator's
//! cached password, is refused and changes nothing; a form body is refused; curl's post goes.

use std::time::Duration;

use serde_json::Value;

use crate::common::*;
use crate::support::auth::cheap_hash;
use crate::support::host::scratch_path;
use crate::support::http::{raw_request, request};
use crate::support::relay::memory_relay;

const SEC: Duration = Duration::from_secs(1);

/// What another site's page sends along: each is refused alone.
const CROSS_SITE: [(&str, &str, u16); 5] = [
    ("Origin", "http://evil.test", 403),
    ("Origin", "null", 403),
    ("Sec-Fetch-Site", "cross-site", 403),
    ("Sec-Fetch-Site", "same-site", 403),
    ("Content-Type", "application/x-www-form-urlencoded", 415),
];

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[tokio::test(start_paused = true)]
async fn a_cross_site_page_cannot_stop_or_release_held_mail() {
    let dir = scratch_path("spool-admin-browser");
    let admin_section = format!("[admin]\npassword_hash = \"{}\"\n", cheap_hash("s3cret"));
    let rest = hold_layer(1, 1, 0, "") + &spool_section(&dir, "") + &admin_section;
    let (relay, fwd) = memory_relay("", &rest).await;
    let admin = relay.start_admin().await;
    let mut c = relay.memory_client().await;
    let mut ids = Vec::new();
    for subject in ["m0", "m1", "m2", "m3"] {
        let (code, text) = c
            .send_mail(
                "app@acme.example",
                &["u@example.net"],
                &message("acme", subject),
            )
            .await;
        assert_eq!(code, 250, "{text}");
        if let Some(rest) = text.split("queued as ").nth(1) {
            ids.push(rest.split_whitespace().next().unwrap().to_string());
        }
    }
    let pw = Some("s3cret");
    let hold = "/spool/keys/tenant/acme/hold";
    let stopped = || async {
        let (_, body) = request(admin, "GET", "/spool", pw).await;
        json(&body)["keys"][0]["stopped"].clone()
    };

    for (name, value, refused) in CROSS_SITE {
        let (status, body) = raw_request(admin, "POST", hold, pw, &[(name, value)]).await;
        assert_eq!(status, refused, "{name}: {value}: {body}");
        assert_eq!(stopped().await, false, "{name}: {value}");
    }
    // curl sends neither header: the key stops.
    let (status, body) = raw_request(admin, "POST", hold, pw, &[]).await;
    assert_eq!(
        (status, json(&body)["stopped"].clone()),
        (200, true.into()),
        "{body}"
    );
    tokio::time::sleep(30 * SEC).await;
    let sent = fwd.messages().len();
    let (_, body) = request(admin, "GET", "/spool", pw).await;
    let held = json(&body)["messages"].clone();

    let release = format!("/spool/{}/release", ids.last().unwrap());
    for path in ["/spool/keys/tenant/acme/release", release.as_str()] {
        for (name, value, refused) in CROSS_SITE {
            let (status, body) = raw_request(admin, "POST", path, pw, &[(name, value)]).await;
            assert_eq!(status, refused, "{path}: {name}: {value}: {body}");
        }
    }
    tokio::time::sleep(30 * SEC).await;
    assert_eq!(fwd.messages().len(), sent, "nothing released");
    assert_eq!(stopped().await, true);
    let (_, body) = request(admin, "GET", "/spool", pw).await;
    assert_eq!(json(&body)["messages"], held, "{body}");
    // The endpoint's own page (same origin) may.
    let own = format!("http://{admin}");
    let same = [("Origin", own.as_str()), ("Sec-Fetch-Site", "same-origin")];
    let (status, body) =
        raw_request(admin, "POST", "/spool/keys/tenant/acme/release", pw, &same).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(stopped().await, false);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The endpoints `mailsluice spool` added have the same guards: another site's page cannot
/// release, put back or remove held mail (nor without the password), and a page whose name
/// was rebound to the endpoint cannot read the list.
#[tokio::test(start_paused = true)]
async fn a_cross_site_page_cannot_release_requeue_or_remove_held_mail() {
    let dir = scratch_path("spool-admin-browser-cli");
    let admin_section = format!("[admin]\npassword_hash = \"{}\"\n", cheap_hash("s3cret"));
    // One token an hour: what is held stays held.
    let layer = hold_layer(1, 1, 0, "").replace("interval_ms = 1000", "interval_ms = 3600000");
    let rest = layer + &spool_section(&dir, "") + &admin_section;
    let (relay, fwd) = memory_relay("", &rest).await;
    let admin = relay.start_admin().await;
    let mut c = relay.memory_client().await;
    let mut ids = Vec::new();
    for subject in ["m0", "m1", "m2"] {
        let msg = message("acme", subject);
        let (code, text) = c
            .send_mail("app@acme.example", &["u@example.net"], &msg)
            .await;
        assert_eq!(code, 250, "{text}");
        if let Some(rest) = text.split("queued as ").nth(1) {
            ids.push(rest.split_whitespace().next().unwrap().to_string());
        }
    }
    let pw = Some("s3cret");
    let requeue = format!("/spool/{}/requeue", ids[1]);
    let writes = [
        ("POST", "/spool/release"),
        ("POST", "/spool/requeue"),
        ("POST", requeue.as_str()),
        ("DELETE", "/spool/keys/tenant/acme"),
    ];
    for (method, path) in writes {
        for (name, value, refused) in CROSS_SITE {
            let (status, body) = raw_request(admin, method, path, pw, &[(name, value)]).await;
            assert_eq!(status, refused, "{method} {path}: {name}: {value}: {body}");
        }
        let (status, _) = raw_request(admin, method, path, None, &[]).await;
        assert_eq!(status, 401, "{method} {path} without the password");
    }
    let (_, body) = request(admin, "GET", "/spool/messages", pw).await;
    assert_eq!(json(&body)["total"], 2, "nothing removed: {body}");
    let rebound = [("Host", "evil.test")];
    let (status, _) = raw_request(admin, "GET", "/spool/messages", pw, &rebound).await;
    assert_eq!(status, 421);
    assert_eq!(fwd.messages().len(), 1, "only m0 went");
    let _ = std::fs::remove_dir_all(&dir);
}
