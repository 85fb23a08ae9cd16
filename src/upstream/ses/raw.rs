//! The message as SES's API takes it: the bytes the SMTP path would forward, joined once, with
//! SES's two header conventions (`X-SES-CONFIGURATION-SET`, `X-SES-MESSAGE-TAGS`, which its
//! SMTP endpoint reads and removes) taken out of the header section and turned into the API's
//! fields, so a route written for SES's SMTP endpoint means the same over the API.

/// One message ready for `SendEmail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raw {
    /// Headers and body, CRLF line endings, never dot-stuffed, without SES's fields.
    pub bytes: Vec<u8>,
    /// The value of `X-SES-CONFIGURATION-SET`, when the message has one.
    pub configuration_set: Option<String>,
    /// `X-SES-MESSAGE-TAGS` (`name=value, name=value`), in order.
    pub tags: Vec<(String, String)>,
}

use crate::message::header;

const CONFIGURATION_SET: &str = "x-ses-configuration-set";
const MESSAGE_TAGS: &str = "x-ses-message-tags";

/// The pieces (our fields, then runs of the client's bytes) as one raw message.
pub fn from_pieces(pieces: &[&[u8]]) -> Raw {
    let mut bytes = pieces.concat();
    let mut raw = Raw {
        bytes: Vec::new(),
        configuration_set: None,
        tags: Vec::new(),
    };
    let mut drop: Vec<std::ops::Range<usize>> = Vec::new();
    for field in header::fields(&bytes) {
        let name = bytes[field.name.clone()].trim_ascii();
        let value = || unfold(&bytes[field.name.end + 1..field.whole.end]);
        if name.eq_ignore_ascii_case(CONFIGURATION_SET.as_bytes()) {
            raw.configuration_set.get_or_insert_with(value);
        } else if name.eq_ignore_ascii_case(MESSAGE_TAGS.as_bytes()) {
            raw.tags.extend(tags(&value()));
        } else {
            continue;
        }
        drop.push(field.whole.clone());
    }
    // Removed back to front, so earlier ranges keep their place; most messages have none.
    for range in drop.into_iter().rev() {
        bytes.drain(range);
    }
    raw.configuration_set = raw.configuration_set.filter(|s| !s.is_empty());
    raw.bytes = bytes;
    raw
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
    use super::*;

    #[test]
    fn ses_fields_become_api_fields_and_leave_the_message() {
        let ours = b"Received: from x\r\nX-SES-CONFIGURATION-SET: tenant-acme\r\n";
        let client =
            b"x-ses-message-tags: tenant=acme,\r\n  plan = gold, bad\r\nSubject: hi\r\n\r\n\
                       X-SES-CONFIGURATION-SET: body, not a field\r\n";
        let raw = from_pieces(&[ours, client]);
        assert_eq!(raw.configuration_set.as_deref(), Some("tenant-acme"));
        assert_eq!(
            raw.tags,
            [
                ("tenant".into(), "acme".into()),
                ("plan".into(), "gold".into())
            ]
        );
        assert_eq!(
            raw.bytes,
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
        let raw = from_pieces(&pieces);
        assert_eq!(raw.bytes, pieces.concat());
        assert_eq!((raw.configuration_set, raw.tags.len()), (None, 0));
    }
}
