//! Reading the DATA section. Only `<CRLF>.<CRLF>` ends it, and only a CRLF starts a line:
//! a bare LF or bare CR is content, never a line break, so `\n.\n`, `\r.\r` and every other
//! mix can neither end the message nor start a second one (SMTP smuggling). A message that
//! holds a bare CR or LF anywhere is refused whole at the final dot (`550 5.6.0`), because
//! upstream servers disagree on what such bytes mean, and passing them on would let a
//! smuggled message through the next hop. A NUL byte is refused the same way (`550 5.6.0`):
//! RFC 5322 forbids it, and a next hop that drops NULs would turn `\r\n\0.\r\n` into a
//! terminator. The byte loop is a small state machine so that a
//! terminator split across reads is found exactly.

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

/// What was wrong with a complete DATA section, in the order the relay reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataProblem {
    TooBig,
    LineTooLong,
    BareNewline,
    Nul,
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
        }
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
        for (i, &b) in input.iter().enumerate() {
            if self.step(b) {
                return Some(i + 1);
            }
        }
        None
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
        if self.body.len() < self.max_bytes {
            self.body.push(b);
        } else {
            self.too_big = true;
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
        } else {
            Ok(self.body)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(input: &[u8]) -> (Option<usize>, Result<Vec<u8>, DataProblem>) {
        let mut r = DataReader::new(1 << 20, 1000);
        let used = r.feed(input);
        (used, r.finish())
    }

    #[test]
    fn crlf_dot_crlf_ends_and_dots_are_unstuffed() {
        let (used, body) = read(b"a\r\n..b\r\n..\r\n.\r\nMAIL");
        assert_eq!(used, Some(15));
        assert_eq!(body.unwrap(), b"a\r\n.b\r\n.\r\n");
    }

    #[test]
    fn empty_message_ends_at_once() {
        assert_eq!(read(b".\r\n"), (Some(3), Ok(vec![])));
    }

    #[test]
    fn terminator_split_across_reads_is_found() {
        let mut r = DataReader::new(100, 100);
        assert_eq!(r.feed(b"x\r"), None);
        assert_eq!(r.feed(b"\n."), None);
        assert_eq!(r.feed(b"\r"), None);
        assert_eq!(r.feed(b"\nQUIT"), Some(1));
        assert_eq!(r.finish().unwrap(), b"x\r\n");
    }

    #[test]
    fn no_smuggling_variant_ends_data() {
        let variants: [&[u8]; 10] = [
            b"\n.\n",
            b"\r.\r",
            b"\r.\n",
            b"\n.\r",
            b"\n.\r\n",
            b"\r\n.\n",
            b"\r.\r\n",
            b"\r\n.\r",
            b"\r\n\0.\r\n",
            b"\r\n.\0\r\n",
        ];
        for v in variants {
            let mut input = b"a".to_vec();
            input.extend_from_slice(v);
            input.extend_from_slice(b"MAIL FROM:<x@y>\r\n");
            let mut r = DataReader::new(1 << 20, 1000);
            assert_eq!(
                r.feed(&input),
                None,
                "{:?} ended DATA",
                String::from_utf8_lossy(v)
            );
            assert_eq!(r.feed(b"\r\n.\r\n"), Some(5));
        }
    }

    #[test]
    fn bare_newlines_are_refused_at_the_end() {
        assert_eq!(read(b"a\nb\r\n.\r\n").1, Err(DataProblem::BareNewline));
        assert_eq!(read(b"a\rb\r\n.\r\n").1, Err(DataProblem::BareNewline));
        assert_eq!(read(b"a\r\n.\rb\r\n.\r\n").1, Err(DataProblem::BareNewline));
    }

    #[test]
    fn nul_anywhere_is_refused_at_the_end() {
        assert_eq!(read(b"a\0b\r\n.\r\n").1, Err(DataProblem::Nul));
        assert_eq!(read(b"a\r\n\0.\r\n.\r\n").1, Err(DataProblem::Nul));
        assert_eq!(read(b"a\r\n.\0\r\n.\r\n").1, Err(DataProblem::Nul));
    }

    #[test]
    fn size_bound_is_exact() {
        let mut at = DataReader::new(5, 100);
        assert!(at.feed(b"abc\r\n.\r\n").is_some());
        assert_eq!(at.finish().unwrap(), b"abc\r\n");
        let mut over = DataReader::new(4, 100);
        assert!(over.feed(b"abc\r\n.\r\n").is_some());
        assert_eq!(over.finish(), Err(DataProblem::TooBig));
    }

    #[test]
    fn line_bound_counts_crlf() {
        let mut at = DataReader::new(100, 5);
        at.feed(b"abc\r\n.\r\n").unwrap();
        assert!(at.finish().is_ok());
        let mut over = DataReader::new(100, 4);
        over.feed(b"abc\r\n.\r\n").unwrap();
        assert_eq!(over.finish(), Err(DataProblem::LineTooLong));
    }
}
