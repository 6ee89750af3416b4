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
//! packet. `bench_policy` times both forms (`perf/NOTES.md` has the history).
//!
//! Layout, for as few cache lines per lookup as possible: an identity (with its peer
//! keys' Bloom bits) and a profile summary are one line each, the hash table is probed
//! from the start of a line, and the large arrays live in transparent huge pages
//! (see `frozen`), so that a lookup in tens of MiB does not also walk page tables.
//!
//! Nothing here allocates after construction, and no lookup can panic: every index is
//! checked when the tables are built and read with `get` besides (a burst's own
//! fixed-size arrays are indexed modulo their length).
//!
//! Where things are, as in DPDK's `lib/acl` (a reader of the lookup never wades
//! through the builder): this file holds the public types and the contract;
//! `keys` the keys entries are written in (peer kinds, protocol classes, port ranges),
//! `build` constructs the tables, `layout` their memory layout (hash slots, profile
//! summaries, identity lines, filters), `lookup` answers one connection at a time and
//! `burst` a burst of them in stages.

mod build;
mod burst;
mod keys;
mod layout;
mod lookup;
#[cfg(test)]
mod tests;

use std::net::IpAddr;

use thiserror::Error;

use super::ipcache::IpCache;
use crate::mem::HugeSlice;
use layout::{Ident, ProfileInfo, Slots};

pub use keys::{merge_ranges, IdentityEntry, PeerKind, PortRange, ProtoClass, NONE, PEER_KINDS};

/// The largest profile number a [`DirTable`] accepts.
pub const MAX_PROFILE: u32 = (1 << 27) - 1;

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

/// Connections per round of the burst verdicts (a dataplane's rx burst).
pub const BATCH: usize = 32;

/// Tables from this size up ([`PolicyTables::memory_bytes`]) are checked faster a burst
/// at a time ([`PolicyTables::verdicts`]) than one connection at a time
/// ([`PolicyTables::verdict`]); smaller ones stay in cache, where the burst's stages cost
/// more than the misses they overlap.
///
/// Set for a core with 512 KiB of L2 from `bench_balance_policy` (the balancer's routed
/// new connections checked one by one and a burst at a time, in alternation); figures in
/// `perf/NOTES.md`. (Connections to a virtual address are checked one by one whatever
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

/// One direction's entries: `(profile, peer kind, peer key, protocol)` -> port ranges.
///
/// The profile's summary line filters a peer's keys before any probe, so most checks
/// probe nothing; of the probes that are made, most find nothing, and each costs a line
/// from memory, which a burst prefetches. What grows from 10 to 10k policies is mostly
/// the isolation work itself (more endpoints isolated, more plans and probes), in cache
/// or not. `bench_policy` shows it; `perf/NOTES.md` has the probe statistics and the
/// filters and prefetch distances tried and rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirTable {
    profiles: HugeSlice<ProfileInfo>,
    slots: Slots,
    shift: u32,
    extra: HugeSlice<PortRange>,
    ranges: usize,
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
