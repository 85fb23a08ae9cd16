//! `[tenant]` alone names whose message it is: a webhook needs no reputation guard (so no
//! address is suppressed and no tenant paused to get events), and a client not trusted to
//! choose its key cannot send its events to another tenant's webhook with the header.

use mailsluice::upstream::UpstreamError;

use crate::support::auth::{auth_config, plain};
use crate::support::clock::{hold, until_held};
use crate::support::memory::MemoryForwarder;
use crate::support::relay::{config_text, Relay};
use crate::support::webhook::Receiver;
use crate::{message, SECRET, SECRET_ENV};

const TENANT: &str = "[tenant]\nkey = \"header:X-Tenant\"\n";

#[tokio::test(start_paused = true)]
async fn a_webhook_without_the_reputation_guard_gets_events_and_nothing_is_suppressed() {
    std::env::set_var(SECRET_ENV, SECRET);
    let receiver = Receiver::start().await;
    let hook = receiver.config("acme", SECRET_ENV, "");
    let config = config_text("file://unused", "", &format!("{TENANT}{hook}"));
    let upstream = MemoryForwarder::new();
    let relay = Relay::start(&config, upstream.clone()).await;
    assert!(
        relay.reputation().is_none(),
        "no guard without [reputation]"
    );
    let held = hold();
    upstream.fail_with(Some(UpstreamError::Rejected {
        code: 550,
        enhanced: Some("5.1.1".into()),
        text: "Mailbox does not exist".into(),
    }));
    let mut c = relay.client().await;
    c.cmd("EHLO x").await;
    for _ in 0..3 {
        let (code, text) = c
            .send_mail("a@acme.example", &["gone@example.com"], &message("acme"))
            .await;
        assert_eq!(code, 550, "{text}");
    }
    upstream.fail_with(None);
    assert_eq!(c.cmd("MAIL FROM:<a@acme.example>").await.0, 250);
    let rcpt = c.cmd("RCPT TO:<gone@example.com>").await;
    assert_eq!(rcpt.0, 250, "not suppressed: {rcpt:?}");
    assert_eq!(c.cmd("DATA").await.0, 354);
    c.send(&message("acme")).await;
    c.send(b".\r\n").await;
    assert_eq!(c.reply().await.0, 250, "the tenant is not paused");
    until_held("4 events told", || receiver.events().len() >= 4).await;
    drop(held);

    let events = receiver.events();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["refused", "refused", "refused", "accepted"],
        "{events:?}"
    );
    assert!(events.iter().all(|e| e["tenant"] == "acme"), "{events:?}");
    assert!(events[..3].iter().all(|e| e["code"] == 550), "{events:?}");
    assert_eq!(relay.metric("mailsluice_suppressed_total"), 0.0);
    relay.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_untrusted_client_cannot_pick_another_tenants_webhook_by_the_header() {
    std::env::set_var(SECRET_ENV, SECRET);
    let (acme, globex) = (Receiver::start().await, Receiver::start().await);
    let hooks = format!(
        "{}{}",
        acme.config("acme", SECRET_ENV, "name = \"acme\""),
        globex.config("globex", SECRET_ENV, "name = \"globex\"")
    );
    let users = [("app", "s3cret", "tenant = \"acme\"")];
    let smtp = format!("allow_plaintext_auth = true\n{}", auth_config(&users, ""));
    let config = config_text("file://unused", &smtp, &format!("{TENANT}{hooks}"));
    let relay = Relay::start(&config, MemoryForwarder::new()).await;
    let held = hold();
    let mut c = relay.client().await;
    c.cmd("EHLO x").await;
    let login = c
        .cmd(&format!("AUTH PLAIN {}", plain("app", "s3cret")))
        .await;
    assert_eq!(login.0, 235);
    let (code, text) = c
        .send_mail("a@acme.example", &["ann@example.com"], &message("globex"))
        .await;
    assert_eq!(code, 250, "{text}");
    // A trusted client (127.0.0.1 without AUTH) names its tenant with the header.
    let mut trusted = relay.client().await;
    trusted.cmd("EHLO x").await;
    let (code, text) = trusted
        .send_mail("g@globex.example", &["bob@example.com"], &message("globex"))
        .await;
    assert_eq!(code, 250, "{text}");
    until_held("each tenant told", || {
        !acme.events().is_empty() && !globex.events().is_empty()
    })
    .await;
    drop(held);

    let (to_acme, to_globex) = (acme.events(), globex.events());
    assert_eq!(to_acme.len(), 1, "{to_acme:?}");
    assert_eq!(
        (&to_acme[0]["tenant"], &to_acme[0]["to"][0]),
        (&"acme".into(), &"ann@example.com".into()),
        "the AUTH user's tenant stands"
    );
    assert_eq!(to_globex.len(), 1, "{to_globex:?}");
    assert_eq!(to_globex[0]["to"][0], "bob@example.com");
    relay.stop().await;
}
