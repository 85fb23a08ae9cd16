//! Turning upstream's answers (and our client's errors) into `UpstreamError`s. The enhanced status code is split from
//! the text so that the session can write `<code> <enhanced> <text>` without doubling it, and
//! can supply one of its own when upstream gave none.

pub use super::client::split_enhanced;
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
