//! `mx://` through the relay: a DNS server of the tests on 127.0.0.1 tells where each
//! domain's mail goes, and test upstreams on 127.0.N.2, 127.0.N.3, ... (one port) are the MX
//! hosts. Each test has its own N, so tests side by side never share an address.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use crate::support::config::TestConfig;
use crate::support::dns::TestDns;
use crate::support::relay::{memory_relay, Relay};
use crate::support::replies;
use crate::support::tls::TestCert;
use crate::support::upstream::{Fault, Step, TestUpstream};
use crate::support::wait::until;

const MESSAGE: &[u8] = b"Subject: mx\r\nFrom: s@sender.test\r\n\r\nHello.\r\n";

fn ip(net: u8, host: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, net, host)
}

/// Test upstreams at 127.0.`net`.`h` for each `h` of `hosts`, all on one port (free at the
/// first); on the other addresses of 127.0.`net` nothing listens at that port.
async fn mx_hosts(net: u8, hosts: &[u8]) -> (u16, Vec<TestUpstream>) {
    let first = TestUpstream::start_at(SocketAddr::from((ip(net, hosts[0]), 0))).await;
    let port = first.addr().port();
    let mut ups = vec![first];
    for h in &hosts[1..] {
        ups.push(TestUpstream::start_at(SocketAddr::from((ip(net, *h), port))).await);
    }
    (port, ups)
}

/// The MX hosts of these tests are on 127.x, internal addresses that `mx://` refuses unless
/// `mx_allow_networks` lists them: loopback is allowed unless `extra` says otherwise.
fn config(dns: &TestDns, port: u16, extra: &str) -> String {
    let allow = match extra.contains("mx_allow_networks") {
        true => "",
        false => "mx_allow_networks = [\"127.0.0.0/8\"]\n",
    };
    let timeout = match extra.contains("timeout_ms") {
        true => "",
        false => "timeout_ms = 2000\n",
    };
    let tls = match extra.contains("tls =") {
        true => "",
        false => "tls = \"none\"\n",
    };
    TestConfig::new()
        .upstream("mx://")
        .then(&format!(
            "mx_port = {port}\nnameservers = [\"{}\"]\n{allow}{timeout}{tls}{extra}",
            dns.addr()
        ))
        .text()
}

/// A relay on an `mx://` upstream, built from the config as the binary builds it.
async fn mx_relay(dns: &TestDns, port: u16, extra: &str) -> Relay {
    Relay::start_configured(&config(dns, port, extra)).await
}

/// Whether `code text` is `row` of docs/replies.md's `mx://` table, matched by its full text;
/// a row the docs no longer list fails here.
fn mx_row(row: &str, code: u16, text: &str) -> bool {
    let rows = replies::section(&replies::docs(), "**`mx://` only**");
    assert!(
        rows.iter().any(|r| r == row),
        "no row `{row}` in docs/replies.md"
    );
    replies::matches(row, code, text)
}

async fn send(relay: &Relay, from: &str, rcpts: &[&str]) -> (u16, String) {
    relay.client().await.send_mail(from, rcpts, MESSAGE).await
}

#[tokio::test]
async fn mx_preference_is_followed_past_a_host_that_is_down() {
    let dns = TestDns::start().await;
    // 127.0.11.2 (preference 10) is down; 20 must be taken before 30.
    let (port, ups) = mx_hosts(11, &[3, 4]).await;
    dns.mx("alpha.test", 30, "mx3.alpha.test");
    dns.mx("alpha.test", 10, "mx1.alpha.test");
    dns.mx("alpha.test", 20, "mx2.alpha.test");
    for h in 1..=3 {
        dns.a(&format!("mx{h}.alpha.test"), ip(11, h + 1));
    }
    let relay = mx_relay(&dns, port, "").await;
    let (code, text) = send(&relay, "s@sender.test", &["u@alpha.test"]).await;
    assert_eq!(code, 250, "{text}");
    let got = ups[0].wait_for(1).await;
    assert_eq!(got[0].rcpts, ["u@alpha.test"]);
    assert!(got[0].data.ends_with(b"Hello.\r\n"));
    assert!(ups[1].messages().is_empty(), "preference 30 before 20");
    assert!(dns.queries().contains(&"mx1.alpha.test A".to_string()));
    relay.stop().await;
}

#[tokio::test]
async fn a_domain_without_mx_is_its_own_mx() {
    let dns = TestDns::start().await;
    let (port, ups) = mx_hosts(12, &[2]).await;
    dns.a("beta.test", ip(12, 2));
    let relay = mx_relay(&dns, port, "").await;
    let (code, text) = send(&relay, "s@sender.test", &["u@beta.test"]).await;
    assert_eq!(code, 250, "{text}");
    assert_eq!(ups[0].wait_for(1).await[0].rcpts, ["u@beta.test"]);
    relay.stop().await;
}

#[tokio::test]
async fn null_mx_nxdomain_servfail_and_domains_without_addresses_have_their_pinned_replies() {
    let dns = TestDns::start().await;
    let (port, ups) = mx_hosts(13, &[2]).await;
    dns.null_mx("nomail.test");
    dns.servfail("broken.test");
    // An MX record whose host has no address at all.
    dns.mx("ghost.test", 10, "mx.ghost.test");
    // A name that exists without MX or address records.
    dns.exists("bare.test");
    let relay = mx_relay(&dns, port, "").await;
    for (rcpt, row) in [
        (
            "u@nomail.test",
            "556 5.1.10 upstream: domain {d} accepts no mail (null MX)",
        ),
        (
            "u@nowhere.test",
            "550 5.1.2 upstream: domain {d} does not exist",
        ),
        (
            "u@broken.test",
            "451 4.4.3 upstream: DNS lookup ({kind}) of {d} failed: {reason}",
        ),
        (
            "u@ghost.test",
            "550 5.4.4 upstream: MX host {h} has no address",
        ),
        ("u@bare.test", "... has no MX and no address"),
    ] {
        let (code, text) = send(&relay, "s@sender.test", &[rcpt]).await;
        assert!(mx_row(row, code, &text), "{rcpt}: {code} {text}");
    }
    assert!(ups[0].messages().is_empty());
    assert_eq!(ups[0].connections(), 0, "no MX host was contacted");
    relay.stop().await;
}

#[tokio::test]
async fn at_most_five_mx_hosts_and_addresses_are_tried_for_a_domain() {
    let dns = TestDns::start().await;
    // Only 127.0.21.7 listens; .2 to .6 refuse the connection at once.
    let (port, ups) = mx_hosts(21, &[7]).await;
    for (n, h) in [2, 3, 4, 5, 7].into_iter().enumerate() {
        dns.mx(
            "five.test",
            10 * (n as u16 + 1),
            &format!("mx{h}.five.test"),
        );
        dns.a(&format!("mx{h}.five.test"), ip(21, h));
    }
    for (n, h) in [2, 3, 4, 5, 6, 7].into_iter().enumerate() {
        dns.mx("six.test", 10 * (n as u16 + 1), &format!("mx{h}.six.test"));
        dns.a(&format!("mx{h}.six.test"), ip(21, h));
    }
    let relay = mx_relay(&dns, port, "").await;
    let (code, text) = send(&relay, "s@sender.test", &["u@five.test"]).await;
    assert_eq!(code, 250, "the fifth address is still tried: {text}");
    assert_eq!(ups[0].connections(), 1);
    let (code, text) = send(&relay, "s@sender.test", &["u@six.test"]).await;
    assert_eq!(code, 451, "the sixth is not: {text}");
    assert!(text.starts_with("4.4.1"), "{text}");
    assert_eq!(
        ups[0].messages().len(),
        1,
        "six.test's message reached no host"
    );
    relay.stop().await;
}

#[tokio::test]
async fn a_silent_name_server_is_451_4_4_3() {
    let dns = TestDns::start().await;
    let (port, _ups) = mx_hosts(14, &[2]).await;
    dns.silent("slow.test");
    let relay = mx_relay(&dns, port, "timeout_ms = 300").await;
    let (code, text) = send(&relay, "s@sender.test", &["u@slow.test"]).await;
    assert_eq!(code, 451, "{text}");
    assert!(text.starts_with("4.4.3"), "{text}");
    relay.stop().await;
}

/// a.test at 127.0.N.2, b.test at 127.0.N.3, the sender's domain at 127.0.N.4.
async fn two_domains(net: u8) -> (TestDns, u16, Vec<TestUpstream>) {
    let dns = TestDns::start().await;
    let (port, ups) = mx_hosts(net, &[2, 3, 4]).await;
    for (domain, h) in [("a.test", 2), ("b.test", 3), ("sender.test", 4)] {
        dns.mx(domain, 10, &format!("mx.{domain}"));
        dns.a(&format!("mx.{domain}"), ip(net, h));
    }
    (dns, port, ups)
}

#[tokio::test]
async fn two_domains_get_one_message_each_with_only_their_recipients() {
    let (dns, port, ups) = two_domains(15).await;
    let relay = mx_relay(&dns, port, "").await;
    let rcpts = ["x@a.test", "y@b.test", "z@A.test"];
    let (code, text) = send(&relay, "s@sender.test", &rcpts).await;
    assert_eq!(code, 250, "{text}");
    let a = ups[0].wait_for(1).await;
    let b = ups[1].wait_for(1).await;
    assert_eq!(a.len(), 1);
    assert_eq!(b.len(), 1);
    assert_eq!(a[0].rcpts, ["x@a.test", "z@A.test"]);
    assert_eq!(b[0].rcpts, ["y@b.test"]);
    assert_eq!(a[0].from, "s@sender.test");
    assert_eq!(a[0].data, b[0].data, "the same bytes to each domain");
    assert!(ups[2].messages().is_empty(), "no report");
    assert_eq!(
        relay.metric("mailsluice_messages_total{outcome=\"partial\"}"),
        0.0
    );
    relay.stop().await;
}

#[tokio::test]
async fn a_refusal_at_rcpt_delivers_nothing_anywhere_and_is_relayed() {
    let (dns, port, ups) = two_domains(16).await;
    ups[1].set_fault(Fault::reply(Step::Rcpt, 550, "5.1.1 no such user"));
    let relay = mx_relay(&dns, port, "").await;
    let (code, text) = send(&relay, "s@sender.test", &["x@a.test", "y@b.test"]).await;
    assert_eq!(code, 550, "{text}");
    // Its code and enhanced code, in our words: the host's text is logged, not relayed.
    let row = "{code} {esc} upstream: {d}: refused by its mail server";
    assert!(mx_row(row, code, &text), "{code} {text}");
    assert!(
        text.starts_with("5.1.1") && text.contains("b.test: refused by its mail server"),
        "{text}"
    );
    assert!(!text.contains("no such user"), "{text}");
    // a.test was brought to its 354 and then left without the final dot.
    assert!(
        ups[0].commands().iter().any(|c| c == "DATA"),
        "{:?}",
        ups[0].commands()
    );
    assert!(ups[0].messages().is_empty(), "nothing delivered to a.test");
    assert!(ups[1].messages().is_empty());
    assert!(
        ups[2].messages().is_empty(),
        "no report: the client was told"
    );
    relay.stop().await;
}

#[tokio::test]
async fn a_refusal_at_the_final_dot_after_another_accepted_is_250_and_one_report() {
    let (dns, port, ups) = two_domains(17).await;
    ups[1].set_fault(Fault::reply(
        Step::EndOfData,
        554,
        "5.7.1 rejected by policy",
    ));
    let relay = mx_relay(&dns, port, "").await;
    let (code, text) = send(&relay, "s@sender.test", &["x@a.test", "y@b.test"]).await;
    assert_eq!(code, 250, "{text}");
    assert!(
        text.ends_with("(refused for 1 of 2 recipients; the sender is sent a report)"),
        "{text}"
    );
    assert_eq!(ups[0].wait_for(1).await[0].rcpts, ["x@a.test"]);
    let report = ups[2].wait_for(1).await;
    assert_eq!(report[0].from, "", "from the null sender");
    assert_eq!(report[0].rcpts, ["s@sender.test"]);
    let body = String::from_utf8_lossy(&report[0].data);
    assert!(
        body.contains("multipart/report; report-type=delivery-status"),
        "{body}"
    );
    assert!(
        body.contains("Final-Recipient: rfc822; y@b.test\r\nAction: failed\r\nStatus: 5.7.1"),
        "{body}"
    );
    assert!(
        !body.contains("Final-Recipient: rfc822; x@a.test"),
        "{body}"
    );
    assert!(body.contains("Subject: mx\r\n"), "{body}");
    assert_eq!(
        relay.metric("mailsluice_messages_total{outcome=\"partial\"}"),
        1.0
    );
    relay.stop().await;
    assert_eq!(ups[2].messages().len(), 1, "one report");
}

/// A recipient an MX host refuses for good after the final dot (a bad mailbox) is the
/// tenant's hard bounce, as a smarthost's refusal at RCPT is; a policy refusal is not.
#[tokio::test]
async fn recipients_an_mx_host_refuses_after_the_dot_count_as_the_tenants_bounces() {
    let (dns, port, ups) = two_domains(43).await;
    ups[1].set_fault(Fault::reply(Step::EndOfData, 550, "5.1.1 no such user"));
    let reputation = "[reputation]\nkey = \"sender-domain\"\nmin_messages = 1\nmin_bounces = 1\n";
    let relay = mx_relay(&dns, port, reputation).await;
    let (code, text) = send(&relay, "s@sender.test", &["x@a.test", "y@b.test"]).await;
    assert_eq!(code, 250, "{text}");
    let guard = relay.reputation().unwrap();
    let standing = &guard.standings().await.unwrap()[0];
    assert_eq!(standing.key, "sender.test");
    assert_eq!((standing.sent, standing.bounces), (2, 1));
    assert!(guard.suppressed("y@b.test").await.is_some());
    assert!(guard.suppressed("x@a.test").await.is_none());
    let (code, text) = send(&relay, "s@sender.test", &["x@a.test"]).await;
    assert_eq!(code, 451, "the tenant is past its limit: {text}");
    ups[1].set_fault(Fault::reply(
        Step::EndOfData,
        554,
        "5.7.1 rejected by policy",
    ));
    guard.resume("sender.test").await.unwrap();
    let (code, text) = send(&relay, "s@sender.test", &["x@a.test", "z@b.test"]).await;
    assert_eq!(code, 250, "{text}");
    let standing = &guard.standings().await.unwrap()[0];
    assert_eq!((standing.sent, standing.bounces), (2, 0));
    assert!(guard.suppressed("z@b.test").await.is_none());
    relay.stop().await;
}

#[tokio::test]
async fn a_domain_silent_after_its_dot_is_reported_as_it_may_have_arrived() {
    let (dns, port, ups) = two_domains(23).await;
    ups[1].set_fault(Fault::stall(Step::EndOfData, Duration::from_millis(900)));
    let relay = mx_relay(&dns, port, "timeout_ms = 300").await;
    let (code, text) = send(&relay, "s@sender.test", &["x@a.test", "y@b.test"]).await;
    assert_eq!(
        code, 250,
        "a.test took it: a retry would duplicate it: {text}"
    );
    let report = ups[2].wait_for(1).await;
    let body = String::from_utf8_lossy(&report[0].data);
    assert!(
        body.contains("Final-Recipient: rfc822; y@b.test\r\nAction: failed\r\nStatus: 4.4.2"),
        "{body}"
    );
    assert!(body.contains("it may have arrived"), "{body}");
    assert_eq!(
        ups[1].wait_for(1).await.len(),
        1,
        "b.test did take it, late"
    );
    assert_eq!(
        relay.metric("mailsluice_messages_total{outcome=\"partial\"}"),
        1.0
    );
    relay.stop().await;
}

#[tokio::test]
async fn max_connections_per_domain_holds_under_50_concurrent_messages() {
    let dns = TestDns::start().await;
    let (port, ups) = mx_hosts(18, &[2]).await;
    dns.mx("busy.test", 10, "mx.busy.test");
    dns.a("mx.busy.test", ip(18, 2));
    // Past 3 open connections the MX host answers 421 and closes, as SES does.
    ups[0].set_max_connections(Some(3));
    let extra = "max_connections_per_domain = 3\npool_size = 16\ntimeout_ms = 20000";
    let relay = mx_relay(&dns, port, extra).await;
    let relay = Arc::new(relay);
    let mut clients = Vec::new();
    for i in 0..50 {
        let relay = relay.clone();
        clients.push(tokio::spawn(async move {
            let rcpt = format!("u{i}@busy.test");
            send(&relay, "s@sender.test", &[rcpt.as_str()]).await
        }));
    }
    for client in clients {
        let (code, text) = client.await.unwrap();
        assert_eq!(code, 250, "{text}");
    }
    assert_eq!(ups[0].wait_for(50).await.len(), 50);
    assert_eq!(ups[0].crowded(), 0, "never more than 3 connections at once");
    until("parked connections stay within the bound", async || {
        ups[0].open_connections() <= 3
    })
    .await;
}

/// The MX host with STARTTLS is another mailsluice on 127.0.0.1 with a self-signed
/// certificate for `localhost`: no name we connect with matches it, and no CA vouches for it.
#[tokio::test]
async fn opportunistic_tls_encrypts_unverified_and_required_refuses_a_plain_host() {
    let cert = TestCert::new();
    let (tls_host, got) = memory_relay(&cert.config(""), "").await;
    let port = tls_host.addr.port();
    let plain = TestUpstream::start_at(SocketAddr::from((ip(19, 2), port))).await;
    let dns = TestDns::start().await;
    dns.mx("tls.test", 10, "mx.tls.test");
    dns.a("mx.tls.test", Ipv4Addr::LOCALHOST);
    dns.mx("plain.test", 10, "mx.plain.test");
    dns.a("mx.plain.test", ip(19, 2));

    let opportunistic = mx_relay(&dns, port, "tls = \"opportunistic\"").await;
    for rcpt in ["u@tls.test", "u@plain.test"] {
        let (code, text) = send(&opportunistic, "s@sender.test", &[rcpt]).await;
        assert_eq!(code, 250, "{rcpt}: {text}");
    }
    until("the TLS host has the message", async || {
        got.messages().len() == 1
    })
    .await;
    let (_, data) = &got.messages()[0];
    let received = String::from_utf8_lossy(data);
    assert!(
        received.starts_with("Received: from relay.test"),
        "{received}"
    );
    assert!(
        received.lines().nth(2).unwrap().contains("with ESMTPS"),
        "{received}"
    );
    assert_eq!(
        plain.wait_for(1).await.len(),
        1,
        "no STARTTLS: sent in clear"
    );

    let required = mx_relay(&dns, port, "tls = \"required\"").await;
    let (code, text) = send(&required, "s@sender.test", &["v@tls.test"]).await;
    assert_eq!(code, 250, "{text}");
    let (code, text) = send(&required, "s@sender.test", &["v@plain.test"]).await;
    assert_eq!(code, 451, "{text}");
    until("the TLS host has both", async || got.messages().len() == 2).await;
    assert_eq!(
        plain.messages().len(),
        1,
        "nothing in clear under `required`"
    );
    for relay in [opportunistic, required, tls_host] {
        relay.stop().await;
    }
}

/// A relay with two upstreams, `direct` (`mx://`, asking `dns`, MX hosts at `port`) and
/// `smarthost`, and `routes` between them.
async fn direct_and_smarthost(
    dns: &TestDns,
    port: u16,
    smarthost: &TestUpstream,
    routes: &str,
) -> Relay {
    let text = TestConfig::new()
        .named_upstream("direct", "mx://")
        .then(&format!(
            "tls = \"none\"\ntimeout_ms = 2000\nmx_port = {port}\nnameservers = [\"{}\"]\n\
             mx_allow_networks = [\"127.0.0.0/8\"]",
            dns.addr()
        ))
        .named_upstream("smarthost", &smarthost.url())
        .then("tls = \"none\"\ntimeout_ms = 2000")
        .then(routes)
        .text();
    Relay::start_configured(&text).await
}

/// `mx://` as one named upstream among others: a route sends one tenant's mail to the
/// recipients' MX hosts, the rest goes to the smarthost.
#[tokio::test]
async fn a_route_sends_one_tenant_direct_to_mx_and_the_rest_to_the_smarthost() {
    let dns = TestDns::start().await;
    let (port, ups) = mx_hosts(20, &[2]).await;
    dns.mx("alpha.test", 10, "mx.alpha.test");
    dns.a("mx.alpha.test", ip(20, 2));
    let smarthost = TestUpstream::start().await;
    let routes =
        "[[route]]\nkey = \"header:X-Tenant\"\nvalues = [\"acme\"]\nupstream = \"direct\"\n\
                  [[route]]\nupstream = \"smarthost\"\n";
    let relay = direct_and_smarthost(&dns, port, &smarthost, routes).await;
    let mut c = relay.client().await;
    let direct = b"X-Tenant: acme\r\nSubject: direct\r\n\r\nHi.\r\n";
    let (code, reply) = c
        .send_mail("s@sender.test", &["u@alpha.test"], direct)
        .await;
    assert_eq!(code, 250, "{reply}");
    let (code, reply) = c
        .send_mail("s@sender.test", &["v@alpha.test"], MESSAGE)
        .await;
    assert_eq!(code, 250, "{reply}");
    assert_eq!(ups[0].wait_for(1).await[0].rcpts, ["u@alpha.test"]);
    assert_eq!(smarthost.wait_for(1).await[0].rcpts, ["v@alpha.test"]);
    assert_eq!(ups[0].messages().len(), 1);
    relay.stop().await;
}

#[tokio::test]
async fn direct_delivery_falls_back_to_the_smarthost_when_no_mx_host_answers() {
    let dns = TestDns::start().await;
    // Nothing listens at 127.0.22.3 on the MX port: the domain's one MX host is down.
    let (port, ups) = mx_hosts(22, &[2]).await;
    dns.mx("down.test", 10, "mx.down.test");
    dns.a("mx.down.test", ip(22, 3));
    dns.mx("up.test", 10, "mx.up.test");
    dns.a("mx.up.test", ip(22, 2));
    let smarthost = TestUpstream::start().await;
    let routes = "[[route]]\nupstream = \"direct\"\nfallback = \"smarthost\"\n";
    let relay = direct_and_smarthost(&dns, port, &smarthost, routes).await;
    let (code, reply) = send(&relay, "s@sender.test", &["u@up.test", "v@down.test"]).await;
    assert_eq!(code, 250, "{reply}");
    let carried = smarthost.wait_for(1).await;
    assert_eq!(
        carried[0].rcpts,
        ["u@up.test", "v@down.test"],
        "the whole message"
    );
    assert!(
        ups[0].messages().is_empty(),
        "nothing went direct: no domain got a dot"
    );
    let (code, reply) = send(&relay, "s@sender.test", &["w@up.test"]).await;
    assert_eq!(code, 250, "{reply}");
    assert_eq!(ups[0].wait_for(1).await[0].rcpts, ["w@up.test"]);
    assert_eq!(smarthost.messages().len(), 1);
    relay.stop().await;
}

/// `send` straight on the forwarder, the headers cut across pieces: each domain
/// gets the bytes the pieces make together, and a report built from the pieces holds the
/// headers and not the body.
#[tokio::test]
async fn pieces_reach_each_domain_as_one_message_and_a_report_takes_their_headers() {
    use mailsluice::config::Config;
    use mailsluice::message::Envelope;
    use mailsluice::upstream::{Forwarder, MxForwarder, Outgoing, OwnAddresses};

    let (dns, port, ups) = two_domains(24).await;
    let cfg = Config::parse(&config(&dns, port, ""))
        .unwrap()
        .upstreams
        .remove(0);
    let forwarder = MxForwarder::new(&cfg, OwnAddresses::default()).unwrap();
    let pieces: [&[u8]; 4] = [
        b"Received: from app by relay.test\r\n",
        b"Subject: mx\r\nFrom: s@sender.test\r\n",
        b"\r\nHello.\r\n",
        b"",
    ];
    let envelope = Envelope {
        from: Some("s@sender.test".into()),
        rcpts: vec!["x@a.test".into(), "y@b.test".into()],
        ..Envelope::default()
    };
    let outgoing = Outgoing {
        envelope: &envelope,
        pieces: &pieces,
        upstream_tenant: None,
        room: None,
    };
    let accepted = forwarder.send(&outgoing).await.unwrap();
    assert!(!accepted.partial, "{}", accepted.text);
    assert_eq!(ups[0].wait_for(1).await[0].data, pieces.concat());
    assert_eq!(ups[1].wait_for(1).await[0].data, pieces.concat());

    ups[1].set_fault(Fault::reply(
        Step::EndOfData,
        554,
        "5.7.1 rejected by policy",
    ));
    let accepted = forwarder.send(&outgoing).await.unwrap();
    assert!(accepted.partial, "{}", accepted.text);
    assert_eq!(ups[0].wait_for(2).await[1].data, pieces.concat());
    let report = ups[2].wait_for(1).await;
    let body = String::from_utf8_lossy(&report[0].data);
    assert!(
        body.contains(
            "Received: from app by relay.test\r\nSubject: mx\r\nFrom: s@sender.test\r\n\r\n--"
        ),
        "{body}"
    );
    assert!(!body.contains("Hello."), "headers only: {body}");
}

/// Hostile DNS: the MX (or the A record, or an address literal) of a recipient's domain points
/// at an internal address. Refused before any connection, unless `mx_allow_networks` says so.
#[tokio::test]
async fn internal_mx_hosts_and_address_literals_are_refused_without_a_connection() {
    let dns = TestDns::start().await;
    let (port, ups) = mx_hosts(40, &[2]).await;
    dns.mx("internal.test", 10, "mx.internal.test");
    dns.a("mx.internal.test", ip(40, 2));
    dns.a("implicit.test", ip(40, 2));
    let relay = mx_relay(&dns, port, "mx_allow_networks = []").await;
    for rcpt in [
        "u@internal.test",
        "u@implicit.test",
        "u@[127.0.40.2]",
        "u@[IPv6:::ffff:127.0.40.2]",
        "u@[IPv6:::1]",
        "u@[0.0.0.0]",
    ] {
        let (code, text) = send(&relay, "s@sender.test", &[rcpt]).await;
        let row = "550 5.7.1 upstream: {d}: MX host is an internal address";
        assert!(mx_row(row, code, &text), "{rcpt}: {code} {text}");
    }
    assert_eq!(ups[0].connections(), 0, "no connection made");
    relay.stop().await;
    // Opted back in for that network: delivered.
    let allowed = mx_relay(&dns, port, "mx_allow_networks = [\"127.0.40.0/24\"]").await;
    let (code, text) = send(&allowed, "s@sender.test", &["u@internal.test"]).await;
    assert_eq!(code, 250, "{text}");
    assert_eq!(ups[0].wait_for(1).await[0].rcpts, ["u@internal.test"]);
    allowed.stop().await;
}

/// The internal ranges beyond the private ones, each as an address literal and as an MX host's
/// resolved address: benchmarking (`198.18.0.0/15`), IETF protocol assignments
/// (`192.0.0.0/24`), NAT64 to an internal IPv4 address (`64:ff9b::/96`), local-use NAT64
/// (`64:ff9b:1::/48`), 6to4 (`2002::/16`) and site-local (`fec0::/10`). Refused before any
/// connection (the test runs nothing there: a connection would be the failure).
#[tokio::test]
async fn every_internal_range_is_refused_as_a_literal_and_as_a_resolved_host() {
    let dns = TestDns::start().await;
    let (port, _ups) = mx_hosts(41, &[2]).await;
    let relay = mx_relay(&dns, port, "").await;
    let ranges: [(&str, &str); 7] = [
        ("198.18.0.0/15", "198.19.1.1"),
        ("192.0.0.0/24", "192.0.0.8"),
        ("64:ff9b::/96 to loopback", "64:ff9b::7f00:1"),
        ("64:ff9b::/96 to 10/8", "64:ff9b::a00:1"),
        ("64:ff9b:1::/48", "64:ff9b:1::808:808"),
        ("2002::/16", "2002:808:808::1"),
        ("fec0::/10", "fec0::1"),
    ];
    for (i, (range, address)) in ranges.iter().enumerate() {
        let ip: std::net::IpAddr = address.parse().unwrap();
        let literal = match ip {
            std::net::IpAddr::V4(_) => format!("u@[{address}]"),
            std::net::IpAddr::V6(_) => format!("u@[IPv6:{address}]"),
        };
        let domain = format!("range{i}.test");
        dns.mx(&domain, 10, &format!("mx.{domain}"));
        match ip {
            std::net::IpAddr::V4(v4) => dns.a(&format!("mx.{domain}"), v4),
            std::net::IpAddr::V6(v6) => dns.aaaa(&format!("mx.{domain}"), v6),
        }
        for rcpt in [literal, format!("u@{domain}")] {
            let (code, text) = send(&relay, "s@sender.test", &[&rcpt]).await;
            assert_eq!(code, 550, "{range}, {rcpt}: {text}");
            assert!(
                text.contains(": MX host is an internal address"),
                "{range}, {rcpt}: {text}"
            );
        }
    }
    relay.stop().await;
}

/// A domain whose MX is the relay itself: refused before connecting, not a loop of hops.
#[tokio::test]
async fn an_mx_host_that_is_the_relay_itself_is_554_5_4_6_without_connecting() {
    let dns = TestDns::start().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    dns.mx("self.test", 10, "mx.self.test");
    dns.a("mx.self.test", ip(0, 1));
    let relay = Relay::start_configured_on(listener, &config(&dns, port, "")).await;
    let (code, text) = send(&relay, "s@sender.test", &["u@self.test"]).await;
    let row = "554 5.4.6 upstream: {d}: MX host is this relay: mail loops back to myself";
    assert!(mx_row(row, code, &text), "{code} {text}");
    assert!(text.contains("self.test"), "{text}");
    // Only the client's message reached a final dot: the relay never spoke to itself.
    assert_eq!(relay.messages_done(), 1);
    relay.stop().await;
}

/// An MX host's refusal (here an internal server's banner) keeps its code and enhanced code;
/// its text is not relayed, and a closed port answers the same but for the code class.
#[tokio::test]
async fn an_mx_hosts_banner_is_never_relayed() {
    let dns = TestDns::start().await;
    let (port, ups) = mx_hosts(41, &[2]).await;
    dns.a("banner.test", ip(41, 2));
    dns.a("closed.test", ip(41, 3));
    let banner = "5.7.1 exch01.corp.internal Microsoft ESMTP MAIL Service ready";
    ups[0].set_fault(Fault::reply(Step::Greeting, 554, banner));
    let relay = mx_relay(&dns, port, "").await;
    let (code, text) = send(&relay, "s@sender.test", &["u@banner.test"]).await;
    assert_eq!(code, 554, "{text}");
    assert!(text.starts_with("5.7.1"), "{text}");
    assert!(text.contains("banner.test"), "{text}");
    assert!(
        !text.contains("exch01") && !text.contains("Microsoft"),
        "{text}"
    );
    let (code, text) = send(&relay, "s@sender.test", &["u@closed.test"]).await;
    assert_eq!(code, 451, "{text}");
    assert!(!text.contains("127.0.41"), "{text}");
    relay.stop().await;
}

/// One domain's MX answers `450 4.7.1 Rate limit exceeded`: a reply about that domain's
/// servers. It teaches the `rcpt-domain` layer's bucket of that domain, never the account
/// layer (`key = "none"`), whose limit stays while the message waits and ends `451 4.7.1`.
#[tokio::test(start_paused = true)]
async fn an_mx_domains_rate_limit_teaches_its_domain_bucket_not_the_account() {
    let (dns, port, ups) = two_domains(42).await;
    ups[1].set_fault(Fault::reply(
        Step::EndOfData,
        450,
        "4.7.1 Rate limit exceeded",
    ));
    let layers = "[[throttle]]\nname = \"account\"\nkey = \"none\"\ncost = \"message\"\n\
                  limit = 50\ninterval_ms = 1000\nmax_wait_ms = 4000\n\
                  [[throttle]]\nname = \"domain\"\nkey = \"rcpt-domain\"\ncost = \"message\"\n\
                  limit = 20\ninterval_ms = 1000\nmax_wait_ms = 4000\nadaptive = true\n";
    let relay = mx_relay(&dns, port, layers).await;
    let (code, text) = send(&relay, "s@sender.test", &["y@b.test"]).await;
    assert_eq!(code, 451, "{text}");
    assert!(
        text.starts_with("4.7.1 Upstream rate limit reached"),
        "{text}"
    );
    assert_eq!(
        relay.throttle.effective_limit(0),
        Some(50),
        "the account kept its limit"
    );
    let domain = relay.throttle.peek("domain", "b.test").unwrap();
    assert!(domain.effective_limit.unwrap() < 20, "{domain:?}");
    let (code, text) = send(&relay, "s@sender.test", &["x@a.test"]).await;
    assert_eq!(code, 250, "{text}");
    relay.stop().await;
}

/// A recipient the session takes as given but direct delivery cannot route: `<postmaster>`
/// (RFC 5321 lets it go without a domain) and a domain that is no IDNA name (`xn--a`: its
/// punycode decodes to a control character). Each refused with its pinned reply, nothing
/// sent, no DNS asked.
#[tokio::test]
async fn a_recipient_without_a_domain_or_with_no_idna_domain_has_its_pinned_reply() {
    let dns = TestDns::start().await;
    let (port, ups) = mx_hosts(14, &[2]).await;
    let relay = mx_relay(&dns, port, "").await;
    let row = "550 5.1.3 upstream: recipient <{r}> has no domain";
    let (code, text) = send(&relay, "s@sender.test", &["postmaster"]).await;
    assert!(mx_row(row, code, &text), "{code} {text}");
    let row = "553 5.1.3 upstream: bad domain in <{r}>";
    let (code, text) = send(&relay, "s@sender.test", &["u@xn--a.test"]).await;
    assert!(mx_row(row, code, &text), "{code} {text}");
    assert!(ups[0].messages().is_empty());
    assert!(dns.queries().is_empty(), "{:?}", dns.queries());
    relay.stop().await;
}
