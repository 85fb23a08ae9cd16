//! One message's transaction on one connection: our checks before anything is sent, then
//! MAIL, RCPT, DATA (pipelined when upstream offers it, `pipeline.rs`), the body and the
//! final dot, each step under the timeout. Played by `smtp://` and by each domain's share of
//! an `mx://` message. Upstream's refusals are classified here, where they become
//! [`UpstreamError`]s.

use std::time::Duration;

use super::wire::{
    bad, dot_after_bare_line_break, mail_line, path, rcpt_line, stuffed, stuffed_slices, MailParams,
};
use crate::upstream::client::{Client, ClientError, Unsent, HOLD};
use crate::upstream::reply::{rejected, smtp_error, unavailable};
use crate::upstream::{Accepted, Classifier, Envelope, UpstreamError};

/// The SMTP step at which a transaction failed; it decides whether a retry is safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::upstream) enum Step {
    Mail,
    Rcpt,
    Data,
    /// Sending the body and waiting for the reply to the final dot.
    EndOfData,
    /// Checks of our own before MAIL (address forms, extensions upstream lacks).
    Local,
}

/// How a transaction failed, and what that leaves of the connection.
pub(in crate::upstream) struct Failure {
    pub(in crate::upstream) step: Step,
    pub(in crate::upstream) error: UpstreamError,
    /// The connection is between transactions (or can be put there with RSET).
    pub(in crate::upstream) clean: bool,
    /// Nothing was accepted and the connection died under us: worth one fresh attempt.
    pub(in crate::upstream) stale: bool,
}

/// One message's commands, ready to be played on a connection (twice, at most).
pub(in crate::upstream) struct Transaction<'a> {
    pub(super) envelope: &'a Envelope,
    /// The paths as checked by `wire::path`; `None` is the null sender.
    pub(super) from: Option<&'a str>,
    pub(super) rcpts: Vec<&'a str>,
    /// The message in pieces, sent one after the other (our header fields, the client's bytes).
    pub(super) message: &'a [&'a [u8]],
    /// Bounds each step: the write and the wait for its reply.
    pub(super) timeout: Duration,
    /// Reads upstream's refusals: the same patterns as the connector's.
    classifier: &'a Classifier,
}

impl<'a> Transaction<'a> {
    /// Checks what can be checked before talking to upstream: address forms, and the bare
    /// CR or LF next to a dot that a smuggling attempt needs. `message` is the message in
    /// pieces, sent one after the other.
    pub(in crate::upstream) fn new(
        envelope: &'a Envelope,
        message: &'a [&'a [u8]],
        timeout: Duration,
        classifier: &'a Classifier,
    ) -> Result<Transaction<'a>, UpstreamError> {
        let from = match &envelope.from {
            None => None,
            Some(a) => Some(path(a, false).ok_or_else(|| rejected(553, "5.1.7", bad(a)))?),
        };
        let mut rcpts = Vec::with_capacity(envelope.rcpts.len());
        for r in &envelope.rcpts {
            rcpts.push(path(r, true).ok_or_else(|| rejected(553, "5.1.3", bad(r)))?);
        }
        if rcpts.is_empty() {
            return Err(rejected(503, "5.5.1", "no valid recipients".into()));
        }
        // Each piece but the last ends with a CRLF (pieces are whole header fields and what
        // follows them), so no bare line break can straddle two.
        if message.iter().any(|piece| dot_after_bare_line_break(piece)) {
            return Err(rejected(
                554,
                "5.6.0",
                "message has a bare CR or LF next to a dot; not relayed (SMTP smuggling)".into(),
            ));
        }
        Ok(Transaction {
            envelope,
            from,
            rcpts,
            message,
            timeout,
            classifier,
        })
    }
}

impl Transaction<'_> {
    /// MAIL, every RCPT and DATA (pipelined when upstream advertises PIPELINING), up to upstream's 354.
    pub(in crate::upstream) async fn prepare(&self, conn: &mut Client) -> Result<(), Failure> {
        let params = self.mail_parameters(conn)?;
        let mail = mail_line(self.from, params);
        if conn.extensions().pipelining {
            return self.prepare_pipelined(conn, mail).await;
        }
        self.step(Step::Mail, conn.command_ok(mail.as_bytes(), 2))
            .await?;
        for rcpt in &self.rcpts {
            let line = rcpt_line(rcpt);
            self.step(Step::Rcpt, conn.command_ok(line.as_bytes(), 2))
                .await?;
        }
        self.step(Step::Data, conn.command_ok(b"DATA\r\n", 3))
            .await?;
        Ok(())
    }

    /// The body and the final dot, and upstream's reply to it (a `2xx`, `4xx` or `5xx`:
    /// anything else is out of step, and uncertain), written as the slices of the
    /// message itself (with no copy; the cork joins small ones), or under TLS, for a message
    /// of less than [`HOLD`] bytes, as one text (one record).
    /// A failure is uncertain only once the whole body was written and the write of the final
    /// dot did not fail (a small body and its dot wait in the socket's cork until the read of
    /// the reply, see `client::corked`).
    pub(in crate::upstream) async fn finish(&self, conn: &mut Client) -> Result<Accepted, Failure> {
        let (mut whole, mut unsent) = (false, false);
        let exchange = async {
            // Under TLS each write is a record: a small message goes as one text.
            match (!conn.joins_writes())
                .then(|| stuffed(self.message, HOLD))
                .flatten()
            {
                Some(text) => conn.send(&text).await?,
                None => conn.send_all(&stuffed_slices(self.message)).await?,
            }
            whole = true;
            let reply = conn.read_final().await;
            unsent = reply.as_ref().is_err_and(|e| Unsent::within(e));
            reply
        };
        match self.step(Step::EndOfData, exchange).await {
            Ok(reply) => Ok(Accepted::new(reply.into_line())),
            Err(f) if !whole || unsent => Err(cut_short(f)),
            Err(f) => Err(f),
        }
    }

    pub(super) async fn run(&self, conn: &mut Client) -> Result<Accepted, Failure> {
        self.prepare(conn).await?;
        self.finish(conn).await
    }

    /// Declares what the client declared, when upstream understands it. What cannot be
    /// relayed faithfully is refused here, as RFC 6152 and RFC 6531 ask of a relay.
    fn mail_parameters(&self, conn: &Client) -> Result<MailParams, Failure> {
        let offered = conn.extensions();
        let local = |code, enhanced, text: &str| Failure {
            step: Step::Local,
            error: rejected(code, enhanced, text.into()),
            clean: true,
            stale: false,
        };
        let mut params = MailParams::default();
        let utf8_addresses = self.envelope.from.as_deref().is_some_and(|a| !a.is_ascii())
            || self.envelope.rcpts.iter().any(|a| !a.is_ascii());
        if offered.smtputf8 {
            params.smtputf8 = self.envelope.smtputf8 || utf8_addresses;
        } else if utf8_addresses {
            return Err(local(
                553,
                "5.6.7",
                "upstream does not support SMTPUTF8; non-ASCII address not relayed",
            ));
        }
        let eight_bit = !self.message.iter().all(|piece| piece.is_ascii());
        if offered.eight_bit_mime {
            params.eight_bit_mime = self.envelope.body_8bit || eight_bit;
        } else if eight_bit {
            return Err(local(
                554,
                "5.6.3",
                "upstream does not support 8BITMIME; 8-bit message not relayed",
            ));
        }
        Ok(params)
    }

    /// Runs one step and classifies its failure: upstream's refusal by what it says about our
    /// sending (the configured patterns), and by what it leaves of the connection. The
    /// connection bounds each of its exchanges by the same timeout as `self.timeout`.
    pub(super) async fn step<T>(
        &self,
        step: Step,
        fut: impl std::future::Future<Output = Result<T, ClientError>>,
    ) -> Result<T, Failure> {
        let before_body = step != Step::EndOfData;
        match fut.await {
            Ok(v) => Ok(v),
            Err(ClientError::TimedOut) => Err(Failure {
                step,
                error: no_answer_within(step, self.timeout),
                clean: false,
                stale: false,
            }),
            Err(e) => match e.code() {
                // 421: upstream is closing this connection (often its idle timeout, read
                // only now); nothing was accepted, so a fresh connection may do better.
                Some(421) => Err(Failure {
                    step,
                    error: self.classifier.classify(smtp_error(&e)),
                    clean: false,
                    stale: before_body,
                }),
                Some(_) => Err(Failure {
                    step,
                    error: self.classifier.classify(smtp_error(&e)),
                    clean: true,
                    stale: false,
                }),
                None => Err(Failure {
                    step,
                    error: no_answer(step, format!("{step:?}: {e}")),
                    clean: false,
                    stale: before_body,
                }),
            },
        }
    }
}

/// A step that ended without a reply. Once the body is on its way (`EndOfData`) upstream
/// may have taken the message without our hearing it: that is not the same answer as
/// "unreachable", and the client is told so.
fn no_answer(step: Step, reason: String) -> UpstreamError {
    match step {
        Step::EndOfData => UpstreamError::Uncertain(reason),
        _ => unavailable(reason),
    }
}

fn no_answer_within(step: Step, timeout: Duration) -> UpstreamError {
    let reason = format!("no answer at {step:?} within {} ms", timeout.as_millis());
    match step {
        Step::EndOfData => UpstreamError::Uncertain(reason),
        _ => unavailable(reason),
    }
}

/// The connection failed while the body was still being written: without its final dot
/// upstream cannot have taken the message, so this is "unavailable", not uncertain.
fn cut_short(f: Failure) -> Failure {
    Failure {
        error: unavailable(format!(
            "connection lost while sending the body: {}",
            f.error
        )),
        clean: false,
        stale: false,
        ..f
    }
}
