//! `ses://REGION`: Amazon SES over its v2 API (`SendEmail` with raw content). Its keys: another
//! endpoint (a VPC endpoint, FIPS, a test server), the default configuration set, and how its
//! SES tenants' sending identities are checked before DATA. No credentials: they come from the
//! AWS SDK's default chain, never from this file.

use std::num::NonZeroU64;
use std::time::Duration;

use serde::Deserialize;

use super::keys::KindKeys;
use super::{UpstreamKeyError, UpstreamUrlError};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SesUpstream {
    /// The AWS region whose SESv2 endpoint takes the messages (`eu-west-1`).
    pub region: String,
    pub keys: SesKeys,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SesKeys {
    /// `https://...` (or `http://` for a test server): sent there instead of the region's
    /// public endpoint.
    pub endpoint_url: Option<String>,
    /// The `ConfigurationSetName` of a message whose route sets no `X-SES-CONFIGURATION-SET`.
    pub configuration_set: Option<String>,
    /// A sender of a route's `ses_tenant` is checked against the email identities SES
    /// associates with that tenant, before DATA: a message SES would refuse after its whole
    /// body went up is refused at MAIL instead.
    #[serde(default = "yes")]
    pub check_identities: bool,
    /// How often the account's tenants are listed (`ListTenants`) and each tenant's identities
    /// read again (`ListTenantResources`).
    pub tenant_refresh_ms: Option<NonZeroU64>,
}

impl Default for SesKeys {
    fn default() -> SesKeys {
        SesKeys {
            endpoint_url: None,
            configuration_set: None,
            check_identities: true,
            tenant_refresh_ms: None,
        }
    }
}

fn yes() -> bool {
    true
}

impl SesKeys {
    const KEYS: &'static [&'static str] = &[
        "endpoint_url",
        "configuration_set",
        "check_identities",
        "tenant_refresh_ms",
    ];

    /// `tenant_refresh_ms`, 5 minutes when left out.
    pub fn tenant_refresh(&self) -> Duration {
        Duration::from_millis(self.tenant_refresh_ms.map_or(300_000, NonZeroU64::get))
    }
}

impl SesUpstream {
    /// The most SES's API takes in one message.
    pub const MAX_MESSAGE_BYTES: usize = 40 * 1024 * 1024;

    pub(super) const KEYS: &'static [&'static [&'static str]] = &[SesKeys::KEYS];

    /// `rest` is what follows `ses://`: the region, nothing else.
    pub(super) fn from_url(rest: &str) -> Result<SesUpstream, UpstreamUrlError> {
        let region = rest.trim_end_matches('/');
        let valid = !region.is_empty()
            && (region.bytes()).all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        match valid {
            true => Ok(SesUpstream {
                region: region.to_string(),
                keys: SesKeys::default(),
            }),
            false => Err(UpstreamUrlError::NotRegion(rest.to_string())),
        }
    }

    pub(super) fn read_keys(&mut self, keys: &mut KindKeys) -> Result<(), UpstreamKeyError> {
        self.keys = keys.take(SesKeys::KEYS)?;
        if let Some(url) = &self.keys.endpoint_url {
            if !(url.starts_with("https://") || url.starts_with("http://")) {
                return Err(UpstreamKeyError::NotHttpUrl(url.clone()));
            }
        }
        if let Some(set) = &self.keys.configuration_set {
            if !ses_name(set) {
                return Err(UpstreamKeyError::NotSesName(set.clone()));
            }
        }
        Ok(())
    }
}

/// What SES takes as a configuration set or tenant name.
pub fn ses_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && (name.bytes()).all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl std::fmt::Display for SesUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ses://{}", self.region)
    }
}
