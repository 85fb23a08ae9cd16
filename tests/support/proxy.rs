//! The PROXY protocol as a balancer speaks it, written by hand after HAProxy's spec (not by
//! the relay's parsing crate), and connections from a chosen loopback address, so that a
//! test can be a balancer (`127.0.0.1`) and its clients (`127.0.0.2`, ...) on one machine.

use std::net::{IpAddr, SocketAddr};

use tokio::net::{TcpSocket, TcpStream};

const V2_SIGNATURE: &[u8] = b"\r\n\r\n\0\r\nQUIT\n";

/// A v1 header: `PROXY TCP4 ...` or `PROXY TCP6 ...` by the addresses' family.
pub fn v1(client: SocketAddr, server: SocketAddr) -> Vec<u8> {
    let family = if client.is_ipv4() { "TCP4" } else { "TCP6" };
    let (c, s) = (client.ip(), server.ip());
    let (cp, sp) = (client.port(), server.port());
    format!("PROXY {family} {c} {s} {cp} {sp}\r\n").into_bytes()
}

/// A v2 header with the PROXY command over TCP (IPv4 or IPv6 by the addresses' family).
pub fn v2(client: SocketAddr, server: SocketAddr) -> Vec<u8> {
    let mut body = Vec::new();
    let family = match (client.ip(), server.ip()) {
        (IpAddr::V4(c), IpAddr::V4(s)) => {
            body.extend(c.octets());
            body.extend(s.octets());
            0x11
        }
        (IpAddr::V6(c), IpAddr::V6(s)) => {
            body.extend(c.octets());
            body.extend(s.octets());
            0x21
        }
        _ => panic!("one family for both addresses"),
    };
    body.extend(client.port().to_be_bytes());
    body.extend(server.port().to_be_bytes());
    header_v2(0x21, family, &body)
}

/// A v2 header with the LOCAL command: the balancer's own connection (a health check).
pub fn v2_local() -> Vec<u8> {
    header_v2(0x20, 0x00, &[])
}

/// A v2 header naming no client: the PROXY command over an address family the relay takes
/// no address from (`UNSPEC`, 0x00; `AF_UNIX` stream, 0x31, its two 108-byte paths).
pub fn v2_no_address(family: u8) -> Vec<u8> {
    let body = if family == 0x31 {
        vec![0u8; 216]
    } else {
        Vec::new()
    };
    header_v2(0x21, family, &body)
}

fn header_v2(command: u8, family: u8, body: &[u8]) -> Vec<u8> {
    let mut out = V2_SIGNATURE.to_vec();
    out.extend([command, family]);
    out.extend((body.len() as u16).to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// A TCP connection to `to` from the loopback address `from` (any port).
pub async fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let from: IpAddr = from.parse().unwrap();
    let socket = match from {
        IpAddr::V4(_) => TcpSocket::new_v4(),
        IpAddr::V6(_) => TcpSocket::new_v6(),
    }
    .unwrap();
    socket.bind(SocketAddr::new(from, 0)).unwrap();
    let stream = socket.connect(to).await.unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// A listener on `[::1]`, or `None` (a skip, `host::skip`) without IPv6.
pub async fn ipv6_listener() -> Option<tokio::net::TcpListener> {
    match tokio::net::TcpListener::bind("[::1]:0").await {
        Ok(listener) => Some(listener),
        Err(e) => {
            super::host::skip(&format!("the IPv6 part: no [::1] here: {e}"));
            None
        }
    }
}
