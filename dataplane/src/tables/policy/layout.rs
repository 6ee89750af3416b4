//! The memory layout of the policy tables: hash slots a cache line of four at a time,
//! one-line profile summaries with their Bloom filters, one-line identities, and the
//! key packing and filter functions that build, lookup and bursts share.

use super::keys::{IdentityEntry, PeerKind, PortRange, ProtoClass, NONE, PEER_KINDS};
use crate::mem::HugeSlice;
use crate::tables::frozen;

/// One entry of the hash table. Four fill a cache line: the table is probed linearly
/// from the first slot of the key's home line ([`slot_home`]), so a lookup whose probe
/// ends in that line (nearly all, at a load factor of at most 1/2) reads one line, which
/// a burst prefetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Slot {
    pub(super) key: u64,
    /// The first range, inline: most entries have one.
    pub(super) first: PortRange,
    /// Start of further ranges in `extra` (sentinel-terminated), or `NONE`.
    pub(super) more: u32,
}

/// The key of an empty slot.
pub(super) const EMPTY_KEY: u64 = u64::MAX;

/// An empty range: ends a slot's further ranges in `extra`, fills unused union ranges.
pub(super) const SENTINEL: PortRange = PortRange { lo: 1, hi: 0 };

#[inline]
pub(super) fn pack(profile: u32, kind: u8, proto: u8, key: u32) -> u64 {
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
pub(super) struct Slots(HugeSlice<SlotLine>);

impl Slots {
    /// Lines of `slots` (whose length is a multiple of [`LINE_SLOTS`]).
    pub(super) fn new(slots: &[Slot]) -> Self {
        let lines = slots
            .chunks_exact(LINE_SLOTS)
            .map(|c| SlotLine([c[0], c[1], c[2], c[3]]))
            .collect();
        Slots(frozen(lines))
    }

    #[inline]
    pub(super) fn len(&self) -> usize {
        self.0.len() * LINE_SLOTS
    }

    #[inline]
    pub(super) fn get(&self, i: usize) -> Option<&Slot> {
        self.0.get(i / LINE_SLOTS)?.0.get(i % LINE_SLOTS)
    }

    /// The line that slot `home` (a multiple of [`LINE_SLOTS`]) starts.
    #[inline]
    pub(super) fn line(&self, home: usize) -> Option<&[Slot; LINE_SLOTS]> {
        self.0.get(home / LINE_SLOTS).map(|l| &l.0)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Slot> + '_ {
        self.0.iter().flat_map(|l| l.0.iter())
    }
}

/// The first slot of `key`'s home line, where its probe starts.
#[inline]
pub(super) fn slot_home(key: u64, shift: u32) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> shift) as usize & !(LINE_SLOTS - 1)
}

pub(super) const UNION_INLINE: usize = 2;

/// The pseudo peer kind under which spilled port unions are stored.
pub(super) const UNION_KIND: u8 = 7;

/// Per profile: which peer kinds have entries, and per protocol class the union of the
/// ports any entry allows (inline when it is at most [`UNION_INLINE`] ranges, else in
/// the hash table under the pseudo-kind [`UNION_KIND`]). One cache line: a check reads
/// it whole. 32-bit filters (64-bit ones would not fit): the few more probes they let
/// through cost far fewer misses than a second line (`bench_policy`; `perf/NOTES.md`);
/// the workload filter, which saturates first, is narrowed by a filter of namespaces
/// (`wl_ns`, see [`candidates_in_order`]).
///
/// The namespace entry, too, is answered from this line when the profile has one
/// namespace key whose entries allow every port of their protocols (an empty pod
/// selector, "my namespace", without ports: the entry behind nearly every allowed
/// connection of `bench_policy`'s 10k policies). Such a profile's namespace kind is
/// never probed; its entries stay in the hash table for [`DirTable::entries`](super::DirTable::entries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(64))]
pub(super) struct ProfileInfo {
    /// Per protocol class: the union's ranges (unused ones empty: lo 1, hi 0).
    pub(super) union: [[PortRange; UNION_INLINE]; 4],
    /// Per peer kind: a 32-bit Bloom filter of the keys with entries (any protocol),
    /// so that most keys without an entry cost no probe.
    pub(super) bloom: [u32; PEER_KINDS],
    /// The inline namespace key, or [`NONE`] (see the type's documentation).
    pub(super) ns_key: u32,
    /// A 32-bit Bloom filter of the namespaces (their keys' [`bloom_slot`]s) of the
    /// identities that the profile's workload entries name: a workload key from another
    /// namespace costs no probe. Every bit until [`DirTable::qualify_workloads`](super::DirTable::qualify_workloads) (the
    /// table alone does not know which namespace a workload group is in).
    pub(super) wl_ns: u32,
    /// Bit `p` set when protocol class `p`'s union is spilled to the hash table.
    pub(super) spilled: u8,
    /// Bit `k` set when the profile has entries of peer kind `k`.
    pub(super) kinds: u8,
    /// The kinds whose entries are probed in the hash table (`kinds` without the
    /// namespace kind when it is inline), in [`coarse_first`] order.
    pub(super) order: u8,
    /// Bit `p` set when the inline namespace entry allows every port of protocol
    /// class `p`.
    pub(super) ns_all: u8,
}

impl ProfileInfo {
    /// Whether the inline namespace entry allows a peer in namespace `ns` (its key, or
    /// [`NONE`]) on protocol class `proto`, every port: computed without branches.
    #[inline]
    pub(super) fn ns_allows(&self, ns: u32, proto: ProtoClass) -> bool {
        (ns == self.ns_key) & ((self.ns_all >> (proto as u8 & 3)) & 1 != 0)
    }
}

/// The summary of a profile without entries (also the last one of every table).
pub(super) const NO_PROFILE: ProfileInfo = ProfileInfo {
    union: [[SENTINEL; UNION_INLINE]; 4],
    bloom: [0; PEER_KINDS],
    ns_key: NONE,
    wl_ns: u32::MAX,
    spilled: 0,
    kinds: 0,
    order: 0,
    ns_all: 0,
};

/// Which bit (0..32) `key` sets in a 32-bit Bloom filter.
#[inline]
pub(super) fn bloom_slot(key: u32) -> u8 {
    (u64::from(key).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 59) as u8
}

/// The bit `key` sets in a 32-bit Bloom filter.
#[inline]
pub(super) fn bloom_bit(key: u32) -> u32 {
    1u32 << bloom_slot(key)
}

/// The filter bits of a peer's keys, as [`candidates`] wants them.
#[inline]
pub(super) fn bloom_bits(peer: &[u32; PEER_KINDS]) -> [u32; PEER_KINDS] {
    peer.map(|key| if key == NONE { 0 } else { bloom_bit(key) })
}

/// The kinds (bit `k` for kind `k`) whose entry a peer may have in a profile: see
/// [`candidates_in_order`].
#[inline]
pub(super) fn candidates(info: &ProfileInfo, bloom: &[u32; PEER_KINDS], ns_slot: u8) -> u8 {
    coarse_first(candidates_in_order(info, bloom, ns_slot))
}

/// The kinds of `kinds` (bit `k` for kind `k`) in the order a burst probes them, the
/// coarsest first (bit `j` for kind `PEER_KINDS - 1 - j`): "anything", "any pod", a
/// namespace, a class, a workload group. Any order gives the same answer; but when
/// several kinds pass the filters, the coarse entry is the likelier to exist (a
/// workload group's filter is the most often saturated), and the first hit ends the
/// probe. The map is its own inverse.
#[inline]
pub(super) fn coarse_first(kinds: u8) -> u8 {
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
/// The namespace test is for the workload filter, the most often saturated: without
/// it, most probes were of workload keys and nearly all found nothing, mostly for a
/// peer from another namespace than every workload the profile names (`bench_policy`;
/// `perf/NOTES.md`).
#[inline]
pub(super) fn candidates_in_order(
    info: &ProfileInfo,
    bloom: &[u32; PEER_KINDS],
    ns_slot: u8,
) -> u8 {
    const WORKLOAD: u32 = (PEER_KINDS - 1 - PeerKind::Workload as usize) as u32;
    let mut order = 0u8;
    for (kind, (&bit, &filter)) in bloom.iter().zip(&info.bloom).enumerate() {
        order |= u8::from(bit & filter != 0) << (PEER_KINDS - 1 - kind);
    }
    let same_ns = (info.wl_ns >> (ns_slot & 31)) & 1;
    order & info.order & !(((same_ns ^ 1) as u8) << WORKLOAD)
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
pub(super) struct Ident {
    pub(super) entry: IdentityEntry,
    pub(super) bloom: [u32; PEER_KINDS],
    /// `[egress, ingress]`: bit `p` set when that profile allows protocol class `p`,
    /// every port, to or from the identity's own namespace.
    pub(super) own_ns: [u8; 2],
    /// The egress profile's port bound ([`DirTable::port_bound`](super::DirTable::port_bound)), or every port when
    /// there is none: a TCP, UDP or SCTP connection to a port outside it is denied
    /// (`PortNotAllowed`) from this line alone, without the profile's.
    pub(super) egress_ports: PortRange,
    /// The [`bloom_slot`] of its namespace key (of [`NONE`] too), for the profiles'
    /// `wl_ns` filters.
    pub(super) ns_slot: u8,
}

// One cache line each, as their layouts promise.
const _: () = assert!(std::mem::size_of::<Ident>() == 64);
const _: () = assert!(std::mem::size_of::<ProfileInfo>() == 64);

impl Ident {
    /// Whether the destination is in the source's namespace and direction `dir`'s
    /// profile of `owner` (the source for egress, the destination for ingress) allows
    /// it on every port of protocol class `pc` (`own_ns`). Without branches.
    #[inline]
    pub(super) fn own_ns_allows(owner: &Ident, same_ns: bool, dir: usize, pc: u8) -> bool {
        same_ns & ((owner.own_ns[dir % 2] >> (pc & 3)) & 1 != 0)
    }

    /// Whether `self` (the source) is the node `dst` runs on.
    #[inline]
    pub(super) fn is_node_of(&self, dst: &Ident) -> bool {
        (self.entry.node_of != NONE) & (self.entry.node_of == dst.entry.runs_on)
    }
}
