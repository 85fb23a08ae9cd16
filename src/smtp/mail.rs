//! MAIL FROM: opens a transaction. Relay permission is decided here (RFC 5321 leaves it to
//! the server; refusing at MAIL spares the client sending recipients and data for nothing).
//! MAIL and RCPT lines are read by `path`, not smtp-proto, so the envelope stays as written.

use super::client::Client;
use super::path::{self, Param, PathError};
use super::reputation;
use super::session::Session;
use super::transaction::Transaction;
use crate::message::Envelope;
use crate::reply::{self, Reply};
use crate::state::context::Context;
use crate::{pipeline, policy};

/// What MAIL's parameters ask for.
#[derive(Debug, Default, PartialEq, Eq)]
struct MailParams<'a> {
    /// The `SIZE=` declared: digits, as many as the client wrote.
    size: Option<&'a str>,
    smtputf8: bool,
    body_8bit: bool,
}

impl Session {
    /// Runs `line` if it is a MAIL or RCPT command (returns false for any other verb).
    pub async fn envelope_command(&mut self, line: &[u8]) -> bool {
        let text = std::str::from_utf8(line).unwrap_or_default();
        let text = text.strip_suffix("\r\n").unwrap_or(text);
        let (verb, rest) = text.split_once(' ').unwrap_or((text, ""));
        if verb.eq_ignore_ascii_case("MAIL") {
            self.mail(rest).await;
        } else if verb.eq_ignore_ascii_case("RCPT") {
            self.rcpt(rest).await;
        } else {
            return false;
        }
        true
    }

    async fn mail(&mut self, rest: &str) {
        let Some(rest) = path::after_keyword(rest, "FROM") else {
            return self.reply(reply::syntax_error(
                "expected MAIL FROM:<reverse-path> [parameters]",
            ));
        };
        let line = match path::parse(rest) {
            // `<postmaster>` without a domain is a recipient only (RFC 5321 4.5.1).
            Ok(line) if path::is_postmaster(line.mailbox) => {
                return self.reply(reply::bad_sender_syntax())
            }
            Ok(line) => line,
            Err(PathError::Syntax) => return self.reply(reply::bad_sender_syntax()),
            Err(PathError::Parameters) => {
                return self.reply(reply::syntax_error("malformed parameter"))
            }
            Err(PathError::AngleInQuotes) => {
                return self.reply(reply::address_not_relayed("5.1.7"))
            }
        };
        let params = match mail_params(&line.params) {
            Ok(params) => params,
            Err(refusal) => return self.reply(refusal),
        };
        if self.transaction.is_some() {
            return self.reply(reply::bad_sequence("Nested MAIL command"));
        }
        // A transaction runs whole on the newest config (SIGHUP); one in flight keeps its own.
        self.ctx = self.ctx.latest();
        if !self.client.may_relay() {
            return self.reply(reply::auth_required());
        }
        let max = self.ctx.setup.config.max_message_bytes();
        if params.size.is_some_and(|size| size_over(size, max)) {
            return self.reply(reply::message_too_big(max));
        }
        // `<>` is the null sender of bounces: it must stay null upstream.
        let from = (!line.mailbox.is_empty()).then(|| line.mailbox.to_string());
        if let Some(refusal) = sender_outside(&self.client, from.as_deref()) {
            return self.reply(refusal);
        }
        if let Some(refusal) = identity_at_mail(&self.ctx, &self.client, from.as_deref()) {
            return self.reply(refusal);
        }
        let paused = reputation::at_mail(&self.ctx, &self.client, from.as_deref()).await;
        if let Some(refusal) = paused {
            return self.reply(refusal);
        }
        self.transaction = Some(Transaction::open(Envelope {
            from,
            rcpts: Vec::new(),
            smtputf8: params.smtputf8,
            body_8bit: params.body_8bit,
        }));
        self.reply(reply::sender_ok());
    }
}

/// The refusal of a sender outside the AUTH user's `senders`. The null sender of a bounce
/// claims no one (its `From:` is checked at the final dot).
fn sender_outside(client: &Client, from: Option<&str>) -> Option<Reply> {
    let binding = client.auth()?.binding.as_ref()?;
    let from = from.filter(|from| !binding.senders.allow(from))?;
    tracing::info!(
        target: "mailsluice::senders",
        peer = %client.peer(),
        user = binding.user.as_str(),
        "sender.refused at MAIL"
    );
    Some(reply::sender_not_allowed(from, &binding.user))
}

/// The refusal of a sender that is no sending identity of its route's upstream tenant (or of
/// a tenant upstream does not know), when the route is known at MAIL; else the final dot
/// asks. Read from what the upstream learned before: never a wait for upstream.
fn identity_at_mail(ctx: &Context, client: &Client, from: Option<&str>) -> Option<Reply> {
    let from = from?;
    let envelope = Envelope {
        from: Some(from.to_string()),
        ..Envelope::default()
    };
    let facts = client.submitter().facts(&envelope, &[]);
    let route = policy::route_early(ctx.rules(), &facts)?;
    let tenant = route.upstream_tenant.as_deref()?;
    let upstream = ctx.setup.upstreams.get(&route.upstream)?;
    let refusal = pipeline::sender_identity(ctx, upstream, tenant, from).err()?;
    tracing::info!(
        target: "mailsluice::upstream",
        peer = %client.peer(),
        tenant,
        "ses.sender_refused at MAIL"
    );
    Some(reply::identity_refused(&refusal))
}

/// Takes only what EHLO offers: SIZE, BODY=7BIT or 8BITMIME, SMTPUTF8, and AUTH= (which RFC
/// 4954 5 lets a server that does not trust it ignore). Anything else (DSN's RET and ENVID,
/// BODY=BINARYMIME without CHUNKING, ...) is refused rather than taken and lost upstream.
fn mail_params<'a>(params: &[Param<'a>]) -> Result<MailParams<'a>, Reply> {
    let mut out = MailParams::default();
    for p in params {
        let keyword = p.keyword.to_ascii_uppercase();
        match (keyword.as_str(), p.value) {
            ("SIZE", Some(v)) if v.bytes().all(|b| b.is_ascii_digit()) => out.size = Some(v),
            ("BODY", Some(v)) if v.eq_ignore_ascii_case("7BIT") => {}
            ("BODY", Some(v)) if v.eq_ignore_ascii_case("8BITMIME") => out.body_8bit = true,
            ("BODY", Some(v)) if v.eq_ignore_ascii_case("BINARYMIME") => {
                return Err(reply::unsupported_parameter("BODY=BINARYMIME"))
            }
            ("SMTPUTF8", None) => out.smtputf8 = true,
            ("AUTH", Some(_)) => {}
            ("SIZE" | "BODY" | "SMTPUTF8" | "AUTH", _) => return Err(bad(&keyword)),
            _ => return Err(reply::unsupported_parameter(&keyword)),
        }
    }
    Ok(out)
}

fn bad(keyword: &str) -> Reply {
    reply::invalid_parameter(keyword)
}

/// Whether a `SIZE=` value (digits, any number of them) is over `max`. A value past `u64` is
/// over any limit: it never wraps around to a small one.
fn size_over(digits: &str, max: usize) -> bool {
    let digits = digits.trim_start_matches('0');
    digits
        .parse::<u64>()
        .map_or(!digits.is_empty(), |n| n > max as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_is_compared_whatever_its_length() {
        assert!(!size_over("1000", 1000));
        assert!(!size_over("0001000", 1000));
        assert!(!size_over("000", 1000));
        assert!(size_over("1001", 1000));
        for digits in 19..=60 {
            assert!(size_over(&"9".repeat(digits), 1000), "{digits}");
            assert_eq!(size_over(&"1".repeat(digits), usize::MAX), digits > 20);
        }
    }

    #[test]
    fn only_offered_parameters_are_taken() {
        let p = |keyword, value| Param { keyword, value };
        let got = mail_params(&[p("size", Some("12")), p("Body", Some("8bitmime"))]).unwrap();
        assert_eq!((got.size, got.body_8bit), (Some("12"), true));
        for (keyword, value, code) in [
            ("SIZE", Some("1x"), 501),
            ("SIZE", None, 501),
            ("SMTPUTF8", Some("1"), 501),
            ("BODY", Some("BINARYMIME"), 555),
            ("RET", Some("FULL"), 555),
            ("ENVID", Some("x"), 555),
        ] {
            let refused = mail_params(&[p(keyword, value)]).unwrap_err();
            assert_eq!(refused.code, code, "{keyword}");
        }
    }
}
