//! The delivery status notification (RFC 3464 `multipart/report`) for recipients refused
//! after the client already got `250`: the only way left to tell the sender. It carries the
//! original headers only (RFC 6522 `text/rfc822-headers`), so it is small whatever was sent.

use std::time::SystemTime;

use crate::upstream::UpstreamError;

/// Headers of the original message kept in the report at most; the rest is cut.
const MAX_HEADERS: usize = 64 * 1024;

/// One recipient that was not delivered, and why.
#[derive(Debug, Clone)]
pub(super) struct Refused {
    pub rcpt: String,
    /// The MX host that answered, when one did.
    pub remote: Option<String>,
    pub error: UpstreamError,
}

/// The first bytes of a message in pieces: all that [`report`] can keep of its header section
/// (`MAX_HEADERS`, and two more to see a blank line right after the cut). Copied only when a
/// report is sent, so a message that needs none is never joined.
pub(super) fn head(pieces: &[&[u8]]) -> Vec<u8> {
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

/// The report's bytes (CRLF lines, ASCII), from `MAILER-DAEMON@<reporting_mta>` to `sender`.
pub(super) fn report(
    reporting_mta: &str,
    sender: &str,
    refused: &[Refused],
    original: &[u8],
    now: SystemTime,
) -> Vec<u8> {
    let boundary = format!("=_dsn_{}", uuid::Uuid::new_v4().simple());
    let date = httpdate::fmt_http_date(now).replace(" GMT", " +0000");
    let mut out = Lines(String::new());
    out.line(&format!(
        "From: Mail Delivery System <MAILER-DAEMON@{reporting_mta}>"
    ));
    out.line(&format!("To: <{}>", clean(sender)));
    out.line("Subject: Undelivered Mail Returned to Sender");
    out.line(&format!("Date: {date}"));
    let id = uuid::Uuid::new_v4().simple();
    out.line(&format!("Message-ID: <{id}@{reporting_mta}>"));
    out.line("Auto-Submitted: auto-replied");
    out.line("MIME-Version: 1.0");
    out.line(&format!(
        "Content-Type: multipart/report; report-type=delivery-status; boundary=\"{boundary}\""
    ));
    out.line("");
    out.line(&format!("--{boundary}"));
    out.line("Content-Type: text/plain; charset=us-ascii");
    out.line("");
    out.line("Your message was delivered to some of its recipients, but not to these:");
    out.line("");
    for r in refused {
        out.line(&format!("<{}>: {}", clean(&r.rcpt), diagnostic(&r.error)));
    }
    out.line("");
    out.line(&format!("--{boundary}"));
    delivery_status(&mut out, reporting_mta, &date, refused);
    out.line("");
    out.line(&format!("--{boundary}"));
    out.line("Content-Type: text/rfc822-headers");
    out.line("");
    let mut bytes = out.0.into_bytes();
    bytes.extend_from_slice(headers(original));
    if !bytes.ends_with(b"\r\n") {
        bytes.extend_from_slice(b"\r\n");
    }
    bytes.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    bytes
}

struct Lines(String);

impl Lines {
    fn line(&mut self, s: &str) {
        self.0.push_str(s);
        self.0.push_str("\r\n");
    }
}

/// The machine-readable part: one block per refused recipient (RFC 3464 2.3).
fn delivery_status(out: &mut Lines, reporting_mta: &str, date: &str, refused: &[Refused]) {
    out.line("Content-Type: message/delivery-status");
    out.line("");
    out.line(&format!("Reporting-MTA: dns; {reporting_mta}"));
    out.line(&format!("Arrival-Date: {date}"));
    for r in refused {
        out.line("");
        out.line(&format!("Final-Recipient: rfc822; {}", clean(&r.rcpt)));
        out.line("Action: failed");
        out.line(&format!("Status: {}", status(&r.error)));
        if let Some(remote) = &r.remote {
            out.line(&format!("Remote-MTA: dns; {}", clean(remote)));
        }
        out.line(&format!("Diagnostic-Code: smtp; {}", diagnostic(&r.error)));
    }
}

/// The header section, up to and including the CRLF before the blank line.
fn headers(message: &[u8]) -> &[u8] {
    let end = message
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(message.len(), |i| i + 2);
    &message[..end.min(MAX_HEADERS)]
}

/// The RFC 3463 status of a refusal; the class of what the client would have been told.
fn status(error: &UpstreamError) -> String {
    match error {
        UpstreamError::Unavailable(_) => "4.4.1".into(),
        UpstreamError::Credentials(_) | UpstreamError::NoCredentials(_) => "4.7.0".into(),
        UpstreamError::Uncertain(_) => "4.4.2".into(),
        refused => match refused.reply().expect("a refusal has a reply") {
            (_, Some(enhanced), _) => enhanced.to_string(),
            (code, None, _) => format!("{}.0.0", code / 100),
        },
    }
}

/// The reply as the client would have seen it, on one line.
fn diagnostic(error: &UpstreamError) -> String {
    let text = match error {
        UpstreamError::Unavailable(reason) => format!("451 4.4.1 {reason}"),
        UpstreamError::Credentials(reason) | UpstreamError::NoCredentials(reason) => {
            format!("451 4.7.0 {reason}")
        }
        UpstreamError::Uncertain(reason) => {
            format!("451 4.4.2 no answer after the message was sent, it may have arrived: {reason}")
        }
        refused => {
            let (code, _, text) = refused.reply().expect("a refusal has a reply");
            format!("{code} {} {text}", status(error))
        }
    };
    clean(&text)
}

/// One line of printable ASCII, so that no header can be split or forged by a reply text.
fn clean(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            ' '..='~' => c,
            _ => '?',
        })
        .take(900)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::reply::rejected;

    #[test]
    fn report_names_each_refused_recipient_with_its_status() {
        let refused = [
            Refused {
                rcpt: "x@b.test".into(),
                remote: Some("mx.b.test".into()),
                error: rejected(550, "5.1.1", "no such user".into()),
            },
            Refused {
                rcpt: "y@c.test".into(),
                remote: None,
                error: UpstreamError::Uncertain("timed out".into()),
            },
        ];
        let original = b"Subject: hi\r\nFrom: s@a.test\r\n\r\nsecret body\r\n";
        let dsn = report(
            "relay.test",
            "s@a.test",
            &refused,
            original,
            SystemTime::UNIX_EPOCH,
        );
        let text = String::from_utf8(dsn).unwrap();
        assert!(text.contains("Content-Type: multipart/report; report-type=delivery-status"));
        assert!(text.contains("To: <s@a.test>\r\n"));
        assert!(text.contains("Final-Recipient: rfc822; x@b.test\r\nAction: failed\r\nStatus: 5.1.1\r\nRemote-MTA: dns; mx.b.test\r\nDiagnostic-Code: smtp; 550 5.1.1 no such user\r\n"));
        assert!(text
            .contains("Final-Recipient: rfc822; y@c.test\r\nAction: failed\r\nStatus: 4.4.2\r\n"));
        assert!(text.contains("Subject: hi\r\nFrom: s@a.test\r\n"));
        assert!(!text.contains("secret body"), "headers only");
        assert!(text.is_ascii());
        assert!(text
            .split("\r\n")
            .all(|l| !l.contains('\n') && l.len() < 998));
    }

    #[test]
    fn reply_text_cannot_add_a_header() {
        let refused = [Refused {
            rcpt: "x@b.test".into(),
            remote: None,
            error: rejected(550, "5.1.1", "no\r\nBcc: victim@evil.test".into()),
        }];
        let text =
            String::from_utf8(report("r", "s@a", &refused, b"", SystemTime::UNIX_EPOCH)).unwrap();
        assert!(!text.contains("\r\nBcc:"));
    }

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
}
