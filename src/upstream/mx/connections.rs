//! The connections to MX hosts: one pool per host address (so a message to a domain reuses
//! the connection an earlier one left), and a bound per recipient domain on the connections
//! in use at once, so that a burst to one domain never opens more than its servers allow.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::guard::Guard;
use crate::config::{MxUpstream, UpstreamConfig, UpstreamTls};
use crate::upstream::client::Tls;
use crate::upstream::pool::{Connector, Login, Pool, Reconnect, Security};
use crate::upstream::reply::unavailable;
use crate::upstream::OwnAddresses;
use crate::upstream::{Classifier, UpstreamError};

/// Pools kept at most; past it, those no message is using are dropped (their parked
/// connections close), so a relay that has sent to many hosts holds no more than this.
const MAX_POOLS: usize = 1024;

type Domains = Arc<Mutex<HashMap<String, Arc<Semaphore>>>>;

pub(super) struct Connections {
    pub port: u16,
    pub timeout: Duration,
    tls: UpstreamTls,
    hello: String,
    pool_size: usize,
    /// Reads every MX host's refusals (`throttle_replies`, `quota_replies`), on connecting and
    /// in the transactions.
    pub classifier: Classifier,
    per_domain: usize,
    /// For every MX host's pool.
    reconnect: Reconnect,
    pools: Mutex<HashMap<SocketAddr, Arc<Pool>>>,
    domains: Domains,
    /// Which addresses may be connected to at all.
    pub guard: Guard,
}

/// The right to use one connection for a domain; the domain's entry goes with its last one.
pub(super) struct DomainPermit {
    permit: Option<OwnedSemaphorePermit>,
    domain: String,
    domains: Domains,
}

impl Drop for DomainPermit {
    fn drop(&mut self) {
        drop(self.permit.take());
        let mut domains = self.domains.lock().expect("domains lock");
        // Only the map holds it: nobody uses or waits for the domain now.
        if domains
            .get(&self.domain)
            .is_some_and(|s| Arc::strong_count(s) == 1)
        {
            domains.remove(&self.domain);
        }
    }
}

impl Connections {
    pub fn new(cfg: &UpstreamConfig, mx: &MxUpstream, own: OwnAddresses) -> Connections {
        Connections {
            port: mx.port(),
            timeout: Duration::from_millis(cfg.timeout_ms.get()),
            tls: mx.client.tls,
            hello: mx.client.helo_name().to_string(),
            pool_size: cfg.pool_size.get(),
            classifier: Classifier::new(cfg),
            per_domain: mx.max_connections_per_domain().get(),
            reconnect: Reconnect::of(&mx.client),
            pools: Mutex::new(HashMap::new()),
            domains: Arc::new(Mutex::new(HashMap::new())),
            guard: Guard::new(mx.allow_networks().to_vec(), own),
        }
    }

    /// Waits (up to the timeout) until `domain` has a connection to spare.
    pub async fn permit(&self, domain: &str) -> Result<DomainPermit, UpstreamError> {
        let semaphore = {
            let mut domains = self.domains.lock().expect("domains lock");
            let entry = domains
                .entry(domain.to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_domain)));
            Arc::clone(entry)
        };
        let acquired = tokio::time::timeout(self.timeout, semaphore.acquire_owned()).await;
        let mut permit = DomainPermit {
            permit: None,
            domain: domain.to_string(),
            domains: Arc::clone(&self.domains),
        };
        match acquired {
            Ok(Ok(p)) => {
                permit.permit = Some(p);
                Ok(permit)
            }
            _ => Err(unavailable(format!(
                "all {} connections to {domain} stayed busy",
                self.per_domain
            ))),
        }
    }

    /// The pool of the MX host `name` at `addr`, made on first use.
    pub fn pool(&self, addr: SocketAddr, name: &str) -> Result<Arc<Pool>, UpstreamError> {
        let mut pools = self.pools.lock().expect("pools lock");
        if let Some(pool) = pools.get(&addr) {
            return Ok(Arc::clone(pool));
        }
        if pools.len() >= MAX_POOLS {
            pools.retain(|_, pool| Arc::strong_count(pool) > 1);
        }
        let connector = Connector {
            name: format!("MX host {name}"),
            host: addr.ip().to_string(),
            port: addr.port(),
            security: self.security(name)?,
            hello: self.hello.clone(),
            login: Login::None,
            classifier: self.classifier.clone(),
        };
        let pool = Pool::new(connector, self.pool_size, self.timeout);
        let pool = pool.with_reconnect(self.reconnect);
        let pool = Arc::new(pool);
        pools.insert(addr, Arc::clone(&pool));
        Ok(pool)
    }

    /// MX hosts are found through DNS, which an attacker may answer, and most carry
    /// certificates that match no name we could check: so, as Postfix does at `may` and
    /// `encrypt`, encrypt without verifying. `required` still refuses a host that offers
    /// no STARTTLS: the message never crosses in clear.
    fn security(&self, name: &str) -> Result<Security, UpstreamError> {
        let params =
            || Tls::unverified(name).map_err(|e| unavailable(format!("TLS for {name}: {e}")));
        Ok(match self.tls {
            UpstreamTls::None => Security::Plain,
            UpstreamTls::Opportunistic => Security::Opportunistic(params()?),
            UpstreamTls::Required => Security::Required(params()?),
        })
    }
}
