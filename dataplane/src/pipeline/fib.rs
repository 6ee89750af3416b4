//! The first pipeline's forwarding table: connected prefixes of the ports' addresses plus
//! static routes, longest prefix first. Built once (off the hot path) and read-only after.
//! A handful of routes is the case here; the routing issues replace this with an LPM.

use std::net::IpAddr;

/// An address with its prefix length (`10.77.0.2/24`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IfAddr {
    /// The address.
    pub addr: IpAddr,
    /// Prefix length of the connected network.
    pub prefix_len: u8,
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
#[derive(Debug, Clone, Default)]
pub struct Fib {
    entries: Vec<Entry>,
    /// The IPv4 entries again as 32-bit words, longest prefix first (the hot path).
    v4: Vec<V4Entry>,
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

impl Fib {
    /// Builds the table from each port's addresses (connected networks) and the static
    /// routes. A route whose next hop is in no connected network is an error.
    pub fn new(port_addrs: &[Vec<IfAddr>], routes: &[Route]) -> Result<Fib, String> {
        let mut entries = Vec::new();
        for (port, addrs) in port_addrs.iter().enumerate() {
            for a in addrs {
                let (b, v4) = bits(a.addr);
                let max = if v4 { 32 } else { 128 };
                if a.prefix_len > max {
                    return Err(format!("{}/{}: prefix too long", a.addr, a.prefix_len));
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
        let connected = Fib {
            entries: entries.clone(),
            v4: Vec::new(),
        };
        for r in routes {
            let (b, v4) = bits(r.to);
            let max = if v4 { 32 } else { 128 };
            if r.prefix_len > max {
                return Err(format!("route {}/{}: prefix too long", r.to, r.prefix_len));
            }
            if r.to.is_ipv4() != r.via.is_ipv4() {
                return Err(format!(
                    "route {}/{} via {}: address families differ",
                    r.to, r.prefix_len, r.via
                ));
            }
            let Some(nh) = connected.lookup(r.via) else {
                return Err(format!(
                    "route {}/{} via {}: the next hop is in no port's network",
                    r.to, r.prefix_len, r.via
                ));
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
        let v4 = entries
            .iter()
            .filter(|e| e.v4)
            .map(|e| V4Entry {
                net: e.net as u32,
                mask: e.mask as u32,
                port: e.port,
                via: match e.via {
                    Some(IpAddr::V4(v)) => Some(v),
                    _ => None,
                },
            })
            .collect();
        Ok(Fib { entries, v4 })
    }

    /// The next hop for an IPv4 destination (the forwarding hot path: 32-bit compares).
    #[inline]
    pub fn lookup_v4(&self, dst: std::net::Ipv4Addr) -> Option<NextHop> {
        let b = u32::from(dst);
        self.v4
            .iter()
            .find(|e| b & e.mask == e.net)
            .map(|e| NextHop {
                port: e.port,
                addr: IpAddr::V4(e.via.unwrap_or(dst)),
            })
    }

    /// [`Fib::lookup_v4`] on words: `(port, next hop)`.
    #[inline(always)]
    pub fn lookup_v4_word(&self, dst: u32) -> Option<(usize, u32)> {
        self.v4
            .iter()
            .find(|e| dst & e.mask == e.net)
            .map(|e| (e.port, e.via.map_or(dst, u32::from)))
    }

    /// The next hop for `dst`, by longest prefix.
    #[inline]
    pub fn lookup(&self, dst: IpAddr) -> Option<NextHop> {
        let (b, v4) = bits(dst);
        self.entries
            .iter()
            .find(|e| e.v4 == v4 && b & e.mask == e.net)
            .map(|e| NextHop {
                port: e.port,
                addr: e.via.unwrap_or(dst),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
