//! Hold mode's events: a message held gets `held` (the `250 ... held for later delivery` its
//! client was told), then `released` when it goes, with upstream's answer and id.

use std::time::Duration;

use crate::support::clock::{hold, until_held};
use crate::support::host::scratch_path;
use crate::support::webhook::Receiver;
use crate::{message, relay, SECRET_ENV};

#[tokio::test(start_paused = true)]
async fn a_held_message_is_told_held_then_released() {
    let receiver = Receiver::start().await;
    let dir = scratch_path("webhook-hold");
    let layer = "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\nlimit = 1\n\
                 burst = 1\nmode = \"hold\"\nmax_wait_ms = 0\n";
    let spool = format!("[spool]\ndir = \"{}\"\nmin_free_bytes = 0\n", dir.display());
    let hook = receiver.config("acme", SECRET_ENV, "");
    let relay = relay(&format!("{layer}{spool}{hook}")).await;
    let held = hold();
    let mut c = relay.client().await;
    let (code, text) = c
        .send_mail("a@acme.example", &["ann@example.com"], &message("acme"))
        .await;
    assert_eq!((code, text.as_str()), (250, "2.0.0 Ok ses-0"));
    let (code, text) = c
        .send_mail("a@acme.example", &["bob@example.com"], &message("acme"))
        .await;
    assert!(
        code == 250 && text.ends_with("(held for later delivery)"),
        "{text}"
    );
    let id = text.split("queued as ").nth(1).unwrap();
    let id = id.split_whitespace().next().unwrap().to_string();
    until_held("accepted and held told", || receiver.events().len() >= 2).await;
    // Its key's tokens come a second later: it goes.
    tokio::time::advance(Duration::from_secs(2)).await;
    until_held("released told", || receiver.events().len() >= 3).await;
    drop(held);

    let events = receiver.events();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["accepted", "held", "released"]);
    let (told, went) = (&events[1], &events[2]);
    assert_eq!(
        (told["message_id"].as_str(), told["code"].as_u64()),
        (Some(id.as_str()), Some(250))
    );
    assert!(
        told["reply"]
            .as_str()
            .unwrap()
            .ends_with("(held for later delivery)"),
        "{told}"
    );
    assert_eq!(told["to"], serde_json::json!(["bob@example.com"]));
    assert_eq!(went["message_id"].as_str(), Some(id.as_str()));
    assert_eq!(went["upstream_message_id"], "ses-1");
    assert_eq!(went["reply"], "250 2.0.0 Ok ses-1");
    assert_eq!(went["from"], "a@acme.example");
    assert_eq!(went["to"], serde_json::json!(["bob@example.com"]));
    let _ = std::fs::remove_dir_all(&dir);
}
