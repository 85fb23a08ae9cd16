//! The session's counts against its bounds: error replies against `max_errors`, commands
//! that move no message on against `max_junk_commands`. The session decides what passing a
//! bound does (`session.rs`); the bounds are read from the config at the moment, which a
//! reload may change.

#[derive(Debug, Default)]
pub struct Counters {
    /// Error replies so far.
    errors: usize,
    /// Commands that moved no message on since the last message's final dot.
    junk: usize,
}

impl Counters {
    /// Counts an error reply.
    pub fn count_error(&mut self) {
        self.errors += 1;
    }

    pub fn errors(&self) -> usize {
        self.errors
    }

    /// Counts a junk command; returns the count with it.
    pub fn count_junk(&mut self) -> usize {
        self.junk += 1;
        self.junk
    }

    /// A message moved on (its final dot): the junk count starts again.
    pub fn message_moved(&mut self) {
        self.junk = 0;
    }
}
