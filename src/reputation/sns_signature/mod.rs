//! SNS's message signatures, checked before anything posted to `POST /ses/events` is read.
//! SNS signs a canonical string of the message's fields with the private key of a certificate
//! it publishes at `SigningCertURL`; whoever can post to the endpoint can write any field, so
//! that URL must be SNS's own host for the topic's region (`https://sns.<region>.amazonaws.com`)
//! and a path of the form SNS's certificates have (`/SimpleNotificationService-<hex>.pem`),
//! checked before anything is fetched: no other path of SNS's host is fetched for a post. Pure: parsing and checking only; fetching the
//! certificate is `sns_verifier`'s.

use aws_lc_rs::signature::{self, RsaParameters, UnparsedPublicKey};
use base64::Engine;
use serde::Deserialize;

/// The oldest notification taken: SNS delivers within seconds (and its retries within
/// minutes), so an older one is someone's replay of a notification seen before, which would
/// count again (and suppress again an address the operator lifted).
pub const MAX_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

/// A message SNS posts to an HTTP(S) subscription (the fields read; others are ignored).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct SnsMessage {
    #[serde(rename = "Type")]
    pub kind: String,
    pub message_id: String,
    pub topic_arn: String,
    pub subject: Option<String>,
    pub message: String,
    pub timestamp: String,
    pub signature_version: Option<String>,
    pub signature: Option<String>,
    #[serde(rename = "SigningCertURL")]
    pub signing_cert_url: Option<String>,
    #[serde(rename = "SubscribeURL")]
    pub subscribe_url: Option<String>,
    pub token: Option<String>,
}

/// Why a message is not taken as SNS's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("unsigned: no {0}")]
    Unsigned(&'static str),
    #[error("SignatureVersion {0:?} (only 1 and 2 are known)")]
    Version(String),
    #[error("a confirmation without {0}")]
    Missing(&'static str),
    #[error("Type {0:?} is not an SNS message type")]
    Type(String),
    #[error("TopicArn {0:?} is not an SNS topic ARN")]
    Topic(String),
    #[error("{0} is not https://sns.{1}.amazonaws.com/...")]
    Host(String, String),
    #[error("{0} is not an SNS certificate's path (/SimpleNotificationService-<hex>.pem)")]
    CertificatePath(String),
    #[error("the signing certificate: {0}")]
    Certificate(String),
    #[error("Signature is not base64")]
    Encoding,
    #[error("Timestamp {0:?} is not an ISO 8601 time")]
    Timestamp(String),
    #[error("Timestamp {0} is more than an hour old: a replay, not SNS's delivery")]
    Stale(String),
    #[error("the signature does not match the message")]
    Mismatch,
}

/// What a message's signature says about it, checked before the certificate is fetched.
#[derive(Debug, Clone)]
pub struct Signed {
    algorithm: &'static RsaParameters,
    signature: Vec<u8>,
    /// `SigningCertURL`, on SNS's host for the topic's region.
    pub cert_url: http::Uri,
}

/// The signature of `message`, its algorithm and its certificate's URL, once that URL is on
/// SNS's host for the region of the topic.
pub fn signed(message: &SnsMessage) -> Result<Signed, SignatureError> {
    let version = (message.signature_version.as_deref())
        .ok_or(SignatureError::Unsigned("SignatureVersion"))?;
    let algorithm = match version {
        "1" => &signature::RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY,
        "2" => &signature::RSA_PKCS1_2048_8192_SHA256,
        other => return Err(SignatureError::Version(other.to_string())),
    };
    let encoded = (message.signature.as_deref()).ok_or(SignatureError::Unsigned("Signature"))?;
    let signature = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|_| SignatureError::Encoding)?;
    let url =
        (message.signing_cert_url.as_deref()).ok_or(SignatureError::Unsigned("SigningCertURL"))?;
    let cert_url = certificate_url(url, &message.topic_arn)?;
    Ok(Signed {
        algorithm,
        signature,
        cert_url,
    })
}

impl Signed {
    /// Whether the signature is the certificate's (`public_key`, from [`public_key`]) over
    /// the message's string to sign.
    pub fn verify(&self, message: &SnsMessage, public_key: &[u8]) -> Result<(), SignatureError> {
        let text = string_to_sign(message)?;
        UnparsedPublicKey::new(self.algorithm, public_key)
            .verify(text.as_bytes(), &self.signature)
            .map_err(|_| SignatureError::Mismatch)
    }
}

/// Whether a notification was published within [`MAX_AGE`] of `now` (its `Timestamp` is
/// signed, so a replay cannot make it younger). Confirmations are not aged: SNS resends them
/// as they are until one is confirmed.
pub fn fresh(message: &SnsMessage, now: std::time::SystemTime) -> Result<(), SignatureError> {
    use aws_smithy_types::date_time::{DateTime, Format};
    if message.kind != "Notification" {
        return Ok(());
    }
    let stamp = &message.timestamp;
    let at = DateTime::from_str(stamp, Format::DateTime)
        .ok()
        .and_then(|t| std::time::SystemTime::try_from(t).ok())
        .ok_or_else(|| SignatureError::Timestamp(stamp.clone()))?;
    match now.duration_since(at) {
        Ok(age) if age > MAX_AGE => Err(SignatureError::Stale(stamp.clone())),
        _ => Ok(()),
    }
}

/// The region of a topic ARN, `arn:aws:sns:REGION:ACCOUNT:NAME`.
pub fn region_of(topic_arn: &str) -> Option<&str> {
    let parts: Vec<&str> = topic_arn.split(':').collect();
    let region = match parts.as_slice() {
        ["arn", "aws", "sns", region, _, _] => *region,
        _ => return None,
    };
    let valid = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    (!region.is_empty() && region.chars().all(valid)).then_some(region)
}

/// `url` when it is `https://sns.<region>.amazonaws.com/...` exactly, for the region of
/// `topic_arn`: no other scheme, host, port or user. Both the certificate and a
/// subscription's confirmation are fetched only from there.
pub fn sns_url(url: &str, topic_arn: &str) -> Result<http::Uri, SignatureError> {
    let region = region_of(topic_arn).ok_or_else(|| SignatureError::Topic(topic_arn.into()))?;
    let host = format!("sns.{region}.amazonaws.com");
    let refused = || SignatureError::Host(url.to_string(), region.to_string());
    let uri: http::Uri = url.parse().map_err(|_| refused())?;
    let on_host = uri.scheme_str() == Some("https")
        && uri.authority().map(|a| a.as_str()) == Some(host.as_str());
    on_host.then_some(uri).ok_or_else(refused)
}

/// `url` when it is on SNS's host (as [`sns_url`] checks) at the path of one of SNS's signing
/// certificates, `/SimpleNotificationService-<hex>.pem`, with no query.
pub fn certificate_url(url: &str, topic_arn: &str) -> Result<http::Uri, SignatureError> {
    let uri = sns_url(url, topic_arn)?;
    let name = (uri.path().strip_prefix("/SimpleNotificationService-"))
        .and_then(|rest| rest.strip_suffix(".pem"));
    let hex = name
        .is_some_and(|n| (1..=64).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_hexdigit()));
    match hex && uri.query().is_none() {
        true => Ok(uri),
        false => Err(SignatureError::CertificatePath(url.to_string())),
    }
}

/// The string SNS signs: `Name\nvalue\n` for each field in AWS's order, which differs between
/// a notification and a (un)subscription confirmation; `Subject` only when present.
pub fn string_to_sign(message: &SnsMessage) -> Result<String, SignatureError> {
    let m = message;
    let fields: Vec<(&str, Option<&str>)> = match m.kind.as_str() {
        "Notification" => vec![
            ("Message", Some(&m.message)),
            ("MessageId", Some(&m.message_id)),
            ("Subject", m.subject.as_deref()),
            ("Timestamp", Some(&m.timestamp)),
            ("TopicArn", Some(&m.topic_arn)),
            ("Type", Some(&m.kind)),
        ],
        "SubscriptionConfirmation" | "UnsubscribeConfirmation" => {
            let url = m.subscribe_url.as_deref();
            let url = url.ok_or(SignatureError::Missing("SubscribeURL"))?;
            let token = m.token.as_deref().ok_or(SignatureError::Missing("Token"))?;
            vec![
                ("Message", Some(&m.message)),
                ("MessageId", Some(&m.message_id)),
                ("SubscribeURL", Some(url)),
                ("Timestamp", Some(&m.timestamp)),
                ("Token", Some(token)),
                ("TopicArn", Some(&m.topic_arn)),
                ("Type", Some(&m.kind)),
            ]
        }
        other => return Err(SignatureError::Type(other.to_string())),
    };
    let mut text = String::new();
    for (name, value) in fields {
        if let Some(value) = value {
            text.extend([name, "\n", value, "\n"]);
        }
    }
    Ok(text)
}

/// The RSA public key (PKCS#1, as aws-lc-rs reads it) of a PEM certificate.
pub fn public_key(pem: &[u8]) -> Result<Vec<u8>, SignatureError> {
    let bad = |e: String| SignatureError::Certificate(e);
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem).map_err(|e| bad(e.to_string()))?;
    let cert = pem.parse_x509().map_err(|e| bad(e.to_string()))?;
    let spki = cert.public_key();
    if spki.algorithm.algorithm != x509_parser::oid_registry::OID_PKCS1_RSAENCRYPTION {
        return Err(bad(format!(
            "not an RSA key ({})",
            spki.algorithm.algorithm
        )));
    }
    Ok(spki.subject_public_key.data.to_vec())
}

#[cfg(test)]
mod tests;
