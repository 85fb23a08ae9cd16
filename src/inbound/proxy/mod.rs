//! The PROXY protocol (HAProxy's; v1 text, v2 binary) on the SMTP listeners. A balancer that
//! hides its clients' addresses (an NLB with IP targets) opens each connection with a header
//! naming the client; the relay reads it before anything else, a TLS handshake included, and
//! the address in it is the client's from then on. From an address outside `proxy_from` no one
//! may claim an address: a header there closes the connection.
//!
//! proxy-header parses; this file bounds the read (bytes, time), keeps the bytes that follow
//! the header (the balancer sends the client's bytes right behind it) and says why a header
//! was refused. Logging and counting are the caller's.

use std::net::SocketAddr;
use std::time::Duration;

use ipnet::IpNet;
use proxy_header::{ParseConfig, Protocol, ProxyHeader};
use tokio::io::{AsyncRead, AsyncReadExt};

mod stream;
#[cfg(test)]
mod tests;

pub use stream::{Attempt, PeerStream};

/// The longest header read. A v1 header is at most 107 bytes; a v2 header is 16 bytes, the
/// addresses (at most 216, for Unix sockets) and the balancer's TLVs (an NLB's VPC endpoint
/// id, a few dozen bytes): one declaring more is refused as malformed, unread.
pub const MAX_HEADER_BYTES: usize = 1024;

pub(super) const V1_SIGNATURE: &[u8] = b"PROXY ";
pub(super) const V2_SIGNATURE: &[u8] = b"\r\n\r\n\0\r\nQUIT\n";

/// Who a balancer's connection is for, by its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// A client's connection, relayed: this is the client's address.
    Client(SocketAddr),
    /// No client named: the balancer's own connection (v2 `LOCAL`, its health check), or a
    /// family without an address of ours (v1 `UNKNOWN`, v2 `UNSPEC`, `AF_UNIX`). Served as the
    /// balancer, with its own address, unless that address is trusted ([`client`]).
    Local,
}

/// The address a session is served as, by `claim` from `balancer`. A claim naming no client
/// from a balancer in `trusted` is refused: the balancer's trust is for the clients it names,
/// and any host of `proxy_from` (or a client able to make the balancer say `LOCAL`) would
/// otherwise relay as the balancer, unauthenticated.
pub fn client(
    claim: Claim,
    balancer: SocketAddr,
    trusted: &[IpNet],
) -> Result<SocketAddr, HeaderError> {
    match claim {
        Claim::Client(client) => Ok(client),
        Claim::Local => {
            let ip = balancer.ip().to_canonical();
            match trusted.iter().any(|net| net.contains(&ip)) {
                true => Err(HeaderError::LocalFromTrusted),
                false => Ok(balancer),
            }
        }
    }
}

/// Why a connection from `proxy_from` was closed before its session.
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    /// Nothing came within the timeout, the connection closed before a byte, or its first
    /// bytes are not a PROXY signature: a balancer not set up to send the header.
    #[error("no PROXY header (is the balancer set to send it?)")]
    Missing,
    #[error("malformed PROXY header: {0}")]
    Malformed(String),
    #[error("PROXY header cut short: the connection closed after {0} bytes")]
    Truncated(usize),
    #[error("PROXY header not complete within {0} ms ({1} bytes came)")]
    Slow(u64, usize),
    #[error(
        "PROXY header names no client (LOCAL, UNKNOWN, UNSPEC or AF_UNIX) and the balancer's \
         address is in trusted_networks"
    )]
    LocalFromTrusted,
}

impl HeaderError {
    /// The `reason` label of the refusal's counter.
    pub fn reason(&self) -> &'static str {
        match self {
            HeaderError::Missing => "missing",
            HeaderError::Malformed(_) => "malformed",
            HeaderError::Truncated(_) => "truncated",
            HeaderError::Slow(..) => "slow",
            HeaderError::LocalFromTrusted => "local_trusted",
        }
    }
}

/// What a header said, and the bytes read past it (to be read before the socket's).
#[derive(Debug)]
pub struct Header {
    pub claim: Claim,
    pub rest: Vec<u8>,
}

/// Reads the PROXY header that must open a connection from a balancer, within `timeout`.
pub async fn read_header<S>(stream: &mut S, timeout: Duration) -> Result<Header, HeaderError>
where
    S: AsyncRead + Unpin,
{
    let mut buf = Vec::with_capacity(256);
    let read = async {
        loop {
            if let Some(header) = parse(&mut buf)? {
                return Ok(header);
            }
            let mut chunk = [0u8; 256];
            let room = chunk.len().min(MAX_HEADER_BYTES - buf.len());
            // A reset is a close like any other here: the session never started.
            let n = stream.read(&mut chunk[..room]).await.unwrap_or(0);
            if n == 0 {
                return Err(match buf.len() {
                    0 => HeaderError::Missing,
                    got => HeaderError::Truncated(got),
                });
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(result) => result,
        Err(_) if buf.is_empty() => Err(HeaderError::Missing),
        Err(_) => Err(HeaderError::Slow(timeout.as_millis() as u64, buf.len())),
    }
}

/// The header in `buf` when it is whole, `None` while it may still come; `buf` keeps only
/// what follows it.
fn parse(buf: &mut Vec<u8>) -> Result<Option<Header>, HeaderError> {
    if !could_open(buf) {
        return Err(HeaderError::Missing);
    }
    if buf.len() >= 16 && buf.starts_with(V2_SIGNATURE) {
        let declared = 16 + usize::from(u16::from_be_bytes([buf[14], buf[15]]));
        if declared > MAX_HEADER_BYTES {
            let why = format!("declares {declared} bytes, over {MAX_HEADER_BYTES}");
            return Err(HeaderError::Malformed(why));
        }
    }
    let config = ParseConfig {
        include_tlvs: false,
        ..ParseConfig::default()
    };
    let (claim, used) = match ProxyHeader::parse(buf, config) {
        Ok((header, used)) => match header.proxied_address() {
            None => (Claim::Local, used),
            Some(a) if a.protocol == Protocol::Stream => {
                let client = SocketAddr::new(a.source.ip().to_canonical(), a.source.port());
                (Claim::Client(client), used)
            }
            Some(_) => return Err(HeaderError::Malformed("not TCP".into())),
        },
        Err(proxy_header::Error::BufferTooShort) if buf.len() >= MAX_HEADER_BYTES => {
            return Err(HeaderError::Malformed(format!(
                "longer than {MAX_HEADER_BYTES} bytes"
            )))
        }
        // A v1 header is one line: once its line ended, nothing more can make it whole.
        Err(proxy_header::Error::BufferTooShort) if v1_line_ended(buf) => {
            return Err(HeaderError::Malformed(
                "a v1 line without all its fields".into(),
            ))
        }
        Err(proxy_header::Error::BufferTooShort) => return Ok(None),
        Err(e) => return Err(HeaderError::Malformed(e.to_string())),
    };
    let rest = buf.split_off(used);
    Ok(Some(Header { claim, rest }))
}

/// Whether `bytes` are a v1 header's start with its line's end among them.
fn v1_line_ended(bytes: &[u8]) -> bool {
    bytes.starts_with(V1_SIGNATURE) && memchr::memchr(b'\n', bytes).is_some()
}

/// Whether `bytes` begin as a PROXY header does (or may, for all that has come).
pub(super) fn could_open(bytes: &[u8]) -> bool {
    [V1_SIGNATURE, V2_SIGNATURE].iter().any(|signature| {
        let n = bytes.len().min(signature.len());
        bytes[..n] == signature[..n]
    })
}
