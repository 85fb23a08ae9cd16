//! `ses://` against a fake SESv2 endpoint in this process (`support::ses`) and, when it is
//! installed, moto's server (`support::moto`): the envelope and the raw bytes as SES gets
//! them, SES's header conventions as API fields, every row of SES's answers table, tenants
//! paused alone, SES's hidden rate learned by an adaptive layer, "uncertain" and
//! "unavailable" told apart, and `GetAccount` for readiness.

use std::collections::HashSet;

use crate::envelope;
use crate::support::config::TestConfig;
use crate::support::memory::subject_of;
use crate::support::relay::{Client, Relay};
use crate::support::ses::{self, forwarder, FakeSes, Mode, GOOD_KEY};
use crate::support::upstream::refusing_addr;
use crate::support::wait::until;
use mailsluice::upstream::{Account, Forwarder, UpstreamError};

/// A relay whose only upstream is `ses://` at the fake, routed by `X-Tenant` with the route
/// keys of an SES SMTP setup, plus `rest`. SES knows the tenants the tests send as.
async fn relay(fake: &FakeSes, upstream_extra: &str, rest: &str) -> Relay {
    for tenant in ["acme", "globex"] {
        fake.tenants.add(tenant, &["example.com"]);
    }
    let route = "[[route]]\nkey = \"header:X-Tenant\"\nupstream = \"default\"\nses_tenant = \"{key}\"\n\
                 add_headers = { \"X-SES-CONFIGURATION-SET\" = \"tenant-{key}\", \"X-SES-MESSAGE-TAGS\" = \"tenant={key}\" }\n";
    let upstream = format!("timeout_ms = 5000\n{upstream_extra}");
    ses::relay(fake, &upstream, &format!("{route}{rest}")).await
}

async fn send(relay: &Relay, tenant: &str, subject: &str) -> (u16, String) {
    let msg = format!("X-Tenant: {tenant}\r\nSubject: {subject}\r\n\r\nbody\r\n");
    let mut c = Client::connect(relay.addr).await;
    c.send_mail("app@example.com", &["to@example.net"], msg.as_bytes())
        .await
}

#[tokio::test]
async fn the_envelope_is_the_destination_and_ses_fields_become_api_fields() {
    let fake = FakeSes::start().await;
    let relay = relay(&fake, "", "").await;
    let msg = b"X-Tenant: acme\r\nTo: header-only@example.org\r\n\
                X-SES-MESSAGE-TAGS: client=forged\r\nSubject: hi\r\n\r\n..dot line\r\n";
    let mut c = Client::connect(relay.addr).await;
    let rcpts = ["to@example.net", "bcc@example.net"];
    let (code, text) = c.send_mail("app@example.com", &rcpts, msg).await;
    assert_eq!(code, 250, "{text}");
    assert!(
        text.contains("fake-000001"),
        "SES's MessageId in the 250: {text}"
    );
    let (code, _) = c
        .send_mail("", &["to@example.net"], b"X-Tenant: acme\r\n\r\nbounce\r\n")
        .await;
    assert_eq!(code, 250);
    let sent = fake.sent();
    let first = &sent[0];
    assert_eq!(
        first.to, rcpts,
        "exactly the envelope, Bcc included, never the To: field"
    );
    assert_eq!(first.from.as_deref(), Some("app@example.com"));
    assert_eq!(
        sent[1].from, None,
        "the null sender leaves FromEmailAddress out"
    );
    assert_eq!(first.tenant.as_deref(), Some("acme"));
    assert_eq!(first.configuration_set.as_deref(), Some("tenant-acme"));
    assert_eq!(first.tags, [("tenant".to_string(), "acme".to_string())]);
    let raw = String::from_utf8(first.raw.clone()).unwrap();
    assert!(raw.starts_with("Received: from "), "{raw}");
    for gone in ["X-SES-", "X-Tenant", "client=forged"] {
        assert!(!raw.contains(gone), "{gone} left in: {raw}");
    }
    assert!(
        raw.ends_with("Subject: hi\r\n\r\n.dot line\r\n"),
        "not dot-stuffed: {raw}"
    );
}

#[tokio::test]
async fn each_ses_answer_gets_its_pinned_reply() {
    let fake = FakeSes::start().await;
    let relay = relay(&fake, "", "").await;
    for (status, kind, text, reply) in [
        (
            400,
            "MessageRejected",
            "Email address is not verified.",
            "554 5.6.0",
        ),
        (400, "BadRequestException", "Invalid tag.", "554 5.6.0"),
        (
            400,
            "MailFromDomainNotVerifiedException",
            "MAIL FROM not verified.",
            "550 5.7.1",
        ),
        (403, "AccessDeniedException", "not authorized", "451 4.7.0"),
        (403, "SignatureDoesNotMatch", "bad signature", "451 4.7.0"),
        (
            503,
            "ServiceUnavailable",
            "Service is unavailable.",
            "451 4.4.1",
        ),
        (500, "InternalFailure", "Internal failure.", "451 4.4.1"),
    ] {
        fake.fail_with(Some((status, kind, text)));
        let (code, got) = send(&relay, "acme", kind).await;
        let got = format!("{code} {got}");
        assert!(got.starts_with(reply), "{kind}: {got}");
        if !reply.starts_with("451 4.7.0") {
            assert!(got.contains(text), "SES's text passed on: {got}");
        }
    }
    assert!(fake.sent().is_empty());
}

#[tokio::test]
async fn quota_and_account_pause_pause_the_upstream_and_nothing_more_goes() {
    for (kind, text) in [
        ("LimitExceededException", "Daily message quota exceeded."),
        (
            "SendingPausedException",
            "Sending is paused for this account.",
        ),
        ("AccountSuspendedException", "Account suspended."),
    ] {
        let fake = FakeSes::start().await;
        // No route to a tenant: the account's answer.
        let text_cfg = TestConfig::new()
            .then(&format!("[upstream]\n{}", fake.upstream_toml("")))
            .text();
        let relay = Relay::start(&text_cfg, forwarder(&text_cfg, GOOD_KEY)).await;
        fake.fail_with(Some((400, kind, text)));
        let (code, got) = send(&relay, "acme", "first").await;
        assert_eq!(code, 451, "{kind}: {got}");
        assert!(
            got.starts_with("4.7.1 Upstream sending quota exhausted"),
            "{kind}: {got}"
        );
        fake.fail_with(None);
        let (code, got) = send(&relay, "acme", "second").await;
        assert_eq!((code, fake.requests()), (451, 1), "paused: {got}");
    }
}

#[tokio::test]
async fn a_paused_tenant_alone_is_held_and_a_probe_resumes_it() {
    let fake = FakeSes::start().await;
    let relay = relay(&fake, "quota_pause_ms = 2000\n", "").await;
    fake.pause_tenant("acme", true);
    let (code, text) = send(&relay, "acme", "a1").await;
    assert_eq!(code, 451, "{text}");
    assert!(
        text.starts_with("4.7.1") && text.contains("SES tenant acme paused"),
        "{text}"
    );
    let (code, text) = send(&relay, "acme", "a2").await;
    assert_eq!(
        (code, fake.requests()),
        (451, 1),
        "held without asking SES: {text}"
    );
    let (code, text) = send(&relay, "globex", "g1").await;
    assert_eq!(code, 250, "another tenant goes on: {text}");
    fake.pause_tenant("acme", false);
    until("the probe resumes acme", async || {
        send(&relay, "acme", "a3").await.0 == 250
    })
    .await;
    let tenants: Vec<_> = fake
        .sent()
        .iter()
        .map(|s| s.tenant.clone().unwrap())
        .collect();
    assert_eq!(tenants, ["globex", "acme"]);
    assert_eq!(send(&relay, "acme", "a4").await.0, 250);
}

/// The SMTP path's hidden-rate test over TCP, against SES's API: 60 messages at once, SES at a
/// hidden 20 recipients a second, the relay's adaptive layer at 40.
#[tokio::test]
async fn ses_429_is_absorbed_and_the_adaptive_layer_learns_the_hidden_rate() {
    let fake = FakeSes::start().await;
    fake.set_hidden_rate(Some(20));
    let layer = "[[throttle]]\nname = \"account\"\nkey = \"none\"\ncost = \"recipients\"\n\
                 limit = 40\ninterval_ms = 1000\nmax_wait_ms = 60000\n";
    let relay = relay(&fake, "pool_size = 16\n", layer).await;
    let tasks: Vec<_> = (0..60)
        .map(|i| {
            let addr = relay.addr;
            tokio::spawn(async move {
                let mut c = Client::connect(addr).await;
                let msg = format!("Subject: t{i}\r\n\r\nbody\r\n");
                c.send_mail("a@example.com", &["b@example.net"], msg.as_bytes())
                    .await
            })
        })
        .collect();
    for t in tasks {
        let (code, text) = t.await.unwrap();
        assert_eq!(code, 250, "{text}");
    }
    let subjects: HashSet<String> = fake.sent().iter().map(|m| subject_of(&m.raw)).collect();
    assert_eq!(
        (fake.sent().len(), subjects.len()),
        (60, 60),
        "each message once"
    );
    assert!(fake.rate_refusals() > 0, "SES throttled");
    assert!(relay.throttle.effective_limit(0).unwrap() < 40);
}

fn upstream(fake_url: &str, extra: &str) -> String {
    TestConfig::new()
        .upstream("ses://eu-west-1")
        .then(&format!("endpoint_url = \"{fake_url}\""))
        .then(extra)
        .text()
}

#[tokio::test]
async fn no_answer_after_the_request_was_read_is_uncertain_and_before_unavailable() {
    let fake = FakeSes::start().await;
    let ses = forwarder(&upstream(&fake.url(), "timeout_ms = 1000"), GOOD_KEY);
    let env = envelope(Some("a@example.com"), &["b@example.net"]);
    fake.set_mode(Mode::StallAfterRead);
    let err = ses
        .forward(&env, b"Subject: x\r\n\r\nx\r\n")
        .await
        .unwrap_err();
    assert!(matches!(err, UpstreamError::Uncertain(_)), "{err:?}");
    assert_eq!(fake.read_whole(), 1);
    // Reset once the head is read: most of a large body never left.
    fake.set_mode(Mode::ResetBeforeBody);
    let patient = forwarder(&upstream(&fake.url(), "timeout_ms = 60000"), GOOD_KEY);
    let big = vec![b'a'; 24 * 1024 * 1024];
    let err = patient.forward(&env, &big).await.unwrap_err();
    assert!(matches!(err, UpstreamError::Unavailable(_)), "{err:?}");
    assert_eq!((fake.requests(), fake.read_whole()), (2, 1));
    // Nothing listening.
    let refusing = refusing_addr();
    let closed = forwarder(
        &upstream(&format!("http://{}", refusing.addr()), ""),
        GOOD_KEY,
    );
    let err = closed
        .forward(&env, b"Subject: x\r\n\r\nx\r\n")
        .await
        .unwrap_err();
    assert!(matches!(err, UpstreamError::Unavailable(_)), "{err:?}");
}

#[tokio::test]
async fn readiness_asks_get_account_with_the_relays_credentials() {
    let fake = FakeSes::start().await;
    let text = upstream(&fake.url(), "");
    assert_eq!(
        forwarder(&text, GOOD_KEY).check().await,
        Ok(Some(
            "SendingEnabled true, EnforcementStatus HEALTHY".into()
        ))
    );
    let bad = forwarder(&text, "AKIDWRONG").check().await.unwrap_err();
    assert!(bad.0.contains("UnrecognizedClientException"), "{bad}");
    let env = envelope(Some("a@example.com"), &["b@example.net"]);
    let refused = forwarder(&text, "AKIDWRONG")
        .forward(&env, b"\r\nx\r\n")
        .await;
    assert!(
        matches!(refused, Err(UpstreamError::Credentials(_))),
        "{refused:?}"
    );
    fake.set_account(14.0, false);
    let disabled = forwarder(&text, GOOD_KEY).check().await.unwrap_err();
    assert!(
        disabled
            .0
            .contains("SendingEnabled false, EnforcementStatus SHUTDOWN"),
        "{disabled}"
    );
    assert!(fake.sent().is_empty(), "readiness sends nothing");
}

/// The real SDK against moto's server: an identity made and verified, a raw message with a
/// Bcc recipient through the relay over SMTP, and what moto stored.
#[tokio::test]
async fn through_the_relay_to_motos_ses_with_bcc_and_the_fields_removed() {
    let Some(moto) = crate::support::moto::MotoServer::spawn().await else {
        return;
    };
    let text = TestConfig::new()
        .upstream("ses://us-east-1")
        .then(&format!("endpoint_url = \"{}\"", moto.url()))
        .then(
            "[[route]]\nupstream = \"default\"\n\
             add_headers = { \"X-SES-CONFIGURATION-SET\" = \"relay\" }",
        )
        .text();
    let ses = forwarder(&text, GOOD_KEY);
    let sdk = sdk_client(&moto.url()).await;
    sdk.create_email_identity()
        .email_identity("example.com")
        .send()
        .await
        .unwrap();
    let relay = Relay::start(&text, ses).await;
    let mut c = Client::connect(relay.addr).await;
    let msg = b"From: app@example.com\r\nTo: to@example.net\r\nSubject: moto\r\n\r\nbody\r\n";
    let (code, reply) = c
        .send_mail(
            "app@example.com",
            &["to@example.net", "bcc@example.org"],
            msg,
        )
        .await;
    assert_eq!(code, 250, "{reply}");
    let stored = moto.stored().await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    let one = &stored[0];
    assert_eq!(one.source, "app@example.com");
    assert!(
        reply.contains(&one_id(&moto).await),
        "moto's MessageId in {reply}"
    );
    for rcpt in ["to@example.net", "bcc@example.org"] {
        assert!(
            one.destinations.iter().any(|d| d == rcpt),
            "{rcpt}: {one:?}"
        );
    }
    assert!(one.raw.starts_with("Received: from "), "{}", one.raw);
    assert!(!one.raw.contains("X-SES-"), "{}", one.raw);
    assert!(!one.raw.contains("bcc@example.org"), "{}", one.raw);
}

async fn one_id(moto: &crate::support::moto::MotoServer) -> String {
    let data = crate::support::http::get(
        format!("127.0.0.1:{}", moto.port).parse().unwrap(),
        "/moto-api/data.json",
    )
    .await
    .1;
    let json: serde_json::Value = serde_json::from_str(&data).unwrap();
    json["ses"]["RawMessage"][0]["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The SDK itself, for what the relay does not do (making an identity).
async fn sdk_client(url: &str) -> aws_sdk_sesv2::Client {
    let credentials =
        aws_sdk_sesv2::config::Credentials::new(GOOD_KEY, "secret", None, None, "test");
    let config = aws_sdk_sesv2::Config::builder()
        .behavior_version(aws_sdk_sesv2::config::BehaviorVersion::latest())
        .region(aws_sdk_sesv2::config::Region::new("us-east-1"))
        .endpoint_url(url)
        .credentials_provider(credentials)
        .build();
    aws_sdk_sesv2::Client::from_conf(config)
}

/// SES's 40 MB at `MAIL ... SIZE=` when every route goes to SES, in EHLO too; at the final dot
/// (the forwarder's own check, a unit test) when routes mix kinds.
#[tokio::test]
async fn ses_forty_megabytes_are_refused_at_mail_when_the_route_is_known() {
    let fake = FakeSes::start().await;
    let forty = 40 * 1024 * 1024;
    let text = TestConfig::new()
        .smtp("max_message_bytes = 60000000")
        .then(&format!("[upstream]\n{}", fake.upstream_toml("")))
        .text();
    let relay = Relay::start(&text, forwarder(&text, GOOD_KEY)).await;
    let mut c = Client::connect(relay.addr).await;
    let (_, ehlo) = c.cmd("EHLO client.test").await;
    assert!(ehlo.contains(&format!("SIZE {forty}")), "{ehlo}");
    let (code, text) = c
        .cmd(&format!("MAIL FROM:<a@example.com> SIZE={}", forty + 1))
        .await;
    assert_eq!(code, 552, "{text}");
    assert!(text.starts_with("5.3.4"), "{text}");
    assert_eq!(
        c.cmd(&format!("MAIL FROM:<a@example.com> SIZE={forty}"))
            .await
            .0,
        250
    );
    // One route to SES, one to a directory: the bound waits for the final dot.
    let mixed = TestConfig::new()
        .smtp("max_message_bytes = 60000000")
        .then(&format!(
            "[[upstream]]\nname = \"ses\"\n{}",
            fake.upstream_toml("")
        ))
        .named_upstream("disk", "file://unused")
        .then(
            "[[route]]\nkey = \"header:X-Tenant\"\nvalues = [\"a\"]\nupstream = \"ses\"\n\
             [[route]]\nupstream = \"disk\"",
        )
        .text();
    let relay = Relay::start(&mixed, forwarder(&mixed, GOOD_KEY)).await;
    let mut c = Client::connect(relay.addr).await;
    c.cmd("EHLO client.test").await;
    let (code, text) = c
        .cmd(&format!("MAIL FROM:<a@example.com> SIZE={}", forty + 1))
        .await;
    assert_eq!(code, 250, "{text}");
}

/// `/readyz` over the admin endpoint: `GetAccount` with the relay's credentials. Refused, the
/// replica is still ready (it takes mail, answering `451`) and says why; with
/// `ready_requires_upstream`, it is not.
#[tokio::test]
async fn readyz_says_refused_credentials_and_is_503_for_them_only_when_asked() {
    let fake = FakeSes::start().await;
    let text = upstream(&fake.url(), "");
    let strict = format!("{text}\n[admin]\nready_requires_upstream = true\n");
    for (config, key, status) in [
        (&text, GOOD_KEY, 200),
        (&strict, GOOD_KEY, 200),
        (&text, "AKIDWRONG", 200),
        (&strict, "AKIDWRONG", 503),
    ] {
        let relay = Relay::start(config, forwarder(config, key)).await;
        let admin = relay.start_admin().await;
        let (code, body) = crate::support::http::get(admin, "/readyz").await;
        assert_eq!(code, status, "{body}");
        let ready: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(ready["ready"], status == 200, "{body}");
        let refused = key != GOOD_KEY;
        assert_eq!(ready["upstream"]["ok"], !refused, "{body}");
        if refused {
            let why = ready["upstream"]["error"].as_str().unwrap();
            assert!(why.contains("UnrecognizedClientException"), "{body}");
        }
    }
}

/// `/readyz` reports the account's `SendingEnabled` and `EnforcementStatus` when it is ready
/// too, for that upstream.
#[tokio::test]
async fn readyz_reports_the_accounts_sending_status_when_ready_and_not() {
    let fake = FakeSes::start().await;
    let text = upstream(&fake.url(), "");
    let relay = Relay::start(&text, forwarder(&text, GOOD_KEY)).await;
    let admin = relay.start_admin().await;
    let (code, body) = crate::support::http::get(admin, "/readyz").await;
    assert_eq!(code, 200, "{body}");
    let ready: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        ready["upstreams"]["default"]["detail"], "SendingEnabled true, EnforcementStatus HEALTHY",
        "{body}"
    );
    // A fresh relay: the check's result is reused for a while.
    fake.set_account(14.0, false);
    let relay = Relay::start(&text, forwarder(&text, GOOD_KEY)).await;
    let admin = relay.start_admin().await;
    let (code, body) = crate::support::http::get(admin, "/readyz").await;
    assert_eq!(code, 200, "the replica still takes mail: {body}");
    let ready: serde_json::Value = serde_json::from_str(&body).unwrap();
    let error = ready["upstreams"]["default"]["error"].as_str().unwrap();
    assert!(
        error.contains("SendingEnabled false, EnforcementStatus SHUTDOWN"),
        "{body}"
    );
}

/// An account pause with a `fallback` on the route: the message goes there, the paused
/// upstream's own layer gets its tokens back, the fallback's and the route's are charged; the
/// next messages go there without asking SES while the pause lasts.
#[tokio::test]
async fn a_paused_ses_account_hands_its_messages_to_the_routes_fallback() {
    let fake = FakeSes::start().await;
    let backup = crate::support::upstream::TestUpstream::start().await;
    let layer = |name: &str, scope: &str| {
        format!(
            "[[throttle]]\nname = \"{name}\"\n{scope}key = \"none\"\nlimit = 5\n\
             interval_ms = 3600000\nmode = \"reject\"\n"
        )
    };
    let text = TestConfig::new()
        .then(&format!(
            "[[upstream]]\nname = \"ses\"\n{}",
            fake.upstream_toml("")
        ))
        .named_upstream("backup", &backup.url())
        .then("tls = \"none\"")
        .then("[[route]]\nupstream = \"ses\"\nfallback = \"backup\"")
        .then(&layer("ses-account", "upstream = \"ses\"\n"))
        .then(&layer("backup-account", "upstream = \"backup\"\n"))
        .then(&layer("all", ""))
        .text();
    let relay = Relay::start(&text, forwarder(&text, GOOD_KEY)).await;
    let remaining = |layer: &str| relay.throttle.peek(layer, "").unwrap().remaining;
    fake.fail_with(Some((
        400,
        "SendingPausedException",
        "Sending is paused for this account.",
    )));
    let (code, reply) = send(&relay, "acme", "paused-answer").await;
    assert_eq!(code, 250, "the fallback took it: {reply}");
    assert_eq!(fake.requests(), 1);
    let (code, reply) = send(&relay, "acme", "while-paused").await;
    assert_eq!(code, 250, "{reply}");
    assert_eq!(fake.requests(), 1, "not asked while paused");
    let got: Vec<_> = backup
        .wait_for(2)
        .await
        .iter()
        .map(subject_of_received)
        .collect();
    assert_eq!(got, ["paused-answer", "while-paused"]);
    assert_eq!(remaining("ses-account"), 5, "its tokens went back");
    assert_eq!((remaining("backup-account"), remaining("all")), (3, 3));
    let admin = relay.start_admin().await;
    let (_, body) = crate::support::http::get(admin, "/readyz").await;
    let ready: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ready["upstreams"]["ses"]["paused"], true, "{body}");
}

fn subject_of_received(message: &crate::support::upstream::Received) -> String {
    subject_of(&message.data)
}

/// `GetAccount`'s `SendQuota` as the relay reads it: the rate in whole messages a second, and
/// the day's quota spent once `SentLast24Hours` reaches `Max24HourSend`.
#[tokio::test]
async fn the_accounts_send_quota_is_read_from_get_account() {
    let fake = FakeSes::start().await;
    let ses = forwarder(&upstream(&fake.url(), ""), GOOD_KEY);
    fake.set_account(3.5, true);
    fake.set_day_quota(2.0);
    let quota = ses.send_quota().await.unwrap();
    assert_eq!((quota.rate_per_second(), quota.day_spent()), (3, false));
    let env = envelope(Some("a@example.com"), &["b@example.net"]);
    for _ in 0..2 {
        ses.forward(&env, b"Subject: x\r\n\r\nx\r\n").await.unwrap();
    }
    let quota = ses.send_quota().await.unwrap();
    assert_eq!(quota.sent_last_24_hours, 2.0);
    assert!(quota.day_spent(), "{quota:?}");
    fake.set_day_quota(-1.0);
    assert!(
        !ses.send_quota().await.unwrap().day_spent(),
        "-1 is unlimited"
    );
    fake.set_account(0.2, true);
    assert_eq!(ses.send_quota().await.unwrap().rate_per_second(), 1);
    let refused = forwarder(&upstream(&fake.url(), ""), "AKIDWRONG")
        .send_quota()
        .await;
    assert!(refused
        .unwrap_err()
        .to_string()
        .contains("UnrecognizedClientException"));
}

/// `limit = "account"` on tokio's paused clock: the layer runs at `GetAccount`'s
/// `MaxSendRate` from the start, follows a change at the next read 5 minutes on (not before),
/// and once `SentLast24Hours` reaches `Max24HourSend` the upstream is paused before SES
/// refuses anything.
#[tokio::test(start_paused = true)]
async fn an_account_layer_follows_max_send_rate_and_a_spent_day_pauses_the_upstream() {
    use mailsluice::serve::account::REFRESH;
    use std::time::Duration;
    let fake = FakeSes::start().await;
    fake.set_account(14.0, true);
    let text = TestConfig::new()
        .then(&format!(
            "[[upstream]]\nname = \"ses\"\n{}",
            fake.upstream_toml("timeout_ms = 3600000")
        ))
        .then(
            "[[throttle]]\nname = \"account\"\nkey = \"none\"\nupstream = \"ses\"\n\
             limit = \"account\"\ninterval_ms = 1000",
        )
        .text();
    let relay = Relay::start(&text, forwarder(&text, GOOD_KEY)).await;
    let limit = || relay.throttle.effective_limit(0).unwrap();
    until("the first read", async || limit() == 14).await;
    fake.set_account(2.5, true);
    tokio::time::sleep(REFRESH - Duration::from_secs(5)).await;
    assert_eq!(limit(), 14, "read every 5 minutes, not sooner");
    until("the next read", async || limit() == 2).await;
    fake.set_day_quota(1.0);
    assert_eq!(send(&relay, "acme", "last-of-the-day").await.0, 250);
    let ctx = relay.live.current().unwrap();
    let upstream = ctx.setup.upstreams.get("ses").unwrap().clone();
    assert!(!upstream.pause.is_paused());
    tokio::time::sleep(REFRESH).await;
    until("the spent day pauses", async || upstream.pause.is_paused()).await;
    let requests = fake.requests();
    let (code, reply) = send(&relay, "acme", "over").await;
    assert_eq!(code, 451, "{reply}");
    assert!(reply.starts_with("4.7.1"), "{reply}");
    assert_eq!(fake.requests(), requests, "SES was not asked");
}

/// SES out of reach: `/readyz` says why in a few words (the SDK's error and its sources'
/// texts), never the SDK's debug dump of the error (kilobytes of struct fields).
#[tokio::test]
async fn readyz_says_a_short_cause_not_the_sdks_debug_dump() {
    let refusing = refusing_addr();
    let text = upstream(&format!("http://{}", refusing.addr()), "");
    let relay = Relay::start(&text, forwarder(&text, GOOD_KEY)).await;
    let admin = relay.start_admin().await;
    let (code, body) = crate::support::http::get(admin, "/readyz").await;
    // Ready all the same (this replica takes mail); upstream's state is in the body.
    assert_eq!(code, 200, "{body}");
    let ready: serde_json::Value = serde_json::from_str(&body).unwrap();
    let error = ready["upstreams"]["default"]["error"].as_str().unwrap();
    assert!(error.starts_with("SES GetAccount: "), "{error}");
    assert!(
        error.to_lowercase().contains("refused"),
        "the cause: {error}"
    );
    assert!(
        !error.contains(" { ") && !error.contains("Some(") && error.len() <= 320,
        "no debug dump ({} bytes): {error}",
        error.len()
    );
}

/// The configuration set decides where SES sends a message's bounces and complaints: a
/// client's `X-SES-CONFIGURATION-SET` never replaces the upstream's (or a route's), over the
/// API or over SMTP (SES's SMTP endpoint reads the field), and never reaches upstream.
#[tokio::test]
async fn a_clients_configuration_set_is_removed_and_the_upstreams_or_routes_wins() {
    let msg = |tenant: &str| {
        format!(
            "X-Tenant: {tenant}\r\nX-SES-CONFIGURATION-SET: no-events\r\n\
             x-ses-configuration-set: no-events-2\r\nSubject: s\r\n\r\nbody\r\n"
        )
    };
    let fake = FakeSes::start().await;
    let text = TestConfig::new()
        .then(&format!(
            "[upstream]\n{}",
            fake.upstream_toml("configuration_set = \"events\"")
        ))
        .then(
            "[[route]]\nkey = \"header:X-Tenant\"\nvalues = [\"routed\"]\nupstream = \"default\"\n\
             add_headers = { \"X-SES-CONFIGURATION-SET\" = \"route-set\" }\n\
             [[route]]\nupstream = \"default\"",
        )
        .text();
    let relay = Relay::start(&text, forwarder(&text, GOOD_KEY)).await;
    for tenant in ["plain", "routed"] {
        let mut c = Client::connect(relay.addr).await;
        let (code, reply) = c
            .send_mail(
                "app@example.com",
                &["to@example.net"],
                msg(tenant).as_bytes(),
            )
            .await;
        assert_eq!(code, 250, "{reply}");
    }
    let sent = fake.sent();
    assert_eq!(sent[0].configuration_set.as_deref(), Some("events"));
    assert_eq!(sent[1].configuration_set.as_deref(), Some("route-set"));
    for email in &sent {
        let raw = String::from_utf8_lossy(&email.raw).to_ascii_lowercase();
        assert!(!raw.contains("no-events"), "{raw}");
    }

    let up = crate::support::upstream::TestUpstream::start().await;
    let relay = crate::support::relay::smtp_relay(&up.url(), "", "").await;
    let mut c = Client::connect(relay.addr).await;
    let (code, _) = c
        .send_mail(
            "app@example.com",
            &["to@example.net"],
            msg("plain").as_bytes(),
        )
        .await;
    assert_eq!(code, 250);
    let got = up.wait_for(1).await;
    let data = String::from_utf8_lossy(&got[0].data).to_ascii_lowercase();
    assert!(!data.contains("x-ses-configuration-set"), "{data}");
    assert!(
        data.contains("x-tenant: plain"),
        "other fields stay: {data}"
    );
}

/// SES's answers read right: a `2xx` whose body does not parse is "may have been delivered"
/// (SES took it: a retry would send it twice), and a `404` is permanent (an operator's error
/// the client's retries cannot mend).
#[tokio::test]
async fn an_unreadable_2xx_is_uncertain_and_a_404_is_permanent() {
    let fake = FakeSes::start().await;
    let relay = relay(&fake, "", "").await;
    for body in ["not json", "{\"MessageId\": 12", "<html>ok</html>"] {
        fake.answer_raw(Some((200, body)));
        let (code, text) = send(&relay, "acme", "unreadable").await;
        assert_eq!(code, 451, "{body}: {text}");
        assert!(text.contains("may have been delivered"), "{body}: {text}");
    }
    fake.answer_raw(None);
    fake.fail_with(Some((
        404,
        "NotFoundException",
        "Configuration set <x> does not exist.",
    )));
    let (code, text) = send(&relay, "acme", "missing").await;
    assert_eq!(code, 554, "{text}");
    assert!(
        text.starts_with("5.3.5 upstream: SES NotFoundException: Configuration set"),
        "{text}"
    );
}

/// SES's error text and its MessageId reach the client as printable ASCII.
#[tokio::test]
async fn ses_text_and_message_id_reach_the_client_printable() {
    let fake = FakeSes::start().await;
    let relay = relay(&fake, "", "").await;
    fake.answer_raw(Some((200, "{\"MessageId\":\"id\\u001b[2J\\u0000x\"}")));
    let (code, text) = send(&relay, "acme", "escape").await;
    assert_eq!((code, text.as_str()), (250, "2.0.0 Ok id?[2J?x"));
    fake.answer_raw(None);
    fake.fail_with(Some((400, "MessageRejected", "bad \u{1b}]0;x\u{7} text")));
    let (code, text) = send(&relay, "acme", "refused").await;
    assert_eq!(
        (code, text.as_str()),
        (554, "5.6.0 upstream: bad ?]0;x? text")
    );
}

/// A request to SES holds the message once more (in base64 in its JSON): that room is taken
/// from `max_buffered_bytes` beside the message's own, or the message does not go (451 4.4.1,
/// nothing sent); once a request ends its room is free again.
#[tokio::test]
async fn the_requests_copies_count_in_max_buffered_bytes() {
    let fake = FakeSes::start().await;
    let body = "x".repeat(100) + "\r\n";
    let message = format!(
        "X-Tenant: acme\r\nSubject: big\r\n\r\n{}",
        body.repeat(1000)
    );
    let header = message.find("\r\n\r\n").unwrap() + 4 + 300;
    let request = mailsluice::upstream::ses::request_bytes(message.len() + 300, header, 8192);
    let send_one = async |budget: usize| {
        let text = TestConfig::new()
            .smtp(&format!("max_buffered_bytes = {budget}"))
            .then(&format!("[upstream]\n{}", fake.upstream_toml("")))
            .text();
        let relay = Relay::start(&text, forwarder(&text, GOOD_KEY)).await;
        let mut c = Client::connect(relay.addr).await;
        let mut codes = Vec::new();
        for _ in 0..2 {
            let (code, text) = c
                .send_mail("a@example.com", &["b@example.net"], message.as_bytes())
                .await;
            codes.push((code, text));
        }
        relay.stop().await;
        codes
    };
    // Room for the message (read in 16 KiB steps) but not for its request too.
    let codes = send_one(message.len() + 64 * 1024).await;
    for (code, text) in &codes {
        assert_eq!(*code, 451, "{text}");
        assert!(text.contains("Upstream unavailable"), "{text}");
    }
    assert!(fake.sent().is_empty(), "nothing sent");
    // Room for both, one message at a time: each goes, the first's room given back.
    let codes = send_one(message.len() + 32 * 1024 + request).await;
    assert!(codes.iter().all(|(code, _)| *code == 250), "{codes:?}");
    assert_eq!(fake.sent().len(), 2);
}
