//! [`PeerGroup`]: the clients one per-peer connection cap covers. An IPv4 address is one
//! client; an IPv6 client is usually given a whole /64 and can take a fresh address per
//! connection, so a cap per IPv6 address would not hold: its /64 is the group. An
//! IPv4-mapped address (`::ffff:a.b.c.d`, how a dual-stack listener sees IPv4 clients) is
//! the IPv4 address it carries.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The peers counted together against one per-peer cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PeerGroup {
    /// One IPv4 address (or an IPv4-mapped IPv6 one).
    V4(Ipv4Addr),
    /// An IPv6 /64: the address with its last 64 bits zero.
    V6Prefix64(Ipv6Addr),
}

impl PeerGroup {
    /// The group `peer` belongs to.
    pub fn of(peer: IpAddr) -> PeerGroup {
        match peer {
            IpAddr::V4(v4) => PeerGroup::V4(v4),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => PeerGroup::V4(v4),
                None => {
                    PeerGroup::V6Prefix64(Ipv6Addr::from(u128::from(v6) & !u128::from(u64::MAX)))
                }
            },
        }
    }
}

/// `10.0.0.1` or `2001:db8::/64`.
impl fmt::Display for PeerGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerGroup::V4(v4) => write!(f, "{v4}"),
            PeerGroup::V6Prefix64(prefix) => write!(f, "{prefix}/64"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(s: &str) -> PeerGroup {
        PeerGroup::of(s.parse().unwrap())
    }

    #[test]
    fn ipv6_peers_are_grouped_by_their_64_and_mapped_ipv4_as_ipv4() {
        // Every address of one /64 is one group, named by its prefix.
        let a = group("2001:db8:1:2::1");
        assert_eq!(a, group("2001:db8:1:2:ffff:ffff:ffff:ffff"));
        assert_eq!(a, group("2001:db8:1:2:dead:beef:0:7"));
        assert_eq!(a.to_string(), "2001:db8:1:2::/64");
        // The next /64 is another group.
        assert_ne!(a, group("2001:db8:1:3::1"));
        // Loopback's /64 is `::/64`.
        assert_eq!(group("::1").to_string(), "::/64");
        // IPv4: each address its own group; mapped, the same group as the plain address.
        assert_eq!(group("10.0.0.1"), group("::ffff:10.0.0.1"));
        assert_eq!(group("::ffff:10.0.0.1").to_string(), "10.0.0.1");
        assert_ne!(group("10.0.0.1"), group("10.0.0.2"));
        // Not mapped (IPv4-compatible `::a.b.c.d` is deprecated): an IPv6 /64 like any.
        assert_eq!(group("::10.0.0.1").to_string(), "::/64");
    }
}
