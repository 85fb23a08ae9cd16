//! The open transaction: opened by MAIL, its recipients added by RCPT, ended by DATA, RSET,
//! EHLO or STARTTLS. Its rules are in those verbs' files; this file only keeps it.

use crate::message::Envelope;

/// MAIL given, RCPTs collected, and those refused as suppressed counted for its log line.
pub struct Transaction {
    envelope: Envelope,
    suppressed: usize,
}

impl Transaction {
    pub fn open(envelope: Envelope) -> Transaction {
        Transaction {
            envelope,
            suppressed: 0,
        }
    }

    pub fn envelope(&self) -> &Envelope {
        &self.envelope
    }

    pub fn rcpts(&self) -> usize {
        self.envelope.rcpts.len()
    }

    pub fn add_rcpt(&mut self, rcpt: String) {
        self.envelope.rcpts.push(rcpt);
    }

    /// Counts a RCPT refused as suppressed: the others of the message go on.
    pub fn rcpt_suppressed(&mut self) {
        self.suppressed += 1;
    }

    pub fn suppressed(&self) -> usize {
        self.suppressed
    }

    /// The RCPTs taken and those refused as suppressed, as the message's account counts them.
    pub fn counts(&self) -> (usize, usize) {
        (self.rcpts(), self.suppressed)
    }
}
