//! Where direct delivery never goes: this relay's own listening addresses (the mail would
//! loop back to itself), and internal addresses unless `mx_allow_networks` lists them. DNS
//! answers come from whoever owns the recipient's domain, so without this a tenant could make
//! the relay deliver to loopback or to any host of the private network, and use it as a
//! port scanner. Checked before any connection is made.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ipnet::IpNet;

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

/// An IPv4-mapped IPv6 address (`::ffff:127.0.0.2`) as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// Loopback, private, link-local, CGNAT, unspecified, multicast, reserved, benchmarking, IETF
/// protocol assignments, unique-local, site-local, and the IPv6 forms that reach an IPv4
/// address (IPv4-mapped, NAT64, 6to4): every address that is not a host on the public
/// Internet, or may lead to one that is not.
pub(super) fn internal(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => internal_v4(v4),
        IpAddr::V6(v6) => internal_v6(v6),
    }
}

fn internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || a == 0 // "this network"
        || a >= 240 // reserved
        || (a == 100 && (64..128).contains(&b)) // CGNAT, 100.64.0.0/10
        || (a == 198 && (b & 0xfe) == 18) // benchmarking, 198.18.0.0/15
        || (a == 192 && b == 0 && ip.octets()[2] == 0) // IETF protocol assignments, 192.0.0.0/24
}

fn internal_v6(ip: Ipv6Addr) -> bool {
    let [first, second, ..] = ip.segments();
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00 // unique local, fc00::/7
        || (first & 0xffc0) == 0xfe80 // link-local, fe80::/10
        || (first & 0xffc0) == 0xfec0 // site-local (deprecated), fec0::/10
        || first == 0x2002 // 6to4 (deprecated): tunnelled to the IPv4 address inside
        || (first == 0x64 && second == 0xff9b && ip.segments()[2] == 1) // local-use NAT64, 64:ff9b:1::/48
        || nat64(ip).is_some_and(internal_v4)
        || ip.to_ipv4().is_some_and(internal_v4) // IPv4-compatible (deprecated) ::a.b.c.d
}

/// The IPv4 address a well-known-prefix NAT64 address (`64:ff9b::/96`, RFC 6052) reaches:
/// judged as that address, since a NAT64 gateway (AWS's among them) forwards to private IPv4
/// too, while DNS64 gives public IPv4-only MX hosts such addresses in IPv6-only networks.
fn nat64(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let prefix = [0x64, 0xff9b, 0, 0, 0, 0];
    (s[..6] == prefix).then(|| Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_are_known() {
        for ip in [
            "127.0.0.2",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "0.0.0.0",
            "::1",
            "::",
            "::ffff:127.0.0.2",
            "::ffff:10.0.0.1",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "224.0.0.1",
            "255.255.255.255",
            "198.18.0.1",
            "198.19.255.254",
            "192.0.0.8",
            "192.0.0.170",
            "64:ff9b::7f00:1",
            "64:ff9b::a00:1",
            "64:ff9b::c0a8:101",
            "64:ff9b:1::1",
            "64:ff9b:1:ffff::808:808",
            "2002:808:808::1",
            "2002:7f00:1::1",
            "fec0::1",
            "feff::1",
        ] {
            assert!(internal(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "93.184.216.34",
            "172.32.0.1",
            "100.128.0.1",
            "2606:2800::1",
            "::ffff:8.8.8.8",
            "198.17.255.255",
            "198.20.0.1",
            "192.0.1.1",
            "64:ff9b::808:808",
            "64:ff9b:2::1",
            "2001:4860::8888",
            "2003::1",
        ] {
            assert!(!internal(ip.parse().unwrap()), "{ip}");
        }
    }

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
