//! The `Reply` type and the replies the relay writes that are not one admission step's own
//! (those are in `pipeline/admission/`), in one place so their codes stay consistent with
//! DESIGN.md: the dialogue's (`dialogue`), the throttle's refusals, upstream's answer as the client gets it
//! (`upstream`). How a verdict becomes its reply is the pipeline's (`pipeline/answer.rs`).

use std::borrow::Cow;
use std::time::Duration;

use smallvec::{smallvec, SmallVec};

use crate::throttle::ThrottleError;

pub use dialogue::*;
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

mod dialogue;
mod reputation;
mod senders;
#[cfg(test)]
mod tests;
mod upstream;
