//! NetworkPolicy verdicts from compiled tables: identities, not selectors.
//!
//! The control plane compiles Kubernetes NetworkPolicy into three things, all here:
//!
//! - the [`IpCache`]: address -> identity;
//! - an [`IdentityEntry`] per identity: the *peer keys* by which policy entries of other
//!   endpoints can name it (its workload group, its namespace, its address class, "any
//!   pod", "anything"; see [`PeerKind`]), its egress and ingress *profile* (or
//!   [`NONE`] when no policy isolates it in that direction), and node facts for the
//!   "traffic from a pod's own node is allowed" rule;
//! - one [`DirTable`] per direction: `(profile, peer kind, peer key, protocol class)` ->
//!   sorted, disjoint port ranges, in one open-addressing hash table.
//!
//! A profile is the compiled union of the rules of every policy selecting an endpoint in
//! one direction; endpoints with the same selecting policies share one. A verdict is two
//! ipcache lookups and, per isolated direction, at most one probe per peer kind the
//! profile uses (five at most): the cost does not depend on how many policies exist.
//!
//! [`PolicyTables::verdict`] is for connection-initiating packets. Replies of an allowed
//! connection are the flow table's business: they match the flow and never come here.
//! Protocols other than TCP, UDP and SCTP fall in [`ProtoClass::Other`], which only a
//! rule without `ports` (all ports, all protocols) allows.
//!
//! Nothing here allocates after construction, and no lookup can panic: every index is
//! checked when the tables are built and read with `get` besides.

use std::net::IpAddr;

use thiserror::Error;

use super::ipcache::IpCache;

/// "None" in every `u32` field of these tables: no profile (not isolated), no peer key
/// of that kind, no node.
pub const NONE: u32 = u32::MAX;

/// Number of peer kinds (the length of [`IdentityEntry::peer`]).
pub const PEER_KINDS: usize = 5;

/// The largest profile number a [`DirTable`] accepts.
pub const MAX_PROFILE: u32 = (1 << 27) - 1;

/// Transport protocol classes that policy distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum ProtoClass {
    /// TCP (IP protocol 6).
    Tcp = 0,
    /// UDP (17).
    Udp = 1,
    /// SCTP (132).
    Sctp = 2,
    /// Every other IP protocol (ICMP, ...): only "all ports" rules allow it.
    Other = 3,
}

impl ProtoClass {
    /// All classes.
    pub const ALL: [ProtoClass; 4] = [
        ProtoClass::Tcp,
        ProtoClass::Udp,
        ProtoClass::Sctp,
        ProtoClass::Other,
    ];

    /// The class of an IP protocol number.
    #[inline]
    pub fn from_ip_proto(proto: u8) -> Self {
        match proto {
            6 => ProtoClass::Tcp,
            17 => ProtoClass::Udp,
            132 => ProtoClass::Sctp,
            _ => ProtoClass::Other,
        }
    }

    /// The IP protocol number, for the classes that have exactly one.
    pub fn ip_proto(self) -> Option<u8> {
        match self {
            ProtoClass::Tcp => Some(6),
            ProtoClass::Udp => Some(17),
            ProtoClass::Sctp => Some(132),
            ProtoClass::Other => None,
        }
    }
}

/// The ways a policy entry can name a peer, most specific first. An identity carries one
/// key per kind that applies to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum PeerKind {
    /// A group of workloads (pod selectors).
    Workload = 0,
    /// Every pod of one namespace (namespace selectors, empty pod selectors).
    Namespace = 1,
    /// An address class (ipBlocks; pods are in one too, since ipBlocks match pod IPs).
    Class = 2,
    /// Every pod (an empty namespace selector).
    AnyPod = 3,
    /// Every address (a rule without peers).
    Any = 4,
}

impl PeerKind {
    /// All kinds, in the order of [`IdentityEntry::peer`].
    pub const ALL: [PeerKind; PEER_KINDS] = [
        PeerKind::Workload,
        PeerKind::Namespace,
        PeerKind::Class,
        PeerKind::AnyPod,
        PeerKind::Any,
    ];
}

/// What policy knows about one identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdentityEntry {
    /// Its key per [`PeerKind`] (index = kind), [`NONE`] where a kind does not apply.
    pub peer: [u32; PEER_KINDS],
    /// Egress profile, or [`NONE`] when no policy isolates it for egress.
    pub egress: u32,
    /// Ingress profile, or [`NONE`] when no policy isolates it for ingress.
    pub ingress: u32,
    /// The node a workload runs on (an index the control plane chose), or [`NONE`].
    pub runs_on: u32,
    /// The node this address belongs to, or [`NONE`] when it is not a node's address.
    pub node_of: u32,
}

impl IdentityEntry {
    /// An identity that no policy isolates and no entry names except "anything".
    pub fn world(any_key: u32) -> Self {
        IdentityEntry {
            peer: [NONE, NONE, NONE, NONE, any_key],
            egress: NONE,
            ingress: NONE,
            runs_on: NONE,
            node_of: NONE,
        }
    }
}

/// An inclusive port range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortRange {
    /// First port.
    pub lo: u16,
    /// Last port (inclusive).
    pub hi: u16,
}

impl PortRange {
    /// Every port.
    pub const ALL: PortRange = PortRange { lo: 0, hi: 65535 };

    /// One port.
    pub fn one(p: u16) -> Self {
        PortRange { lo: p, hi: p }
    }

    /// Whether `p` is in the range.
    #[inline]
    pub fn contains(self, p: u16) -> bool {
        self.lo <= p && p <= self.hi
    }
}

/// Sorts and coalesces ranges (overlapping or adjacent ones merge); drops empty ones.
pub fn merge_ranges(ranges: &mut Vec<PortRange>) {
    ranges.retain(|r| r.lo <= r.hi);
    ranges.sort_unstable();
    let mut out: Vec<PortRange> = Vec::with_capacity(ranges.len());
    for r in ranges.drain(..) {
        match out.last_mut() {
            Some(last) if u32::from(r.lo) <= u32::from(last.hi) + 1 => {
                last.hi = last.hi.max(r.hi);
            }
            _ => out.push(r),
        }
    }
    *ranges = out;
}

/// A traffic direction as policy sees it from one endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Leaving the source.
    Egress,
    /// Entering the destination.
    Ingress,
}

/// Why an isolated direction denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DenyReason {
    /// The selecting policies have no rule in this direction at all (default deny).
    NoRules = 0,
    /// Rules allow this protocol and port, but not for this peer.
    NoMatchingPeer = 1,
    /// No rule allows this protocol and port, for any peer.
    PortNotAllowed = 2,
}

/// The outcome of one direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DirOutcome {
    /// No policy isolates the endpoint in this direction (or it is not a pod).
    NotIsolated,
    /// Isolated, and some rule allows the connection.
    Allowed,
    /// Isolated ingress, allowed because the source is the pod's own node.
    OwnNode,
    /// Isolated, and nothing allows it.
    Denied(DenyReason),
}

impl DirOutcome {
    /// Whether the direction lets the connection through.
    #[inline]
    pub fn allows(self) -> bool {
        !matches!(self, DirOutcome::Denied(_))
    }
}

/// Both directions of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decision {
    /// Egress at the source.
    pub egress: DirOutcome,
    /// Ingress at the destination.
    pub ingress: DirOutcome,
}

impl Decision {
    /// The verdict: egress is checked first, as the packet leaves the source first.
    pub fn verdict(&self) -> Verdict {
        match (self.egress, self.ingress) {
            (DirOutcome::Denied(reason), _) => Verdict::Deny {
                direction: Direction::Egress,
                reason,
            },
            (_, DirOutcome::Denied(reason)) => Verdict::Deny {
                direction: Direction::Ingress,
                reason,
            },
            _ => Verdict::Allow,
        }
    }
}

/// The answer for a connection-initiating packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Both directions allow it.
    Allow,
    /// One direction denies it (egress is reported when both do).
    Deny {
        /// Where it was denied: egress at the source or ingress at the destination.
        direction: Direction,
        /// Why.
        reason: DenyReason,
    },
}

impl Verdict {
    /// Whether the connection may proceed.
    #[inline]
    pub fn is_allow(self) -> bool {
        self == Verdict::Allow
    }
}

/// Why tables could not be built.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A profile number is too large.
    #[error("profile {0} exceeds the largest profile number {MAX_PROFILE}")]
    ProfileTooLarge(u32),
    /// An entry names a profile the table was not built for.
    #[error("an entry names profile {profile} but the table has {profiles} profiles")]
    UnknownProfile {
        /// The profile named.
        profile: u32,
        /// Profiles in the table.
        profiles: u32,
    },
    /// A peer key equals [`NONE`].
    #[error("a peer key may not be the reserved value NONE")]
    ReservedKey,
    /// The identity table is empty or the default identity is outside it.
    #[error("default identity {default} is outside the {identities} identities")]
    BadDefault {
        /// The default identity.
        default: u32,
        /// How many identities there are.
        identities: usize,
    },
    /// The ipcache names an identity that does not exist.
    #[error("the ipcache names identity {id} but only {identities} exist")]
    UnknownIdentity {
        /// The identity named.
        id: u32,
        /// How many exist.
        identities: usize,
    },
    /// An identity names a profile its direction's table does not have.
    #[error("identity {id} names {direction:?} profile {profile}, which does not exist")]
    IdentityProfile {
        /// The identity.
        id: usize,
        /// The direction.
        direction: Direction,
        /// The profile named.
        profile: u32,
    },
}

/// One entry given to [`DirTable::new`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The profile (of the endpoint being protected).
    pub profile: u32,
    /// How the peer is named.
    pub kind: PeerKind,
    /// The peer key.
    pub key: u32,
    /// The protocol class.
    pub proto: ProtoClass,
    /// Allowed destination ports (any order; merged on build).
    pub ranges: Vec<PortRange>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    key: u64,
    /// The first range, inline: most entries have one.
    first: PortRange,
    /// Start of further ranges in `extra` (sentinel-terminated), or `NONE`.
    more: u32,
}

const EMPTY_KEY: u64 = u64::MAX;
const SENTINEL: PortRange = PortRange { lo: 1, hi: 0 };

#[inline]
fn pack(profile: u32, kind: u8, proto: u8, key: u32) -> u64 {
    (u64::from(profile) << 37) | (u64::from(kind) << 34) | (u64::from(proto) << 32) | u64::from(key)
}

#[inline]
fn slot_hash(key: u64, shift: u32) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> shift) as usize
}

/// Per profile: which peer kinds have entries, and per protocol class the union of the
/// ports any entry allows (inline when it is at most [`UNION_INLINE`] ranges, else in
/// the hash table under the pseudo-kind [`UNION_KIND`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ProfileInfo {
    /// Bit `k` set when the profile has entries of peer kind `k`.
    kinds: u8,
    /// Per protocol class: number of inline union ranges, or `UNION_SPILLED`.
    count: [u8; 4],
    /// Per protocol class: the union's ranges.
    union: [[PortRange; UNION_INLINE]; 4],
    /// Per peer kind: a 64-bit Bloom filter of the keys with entries (any protocol),
    /// so that most keys without an entry cost no probe.
    bloom: [u64; PEER_KINDS],
}

#[inline]
fn bloom_bit(key: u32) -> u64 {
    1u64 << ((u64::from(key).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as u32)
}

/// Merges a list sorted by (key, range) into per-key merged range lists.
fn merge_sorted(flat: &[(u64, PortRange)]) -> Vec<(u64, Vec<PortRange>)> {
    let mut out: Vec<(u64, Vec<PortRange>)> = Vec::new();
    for &(k, r) in flat {
        match out.last_mut() {
            Some((lk, rs)) if *lk == k => match rs.last_mut() {
                Some(last) if u32::from(r.lo) <= u32::from(last.hi) + 1 => {
                    last.hi = last.hi.max(r.hi);
                }
                _ => rs.push(r),
            },
            _ => out.push((k, vec![r])),
        }
    }
    out
}

const UNION_INLINE: usize = 2;
const UNION_SPILLED: u8 = u8::MAX;
/// The pseudo peer kind under which spilled port unions are stored.
const UNION_KIND: u8 = 7;

/// One direction's entries: `(profile, peer kind, peer key, protocol)` -> port ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirTable {
    profiles: Box<[ProfileInfo]>,
    slots: Box<[Slot]>,
    shift: u32,
    extra: Box<[PortRange]>,
    ranges: usize,
}

impl DirTable {
    /// Builds a table for `profiles` profiles (numbered `0..profiles`). Entries with the
    /// same key are merged; a profile without entries denies everything.
    pub fn new(
        profiles: u32,
        entries: impl IntoIterator<Item = DirEntry>,
    ) -> Result<Self, PolicyError> {
        if profiles > MAX_PROFILE + 1 {
            return Err(PolicyError::ProfileTooLarge(profiles - 1));
        }
        let mut infos = vec![
            ProfileInfo {
                kinds: 0,
                count: [0; 4],
                union: [[SENTINEL; UNION_INLINE]; 4],
                bloom: [0; PEER_KINDS],
            };
            profiles as usize
        ]
        .into_boxed_slice();
        // One flat list of (key, range), sorted, then merged per key: no map, no
        // per-entry allocation (tables reach millions of ranges).
        let mut flat: Vec<(u64, PortRange)> = Vec::new();
        for e in entries {
            if e.profile >= profiles {
                return Err(PolicyError::UnknownProfile {
                    profile: e.profile,
                    profiles,
                });
            }
            if e.key == NONE {
                return Err(PolicyError::ReservedKey);
            }
            let k = pack(e.profile, e.kind as u8, e.proto as u8, e.key);
            flat.extend(e.ranges.iter().filter(|r| r.lo <= r.hi).map(|&r| (k, r)));
        }
        // Port unions per (profile, protocol), under the pseudo-kind key.
        let mut unions: Vec<(u64, PortRange)> = flat
            .iter()
            .map(|&(k, r)| {
                (
                    pack((k >> 37) as u32, UNION_KIND, ((k >> 32) & 3) as u8, 0),
                    r,
                )
            })
            .collect();
        unions.sort_unstable();
        let unions = merge_sorted(&unions);
        for (k, ranges) in &unions {
            let Some(info) = infos.get_mut((k >> 37) as usize) else {
                continue;
            };
            let pc = ((k >> 32) & 3) as usize;
            if ranges.len() <= UNION_INLINE {
                info.count[pc] = ranges.len() as u8;
                info.union[pc][..ranges.len()].copy_from_slice(ranges);
            } else {
                info.count[pc] = UNION_SPILLED;
            }
        }
        flat.sort_unstable();
        let mut merged = merge_sorted(&flat);
        merged.extend(unions.into_iter().filter(|(_, r)| r.len() > UNION_INLINE));
        let cap = (merged.len() * 2).next_power_of_two().max(16);
        let shift = 64 - cap.trailing_zeros();
        let empty = Slot {
            key: EMPTY_KEY,
            first: SENTINEL,
            more: NONE,
        };
        let mut slots = vec![empty; cap].into_boxed_slice();
        let mut extra = Vec::new();
        let mut total = 0usize;
        for (k, ranges) in merged {
            let Some(&first) = ranges.first() else {
                continue;
            };
            let profile = (k >> 37) as usize;
            let kind = ((k >> 34) & 0x7) as u8;
            if kind != UNION_KIND {
                total += ranges.len();
                if let Some(info) = infos.get_mut(profile) {
                    info.kinds |= 1 << kind;
                    if let Some(b) = info.bloom.get_mut(usize::from(kind)) {
                        *b |= bloom_bit(k as u32);
                    }
                }
            }
            let more = if ranges.len() > 1 {
                let at = extra.len() as u32;
                extra.extend_from_slice(&ranges[1..]);
                extra.push(SENTINEL);
                at
            } else {
                NONE
            };
            let mut i = slot_hash(k, shift);
            while slots[i].key != EMPTY_KEY {
                i = (i + 1) & (cap - 1);
            }
            slots[i] = Slot {
                key: k,
                first,
                more,
            };
        }
        Ok(DirTable {
            profiles: infos,
            slots,
            shift,
            extra: extra.into_boxed_slice(),
            ranges: total,
        })
    }

    /// Number of profiles.
    pub fn profiles(&self) -> usize {
        self.profiles.len()
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
    fn find(&self, key: u64) -> Option<&Slot> {
        let mask = self.slots.len() - 1;
        let mut i = slot_hash(key, self.shift);
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

    #[inline]
    fn slot_allows(&self, s: &Slot, port: u16) -> bool {
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
    #[inline]
    fn union_allows(&self, profile: u32, info: &ProfileInfo, proto: ProtoClass, port: u16) -> bool {
        let pc = proto as usize;
        match info.count[pc] {
            UNION_SPILLED => self
                .find(pack(profile, UNION_KIND, proto as u8, 0))
                .is_some_and(|s| self.slot_allows(s, port)),
            n => info.union[pc][..usize::from(n).min(UNION_INLINE)]
                .iter()
                .any(|r| r.contains(port)),
        }
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
        let info = match self.profiles.get(profile as usize) {
            Some(i) if i.kinds != 0 => i,
            _ => return DirOutcome::Denied(DenyReason::NoRules),
        };
        if !self.union_allows(profile, info, proto, port) {
            return DirOutcome::Denied(DenyReason::PortNotAllowed);
        }
        for (kind, &key) in peer.iter().enumerate() {
            if info.kinds & (1 << kind) == 0
                || key == NONE
                || info.bloom[kind] & bloom_bit(key) == 0
            {
                continue;
            }
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
                let mut ranges = vec![s.first];
                if s.more != NONE {
                    ranges.extend(
                        self.extra[s.more as usize..]
                            .iter()
                            .take_while(|r| **r != SENTINEL),
                    );
                }
                let kind = PeerKind::ALL[((s.key >> 34) & 0x7) as usize % PEER_KINDS];
                let proto = ProtoClass::ALL[((s.key >> 32) & 0x3) as usize];
                ((s.key >> 37) as u32, kind, s.key as u32, proto, ranges)
            })
            .collect();
        out.sort();
        out
    }
}

/// Packets per stage of the burst verdicts.
pub const BATCH: usize = 32;

/// An IPv4 connection-initiating packet, for [`PolicyTables::verdicts_v4`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Conn4 {
    /// Source address (host byte order).
    pub src: u32,
    /// Destination address (host byte order).
    pub dst: u32,
    /// IP protocol.
    pub proto: u8,
    /// Destination port (0 for protocols without ports).
    pub dst_port: u16,
}

/// An IPv6 connection-initiating packet, for [`PolicyTables::verdicts_v6`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Conn6 {
    /// Source address.
    pub src: u128,
    /// Destination address.
    pub dst: u128,
    /// IP protocol.
    pub proto: u8,
    /// Destination port (0 for protocols without ports).
    pub dst_port: u16,
}

/// Everything a policy verdict needs, built by the control plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyTables {
    ipcache: IpCache,
    identities: Box<[IdentityEntry]>,
    default_identity: u32,
    egress: DirTable,
    ingress: DirTable,
}

impl PolicyTables {
    /// Bundles and cross-checks the tables: every identity the ipcache names exists,
    /// every profile an identity names exists in its direction's table.
    pub fn new(
        ipcache: IpCache,
        identities: Vec<IdentityEntry>,
        default_identity: u32,
        egress: DirTable,
        ingress: DirTable,
    ) -> Result<Self, PolicyError> {
        if default_identity as usize >= identities.len() {
            return Err(PolicyError::BadDefault {
                default: default_identity,
                identities: identities.len(),
            });
        }
        if let Some(id) = ipcache.max_identity() {
            if id as usize >= identities.len() {
                return Err(PolicyError::UnknownIdentity {
                    id,
                    identities: identities.len(),
                });
            }
        }
        for (i, e) in identities.iter().enumerate() {
            for (direction, profile, table) in [
                (Direction::Egress, e.egress, &egress),
                (Direction::Ingress, e.ingress, &ingress),
            ] {
                if profile != NONE && profile as usize >= table.profiles() {
                    return Err(PolicyError::IdentityProfile {
                        id: i,
                        direction,
                        profile,
                    });
                }
            }
        }
        Ok(PolicyTables {
            ipcache,
            identities: identities.into_boxed_slice(),
            default_identity,
            egress,
            ingress,
        })
    }

    /// The ipcache.
    pub fn ipcache(&self) -> &IpCache {
        &self.ipcache
    }

    /// The identity table.
    pub fn identities(&self) -> &[IdentityEntry] {
        &self.identities
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
    fn entry(&self, id: u32) -> &IdentityEntry {
        match self.identities.get(id as usize) {
            Some(e) => e,
            // `new` checked that the default exists.
            None => &self.identities[self.default_identity as usize],
        }
    }

    #[inline]
    fn egress_of(
        &self,
        s: &IdentityEntry,
        d: &IdentityEntry,
        pc: ProtoClass,
        port: u16,
    ) -> DirOutcome {
        if s.egress == NONE {
            DirOutcome::NotIsolated
        } else {
            self.egress.check(s.egress, &d.peer, pc, port)
        }
    }

    #[inline]
    fn ingress_of(
        &self,
        s: &IdentityEntry,
        d: &IdentityEntry,
        pc: ProtoClass,
        port: u16,
    ) -> DirOutcome {
        if d.ingress == NONE {
            DirOutcome::NotIsolated
        } else if s.node_of != NONE && s.node_of == d.runs_on {
            DirOutcome::OwnNode
        } else {
            self.ingress.check(d.ingress, &s.peer, pc, port)
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

    /// Verdicts for a burst of IPv4 connection-initiating packets: `out[i]` answers
    /// `conns[i]` (`out` must be at least as long; extra connections are ignored). The
    /// work is done in stages over groups of [`BATCH`] (all address lookups, then all
    /// identity loads, then the decisions), so that the memory accesses of different
    /// packets overlap instead of waiting on each other.
    pub fn verdicts_v4(&self, conns: &[Conn4], out: &mut [Verdict]) {
        for (c, o) in conns.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            let mut ids = [(0u32, 0u32); BATCH];
            for (id, x) in ids.iter_mut().zip(c) {
                *id = (
                    self.ipcache
                        .lookup_v4(x.src)
                        .unwrap_or(self.default_identity),
                    self.ipcache
                        .lookup_v4(x.dst)
                        .unwrap_or(self.default_identity),
                );
            }
            self.decide_burst(&ids, c.iter().map(|x| (x.proto, x.dst_port)), o);
        }
    }

    /// [`Self::verdicts_v4`] for IPv6.
    pub fn verdicts_v6(&self, conns: &[Conn6], out: &mut [Verdict]) {
        for (c, o) in conns.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            let mut ids = [(0u32, 0u32); BATCH];
            for (id, x) in ids.iter_mut().zip(c) {
                *id = (
                    self.ipcache
                        .lookup_v6(x.src)
                        .unwrap_or(self.default_identity),
                    self.ipcache
                        .lookup_v6(x.dst)
                        .unwrap_or(self.default_identity),
                );
            }
            self.decide_burst(&ids, c.iter().map(|x| (x.proto, x.dst_port)), o);
        }
    }

    #[inline]
    fn decide_burst(
        &self,
        ids: &[(u32, u32); BATCH],
        ports: impl Iterator<Item = (u8, u16)>,
        out: &mut [Verdict],
    ) {
        let world = IdentityEntry::world(NONE);
        let mut src = [world; BATCH];
        let mut dst = [world; BATCH];
        for ((s, d), &(a, b)) in src
            .iter_mut()
            .zip(dst.iter_mut())
            .zip(ids.iter())
            .take(out.len())
        {
            *s = *self.entry(a);
            *d = *self.entry(b);
        }
        for (i, ((proto, port), o)) in ports.zip(out.iter_mut()).enumerate() {
            let (Some(s), Some(d)) = (src.get(i), dst.get(i)) else {
                break;
            };
            let pc = ProtoClass::from_ip_proto(proto);
            *o = match self.egress_of(s, d, pc, port) {
                DirOutcome::Denied(reason) => Verdict::Deny {
                    direction: Direction::Egress,
                    reason,
                },
                _ => match self.ingress_of(s, d, pc, port) {
                    DirOutcome::Denied(reason) => Verdict::Deny {
                        direction: Direction::Ingress,
                        reason,
                    },
                    _ => Verdict::Allow,
                },
            };
        }
    }

    /// Bytes of lookup memory of every table.
    pub fn memory_bytes(&self) -> usize {
        self.ipcache.memory_bytes()
            + self.identities.len() * std::mem::size_of::<IdentityEntry>()
            + self.egress.memory_bytes()
            + self.ingress.memory_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ANY: u32 = 100;
    const ANY_POD: u32 = 101;

    fn pod(wl: u32, ns: u32, class: u32, egress: u32, ingress: u32, node: u32) -> IdentityEntry {
        IdentityEntry {
            peer: [wl, ns, class, ANY_POD, ANY],
            egress,
            ingress,
            runs_on: node,
            node_of: NONE,
        }
    }

    fn entry(
        profile: u32,
        kind: PeerKind,
        key: u32,
        proto: ProtoClass,
        r: &[(u16, u16)],
    ) -> DirEntry {
        DirEntry {
            profile,
            kind,
            key,
            proto,
            ranges: r.iter().map(|&(lo, hi)| PortRange { lo, hi }).collect(),
        }
    }

    /// 10.0.0.1 = pod A (ns 10, ingress profile 0), 10.0.0.2 = pod B (ns 11, egress
    /// profile 0), 10.0.0.3 = pod C (ns 10, ingress profile 1 = deny all), 192.168.0.1 =
    /// the node of A and C; everything else is the world (class 50).
    fn tables() -> PolicyTables {
        let ids = vec![
            IdentityEntry {
                peer: [NONE, NONE, 50, NONE, ANY],
                ..IdentityEntry::world(ANY)
            },
            pod(1, 10, 50, NONE, 0, 7),
            pod(2, 11, 50, 0, NONE, 8),
            pod(3, 10, 50, NONE, 1, 7),
            IdentityEntry {
                peer: [NONE, NONE, 50, NONE, ANY],
                node_of: 7,
                ..IdentityEntry::world(ANY)
            },
        ];
        let ipc = IpCache::new(
            [
                (0, 0, 0),
                (0x0a00_0001, 32, 1),
                (0x0a00_0002, 32, 2),
                (0x0a00_0003, 32, 3),
                (0xc0a8_0001, 32, 4),
            ],
            [(0, 0, 0)],
        )
        .expect("ipcache");
        // Ingress profile 0 (pod A): from namespace 11 on TCP 80-81 and 443; from the
        // world class on UDP 53. Profile 1 has no entries.
        let ingress = DirTable::new(
            2,
            [
                entry(
                    0,
                    PeerKind::Namespace,
                    11,
                    ProtoClass::Tcp,
                    &[(443, 443), (80, 81)],
                ),
                entry(0, PeerKind::Class, 50, ProtoClass::Udp, &[(53, 53)]),
            ],
        )
        .expect("ingress");
        // Egress profile 0 (pod B): to workload 1 on every protocol and port.
        let egress = DirTable::new(
            1,
            ProtoClass::ALL
                .iter()
                .map(|&p| entry(0, PeerKind::Workload, 1, p, &[(0, 65535)])),
        )
        .expect("egress");
        PolicyTables::new(ipc, ids, 0, egress, ingress).expect("tables")
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn verdicts_name_direction_and_reason() {
        let t = tables();
        let (a, b, c, node, world) = (
            ip("10.0.0.1"),
            ip("10.0.0.2"),
            ip("10.0.0.3"),
            ip("192.168.0.1"),
            ip("203.0.113.9"),
        );
        assert_eq!(t.verdict(b, a, 6, 80), Verdict::Allow);
        assert_eq!(t.verdict(b, a, 6, 81), Verdict::Allow);
        assert_eq!(t.verdict(b, a, 6, 443), Verdict::Allow);
        assert_eq!(
            t.verdict(b, a, 6, 82),
            Verdict::Deny {
                direction: Direction::Ingress,
                reason: DenyReason::PortNotAllowed
            }
        );
        assert_eq!(
            t.verdict(b, a, 17, 80),
            Verdict::Deny {
                direction: Direction::Ingress,
                reason: DenyReason::PortNotAllowed
            }
        );
        // B's egress allows only A.
        assert_eq!(
            t.verdict(b, c, 6, 80),
            Verdict::Deny {
                direction: Direction::Egress,
                reason: DenyReason::NoMatchingPeer
            }
        );
        // The world reaches A on UDP 53 through the class entry (pods are in the class
        // too: B reaches A on UDP 53 the same way).
        assert_eq!(t.verdict(world, a, 17, 53), Verdict::Allow);
        assert_eq!(t.verdict(b, a, 17, 53), Verdict::Allow);
        assert!(!t.verdict(world, a, 17, 54).is_allow());
        // C denies all ingress, except from its own node.
        assert_eq!(
            t.verdict(a, c, 6, 80),
            Verdict::Deny {
                direction: Direction::Ingress,
                reason: DenyReason::NoRules
            }
        );
        assert_eq!(t.verdict(node, c, 6, 80), Verdict::Allow);
        assert_eq!(t.decide(node, c, 6, 80).ingress, DirOutcome::OwnNode);
        // Non-isolated directions.
        assert_eq!(t.verdict(a, world, 1, 0), Verdict::Allow);
        assert_eq!(t.decide(a, b, 6, 1).ingress, DirOutcome::NotIsolated);
        // ICMP from B to A: B's egress allows every protocol towards A, A's ingress has
        // nothing for class Other.
        assert_eq!(
            t.verdict(b, a, 1, 0),
            Verdict::Deny {
                direction: Direction::Ingress,
                reason: DenyReason::PortNotAllowed
            }
        );
        // IPv6 falls to the default identity: not isolated.
        assert_eq!(t.verdict(ip("::1"), ip("::2"), 6, 80), Verdict::Allow);
        assert_eq!(
            t.verdict_v4(0x0a00_0002, 0x0a00_0001, 6, 80),
            Verdict::Allow
        );
    }

    #[test]
    fn entries_round_trip_merged() {
        let t = tables();
        let e = t.ingress().entries();
        assert_eq!(
            e[0],
            (
                0,
                PeerKind::Namespace,
                11,
                ProtoClass::Tcp,
                vec![PortRange { lo: 80, hi: 81 }, PortRange::one(443)]
            )
        );
        assert_eq!(t.ingress().ranges(), 3);
        assert_eq!(t.egress().ranges(), 4);
    }

    #[test]
    fn bad_tables_are_rejected() {
        assert_eq!(
            DirTable::new(1, [entry(1, PeerKind::Any, 1, ProtoClass::Tcp, &[(1, 1)])]),
            Err(PolicyError::UnknownProfile {
                profile: 1,
                profiles: 1
            })
        );
        assert_eq!(
            DirTable::new(
                1,
                [entry(0, PeerKind::Any, NONE, ProtoClass::Tcp, &[(1, 1)])]
            ),
            Err(PolicyError::ReservedKey)
        );
        let ipc = IpCache::new([(0, 0, 3)], []).expect("ipcache");
        let empty = || DirTable::new(0, []).expect("empty");
        assert!(matches!(
            PolicyTables::new(
                ipc.clone(),
                vec![IdentityEntry::world(1)],
                0,
                empty(),
                empty()
            ),
            Err(PolicyError::UnknownIdentity { id: 3, .. })
        ));
        let ids = vec![
            IdentityEntry {
                ingress: 0,
                ..IdentityEntry::world(1)
            };
            4
        ];
        assert!(matches!(
            PolicyTables::new(ipc, ids, 0, empty(), empty()),
            Err(PolicyError::IdentityProfile { id: 0, .. })
        ));
    }

    #[test]
    fn bursts_answer_like_single_verdicts() {
        let t = tables();
        let addrs = [
            0x0a00_0001u32,
            0x0a00_0002,
            0x0a00_0003,
            0xc0a8_0001,
            0xcb00_7109,
        ];
        let mut conns = Vec::new();
        for &s in &addrs {
            for &d in &addrs {
                for (proto, port) in [(6, 80), (6, 82), (17, 53), (1, 0), (6, 443)] {
                    conns.push(Conn4 {
                        src: s,
                        dst: d,
                        proto,
                        dst_port: port,
                    });
                }
            }
        }
        // Not a multiple of the burst size, to cover the tail.
        conns.truncate(BATCH * 3 + 5);
        let mut out = vec![Verdict::Allow; conns.len()];
        t.verdicts_v4(&conns, &mut out);
        let mut denied = 0;
        for (c, v) in conns.iter().zip(&out) {
            assert_eq!(*v, t.verdict_v4(c.src, c.dst, c.proto, c.dst_port), "{c:?}");
            denied += usize::from(!v.is_allow());
        }
        assert!(denied > 0 && denied < conns.len());
        let six = [Conn6 {
            src: 1,
            dst: 2,
            proto: 6,
            dst_port: 80,
        }];
        let mut out6 = [Verdict::Deny {
            direction: Direction::Egress,
            reason: DenyReason::NoRules,
        }];
        t.verdicts_v6(&six, &mut out6);
        assert_eq!(out6[0], Verdict::Allow);
    }

    #[test]
    fn merge_coalesces_adjacent_and_overlapping() {
        let mut r = vec![
            PortRange { lo: 10, hi: 20 },
            PortRange { lo: 21, hi: 25 },
            PortRange { lo: 5, hi: 12 },
            PortRange { lo: 100, hi: 100 },
            PortRange {
                lo: 65535,
                hi: 65535,
            },
            PortRange { lo: 0, hi: 0 },
        ];
        merge_ranges(&mut r);
        assert_eq!(
            r,
            vec![
                PortRange { lo: 0, hi: 0 },
                PortRange { lo: 5, hi: 25 },
                PortRange { lo: 100, hi: 100 },
                PortRange {
                    lo: 65535,
                    hi: 65535
                },
            ]
        );
    }

    #[test]
    fn many_ranges_are_scanned_in_order() {
        let ranges: Vec<(u16, u16)> = (0..50).map(|i| (i * 100, i * 100 + 9)).collect();
        let t =
            DirTable::new(1, [entry(0, PeerKind::Any, 1, ProtoClass::Udp, &ranges)]).expect("t");
        let peer = [NONE, NONE, NONE, NONE, 1];
        for p in 0..6000u16 {
            let want = p < 5000 && p % 100 < 10;
            assert_eq!(
                t.check(0, &peer, ProtoClass::Udp, p).allows(),
                want,
                "port {p}"
            );
        }
        assert!(!t.check(0, &peer, ProtoClass::Tcp, 0).allows());
    }
}
