//! Where a run's spool lives, and the config of the relays on it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mailsluice_test_support::aws_fault::{Answered, AwsFault, Service};
use mailsluice_test_support::config::TestConfig;
use mailsluice_test_support::moto::{MotoServer, REGION};

use crate::measure::Side;

const BUCKET: &str = "mailsluice-bench";

/// A directory, or moto's bucket and queue behind the proxy.
pub enum Store {
    Dir(PathBuf),
    S3 {
        moto: Arc<MotoServer>,
        aws: AwsFault,
        queue_url: String,
    },
}

impl Store {
    /// moto with a bucket and a queue; the proxy in front of it runs on `proxy`.
    pub async fn s3(proxy: &Side) -> Store {
        let moto = Arc::new(MotoServer::spawn().await.expect("moto_server is installed"));
        moto.create_bucket(BUCKET).await;
        let queue_url = moto.create_queue("held", serde_json::json!({})).await;
        let target = moto.clone();
        let aws = proxy
            .run(async move { AwsFault::start(&target).await })
            .await;
        Store::S3 {
            moto,
            aws,
            queue_url,
        }
    }

    pub fn is_s3(&self) -> bool {
        matches!(self, Store::S3 { .. })
    }

    /// The `[spool]` table, with `extra` keys.
    fn section(&self, extra: &str) -> String {
        match self {
            Store::Dir(dir) => format!(
                "[spool]\ndir = \"{}\"\nmin_free_bytes = 0\n{extra}\n",
                dir.display()
            ),
            Store::S3 { aws, queue_url, .. } => format!(
                "[spool]\nstore = \"s3\"\nbucket = \"{BUCKET}\"\nqueue_url = \"{queue_url}\"\n\
                 region = \"{REGION}\"\nendpoint_url = \"{}\"\n{extra}\n",
                aws.url()
            ),
        }
    }

    /// A relay's config: one hold layer (`layer`, see [`hold_layer`]) and this spool with
    /// `spool` keys; its upstream is the forwarder the run gives it.
    pub fn config(&self, layer: &str, spool: &str) -> String {
        TestConfig::new()
            .upstream("file://unused")
            .then(layer)
            .then(&self.section(spool))
            .text()
    }

    /// Waits until all `held` are in the store and, on S3 and SQS, visible to a releaser
    /// (the entry the holding relay had received comes back after its `retry_min_ms`).
    pub async fn wait_visible(&self, held: usize) {
        match self {
            Store::Dir(dir) => {
                let files = std::fs::read_dir(dir.join("held")).unwrap().count();
                assert_eq!(files, held, "held in the spool");
            }
            Store::S3 {
                moto, queue_url, ..
            } => {
                let start = Instant::now();
                let input = serde_json::json!({"QueueUrl": queue_url, "AttributeNames": ["All"]});
                loop {
                    let got = moto.sqs("GetQueueAttributes", input.clone()).await;
                    let visible = &got["Attributes"]["ApproximateNumberOfMessages"];
                    if visible.as_str() == Some(held.to_string().as_str()) {
                        return;
                    }
                    assert!(start.elapsed() < Duration::from_secs(120), "held: {got}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// Whether all `held` are released and gone from the store: `held/` empty, or as many
    /// objects deleted through the proxy.
    pub fn released(&self, held: usize) -> bool {
        match self {
            Store::Dir(dir) => std::fs::read_dir(dir.join("held")).unwrap().count() == 0,
            Store::S3 { aws, .. } => aws.count(Service::S3, "DeleteObject") as usize >= held,
        }
    }

    /// Every S3 and SQS call so far (none with a directory).
    pub fn answered(&self) -> Vec<Answered> {
        match self {
            Store::Dir(_) => Vec::new(),
            Store::S3 { aws, .. } => aws.answered(),
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Store::Dir(dir) = self {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A hold-mode layer on one key (`key = "none"`): `limit` messages per `interval_ms`, with
/// `burst`, held at once when the tokens are not there, and `extra` keys.
pub fn hold_layer(limit: usize, interval_ms: u64, burst: usize, extra: &str) -> String {
    format!(
        "[[throttle]]\nname = \"hold\"\nkey = \"none\"\ncost = \"message\"\nlimit = {limit}\n\
         interval_ms = {interval_ms}\nburst = {burst}\nmode = \"hold\"\nmax_wait_ms = 0\n\
         max_held = 1000000\n{extra}"
    )
}
