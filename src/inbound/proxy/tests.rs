//! Headers written by hand after HAProxy's spec (not by the parsing crate's own encoder).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// A v2 header: PROXY (or LOCAL with `None`) over TCP, with `tlv` bytes after the addresses.
fn v2(addrs: Option<(SocketAddr, SocketAddr)>, tlv: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    let (command, family) = match addrs {
        None => (0x20, 0x00),
        Some((SocketAddr::V4(s), SocketAddr::V4(d))) => {
            body.extend(s.ip().octets());
            body.extend(d.ip().octets());
            body.extend(s.port().to_be_bytes());
            body.extend(d.port().to_be_bytes());
            (0x21, 0x11)
        }
        Some((SocketAddr::V6(s), SocketAddr::V6(d))) => {
            body.extend(s.ip().octets());
            body.extend(d.ip().octets());
            body.extend(s.port().to_be_bytes());
            body.extend(d.port().to_be_bytes());
            (0x21, 0x21)
        }
        Some(_) => unreachable!("one family"),
    };
    body.extend_from_slice(tlv);
    let mut out = V2_SIGNATURE.to_vec();
    out.extend([command, family]);
    out.extend((body.len() as u16).to_be_bytes());
    out.extend(body);
    out
}

fn parsed(bytes: &[u8]) -> Result<Option<Header>, HeaderError> {
    parse(&mut bytes.to_vec())
}

#[test]
fn v1_and_v2_over_ipv4_and_ipv6_name_the_client_and_keep_what_follows() {
    let v4 = (addr("192.0.2.7:40001"), addr("198.51.100.1:2525"));
    let v6 = (addr("[2001:db8::7]:40002"), addr("[2001:db8::1]:2525"));
    let cases = [
        (
            b"PROXY TCP4 192.0.2.7 198.51.100.1 40001 2525\r\n".to_vec(),
            v4.0,
        ),
        (
            b"PROXY TCP6 2001:db8::7 2001:db8::1 40002 2525\r\n".to_vec(),
            v6.0,
        ),
        (v2(Some(v4), b""), v4.0),
        // A TLV after the addresses (an NLB's VPC endpoint id, type 0xEA) is skipped.
        (v2(Some(v6), b"\xea\x00\x04vpce"), v6.0),
    ];
    for (header, client) in cases {
        let mut bytes = header.clone();
        bytes.extend_from_slice(b"\x16\x03\x01 hello");
        let parsed = parsed(&bytes).unwrap().expect("a whole header");
        assert_eq!(parsed.claim, Claim::Client(client), "{header:?}");
        assert_eq!(parsed.rest, b"\x16\x03\x01 hello");
        // Every proper prefix is "not yet", never an error.
        for n in 1..header.len() {
            assert!(parsed_prefix_waits(&header[..n]), "{:?}", &header[..n]);
        }
    }
}

fn parsed_prefix_waits(prefix: &[u8]) -> bool {
    matches!(parsed(prefix), Ok(None))
}

#[test]
fn local_and_unknown_are_the_balancer_itself() {
    assert_eq!(parsed(&v2(None, b"")).unwrap().unwrap().claim, Claim::Local);
    let unknown = parsed(b"PROXY UNKNOWN\r\n").unwrap().unwrap();
    assert_eq!(unknown.claim, Claim::Local);
}

#[test]
fn no_client_named_is_the_balancer_unless_it_is_trusted() {
    let balancer = addr("10.0.0.5:40000");
    let trusted: Vec<IpNet> = vec!["10.0.0.0/24".parse().unwrap()];
    let elsewhere: Vec<IpNet> = vec!["10.1.0.0/24".parse().unwrap()];
    assert_eq!(
        client(Claim::Local, balancer, &elsewhere).unwrap(),
        balancer
    );
    assert!(matches!(
        client(Claim::Local, balancer, &trusted),
        Err(HeaderError::LocalFromTrusted)
    ));
    let named = Claim::Client(addr("192.0.2.7:1"));
    assert_eq!(
        client(named, balancer, &trusted).unwrap(),
        addr("192.0.2.7:1")
    );
}

#[test]
fn an_ipv4_mapped_client_is_an_ipv4_client() {
    let mapped = b"PROXY TCP6 ::ffff:192.0.2.9 ::ffff:198.51.100.1 1 2\r\n";
    let claim = parsed(mapped).unwrap().unwrap().claim;
    assert_eq!(claim, Claim::Client(addr("192.0.2.9:1")));
}

#[test]
fn what_is_not_a_header_is_refused_by_reason() {
    let missing = [&b"EHLO app\r\n"[..], b"\x16\x03\x01", b"PROXY\t"];
    for bytes in missing {
        assert!(
            matches!(parsed(bytes), Err(HeaderError::Missing)),
            "{bytes:?}"
        );
    }
    let mut datagram = v2(Some((addr("192.0.2.7:1"), addr("192.0.2.8:2"))), b"");
    datagram[13] = 0x12;
    let mut version_3 = v2(None, b"");
    version_3[12] = 0x31;
    let malformed = [
        b"PROXY TCP4 192.0.2.300 198.51.100.1 1 2\r\n".to_vec(),
        b"PROXY TCP4 192.0.2.7 198.51.100.1 99999 2\r\n".to_vec(),
        // A line that ended without its ports can never become whole.
        b"PROXY TCP4 192.0.2.7 198.51.100.1\r\n".to_vec(),
        b"PROXY TCP4 192.0.2.7 198.51.100.1 1\r\nEHLO".to_vec(),
        version_3,
        datagram,
    ];
    for bytes in malformed {
        let got = parsed(&bytes);
        assert!(
            matches!(got, Err(HeaderError::Malformed(_))),
            "{bytes:?}: {got:?}"
        );
    }
}

#[test]
fn a_header_longer_than_the_bound_is_refused_before_it_is_read() {
    // v2 declares its length: past the bound, refused after its first 16 bytes.
    let mut long = V2_SIGNATURE.to_vec();
    long.extend([0x21, 0x11]);
    long.extend(((MAX_HEADER_BYTES - 16 + 1) as u16).to_be_bytes());
    let got = parsed(&long);
    assert!(
        matches!(got, Err(HeaderError::Malformed(ref m)) if m.contains("declares")),
        "{got:?}"
    );
    // At the bound exactly it is read (a TLV of padding, type NOOP).
    let room = MAX_HEADER_BYTES - 16 - 12 - 3;
    let mut tlv = vec![0x04];
    tlv.extend((room as u16).to_be_bytes());
    tlv.resize(3 + room, 0);
    let at_bound = v2(Some((addr("192.0.2.7:1"), addr("192.0.2.8:2"))), &tlv);
    assert_eq!(at_bound.len(), MAX_HEADER_BYTES);
    assert!(parsed(&at_bound).unwrap().is_some());
    // v1 has no length: 107 bytes without its line end is no header.
    let mut v1 = b"PROXY TCP6 ".to_vec();
    v1.resize(MAX_HEADER_BYTES, b'1');
    assert!(matches!(parsed(&v1), Err(HeaderError::Malformed(_))));
}

#[tokio::test(start_paused = true)]
async fn a_header_that_stops_coming_is_slow_and_one_cut_short_is_truncated() {
    let timeout = Duration::from_millis(5000);
    let (mut balancer, mut relay) = tokio::io::duplex(4096);
    balancer.write_all(b"PROXY TCP4 192.0.2.7").await.unwrap();
    let started = tokio::time::Instant::now();
    let got = read_header(&mut relay, timeout).await;
    assert!(matches!(got, Err(HeaderError::Slow(5000, 20))), "{got:?}");
    assert_eq!(started.elapsed(), timeout);

    let (mut balancer, mut relay) = tokio::io::duplex(4096);
    let got = read_header(&mut relay, timeout).await;
    assert!(matches!(got, Err(HeaderError::Missing)), "silence: {got:?}");
    balancer.write_all(b"\r\n\r\n\0\r\nQU").await.unwrap();
    drop(balancer);
    let got = read_header(&mut relay, timeout).await;
    assert!(matches!(got, Err(HeaderError::Truncated(9))), "{got:?}");
}

#[tokio::test]
async fn the_bytes_after_the_header_are_read_before_the_sockets() {
    let (mut balancer, mut relay) = tokio::io::duplex(4096);
    balancer
        .write_all(b"PROXY UNKNOWN\r\nEHLO a\r\n")
        .await
        .unwrap();
    let header = read_header(&mut relay, Duration::from_secs(1))
        .await
        .unwrap();
    let mut stream = PeerStream::after_header(relay, header.rest);
    balancer.write_all(b"QUIT\r\n").await.unwrap();
    drop(balancer);
    let mut all = Vec::new();
    stream.read_to_end(&mut all).await.unwrap();
    assert_eq!(all, b"EHLO a\r\nQUIT\r\n");
}

/// What a direct client's stream gives its session, when the client writes `parts` one by one.
async fn watched(parts: &[&[u8]]) -> (Vec<u8>, bool) {
    let (mut client, relay) = tokio::io::duplex(4096);
    let (mut stream, attempt) = PeerStream::watched(relay);
    let mut all = Vec::new();
    for part in parts {
        client.write_all(part).await.unwrap();
        // Read what the stream gives now (nothing, while it is still looking).
        let mut buf = [0u8; 64];
        if let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(20), stream.read(&mut buf)).await
        {
            all.extend_from_slice(&buf[..n]);
        }
    }
    drop(client);
    stream.read_to_end(&mut all).await.unwrap();
    (all, attempt.seen())
}

#[tokio::test(start_paused = true)]
async fn a_direct_client_may_not_send_a_header() {
    let v1 = b"PROXY TCP4 127.0.0.2 127.0.0.1 1 2\r\nEHLO a\r\n";
    assert_eq!(watched(&[v1]).await, (Vec::new(), true));
    assert_eq!(watched(&[b"PRO", b"XY TCP4 "]).await, (Vec::new(), true));
    let v2 = v2(None, b"");
    assert_eq!(watched(&[&v2]).await, (Vec::new(), true));
    assert_eq!(watched(&[&v2[..5], &v2[5..]]).await, (Vec::new(), true));
}

#[tokio::test(start_paused = true)]
async fn a_direct_clients_bytes_pass_as_they_came() {
    let ehlo: &[u8] = b"EHLO a\r\nQUIT\r\n";
    assert_eq!(watched(&[ehlo]).await, (ehlo.to_vec(), false));
    // Bytes that begin like a header are held until they cannot be one, then given in order.
    let parts: [&[u8]; 3] = [b"PR", b"OXIMA", b" x\r\n"];
    assert_eq!(watched(&parts).await, (b"PROXIMA x\r\n".to_vec(), false));
    // A line's end (an empty line) is given at once: its client waits for the reply.
    assert_eq!(
        watched(&[b"\r\n", b"NOOP\r\n"]).await,
        (b"\r\nNOOP\r\n".to_vec(), false)
    );
    assert_eq!(watched(&[b"P"]).await, (b"P".to_vec(), false));
}
