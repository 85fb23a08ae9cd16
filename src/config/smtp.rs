//! `[smtp]`: the listening side. The security keys (`[smtp.tls]`, `[smtp.auth]`) have their
//! types and rules in `security.rs`.

use std::net::SocketAddr;
use std::num::{NonZeroU64, NonZeroUsize};

use ipnet::IpNet;
use serde::Deserialize;

use super::{AuthConfig, TlsConfig};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmtpConfig {
    pub listen: Vec<SocketAddr>,
    #[serde(default = "default_hostname")]
    pub hostname: String,
    #[serde(default = "default_max_message_bytes")]
    pub max_message_bytes: NonZeroUsize,
    #[serde(default = "default_max_recipients")]
    pub max_recipients: NonZeroUsize,
    #[serde(default = "default_max_connections")]
    pub max_connections: NonZeroUsize,
    /// Longest command or data line, CRLF included. RFC 5321 4.5.3.1.6 asks for at least
    /// 1000 for text lines; we default higher because real mail has longer lines.
    #[serde(default = "default_max_line_bytes")]
    pub max_line_bytes: NonZeroUsize,
    /// Milliseconds a client may stay silent before `421 4.4.2`. RFC 5321 4.5.3.2.7 suggests
    /// 5 minutes for a server.
    #[serde(default = "default_idle_timeout_ms")]
    pub idle_timeout_ms: NonZeroU64,
    /// Time given to transactions in flight at SIGTERM before the process exits anyway.
    #[serde(default = "default_shutdown_grace_ms")]
    pub shutdown_grace_ms: u64,
    /// Clients allowed to relay without AUTH. Absent means loopback only.
    #[serde(default = "default_trusted_networks")]
    pub trusted_networks: Vec<IpNet>,
    /// Balancers whose connections open with a PROXY header (v1 or v2) naming the client,
    /// whose address is then the client's for everything. Empty: no one may send one.
    #[serde(default)]
    pub proxy_from: Vec<IpNet>,
    /// Time a connection from `proxy_from` has to send its whole PROXY header; past it the
    /// connection is closed (Postfix's `smtpd_upstream_proxy_timeout`).
    #[serde(default = "default_proxy_timeout_ms")]
    pub proxy_timeout_ms: NonZeroU64,
    /// Addresses for implicit TLS (SMTPS, RFC 8314; port 465). Needs `[smtp.tls]`.
    #[serde(default)]
    pub tls_listen: Vec<SocketAddr>,
    pub tls: Option<TlsConfig>,
    pub auth: Option<AuthConfig>,
    /// Offer AUTH on a connection without TLS. Off: a password must never cross in clear.
    #[serde(default)]
    pub allow_plaintext_auth: bool,
    /// Error replies (5xx to commands) one session may get before `421 4.7.0` and close.
    #[serde(default = "default_max_errors")]
    pub max_errors: NonZeroUsize,
    /// Deadline for a whole DATA section, from `354` to the final dot; past it `421 4.4.2`.
    #[serde(default = "default_data_timeout_ms")]
    pub data_timeout_ms: NonZeroU64,
    /// Connections one client address (an IPv6 /64) may hold; past it `421 4.7.0`.
    #[serde(default = "default_max_connections_per_ip")]
    pub max_connections_per_ip: NonZeroUsize,
    /// Commands that move no message on (NOOP, RSET, VRFY, HELP, EHLO, HELO) one session may
    /// send between two messages before `421 4.7.0`: otherwise a NOOP now and then holds a
    /// connection forever (Postfix's `smtpd_junk_command_limit`).
    #[serde(default = "default_max_junk_commands")]
    pub max_junk_commands: NonZeroUsize,
    /// Bytes of DATA all sessions of the process may hold at once (each message from its
    /// first byte until its reply); a message that finds no room gets `452 4.3.1`.
    #[serde(default = "default_max_buffered_bytes")]
    pub max_buffered_bytes: NonZeroUsize,
    /// `Received:` fields a message may hold; past it `554 5.4.6`, a mail loop (Postfix's
    /// `hopcount_limit`).
    #[serde(default = "default_max_received")]
    pub max_received: NonZeroUsize,
}

impl SmtpConfig {
    /// What `mailsluice check` warns of in `[smtp]`: a balancer that is trusted too. Its
    /// headers naming no client (`LOCAL`, `UNKNOWN`) are then refused, and whoever else holds
    /// an address of the overlap relays without AUTH.
    pub(super) fn warnings(&self) -> Vec<String> {
        let overlaps = |a: &IpNet, b: &IpNet| a.contains(&b.network()) || b.contains(&a.network());
        let overlap = (self.proxy_from.iter()).find_map(|p| {
            (self.trusted_networks.iter()).find_map(|t| overlaps(p, t).then_some((p, t)))
        });
        let warning = |(proxy, trusted): (&IpNet, &IpNet)| {
            format!(
                "smtp.proxy_from ({proxy}) overlaps smtp.trusted_networks ({trusted}): a \
                 balancer's own connections (PROXY LOCAL or UNKNOWN) are refused, and another \
                 host at those addresses relays without AUTH; keep the balancers out of \
                 trusted_networks"
            )
        };
        overlap.into_iter().map(warning).collect()
    }
}

/// `[smtp]`'s own rules: where it listens and what it calls itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SmtpRule {
    #[error("at least one address is needed")]
    NoListener,
    #[error(
        "{0:?} is not a domain name (ASCII letters, digits, `.`, `-`, at most 253 characters)"
    )]
    NotHostname(String),
}

/// `smtp.hostname` when the file leaves it out.
pub const DEFAULT_HOSTNAME: &str = "mailsluice.localhost";

fn default_hostname() -> String {
    DEFAULT_HOSTNAME.into()
}
fn default_max_message_bytes() -> NonZeroUsize {
    NonZeroUsize::new(26_214_400).unwrap()
}
fn default_max_recipients() -> NonZeroUsize {
    NonZeroUsize::new(100).unwrap()
}
fn default_max_connections() -> NonZeroUsize {
    NonZeroUsize::new(10_000).unwrap()
}
fn default_max_line_bytes() -> NonZeroUsize {
    NonZeroUsize::new(4096).unwrap()
}
fn default_idle_timeout_ms() -> NonZeroU64 {
    NonZeroU64::new(300_000).unwrap()
}
fn default_shutdown_grace_ms() -> u64 {
    30_000
}
fn default_trusted_networks() -> Vec<IpNet> {
    vec!["127.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()]
}
fn default_proxy_timeout_ms() -> NonZeroU64 {
    NonZeroU64::new(5_000).unwrap()
}
fn default_max_errors() -> NonZeroUsize {
    NonZeroUsize::new(20).unwrap()
}
fn default_data_timeout_ms() -> NonZeroU64 {
    NonZeroU64::new(600_000).unwrap()
}
fn default_max_connections_per_ip() -> NonZeroUsize {
    NonZeroUsize::new(1000).unwrap()
}
fn default_max_junk_commands() -> NonZeroUsize {
    NonZeroUsize::new(100).unwrap()
}
fn default_max_received() -> NonZeroUsize {
    NonZeroUsize::new(50).unwrap()
}
fn default_max_buffered_bytes() -> NonZeroUsize {
    NonZeroUsize::new(512 * 1024 * 1024).unwrap()
}
