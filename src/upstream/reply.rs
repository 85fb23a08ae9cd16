//! Turning upstream's answers (and our client's errors) into `UpstreamError`s. The enhanced status code is split from
//! the text so that the session can write `<code> <enhanced> <text>` without doubling it, and
//! can supply one of its own when upstream gave none.

use super::client::ClientError;
use super::UpstreamError;

/// A refusal with a code and text we chose (a local check standing in for upstream).
pub(crate) fn rejected(code: u16, enhanced: &str, text: String) -> UpstreamError {
    UpstreamError::Rejected {
        code,
        enhanced: Some(enhanced.into()),
        text,
    }
}

pub(crate) fn unavailable(reason: String) -> UpstreamError {
    UpstreamError::Unavailable(reason)
}

/// Upstream's negative reply, its code kept and the enhanced code (RFC 3463) split off the
/// front of its text when present and of the same class.
pub fn from_reply(code: u16, text: &str) -> UpstreamError {
    let (enhanced, text) = match split_enhanced(text) {
        Some((enhanced, rest)) if enhanced.as_bytes()[0] == b'0' + (code / 100) as u8 => {
            (Some(enhanced.to_string()), rest)
        }
        _ => (None, text.trim()),
    };
    UpstreamError::Rejected {
        code,
        enhanced,
        text: text.to_string(),
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

/// A negative reply becomes `Rejected` with upstream's own code and text; the caller
/// classifies it (see [`super::Classifier`]).
pub(super) fn smtp_error(e: &ClientError) -> UpstreamError {
    match e {
        ClientError::Refused(reply) => from_reply(reply.code, &reply.joined()),
        other => unavailable(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn reply_keeps_code_and_drops_mismatched_class() {
        assert_eq!(
            from_reply(451, "4.3.0 Try later"),
            UpstreamError::Rejected {
                code: 451,
                enhanced: Some("4.3.0".into()),
                text: "Try later".into()
            }
        );
        assert_eq!(
            from_reply(550, "4.3.0 odd"),
            UpstreamError::Rejected {
                code: 550,
                enhanced: None,
                text: "4.3.0 odd".into()
            }
        );
        assert_eq!(
            from_reply(554, "no thanks"),
            UpstreamError::Rejected {
                code: 554,
                enhanced: None,
                text: "no thanks".into()
            }
        );
    }
}
