//! SES tenants in the fake SESv2 endpoint (`support::ses`), for what moto's server does not
//! serve: `ListTenants` and `ListTenantResources` (paged, two entries a page, so paging is
//! exercised),
//! `GetTenant`, `GetReputationEntity`, `UpdateReputationEntityCustomerManagedStatus` and
//! `PutSuppressedDestination`, as the AWS SDK speaks them (REST-JSON, errors named by
//! `x-amzn-errortype`). Each call is recorded; an operation can be made to fail (500) or to
//! wait until the test lets it answer; the most calls in flight at once is kept.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use percent_encoding::percent_decode_str;
use serde_json::{json, Value};
use tokio::sync::watch;

/// Entries of one `ListTenantResources` page.
const PAGE: usize = 2;

/// One tenant as the fake SES keeps it.
#[derive(Debug, Clone)]
pub struct FakeTenant {
    pub arn: String,
    pub identities: Vec<String>,
    pub customer: String,
    pub managed: String,
    pub impact: Option<String>,
}

/// One call the fake answered (or failed): its operation, and the body or path it named.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub operation: &'static str,
    pub target: String,
    pub body: Value,
    /// The HTTP status the fake answered.
    pub status: u16,
}

pub struct SesTenants {
    tenants: Mutex<BTreeMap<String, FakeTenant>>,
    failing: Mutex<HashSet<&'static str>>,
    calls: Mutex<Vec<Call>>,
    /// While false, tenant calls wait before they answer.
    open: watch::Sender<bool>,
    in_flight: AtomicU64,
    most_in_flight: AtomicU64,
}

impl Default for SesTenants {
    fn default() -> SesTenants {
        SesTenants {
            tenants: Mutex::default(),
            failing: Mutex::default(),
            calls: Mutex::default(),
            open: watch::channel(true).0,
            in_flight: AtomicU64::new(0),
            most_in_flight: AtomicU64::new(0),
        }
    }
}

/// The operation a request head names, if it is one of these.
pub fn operation(head: &str) -> Option<&'static str> {
    let line = head.lines().next().unwrap_or("");
    let path = line.split(' ').nth(1).unwrap_or("");
    Some(match line.split(' ').next().unwrap_or("") {
        "POST" if path.starts_with("/v2/email/tenants/resources/list") => "ListTenantResources",
        "POST" if path.starts_with("/v2/email/tenants/list") => "ListTenants",
        "POST" if path.starts_with("/v2/email/tenants/get") => "GetTenant",
        "GET" if path.starts_with("/v2/email/reputation/entities/") => "GetReputationEntity",
        "PUT" if path.ends_with("/customer-managed-status") => {
            "UpdateReputationEntityCustomerManagedStatus"
        }
        "PUT" if path.starts_with("/v2/email/suppression/addresses") => "PutSuppressedDestination",
        _ => return None,
    })
}

impl SesTenants {
    /// A tenant SES knows, enabled, with these identities (domains or addresses).
    pub fn add(&self, name: &str, identities: &[&str]) {
        let tenant = FakeTenant {
            arn: format!("arn:aws:ses:eu-west-1:123456789012:tenant/{name}/tn-{name}0001"),
            identities: identities.iter().map(|i| i.to_string()).collect(),
            customer: "ENABLED".into(),
            managed: "ENABLED".into(),
            impact: None,
        };
        self.tenants
            .lock()
            .unwrap()
            .insert(name.to_string(), tenant);
    }

    /// SES forgets a tenant.
    pub fn remove(&self, name: &str) {
        self.tenants.lock().unwrap().remove(name);
    }

    /// Whether SES knows `name`, and associates `identity` (a domain or an address) with it:
    /// `None` when it does not know the tenant.
    pub fn associates(&self, name: &str, identity: &str) -> Option<bool> {
        let tenants = self.tenants.lock().unwrap();
        let tenant = tenants.get(name)?;
        let domain = identity.rsplit_once('@').map_or(identity, |(_, d)| d);
        let ids = &tenant.identities;
        Some(
            ids.iter()
                .any(|i| i.eq_ignore_ascii_case(identity) || i.eq_ignore_ascii_case(domain)),
        )
    }

    /// Changes a tenant SES knows.
    pub fn change(&self, name: &str, change: impl FnOnce(&mut FakeTenant)) {
        change(
            self.tenants
                .lock()
                .unwrap()
                .get_mut(name)
                .expect("a fake tenant"),
        );
    }

    pub fn tenant(&self, name: &str) -> FakeTenant {
        self.tenants.lock().unwrap()[name].clone()
    }

    /// `operation` answered 500 (`InternalFailure`) from now on, or again normally.
    pub fn fail(&self, operation: &'static str, failing: bool) {
        let mut set = self.failing.lock().unwrap();
        match failing {
            true => set.insert(operation),
            false => set.remove(operation),
        };
    }

    /// Tenant calls wait before answering until `open(true)`.
    pub fn open(&self, open: bool) {
        self.open.send_replace(open);
    }

    pub fn calls(&self, operation: &str) -> Vec<Call> {
        let calls = self.calls.lock().unwrap();
        calls
            .iter()
            .filter(|c| c.operation == operation)
            .cloned()
            .collect()
    }

    pub fn count(&self, operation: &str) -> usize {
        self.calls(operation).len()
    }

    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::SeqCst)
    }

    pub fn most_in_flight(&self) -> u64 {
        self.most_in_flight.load(Ordering::SeqCst)
    }

    /// Waits while the tenant calls are held; counts the call in flight until it is answered.
    pub async fn enter(&self) {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        let mut open = self.open.subscribe();
        let _ = open.wait_for(|open| *open).await;
    }

    /// The call is answered.
    pub fn leave(&self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }

    /// The answer to a tenant call: status, error type, JSON.
    pub fn answer(
        &self,
        op: &'static str,
        head: &str,
        body: &[u8],
    ) -> (u16, Option<String>, String) {
        let path = head
            .lines()
            .next()
            .unwrap_or("")
            .split(' ')
            .nth(1)
            .unwrap_or("");
        let json: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let target = match op {
            "GetReputationEntity" | "UpdateReputationEntityCustomerManagedStatus" => {
                let arn = path.trim_start_matches("/v2/email/reputation/entities/RESOURCE/");
                let arn = arn.trim_end_matches("/customer-managed-status");
                percent_decode_str(arn).decode_utf8_lossy().to_string()
            }
            _ => json["TenantName"].as_str().unwrap_or("").to_string(),
        };
        let answer = self.answer_to(op, &target, &json);
        self.calls.lock().unwrap().push(Call {
            operation: op,
            target,
            body: json,
            status: answer.0,
        });
        answer
    }

    fn answer_to(
        &self,
        op: &'static str,
        target: &str,
        json: &Value,
    ) -> (u16, Option<String>, String) {
        let target = target.to_string();
        let error = |status, kind: &str, text: &str| {
            (
                status,
                Some(kind.to_string()),
                json!({ "message": text }).to_string(),
            )
        };
        if self.failing.lock().unwrap().contains(op) {
            return error(500, "InternalFailure", "Internal failure.");
        }
        let mut tenants = self.tenants.lock().unwrap();
        if op == "ListTenants" {
            return (200, None, list_page(&tenants, json).to_string());
        }
        let by_arn = |tenants: &BTreeMap<String, FakeTenant>| {
            (tenants.iter())
                .find(|(_, t)| t.arn == target)
                .map(|(n, _)| n.clone())
        };
        let found = match op {
            "GetReputationEntity" | "UpdateReputationEntityCustomerManagedStatus" => {
                by_arn(&tenants)
            }
            _ => tenants.contains_key(&target).then(|| target.clone()),
        };
        let Some(name) = found else {
            return error(404, "NotFoundException", "Resource not found.");
        };
        let tenant = tenants.get_mut(&name).unwrap();
        let answer = match op {
            "ListTenantResources" => {
                let from: usize = json["NextToken"].as_str().map_or(0, |t| t.parse().unwrap());
                let page: Vec<Value> = (tenant.identities.iter().skip(from).take(PAGE))
                    .map(|id| {
                        json!({
                            "ResourceType": "EMAIL_IDENTITY",
                            "ResourceArn": format!("arn:aws:ses:eu-west-1:123456789012:identity/{id}"),
                        })
                    })
                    .collect();
                let mut out = json!({ "TenantResources": page });
                if from + PAGE < tenant.identities.len() {
                    out["NextToken"] = json!((from + PAGE).to_string());
                }
                out
            }
            "GetTenant" => json!({ "Tenant": {
                "TenantName": name,
                "TenantId": format!("tn-{name}0001"),
                "TenantArn": tenant.arn,
                "SendingStatus": aggregate(tenant),
            }}),
            "GetReputationEntity" => {
                let mut entity = json!({
                    "ReputationEntityReference": tenant.arn,
                    "ReputationEntityType": "RESOURCE",
                    "CustomerManagedStatus": { "Status": tenant.customer },
                    "AwsSesManagedStatus": { "Status": tenant.managed },
                    "SendingStatusAggregate": aggregate(tenant),
                });
                if let Some(impact) = &tenant.impact {
                    entity["ReputationImpact"] = json!(impact);
                }
                json!({ "ReputationEntity": entity })
            }
            "UpdateReputationEntityCustomerManagedStatus" => {
                tenant.customer = json["SendingStatus"].as_str().unwrap_or("").to_string();
                json!({})
            }
            _ => json!({}),
        };
        (200, None, answer.to_string())
    }
}

/// One page of `ListTenants`: the tenants by name from `NextToken` on.
fn list_page(tenants: &BTreeMap<String, FakeTenant>, json: &Value) -> Value {
    let from: usize = json["NextToken"].as_str().map_or(0, |t| t.parse().unwrap());
    let page: Vec<Value> = (tenants.iter().skip(from).take(PAGE))
        .map(|(name, tenant)| {
            json!({
                "TenantName": name,
                "TenantId": format!("tn-{name}0001"),
                "TenantArn": tenant.arn,
            })
        })
        .collect();
    let mut out = json!({ "Tenants": page });
    if from + PAGE < tenants.len() {
        out["NextToken"] = json!((from + PAGE).to_string());
    }
    out
}

/// SES's aggregate: disabled when either status is.
fn aggregate(tenant: &FakeTenant) -> &'static str {
    match (tenant.customer.as_str(), tenant.managed.as_str()) {
        ("DISABLED", _) | (_, "DISABLED") => "DISABLED",
        _ => "ENABLED",
    }
}
