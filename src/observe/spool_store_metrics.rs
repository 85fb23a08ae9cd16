//! The calls of the spool's s3 store to S3 and SQS: each one counted by its outcome and
//! timed, so that an operator sees what holding and releasing cost in requests, which calls
//! fail, and how long the store takes to answer (the `250` of a held message waits for two).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// One call: `service` (`s3` or `sqs`), its `operation` (the API's name), `ok` or `error`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabel {
    pub service: &'static str,
    pub operation: &'static str,
    pub outcome: &'static str,
}

/// One kind of call, for its time.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabel {
    pub service: &'static str,
    pub operation: &'static str,
}

/// The calls the s3 store makes, by service.
pub const CALLS: [(&str, &str); 10] = [
    ("s3", "PutObject"),
    ("s3", "GetObject"),
    ("s3", "CopyObject"),
    ("s3", "DeleteObject"),
    ("sqs", "SendMessage"),
    ("sqs", "ReceiveMessage"),
    ("sqs", "DeleteMessage"),
    ("sqs", "ChangeMessageVisibility"),
    ("sqs", "ChangeMessageVisibilityBatch"),
    ("sqs", "GetQueueAttributes"),
];

#[derive(Clone)]
pub struct SpoolStoreMetrics {
    calls: Family<CallLabel, Counter>,
    seconds: Family<OperationLabel, Histogram, fn() -> Histogram>,
}

fn call_histogram() -> Histogram {
    // 1 ms .. ~16 s: a call bounded by `timeout_ms` (5 s by default) lives in that range.
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

impl SpoolStoreMetrics {
    pub fn register(r: &mut Registry) -> SpoolStoreMetrics {
        let m = SpoolStoreMetrics {
            calls: Family::default(),
            seconds: Family::new_with_constructor(call_histogram as fn() -> Histogram),
        };
        // Every call from 0, so that rates and alerts work before the first.
        for (service, operation) in CALLS {
            for outcome in ["ok", "error"] {
                let label = CallLabel {
                    service,
                    operation,
                    outcome,
                };
                m.calls.get_or_create(&label).inc_by(0);
            }
            let _ = m
                .seconds
                .get_or_create(&OperationLabel { service, operation });
        }
        let calls = "Calls of the spool's s3 store to S3 and SQS, by service, operation and \
                     outcome";
        r.register("spool_store_calls", calls, m.calls.clone());
        let seconds = "Time the spool's s3 store's calls to S3 and SQS took, by service and \
                       operation";
        r.register("spool_store_call_seconds", seconds, m.seconds.clone());
        m
    }

    /// One call of `service`'s `operation` ended after `took`.
    pub fn call(&self, service: &'static str, operation: &'static str, ok: bool, took: Duration) {
        let outcome = if ok { "ok" } else { "error" };
        let label = CallLabel {
            service,
            operation,
            outcome,
        };
        self.calls.get_or_create(&label).inc();
        let label = OperationLabel { service, operation };
        (self.seconds.get_or_create(&label)).observe(took.as_secs_f64());
    }
}
