//! What `mx://` says in the delivery status notification (RFC 3464) for recipients refused
//! after the client already got `250`: the only way left to tell the sender. Its words and
//! each refused recipient's fields; `message::dsn` writes the report.

use std::time::SystemTime;

use crate::message::dsn::{self, Recipient, Report};
use crate::upstream::UpstreamError;

/// One recipient that was not delivered, and why.
#[derive(Debug, Clone)]
pub(super) struct Refused {
    pub rcpt: String,
    /// The MX host that answered, when one did.
    pub remote: Option<String>,
    pub error: UpstreamError,
}

/// The report's bytes, from `MAILER-DAEMON@<reporting_mta>` to `sender`. `original` is the
/// message or its first bytes (`message::dsn::head`).
pub(super) fn report(
    reporting_mta: &str,
    sender: &str,
    refused: &[Refused],
    original: &[u8],
    now: SystemTime,
) -> Vec<u8> {
    let mut words = vec![
        "Your message was delivered to some of its recipients, but not to these:".to_string(),
        String::new(),
    ];
    words.extend((refused.iter()).map(|r| format!("<{}>: {}", r.rcpt, diagnostic(&r.error))));
    let recipients: Vec<Recipient> = (refused.iter())
        .map(|r| Recipient {
            address: &r.rcpt,
            status: status(&r.error),
            remote: r.remote.as_deref(),
            diagnostic: Some(diagnostic(&r.error)),
        })
        .collect();
    let report = Report {
        reporting_mta,
        from: &format!("MAILER-DAEMON@{reporting_mta}"),
        to: sender,
        id: &uuid::Uuid::new_v4().simple().to_string(),
        queue_id: None,
        arrival: now,
        words: &words,
        recipients: &recipients,
        original,
    };
    dsn::write(&report, now)
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

/// The reply as the client would have seen it.
fn diagnostic(error: &UpstreamError) -> String {
    match error {
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
    }
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
}
