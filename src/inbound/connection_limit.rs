//! The connections each client address holds (`max_connections_per_ip`). The table holds
//! only live connections, so it is bounded by `max_connections`.
//!
//! An IPv6 client is counted by its /64, the block one subscriber gets: counting single
//! addresses would let it pick a fresh one for every connection.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};

/// The address a client is counted under: IPv4 as is (also when IPv4-mapped), IPv6 by /64.
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
    }
}

/// Live connections per client address.
pub struct Connections {
    max: usize,
    held: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection counted against its address; released when dropped.
pub struct ConnectionSlot {
    table: Arc<Connections>,
    key: IpAddr,
}

impl Connections {
    pub fn new(max: usize) -> Arc<Connections> {
        Arc::new(Connections {
            max,
            held: Mutex::new(HashMap::new()),
        })
    }

    /// A slot for a new connection from `ip`, or `None` when it already holds `max`.
    pub fn try_acquire(self: &Arc<Self>, ip: IpAddr) -> Option<ConnectionSlot> {
        let key = client_key(ip);
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let count = held.entry(key).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(ConnectionSlot {
            table: self.clone(),
            key,
        })
    }

    /// Connections held by `ip`'s address (for tests and logs).
    pub fn held(&self, ip: IpAddr) -> usize {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.get(&client_key(ip)).copied().unwrap_or(0)
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut held = self.table.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = held.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv6_counts_by_64_and_mapped_v4_as_v4() {
        assert_eq!(client_key(ip("2001:db8:1:2:3::4")), ip("2001:db8:1:2::"));
        assert_eq!(client_key(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(client_key(ip("192.0.2.7")), ip("192.0.2.7"));
    }

    #[test]
    fn connections_are_bounded_per_address_and_released_on_drop() {
        let table = Connections::new(2);
        let a = table.try_acquire(ip("192.0.2.1")).unwrap();
        let _b = table.try_acquire(ip("192.0.2.1")).unwrap();
        assert!(table.try_acquire(ip("192.0.2.1")).is_none());
        let _other = table.try_acquire(ip("192.0.2.2")).unwrap();
        drop(a);
        assert_eq!(table.held(ip("192.0.2.1")), 1);
        assert!(table.try_acquire(ip("192.0.2.1")).is_some());
        drop(_other);
        assert_eq!(
            table.held.lock().unwrap().len(),
            1,
            "empty entries are removed"
        );
    }
}
