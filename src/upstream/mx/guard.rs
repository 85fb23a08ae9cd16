//! Where direct delivery never goes: this relay's own listening addresses (the mail would
//! loop back to itself), and internal addresses unless `mx_allow_networks` lists them. DNS
//! answers come from whoever owns the recipient's domain, so without this a tenant could make
//! the relay deliver to loopback or to any host of the private network, and use it as a
//! port scanner. Checked before any connection is made.

use std::net::SocketAddr;

use ipnet::IpNet;

use crate::config::network::{canonical, internal};
use crate::upstream::reply::rejected;
use crate::upstream::{OwnAddresses, UpstreamError};

pub(super) struct Guard {
    /// `mx_allow_networks`: internal networks direct delivery may reach after all.
    allow: Vec<IpNet>,
    /// The addresses the relay listens on, as bound.
    own: OwnAddresses,
}

impl Guard {
    pub fn new(allow: Vec<IpNet>, own: OwnAddresses) -> Guard {
        Guard { allow, own }
    }

    /// Whether the MX host address `to` of `domain` may be connected to.
    pub fn check(&self, domain: &str, to: SocketAddr) -> Result<(), UpstreamError> {
        if self.own.any(|me| is_me(me, to)) {
            return Err(rejected(
                554,
                "5.4.6",
                format!("{domain}: MX host is this relay: mail loops back to myself"),
            ));
        }
        let ip = canonical(to.ip());
        if internal(ip) && !self.allow.iter().any(|net| net.contains(&ip)) {
            return Err(rejected(
                550,
                "5.7.1",
                format!("{domain}: MX host is an internal address"),
            ));
        }
        Ok(())
    }
}

/// Whether `to` reaches the listener bound at `me`: the same address, or any local address
/// we can know of when the listener is bound to all of them (loopback; the machine's other
/// addresses are not known here).
fn is_me(me: SocketAddr, to: SocketAddr) -> bool {
    let (me_ip, to_ip) = (canonical(me.ip()), canonical(to.ip()));
    me.port() == to.port()
        && (me_ip == to_ip
            || (me_ip.is_unspecified() && (to_ip.is_loopback() || to_ip.is_unspecified())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: Result<(), UpstreamError>) -> Option<(u16, String)> {
        match r {
            Ok(()) => None,
            Err(UpstreamError::Rejected { code, enhanced, .. }) => Some((code, enhanced.unwrap())),
            Err(other) => panic!("{other:?}"),
        }
    }

    #[test]
    fn allowed_networks_open_and_our_own_listeners_never() {
        let own = OwnAddresses::default();
        let guard = Guard::new(vec!["10.1.0.0/16".parse().unwrap()], own.clone());
        let at = |ip: &str, port| SocketAddr::new(ip.parse().unwrap(), port);
        assert_eq!(code(guard.check("d", at("10.1.2.3", 25))), None);
        assert_eq!(
            code(guard.check("d", at("10.2.0.1", 25))),
            Some((550, "5.7.1".into()))
        );
        assert_eq!(code(guard.check("d", at("8.8.8.8", 25))), None);
        own.set(&[at("0.0.0.0", 25), at("10.1.0.5", 2525)]);
        for me in [
            at("127.0.0.1", 25),
            at("::ffff:127.0.0.9", 25),
            at("10.1.0.5", 2525),
        ] {
            assert_eq!(
                code(guard.check("d", me)),
                Some((554, "5.4.6".into())),
                "{me}"
            );
        }
        assert_eq!(code(guard.check("d", at("10.1.0.6", 2525))), None);
    }
}
