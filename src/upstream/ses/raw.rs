//! The message as SES's API takes it: the bytes the SMTP path would forward, with SES's two
//! header conventions (`X-SES-CONFIGURATION-SET`, `X-SES-MESSAGE-TAGS`, which its SMTP
//! endpoint reads and removes) taken out of the header section and turned into the API's
//! fields, so a route written for SES's SMTP endpoint means the same over the API.
//!
//! The message goes into the request once: in base64, written straight from its pieces into
//! the buffer that becomes the request's body (with room kept before it for the JSON that
//! precedes the data, see `body::Splice`), never joined into one more copy first. Only the
//! header section is copied, to be read.

use std::io::Write;
use std::ops::Range;

use base64::engine::general_purpose::STANDARD;
use base64::write::EncoderWriter;

use crate::message::header;

/// Bytes kept free before the data for the request's JSON that comes before it: the
/// configuration set's name and the keys up to `"Data":"`, far less.
pub const FRONT: usize = 1024;

/// One message ready for `SendEmail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raw {
    /// From [`FRONT`] on: the message (headers and body, CRLF line endings, never
    /// dot-stuffed, without SES's fields) in base64; room reserved after it.
    pub data: Vec<u8>,
    /// The value of `X-SES-CONFIGURATION-SET`, when the message has one.
    pub configuration_set: Option<String>,
    /// `X-SES-MESSAGE-TAGS` (`name=value, name=value`), in order.
    pub tags: Vec<(String, String)>,
}

impl Raw {
    /// The message's base64, without the room around it.
    #[cfg(test)]
    pub fn base64(&self) -> &[u8] {
        &self.data[FRONT..]
    }
}

const CONFIGURATION_SET: &str = "x-ses-configuration-set";
const MESSAGE_TAGS: &str = "x-ses-message-tags";

/// The length of the header section of the pieces (our fields, then runs of the client's
/// bytes) up to and with its empty line, or of all of them when there is none.
pub fn header_len(pieces: &[&[u8]]) -> usize {
    const END: &[u8] = b"\r\n\r\n";
    let mut seen = 0;
    let mut last: &[u8] = &[];
    for piece in pieces {
        // The empty line may straddle two pieces.
        for k in 1..END.len() {
            if last.ends_with(&END[..k]) && piece.starts_with(&END[k..]) {
                return seen + END.len() - k;
            }
        }
        if let Some(at) = memchr::memmem::find(piece, END) {
            return seen + at + END.len();
        }
        seen += piece.len();
        if !piece.is_empty() {
            last = piece;
        }
    }
    seen
}

/// The pieces as one raw message, in base64 from [`FRONT`] on, with `after` bytes reserved
/// after it.
pub fn from_pieces(pieces: &[&[u8]], after: usize) -> Raw {
    let head_len = header_len(pieces);
    let mut head = Vec::with_capacity(head_len);
    for piece in pieces {
        let take = (head_len - head.len()).min(piece.len());
        head.extend_from_slice(&piece[..take]);
    }
    let mut raw = Raw {
        data: Vec::new(),
        configuration_set: None,
        tags: Vec::new(),
    };
    let mut dropped: Vec<Range<usize>> = Vec::new();
    for field in header::fields(&head) {
        let name = head[field.name.clone()].trim_ascii();
        let value = || unfold(&head[field.name.end + 1..field.whole.end]);
        if name.eq_ignore_ascii_case(CONFIGURATION_SET.as_bytes()) {
            raw.configuration_set.get_or_insert_with(value);
        } else if name.eq_ignore_ascii_case(MESSAGE_TAGS.as_bytes()) {
            raw.tags.extend(tags(&value()));
        } else {
            continue;
        }
        dropped.push(field.whole.clone());
    }
    raw.configuration_set = raw.configuration_set.filter(|s| !s.is_empty());
    let size: usize = pieces.iter().map(|p| p.len()).sum();
    let kept = size - dropped.iter().map(|r| r.len()).sum::<usize>();
    let mut data = Vec::with_capacity(FRONT + kept.div_ceil(3) * 4 + after);
    data.resize(FRONT, b' ');
    let mut encoder = EncoderWriter::new(&mut data, &STANDARD);
    let mut at = 0;
    for piece in pieces {
        for part in kept_parts(piece, at, &dropped) {
            encoder.write_all(part).expect("writes to a Vec never fail");
        }
        at += piece.len();
    }
    encoder.finish().expect("writes to a Vec never fail");
    drop(encoder);
    raw.data = data;
    raw
}

/// The parts of `piece` (at `at` in the message) outside the ranges in `dropped` (in order).
fn kept_parts<'p>(
    piece: &'p [u8],
    at: usize,
    dropped: &[Range<usize>],
) -> impl Iterator<Item = &'p [u8]> + 'p {
    let end = at + piece.len();
    let cuts: Vec<Range<usize>> = (dropped.iter())
        .filter(|r| r.start < end && r.end > at)
        .map(|r| r.start.max(at) - at..r.end.min(end) - at)
        .collect();
    let starts = std::iter::once(0).chain(cuts.iter().map(|c| c.end).collect::<Vec<_>>());
    let ends = (cuts.iter().map(|c| c.start).collect::<Vec<_>>())
        .into_iter()
        .chain(std::iter::once(piece.len()));
    starts
        .zip(ends)
        .filter(|(from, to)| from < to)
        .map(move |(from, to)| &piece[from..to])
}

fn unfold(value: &[u8]) -> String {
    let text = String::from_utf8_lossy(value);
    let parts: Vec<&str> = text.split("\r\n").map(str::trim).collect();
    parts.join(" ").trim().to_string()
}

/// `name=value, name=value`; a pair without a name or `=` is left out.
fn tags(value: &str) -> impl Iterator<Item = (String, String)> + '_ {
    value.split(',').filter_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        let (name, value) = (name.trim(), value.trim());
        (!name.is_empty()).then(|| (name.to_string(), value.to_string()))
    })
}

#[cfg(test)]
mod tests {
    use base64::Engine;

    use super::*;

    fn decoded(raw: &Raw) -> Vec<u8> {
        STANDARD.decode(raw.base64()).unwrap()
    }

    #[test]
    fn ses_fields_become_api_fields_and_leave_the_message() {
        let ours = b"Received: from x\r\nX-SES-CONFIGURATION-SET: tenant-acme\r\n";
        let client =
            b"x-ses-message-tags: tenant=acme,\r\n  plan = gold, bad\r\nSubject: hi\r\n\r\n\
                       X-SES-CONFIGURATION-SET: body, not a field\r\n";
        let raw = from_pieces(&[ours, client], 0);
        assert_eq!(raw.configuration_set.as_deref(), Some("tenant-acme"));
        assert_eq!(
            raw.tags,
            [
                ("tenant".into(), "acme".into()),
                ("plan".into(), "gold".into())
            ]
        );
        assert_eq!(
            decoded(&raw),
            b"Received: from x\r\nSubject: hi\r\n\r\nX-SES-CONFIGURATION-SET: body, not a field\r\n"
        );
    }

    #[test]
    fn a_message_without_them_is_the_pieces_joined_byte_for_byte() {
        let pieces: [&[u8]; 3] = [
            b"Received: x\r\n",
            b"Subject: a\r\n\r\n",
            b".leading dot\r\n",
        ];
        let raw = from_pieces(&pieces, 100);
        assert_eq!(decoded(&raw), pieces.concat());
        assert_eq!((raw.configuration_set, raw.tags.len()), (None, 0));
        assert!(raw.data.capacity() >= raw.data.len() + 100, "room after it");
        assert_eq!(&raw.data[..FRONT], &[b' '; FRONT][..], "room before it");
    }

    /// Fields anywhere in the pieces, the header's end across two of them, a piece that
    /// holds the whole body: the base64 is of the message without SES's fields, and the header
    /// section ends where it does.
    #[test]
    fn fields_across_pieces_are_taken_out_wherever_they_fall() {
        let body = "x".repeat(5000);
        let client = format!("X-SES-MESSAGE-TAGS: a=b\r\nSubject: s\r\n\r\n{body}");
        for split in 1..40 {
            let (one, two) = client.as_bytes().split_at(split);
            let pieces: [&[u8]; 3] = [b"Received: r\r\n", one, two];
            assert_eq!(
                header_len(&pieces),
                13 + client.find("\r\n\r\n").unwrap() + 4
            );
            let raw = from_pieces(&pieces, 0);
            let want = format!("Received: r\r\nSubject: s\r\n\r\n{body}");
            assert_eq!(decoded(&raw), want.as_bytes(), "split at {split}");
            assert_eq!(raw.tags, [("a".into(), "b".into())]);
        }
        assert_eq!(header_len(&[b"no blank line\r\n", b"at all"]), 21);
    }
}
