//! `[reputation] ses_sync = true` against the fake SES's tenant calls (`support::ses_tenants`;
//! moto does not serve them): a guard pause seen at SES as a `DISABLED` customer-managed
//! status and a resume as `ENABLED`, SES's own `DISABLED` aggregate pausing the tenant's
//! messages in the relay (read every `ses_refresh_ms`, on tokio's paused clock), a suppression
//! written with `TenantName`, SES's status shown in `GET /reputation`, the status page and the
//! metrics, and SES's API failing open, its writes tried again.

use std::time::Duration;

use crate::support::http::get;
use crate::support::relay::{Client, Relay};
use crate::support::ses::{self, FakeSes};
use crate::support::ses_events::{bounce, complaint_notification};
use crate::support::wait::until;

/// A relay sending as SES tenant `{X-Tenant}` at the fake, whose guard keys on `X-Tenant`
/// too and pauses a tenant past half of its messages bounced, with `ses_sync`.
async fn start_relay(fake: &FakeSes, upstream_extra: &str, reputation_extra: &str) -> Relay {
    for tenant in ["acme", "globex"] {
        fake.tenants.add(tenant, &["example.com"]);
    }
    let tables = format!(
        "[[route]]\nkey = \"header:X-Tenant\"\nupstream = \"default\"\nses_tenant = \"{{key}}\"\n\
         [reputation]\nkey = \"header:X-Tenant\"\nmin_messages = 1\nmin_bounces = 1\n\
         max_bounce_rate = 0.5\nses_sync = true\n{reputation_extra}"
    );
    ses::relay(fake, upstream_extra, &tables).await
}

async fn send(relay: &Relay, tenant: &str, rcpt: &str) -> (u16, String) {
    let message = format!("X-Tenant: {tenant}\r\nSubject: s\r\n\r\nx\r\n");
    let mut c = Client::connect(relay.addr).await;
    c.send_mail("app@example.com", &[rcpt], message.as_bytes())
        .await
}

/// Sends one message of acme's (the fake's `fake-000001`), then its bounce: acme is paused.
async fn pause_acme(relay: &Relay) {
    assert_eq!(send(relay, "acme", "gone@example.net").await.0, 250);
    let guard = relay.reputation().unwrap();
    guard
        .apply_text(&bounce("fake-000001", "f1", "gone@example.net"))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_guard_pause_is_disabled_at_ses_and_a_resume_enables_it() {
    let fake = FakeSes::start().await;
    let relay = start_relay(&fake, "", "").await;
    let admin = relay.start_admin().await;
    fake.tenants
        .change("acme", |t| t.impact = Some("HIGH".into()));
    pause_acme(&relay).await;
    until("DISABLED at SES", async || {
        fake.tenants.tenant("acme").customer == "DISABLED"
    })
    .await;
    let update = fake
        .tenants
        .calls("UpdateReputationEntityCustomerManagedStatus");
    assert_eq!(update[0].target, fake.tenants.tenant("acme").arn);
    assert_eq!(update[0].body["SendingStatus"], "DISABLED");
    assert_eq!(
        fake.tenants.calls("GetTenant")[0].body["TenantName"],
        "acme"
    );
    let (code, text) = send(&relay, "acme", "x@example.net").await;
    assert_eq!(code, 451, "the guard's own pause: {text}");

    let (status, body) = get(admin, "/reputation").await;
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    let acme = &json["ses_tenants"][0];
    assert_eq!(acme["key"], "acme", "{body}");
    assert_eq!(acme["ses_tenant"], "acme");
    assert_eq!(acme["customer_managed_status"], "DISABLED");
    assert_eq!(acme["aws_ses_managed_status"], "ENABLED");
    assert_eq!(acme["sending_status_aggregate"], "DISABLED");
    assert_eq!(acme["reputation_impact"], "HIGH");
    let (_, page) = get(admin, "/").await;
    assert!(page.contains("<h2>SES tenants</h2>"), "{page}");
    let gauge = "mailsluice_ses_tenants{aggregate=\"DISABLED\",impact=\"HIGH\"}";
    assert_eq!(relay.metric(gauge), 1.0);

    // An operator resumes it: ENABLED at SES, and its messages go again.
    assert!(relay.reputation().unwrap().resume("acme").await.unwrap());
    until("ENABLED at SES", async || {
        fake.tenants.tenant("acme").customer == "ENABLED"
    })
    .await;
    let (code, text) = send(&relay, "acme", "x@example.net").await;
    assert_eq!(code, 250, "{text}");
    assert_eq!(
        fake.tenants.tenant("globex").customer,
        "ENABLED",
        "untouched"
    );
    relay.stop().await;
}

/// On tokio's paused clock: once acme's bounces slide out of the guard's window, the guard no
/// longer pauses it, and the next refresh sets it `ENABLED` at SES, with no message needed.
#[tokio::test(start_paused = true)]
async fn a_resume_by_the_window_enables_the_tenant_at_the_next_refresh() {
    let fake = FakeSes::start().await;
    let extra = "window_ms = 3600000\nses_refresh_ms = 600000";
    let relay = start_relay(&fake, "timeout_ms = 3600000", extra).await;
    pause_acme(&relay).await;
    until("DISABLED at SES", async || {
        fake.tenants.tenant("acme").customer == "DISABLED"
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3600)).await;
    until("ENABLED at SES", async || {
        fake.tenants.tenant("acme").customer == "ENABLED"
    })
    .await;
    let update = fake
        .tenants
        .calls("UpdateReputationEntityCustomerManagedStatus");
    let set: Vec<&serde_json::Value> = update.iter().map(|c| &c.body["SendingStatus"]).collect();
    assert_eq!(set, ["DISABLED", "ENABLED"]);
    relay.stop().await;
}

/// On tokio's paused clock: SES disables acme on its own; the relay reads it when acme's
/// first message has gone and pauses acme's messages (`451 4.7.1 ... disabled at SES`) before
/// SES refuses any, while globex goes on; SES enables it again, and acme's messages go after
/// the next read, `ses_refresh_ms` later, not before.
#[tokio::test(start_paused = true)]
async fn a_disabled_aggregate_at_ses_pauses_the_tenants_messages_in_the_relay() {
    let fake = FakeSes::start().await;
    let relay = start_relay(&fake, "timeout_ms = 3600000", "ses_refresh_ms = 600000").await;
    fake.tenants
        .change("acme", |t| t.managed = "DISABLED".into());
    assert_eq!(
        send(&relay, "acme", "a@example.net").await.0,
        250,
        "not read yet"
    );
    until("acme read", async || {
        fake.tenants.count("GetReputationEntity") == 1
    })
    .await;
    until("acme paused", async || {
        send(&relay, "acme", "b@example.net").await.0 == 451
    })
    .await;
    let sent = fake.sent().len();
    let (code, text) = send(&relay, "acme", "c@example.net").await;
    assert_eq!(
        (code, text.as_str()),
        (451, "4.7.1 upstream: SES tenant acme disabled at SES")
    );
    assert_eq!(fake.sent().len(), sent, "SES was not asked");
    assert_eq!(send(&relay, "globex", "d@example.net").await.0, 250);
    fake.tenants
        .change("acme", |t| t.managed = "ENABLED".into());
    tokio::time::sleep(Duration::from_secs(590)).await;
    assert_eq!(
        send(&relay, "acme", "e@example.net").await.0,
        451,
        "not read yet"
    );
    tokio::time::sleep(Duration::from_secs(20)).await;
    until("acme read again", async || {
        fake.tenants.count("GetReputationEntity") >= 3
    })
    .await;
    assert_eq!(send(&relay, "acme", "f@example.net").await.0, 250);
    relay.stop().await;
}

/// Addresses the guard suppresses for acme go on acme's suppression list at SES, with the
/// reason of their event.
#[tokio::test]
async fn a_suppression_is_written_to_ses_with_the_tenant_name() {
    let fake = FakeSes::start().await;
    let relay = start_relay(&fake, "", "").await;
    assert_eq!(send(&relay, "acme", "gone@example.net").await.0, 250);
    assert_eq!(send(&relay, "acme", "angry@example.net").await.0, 250);
    let guard = relay.reputation().unwrap();
    let events = [
        bounce("fake-000001", "f1", "gone@example.net"),
        complaint_notification("fake-000002", "c1", "angry@example.net"),
    ];
    for event in events {
        guard.apply_text(&event).await.unwrap();
    }
    until("both written", async || {
        fake.tenants.count("PutSuppressedDestination") == 2
    })
    .await;
    let mut written: Vec<(String, String, String)> =
        (fake.tenants.calls("PutSuppressedDestination"))
            .into_iter()
            .map(|c| {
                let field = |f: &str| c.body[f].as_str().unwrap_or("").to_string();
                (field("EmailAddress"), field("Reason"), field("TenantName"))
            })
            .collect();
    written.sort();
    assert_eq!(
        written,
        [
            (
                "angry@example.net".into(),
                "COMPLAINT".into(),
                "acme".into()
            ),
            ("gone@example.net".into(), "BOUNCE".into(), "acme".into()),
        ]
    );
    relay.stop().await;
}

/// SES's API failing: messages still go (nothing read means nothing paused by SES's word),
/// the guard's own pause still holds, every failure is counted, and the next refresh writes
/// what failed once SES answers again.
#[tokio::test]
async fn every_ses_failure_fails_open_and_the_next_refresh_tries_again() {
    let fake = FakeSes::start().await;
    for op in [
        "GetTenant",
        "GetReputationEntity",
        "UpdateReputationEntityCustomerManagedStatus",
        "PutSuppressedDestination",
    ] {
        fake.tenants.fail(op, true);
    }
    let relay = start_relay(&fake, "timeout_ms = 2000", "ses_refresh_ms = 300").await;
    pause_acme(&relay).await;
    assert_eq!(send(&relay, "globex", "a@example.net").await.0, 250);
    let failed = |op: &str| {
        relay.metric(&format!(
            "mailsluice_ses_calls_failed_total{{operation=\"{op}\"}}"
        ))
    };
    until("failures counted", async || failed("GetTenant") >= 2.0).await;
    let (code, text) = send(&relay, "globex", "b@example.net").await;
    assert_eq!(code, 250, "fails open: {text}");
    assert_eq!(
        send(&relay, "acme", "c@example.net").await.0,
        451,
        "the guard still pauses"
    );
    assert_eq!(
        fake.tenants.tenant("acme").customer,
        "ENABLED",
        "nothing written yet"
    );
    for op in ["GetTenant", "GetReputationEntity"] {
        fake.tenants.fail(op, false);
    }
    until("the status write tried", async || {
        failed("UpdateReputationEntityCustomerManagedStatus") >= 1.0
            && failed("PutSuppressedDestination") >= 1.0
    })
    .await;
    fake.tenants
        .fail("UpdateReputationEntityCustomerManagedStatus", false);
    fake.tenants.fail("PutSuppressedDestination", false);
    until("written at a later refresh", async || {
        fake.tenants.tenant("acme").customer == "DISABLED"
            && (fake.tenants.calls("PutSuppressedDestination").iter())
                .any(|c| c.body["EmailAddress"] == "gone@example.net" && c.status == 200)
    })
    .await;
    relay.stop().await;
}
