//! Hostile input over TCP, each with its defined answer, and what the upstream got: one
//! message for one message, never a smuggled second.

use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    assert!(
        fields.contains(" outcome=delivered layer=tenant "),
        "{line}"
    );
    assert!(
        !fields.contains("=throttled") && !fields.contains("=fake"),
        "{line}"
    );
    assert!(!text.contains('\x1b'), "ESC reached the log raw: {text:?}");
}
