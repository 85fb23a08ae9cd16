//! `senders` of an AUTH user: the addresses it may send as, so that one tenant's login cannot
//! send as another tenant's domain (Postfix's `reject_sender_login_mismatch`). A pattern is an
//! exact address (`billing@acme.example`) or every address at one domain (`@acme.example`).
//! Domains are compared without case; a local part exactly as written (RFC 5321 2.4 lets a
//! server treat it as case-sensitive, and refusing a spelling is the safe side).

use std::sync::Arc;

/// One pattern of `senders`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SenderPattern {
    /// This address only; the domain held lower-cased.
    Address { local: String, domain: String },
    /// Any address at this domain (not its subdomains), lower-cased.
    Domain(String),
}

/// Text that is neither `local@domain` nor `@domain`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a sender pattern: an address (`billing@acme.example`) or `@domain` \
     (`@acme.example`)"
)]
pub struct BadSenderPattern(pub String);

impl TryFrom<String> for SenderPattern {
    type Error = BadSenderPattern;

    fn try_from(text: String) -> Result<SenderPattern, BadSenderPattern> {
        let bad = || BadSenderPattern(text.clone());
        let (local, domain) = text.rsplit_once('@').ok_or_else(bad)?;
        if !is_domain(domain) {
            return Err(bad());
        }
        let domain = domain.to_lowercase();
        match local {
            "" => Ok(SenderPattern::Domain(domain)),
            local if is_dot_atom(local) => Ok(SenderPattern::Address {
                local: local.to_string(),
                domain,
            }),
            _ => Err(bad()),
        }
    }
}

impl SenderPattern {
    /// Whether `address` (a mailbox as the client wrote it) is inside the pattern.
    pub fn allows(&self, address: &str) -> bool {
        let Some((local, domain)) = address.rsplit_once('@') else {
            return false;
        };
        let same_domain = |d: &str| domain.to_lowercase() == d;
        match self {
            SenderPattern::Address {
                local: l,
                domain: d,
            } => local == l && same_domain(d),
            SenderPattern::Domain(d) => same_domain(d),
        }
    }
}

/// A user's `senders`: shared, so the identity of each of its messages holds it at no cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Senders(Arc<[SenderPattern]>);

impl From<Vec<SenderPattern>> for Senders {
    fn from(patterns: Vec<SenderPattern>) -> Senders {
        Senders(patterns.into())
    }
}

impl Senders {
    /// Whether `address` is inside one of the patterns.
    pub fn allow(&self, address: &str) -> bool {
        self.0.iter().any(|p| p.allows(address))
    }

    pub fn patterns(&self) -> &[SenderPattern] {
        &self.0
    }
}

/// A domain name: labels of letters (any script), digits and `-`, joined by dots, none empty.
fn is_domain(domain: &str) -> bool {
    (1..=253).contains(&domain.len())
        && domain.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_alphanumeric() || c == '-')
        })
}

/// RFC 5322's dot-atom (UTF-8 allowed, RFC 6532), at most 64 bytes: no quoted local parts.
fn is_dot_atom(local: &str) -> bool {
    let atext = |c: char| c.is_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c);
    local.len() <= 64
        && local
            .split('.')
            .all(|a| !a.is_empty() && a.chars().all(atext))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> Result<SenderPattern, BadSenderPattern> {
        SenderPattern::try_from(text.to_string())
    }

    #[test]
    fn patterns_are_an_address_or_a_domain() {
        assert_eq!(
            pattern("Billing@ACME.example").unwrap(),
            SenderPattern::Address {
                local: "Billing".into(),
                domain: "acme.example".into()
            }
        );
        assert_eq!(
            pattern("@Acme.Example").unwrap(),
            SenderPattern::Domain("acme.example".into())
        );
        for bad in [
            "acme.example",
            "@",
            "a@",
            "@a..b",
            "@.a",
            "a b@x.example",
            "\"q\"@x.example",
            "a..b@x.example",
            "@-x.example",
            "@x_y.example",
            "",
        ] {
            assert!(pattern(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn domains_match_without_case_local_parts_exactly() {
        let senders = Senders::from(vec![
            pattern("billing@acme.example").unwrap(),
            pattern("@shared.example").unwrap(),
        ]);
        assert!(senders.allow("billing@ACME.Example"));
        assert!(!senders.allow("Billing@acme.example"));
        assert!(!senders.allow("ceo@acme.example"));
        assert!(senders.allow("anyone@Shared.EXAMPLE"));
        assert!(
            !senders.allow("anyone@sub.shared.example"),
            "not subdomains"
        );
        assert!(!senders.allow("ceo@globex.example"));
        assert!(!senders.allow("no-domain"));
        assert!(!senders.allow("billing@acme.example.evil"));
    }
}
