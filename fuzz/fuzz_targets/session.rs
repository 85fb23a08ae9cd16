//! Bytes in, replies out: a whole SMTP session over an in-memory stream. Must not panic,
//! must answer only well-formed replies, and must never relay a message holding a NUL or a
//! bare CR or LF. Memory is bounded by the session's own limits (line, message, output).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let (out, messages) = mailsluice::fuzzing::run(input);
    for line in out.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        assert!(line.len() >= 5 && line.ends_with(b"\r"), "{line:?}");
        assert!(line[..3].iter().all(u8::is_ascii_digit), "{line:?}");
        assert!(line[3] == b' ' || line[3] == b'-', "{line:?}");
    }
    for m in &messages {
        assert!(!m.contains(&0), "relayed a NUL");
        for (i, &b) in m.iter().enumerate() {
            if b == b'\n' {
                assert!(i > 0 && m[i - 1] == b'\r', "relayed a bare LF");
            }
            if b == b'\r' {
                assert_eq!(m.get(i + 1), Some(&b'\n'), "relayed a bare CR");
            }
        }
    }
});
