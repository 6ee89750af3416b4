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
//!   [`FlowTable::insert_evicting`] (what the pipeline uses) first tries *early drop*, as
//!   Linux conntrack does: of [`EARLY_DROP_PROBES`] entries spread over the table from
//!   where the new flow's hash points, a removed one awaiting the wheel is taken, else the
//!   expired or never-answered flow (handshake not completed, datagram not replied) with
//!   the oldest last packet is dropped for the new one; established and closing flows
//!   never are. Bounded work (no scan), on the insert path only.
//! - **Pressure**: from [`PRESSURE_PERCENT`] (90 %) of capacity in live flows, a
//!   half-open TCP flow (SYN_SENT, SYN_RECV; not one the splice engine holds) silent for
//!   [`PRESSURE_HALF_OPEN_S`] (5 s) expires instead of living its configured timeout
//!   (120 s, 60 s), so a SYN flood's entries come back within seconds. The wheel does it:
//!   under pressure it files such flows at their last packet plus 5 s (on insert and when
//!   it re-files them), and expires them there if nothing came since. Timeouts and the hit
//!   path are unchanged (a flow's last packet is still its expiry minus its state's
//!   timeout).
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
//! The rooms: `tuple` the keys ([`Tuple`], [`Tuple4`], [`Dir`]), `entry` a flow's line
//! ([`Flow`], [`FlowRef`], [`Splice`]), `tcp` and `timeouts` its state and how long it
//! lives, `table` the [`FlowTable`]'s memory and its admit/remove, `index` finding a flow
//! by tuple, `wheel` its timers, [`sources`] the per-source admission budget. This file only names them and re-exports.
//!
//! Measured with `bench_balance` (established flows at 1k, 100k and 1M, new connections);
//! history in `perf/NOTES.md`.

mod entry;
mod index;
pub mod sources;
mod table;
mod tcp;
mod timeouts;
mod tuple;
mod wheel;

pub use entry::{Flow, FlowId, FlowRef, Splice};
pub use sources::SourceRates;
pub use table::{FlowStats, FlowTable, InsertError, EARLY_DROP_PROBES, PRESSURE_PERCENT};
pub use tcp::{TcpFlags, TcpState};
pub use timeouts::{Timeouts, PRESSURE_HALF_OPEN_S};
pub use tuple::{Dir, Tuple, Tuple4};

#[cfg(test)]
mod tests;
