//! Upstream's replies (RFC 5321 4.2): read from the connection's buffer in place, one text
//! per reply. A reply is lines of the same three-digit code, `-` after the code on every line
//! but the last; the text after it is kept, lines separated by `\n`. Not smtp-proto's parser:
//! it takes replies this one refuses and changes their text (docs/development.md).

/// A reply is at most this large, all its lines together: far above any real one (EHLO's
/// keywords are well under 1 KiB), and it bounds what one connection may make us hold.
pub const MAX_REPLY: usize = 64 * 1024;

/// One complete reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub code: u16,
    /// The lines' texts (what follows each code and its separator), joined by `\n`.
    pub text: String,
}

/// Why the bytes upstream sent are no reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("a reply line does not start with a code")]
    NoCode,
    #[error("the lines of one reply carry different codes")]
    MixedCodes,
    #[error("a reply line is not UTF-8")]
    NotUtf8,
    #[error("the reply is over {MAX_REPLY} bytes")]
    TooLarge,
}

impl Reply {
    /// 2xx and 3xx: the command went through (3xx asks for more, as DATA's 354 does).
    pub fn is_positive(&self) -> bool {
        self.code < 400
    }

    pub fn lines(&self) -> impl Iterator<Item = &str> {
        self.text.split('\n')
    }

    /// The lines as one text, joined by spaces, as they are.
    pub fn into_line(self) -> String {
        match self.text.contains('\n') {
            true => self.text.replace('\n', " "),
            false => self.text,
        }
    }

    /// The lines as one text, joined by spaces; an enhanced status code that each line
    /// repeats (`550-5.7.1 ...`, `550 5.7.1 ...`) is kept only at the front.
    pub fn joined(&self) -> String {
        let mut lines = self.lines();
        let mut joined = String::with_capacity(self.text.len());
        joined.push_str(lines.next().unwrap_or(""));
        let repeated = split_enhanced(&joined)
            .filter(|(code, _)| code.as_bytes()[0] == b'0' + (self.code / 100) as u8)
            .map(|(code, _)| code.to_string());
        for line in lines {
            joined.push(' ');
            let rest = repeated.as_deref().and_then(|code| line.strip_prefix(code));
            match rest {
                Some(rest) if rest.starts_with(' ') => joined.push_str(rest.trim_start()),
                _ => joined.push_str(line),
            }
        }
        joined
    }
}

/// `"4.2.1 Mailbox busy"` → `("4.2.1", "Mailbox busy")`: class 2, 4 or 5, then a subject of
/// 1–3 digits and a detail of 1–3 digits, followed by a space or the end.
pub fn split_enhanced(text: &str) -> Option<(&str, &str)> {
    let text = text.trim_start();
    // On bytes: this runs on every reply relayed, upstream's 250 included.
    let end = memchr::memchr(b' ', text.as_bytes()).unwrap_or(text.len());
    let candidate = &text.as_bytes()[..end];
    let (class, rest) = candidate.split_first()?;
    let (subject, detail) = rest
        .strip_prefix(b".")?
        .split_at(memchr::memchr(b'.', &rest[1..])?);
    let digits = |s: &[u8]| (1..=3).contains(&s.len()) && s.iter().all(u8::is_ascii_digit);
    let ok = matches!(class, b'2' | b'4' | b'5') && digits(subject) && digits(&detail[1..]);
    ok.then(|| (&text[..end], text[end..].trim()))
}

/// The first complete reply in `bytes` and how many bytes it took; `Ok(None)` when more
/// must be read. A line ends in CRLF, or in a bare LF, which servers sometimes send.
pub fn parse(bytes: &[u8]) -> Result<Option<(Reply, usize)>, Malformed> {
    // Most replies are one short line: one allocation, sized to hold it.
    let mut text = String::with_capacity(bytes.len().min(256));
    let scanned = scan(bytes, Some(&mut text))?;
    Ok(scanned.map(|(code, used)| (Reply { code, text }, used)))
}

/// [`parse`] without the text: the first complete reply's code and how many bytes it took.
pub fn code_of(bytes: &[u8]) -> Result<Option<(u16, usize)>, Malformed> {
    scan(bytes, None)
}

/// Reads one reply's lines, appending their text to `text` when there is one.
fn scan(bytes: &[u8], mut text: Option<&mut String>) -> Result<Option<(u16, usize)>, Malformed> {
    let mut at = 0;
    let mut code = None;
    while let Some(end) = memchr::memchr(b'\n', &bytes[at..]) {
        let line = &bytes[at..at + end];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        at += end + 1;
        let (this, last, rest) = line_parts(line)?;
        let rest = std::str::from_utf8(rest).map_err(|_| Malformed::NotUtf8)?;
        match code {
            Some(c) if c != this => return Err(Malformed::MixedCodes),
            Some(_) => {
                if let Some(t) = text.as_deref_mut() {
                    t.push('\n');
                }
            }
            None => code = Some(this),
        }
        if let Some(t) = text.as_deref_mut() {
            t.push_str(rest);
        }
        if last {
            return Ok(Some((this, at)));
        }
        if at > MAX_REPLY {
            return Err(Malformed::TooLarge);
        }
    }
    match bytes.len() > MAX_REPLY {
        true => Err(Malformed::TooLarge),
        false => Ok(None),
    }
}

/// A line's code (2xx to 5xx), whether it is the reply's last, and its text.
fn line_parts(line: &[u8]) -> Result<(u16, bool, &[u8]), Malformed> {
    let (digits, rest) = match line.len() {
        3.. => line.split_at(3),
        _ => return Err(Malformed::NoCode),
    };
    let code_ok = matches!(digits[0], b'2'..=b'5') && digits[1..].iter().all(u8::is_ascii_digit);
    if !code_ok {
        return Err(Malformed::NoCode);
    }
    let code = digits.iter().fold(0, |n, d| n * 10 + u16::from(d - b'0'));
    match rest.first() {
        None => Ok((code, true, rest)),
        Some(b' ') => Ok((code, true, &rest[1..])),
        Some(b'-') => Ok((code, false, &rest[1..])),
        Some(_) => Err(Malformed::NoCode),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(bytes: &str) -> Reply {
        let (reply, used) = parse(bytes.as_bytes()).unwrap().expect("complete");
        assert_eq!(used, bytes.len());
        reply
    }

    #[test]
    fn enhanced_code_is_split_from_the_text() {
        assert_eq!(
            split_enhanced("4.2.1 Mailbox busy"),
            Some(("4.2.1", "Mailbox busy"))
        );
        assert_eq!(split_enhanced("5.7.1"), Some(("5.7.1", "")));
        assert_eq!(split_enhanced("5.100.999 x"), Some(("5.100.999", "x")));
        assert_eq!(split_enhanced("Mailbox busy"), None);
        assert_eq!(split_enhanced("4.2 busy"), None);
        assert_eq!(split_enhanced("3.2.1 busy"), None);
        assert_eq!(split_enhanced("4.2.1.1 busy"), None);
        assert_eq!(split_enhanced("4.2.1000 busy"), None);
        for odd in [
            "", "4", "4.", "4.2", "4.2.", "4..1", ".2.1", "42.1.1", "4.2.1.", "4.x.1",
        ] {
            assert_eq!(split_enhanced(odd), None, "{odd:?}");
        }
        assert_eq!(
            split_enhanced("  2.0.0   queued  "),
            Some(("2.0.0", "queued"))
        );
    }

    #[test]
    fn a_reply_is_its_code_and_its_lines() {
        let r = one("250 2.0.0 Ok: queued as 1\r\n");
        assert_eq!((r.code, r.text.as_str()), (250, "2.0.0 Ok: queued as 1"));
        let r = one("250-mx.test\r\n250-PIPELINING\r\n250 8BITMIME\r\n");
        assert_eq!(
            r.lines().collect::<Vec<_>>(),
            ["mx.test", "PIPELINING", "8BITMIME"]
        );
        assert_eq!(
            one("354\r\n").text,
            "",
            "a code alone is a reply (RFC 5321 4.2)"
        );
        assert_eq!(one("221 bye\n").text, "bye", "a bare LF ends a line too");
        assert_eq!(
            one("250-\r\n250 x\r\n").lines().collect::<Vec<_>>(),
            ["", "x"]
        );
    }

    /// The code alone is read by the same rules as the whole reply.
    #[test]
    fn a_code_is_read_as_its_reply_is() {
        let cases: [&[u8]; 7] = [
            b"250 ok\r\n",
            b"250-a\r\n250 b\r\nnext",
            b"354\n",
            b"250-a\r\n",
            b"250-a\r\n550 b\r\n",
            b"hello\r\n",
            b"250 caf\xe9\r\n",
        ];
        for bytes in cases {
            let whole = parse(bytes).map(|r| r.map(|(reply, used)| (reply.code, used)));
            assert_eq!(code_of(bytes), whole, "{bytes:?}");
        }
    }

    #[test]
    fn a_reply_waits_for_its_last_line_and_leaves_the_next() {
        assert_eq!(parse(b"250-a\r\n250 b"), Ok(None));
        assert_eq!(parse(b""), Ok(None));
        let (r, used) = parse(b"250 a\r\n354 go\r\n").unwrap().unwrap();
        assert_eq!((r.code, used), (250, 7));
    }

    #[test]
    fn what_is_no_reply_is_said() {
        assert_eq!(parse(b"hello\r\n"), Err(Malformed::NoCode));
        assert_eq!(parse(b"25\r\n"), Err(Malformed::NoCode));
        assert_eq!(parse(b"150 x\r\n"), Err(Malformed::NoCode));
        assert_eq!(parse(b"250x\r\n"), Err(Malformed::NoCode));
        assert_eq!(parse(b"250-a\r\n550 b\r\n"), Err(Malformed::MixedCodes));
        assert_eq!(parse(b"250 caf\xe9\r\n"), Err(Malformed::NotUtf8));
    }

    /// The bound: a reply of more than `MAX_REPLY` bytes is refused, whether its lines are
    /// complete or one line never ends.
    #[test]
    fn a_reply_past_the_bound_is_refused() {
        let line = format!("250-{}\r\n", "x".repeat(1000));
        let many = line.repeat(MAX_REPLY / line.len() + 1);
        assert_eq!(parse(many.as_bytes()), Err(Malformed::TooLarge));
        let long = format!("250 {}", "x".repeat(MAX_REPLY));
        assert_eq!(parse(long.as_bytes()), Err(Malformed::TooLarge));
        let under = format!("{}250 end\r\n", line.repeat(MAX_REPLY / line.len() - 1));
        assert!(parse(under.as_bytes()).unwrap().is_some());
    }

    #[test]
    fn a_repeated_enhanced_code_is_joined_once() {
        let r = one("550-5.7.25 no PTR for\r\n550-5.7.25 this address\r\n550 5.7.25 see x\r\n");
        assert_eq!(r.joined(), "5.7.25 no PTR for this address see x");
        let r = one("250-a\r\n250 b c\r\n");
        assert_eq!(r.joined(), "a b c");
        let r = one("250-2.0.0 a\r\n250 2.0.0 b\r\n");
        assert_eq!(r.clone().joined(), "2.0.0 a b");
        assert_eq!(r.into_line(), "2.0.0 a 2.0.0 b", "as it is");
        let r = one("550-5.7.1 a\r\n550 4.7.1 b\r\n");
        assert_eq!(r.joined(), "5.7.1 a 4.7.1 b", "another code is text");
        let r = one("450-4.2.0 a\r\n450 4.2.0b\r\n");
        assert_eq!(r.joined(), "4.2.0 a 4.2.0b", "a code must be a word");
    }
}
