//! The ipcache: address -> identity, by longest-prefix match over IPv4 and IPv6.
//!
//! An identity is a small integer the control plane chose. It names either a group of
//! workloads that policy cannot tell apart (same namespace, labels, named ports, address
//! class and node) or an *address class*: a piece of the address space that the
//! configured ipBlocks and their excepts carve out. The dataplane does not know which;
//! [`super::policy`] reads what an identity means for policy from its own table.
//!
//! The control plane makes the cache total (it always inserts `0.0.0.0/0` and `::/0`), so
//! a lookup of a well-formed configuration never misses; a miss still has a defined
//! answer in the policy table (its default identity).

use std::net::IpAddr;

use super::lpm::{Lpm4, Lpm6, LpmError};

/// Address -> identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpCache {
    v4: Lpm4,
    v6: Lpm6,
}

impl IpCache {
    /// Builds the cache from IPv4 and IPv6 `(address, prefix length, identity)` lists.
    pub fn new(
        v4: impl IntoIterator<Item = (u32, u8, u32)>,
        v6: impl IntoIterator<Item = (u128, u8, u32)>,
    ) -> Result<Self, LpmError> {
        Ok(IpCache {
            v4: Lpm4::new(v4)?,
            v6: Lpm6::new(v6)?,
        })
    }

    /// The identity of an IPv4 address (host byte order).
    #[inline]
    pub fn lookup_v4(&self, addr: u32) -> Option<u32> {
        self.v4.lookup(addr)
    }

    /// The identity of an IPv6 address.
    #[inline]
    pub fn lookup_v6(&self, addr: u128) -> Option<u32> {
        self.v6.lookup(addr)
    }

    /// [`Self::lookup_v4`] for many addresses at once ([`Lpm4::lookup_bulk`]).
    #[inline]
    pub fn lookup_bulk_v4(&self, addrs: &[u32], out: &mut [Option<u32>]) {
        self.v4.lookup_bulk(addrs, out);
    }

    /// [`Self::lookup_v6`] for many addresses at once ([`Lpm6::lookup_bulk`]).
    #[inline]
    pub fn lookup_bulk_v6(&self, addrs: &[u128], out: &mut [Option<u32>]) {
        self.v6.lookup_bulk(addrs, out);
    }

    /// The identity of an address. IPv4-mapped IPv6 addresses are looked up as IPv6: the
    /// dataplane sees them only inside IPv6 packets.
    #[inline]
    pub fn lookup(&self, addr: IpAddr) -> Option<u32> {
        match addr {
            IpAddr::V4(a) => self.lookup_v4(u32::from(a)),
            IpAddr::V6(a) => self.lookup_v6(u128::from(a)),
        }
    }

    /// Number of prefixes (IPv4 + IPv6).
    pub fn prefixes(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    /// The largest identity stored.
    pub fn max_identity(&self) -> Option<u32> {
        self.v4.max_value().max(self.v6.max_value())
    }

    /// Bytes of lookup memory.
    pub fn memory_bytes(&self) -> usize {
        self.v4.memory_bytes() + self.v6.memory_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_families() {
        let c = IpCache::new(
            [(0, 0, 0), (0x0a00_0001, 32, 1)],
            [(0, 0, 2), (0xfd00_u128 << 112, 16, 3)],
        )
        .expect("build");
        assert_eq!(c.lookup("10.0.0.1".parse().expect("ip")), Some(1));
        assert_eq!(c.lookup("10.0.0.2".parse().expect("ip")), Some(0));
        assert_eq!(c.lookup("fd00::1".parse().expect("ip")), Some(3));
        assert_eq!(c.lookup("2001:db8::1".parse().expect("ip")), Some(2));
        assert_eq!(c.prefixes(), 4);
        assert_eq!(c.max_identity(), Some(3));
    }
}
