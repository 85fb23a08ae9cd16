//! What the delivery status notification (RFC 3464) says that a held message's sender gets
//! when the relay gives the message up: why (`Failure`), its words, each recipient's fields;
//! `message::dsn` writes the report. Pure: the releaser holds it in the spool and sends it
//! with the null sender, through the message's route.

use std::ops::Range;
use std::time::SystemTime;

use crate::message::dsn::{self, one_line, Recipient, Report};

/// Why a message was given up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Upstream refused it for good: its reply (`550 5.1.1 ...`).
    Refused(String),
    /// The relay refused it for good at release (a loop, a cost no bucket can hold).
    Rejected(String),
    /// Held past `max_hold_ms`; the last answer, if any.
    Expired(Option<String>),
}

impl Failure {
    /// For metrics and logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            Failure::Refused(_) => "refused",
            Failure::Rejected(_) => "rejected",
            Failure::Expired(_) => "expired",
        }
    }

    /// The enhanced status (RFC 3463) of the recipients' field groups.
    fn status(&self) -> String {
        let enhanced = |reply: &str| {
            let code = reply.split_whitespace().nth(1)?;
            let ok = code.split('.').count() == 3
                && code.starts_with(['4', '5'])
                && code.chars().all(|c| c.is_ascii_digit() || c == '.');
            ok.then(|| format!("5{}", &code[1..]))
        };
        match self {
            Failure::Refused(reply) => enhanced(reply).unwrap_or_else(|| "5.0.0".into()),
            Failure::Rejected(_) => "5.7.0".into(),
            // RFC 3463: delivery time expired.
            Failure::Expired(_) => "4.4.7".into(),
        }
    }

    fn diagnostic(&self) -> Option<&str> {
        match self {
            Failure::Refused(reply) | Failure::Rejected(reply) => Some(reply),
            Failure::Expired(last) => last.as_deref(),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Refused(reply) => write!(f, "refused for good: {}", one_line(reply)),
            Failure::Rejected(why) => write!(f, "rejected: {}", one_line(why)),
            Failure::Expired(_) => write!(f, "held past max_hold_ms"),
        }
    }
}

/// What a report is about.
pub struct Failed<'a> {
    /// The relay's name (`smtp.hostname`).
    pub hostname: &'a str,
    /// The report's `From:`.
    pub from: &'a str,
    /// The failed message's sender (the report's only recipient).
    pub to: &'a str,
    pub rcpts: &'a [String],
    /// The failed message as the client sent it: its header section goes in the report.
    pub original: &'a [u8],
    /// The failed message's id (its `queued as`).
    pub id: &'a str,
    pub arrival: SystemTime,
    pub failure: &'a Failure,
}

/// The report's bytes (CRLF line endings, ASCII save the original's header section).
pub fn report(failed: &Failed<'_>, now: SystemTime) -> Vec<u8> {
    let mut words = vec![
        format!(
            "This is the mail relay at {}. Your message {} could not be delivered",
            failed.hostname, failed.id
        ),
        "to the recipients below, and has been given up:".to_string(),
        String::new(),
    ];
    words.extend(failed.rcpts.iter().map(|rcpt| format!("<{rcpt}>")));
    words.push(String::new());
    words.push(format!("Reason: {}", reason(failed.failure)));
    let recipients: Vec<Recipient> = (failed.rcpts.iter())
        .map(|rcpt| Recipient {
            address: rcpt,
            status: failed.failure.status(),
            remote: None,
            diagnostic: failed.failure.diagnostic().map(String::from),
        })
        .collect();
    let report = Report {
        reporting_mta: failed.hostname,
        from: failed.from,
        to: failed.to,
        id: failed.id,
        queue_id: Some(failed.id),
        arrival: failed.arrival,
        words: &words,
        recipients: &recipients,
        original: failed.original,
    };
    dsn::write(&report, now)
}

/// The original's header section, split for its report: what the report copies (every field
/// but the `keys` ones, at most what `message::dsn` keeps), and the `keys` fields themselves,
/// which the report is held with to be keyed as its original (each ended by CRLF, no blank
/// line after: the report's own fields follow them as one header section, so its own
/// `From:` is the one read).
pub fn split_original(section: &[u8], keys: &[Range<usize>]) -> (Vec<u8>, Vec<u8>) {
    let (mut copied, mut key_fields, mut at) = (Vec::new(), Vec::new(), 0);
    for key in keys {
        copied.push(&section[at..key.start]);
        key_fields.extend_from_slice(&section[key.clone()]);
        if !key_fields.ends_with(b"\r\n") {
            key_fields.extend_from_slice(b"\r\n");
        }
        at = key.end;
    }
    copied.push(&section[at..]);
    (dsn::head(&copied), key_fields)
}

fn reason(failure: &Failure) -> String {
    match failure {
        Failure::Refused(reply) => format!("the next mail server refused it: {reply}"),
        Failure::Rejected(why) => format!("the relay refused it: {why}"),
        Failure::Expired(_) => "it could not be delivered before its time ran out".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::dsn::MAX_HEADERS;

    fn failed<'a>(failure: &'a Failure, rcpts: &'a [String]) -> Failed<'a> {
        Failed {
            hostname: "relay.test",
            from: "postmaster@relay.test",
            to: "app@acme.example",
            rcpts,
            original: b"Subject: invoice\r\nX-Tenant: acme\r\n\r\nsecret body\r\n",
            id: "00ff00ff00ff00ff",
            arrival: SystemTime::UNIX_EPOCH,
            failure,
        }
    }

    /// The report's parts and fields as RFC 3464 has them; the original's header section,
    /// not its body.
    #[test]
    fn a_report_is_multipart_report_with_a_group_per_recipient() {
        let rcpts = vec!["a@x.example".to_string(), "b@y.example".to_string()];
        let failure = Failure::Refused("550 5.1.1 <a@x.example>: no such user".into());
        let text =
            String::from_utf8(report(&failed(&failure, &rcpts), SystemTime::UNIX_EPOCH)).unwrap();
        assert!(text.contains("Content-Type: multipart/report; report-type=delivery-status;"));
        assert!(text.contains("From: Mail Delivery System <postmaster@relay.test>\r\n"));
        assert!(text.contains("To: <app@acme.example>\r\n"));
        assert!(text.contains("Auto-Submitted: auto-replied\r\n"));
        assert!(text.contains("Date: Thu, 01 Jan 1970 00:00:00 +0000\r\n"));
        assert!(text.contains(
            "Content-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; relay.test\r\n"
        ));
        assert_eq!(text.matches("Action: failed\r\n").count(), 2);
        assert!(text.contains(
            "Final-Recipient: rfc822; b@y.example\r\nAction: failed\r\nStatus: 5.1.1\r\n"
        ));
        assert!(text.contains("Diagnostic-Code: smtp; 550 5.1.1 <a@x.example>: no such user\r\n"));
        assert!(text.contains("Content-Type: text/rfc822-headers\r\n\r\nSubject: invoice\r\n"));
        assert!(!text.contains("secret body"));
        assert!(text.ends_with("--00ff00ff00ff00ff/relay.test--\r\n"));
        assert!(text
            .split("\r\n")
            .all(|l| !l.contains('\n') && !l.contains('\r')));
    }

    /// The key fields go to the report's own run (each a whole line), the rest to its copy.
    #[test]
    fn the_original_is_split_into_its_copy_and_its_key_fields() {
        let section = b"X-Tenant: acme\r\nSubject: s\r\nX-Team: a\r\n b\r\n\r\n";
        let (copied, keys) = split_original(section, &[0..16, 28..43]);
        assert_eq!(copied, b"Subject: s\r\n\r\n");
        assert_eq!(keys, b"X-Tenant: acme\r\nX-Team: a\r\n b\r\n");
        let whole = [Range { start: 0, end: 14 }];
        let (_, keys) = split_original(b"X-Tenant: acme", &whole);
        assert_eq!(keys, b"X-Tenant: acme\r\n");
    }

    #[test]
    fn an_expired_message_reports_4_4_7_and_its_last_answer() {
        let rcpts = vec!["a@x.example".to_string()];
        let failure = Failure::Expired(Some("451 4.4.1 upstream\r\nunreachable".into()));
        let text =
            String::from_utf8(report(&failed(&failure, &rcpts), SystemTime::UNIX_EPOCH)).unwrap();
        assert!(text.contains("Status: 4.4.7\r\n"), "{text}");
        assert!(text.contains("Diagnostic-Code: smtp; 451 4.4.1 upstream unreachable\r\n"));
    }

    /// A report copies at most `MAX_HEADERS` bytes of its original's header section, however
    /// long that is.
    #[test]
    fn a_report_keeps_at_most_max_headers_of_the_original() {
        let rcpts = vec!["a@x.example".to_string()];
        let failure = Failure::Rejected("a loop".into());
        let mut original = b"Subject: invoice\r\n".to_vec();
        for i in 0..20_000 {
            original
                .extend_from_slice(format!("X-Filler-{i}: a field of some length\r\n").as_bytes());
        }
        original.extend_from_slice(b"\r\nsecret body\r\n");
        assert!(dsn::header_section(&original).len() > 10 * MAX_HEADERS);
        let failed = Failed {
            original: &original,
            ..failed(&failure, &rcpts)
        };
        let text = String::from_utf8(report(&failed, SystemTime::UNIX_EPOCH)).unwrap();
        let (_, copied) = text.split_once("text/rfc822-headers\r\n\r\n").unwrap();
        assert!(copied.starts_with("Subject: invoice\r\nX-Filler-0: "));
        assert!(
            copied.len() < MAX_HEADERS + 100,
            "{} bytes copied",
            copied.len()
        );
        assert!(!text.contains("X-Filler-19999"));
    }
}
