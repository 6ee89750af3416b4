//! The per-worker flow table: connection tracking for forwarded flows.
//!
//! A flow is two [`Tuple`]s, as in Linux conntrack: the *original* direction as the
//! client sent it (client -> virtual address) and the *reply* direction as the backend
//! will send it (backend -> sluice's SNAT address, or backend -> client in transparent
//! mode). The NAT rewrite is implied by the pair: a packet matching `orig` leaves with
//! `src = reply.dst, dst = reply.src`; a packet matching `reply` leaves with
//! `src = orig.dst, dst = orig.src`. So one entry is reachable from both directions'
//! 5-tuples, and flows record the backend itself (never an index into a table), which is
//! what lets established flows survive table swaps.
//!
//! - **Memory**: capacity fixed at [`FlowTable::new`]; no allocation afterwards; at most
//!   128 bytes per flow at every capacity (120 plus the wheel's 512 bytes shared by all
//!   flows: 120.5 at 1,000 flows, 120.005 at 100,000). An entry is one 64-byte cache line
//!   ([`Flow`], 6 bytes of it for delayed binding, [`Splice`]). An IPv4 flow (both
//!   tuples IPv4, the common case) lives in it whole (*narrow* form: both directions'
//!   addresses as 32-bit words), so a lookup that hits reads the index line and one entry
//!   line. A flow with an IPv6 address (*wide* form) keeps its original direction's
//!   16-byte addresses in the entry and its reply direction's in a 32-byte record at the
//!   same position in a second array, the wide area (no allocator of its own, no second
//!   capacity: every entry has its record, and IPv6 flows may fill the whole table); a
//!   hit on it reads three lines, as every hit did with the former 96-byte entries. The
//!   IPv4 hot path keys lookups by [`Tuple4`] (no IPv4-mapped copies), which hashes like
//!   its mapped [`Tuple`].
//!   The index is open addressing with linear probing and backward-shift deletion (no
//!   tombstones, so a long-running table does not degrade): 8-byte slots, two keys per
//!   flow, exactly 3 slots per flow (24 bytes), so it is at most 2/3 full. Free entries
//!   are chained through the entry itself (no free list beside it).
//! - **Index sizing**: a hash is mapped onto the `3 × capacity` slots with Lemire's
//!   multiply-shift range reduction (`(h × len) >> 64`, one multiplication, no power of
//!   two needed: rounding `4 × capacity` up to a power of two made the index 32 to 64
//!   bytes a flow, and the table 129 to 138 bytes a flow at most capacities). Knuth's
//!   expected probes for linear probing at load `a` are `(1 + 1/(1-a)) / 2` for a hit
//!   and `(1 + 1/(1-a)^2) / 2` for a miss: at the bound `a = 2/3`, 2 and 5 slots,
//!   which with 8 slots to a cache line is still mostly one line (a slot holds a 32-bit
//!   tag, so the flow entry itself is only read for the flow that matches, bar a 2^-31
//!   false tag match). Denser would grow fast (at 3/4: 2.5 and 8.5; at 7/8: 4.5 and
//!   32.5); sparser spends the 128-byte budget (4 slots a flow is 128 bytes before the
//!   wheel). A table is only this full at capacity: at half capacity the load is 1/3
//!   (1.25 and 1.6 probes).
//! - **Full**: [`FlowTable::insert`] fails with [`InsertError::Full`]; existing flows are
//!   untouched (the caller drops the packet and counts it).
//! - **Timers**: a hashed timing wheel of one-second ticks with lazy re-arming: a packet
//!   only writes its flow's `expires`; when the wheel reaches a flow whose `expires` moved
//!   on, the flow is re-filed, otherwise it expires. Per packet that is one store in the
//!   flow's own cache line; per tick, work in proportion to the flows filed in that slot.
//!   A flow is filed at most 64 s ahead, so long timeouts are re-filed every minute and a
//!   flow whose timeout shrinks (or that is removed) is recycled within a minute. Tables
//!   of fewer than 128 flows have a smaller wheel (a power of two, up to a slot a flow)
//!   and file flows at most one turn ahead; the wheel's lists and the free list share
//!   one link field in the entry, since an entry is on exactly one of them.
//! - **TCP**: the states and timeouts of Linux conntrack (SYN_SENT 120 s, SYN_RECV 60 s,
//!   ESTABLISHED 5 days, FIN_WAIT 120 s, CLOSE_WAIT 60 s, LAST_ACK 30 s, TIME_WAIT 120 s,
//!   CLOSE 10 s), configurable ([`Timeouts`]); UDP 30 s unreplied, 120 s once replied.
//!
//! Measured with `bench_balance` (established flows at 1k, 100k and 1M, new connections);
//! history in `perf/NOTES.md`.

mod tcp;
mod tuple;

pub use tcp::{TcpFlags, TcpState};
use tuple::{from_words, words};
pub use tuple::{Dir, Tuple, Tuple4};

use crate::mem::HugeSlice;
use std::net::SocketAddr;

/// A flow's handle (valid until the flow is removed or expires).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowId(u32);

/// Timeouts in seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// SYN seen, no answer.
    pub tcp_syn_sent: u32,
    /// SYN-ACK seen, no final ACK.
    pub tcp_syn_recv: u32,
    /// Established.
    pub tcp_established: u32,
    /// One side sent FIN.
    pub tcp_fin_wait: u32,
    /// The other side answered the FIN, its own FIN pending.
    pub tcp_close_wait: u32,
    /// Both FINs seen, last ACK pending.
    pub tcp_last_ack: u32,
    /// Closed cleanly.
    pub tcp_time_wait: u32,
    /// Reset.
    pub tcp_close: u32,
    /// UDP (and other protocols) before a reply.
    pub udp_unreplied: u32,
    /// UDP after a reply.
    pub udp_replied: u32,
}

impl Default for Timeouts {
    fn default() -> Self {
        // Linux nf_conntrack defaults.
        Timeouts {
            tcp_syn_sent: 120,
            tcp_syn_recv: 60,
            tcp_established: 432_000,
            tcp_fin_wait: 120,
            tcp_close_wait: 60,
            tcp_last_ack: 30,
            tcp_time_wait: 120,
            tcp_close: 10,
            udp_unreplied: 30,
            udp_replied: 120,
        }
    }
}

impl Timeouts {
    fn for_state(&self, s: TcpState) -> u32 {
        match s {
            TcpState::SynSent => self.tcp_syn_sent,
            TcpState::SynRecv => self.tcp_syn_recv,
            TcpState::Established => self.tcp_established,
            TcpState::FinWait => self.tcp_fin_wait,
            TcpState::CloseWait => self.tcp_close_wait,
            TcpState::LastAck => self.tcp_last_ack,
            TcpState::TimeWait => self.tcp_time_wait,
            TcpState::Close => self.tcp_close,
            TcpState::UdpUnreplied => self.udp_unreplied,
            TcpState::UdpReplied => self.udp_replied,
        }
    }
}

/// A tracked flow's entry: one 64-byte cache line (aligned to 64).
///
/// Two forms. **Narrow** (both tuples IPv4, the common case): the entry holds the whole
/// flow, both directions' addresses as [`Tuple4`] words, so a lookup that hits reads the
/// index line and this one line. **Wide** (an address of either tuple is IPv6): the entry
/// holds the original direction's 16-byte addresses and the table's wide area, a 32-byte
/// record at the same position beside the entries, holds the reply direction's; such a
/// hit reads the index line, this line and that record's (three lines, as every flow did
/// when entries were 96 bytes). Read a flow's tuples through [`FlowRef`]
/// ([`FlowTable::get`]).
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
    addrs: [u32; 8],
    /// Original source and destination port, reply source and destination port.
    ports: [u16; 4],
    /// Snapshot generation the flow was admitted under (for lazy policy re-checks).
    pub generation: u32,
    expires: u32,
    link: u32,
    /// Delayed-binding state ([`crate::splice`]); [`Splice::NONE`] for plain flows.
    pub splice: Splice,
    /// The original and the reply direction's protocol.
    protos: [u8; 2],
    /// The wide form (the reply direction's addresses are in the wide area).
    wide: bool,
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
struct WideAddrs([u32; 8]);

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
    /// [`Splice::PLAIN`], [`Splice::EMBRYO`], [`Splice::SPLICED`] or
    /// [`Splice::REPLAYING`] (low nibble; spliced: the high nibble is the shift applied to
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
    /// A plain flow's value.
    pub const NONE: Splice = Splice {
        phase: Splice::PLAIN,
        scales: 0,
        value: 0,
    };
}

const EMPTY_FLOW: Flow = Flow {
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
    fn keyed(orig: &Tuple, reply: &Tuple) -> (Flow, WideAddrs) {
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
    fn narrow_matches(&self, dir: Dir, k: &Tuple4) -> bool {
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
    fn live(&self) -> bool {
        self.link & LIVE != 0
    }

    /// Marks the flow live or dead, keeping its list link.
    #[inline]
    fn set_live(&mut self, live: bool) {
        self.link = self.link & !LIVE | if live { LIVE } else { 0 };
    }

    /// The next entry on the entry's list ([`NIL`]: the last).
    #[inline]
    fn next(&self) -> u32 {
        self.link & !LIVE
    }

    /// Links the entry to `next`, keeping its liveness.
    #[inline]
    fn set_next(&mut self, next: u32) {
        self.link = self.link & LIVE | next;
    }
}

/// A flow's entry with its wide-area record: its tuples in either form
/// ([`FlowTable::get`]). Dereferences to the [`Flow`] entry.
#[derive(Clone, Copy, Debug)]
pub struct FlowRef<'a> {
    flow: &'a Flow,
    wide: &'a WideAddrs,
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
    fn matches(&self, dir: Dir, t: &Tuple) -> bool {
        self.tuple(dir) == *t
    }
}

/// Why a flow was not inserted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertError {
    /// The table is at capacity.
    Full,
    /// A flow with one of these tuples exists.
    Exists,
}

/// Counters of the table's own events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowStats {
    /// Flows inserted.
    pub inserted: u64,
    /// Inserts refused because the table was full.
    pub full: u64,
    /// Flows removed by their owner.
    pub removed: u64,
    /// Flows expired by the wheel.
    pub expired: u64,
}

/// The top bit of [`Flow::link`]: the flow is live.
const LIVE: u32 = 1 << 31;
/// The end of a list (in [`Flow::link`], the wheel and the free list's head).
const NIL: u32 = LIVE - 1;
/// Wheel slots (one-second ticks) of a table of at least 128 flows; smaller tables get
/// the largest power of two up to one slot a flow, which keeps them within
/// 128 bytes a flow too.
const WHEEL_SLOTS: usize = 128;
/// Ticks one [`FlowTable::expire`] call processes at most (bounded work per call).
const MAX_TICKS_PER_CALL: u32 = WHEEL_SLOTS as u32 - 1;
/// Flows are filed at most this far ahead (or one wheel turn, if shorter) and re-filed
/// on arrival, so a flow whose timeout shrinks (established -> TIME_WAIT) or that is
/// removed is recycled within a minute of its real expiry.
const REFILE_HORIZON: u32 = 64;
/// Index slots per flow (two keys a flow: at most 2/3 full; see the module docs).
const SLOTS_PER_FLOW: usize = 3;
const EMPTY_SLOT: u64 = 0;

const _: () = assert!(std::mem::size_of::<Flow>() == 64);
const _: () = assert!(std::mem::size_of::<WideAddrs>() == 32);

/// The flow table (see the [module docs](self)).
pub struct FlowTable {
    flows: HugeSlice<Flow>,
    /// The wide flows' reply addresses, at their entries' positions (see [`Flow`]).
    wide: HugeSlice<WideAddrs>,
    /// Open-addressing index of `SLOTS_PER_FLOW × capacity` slots: `0` empty, else
    /// `tag << 32 | (id << 1 | reply) + 1`.
    index: HugeSlice<u64>,
    /// Head of the free entries, chained through `Flow::link` (`NIL`: full).
    free: u32,
    /// Heads of the wheel slots' lists (a power of two, at most `WHEEL_SLOTS`).
    wheel: Box<[u32]>,
    /// Flows are filed at most this many ticks ahead.
    horizon: u32,
    /// The wheel's position: every slot before it has been processed.
    wheel_now: u32,
    seed: u64,
    timeouts: Timeouts,
    len: usize,
    stats: FlowStats,
}

impl std::fmt::Debug for FlowTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowTable")
            .field("capacity", &self.flows.len())
            .field("len", &self.len)
            .field("stats", &self.stats)
            .finish()
    }
}

/// The flow and direction an index slot's value points to.
#[inline(always)]
fn slot_target(v: u64) -> (u32, Dir) {
    let low = (v & 0xffff_ffff) as u32 - 1;
    let dir = if low & 1 == 1 { Dir::Reply } else { Dir::Orig };
    (low >> 1, dir)
}

impl FlowTable {
    /// A table for `capacity` flows (at least 1; all memory allocated here), with
    /// `timeouts`, whose clock starts at `now` seconds. `seed` keys the hash.
    pub fn new(capacity: usize, timeouts: Timeouts, now: u32, seed: u64) -> FlowTable {
        let capacity = capacity.clamp(1, (NIL >> 2) as usize);
        let mut flows = huge_filled(EMPTY_FLOW, capacity);
        // The free list runs 0, 1, 2, ...: entries are handed out in order.
        for (i, f) in flows.iter_mut().enumerate() {
            f.set_next(if i + 1 < capacity { i as u32 + 1 } else { NIL });
        }
        // Entry, wide area and index take 120 bytes a flow, leaving 8 for the wheel: one
        // slot a flow in small tables (rounded down to a power of two).
        let wheel_slots = if capacity >= WHEEL_SLOTS {
            WHEEL_SLOTS
        } else {
            1 << capacity.ilog2()
        };
        FlowTable {
            flows,
            wide: huge_filled(WideAddrs::default(), capacity),
            index: huge_filled(EMPTY_SLOT, capacity * SLOTS_PER_FLOW),
            free: 0,
            wheel: vec![NIL; wheel_slots].into_boxed_slice(),
            horizon: REFILE_HORIZON.min(wheel_slots as u32),
            wheel_now: now,
            seed,
            timeouts,
            len: 0,
            stats: FlowStats::default(),
        }
    }

    /// Flows in the table.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The fixed capacity.
    pub fn capacity(&self) -> usize {
        self.flows.len()
    }

    /// Counters.
    pub fn stats(&self) -> FlowStats {
        self.stats
    }

    /// Bytes held by the table (entries, wide area, index, wheel): at most 128 a flow.
    pub fn memory_bytes(&self) -> usize {
        self.flows.len() * std::mem::size_of::<Flow>()
            + self.wide.len() * std::mem::size_of::<WideAddrs>()
            + self.index.len() * std::mem::size_of::<u64>()
            + self.wheel.len() * std::mem::size_of::<u32>()
    }

    /// The tag stored beside a key: the hash's low half (the slot comes from the high
    /// half, so the tag still tells apart the keys of one probe run).
    fn tag(h: u64) -> u64 {
        u64::from(h as u32 | 1)
    }

    /// The home slot of a hash: `h × len / 2^64` (multiply-shift range reduction).
    #[inline]
    fn home(&self, h: u64) -> usize {
        ((u128::from(h) * self.index.len() as u128) >> 64) as usize
    }

    /// The slot after `i`, wrapping at the end of the index.
    #[inline]
    fn next_slot(&self, i: usize) -> usize {
        if i + 1 == self.index.len() {
            0
        } else {
            i + 1
        }
    }

    /// Slots from `from` forward to `to`, cyclically.
    #[inline]
    fn distance(&self, from: usize, to: usize) -> usize {
        if to >= from {
            to - from
        } else {
            to + self.index.len() - from
        }
    }

    /// The hash of a tuple under this table's seed, for [`FlowTable::prefetch`] and
    /// [`FlowTable::lookup_hashed`] (a burst hashes every packet first, prefetches, then
    /// looks up). An IPv4 tuple hashes as its [`Tuple4`] does.
    #[inline]
    pub fn hash(&self, t: &Tuple) -> u64 {
        t.hash(self.seed)
    }

    /// [`FlowTable::hash`] of an IPv4 key.
    #[inline]
    pub fn hash4(&self, t: &Tuple4) -> u64 {
        t.hash(self.seed)
    }

    /// Prefetches the index slot where a lookup of `hash` starts (into L2; see
    /// [`FlowTable::prefetch_entry`]).
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        crate::mem::prefetch_l2(&self.index[self.home(hash)]);
    }

    /// Prefetches a flow's entry (e.g. between the lookup and the packet's rewrite).
    #[inline]
    pub fn prefetch_flow(&self, id: FlowId) {
        if let Some(f) = self.flows.get(id.0 as usize) {
            crate::mem::prefetch_read(f);
        }
    }

    /// The second stage of a burst's lookups: reads the index slots of `hash` (which
    /// [`FlowTable::prefetch`] brought in) up to the first key with the hash's tag and
    /// brings that flow's entry into the cache, and for a `wide` key (an IPv6 address) its
    /// wide-area record too, so that the lookup that follows finds them there. Only a
    /// hint: a false tag match or a change to the table in between costs a miss, never a
    /// wrong answer. Returns the flow it prefetched (for a later
    /// [`FlowTable::prefetch_flow`] into L1; again only a hint).
    ///
    /// The entry is prefetched into the core's L2 ([`crate::mem::prefetch_l2`],
    /// `PREFETCHT1`), not its L1: an entry is written by the packet that reads it (state,
    /// expiry), and entries fetched into L1 (`PREFETCHT0`) were still missing when the
    /// lookup came to them. The index line of [`FlowTable::prefetch`] goes to L2 too; the
    /// wide record, only ever read, to L1. Measured with `bench_balance` (figures in
    /// `perf/NOTES.md`).
    #[inline]
    pub fn prefetch_entry(&self, hash: u64, wide: bool) -> Option<FlowId> {
        let tag = Self::tag(hash);
        let mut i = self.home(hash);
        // Bounded: the expected run is two slots at the table's fullest.
        for _ in 0..8 {
            let v = self.index[i];
            if v == EMPTY_SLOT {
                return None;
            }
            if v >> 32 == tag {
                let (id, _) = slot_target(v);
                let f = self.flows.get(id as usize)?;
                crate::mem::prefetch_l2(f);
                if wide {
                    if let Some(w) = self.wide.get(id as usize) {
                        crate::mem::prefetch_read(w);
                    }
                }
                return Some(FlowId(id));
            }
            i = self.next_slot(i);
        }
        None
    }

    /// The flow, direction and tuple an index slot's value points to.
    #[cfg(test)]
    fn slot_tuple(&self, v: u64) -> (u32, Dir, Tuple) {
        let (id, dir) = slot_target(v);
        (id, dir, self.get(FlowId(id)).tuple(dir))
    }

    /// The hash of a live flow's `dir` key, from the entry (and its wide record).
    fn key_hash(&self, id: u32, dir: Dir) -> u64 {
        match self.flows[id as usize].tuple4(dir) {
            Some(t) => self.hash4(&t),
            None => self.hash(&self.get(FlowId(id)).tuple(dir)),
        }
    }

    /// Finds the live flow a packet with this tuple belongs to at time `now`, and its
    /// direction. A flow past its expiry that the wheel has not reaped yet is not
    /// returned (so timeouts are exact to the second whatever the wheel's lag).
    #[inline]
    pub fn lookup(&self, t: &Tuple, now: u32) -> Option<(FlowId, Dir)> {
        self.lookup_hashed(t, self.hash(t), now)
    }

    /// [`FlowTable::lookup`] with the tuple's [`FlowTable::hash`] already computed.
    #[inline]
    pub fn lookup_hashed(&self, t: &Tuple, hash: u64, now: u32) -> Option<(FlowId, Dir)> {
        self.find_hashed(t, hash)
            .filter(|(id, _)| self.flows[id.0 as usize].expires > now)
    }

    /// [`FlowTable::lookup_hashed`] of an IPv4 key (its [`FlowTable::hash4`] computed):
    /// a hit reads the index and the flow's one entry line.
    #[inline(always)]
    pub fn lookup4_hashed(&self, t: &Tuple4, hash: u64, now: u32) -> Option<(FlowId, Dir)> {
        self.find4(t, hash)
            .filter(|(id, _)| self.flows[id.0 as usize].expires > now)
    }

    /// Finds the indexed flow with this tuple, expired or not.
    fn find(&self, t: &Tuple) -> Option<(FlowId, Dir)> {
        self.find_hashed(t, self.hash(t))
    }

    #[inline]
    fn find_hashed(&self, t: &Tuple, h: u64) -> Option<(FlowId, Dir)> {
        if let Some(k) = t.to_v4() {
            return self.find4(&k, h);
        }
        self.probe(h, |id, dir| self.get(FlowId(id)).matches(dir, t))
    }

    /// Inlined into the burst's lookup pass (a call there cost its register saves on every
    /// packet; measured with [`FlowTable::on_packet`]'s and the NAT rewrite's inlining).
    #[inline(always)]
    fn find4(&self, k: &Tuple4, h: u64) -> Option<(FlowId, Dir)> {
        self.probe(h, |id, dir| self.key4_matches(id, dir, k))
    }

    /// Walks the index from the home slot of hash `h` to the first empty slot, and returns
    /// the first entry whose tag matches and that `matches` (given its id and direction)
    /// accepts.
    #[inline(always)]
    fn probe(&self, h: u64, matches: impl Fn(u32, Dir) -> bool) -> Option<(FlowId, Dir)> {
        let tag = Self::tag(h);
        let mut i = self.home(h);
        loop {
            let v = self.index[i];
            if v == EMPTY_SLOT {
                return None;
            }
            if v >> 32 == tag {
                let (id, dir) = slot_target(v);
                if matches(id, dir) {
                    return Some((FlowId(id), dir));
                }
            }
            i = self.next_slot(i);
        }
    }

    /// Whether flow `id`'s `dir` tuple is the IPv4 key `k`: in the entry for a narrow
    /// flow; for a wide one (an IPv6 reply direction, say) through its mapped form.
    #[inline(always)]
    fn key4_matches(&self, id: u32, dir: Dir, k: &Tuple4) -> bool {
        let f = &self.flows[id as usize];
        f.narrow_matches(dir, k) || (f.wide && self.wide_key4_matches(id, dir, k))
    }

    #[cold]
    fn wide_key4_matches(&self, id: u32, dir: Dir, k: &Tuple4) -> bool {
        self.get(FlowId(id)).matches(dir, &k.to_tuple())
    }

    /// The flow behind a handle.
    #[inline]
    pub fn get(&self, id: FlowId) -> FlowRef<'_> {
        FlowRef {
            flow: &self.flows[id.0 as usize],
            wide: &self.wide[id.0 as usize],
        }
    }

    /// The flow's entry alone (no wide-area record: its narrow tuples, state, timer and
    /// pipeline fields), one bounds check less than [`FlowTable::get`].
    #[inline]
    pub fn entry(&self, id: FlowId) -> &Flow {
        &self.flows[id.0 as usize]
    }

    /// The flow's entry behind a handle, mutably (for `generation` and `user_flags`).
    pub fn get_mut(&mut self, id: FlowId) -> &mut Flow {
        &mut self.flows[id.0 as usize]
    }

    fn index_insert(&mut self, h: u64, id: u32, dir: Dir) {
        let v = Self::tag(h) << 32 | u64::from((id << 1 | u32::from(dir == Dir::Reply)) + 1);
        // At most 2 keys a flow in 3 slots a flow: there is always an empty slot.
        let mut i = self.home(h);
        while self.index[i] != EMPTY_SLOT {
            i = self.next_slot(i);
        }
        self.index[i] = v;
    }

    /// Removes flow `id`'s key of hash `h` from the index.
    fn index_remove(&mut self, h: u64, id: u32) {
        let tag = Self::tag(h);
        let mut i = self.home(h);
        loop {
            let v = self.index[i];
            if v == EMPTY_SLOT {
                return; // not present
            }
            if v >> 32 == tag && slot_target(v).0 == id {
                break;
            }
            i = self.next_slot(i);
        }
        // Backward-shift deletion: pull later members of the probe run into the hole. A
        // key at `j` may move back to the hole iff its home is not in (hole, j]
        // cyclically, i.e. it is at least as far from its home as from the hole (the
        // distances count forward with wrap-around at the index's end, whatever its
        // length).
        let mut hole = i;
        let mut j = self.next_slot(i);
        loop {
            let v = self.index[j];
            if v == EMPTY_SLOT {
                break;
            }
            let (other, dir) = slot_target(v);
            let home = self.home(self.key_hash(other, dir));
            if self.distance(home, j) >= self.distance(hole, j) {
                self.index[hole] = v;
                hole = j;
            }
            j = self.next_slot(j);
        }
        self.index[hole] = EMPTY_SLOT;
    }

    /// Removes both keys of flow `id` (still holding them) from the index.
    fn index_remove_flow(&mut self, id: u32) {
        let (ho, hr) = (self.key_hash(id, Dir::Orig), self.key_hash(id, Dir::Reply));
        self.index_remove(ho, id);
        self.index_remove(hr, id);
    }

    /// Writes `orig` and `reply` into entry `id` (the wide area only for a wide flow),
    /// keeping its list link, state, timer and pipeline fields.
    fn store_keys(&mut self, id: u32, orig: &Tuple, reply: &Tuple) {
        let (keyed, w) = Flow::keyed(orig, reply);
        let f = &mut self.flows[id as usize];
        f.addrs = keyed.addrs;
        f.ports = keyed.ports;
        f.protos = keyed.protos;
        f.wide = keyed.wide;
        if keyed.wide {
            self.wide[id as usize] = w;
        }
    }

    /// Admits a new flow in `state` (`SynSent` for TCP, `UdpUnreplied` otherwise) at
    /// time `now` (seconds). Fails when full (existing flows untouched) or when either
    /// tuple is already tracked.
    pub fn insert(
        &mut self,
        orig: Tuple,
        reply: Tuple,
        state: TcpState,
        generation: u32,
        now: u32,
    ) -> Result<FlowId, InsertError> {
        let (ho, hr) = (self.hash(&orig), self.hash(&reply));
        for (t, h) in [(&orig, ho), (&reply, hr)] {
            if let Some((id, _)) = self.find_hashed(t, h) {
                if self.flows[id.0 as usize].expires > now {
                    return Err(InsertError::Exists);
                }
                self.reap(id); // expired, not yet reaped: its tuples may be reused now
            }
        }
        let id = self.free;
        if id == NIL {
            self.stats.full += 1;
            return Err(InsertError::Full);
        }
        self.free = self.flows[id as usize].next();
        let expires = now.saturating_add(self.timeouts.for_state(state));
        let (keyed, w) = Flow::keyed(&orig, &reply);
        self.flows[id as usize] = Flow {
            generation,
            expires,
            link: LIVE | NIL,
            state,
            ..keyed
        };
        if keyed.wide {
            self.wide[id as usize] = w;
        }
        self.index_insert(ho, id, Dir::Orig);
        self.index_insert(hr, id, Dir::Reply);
        self.file(id, expires);
        self.len += 1;
        self.stats.inserted += 1;
        Ok(FlowId(id))
    }

    /// Gives a live flow a new reply tuple and `state` at time `now`, keeping its entry,
    /// its original-direction key and its place on the wheel: delayed binding, where the
    /// client's connection is tracked from sluice's own handshake and gets its backend side
    /// later. (Removing the flow and inserting another would leave the old entry unusable
    /// until the wheel reaches it, up to a minute later: one entry more per connection.)
    /// Fails with [`InsertError::Exists`], changing nothing, when another live flow tracks
    /// `reply` or the flow is not live; an expired flow holding `reply` is reaped.
    pub fn rekey_reply(
        &mut self,
        id: FlowId,
        reply: Tuple,
        state: TcpState,
        now: u32,
    ) -> Result<(), InsertError> {
        if !self.flows[id.0 as usize].live() {
            return Err(InsertError::Exists);
        }
        if let Some((other, dir)) = self.find(&reply) {
            if other == id && dir == Dir::Reply {
                // Already keyed so: only the state changes.
            } else if other == id || self.flows[other.0 as usize].expires > now {
                return Err(InsertError::Exists);
            } else {
                self.reap(other);
            }
        }
        let orig = self.get(id).orig();
        let old = self.key_hash(id.0, Dir::Reply);
        self.index_remove(old, id.0);
        // The orig key's form may change (narrow <-> wide); its hash does not.
        self.store_keys(id.0, &orig, &reply);
        let expires = now.saturating_add(self.timeouts.for_state(state));
        let e = &mut self.flows[id.0 as usize];
        e.state = state;
        // A later expiry is re-filed lazily when the wheel reaches the entry's slot.
        e.expires = expires;
        let h = self.hash(&reply);
        self.index_insert(h, id.0, Dir::Reply);
        Ok(())
    }

    fn file(&mut self, id: u32, expires: u32) {
        // A flow is filed at its expiry, or at the far end of the wheel if later; the
        // wheel re-files it when it gets there.
        let due = expires.clamp(
            self.wheel_now.saturating_add(1),
            self.wheel_now.saturating_add(self.horizon),
        );
        let slot = due as usize & (self.wheel.len() - 1);
        self.flows[id as usize].set_next(self.wheel[slot]);
        self.wheel[slot] = id;
    }

    /// Accounts a packet of the flow travelling in `dir` at `now`: advances the TCP
    /// state with the packet's flags (`None` for UDP and other protocols) and pushes the
    /// expiry out. Returns the new state.
    #[inline(always)]
    pub fn on_packet(
        &mut self,
        id: FlowId,
        dir: Dir,
        flags: Option<TcpFlags>,
        now: u32,
    ) -> TcpState {
        let f = &mut self.flows[id.0 as usize];
        let state = match flags {
            Some(fl) => f.state.on_tcp(dir, fl),
            None => f.state.on_datagram(dir),
        };
        // (`self.timeouts` borrowed in place, not copied: `perf/NOTES.md`.)
        let expires = now.saturating_add(self.timeouts.for_state(state));
        // Store only what changed: an established flow's entry then stays clean for a
        // second at a time instead of being written back to memory after every packet.
        if f.state != state {
            f.state = state;
        }
        if f.expires != expires {
            f.expires = expires;
        }
        state
    }

    /// Removes a flow now (its tuples stop matching at once; the entry is recycled when
    /// the wheel reaches it, within a minute).
    pub fn remove(&mut self, id: FlowId) {
        if self.reap(id) {
            self.stats.removed += 1;
        }
    }

    /// Unindexes a live flow and marks it dead; the wheel recycles the entry.
    fn reap(&mut self, id: FlowId) -> bool {
        if !self.flows[id.0 as usize].live() {
            return false;
        }
        self.index_remove_flow(id.0);
        let flow = &mut self.flows[id.0 as usize];
        flow.set_live(false);
        flow.expires = 0;
        self.len -= 1;
        true
    }

    /// Advances the wheel to `now` (seconds), expiring due flows; calls `on_expire` for
    /// each (before its entry is recycled). Returns how many expired.
    pub fn expire(&mut self, now: u32, mut on_expire: impl FnMut(FlowRef<'_>)) -> usize {
        let mut expired = 0;
        // Never process more than one turn per call: later slots wait for the next call.
        let end = now.min(self.wheel_now.saturating_add(MAX_TICKS_PER_CALL));
        while self.wheel_now < end {
            self.wheel_now += 1;
            let slot = self.wheel_now as usize & (self.wheel.len() - 1);
            let mut id = std::mem::replace(&mut self.wheel[slot], NIL);
            while id != NIL {
                let f = self.flows[id as usize];
                let next = f.next();
                if !f.live() {
                    self.recycle(id); // removed earlier: recycle now
                } else if f.expires > self.wheel_now {
                    self.file(id, f.expires); // touched since filed: lazy re-arm
                } else {
                    on_expire(self.get(FlowId(id)));
                    self.index_remove_flow(id);
                    self.flows[id as usize].set_live(false);
                    self.recycle(id);
                    self.len -= 1;
                    self.stats.expired += 1;
                    expired += 1;
                }
                id = next;
            }
        }
        expired
    }

    /// Puts an entry the wheel has just unlinked on the free list.
    fn recycle(&mut self, id: u32) {
        self.flows[id as usize].set_next(self.free);
        self.free = id;
    }

    /// Every live flow (for `sluice ctl flows` and tests).
    pub fn iter(&self) -> impl Iterator<Item = (FlowId, FlowRef<'_>)> {
        (0..self.flows.len() as u32)
            .map(FlowId)
            .filter(|id| self.flows[id.0 as usize].live())
            .map(|id| (id, self.get(id)))
    }
}

/// `len` copies of `value` in memory aligned to 2 MiB and advised for transparent huge
/// pages when it is big ([`HugeSlice`]): lookups land at random in tables of many MiB
/// (64 bytes of entry, 32 of wide area and 24 of index a flow), and with 4 KiB pages
/// each would also miss the TLB.
fn huge_filled<T: Clone>(value: T, len: usize) -> HugeSlice<T> {
    HugeSlice::filled(value, len)
}

#[cfg(test)]
mod tests;
