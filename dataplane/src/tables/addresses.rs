//! The addresses sluice serves besides its ports' own and the Appliance's virtual
//! addresses: listener addresses (a Gateway API Gateway's `spec.addresses`, an Istio
//! server's `bind`) that lie in a port's connected network. They travel in the
//! [`Snapshot`](super::snapshot::Snapshot), so a reload adds or removes them without a
//! restart: on the port whose network holds one, the forwarder answers ARP requests and
//! neighbour solicitations for it, refuses neighbour claims for it and answers echo to
//! it, as for its own addresses; and the first worker announces every new one
//! ([`crate::pipeline::announce`]).
//!
//! Built once by the control plane ([`Addresses::new`]); lookups take no lock and
//! allocate nothing. An IPv4 "is it served?" costs one test of a 64-bit filter for almost
//! every address that is not, and a binary search over the sorted addresses otherwise.
//!
//! Each entry carries the epoch since which it has been served without a break
//! ([`Served::since`]); [`Addresses::follow`] carries these over from the previous
//! generation, so a worker that saw epoch `e` knows the entries with `since > e` are new
//! to it, however many generations it skipped.

use std::net::{IpAddr, Ipv6Addr};

/// One served address on one port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Served {
    /// The address.
    pub addr: IpAddr,
    /// The port (index in worker port order) whose connected network holds it.
    pub port: u16,
    /// The [`Addresses::epoch`] since which it has been served on this port without a
    /// break.
    pub since: u64,
}

/// The served addresses of one generation (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Addresses {
    /// Every (address, port), sorted by address then port, without duplicates.
    entries: Vec<Served>,
    /// The distinct IPv4 addresses as words, sorted.
    v4: Vec<u32>,
    /// The distinct IPv6 addresses as words, sorted.
    v6: Vec<u128>,
    /// The solicited-node group (low 24 bits) and port of every IPv6 entry, sorted.
    groups_v6: Vec<(u32, u16)>,
    /// One bit per [`filter_bit_v4`] of every address in `v4`.
    filter_v4: u64,
    /// This generation's epoch (1 for a table that follows none).
    epoch: u64,
}

/// No served addresses (a context without a snapshot).
pub static NONE: Addresses = Addresses {
    entries: Vec::new(),
    v4: Vec::new(),
    v6: Vec::new(),
    groups_v6: Vec::new(),
    filter_v4: 0,
    epoch: 0,
};

/// The bit of a 64-bit IPv4 address filter that `a` sets: the top six bits of a
/// multiplicative hash. (Shared with the forwarder's local-address filter, so the fast
/// path tests both filters with one bit.)
#[inline(always)]
pub(crate) fn filter_bit_v4(a: u32) -> u64 {
    1 << (a.wrapping_mul(0x9e37_79b1) >> 26)
}

/// The low 24 bits of an IPv6 address: what its solicited-node group names.
fn group_of(a: Ipv6Addr) -> u32 {
    (u128::from(a) & 0xff_ffff) as u32
}

impl Default for Addresses {
    fn default() -> Self {
        Addresses::new(std::iter::empty())
    }
}

impl Addresses {
    /// The table of `(address, port)` pairs (duplicates kept once), at epoch 1, every
    /// entry served since then.
    pub fn new(list: impl IntoIterator<Item = (IpAddr, u16)>) -> Addresses {
        let mut entries: Vec<Served> = list
            .into_iter()
            .map(|(addr, port)| Served {
                addr,
                port,
                since: 1,
            })
            .collect();
        entries.sort_unstable();
        entries.dedup();
        let mut v4: Vec<u32> = Vec::new();
        let mut v6: Vec<u128> = Vec::new();
        let mut groups_v6: Vec<(u32, u16)> = Vec::new();
        for e in &entries {
            match e.addr {
                IpAddr::V4(a) => v4.push(u32::from(a)),
                IpAddr::V6(a) => {
                    v6.push(u128::from(a));
                    groups_v6.push((group_of(a), e.port));
                }
            }
        }
        // (Sorted already: entries are sorted by address, V4 before V6.)
        v4.dedup();
        v6.dedup();
        groups_v6.sort_unstable();
        groups_v6.dedup();
        let filter_v4 = v4.iter().fold(0, |f, &a| f | filter_bit_v4(a));
        Addresses {
            entries,
            v4,
            v6,
            groups_v6,
            filter_v4,
            epoch: 1,
        }
    }

    /// Makes this table the successor of `prev` (the one published before it): its epoch
    /// is one past `prev`'s, and an entry `prev` also had keeps `prev`'s
    /// [`Served::since`]; the others are new as of this epoch.
    pub fn follow(&mut self, prev: &Addresses) {
        self.epoch = prev.epoch + 1;
        for e in &mut self.entries {
            e.since = match prev
                .entries
                .binary_search_by(|p| (p.addr, p.port).cmp(&(e.addr, e.port)))
            {
                Ok(i) => prev.entries[i].since,
                Err(_) => self.epoch,
            };
        }
    }

    /// This generation's epoch.
    #[inline]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Every (address, port), sorted by address then port.
    pub fn entries(&self) -> &[Served] {
        &self.entries
    }

    /// Number of (address, port) entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is served.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The IPv4 filter: one bit (the top six bits of a multiplicative hash) per served
    /// IPv4 address. An address whose bit is clear is not served.
    #[inline(always)]
    pub fn filter_v4(&self) -> u64 {
        self.filter_v4
    }

    /// Whether the IPv4 address `a` (as a word) is served (on any port).
    #[inline]
    pub fn has_v4(&self, a: u32) -> bool {
        self.filter_v4 & filter_bit_v4(a) != 0 && self.lists_v4(a)
    }

    /// Whether `a` is served, without the filter test (for a caller that tested it
    /// already, with [`Addresses::filter_v4`]): a binary search, out of line (inlined
    /// into the forwarder's fast path, it cost that path registers; measured with
    /// `bench_balance_instructions`, perf/NOTES.md).
    #[inline(never)]
    pub fn lists_v4(&self, a: u32) -> bool {
        self.v4.binary_search(&a).is_ok()
    }

    /// The search behind [`Addresses::has`] for IPv6, out of line like
    /// [`Addresses::lists_v4`].
    #[inline(never)]
    fn lists_v6(&self, a: u128) -> bool {
        self.v6.binary_search(&a).is_ok()
    }

    /// Whether `ip` is served (on any port).
    #[inline]
    pub fn has(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(a) => self.has_v4(u32::from(a)),
            IpAddr::V6(a) => !self.v6.is_empty() && self.lists_v6(u128::from(a)),
        }
    }

    /// Whether `ip` is served on `port`.
    pub fn on(&self, port: usize, ip: IpAddr) -> bool {
        if !self.has(ip) {
            return false;
        }
        let from = self.entries.partition_point(|e| e.addr < ip);
        self.entries[from..]
            .iter()
            .take_while(|e| e.addr == ip)
            .any(|e| usize::from(e.port) == port)
    }

    /// Whether `group` (a solicited-node multicast address) is the group of an IPv6
    /// address served on `port`: a neighbour solicitation sent to it may ask for that
    /// address (its target decides).
    pub fn solicits_on(&self, port: usize, group: Ipv6Addr) -> bool {
        !self.groups_v6.is_empty()
            && u16::try_from(port)
                .is_ok_and(|p| self.groups_v6.binary_search(&(group_of(group), p)).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("literal address")
    }

    #[test]
    fn lookups_by_address_and_port() {
        let t = Addresses::new([
            (ip("10.0.0.7"), 0),
            (ip("10.0.0.5"), 1),
            (ip("10.0.0.5"), 0),
            (ip("fd00::7"), 1),
            (ip("10.0.0.7"), 0),
        ]);
        assert_eq!(t.len(), 4, "duplicates kept once");
        assert!(t.has(ip("10.0.0.5")) && t.has(ip("10.0.0.7")) && t.has(ip("fd00::7")));
        assert!(!t.has(ip("10.0.0.6")) && !t.has(ip("fd00::5")));
        assert!(t.on(0, ip("10.0.0.5")) && t.on(1, ip("10.0.0.5")));
        assert!(t.on(0, ip("10.0.0.7")) && !t.on(1, ip("10.0.0.7")));
        assert!(t.on(1, ip("fd00::7")) && !t.on(0, ip("fd00::7")));
        assert!(t.solicits_on(1, "ff02::1:ff00:7".parse().expect("group")));
        assert!(!t.solicits_on(0, "ff02::1:ff00:7".parse().expect("group")));
        assert!(!t.solicits_on(1, "ff02::1:ff00:8".parse().expect("group")));
        assert!(!NONE.has(ip("10.0.0.5")) && NONE.is_empty());
    }

    /// Thousands of addresses: every one found, none of their neighbours.
    #[test]
    fn thousands_of_addresses() {
        let t = Addresses::new(
            (0..4000u32).map(|i| (IpAddr::from((0x0a00_0000 + 2 * i).to_be_bytes()), 0)),
        );
        for i in 0..4000u32 {
            assert!(t.has_v4(0x0a00_0000 + 2 * i));
            assert!(!t.has_v4(0x0a00_0000 + 2 * i + 1));
        }
    }

    /// `follow` keeps the epoch since which an entry has been served; new ones (and one
    /// that came back after a gap) are new as of the follower's epoch.
    #[test]
    fn follow_carries_since() {
        let a = Addresses::new([(ip("10.0.0.5"), 0), (ip("10.0.0.6"), 0)]);
        assert_eq!(a.epoch(), 1);
        let mut b = Addresses::new([(ip("10.0.0.5"), 0), (ip("10.0.0.7"), 0)]);
        b.follow(&a);
        assert_eq!(b.epoch(), 2);
        let since: Vec<(IpAddr, u64)> = b.entries().iter().map(|e| (e.addr, e.since)).collect();
        assert_eq!(since, vec![(ip("10.0.0.5"), 1), (ip("10.0.0.7"), 2)]);
        let mut c = Addresses::new([
            (ip("10.0.0.5"), 0),
            (ip("10.0.0.6"), 0),
            (ip("10.0.0.7"), 0),
        ]);
        c.follow(&b);
        let since: Vec<u64> = c.entries().iter().map(|e| e.since).collect();
        assert_eq!(since, vec![1, 3, 2], "10.0.0.6 is new again");
    }
}
