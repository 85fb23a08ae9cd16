//! Property test of the whole session over random byte streams (in memory, no TCP): no
//! panic, every reply well formed, at most one reply per line sent, and nothing relayed
//! that the DATA rules forbid, nor more messages than final dots sent.

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

/// Pieces a hostile or confused client is made of: real commands, line-ending tricks, dots,
/// headers, and raw bytes.
fn piece() -> impl Strategy<Value = Vec<u8>> {
    let fixed: Vec<&'static [u8]> = vec![
        b"EHLO x\r\n",
        b"HELO x\r\n",
        b"MAIL FROM:<a@example.com>\r\n",
        b"MAIL FROM:<>\r\n",
        b"RCPT TO:<b@example.com>\r\n",
        b"DATA\r\n",
        b".\r\n",
        b"\r\n.\r\n",
        b"..\r\n",
        b"RSET\r\n",
        b"NOOP\r\n",
        b"QUIT\r\n",
        b"STARTTLS\r\n",
        b"AUTH PLAIN AGZ1enoAZnV6eg==\r\n",
        b"AUTH LOGIN\r\n",
        b"ZnV6eg==\r\n",
        b"*\r\n",
        b"X-Tenant: abc\r\n",
        b"Subject: s\r\n",
        b"\r\n",
        b"\n",
        b"\r",
        b"\0",
        b".",
        b"\n.\n",
        b"\r.\r",
        b"\xff\xfe",
    ];
    prop_oneof![
        4 => proptest::sample::select(fixed).prop_map(|p| p.to_vec()),
        1 => proptest::collection::vec(any::<u8>(), 0..40),
    ]
}

fn stream() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(piece(), 0..60).prop_map(|pieces| pieces.concat())
}

fn count(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle)
        .count()
}

/// The bytes of a message are CRLF lines only, with no NUL.
fn clean(message: &[u8]) -> bool {
    let mut prev = 0u8;
    for (i, &b) in message.iter().enumerate() {
        match b {
            0 => return false,
            b'\n' if prev != b'\r' => return false,
            b'\r' if message.get(i + 1) != Some(&b'\n') => return false,
            _ => {}
        }
        prev = b;
    }
    message.ends_with(b"\r\n")
}

proptest! {
    // Failures are stored in `session_props.proptest-regressions`, next to this file.
    #![proptest_config(ProptestConfig {
        cases: 1000,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn session_survives_any_byte_stream(input in stream()) {
        let (out, messages) = mailsluice::fuzzing::run(&input);
        let text = String::from_utf8_lossy(&out);
        let lines: Vec<&str> = text.split_terminator("\r\n").collect();
        prop_assert!(out.is_empty() || out.ends_with(b"\r\n"), "{text:?}");
        let mut replies = 0;
        for line in &lines {
            let b = line.as_bytes();
            prop_assert!(b.len() >= 4 && b[..3].iter().all(u8::is_ascii_digit), "{line:?}");
            prop_assert!(b[3] == b' ' || b[3] == b'-', "{line:?}");
            prop_assert!(!line.contains('\r') && !line.contains('\n'));
            replies += usize::from(b[3] == b' ');
        }
        // The greeting, one reply per line at most, and one closing reply.
        prop_assert!(replies <= count(&input, b"\n") + 2, "{replies} replies");
        // A message needs a final dot: a line that is only ".".
        let dots = count(&input, b"\n.\r\n");
        prop_assert!(messages.len() <= dots, "{} messages, {dots} dots", messages.len());
        for m in &messages {
            prop_assert!(clean(m), "relayed a message with NUL or bare CR/LF: {m:?}");
        }
    }
}

#[test]
fn the_harness_relays_a_plain_message() {
    let input = b"EHLO x\r\nMAIL FROM:<a@example.com>\r\nRCPT TO:<b@example.com>\r\nDATA\r\n\
                  X-Tenant: t1\r\nSubject: s\r\n\r\nhi\r\n.\r\nQUIT\r\n";
    let (out, messages) = mailsluice::fuzzing::run(input);
    let text = String::from_utf8_lossy(&out);
    assert!(text.ends_with("221 2.0.0 Bye\r\n"), "{text}");
    assert_eq!(messages.len(), 1);
    assert!(messages[0].ends_with(b"Subject: s\r\n\r\nhi\r\n"));
}
