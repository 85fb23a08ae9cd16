//! Upstream's answer as the client gets it: its class kept, its text passed on, printable.

use super::{
    upstream_credentials, upstream_no_credentials, upstream_unavailable, upstream_uncertain, Reply,
};
use crate::upstream::reply::split_enhanced;
use crate::upstream::{Accepted, UpstreamError};

/// Upstream's answer as the client sees it: the class is kept and upstream's text passed on,
/// printable ASCII only (see [`printable`]). A 421 becomes 451: from us, 421 would tell the
/// client that *this* connection is closing.
pub fn upstream_verdict(result: &Result<Accepted, UpstreamError>) -> Reply {
    match result {
        Ok(accepted) => {
            let text = printable(accepted.text.trim());
            match split_enhanced(&text) {
                Some(_) => Reply::raw(250, text),
                None => Reply::new(250, "2.0.0", text),
            }
        }
        Err(UpstreamError::Unavailable(_)) => upstream_unavailable(),
        Err(UpstreamError::Uncertain(_)) => upstream_uncertain(),
        Err(UpstreamError::Credentials(_)) => upstream_credentials(),
        Err(UpstreamError::NoCredentials(_)) => upstream_no_credentials(),
        Err(refused) => {
            let (code, enhanced, text) = refused.reply().expect("a refusal has a reply");
            let code = match code {
                421 => 451,
                c @ 400..=599 => c,
                _ => 451,
            };
            let (found, rest) = match split_enhanced(text) {
                Some((esc, rest)) => (Some(esc), rest),
                None => (None, text.trim()),
            };
            let default = if code >= 500 { "5.0.0" } else { "4.0.0" };
            let esc = enhanced.or(found).unwrap_or(default);
            // Upstream's enhanced code must agree with the (possibly remapped) class.
            let esc = format!("{}{}", code / 100, esc.get(1..).unwrap_or(".0.0"));
            Reply::raw(code, format!("{esc} upstream: {}", printable(rest)))
        }
    }
}

/// Upstream's text (an SMTP reply's, SES's error text or MessageId) as the relay passes it
/// on: printable ASCII, every other character `?` (a tab a space). Upstream is any host for
/// `mx://`, and an escape sequence or a NUL in a reply would reach the client's terminal and
/// logs as it is.
pub fn printable(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            ' '..='~' => c,
            '\t' => ' ',
            _ => '?',
        })
        .collect()
}
