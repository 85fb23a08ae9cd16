//! Whose messages upstream throttles: one tenant's alone, or everyone's. Pure: time is an
//! argument.
//!
//! Why: a layer that several tenants share (an account-wide one, `key = "none"`) learns the
//! shared rate from throttle replies, but an upstream may throttle one tenant only (its own
//! rule per sender, a marker it dislikes), and a cut would then slow everyone. So a reply is
//! taken as that tenant's own when, over the last interval, every throttle reply came from it
//! while another tenant's messages were granted: the layer does not cut, and that tenant's
//! message waits before it goes again. With no second tenant seen in the interval, a reply
//! cannot be told from the shared rate's, and the layer cuts as before.
//!
//! Two instants per kind of event are enough: the last tenant seen and when, and when a tenant
//! other than that one was last seen.

use std::sync::Arc;

use crate::clock::Nanos;

/// The last grants and throttle replies of one layer, by tenant.
#[derive(Debug, Default)]
pub struct Blame {
    granted: Seen,
    replied: Seen,
}

#[derive(Debug, Default)]
struct Seen {
    last: Option<(Arc<str>, Nanos)>,
    /// When a tenant other than `last`'s was last seen.
    other: Option<Nanos>,
}

impl Seen {
    fn note(&mut self, tenant: &str, now: Nanos) {
        match &mut self.last {
            Some((t, at)) if **t == *tenant => *at = now,
            last => {
                self.other = last.as_ref().map(|(_, at)| *at).or(self.other);
                *last = Some((tenant.into(), now));
            }
        }
    }

    /// Whether a tenant other than `tenant` was seen at or after `since`.
    fn other_than(&self, tenant: &str, since: Nanos) -> bool {
        match &self.last {
            Some((t, at)) if **t != *tenant => *at >= since,
            _ => self.other.is_some_and(|at| at >= since),
        }
    }
}

impl Blame {
    /// Tokens granted to `tenant` at `now`.
    pub fn granted(&mut self, tenant: &str, now: Nanos) {
        self.granted.note(tenant, now);
    }

    /// A throttle reply to a message of `tenant` at `now`: whether it is that tenant's alone
    /// (see the module doc). An unknown tenant (empty) is never blamed.
    pub fn replied(&mut self, tenant: &str, now: Nanos, interval: Nanos) -> bool {
        let since = now.saturating_sub(interval);
        let alone = !tenant.is_empty()
            && self.granted.other_than(tenant, since)
            && !self.replied.other_than(tenant, since);
        self.replied.note(tenant, now);
        alone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Nanos = 1_000_000_000;

    #[test]
    fn one_tenants_replies_are_its_own_while_another_is_granted() {
        let mut b = Blame::default();
        b.granted("bob", 10 * S);
        b.granted("mallory", 10 * S + 1);
        assert!(b.replied("mallory", 10 * S + 2, S));
        assert!(b.replied("mallory", 10 * S + 3, S));
    }

    #[test]
    fn no_second_tenant_or_replies_from_two_mean_the_shared_rate() {
        let mut b = Blame::default();
        b.granted("mallory", 10 * S);
        assert!(
            !b.replied("mallory", 10 * S + 1, S),
            "nobody to compare with"
        );
        b.granted("bob", 10 * S + 2);
        assert!(!b.replied("bob", 10 * S + 3, S));
        assert!(
            !b.replied("mallory", 10 * S + 4, S),
            "bob was throttled too"
        );
        assert!(
            !b.replied("mallory", 12 * S, S),
            "bob's grant is past the interval"
        );
        // Later, bob granted and his replies past: mallory's reply is hers again.
        b.granted("bob", 20 * S);
        assert!(b.replied("mallory", 20 * S + 1, S));
    }

    #[test]
    fn a_grant_to_another_tenant_longer_ago_than_the_interval_does_not_count() {
        let mut b = Blame::default();
        b.granted("bob", S);
        b.granted("mallory", 5 * S);
        assert!(!b.replied("mallory", 5 * S + 1, S));
        assert!(!b.replied("", 5 * S + 2, S), "no tenant: never blamed");
    }
}
