//! What the relay gives the token endpoint for a token (RFC 6749 4.4, RFC 7523): a client
//! secret, a signed client assertion (Microsoft's certificate credentials), or a service
//! account's signed JWT with the mailbox as its subject (Google's domain-wide delegation).
//! The JWTs are RS256, signed by `jsonwebtoken` on aws-lc-rs.

use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::OauthSetupError;
use crate::config::{OauthConfig, OauthProvider};

/// How long a signed assertion is good for: Google takes at most an hour.
const ASSERTION_SECS: u64 = 3600;

/// One way of asking for a token.
pub(super) enum Grant {
    /// `client_credentials` with `client_id` and `client_secret`.
    Secret {
        client_id: String,
        secret: String,
        scope: Option<String>,
    },
    /// `client_credentials` with a JWT signed by the certificate's key (`x5t#S256` names the
    /// certificate registered on the app).
    Assertion {
        client_id: String,
        key: EncodingKey,
        thumbprint: String,
        scope: Option<String>,
    },
    /// `jwt-bearer`: the service account's JWT, `sub` = the mailbox.
    ServiceAccount {
        client_email: String,
        key: EncodingKey,
        scope: Option<String>,
    },
}

/// A Google service account's JSON key, of what the grant needs.
#[derive(Deserialize)]
struct ServiceAccountKey {
    client_email: String,
    private_key: String,
}

#[derive(Serialize)]
struct Claims<'a> {
    iss: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    sub: Option<&'a str>,
    aud: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    scope: Option<&'a str>,
    iat: u64,
    exp: u64,
    /// Microsoft asks each assertion to be unique.
    #[serde(skip_serializing_if = "Option::is_none")]
    jti: Option<String>,
}

impl Grant {
    /// The grant `config` asks for, its secret read now (from the environment or the key),
    /// so a missing one stops startup rather than every message.
    pub fn of(config: &OauthConfig) -> Result<Grant, OauthSetupError> {
        let scope = config.scope().map(str::to_string);
        let client_id = || config.client_id.clone().unwrap_or_default();
        if let Some(var) = &config.client_secret_env {
            let secret = std::env::var(var)
                .ok()
                .filter(|s| !s.is_empty())
                .ok_or_else(|| OauthSetupError::SecretEnv(var.clone()))?;
            return Ok(Grant::Secret {
                client_id: client_id(),
                secret,
                scope,
            });
        }
        let key_text = read_key(config)?;
        match config.provider {
            OauthProvider::Google => {
                let account: ServiceAccountKey = serde_json::from_str(&key_text)
                    .map_err(|e| OauthSetupError::Key(format!("not a service account key: {e}")))?;
                let key = EncodingKey::from_rsa_pem(account.private_key.as_bytes())
                    .map_err(|e| OauthSetupError::Key(format!("its private_key: {e}")))?;
                Ok(Grant::ServiceAccount {
                    client_email: account.client_email,
                    key,
                    scope,
                })
            }
            OauthProvider::Microsoft | OauthProvider::Generic => {
                let key = EncodingKey::from_rsa_pem(key_text.as_bytes())
                    .map_err(|e| OauthSetupError::Key(format!("no RSA private key: {e}")))?;
                Ok(Grant::Assertion {
                    client_id: client_id(),
                    key,
                    thumbprint: thumbprint(&key_text)?,
                    scope,
                })
            }
        }
    }

    /// Whether each mailbox needs its own token (Google: the mailbox is the JWT's subject);
    /// otherwise one token serves every mailbox the app may send as.
    pub fn per_mailbox(&self) -> bool {
        matches!(self, Grant::ServiceAccount { .. })
    }

    /// The form to POST to `token_url` for `mailbox`'s token.
    pub fn form(
        &self,
        mailbox: &str,
        token_url: &str,
    ) -> Result<String, jsonwebtoken::errors::Error> {
        let pairs = match self {
            Grant::Secret {
                client_id,
                secret,
                scope,
            } => {
                let mut pairs = vec![
                    ("grant_type", "client_credentials".to_string()),
                    ("client_id", client_id.clone()),
                    ("client_secret", secret.clone()),
                ];
                pairs.extend(scope.iter().map(|s| ("scope", s.clone())));
                pairs
            }
            Grant::Assertion {
                client_id,
                key,
                thumbprint,
                scope,
            } => {
                let assertion = client_assertion(client_id, key, thumbprint, token_url)?;
                let mut pairs = vec![
                    ("grant_type", "client_credentials".to_string()),
                    ("client_id", client_id.clone()),
                    (
                        "client_assertion_type",
                        "urn:ietf:params:oauth:client-assertion-type:jwt-bearer".to_string(),
                    ),
                    ("client_assertion", assertion),
                ];
                pairs.extend(scope.iter().map(|s| ("scope", s.clone())));
                pairs
            }
            Grant::ServiceAccount {
                client_email,
                key,
                scope,
            } => {
                let now = unix_now();
                let claims = Claims {
                    iss: client_email,
                    sub: Some(mailbox),
                    aud: token_url,
                    scope: scope.as_deref(),
                    iat: now,
                    exp: now + ASSERTION_SECS,
                    jti: None,
                };
                let assertion = jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims, key)?;
                let grant_type = "urn:ietf:params:oauth:grant-type:jwt-bearer".to_string();
                vec![("grant_type", grant_type), ("assertion", assertion)]
            }
        };
        Ok(encode_form(&pairs))
    }
}

/// Microsoft's client assertion: the app as issuer and subject, the token endpoint as
/// audience, ten minutes long, unique (`jti`), naming its certificate by `x5t#S256`.
fn client_assertion(
    client_id: &str,
    key: &EncodingKey,
    thumbprint: &str,
    token_url: &str,
) -> Result<String, jsonwebtoken::errors::Error> {
    let mut header = Header::new(Algorithm::RS256);
    header.x5t_s256 = Some(thumbprint.to_string());
    let now = unix_now();
    let claims = Claims {
        iss: client_id,
        sub: Some(client_id),
        aud: token_url,
        scope: None,
        iat: now,
        exp: now + ASSERTION_SECS / 6,
        jti: Some(uuid::Uuid::new_v4().to_string()),
    };
    jsonwebtoken::encode(&header, &claims, key)
}

/// `application/x-www-form-urlencoded`.
fn encode_form(pairs: &[(&str, String)]) -> String {
    let pairs = pairs.iter().map(|(name, value)| {
        let value = utf8_percent_encode(value, NON_ALPHANUMERIC);
        format!("{name}={value}")
    });
    pairs.collect::<Vec<_>>().join("&")
}

fn read_key(config: &OauthConfig) -> Result<String, OauthSetupError> {
    match (&config.key_file, &config.key_env) {
        (Some(path), _) => std::fs::read_to_string(path)
            .map_err(|e| OauthSetupError::Key(format!("{}: {e}", path.display()))),
        (None, Some(var)) => std::env::var(var)
            .ok()
            .filter(|k| !k.is_empty())
            .ok_or_else(|| OauthSetupError::KeyEnv(var.clone())),
        (None, None) => Err(OauthSetupError::Key("no key_file or key_env".into())),
    }
}

/// The base64url SHA-256 of the certificate in `pem` (its DER): Microsoft's `x5t#S256`.
fn thumbprint(pem: &str) -> Result<String, OauthSetupError> {
    use base64::Engine as _;
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    let cert = CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .and_then(Result::ok)
        .ok_or_else(|| OauthSetupError::Key("no CERTIFICATE next to the private key".into()))?;
    let digest = Sha256::digest(cert.as_ref());
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest))
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_form_is_url_encoded() {
        let grant = Grant::Secret {
            client_id: "app id".into(),
            secret: "s&cr=t".into(),
            scope: Some("https://outlook.office365.com/.default".into()),
        };
        let form = grant.form("printer@contoso.com", "https://t/").unwrap();
        assert_eq!(
            form,
            "grant_type=client%5Fcredentials&client_id=app%20id&client_secret=s%26cr%3Dt\
             &scope=https%3A%2F%2Foutlook%2Eoffice365%2Ecom%2F%2Edefault"
        );
        assert!(!grant.per_mailbox());
    }
}
