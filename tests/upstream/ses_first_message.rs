//! SES tenants known before their first message, each test on a freshly started relay against
//! the fake SES (`support::ses_tenants`): the account's tenants listed at start, a tenant not
//! yet known read while its first message waits at the final dot (one read for every message
//! of the tenant meanwhile), SES's API down failing open, SES's own answers for a tenant gone
//! or an identity dropped since the last read given the check's words, and a tenant name SES
//! would not take as it is refused rather than reduced into another's.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::support::relay::Client;
use crate::support::ses::FakeSes;
use crate::support::wait::until;

use super::ses_tenants::{mail_from, send, start_relay, ACME, BY_HEADER};

const GLOBEX: &str = "Subject: first\r\n\r\nx\r\n";

/// The very first message of tenant `acme` (named only at the final dot), from a sender that
/// is none of its identities: refused with the check's words, and nothing goes to SES.
#[tokio::test]
async fn a_tenant_s_first_message_from_a_foreign_sender_is_refused_and_nothing_goes() {
    let fake = FakeSes::start().await;
    fake.tenants.add("acme", &["acme.example"]);
    let relay = start_relay(&fake, "", BY_HEADER).await;
    let message = "X-Tenant: acme\r\nSubject: first\r\n\r\nx\r\n";
    let (code, text) = send(&relay, "ceo@globex.example", message).await;
    assert_eq!(
        (code, text.as_str()),
        (
            550,
            "5.7.1 globex.example is not a sending identity of SES tenant acme"
        )
    );
    assert!(fake.sent().is_empty(), "nothing sent to SES");
    relay.stop().await;
}

/// The very first message of a tenant SES does not know, named only at the final dot: it
/// waits there for the tenant's read, and gets `451 4.3.5`; nothing sent.
#[tokio::test]
async fn an_unknown_tenant_s_first_message_gets_451() {
    let fake = FakeSes::start().await;
    let relay = start_relay(&fake, "", BY_HEADER).await;
    let message = "X-Tenant: nope\r\nSubject: s\r\n\r\nx\r\n";
    let (code, text) = send(&relay, "a@acme.example", message).await;
    assert_eq!(
        (code, text.as_str()),
        (451, "4.3.5 SES tenant nope unknown to SES")
    );
    assert!(fake.sent().is_empty());
    relay.stop().await;
}

/// At start, before any message, the account's tenants are listed (every page) and each one's
/// identities read: a sender of one is then judged at `MAIL` from what was read.
#[tokio::test]
async fn the_account_s_tenants_are_listed_and_read_at_start() {
    let fake = FakeSes::start().await;
    for tenant in ["acme", "beta", "gamma"] {
        fake.tenants.add(tenant, &[&format!("{tenant}.example")]);
    }
    let relay = start_relay(&fake, "", ACME).await;
    until("every tenant read", async || {
        fake.tenants.count("ListTenantResources") == 3
    })
    .await;
    let pages = fake.tenants.calls("ListTenants");
    let tokens: Vec<&serde_json::Value> = pages.iter().map(|p| &p.body["NextToken"]).collect();
    assert_eq!(tokens, [&serde_json::Value::Null, &serde_json::json!("2")]);
    let mut read: Vec<String> = (fake.tenants.calls("ListTenantResources").into_iter())
        .map(|c| c.target)
        .collect();
    read.sort();
    assert_eq!(read, ["acme", "beta", "gamma"]);
    let (code, text) = mail_from(&relay, "ceo@globex.example").await;
    assert_eq!(code, 550, "{text}");
    assert_eq!(
        fake.tenants.count("ListTenantResources"),
        3,
        "from the cache"
    );
    relay.stop().await;
}

/// A tenant made at SES after the relay listed the account's tenants: ten of its messages
/// arriving at once all wait for one read of it (none goes unchecked), and go.
#[tokio::test]
async fn ten_messages_of_a_new_tenant_at_once_cause_one_read() {
    let fake = FakeSes::start().await;
    let relay = start_relay(&fake, "", BY_HEADER).await;
    until("the account's tenants listed", async || {
        fake.tenants.count("ListTenants") >= 1
    })
    .await;
    fake.tenants.add("newco", &["newco.example"]);
    fake.tenants.open(false);
    let (addr, dots) = (relay.addr, Arc::new(AtomicUsize::new(0)));
    let sends: Vec<_> = (0..10)
        .map(|_| {
            let dots = dots.clone();
            tokio::spawn(async move {
                let mut c = Client::connect(addr).await;
                for (line, code) in [
                    ("EHLO client.test", 250),
                    ("MAIL FROM:<a@newco.example>", 250),
                    ("RCPT TO:<to@example.net>", 250),
                    ("DATA", 354),
                ] {
                    assert_eq!(c.cmd(line).await.0, code, "{line}");
                }
                c.send(b"X-Tenant: newco\r\nSubject: s\r\n\r\nx\r\n.\r\n")
                    .await;
                dots.fetch_add(1, Ordering::SeqCst);
                c.reply().await
            })
        })
        .collect();
    until("ten messages ended, one read out", async || {
        dots.load(Ordering::SeqCst) == 10 && fake.tenants.in_flight() >= 1
    })
    .await;
    fake.tenants.open(true);
    for sent in sends {
        let (code, text) = sent.await.unwrap();
        assert_eq!(code, 250, "{text}");
    }
    let reads = fake.tenants.calls("ListTenantResources");
    assert_eq!(reads.len(), 1, "one read: {reads:?}");
    assert_eq!(reads[0].target, "newco");
    assert_eq!(relay.metric("mailsluice_ses_identity_unchecked_total"), 0.0);
    assert_eq!(fake.sent().len(), 10);
    relay.stop().await;
}

/// SES's API down from the start (the list and the reads fail): the first message goes, for
/// SES to judge, and is counted.
#[tokio::test]
async fn with_ses_s_api_down_the_first_message_goes_and_is_counted() {
    let fake = FakeSes::start().await;
    fake.tenants.add("acme", &["acme.example"]);
    fake.tenants.fail("ListTenants", true);
    fake.tenants.fail("ListTenantResources", true);
    let relay = start_relay(&fake, "", ACME).await;
    let (code, text) = send(&relay, "ceo@globex.example", GLOBEX).await;
    assert_eq!(code, 250, "fails open: {text}");
    assert_eq!(fake.sent().len(), 1);
    assert!(relay.metric("mailsluice_ses_identity_unchecked_total") >= 1.0);
    assert!(
        relay.metric("mailsluice_ses_calls_failed_total{operation=\"ListTenantResources\"}") >= 1.0
    );
    until("the failed list counted", async || {
        relay.metric("mailsluice_ses_calls_failed_total{operation=\"ListTenants\"}") >= 1.0
    })
    .await;
    relay.stop().await;
}

/// What the relay read is out of date (a tenant deleted, an identity dropped since): SES's own
/// refusals get the check's codes and words, and the tenant is read again, so the next
/// message is refused before it goes.
#[tokio::test]
async fn ses_s_own_answers_for_a_tenant_gone_or_an_identity_dropped_are_mapped() {
    let fake = FakeSes::start().await;
    fake.judge_tenants(true);
    fake.tenants.add("acme", &["acme.example"]);
    fake.tenants.add("beta", &["beta.example"]);
    let relay = start_relay(&fake, "", BY_HEADER).await;
    let message = |tenant: &str| format!("X-Tenant: {tenant}\r\nSubject: s\r\n\r\nx\r\n");
    assert_eq!(
        send(&relay, "a@acme.example", &message("acme")).await.0,
        250
    );
    assert_eq!(
        send(&relay, "b@beta.example", &message("beta")).await.0,
        250
    );

    fake.tenants.remove("acme");
    let (code, text) = send(&relay, "a@acme.example", &message("acme")).await;
    assert_eq!(
        (code, text.as_str()),
        (451, "4.3.5 upstream: SES tenant acme unknown to SES")
    );
    until("acme read again", async || {
        send(&relay, "a@acme.example", &message("acme")).await
            == (451, "4.3.5 SES tenant acme unknown to SES".into())
    })
    .await;

    fake.tenants.change("beta", |t| t.identities.clear());
    let (code, text) = send(&relay, "b@beta.example", &message("beta")).await;
    assert_eq!(
        (code, text.as_str()),
        (
            550,
            "5.7.1 upstream: beta.example is not a sending identity of SES tenant beta"
        )
    );
    until("beta read again", async || {
        send(&relay, "b@beta.example", &message("beta")).await
            == (
                550,
                "5.7.1 beta.example is not a sending identity of SES tenant beta".into(),
            )
    })
    .await;
    assert_eq!(fake.sent().len(), 2, "only the first two went");
    relay.stop().await;
}

/// `X-Tenant: a/b` and `a.b` would both be SES tenant `a_b` once reduced to SES's alphabet:
/// each is refused (`451 4.3.5`) rather than sent as `a_b`, which is another tenant's name.
#[tokio::test]
async fn a_tenant_name_ses_does_not_take_as_it_is_is_refused_not_merged() {
    let fake = FakeSes::start().await;
    fake.tenants.add("a_b", &["acme.example"]);
    let relay = start_relay(&fake, "", BY_HEADER).await;
    for tenant in ["a/b", "a.b"] {
        let message = format!("X-Tenant: {tenant}\r\nSubject: s\r\n\r\nx\r\n");
        let (code, text) = send(&relay, "a@acme.example", &message).await;
        assert_eq!(
            (code, text.as_str()),
            (
                451,
                format!(
                    "4.3.5 SES tenant name {tenant} is not one SES takes (A-Z a-z 0-9 _ -, at \
                     most 64)"
                )
                .as_str()
            )
        );
    }
    let long = "t".repeat(65);
    let message = format!("X-Tenant: {long}\r\nSubject: s\r\n\r\nx\r\n");
    assert_eq!(send(&relay, "a@acme.example", &message).await.0, 451);
    assert!(fake.sent().is_empty(), "nothing went as a_b");
    let message = "X-Tenant: a_b\r\nSubject: s\r\n\r\nx\r\n";
    assert_eq!(send(&relay, "a@acme.example", message).await.0, 250);
    let sent = fake.sent();
    assert_eq!(sent[0].tenant.as_deref(), Some("a_b"));
    relay.stop().await;
}
