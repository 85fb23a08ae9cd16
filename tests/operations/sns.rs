//! `POST /ses/events`: SES's events posted by SNS, each message's signature checked. The
//! messages are signed apart from the relay (`tests/fixtures/sns/make.py`, openssl), and their
//! certificate is served by a local server standing in for `sns.eu-west-1.amazonaws.com`
//! (`SnsVerifier::local`), which records every request it gets.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::Uri;
use mailsluice::admin::sns::MAX_POST_BYTES;
use mailsluice::reputation::sns_verifier::{SnsVerifier, MAX_CERTIFICATE_BYTES, MAX_FETCHES};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::support::auth::cheap_hash;
use crate::support::http::{post, request};
use crate::support::memory::MemoryForwarder;
use crate::support::relay::{config_text, memory_relay, sum_metric, Relay};
use crate::support::wait::until;

const CERT: &str = include_str!("../fixtures/sns/cert.pem");
const V1: &str = include_str!("../fixtures/sns/notification-v1.json");
const V2: &str = include_str!("../fixtures/sns/notification-v2.json");
const CONFIRMATION: &str = include_str!("../fixtures/sns/confirmation.json");
const OTHER_CONFIRMATION: &str = include_str!("../fixtures/sns/confirmation-other-topic.json");
const UNSUBSCRIBED: &str = include_str!("../fixtures/sns/unsubscribed.json");
const TOPIC: &str = "arn:aws:sns:eu-west-1:123456789012:ses-events";
const CERT_PATH: &str = "/SimpleNotificationService-0123456789abcdef0123456789abcdef.pem";

/// The local stand-in for SNS's host: the certificate at `CERT_PATH`, one over its bound at
/// `HUGE_PATH`, an answer to anything else; every path and query it is asked for, kept. A
/// host started `held` answers nothing until `release`.
struct SnsHost {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
    gate: Arc<Semaphore>,
}

const HUGE_PATH: &str = "/SimpleNotificationService-0000ffff.pem";

/// When the fixtures are taken to arrive: half an hour after the notifications were signed.
fn fixtures_arrive() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_796_121_000) // 2026-12-01T10:30:00Z
}

impl SnsHost {
    async fn start() -> SnsHost {
        SnsHost::with_gate(Semaphore::MAX_PERMITS).await
    }

    async fn held() -> SnsHost {
        SnsHost::with_gate(0).await
    }

    async fn with_gate(permits: usize) -> SnsHost {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(Semaphore::new(permits));
        let (log, open) = (seen.clone(), gate.clone());
        let app = axum::Router::new().fallback(move |uri: Uri| {
            let (log, open) = (log.clone(), open.clone());
            async move {
                let path = uri
                    .path_and_query()
                    .map(|p| p.to_string())
                    .unwrap_or_default();
                log.lock().unwrap().push(path.clone());
                let _open = open.acquire().await.unwrap();
                match uri.path() {
                    CERT_PATH => CERT.to_string(),
                    HUGE_PATH => "A".repeat(MAX_CERTIFICATE_BYTES as usize + 1),
                    _ => "<ConfirmSubscriptionResponse/>".to_string(),
                }
            }
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        SnsHost { addr, seen, gate }
    }

    /// A held host answers from now on.
    fn release(&self) {
        self.gate.add_permits(1000);
    }

    /// The production verifier's checks, fetching from this host, at [`fixtures_arrive`].
    fn verifier(&self) -> SnsVerifier {
        self.verifier_at(fixtures_arrive())
    }

    fn verifier_at(&self, now: SystemTime) -> SnsVerifier {
        SnsVerifier::local(&format!("http://{}", self.addr)).at(now)
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

fn config(topics: &str, extra: &str) -> String {
    let rest = format!(
        "[reputation]\nkey = \"header:X-Tenant\"\nmin_messages = 1\n\
         [reputation.sns]\ntopics = [{topics}]\n{extra}"
    );
    config_text("file://unused", "", &rest)
}

/// A relay checking SNS's posts against `host`, and its admin endpoint.
async fn start(host: &SnsHost, topics: &str) -> (Relay, SocketAddr) {
    let relay =
        Relay::start_with_sns(&config(topics, ""), MemoryForwarder::new(), host.verifier()).await;
    let admin = relay.start_admin().await;
    (relay, admin)
}

async fn post_json(admin: SocketAddr, message: &Value) -> (u16, String) {
    post(admin, "/ses/events", message.to_string().into_bytes()).await
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

/// Whether the relay's guard holds no tenant's counts: nothing reached it.
async fn no_standing(relay: &Relay) -> bool {
    relay
        .reputation()
        .unwrap()
        .standings()
        .await
        .unwrap()
        .is_empty()
}

#[tokio::test]
async fn signed_notifications_of_both_versions_are_applied() {
    let host = SnsHost::start().await;
    // With an admin password set, SNS (which cannot send one) is still heard.
    let extra = format!("[admin]\npassword_hash = \"{}\"\n", cheap_hash("s3cret"));
    let config = config(&format!("\"{TOPIC}\""), &extra);
    let relay = Relay::start_with_sns(&config, MemoryForwarder::new(), host.verifier()).await;
    let admin = relay.start_admin().await;
    let guard = relay.reputation().unwrap();
    for (text, address) in [(V1, "gone-v1@example.com"), (V2, "gone-v2@example.com")] {
        assert!(guard.suppressed(address).await.is_none());
        let (status, body) = post(admin, "/ses/events", text.as_bytes().to_vec()).await;
        assert_eq!((status, body.as_str()), (200, r#"{"applied":"bounce"}"#));
        assert!(guard.suppressed(address).await.is_some(), "{address}");
    }
    let standings = guard.standings().await.unwrap();
    assert_eq!(standings.len(), 1);
    assert_eq!(
        (standings[0].key.as_str(), standings[0].bounces),
        ("acme", 2)
    );
    // The same notification again (SNS retries) counts once.
    assert_eq!(post(admin, "/ses/events", V1.into()).await.0, 200);
    assert_eq!(guard.standings().await.unwrap()[0].bounces, 2);
    // One certificate, fetched once and then kept.
    assert_eq!(host.seen(), vec![CERT_PATH.to_string()]);
    let (_, metrics) = request(admin, "GET", "/metrics", Some("s3cret")).await;
    let bounces = metrics
        .lines()
        .find(|l| l.starts_with("mailsluice_reputation_events_total{kind=\"bounce\"}"));
    assert!(bounces.is_some_and(|l| l.ends_with(" 2")), "{metrics}");
    assert_eq!(
        sum_metric(&metrics, "mailsluice_reputation_events_total"),
        3.0
    );
}

#[tokio::test]
async fn a_message_not_signed_by_sns_or_for_an_unknown_topic_gets_403_and_changes_nothing() {
    let host = SnsHost::start().await;
    let (relay, admin) = start(&host, &format!("\"{TOPIC}\"")).await;
    let guard = relay.reputation().unwrap();
    let mut forged = json(V2);
    let event = forged["Message"]
        .as_str()
        .unwrap()
        .replace("gone-v2", "victim");
    forged["Message"] = Value::String(event);
    let mut unsigned = json(V1);
    unsigned.as_object_mut().unwrap().remove("Signature");
    let mut downgraded = json(V2);
    downgraded["SignatureVersion"] = "1".into();
    for message in [&forged, &unsigned, &downgraded] {
        let (status, body) = post_json(admin, message).await;
        assert_eq!(status, 403, "{body}");
    }
    assert!(guard.suppressed("victim@example.com").await.is_none());
    assert!(guard.suppressed("gone-v1@example.com").await.is_none());
    assert!(guard.suppressed("gone-v2@example.com").await.is_none());
    assert!(guard.standings().await.unwrap().is_empty());

    // A well-signed message of a topic the relay does not list: refused before any fetch.
    let host = SnsHost::start().await;
    let other = "\"arn:aws:sns:eu-west-1:123456789012:other-topic\"";
    let (relay, admin) = start(&host, other).await;
    let (status, body) = post(admin, "/ses/events", V1.into()).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("topic not listed"), "{body}");
    assert!(no_standing(&relay).await);
    assert_eq!(host.seen(), Vec::<String>::new());
}

#[tokio::test]
async fn a_subscription_is_confirmed_only_for_a_listed_topic() {
    let host = SnsHost::start().await;
    let (_relay, admin) = start(&host, &format!("\"{TOPIC}\"")).await;
    let (status, body) = post(admin, "/ses/events", OTHER_CONFIRMATION.into()).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(host.seen(), Vec::<String>::new(), "nothing fetched at all");
    let (status, body) = post(admin, "/ses/events", CONFIRMATION.into()).await;
    assert_eq!(status, 200, "{body}");
    let subscribe = json(CONFIRMATION)["SubscribeURL"]
        .as_str()
        .unwrap()
        .to_string();
    let path = subscribe.trim_start_matches("https://sns.eu-west-1.amazonaws.com");
    assert_eq!(host.seen(), vec![CERT_PATH.to_string(), path.to_string()]);
    let (status, body) = post(admin, "/ses/events", UNSUBSCRIBED.into()).await;
    assert_eq!(
        (status, body.contains("unsubscribed")),
        (200, true),
        "{body}"
    );
    assert_eq!(host.seen().len(), 2, "an unsubscription fetches nothing");
}

/// The production verifier fetches only from `https://sns.<region>.amazonaws.com`: a
/// certificate URL anywhere else (here, a live local server) is refused, and not fetched.
#[tokio::test]
async fn a_certificate_off_sns_host_is_refused_before_any_fetch() {
    let host = SnsHost::start().await;
    let topics = format!("\"{TOPIC}\"");
    let production = Relay::start(&config(&topics, ""), MemoryForwarder::new()).await;
    let production_admin = production.start_admin().await;
    let (local, local_admin) = start(&host, &topics).await;
    for url in [
        format!("http://{}{CERT_PATH}", host.addr),
        format!("https://{}{CERT_PATH}", host.addr),
        format!("https://sns.eu-west-1.amazonaws.com.evil.example{CERT_PATH}"),
        format!("https://sns.us-east-1.amazonaws.com{CERT_PATH}"),
    ] {
        let mut message = json(V2);
        message["SigningCertURL"] = url.clone().into();
        for admin in [production_admin, local_admin] {
            let (status, body) = post_json(admin, &message).await;
            assert_eq!(status, 403, "{url}: {body}");
        }
    }
    assert_eq!(host.seen(), Vec::<String>::new());
    assert!(no_standing(&production).await);
    assert!(no_standing(&local).await);
}

#[tokio::test]
async fn bodies_over_the_bound_get_413_and_what_is_not_an_sns_message_400() {
    let host = SnsHost::start().await;
    let (relay, admin) = start(&host, &format!("\"{TOPIC}\"")).await;
    let mut message = json(V2);
    message["Padding"] = "x".repeat(MAX_POST_BYTES).into();
    assert_eq!(post_json(admin, &message).await.0, 413);
    let mut at_bound = json(V2);
    let room = MAX_POST_BYTES - at_bound.to_string().len() - r#","Padding":"""#.len();
    at_bound["Padding"] = "x".repeat(room).into();
    assert_eq!(at_bound.to_string().len(), MAX_POST_BYTES);
    let (status, body) = post_json(admin, &at_bound).await;
    assert_eq!(status, 200, "a post at the bound is read: {body}");
    for body in [
        &b"{not json"[..],
        br#"{"Type":"Notification"}"#,
        br#"{"Type":1,"MessageId":"m","TopicArn":"t","Message":"","Timestamp":""}"#,
        &b"["[..].repeat(10_000)[..],
    ] {
        assert_eq!(post(admin, "/ses/events", body.to_vec()).await.0, 400);
    }
    assert_eq!(
        relay.reputation().unwrap().standings().await.unwrap()[0].bounces,
        1
    );

    // A certificate over its bound is not read: SNS is told to come again (502).
    let mut message = json(V1);
    message["SigningCertURL"] = format!("https://sns.eu-west-1.amazonaws.com{HUGE_PATH}").into();
    let (status, body) = post_json(admin, &message).await;
    assert_eq!(status, 502, "{body}");
    assert!(relay
        .reputation()
        .unwrap()
        .suppressed("gone-v1@example.com")
        .await
        .is_none());

    // Without [reputation.sns], SNS's posts are not taken.
    let (_other, admin) = {
        let (relay, _) = memory_relay("", "[reputation]\nkey = \"auth\"\n").await;
        let admin = relay.start_admin().await;
        (relay, admin)
    };
    assert_eq!(post(admin, "/ses/events", V1.into()).await.0, 404);
}

const SNS: &str = "https://sns.eu-west-1.amazonaws.com";

/// On SNS's own host, only the paths of its certificates are fetched: a post naming any
/// other (an API action, a confirmation link, a page) is refused, and nothing is fetched.
#[tokio::test]
async fn a_certificate_url_not_of_sns_certificates_form_is_refused_before_any_fetch() {
    let host = SnsHost::start().await;
    let (relay, admin) = start(&host, &format!("\"{TOPIC}\"")).await;
    for path in [
        "/?Action=Publish&TopicArn=x",
        "/huge.pem",
        "/SimpleNotificationService-test.pem",
        "/SimpleNotificationService-abc.pem?x=1",
        "/x/SimpleNotificationService-abc.pem",
    ] {
        let mut message = json(V2);
        message["SigningCertURL"] = format!("{SNS}{path}").into();
        let (status, body) = post_json(admin, &message).await;
        assert_eq!(status, 403, "{path}: {body}");
        assert!(
            body.contains("SimpleNotificationService-<hex>.pem"),
            "{body}"
        );
    }
    assert_eq!(host.seen(), Vec::<String>::new());
    assert!(no_standing(&relay).await);
}

/// Posts naming one certificate while it is being fetched wait for that one fetch; posts
/// that would start more than `MAX_FETCHES` fetches at once get 503 (SNS tries again).
#[tokio::test]
async fn one_fetch_per_certificate_and_a_bound_on_fetches_in_flight() {
    let host = SnsHost::held().await;
    let (relay, admin) = start(&host, &format!("\"{TOPIC}\"")).await;
    let verifier = relay.services().sns.clone();
    let cert_url = format!("{SNS}{CERT_PATH}");
    let same: Vec<_> = (0..10)
        .map(|_| tokio::spawn(post(admin, "/ses/events", V2.into())))
        .collect();
    until(
        "ten posts wait for one fetch, which reached the host",
        async || verifier.waiting_for(&cert_url) == 10 && !host.seen().is_empty(),
    )
    .await;
    assert_eq!(host.seen(), vec![CERT_PATH.to_string()], "one fetch");
    // Other certificates (forged posts may name any) fill the bound...
    let named = |i: usize| {
        let mut message = json(V1);
        message["SigningCertURL"] = format!("{SNS}/SimpleNotificationService-{i:04x}.pem").into();
        message.to_string().into_bytes()
    };
    let others: Vec<_> = (1..MAX_FETCHES)
        .map(|i| tokio::spawn(post(admin, "/ses/events", named(i))))
        .collect();
    until(
        "the bound is reached, every fetch at the host",
        async || verifier.fetching() == MAX_FETCHES && host.seen().len() == MAX_FETCHES,
    )
    .await;
    // ... and past it a post is answered 503 at once, fetching nothing.
    for i in 100..103 {
        let (status, body) = post(admin, "/ses/events", named(i)).await;
        assert_eq!(status, 503, "{body}");
    }
    assert_eq!(host.seen().len(), MAX_FETCHES);
    host.release();
    let mut applied = Vec::new();
    for answer in same {
        let (status, body) = answer.await.unwrap();
        assert_eq!(status, 200, "{body}");
        applied.push(body);
    }
    // One notification ten times: it counts once, the repeats are ignored.
    let counted = applied.iter().filter(|b| b.contains("bounce")).count();
    assert_eq!(counted, 1, "{applied:?}");
    for answer in others {
        // Not a certificate: refused.
        assert_eq!(answer.await.unwrap().0, 403);
    }
    assert_eq!(host.seen().len(), MAX_FETCHES, "nothing fetched twice");
    assert_eq!(verifier.fetching(), 0);
}

/// A notification signed over an hour before it arrives is a replay: refused before its
/// certificate is fetched, and nothing counts.
#[tokio::test]
async fn a_notification_over_an_hour_old_is_refused() {
    let host = SnsHost::start().await;
    let late = fixtures_arrive() + Duration::from_secs(31 * 60);
    let relay = Relay::start_with_sns(
        &config(&format!("\"{TOPIC}\""), ""),
        MemoryForwarder::new(),
        host.verifier_at(late),
    )
    .await;
    let admin = relay.start_admin().await;
    for text in [V1, V2] {
        let (status, body) = post(admin, "/ses/events", text.into()).await;
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("old"), "{body}");
    }
    assert_eq!(host.seen(), Vec::<String>::new());
    assert!(no_standing(&relay).await);
    // A subscription's confirmation is not aged: SNS sends it again as it was.
    assert_eq!(post(admin, "/ses/events", CONFIRMATION.into()).await.0, 200);
}
