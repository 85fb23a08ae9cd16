//! One tenant's message through its whole life, each event its webhook gets: `accepted`,
//! then SES's bounce (`bounced`, `suppressed`, `paused`), a complaint (`complained`,
//! `suppressed`), the next message `refused` while paused, `resumed` once the window passed;
//! another tenant's events never reach it.

use std::time::Duration;

use serde_json::Value;

use crate::support::clock::hold;
use crate::support::ses_events::{bounce, complaint};
use crate::support::webhook::{verified, Receiver};
use crate::{message, relay, SECRET, SECRET_ENV};

/// Waits (real time, at most 10 s, the clock held) until `receiver` has `n` events; the test
/// then says what it has.
async fn wait_for(receiver: &Receiver, n: usize) {
    for _ in 0..100 {
        if receiver.events().len() >= n {
            return;
        }
        let nap = || std::thread::sleep(Duration::from_millis(100));
        tokio::task::spawn_blocking(nap).await.unwrap();
    }
}

/// The events of `kind` the receiver got.
fn of(events: &[Value], kind: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["type"] == kind)
        .cloned()
        .collect()
}

#[tokio::test(start_paused = true)]
async fn each_event_of_a_message_life_reaches_its_tenant_signed() {
    let receiver = Receiver::start().await;
    let relay = relay(&receiver.config("acme", SECRET_ENV, "")).await;
    let guard = relay.reputation().unwrap();
    let held = hold();
    let mut c = relay.client().await;
    c.cmd("EHLO x").await;
    let to = ["ann@example.com", "bob@example.com"];
    let (code, text) = c.send_mail("a@acme.example", &to, &message("acme")).await;
    assert_eq!((code, text.as_str()), (250, "2.0.0 Ok ses-0"));
    // Another tenant's message: its events go to no webhook of acme's.
    assert_eq!(
        c.send_mail("b@beta.example", &["x@example.com"], &message("beta"))
            .await
            .0,
        250
    );
    guard
        .apply_text(&bounce("ses-0", "fb-b", "ann@example.com"))
        .await
        .unwrap();
    guard
        .apply_text(&complaint("ses-0", "fb-c", "bob@example.com"))
        .await
        .unwrap();
    // SQS delivers at least once: the same bounce again tells nothing more.
    guard
        .apply_text(&bounce("ses-0", "fb-b", "ann@example.com"))
        .await
        .unwrap();
    let (code, text) = c
        .send_mail("a@acme.example", &["cy@example.com"], &message("acme"))
        .await;
    assert_eq!(code, 451, "{text}");
    // Delivered before the clock moves (a POST in flight would time out on a jump).
    wait_for(&receiver, 7).await;
    // The window passes: the next message finds the tenant under its limits again.
    tokio::time::advance(Duration::from_secs(61)).await;
    assert_eq!(
        c.send_mail("a@acme.example", &["dee@example.com"], &message("acme"))
            .await
            .0,
        250
    );
    wait_for(&receiver, 9).await;
    drop(held);

    let events = receiver.events();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(events.len(), 9, "{kinds:?}");
    assert!(events.iter().all(|e| e["tenant"] == "acme"), "{events:?}");
    let accepted = of(&events, "accepted");
    assert_eq!(accepted.len(), 2, "{kinds:?}");
    let first = &accepted[0];
    assert_eq!(first["upstream_message_id"], "ses-0");
    assert_eq!(first["from"], "a@acme.example");
    assert_eq!(first["to"], serde_json::json!(to));
    assert_eq!(
        (first["code"].as_u64(), first["reply"].as_str()),
        (Some(250), Some("250 2.0.0 Ok ses-0"))
    );
    // The id the client's `250` named (SES's), and the relay's own beside it.
    assert_eq!(first["message_id"], "ses-0");
    let id = first["relay_message_id"].as_str().unwrap();
    assert!(
        id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{id}"
    );
    assert!(first["time"].as_str().unwrap().ends_with('Z'));

    let bounced = of(&events, "bounced");
    assert_eq!(bounced.len(), 1, "{kinds:?}");
    assert_eq!(bounced[0]["upstream_message_id"], "ses-0");
    assert_eq!(bounced[0]["to"], serde_json::json!(["ann@example.com"]));
    assert_eq!(bounced[0]["diagnostic"], "smtp; 550 5.1.1 user unknown");
    let complained = of(&events, "complained");
    assert_eq!(complained.len(), 1, "{kinds:?}");
    assert_eq!(complained[0]["diagnostic"], "abuse");
    let suppressed = of(&events, "suppressed");
    let reasons: Vec<(&str, &str)> = (suppressed.iter())
        .map(|e| (e["to"][0].as_str().unwrap(), e["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(
        reasons,
        [
            ("ann@example.com", "bounce"),
            ("bob@example.com", "complaint")
        ]
    );

    let paused = of(&events, "paused");
    assert_eq!(paused.len(), 1, "{kinds:?}");
    assert_eq!(
        (paused[0]["reason"].as_str(), paused[0]["rate"].as_f64()),
        (Some("bounce"), Some(0.5))
    );
    let refused = of(&events, "refused");
    assert_eq!(refused.len(), 1, "{kinds:?}");
    assert_eq!(refused[0]["code"], 451);
    assert_eq!(refused[0]["outcome"], "reputation_paused");
    assert_eq!(refused[0]["to"], serde_json::json!(["cy@example.com"]));
    assert_eq!(of(&events, "resumed").len(), 1, "{kinds:?}");
    assert_eq!(accepted[1]["to"], serde_json::json!(["dee@example.com"]));

    // Each POST signed as a receiver checks it, within 5 minutes of the relay's clock.
    let now = relay.services().clock.unix_now_secs();
    for d in receiver.deliveries() {
        assert_eq!(d.path, "/hook");
        assert!(
            verified(SECRET.as_bytes(), &d.signature, &d.body, 300, now),
            "{d:?}"
        );
    }
    assert_eq!(relay.metric("mailsluice_webhook_sent_total") as usize, 9);
    relay.stop().await;
}
