//! Reading the DATA section. Only `<CRLF>.<CRLF>` ends it, and only a CRLF starts a line:
//! a bare LF or bare CR is content, never a line break, so `\n.\n`, `\r.\r` and every other
//! mix can neither end the message nor start a second one (SMTP smuggling). A message that
//! holds a bare CR or LF anywhere is refused whole at the final dot (`550 5.6.0`), because
//! upstream servers disagree on what such bytes mean, and passing them on would let a
//! smuggled message through the next hop. A NUL byte is refused the same way (`550 5.6.0`):
//! RFC 5322 forbids it, and a next hop that drops NULs would turn `\r\n\0.\r\n` into a
//! terminator. The byte loop is a small state machine so that a
//! terminator split across reads is found exactly.
//!
//! The bytes kept are taken from the process's budget (`max_buffered_bytes`) as the message
//! grows, a step at a time. A message that finds no room gives back what it held at once (the
//! others can then finish), is read to its end and refused with `452 4.3.1` at its final dot:
//! it never waits for room in the middle of its DATA, where sessions each holding part of the
//! budget could wait on one another for good.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bytes taken from the budget at a time: one large read of DATA.
const BUDGET_STEP: usize = 16 * 1024;

/// The body's first allocation at least: a small message's headers and text.
const FIRST_ROOM: usize = 1024;

/// Where the reader is inside the current line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Right after a CRLF (or at the start of DATA).
    LineStart,
    /// A line that began with a dot: stuffing, or the terminator if CRLF follows.
    Dot,
    /// `.` then CR at line start: LF ends the message.
    DotCr,
    /// Inside a line.
    Mid,
    /// Inside a line, just after a CR.
    Cr,
}

/// A run of plain bytes found by `DataReader::plain_run`.
#[derive(Debug, Clone, Copy)]
struct Run {
    len: usize,
    /// The longest line length the state machine would have counted within the run (a
    /// line's CRLF included), the line the run starts in counted from its start.
    longest: usize,
    /// The length of the line the run ends in, so far.
    tail: usize,
}

/// What was wrong with a complete DATA section, in the order the relay reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataProblem {
    TooBig,
    LineTooLong,
    BareNewline,
    Nul,
    /// The header section starts with a space or tab: a continuation line with no field
    /// before it, which would continue the last field the relay adds in front of it.
    LeadingContinuation,
    /// The process held `max_buffered_bytes` of DATA already.
    NoRoom,
}

/// The part of the byte budget a message holds, given back when dropped.
#[derive(Debug)]
struct Budget {
    pool: Arc<Semaphore>,
    held: Option<OwnedSemaphorePermit>,
    /// Bytes held (the body's room).
    bytes: usize,
}

/// Accumulates one message, unstuffed, bounded by `max_bytes`. Bytes past the bound are
/// read and dropped, so the client's final reply comes at its final dot, as RFC 5321 asks.
#[derive(Debug)]
pub struct DataReader {
    state: State,
    body: Vec<u8>,
    max_bytes: usize,
    max_line: usize,
    line_len: usize,
    too_big: bool,
    line_too_long: bool,
    bare_newline: bool,
    nul: bool,
    budget: Option<Budget>,
    no_room: bool,
    /// Bytes of the message so far, kept or not.
    seen: usize,
}

impl DataReader {
    pub fn new(max_bytes: usize, max_line: usize) -> DataReader {
        DataReader {
            state: State::LineStart,
            body: Vec::new(),
            max_bytes,
            max_line,
            line_len: 0,
            too_big: false,
            line_too_long: false,
            bare_newline: false,
            nul: false,
            budget: None,
            no_room: false,
            seen: 0,
        }
    }

    /// Takes the room for the bytes kept from `pool`, one permit a byte.
    pub fn with_budget(mut self, pool: Arc<Semaphore>) -> DataReader {
        self.budget = Some(Budget {
            pool,
            held: None,
            bytes: 0,
        });
        self
    }

    /// The room the message holds in the budget, to keep until the message is done with
    /// (its wait for tokens and its forwarding included).
    pub fn take_budget(&mut self) -> Option<OwnedSemaphorePermit> {
        self.budget.as_mut()?.held.take()
    }

    /// Whether the body may grow by `n` bytes, and if so room made for them: the budget's
    /// steps taken as needed, then the body grown within what it holds.
    fn room_for(&mut self, n: usize) -> bool {
        if let Some(budget) = &mut self.budget {
            if self.no_room {
                return false;
            }
            while self.body.len() + n > budget.bytes {
                let step = BUDGET_STEP.min(self.max_bytes - budget.bytes);
                if step == 0 {
                    return false;
                }
                let permits = u32::try_from(step).unwrap_or(u32::MAX);
                let Ok(permit) = budget.pool.clone().try_acquire_many_owned(permits) else {
                    self.no_room = true;
                    self.body = Vec::new();
                    budget.held = None;
                    budget.bytes = 0;
                    return false;
                };
                match &mut budget.held {
                    Some(held) => held.merge(permit),
                    None => budget.held = Some(permit),
                }
                budget.bytes += permits as usize;
            }
        }
        self.make_room(n);
        true
    }

    /// Bytes of the message kept so far.
    pub fn len(&self) -> usize {
        self.body.len()
    }

    pub fn is_empty(&self) -> bool {
        self.body.is_empty()
    }

    /// Feeds bytes; returns how many were consumed when the terminator was found (the rest
    /// belongs to the next command), or `None` when more are needed.
    pub fn feed(&mut self, input: &[u8]) -> Option<usize> {
        let mut i = 0;
        while i < input.len() {
            let run = self.plain_run(&input[i..]);
            if run.len > 0 {
                self.push_run(&input[i..i + run.len], run);
                i += run.len;
            } else if self.state == State::Mid && input[i..].starts_with(b"\r\n") {
                // The CRLF that ends a line, both bytes at once: kept and counted as the
                // state machine would, then a new line starts.
                let crlf = Run {
                    len: 2,
                    longest: self.line_len + 2,
                    tail: 0,
                };
                self.push_run(b"\r\n", crlf);
                self.state = State::LineStart;
                i += 2;
            } else if self.step(input[i]) {
                return Some(i + 1);
            } else {
                i += 1;
            }
        }
        None
    }

    /// The bytes at the start of `input` that the state machine would only keep, one by one:
    /// inside a line (or at its start, but not a dot) up to the next CR, LF or NUL, and on
    /// through every CRLF that is followed by a byte other than a dot. They are most of a
    /// message, and are taken as one run.
    fn plain_run(&self, input: &[u8]) -> Run {
        let mut run = Run {
            len: 0,
            longest: 0,
            tail: self.line_len,
        };
        match (self.state, input.first()) {
            (State::Mid, _) => {}
            (State::LineStart, Some(&b)) if b != b'.' => {}
            _ => return run,
        }
        loop {
            let rest = &input[run.len..];
            let Some(at) = memchr::memchr3(b'\r', b'\n', 0, rest) else {
                run.len = input.len();
                run.tail += rest.len();
                break;
            };
            let plain_break = rest[at..].starts_with(b"\r\n")
                && rest
                    .get(at + 2)
                    .is_some_and(|&b| !matches!(b, b'.' | b'\r' | b'\n' | 0));
            if !plain_break {
                run.len += at;
                run.tail += at;
                break;
            }
            run.longest = run.longest.max(run.tail + at + 2);
            run.len += at + 2;
            run.tail = 0;
        }
        run.longest = run.longest.max(run.tail);
        run
    }

    /// Keeps a run of plain bytes ([`plain_run`](Self::plain_run)): what the state machine
    /// does to each, at once, unless a bound is reached within the run (then byte by byte).
    fn push_run(&mut self, bytes: &[u8], run: Run) {
        // The budget's steps taken here (as `push` would at the bytes that need them), so
        // the run goes whole.
        if self.seen + bytes.len() > self.max_bytes || !self.room_for(bytes.len()) {
            return bytes.iter().for_each(|&b| {
                self.step(b);
            });
        }
        self.state = State::Mid;
        self.line_too_long |= run.longest > self.max_line;
        self.line_len = run.tail;
        self.seen += bytes.len();
        self.body.extend_from_slice(bytes);
    }

    /// Grows the body for `n` more bytes: to a power of two at least, as a `Vec` would, so a
    /// message's last bytes rarely move it, but never past the room held in the budget, so
    /// what the budget counts bounds what is allocated. A body is not given a whole budget
    /// step at once: a small message waiting for tokens holds a small buffer.
    fn make_room(&mut self, n: usize) {
        let need = self.body.len() + n;
        if need <= self.body.capacity() {
            return;
        }
        let held = self.budget.as_ref().map_or(usize::MAX, |b| b.bytes);
        let room = (2 * self.body.capacity())
            .max(need.next_power_of_two())
            .max(FIRST_ROOM)
            .min(held)
            .max(need);
        self.body.reserve_exact(room - self.body.len());
    }

    /// Advances by one byte; true at the end of the terminator.
    fn step(&mut self, b: u8) -> bool {
        self.state = match (self.state, b) {
            (State::LineStart, b'.') => State::Dot,
            (State::Dot, b'\r') => State::DotCr,
            (State::DotCr, b'\n') => return true,
            // `.` then CR then something else: the dot was stuffing, the CR is bare.
            (State::DotCr, _) => {
                self.push(b'\r');
                self.after_cr(b)
            }
            // A dot at line start that does not end DATA is stuffing: dropped.
            (State::Dot, _) | (State::LineStart, _) | (State::Mid, _) => self.in_line(b),
            (State::Cr, _) => self.after_cr(b),
        };
        false
    }

    fn in_line(&mut self, b: u8) -> State {
        self.push(b);
        match b {
            b'\r' => State::Cr,
            b'\n' => {
                self.bare_newline = true;
                State::Mid
            }
            _ => State::Mid,
        }
    }

    fn after_cr(&mut self, b: u8) -> State {
        if b == b'\n' {
            self.push(b);
            self.line_len = 0;
            State::LineStart
        } else {
            self.bare_newline = true;
            self.in_line(b)
        }
    }

    fn push(&mut self, b: u8) {
        self.nul |= b == 0;
        self.line_len += 1;
        if self.line_len > self.max_line {
            self.line_too_long = true;
        }
        self.seen += 1;
        if self.seen > self.max_bytes {
            self.too_big = true;
        } else if self.room_for(1) {
            self.body.push(b);
        }
    }

    /// The message, or what made it unacceptable.
    pub fn finish(self) -> Result<Vec<u8>, DataProblem> {
        if self.too_big {
            Err(DataProblem::TooBig)
        } else if self.line_too_long {
            Err(DataProblem::LineTooLong)
        } else if self.bare_newline {
            Err(DataProblem::BareNewline)
        } else if self.nul {
            Err(DataProblem::Nul)
        } else if self.no_room {
            Err(DataProblem::NoRoom)
        } else if matches!(self.body.first(), Some(b' ' | b'\t')) {
            Err(DataProblem::LeadingContinuation)
        } else {
            Ok(self.body)
        }
    }
}

#[cfg(test)]
mod tests;
