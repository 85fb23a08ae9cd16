//! The webhooks' metrics, per webhook (names come from the config, so the label set is
//! bounded): events sent, failed, dropped, and the queue's depth.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabel {
    pub webhook: String,
}

pub struct WebhookFamilies {
    sent: Family<WebhookLabel, Counter>,
    failed: Family<WebhookLabel, Counter>,
    dropped: Family<WebhookLabel, Counter>,
    queued: Family<WebhookLabel, Gauge>,
}

/// One webhook's handles, kept by its queue and its delivery task.
#[derive(Clone, Default)]
pub struct WebhookCounters {
    /// Events its receiver took (a 2xx).
    pub sent: Counter,
    /// Events given up: a 4xx, or every attempt failed.
    pub failed: Counter,
    /// Events dropped unsent, its queue full.
    pub dropped: Counter,
    /// Events waiting in its queue.
    pub queued: Gauge,
}

impl WebhookFamilies {
    pub fn register(r: &mut Registry) -> WebhookFamilies {
        let families = WebhookFamilies {
            sent: Family::default(),
            failed: Family::default(),
            dropped: Family::default(),
            queued: Family::default(),
        };
        let sent = "Webhook events its receiver took (a 2xx), per webhook";
        r.register("webhook_sent", sent, families.sent.clone());
        let failed = "Webhook events given up: the receiver answered 4xx, or it still failed past \
                      retry_window_ms";
        r.register("webhook_failed", failed, families.failed.clone());
        let dropped =
            "Webhook events dropped unsent: the webhook's queue was full (max_queue, max_queue_bytes)";
        r.register("webhook_dropped", dropped, families.dropped.clone());
        let queued = "Webhook events waiting in the webhook's queue";
        r.register("webhook_queued", queued, families.queued.clone());
        families
    }

    /// The handles of the webhook `name`, each shown from 0.
    pub fn counters(&self, name: &str) -> WebhookCounters {
        let label = WebhookLabel {
            webhook: name.to_string(),
        };
        WebhookCounters {
            sent: self.sent.get_or_create(&label).clone(),
            failed: self.failed.get_or_create(&label).clone(),
            dropped: self.dropped.get_or_create(&label).clone(),
            queued: self.queued.get_or_create(&label).clone(),
        }
    }
}
