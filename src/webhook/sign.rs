//! The signature a receiver checks: `Mailsluice-Signature: t=<unix seconds>,v1=<hex>`, the
//! hex being HMAC-SHA256 of `"<t>.<body>"` with the webhook's secret, as Stripe's and
//! others' webhooks are signed. The timestamp is inside what is signed, so a receiver that
//! refuses old timestamps refuses replays.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The header's name.
pub const HEADER: &str = "Mailsluice-Signature";

/// The header's value for `body` sent at `unix_secs`.
pub fn signature(secret: &[u8], unix_secs: u64, body: &[u8]) -> String {
    format!("t={unix_secs},v1={}", hex(&mac(secret, unix_secs, body)))
}

fn mac(secret: &[u8], unix_secs: u64, body: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(unix_secs.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4231's test case 2 (key "Jefe"), the message split where we put the timestamp.
    #[test]
    fn the_mac_is_hmac_sha256_of_timestamp_dot_body() {
        let body = b" want nothing for nothing?";
        let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        let expected = hex(&mac.finalize().into_bytes());
        assert_eq!(
            expected,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let sig = signature(b"Jefe", 1_764_777_600, body);
        let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"1764777600. want nothing for nothing?");
        let whole = hex(&mac.finalize().into_bytes());
        assert_eq!(sig, format!("t=1764777600,v1={whole}"));
        assert_ne!(signature(b"other", 1_764_777_600, body), sig);
        // The example of docs/webhooks.md.
        let doc =
            "t=1764777600,v1=c0edb3e4c8fe355e56ecafaf85a84105a43acb68b1b6b294ba55b14d18a2cb4a";
        assert_eq!(
            signature(b"whsec_test", 1_764_777_600, br#"{"events":[]}"#),
            doc
        );
        assert_ne!(signature(b"Jefe", 1_764_777_601, body), sig);
    }
}
