//! One held message on disk: a first line with the format and a digest, a line of JSON with
//! everything but the message's bytes ([`Meta`]), then the bytes. The digest (SHA-256 of
//! everything after the first line) is checked when the message is read back whole, so a file
//! damaged on disk is set aside and never sent; the start reads only the first two lines.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::error::Damaged;
use crate::message::Envelope;

const MAGIC: &str = "mailsluice-spool 1";
/// The most a file's first two lines may take (a message of 1,000 recipients of 256 bytes
/// fits): past it the file is damaged, not a reason to read gigabytes.
pub(super) const MAX_META: usize = 1 << 20;

/// Which queue a held message waits in: a hold-mode layer's name and the message's key there.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct HeldKey {
    pub layer: String,
    pub key: String,
}

/// Who gave the relay the message, as the policy reads a message's identity: kept so that a
/// held message is keyed, routed and charged at release as it was at its final dot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// The authenticated user's tenant.
    pub auth_tenant: Option<String>,
    /// Whether a `header:` key of the message is trusted.
    pub header_trusted: bool,
    pub peer: SocketAddr,
}

/// Everything of a held message but its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    pub id: String,
    /// Its place in the spool's arrival order.
    pub seq: u64,
    /// When it was held, in Unix milliseconds.
    pub accepted_ms: u64,
    pub key: HeldKey,
    pub from: Option<String>,
    pub rcpts: Vec<String>,
    pub smtputf8: bool,
    pub body_8bit: bool,
    pub origin: Origin,
    /// A delivery status notification the relay wrote (never reported on in turn).
    pub report: bool,
    /// The lengths of the three runs of bytes: our `Received:` field, the fields read only
    /// for the message's identity (a report's: its original's header section), the message.
    pub lens: [u64; 3],
}

impl Meta {
    pub fn envelope(&self) -> Envelope {
        Envelope {
            from: self.from.clone(),
            rcpts: self.rcpts.clone(),
            smtputf8: self.smtputf8,
            body_8bit: self.body_8bit,
        }
    }
}

/// A held message read back whole.
pub struct Held {
    pub meta: Meta,
    bytes: Vec<u8>,
    /// Where the runs start in `bytes`.
    start: usize,
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held").field("meta", &self.meta).finish()
    }
}

impl Held {
    /// Our `Received:` field.
    pub fn received(&self) -> &[u8] {
        let [r, _, _] = self.lens();
        &self.bytes[self.start..self.start + r]
    }

    /// The fields read for the identity, then the message: one run, so that the policy reads
    /// them as one header section.
    pub fn keyed_body(&self) -> &[u8] {
        let [r, _, _] = self.lens();
        &self.bytes[self.start + r..]
    }

    /// The length of the fields read only for the identity, at the start of `keyed_body`.
    pub fn key_fields_len(&self) -> usize {
        self.lens()[1]
    }

    /// The message as the client sent it (a report: as the relay wrote it).
    pub fn body(&self) -> &[u8] {
        &self.keyed_body()[self.key_fields_len()..]
    }

    fn lens(&self) -> [usize; 3] {
        self.meta.lens.map(|n| n as usize)
    }
}

/// The file of a message: `meta` (its `lens` set here) and its three runs.
pub fn encode(meta: &mut Meta, runs: [&[u8]; 3]) -> Vec<u8> {
    meta.lens = runs.map(|r| r.len() as u64);
    let json = serde_json::to_vec(meta).expect("meta is plain data");
    let mut rest = Vec::with_capacity(json.len() + 1 + runs.iter().map(|r| r.len()).sum::<usize>());
    rest.extend_from_slice(&json);
    rest.push(b'\n');
    for run in runs {
        rest.extend_from_slice(run);
    }
    let digest = hex(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &rest).as_ref());
    let mut file = format!("{MAGIC} {digest}\n").into_bytes();
    file.extend_from_slice(&rest);
    file
}

/// The meta of a file from its first bytes (at least its first two lines; at most
/// [`MAX_META`]), without checking the digest.
pub fn meta_of(head: &[u8]) -> Result<Meta, Damaged> {
    let (_, meta, _) = split(head)?;
    Ok(meta)
}

/// A whole file, its digest checked.
pub fn decode(bytes: Vec<u8>) -> Result<Held, Damaged> {
    let (digest, meta, start) = split(&bytes)?;
    let first = bytes
        .iter()
        .position(|&b| b == b'\n')
        .expect("split found it")
        + 1;
    let actual = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &bytes[first..]);
    if hex(actual.as_ref()) != digest {
        return Err(Damaged("its digest does not match its bytes".into()));
    }
    let total: u64 = meta.lens.iter().sum();
    if (bytes.len() - start) as u64 != total {
        return Err(Damaged(format!(
            "{} bytes after its meta, {total} announced",
            bytes.len() - start
        )));
    }
    Ok(Held { meta, bytes, start })
}

/// The digest of the first line, the meta of the second, and where the runs start.
fn split(bytes: &[u8]) -> Result<(String, Meta, usize), Damaged> {
    let line = |from: usize| {
        let end = bytes[from..]
            .iter()
            .take(MAX_META)
            .position(|&b| b == b'\n');
        end.map(|n| (&bytes[from..from + n], from + n + 1))
            .ok_or_else(|| Damaged("truncated before its meta ends".into()))
    };
    let (first, next) = line(0)?;
    let first = std::str::from_utf8(first).map_err(|_| Damaged("not a spool file".into()))?;
    let digest = (first.strip_prefix(MAGIC))
        .and_then(|rest| rest.strip_prefix(' '))
        .ok_or_else(|| Damaged("not a spool file of this version".into()))?;
    let (json, start) = line(next)?;
    let meta: Meta = serde_json::from_slice(json).map_err(|e| Damaged(format!("its meta: {e}")))?;
    Ok((digest.to_string(), meta, start))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> Meta {
        Meta {
            id: "0123456789abcdef".into(),
            seq: 7,
            accepted_ms: 1_700_000_000_000,
            key: HeldKey {
                layer: "tenant".into(),
                key: "acme".into(),
            },
            from: Some("a@b.example".into()),
            rcpts: vec!["c@d.example".into()],
            smtputf8: false,
            body_8bit: true,
            origin: Origin {
                auth_tenant: None,
                header_trusted: true,
                peer: "127.0.0.1:5000".parse().unwrap(),
            },
            report: false,
            lens: [0; 3],
        }
    }

    #[test]
    fn a_file_reads_back_as_written() {
        let mut m = meta();
        let file = encode(
            &mut m,
            [b"Received: x\r\n", b"", b"Subject: s\r\n\r\nhi\r\n"],
        );
        assert_eq!(meta_of(&file).unwrap(), m);
        let held = decode(file).unwrap();
        assert_eq!(held.meta, m);
        assert_eq!(held.received(), b"Received: x\r\n");
        assert_eq!(held.body(), b"Subject: s\r\n\r\nhi\r\n");
        assert_eq!(held.meta.envelope().rcpts, ["c@d.example"]);
    }

    #[test]
    fn a_damaged_or_truncated_file_is_refused() {
        let file = encode(&mut meta(), [b"R\r\n", b"K: v\r\n", b"body\r\n"]);
        let mut flipped = file.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(decode(flipped).unwrap_err().0.contains("digest"));
        let truncated = file[..file.len() - 2].to_vec();
        assert!(decode(truncated).is_err());
        assert!(meta_of(&file[..20]).is_err());
        assert!(meta_of(b"garbage\n{}\n").is_err());
    }
}
