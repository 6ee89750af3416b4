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
//! Bursts: [`PolicyTables::verdicts_v4`], [`PolicyTables::verdicts_v6`] and
//! [`PolicyTables::verdicts`] answer up to [`BATCH`] connections per round in stages,
//! the way DPDK's `rte_lpm_lookup_bulk` and `rte_acl_classify` and VPP's multi-packet
//! loops hide memory latency: every address of the round is resolved level by level
//! ([`IpCache::lookup_bulk_v4`]), then every identity is prefetched, then the profile of
//! every isolated direction, then the hash slots its check will probe, and only then is
//! anything decided. Each stage reads what the previous one prefetched, so the cache
//! misses of a round overlap instead of adding up. Which packets are isolated, pass a
//! filter or hit an entry is data no branch predictor learns, so the stages list the
//! packets that go on (appending without a branch) and compute the rest with selects and
//! tables. Egress goes first and prunes: ingress is planned only where egress may still
//! pass (the verdict reports egress first, so an ingress outcome behind an egress denial
//! is never read). Their answers are those of [`PolicyTables::verdict`], packet by
//! packet.
//!
//! Layout, for as few cache lines per lookup as possible: an identity (with its peer
//! keys' Bloom bits) and a profile summary are one line each, the hash table is probed
//! from the start of a line, and the large arrays live in transparent huge pages
//! (see `frozen`), so that a lookup in tens of MiB does not also walk page tables.
//!
//! Nothing here allocates after construction, and no lookup can panic: every index is
//! checked when the tables are built and read with `get` besides (a burst's own
//! fixed-size arrays are indexed modulo their length).

use std::collections::HashMap;
use std::hint::select_unpredictable;
use std::net::IpAddr;

use thiserror::Error;

use super::frozen;
use super::ipcache::IpCache;
use crate::mem::{prefetch_line, HugeSlice};

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

    /// The class of an IP protocol number (a table lookup: bursts mix protocols, and a
    /// `match` compiles to branches that mispredict on them).
    #[inline]
    pub fn from_ip_proto(proto: u8) -> Self {
        const CLASSES: [ProtoClass; 256] = {
            let mut t = [ProtoClass::Other; 256];
            t[6] = ProtoClass::Tcp;
            t[17] = ProtoClass::Udp;
            t[132] = ProtoClass::Sctp;
            t
        };
        CLASSES[usize::from(proto)]
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

    /// Whether `p` is in the range. Without branches: the bursts' stages call it on
    /// ports a branch predictor cannot learn (with `&&`, valgrind's branch simulation
    /// counted 11k mispredictions in the egress port pass over `bench_policy`'s
    /// 50000x10000 trace, 6 % of them all).
    #[inline]
    pub fn contains(self, p: u16) -> bool {
        (self.lo <= p) & (p <= self.hi)
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

/// One port range of one entry, for [`DirTable::from_ranges`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirRange {
    /// The profile (of the endpoint being protected).
    pub profile: u32,
    /// How the peer is named.
    pub kind: PeerKind,
    /// The peer key.
    pub key: u32,
    /// The protocol class.
    pub proto: ProtoClass,
    /// Allowed destination ports.
    pub range: PortRange,
}

/// Checks an entry's profile and key against a table of `profiles` profiles.
fn check_entry(profiles: u32, profile: u32, key: u32) -> Result<(), PolicyError> {
    if profile >= profiles {
        return Err(PolicyError::UnknownProfile { profile, profiles });
    }
    if key == NONE {
        return Err(PolicyError::ReservedKey);
    }
    Ok(())
}

/// One entry of the hash table. Four fill a cache line: the table is probed linearly
/// from the first slot of the key's home line ([`slot_home`]), so a lookup whose probe
/// ends in that line (nearly all, at a load factor of at most 1/2) reads one line, which
/// a burst prefetches.
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

/// Slots per cache line.
const LINE_SLOTS: usize = 4;
const _: () = assert!(std::mem::size_of::<SlotLine>() == 64);

/// One cache line of slots: the hash table is an array of these, so that slot `4k` starts
/// a line whatever the allocator returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(64))]
struct SlotLine([Slot; LINE_SLOTS]);

/// The hash table's slots, addressed one by one or a line at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Slots(HugeSlice<SlotLine>);

impl Slots {
    /// Lines of `slots` (whose length is a multiple of [`LINE_SLOTS`]).
    fn new(slots: &[Slot]) -> Self {
        let lines = slots
            .chunks_exact(LINE_SLOTS)
            .map(|c| SlotLine([c[0], c[1], c[2], c[3]]))
            .collect();
        Slots(frozen(lines))
    }

    #[inline]
    fn len(&self) -> usize {
        self.0.len() * LINE_SLOTS
    }

    #[inline]
    fn get(&self, i: usize) -> Option<&Slot> {
        self.0.get(i / LINE_SLOTS)?.0.get(i % LINE_SLOTS)
    }

    /// The line that slot `home` (a multiple of [`LINE_SLOTS`]) starts.
    #[inline]
    fn line(&self, home: usize) -> Option<&[Slot; LINE_SLOTS]> {
        self.0.get(home / LINE_SLOTS).map(|l| &l.0)
    }

    fn iter(&self) -> impl Iterator<Item = &Slot> + '_ {
        self.0.iter().flat_map(|l| l.0.iter())
    }
}

/// The first slot of `key`'s home line, where its probe starts.
#[inline]
fn slot_home(key: u64, shift: u32) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> shift) as usize & !(LINE_SLOTS - 1)
}

/// Per profile: which peer kinds have entries, and per protocol class the union of the
/// ports any entry allows (inline when it is at most [`UNION_INLINE`] ranges, else in
/// the hash table under the pseudo-kind [`UNION_KIND`]). One cache line: a check reads
/// it whole. 32-bit filters (64-bit ones would not fit) let about 9 % more probes
/// through on `bench_policy`'s 10k policies, far fewer misses than a second line costs;
/// the workload filter, which saturates first, is narrowed by a filter of namespaces
/// (`wl_ns`, see [`candidates_in_order`]).
///
/// The namespace entry, too, is answered from this line when the profile has one
/// namespace key whose entries allow every port of their protocols (an empty pod
/// selector, "my namespace", without ports: the entry behind nearly every allowed
/// connection of `bench_policy`'s 10k policies). Such a profile's namespace kind is
/// never probed; its entries stay in the hash table for [`DirTable::entries`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(64))]
struct ProfileInfo {
    /// Per protocol class: the union's ranges (unused ones empty: lo 1, hi 0).
    union: [[PortRange; UNION_INLINE]; 4],
    /// Per peer kind: a 32-bit Bloom filter of the keys with entries (any protocol),
    /// so that most keys without an entry cost no probe.
    bloom: [u32; PEER_KINDS],
    /// The inline namespace key, or [`NONE`] (see the type's documentation).
    ns_key: u32,
    /// A 32-bit Bloom filter of the namespaces (their keys' [`bloom_slot`]s) of the
    /// identities that the profile's workload entries name: a workload key from another
    /// namespace costs no probe. Every bit until [`DirTable::qualify_workloads`] (the
    /// table alone does not know which namespace a workload group is in).
    wl_ns: u32,
    /// Bit `p` set when protocol class `p`'s union is spilled to the hash table.
    spilled: u8,
    /// Bit `k` set when the profile has entries of peer kind `k`.
    kinds: u8,
    /// The kinds whose entries are probed in the hash table (`kinds` without the
    /// namespace kind when it is inline), in [`coarse_first`] order.
    order: u8,
    /// Bit `p` set when the inline namespace entry allows every port of protocol
    /// class `p`.
    ns_all: u8,
}

impl ProfileInfo {
    /// Whether the inline namespace entry allows a peer in namespace `ns` (its key, or
    /// [`NONE`]) on protocol class `proto`, every port: computed without branches.
    #[inline]
    fn ns_allows(&self, ns: u32, proto: ProtoClass) -> bool {
        (ns == self.ns_key) & ((self.ns_all >> (proto as u8 & 3)) & 1 != 0)
    }
}

/// Which bit (0..32) `key` sets in a 32-bit Bloom filter.
#[inline]
fn bloom_slot(key: u32) -> u8 {
    (u64::from(key).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 59) as u8
}

/// The bit `key` sets in a 32-bit Bloom filter.
#[inline]
fn bloom_bit(key: u32) -> u32 {
    1u32 << bloom_slot(key)
}

/// The kinds (bit `k` for kind `k`) whose entry a peer may have in a profile: see
/// [`candidates_in_order`].
#[inline]
fn candidates(info: &ProfileInfo, bloom: &[u32; PEER_KINDS], ns_slot: u8) -> u8 {
    coarse_first(candidates_in_order(info, bloom, ns_slot))
}

/// The kinds of `kinds` (bit `k` for kind `k`) in the order a burst probes them, the
/// coarsest first (bit `j` for kind `PEER_KINDS - 1 - j`): "anything", "any pod", a
/// namespace, a class, a workload group. Any order gives the same answer; but when
/// several kinds pass the filters, the coarse entry is the likelier to exist (a
/// workload group's filter is the most often saturated), and the first hit ends the
/// probe. The map is its own inverse.
#[inline]
fn coarse_first(kinds: u8) -> u8 {
    const REVERSED: [u8; 1 << PEER_KINDS] = {
        let mut t = [0u8; 1 << PEER_KINDS];
        let mut i = 0;
        while i < t.len() {
            let mut k = 0;
            while k < PEER_KINDS {
                if i & (1 << k) != 0 {
                    t[i] |= 1 << (PEER_KINDS - 1 - k);
                }
                k += 1;
            }
            i += 1;
        }
        t
    };
    REVERSED[usize::from(kinds) % REVERSED.len()]
}

/// The kinds whose entry a peer may have in a profile, in [`coarse_first`] order: the
/// profile probes entries of the kind and the peer's key of it (`bloom`: its filter
/// bit, 0 for no key) is in the kind's filter; for a workload key, the peer's namespace
/// (`ns_slot`: its key's [`bloom_slot`]) is in the profile's `wl_ns` filter too.
/// Computed without branches.
///
/// The namespace test is for the workload filter, the most often saturated: on
/// `bench_policy`'s 50000x10000, 27k of the 36.5k probes over 262k IPv4 lookups were of
/// workload keys, and 0.5 % of them found an entry (mostly a peer from another
/// namespace than every workload the profile names).
#[inline]
fn candidates_in_order(info: &ProfileInfo, bloom: &[u32; PEER_KINDS], ns_slot: u8) -> u8 {
    const WORKLOAD: u32 = (PEER_KINDS - 1 - PeerKind::Workload as usize) as u32;
    let mut order = 0u8;
    for (kind, (&bit, &filter)) in bloom.iter().zip(&info.bloom).enumerate() {
        order |= u8::from(bit & filter != 0) << (PEER_KINDS - 1 - kind);
    }
    let same_ns = (info.wl_ns >> (ns_slot & 31)) & 1;
    order & info.order & !(((same_ns ^ 1) as u8) << WORKLOAD)
}

/// The summary of a profile without entries (also the last one of every table).
const NO_PROFILE: ProfileInfo = ProfileInfo {
    union: [[SENTINEL; UNION_INLINE]; 4],
    bloom: [0; PEER_KINDS],
    ns_key: NONE,
    wl_ns: u32::MAX,
    spilled: 0,
    kinds: 0,
    order: 0,
    ns_all: 0,
};

/// A direction of one connection between the stages of a burst: a state (`S_*`) and,
/// for `S_PROBE`, the peer kinds to probe (in [`coarse_first`] order; for the other
/// states, candidates that nothing reads).
#[derive(Debug, Clone, Copy)]
struct Plan {
    state: u8,
    kinds: u8,
}

/// Passes: not isolated, from the own node, or allowed by an entry.
const S_PASS: u8 = 0;
/// Denied: [`DenyReason::NoRules`].
const S_NO_RULES: u8 = 1;
/// Denied: [`DenyReason::PortNotAllowed`].
const S_PORT: u8 = 2;
/// Denied: [`DenyReason::NoMatchingPeer`].
const S_PEER: u8 = 3;
/// To be decided by probing the plan's kinds.
const S_PROBE: u8 = 4;

/// The verdict by final egress and ingress state (`S_PASS` ..= `S_PEER`): egress is
/// reported first, as [`PolicyTables::verdict`] does; one load instead of branches.
const VERDICTS: [[Verdict; 4]; 4] = {
    const fn deny(direction: Direction, state: usize) -> Verdict {
        let reason = match state {
            1 => DenyReason::NoRules,
            2 => DenyReason::PortNotAllowed,
            _ => DenyReason::NoMatchingPeer,
        };
        Verdict::Deny { direction, reason }
    }
    let mut t = [[Verdict::Allow; 4]; 4];
    let mut e = 0;
    while e < 4 {
        let mut i = 0;
        while i < 4 {
            t[e][i] = if e != 0 {
                deny(Direction::Egress, e)
            } else if i != 0 {
                deny(Direction::Ingress, i)
            } else {
                Verdict::Allow
            };
            i += 1;
        }
        e += 1;
    }
    t
};

/// The filter bits of a peer's keys, as [`candidates`] wants them.
#[inline]
fn bloom_bits(peer: &[u32; PEER_KINDS]) -> [u32; PEER_KINDS] {
    peer.map(|key| if key == NONE { 0 } else { bloom_bit(key) })
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

/// The used slots of peer kind `kind`, each with its profile.
fn slots_of_kind<'a>(
    slots: impl IntoIterator<Item = &'a Slot>,
    kind: PeerKind,
) -> impl Iterator<Item = (usize, &'a Slot)> {
    let kind = u64::from(kind as u8);
    slots
        .into_iter()
        .filter(move |s| s.key != EMPTY_KEY && (s.key >> 34) & 0x7 == kind)
        .map(|s| ((s.key >> 37) as usize, s))
}

/// Moves the namespace entries of every profile that has exactly one namespace key, with
/// only all-port entries, into its summary (`ns_key`, `ns_all`; see [`ProfileInfo`]).
fn inline_namespaces(infos: &mut [ProfileInfo], slots: &[Slot]) {
    const MIXED: u8 = 1 << 7;
    for (profile, s) in slots_of_kind(slots, PeerKind::Namespace) {
        let Some(info) = infos.get_mut(profile) else {
            continue;
        };
        let key = s.key as u32;
        let all = s.first == PortRange::ALL && s.more == NONE;
        if info.ns_key != NONE && info.ns_key != key || !all {
            info.ns_all |= MIXED;
        }
        info.ns_key = key;
        info.ns_all |= 1 << ((s.key >> 32) & 3);
    }
    for info in infos {
        if info.ns_all & MIXED != 0 {
            info.ns_key = NONE;
            info.ns_all = 0;
        }
    }
}

const UNION_INLINE: usize = 2;
/// The pseudo peer kind under which spilled port unions are stored.
const UNION_KIND: u8 = 7;

/// One direction's entries: `(profile, peer kind, peer key, protocol)` -> port ranges.
///
/// Most probes that get here find nothing: over `bench_policy`'s 50000x10000 IPv4 trace
/// (0.069 probes a lookup, 1.01 candidate kinds each), 13 % find an entry and 7.9 % are
/// allowed; before the namespace test of workload keys there were twice as many
/// probes, and 6.4 % found an entry. Each costs a line from memory: with every probe's
/// line read from L1 instead (a throwaway build giving wrong answers at the same work),
/// bursts at 10k took 28.5 ns a lookup against 31.5 then. A blocked Bloom filter over
/// every key (12 bits each, 0.9 MiB for both directions), checked before a probe's line
/// is prefetched, was measured and rejected all the same: it made bursts at 10k slower
/// (63 ns against 46–50 per IPv4 lookup, both tables timed in alternation), and
/// prefetching its words a stage ahead did not make up for it. On that machine a
/// prefetched line from memory, overlapped with a burst's others, costs less than a
/// read from a megabyte of cache that the next stage waits for.
///
/// The rest of the growth from 10 to 10k policies is the isolation work itself: at 10
/// policies 0.1 % of sources and 0.6 % of destinations are isolated and a lookup plans
/// and probes almost nothing; at 10k, 42 % and 88 % are. A trace of 256 connections
/// cycled, so that every table line stays in cache, grew 1.49–1.56 (IPv4) and 1.41–1.47
/// (IPv6) the same way, before the namespace test (Zen 3 VM, five runs, two of them
/// with every software prefetch removed, which changed nothing). Prefetching a probe's
/// line as its plan is made, for a longer distance, was slower every time it was tried
/// (last: 10k IPv4 bursts 31.4 -> 34.0 ns, two alternating pairs). Also rejected:
/// prefetching an ingress profile only once egress planning has kept the connection
/// (fewer lines fetched; three alternating runs of 1.84–2.04 IPv4 growth against
/// 1.75–1.89).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirTable {
    profiles: HugeSlice<ProfileInfo>,
    slots: Slots,
    shift: u32,
    extra: HugeSlice<PortRange>,
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
        let mut flat: Vec<(u64, PortRange)> = Vec::new();
        for e in entries {
            check_entry(profiles, e.profile, e.key)?;
            let k = pack(e.profile, e.kind as u8, e.proto as u8, e.key);
            flat.extend(e.ranges.iter().filter(|r| r.lo <= r.hi).map(|&r| (k, r)));
        }
        Ok(Self::from_flat(profiles, flat))
    }

    /// [`Self::new`] from one item per port range, in any order: what the control plane
    /// gives, since its entries reach millions and a `Vec` of ranges each would cost an
    /// allocation apiece.
    pub fn from_ranges(
        profiles: u32,
        ranges: impl IntoIterator<Item = DirRange>,
    ) -> Result<Self, PolicyError> {
        if profiles > MAX_PROFILE + 1 {
            return Err(PolicyError::ProfileTooLarge(profiles - 1));
        }
        let mut flat: Vec<(u64, PortRange)> = Vec::new();
        for r in ranges {
            check_entry(profiles, r.profile, r.key)?;
            if r.range.lo <= r.range.hi {
                flat.push((pack(r.profile, r.kind as u8, r.proto as u8, r.key), r.range));
            }
        }
        Ok(Self::from_flat(profiles, flat))
    }

    /// Builds the table from checked `(packed key, non-empty range)` pairs, in any order
    /// (sorted here, then merged per key: no map, no per-entry allocation).
    fn from_flat(profiles: u32, mut flat: Vec<(u64, PortRange)>) -> Self {
        // One more than asked: the last summary, without entries, stands for "no
        // profile" in bursts (see `summary`).
        let mut infos = vec![NO_PROFILE; profiles as usize + 1];
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
                info.union[pc][..ranges.len()].copy_from_slice(ranges);
            } else {
                info.spilled |= 1 << pc;
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
        let mut slots = vec![empty; cap];
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
            let mut i = slot_home(k, shift);
            while slots[i].key != EMPTY_KEY {
                i = (i + 1) & (cap - 1);
            }
            slots[i] = Slot {
                key: k,
                first,
                more,
            };
        }
        inline_namespaces(&mut infos, &slots);
        for info in &mut infos {
            let mut probed = info.kinds;
            if info.ns_all != 0 {
                probed &= !(1 << PeerKind::Namespace as u8);
            }
            info.order = coarse_first(probed);
        }
        DirTable {
            profiles: frozen(infos),
            slots: Slots::new(&slots),
            shift,
            extra: frozen(extra),
            ranges: total,
        }
    }

    /// Fills every profile's `wl_ns` filter: the namespaces of the workload groups its
    /// workload entries name. `ns_bits` maps a workload key to the [`bloom_bit`]s of the
    /// namespaces of the identities that carry it; a key no identity carries adds none
    /// (no peer can match its entries).
    fn qualify_workloads(&mut self, ns_bits: &HashMap<u32, u32>) {
        for info in self.profiles.iter_mut() {
            info.wl_ns = 0;
        }
        for (profile, s) in slots_of_kind(self.slots.iter(), PeerKind::Workload) {
            if let Some(info) = self.profiles.get_mut(profile) {
                info.wl_ns |= ns_bits.get(&(s.key as u32)).copied().unwrap_or(0);
            }
        }
    }

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
    fn find(&self, key: u64) -> Option<&Slot> {
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
    fn slot_ranges<'a>(&'a self, s: &Slot) -> impl Iterator<Item = PortRange> + 'a {
        let more = if s.more == NONE {
            &[][..]
        } else {
            self.extra.get(s.more as usize..).unwrap_or_default()
        };
        std::iter::once(s.first).chain(more.iter().copied().take_while(|&r| r != SENTINEL))
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

    /// The smallest range holding every port that some entry of `profile` allows over
    /// TCP, UDP or SCTP (empty when none does), or `None` for a profile without
    /// entries or one this table does not have. A connection of those protocols to a
    /// port outside it is denied for the port (`PortNotAllowed`) whatever the peer:
    /// the inline namespace entry's ports are in the unions too. Built once per
    /// identity, off the hot path.
    fn port_bound(&self, profile: u32) -> Option<PortRange> {
        let info = self.profiles.get(profile as usize)?;
        if profile == NONE || info.kinds == 0 {
            return None;
        }
        let mut bound: Option<PortRange> = None;
        for pc in [ProtoClass::Tcp, ProtoClass::Udp, ProtoClass::Sctp] {
            let (lo, hi) = if info.spilled & (1 << pc as u8) != 0 {
                let s = self.find(pack(profile, UNION_KIND, pc as u8, 0))?;
                (s.first.lo, self.slot_ranges(s).last()?.hi)
            } else {
                // Inline ranges are sorted; unused ones are empty.
                let mut used = info.union[pc as usize].iter().filter(|r| r.lo <= r.hi);
                match (used.next(), used.next_back()) {
                    (None, _) => continue,
                    (Some(first), last) => (first.lo, last.unwrap_or(first).hi),
                }
            };
            bound = Some(match bound {
                None => PortRange { lo, hi },
                Some(b) => PortRange {
                    lo: b.lo.min(lo),
                    hi: b.hi.max(hi),
                },
            });
        }
        Some(bound.unwrap_or(SENTINEL))
    }

    /// Whether any entry of the profile allows `(proto, port)`, whatever the peer.
    /// Inline unions are compared without branches: unused ranges are empty.
    #[inline(always)]
    fn union_allows(&self, profile: u32, info: &ProfileInfo, proto: ProtoClass, port: u16) -> bool {
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
    fn probe(
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

    /// The index of `profile`'s summary, or of the last one (no entries) for [`NONE`]
    /// or any other profile the table does not have: always a valid index, chosen
    /// without a branch.
    #[inline]
    fn summary(&self, profile: u32) -> usize {
        (profile as usize).min(self.profiles.len().saturating_sub(1))
    }

    /// Prefetches the summary of `profile` (for [`NONE`], the empty last one, which
    /// stays in L1: prefetching for every packet costs less than branching on which).
    #[inline]
    fn prefetch_profile(&self, profile: u32) {
        if let Some(info) = self.profiles.get(self.summary(profile)) {
            prefetch_line(info);
        }
    }

    /// [`Self::plan`] for a burst, for an isolated direction: computed with selects
    /// rather than branches (which way a packet goes is data a branch predictor cannot
    /// learn). The plan's kinds are in [`coarse_first`] order; the hash lines of those
    /// that probe are prefetched by [`Self::prefetch_probe`].
    /// Always inlined into the burst loop, as [`Self::finish_burst`] is: as calls they
    /// cost a prologue and epilogue per packet and direction, and `bench_policy`'s 10k
    /// policies ran about 5 % slower (thread CPU time, in and out of cache).
    #[inline(always)]
    fn plan_burst(&self, profile: u32, peer: &Ident, proto: ProtoClass, port: u16) -> Plan {
        let info = self.profiles.get(profile as usize).unwrap_or(&NO_PROFILE);
        let union = self.union_allows(profile, info, proto, port);
        let order = candidates_in_order(info, &peer.bloom, peer.ns_slot);
        let ns = peer.entry.peer[PeerKind::Namespace as usize];
        // S_PASS when the inline namespace entry allows, else S_NO_RULES without kinds,
        // else S_PORT without the port, else S_PEER without a candidate, else S_PROBE:
        // as arithmetic, since the same chain of `if`s compiled to branches (valgrind's
        // branch simulation counted their mispredictions). S_PASS is 0.
        let state = S_PEER + u8::from(order != 0);
        let state = S_PORT + (state - S_PORT) * u8::from(union);
        let state = S_NO_RULES + (state - S_NO_RULES) * u8::from(info.kinds != 0);
        let state = state * u8::from(!info.ns_allows(ns, proto));
        // The kinds as they are, whatever the state: only the probe stages read them,
        // and only for S_PROBE. (Zeroing them for the other states, even with
        // `select_unpredictable`, compiled to a branch on the loop's back edge that
        // valgrind's branch simulation saw mispredict on a fifth of the plans.)
        Plan {
            state,
            kinds: order,
        }
    }

    /// Prefetches the home lines of the first two kinds of a plan's `order` (a third
    /// candidate is rare). Always inlined (see [`Self::plan_burst`]).
    #[inline(always)]
    fn prefetch_probe(&self, order: u8, profile: u32, peer: &[u32; PEER_KINDS], proto: ProtoClass) {
        let rest = order & order.wrapping_sub(1);
        for at in [order, rest] {
            let (some, key) = self.first_key(at, profile, peer, proto);
            // Slot 0 stands in for no candidate: its line stays in L1.
            let home = select_unpredictable(some, slot_home(key, self.shift), 0);
            if let Some(s) = self.slots.get(home) {
                prefetch_line(s);
            }
        }
    }

    /// The hash key of the first kind in `order` (a [`coarse_first`] bit set), and
    /// whether there is one.
    #[inline]
    fn first_key(
        &self,
        order: u8,
        profile: u32,
        peer: &[u32; PEER_KINDS],
        proto: ProtoClass,
    ) -> (bool, u64) {
        let kind = (PEER_KINDS - 1).saturating_sub(order.trailing_zeros() as usize);
        let key = peer.get(kind).copied().unwrap_or(NONE);
        (order != 0, pack(profile, kind as u8, proto as u8, key))
    }

    /// Probes the kinds of a plan (in [`coarse_first`] order): `S_PASS` when an entry
    /// allows, `S_PEER` otherwise. The first candidate's line (prefetched by
    /// [`Self::prefetch_probe`], as the second's) is scanned without branching on its
    /// slots; only when it does not allow are the others probed. Always inlined (see
    /// [`Self::plan_burst`]).
    #[inline(always)]
    fn finish_burst(
        &self,
        order: u8,
        profile: u32,
        peer: &[u32; PEER_KINDS],
        proto: ProtoClass,
        port: u16,
    ) -> u8 {
        let (some, key) = self.first_key(order, profile, peer, proto);
        // Slot 0's line (a stand-in that stays in L1) when there is no candidate.
        let home = select_unpredictable(some, slot_home(key, self.shift), 0);
        let allowed = match self.line_allows(home, key, port) {
            Some(a) => a,
            None => some && self.find(key).is_some_and(|s| self.slot_allows(s, port)),
        };
        let mut allowed = some & allowed;
        let rest = order & order.wrapping_sub(1);
        if !allowed & (rest != 0) {
            allowed =
                self.probe(profile, peer, proto, coarse_first(rest), port) == DirOutcome::Allowed;
        }
        S_PEER * u8::from(!allowed)
    }

    /// Looks `key` up in the line starting at slot `home` without branching on the
    /// slots: `Some(whether its entry allows port)` when the probe ends in this line
    /// (at the key, or at an empty slot), `None` when it goes on to the next line.
    #[inline]
    fn line_allows(&self, home: usize, key: u64, port: u16) -> Option<bool> {
        let line = self.slots.line(home)?;
        let (mut hit, mut stop) = (0u32, 0u32);
        for (j, s) in line.iter().enumerate() {
            hit |= u32::from(s.key == key) << j;
            stop |= u32::from((s.key == key) | (s.key == EMPTY_KEY)) << j;
        }
        if stop == 0 {
            return None;
        }
        let j = stop.trailing_zeros() as usize;
        let found = (hit >> j) & 1 != 0;
        let s = line.get(j)?;
        let first = found & s.first.contains(port);
        if found & !first & (s.more != NONE) {
            return Some(self.slot_allows(s, port));
        }
        Some(first)
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

/// Connections per round of the burst verdicts (a dataplane's rx burst).
pub const BATCH: usize = 32;

/// Tables from this size up ([`PolicyTables::memory_bytes`]) are checked faster a burst
/// at a time ([`PolicyTables::verdicts`]) than one connection at a time
/// ([`PolicyTables::verdict`]); smaller ones stay in cache, where the burst's stages cost
/// more than the misses they overlap.
///
/// Set from `bench_balance_policy` (the balancer's routed new connections, each a check
/// and a flow or a drop; Zen 3 VM, 512 KiB of L2 a core; one-by-one over burst time per
/// packet, IPv4 / IPv6, over six runs in quiet and noisy phases of the shared machine):
/// 0.58 MiB of tables 0.85-0.94 / 0.84-0.94; 2.24 MiB 0.86-1.01 / 0.89-1.12; 3.77 MiB
/// 0.86-1.13 / 0.95-1.16; 22 MiB 0.96-1.21 / 1.04-1.36. Bursts win more where memory is
/// contended. Since profiles filter workload keys by namespace (fewer probes for both
/// forms), 22 MiB measured 1.00-1.02 / 0.96-1.01 over three runs: a wash, so the
/// threshold stands. (Connections to a virtual address are checked one by one whatever
/// the size: see the balancer.)
pub const BURST_MIN: usize = 4 << 20;

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

/// A connection-initiating packet of either family, for [`PolicyTables::verdicts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conn {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol.
    pub proto: u8,
    /// Destination port (0 for protocols without ports).
    pub dst_port: u16,
}

/// What a verdict reads of an identity, in one cache line: the entry, the bit each of
/// its peer keys sets in a profile's Bloom filters (0 where it has no key; computed
/// here once, not hashed on every lookup), and per direction the protocol classes its
/// profile allows on every port from its own namespace (a copy of the profile's inline
/// namespace entry when that names the identity's namespace: a burst decides those
/// connections from the two identities, without the profile's line), and the bound of
/// its egress profile's ports (a burst denies a connection to a port outside it without
/// planning it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(64))]
struct Ident {
    entry: IdentityEntry,
    bloom: [u32; PEER_KINDS],
    /// `[egress, ingress]`: bit `p` set when that profile allows protocol class `p`,
    /// every port, to or from the identity's own namespace.
    own_ns: [u8; 2],
    /// The egress profile's port bound ([`DirTable::port_bound`]), or every port when
    /// there is none: a TCP, UDP or SCTP connection to a port outside it is denied
    /// (`PortNotAllowed`) from this line alone, without the profile's.
    egress_ports: PortRange,
    /// The [`bloom_slot`] of its namespace key (of [`NONE`] too), for the profiles'
    /// `wl_ns` filters.
    ns_slot: u8,
}

// One cache line each, as their layouts promise.
const _: () = assert!(std::mem::size_of::<Ident>() == 64);
const _: () = assert!(std::mem::size_of::<ProfileInfo>() == 64);

impl Ident {
    fn new(entry: IdentityEntry, egress: &DirTable, ingress: &DirTable) -> Self {
        let ns = entry.peer[PeerKind::Namespace as usize];
        let own = |table: &DirTable, profile: u32| match table.profiles.get(profile as usize) {
            Some(info) if profile != NONE && ns != NONE && info.ns_key == ns => info.ns_all,
            _ => 0,
        };
        Ident {
            entry,
            own_ns: [own(egress, entry.egress), own(ingress, entry.ingress)],
            egress_ports: egress.port_bound(entry.egress).unwrap_or(PortRange::ALL),
            ..Ident::of_peer(entry.peer)
        }
    }

    /// The line of a peer known only by its keys, as far as a check reads it (its
    /// filter bits): for [`DirTable::check`], which has no identity table.
    fn of_peer(peer: [u32; PEER_KINDS]) -> Self {
        let entry = IdentityEntry {
            peer,
            ..IdentityEntry::world(NONE)
        };
        Ident {
            entry,
            bloom: bloom_bits(&peer),
            own_ns: [0; 2],
            egress_ports: PortRange::ALL,
            ns_slot: bloom_slot(peer[PeerKind::Namespace as usize]),
        }
    }

    /// Whether the destination is in the source's namespace and direction `dir`'s
    /// profile of `owner` (the source for egress, the destination for ingress) allows
    /// it on every port of protocol class `pc` (`own_ns`). Without branches.
    #[inline]
    fn own_ns_allows(owner: &Ident, same_ns: bool, dir: usize, pc: u8) -> bool {
        same_ns & ((owner.own_ns[dir % 2] >> (pc & 3)) & 1 != 0)
    }

    /// Whether `self` (the source) is the node `dst` runs on.
    #[inline]
    fn is_node_of(&self, dst: &Ident) -> bool {
        (self.entry.node_of != NONE) & (self.entry.node_of == dst.entry.runs_on)
    }
}

/// The first `n` elements of a round's array (all of it if `n` is larger).
#[inline]
fn head<T>(a: &[T], n: usize) -> &[T] {
    a.get(..n).unwrap_or(a)
}

/// [`head`], mutably.
#[inline]
fn head_mut<T>(a: &mut [T], n: usize) -> &mut [T] {
    let len = a.len();
    match a.get_mut(..n.min(len)) {
        Some(h) => h,
        None => &mut [],
    }
}

/// One round of a burst after the identities are known, for the per-direction stages.
/// Direction `DIR` is 0 for egress (the source's profile, the destination as peer) and 1
/// for ingress (the destination's profile, the source as peer): a constant in the plan
/// stages, so that they do not branch on it; the probe stages take both directions from
/// one list and choose with selects.
///
/// The arrays are whole rounds (entries past the round's end are the default identity
/// and are never listed), indexed modulo [`BATCH`]: indices the compiler can see are in
/// bounds, so the per-connection loops carry no bounds checks.
struct Round<'a> {
    src: &'a [&'a Ident; BATCH],
    dst: &'a [&'a Ident; BATCH],
    meta: &'a [(u8, u16); BATCH],
}

/// Connection indices listed for a stage, and how many. The probe list holds both
/// directions: an entry is `i | dir << DIR_BIT`.
struct List {
    at: [u8; 2 * BATCH],
    len: usize,
}

/// The bit of a probe list entry that says its direction (above every index < [`BATCH`]).
const DIR_BIT: u32 = BATCH.trailing_zeros();

impl List {
    fn new() -> Self {
        List {
            at: [0; 2 * BATCH],
            len: 0,
        }
    }

    /// Lists `i` when `yes`, without a branch on which (`i` < 2 x [`BATCH`]; each entry
    /// is offered once, so the list never overflows).
    #[inline]
    fn push_if(&mut self, i: usize, yes: bool) {
        self.at[self.len % (2 * BATCH)] = i as u8;
        self.len += usize::from(yes);
    }

    /// The listed indices.
    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        head(&self.at, self.len).iter().map(|&i| usize::from(i))
    }

    /// The listed connections whose egress state (in `states`) is in `keep` (a bit per
    /// state): the ingress stages skip those that egress already denies, whose ingress
    /// outcome the verdict does not report.
    #[inline]
    fn egress_in(&self, states: &[[u8; 2]; BATCH], keep: u8) -> List {
        let mut out = List::new();
        for i in self.iter() {
            let e = states[i % BATCH][0];
            out.push_if(i, (keep >> (e & 7)) & 1 != 0);
        }
        out
    }
}

impl Round<'_> {
    /// The profile and the peer of connection `i` in direction `DIR`, with its
    /// protocol class and port.
    #[inline]
    fn endpoints<const DIR: usize>(&self, i: usize) -> (u32, &Ident, ProtoClass, u16) {
        self.endpoints_of(i, DIR)
    }

    /// The profile and the peer of connection `i` in direction `dir` (0 or 1, chosen
    /// without a branch), with its protocol class and port.
    #[inline]
    fn endpoints_of(&self, i: usize, dir: usize) -> (u32, &Ident, ProtoClass, u16) {
        let i = i % BATCH;
        let (s, d, (proto, port)) = (self.src[i], self.dst[i], self.meta[i]);
        let egress = dir == 0;
        let profile = select_unpredictable(egress, s.entry.egress, d.entry.ingress);
        let peer = select_unpredictable(egress, d, s);
        (profile, peer, ProtoClass::from_ip_proto(proto), port)
    }

    /// Decides egress for the port, from the source's line alone (`egress_ports`), for
    /// the connections in `list` (egress-isolated ones) that it denies, and lists the
    /// others, for planning.
    #[inline]
    fn port_denials(&self, list: &List, states: &mut [[u8; 2]; BATCH]) -> List {
        let mut rest = List::new();
        for i in list.iter() {
            let i = i % BATCH;
            let (s, (proto, port)) = (self.src[i], self.meta[i]);
            let ports = ProtoClass::from_ip_proto(proto) != ProtoClass::Other;
            let denied = ports & !s.egress_ports.contains(port);
            states[i][0] = S_PORT * u8::from(denied);
            rest.push_if(i, !denied);
        }
        rest
    }

    /// Plans direction `DIR` of the connections in `list` (isolated ones): writes their
    /// states and kinds, and lists those to probe in `probe` (with their direction).
    #[inline]
    fn plan<const DIR: usize>(
        &self,
        table: &DirTable,
        list: &List,
        states: &mut [[u8; 2]; BATCH],
        kinds: &mut [[u8; 2]; BATCH],
        probe: &mut List,
    ) {
        for i in list.iter() {
            let (profile, peer, pc, port) = self.endpoints::<DIR>(i);
            let plan = table.plan_burst(profile, peer, pc, port);
            states[i % BATCH][DIR % 2] = plan.state;
            kinds[i % BATCH][DIR % 2] = plan.kinds;
            probe.push_if(i | DIR << DIR_BIT, plan.state == S_PROBE);
        }
    }

    /// Prefetches the hash lines that the probes listed in `list` (from [`Self::plan`],
    /// both directions) start with. A loop of its own over the few listed connections:
    /// computed in every plan (and every plan is of an isolated direction, most of
    /// which end there), the keys and home lines cost `bench_policy`'s 10k policies
    /// about 10 % more (IPv4 and IPv6, wall time in one process, modes alternated); so
    /// did the first candidate's alone, even without this loop (IPv4 bursts at 10k, 33
    /// against 36.5 ns). Nor did an egress loop of its own before the ingress plans,
    /// for a longer prefetch distance, pay for its exit (31.7 against 32.7 ns).
    #[inline]
    fn prefetch(&self, tables: [&DirTable; 2], list: &List, kinds: &[[u8; 2]; BATCH]) {
        for e in list.iter() {
            let (i, dir) = (e % BATCH, (e >> DIR_BIT) & 1);
            let (profile, peer, pc, _) = self.endpoints_of(i, dir);
            tables[dir].prefetch_probe(kinds[i][dir], profile, &peer.entry.peer, pc);
        }
    }

    /// Probes the directions listed in `list` and writes their states. Both directions
    /// in one loop (each loop's exit is a misprediction): an ingress probe behind an
    /// egress denial is made all the same, and its outcome is never reported.
    #[inline]
    fn probe(
        &self,
        tables: [&DirTable; 2],
        list: &List,
        kinds: &[[u8; 2]; BATCH],
        states: &mut [[u8; 2]; BATCH],
    ) {
        for e in list.iter() {
            let (i, dir) = (e % BATCH, (e >> DIR_BIT) & 1);
            let (profile, peer, pc, port) = self.endpoints_of(i, dir);
            let k = kinds[i][dir];
            states[i][dir] = tables[dir].finish_burst(k, profile, &peer.entry.peer, pc, port);
        }
    }
}

/// Everything a policy verdict needs, built by the control plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyTables {
    ipcache: IpCache,
    identities: HugeSlice<Ident>,
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
        mut egress: DirTable,
        mut ingress: DirTable,
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
        // Which namespaces each workload group is in, for the profiles' `wl_ns` filters.
        let mut ns_bits: HashMap<u32, u32> = HashMap::new();
        for e in &identities {
            let workload = e.peer[PeerKind::Workload as usize];
            let ns = e.peer[PeerKind::Namespace as usize];
            if workload != NONE {
                *ns_bits.entry(workload).or_default() |= bloom_bit(ns);
            }
        }
        egress.qualify_workloads(&ns_bits);
        ingress.qualify_workloads(&ns_bits);
        Ok(PolicyTables {
            ipcache,
            identities: frozen(
                identities
                    .into_iter()
                    .map(|e| Ident::new(e, &egress, &ingress))
                    .collect(),
            ),
            default_identity,
            egress,
            ingress,
        })
    }

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
    fn entry(&self, id: u32) -> &Ident {
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

    /// Verdicts for a burst of IPv4 connection-initiating packets: `out[i]` answers
    /// `conns[i]`, exactly as [`Self::verdict_v4`] would (`out` should be as long as
    /// `conns`; what either has beyond the other is left alone). Rounds of [`BATCH`]
    /// packets go through the stages described in the module documentation.
    pub fn verdicts_v4(&self, conns: &[Conn4], out: &mut [Verdict]) {
        self.verdicts_of_family(
            conns,
            out,
            |x| (x.src, x.dst, x.proto, x.dst_port),
            |addrs, ids| self.ipcache.lookup_bulk_v4(addrs, ids),
        );
    }

    /// [`Self::verdicts_v4`] for IPv6 ([`Self::verdict_v6`]).
    pub fn verdicts_v6(&self, conns: &[Conn6], out: &mut [Verdict]) {
        self.verdicts_of_family(
            conns,
            out,
            |x| (x.src, x.dst, x.proto, x.dst_port),
            |addrs, ids| self.ipcache.lookup_bulk_v6(addrs, ids),
        );
    }

    /// The rounds of [`Self::verdicts_v4`] and [`Self::verdicts_v6`]: `fields` gives a
    /// connection's (source, destination, protocol, destination port), `lookup` the
    /// identities of a round's addresses in their family's table.
    #[inline(always)]
    fn verdicts_of_family<C, A: Copy + Default>(
        &self,
        conns: &[C],
        out: &mut [Verdict],
        fields: impl Fn(&C) -> (A, A, u8, u16),
        lookup: impl Fn(&[A], &mut [Option<u32>]),
    ) {
        for (c, o) in conns.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            let n = c.len().min(o.len());
            let mut addrs = [A::default(); 2 * BATCH];
            let mut meta = [(0u8, 0u16); BATCH];
            for ((a, m), x) in addrs.chunks_exact_mut(2).zip(meta.iter_mut()).zip(c) {
                let (src, dst, proto, port) = fields(x);
                if let [s, d] = a {
                    (*s, *d) = (src, dst);
                }
                *m = (proto, port);
            }
            let mut ids = [None; 2 * BATCH];
            lookup(head(&addrs, 2 * n), head_mut(&mut ids, 2 * n));
            self.decide_burst(&ids, &meta, head_mut(o, n));
        }
    }

    /// [`Self::verdicts_v4`] for a burst that mixes both families ([`Self::verdict`]):
    /// each address is looked up in its own family's table.
    pub fn verdicts(&self, conns: &[Conn], out: &mut [Verdict]) {
        for (c, o) in conns.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            let n = c.len().min(o.len());
            let mut v4 = [0u32; 2 * BATCH];
            let mut v6 = [0u128; 2 * BATCH];
            // Where address `j` of the round went: (IPv6?, index in its family's array).
            let mut at = [(false, 0usize); 2 * BATCH];
            let mut meta = [(0u8, 0u16); BATCH];
            let (mut n4, mut n6) = (0, 0);
            for ((a, m), x) in at.chunks_exact_mut(2).zip(meta.iter_mut()).zip(c) {
                for (slot, addr) in a.iter_mut().zip([x.src, x.dst]) {
                    match addr {
                        IpAddr::V4(v) => {
                            if let Some(x) = v4.get_mut(n4) {
                                *x = u32::from(v);
                            }
                            *slot = (false, n4);
                            n4 += 1;
                        }
                        IpAddr::V6(v) => {
                            if let Some(x) = v6.get_mut(n6) {
                                *x = u128::from(v);
                            }
                            *slot = (true, n6);
                            n6 += 1;
                        }
                    }
                }
                *m = (x.proto, x.dst_port);
            }
            let mut r4 = [None; 2 * BATCH];
            let mut r6 = [None; 2 * BATCH];
            self.ipcache
                .lookup_bulk_v4(head(&v4, n4), head_mut(&mut r4, n4));
            self.ipcache
                .lookup_bulk_v6(head(&v6, n6), head_mut(&mut r6, n6));
            let mut ids = [None; 2 * BATCH];
            for (id, &(six, k)) in ids.iter_mut().zip(&at) {
                *id = if six { r6.get(k) } else { r4.get(k) }.copied().flatten();
            }
            self.decide_burst(&ids, &meta, head_mut(o, n));
        }
    }

    /// The stages after address resolution, for one round: `ids` holds each
    /// connection's source and destination identity (`None`: the default), `meta` its
    /// protocol and port; `out` is as long as the round.
    #[inline]
    fn decide_burst(
        &self,
        ids: &[Option<u32>; 2 * BATCH],
        meta: &[(u8, u16); BATCH],
        out: &mut [Verdict],
    ) {
        let n = out.len().min(BATCH);
        // 1. Identities: prefetch every one.
        let default = self.entry(self.default_identity);
        let mut src = [default; BATCH];
        let mut dst = [default; BATCH];
        for ((s, d), pair) in src.iter_mut().zip(dst.iter_mut()).zip(ids.chunks_exact(2)) {
            if let [a, b] = pair {
                *s = self.entry(a.unwrap_or(self.default_identity));
                *d = self.entry(b.unwrap_or(self.default_identity));
                prefetch_line(*s);
                prefetch_line(*d);
            }
        }
        // 2. Read them: list the isolated directions (appending without a branch on
        // whether) and prefetch their profiles (the empty last summary for the others,
        // which stays in L1). The own node counts as not isolated: ingress from it
        // passes; so does a direction whose profile allows the connection's protocol
        // on every port within the namespace, when both ends are in it (`own_ns`).
        let (mut eg, mut ing) = (List::new(), List::new());
        const NS: usize = PeerKind::Namespace as usize;
        for (i, ((s, d), &(proto, _))) in src.iter().zip(&dst).zip(meta).take(n).enumerate() {
            let pc = ProtoClass::from_ip_proto(proto) as u8;
            let same_ns = s.entry.peer[NS] == d.entry.peer[NS];
            // NONE (all ones) where the direction passes without its profile.
            let eg_pass = Ident::own_ns_allows(s, same_ns, 0, pc);
            let egress = s.entry.egress | 0u32.wrapping_sub(u32::from(eg_pass));
            let in_pass = s.is_node_of(d) | Ident::own_ns_allows(d, same_ns, 1, pc);
            let ingress = d.entry.ingress | 0u32.wrapping_sub(u32::from(in_pass));
            self.egress.prefetch_profile(egress);
            self.ingress.prefetch_profile(ingress);
            eg.push_if(i, egress != NONE);
            ing.push_if(i, ingress != NONE);
        }
        // 3. Plan the isolated directions from their profiles: decided, or to probe
        // (listed, and the slots prefetched). 4. Probe. Egress connections to a port
        // outside the source's bound are denied first, from its line: a pass over the
        // isolated sources only (done for every connection in stage 2, its few
        // instructions made 10 policies 5 % slower), which spares `bench_policy`'s
        // 50000x10000 a plan in 0.22 of its lookups (about 1 % faster there, three
        // alternating pairs; 10 policies unchanged).
        let mut states = [[S_PASS; 2]; BATCH];
        let mut kinds = [[0u8; 2]; BATCH];
        let r = Round {
            src: &src,
            dst: &dst,
            meta,
        };
        // Ingress is planned only where egress may still pass: where egress denies, the
        // verdict reports egress and ingress is moot. The probes of both directions go
        // through one list (one prefetch loop, one probe loop: a loop's exit is a
        // misprediction, and these lists are short); an ingress probe whose egress probe
        // then denies is made all the same, for nothing. Against two lists of their own
        // (the ingress one filtered by the egress outcome), valgrind counted 184.0k ->
        // 158.0k mispredictions over 262k lookups at `bench_policy`'s 50000x10000, and
        // bursts there were about 1 % faster (three alternating pairs, noisy).
        let tables = [&self.egress, &self.ingress];
        let mut probes = List::new();
        let eg = r.port_denials(&eg, &mut states);
        r.plan::<0>(&self.egress, &eg, &mut states, &mut kinds, &mut probes);
        let ing = ing.egress_in(&states, (1 << S_PASS) | (1 << S_PROBE));
        r.plan::<1>(&self.ingress, &ing, &mut states, &mut kinds, &mut probes);
        r.prefetch(tables, &probes, &kinds);
        r.probe(tables, &probes, &kinds, &mut states);
        // 5. Decide: the table reports egress first, as `verdict` does. Every egress
        // state is final by now, and so is every ingress state where egress passes
        // (elsewhere an unprobed one reads, through `min`, as a denial nobody reports).
        for (o, [e, i]) in out.iter_mut().zip(&states) {
            *o = VERDICTS[usize::from((*e).min(S_PEER))][usize::from((*i).min(S_PEER))];
        }
    }

    /// Whether a caller holding several connections at once should check them with one
    /// [`Self::verdicts`] call rather than one [`Self::verdict`] each: tables of `min`
    /// bytes and up ([`BURST_MIN`] unless the caller knows its core better).
    #[inline]
    pub fn prefers_bursts(&self, min: usize) -> bool {
        self.memory_bytes() >= min
    }

    /// Bytes of lookup memory of every table.
    pub fn memory_bytes(&self) -> usize {
        self.ipcache.memory_bytes()
            + self.identities.len() * std::mem::size_of::<Ident>()
            + self.egress.memory_bytes()
            + self.ingress.memory_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
        // Mixed families, a short `out` (the rest of `conns` is ignored) and a long one
        // (the rest of `out` is left alone).
        let mixed: Vec<Conn> = conns
            .iter()
            .map(|c| Conn {
                src: IpAddr::V4(c.src.into()),
                dst: IpAddr::V4(c.dst.into()),
                proto: c.proto,
                dst_port: c.dst_port,
            })
            .chain([Conn {
                src: ip("::1"),
                dst: ip("10.0.0.1"),
                proto: 6,
                dst_port: 80,
            }])
            .collect();
        let sentinel = Verdict::Deny {
            direction: Direction::Egress,
            reason: DenyReason::NoRules,
        };
        let mut out = vec![sentinel; mixed.len() + 3];
        t.verdicts(&mixed, &mut out);
        for (c, v) in mixed.iter().zip(&out) {
            assert_eq!(*v, t.verdict(c.src, c.dst, c.proto, c.dst_port), "{c:?}");
        }
        assert_eq!(out[mixed.len()..], [sentinel; 3]);
        let mut short = vec![sentinel; BATCH + 1];
        t.verdicts(&mixed, &mut short);
        assert_eq!(short[..], out[..BATCH + 1]);
    }

    /// The workload filter: a table alone lets every namespace through; bundled with
    /// the identities, a profile's workload entries pass only peers from the namespaces
    /// of the groups they name, and verdicts stay exact.
    #[test]
    fn workload_filter_knows_namespaces() {
        // Workload 1 lives in namespace 10; namespace `other` hashes to another bit.
        let other = (11..)
            .find(|&n| bloom_slot(n) != bloom_slot(10))
            .expect("ns");
        let ingress = || {
            DirTable::new(
                1,
                [entry(
                    0,
                    PeerKind::Workload,
                    1,
                    ProtoClass::Tcp,
                    &[(80, 80)],
                )],
            )
            .expect("ingress")
        };
        let peer = pod(1, other, 50, NONE, NONE, NONE);
        let bloom = bloom_bits(&peer.peer);
        let wl = 1 << (PEER_KINDS - 1 - PeerKind::Workload as usize);
        let alone = ingress();
        let info = &alone.profiles[0];
        assert_eq!(candidates_in_order(info, &bloom, bloom_slot(other)), wl);

        let ids = vec![
            IdentityEntry::world(ANY),
            pod(1, 10, 50, NONE, NONE, NONE),
            pod(2, other, 50, NONE, 0, NONE),
        ];
        let ipc = IpCache::new(
            [(0, 0, 0), (0x0a00_0001, 32, 1), (0x0a00_0002, 32, 2)],
            [(0, 0, 0)],
        )
        .expect("ipcache");
        let empty = DirTable::new(0, []).expect("egress");
        let t = PolicyTables::new(ipc, ids, 0, empty, ingress()).expect("tables");
        let info = &t.ingress.profiles[0];
        assert_eq!(info.wl_ns, bloom_bit(10));
        assert_eq!(candidates_in_order(info, &bloom, bloom_slot(10)), wl);
        assert_eq!(candidates_in_order(info, &bloom, bloom_slot(other)), 0);
        let (a, b) = (ip("10.0.0.1"), ip("10.0.0.2"));
        assert_eq!(t.verdict(a, b, 6, 80), Verdict::Allow);
        let denied = Verdict::Deny {
            direction: Direction::Ingress,
            reason: DenyReason::NoMatchingPeer,
        };
        assert_eq!(t.verdict(b, b, 6, 80), denied);
        let mut out = [Verdict::Allow; 2];
        let conns = [(a, b), (b, b)].map(|(src, dst)| Conn {
            src,
            dst,
            proto: 6,
            dst_port: 80,
        });
        t.verdicts(&conns, &mut out);
        assert_eq!(out, [Verdict::Allow, denied]);
    }

    /// A full table: probes that leave their home line, entries with further ranges,
    /// spilled unions, Bloom filters that pass keys without entries; bursts agree with
    /// single verdicts on all of it.
    #[test]
    fn bursts_agree_on_a_crowded_table() {
        const N: u32 = 3000;
        // Scattered keys (a multiplicative hash spreads consecutive ones too evenly to
        // ever fill a line).
        let mut x = 1u64;
        let keys: Vec<u32> = (0..N)
            .map(|_| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (x >> 40) as u32
            })
            .collect();
        // Identity i < N: a pod with workload key keys[i]; identity N: the destination,
        // whose ingress profile 0 allows every third key on TCP 80 and 1000-1001 and
        // every seventh on TCP 443 (more port ranges than fit inline).
        let mut ids: Vec<IdentityEntry> = keys
            .iter()
            .map(|&k| pod(k, 1 << 30, 1 << 30, NONE, NONE, NONE))
            .collect();
        ids.push(pod(NONE - 1, 1 << 30, 1 << 30, NONE, 0, NONE));
        let mut entries = Vec::new();
        for &k in keys.iter().step_by(3) {
            entries.push(entry(
                0,
                PeerKind::Workload,
                k,
                ProtoClass::Tcp,
                &[(80, 80), (1000, 1001)],
            ));
        }
        for &k in keys.iter().step_by(7) {
            entries.push(entry(
                0,
                PeerKind::Workload,
                k,
                ProtoClass::Tcp,
                &[(443, 443)],
            ));
        }
        let ingress = DirTable::new(1, entries).expect("ingress");
        let egress = DirTable::new(0, []).expect("egress");
        // Probes that end beyond their home line exist (else this test tests less).
        let beyond = keys
            .iter()
            .filter(|&&k| {
                let key = pack(0, PeerKind::Workload as u8, ProtoClass::Tcp as u8, k);
                ingress
                    .line_allows(slot_home(key, ingress.shift), key, 80)
                    .is_none()
            })
            .count();
        assert!(beyond > 0, "no probe leaves its home line");
        let ipc = IpCache::new(
            (0..=N).map(|i| (0x0a00_0000 + i, 32, i)).chain([(0, 0, 0)]),
            [],
        )
        .expect("ipcache");
        let t = PolicyTables::new(ipc, ids, 0, egress, ingress).expect("tables");
        let mut conns = Vec::new();
        for i in 0..N + 50 {
            for port in [80, 443, 1000, 1001, 1002, 22] {
                conns.push(Conn4 {
                    src: 0x0a00_0000 + i,
                    dst: 0x0a00_0000 + N,
                    proto: 6,
                    dst_port: port,
                });
            }
        }
        let mut out = vec![Verdict::Allow; conns.len()];
        t.verdicts_v4(&conns, &mut out);
        let mut allowed = 0;
        for (c, v) in conns.iter().zip(&out) {
            assert_eq!(*v, t.verdict_v4(c.src, c.dst, c.proto, c.dst_port), "{c:?}");
            allowed += usize::from(v.is_allow());
        }
        assert!(allowed > 1000 && allowed < conns.len() / 2, "{allowed}");
    }

    /// A random identity: peer keys from a small pool (or none), profiles, node facts.
    fn arb_identity(eg: u32, ing: u32) -> impl Strategy<Value = IdentityEntry> {
        let key = || prop_oneof![1 => Just(NONE), 3 => 0u32..12];
        let profile = |n: u32| prop_oneof![1 => Just(NONE), 2 => 0..n];
        let node = || prop_oneof![2 => Just(NONE), 1 => 0u32..3];
        (
            [key(), key(), key(), key(), key()],
            profile(eg),
            profile(ing),
            node(),
            node(),
        )
            .prop_map(|(peer, egress, ingress, runs_on, node_of)| IdentityEntry {
                peer,
                egress,
                ingress,
                runs_on,
                node_of,
            })
    }

    /// Random entries of a table with `profiles` profiles: up to six ranges each around
    /// a few ports, so that unions spill and ranges continue in `extra`.
    fn arb_entries(profiles: u32) -> impl Strategy<Value = Vec<DirEntry>> {
        let range = (
            prop_oneof![Just(0u16), Just(53), Just(79), Just(443), 1000u16..1010],
            0u16..3,
        )
            .prop_map(|(lo, span)| PortRange {
                lo,
                hi: lo.saturating_add(span),
            });
        // Every port now and then: rules without ports, which the summary may answer.
        let range = prop_oneof![4 => range, 1 => Just(PortRange::ALL)];
        let entry = (
            0..profiles,
            0..PEER_KINDS,
            0u32..12,
            0..4usize,
            proptest::collection::vec(range, 1..6),
        )
            .prop_map(|(profile, kind, key, proto, ranges)| DirEntry {
                profile,
                kind: PeerKind::ALL[kind],
                key,
                proto: ProtoClass::ALL[proto],
                ranges,
            });
        proptest::collection::vec(entry, 0..40)
    }

    /// Random tables: 1-4 profiles per direction, up to 10 identities, IPv4 prefixes in
    /// 10.0.0.0/24 and IPv6 ones in fd00::/120 (hosts and shorter), with or without a
    /// default route.
    fn arb_tables() -> impl Strategy<Value = PolicyTables> {
        (1u32..5, 1u32..5).prop_flat_map(|(pe, pi)| {
            (
                proptest::collection::vec(arb_identity(pe, pi), 1..10),
                arb_entries(pe),
                arb_entries(pi),
                proptest::collection::vec((0u32..256, 24u8..=32, 0u32..64), 0..12),
                proptest::collection::vec((0u128..256, 120u8..=128, 0u32..64), 0..12),
                any::<bool>(),
            )
                .prop_map(move |(ids, eg, ing, v4, v6, default_route)| {
                    let n = ids.len() as u32;
                    let mut v4: Vec<(u32, u8, u32)> = v4
                        .into_iter()
                        .map(|(a, l, v)| (0x0a00_0000 | a, l, v % n))
                        .collect();
                    let mut v6: Vec<(u128, u8, u32)> = v6
                        .into_iter()
                        .map(|(a, l, v)| ((0xfd00u128 << 112) | a, l, v % n))
                        .collect();
                    if default_route {
                        v4.push((0, 0, 0));
                        v6.push((0, 0, n - 1));
                    }
                    // Duplicates (after clearing host bits) are not a table's business.
                    let host = |a: u128, l: u8, w: u32| {
                        let h = w - u32::from(l);
                        if h >= 128 {
                            0
                        } else {
                            (a >> h) << h
                        }
                    };
                    let mut seen = std::collections::BTreeSet::new();
                    v4.retain(|&(a, l, _)| seen.insert((host(u128::from(a), l, 32), l)));
                    seen.clear();
                    v6.retain(|&(a, l, _)| seen.insert((host(a, l, 128), l)));
                    let ipc = IpCache::new(v4, v6).expect("ipcache");
                    let egress = DirTable::new(pe, eg).expect("egress");
                    let ingress = DirTable::new(pi, ing).expect("ingress");
                    PolicyTables::new(ipc, ids, 0, egress, ingress).expect("tables")
                })
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// The burst forms answer exactly like `verdict`, connection by connection, on
        /// random tables, in every family and in bursts of any length.
        #[test]
        fn random_bursts_match_single_verdicts(
            t in arb_tables(),
            raw in proptest::collection::vec(
                (0u32..300, 0u32..300, 0..5usize, prop_oneof![Just(0u16), Just(53), Just(80), Just(443), Just(1001), any::<u16>()]),
                0..100,
            ),
        ) {
            let proto = |i: usize| [6u8, 17, 132, 1, 47][i];
            let c4: Vec<Conn4> = raw.iter().map(|&(s, d, p, port)| Conn4 {
                src: 0x0a00_0000 + s,
                dst: 0x0a00_0000 + d,
                proto: proto(p),
                dst_port: port,
            }).collect();
            let c6: Vec<Conn6> = raw.iter().map(|&(s, d, p, port)| Conn6 {
                src: (0xfd00u128 << 112) + u128::from(s),
                dst: (0xfd00u128 << 112) + u128::from(d),
                proto: proto(p),
                dst_port: port,
            }).collect();
            // Mixed: alternate the families per connection (and mix them inside one).
            let mixed: Vec<Conn> = c4.iter().zip(&c6).enumerate().map(|(i, (a, b))| {
                let v4 = |x: u32| IpAddr::V4(x.into());
                let v6 = |x: u128| IpAddr::V6(x.into());
                let (src, dst) = match i % 3 {
                    0 => (v4(a.src), v4(a.dst)),
                    1 => (v6(b.src), v6(b.dst)),
                    _ => (v4(a.src), v6(b.dst)),
                };
                Conn { src, dst, proto: a.proto, dst_port: a.dst_port }
            }).collect();
            let mut out = vec![Verdict::Allow; raw.len()];
            t.verdicts_v4(&c4, &mut out);
            for (c, v) in c4.iter().zip(&out) {
                prop_assert_eq!(*v, t.verdict_v4(c.src, c.dst, c.proto, c.dst_port), "{:?}", c);
            }
            t.verdicts_v6(&c6, &mut out);
            for (c, v) in c6.iter().zip(&out) {
                prop_assert_eq!(*v, t.verdict_v6(c.src, c.dst, c.proto, c.dst_port), "{:?}", c);
            }
            t.verdicts(&mixed, &mut out);
            for (c, v) in mixed.iter().zip(&out) {
                prop_assert_eq!(*v, t.verdict(c.src, c.dst, c.proto, c.dst_port), "{:?}", c);
                // And `verdict` is the scalar check, which `decide` reports per direction.
                prop_assert_eq!(*v, t.decide(c.src, c.dst, c.proto, c.dst_port).verdict());
            }
        }
    }

    /// What [`DirTable::check`] must answer, straight from the entries.
    fn naive_check(
        entries: &[DirEntry],
        profile: u32,
        peer: &[u32; PEER_KINDS],
        proto: ProtoClass,
        port: u16,
    ) -> DirOutcome {
        let mine: Vec<&DirEntry> = entries
            .iter()
            .filter(|e| e.profile == profile && e.ranges.iter().any(|r| r.lo <= r.hi))
            .collect();
        if mine.is_empty() {
            return DirOutcome::Denied(DenyReason::NoRules);
        }
        let fits = |e: &&&DirEntry| e.proto == proto && e.ranges.iter().any(|r| r.contains(port));
        if !mine.iter().any(|e| fits(&e)) {
            return DirOutcome::Denied(DenyReason::PortNotAllowed);
        }
        if mine
            .iter()
            .any(|e| fits(&e) && peer[e.kind as usize] == e.key)
        {
            DirOutcome::Allowed
        } else {
            DirOutcome::Denied(DenyReason::NoMatchingPeer)
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// `check` answers what the entries say, whatever the summary answers inline.
        #[test]
        fn checks_match_the_entries(
            profiles in 1u32..4,
            entries in arb_entries(3),
            probes in proptest::collection::vec(
                (
                    0u32..4,
                    proptest::collection::vec(prop_oneof![0u32..12, Just(NONE)], PEER_KINDS),
                    0..4usize,
                    prop_oneof![Just(0u16), Just(53), Just(80), Just(443), Just(1001), any::<u16>()],
                ),
                1..50,
            ),
        ) {
            let entries: Vec<DirEntry> =
                entries.into_iter().filter(|e| e.profile < profiles).collect();
            let t = DirTable::new(profiles, entries.clone()).expect("table");
            for (profile, peer, proto, port) in probes {
                let peer: [u32; PEER_KINDS] = [peer[0], peer[1], peer[2], peer[3], peer[4]];
                let proto = ProtoClass::ALL[proto];
                let profile = profile.min(profiles - 1);
                prop_assert_eq!(
                    t.check(profile, &peer, proto, port),
                    naive_check(&entries, profile, &peer, proto, port),
                    "profile {} peer {:?} {:?} port {}", profile, peer, proto, port
                );
            }
        }
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
