//! The S3 and SQS clients of the s3 store, built from `[spool]`: its region, its one endpoint
//! for both (path-style S3 addressing then, as S3-compatible servers serve it), credentials
//! from the SDK's default chain unless given, and every call bounded by `timeout_ms` (connect
//! and whole operation). The SDK does not retry: a call past its bound fails, the hold
//! answers `452` and the client tries again, which keeps the `250`'s wait bounded.

use std::time::{Duration, Instant};

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::BehaviorVersion;
use aws_credential_types::provider::SharedCredentialsProvider;

use crate::config::S3Settings;
use crate::observe::spool_store_metrics::SpoolStoreMetrics;

/// The store's two clients and what counts their calls.
#[derive(Clone)]
pub struct Clients {
    pub s3: aws_sdk_s3::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub metrics: SpoolStoreMetrics,
}

impl Clients {
    /// The clients of `settings`; `credentials` when given (tests), else the default chain.
    pub async fn build(
        settings: &S3Settings,
        credentials: Option<SharedCredentialsProvider>,
        metrics: SpoolStoreMetrics,
    ) -> Clients {
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(settings.timeout)
            .operation_timeout(settings.timeout)
            .build();
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .region(aws_config::Region::new(settings.region.clone()))
            .timeout_config(timeouts)
            .retry_config(RetryConfig::disabled());
        if let Some(url) = &settings.endpoint_url {
            loader = loader.endpoint_url(url);
        }
        if let Some(credentials) = credentials {
            loader = loader.credentials_provider(credentials);
        }
        let shared = loader.load().await;
        let s3 = aws_sdk_s3::config::Builder::from(&shared)
            .force_path_style(settings.endpoint_url.is_some())
            .build();
        Clients {
            s3: aws_sdk_s3::Client::from_conf(s3),
            sqs: aws_sdk_sqs::Client::new(&shared),
            metrics,
        }
    }

    /// Runs one call of `service`'s `operation`, counted and timed.
    pub async fn call<T, E>(
        &self,
        service: &'static str,
        operation: &'static str,
        call: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let started = Instant::now();
        let result = call.await;
        let took: Duration = started.elapsed();
        self.metrics.call(service, operation, result.is_ok(), took);
        result
    }
}
