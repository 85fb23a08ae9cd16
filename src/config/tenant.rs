//! `[tenant]`: whose message it is. One key source, read with the layers' trust rules (a
//! header names the tenant only for a client trusted to choose its key, else the AUTH user's
//! tenant stands), so that webhooks, the reputation guard (unless `[reputation] key` says
//! otherwise) and an SES tenant's `{tenant}` all name the same tenant. Without the section a
//! message is the tenant `[reputation] key` names when it has one (one key then names the
//! guard's tenants and the webhooks'), else its AUTH user's tenant's.

use serde::Deserialize;

use super::{BrokenRule, KeySource, UnknownKeySource};

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// Where the tenant comes from.
    #[serde(default)]
    pub key: TenantKey,
    /// The tenant when its source is absent (a client without AUTH, a header left out).
    #[serde(default = "default_key")]
    pub default_key: String,
    /// Whether the file has the section (else [`inherit`] may fill it).
    #[serde(skip_deserializing, default = "yes")]
    pub in_file: bool,
}

impl Default for TenantConfig {
    fn default() -> TenantConfig {
        TenantConfig {
            key: TenantKey::default(),
            default_key: default_key(),
            in_file: false,
        }
    }
}

/// `key` of `[tenant]`: a key source like a layer's, but one that names a tenant. A message
/// has several recipient domains, and `none` would make every message one tenant's, so
/// `rcpt-domain` and `none` are refused.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct TenantKey(pub KeySource);

impl Default for TenantKey {
    fn default() -> TenantKey {
        TenantKey(KeySource::Auth)
    }
}

/// Why `[tenant] key` is refused, as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadTenantKey {
    #[error("key `tenant.key`: {0}")]
    Unknown(UnknownKeySource),
    #[error(
        "key `tenant.key`: `{0}` names no tenant: expected auth, header:<Name>, sender, \
         sender-domain or client-ip"
    )]
    NotATenant(String),
}

impl TryFrom<String> for TenantKey {
    type Error = BadTenantKey;

    fn try_from(text: String) -> Result<TenantKey, BadTenantKey> {
        match KeySource::parse(&text).map_err(BadTenantKey::Unknown)? {
            KeySource::RcptDomain | KeySource::None => Err(BadTenantKey::NotATenant(text)),
            source => Ok(TenantKey(source)),
        }
    }
}

fn default_key() -> String {
    "default".into()
}
fn yes() -> bool {
    true
}

/// Without `[tenant]`, `[reputation] key` (and its `default_key`) names the tenant when it is
/// set: a file that keys the guard alone gets webhooks matching the same tenants.
pub(super) fn inherit(config: &mut super::Config) {
    let own = config
        .reputation
        .as_ref()
        .and_then(|r| Some((r.key.as_ref()?, r)));
    if let (false, Some((key, reputation))) = (config.tenant.in_file, own) {
        config.tenant.key = TenantKey(key.0.clone());
        config.tenant.default_key = reputation.default_key.clone();
    }
}

/// The rule of `[tenant]` no single key's type can say.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TenantRule {
    #[error("a tenant, non-empty and at most {} bytes", super::MAX_KEY_BYTES)]
    BadDefaultKey,
}

/// The tenant's `default_key` is a key like any other: non-empty and short.
pub(super) fn validate(tenant: &TenantConfig) -> Result<(), BrokenRule> {
    let key = &tenant.default_key;
    if key.is_empty() || key.len() > super::MAX_KEY_BYTES {
        return Err(BrokenRule::unlocated(
            "tenant.default_key",
            TenantRule::BadDefaultKey,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::KeySource;

    use crate::config::tests::parse_with as parse;

    #[test]
    fn absent_it_is_the_auth_users_tenant() {
        let c = parse("").unwrap();
        assert_eq!(c.tenant.key.0, KeySource::Auth);
        assert_eq!(c.tenant.default_key, "default");
    }

    #[test]
    fn a_header_key_and_its_default_are_read() {
        let c = parse("[tenant]\nkey = \"header:X-Tenant\"\ndefault_key = \"shared\"\n").unwrap();
        assert_eq!(c.tenant.key.0, KeySource::Header("X-Tenant".into()));
        assert_eq!(c.tenant.default_key, "shared");
        let c = parse("[tenant]\nkey = \"sender-domain\"\n").unwrap();
        assert_eq!(c.tenant.key.0, KeySource::SenderDomain);
    }

    #[test]
    fn absent_it_is_the_reputation_guard_s_own_key_when_set() {
        let c = parse("[reputation]\nkey = \"rcpt-domain\"\ndefault_key = \"r\"\n").unwrap();
        assert_eq!(
            (&c.tenant.key.0, c.tenant.default_key.as_str()),
            (&KeySource::RcptDomain, "r")
        );
        let c = parse("[tenant]\nkey = \"sender\"\n[reputation]\nkey = \"client-ip\"\n").unwrap();
        assert_eq!(c.tenant.key.0, KeySource::Sender, "the section stands");
        assert_eq!(c.reputation.unwrap().key.unwrap().0, KeySource::ClientIp);
    }

    #[test]
    fn bad_keys_name_their_key_and_line() {
        for (body, key, line, says) in [
            ("key = \"moon\"\n", "tenant.key", 6, "expected auth"),
            (
                "key = \"rcpt-domain\"\n",
                "tenant.key",
                6,
                "names no tenant",
            ),
            ("key = \"none\"\n", "tenant.key", 6, "names no tenant"),
            ("key = \"auth\"\nbogus = 1\n", "bogus", 7, "unknown field"),
        ] {
            let err = parse(&format!("[tenant]\n{body}")).unwrap_err().to_string();
            assert!(
                err.contains(key) && err.contains(&format!("line {line}")) && err.contains(says),
                "{body}: {err}"
            );
        }
        let err = parse("[tenant]\ndefault_key = \"\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("tenant.default_key"), "{err}");
    }
}
