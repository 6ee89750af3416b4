//! The forwarder's configuration: sluice's ports (MAC, addresses), its virtual addresses
//! and the FIB, with the per-packet "is it ours?" sets precomputed once. These are fixed
//! for a run; the listener addresses a reload may change are the snapshot's
//! [`Addresses`], which every "is it ours?" question here takes besides.

use super::fib::{Fib, FibError, IfAddr, Route};
use crate::tables::addresses::{filter_bit_v4, Addresses};
use crate::wire::MacAddr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One port as the pipeline sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConf {
    /// Port name (for messages).
    pub name: String,
    /// sluice's MAC on the port.
    pub mac: MacAddr,
    /// sluice's addresses on the port.
    pub addrs: Vec<IfAddr>,
}

/// Where an address claimed in ARP/NDP lives, seen from the port the claim came in on
/// ([`ForwarderConfig::link_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Link {
    /// In a connected network of the receiving port: the claim may be learned.
    On,
    /// sluice's own, or only in other ports' networks: the claim is refused.
    Elsewhere,
    /// In no port's network: ignored.
    Nowhere,
}

/// The forwarder's configuration: ports (in worker port order) and the FIB.
#[derive(Debug, Clone)]
pub struct ForwarderConfig {
    /// Ports.
    pub ports: Vec<PortConf>,
    /// Forwarding table.
    pub fib: Fib,
    /// Virtual addresses (listener addresses fixed at start): sluice answers ARP/ND and
    /// echo for them on every port, and they count as its own.
    pub virtual_addrs: Vec<IpAddr>,
    /// Every IPv4 address of sluice, and every directed broadcast of its networks, as
    /// words (the per-packet "is it ours?" checks).
    pub(super) local_v4: Vec<u32>,
    pub(super) bcast_v4: Vec<u32>,
    /// One bit per [`filter_bit_v4`] of every address in `local_v4` and `bcast_v4`: a
    /// destination whose bit is clear is in neither list (one test instead of two scans,
    /// however many virtual addresses there are).
    pub(super) special_v4: u64,
}

impl ForwarderConfig {
    /// Builds the configuration, deriving the FIB from the ports' addresses and `routes`.
    pub fn new(ports: Vec<PortConf>, routes: &[Route]) -> Result<ForwarderConfig, FibError> {
        ForwarderConfig::with_virtual(ports, routes, Vec::new())
    }

    /// As [`ForwarderConfig::new`], plus virtual addresses answered on every port.
    pub fn with_virtual(
        ports: Vec<PortConf>,
        routes: &[Route],
        virtual_addrs: Vec<IpAddr>,
    ) -> Result<ForwarderConfig, FibError> {
        let addrs: Vec<Vec<IfAddr>> = ports.iter().map(|p| p.addrs.clone()).collect();
        let fib = Fib::new(&addrs, routes)?;
        let mut local_v4 = Vec::new();
        let mut bcast_v4 = Vec::new();
        for a in ports.iter().flat_map(|p| p.addrs.iter()) {
            if let IpAddr::V4(v) = a.addr {
                local_v4.push(u32::from(v));
                if a.prefix_len < 31 {
                    bcast_v4.push(u32::from(v) | (u32::MAX >> a.prefix_len));
                }
            }
        }
        for a in &virtual_addrs {
            if let IpAddr::V4(v) = a {
                local_v4.push(u32::from(*v));
            }
        }
        let special_v4 = local_v4
            .iter()
            .chain(&bcast_v4)
            .fold(0, |f, &a| f | filter_bit_v4(a));
        Ok(ForwarderConfig {
            ports,
            fib,
            virtual_addrs,
            local_v4,
            bcast_v4,
            special_v4,
        })
    }

    pub(super) fn v4_on(&self, port: usize) -> Option<Ipv4Addr> {
        self.ports
            .get(port)?
            .addrs
            .iter()
            .find_map(|a| match a.addr {
                IpAddr::V4(v) => Some(v),
                IpAddr::V6(_) => None,
            })
    }

    pub(super) fn v6_on(&self, port: usize) -> Option<Ipv6Addr> {
        self.ports
            .get(port)?
            .addrs
            .iter()
            .find_map(|a| match a.addr {
                IpAddr::V6(v) => Some(v),
                IpAddr::V4(_) => None,
            })
    }

    /// Whether `ip` is one of sluice's addresses (a port's, a virtual one, or one of the
    /// `served` listener addresses of the tables in use). IPv4 goes through the fast
    /// path's filter and words (one filter test for most addresses), IPv6 through the
    /// lists.
    pub fn is_ours(&self, ip: IpAddr, served: &Addresses) -> bool {
        match ip {
            IpAddr::V4(v) => {
                let a = u32::from(v);
                (self.special_v4 | served.filter_v4()) & filter_bit_v4(a) != 0
                    && (listed(&self.local_v4, a) || served.has_v4(a))
            }
            IpAddr::V6(_) => {
                self.virtual_addrs.contains(&ip)
                    || self
                        .ports
                        .iter()
                        .any(|p| p.addrs.iter().any(|a| a.addr == ip))
                    || served.has(ip)
            }
        }
    }

    /// Whether `ip` is sluice's on `port` (its own address there, a virtual one, or one
    /// `served` there).
    pub(super) fn is_ours_on(&self, port: usize, ip: IpAddr, served: &Addresses) -> bool {
        self.virtual_addrs.contains(&ip)
            || self
                .ports
                .get(port)
                .is_some_and(|p| p.addrs.iter().any(|a| a.addr == ip))
            || served.on(port, ip)
    }

    /// Which ports may teach sluice where `ip` is: [`Link::On`] if a connected network of
    /// `port` holds it, [`Link::Elsewhere`] if it is one of sluice's own addresses or
    /// only another port's networks hold it (a claim to refuse), [`Link::Nowhere`] if no
    /// port's network holds it (never a next hop: nothing to learn, nothing to refuse).
    /// Not the hot path: ARP and NDP only.
    pub(super) fn link_of(&self, port: usize, ip: IpAddr, served: &Addresses) -> Link {
        if self.is_ours(ip, served) {
            return Link::Elsewhere;
        }
        let holds = |p: &PortConf| p.addrs.iter().any(|a| a.holds(ip));
        if self.ports.get(port).is_some_and(holds) {
            Link::On
        } else if self.ports.iter().any(holds) {
            Link::Elsewhere
        } else {
            Link::Nowhere
        }
    }

    /// sluice's first address of `ip`'s family on `port` (the source address NAT uses
    /// towards hosts behind that port).
    pub fn addr_on(&self, port: usize, family_of: IpAddr) -> Option<IpAddr> {
        match family_of {
            IpAddr::V4(_) => self.v4_on(port).map(IpAddr::V4),
            IpAddr::V6(_) => self.v6_on(port).map(IpAddr::V6),
        }
    }

    /// Whether an IPv4 destination is one the fast paths forward: unicast, and neither
    /// one of sluice's addresses (`served` ones included) nor a directed broadcast of its
    /// subnets (those take the general path). One filter test for both sets.
    #[inline(always)]
    pub(super) fn passes_through_v4(&self, dst: u32, served: &Addresses) -> bool {
        dst != u32::MAX
            && dst >> 28 != 0xe
            && dst != 0
            && ((self.special_v4 | served.filter_v4()) & filter_bit_v4(dst) == 0
                || !(listed(&self.local_v4, dst)
                    || listed(&self.bcast_v4, dst)
                    || served.lists_v4(dst)))
    }
}

/// Whether `dst` is in `words` (the few local or broadcast IPv4 addresses), compared
/// inline and without branches (`contains` is a call).
#[inline(always)]
fn listed(words: &[u32], dst: u32) -> bool {
    words.iter().fold(false, |hit, &a| hit | (a == dst))
}
