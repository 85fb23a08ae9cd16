//! Plain data about one message, shared by the parts it passes through (the session,
//! `policy`, `throttle`, `upstream`, `observe`); it imports nothing of the crate.
//!
//! - `envelope`: the envelope as the client gave it.
//! - `dsn`: the delivery status notification (RFC 3464) written for a message given up.
//! - `id`: a message's id.
//! - `outcome`: what became of the message, and what the relay records of each outcome.
//! - `header`: the header section's fields, by byte range.
//! - `received`: its `Received:` fields: the hops it made, and our mark in them (a loop).

pub mod dsn;
mod envelope;
pub mod header;
mod id;
mod outcome;
pub mod received;

pub use envelope::Envelope;
pub use id::new_id;
pub use outcome::{Outcome, OutcomeFacts};

/// The longest id of a message at its upstream the relay keeps (SES's are about 60 bytes):
/// an id past it is not an id the relay can link events to.
pub const MAX_ID_BYTES: usize = 256;
