//! A flow's entry: one 64-byte line ([`Flow`]) with, for IPv6 flows, a 32-byte record
//! of reply addresses beside it ([`FlowRef`] reads both), the delayed-binding state it
//! carries ([`Splice`]), and the handle a table hands out ([`FlowId`]).

use super::tcp::TcpState;
use super::tuple::{from_words, words, Dir, Tuple, Tuple4};
use std::net::SocketAddr;

/// A flow's handle (valid until the flow is removed or expires).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowId(pub(super) u32);

/// The top bit of [`Flow::link`]: the flow is live.
pub(super) const LIVE: u32 = 1 << 31;
/// The end of a list (in [`Flow::link`], the wheel and the free list's head).
pub(super) const NIL: u32 = LIVE - 1;

/// A tracked flow's entry: one 64-byte cache line (aligned to 64).
///
/// Two forms. **Narrow** (both tuples IPv4, the common case): the entry holds the whole
/// flow, both directions' addresses as [`Tuple4`] words, so a lookup that hits reads the
/// index line and this one line. **Wide** (an address of either tuple is IPv6): the entry
/// holds the original direction's 16-byte addresses and the table's wide area, a 32-byte
/// record at the same position beside the entries, holds the reply direction's; such a
/// hit reads the index line, this line and that record's (three lines, as every flow did
/// when entries were 96 bytes). Read a flow's tuples through [`FlowRef`]
/// ([`FlowTable::get`](super::FlowTable::get)).
///
/// `link` links the entry into exactly one list at a time: the timer-wheel slot it is
/// filed in (live flows, and removed or expired-at-lookup flows awaiting recycling), or,
/// once the wheel has recycled it, the table's free list. Its top bit (`LIVE`) says
/// whether the flow is live (indexed); the low 31 bits are the next entry (or `NIL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct Flow {
    /// Narrow: original source, original destination, reply source, reply destination
    /// (as [`Tuple4`] holds them), then zeros. Wide: the original direction's source and
    /// destination, four big-endian words each.
    pub(super) addrs: [u32; 8],
    /// Original source and destination port, reply source and destination port.
    pub(super) ports: [u16; 4],
    /// Snapshot generation the flow was admitted under (for lazy policy re-checks).
    pub generation: u32,
    pub(super) expires: u32,
    pub(super) link: u32,
    /// Delayed-binding state ([`crate::splice`]); [`Splice::NONE`] for plain flows.
    pub splice: Splice,
    /// The original and the reply direction's protocol.
    pub(super) protos: [u8; 2],
    /// The wide form (the reply direction's addresses are in the wide area).
    pub(super) wide: bool,
    /// Connection state.
    pub state: TcpState,
    /// Free bits for the pipeline (e.g. "policy re-checked"), untouched by the table.
    pub user_flags: u8,
}

/// A wide flow's reply-direction addresses (source then destination, four big-endian
/// words each), at the flow's own position in the table's wide area; aligned to 32 so
/// that each lies in one cache line. Unused (never read) for narrow flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(C, align(32))]
pub(super) struct WideAddrs(pub(super) [u32; 8]);

/// What a flow carries for delayed binding (6 bytes): nothing, the index of its
/// embryonic entry while sluice reads the first bytes and connects the backend, or, once
/// spliced, the sequence offset and the two window scales.
///
/// Packed to an alignment of 2 (6 bytes, not 8) so that a [`Flow`] fits one cache line;
/// its fields are read and written by value only (a reference to `value` would not
/// compile).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(C, packed(2))]
pub struct Splice {
    /// [`Splice::PLAIN`], [`Splice::EMBRYO`], [`Splice::SPLICED`],
    /// [`Splice::REPLAYING`] or [`Splice::TERMINATED`] (low nibble; spliced: the high nibble is the shift applied to
    /// the client's windows when the backend declined window scaling).
    pub phase: u8,
    /// Spliced: the backend's window scale (high nibble) and the scale sluice announced
    /// to the client (low nibble).
    pub scales: u8,
    /// Embryonic: the entry's index; spliced: added to the backend's sequence numbers on
    /// the way to the client (and taken from the client's acknowledgments).
    pub value: u32,
}

impl Splice {
    /// A plain flow (NAT or routed).
    pub const PLAIN: u8 = 0;
    /// Handshake answered by sluice; first bytes or backend connection pending.
    pub const EMBRYO: u8 = 1;
    /// Both connections established; packets rewritten.
    pub const SPLICED: u8 = 2;
    /// Spliced, but the backend has not yet acknowledged every byte sluice replayed:
    /// `value` is the embryo holding them (and the final splice state).
    pub const REPLAYING: u8 = 3;
    /// Terminated by sluice ([`crate::terminate`]): `value` is the connection's slot.
    pub const TERMINATED: u8 = 4;
    /// A plain flow's value.
    pub const NONE: Splice = Splice {
        phase: Splice::PLAIN,
        scales: 0,
        value: 0,
    };
}

pub(super) const EMPTY_FLOW: Flow = Flow {
    addrs: [0; 8],
    ports: [0; 4],
    protos: [0; 2],
    wide: false,
    state: TcpState::Close,
    user_flags: 0,
    generation: 0,
    expires: 0,
    link: NIL,
    splice: Splice::NONE,
};

impl Flow {
    /// An entry holding `orig` and `reply` (narrow when both are IPv4), and the wide
    /// area's record for it.
    pub(super) fn keyed(orig: &Tuple, reply: &Tuple) -> (Flow, WideAddrs) {
        let mut f = Flow {
            ports: [orig.sport, orig.dport, reply.sport, reply.dport],
            protos: [orig.proto, reply.proto],
            ..EMPTY_FLOW
        };
        if let (Some(o), Some(r)) = (orig.to_v4(), reply.to_v4()) {
            f.addrs[..4].copy_from_slice(&[o.src, o.dst, r.src, r.dst]);
            return (f, WideAddrs::default());
        }
        f.wide = true;
        f.addrs[..4].copy_from_slice(&words(&orig.src));
        f.addrs[4..].copy_from_slice(&words(&orig.dst));
        let mut w = WideAddrs::default();
        w.0[..4].copy_from_slice(&words(&reply.src));
        w.0[4..].copy_from_slice(&words(&reply.dst));
        (f, w)
    }

    /// Whether the flow is in the wide form (an IPv6 address in either tuple).
    #[inline]
    pub fn is_wide(&self) -> bool {
        self.wide
    }

    /// A narrow flow's tuple in direction `dir` (`None` for a wide flow).
    #[inline]
    pub fn tuple4(&self, dir: Dir) -> Option<Tuple4> {
        let i = dir as usize * 2;
        (!self.wide).then_some(Tuple4 {
            src: self.addrs[i],
            dst: self.addrs[i + 1],
            sport: self.ports[i],
            dport: self.ports[i + 1],
            proto: self.protos[dir as usize],
        })
    }

    /// Whether a narrow flow's `dir` tuple is `k` (a wide flow's never is: see
    /// [`FlowTable::key4_matches`]).
    #[inline(always)]
    pub(super) fn narrow_matches(&self, dir: Dir, k: &Tuple4) -> bool {
        let i = dir as usize * 2;
        !self.wide
            && self.addrs[i] == k.src
            && self.addrs[i + 1] == k.dst
            && self.ports[i] == k.sport
            && self.ports[i + 1] == k.dport
            && self.protos[dir as usize] == k.proto
    }

    /// When the flow expires, in table seconds.
    pub fn expires(&self) -> u32 {
        self.expires
    }

    /// Whether the flow is live (indexed), as opposed to removed or free.
    #[inline]
    pub(super) fn live(&self) -> bool {
        self.link & LIVE != 0
    }

    /// Marks the flow live or dead, keeping its list link.
    #[inline]
    pub(super) fn set_live(&mut self, live: bool) {
        self.link = self.link & !LIVE | if live { LIVE } else { 0 };
    }

    /// The next entry on the entry's list ([`NIL`]: the last).
    #[inline]
    pub(super) fn next(&self) -> u32 {
        self.link & !LIVE
    }

    /// Links the entry to `next`, keeping its liveness.
    #[inline]
    pub(super) fn set_next(&mut self, next: u32) {
        self.link = self.link & LIVE | next;
    }
}

/// A flow's entry with its wide-area record: its tuples in either form
/// ([`FlowTable::get`](super::FlowTable::get)). Dereferences to the [`Flow`] entry.
#[derive(Clone, Copy, Debug)]
pub struct FlowRef<'a> {
    pub(super) flow: &'a Flow,
    pub(super) wide: &'a WideAddrs,
}

impl std::ops::Deref for FlowRef<'_> {
    type Target = Flow;

    fn deref(&self) -> &Flow {
        self.flow
    }
}

impl FlowRef<'_> {
    /// The flow's tuple in direction `dir`.
    pub fn tuple(&self, dir: Dir) -> Tuple {
        if let Some(t) = self.flow.tuple4(dir) {
            return t.to_tuple();
        }
        let i = dir as usize * 2;
        let a = match dir {
            Dir::Orig => &self.flow.addrs,
            Dir::Reply => &self.wide.0,
        };
        Tuple {
            src: from_words(&a[..4]),
            dst: from_words(&a[4..]),
            sport: self.flow.ports[i],
            dport: self.flow.ports[i + 1],
            proto: self.flow.protos[dir as usize],
        }
    }

    /// Original direction (client -> virtual address).
    pub fn orig(&self) -> Tuple {
        self.tuple(Dir::Orig)
    }

    /// Reply direction (backend -> SNAT address or client).
    pub fn reply(&self) -> Tuple {
        self.tuple(Dir::Reply)
    }

    /// Where a packet of this flow travelling in `dir` must be sent: `(new source, new
    /// destination)`.
    pub fn rewrite(&self, dir: Dir) -> (SocketAddr, SocketAddr) {
        let other = match dir {
            Dir::Orig => self.reply(),
            Dir::Reply => self.orig(),
        };
        (other.destination(), other.source())
    }

    /// The backend (the reply direction's source).
    pub fn backend(&self) -> SocketAddr {
        self.reply().source()
    }

    /// Whether the flow's `dir` tuple is `t`, in either form.
    pub(super) fn matches(&self, dir: Dir, t: &Tuple) -> bool {
        self.tuple(dir) == *t
    }
}

const _: () = assert!(std::mem::size_of::<Flow>() == 64);
const _: () = assert!(std::mem::size_of::<WideAddrs>() == 32);
