//! The final dot: charge the message to its buckets (waiting or refusing), trace it, pass it
//! upstream, and relay upstream's verdict; tokens of a message upstream refused go back. The
//! client gets `250` only after upstream accepted (pass-through, never store-and-forward), so
//! a crash here loses nothing: the client still holds the message.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::received::{self, Trace};
use super::reply::{self, Reply};
use super::session::{Flow, Session};
use crate::metrics::Outcome;
use crate::policy::{self, MessageFacts};
use crate::throttle::{Permit, ThrottleError};
use crate::upstream::{Accepted, Envelope, UpstreamError};

/// What one message came to, for its log line and the metrics.
struct Record {
    outcome: Outcome,
    /// The layer and key that decided a refusal, or the first charge of a granted message.
    layer: String,
    key: String,
    cost: u64,
    waited: Duration,
}

impl Session {
    pub async fn deliver(&mut self, envelope: Envelope, body: Vec<u8>) -> Flow {
        let started = Instant::now();
        let (permit, mut record) = match self.take_tokens(&envelope, &body).await {
            Ok(granted) => granted,
            Err((flow, record)) => {
                self.log_message(&envelope, &record, started, None);
                return flow;
            }
        };
        let body = policy::strip_key_headers(&self.ctx.layers, body);
        let message = self.traced(&envelope, &body);
        let upstream_started = Instant::now();
        let result = self.ctx.forwarder.forward(&envelope, &message).await;
        self.ctx.metrics.upstream(upstream_started.elapsed());
        match (permit, &result) {
            (Some(permit), Ok(_)) => permit.delivered(),
            (Some(permit), Err(_)) => permit.upstream_failed(),
            (None, _) => {}
        }
        let reply = upstream_reply(&result);
        record.outcome = match &result {
            Ok(_) => Outcome::Delivered,
            Err(UpstreamError::Unavailable(_)) => Outcome::UpstreamUnavailable,
            Err(UpstreamError::Uncertain(_)) => Outcome::UpstreamUncertain,
            Err(UpstreamError::Rejected { code, .. }) if *code >= 500 => Outcome::UpstreamPermFail,
            Err(UpstreamError::Rejected { .. }) => Outcome::UpstreamTempFail,
        };
        self.log_message(&envelope, &record, started, Some(&reply));
        self.verdict(reply);
        Flow::Continue
    }

    /// One info line per message (no content, no addresses beyond the envelope's counts) and
    /// its outcome counted.
    fn log_message(
        &self,
        envelope: &Envelope,
        record: &Record,
        started: Instant,
        reply: Option<&Reply>,
    ) {
        self.ctx.metrics.message(record.outcome);
        let upstream = reply.map(|r| format!("{} {}", r.code, r.lines.join(" ")));
        tracing::info!(
            target: "mailsluice::message",
            outcome = record.outcome.as_str(),
            layer = %record.layer,
            key = %record.key,
            cost = record.cost,
            waited_ms = record.waited.as_millis() as u64,
            duration_ms = started.elapsed().as_millis() as u64,
            rcpts = envelope.rcpts.len(),
            upstream = upstream.as_deref().unwrap_or(""),
            peer = %self.peer,
            "message"
        );
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
    ) -> Result<(Option<Permit>, Record), (Flow, Record)> {
        let facts = MessageFacts {
            auth_tenant: self.auth.as_ref().map(|u| u.tenant.as_str()),
            // An authenticated client has its user's rights, whatever its address.
            header_trusted: match &self.auth {
                Some(user) => user.trust_key_header,
                None => self.trusted,
            },
            sender: envelope.from.as_deref(),
            rcpts: &envelope.rcpts,
            client_ip: self.peer.ip(),
            message: body,
        };
        let charges = policy::charges(&self.ctx.layers, &facts);
        let mut record = Record {
            outcome: Outcome::Delivered,
            layer: charges
                .first()
                .map(|c| self.ctx.layers[c.layer].name.clone())
                .unwrap_or_default(),
            key: charges.first().map(|c| c.key.clone()).unwrap_or_default(),
            cost: charges.first().map_or(0, |c| c.cost),
            waited: Duration::ZERO,
        };
        if charges.is_empty() {
            return Ok((None, record));
        }
        let throttle = self.ctx.throttle.clone();
        // Biased: a message the buckets let through at once goes, as it would with no layer
        // at all, even if the client already half-closed after a pipelined QUIT; only a
        // real wait is abandoned when the client leaves.
        let arrived = Instant::now();
        let outcome = tokio::select! {
            biased;
            outcome = throttle.acquire(charges) => outcome,
            _ = self.conn.closed() => {
                record.outcome = Outcome::Abandoned;
                record.waited = arrived.elapsed();
                return Err((Flow::Close, record));
            }
        };
        let (flow, outcome) = match outcome {
            Ok(permit) => {
                record.waited = permit.waited();
                for charge in permit.charges() {
                    self.ctx
                        .metrics
                        .waited(&self.ctx.layers[charge.layer].name, permit.waited());
                }
                return Ok((Some(permit), record));
            }
            Err(ThrottleError::Limited {
                layer,
                key,
                retry_after,
            }) => {
                self.ctx.metrics.throttled(&layer);
                self.verdict(reply::rate_limited(&layer, retry_after));
                (record.layer, record.key) = (layer, key);
                (Flow::Continue, Outcome::Throttled)
            }
            Err(ThrottleError::CostOverBurst { layer, cost, burst }) => {
                self.verdict(reply::cost_over_burst(&layer, cost, burst));
                record.layer = layer;
                (Flow::Continue, Outcome::Rejected)
            }
            Err(ThrottleError::Shutdown) => {
                self.reply(reply::shutting_down());
                (Flow::Close, Outcome::Shutdown)
            }
            Err(ThrottleError::StoreUnavailable) => {
                self.verdict(reply::store_unavailable());
                (Flow::Continue, Outcome::StoreUnavailable)
            }
        };
        record.outcome = outcome;
        record.waited = arrived.elapsed();
        Err((flow, record))
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
        // RFC 3848: S for TLS, A for AUTH.
        let protocol = match (
            esmtp || self.tls || self.auth.is_some(),
            self.tls,
            self.auth.is_some(),
        ) {
            (false, _, _) => "SMTP",
            (true, false, false) => "ESMTP",
            (true, true, false) => "ESMTPS",
            (true, false, true) => "ESMTPA",
            (true, true, true) => "ESMTPSA",
        };
        let trace = Trace {
            helo,
            peer: self.peer.ip(),
            hostname: &self.ctx.config.smtp.hostname,
            protocol,
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
        Err(UpstreamError::Uncertain(_)) => reply::upstream_uncertain(),
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
        let r = upstream_reply(&Err(UpstreamError::Uncertain("timed out".into())));
        assert!(wire(&r).starts_with("451 4.4.1 "));
        assert!(wire(&r).contains("may have been delivered"), "{}", wire(&r));
    }
}
