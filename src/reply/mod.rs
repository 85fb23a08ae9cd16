//! The `Reply` type and the replies the relay writes that are not one admission step's own
//! (those are in `pipeline/admission/`), in one place so their codes stay consistent with
//! DESIGN.md: the dialogue's, the throttle's refusals, upstream's answer as the client gets it
//! (`upstream`). How a verdict becomes its reply is the pipeline's (`pipeline/answer.rs`).

use std::borrow::Cow;
use std::time::Duration;

use smallvec::{smallvec, SmallVec};

use crate::throttle::ThrottleError;

pub use reputation::suppressed;
pub use senders::{identity_refused, sender_not_allowed};
pub use upstream::upstream_verdict;

/// The lines of a reply. Most replies are one line of fixed text, which this holds with no
/// allocation: every command of every message gets one.
pub type Lines = SmallVec<[Cow<'static, str>; 1]>;

/// One SMTP reply, possibly multi-line. `esc` is the enhanced status code (RFC 3463),
/// repeated on every line as RFC 2034 asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub code: u16,
    pub esc: &'static str,
    pub lines: Lines,
}

impl Reply {
    pub fn new(code: u16, esc: &'static str, text: impl Into<Cow<'static, str>>) -> Reply {
        Reply {
            code,
            esc,
            lines: smallvec![text.into()],
        }
    }

    /// A reply whose enhanced code is given inside the text (upstream's own).
    pub fn raw(code: u16, text: impl Into<Cow<'static, str>>) -> Reply {
        Reply::new(code, "", text)
    }

    /// The reply on one line, as a log or a webhook shows it: `250 2.0.0 Ok ...`.
    pub fn text(&self) -> String {
        match self.esc {
            "" => format!("{} {}", self.code, self.lines.join(" ")),
            esc => format!("{} {esc} {}", self.code, self.lines.join(" ")),
        }
    }

    /// Appends the reply in wire form. CR and LF inside a text (from upstream) are replaced
    /// so a reply can never be split into two.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        // Straight into `out`, with no text built on the side and no formatting machinery:
        // every command's reply passes here.
        let code = [
            b'0' + (self.code / 100 % 10) as u8,
            b'0' + (self.code / 10 % 10) as u8,
            b'0' + (self.code % 10) as u8,
        ];
        let last = self.lines.len().saturating_sub(1);
        for (i, line) in self.lines.iter().enumerate() {
            out.extend_from_slice(&code);
            out.push(if i == last { b' ' } else { b'-' });
            let text = out.len();
            if !self.esc.is_empty() {
                out.extend_from_slice(self.esc.as_bytes());
                out.push(b' ');
            }
            let start = out.len();
            out.extend_from_slice(line.as_bytes());
            for b in &mut out[start..] {
                if matches!(*b, b'\r' | b'\n') {
                    *b = b' ';
                }
            }
            let kept = trimmed_len(&out[text..]);
            out.truncate(text + kept);
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// The length of `text` (a `str` with ASCII bytes replaced: still UTF-8) without its trailing
/// white space, as `str::trim_end` has it; ASCII bytes, most texts' last, without decoding.
fn trimmed_len(text: &[u8]) -> usize {
    let mut len = text.len();
    while let Some(&b) = text[..len].last() {
        if !b.is_ascii() {
            return std::str::from_utf8(&text[..len]).map_or(0, |t| t.trim_end().len());
        }
        if !char::from(b).is_whitespace() {
            break;
        }
        len -= 1;
    }
    len
}

pub fn greeting(hostname: &str) -> Reply {
    Reply::raw(220, format!("{hostname} ESMTP mailsluice"))
}
pub fn ok() -> Reply {
    Reply::new(250, "2.0.0", "Ok")
}
pub fn bye() -> Reply {
    Reply::new(221, "2.0.0", "Bye")
}
pub fn start_data() -> Reply {
    Reply::raw(354, "End data with <CR><LF>.<CR><LF>")
}
pub fn too_many_connections() -> Reply {
    Reply::new(421, "4.3.2", "Too many connections, try again later")
}
pub fn shutting_down() -> Reply {
    Reply::new(421, "4.3.2", "Service shutting down, try again later")
}
/// The shutdown's grace ended before upstream answered: the message may have arrived.
pub fn grace_over() -> Reply {
    Reply::new(
        421,
        "4.3.2",
        "Service shutting down before upstream answered; the message may have been delivered",
    )
}
pub fn idle_timeout() -> Reply {
    Reply::new(421, "4.4.2", "Idle for too long, closing connection")
}
pub fn auth_required() -> Reply {
    Reply::new(530, "5.7.0", "Authentication required")
}
pub fn too_many_recipients(max: usize) -> Reply {
    Reply::new(
        452,
        "4.5.3",
        format!("Too many recipients (at most {max} per message)"),
    )
}
pub fn message_too_big(max: usize) -> Reply {
    Reply::new(
        552,
        "5.3.4",
        format!("Message size exceeds fixed limit of {max} bytes"),
    )
}
pub fn line_too_long(max: usize) -> Reply {
    Reply::new(500, "5.5.2", format!("Line too long (at most {max} bytes)"))
}
pub fn unknown_command() -> Reply {
    Reply::new(500, "5.5.2", "Command not recognized")
}
pub fn syntax_error(detail: &str) -> Reply {
    Reply::new(501, "5.5.4", format!("Syntax error: {detail}"))
}
pub fn bad_sender_syntax() -> Reply {
    Reply::new(501, "5.1.7", "Bad sender address syntax")
}
pub fn bad_recipient_syntax() -> Reply {
    Reply::new(501, "5.1.3", "Bad recipient address syntax")
}
/// A valid address we do not pass on: one a lax next hop could read as something else.
pub fn address_not_relayed(esc: &'static str) -> Reply {
    Reply::new(553, esc, "Address with < or > inside quotes is not relayed")
}
pub fn invalid_parameter(param: &str) -> Reply {
    Reply::new(501, "5.5.4", format!("Invalid value for parameter {param}"))
}
/// RFC 5321 4.1.1.11: a parameter we do not offer is refused, never taken and dropped.
pub fn unsupported_parameter(param: &str) -> Reply {
    Reply::new(555, "5.5.4", format!("Unsupported parameter {param}"))
}
pub fn bad_sequence(detail: &str) -> Reply {
    Reply::new(503, "5.5.1", detail.to_string())
}
pub fn not_implemented(verb: &str) -> Reply {
    Reply::new(502, "5.5.1", format!("{verb} not implemented"))
}
pub fn bare_newline() -> Reply {
    Reply::new(
        550,
        "5.6.0",
        "Message contains a bare CR or LF (RFC 5321 2.3.8); not relayed",
    )
}
pub fn nul_in_data() -> Reply {
    Reply::new(
        550,
        "5.6.0",
        "Message contains a NUL byte (RFC 5322 forbids it); not relayed",
    )
}
/// The first line of the header section continues a field that is not there: it would
/// continue the last field the relay writes in front of the message.
pub fn leading_continuation() -> Reply {
    Reply::new(
        550,
        "5.6.0",
        "Message starts with a continuation line (space or tab); not relayed",
    )
}
pub fn bare_newline_in_command() -> Reply {
    syntax_error("a command ends with CRLF and holds no other CR or LF")
}
pub fn invalid_utf8() -> Reply {
    syntax_error("command is not valid UTF-8")
}
pub fn too_many_connections_from_address() -> Reply {
    Reply::new(
        421,
        "4.7.0",
        "Too many connections from your address, try again later",
    )
}
pub fn too_many_errors() -> Reply {
    Reply::new(421, "4.7.0", "Too many errors, closing connection")
}
pub fn data_timeout() -> Reply {
    Reply::new(421, "4.4.2", "DATA took too long, closing connection")
}
pub fn ready_for_tls() -> Reply {
    Reply::new(220, "2.0.0", "Ready to start TLS")
}
pub fn encryption_required() -> Reply {
    Reply::new(
        538,
        "5.7.11",
        "Encryption required for requested authentication mechanism",
    )
}
pub fn auth_succeeded() -> Reply {
    Reply::new(235, "2.7.0", "Authentication successful")
}
pub fn auth_failed() -> Reply {
    Reply::new(535, "5.7.8", "Authentication credentials invalid")
}
pub fn auth_locked_out() -> Reply {
    Reply::new(
        421,
        "4.7.0",
        "Too many failed authentication attempts, try again later",
    )
}
pub fn upstream_unavailable() -> Reply {
    Reply::new(451, "4.4.1", "Upstream unavailable, try again later")
}
/// Upstream refused the relay's own credentials: the client keeps the message and retries.
pub fn upstream_credentials() -> Reply {
    Reply::new(451, "4.7.0", "Upstream refused the relay's credentials")
}
/// The relay found no credentials to give upstream (none in the environment, profile or
/// role the AWS SDK looks at): nothing went, and upstream refused nothing.
pub fn upstream_no_credentials() -> Reply {
    Reply::new(451, "4.7.0", "The relay has no credentials for upstream")
}
/// The message went upstream whole, and its answer never came: it may have been delivered.
pub fn upstream_uncertain() -> Reply {
    Reply::new(
        451,
        "4.4.1",
        "No answer from upstream after the message was sent; it may have been delivered",
    )
}
/// The shared rate-limit store (Redis) is unreachable and the layer says `on_error = "reject"`.
pub fn store_unavailable() -> Reply {
    Reply::new(
        451,
        "4.4.3",
        "Rate-limit store unavailable, try again later",
    )
}

pub fn rate_limited(layer: &str, retry_after: Duration) -> Reply {
    Reply::new(
        451,
        "4.7.1",
        format!(
            "Rate limit of layer {layer} reached, {}",
            retry_after_text(retry_after)
        ),
    )
}
/// Upstream kept throttling a message until its wait budget ran out.
pub fn upstream_rate_limited(retry_after: Duration) -> Reply {
    Reply::new(
        451,
        "4.7.1",
        format!(
            "Upstream rate limit reached, {}",
            retry_after_text(retry_after)
        ),
    )
}
/// Routes are configured and none is for this message: a configuration gap the operator must
/// see, so temporary (the client retries once it is fixed), never a silent drop.
pub fn no_route() -> Reply {
    Reply::new(451, "4.3.5", "No route for this message")
}
/// Upstream's sending quota is used up: nothing goes until the pause ends.
pub fn upstream_quota_exhausted(retry_after: Duration) -> Reply {
    Reply::new(
        451,
        "4.7.1",
        format!(
            "Upstream sending quota exhausted, {}",
            retry_after_text(retry_after)
        ),
    )
}
pub fn cost_over_burst(layer: &str, cost: u64, burst: u64) -> Reply {
    Reply::new(
        554,
        "5.5.3",
        format!(
            "Message costs {cost} tokens but layer {layer} holds at most {burst}; \
             it can never pass: send it with fewer recipients"
        ),
    )
}

/// A message the throttle would not let go.
pub fn throttle_refusal(error: &ThrottleError) -> Reply {
    match error {
        ThrottleError::Limited {
            layer, retry_after, ..
        } => rate_limited(layer, *retry_after),
        ThrottleError::CostOverBurst { layer, cost, burst } => {
            cost_over_burst(layer, *cost, *burst)
        }
        ThrottleError::Shutdown => shutting_down(),
        ThrottleError::StoreUnavailable => store_unavailable(),
    }
}

/// Formats a retry hint the way DESIGN.md pins it: seconds with millisecond precision.
pub fn retry_after_text(wait: Duration) -> String {
    let ms = wait.as_millis().max(1);
    format!("retry after {}.{:03} s", ms / 1000, ms % 1000)
}

pub fn bdat_closing() -> Reply {
    Reply::new(
        421,
        "4.7.0",
        "BDAT chunk not read, closing connection (use DATA)",
    )
}
pub fn too_many_junk_commands() -> Reply {
    Reply::new(
        421,
        "4.7.0",
        "Too many commands without a message, closing connection",
    )
}
/// A message held in the spool (hold mode): the relay owns it now.
pub fn held(id: &str) -> Reply {
    Reply::new(
        250,
        "2.0.0",
        format!("Ok: queued as {id} (held for later delivery)"),
    )
}
pub fn insufficient_storage() -> Reply {
    Reply::new(452, "4.3.1", "Insufficient system storage, try again later")
}
pub fn sender_ok() -> Reply {
    Reply::new(250, "2.1.0", "Sender ok")
}
pub fn recipient_ok() -> Reply {
    Reply::new(250, "2.1.5", "Recipient ok")
}
pub fn empty_recipient() -> Reply {
    Reply::new(501, "5.1.3", "Empty recipient address")
}
/// DATA after every RCPT was refused.
pub fn no_valid_recipients() -> Reply {
    Reply::new(554, "5.5.1", "No valid recipients")
}
pub fn tls_already_active() -> Reply {
    bad_sequence("TLS already active")
}
pub fn unrecognized_auth_type() -> Reply {
    Reply::new(504, "5.5.4", "Unrecognized authentication type")
}
pub fn auth_cancelled() -> Reply {
    Reply::new(501, "5.0.0", "Authentication cancelled")
}
pub fn help() -> Reply {
    Reply::new(
        214,
        "2.0.0",
        "mailsluice relays mail: EHLO HELO MAIL RCPT DATA RSET NOOP QUIT VRFY HELP",
    )
}
/// VRFY: a relay cannot verify mailboxes it does not own; 252 is RFC 5321 3.5.3's answer for
/// "will accept and try".
pub fn cannot_vrfy() -> Reply {
    Reply::new(
        252,
        "2.5.0",
        "Cannot VRFY user, but will accept message and attempt delivery",
    )
}

mod reputation;
mod senders;
#[cfg(test)]
mod tests;
mod upstream;
