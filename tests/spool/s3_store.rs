//! The spool on S3 and SQS (`store = "s3"`) through the relay, against moto's server, which
//! serves both: what a `250` leaves in the bucket and the queue, release to a scripted
//! upstream (entry and object gone after), a temporary failure put back with its visibility
//! and coming back, an entry whose object is gone dropped and never sent, `max_messages`, the
//! heartbeat keeping an entry invisible while its message is with upstream, and the
//! shutdown's put-back (of the entries not started, and of one waiting for its tokens). The
//! bucket and the queue are made by each test with the SDK (explicit credentials, region and
//! endpoint). What the store writes, call by call, and that it never overwrites an object:
//! `src/spool/s3/tests.rs`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use mailsluice::upstream::{Accepted, ForwardFuture, Forwarder, Outgoing};

use crate::common::*;
use crate::support::moto::{self, MotoServer};
use crate::support::relay::{config_text, Client, Relay};

const SEC: Duration = Duration::from_secs(1);
pub const BUCKET: &str = "held-mail";

/// moto with a bucket and a queue, and the test's own clients of them.
pub struct Store {
    pub moto: MotoServer,
    pub s3: aws_sdk_s3::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub queue_url: String,
}

impl Store {
    /// `None` (skipped through `host::skip`) without `moto_server`.
    pub async fn start() -> Option<Store> {
        let Some(moto) = MotoServer::spawn().await else {
            crate::support::host::skip("moto_server is not installed");
            return None;
        };
        let shared = aws_config::defaults(BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .endpoint_url(moto.url())
            .credentials_provider(moto::credentials())
            .load()
            .await;
        let s3 = aws_sdk_s3::config::Builder::from(&shared)
            .force_path_style(true)
            .build();
        let s3 = aws_sdk_s3::Client::from_conf(s3);
        let sqs = aws_sdk_sqs::Client::new(&shared);
        s3.create_bucket().bucket(BUCKET).send().await.unwrap();
        let queue = sqs.create_queue().queue_name("held").send().await.unwrap();
        let queue_url = queue.queue_url.unwrap();
        Some(Store {
            moto,
            s3,
            sqs,
            queue_url,
        })
    }

    /// `[spool]` on this bucket and queue, retries after 1 s doubling to 5 s, calls bounded by
    /// 20 s (moto on a loaded machine is slow; no test here waits for a bound), and `extra`.
    pub fn section(&self, extra: &str) -> String {
        format!(
            "[spool]\nstore = \"s3\"\nbucket = \"{BUCKET}\"\nqueue_url = \"{}\"\n\
             region = \"us-east-1\"\nendpoint_url = \"{}\"\nretry_min_ms = 1000\n\
             retry_max_ms = 5000\ntimeout_ms = 20000\n{extra}\n",
            self.queue_url,
            self.moto.url()
        )
    }

    /// The queue's entries: (visible, received by someone and invisible).
    pub async fn entries(&self) -> (u64, u64) {
        let got = (self.sqs.get_queue_attributes())
            .queue_url(&self.queue_url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .unwrap();
        let attributes = got.attributes.unwrap();
        let read = |name| attributes[&name].parse::<u64>().unwrap();
        (
            read(QueueAttributeName::ApproximateNumberOfMessages),
            read(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        )
    }

    /// The names of the objects under `prefix`.
    pub async fn objects(&self, prefix: &str) -> Vec<String> {
        let listed = (self.s3.list_objects_v2())
            .bucket(BUCKET)
            .prefix(prefix)
            .send()
            .await
            .unwrap();
        (listed.contents.unwrap_or_default().into_iter())
            .filter_map(|o| o.key)
            .collect()
    }

    async fn object(&self, name: &str) -> Vec<u8> {
        let got = self.s3.get_object().bucket(BUCKET).key(name).send().await;
        got.unwrap().body.collect().await.unwrap().to_vec()
    }
}

/// Sends `subjects` from tenant `acme`, one after the other on `c`, each answered `250`.
async fn send_each(c: &mut Client, subjects: &[&str]) {
    for subject in subjects {
        let (code, text) = c
            .send_mail(
                "app@acme.example",
                &["user@example.net"],
                &message("acme", subject),
            )
            .await;
        assert_eq!(code, 250, "{subject}: {text}");
    }
}

/// Waits (real time, moto's) until `cond` holds, at most `limit`.
pub async fn wait_until<F: std::future::Future<Output = bool>>(
    what: &str,
    limit: Duration,
    mut cond: impl FnMut() -> F,
) {
    let start = std::time::Instant::now();
    while !cond().await {
        assert!(start.elapsed() <= limit, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Held messages are released by the relay's releaser to a scripted upstream, through S3
/// and SQS; once delivered neither their objects nor their entries are left.
#[tokio::test]
async fn held_messages_are_released_and_their_objects_and_entries_removed() {
    let Some(store) = Store::start().await else {
        return;
    };
    let rest = hold_layer(1, 1, 0, "") + &store.section("");
    let fwd = Refusing::new(&[]);
    let relay = Relay::start(&config_text("file://unused", "", &rest), fwd.clone()).await;
    let mut c = relay.memory_client().await;
    send_each(&mut c, &["m0", "m1", "m2"]).await;
    let put =
        "mailsluice_spool_store_calls_total{service=\"s3\",operation=\"PutObject\",outcome=\"ok\"}";
    let held = relay.metric("mailsluice_spool_held_total{kind=\"message\"}");
    assert!(held >= 2.0, "{held} held");
    assert_eq!(relay.metric(put), held, "each held message one object");
    wait_until("all three upstream", 60 * SEC, || {
        let n = fwd.messages().len();
        async move { n == 3 }
    })
    .await;
    wait_until("no object and no entry left", 30 * SEC, || async {
        store.objects("mailsluice/").await.is_empty() && store.entries().await == (0, 0)
    })
    .await;
    let mut subjects: Vec<String> = fwd.messages().iter().map(|(_, m)| subject(m)).collect();
    subjects.sort();
    assert_eq!(subjects, ["m0", "m1", "m2"], "each once");
    relay.stop().await;
}

/// A temporary refusal at release makes the entry invisible for its backoff (its visibility
/// changed, forgotten here); it comes back after it and is delivered.
#[tokio::test]
async fn a_temporary_failure_puts_the_entry_back_and_it_comes_back() {
    let Some(store) = Store::start().await else {
        return;
    };
    let rest = hold_layer(1, 1, 0, "") + &store.section("");
    let fwd = Refusing::new(&[]);
    *fwd.deferred.lock().unwrap() = vec!["later@example.net".into()];
    let relay = Relay::start(&config_text("file://unused", "", &rest), fwd.clone()).await;
    let mut c = relay.memory_client().await;
    let (code, _) = c
        .send_mail(
            "app@acme.example",
            &["user@example.net"],
            &message("acme", "first"),
        )
        .await;
    assert_eq!(code, 250);
    let (code, text) = c
        .send_mail(
            "app@acme.example",
            &["later@example.net"],
            &message("acme", "later"),
        )
        .await;
    assert_eq!(code, 250, "{text}");
    assert!(text.contains("held"), "{text}");
    let changed = "mailsluice_spool_store_calls_total{service=\"sqs\",operation=\"ChangeMessageVisibility\",outcome=\"ok\"}";
    wait_until("the entry put back with its backoff", 30 * SEC, || {
        let n = relay.metric(changed);
        async move { n >= 1.0 }
    })
    .await;
    fwd.deferred.lock().unwrap().clear();
    wait_until("delivered after its backoff", 60 * SEC, || {
        let n = fwd.messages().len();
        async move { n == 2 }
    })
    .await;
    let tried = fwd.tried_subjects.lock().unwrap().clone();
    let later = tried.iter().filter(|s| *s == "later").count();
    assert!(later >= 2, "tried again: {tried:?}");
    assert!(relay.metric("mailsluice_spool_released_total{result=\"retry\"}") >= 1.0);
    wait_until("nothing left", 30 * SEC, || async {
        store.objects("mailsluice/").await.is_empty() && store.entries().await == (0, 0)
    })
    .await;
    relay.stop().await;
}

/// An entry whose object does not exist (a hold answered `452` after SQS kept its entry) is
/// deleted when received, never sent.
#[tokio::test]
async fn an_entry_whose_object_is_gone_is_dropped_never_sent() {
    let Some(store) = Store::start().await else {
        return;
    };
    let rest = hold_layer(1, 1, 0, "") + &store.section("");
    let fwd = Refusing::new(&[]);
    let relay = Relay::start(&config_text("file://unused", "", &rest), fwd.clone()).await;
    let body = serde_json::json!({"id": "ffffffffffffffff", "seq": 1_000, "accepted_ms": 1,
        "layer": "tenant", "key": "acme", "bytes": 10, "report": false});
    (store.sqs.send_message())
        .queue_url(&store.queue_url)
        .message_body(body.to_string())
        .message_group_id("tenant/acme")
        .send()
        .await
        .unwrap();
    let deleted = "mailsluice_spool_store_calls_total{service=\"sqs\",operation=\"DeleteMessage\",outcome=\"ok\"}";
    wait_until("the entry received and deleted", 30 * SEC, || {
        let n = relay.metric(deleted);
        async move { n >= 1.0 }
    })
    .await;
    wait_until("the entry deleted", 30 * SEC, || async {
        store.entries().await == (0, 0)
    })
    .await;
    assert_eq!(*fwd.tried.lock().unwrap(), 0, "never sent");
    assert_eq!(relay.metric("mailsluice_spool_released_total"), 0.0);
    relay.stop().await;
}

/// Past `max_messages` held (the queue's count and this replica's holds) a message to hold
/// is refused `452 4.3.1`.
#[tokio::test]
async fn max_messages_reached_refuses_452() {
    let Some(store) = Store::start().await else {
        return;
    };
    let rest = hold_layer(1, 1, 0, "") + &store.section("max_messages = 1");
    let fwd = Refusing::new(&[]);
    *fwd.deferred.lock().unwrap() = vec!["later@example.net".into()];
    let relay = Relay::start(&config_text("file://unused", "", &rest), fwd.clone()).await;
    let mut c = relay.memory_client().await;
    let mut replies = Vec::new();
    for subject in ["m0", "m1", "m2"] {
        let msg = message("acme", subject);
        replies.push(
            c.send_mail("app@acme.example", &["later@example.net"], &msg)
                .await,
        );
    }
    assert_eq!(replies[0].0, 250, "{replies:?}");
    let (code, text) = &replies[2];
    assert_eq!(*code, 452, "{replies:?}");
    assert!(text.contains("4.3.1"), "{text}");
    assert_eq!(
        relay.metric("mailsluice_spool_held_total{kind=\"message\"}"),
        1.0,
        "{replies:?}"
    );
    relay.stop().await;
}

/// Upstream that keeps every message whose subject is `slow` until it is let go.
#[derive(Default)]
pub struct Gate {
    pub open: AtomicBool,
    pub waiting: AtomicUsize,
    pub got: Mutex<Vec<String>>,
}

impl Forwarder for Gate {
    fn send<'a>(&'a self, outgoing: &'a Outgoing<'a>) -> ForwardFuture<'a> {
        Box::pin(async move {
            let subject = subject(&outgoing.pieces.concat());
            if subject == "slow" {
                self.waiting.fetch_add(1, Ordering::Relaxed);
                while !self.open.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            self.got.lock().unwrap().push(subject);
            Ok(Accepted::new("Ok".to_string()))
        })
    }
}

/// At shutdown the entries this replica received and had not started are made visible at
/// once (another replica takes them without waiting out `visibility_ms`); the one with
/// upstream stays invisible.
#[tokio::test]
async fn shutdown_puts_the_entries_not_started_back_visible_at_once() {
    let Some(store) = Store::start().await else {
        return;
    };
    let rest = hold_layer(1, 1, 0, "") + &store.section("visibility_ms = 60000");
    let gate = Arc::new(Gate::default());
    let relay = Relay::start(&config_text("file://unused", "", &rest), gate.clone()).await;
    let mut c = relay.memory_client().await;
    send_each(&mut c, &["m0", "slow", "m2", "m3", "m4"]).await;
    wait_until(
        "the slow one with upstream, every entry received here",
        60 * SEC,
        || async {
            let (visible, received) = store.entries().await;
            gate.waiting.load(Ordering::Relaxed) == 1 && visible == 0 && received >= 2
        },
    )
    .await;
    let (_, received) = store.entries().await;
    relay.trigger_shutdown();
    let start = std::time::Instant::now();
    let mut entries = store.entries().await;
    while entries != (received - 1, 1) && start.elapsed() < 60 * SEC {
        tokio::time::sleep(Duration::from_millis(100)).await;
        entries = store.entries().await;
    }
    assert_eq!(
        entries,
        (received - 1, 1),
        "the {} not started visible again, the slow one not",
        received - 1
    );
    gate.open.store(true, Ordering::Relaxed);
    relay.stop().await;
}

/// While this replica keeps an entry (its message with upstream), its heartbeat extends the
/// entry's visibility: three `visibility_ms` later it is still invisible, so no other replica
/// could have received it (`receive_max = 1`: this one does not receive it again either).
#[tokio::test]
async fn the_heartbeat_keeps_an_entry_invisible_while_its_message_is_with_upstream() {
    let Some(store) = Store::start().await else {
        return;
    };
    let rest = hold_layer(1, 1, 0, "") + &store.section("visibility_ms = 4000\nreceive_max = 1");
    let gate = Arc::new(Gate::default());
    let relay = Relay::start(&config_text("file://unused", "", &rest), gate.clone()).await;
    let mut c = relay.memory_client().await;
    // The first goes at once (the layer's token); the second is held, and its release waits
    // at upstream's gate.
    send_each(&mut c, &["m0", "slow"]).await;
    wait_until("the slow one with upstream", 60 * SEC, || async {
        gate.waiting.load(Ordering::Relaxed) == 1
    })
    .await;
    let watch = std::time::Instant::now();
    while watch.elapsed() < 3 * 4 * SEC {
        assert_eq!(
            store.entries().await,
            (0, 1),
            "invisible while with upstream"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    gate.open.store(true, Ordering::Relaxed);
    wait_until("the entry deleted once delivered", 60 * SEC, || async {
        store.entries().await == (0, 0)
    })
    .await;
    assert_eq!(*gate.got.lock().unwrap(), ["m0", "slow"]);
    relay.stop().await;
}

/// An entry whose release waits for its tokens when the relay stops is not its failure: it is
/// put back visible at once, not after its backoff (`retry_min_ms`, ten minutes here), so
/// another replica takes it without waiting.
#[tokio::test]
async fn shutdown_puts_an_entry_waiting_for_its_tokens_back_at_once() {
    let Some(store) = Store::start().await else {
        return;
    };
    // One token per ten minutes: the second message is held at once (`max_wait_ms = 0`), and
    // its release waits for its token in the layer's queue (a release waits past
    // `max_wait_ms`), past the shutdown's grace.
    let layer = "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\n\
                 limit = 1\ninterval_ms = 600000\nburst = 1\nmode = \"hold\"\n\
                 max_wait_ms = 0\n";
    let section = store.section("visibility_ms = 60000").replace(
        "retry_min_ms = 1000\nretry_max_ms = 5000",
        "retry_min_ms = 600000\nretry_max_ms = 600000",
    );
    let gate = Arc::new(Gate::default());
    let text = config_text(
        "file://unused",
        "shutdown_grace_ms = 1000",
        &(layer.to_string() + &section),
    );
    let relay = Relay::start(&text, gate.clone()).await;
    let mut c = relay.memory_client().await;
    send_each(&mut c, &["first", "waits"]).await;
    wait_until("the held one received and waiting", 60 * SEC, || async {
        store.entries().await == (0, 1) && gate.got.lock().unwrap().len() == 1
    })
    .await;
    relay.trigger_shutdown();
    wait_until("the waiting one visible again", 30 * SEC, || async {
        store.entries().await == (1, 0)
    })
    .await;
    assert_eq!(
        *gate.got.lock().unwrap(),
        ["first"],
        "the waiting one did not go"
    );
    relay.stop().await;
}

/// What a `250` leaves: one object `<prefix>held/<id>` holding the spool's record (its format
/// line with its digest, its meta, our `Received:` field and the message), written with a
/// SHA-256 checksum; and one entry, the small JSON of the design, grouped by the held key.
/// (`receive_max = 1`: the relay holds the slow one, so the next one's entry stays visible.)
#[tokio::test]
async fn a_held_message_is_one_object_and_one_small_entry() {
    let Some(store) = Store::start().await else {
        return;
    };
    let rest = hold_layer(1, 1, 0, "") + &store.section("receive_max = 1");
    let gate = Arc::new(Gate::default());
    let relay = Relay::start(&config_text("file://unused", "", &rest), gate.clone()).await;
    let mut c = relay.memory_client().await;
    send_each(&mut c, &["m0", "slow", "m2"]).await;
    wait_until(
        "the slow one with upstream, m2 waiting in the queue",
        60 * SEC,
        || async { gate.waiting.load(Ordering::Relaxed) == 1 && store.entries().await == (1, 1) },
    )
    .await;
    let received = (store.sqs.receive_message())
        .queue_url(&store.queue_url)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .unwrap();
    let entry = &received.messages.unwrap()[0];
    let body: serde_json::Value = serde_json::from_str(entry.body().unwrap()).unwrap();
    let mut keys: Vec<&str> = body.as_object().unwrap().keys().map(|k| &**k).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "accepted_ms",
            "bytes",
            "id",
            "key",
            "layer",
            "report",
            "seq"
        ]
    );
    assert_eq!(
        (&body["layer"], &body["key"]),
        (&"tenant".into(), &"acme".into())
    );
    assert_eq!(body["report"], false);
    let accepted = body["accepted_ms"].as_u64().unwrap();
    assert_eq!(
        body["seq"].as_u64().unwrap() / 1000,
        accepted,
        "accepted_ms * 1000 + n"
    );
    let attributes = entry.attributes.as_ref().unwrap();
    let group = &attributes[&MessageSystemAttributeName::MessageGroupId];
    assert_eq!(group, "tenant/acme");

    let id = body["id"].as_str().unwrap();
    let name = format!("mailsluice/held/{id}");
    assert_eq!(
        store.objects("mailsluice/held/").await.len(),
        2,
        "slow and m2"
    );
    let object = String::from_utf8(store.object(&name).await).unwrap();
    assert!(object.starts_with("mailsluice-spool 1 "), "{object}");
    assert!(object.contains(&format!("\"id\":\"{id}\"")), "{object}");
    assert!(object.contains("\r\nX-Tenant: acme\r\nSubject: m2\r\n\r\nbody of m2\r\n"));
    assert_eq!(
        body["bytes"].as_u64().unwrap() as usize,
        object.len() - object.find("Received:").unwrap()
    );
    let head = (store.s3.head_object())
        .bucket(BUCKET)
        .key(&name)
        .checksum_mode(aws_sdk_s3::types::ChecksumMode::Enabled)
        .send()
        .await
        .unwrap();
    assert!(head.checksum_sha256.is_some(), "written with its SHA-256");
    let retry = (store.s3.put_object())
        .bucket(BUCKET)
        .key(&name)
        .if_none_match("*")
        .body(b"other".to_vec().into())
        .send()
        .await;
    assert!(
        retry.is_err(),
        "a second write of its name with If-None-Match fails"
    );
    gate.open.store(true, Ordering::Relaxed);
    relay.stop().await;
}
