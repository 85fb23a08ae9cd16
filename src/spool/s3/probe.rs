//! Whether the s3 store can be written, for `/readyz` (after a write failed) and `mailsluice
//! check`: a probe object `<prefix>probe/<replica>` put and deleted, and the queue's
//! attributes read (an entry cannot be sent without being one). The replica is the host's
//! name (a pod's name on Kubernetes), else the process id, so that replicas probing at once
//! do not delete each other's probe.

use aws_sdk_s3::primitives::ByteStream;

use super::client::Clients;
use super::entries::Entries;
use super::objects::Objects;
use super::{CallFailed, S3Store};
use crate::config::SpoolConfig;
use crate::observe::spool_store_metrics::SpoolStoreMetrics;
use crate::spool::{Spool, SpoolError};

/// Why the probe failed: S3 or SQS, naming the bucket or the queue.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProbeFailed {
    #[error("S3: writing {object} in bucket {bucket}: {why}")]
    Bucket {
        bucket: String,
        object: String,
        why: CallFailed,
    },
    #[error("SQS: reading the attributes of queue {queue}: {why}")]
    Queue { queue: String, why: CallFailed },
}

/// This replica's probe object's name under `prefix`.
fn probe_name(prefix: &str) -> String {
    let host = std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty());
    let replica = host.unwrap_or_else(|| std::process::id().to_string());
    format!("{prefix}probe/{replica}")
}

/// Puts and deletes the probe object, then reads the queue's attributes.
pub async fn probe(c: &Clients, objects: &Objects, entries: &Entries) -> Result<(), ProbeFailed> {
    let object = probe_name(&objects.prefix);
    let bucket = |why| ProbeFailed::Bucket {
        bucket: objects.bucket.clone(),
        object: object.clone(),
        why,
    };
    let put = (c.s3.put_object())
        .bucket(&objects.bucket)
        .key(&object)
        .body(ByteStream::from_static(b"probe"))
        .send();
    let put = c.call("s3", "PutObject", put).await;
    put.map_err(|e| bucket(CallFailed::of(&e)))?;
    objects.delete(c, &object).await.map_err(bucket)?;
    entries.count(c).await.map_err(|why| ProbeFailed::Queue {
        queue: entries.queue_url.clone(),
        why,
    })?;
    Ok(())
}

impl Spool {
    /// As [`Spool::check`] for `store = "s3"`: the probe, with the SDK's default credentials
    /// and no store opened; an error names the bucket and the queue. Nothing without the s3
    /// store's settings.
    pub async fn check_s3(config: &SpoolConfig) -> Result<(), SpoolError> {
        let Some(settings) = config.s3() else {
            return Ok(());
        };
        let metrics = SpoolStoreMetrics::register(&mut Default::default());
        let checked = S3Store::check(&settings, metrics).await;
        checked.map_err(|why| SpoolError::S3 {
            bucket: settings.bucket,
            queue: settings.queue_url,
            why: why.to_string(),
        })
    }
}
