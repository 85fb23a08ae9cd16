//! The PROXY protocol behind a balancer (`[smtp] proxy_from`), over real TCP: the test is the
//! balancer at 127.0.0.1 (or `::1`) and speaks for clients at 127.0.0.2, 127.0.0.3 and `::1`,
//! whose addresses must then decide everything the relay decides by address (trust, the
//! per-address limit, a throttle key, AUTH's lockout).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use crate::support::auth::{auth_config, plain};
use crate::support::memory::MemoryForwarder;
use crate::support::proxy::{connect_from, ipv6_listener, v1, v2, v2_local, v2_no_address};
use crate::support::relay::{config_text, memory_relay, Client, Relay};
use crate::support::tls::{handshake, TestCert};
use crate::support::wait::until;

/// The balancers: the test, at either loopback address.
const BALANCER: &str = "proxy_from = [\"127.0.0.1/32\", \"::1/128\"]\n";

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

async fn relay(extra_smtp: &str, rest: &str) -> (Relay, Arc<MemoryForwarder>) {
    memory_relay(&format!("{BALANCER}{extra_smtp}"), rest).await
}

/// A connection from the balancer at `from` to `to`, opened with `header`; the greeting is
/// left unread.
async fn balanced_from(from: &str, to: SocketAddr, header: &[u8]) -> Client {
    let mut tcp = connect_from(from, to).await;
    tcp.write_all(header).await.unwrap();
    Client::over(Box::new(tcp))
}

/// As [`balanced_from`] from 127.0.0.1, the greeting read.
async fn balanced(relay: &Relay, header: &[u8]) -> Client {
    let mut c = balanced_from("127.0.0.1", relay.addr, header).await;
    c.greeting().await;
    c
}

/// A client at `client` (`127.0.0.2:40000`, say) behind the balancer, with a v2 header.
async fn client_at(relay: &Relay, client: &str) -> Client {
    balanced(relay, &v2(addr(client), relay.addr)).await
}

/// The `from` part of the first `Received:` field of the `n`th message forwarded.
fn received_from(fwd: &MemoryForwarder, n: usize) -> String {
    let message = fwd.messages()[n].1.clone();
    let text = String::from_utf8_lossy(&message).into_owned();
    let field = text.lines().find(|l| l.starts_with("Received: from"));
    field.expect("a Received: field").to_string()
}

const MAIL: &[u8] = b"Subject: hello\r\n\r\nhi\r\n";

async fn send(c: &mut Client) -> u16 {
    c.send_mail("app@example.com", &["to@example.net"], MAIL)
        .await
        .0
}

async fn refused(relay: &Relay, reason: &str) -> u64 {
    let name = format!("mailsluice_proxy_refused_total{{reason=\"{reason}\"}}");
    relay.metric(&name) as u64
}

#[tokio::test]
async fn v1_and_v2_over_ipv4_and_ipv6_name_the_client_in_received() {
    let trusted = "trusted_networks = [\"127.0.0.0/8\", \"::1/128\"]\n";
    let (relay, fwd) = relay(trusted, "").await;
    let server6 = addr("[::1]:2525");
    let cases = [
        (v1(addr("127.0.0.2:40001"), relay.addr), "([127.0.0.2])"),
        (v1(addr("[::1]:40002"), server6), "([::1])"),
        (v2(addr("127.0.0.3:40003"), relay.addr), "([127.0.0.3])"),
        (v2(addr("[::1]:40004"), server6), "([::1])"),
    ];
    for (n, (header, from)) in cases.iter().enumerate() {
        let mut c = balanced(&relay, header).await;
        assert_eq!(send(&mut c).await, 250, "{header:?}");
        let received = received_from(&fwd, n);
        assert!(received.ends_with(from), "{header:?}: {received}");
    }
    relay.stop().await;

    // The balancer itself over IPv6, for a client over IPv4.
    let Some(listener) = ipv6_listener().await else {
        return;
    };
    let fwd = MemoryForwarder::new();
    let config = config_text("file://unused", &format!("{BALANCER}{trusted}"), "");
    let relay = Relay::start_on(listener, &config, fwd.clone()).await;
    for (n, header) in [
        v1(addr("127.0.0.4:40005"), addr("127.0.0.1:2525")),
        v2(addr("127.0.0.4:40006"), addr("127.0.0.1:2525")),
    ]
    .iter()
    .enumerate()
    {
        let mut c = balanced_from("::1", relay.addr, header).await;
        c.greeting().await;
        assert_eq!(send(&mut c).await, 250);
        let received = received_from(&fwd, n);
        assert!(received.ends_with("([127.0.0.4])"), "{received}");
    }
    relay.stop().await;
}

#[tokio::test]
async fn the_claimed_address_decides_trust() {
    let trusted = "trusted_networks = [\"127.0.0.1/32\", \"127.0.0.2/32\"]\n";
    let (relay, fwd) = relay(trusted, "").await;
    let mut trusted = client_at(&relay, "127.0.0.2:40000").await;
    assert_eq!(send(&mut trusted).await, 250);
    // The balancer (127.0.0.1) is trusted; a client behind it is not, for all that.
    let mut stranger = client_at(&relay, "127.0.0.3:40000").await;
    assert_eq!(stranger.cmd("EHLO app.test").await.0, 250);
    let (code, text) = stranger.cmd("MAIL FROM:<app@example.com>").await;
    assert_eq!(code, 530, "{text}");
    assert!(received_from(&fwd, 0).ends_with("([127.0.0.2])"));
    relay.stop().await;
}

/// The headers that name no client: v2 `LOCAL`, v1 `UNKNOWN`, v2 `UNSPEC` and `AF_UNIX`.
fn no_client() -> [Vec<u8>; 4] {
    [
        v2_local(),
        b"PROXY UNKNOWN\r\n".to_vec(),
        v2_no_address(0x00),
        v2_no_address(0x31),
    ]
}

/// A header naming no client is the balancer's own connection: served as the balancer while
/// its address is not trusted (so it relays only with AUTH, as any stranger).
#[tokio::test]
async fn a_header_naming_no_client_is_the_untrusted_balancer_itself() {
    let (relay, fwd) = relay("trusted_networks = [\"127.0.0.2/32\"]\n", "").await;
    for header in no_client() {
        let mut c = balanced(&relay, &header).await;
        assert_eq!(c.cmd("EHLO app.test").await.0, 250, "{header:?}");
        let (code, text) = c.cmd("MAIL FROM:<app@example.com>").await;
        assert_eq!(code, 530, "{header:?}: {text}");
    }
    assert!(fwd.messages().is_empty());
    assert_eq!(refused(&relay, "local_trusted").await, 0);
    relay.stop().await;
}

/// From a balancer whose address is trusted, a header naming no client would make its
/// connection trusted with no client named: refused, closed before the greeting, counted.
#[tokio::test]
async fn a_header_naming_no_client_from_a_trusted_balancer_is_refused() {
    let (relay, fwd) = relay("trusted_networks = [\"127.0.0.1/32\"]\n", "").await;
    for (n, header) in no_client().iter().enumerate() {
        let mut c = balanced_from("127.0.0.1", relay.addr, header).await;
        c.send(b"EHLO app.test\r\nMAIL FROM:<app@example.com>\r\n")
            .await;
        assert!(c.is_closed().await, "no greeting, closed: {header:?}");
        until("counted", async || {
            refused(&relay, "local_trusted").await == n as u64 + 1
        })
        .await;
    }
    assert!(fwd.messages().is_empty());
    relay.stop().await;
}

#[tokio::test]
async fn the_per_address_limit_counts_the_claimed_address() {
    let (relay, _) = relay("max_connections_per_ip = 1\n", "").await;
    // Two clients behind one balancer: one connection each.
    let _first = client_at(&relay, "127.0.0.2:40000").await;
    let _second = client_at(&relay, "127.0.0.3:40000").await;
    let mut again = balanced_from(
        "127.0.0.1",
        relay.addr,
        &v1(addr("127.0.0.2:40001"), relay.addr),
    )
    .await;
    let (code, text) = again.reply().await;
    assert_eq!((code, again.is_closed().await), (421, true), "{text}");
    assert!(text.starts_with("4.7.0"), "{text}");
    relay.stop().await;
}

/// AUTH's lockout counts the claimed address: a guessing client behind the balancer is locked
/// out, another client behind the same balancer is not.
#[tokio::test]
async fn the_auth_lockout_counts_the_claimed_address() {
    let users = [("app", "pw", "")];
    let auth = auth_config(&users, "failure_delay_ms = 0\nmax_failures = 2");
    let (relay, _) = relay(&format!("allow_plaintext_auth = true\n{auth}"), "").await;
    let login = async |client: &str, password: &str| {
        let mut c = client_at(&relay, client).await;
        assert_eq!(c.cmd("EHLO client.test").await.0, 250);
        c.cmd(&format!("AUTH PLAIN {}", plain("app", password)))
            .await
    };
    assert_eq!(login("127.0.0.2:40000", "guess").await.0, 535);
    let (code, text) = login("127.0.0.2:40001", "guess").await;
    assert_eq!(code, 421, "the second failure locks 127.0.0.2 out: {text}");
    let (code, text) = login("127.0.0.2:40002", "pw").await;
    assert_eq!(
        code, 421,
        "127.0.0.2 is locked out, right password or not: {text}"
    );
    let (code, text) = login("127.0.0.3:40000", "pw").await;
    assert_eq!(
        code, 235,
        "127.0.0.3, behind the same balancer, is not: {text}"
    );
    relay.stop().await;
}

#[tokio::test]
async fn an_ip_throttle_key_is_the_claimed_address() {
    let layer = "[[throttle]]\nname = \"per-ip\"\nkey = \"client-ip\"\nlimit = 1\n\
                 interval_ms = 3600000\nmode = \"reject\"\n";
    let (relay, _) = relay("trusted_networks = [\"127.0.0.0/8\"]\n", layer).await;
    let mut codes = Vec::new();
    for client in ["127.0.0.2:40000", "127.0.0.3:40000", "127.0.0.2:40001"] {
        let mut c = client_at(&relay, client).await;
        codes.push(send(&mut c).await);
    }
    assert_eq!(
        codes,
        [250, 250, 451],
        "one bucket per client, not per balancer"
    );
    relay.stop().await;
}

#[tokio::test]
async fn implicit_tls_reads_the_header_before_the_handshake() {
    let cert = TestCert::new();
    let smtp = format!(
        "trusted_networks = [\"127.0.0.2/32\"]\n{}",
        cert.config("handshake_timeout_ms = 2000")
    );
    let (relay, fwd) = relay(&smtp, "").await;
    let tls_addr = relay.tls_addr.unwrap();
    let mut tcp = connect_from("127.0.0.1", tls_addr).await;
    tcp.write_all(&v2(addr("127.0.0.2:40000"), tls_addr))
        .await
        .unwrap();
    let tls = handshake(Box::new(tcp), &cert.der)
        .await
        .expect("TLS after the header");
    let mut c = Client::over(tls);
    c.greeting().await;
    assert_eq!(send(&mut c).await, 250);
    assert!(received_from(&fwd, 0).contains("([127.0.0.2])"));
    relay.stop().await;
}

#[tokio::test]
async fn a_header_from_outside_proxy_from_is_refused() {
    // The client at 127.0.0.3 is no balancer: it may not claim 127.0.0.2, which is trusted.
    let (relay, fwd) = relay("trusted_networks = [\"127.0.0.2/32\"]\n", "").await;
    let claims = [
        v1(addr("127.0.0.2:40000"), relay.addr),
        v2(addr("127.0.0.2:40000"), relay.addr),
    ];
    for (n, claim) in claims.iter().enumerate() {
        let mut c = Client::over(Box::new(connect_from("127.0.0.3", relay.addr).await));
        c.greeting().await;
        c.send(claim).await;
        c.send(b"EHLO app.test\r\nMAIL FROM:<app@example.com>\r\n")
            .await;
        assert!(c.is_closed().await, "closed, nothing answered");
        until("counted", async || {
            refused(&relay, "not_allowed").await == n as u64 + 1
        })
        .await;
    }
    // Without a header it is served, as its own address.
    let mut direct = Client::over(Box::new(connect_from("127.0.0.3", relay.addr).await));
    direct.greeting().await;
    assert_eq!(direct.cmd("EHLO app.test").await.0, 250);
    assert_eq!(direct.cmd("MAIL FROM:<app@example.com>").await.0, 530);
    assert!(fwd.messages().is_empty());
    relay.stop().await;
}

#[tokio::test]
async fn a_balancers_connection_without_a_header_is_refused() {
    let (relay, _) = relay("", "").await;
    let cases: [&[u8]; 3] = [
        b"EHLO app.test\r\n",
        b"PROXY TCP4 127.0.0.300 127.0.0.1 1 2\r\n",
        b"\x16\x03\x01\x00\x05hello",
    ];
    for bytes in cases {
        let mut c = balanced_from("127.0.0.1", relay.addr, bytes).await;
        assert!(c.is_closed().await, "no greeting, closed: {bytes:?}");
    }
    until("counted", async || {
        refused(&relay, "missing").await == 2 && refused(&relay, "malformed").await == 1
    })
    .await;
    relay.stop().await;
}

#[tokio::test(start_paused = true)]
async fn truncated_and_slow_headers_are_closed_within_the_timeout() {
    let (relay, _) = relay("proxy_timeout_ms = 3000\n", "").await;
    let timeout = Duration::from_millis(3000);
    let header = v2(addr("127.0.0.2:40000"), relay.addr);
    // Slow: part of the header, then nothing; and silence (a balancer not sending PROXY).
    for (part, reason) in [(&header[..20], "slow"), (&header[..0], "missing")] {
        let started = tokio::time::Instant::now();
        let mut c = balanced_from("127.0.0.1", relay.addr, part).await;
        assert!(c.is_closed().await);
        let took = started.elapsed();
        assert!(
            took >= timeout && took < timeout + Duration::from_millis(100),
            "{took:?}"
        );
        assert_eq!(refused(&relay, reason).await, 1, "{reason}");
    }
    // Truncated: the balancer closes mid-header; closed at once.
    let started = tokio::time::Instant::now();
    let mut tcp = connect_from("127.0.0.1", relay.addr).await;
    tcp.write_all(&header[..20]).await.unwrap();
    tcp.shutdown().await.unwrap();
    let mut c = Client::over(Box::new(tcp));
    assert!(c.is_closed().await);
    assert!(started.elapsed() < timeout);
    until("counted", async || refused(&relay, "truncated").await == 1).await;
    relay.stop().await;
}

/// A v1 line that ends without all its fields (no ports) can never become whole: refused at
/// once, not at `proxy_timeout_ms`.
#[tokio::test(start_paused = true)]
async fn a_v1_line_without_its_ports_is_refused_at_once() {
    let (relay, _) = relay("proxy_timeout_ms = 3000\n", "").await;
    let started = tokio::time::Instant::now();
    let cut = b"PROXY TCP4 127.0.0.2 127.0.0.1\r\n";
    let mut c = balanced_from("127.0.0.1", relay.addr, cut).await;
    assert!(c.is_closed().await);
    assert!(started.elapsed() < Duration::from_millis(3000));
    until("counted", async || refused(&relay, "malformed").await == 1).await;
    relay.stop().await;
}
