//! SES's events from SQS, on moto's server with a real queue and the real SDK: both shapes
//! applied, a malformed one counted and deleted, and the queue left empty.

use std::sync::Arc;

use aws_sdk_sqs::config::{Credentials, SharedCredentialsProvider};
use mailsluice::clock::FakeClock;
use mailsluice::config::Config;
use mailsluice::observe::metrics::Metrics;
use mailsluice::reputation::Reputation;
use mailsluice::serve::events::{client, Consumer};
use mailsluice::throttle::Throttle;

use crate::support::config::TestConfig;
use crate::support::moto::MotoServer;
use crate::support::relay::sum_metric;
use crate::support::ses_events::{bounce, complaint_notification};

fn complaint_in_sns(message_id: &str) -> String {
    let inner = complaint_notification(message_id, "c-1", "angry@example.com");
    serde_json::json!({"Type": "Notification", "MessageId": "sns-1",
        "TopicArn": "arn:aws:sns:eu-west-1:123456789012:ses", "Message": inner})
    .to_string()
}

#[tokio::test]
async fn sqs_events_in_both_shapes_are_applied_and_every_message_deleted() {
    let Some(moto) = MotoServer::spawn().await else {
        return;
    };
    std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
    let sqs_toml = format!(
        "[reputation.sqs]\nqueue_url = \"{}/123456789012/ses-events\"\nregion = \"eu-west-1\"\n\
         endpoint_url = \"{}\"\n",
        moto.url(),
        moto.url()
    );
    let text = TestConfig::new()
        .upstream("file://o")
        .then("[reputation]\nkey = \"auth\"\nmin_messages = 2\nmin_bounces = 1\nmin_complaints = 1")
        .then(&sqs_toml)
        .text();
    let config = Config::parse(&text).unwrap();
    let reputation = config.reputation.as_ref().unwrap();
    let credentials = Credentials::new("AKIDTEST", "secret", None, None, "test");
    let sqs = client(
        reputation.sqs.as_ref().unwrap(),
        Some(SharedCredentialsProvider::new(credentials)),
    )
    .await;
    let queue = sqs
        .create_queue()
        .queue_name("ses-events")
        .send()
        .await
        .unwrap();
    let queue_url = queue.queue_url.unwrap();
    let guard = Arc::new(Reputation::new(reputation, Arc::new(FakeClock::new(0))));
    guard.forwarded("acme", Some("ses-1"), 2).await;
    guard.forwarded("beta", Some("ses-2"), 2).await;
    let bodies = [
        bounce("ses-1", "b-1", "gone@example.com"),
        bounce("ses-1", "b-1", "gone@example.com"), // SQS delivers at least once: counted once
        complaint_in_sns("ses-2"),
        bounce("ses-1", "b-2", "gone@example.com").replace("Permanent", "Transient"),
        "{\"eventType\": [1, 2".to_string(),
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[".to_string(),
        bounce("unknown", "b-3", "gone@example.com"),
    ];
    for (i, body) in bodies.iter().enumerate() {
        sqs.send_message()
            .queue_url(&queue_url)
            .message_body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("message {i}: {e}"));
    }
    let metrics = Metrics::new();
    let consumer = Consumer {
        client: sqs.clone(),
        queue_url: queue_url.clone(),
        reputation: guard.clone(),
        metrics: metrics.clone(),
        wait_secs: 0,
    };
    let mut applied = 0;
    for _ in 0..10 {
        applied += consumer.poll_once().await.unwrap();
        if applied == bodies.len() {
            break;
        }
    }
    assert_eq!(applied, bodies.len());
    assert_eq!(
        consumer.poll_once().await.unwrap(),
        0,
        "every message was deleted"
    );
    let standings = guard.standings().await.unwrap();
    let of = |key: &str| standings.iter().find(|s| s.key == key).unwrap().clone();
    assert_eq!((of("acme").bounces, of("acme").complaints), (1, 0));
    assert_eq!((of("beta").bounces, of("beta").complaints), (0, 1));
    assert!(guard.standing("acme").await.is_some() && guard.standing("beta").await.is_some());
    assert_eq!(guard.unattributed(), 1);
    assert!(guard.suppressed("angry@example.com").await.is_some());
    let text = metrics.encode(&Throttle::new(vec![], Arc::new(FakeClock::new(0))));
    let count = |kind: &str| {
        sum_metric(
            &text,
            &format!("mailsluice_reputation_events_total{{kind=\"{kind}\"}}"),
        )
    };
    assert_eq!(
        (
            count("bounce"),
            count("complaint"),
            count("ignored"),
            count("malformed")
        ),
        (2.0, 1.0, 2.0, 2.0),
        "{text}"
    );
}

/// The consumer says when it starts, and which queue it reads: without it, nothing tells an
/// operator that events are read at all until the first fails.
#[tokio::test]
async fn the_consumer_logs_when_it_starts() {
    let (events, _guard) = crate::support::throttle::Events::capture();
    let refusing = crate::support::upstream::refusing_addr();
    let url = format!("http://{}", refusing.addr());
    let text = TestConfig::new()
        .upstream("file://o")
        .then(&format!(
            "[reputation]\nkey = \"auth\"\n[reputation.sqs]\n\
             queue_url = \"{url}/123456789012/ses-events\"\nregion = \"eu-west-1\"\n\
             endpoint_url = \"{url}\""
        ))
        .text();
    let config = Arc::new(Config::parse(&text).unwrap());
    let upstreams = mailsluice::upstream::Upstreams::from_config(&config).unwrap();
    let deps = mailsluice::Deps::new(config, upstreams);
    let (trigger, shutdown) = mailsluice::state::shutdown::channel();
    let consumer = mailsluice::serve::events::start(&deps, shutdown).expect("a consumer");
    let started = events.named("reputation.sqs started: reading SES's events");
    assert_eq!(started.len(), 1, "{started:?}");
    assert!(started[0].1.contains("ses-events"), "{started:?}");
    trigger.trigger();
    consumer.await.unwrap();
}
