//! Command lines and what may pass for one: only CRLF ends a command line (a bare LF is part
//! of the malformed line), the bytes of a BDAT chunk never run as commands, and a session
//! sending only junk (NOOP, RSET, VRFY, HELP, EHLO) is closed after `max_junk_commands`.

use crate::support::relay::{memory_relay, Client};

/// After a refused line, whether a transaction is open: `RCPT` gets `250` only after a MAIL
/// ran. Loopback is trusted, so a MAIL that ran would have been accepted.
async fn mail_ran(c: &mut Client) -> bool {
    c.cmd("RCPT TO:<a@b.test>").await.0 == 250
}

#[tokio::test]
async fn a_bare_lf_does_not_end_a_command() {
    let (relay, _) = memory_relay("max_line_bytes = 100", "").await;
    let mut c = relay.client().await;
    c.cmd("EHLO x").await;
    c.send(b"NOOP\nMAIL FROM:<x@y.test>\r\n").await;
    let (code, text) = c.reply().await;
    assert_eq!((code, text.starts_with("5.5.4")), (501, true), "{text}");
    assert!(!mail_ran(&mut c).await, "the tail after the LF ran as MAIL");
    // After an over-long line too: its end is the CRLF, not an LF inside it.
    let long = format!("NOOP {}\nMAIL FROM:<x@y.test>\r\n", "x".repeat(200));
    c.send(long.as_bytes()).await;
    assert_eq!(c.reply().await.0, 500);
    assert!(!mail_ran(&mut c).await, "the tail after the LF ran as MAIL");
    // A CRLF split across reads still ends a skipped line.
    c.send(format!("NOOP {}\r", "x".repeat(200)).as_bytes())
        .await;
    assert_eq!(c.reply().await.0, 500);
    c.send(b"\nMAIL FROM:<x@y.test>\r\n").await;
    assert_eq!(c.reply().await.0, 250, "the next line is a command");
    relay.stop().await;
}

#[tokio::test]
async fn bdat_chunk_never_runs_as_commands() {
    let (relay, fwd) = memory_relay("", "").await;
    let mut c = relay.client().await;
    c.cmd("EHLO x").await;
    let chunk = b"MAIL FROM:<x@y.test>\r\nRCPT TO:<a@b.test>\r\nDATA\r\n";
    c.send(format!("BDAT {} LAST\r\n", chunk.len()).as_bytes())
        .await;
    c.send(chunk).await;
    let (code, text) = c.reply().await;
    assert_eq!((code, text.starts_with("5.5.1")), (502, true), "{text}");
    let (code, text) = c.reply().await;
    assert_eq!((code, text.starts_with("4.7.0")), (421, true), "{text}");
    assert!(c.is_closed().await, "nothing after the chunk is answered");
    assert!(fwd.messages().is_empty());
    relay.stop().await;
}

#[tokio::test]
async fn junk_commands_are_bounded() {
    let (relay, _) = memory_relay("max_junk_commands = 5\nmax_errors = 100", "").await;
    let mut c = relay.client().await;
    c.cmd("EHLO x").await;
    for verb in ["NOOP", "RSET", "VRFY x", "HELP"] {
        assert!(c.cmd(verb).await.0 < 400, "{verb}");
    }
    let (code, text) = c.cmd("NOOP").await;
    assert_eq!((code, text.starts_with("4.7.0")), (421, true), "{text}");
    assert!(c.is_closed().await);

    // A message at its final dot starts the count again.
    let mut c = relay.client().await;
    for _ in 0..4 {
        assert_eq!(c.cmd("NOOP").await.0, 250);
    }
    let (code, text) = c.send_mail("a@b.test", &["c@d.test"], b"x\r\n").await;
    assert_eq!(code, 250, "{text}");
    for _ in 0..5 {
        assert_eq!(c.cmd("NOOP").await.0, 250);
    }
    assert_eq!(c.cmd("NOOP").await.0, 421);
    relay.stop().await;
}

/// `lines` lines of 100 bytes, CRLF included.
fn body(lines: usize) -> Vec<u8> {
    let line = format!("{}\r\n", "x".repeat(98));
    line.repeat(lines).into_bytes()
}

/// EHLO, MAIL, RCPT and DATA, up to the `354`.
async fn open_data(c: &mut Client) {
    for cmd in ["EHLO x", "MAIL FROM:<a@b.test>", "RCPT TO:<c@d.test>"] {
        assert_eq!(c.cmd(cmd).await.0, 250, "{cmd}");
    }
    assert_eq!(c.cmd("DATA").await.0, 354);
}

#[tokio::test]
async fn data_held_by_all_sessions_is_bounded() {
    const BOUND: usize = 40_000;
    let (relay, fwd) = memory_relay(&format!("max_buffered_bytes = {BOUND}"), "").await;
    let mut a = relay.client().await;
    open_data(&mut a).await;
    a.send(&body(200)).await;
    let ctx = relay.live.current().expect("running");
    let room = || ctx.services.buffered.available_permits();
    crate::support::wait::until("the first message is read", async || {
        room() <= BOUND - 20_000
    })
    .await;
    // The second message does not fit beside the first: 452 4.3.1, nothing relayed.
    let mut b = relay.client().await;
    open_data(&mut b).await;
    b.send(&body(200)).await;
    b.send(b".\r\n").await;
    let (code, text) = b.reply().await;
    assert_eq!((code, text.starts_with("4.3.1")), (452, true), "{text}");
    assert!(fwd.messages().is_empty());
    // The first goes on; once it is done its bytes are given back, and the second fits.
    a.send(b".\r\n").await;
    assert_eq!(a.reply().await.0, 250);
    assert_eq!(room(), BOUND, "all given back");
    let (code, text) = b.send_mail("a@b.test", &["c@d.test"], &body(200)).await;
    assert_eq!(code, 250, "{text}");
    assert_eq!(fwd.messages().len(), 2);
    assert_eq!(room(), BOUND);
    relay.stop().await;
}
