//! `mx://`: straight to each recipient domain's MX hosts, as an MTA does. Its keys: the MX
//! hosts' port, the name servers to ask, the bound per recipient domain, and the internal
//! networks it may deliver to after all.

use std::net::SocketAddr;
use std::num::NonZeroUsize;

use ipnet::IpNet;
use serde::Deserialize;

use super::keys::KindKeys;
use super::smtp_client::SmtpClient;
use super::{UpstreamKeyError, UpstreamUrlError};

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MxUpstream {
    pub keys: MxKeys,
    pub client: SmtpClient,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct MxKeys {
    /// The port of the MX hosts (default 25; tests use another).
    pub mx_port: Option<u16>,
    /// Ask these name servers (`ip:port`, UDP and TCP) instead of the system's.
    pub nameservers: Option<Vec<SocketAddr>>,
    /// Connections in use at once to one recipient domain (default 10), so a burst to one
    /// domain does not look like an attack to its servers.
    pub max_connections_per_domain: Option<NonZeroUsize>,
    /// Internal networks (loopback, private, link-local, ...) MX hosts may be in after all:
    /// by default direct delivery never connects to an internal address.
    pub mx_allow_networks: Option<Vec<IpNet>>,
}

impl MxKeys {
    const KEYS: &'static [&'static str] = &[
        "mx_port",
        "nameservers",
        "max_connections_per_domain",
        "mx_allow_networks",
    ];
}

impl MxUpstream {
    pub(super) const KEYS: &'static [&'static [&'static str]] = &[MxKeys::KEYS, SmtpClient::KEYS];

    pub(super) fn from_url(rest: &str) -> Result<MxUpstream, UpstreamUrlError> {
        match rest {
            "" | "/" => Ok(MxUpstream::default()),
            _ => Err(UpstreamUrlError::MxHost(rest.to_string())),
        }
    }

    pub(super) fn read_keys(&mut self, keys: &mut KindKeys) -> Result<(), UpstreamKeyError> {
        self.keys = keys.take(MxKeys::KEYS)?;
        self.client = keys.take(SmtpClient::KEYS)?;
        if self.keys.mx_port == Some(0) {
            return Err(UpstreamKeyError::PortZero);
        }
        if self.keys.nameservers.as_ref().is_some_and(Vec::is_empty) {
            return Err(UpstreamKeyError::NoNameservers);
        }
        Ok(())
    }

    pub fn port(&self) -> u16 {
        self.keys.mx_port.unwrap_or(25)
    }

    pub fn nameservers(&self) -> Option<&[SocketAddr]> {
        self.keys.nameservers.as_deref()
    }

    pub fn allow_networks(&self) -> &[IpNet] {
        self.keys.mx_allow_networks.as_deref().unwrap_or(&[])
    }

    pub fn max_connections_per_domain(&self) -> NonZeroUsize {
        (self.keys.max_connections_per_domain).unwrap_or(NonZeroUsize::new(10).unwrap())
    }
}
