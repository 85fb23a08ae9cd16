//! Where a domain's mail goes, asked of DNS with hickory-resolver (its cache keeps each answer
//! for its TTL), and DNS's failures as the answers the client gets: a domain that does not
//! exist is permanent (`550 5.1.2`), one that refuses mail by a null MX too (`556 5.1.10`,
//! RFC 7505), and a lookup that failed or timed out is worth a retry (`451 4.4.3`).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::config::{NameServerConfig, ResolveHosts, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::NetError;
use hickory_resolver::proto::op::ResponseCode;
use hickory_resolver::proto::rr::{RData, RecordType};
use hickory_resolver::{Resolver, TokioResolver};

use crate::upstream::reply::rejected;
use crate::upstream::UpstreamError;

/// MX hosts of one domain considered at most, best first (each may have several addresses).
const MAX_HOSTS: usize = 5;

/// The hosts to try for a domain, best first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Route {
    pub hosts: Vec<String>,
    /// No MX record: the domain itself is the host (RFC 5321 5.1).
    pub implicit: bool,
}

/// Why the DNS resolver of `mx://` could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ResolverSetupError {
    #[error("upstream: reading the system's DNS configuration: {0}")]
    SystemConfig(NetError),
    #[error("upstream: setting up the DNS resolver: {0}")]
    Build(NetError),
}

pub(super) struct MxResolver {
    resolver: TokioResolver,
}

impl MxResolver {
    /// `nameservers` (UDP and TCP) instead of the system's `resolv.conf` when given. A query
    /// times out after the upstream timeout (at most 5 s, resolv.conf's default) and is
    /// retried twice, so a dead name server holds a client about as long as a dead MX host.
    pub fn new(
        nameservers: Option<&[SocketAddr]>,
        timeout: Duration,
    ) -> Result<Self, ResolverSetupError> {
        let mut builder = match nameservers {
            Some(list) => {
                let servers = list.iter().map(|addr| {
                    let mut server = NameServerConfig::udp_and_tcp(addr.ip());
                    for connection in &mut server.connections {
                        connection.port = addr.port();
                    }
                    server
                });
                let config = ResolverConfig::from_name_servers(servers.collect());
                let mut builder =
                    Resolver::builder_with_config(config, TokioRuntimeProvider::default());
                builder.options_mut().use_hosts_file = ResolveHosts::Never;
                builder
            }
            None => Resolver::builder_tokio().map_err(ResolverSetupError::SystemConfig)?,
        };
        let options = builder.options_mut();
        options.timeout = timeout
            .min(Duration::from_secs(5))
            .max(Duration::from_millis(1));
        options.attempts = 2;
        let resolver = builder.build().map_err(ResolverSetupError::Build)?;
        Ok(MxResolver { resolver })
    }

    /// The MX hosts of `domain` by preference, in random order among equals (RFC 5321 5.1,
    /// so that equal hosts share the load); the domain itself when it has no MX.
    pub async fn route(&self, domain: &str) -> Result<Route, UpstreamError> {
        if let Some(ip) = address_literal(domain) {
            return Ok(Route {
                hosts: vec![ip.to_string()],
                implicit: true,
            });
        }
        let lookup = match self.resolver.lookup(fqdn(domain), RecordType::MX).await {
            Ok(lookup) => lookup,
            Err(e) if e.is_no_records_found() && !e.is_nx_domain() => {
                return Ok(Route {
                    hosts: vec![domain.to_string()],
                    implicit: true,
                })
            }
            Err(e) => return Err(lookup_error(domain, "MX", &e)),
        };
        let records: Vec<(u16, String)> = lookup
            .answers()
            .iter()
            .filter_map(|r| match &r.data {
                RData::MX(mx) => Some((mx.preference, mx.exchange.to_ascii())),
                _ => None,
            })
            .collect();
        order(domain, records)
    }

    /// The addresses of one host; `implicit` says the host is the recipient domain itself,
    /// whose lack of an address means there is nowhere to deliver at all.
    pub async fn addresses(
        &self,
        host: &str,
        implicit: bool,
    ) -> Result<Vec<IpAddr>, UpstreamError> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![ip]);
        }
        match self.resolver.lookup_ip(fqdn(host)).await {
            Ok(ips) => Ok(ips.iter().collect()),
            Err(e) if !e.is_no_records_found() => Err(lookup_error(host, "A/AAAA", &e)),
            Err(_) if implicit => Err(rejected(
                550,
                "5.1.2",
                format!("domain {host} has no MX and no address"),
            )),
            Err(_) => Err(rejected(
                550,
                "5.4.4",
                format!("MX host {host} has no address"),
            )),
        }
    }
}

/// Sorts MX records; a lone `0 .` is a null MX, and a `.` among real hosts is skipped.
fn order(domain: &str, mut records: Vec<(u16, String)>) -> Result<Route, UpstreamError> {
    let is_root = |host: &str| host.is_empty() || host == ".";
    if records.len() == 1 && is_root(&records[0].1) || records.iter().all(|(_, h)| is_root(h)) {
        return Err(rejected(
            556,
            "5.1.10",
            format!("domain {domain} accepts no mail (null MX)"),
        ));
    }
    records.retain(|(_, h)| !is_root(h));
    let shuffle = RandomState::new();
    records.sort_by_key(|(preference, host)| (*preference, shuffle.hash_one(host)));
    let hosts = records
        .into_iter()
        .map(|(_, h)| h.trim_end_matches('.').to_string())
        .take(MAX_HOSTS)
        .collect();
    Ok(Route {
        hosts,
        implicit: false,
    })
}

/// A failed lookup as the client's answer.
fn lookup_error(name: &str, kind: &str, e: &NetError) -> UpstreamError {
    if e.is_nx_domain() {
        return rejected(550, "5.1.2", format!("domain {name} does not exist"));
    }
    let reason = match e {
        NetError::Timeout => "timed out".to_string(),
        NetError::Dns(hickory_resolver::net::DnsError::ResponseCode(ResponseCode::ServFail)) => {
            "SERVFAIL".to_string()
        }
        other => other.to_string(),
    };
    rejected(
        451,
        "4.4.3",
        format!("DNS lookup ({kind}) of {name} failed: {reason}"),
    )
}

/// `[192.0.2.1]` or `[IPv6:2001:db8::1]` (RFC 5321 4.1.3): no lookup, that host itself.
fn address_literal(domain: &str) -> Option<IpAddr> {
    let inner = domain.strip_prefix('[')?.strip_suffix(']')?;
    let inner = inner.strip_prefix("IPv6:").unwrap_or(inner);
    inner.parse().ok()
}

/// Absolute, so that no search domain of `resolv.conf` is ever tried after it.
fn fqdn(name: &str) -> String {
    match name.ends_with('.') {
        true => name.to_string(),
        false => format!("{name}."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_resolver::net::{DnsError, NoRecords};
    use hickory_resolver::proto::op::Query;

    fn code(e: &UpstreamError) -> (u16, String) {
        match e {
            UpstreamError::Rejected { code, enhanced, .. } => {
                (*code, enhanced.clone().unwrap_or_default())
            }
            other => panic!("not a refusal: {other:?}"),
        }
    }

    #[test]
    fn lookup_errors_map_to_pinned_codes() {
        let nx = NetError::from(NoRecords::new(Query::default(), ResponseCode::NXDomain));
        assert_eq!(
            code(&lookup_error("x.test", "MX", &nx)),
            (550, "5.1.2".into())
        );
        let servfail = NetError::Dns(DnsError::ResponseCode(ResponseCode::ServFail));
        assert_eq!(
            code(&lookup_error("x.test", "MX", &servfail)),
            (451, "4.4.3".into())
        );
        assert_eq!(
            code(&lookup_error("x.test", "MX", &NetError::Timeout)),
            (451, "4.4.3".into())
        );
    }

    #[test]
    fn mx_records_sort_by_preference_and_null_mx_refuses() {
        let route = order(
            "d.test",
            vec![
                (20, "b.d.test.".into()),
                (10, "a.d.test.".into()),
                (30, ".".into()),
            ],
        )
        .unwrap();
        assert_eq!(route.hosts, ["a.d.test", "b.d.test"]);
        assert!(!route.implicit);
        let null = order("d.test", vec![(0, ".".into())]).unwrap_err();
        assert_eq!(code(&null), (556, "5.1.10".into()));
    }

    #[test]
    fn equal_preferences_are_shuffled() {
        let records: Vec<(u16, String)> = (0..8).map(|i| (10, format!("h{i}.test"))).collect();
        let firsts: std::collections::HashSet<String> = (0..64)
            .map(|_| order("d.test", records.clone()).unwrap().hosts[0].clone())
            .collect();
        assert!(firsts.len() > 1, "always the same first host: {firsts:?}");
    }

    #[test]
    fn address_literals_need_no_lookup() {
        assert_eq!(
            address_literal("[127.0.0.2]"),
            Some("127.0.0.2".parse().unwrap())
        );
        assert_eq!(address_literal("[IPv6:::1]"), Some("::1".parse().unwrap()));
        assert_eq!(address_literal("example.com"), None);
    }
}
