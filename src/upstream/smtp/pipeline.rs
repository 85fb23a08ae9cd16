//! PIPELINING (RFC 2920): MAIL, every RCPT and DATA in one write, their replies read in order.
//! Against an upstream 20 ms away that is one round trip instead of two plus one per
//! recipient.

use crate::upstream::client::Client;

use super::transaction::{Failure, Step, Transaction};
use super::wire::push_rcpt_line;

/// At most this many commands in one write. A group so large that upstream's replies fill
/// the socket buffers before we finish writing would stall both sides (RFC 2920 section 3.1);
/// a hundred short replies are far from that.
const GROUP: usize = 100;

/// What the replies read so far say.
#[derive(Default)]
struct Replies {
    mail: bool,
    /// Some RCPT was accepted: with MAIL, upstream holds a transaction a dot would deliver.
    rcpt: bool,
    /// DATA got its 354.
    data: bool,
    /// The first refusal, in command order: the client's answer.
    refusal: Option<Failure>,
}

impl Replies {
    /// A reply was read: `Ok` if the connection is still in step, else the failure to return.
    fn take(&mut self, step: Step, read: Result<(), Failure>) -> Result<(), Failure> {
        match read {
            Ok(()) if step == Step::Mail => self.mail = true,
            Ok(()) if step == Step::Rcpt => self.rcpt = true,
            Ok(()) if step == Step::Data => self.data = true,
            Ok(()) => {}
            Err(f) if f.clean => {
                self.refusal.get_or_insert(f);
            }
            // No reply (or a 421): the connection is gone. An earlier refusal still is the
            // answer, and it was no stale connection's doing.
            Err(f) => return Err(self.lost(f)),
        }
        Ok(())
    }

    fn lost(&mut self, f: Failure) -> Failure {
        match self.refusal.take() {
            Some(refusal) => Failure {
                clean: false,
                ..refusal
            },
            None => f,
        }
    }
}

/// The class of a step's positive reply: DATA's is `354`, MAIL's and RCPT's `2xx`.
fn class(step: Step) -> u16 {
    match step {
        Step::Data => 3,
        _ => 2,
    }
}

impl Transaction<'_> {
    /// Writes the commands in groups (one, unless there are more than [`GROUP`]), reading
    /// every reply of a group before the next; stops after a group with a refusal. A refusal
    /// leaves the connection in step, to be reset like any refused transaction.
    pub(super) async fn prepare_pipelined(
        &self,
        conn: &mut Client,
        mail: String,
    ) -> Result<(), Failure> {
        // Command i: MAIL, then each RCPT, then DATA; written straight into the group's text.
        let count = self.rcpts.len() + 2;
        let step = |i: usize| match i {
            0 => Step::Mail,
            i if i == count - 1 => Step::Data,
            _ => Step::Rcpt,
        };
        let mut replies = Replies::default();
        let mut text = String::with_capacity(mail.len() + 64 * count.min(GROUP));
        for start in (0..count).step_by(GROUP) {
            let group = start..(start + GROUP).min(count);
            text.clear();
            for i in group.clone() {
                match step(i) {
                    Step::Mail => text.push_str(&mail),
                    Step::Rcpt => push_rcpt_line(&mut text, self.rcpts[i - 1]),
                    _ => text.push_str("DATA\r\n"),
                }
            }
            // Positive replies are read by their code alone: their text is not used.
            let first = self
                .step(
                    step(start),
                    conn.command_ok(text.as_bytes(), class(step(start))),
                )
                .await;
            replies.take(step(start), first)?;
            for i in group.skip(1) {
                let read = self.step(step(i), conn.read_ok(class(step(i)))).await;
                replies.take(step(i), read)?;
            }
            if replies.refusal.is_some() {
                break;
            }
        }
        match replies.refusal.take() {
            None => Ok(()), // DATA's 354: the body may go
            // DATA refused, or never sent: nothing to undo but the envelope.
            Some(f) if !replies.data => Err(f),
            Some(f) => Err(self.abandon_data(conn, &replies, f).await),
        }
    }

    /// Upstream said 354 although the message is refused. With no transaction to deliver
    /// to, RFC 2920 says to send a lone dot, which ends the empty message and keeps the
    /// connection in step. With one (MAIL and some RCPT accepted, another refused), a dot
    /// would deliver an empty message to those recipients: the connection is dropped
    /// instead, and a server discards data that never got its final dot.
    async fn abandon_data(
        &self,
        conn: &mut Client,
        replies: &Replies,
        refusal: Failure,
    ) -> Failure {
        if replies.mail && replies.rcpt {
            return Failure {
                clean: false,
                ..refusal
            };
        }
        let clean = match conn.command_ok(b".\r\n", 2).await {
            Ok(_) => true,
            Err(e) => e.code().is_some_and(|code| code != 421),
        };
        Failure { clean, ..refusal }
    }
}
