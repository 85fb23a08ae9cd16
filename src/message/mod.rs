//! Plain data about one message, shared by the parts it passes through (the session,
//! `policy`, `throttle`, `upstream`, `observe`); it imports nothing of the crate.
//!
//! - `envelope`: the envelope as the client gave it.
//! - `outcome`: what became of the message.
//! - `header`: the header section's fields, by byte range.

mod envelope;
pub mod header;
mod outcome;

pub use envelope::Envelope;
pub use outcome::Outcome;
