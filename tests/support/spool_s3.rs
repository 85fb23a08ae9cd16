//! The spool on S3 and SQS for a test (`[spool] store = "s3"`): moto's server with a bucket and
//! a standard queue, an [`AwsFault`] proxy in front of it, the `[spool]` table pointing the
//! relay at the proxy, and the credentials the relay's SDK reads from its environment.
//! `None` (a skip, `host::skip`) without `moto_server`.

use super::aws_fault::AwsFault;
use super::moto::{MotoServer, REGION};

pub const BUCKET: &str = "mailsluice-held";
/// `spool.prefix`'s default: held objects are `<PREFIX>held/<id>`.
pub const PREFIX: &str = "mailsluice/";

/// The relay's environment: moto takes any key; no instance metadata asked for.
pub const CREDENTIALS: [(&str, &str); 3] = [
    ("AWS_ACCESS_KEY_ID", "AKIDMAILSLUICETEST"),
    ("AWS_SECRET_ACCESS_KEY", "secret"),
    ("AWS_EC2_METADATA_DISABLED", "true"),
];

pub struct SpoolOnMoto {
    pub moto: MotoServer,
    /// Every S3 and SQS call of the relays goes through it.
    pub aws: AwsFault,
    pub queue_url: String,
}

impl SpoolOnMoto {
    /// moto, its bucket and queue (its own visibility timeout 2 s, as the tests'
    /// `visibility_ms`), and the proxy.
    pub async fn start() -> Option<SpoolOnMoto> {
        let moto = MotoServer::spawn().await?;
        moto.create_bucket(BUCKET).await;
        let attributes = serde_json::json!({"VisibilityTimeout": "2"});
        let queue_url = moto.create_queue("mailsluice-held", attributes).await;
        let aws = AwsFault::start(&moto).await;
        Some(SpoolOnMoto {
            moto,
            aws,
            queue_url,
        })
    }

    /// `[spool]` on this store, every call through the proxy, bounded by 10 s (moto on a
    /// loaded test machine is slow; the faults the tests inject are answered at once),
    /// retries after 1 s doubling to 2 s, and `extra` (keys of `[spool]`).
    pub fn section(&self, extra: &str) -> String {
        format!(
            "[spool]\nstore = \"s3\"\nbucket = \"{BUCKET}\"\nqueue_url = \"{}\"\n\
             region = \"{REGION}\"\nendpoint_url = \"{}\"\ntimeout_ms = 10000\n\
             retry_min_ms = 1000\nretry_max_ms = 2000\n{extra}\n",
            self.queue_url,
            self.aws.url()
        )
    }

    /// The ids of the messages whose objects are under `held/`.
    pub async fn held(&self) -> Vec<String> {
        let prefix = format!("{PREFIX}held/");
        let keys = self.moto.keys(BUCKET, &prefix).await;
        (keys.iter())
            .map(|k| k.strip_prefix(&prefix).unwrap_or(k).to_string())
            .collect()
    }

    /// The queue's entries, visible or not.
    pub async fn queued(&self) -> u64 {
        self.moto.queued(&self.queue_url).await
    }
}
