//! SES tenants' sending identities, checked before DATA, against the fake SES's tenant calls
//! (`support::ses_tenants`; moto does not serve them): a tenant learned at its first message,
//! its identities read page by page, cached and read again every `tenant_refresh_ms` (tokio's
//! paused clock), a sender outside them refused at MAIL (or at the dot when the tenant is
//! known only then), a tenant SES does not know named in `/readyz`, and SES's API failing
//! open.

use crate::support::http::get;
use crate::support::relay::{Client, Relay};
use crate::support::ses::{self, FakeSes};
use crate::support::wait::until;

/// A relay whose only upstream is `ses://` at the fake, with `route` as its one route and
/// `upstream_extra` in its `[upstream]` table.
pub(crate) async fn start_relay(fake: &FakeSes, upstream_extra: &str, route: &str) -> Relay {
    let route = format!("[[route]]\nupstream = \"default\"\n{route}");
    ses::relay(fake, upstream_extra, &route).await
}

/// The route of every message to SES tenant `acme`: its tenant is known at MAIL.
pub(crate) const ACME: &str = "ses_tenant = \"acme\"";

/// The route of SES tenant `{X-Tenant}`: its tenant is known only at the final dot.
pub(crate) const BY_HEADER: &str = "key = \"header:X-Tenant\"\nses_tenant = \"{key}\"";

pub(crate) async fn mail_from(relay: &Relay, sender: &str) -> (u16, String) {
    let mut c = Client::connect(relay.addr).await;
    c.cmd("EHLO client.test").await;
    c.cmd(&format!("MAIL FROM:<{sender}>")).await
}

pub(crate) async fn send(relay: &Relay, sender: &str, message: &str) -> (u16, String) {
    let mut c = Client::connect(relay.addr).await;
    c.send_mail(sender, &["to@example.net"], message.as_bytes())
        .await
}

/// The tenant's identities are read once a message of its comes (that one goes unchecked).
async fn learned(relay: &Relay, fake: &FakeSes) {
    assert_eq!(
        send(relay, "first@acme.example", "Subject: 1\r\n\r\nx\r\n")
            .await
            .0,
        250
    );
    until("the tenant's identities read", async || {
        fake.tenants.count("ListTenantResources") >= 1
            && mail_from(relay, "probe@globex.example").await.0 == 550
    })
    .await;
}

#[tokio::test]
async fn a_sender_that_is_no_identity_of_its_tenant_is_refused_at_mail() {
    let fake = FakeSes::start().await;
    // Five identities: three pages of two; the last is on the last page.
    let ids = [
        "a.example",
        "b.example",
        "billing@shared.example",
        "d.example",
        "acme.example",
    ];
    fake.tenants.add("acme", &ids);
    let relay = start_relay(&fake, "", ACME).await;
    learned(&relay, &fake).await;
    let (code, text) = mail_from(&relay, "ceo@Globex.example").await;
    assert_eq!(
        (code, text.as_str()),
        (
            550,
            "5.7.1 globex.example is not a sending identity of SES tenant acme"
        )
    );
    assert_eq!(mail_from(&relay, "other@shared.example").await.0, 550);
    for allowed in [
        "x@ACME.example",
        "x@mail.acme.example",
        "billing@shared.example",
    ] {
        let (code, text) = mail_from(&relay, allowed).await;
        assert_eq!(code, 250, "{allowed}: {text}");
    }
    let sent = fake.sent();
    assert_eq!(sent.len(), 1, "only the first message went to SES");
    let pages = fake.tenants.calls("ListTenantResources");
    assert_eq!(pages[0].body["TenantName"], "acme");
    assert_eq!(pages[0].body["Filter"]["RESOURCE_TYPE"], "EMAIL_IDENTITY");
    let tokens: Vec<&serde_json::Value> =
        pages.iter().take(3).map(|p| &p.body["NextToken"]).collect();
    assert_eq!(
        tokens,
        [
            &serde_json::Value::Null,
            &serde_json::json!("2"),
            &serde_json::json!("4")
        ],
        "every page read"
    );
    relay.stop().await;
}

/// A tenant chosen by a header is known only at the final dot: the same refusal comes there,
/// and nothing goes to SES. A null sender's `From:` is what SES would judge.
#[tokio::test]
async fn a_tenant_known_only_at_the_dot_refuses_there_and_nothing_goes() {
    let fake = FakeSes::start().await;
    fake.tenants.add("acme", &["acme.example"]);
    let relay = start_relay(&fake, "", BY_HEADER).await;
    let acme = |subject: &str| {
        format!("X-Tenant: acme\r\nFrom: x@acme.example\r\nSubject: {subject}\r\n\r\nx\r\n")
    };
    assert_eq!(send(&relay, "a@acme.example", &acme("first")).await.0, 250);
    // Until the tenant is learned, a probe goes unchecked (and is sent).
    until("the tenant's identities read", async || {
        send(&relay, "ceo@globex.example", &acme("probe")).await.0 == 550
    })
    .await;
    let sent = fake.sent().len();
    let (code, text) = send(&relay, "ceo@globex.example", &acme("refused")).await;
    assert_eq!(
        (code, text.as_str()),
        (
            550,
            "5.7.1 globex.example is not a sending identity of SES tenant acme"
        )
    );
    let bounce = "X-Tenant: acme\r\nFrom: ceo@globex.example\r\nSubject: bounce\r\n\r\nx\r\n";
    let (code, text) = send(&relay, "", bounce).await;
    assert_eq!(code, 550, "the null sender's From: {text}");
    assert_eq!(fake.sent().len(), sent, "nothing of either went to SES");
    assert_eq!(send(&relay, "", &acme("bounce")).await.0, 250);
    assert_eq!(fake.sent().len(), sent + 1);
    relay.stop().await;
}

/// A tenant SES does not know: `451 4.3.5`, and `/readyz` names it (without changing whether
/// it is ready).
#[tokio::test]
async fn a_tenant_unknown_to_ses_gets_451_and_readyz_names_it() {
    let fake = FakeSes::start().await;
    let relay = start_relay(&fake, "", "ses_tenant = \"ghost\"").await;
    let admin = relay.start_admin().await;
    assert_eq!(
        mail_from(&relay, "a@acme.example").await.0,
        250,
        "not known yet"
    );
    until("the tenant found unknown", async || {
        mail_from(&relay, "a@acme.example").await.0 == 451
    })
    .await;
    let (code, text) = mail_from(&relay, "a@acme.example").await;
    assert_eq!(
        (code, text.as_str()),
        (451, "4.3.5 SES tenant ghost unknown to SES")
    );
    let (status, body) = get(admin, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    let upstream = &json["upstreams"]["default"];
    assert_eq!(
        upstream["unknown_tenants"],
        serde_json::json!(["ghost"]),
        "{body}"
    );
    let detail = upstream["detail"].as_str().unwrap();
    assert!(
        detail.contains("SES tenants unknown to SES: ghost"),
        "{detail}"
    );
    let (_, page) = get(admin, "/").await;
    assert!(
        page.contains("unknown to SES: ghost"),
        "status page: {page}"
    );
    relay.stop().await;
}

/// On tokio's paused clock: a tenant's identities are read once and then taken from the cache
/// however many messages come, read again `tenant_refresh_ms` later (not sooner), and an
/// identity SES associated since is taken after that read. A refused sender asks for one
/// early read, at most one a minute.
#[tokio::test(start_paused = true)]
async fn identities_are_cached_and_read_again_every_refresh() {
    use std::time::Duration;
    let fake = FakeSes::start().await;
    fake.tenants.add("acme", &["acme.example"]);
    let relay = start_relay(
        &fake,
        "timeout_ms = 3600000\ntenant_refresh_ms = 600000",
        ACME,
    )
    .await;
    let reads = || fake.tenants.count("ListTenantResources");
    assert_eq!(
        send(&relay, "first@acme.example", "Subject: 1\r\n\r\nx\r\n")
            .await
            .0,
        250
    );
    until("the first read", async || reads() == 1).await;
    for _ in 0..5 {
        assert_eq!(mail_from(&relay, "a@acme.example").await.0, 250);
    }
    assert_eq!(reads(), 1, "cached");
    // A miss: one early read, then none within the minute.
    assert_eq!(mail_from(&relay, "a@new.example").await.0, 550);
    until("the early read", async || reads() == 2).await;
    assert_eq!(mail_from(&relay, "a@new.example").await.0, 550);
    tokio::time::sleep(Duration::from_secs(50)).await;
    assert_eq!(reads(), 2, "at most one early read a minute");
    fake.tenants
        .change("acme", |t| t.identities.push("new.example".into()));
    // The next refresh: 600 s after the last read, not sooner.
    tokio::time::sleep(Duration::from_secs(600 - 50 - 5)).await;
    assert_eq!(reads(), 2, "not before the refresh");
    tokio::time::sleep(Duration::from_secs(10)).await;
    until("the refresh", async || reads() >= 3).await;
    until("the new identity taken", async || {
        mail_from(&relay, "a@new.example").await.0 == 250
    })
    .await;
    relay.stop().await;
}

/// SES's API failing (500s, or no answer within `timeout_ms`): every sender goes, for SES to
/// judge, and the failures are counted.
#[tokio::test]
async fn an_ses_api_failing_fails_open_and_is_counted() {
    let fake = FakeSes::start().await;
    fake.tenants.add("acme", &["acme.example"]);
    fake.tenants.fail("ListTenantResources", true);
    let relay = start_relay(&fake, "timeout_ms = 300", ACME).await;
    assert_eq!(
        send(&relay, "first@acme.example", "Subject: 1\r\n\r\nx\r\n")
            .await
            .0,
        250
    );
    until("the failed read counted", async || {
        relay.metric("mailsluice_ses_calls_failed_total{operation=\"ListTenantResources\"}") >= 1.0
    })
    .await;
    let (code, text) = send(&relay, "ceo@globex.example", "Subject: 2\r\n\r\nx\r\n").await;
    assert_eq!(code, 250, "fails open: {text}");
    assert!(relay.metric("mailsluice_ses_identity_unchecked_total") >= 2.0);
    assert_eq!(fake.sent().len(), 2);
    relay.stop().await;

    // No answer at all: the call's timeout ends it, and the message still goes.
    let fake = FakeSes::start().await;
    fake.tenants.add("acme", &["acme.example"]);
    fake.tenants.open(false);
    let stalled = start_relay(&fake, "timeout_ms = 300", ACME).await;
    let relay = stalled;
    assert_eq!(
        send(&relay, "first@acme.example", "Subject: 1\r\n\r\nx\r\n")
            .await
            .0,
        250
    );
    until("the stalled read timed out", async || {
        relay.metric("mailsluice_ses_calls_failed_total{operation=\"ListTenantResources\"}") >= 1.0
    })
    .await;
    assert_eq!(
        send(&relay, "ceo@globex.example", "Subject: 2\r\n\r\nx\r\n")
            .await
            .0,
        250
    );
    relay.stop().await;
}

/// Many tenants learned at once (their first messages waiting for them): at most 4 calls to
/// SES's API in flight, the rest wait.
#[tokio::test]
async fn tenant_reads_are_bounded_in_calls_at_once() {
    let fake = FakeSes::start().await;
    let names: Vec<String> = (0..10).map(|i| format!("t{i}")).collect();
    for name in &names {
        fake.tenants.add(name, &["acme.example"]);
    }
    fake.tenants.open(false);
    let relay = start_relay(&fake, "", BY_HEADER).await;
    let addr = relay.addr;
    let sends: Vec<_> = (names.iter())
        .map(|name| {
            let message = format!("X-Tenant: {name}\r\nSubject: 1\r\n\r\nx\r\n");
            tokio::spawn(async move {
                let mut c = Client::connect(addr).await;
                c.send_mail("a@acme.example", &["to@example.net"], message.as_bytes())
                    .await
            })
        })
        .collect();
    until("four reads in flight", async || {
        fake.tenants.in_flight() == 4
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(fake.tenants.in_flight(), 4, "no more than four at once");
    fake.tenants.open(true);
    for sent in sends {
        assert_eq!(sent.await.unwrap().0, 250);
    }
    until("every tenant read", async || {
        fake.tenants.count("ListTenantResources") == 10
    })
    .await;
    assert_eq!(fake.tenants.most_in_flight(), 4);
    relay.stop().await;
}

/// On tokio's paused clock: an identity SES no longer associates with the tenant is taken
/// until the next refresh (the cache), and refused after it: a refresh replaces the
/// identities it read, it does not add to them.
#[tokio::test(start_paused = true)]
async fn an_identity_revoked_at_ses_is_refused_after_the_next_refresh() {
    use std::time::Duration;
    let fake = FakeSes::start().await;
    fake.tenants.add("acme", &["acme.example", "old.example"]);
    let relay = start_relay(
        &fake,
        "timeout_ms = 3600000\ntenant_refresh_ms = 600000",
        ACME,
    )
    .await;
    let reads = || fake.tenants.count("ListTenantResources");
    let first = send(&relay, "first@acme.example", "Subject: 1\r\n\r\nx\r\n").await;
    assert_eq!(first.0, 250);
    until("the first read", async || reads() == 1).await;
    assert_eq!(mail_from(&relay, "a@old.example").await.0, 250);
    fake.tenants
        .change("acme", |t| t.identities.retain(|i| i != "old.example"));
    assert_eq!(mail_from(&relay, "a@old.example").await.0, 250, "cached");
    tokio::time::sleep(Duration::from_secs(600 + 5)).await;
    until("the refresh", async || reads() >= 2).await;
    until("the revoked identity refused", async || {
        mail_from(&relay, "a@old.example").await.0 == 550
    })
    .await;
    let (code, text) = mail_from(&relay, "a@old.example").await;
    assert_eq!(
        (code, text.as_str()),
        (
            550,
            "5.7.1 old.example is not a sending identity of SES tenant acme"
        )
    );
    assert_eq!(mail_from(&relay, "a@acme.example").await.0, 250);
    relay.stop().await;
}
