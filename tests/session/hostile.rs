//! Hostile input over TCP, each with its defined answer, and what the upstream got: one
//! message for one message, never a smuggled second.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::config::TestConfig;
use crate::support::memory::without_received;
use crate::support::relay::{memory_relay, smtp_relay, Client};
use crate::support::upstream::TestUpstream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Opens a transaction and reads the 354.
async fn open_data(c: &mut Client) {
    assert_eq!(c.cmd("EHLO client.test").await.0, 250);
    assert_eq!(c.cmd("MAIL FROM:<a@example.com>").await.0, 250);
    assert_eq!(c.cmd("RCPT TO:<b@example.com>").await.0, 250);
    assert_eq!(c.cmd("DATA").await.0, 354);
}

/// What each smuggling variant is wrapped in: a first message whose "end" is the variant,
/// then a complete second transaction, then the real terminator.
fn smuggling(variant: &[u8]) -> Vec<u8> {
    let mut m = b"Subject: one\r\n\r\nfirst".to_vec();
    m.extend_from_slice(variant);
    m.extend_from_slice(
        b"MAIL FROM:<evil@example.com>\r\nRCPT TO:<victim@example.com>\r\nDATA\r\n\
          Subject: smuggled\r\n\r\nsecond\r\n.\r\n",
    );
    m
}

const VARIANTS: [&[u8]; 10] = [
    b"\n.\n",
    b"\r.\r",
    b"\r.\n",
    b"\n.\r",
    b"\n.\r\n",
    b"\r\n.\n",
    b"\r.\r\n",
    b"\r\n.\r",
    b"\r\n\0.\r\n",
    b"\r\n.\0\r\n",
];

#[tokio::test]
async fn smuggling_variants_never_end_data_nor_pass_a_second_message() {
    let (relay, fwd) = memory_relay("", "").await;
    for variant in VARIANTS {
        let shown = format!("{:?}", String::from_utf8_lossy(variant));
        let mut c = relay.client().await;
        open_data(&mut c).await;
        c.send(&smuggling(variant)).await;
        // Exactly one reply for the whole thing: the message is refused (bare CR/LF or NUL).
        let (code, text) = c.reply().await;
        assert_eq!(
            (code, text.starts_with("5.6.0")),
            (550, true),
            "{shown}: {text}"
        );
        assert_eq!(
            c.cmd("NOOP").await.0,
            250,
            "{shown}: no reply was left pending"
        );
        assert!(fwd.messages().is_empty(), "{shown}: nothing relayed");
    }
    // A clean message afterwards passes, byte for byte.
    let mut c = relay.client().await;
    let (code, _) = c
        .send_mail(
            "a@example.com",
            &["b@example.com"],
            b"Subject: ok\r\n\r\nfine\r\n",
        )
        .await;
    assert_eq!(code, 250);
    let got = fwd.messages();
    assert_eq!(got.len(), 1);
    assert_eq!(without_received(&got[0].1), b"Subject: ok\r\n\r\nfine\r\n");
    relay.stop().await;
}

#[tokio::test]
async fn smuggling_through_a_real_smtp_upstream_delivers_one_message_for_one() {
    let up = TestUpstream::start().await;
    let relay = smtp_relay(&up.url(), "", "").await;
    let mut c = relay.client().await;
    // A clean message, then a smuggling attempt, pipelined in one write.
    open_data(&mut c).await;
    let mut wire = b"Subject: clean\r\n\r\nhello\r\n.\r\n".to_vec();
    wire.extend_from_slice(b"MAIL FROM:<a@example.com>\r\nRCPT TO:<b@example.com>\r\nDATA\r\n");
    wire.extend_from_slice(&smuggling(b"\n.\n"));
    wire.extend_from_slice(b"QUIT\r\n");
    c.send(&wire).await;
    let codes: Vec<u16> = [(); 5].iter().map(|_| 0).collect();
    let mut got = Vec::new();
    for _ in codes {
        got.push(c.reply().await.0);
    }
    assert_eq!(got, [250, 250, 250, 354, 550]);
    assert_eq!(c.reply().await.0, 221);
    let msgs = up.wait_for(1).await;
    assert_eq!(msgs.len(), 1);
    assert!(msgs[0].data.ends_with(b"Subject: clean\r\n\r\nhello\r\n"));
    assert_eq!(msgs[0].rcpts, ["b@example.com"]);
    assert_eq!(up.messages().len(), 1, "no second message");
    relay.stop().await;
}

#[tokio::test]
async fn nul_in_data_is_refused_and_in_commands_is_501() {
    let (relay, fwd) = memory_relay("", "").await;
    let mut c = relay.client().await;
    c.send(b"NOOP\0\r\n").await;
    assert_eq!(c.reply().await.0, 501);
    let (code, text) = c
        .send_mail(
            "a@example.com",
            &["b@example.com"],
            b"Subject: n\r\n\r\na\0b\r\n",
        )
        .await;
    assert_eq!((code, text.starts_with("5.6.0")), (550, true), "{text}");
    assert!(fwd.messages().is_empty());
    let (code, _) = c
        .send_mail(
            "a@example.com",
            &["b@example.com"],
            b"Subject: n\r\n\r\nab\r\n",
        )
        .await;
    assert_eq!(code, 250);
    assert_eq!(fwd.messages().len(), 1);
    relay.stop().await;
}

#[tokio::test]
async fn bare_cr_and_lf_in_commands_are_501_and_never_split_a_command() {
    let (relay, fwd) = memory_relay("", "").await;
    let mut c = relay.client().await;
    c.cmd("EHLO x").await;
    // Neither a bare LF nor a bare CR ends a command: each is one bad line, not NOOP then QUIT.
    c.send(b"NOOP\nQUIT\r\n").await;
    assert_eq!(c.reply().await.0, 501);
    c.send(b"NOOP\rQUIT\r\n").await;
    assert_eq!(c.reply().await.0, 501);
    // A bare LF inside a pipeline: the whole line is refused once, and neither part ran
    // (RCPT without MAIL: 503).
    c.send(b"MAIL FROM:<a@example.com>\nRCPT TO:<b@example.com>\r\n")
        .await;
    assert_eq!(c.reply().await.0, 501);
    assert_eq!(c.cmd("RCPT TO:<b@example.com>").await.0, 503, "no MAIL ran");
    assert_eq!(c.cmd("MAIL FROM:<a@example.com>").await.0, 250);
    assert_eq!(c.cmd("RCPT TO:<b@example.com>").await.0, 250);
    // DATA ended by a bare LF does not start DATA.
    c.send(b"DATA\nRSET\r\n").await;
    assert_eq!(c.reply().await.0, 501);
    assert_eq!(c.cmd("RSET").await.0, 250);
    assert!(fwd.messages().is_empty());
    relay.stop().await;
}

#[tokio::test]
async fn invalid_utf8_in_commands_is_501() {
    let (relay, _) = memory_relay("", "").await;
    let mut c = relay.client().await;
    c.send(b"EHLO \xc3\x28\r\n").await;
    assert_eq!(c.reply().await.0, 501);
    c.cmd("EHLO x").await;
    c.send(b"MAIL FROM:<\xff@example.com>\r\n").await;
    assert_eq!(c.reply().await.0, 501);
    // UTF-8 addresses are fine (SMTPUTF8).
    assert_eq!(c.cmd("MAIL FROM:<é@example.com> SMTPUTF8").await.0, 250);
    relay.stop().await;
}

#[tokio::test]
async fn header_section_that_never_ends_is_bounded_by_the_size() {
    let (relay, fwd) = memory_relay("max_message_bytes = 2000", "").await;
    let mut c = relay.client().await;
    let endless: Vec<u8> = (0..200)
        .flat_map(|i| format!("X-H{i}: v\r\n").into_bytes())
        .collect();
    let (code, text) = c
        .send_mail("a@example.com", &["b@example.com"], &endless)
        .await;
    assert_eq!((code, text.starts_with("5.3.4")), (552, true), "{text}");
    assert!(fwd.messages().is_empty());
    // Headers only, no body and no empty line, within the bound: relayed as it is.
    let headers_only = &endless[..500];
    let (code, _) = c
        .send_mail("a@example.com", &["b@example.com"], headers_only)
        .await;
    assert_eq!(code, 250);
    assert_eq!(without_received(&fwd.messages()[0].1), headers_only);
    relay.stop().await;
}

#[tokio::test]
async fn flood_of_pipelined_commands_is_answered_in_order() {
    // NOOPs past `max_junk_commands` would close the session: the bound is tested in
    // command_bounds.rs; here the order of the answers is.
    let (relay, _) = memory_relay("max_junk_commands = 100000", "").await;
    let c = relay.client().await;
    let (mut rd, mut wr) = tokio::io::split(c.into_stream());
    const N: usize = 20_000;
    let writer = tokio::spawn(async move {
        let flood = b"NOOP\r\n".repeat(N);
        wr.write_all(&flood).await.unwrap();
        wr.write_all(b"QUIT\r\n").await.unwrap();
        wr
    });
    let mut out = Vec::new();
    rd.read_to_end(&mut out).await.unwrap();
    let _wr = writer.await.unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.split_terminator("\r\n").collect();
    assert_eq!(lines.len(), N + 1);
    assert!(lines[..N].iter().all(|l| *l == "250 2.0.0 Ok"));
    assert_eq!(lines[N], "221 2.0.0 Bye");
    relay.stop().await;
}

#[tokio::test(start_paused = true)]
async fn flooding_client_that_never_reads_is_dropped() {
    let (relay, _) = memory_relay("idle_timeout_ms = 1000", "").await;
    let c = relay.client().await;
    let mut stream = c.into_stream();
    // Megabytes of commands, replies never read: the relay's pending replies stay bounded
    // (it writes them out every 64 KiB), the write stalls, and past the idle timeout the
    // relay drops the connection, which makes this write fail.
    let flood = b"NOOP\r\n".repeat(2_000_000);
    let result = stream.write_all(&flood).await;
    assert!(result.is_err(), "the relay closed the connection");
    assert_eq!(
        relay.client().await.cmd("NOOP").await.0,
        250,
        "others served"
    );
    relay.stop().await;
}

#[tokio::test]
async fn too_many_errors_get_421_and_close_but_refused_messages_do_not_count() {
    let (relay, _) = memory_relay("max_errors = 3", "").await;
    let mut c = relay.client().await;
    // Refused messages are verdicts on content, not client errors.
    for _ in 0..4 {
        let (code, _) = c
            .send_mail("a@example.com", &["b@example.com"], b"bare\nlf\r\n")
            .await;
        assert_eq!(code, 550);
    }
    assert_eq!(c.cmd("FROB").await.0, 500);
    assert_eq!(c.cmd("MAIL FROM:<<<").await.0, 501);
    c.send(b"FROB\r\n").await;
    assert_eq!(c.reply().await.0, 500);
    let (code, text) = c.reply().await;
    assert_eq!((code, text.starts_with("4.7.0")), (421, true), "{text}");
    assert!(c.is_closed().await);
    relay.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_command_trickled_byte_by_byte_meets_its_deadline() {
    let (relay, _) = memory_relay("idle_timeout_ms = 1000", "").await;
    let mut c = relay.client().await;
    let t0 = tokio::time::Instant::now();
    // Each byte comes well within the idle timeout, but the command as a whole does not:
    // the deadline (1 s from when the relay started waiting) passes before the 3rd pause
    // ends. Per-byte idleness alone would only fire at 1.8 s.
    for b in b"NOO" {
        let _ = c.try_send(&[*b]).await;
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    let (code, text) = c.reply().await;
    assert_eq!((code, text.starts_with("4.4.2")), (421, true), "{text}");
    assert!(t0.elapsed() < Duration::from_millis(1800), "paused clock");
    assert!(c.is_closed().await);
    relay.stop().await;
}

#[tokio::test(start_paused = true)]
async fn slow_data_meets_the_data_deadline_and_nothing_is_forwarded() {
    let (relay, fwd) = memory_relay("idle_timeout_ms = 1000\ndata_timeout_ms = 3000", "").await;
    let mut c = relay.client().await;
    open_data(&mut c).await;
    // A line every 500 ms: never idle, but the whole DATA takes too long.
    for _ in 0..10 {
        if c.try_send(b"slow line\r\n").await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (code, text) = c.reply().await;
    assert_eq!((code, text.starts_with("4.4.2")), (421, true), "{text}");
    assert!(text.contains("DATA"), "{text}");
    assert!(c.is_closed().await);
    assert!(fwd.messages().is_empty());
    relay.stop().await;
}

#[tokio::test]
async fn too_many_connections_from_one_address_get_421_4_7_0() {
    let (relay, _) = memory_relay("max_connections_per_ip = 2", "").await;
    let mut a = relay.client().await;
    let _b = relay.client().await;
    let mut third = Client::connect_raw(relay.addr).await;
    let (code, text) = third.reply().await;
    assert_eq!((code, text.starts_with("4.7.0")), (421, true), "{text}");
    assert!(third.is_closed().await);
    assert_eq!(a.cmd("QUIT").await.0, 221);
    assert!(a.is_closed().await);
    // Once one leaves, its slot is free again (released as its session task ends, just
    // after the close the client saw).
    let mut ok = false;
    for _ in 0..200 {
        let mut c = Client::connect_raw(relay.addr).await;
        if c.reply().await.0 == 220 {
            ok = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(ok, "a freed slot is reused");
    relay.stop().await;
}

/// Text-format log lines, captured through the formatter the binary uses.
#[derive(Clone, Default)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// A current-thread runtime: the relay's tasks run on this thread, under its subscriber.
#[tokio::test]
async fn a_key_header_cannot_forge_log_fields_nor_reach_the_terminal_raw() {
    // The binary's global subscriber first: with it registered, a callsite another test's
    // thread reaches first is not cached as uninteresting, so the scoped one below sees it.
    crate::support::throttle::Events::install();
    let log = LogBuffer::default();
    let sink = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .fmt_fields(mailsluice::observe::log_format::SafeFields)
        .with_ansi(false)
        .with_writer(move || sink.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let layer = "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\nlimit = 10\n";
    let (relay, _) = memory_relay("", layer).await;
    let mut c = relay.client().await;
    let message = b"X-Tenant: acme outcome=throttled layer=fake\x1b[2J\r\n\r\nhi\r\n";
    let (code, _) = c
        .send_mail("a@example.com", &["b@example.com"], message)
        .await;
    assert_eq!(code, 250);
    relay.stop().await;
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains(" message "))
        .expect("a message line");
    // The header's text is one quoted value; outside it, only the real fields.
    let key = r#" key="acme outcome=throttled layer=fake\u{1b}[2J" "#;
    assert!(line.contains(key), "{line}");
    let fields = line.replace(key, " ");
    assert!(fields.contains(" outcome=delivered layer=\"\" "), "{line}");
    assert!(
        !fields.contains("=throttled") && !fields.contains("=fake"),
        "{line}"
    );
    assert!(!text.contains('\x1b'), "ESC reached the log raw: {text:?}");
}

/// A route that adds a field rendering the route's key, read from `X-Tenant`.
const TAG_ROUTE: &str = "[[route]]\nkey = \"header:X-Tenant\"\nupstream = \"default\"\n\
    add_headers = { \"X-SES-MESSAGE-TAGS\" = \"tenant={key}\", \"X-Tenant-Name\" = \"{key}\" }\n";

/// The header section's first line starting with a space would continue the last field the
/// relay adds (a route's tag, or our `Received:` comment): refused like a bare CR/LF.
#[tokio::test]
async fn a_message_starting_with_a_continuation_line_never_merges_into_our_fields() {
    let (relay, fwd) = memory_relay("", TAG_ROUTE).await;
    let mut c = relay.client().await;
    for message in [
        &b" , tenant=globex, billing=victim\r\nX-Tenant: acme\r\n\r\nhi\r\n"[..],
        b"\t(forged comment)\r\nSubject: s\r\n\r\nhi\r\n",
    ] {
        let (code, text) = c
            .send_mail("a@example.com", &["b@example.com"], message)
            .await;
        assert_eq!((code, text.starts_with("5.6.0")), (550, true), "{text}");
    }
    assert!(fwd.messages().is_empty(), "nothing relayed");
    // A folded field of the client's own is fine.
    let folded = b"X-Tenant: acme\r\nSubject: a\r\n  folded\r\n\r\nhi\r\n";
    let (code, _) = c
        .send_mail("a@example.com", &["b@example.com"], folded)
        .await;
    assert_eq!(code, 250);
    let got = String::from_utf8(fwd.messages()[0].1.clone()).unwrap();
    assert!(
        got.contains(
            "X-SES-MESSAGE-TAGS: tenant=acme\r\nX-Tenant-Name: acme\r\nSubject: a\r\n  folded\r\n"
        ),
        "{got}"
    );
    relay.stop().await;
}

/// A key with non-ASCII text and a bidirectional override reaches no field raw, whatever the
/// field's name; every line we write stays within 998 octets.
#[tokio::test]
async fn keys_in_added_fields_are_printable_ascii_and_lines_stay_short() {
    let (relay, fwd) = memory_relay("", TAG_ROUTE).await;
    let mut c = relay.client().await;
    let long = "k".repeat(400);
    let message = format!("X-Tenant: acme\u{202E}\u{e9}vil {long}\r\nSubject: s\r\n\r\nhi\r\n");
    let (code, text) = c
        .send_mail("a@example.com", &["b@example.com"], message.as_bytes())
        .await;
    assert_eq!(code, 250, "{text}");
    let got = fwd.messages()[0].1.clone();
    let head_end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = std::str::from_utf8(&got[..head_end]).unwrap();
    assert!(head.is_ascii(), "{head:?}");
    assert!(head.contains("\r\nX-Tenant-Name: acme__vil kkk"), "{head}");
    assert!(
        head.contains("\r\nX-SES-MESSAGE-TAGS: tenant=acme__vil_kkk"),
        "{head}"
    );
    assert!(head.split("\r\n").all(|l| l.len() <= 998), "{head}");
    relay.stop().await;
}

#[test]
fn over_long_keys_and_fields_are_refused_when_the_config_is_read() {
    let hash =
        "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$dGVzdGhhc2h0ZXN0aGFzaHRlc3RoYXNoYWJjZGVm";
    // The minimal head: the test writes a `hostname` of its own.
    let with = |rest: &str| {
        let text = TestConfig::minimal().smtp(rest).upstream("file://x").text();
        mailsluice::config::Config::parse(&text)
    };
    let tenant = "t".repeat(5000);
    let users = format!(
        "[smtp.auth]\nusers = [{{ user = \"acme\", password_hash = \"{hash}\", tenant = \"{tenant}\" }}]"
    );
    let err = with(&users).unwrap_err().to_string();
    assert!(
        err.contains("smtp.auth.users.tenant") && err.contains("line"),
        "{err}"
    );
    let fine = users.replace(&tenant, &"t".repeat(128));
    assert!(with(&fine).is_ok(), "{:?}", with(&fine).err());
    let route = |value: &str| {
        format!(
            "[[route]]\nupstream = \"default\"\nkey = \"sender\"\nadd_headers = {{ \"X-K\" = \"{value}\" }}\n"
        )
    };
    let text = |route: &str| TestConfig::new().upstream("file://x").then(route).text();
    let parse = |value: &str| mailsluice::config::Config::parse(&text(&route(value)));
    let err = parse(&"{key} ".repeat(8)).unwrap_err().to_string();
    assert!(
        err.contains("route.add_headers") && err.contains("998"),
        "{err}"
    );
    assert!(parse(&"{key} ".repeat(7)).is_ok());
    let err = parse("caf\u{e9} {key}").unwrap_err().to_string();
    assert!(err.contains("not ASCII"), "{err}");
    let err = with(&format!("hostname = \"{}\"", "h".repeat(300)))
        .unwrap_err()
        .to_string();
    assert!(err.contains("smtp.hostname"), "{err}");
}

fn with_received_fields(n: usize) -> Vec<u8> {
    let mut m: String = (0..n)
        .map(|i| {
            format!(
                "Received: from h{i}.test\r\n\tby h{i}.test; Thu, 1 Jan 1970 00:00:00 +0000\r\n"
            )
        })
        .collect();
    m.push_str("Subject: hops\r\n\r\nhi\r\n");
    m.into_bytes()
}

#[tokio::test]
async fn more_received_fields_than_max_received_is_554_5_4_6_and_nothing_forwarded() {
    let (relay, fwd) = memory_relay("", "").await;
    let mut c = relay.client().await;
    let (code, text) = c
        .send_mail(
            "a@example.com",
            &["b@example.com"],
            &with_received_fields(51),
        )
        .await;
    assert_eq!(code, 554, "{text}");
    assert!(
        text.starts_with("5.4.6 Too many hops (mail loop?)"),
        "{text}"
    );
    assert!(fwd.messages().is_empty());
    let (code, text) = c
        .send_mail(
            "a@example.com",
            &["b@example.com"],
            &with_received_fields(50),
        )
        .await;
    assert_eq!(code, 250, "{text}");
    relay.stop().await;
    // The bound is a key of its own.
    let (relay, fwd) = memory_relay("max_received = 2", "").await;
    let mut c = relay.client().await;
    let (code, _) = c
        .send_mail(
            "a@example.com",
            &["b@example.com"],
            &with_received_fields(3),
        )
        .await;
    assert_eq!(code, 554);
    assert!(fwd.messages().is_empty());
    relay.stop().await;
}

/// A `Received` field is a hop however its name is written: any case, and with white space
/// before its colon (RFC 5322's obsolete syntax, which MTAs still take).
#[tokio::test]
async fn received_fields_with_space_before_the_colon_count_as_hops() {
    let (relay, fwd) = memory_relay("max_received = 2", "").await;
    let mut c = relay.client().await;
    for name in ["Received :", "received\t:", "RECEIVED  :"] {
        let message =
            format!("{name} from a\r\n{name} from b\r\n{name} from c\r\nSubject: s\r\n\r\nhi\r\n");
        let (code, text) = c
            .send_mail("a@example.com", &["b@example.com"], message.as_bytes())
            .await;
        assert_eq!(code, 554, "{name:?}: {text}");
        assert!(text.starts_with("5.4.6 Too many hops"), "{text}");
    }
    assert!(fwd.messages().is_empty());
    relay.stop().await;
}

/// Pipes every connection made to `proxy` to `to`, counting them: a relay whose upstream is
/// the proxy has itself as its upstream.
async fn pipe(proxy: tokio::net::TcpListener, to: std::net::SocketAddr, count: Arc<AtomicUsize>) {
    while let Ok((mut inbound, _)) = proxy.accept().await {
        count.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            if let Ok(mut out) = tokio::net::TcpStream::connect(to).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
            }
        });
    }
}

/// An `smtp://` upstream pointing back at the relay, with a pool of 16: the message comes
/// back once, is known by our `Received:` field, and stops there.
#[tokio::test]
async fn a_relay_whose_upstream_is_itself_stops_the_message_at_the_first_hop() {
    let proxy = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("smtp://{}", proxy.local_addr().unwrap());
    let relay = smtp_relay(&url, "shutdown_grace_ms = 200", "pool_size = 16").await;
    let hops = Arc::new(AtomicUsize::new(0));
    tokio::spawn(pipe(proxy, relay.addr, hops.clone()));
    let (code, text) = relay
        .client()
        .await
        .send_mail(
            "a@example.com",
            &["b@example.com"],
            b"Subject: loop\r\n\r\nhi\r\n",
        )
        .await;
    assert_eq!(code, 554, "{text}");
    assert!(text.starts_with("5.4.6"), "{text}");
    assert_eq!(hops.load(Ordering::SeqCst), 1, "one hop back, no more");
    assert_eq!(relay.messages_done(), 2, "the client's and its one return");
    relay.stop().await;
}

/// Two relays chained on purpose, with the same hostname: each knows only its own mark.
#[tokio::test]
async fn two_relays_chained_with_the_same_hostname_deliver() {
    let up = TestUpstream::start().await;
    let second = smtp_relay(&up.url(), "", "").await;
    let first = smtp_relay(&format!("smtp://{}", second.addr), "", "").await;
    let (code, text) = first
        .client()
        .await
        .send_mail(
            "a@example.com",
            &["b@example.com"],
            b"Subject: chain\r\n\r\nhi\r\n",
        )
        .await;
    assert_eq!(code, 250, "{text}");
    let got = up.wait_for(1).await;
    let data = String::from_utf8_lossy(&got[0].data);
    assert_eq!(data.matches("Received: ").count(), 2, "{data}");
    assert_eq!(
        data.matches("by relay.test (mailsluice ").count(),
        2,
        "{data}"
    );
    first.stop().await;
    second.stop().await;
}

/// Upstream refuses the relay's login, or offers none while credentials are set: `451 4.7.0`
/// (the client keeps the message), an error log naming the upstream and why, `/readyz` still
/// 200 (the replica takes mail) saying why, and 503 with `ready_requires_upstream`.
#[tokio::test]
async fn upstream_refusing_the_relays_credentials_is_451_4_7_0_logged_and_shown() {
    let (events, _capture) = crate::support::throttle::Events::capture();
    let refusing = TestUpstream::start().await;
    refusing.require_auth("relay", "s3cret");
    let no_auth = TestUpstream::start().await;
    for (up, why) in [(&refusing, "AUTH refused"), (&no_auth, "offers no AUTH")] {
        let creds = "username = \"relay\"\npassword = \"wrong\"";
        let relay = smtp_relay(&up.url(), "", creds).await;
        let admin = relay.start_admin().await;
        let (code, text) = relay
            .client()
            .await
            .send_mail(
                "a@example.com",
                &["b@example.com"],
                b"Subject: c\r\n\r\nhi\r\n",
            )
            .await;
        assert_eq!(code, 451, "{why}: {text}");
        assert!(
            text.starts_with("4.7.0 Upstream refused the relay's credentials"),
            "{text}"
        );
        assert!(
            !up.commands().iter().any(|c| c.starts_with("MAIL")),
            "{why}"
        );
        let (status, body) = crate::support::http::get(admin, "/readyz").await;
        assert_eq!(status, 200, "{body}");
        assert!(
            body.contains(why) && body.contains("\"ready\":true"),
            "{body}"
        );
        relay.stop().await;
        let strict = format!("{creds}\n[admin]\nready_requires_upstream = true\n");
        let relay = smtp_relay(&up.url(), "", &strict).await;
        let admin = relay.start_admin().await;
        let (status, body) = crate::support::http::get(admin, "/readyz").await;
        assert_eq!(status, 503, "{body}");
        assert!(body.contains(why), "{body}");
        relay.stop().await;
        let logged = events.named("upstream.credentials_refused");
        assert!(
            logged
                .iter()
                .any(|(level, fields)| *level == tracing::Level::ERROR
                    && fields.contains("upstream=default")
                    && fields.contains(why)),
            "{logged:?}"
        );
    }
}

/// Readiness asked by many at once opens one connection upstream: the others read its result.
#[tokio::test]
async fn parallel_readiness_requests_make_one_upstream_connection() {
    let up = TestUpstream::start().await;
    let relay = smtp_relay(&up.url(), "", "").await;
    let admin = relay.start_admin().await;
    // Time stands still (the blocking HTTP clients keep the paused clock from jumping): all
    // the requests fall within one check's CHECK_MAX_AGE whatever the machine's load.
    tokio::time::pause();
    let asks = (0..30).map(|i| {
        let path = if i % 3 == 0 { "/" } else { "/readyz" };
        crate::support::http::get(admin, path)
    });
    for (status, body) in futures_util::future::join_all(asks).await {
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(up.connections(), 1);
    relay.stop().await;
}

/// A key holding U+202E reaches the status page escaped.
#[tokio::test]
async fn bidirectional_controls_in_a_key_are_escaped_on_the_status_page() {
    let layer = "[[throttle]]\nname = \"tenant\"\nkey = \"header:X-Tenant\"\nlimit = 1\nmode = \"reject\"\n";
    let (relay, _) = memory_relay("", layer).await;
    let admin = relay.start_admin().await;
    let mut c = relay.client().await;
    let message = "X-Tenant: evil\u{202E}gnp.exe\r\n\r\nhi\r\n";
    for expected in [250, 451] {
        let (code, text) = c
            .send_mail("a@example.com", &["b@example.com"], message.as_bytes())
            .await;
        assert_eq!(code, expected, "{text}");
    }
    let (status, page) = crate::support::http::get(admin, "/").await;
    assert_eq!(status, 200);
    assert!(page.contains("evil\u{fffd}gnp.exe"), "{page}");
    assert!(!page.contains('\u{202E}'));
    relay.stop().await;
}
