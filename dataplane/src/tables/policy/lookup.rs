//! Single lookups: one connection's verdict, direction by direction, and what the
//! tables hold (for dumps, exports and `explain`).

use std::net::IpAddr;

use super::layout::{
    candidates, pack, slot_home, Ident, ProfileInfo, Slot, EMPTY_KEY, SENTINEL, UNION_KIND,
};
use super::{
    Decision, DenyReason, DirOutcome, DirTable, Direction, IdentityEntry, PeerKind, PolicyTables,
    PortRange, ProtoClass, Verdict, NONE, PEER_KINDS,
};
use crate::tables::ipcache::IpCache;

impl DirTable {
    /// Number of profiles.
    pub fn profiles(&self) -> usize {
        self.profiles.len().saturating_sub(1)
    }

    /// Number of port ranges stored (the unit of the `policyEntries` cap).
    pub fn ranges(&self) -> usize {
        self.ranges
    }

    /// Bytes of lookup memory.
    pub fn memory_bytes(&self) -> usize {
        self.profiles.len() * std::mem::size_of::<ProfileInfo>()
            + self.slots.len() * std::mem::size_of::<Slot>()
            + self.extra.len() * std::mem::size_of::<PortRange>()
    }

    #[inline]
    pub(super) fn find(&self, key: u64) -> Option<&Slot> {
        let mask = self.slots.len() - 1;
        let mut i = slot_home(key, self.shift);
        loop {
            let s = self.slots.get(i)?;
            if s.key == key {
                return Some(s);
            }
            if s.key == EMPTY_KEY {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    /// A slot's ranges, in order: its first, then those it keeps in `extra`. For dumps
    /// and table building; lookups walk them in [`Self::slot_allows`].
    pub(super) fn slot_ranges<'a>(&'a self, s: &Slot) -> impl Iterator<Item = PortRange> + 'a {
        let more = if s.more == NONE {
            &[][..]
        } else {
            self.extra.get(s.more as usize..).unwrap_or_default()
        };
        std::iter::once(s.first).chain(more.iter().copied().take_while(|&r| r != SENTINEL))
    }

    #[inline]
    pub(super) fn slot_allows(&self, s: &Slot, port: u16) -> bool {
        if s.first.contains(port) {
            return true;
        }
        if s.more == NONE || port < s.first.lo {
            return false;
        }
        let mut i = s.more as usize;
        while let Some(&r) = self.extra.get(i) {
            if r == SENTINEL || port < r.lo {
                return false;
            }
            if port <= r.hi {
                return true;
            }
            i += 1;
        }
        false
    }

    /// Whether any entry of the profile allows `(proto, port)`, whatever the peer.
    /// Inline unions are compared without branches: unused ranges are empty.
    #[inline(always)]
    pub(super) fn union_allows(
        &self,
        profile: u32,
        info: &ProfileInfo,
        proto: ProtoClass,
        port: u16,
    ) -> bool {
        let pc = proto as usize % 4;
        if info.spilled & (1 << pc) != 0 {
            return self.spilled_union_allows(profile, proto, port);
        }
        info.union[pc]
            .iter()
            .fold(false, |any, r| any | r.contains(port))
    }

    /// [`Self::union_allows`] for a union kept in the hash table (a call: rare, and
    /// the probe loop would crowd the burst loop it is inlined into).
    #[inline(never)]
    fn spilled_union_allows(&self, profile: u32, proto: ProtoClass, port: u16) -> bool {
        self.find(pack(profile, UNION_KIND, proto as u8, 0))
            .is_some_and(|s| self.slot_allows(s, port))
    }

    /// Whether `profile` allows `peer` on `(proto, port)`. A port no entry of the
    /// profile allows is refused before any per-peer probe.
    #[inline]
    pub fn check(
        &self,
        profile: u32,
        peer: &[u32; PEER_KINDS],
        proto: ProtoClass,
        port: u16,
    ) -> DirOutcome {
        self.check_with(profile, &Ident::of_peer(*peer), proto, port)
    }

    /// [`Self::check`] for a peer whose identity line (its filter bits) is at hand.
    #[inline]
    fn check_with(&self, profile: u32, peer: &Ident, proto: ProtoClass, port: u16) -> DirOutcome {
        match self.plan(profile, peer, proto, port) {
            Ok(kinds) => self.probe(profile, &peer.entry.peer, proto, kinds, port),
            Err(outcome) => outcome,
        }
    }

    /// The first half of a check, from the profile's summary and the peer's identity
    /// line alone (its namespace key and filter bits): the outcome when they decide (no
    /// rules, the inline namespace entry allows, a port no entry allows, no peer key that
    /// can have an entry), or else the peer kinds to probe (bit `k` for kind `k`), to be
    /// given to [`Self::probe`].
    #[inline]
    fn plan(
        &self,
        profile: u32,
        peer: &Ident,
        proto: ProtoClass,
        port: u16,
    ) -> Result<u8, DirOutcome> {
        let peer_ns = peer.entry.peer[PeerKind::Namespace as usize];
        let info = match self.profiles.get(profile as usize) {
            Some(i) if i.kinds != 0 => i,
            _ => return Err(DirOutcome::Denied(DenyReason::NoRules)),
        };
        if info.ns_allows(peer_ns, proto) {
            return Err(DirOutcome::Allowed);
        }
        if !self.union_allows(profile, info, proto, port) {
            return Err(DirOutcome::Denied(DenyReason::PortNotAllowed));
        }
        match candidates(info, &peer.bloom, peer.ns_slot) {
            0 => Err(DirOutcome::Denied(DenyReason::NoMatchingPeer)),
            kinds => Ok(kinds),
        }
    }

    /// The second half of a check: whether the entry of `profile` for `peer`'s key of
    /// any of `kinds` (bit `k` for kind `k`, from [`Self::plan`]) allows `(proto, port)`.
    #[inline]
    pub(super) fn probe(
        &self,
        profile: u32,
        peer: &[u32; PEER_KINDS],
        proto: ProtoClass,
        kinds: u8,
        port: u16,
    ) -> DirOutcome {
        let mut left = kinds;
        while left != 0 {
            let kind = left.trailing_zeros();
            left &= left - 1;
            let Some(&key) = peer.get(kind as usize) else {
                break;
            };
            if let Some(s) = self.find(pack(profile, kind as u8, proto as u8, key)) {
                if self.slot_allows(s, port) {
                    return DirOutcome::Allowed;
                }
            }
        }
        DirOutcome::Denied(DenyReason::NoMatchingPeer)
    }

    /// Every entry, for dumps and exports: `(profile, kind, key, proto, ranges)`, sorted.
    pub fn entries(&self) -> Vec<(u32, PeerKind, u32, ProtoClass, Vec<PortRange>)> {
        let mut out: Vec<_> = self
            .slots
            .iter()
            .filter(|s| s.key != EMPTY_KEY && ((s.key >> 34) & 0x7) as u8 != UNION_KIND)
            .map(|s| {
                let ranges = self.slot_ranges(s).collect();
                let kind = PeerKind::ALL[((s.key >> 34) & 0x7) as usize % PEER_KINDS];
                let proto = ProtoClass::ALL[((s.key >> 32) & 0x3) as usize];
                ((s.key >> 37) as u32, kind, s.key as u32, proto, ranges)
            })
            .collect();
        out.sort();
        out
    }
}

impl PolicyTables {
    /// The ipcache.
    pub fn ipcache(&self) -> &IpCache {
        &self.ipcache
    }

    /// The identity table, in identity order.
    pub fn identities(&self) -> impl ExactSizeIterator<Item = &IdentityEntry> + '_ {
        self.identities.iter().map(|i| &i.entry)
    }

    /// What policy knows about identity `id`, if it exists.
    pub fn identity_entry(&self, id: u32) -> Option<&IdentityEntry> {
        self.identities.get(id as usize).map(|i| &i.entry)
    }

    /// The egress table.
    pub fn egress(&self) -> &DirTable {
        &self.egress
    }

    /// The ingress table.
    pub fn ingress(&self) -> &DirTable {
        &self.ingress
    }

    /// The identity of an address (the default identity when the ipcache misses).
    #[inline]
    pub fn identity(&self, addr: IpAddr) -> u32 {
        self.ipcache.lookup(addr).unwrap_or(self.default_identity)
    }

    #[inline]
    pub(super) fn entry(&self, id: u32) -> &Ident {
        match self.identities.get(id as usize) {
            Some(e) => e,
            // `new` checked that the default exists.
            None => &self.identities[self.default_identity as usize],
        }
    }

    #[inline]
    fn egress_of(&self, s: &Ident, d: &Ident, pc: ProtoClass, port: u16) -> DirOutcome {
        if s.entry.egress == NONE {
            DirOutcome::NotIsolated
        } else {
            self.egress.check_with(s.entry.egress, d, pc, port)
        }
    }

    #[inline]
    fn ingress_of(&self, s: &Ident, d: &Ident, pc: ProtoClass, port: u16) -> DirOutcome {
        if d.entry.ingress == NONE {
            DirOutcome::NotIsolated
        } else if s.is_node_of(d) {
            DirOutcome::OwnNode
        } else {
            self.ingress.check_with(d.entry.ingress, s, pc, port)
        }
    }

    /// Both directions for two identities.
    #[inline]
    pub fn decide_identities(&self, src: u32, dst: u32, proto: u8, dst_port: u16) -> Decision {
        let (s, d) = (self.entry(src), self.entry(dst));
        let pc = ProtoClass::from_ip_proto(proto);
        Decision {
            egress: self.egress_of(s, d, pc, dst_port),
            ingress: self.ingress_of(s, d, pc, dst_port),
        }
    }

    /// The verdict for two identities; ingress is not looked at when egress denies.
    #[inline]
    pub fn verdict_identities(&self, src: u32, dst: u32, proto: u8, dst_port: u16) -> Verdict {
        let (s, d) = (self.entry(src), self.entry(dst));
        let pc = ProtoClass::from_ip_proto(proto);
        if let DirOutcome::Denied(reason) = self.egress_of(s, d, pc, dst_port) {
            return Verdict::Deny {
                direction: Direction::Egress,
                reason,
            };
        }
        match self.ingress_of(s, d, pc, dst_port) {
            DirOutcome::Denied(reason) => Verdict::Deny {
                direction: Direction::Ingress,
                reason,
            },
            _ => Verdict::Allow,
        }
    }

    /// Both directions of a connection from `src` to `dst:dst_port` over IP protocol
    /// `proto` (explain, tests and exports want both).
    pub fn decide(&self, src: IpAddr, dst: IpAddr, proto: u8, dst_port: u16) -> Decision {
        self.decide_identities(self.identity(src), self.identity(dst), proto, dst_port)
    }

    /// The verdict for a connection-initiating packet.
    #[inline]
    pub fn verdict(&self, src: IpAddr, dst: IpAddr, proto: u8, dst_port: u16) -> Verdict {
        self.verdict_identities(self.identity(src), self.identity(dst), proto, dst_port)
    }

    /// [`Self::verdict`] for IPv4 addresses in host byte order.
    #[inline]
    pub fn verdict_v4(&self, src: u32, dst: u32, proto: u8, dst_port: u16) -> Verdict {
        let s = self.ipcache.lookup_v4(src).unwrap_or(self.default_identity);
        let d = self.ipcache.lookup_v4(dst).unwrap_or(self.default_identity);
        self.verdict_identities(s, d, proto, dst_port)
    }

    /// [`Self::verdict`] for IPv6 addresses.
    #[inline]
    pub fn verdict_v6(&self, src: u128, dst: u128, proto: u8, dst_port: u16) -> Verdict {
        let s = self.ipcache.lookup_v6(src).unwrap_or(self.default_identity);
        let d = self.ipcache.lookup_v6(dst).unwrap_or(self.default_identity);
        self.verdict_identities(s, d, proto, dst_port)
    }

    /// Bytes of lookup memory of every table.
    pub fn memory_bytes(&self) -> usize {
        self.ipcache.memory_bytes()
            + self.identities.len() * std::mem::size_of::<Ident>()
            + self.egress.memory_bytes()
            + self.ingress.memory_bytes()
    }
}
