//! The first pipeline's forwarding table: connected prefixes of the ports' addresses plus
//! static routes, longest prefix first. Built once (off the hot path) and read-only after.
//! IPv4, the forwarding hot path, is looked up in a DIR-16-8-8 trie ([`Lpm4`]: one load
//! for prefixes up to /16, at most three for longer ones, whatever the number of routes);
//! IPv6 scans the list, which is ordered longest prefix first.

use crate::tables::lpm::Lpm4;
use std::net::IpAddr;

/// An address with its prefix length (`10.77.0.2/24`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IfAddr {
    /// The address.
    pub addr: IpAddr,
    /// Prefix length of the connected network.
    pub prefix_len: u8,
}

impl IfAddr {
    /// Whether `ip` lies in this address's connected network (same family, same prefix).
    pub fn holds(&self, ip: IpAddr) -> bool {
        let ((a, v4), (b, w4)) = (bits(self.addr), bits(ip));
        v4 == w4 && {
            let m = mask(self.prefix_len, v4);
            a & m == b & m
        }
    }
}

/// A static route: `to` (network/len) via a next hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route {
    /// Destination network.
    pub to: IpAddr,
    /// Prefix length.
    pub prefix_len: u8,
    /// Next hop (must lie in a connected network of some port).
    pub via: IpAddr,
}

/// Where the FIB sends a destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextHop {
    /// Out port index.
    pub port: usize,
    /// The address whose MAC to use (the gateway, or the destination when connected).
    pub addr: IpAddr,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    net: u128,
    mask: u128,
    v4: bool,
    len: u8,
    port: usize,
    via: Option<IpAddr>,
}

#[derive(Debug, Clone, Copy)]
struct V4Entry {
    net: u32,
    mask: u32,
    port: usize,
    via: Option<std::net::Ipv4Addr>,
}

/// The forwarding table.
#[derive(Debug, Clone)]
pub struct Fib {
    entries: Vec<Entry>,
    /// The IPv4 entries again as 32-bit words, one per prefix (the first listed of equal
    /// prefixes: a connected network before a static route), longest prefix first.
    v4: Vec<V4Entry>,
    /// IPv4 prefix -> index in `v4`.
    lpm4: Lpm4,
}

fn bits(a: IpAddr) -> (u128, bool) {
    match a {
        IpAddr::V4(v) => (u128::from(u32::from(v)), true),
        IpAddr::V6(v) => (u128::from(v), false),
    }
}

fn mask(len: u8, v4: bool) -> u128 {
    let width = if v4 { 32 } else { 128 };
    let len = u32::from(len).min(width);
    if len == 0 {
        0
    } else {
        let m = u128::MAX << (128 - len);
        if v4 {
            m >> 96
        } else {
            m
        }
    }
}

/// Why the ports' subnets and the static routes do not make a forwarding table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FibError {
    /// A port address's prefix is longer than its family allows.
    #[error("{addr}/{len}: prefix too long")]
    AddressPrefix {
        /// The address.
        addr: IpAddr,
        /// Its prefix length.
        len: u8,
    },
    /// A route's prefix is longer than its family allows.
    #[error("route {to}/{len}: prefix too long")]
    RoutePrefix {
        /// The destination.
        to: IpAddr,
        /// Its prefix length.
        len: u8,
    },
    /// A route's destination and next hop are of different families.
    #[error("route {to}/{len} via {via}: address families differ")]
    Families {
        /// The destination.
        to: IpAddr,
        /// Its prefix length.
        len: u8,
        /// The next hop.
        via: IpAddr,
    },
    /// A route's next hop is in no port's connected network.
    #[error("route {to}/{len} via {via}: the next hop is in no port's network")]
    Unreachable {
        /// The destination.
        to: IpAddr,
        /// Its prefix length.
        len: u8,
        /// The next hop.
        via: IpAddr,
    },
    /// The IPv4 longest-prefix table could not be built.
    #[error("IPv4 routes: {0}")]
    Lpm(#[from] crate::tables::lpm::LpmError),
}

impl Fib {
    /// Builds the table from each port's addresses (connected networks) and the static
    /// routes. A route whose next hop is in no connected network is an error.
    pub fn new(port_addrs: &[Vec<IfAddr>], routes: &[Route]) -> Result<Fib, FibError> {
        let mut entries = Vec::new();
        for (port, addrs) in port_addrs.iter().enumerate() {
            for a in addrs {
                let (b, v4) = bits(a.addr);
                let max = if v4 { 32 } else { 128 };
                if a.prefix_len > max {
                    return Err(FibError::AddressPrefix {
                        addr: a.addr,
                        len: a.prefix_len,
                    });
                }
                let m = mask(a.prefix_len, v4);
                entries.push(Entry {
                    net: b & m,
                    mask: m,
                    v4,
                    len: a.prefix_len,
                    port,
                    via: None,
                });
            }
        }
        let connected = entries.clone();
        for r in routes {
            let (b, v4) = bits(r.to);
            let max = if v4 { 32 } else { 128 };
            if r.prefix_len > max {
                return Err(FibError::RoutePrefix {
                    to: r.to,
                    len: r.prefix_len,
                });
            }
            if r.to.is_ipv4() != r.via.is_ipv4() {
                return Err(FibError::Families {
                    to: r.to,
                    len: r.prefix_len,
                    via: r.via,
                });
            }
            let Some(nh) = scan(&connected, r.via) else {
                return Err(FibError::Unreachable {
                    to: r.to,
                    len: r.prefix_len,
                    via: r.via,
                });
            };
            let m = mask(r.prefix_len, v4);
            entries.push(Entry {
                net: b & m,
                mask: m,
                v4,
                len: r.prefix_len,
                port: nh.port,
                via: Some(r.via),
            });
        }
        // Longest prefix first; connected before static at equal length (stable sort).
        entries.sort_by_key(|e| core::cmp::Reverse(e.len));
        let mut v4: Vec<V4Entry> = Vec::new();
        let mut prefixes = Vec::new();
        for e in entries.iter().filter(|e| e.v4) {
            let (net, len) = (e.net as u32, e.len);
            // Of equal prefixes the first listed wins, as in the list scan.
            if prefixes.iter().any(|&(n, l, _)| (n, l) == (net, len)) {
                continue;
            }
            prefixes.push((net, len, v4.len() as u32));
            v4.push(V4Entry {
                net,
                mask: e.mask as u32,
                port: e.port,
                via: match e.via {
                    Some(IpAddr::V4(v)) => Some(v),
                    _ => None,
                },
            });
        }
        let lpm4 = Lpm4::new(prefixes)?;
        Ok(Fib { entries, v4, lpm4 })
    }

    /// The next hop for an IPv4 destination (the forwarding hot path: 32-bit compares).
    #[inline]
    pub fn lookup_v4(&self, dst: std::net::Ipv4Addr) -> Option<NextHop> {
        self.lookup_v4_word(u32::from(dst))
            .map(|(port, nh)| NextHop {
                port,
                addr: IpAddr::V4(nh.into()),
            })
    }

    /// [`Fib::lookup_v4`] on words: `(port, next hop)`.
    #[inline(always)]
    pub fn lookup_v4_word(&self, dst: u32) -> Option<(usize, u32)> {
        let e = self.v4.get(self.lpm4.lookup(dst)? as usize)?;
        debug_assert_eq!(dst & e.mask, e.net);
        Some((e.port, e.via.map_or(dst, u32::from)))
    }

    /// The next hop for `dst`, by longest prefix.
    #[inline]
    pub fn lookup(&self, dst: IpAddr) -> Option<NextHop> {
        scan(&self.entries, dst)
    }
}

/// The first of `entries` that contains `dst` (the longest prefix when they are sorted
/// longest first).
fn scan(entries: &[Entry], dst: IpAddr) -> Option<NextHop> {
    let (b, v4) = bits(dst);
    entries
        .iter()
        .find(|e| e.v4 == v4 && b & e.mask == e.net)
        .map(|e| NextHop {
            port: e.port,
            addr: e.via.unwrap_or(dst),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The IPv4 trie gives what the longest-prefix-first list scan gives (duplicate
        /// prefixes, connected and static, overlapping lengths), for addresses near and
        /// inside the prefixes and anywhere.
        #[test]
        fn v4_trie_agrees_with_the_list(
            nets in proptest::collection::vec((any::<u32>(), 0u8..=32, 0usize..3), 1..12),
            routes in proptest::collection::vec((any::<u32>(), 0u8..=32, 0usize..12), 0..12),
            probes in proptest::collection::vec((0usize..24, any::<u32>(), 0u32..512), 64),
        ) {
            let mut ports = vec![Vec::new(); 3];
            for &(a, len, port) in &nets {
                ports[port].push(IfAddr { addr: IpAddr::V4(a.into()), prefix_len: len });
            }
            let routes: Vec<Route> = routes
                .iter()
                .map(|&(to, len, n)| {
                    let (a, _, _) = nets[n % nets.len()];
                    Route {
                        to: IpAddr::V4(to.into()),
                        prefix_len: len,
                        via: IpAddr::V4(a.into()),
                    }
                })
                .collect();
            let fib = Fib::new(&ports, &routes).unwrap();
            let bases: Vec<u32> = nets.iter().map(|n| n.0).chain(routes.iter().map(|r| match r.to {
                IpAddr::V4(a) => u32::from(a),
                IpAddr::V6(_) => 0,
            })).collect();
            for &(i, any, delta) in &probes {
                let a = match bases.get(i) {
                    Some(b) => b.wrapping_add(delta).wrapping_sub(256),
                    None => any,
                };
                let dst = std::net::Ipv4Addr::from(a);
                prop_assert_eq!(fib.lookup_v4(dst), fib.lookup(IpAddr::V4(dst)), "{}", dst);
            }
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn longest_prefix_and_next_hops() {
        let ports = vec![
            vec![
                IfAddr {
                    addr: ip("10.77.0.2"),
                    prefix_len: 24,
                },
                IfAddr {
                    addr: ip("fd77::2"),
                    prefix_len: 64,
                },
            ],
            vec![IfAddr {
                addr: ip("10.78.0.2"),
                prefix_len: 24,
            }],
        ];
        let routes = [
            Route {
                to: ip("0.0.0.0"),
                prefix_len: 0,
                via: ip("10.77.0.1"),
            },
            Route {
                to: ip("192.168.0.0"),
                prefix_len: 16,
                via: ip("10.78.0.1"),
            },
            Route {
                to: ip("::"),
                prefix_len: 0,
                via: ip("fd77::1"),
            },
        ];
        let fib = Fib::new(&ports, &routes).unwrap();
        assert_eq!(
            fib.lookup(ip("10.78.0.9")),
            Some(NextHop {
                port: 1,
                addr: ip("10.78.0.9")
            })
        );
        assert_eq!(
            fib.lookup(ip("192.168.3.4")),
            Some(NextHop {
                port: 1,
                addr: ip("10.78.0.1")
            })
        );
        assert_eq!(
            fib.lookup(ip("8.8.8.8")),
            Some(NextHop {
                port: 0,
                addr: ip("10.77.0.1")
            })
        );
        assert_eq!(
            fib.lookup(ip("2001:db8::1")),
            Some(NextHop {
                port: 0,
                addr: ip("fd77::1")
            })
        );
        assert_eq!(
            fib.lookup(ip("fd77::9")),
            Some(NextHop {
                port: 0,
                addr: ip("fd77::9")
            })
        );
        let no_default = Fib::new(&ports, &[]).unwrap();
        assert_eq!(no_default.lookup(ip("8.8.8.8")), None);
    }

    #[test]
    fn rejects_unreachable_next_hop_and_mixed_families() {
        let ports = vec![vec![IfAddr {
            addr: ip("10.77.0.2"),
            prefix_len: 24,
        }]];
        assert!(Fib::new(
            &ports,
            &[Route {
                to: ip("0.0.0.0"),
                prefix_len: 0,
                via: ip("10.9.0.1")
            }]
        )
        .is_err());
        assert!(Fib::new(
            &ports,
            &[Route {
                to: ip("::"),
                prefix_len: 0,
                via: ip("10.77.0.1")
            }]
        )
        .is_err());
        assert!(Fib::new(
            &ports,
            &[Route {
                to: ip("10.0.0.0"),
                prefix_len: 33,
                via: ip("10.77.0.1")
            }]
        )
        .is_err());
    }
}
