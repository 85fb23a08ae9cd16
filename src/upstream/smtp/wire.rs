//! What goes on the wire upstream: the MAIL and RCPT lines with the paths exactly as the
//! client gave them, and the body dot-stuffed so that upstream receives the message
//! unchanged.

/// The body as sent before `CRLF.CRLF`, whose CRLF already ends our last line. A message
/// that does not end in CRLF gets one (SMTP cannot carry it otherwise); an empty message
/// arrives as one empty line, for the same reason.
pub(super) fn wire_body(message: &[u8]) -> &[u8] {
    message.strip_suffix(b"\r\n").unwrap_or(message)
}

/// [`wire_body`] for a message in pieces: the last piece that holds anything loses its CRLF,
/// the pieces after it are empty.
pub(super) fn wire_pieces<'a>(pieces: &[&'a [u8]]) -> Vec<&'a [u8]> {
    let mut wire: Vec<&[u8]> = pieces.iter().copied().filter(|p| !p.is_empty()).collect();
    if let Some(last) = wire.last_mut() {
        *last = wire_body(last);
    }
    wire
}

/// What goes after DATA's 354, as slices to write in turn: [`wire_pieces`] dot-stuffed (a
/// dot at the start of the message or right after a CRLF is doubled: the extra dot is a slice
/// of its own), then `CRLF.CRLF`. Nothing is copied.
pub(super) fn stuffed_slices<'a>(pieces: &[&'a [u8]]) -> Vec<&'a [u8]> {
    let mut out: Vec<&[u8]> = Vec::with_capacity(pieces.len() + 2);
    // The last two bytes before the current piece; `None` at the start of the message.
    let mut before: Option<[u8; 2]> = None;
    for piece in wire_pieces(pieces) {
        let mut from = 0;
        for dot in memchr::memchr_iter(b'.', piece) {
            let line_start = match (dot, before) {
                (0, None) => true,
                (0, Some(b)) => b == *b"\r\n",
                (1, b) => piece[0] == b'\n' && b.is_some_and(|b| b[1] == b'\r'),
                _ => &piece[dot - 2..dot] == b"\r\n",
            };
            if line_start {
                out.push(&piece[from..dot]);
                out.push(b".");
                from = dot;
            }
        }
        out.push(&piece[from..]);
        before = match piece.len() {
            0 => before,
            1 => Some([before.map_or(0, |b| b[1]), piece[0]]),
            n => Some([piece[n - 2], piece[n - 1]]),
        };
    }
    out.push(b"\r\n.\r\n");
    out
}

/// [`stuffed_slices`] as one text, when it is under `limit` bytes.
pub(super) fn stuffed(pieces: &[&[u8]], limit: usize) -> Option<Vec<u8>> {
    let slices = stuffed_slices(pieces);
    let len: usize = slices.iter().map(|s| s.len()).sum();
    (len < limit).then(|| slices.concat())
}

/// A dot is stuffed only after CRLF. A dot after a bare CR or LF followed by a line break
/// goes out as is, and an upstream lenient about line endings could take it for the end of
/// data and read what follows as a second message (SMTP smuggling). Such messages are refused
/// rather than altered, since altering them would break "bytes unchanged" for strict servers.
pub(super) fn dot_after_bare_line_break(message: &[u8]) -> bool {
    // memchr: dots are few, and this runs over every byte of every message.
    memchr::memchr_iter(b'.', message).any(|i| {
        if i == 0 {
            return false;
        }
        let bare_before = match message[i - 1] {
            b'\r' => true,
            b'\n' => i < 2 || message[i - 2] != b'\r',
            _ => false,
        };
        bare_before && matches!(message.get(i + 1), None | Some(b'\r' | b'\n'))
    })
}

/// The address exactly as the client gave it (a quoted local part keeps its quotes), checked
/// once more for what could break the command line: no control character, no `<` or `>`, a
/// space only inside quotes. A recipient may be a bare `postmaster` (RFC 5321 4.5.1).
pub(super) fn path(a: &str, rcpt: bool) -> Option<&str> {
    if rcpt && a.eq_ignore_ascii_case("postmaster") {
        return Some(a);
    }
    let (user, domain) = a.rsplit_once('@')?;
    let unsafe_char = |c: char| c.is_control() || c == '<' || c == '>';
    if user.is_empty() || domain.is_empty() || a.chars().any(unsafe_char) {
        return None;
    }
    let (mut quoted, mut escaped) = (false, false);
    for c in user.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ' ' if !quoted => return None,
            _ => {}
        }
    }
    (!quoted && !escaped && !domain.contains([' ', '"'])).then_some(a)
}

/// The MAIL parameters declared upstream for what the client declared (or the message
/// needs): RFC 6531's `SMTPUTF8`, RFC 6152's `BODY=8BITMIME`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct MailParams {
    pub smtputf8: bool,
    pub eight_bit_mime: bool,
}

/// MAIL with the path written as given (a quoted local part keeps its quotes).
pub(super) fn mail_line(from: Option<&str>, params: MailParams) -> String {
    let from = from.unwrap_or("");
    let mut line = String::with_capacity(from.len() + 48);
    line.push_str("MAIL FROM:<");
    line.push_str(from);
    line.push('>');
    if params.smtputf8 {
        line.push_str(" SMTPUTF8");
    }
    if params.eight_bit_mime {
        line.push_str(" BODY=8BITMIME");
    }
    line.push_str("\r\n");
    line
}

pub(super) fn bad(a: &str) -> String {
    format!("address <{}> cannot be relayed upstream", a.escape_debug())
}

/// RCPT with the path written as given, as in [`mail_line`]; a bare `postmaster` too.
pub(super) fn rcpt_line(rcpt: &str) -> String {
    let mut line = String::with_capacity(rcpt.len() + 12);
    push_rcpt_line(&mut line, rcpt);
    line
}

/// [`rcpt_line`], appended to `text` (a pipelined group).
pub(super) fn push_rcpt_line(text: &mut String, rcpt: &str) {
    text.push_str("RCPT TO:<");
    text.push_str(rcpt);
    text.push_str(">\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Transparency (RFC 5321 4.5.2) byte by byte: a dot doubled at the start of the message
    /// or after CR LF; then `CRLF.CRLF`.
    fn stuffed_byte_by_byte(message: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let (mut start, mut cr) = (true, false);
        for &b in message {
            out.push(b);
            if b == b'.' && start {
                out.push(b'.');
            }
            start = cr && b == b'\n';
            cr = b == b'\r';
        }
        out.extend_from_slice(b"\r\n.\r\n");
        out
    }

    /// Every message of up to 6 bytes of `.`, CR, LF and `a`, cut into three pieces at every
    /// two places: the slices are the message stuffed byte by byte.
    #[test]
    fn the_stuffed_slices_are_the_pieces_stuffed_byte_by_byte() {
        for len in 0..=6u32 {
            for n in 0..4usize.pow(len) {
                let m: Vec<u8> = (0..len).map(|k| b".\r\na"[n / 4usize.pow(k) % 4]).collect();
                for cut in 0..=m.len() {
                    for cut2 in cut..=m.len() {
                        let pieces = [&m[..cut], &m[cut..cut2], &m[cut2..]];
                        let want = stuffed_byte_by_byte(&wire_pieces(&pieces).concat());
                        let got = stuffed_slices(&pieces).concat();
                        assert_eq!(got, want, "{m:?} cut at {cut} and {cut2}");
                    }
                }
            }
        }
        let pieces: [&[u8]; 2] = [b"Subject: x\r\n\r\n", b".hidden\r\n"];
        assert_eq!(
            stuffed(&pieces, 1 << 20).unwrap(),
            b"Subject: x\r\n\r\n..hidden\r\n.\r\n"
        );
    }

    #[test]
    fn a_text_is_made_only_below_the_limit() {
        let body = [b"x".repeat(10)];
        let pieces: Vec<&[u8]> = body.iter().map(|b| b.as_slice()).collect();
        // 10 bytes and CRLF.CRLF: 15.
        assert_eq!(stuffed(&pieces, 16).map(|t| t.len()), Some(15));
        assert_eq!(stuffed(&pieces, 15), None);
        assert_eq!(
            stuffed(&[b"caf\xe9\r\n"], 1 << 20).unwrap(),
            b"caf\xe9\r\n.\r\n",
            "bytes as they are, 8-bit too"
        );
    }

    /// Every message of up to 7 bytes of `.`, CR, LF and `a`, against the rule read plainly:
    /// a dot after a bare CR or LF, followed by a line break or the end.
    #[test]
    fn a_dot_after_a_bare_line_break_is_found_wherever_it_is() {
        let plain = |m: &[u8]| {
            (1..m.len()).any(|i| {
                let bare = m[i - 1] == b'\r' || (m[i - 1] == b'\n' && (i < 2 || m[i - 2] != b'\r'));
                m[i] == b'.' && bare && matches!(m.get(i + 1), None | Some(b'\r' | b'\n'))
            })
        };
        let mut found = 0;
        for len in 0..=7u32 {
            for n in 0..4usize.pow(len) {
                let m: Vec<u8> = (0..len).map(|k| b".\r\na"[n / 4usize.pow(k) % 4]).collect();
                assert_eq!(dot_after_bare_line_break(&m), plain(&m), "{m:?}");
                found += usize::from(plain(&m));
            }
        }
        assert!(found > 1000, "the alphabet reaches the case: {found}");
        assert!(!dot_after_bare_line_break(b"a\r\n.\r\nb"));
        assert!(dot_after_bare_line_break(b"a\n.\r\nb"));
    }

    #[test]
    fn pieces_go_as_they_are_but_the_last_crlf() {
        let pieces: [&[u8]; 3] = [b"Received: x\r\n", b"Subject: s\r\n\r\nbody\r\n", b""];
        let wire = wire_pieces(&pieces);
        assert_eq!(wire, [&b"Received: x\r\n"[..], b"Subject: s\r\n\r\nbody"]);
        assert_eq!(wire.concat(), wire_body(&pieces.concat()));
        let empty: [&[u8]; 2] = [b"", b""];
        assert!(
            wire_pieces(&empty).is_empty(),
            "CRLF.CRLF alone: one empty line"
        );
    }
}
