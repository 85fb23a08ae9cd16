//! `[admin]`: the admin HTTP endpoint. It answers anyone who can reach it, so it has bounds of
//! its own, apart from SMTP's: its connections, how long a request may take to arrive, and its
//! password logins (their own check slots and lockout, so a flood of guesses at the admin
//! password never delays SMTP AUTH); and the names it answers to (`hosts`).

use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    #[serde(default = "default_admin_listen")]
    pub listen: SocketAddr,
    /// Names the endpoint answers to besides its listen address (a Service's name, the name a
    /// proxy forwards): a request whose `Host` is neither gets 421, so a page whose name was
    /// rebound to the endpoint's address cannot read it.
    #[serde(default)]
    pub hosts: Vec<HostName>,
    /// An argon2 PHC string: when set, every path but `/healthz`, `/readyz` and the SNS
    /// endpoint asks for HTTP Basic authentication; without it, the paths that change state
    /// answer 403.
    pub password_hash: Option<toml::Spanned<String>>,
    /// Name of the environment variable holding `password_hash` instead (filled from a
    /// Kubernetes Secret, say), so the file can sit in a ConfigMap.
    pub password_hash_env: Option<toml::Spanned<String>>,
    /// `/readyz` answers 503 while no upstream can take a route's mail (or Redis, with a
    /// layer on it, cannot be reached). Off: readiness means "this replica can take mail";
    /// upstream is shared by every replica, so coupling them pulls all of them out at once,
    /// and clients then get refused connections instead of a `451` they may retry.
    #[serde(default)]
    pub ready_requires_upstream: bool,
    /// Connections open at once; one more is answered 503 and closed, so a flood of them
    /// never takes the file descriptors SMTP needs.
    #[serde(default = "default_max_connections")]
    pub max_connections: NonZeroUsize,
    /// A request's header (or an idle connection's next one) and its body must arrive
    /// within this, or the connection is closed.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: NonZeroU64,
    /// Admin password checks hashing at once, apart from SMTP AUTH's.
    #[serde(default = "default_max_parallel_checks")]
    pub max_parallel_checks: NonZeroUsize,
    /// Every wrong admin password is answered only after this delay. This and the lockout's
    /// keys have SMTP AUTH's defaults (`[smtp.auth]`), counted apart.
    #[serde(default = "super::security::default_failure_delay_ms")]
    pub failure_delay_ms: u64,
    /// Wrong passwords from one address (an IPv6 /64) within `failure_window_ms` after which
    /// it gets 429 for `lockout_ms`, with no check.
    #[serde(default = "super::security::default_max_failures")]
    pub max_failures: NonZeroU32,
    #[serde(default = "super::security::default_failure_window_ms")]
    pub failure_window_ms: NonZeroU64,
    #[serde(default = "super::security::default_lockout_ms")]
    pub lockout_ms: NonZeroU64,
}

impl Default for AdminConfig {
    /// The section's defaults, as an empty `[admin]` has them.
    fn default() -> AdminConfig {
        AdminConfig {
            listen: default_admin_listen(),
            hosts: Vec::new(),
            password_hash: None,
            password_hash_env: None,
            ready_requires_upstream: false,
            max_connections: default_max_connections(),
            request_timeout_ms: default_request_timeout_ms(),
            max_parallel_checks: default_max_parallel_checks(),
            failure_delay_ms: super::security::default_failure_delay_ms(),
            max_failures: super::security::default_max_failures(),
            failure_window_ms: super::security::default_failure_window_ms(),
            lockout_ms: super::security::default_lockout_ms(),
        }
    }
}

/// A DNS name as a `Host` header carries it, without a port, kept in lower case (names are
/// compared without regard to case).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct HostName(String);

impl HostName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An `[admin] hosts` entry that is not a bare DNS name.
#[derive(Debug, thiserror::Error)]
#[error("admin.hosts: {0:?} is not a host name (letters, digits, '-' and '.', no port or scheme)")]
pub struct NotAHostName(String);

impl TryFrom<String> for HostName {
    type Error = NotAHostName;

    fn try_from(name: String) -> Result<HostName, NotAHostName> {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        match name.len() <= 253 && name.split('.').all(label_ok) {
            true => Ok(HostName(name.to_ascii_lowercase())),
            false => Err(NotAHostName(name)),
        }
    }
}

fn default_admin_listen() -> SocketAddr {
    "127.0.0.1:9325".parse().unwrap()
}
fn default_max_connections() -> NonZeroUsize {
    NonZeroUsize::new(64).unwrap()
}
fn default_request_timeout_ms() -> NonZeroU64 {
    NonZeroU64::new(10_000).unwrap()
}
fn default_max_parallel_checks() -> NonZeroUsize {
    NonZeroUsize::new(1).unwrap()
}

#[cfg(test)]
mod tests {
    use super::super::tests::parse_with;

    #[test]
    fn hosts_are_names_kept_in_lower_case() {
        let config = parse_with("[admin]\nhosts = [\"Relay.Internal\", \"mailsluice\"]\n").unwrap();
        let hosts = config.admin.unwrap().hosts;
        let names: Vec<_> = hosts.iter().map(|h| h.as_str()).collect();
        assert_eq!(names, ["relay.internal", "mailsluice"]);
    }

    #[test]
    fn a_host_with_a_port_or_a_scheme_is_refused_with_its_key_and_line() {
        for bad in ["relay.internal:9325", "http://relay", "", "a..b", "-a"] {
            let text = format!("[admin]\nhosts = [\"{bad}\"]\n");
            let err = parse_with(&text).unwrap_err().to_string();
            assert!(
                err.contains("admin.hosts") && err.contains("line"),
                "{bad}: {err}"
            );
        }
    }
}
