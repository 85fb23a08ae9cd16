//! DATA: read the message to its final dot, check its bounds, then hand it to `deliver`.
//! Nothing is forwarded unless the final `<CRLF>.<CRLF>` arrived: a client that drops the
//! connection mid-DATA has sent no message. A message refused here (no recipient, its size,
//! its content) is answered and logged here, once, as `deliver` does at the final dot.

use std::time::Duration;

use tokio::time::Instant;

use super::conn::Stop;
use super::data_reader::{DataProblem, DataReader};
use super::session::{Flow, Session};
use crate::message::Outcome;
use crate::observe::activity::Activity;
use crate::pipeline::account;
use crate::reply;

impl Session {
    pub async fn data(&mut self) -> Flow {
        match &self.transaction {
            None => {
                self.reply(reply::bad_sequence("Need MAIL and RCPT before DATA"));
                return Flow::Continue;
            }
            Some(transaction) if transaction.rcpts() == 0 => {
                let refusal = reply::no_valid_recipients();
                let outcome = match transaction.suppressed() {
                    0 => Outcome::NoRecipients,
                    _ => Outcome::Suppressed,
                };
                let counts = transaction.counts();
                let (ctx, peer) = (&self.ctx, self.client.peer());
                account::refused(ctx, outcome, &refusal, "", peer, counts, Duration::ZERO);
                self.reply(refusal);
                return Flow::Continue;
            }
            Some(_) => {}
        }
        self.reply(reply::start_data());
        let smtp = &self.ctx.setup.config.smtp;
        let (max_bytes, max_line) = (smtp.max_message_bytes.get(), smtp.max_line_bytes.get());
        let deadline = Instant::now() + Duration::from_millis(smtp.data_timeout_ms.get());
        let mut reader =
            DataReader::new(max_bytes, max_line).with_budget(self.ctx.services.buffered.clone());
        self.place.doing(Activity::Data);
        let read = self.conn.read_data(&mut reader, deadline).await;
        self.place.doing(Activity::Command);
        match read {
            Ok(()) => {}
            Err(Stop::Idle) => {
                self.reply(reply::idle_timeout());
                return Flow::Close;
            }
            Err(Stop::DataTimeout) => {
                tracing::info!(peer = %self.client.peer(), "DATA deadline passed; nothing forwarded");
                self.reply(reply::data_timeout());
                return Flow::Close;
            }
            Err(_) => return Flow::Close,
        }
        // The transaction ends at the final dot, whatever its outcome (RFC 5321 4.1.1.4), and
        // a message moved on: the junk count starts again.
        self.counters.message_moved();
        let transaction = self.transaction.take().expect("checked above");
        // Held until the message is done with: its wait for tokens and its forwarding.
        let _budget = reader.take_budget();
        let body = reader.finish();
        let problem = match body {
            Ok(body) => return self.deliver(transaction, body).await,
            Err(problem) => problem,
        };
        let (outcome, refusal) = match problem {
            DataProblem::TooBig => (Outcome::TooBig, reply::message_too_big(max_bytes)),
            DataProblem::LineTooLong => (Outcome::ContentRejected, reply::line_too_long(max_line)),
            DataProblem::BareNewline => (Outcome::ContentRejected, reply::bare_newline()),
            DataProblem::Nul => (Outcome::ContentRejected, reply::nul_in_data()),
            DataProblem::NoRoom => (Outcome::InsufficientStorage, reply::insufficient_storage()),
            DataProblem::LeadingContinuation => {
                (Outcome::ContentRejected, reply::leading_continuation())
            }
        };
        let counts = transaction.counts();
        let (ctx, peer) = (&self.ctx, self.client.peer());
        account::refused(ctx, outcome, &refusal, "", peer, counts, Duration::ZERO);
        self.verdict(refusal);
        Flow::Continue
    }
}
