//! Who the client is: its address, whether its network is trusted, whether the connection is
//! encrypted, what it said in EHLO and who it proved to be with AUTH. The policy reads it
//! through the message's `Submitter`, our `Received:` field through the session's hop.
//! Each is set by its verb's file (`ehlo`, `auth`, `starttls`); this file only keeps them.

use std::net::SocketAddr;

use ipnet::IpNet;

use super::received::{self, Repeats, SessionHop};
use crate::pipeline::Submitter;
use crate::policy::Binding;

/// What the client said in EHLO/HELO.
#[derive(Debug, Clone)]
pub struct Greeting {
    pub name: String,
    pub esmtp: bool,
}

/// Who the client proved to be with AUTH, and what that lets it do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthUser {
    pub name: String,
    /// The user's `tenant`, or its name: its messages' `auth_tenant` (the key of `auth`
    /// layers, and their tenant unless `[tenant]` says otherwise).
    pub tenant: String,
    /// Its `header:<Name>` keys are honoured (`trust_key_header`).
    pub trust_key_header: bool,
    /// Its `senders`: the addresses it may send as (MAIL FROM, every `From:` address).
    pub binding: Option<Binding>,
}

/// Who the client is, as far as the session knows now.
pub struct Client {
    peer: SocketAddr,
    /// The client may relay without AUTH (its address is in `trusted_networks`).
    trusted: bool,
    /// The connection is encrypted (implicit TLS, or after STARTTLS).
    tls: bool,
    greeting: Option<Greeting>,
    auth: Option<AuthUser>,
    /// What its messages' `Received:` fields repeat.
    repeats: Repeats,
}

impl Client {
    pub fn new(peer: SocketAddr, tls: bool, trusted_networks: &[IpNet]) -> Client {
        Client {
            peer,
            trusted: trusted_networks.iter().any(|net| net.contains(&peer.ip())),
            tls,
            greeting: None,
            auth: None,
            repeats: Repeats::default(),
        }
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    pub fn tls(&self) -> bool {
        self.tls
    }

    pub fn greeted(&self) -> bool {
        self.greeting.is_some()
    }

    pub fn auth(&self) -> Option<&AuthUser> {
        self.auth.as_ref()
    }

    pub fn greet(&mut self, greeting: Greeting) {
        self.greeting = Some(greeting);
    }

    pub fn authenticated(&mut self, user: AuthUser) {
        self.auth = Some(user);
    }

    /// The connection is encrypted now, and what the client said before is forgotten: it
    /// starts over with EHLO (RFC 3207 4.2).
    pub fn tls_started(&mut self) {
        self.tls = true;
        self.greeting = None;
        self.auth = None;
    }

    /// Only an authenticated client, or one from `trusted_networks`, may send: anything
    /// else would make this an open relay for the upstream's sending reputation.
    pub fn may_relay(&self) -> bool {
        self.trusted || self.auth.is_some()
    }

    /// Who gives a message: the AUTH user (its tenant, its `senders`), or a client `trusted`
    /// by its address. An authenticated client has its user's rights, whatever its address:
    /// it may choose its key with a header only if its user has `trust_key_header`.
    pub fn submitter(&self) -> Submitter<'_> {
        let auth = self.auth.as_ref();
        Submitter {
            auth_tenant: auth.map(|u| u.tenant.as_str()),
            header_trusted: auth.map_or(self.trusted, |u| u.trust_key_header),
            peer: self.peer,
            binding: auth.and_then(|u| u.binding.as_ref()),
        }
    }

    /// The hop our `Received:` field tells of, through `hostname` (this relay's name) and
    /// `instance` (this process's id).
    pub fn hop<'a>(&'a self, hostname: &'a str, instance: &'a str) -> SessionHop<'a> {
        let esmtp = self.greeting.as_ref().is_some_and(|g| g.esmtp);
        SessionHop {
            helo: self.greeting.as_ref().map_or("", |g| g.name.as_str()),
            peer: self.peer.ip(),
            hostname,
            instance,
            protocol: received::protocol(esmtp, self.tls, self.auth.is_some()),
            repeats: &self.repeats,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Envelope;
    use crate::pipeline::Hop;

    fn user(trust_key_header: bool) -> AuthUser {
        AuthUser {
            name: "u".into(),
            tenant: "acme".into(),
            trust_key_header,
            binding: None,
        }
    }

    fn client(peer: &str, trusted: &[&str]) -> Client {
        let nets: Vec<IpNet> = trusted.iter().map(|n| n.parse().unwrap()).collect();
        Client::new(peer.parse().unwrap(), false, &nets)
    }

    /// A trusted address may relay and choose its key with a header; once authenticated,
    /// the client has its user's rights instead, whatever its address.
    #[test]
    fn an_authenticated_client_has_its_users_rights_whatever_its_address() {
        let mut trusted = client("10.0.0.5:25", &["10.0.0.0/8"]);
        assert!(trusted.may_relay());
        let s = trusted.submitter();
        assert_eq!((s.auth_tenant, s.header_trusted), (None, true));
        trusted.authenticated(user(false));
        let s = trusted.submitter();
        assert_eq!((s.auth_tenant, s.header_trusted), (Some("acme"), false));

        let mut stranger = client("192.0.2.1:25", &["10.0.0.0/8"]);
        assert!(!stranger.may_relay());
        assert!(!stranger.submitter().header_trusted);
        stranger.authenticated(user(true));
        assert!(stranger.may_relay());
        assert!(stranger.submitter().header_trusted);
    }

    /// After STARTTLS the client starts over: no greeting, no AUTH user, and our hop says
    /// `ESMTPS` once it greets again.
    #[test]
    fn tls_forgets_the_greeting_and_the_user() {
        let mut c = client("192.0.2.1:25", &[]);
        c.greet(Greeting {
            name: "client.test".into(),
            esmtp: true,
        });
        c.authenticated(user(false));
        assert_eq!(c.hop("relay.test", "0123abcd").protocol, "ESMTPA");
        c.tls_started();
        assert!(c.tls() && !c.greeted() && c.auth().is_none());
        c.greet(Greeting {
            name: "client.test".into(),
            esmtp: true,
        });
        let hop = c.hop("relay.test", "0123abcd");
        assert_eq!(hop.protocol, "ESMTPS");
        let envelope = Envelope::default();
        let field = String::from_utf8(hop.received("id1", &envelope)).unwrap();
        assert!(
            field.starts_with("Received: from client.test ([192.0.2.1])"),
            "{field}"
        );
    }
}
