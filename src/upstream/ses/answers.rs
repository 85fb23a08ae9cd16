//! SES's answers as the relay's typed [`UpstreamError`]s, so that the forwarding policy (wait
//! again on rate feedback, pause on quota and paused answers, fallback when unavailable) works
//! for SES's API as it does for SMTP replies, and the client gets the pinned replies.
//!
//! An error with no answer from SES is told apart by how far the request got: while the
//! request body had not been handed whole to the HTTP client (no connection, the connection
//! dropped while it was written, the timeout passed first), nothing complete reached SES, so
//! it is `Unavailable`; once it had, SES may have taken the message (`Uncertain`). A `2xx`
//! whose body does not parse is `Uncertain` too: SES said yes, and a retry would send the
//! message twice. A `404` names something the configuration asks for that SES does not have
//! (a configuration set, an identity): permanent, since the client's retries would fail the
//! same until the operator fixes it. For a message sent as an SES tenant, SES saying it does
//! not know the tenant, or that the sender is not associated with it, gets the words of the
//! relay's own check (`IdentityRefusal`), which catches both before DATA when the tenant was
//! read in time.

use aws_sdk_sesv2::config::http::HttpResponse;
use aws_sdk_sesv2::error::{ProvideErrorMetadata, SdkError};

use crate::observe::cause;
use crate::upstream::{Feedback, UpstreamError};

/// What an SES answer means for the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A refusal, typed.
    Error(UpstreamError),
    /// SES paused sending for the tenant the message was sent as (SES's words).
    TenantPaused(String),
    /// SES does not know the tenant the message was sent as.
    TenantUnknown,
    /// The sender is no identity associated with the tenant the message was sent as.
    NotIdentity,
}

/// An answer of SES's: its HTTP status, its error code (the exception's name) and its text.
pub fn classify(status: u16, code: Option<&str>, text: &str, tenant: Option<&str>) -> Answer {
    let code = code.unwrap_or("");
    let pushback = |feedback| {
        Answer::Error(UpstreamError::Pushback {
            feedback,
            code: 451,
            enhanced: Some("4.7.1".into()),
            text: format!("{code}: {text}"),
        })
    };
    let reply = |code: u16, enhanced: &str| {
        Answer::Error(UpstreamError::Rejected {
            code,
            enhanced: Some(enhanced.into()),
            text: text.to_string(),
        })
    };
    if text.contains("Daily message quota exceeded") {
        return pushback(Feedback::Quota);
    }
    if status == 429
        || code == "TooManyRequestsException"
        || text.contains("Maximum sending rate exceeded")
    {
        return pushback(Feedback::Rate);
    }
    let says = |words: &str| text.to_ascii_lowercase().contains(words);
    match code {
        "SendingPausedException" if tenant.is_some() => Answer::TenantPaused(text.to_string()),
        "NotFoundException" if tenant.is_some() && says("tenant") => Answer::TenantUnknown,
        "MessageRejected" | "BadRequestException" if tenant.is_some() && says("not associated") => {
            Answer::NotIdentity
        }
        "SendingPausedException" | "AccountSuspendedException" => pushback(Feedback::Paused),
        "MessageRejected" | "BadRequestException" => reply(554, "5.6.0"),
        "MailFromDomainNotVerifiedException" => reply(550, "5.7.1"),
        "NotFoundException" => not_found(code, text),
        _ if status == 404 => not_found(code, text),
        "UnrecognizedClientException"
        | "SignatureDoesNotMatch"
        | "AccessDeniedException"
        | "ExpiredToken"
        | "ExpiredTokenException"
        | "InvalidClientTokenId"
        | "MissingAuthenticationToken" => credentials(code, text),
        _ if status == 403 => credentials(code, text),
        // 5xx, and anything SES may add: the client keeps the message and tries again.
        _ => Answer::Error(UpstreamError::Rejected {
            code: 451,
            enhanced: Some("4.4.1".into()),
            text: format!("SES answered {status} {code}: {text}"),
        }),
    }
}

/// SES does not have what the relay's configuration names: `554 5.3.5` (RFC 3463: the
/// system is not configured for it), with SES's words.
fn not_found(code: &str, text: &str) -> Answer {
    Answer::Error(UpstreamError::Rejected {
        code: 554,
        enhanced: Some("5.3.5".into()),
        text: format!("SES {code}: {text}"),
    })
}

fn credentials(code: &str, text: &str) -> Answer {
    Answer::Error(UpstreamError::Credentials(format!("SES {code}: {text}")))
}

/// The SDK's error for a request, `body_sent` whether the whole request body had been handed
/// to the HTTP client.
pub fn from_sdk<E>(
    error: SdkError<E, HttpResponse>,
    body_sent: bool,
    tenant: Option<&str>,
) -> Answer
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let status_of = |raw: &HttpResponse| raw.status().as_u16();
    match &error {
        // SES said yes, in a body the SDK could not read (it takes that for an error).
        SdkError::ServiceError(ctx) if (200..300).contains(&status_of(ctx.raw())) => {
            Answer::Error(UpstreamError::Uncertain(describe(&error)))
        }
        SdkError::ServiceError(ctx) => {
            let err = ctx.err();
            let status = status_of(ctx.raw());
            classify(status, err.code(), err.message().unwrap_or(""), tenant)
        }
        // An answer the SDK could not read: by its status alone; a success it could not read
        // may have been a send.
        SdkError::ResponseError(ctx) => match status_of(ctx.raw()) {
            200..=299 => Answer::Error(UpstreamError::Uncertain(describe(&error))),
            status => classify(status, None, &describe(&error), tenant),
        },
        _ => {
            let why = describe(&error);
            Answer::Error(if body_sent {
                UpstreamError::Uncertain(why)
            } else if no_credentials(&error) {
                // The request was never signed: nothing reached SES, which refused nothing.
                UpstreamError::NoCredentials(why)
            } else {
                UpstreamError::Unavailable(why)
            })
        }
    }
}

/// The error's cause in a few words (`SES: dispatch failure: ...`), never the SDK's dump.
pub fn describe<E: std::error::Error + 'static>(error: &SdkError<E, HttpResponse>) -> String {
    format!("SES: {}", cause::short(error))
}

/// Whether the request failed before it was signed for want of credentials (the default
/// chain found none, or the provider given could not load them).
fn no_credentials<E: std::error::Error + 'static>(error: &SdkError<E, HttpResponse>) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = next {
        if e.is::<aws_credential_types::provider::error::CredentialsError>() {
            return true;
        }
        next = e.source();
    }
    cause::short(error).contains("credentials")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(answer: Answer) -> UpstreamError {
        match answer {
            Answer::Error(e) => e,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn rate_quota_and_pauses_are_feedback() {
        let rate = error(classify(
            429,
            Some("TooManyRequestsException"),
            "Maximum sending rate exceeded.",
            None,
        ));
        assert_eq!(rate.feedback(), Some(Feedback::Rate));
        let quota = classify(
            400,
            Some("LimitExceededException"),
            "Daily message quota exceeded.",
            None,
        );
        assert_eq!(error(quota).feedback(), Some(Feedback::Quota));
        for code in ["SendingPausedException", "AccountSuspendedException"] {
            let paused = error(classify(400, Some(code), "paused", None));
            assert_eq!(paused.feedback(), Some(Feedback::Paused), "{code}");
        }
        assert_eq!(
            classify(
                400,
                Some("SendingPausedException"),
                "tenant paused",
                Some("acme")
            ),
            Answer::TenantPaused("tenant paused".into())
        );
        // The account's suspension is the account's, whatever tenant the message had.
        let suspended = classify(400, Some("AccountSuspendedException"), "x", Some("acme"));
        assert_eq!(error(suspended).feedback(), Some(Feedback::Paused));
    }

    #[test]
    fn refusals_of_the_message_credentials_and_5xx() {
        for code in ["MessageRejected", "BadRequestException"] {
            let e = error(classify(
                400,
                Some(code),
                "Email address is not verified.",
                None,
            ));
            assert_eq!(
                e.reply(),
                Some((554, Some("5.6.0"), "Email address is not verified."))
            );
        }
        let mail_from = error(classify(
            400,
            Some("MailFromDomainNotVerifiedException"),
            "nope",
            None,
        ));
        assert_eq!(mail_from.reply(), Some((550, Some("5.7.1"), "nope")));
        for code in [
            "UnrecognizedClientException",
            "SignatureDoesNotMatch",
            "AccessDeniedException",
            "ExpiredToken",
        ] {
            let e = error(classify(403, Some(code), "bad key", None));
            assert!(
                matches!(e, UpstreamError::Credentials(ref t) if t.contains(code)),
                "{e:?}"
            );
        }
        for (status, code) in [(404, Some("NotFoundException")), (404, None)] {
            let e = error(classify(
                status,
                code,
                "Configuration set x does not exist.",
                None,
            ));
            let (code, enhanced, text) = e.reply().unwrap();
            assert_eq!((code, enhanced), (554, Some("5.3.5")));
            assert!(text.contains("does not exist"), "{text}");
        }
        let server = error(classify(503, Some("InternalFailure"), "SES is down", None));
        let (code, enhanced, text) = server.reply().unwrap();
        assert_eq!((code, enhanced), (451, Some("4.4.1")));
        assert!(text.contains("SES is down"), "{text}");
    }

    /// For a message sent as a tenant: SES not knowing the tenant, or the sender not
    /// associated with it, are told apart from other refusals of the same codes.
    #[test]
    fn a_tenant_unknown_and_an_identity_not_associated_are_told_apart() {
        let gone = "Tenant nope does not exist.";
        let acme = Some("acme");
        assert_eq!(
            classify(404, Some("NotFoundException"), gone, acme),
            Answer::TenantUnknown
        );
        let set = "Configuration set x does not exist.";
        let other = error(classify(404, Some("NotFoundException"), set, acme));
        assert_eq!(other.reply().map(|r| r.0), Some(554));
        let no_tenant = error(classify(404, Some("NotFoundException"), gone, None));
        assert_eq!(no_tenant.reply().map(|r| r.0), Some(554));
        let text = "Email identity a@x.example is not associated with tenant acme.";
        for code in ["BadRequestException", "MessageRejected"] {
            assert_eq!(classify(400, Some(code), text, acme), Answer::NotIdentity);
            let plain = error(classify(400, Some(code), "Bad Request", acme));
            assert_eq!(plain.reply().map(|r| r.0), Some(554), "{code}");
        }
    }
}
