//! The keys policy is written in: an identity's peer keys ([`IdentityEntry`], one per
//! [`PeerKind`]), protocol classes and port ranges. The tables' layout, builder and
//! lookups all speak them.

/// "None" in every `u32` field of these tables: no profile (not isolated), no peer key
/// of that kind, no node.
pub const NONE: u32 = u32::MAX;

/// Number of peer kinds (the length of [`IdentityEntry::peer`]).
pub const PEER_KINDS: usize = 5;

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
    /// ports a branch predictor cannot learn (branch-simulation counts over
    /// `bench_policy` in `perf/NOTES.md`).
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
