//! The `Received:` trace header a relay must add (RFC 5321 4.4). It is the only change made
//! to a message's bytes, besides removing a key header the config asks to strip. Nothing the
//! client wrote may change its structure: a bad EHLO name is written as `unknown`. The
//! pipeline asks the session's hop (`SessionHop`, from `Client::hop`) for it.

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use super::path::domain_len;
use crate::message::received::Mark;
use crate::message::Envelope;
use crate::pipeline::Hop;

/// The session's hop, as our `Received:` field tells it (made by `Client::hop`).
pub struct SessionHop<'a> {
    /// The EHLO name (empty: none).
    pub helo: &'a str,
    pub peer: IpAddr,
    pub hostname: &'a str,
    /// This process's id (`Services::instance`), the mark a message that loops back carries.
    pub instance: &'a str,
    /// `ESMTP`, `SMTP`, or with `S` (TLS) / `A` (AUTH) as in RFC 3848.
    pub protocol: &'static str,
    /// What the session's fields repeat.
    pub repeats: &'a Repeats,
}

impl Hop for SessionHop<'_> {
    /// Our `Received:` field, written in front of the client's bytes (then the fields the
    /// route adds).
    fn received(&self, id: &str, envelope: &Envelope) -> Vec<u8> {
        // The single recipient, named only when there is exactly one (RFC 5321 4.4 warns that
        // listing several leaks Bcc recipients).
        let for_rcpt = match envelope.rcpts.as_slice() {
            [one] => Some(one.as_str()),
            _ => None,
        };
        header(self, id, for_rcpt, SystemTime::now())
    }
}

/// What a session's `Received:` fields repeat, written once rather than once a message: the
/// from-part for its EHLO name and address, and the date for the current second.
#[derive(Debug, Default)]
pub struct Repeats {
    kept: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    /// The EHLO name and address `from` is for, and `from` (empty: none yet).
    helo: String,
    peer: Option<IpAddr>,
    from: String,
    /// The second since the epoch `date` is for, and `date` (empty: none yet).
    second: u64,
    date: String,
}

impl Kept {
    fn from(&mut self, helo: &str, peer: IpAddr) -> &str {
        if self.from.is_empty() || self.helo != helo || self.peer != Some(peer) {
            self.from = FromPart(helo, peer).to_string();
            (self.helo, self.peer) = (helo.to_string(), Some(peer));
        }
        &self.from
    }

    /// RFC 5322's zone is numeric: HTTP's date with "GMT" as "+0000".
    fn date(&mut self, now: SystemTime) -> &str {
        let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if self.date.is_empty() || self.second != second {
            let text = httpdate::fmt_http_date(now);
            self.date = match text.strip_suffix(" GMT") {
                Some(date) => format!("{date} +0000"),
                None => text,
            };
            self.second = second;
        }
        &self.date
    }
}

/// The `with` protocol of RFC 3848: `SMTP` for HELO, `ESMTP` for EHLO, plus `S` under TLS and
/// `A` after AUTH (either implies an extended session).
pub fn protocol(esmtp: bool, tls: bool, auth: bool) -> &'static str {
    match (esmtp || tls || auth, tls, auth) {
        (false, _, _) => "SMTP",
        (true, false, false) => "ESMTP",
        (true, true, false) => "ESMTPS",
        (true, false, true) => "ESMTPA",
        (true, true, true) => "ESMTPSA",
    }
}

/// The header, folded at its clauses (lines of at most 78 characters with a usual hostname,
/// always far under 998), ending in CRLF.
pub fn header(hop: &SessionHop<'_>, id: &str, for_rcpt: Option<&str>, now: SystemTime) -> Vec<u8> {
    // One buffer, written once and mostly without the formatting machinery: this runs for
    // every message.
    let mut h = String::with_capacity(320);
    let mut kept = hop.repeats.kept.lock().expect("repeats lock");
    h.push_str("Received: from ");
    h.push_str(kept.from(hop.helo, hop.peer));
    for part in ["\r\n\tby ", hop.hostname, " "] {
        h.push_str(part);
    }
    Mark(hop.instance).write_to(&mut h);
    for part in ["\r\n\twith ", hop.protocol, " id ", id] {
        h.push_str(part);
    }
    if let Some(rcpt) = for_rcpt.filter(|r| plain_path(r)) {
        h.push_str("\r\n\tfor <");
        h.push_str(rcpt);
        h.push('>');
    }
    h.push_str(";\r\n\t");
    h.push_str(kept.date(now));
    h.push_str("\r\n");
    h.into_bytes()
}

/// `<helo> ([<ip>])` when the EHLO name is a domain or an address literal (RFC 5321 4.1.1.1),
/// as Postfix writes it. Any other name cannot be trusted to keep the comment structure, so
/// the hop is `unknown` and the name goes in a comment of its own, every character that is
/// not plainly safe there (parentheses, backslash, quotes, controls, non-ASCII) replaced.
struct FromPart<'a>(&'a str, IpAddr);

impl std::fmt::Display for FromPart<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::fmt::Write as _;
        let FromPart(helo, peer) = *self;
        if let Some(name) = helo_name(helo) {
            return write!(f, "{name} ([{peer}])");
        }
        write!(f, "unknown ([{peer}])")?;
        if helo.is_empty() {
            return Ok(());
        }
        let safe = |c: char| c.is_ascii_alphanumeric() || ".-_:[]".contains(c);
        f.write_str("\r\n\t(helo=")?;
        for c in helo.chars().take(64) {
            f.write_char(if safe(c) { c } else { '?' })?;
        }
        f.write_char(')')
    }
}

/// The EHLO name as it may stand in the header: an ASCII domain or address literal as given,
/// or a UTF-8 domain as its A-label (punycode), so that the header stays ASCII whether or not
/// the next hop speaks SMTPUTF8, and still names the same domain (RFC 5890).
fn helo_name(helo: &str) -> Option<Cow<'_, str>> {
    let ascii = match helo.is_ascii() {
        true => Cow::Borrowed(helo),
        false => Cow::Owned(idna::domain_to_ascii_strict(helo).ok()?),
    };
    (!ascii.is_empty() && domain_len(&ascii) == Ok(ascii.len())).then_some(ascii)
}

/// A recipient named in `for <...>` only when it holds nothing that a header parser could
/// take for structure: quotes, comments, the `;` before the date, or non-ASCII.
fn plain_path(rcpt: &str) -> bool {
    rcpt.len() < 200
        && rcpt
            .chars()
            .all(|c| c.is_ascii_graphic() && !"\"()\\;<>".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::header::Fields;
    use crate::message::received::{Hops, Loop};

    #[test]
    fn header_names_the_hop_and_ends_in_crlf() {
        let t = SessionHop {
            helo: "client.example",
            peer: "127.0.0.1".parse().unwrap(),
            hostname: "relay.example",
            instance: "0123abcd",
            protocol: "ESMTP",
            repeats: &Repeats::default(),
        };
        let h = String::from_utf8(header(
            &t,
            "abc",
            Some("a@b.example"),
            SystemTime::UNIX_EPOCH,
        ))
        .unwrap();
        assert!(h.starts_with(
            "Received: from client.example ([127.0.0.1])\r\n\tby relay.example (mailsluice 0123abcd)\r\n"
        ));
        let hops = |instance| Hops::of(h.as_bytes(), &Fields::new(h.as_bytes()), instance);
        assert_eq!(hops("0123abcd").looping(50), Some(Loop::CameBack));
        assert_eq!(hops("4567cdef").looping(50), None);
        assert!(h.contains("for <a@b.example>;"));
        assert!(h.ends_with("Thu, 01 Jan 1970 00:00:00 +0000\r\n"), "{h}");
        assert!(h.lines().all(|l| l.len() <= 78));
    }

    /// The date is written anew when the second changes, and only then; the from-part when
    /// the EHLO name or the address does.
    #[test]
    fn what_is_kept_is_kept_for_its_second_and_its_name_only() {
        let mut kept = Kept::default();
        let mut date =
            |at: u64| (kept.date(UNIX_EPOCH + std::time::Duration::from_millis(at))).to_string();
        assert_eq!(date(0), "Thu, 01 Jan 1970 00:00:00 +0000");
        assert_eq!(date(999), "Thu, 01 Jan 1970 00:00:00 +0000");
        assert_eq!(date(1000), "Thu, 01 Jan 1970 00:00:01 +0000");
        assert_eq!(date(86_400_000), "Fri, 02 Jan 1970 00:00:00 +0000");
        assert_eq!(date(0), "Thu, 01 Jan 1970 00:00:00 +0000", "and back");
        let (a, b): (IpAddr, IpAddr) = ("127.0.0.1".parse().unwrap(), "::1".parse().unwrap());
        let mut kept = Kept::default();
        assert_eq!(kept.from("x.test", a), "x.test ([127.0.0.1])");
        assert_eq!(kept.from("x.test", b), "x.test ([::1])");
        assert_eq!(kept.from("y.test", b), "y.test ([::1])");
        assert_eq!(kept.from("", b), "unknown ([::1])");
    }

    #[test]
    fn hostile_helo_cannot_inject_a_header() {
        let t = SessionHop {
            helo: "x\r\nBcc: victim@example",
            peer: "127.0.0.1".parse().unwrap(),
            hostname: "r",
            instance: "0123abcd",
            protocol: "SMTP",
            repeats: &Repeats::default(),
        };
        let h = String::from_utf8(header(&t, "i", None, SystemTime::UNIX_EPOCH)).unwrap();
        assert_eq!(h.matches("\r\n").count(), 5);
        assert!(!h.contains("\r\nBcc"));
        assert!(h.contains("\r\n\t(helo=x??Bcc:?victim?example)\r\n"), "{h}");
    }

    #[test]
    fn only_a_plain_recipient_is_named() {
        assert!(plain_path("a.b+c@d.example"));
        assert!(plain_path("user@[IPv6:::1]"));
        for r in [r#""a b"@c"#, "a(b@c", "a;b@c", "é@c", "a\\b@c"] {
            assert!(!plain_path(r), "{r}");
        }
    }

    #[test]
    fn helo_names_are_domains_or_literals() {
        assert_eq!(
            helo_name("Client.Example").as_deref(),
            Some("Client.Example")
        );
        assert_eq!(helo_name("[10.0.0.1]").as_deref(), Some("[10.0.0.1]"));
        assert_eq!(
            helo_name("bücher.test").as_deref(),
            Some("xn--bcher-kva.test")
        );
        for bad in [
            "", "a_b", "-a.test", "a..b", "[1.2.3]", "a(b", "x)(by", "é(.test",
        ] {
            assert_eq!(helo_name(bad), None, "{bad}");
        }
    }
}
