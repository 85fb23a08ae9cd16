//! The security part of the `[smtp]` schema: `[smtp.tls]` (certificate files for STARTTLS
//! and implicit TLS) and `[smtp.auth]` (users, password hashes, the failed-attempt lockout).
//! Kept apart from the rest of `[smtp]` so the rules that decide who may send stay in one place.

use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};
use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use super::{BrokenRule, SenderPattern, Senders, SmtpConfig};

/// `[smtp.tls]`: the certificate chain and its private key, both PEM files. Read at startup
/// (a missing or mismatched key stops the start) and again on SIGHUP.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// A TLS handshake (STARTTLS or implicit) that has not finished by then is dropped, so a
    /// client cannot hold a connection slot by never finishing it.
    #[serde(default = "default_handshake_timeout_ms")]
    pub handshake_timeout_ms: NonZeroU64,
}

/// `[smtp.auth]`: who may log in, and how hard guessing passwords is made.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    #[serde(default)]
    pub users: Vec<UserConfig>,
    /// Every failed AUTH is answered only after this delay, so guessing is slow even before
    /// the lockout.
    #[serde(default = "default_failure_delay_ms")]
    pub failure_delay_ms: u64,
    /// Failed attempts from one client address (an IPv6 /64) within `failure_window_ms`
    /// after which it is locked out.
    #[serde(default = "default_max_failures")]
    pub max_failures: NonZeroU32,
    #[serde(default = "default_failure_window_ms")]
    pub failure_window_ms: NonZeroU64,
    /// How long a locked-out address gets `421 4.7.0` at AUTH.
    #[serde(default = "default_lockout_ms")]
    pub lockout_ms: NonZeroU64,
    /// Password checks hashing at once in the whole process (each takes its hash's memory,
    /// 19 MiB by default); more wait for a free one. Absent: the number of cores.
    pub max_parallel_checks: Option<NonZeroUsize>,
}

impl AuthConfig {
    /// `max_parallel_checks`, or the number of cores.
    pub fn parallel_checks(&self) -> usize {
        self.max_parallel_checks
            .map(NonZeroUsize::get)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, NonZeroUsize::get))
    }
}

/// One user that may AUTH.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    pub user: Spanned<String>,
    /// A PHC string from `mailsluice hash-password` (`$argon2id$v=19$...`).
    pub password_hash: Spanned<String>,
    /// The throttle key of layers keyed on `auth` (and of header-keyed layers, which a header
    /// cannot override). Without it, the user name is the key.
    pub tenant: Option<String>,
    /// Whether `header:<Name>` keys written by this user are honoured: for a platform that
    /// sends on behalf of its own tenants. Off by default: a header cannot move a user out
    /// of its tenant's bucket.
    #[serde(default)]
    pub trust_key_header: bool,
    /// The addresses this user may send as (MAIL FROM and every `From:` address); absent,
    /// any. Kept as written, with their places, so a malformed one is named at its line.
    pub senders: Option<Vec<Spanned<String>>>,
}

impl UserConfig {
    /// The key this user's messages are charged to in `auth` layers.
    pub fn tenant(&self) -> &str {
        self.tenant.as_deref().unwrap_or(self.user.get_ref())
    }

    /// Its `senders`, parsed (a config that loaded holds none malformed).
    pub fn senders(&self) -> Option<Senders> {
        let patterns = self.senders.as_ref()?.iter();
        let parsed = patterns.filter_map(|p| SenderPattern::try_from(p.get_ref().clone()).ok());
        Some(Senders::from(parsed.collect::<Vec<_>>()))
    }
}

fn default_handshake_timeout_ms() -> NonZeroU64 {
    NonZeroU64::new(10_000).unwrap()
}
pub(super) fn default_failure_delay_ms() -> u64 {
    1000
}
pub(super) fn default_max_failures() -> NonZeroU32 {
    NonZeroU32::new(5).unwrap()
}
pub(super) fn default_failure_window_ms() -> NonZeroU64 {
    NonZeroU64::new(300_000).unwrap()
}
pub(super) fn default_lockout_ms() -> NonZeroU64 {
    NonZeroU64::new(300_000).unwrap()
}

/// The security keys' rules that span keys or entries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecurityRule {
    #[error("implicit TLS needs a certificate: add [smtp.tls] cert and key")]
    TlsListenWithoutCertificate,
    #[error("a user name must be non-empty, without NUL, CR or LF")]
    BadUserName,
    /// `user` is the user's name cut to 32 characters.
    #[error(
        "the tenant (or user name) of `{user}` is a key, at most {} bytes",
        super::MAX_KEY_BYTES
    )]
    TenantTooLong { user: String },
    #[error("duplicate user `{0}`")]
    DuplicateUser(String),
    #[error(transparent)]
    BadSender(#[from] super::BadSenderPattern),
    #[error("set `password_hash` or `password_hash_env`, not both")]
    AdminHashTwice,
    #[error("environment variable `{0}` is not set")]
    EnvNotSet(String),
}

/// Why a `password_hash` is not one argon2 can check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PasswordHashError {
    #[error("not a PHC hash string ({0}); make one with `mailsluice hash-password`")]
    NotPhc(argon2::password_hash::Error),
    #[error("algorithm `{0}` is not argon2; make one with `mailsluice hash-password`")]
    NotArgon2(String),
    #[error("bad argon2 parameters: {0}")]
    BadParameters(argon2::password_hash::Error),
    #[error("the hash has no output part")]
    NoOutput,
}

/// The cross-key rules of the security keys; errors name the key and its line.
pub(super) fn validate(smtp: &SmtpConfig, text: &str) -> Result<(), BrokenRule> {
    if !smtp.tls_listen.is_empty() && smtp.tls.is_none() {
        return Err(BrokenRule::unlocated(
            "smtp.tls_listen",
            SecurityRule::TlsListenWithoutCertificate,
        ));
    }
    let Some(auth) = &smtp.auth else {
        return Ok(());
    };
    let mut names = std::collections::HashSet::new();
    for user in &auth.users {
        let name = user.user.get_ref();
        let at = |key, problem: SecurityRule| BrokenRule::at(text, user.user.span(), key, problem);
        if name.is_empty() || name.contains(['\0', '\r', '\n']) {
            return Err(at("smtp.auth.users.user", SecurityRule::BadUserName));
        }
        if user.tenant().len() > super::MAX_KEY_BYTES {
            let user = name.chars().take(32).collect();
            return Err(at(
                "smtp.auth.users.tenant",
                SecurityRule::TenantTooLong { user },
            ));
        }
        if !names.insert(name.clone()) {
            return Err(at(
                "smtp.auth.users.user",
                SecurityRule::DuplicateUser(name.clone()),
            ));
        }
        for pattern in user.senders.iter().flatten() {
            SenderPattern::try_from(pattern.get_ref().clone()).map_err(|e| {
                BrokenRule::at(
                    text,
                    pattern.span(),
                    "smtp.auth.users.senders",
                    SecurityRule::from(e),
                )
            })?;
        }
        check_hash(user.password_hash.get_ref()).map_err(|e| {
            BrokenRule::at(
                text,
                user.password_hash.span(),
                "smtp.auth.users.password_hash",
                e,
            )
        })?;
    }
    Ok(())
}

/// An argon2 PHC string with parameters argon2 accepts, so a typo is a startup error and not
/// a user who can never log in.
pub(super) fn check_hash(hash: &str) -> Result<(), PasswordHashError> {
    let parsed = argon2::PasswordHash::new(hash).map_err(PasswordHashError::NotPhc)?;
    if !parsed.algorithm.as_str().starts_with("argon2") {
        return Err(PasswordHashError::NotArgon2(parsed.algorithm.to_string()));
    }
    argon2::Params::try_from(&parsed).map_err(PasswordHashError::BadParameters)?;
    if parsed.hash.is_none() {
        return Err(PasswordHashError::NoOutput);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, InvalidConfig};

    const HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$hRh5UbO5V5zAcTz1r34tZgRfrqBvAdiE/lw+J3iU+Ls";

    fn parse(smtp_extra: &str) -> Result<Config, InvalidConfig> {
        Config::parse(&format!(
            "[smtp]\nlisten = [\"127.0.0.1:0\"]\n{smtp_extra}\n[upstream]\nurl = \"file://o\"\n"
        ))
    }

    #[test]
    fn users_parse_with_defaults() {
        let c = parse(&format!(
            "[smtp.auth]\nusers = [{{ user = \"acme\", password_hash = \"{HASH}\", tenant = \"t1\" }},\n  {{ user = \"b\", password_hash = \"{HASH}\" }}]\n"
        ))
        .unwrap();
        let auth = c.smtp.auth.unwrap();
        assert_eq!(auth.users[0].tenant(), "t1");
        assert_eq!(auth.users[1].tenant(), "b");
        assert!(!auth.users[0].trust_key_header);
        assert_eq!(auth.max_failures.get(), 5);
        assert_eq!(auth.failure_delay_ms, 1000);
        assert!(auth.max_parallel_checks.is_none() && auth.parallel_checks() >= 1);
        assert!(!c.smtp.allow_plaintext_auth);
        assert_eq!(c.smtp.max_junk_commands.get(), 100);
        assert_eq!(c.smtp.max_buffered_bytes.get(), 536_870_912);
    }

    #[test]
    fn zero_bounds_are_refused_by_name() {
        for key in [
            "max_junk_commands = 0",
            "max_buffered_bytes = 0",
            "[smtp.auth]\nmax_parallel_checks = 0",
        ] {
            let err = parse(key).unwrap_err().to_string();
            let name = key.rsplit('\n').next().unwrap().split(' ').next().unwrap();
            assert!(err.contains(name) && err.contains("line"), "{err}");
        }
        let c = parse("[smtp.auth]\nmax_parallel_checks = 3\n").unwrap();
        assert_eq!(c.smtp.auth.unwrap().parallel_checks(), 3);
    }

    #[test]
    fn bad_hash_is_named_with_its_line() {
        let err = parse("[smtp.auth]\nusers = [\n { user = \"a\", password_hash = \"secret\" }]\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("password_hash") && err.contains("line 5"),
            "{err}"
        );
    }

    #[test]
    fn senders_parse_and_a_malformed_pattern_is_named_with_its_line() {
        let c = parse(&format!(
            "[smtp.auth]\nusers = [{{ user = \"a\", password_hash = \"{HASH}\", \
             senders = [\"billing@acme.example\", \"@Acme.Example\"] }}]\n"
        ))
        .unwrap();
        let senders = c.smtp.auth.unwrap().users[0].senders().unwrap();
        assert_eq!(senders.patterns().len(), 2);
        assert!(senders.allow("x@ACME.example"));
        let err = parse(&format!(
            "[[smtp.auth.users]]\nuser = \"a\"\npassword_hash = \"{HASH}\"\n\
             senders = [\n  \"@acme.example\",\n  \"acme.example\",\n]\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("smtp.auth.users.senders")
                && err.contains("`acme.example`")
                && err.contains("line 8"),
            "{err}"
        );
    }

    #[test]
    fn duplicate_user_is_refused() {
        let err = parse(&format!(
            "[smtp.auth]\nusers = [{{ user = \"a\", password_hash = \"{HASH}\" }}, {{ user = \"a\", password_hash = \"{HASH}\" }}]\n"
        ))
        .unwrap_err().to_string();
        assert!(err.contains("duplicate user"), "{err}");
    }

    #[test]
    fn implicit_tls_needs_a_certificate() {
        let err = parse("tls_listen = [\"127.0.0.1:0\"]\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("smtp.tls_listen"), "{err}");
        let c = parse(
            "tls_listen = [\"127.0.0.1:0\"]\n[smtp.tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\n",
        )
        .unwrap();
        assert_eq!(c.smtp.tls.unwrap().handshake_timeout_ms.get(), 10_000);
    }
}
