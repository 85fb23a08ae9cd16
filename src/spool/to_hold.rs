//! A message to hold, as the pipeline hands it to the spool: its envelope, who sent it, its
//! three runs of bytes and its bounds; and the record (`record::encode`) both stores write.

use super::record::{self, HeldKey, Meta, Origin};
use crate::message::Envelope;

/// A message to hold.
pub struct ToHold<'a> {
    pub id: &'a str,
    pub key: HeldKey,
    pub envelope: &'a Envelope,
    pub origin: Origin,
    /// Our `Received:` field.
    pub received: &'a [u8],
    /// Fields read only for the identity at release (a report's: its original's header).
    pub key_fields: &'a [u8],
    pub body: &'a [u8],
    /// The key's `max_held`; `None` for a report, which a full key (or one past its share
    /// of the spool) still takes.
    pub max_held: Option<usize>,
    pub report: bool,
}

impl ToHold<'_> {
    /// Its bytes: our field, the identity's fields and the message.
    pub(super) fn bytes(&self) -> u64 {
        [self.received, self.key_fields, self.body]
            .iter()
            .map(|r| r.len() as u64)
            .sum()
    }

    /// Its meta and its record (`record::encode`), `seq`-th in arrival order, held at
    /// `accepted_ms`.
    pub(super) fn record(self, seq: u64, accepted_ms: u64) -> (Meta, Vec<u8>) {
        let mut meta = Meta {
            id: self.id.to_string(),
            seq,
            accepted_ms,
            key: self.key,
            from: self.envelope.from.clone(),
            rcpts: self.envelope.rcpts.clone(),
            smtputf8: self.envelope.smtputf8,
            body_8bit: self.envelope.body_8bit,
            origin: self.origin,
            report: self.report,
            lens: [0; 3],
        };
        let file = record::encode(&mut meta, [self.received, self.key_fields, self.body]);
        (meta, file)
    }
}
