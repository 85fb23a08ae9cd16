//! The spool's admin endpoints: what it holds, per key and per message; an operator trying a
//! message now, removing one, stopping and letting go a whole key; writes refused without
//! `[admin] password_hash`.

use std::time::Duration;

use serde_json::Value;

use crate::common::*;
use crate::support::auth::cheap_hash;
use crate::support::host::scratch_path;
use crate::support::http::request;
use crate::support::memory::subject_of;
use crate::support::relay::memory_relay;

const SEC: Duration = Duration::from_secs(1);

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// The id in `250 2.0.0 Ok: queued as <id> (held for later delivery)`.
fn queued_id(text: &str) -> String {
    let rest = text.split("queued as ").nth(1).expect("a held reply");
    rest.split_whitespace().next().unwrap().to_string()
}

#[tokio::test(start_paused = true)]
async fn operators_read_release_remove_and_stop_held_messages() {
    let dir = scratch_path("spool-admin");
    let admin_section = format!("[admin]\npassword_hash = \"{}\"\n", cheap_hash("s3cret"));
    let rest = hold_layer(1, 1, 0, "") + &spool_section(&dir, "") + &admin_section;
    let (relay, fwd) = memory_relay("", &rest).await;
    let admin = relay.start_admin().await;
    let mut c = relay.memory_client().await;
    let mut ids = Vec::new();
    for subject in ["m0", "m1", "m2", "m3"] {
        let msg = message("acme", subject);
        let (code, text) = c
            .send_mail("app@acme.example", &["u@example.net"], &msg)
            .await;
        assert_eq!(code, 250, "{text}");
        if subject != "m0" {
            ids.push(queued_id(&text));
        }
    }
    let pw = Some("s3cret");

    let (status, body) = request(admin, "GET", "/spool", pw).await;
    let all = json(&body);
    assert_eq!((status, &all["messages"]), (200, &Value::from(3)), "{body}");
    assert_eq!(all["keys"][0]["layer"], "tenant");
    assert_eq!(all["keys"][0]["key"], "acme");
    assert_eq!(all["keys"][0]["messages"], 3);
    assert!(all["bytes"].as_u64().unwrap() > 0, "{body}");

    let (status, body) = request(admin, "GET", &format!("/spool/{}", ids[1]), pw).await;
    let one = json(&body);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (&one["state"], &one["key"], &one["attempts"]),
        (&"held".into(), &"acme".into(), &0.into())
    );
    assert_eq!(
        (&one["from"], &one["rcpts"][0]),
        (&"app@acme.example".into(), &"u@example.net".into())
    );

    // m2 waits behind m1: it cannot go first.
    let (status, body) = request(admin, "POST", &format!("/spool/{}/release", ids[1]), pw).await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("behind earlier messages"), "{body}");
    // Without the password a change is refused.
    let (status, _) = request(admin, "DELETE", &format!("/spool/{}", ids[2]), None).await;
    assert_eq!(status, 401);
    let (status, body) = request(admin, "DELETE", &format!("/spool/{}", ids[2]), pw).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(files(&dir, "held"), 2);
    let (status, _) = request(admin, "GET", &format!("/spool/{}", ids[2]), pw).await;
    assert_eq!(status, 404);

    // The key stopped: m1 (already on its way) goes, m2 does not, until the key is let go.
    let (status, body) = request(admin, "POST", "/spool/keys/tenant/acme/hold", pw).await;
    assert_eq!(
        (status, json(&body)["stopped"].clone()),
        (200, true.into()),
        "{body}"
    );
    tokio::time::sleep(30 * SEC).await;
    let subjects =
        || -> Vec<String> { fwd.messages().iter().map(|(_, m)| subject_of(m)).collect() };
    assert_eq!(subjects(), ["m0", "m1"]);
    let (_, body) = request(admin, "GET", "/spool", pw).await;
    assert_eq!(json(&body)["keys"][0]["stopped"], true, "{body}");
    // The status page's spool section says so too.
    let (_, page) = request(admin, "GET", "/", pw).await;
    let section = page
        .split("<h2>Spool</h2>")
        .nth(1)
        .expect("a spool section");
    assert!(section.starts_with("<p>1 messages held"), "{section}");
    assert!(
        section.contains("<td>acme</td><td class=\"num\">1</td>"),
        "{section}"
    );
    assert!(section.contains("stopped by an operator"), "{section}");
    assert!(
        page.contains("<td class=\"any\">spool</td><td class=\"ok any\">ready</td>"),
        "{page}"
    );
    let (status, _) = request(admin, "POST", "/spool/keys/tenant/acme/release", pw).await;
    assert_eq!(status, 200);
    run_until("m2 upstream", SEC / 10, 10 * SEC, || subjects().len() == 3).await;
    assert_eq!(subjects(), ["m0", "m1", "m2"], "m3 was removed");
    // Removed from the spool once upstream's answer came.
    let held = || relay.metric("mailsluice_spool_messages");
    run_until("the spool empty", SEC / 10, 10 * SEC, || held() == 0.0).await;
    let (_, body) = request(admin, "GET", "/spool", pw).await;
    assert_eq!(json(&body)["messages"], 0, "{body}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `POST /spool/{id}/release` lets a message waiting out its backoff go now.
#[tokio::test(start_paused = true)]
async fn an_operator_releases_a_message_before_its_backoff_ends() {
    let dir = scratch_path("spool-admin-release");
    let admin_section = format!("[admin]\npassword_hash = \"{}\"\n", cheap_hash("s3cret"));
    // A minute between attempts.
    let spool = spool_section(&dir, "").replace("retry_min_ms = 1000", "retry_min_ms = 60000");
    let spool = spool.replace("retry_max_ms = 5000", "retry_max_ms = 60000");
    let rest = hold_layer(1, 1, 0, "") + &spool + &admin_section;
    let fwd = Refusing::new(&[]);
    fwd.deferred
        .lock()
        .unwrap()
        .push("later@example.net".into());
    let config = crate::support::relay::config_text("file://unused", "", &rest);
    let relay = crate::support::relay::Relay::start(&config, fwd.clone()).await;
    let admin = relay.start_admin().await;
    let mut c = relay.memory_client().await;
    let m0 = message("acme", "m0");
    assert_eq!(
        c.send_mail("a@acme.example", &["ok@example.net"], &m0)
            .await
            .0,
        250
    );
    let m1 = message("acme", "m1");
    let (code, text) = c
        .send_mail("a@acme.example", &["later@example.net"], &m1)
        .await;
    assert_eq!(code, 250, "{text}");
    let id = queued_id(&text);
    run_until("m1 tried once", SEC / 10, 10 * SEC, || {
        *fwd.tried.lock().unwrap() == 2
    })
    .await;
    fwd.deferred.lock().unwrap().clear();
    tokio::time::sleep(5 * SEC).await;
    let pw = Some("s3cret");
    let (status, body) = request(admin, "GET", &format!("/spool/{id}"), pw).await;
    let one = json(&body);
    assert_eq!((status, &one["attempts"]), (200, &Value::from(1)), "{body}");
    assert!(
        one["last_answer"]
            .as_str()
            .unwrap()
            .starts_with("451 4.2.0"),
        "{body}"
    );
    assert_eq!(fwd.messages().len(), 1, "m1 waits out its minute");
    let (status, body) = request(admin, "POST", &format!("/spool/{id}/release"), pw).await;
    assert_eq!(status, 200, "{body}");
    run_until("m1 upstream", Duration::from_millis(10), SEC, || {
        fwd.messages().len() == 2
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A failed message (refused for good, no `report_from`) put back by an operator, as
/// `postsuper -r` does: `POST /spool/{id}/release` moves its file back to `held/`, and it goes
/// once upstream takes it.
#[tokio::test(start_paused = true)]
async fn an_operator_puts_a_failed_message_back_and_it_goes() {
    let dir = scratch_path("spool-admin-requeue");
    let admin_section = format!("[admin]\npassword_hash = \"{}\"\n", cheap_hash("s3cret"));
    let rest = hold_layer(1, 1, 0, "") + &spool_section(&dir, "") + &admin_section;
    let fwd = Refusing::new(&["gone@example.net"]);
    let config = crate::support::relay::config_text("file://unused", "", &rest);
    let relay = crate::support::relay::Relay::start(&config, fwd.clone()).await;
    let admin = relay.start_admin().await;
    let mut c = relay.memory_client().await;
    let m0 = message("acme", "m0");
    let (code, _) = c
        .send_mail("a@acme.example", &["ok@example.net"], &m0)
        .await;
    assert_eq!(code, 250);
    let m1 = message("acme", "m1");
    let (code, text) = c
        .send_mail("a@acme.example", &["gone@example.net"], &m1)
        .await;
    assert_eq!(code, 250, "{text}");
    let id = queued_id(&text);
    run_until("m1 failed", SEC / 10, 30 * SEC, || {
        files(&dir, "failed") == 1
    })
    .await;
    let pw = Some("s3cret");
    let (status, body) = request(admin, "GET", &format!("/spool/{id}"), pw).await;
    assert_eq!(
        (status, &json(&body)["state"]),
        (200, &Value::from("failed")),
        "{body}"
    );
    // The mailbox is back; the operator puts the message back.
    fwd.refused.lock().unwrap().clear();
    let (status, body) = request(admin, "POST", &format!("/spool/{id}/release"), pw).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["requeued"], true, "{body}");
    // Back in held/, unless the releaser has sent it already (it leaves held/ only after
    // upstream took it): the release runs on the real clock, so either may be seen here.
    assert_eq!(files(&dir, "failed"), 0);
    let held = files(&dir, "held");
    let upstream = fwd.messages().len();
    assert!(
        held == 1 || upstream == 2,
        "held {held}, upstream {upstream}"
    );
    run_until("m1 upstream", SEC / 10, 10 * SEC, || {
        fwd.messages().len() == 2
    })
    .await;
    let subjects: Vec<String> = fwd.messages().iter().map(|(_, m)| subject_of(m)).collect();
    assert_eq!(subjects, ["m0", "m1"]);
    run_until("the spool empty", SEC / 10, 10 * SEC, || {
        files(&dir, "held") == 0 && relay.metric("mailsluice_spool_failed") == 0.0
    })
    .await;
    // Gone: nothing to put back twice.
    let (status, _) = request(admin, "POST", &format!("/spool/{id}/release"), pw).await;
    assert_eq!(status, 404);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A key an operator stopped stays stopped after a restart (the stop is kept in the spool's
/// directory): its messages are not released until it is let go.
#[tokio::test(start_paused = true)]
async fn a_stopped_key_stays_stopped_after_a_restart() {
    let dir = scratch_path("spool-admin-stopped");
    let admin_section = format!("[admin]\npassword_hash = \"{}\"\n", cheap_hash("s3cret"));
    let rest = hold_layer(1, 1, 0, "") + &spool_section(&dir, "") + &admin_section;
    let pw = Some("s3cret");
    let (relay, _) = memory_relay("", &rest).await;
    let admin = relay.start_admin().await;
    let (status, body) = request(admin, "POST", "/spool/keys/tenant/acme/hold", pw).await;
    assert_eq!(status, 200, "{body}");
    let mut c = relay.memory_client().await;
    for subject in ["m0", "m1", "m2"] {
        let msg = message("acme", subject);
        let (code, text) = c
            .send_mail("app@acme.example", &["u@example.net"], &msg)
            .await;
        assert_eq!(code, 250, "{text}");
    }
    drop(c);
    relay.stop().await;
    assert_eq!(files(&dir, "held"), 2, "m0 went before the stop mattered");

    let (relay, fwd) = memory_relay("", &rest).await;
    let admin = relay.start_admin().await;
    tokio::time::sleep(30 * SEC).await;
    assert!(fwd.messages().is_empty(), "released after the restart");
    let (_, body) = request(admin, "GET", "/spool", pw).await;
    let all = json(&body);
    assert_eq!(
        (&all["messages"], &all["keys"][0]["stopped"]),
        (&Value::from(2), &Value::from(true)),
        "{body}"
    );
    let (status, _) = request(admin, "POST", "/spool/keys/tenant/acme/release", pw).await;
    assert_eq!(status, 200);
    let subjects =
        || -> Vec<String> { fwd.messages().iter().map(|(_, m)| subject_of(m)).collect() };
    run_until("m1 and m2 upstream", SEC / 10, 10 * SEC, || {
        subjects().len() == 2
    })
    .await;
    assert_eq!(subjects(), ["m1", "m2"]);
    // Let go for good: a second restart releases what comes.
    relay.stop().await;
    let (relay, fwd) = memory_relay("", &rest).await;
    let mut c = relay.memory_client().await;
    for subject in ["m3", "m4"] {
        let msg = message("acme", subject);
        assert_eq!(
            c.send_mail("app@acme.example", &["u@example.net"], &msg)
                .await
                .0,
            250
        );
    }
    run_until("m4 upstream", SEC / 10, 10 * SEC, || {
        fwd.messages().len() == 2
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}
