//! Which addresses are internal: not a host on the public Internet, or leading to one that is
//! not. What direct delivery and webhooks refuse to reach unless the operator lists the
//! network (`mx_allow_networks`, a webhook's `allow_networks`): without it, a domain's owner
//! or a webhook's URL could make the relay reach loopback or the private network.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An IPv4-mapped IPv6 address (`::ffff:127.0.0.2`) as the IPv4 address it is.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// Loopback, private, link-local, CGNAT, unspecified, multicast, reserved, benchmarking, IETF
/// protocol assignments, unique-local, site-local, and the IPv6 forms that reach an IPv4
/// address (IPv4-mapped, NAT64, 6to4): every address that is not a host on the public
/// Internet, or may lead to one that is not.
pub fn internal(ip: IpAddr) -> bool {
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
}
