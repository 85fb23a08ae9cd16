//! SES's events from an SQS queue (`[reputation.sqs]`): long polls of up to 10 messages, each
//! applied to the reputation guard and then deleted. A malformed message is logged, counted
//! and deleted too: it would never parse better, and retrying it forever would hold the
//! queue. The queue's IAM policy is what authenticates its messages, so an SNS envelope read
//! here is not signature-checked. Credentials come from the AWS default chain, as for
//! `ses://`.

use std::sync::Arc;
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_sdk_sqs::config::{Region, SharedCredentialsProvider};
use aws_sdk_sqs::error::{BuildError, SdkError};
use aws_sdk_sqs::operation::delete_message_batch::DeleteMessageBatchError;
use aws_sdk_sqs::operation::receive_message::ReceiveMessageError;
use aws_sdk_sqs::types::DeleteMessageBatchRequestEntry;
use aws_sdk_sqs::Client;

use crate::config::SqsConfig;
use crate::observe::cause;
use crate::observe::metrics::Metrics;
use crate::reputation::{intake, Reputation};
use crate::state::deps::Deps;
use crate::state::shutdown::Shutdown;

/// SQS's largest batch.
pub const BATCH: i32 = 10;
/// SQS's longest long poll: one request every 20 s on an idle queue.
pub const LONG_POLL_SECS: i32 = 20;
/// The longest pause after a failed poll (doubling from 1 s).
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The SQS client for `config`, with `credentials` when given, else the default chain.
pub async fn client(config: &SqsConfig, credentials: Option<SharedCredentialsProvider>) -> Client {
    let mut loader =
        aws_config::defaults(BehaviorVersion::latest()).region(Region::new(config.region.clone()));
    if let Some(url) = &config.endpoint_url {
        loader = loader.endpoint_url(url);
    }
    if let Some(credentials) = credentials {
        loader = loader.credentials_provider(credentials);
    }
    Client::new(&loader.load().await)
}

/// Starts the consumer when `[reputation.sqs]` is set; it ends with `shutdown`.
pub fn start(deps: &Deps, shutdown: Shutdown) -> Option<tokio::task::JoinHandle<()>> {
    let reputation = deps.services.reputation.clone()?;
    let sqs = deps.setup.config.reputation.as_ref()?.sqs.clone()?;
    let metrics = deps.services.metrics.clone();
    tracing::info!(
        target: "mailsluice::reputation",
        queue = sqs.queue_url.get_ref().as_str(),
        region = sqs.region.as_str(),
        "reputation.sqs started: reading SES's events"
    );
    Some(tokio::spawn(async move {
        let client = client(&sqs, None).await;
        let consumer = Consumer {
            client,
            queue_url: sqs.queue_url.into_inner(),
            reputation,
            metrics,
            wait_secs: LONG_POLL_SECS,
        };
        consumer.run(shutdown).await
    }))
}

/// Why a poll did not apply and delete its whole batch; the consumer logs it and polls again
/// after a pause. The SDK's errors are shown with their sources' texts (their own is only
/// "service error", SQS's words are in the sources), never their debug dump.
#[derive(Debug, thiserror::Error)]
pub enum PollError {
    #[error("{}", cause::short(.0.as_ref()))]
    Receive(Box<SdkError<ReceiveMessageError>>),
    #[error("{0}")]
    Entry(BuildError),
    #[error("{}", cause::short(.0.as_ref()))]
    Delete(Box<SdkError<DeleteMessageBatchError>>),
    /// Applied but not deleted: they come again and count once (their feedback id).
    #[error("{0} messages not deleted")]
    NotDeleted(usize),
    /// The guard could not apply them for want of Redis: they stay queued.
    #[error("{0} messages not applied (Redis did not answer), left queued")]
    NotApplied(usize),
}

pub struct Consumer {
    pub client: Client,
    pub queue_url: String,
    pub reputation: Arc<Reputation>,
    pub metrics: Arc<Metrics>,
    /// The long poll's wait (`LONG_POLL_SECS`; less in tests).
    pub wait_secs: i32,
}

impl Consumer {
    /// Polls until `shutdown`; a failed poll is logged and tried again after a pause.
    pub async fn run(&self, mut shutdown: Shutdown) {
        let mut backoff = Duration::from_secs(1);
        loop {
            let polled = tokio::select! {
                polled = self.poll_once() => polled,
                _ = shutdown.wait() => return,
            };
            match polled {
                Ok(_) => backoff = Duration::from_secs(1),
                Err(e) => {
                    tracing::warn!(
                        target: "mailsluice::reputation",
                        queue = self.queue_url.as_str(),
                        error = %e,
                        retry_in_s = backoff.as_secs(),
                        "reputation.sqs failed"
                    );
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = shutdown.wait() => return,
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    /// One long poll: up to `BATCH` messages applied, then deleted. Returns how many.
    /// A message the guard could not apply for want of Redis is not deleted: SQS delivers it
    /// again after its visibility timeout (and its feedback id keeps it counted once).
    pub async fn poll_once(&self) -> Result<usize, PollError> {
        let received = (self.client.receive_message())
            .queue_url(&self.queue_url)
            .max_number_of_messages(BATCH)
            .wait_time_seconds(self.wait_secs)
            .send()
            .await
            .map_err(|e| PollError::Receive(Box::new(e)))?;
        let messages = received.messages.unwrap_or_default();
        let mut done = Vec::with_capacity(messages.len());
        let mut kept = 0;
        for (i, message) in messages.iter().enumerate() {
            if !self
                .apply(message.body.as_deref().unwrap_or_default())
                .await
            {
                kept += 1;
                continue;
            }
            if let Some(handle) = &message.receipt_handle {
                let entry = DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(handle)
                    .build()
                    .map_err(PollError::Entry)?;
                done.push(entry);
            }
        }
        if done.is_empty() {
            return match kept {
                0 => Ok(messages.len()),
                n => Err(PollError::NotApplied(n)),
            };
        }
        let deleted = (self.client.delete_message_batch())
            .queue_url(&self.queue_url)
            .set_entries(Some(done))
            .send()
            .await
            .map_err(|e| PollError::Delete(Box::new(e)))?;
        if !deleted.failed.is_empty() {
            return Err(PollError::NotDeleted(deleted.failed.len()));
        }
        if kept > 0 {
            return Err(PollError::NotApplied(kept));
        }
        Ok(messages.len())
    }

    /// One message body applied (see `reputation::intake`). False when it could not be
    /// applied now (Redis did not answer): it stays in the queue.
    async fn apply(&self, body: &str) -> bool {
        (intake::take_in(&self.reputation, &self.metrics, body, "sqs").await).is_ok()
    }
}
