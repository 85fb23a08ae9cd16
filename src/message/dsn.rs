//! The delivery status notification (RFC 3464) the relay writes when it cannot deliver a
//! message it already answered `250`: `multipart/report; report-type=delivery-status` with a
//! part for people, a `message/delivery-status` part (a field group per recipient) and the
//! original's header section only (RFC 6522 `text/rfc822-headers`), cut at [`MAX_HEADERS`] so
//! that a report is small whatever was sent. One writer for every report (`mx://`'s partial
//! failures, the spool's given-up messages): each caller brings its own words and its
//! recipients' fields. Its own lines are ASCII; the copied header section is as it came.

use std::time::SystemTime;

/// Bytes of the original's header section a report keeps at most; the rest is cut (Postfix's
/// `bounce_size_limit`, 50 KB, which bounds what its reports copy): a report is never a way
/// to send large mail to a forged sender.
pub const MAX_HEADERS: usize = 50_000;

/// What one report says.
pub struct Report<'a> {
    /// The relay's name: the `Reporting-MTA`, and the domain of the report's `Message-ID`.
    pub reporting_mta: &'a str,
    /// The report's `From:` address (`MAILER-DAEMON@...`, the spool's `report_from`).
    pub from: &'a str,
    /// The failed message's sender: the report's only recipient.
    pub to: &'a str,
    /// Unique to the failed message: the report's `Message-ID` and MIME boundary are made of it.
    pub id: &'a str,
    /// The failed message's id in the spool (its `queued as`), for a held message.
    pub queue_id: Option<&'a str>,
    pub arrival: SystemTime,
    /// The lines for people, in the first part.
    pub words: &'a [String],
    pub recipients: &'a [Recipient<'a>],
    /// The failed message, or its first bytes ([`head`]): its header section goes in.
    pub original: &'a [u8],
}

/// One recipient's field group (RFC 3464 2.3): it was not delivered, and will not be.
pub struct Recipient<'a> {
    pub address: &'a str,
    /// Its RFC 3463 status (`5.1.1`).
    pub status: String,
    /// The host that answered, when one did.
    pub remote: Option<&'a str>,
    /// The reply it got, when there was one.
    pub diagnostic: Option<String>,
}

/// The report's bytes (CRLF lines), dated `now`.
pub fn write(report: &Report<'_>, now: SystemTime) -> Vec<u8> {
    let mta = one_line(report.reporting_mta);
    let id = one_line(report.id);
    let boundary = format!("{id}/{mta}");
    let mut out = Lines(String::new());
    out.line(&format!(
        "From: Mail Delivery System <{}>",
        one_line(report.from)
    ));
    out.line(&format!("To: <{}>", one_line(report.to)));
    out.line("Subject: Undelivered Mail Returned to Sender");
    out.line(&format!("Date: {}", date(now)));
    out.line(&format!("Message-ID: <{id}.dsn@{mta}>"));
    out.line("Auto-Submitted: auto-replied");
    out.line("MIME-Version: 1.0");
    out.line(&format!(
        "Content-Type: multipart/report; report-type=delivery-status; boundary=\"{boundary}\""
    ));
    out.line("");
    out.line("This is a MIME-encapsulated message.");
    out.line("");
    out.line(&format!("--{boundary}"));
    out.line("Content-Type: text/plain; charset=us-ascii");
    out.line("");
    for words in report.words {
        out.line(&one_line(words));
    }
    out.line("");
    out.line(&format!("--{boundary}"));
    delivery_status(&mut out, &mta, report);
    out.line("");
    out.line(&format!("--{boundary}"));
    out.line("Content-Type: text/rfc822-headers");
    out.line("");
    let mut bytes = out.0.into_bytes();
    bytes.extend_from_slice(headers(report.original));
    if !bytes.ends_with(b"\r\n") {
        bytes.extend_from_slice(b"\r\n");
    }
    bytes.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    bytes
}

struct Lines(String);

impl Lines {
    fn line(&mut self, text: &str) {
        self.0.push_str(text);
        self.0.push_str("\r\n");
    }
}

/// The machine-readable part: the message's fields, then one group per recipient.
fn delivery_status(out: &mut Lines, mta: &str, report: &Report<'_>) {
    out.line("Content-Type: message/delivery-status");
    out.line("");
    out.line(&format!("Reporting-MTA: dns; {mta}"));
    if let Some(id) = report.queue_id {
        out.line(&format!("X-Mailsluice-Queue-ID: {}", one_line(id)));
    }
    out.line(&format!("Arrival-Date: {}", date(report.arrival)));
    for r in report.recipients {
        out.line("");
        out.line(&format!("Final-Recipient: rfc822; {}", one_line(r.address)));
        out.line("Action: failed");
        out.line(&format!("Status: {}", one_line(&r.status)));
        if let Some(remote) = r.remote {
            out.line(&format!("Remote-MTA: dns; {}", one_line(remote)));
        }
        if let Some(diagnostic) = &r.diagnostic {
            out.line(&format!("Diagnostic-Code: smtp; {}", one_line(diagnostic)));
        }
    }
}

/// The first bytes of a message in pieces: all that [`write`] can keep of its header section
/// (`MAX_HEADERS`, and two more to see a blank line right after the cut). Copied only when a
/// report is sent, so a message that needs none is never joined.
pub fn head(pieces: &[&[u8]]) -> Vec<u8> {
    let mut head = Vec::new();
    for piece in pieces {
        let room = MAX_HEADERS + 2 - head.len();
        head.extend_from_slice(&piece[..piece.len().min(room)]);
        if head.len() == MAX_HEADERS + 2 {
            break;
        }
    }
    head
}

/// What a report keeps of the header section: up to and including the CRLF before the blank
/// line, at most `MAX_HEADERS` bytes.
fn headers(message: &[u8]) -> &[u8] {
    let end = memchr::memmem::find(message, b"\r\n\r\n").map_or(message.len(), |i| i + 2);
    &message[..end.min(MAX_HEADERS)]
}

/// The header section of `message`, up to and with the empty line that ends it (all of it
/// when it has no body).
pub fn header_section(message: &[u8]) -> &[u8] {
    match memchr::memmem::find(message, b"\r\n\r\n") {
        Some(end) => &message[..end + 4],
        None => message,
    }
}

/// Text on one line of printable ASCII, at most 900 characters: a reply's text or an address
/// can neither split a field nor forge one, nor make a line too long for SMTP.
pub fn one_line(text: &str) -> String {
    let ascii = |c: char| match c {
        '!'..='~' => c,
        c if c.is_whitespace() || c.is_control() => ' ',
        _ => '?',
    };
    let text: String = text.chars().map(ascii).collect();
    let words: Vec<&str> = text.split_whitespace().collect();
    words.join(" ").chars().take(900).collect()
}

/// RFC 5322's date, zone numeric.
fn date(at: SystemTime) -> String {
    let text = httpdate::fmt_http_date(at);
    match text.strip_suffix(" GMT") {
        Some(date) => format!("{date} +0000"),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_copies_only_what_a_report_can_keep() {
        let pieces: [&[u8]; 3] = [b"Received: x\r\n", b"Subject: s\r\n", b"\r\nbody\r\n"];
        assert_eq!(head(&pieces), pieces.concat());
        let big = vec![b'a'; MAX_HEADERS];
        let pieces: [&[u8]; 3] = [b"X: y\r\n", &big, &big];
        let copied = head(&pieces);
        assert_eq!(copied.len(), MAX_HEADERS + 2);
        assert_eq!(headers(&copied), headers(&pieces.concat()));
    }

    fn report<'a>(original: &'a [u8], recipients: &'a [Recipient<'a>]) -> Report<'a> {
        Report {
            reporting_mta: "relay.test",
            from: "MAILER-DAEMON@relay.test",
            to: "s@a.test",
            id: "0011",
            queue_id: None,
            arrival: SystemTime::UNIX_EPOCH,
            words: &[],
            recipients,
            original,
        }
    }

    /// However long the original's header section, the report keeps its first
    /// `MAX_HEADERS` bytes and ends its last part as MIME has it.
    #[test]
    fn a_long_header_section_is_cut_at_max_headers() {
        let mut original = b"Subject: long\r\n".to_vec();
        original.extend(b"X-Filler: 0123456789abcdef\r\n".repeat(MAX_HEADERS / 8));
        original.extend_from_slice(b"\r\nbody\r\n");
        let bytes = write(&report(&original, &[]), SystemTime::UNIX_EPOCH);
        let text = String::from_utf8(bytes).unwrap();
        let (_, copied) = text.split_once("text/rfc822-headers\r\n\r\n").unwrap();
        let copied = copied.strip_suffix("\r\n--0011/relay.test--\r\n").unwrap();
        assert!(copied.starts_with("Subject: long\r\n"));
        assert!(copied.len() <= MAX_HEADERS + 2, "{}", copied.len());
        assert!(copied.ends_with("\r\n"));
    }

    /// Each line the writer writes is ASCII on one line, whatever it was given.
    #[test]
    fn what_it_is_given_is_written_on_one_line_of_ascii() {
        let rcpt = [Recipient {
            address: "j\u{f6}rg@b.test",
            status: "5.1.1".into(),
            remote: Some("mx\r\nBcc: x@evil.test"),
            diagnostic: Some("550 5.1.1\r\n\tno such user".into()),
        }];
        let text = String::from_utf8(write(&report(b"", &rcpt), SystemTime::UNIX_EPOCH)).unwrap();
        assert!(text.is_ascii());
        assert!(!text.contains("\r\nBcc:"));
        assert!(text.contains("Final-Recipient: rfc822; j?rg@b.test\r\n"));
        assert!(text.contains("Diagnostic-Code: smtp; 550 5.1.1 no such user\r\n"));
        assert!(text.contains("Date: Thu, 01 Jan 1970 00:00:00 +0000\r\n"));
    }
}
