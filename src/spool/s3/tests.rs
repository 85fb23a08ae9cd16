//! The s3 store's hold against moto's server (S3 and SQS): an object is never overwritten
//! (a second hold of the same id is refused and leaves the first as it was, with one entry),
//! and an entry SQS refuses leaves no object behind.

use std::sync::Arc;

use aws_config::BehaviorVersion;
use mailsluice_test_support::moto::{self, MotoServer};

use super::super::{HeldKey, Origin, Refusal, Spool, Storage, ToHold};
use crate::clock::TokioClock;
use crate::config::Config;
use crate::message::Envelope;
use crate::observe::spool_store_metrics::SpoolStoreMetrics;

const BUCKET: &str = "held-mail";

struct Moto {
    server: MotoServer,
    s3: aws_sdk_s3::Client,
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
}

async fn moto() -> Option<Moto> {
    let Some(server) = MotoServer::spawn().await else {
        mailsluice_test_support::host::skip("moto_server is not installed");
        return None;
    };
    let shared = aws_config::defaults(BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(server.url())
        .credentials_provider(moto::credentials())
        .load()
        .await;
    let s3 = aws_sdk_s3::config::Builder::from(&shared).force_path_style(true);
    let s3 = aws_sdk_s3::Client::from_conf(s3.build());
    let sqs = aws_sdk_sqs::Client::new(&shared);
    s3.create_bucket().bucket(BUCKET).send().await.unwrap();
    let queue = sqs.create_queue().queue_name("held").send().await.unwrap();
    let queue_url = queue.queue_url.unwrap();
    Some(Moto {
        server,
        s3,
        sqs,
        queue_url,
    })
}

impl Moto {
    /// A spool on this bucket and on `queue_url`, nothing receiving.
    async fn spool(&self, queue_url: &str) -> Arc<Spool> {
        let text = format!(
            "{}[spool]\nstore = \"s3\"\nbucket = \"{BUCKET}\"\nqueue_url = \"{queue_url}\"\n\
             region = \"us-east-1\"\nendpoint_url = \"{}\"\n",
            "[smtp]\nlisten = [\"127.0.0.1:0\"]\n[upstream]\nurl = \"file://out\"\n",
            self.server.url()
        );
        let config = Config::parse(&text).unwrap().spool.unwrap();
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = SpoolStoreMetrics::register(&mut registry);
        let credentials = Some(moto::credentials());
        Spool::open_s3(&config, Arc::new(TokioClock::new()), metrics, credentials)
            .await
            .unwrap()
    }

    async fn objects(&self) -> Vec<(String, Vec<u8>)> {
        let listed = self
            .s3
            .list_objects_v2()
            .bucket(BUCKET)
            .send()
            .await
            .unwrap();
        let mut objects = Vec::new();
        for name in (listed.contents.unwrap_or_default().into_iter()).filter_map(|o| o.key) {
            let got = self.s3.get_object().bucket(BUCKET).key(&name).send().await;
            let bytes = got.unwrap().body.collect().await.unwrap().to_vec();
            objects.push((name, bytes));
        }
        objects
    }

    async fn entries(&self) -> usize {
        let received = (self.sqs.receive_message())
            .queue_url(&self.queue_url)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap();
        received.messages.unwrap_or_default().len()
    }
}

async fn hold(spool: &Spool, id: &str, body: &[u8]) -> Result<(), Refusal> {
    let envelope = Envelope {
        from: Some("app@acme.example".into()),
        rcpts: vec!["user@example.net".into()],
        ..Envelope::default()
    };
    let held = spool.hold(ToHold {
        id,
        key: HeldKey {
            layer: "tenant".into(),
            key: "acme".into(),
        },
        envelope: &envelope,
        origin: Origin {
            auth_tenant: None,
            header_trusted: true,
            peer: "127.0.0.1:5000".parse().unwrap(),
        },
        received: b"Received: by test\r\n",
        key_fields: b"",
        body,
        max_held: None,
        report: false,
    });
    held.await
}

#[tokio::test]
async fn an_object_is_never_overwritten() {
    let Some(moto) = moto().await else {
        return;
    };
    let spool = moto.spool(&moto.queue_url).await;
    let id = "0123456789abcdef";
    hold(&spool, id, b"Subject: one\r\n\r\nfirst\r\n")
        .await
        .unwrap();
    let again = hold(&spool, id, b"Subject: two\r\n\r\nsecond\r\n").await;
    assert!(
        matches!(again, Err(Refusal::Storage(Storage::Unwritable(_)))),
        "{again:?}"
    );
    let objects = moto.objects().await;
    assert_eq!(objects.len(), 1);
    assert_eq!(objects[0].0, format!("mailsluice/held/{id}"));
    let bytes = String::from_utf8(objects[0].1.clone()).unwrap();
    assert!(bytes.ends_with("Subject: one\r\n\r\nfirst\r\n"), "{bytes}");
    assert_eq!(moto.entries().await, 1, "the refused one sent no entry");
}

#[tokio::test]
async fn an_entry_not_sent_leaves_no_object() {
    let Some(moto) = moto().await else {
        return;
    };
    let missing = format!("{}/123456789012/no-such-queue", moto.server.url());
    let spool = moto.spool(&missing).await;
    let refused = hold(&spool, "00000000000000aa", b"Subject: x\r\n\r\nx\r\n").await;
    assert!(
        matches!(&refused, Err(Refusal::Storage(Storage::Unwritable(why))) if why.starts_with("SQS")),
        "{refused:?}"
    );
    assert!(moto.objects().await.is_empty(), "its object deleted");
}
