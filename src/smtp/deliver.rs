//! The final dot: charge the message to its buckets (waiting or refusing), trace it, pass it
//! upstream, and relay upstream's verdict; tokens of a message upstream refused go back. The
//! client gets `250` only after upstream accepted (pass-through, never store-and-forward), so
//! a crash here loses nothing: the client still holds the message.

use std::time::SystemTime;

use super::received::{self, Trace};
use super::reply::{self, Reply};
use super::session::{Flow, Session};
use crate::policy::{self, MessageFacts};
use crate::throttle::{Permit, ThrottleError};
use crate::upstream::{Accepted, Envelope, UpstreamError};

impl Session {
    pub async fn deliver(&mut self, envelope: Envelope, body: Vec<u8>) -> Flow {
        let permit = match self.take_tokens(&envelope, &body).await {
            Ok(permit) => permit,
            Err(flow) => return flow,
        };
        let body = policy::strip_key_headers(&self.ctx.layers, body);
        let message = self.traced(&envelope, &body);
        let result = self.ctx.forwarder.forward(&envelope, &message).await;
        match (permit, &result) {
            (Some(permit), Ok(_)) => permit.delivered(),
            (Some(permit), Err(_)) => permit.upstream_failed(),
            (None, _) => {}
        }
        self.reply(upstream_reply(&result));
        Flow::Continue
    }

    /// Charges the message to its layers, holding the client (FIFO per key) while the buckets
    /// refill. `Err` carries how the session goes on after a refusal, already answered. While
    /// it waits the connection is watched: a client that closes it has abandoned the message,
    /// which then leaves the queue, takes nothing and is not forwarded, so a client that saw a
    /// failure never finds the message delivered too.
    async fn take_tokens(
        &mut self,
        envelope: &Envelope,
        body: &[u8],
    ) -> Result<Option<Permit>, Flow> {
        let facts = MessageFacts {
            auth_tenant: None,
            sender: envelope.from.as_deref(),
            rcpts: &envelope.rcpts,
            client_ip: self.peer.ip(),
            message: body,
        };
        let charges = policy::charges(&self.ctx.layers, &facts);
        if charges.is_empty() {
            return Ok(None);
        }
        let throttle = self.ctx.throttle.clone();
        let outcome = tokio::select! {
            outcome = throttle.acquire(charges) => outcome,
            _ = self.conn.closed() => {
                tracing::info!(peer = %self.peer, "client left while waiting; message abandoned");
                return Err(Flow::Close);
            }
        };
        match outcome {
            Ok(permit) => Ok(Some(permit)),
            Err(ThrottleError::Limited {
                layer, retry_after, ..
            }) => {
                self.reply(reply::rate_limited(&layer, retry_after));
                Err(Flow::Continue)
            }
            Err(ThrottleError::CostOverBurst { layer, cost, burst }) => {
                self.reply(reply::cost_over_burst(&layer, cost, burst));
                Err(Flow::Continue)
            }
            Err(ThrottleError::Shutdown) => {
                self.reply(reply::shutting_down());
                Err(Flow::Close)
            }
            Err(ThrottleError::StoreUnavailable) => {
                self.reply(reply::store_unavailable());
                Err(Flow::Continue)
            }
        }
    }

    /// The message with our `Received:` header in front.
    fn traced(&self, envelope: &Envelope, body: &[u8]) -> Vec<u8> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let helo = self
            .greeting
            .as_ref()
            .map(|g| g.name.as_str())
            .unwrap_or("");
        let esmtp = self.greeting.as_ref().is_some_and(|g| g.esmtp);
        let trace = Trace {
            helo,
            peer: self.peer.ip(),
            hostname: &self.ctx.config.smtp.hostname,
            protocol: if esmtp { "ESMTP" } else { "SMTP" },
            id: &id[..16],
            for_rcpt: match envelope.rcpts.as_slice() {
                [one] => Some(one.as_str()),
                _ => None,
            },
        };
        let mut message = received::header(&trace, SystemTime::now());
        message.extend_from_slice(body);
        message
    }
}

/// Upstream's answer as the client sees it: the class is kept and upstream's text passed on.
/// A 421 becomes 451: from us, 421 would tell the client that *this* connection is closing.
pub fn upstream_reply(result: &Result<Accepted, UpstreamError>) -> Reply {
    match result {
        Ok(accepted) => with_status(250, "2.0.0", &accepted.text),
        Err(UpstreamError::Rejected {
            code,
            enhanced,
            text,
        }) => {
            let code = match *code {
                421 => 451,
                c @ 400..=599 => c,
                _ => 451,
            };
            let (found, rest) = split_status(text);
            let esc = enhanced.as_deref().or(found).unwrap_or(if code >= 500 {
                "5.0.0"
            } else {
                "4.0.0"
            });
            // Upstream's enhanced code must agree with the (possibly remapped) class.
            let esc = format!("{}{}", code / 100, esc.get(1..).unwrap_or(".0.0"));
            Reply::raw(code, format!("{esc} upstream: {rest}"))
        }
        Err(UpstreamError::Unavailable(_)) => reply::upstream_unavailable(),
    }
}

/// Prefixes `esc` unless the text already starts with an enhanced status code.
fn with_status(code: u16, esc: &'static str, text: &str) -> Reply {
    match split_status(text) {
        (Some(_), _) => Reply::raw(code, text.trim()),
        (None, rest) => Reply::new(code, esc, rest),
    }
}

/// Splits a leading enhanced status code (`4.2.1`) off a reply text.
fn split_status(text: &str) -> (Option<&str>, &str) {
    let text = text.trim();
    let (first, rest) = text.split_once(' ').unwrap_or((text, ""));
    let parts: Vec<&str> = first.split('.').collect();
    let is_status = parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()));
    if is_status {
        (Some(first), rest.trim_start())
    } else {
        (None, text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(r: &Reply) -> String {
        let mut out = Vec::new();
        r.write_to(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn accepted_keeps_upstream_id() {
        let r = upstream_reply(&Ok(Accepted {
            text: "Ok 0100018c-abc".into(),
        }));
        assert_eq!(wire(&r), "250 2.0.0 Ok 0100018c-abc\r\n");
    }

    #[test]
    fn rejections_keep_class_and_text() {
        let r = upstream_reply(&Err(UpstreamError::Rejected {
            code: 554,
            enhanced: Some("5.7.1".into()),
            text: "Message rejected: Email address is not verified.".into(),
        }));
        assert_eq!(
            wire(&r),
            "554 5.7.1 upstream: Message rejected: Email address is not verified.\r\n"
        );
        let r = upstream_reply(&Err(UpstreamError::Rejected {
            code: 421,
            enhanced: None,
            text: "closing".into(),
        }));
        assert!(wire(&r).starts_with("451 4.0.0 upstream: closing"));
    }

    #[test]
    fn unavailable_is_451_4_4_1() {
        let r = upstream_reply(&Err(UpstreamError::Unavailable("refused".into())));
        assert!(wire(&r).starts_with("451 4.4.1 "));
    }
}
