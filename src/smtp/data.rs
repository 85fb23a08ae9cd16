//! DATA: read the message to its final dot, check its bounds, then hand it to `deliver`.
//! Nothing is forwarded unless the final `<CRLF>.<CRLF>` arrived: a client that drops the
//! connection mid-DATA has sent no message.

use std::time::Duration;

use tokio::time::Instant;

use super::conn::Stop;
use super::data_reader::{DataProblem, DataReader};
use super::reply::{self, Reply};
use super::session::{Flow, Session};
use crate::observe::activity::Activity;

impl Session {
    pub async fn data(&mut self) -> Flow {
        match &self.envelope {
            None => {
                self.reply(reply::bad_sequence("Need MAIL and RCPT before DATA"));
                return Flow::Continue;
            }
            Some(envelope) if envelope.rcpts.is_empty() => {
                self.reply(Reply::new(554, "5.5.1", "No valid recipients"));
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
        self.doing.set(Activity::Data);
        let read = self.conn.read_data(&mut reader, deadline).await;
        self.doing.set(Activity::Command);
        match read {
            Ok(()) => {}
            Err(Stop::Idle) => {
                self.reply(reply::idle_timeout());
                return Flow::Close;
            }
            Err(Stop::DataTimeout) => {
                tracing::info!(peer = %self.peer, "DATA deadline passed; nothing forwarded");
                self.reply(reply::data_timeout());
                return Flow::Close;
            }
            Err(_) => return Flow::Close,
        }
        // The transaction ends at the final dot, whatever its outcome (RFC 5321 4.1.1.4), and
        // a message moved on: the junk count starts again.
        self.junk = 0;
        let envelope = self.envelope.take().expect("checked above");
        // Held until the message is done with: its wait for tokens and its forwarding.
        let _budget = reader.take_budget();
        let body = reader.finish();
        if body.is_err() {
            self.ctx
                .services
                .metrics
                .message(crate::message::Outcome::Rejected);
        }
        match body {
            Ok(body) => return self.deliver(envelope, body).await,
            Err(DataProblem::TooBig) => self.verdict(reply::message_too_big(max_bytes)),
            Err(DataProblem::LineTooLong) => self.verdict(reply::line_too_long(max_line)),
            Err(DataProblem::BareNewline) => self.verdict(reply::bare_newline()),
            Err(DataProblem::Nul) => self.verdict(reply::nul_in_data()),
            Err(DataProblem::NoRoom) => self.verdict(reply::insufficient_storage()),
            Err(DataProblem::LeadingContinuation) => self.verdict(reply::leading_continuation()),
        }
        Flow::Continue
    }
}
