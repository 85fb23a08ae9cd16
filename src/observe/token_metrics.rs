//! What the relay counts of its XOAUTH2 upstreams' tokens: the requests to their token
//! endpoints, by result (`issued`, `failed`; each from 0, so an alert has a series before the
//! first failure; the log's `upstream.token_failed` names the upstream). A failure is what
//! makes messages get `451 4.7.0`, so it is the one to alert on.

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabel {
    pub result: &'static str,
}

const RESULTS: [&str; 2] = ["issued", "failed"];

pub struct TokenMetrics {
    requests: Family<TokenLabel, Counter>,
    /// Each forwarder's counts last added, by upstream and result.
    seen: Mutex<HashMap<(String, &'static str), u64>>,
}

impl TokenMetrics {
    pub fn register(r: &mut Registry) -> TokenMetrics {
        let m = TokenMetrics {
            requests: Family::default(),
            seen: Mutex::default(),
        };
        for result in RESULTS {
            m.requests.get_or_create(&TokenLabel { result }).inc_by(0);
        }
        r.register(
            "upstream_token_requests",
            "Requests for an XOAUTH2 upstream's token to its token endpoint, by result (issued, \
             failed: unreachable, timed out or refused)",
            m.requests.clone(),
        );
        m
    }

    /// A forwarder's own counts of token requests: what is new since the last reading is
    /// added (a reload's new forwarder counts from 0 again).
    pub fn requests(&self, upstream: &str, issued: u64, failed: u64) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        for (result, total) in [("issued", issued), ("failed", failed)] {
            let before = seen
                .insert((upstream.to_string(), result), total)
                .unwrap_or(0);
            let new = if total >= before {
                total - before
            } else {
                total
            };
            self.requests
                .get_or_create(&TokenLabel { result })
                .inc_by(new);
        }
    }
}
