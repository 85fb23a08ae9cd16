//! Addresses that hard-bounced or complained, refused at RCPT for every tenant (account-wide,
//! as SES's own suppression list), for `ttl`, at most `max` of them (past it the oldest
//! suppression goes). Addresses are compared ignoring ASCII case.

use crate::clock::Nanos;

use super::events::Kind;
use super::expiring::Expiring;

/// Why and since when an address is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suppression {
    pub reason: Kind,
    /// `YYYY-MM-DD`.
    pub date: String,
}

impl Suppression {
    /// `hard bounce` or `complaint`, as the reply says it.
    pub fn reason_text(&self) -> &'static str {
        match self.reason {
            Kind::Bounce => "hard bounce",
            Kind::Complaint => "complaint",
        }
    }
}

pub struct Suppressions {
    addresses: Expiring<Suppression>,
}

impl Suppressions {
    pub fn new(max: usize, ttl: Nanos) -> Suppressions {
        Suppressions {
            addresses: Expiring::new(max, ttl),
        }
    }

    /// Suppresses `address` (a second bounce keeps the first one's date and time).
    pub fn add(&mut self, address: &str, suppression: Suppression, now: Nanos) {
        self.addresses
            .insert(&address.to_ascii_lowercase(), suppression, now);
    }

    pub fn get(&self, address: &str, now: Nanos) -> Option<&Suppression> {
        self.addresses.get(&address.to_ascii_lowercase(), now)
    }

    pub fn remove(&mut self, address: &str) -> bool {
        self.addresses
            .remove(&address.to_ascii_lowercase())
            .is_some()
    }

    pub fn len(&self) -> usize {
        self.addresses.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn expire(&mut self, now: Nanos) {
        self.addresses.expire(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounce() -> Suppression {
        Suppression {
            reason: Kind::Bounce,
            date: "2026-12-01".into(),
        }
    }

    #[test]
    fn suppressed_until_ttl_ignoring_case_and_bounded() {
        let mut s = Suppressions::new(2, 100);
        s.add("Gone@Example.com", bounce(), 0);
        assert_eq!(s.get("gone@example.COM", 99), Some(&bounce()));
        assert_eq!(s.get("gone@example.com", 100), None);
        s.add("b@x", bounce(), 1);
        s.add("c@x", bounce(), 2);
        assert_eq!(s.len(), 2);
        assert_eq!(
            s.get("gone@example.com", 2),
            None,
            "the oldest went at the bound"
        );
        assert!(s.remove("B@X"));
        assert!(!s.remove("b@x"));
        assert_eq!(s.get("c@x", 2).unwrap().reason_text(), "hard bounce");
    }
}
