//! What the relay counts of SES's tenants, beyond sending: senders let through unchecked, the
//! calls to SES's API about tenants that failed (by operation, each from 0), and the tenants
//! the SES sync read, by SES's status and reputation impact.

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// An operation of an upstream's API (SES's, beyond sending).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabel {
    pub operation: &'static str,
}

/// SES's word on a tenant: its aggregate sending status and reputation impact (`NONE` when
/// it has no finding).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SesTenantLabel {
    pub aggregate: String,
    pub impact: String,
}

/// SES's operations about tenants, each counted from 0.
const SES_CALLS: [&str; 6] = [
    "ListTenants",
    "ListTenantResources",
    "GetTenant",
    "GetReputationEntity",
    "UpdateReputationEntityCustomerManagedStatus",
    "PutSuppressedDestination",
];

pub struct SesMetrics {
    identity_unchecked: Counter,
    calls_failed: Family<CallLabel, Counter>,
    tenants: Family<SesTenantLabel, Gauge>,
    /// Each forwarder's count of failed calls last added, by upstream and operation.
    calls_seen: Mutex<HashMap<(String, &'static str), u64>>,
}

impl SesMetrics {
    pub fn register(r: &mut Registry) -> SesMetrics {
        let m = SesMetrics {
            identity_unchecked: Counter::default(),
            calls_failed: Family::default(),
            tenants: Family::default(),
            calls_seen: Mutex::default(),
        };
        for operation in SES_CALLS {
            m.calls_failed
                .get_or_create(&CallLabel { operation })
                .inc_by(0);
        }
        r.register(
            "ses_identity_unchecked",
            "Senders of an SES tenant let through unchecked: the tenant's identities not known \
             (not read yet, or SES's API failing)",
            m.identity_unchecked.clone(),
        );
        r.register(
            "ses_calls_failed",
            "Calls to SES's API about tenants (their list, identities, status, suppression) that failed",
            m.calls_failed.clone(),
        );
        r.register(
            "ses_tenants",
            "SES tenants read by the reputation guard's SES sync, by SES's aggregate sending \
             status and reputation impact",
            m.tenants.clone(),
        );
        m
    }

    /// The SES tenants read, each as `(aggregate, impact)`: the gauge set to these counts (the
    /// usual values shown at 0 when no tenant has them).
    pub fn tenants<'a>(&self, tenants: impl Iterator<Item = (&'a str, &'a str)>) {
        self.tenants.clear();
        for aggregate in ["ENABLED", "DISABLED", "REINSTATED"] {
            for impact in ["NONE", "LOW", "HIGH"] {
                let label = SesTenantLabel {
                    aggregate: aggregate.to_string(),
                    impact: impact.to_string(),
                };
                self.tenants.get_or_create(&label).set(0);
            }
        }
        for (aggregate, impact) in tenants {
            let label = SesTenantLabel {
                aggregate: aggregate.to_string(),
                impact: impact.to_string(),
            };
            self.tenants.get_or_create(&label).inc();
        }
    }

    /// A sender of an SES tenant let through unchecked.
    pub fn identity_unchecked(&self) {
        self.identity_unchecked.inc();
    }

    /// A forwarder's own count of failed API calls of `operation`: what is new since the last
    /// reading is added (a reload's new forwarder counts from 0 again).
    pub fn calls_failed(&self, upstream: &str, operation: &'static str, total: u64) {
        let label = CallLabel { operation };
        let mut seen = self.calls_seen.lock().unwrap_or_else(|e| e.into_inner());
        let before = seen
            .insert((upstream.to_string(), operation), total)
            .unwrap_or(0);
        let new = if total >= before {
            total - before
        } else {
            total
        };
        self.calls_failed.get_or_create(&label).inc_by(new);
    }
}
