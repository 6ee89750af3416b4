//! The table itself: its memory (entries, wide area, index, wheel, all allocated by
//! [`FlowTable::new`]), admitting, re-keying and removing flows, reading them by handle,
//! and what it does when it fills up: shorter half-open timeouts from
//! [`PRESSURE_PERCENT`] full, early drop when full. Finding a flow by tuple is `index`'s;
//! timers are `wheel`'s.

use super::entry::{Flow, FlowId, FlowRef, Splice, WideAddrs, EMPTY_FLOW, LIVE, NIL};
use super::tcp::TcpState;
use super::timeouts::Timeouts;
use super::tuple::{Dir, Tuple};
use crate::mem::HugeSlice;

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
    /// Flows dropped early for a new one while the table was full
    /// ([`FlowTable::insert_evicting`]).
    pub early_dropped: u64,
}

/// From this share of its capacity (percent) of live flows the table is *under
/// pressure*: a half-open TCP flow silent for
/// [`PRESSURE_HALF_OPEN_S`](super::PRESSURE_HALF_OPEN_S) expires, whatever its configured
/// timeout, until the table is below the mark again.
pub const PRESSURE_PERCENT: usize = 90;

/// Entries a new flow looks at, in a full table, for one to drop early
/// ([`FlowTable::insert_evicting`]); Linux conntrack's `early_drop` looks at 8 hash
/// buckets. Bounded work: a flood cannot make an insert scan the table.
pub const EARLY_DROP_PROBES: usize = 8;

/// Wheel slots (one-second ticks) of a table of at least 128 flows; smaller tables get
/// the largest power of two up to one slot a flow, which keeps them within
/// 128 bytes a flow too.
pub(super) const WHEEL_SLOTS: usize = 128;
/// Flows are filed at most this far ahead (or one wheel turn, if shorter) and re-filed
/// on arrival, so a flow whose timeout shrinks (established -> TIME_WAIT) or that is
/// removed is recycled within a minute of its real expiry.
pub(super) const REFILE_HORIZON: u32 = 64;
/// Index slots per flow (two keys a flow: at most 2/3 full; see the module docs).
pub(super) const SLOTS_PER_FLOW: usize = 3;
pub(super) const EMPTY_SLOT: u64 = 0;

/// The flow table (see the [module docs](super)).
pub struct FlowTable {
    pub(super) flows: HugeSlice<Flow>,
    /// The wide flows' reply addresses, at their entries' positions (see [`Flow`]).
    pub(super) wide: HugeSlice<WideAddrs>,
    /// Open-addressing index of `SLOTS_PER_FLOW × capacity` slots: `0` empty, else
    /// `tag << 32 | (id << 1 | reply) + 1`.
    pub(super) index: HugeSlice<u64>,
    /// Head of the free entries, chained through `Flow::link` (`NIL`: full).
    pub(super) free: u32,
    /// Heads of the wheel slots' lists (a power of two, at most `WHEEL_SLOTS`).
    pub(super) wheel: Box<[u32]>,
    /// Flows are filed at most this many ticks ahead.
    pub(super) horizon: u32,
    /// The wheel's position: every slot before it has been processed.
    pub(super) wheel_now: u32,
    pub(super) seed: u64,
    pub(super) timeouts: Timeouts,
    /// Live flows from which the table is under pressure ([`PRESSURE_PERCENT`]).
    pub(super) pressure_at: usize,
    /// Whether the table is under pressure.
    pub(super) pressured: bool,
    pub(super) len: usize,
    pub(super) stats: FlowStats,
}

impl std::fmt::Debug for FlowTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowTable")
            .field("capacity", &self.flows.len())
            .field("len", &self.len)
            .field("pressured", &self.pressured)
            .field("stats", &self.stats)
            .finish()
    }
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
            pressure_at: (capacity * PRESSURE_PERCENT).div_ceil(100).max(1),
            pressured: false,
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

    /// The connection-tracking timeouts (under pressure, half-open flows may go sooner:
    /// [`PRESSURE_PERCENT`]).
    pub fn timeouts(&self) -> &Timeouts {
        &self.timeouts
    }

    /// Whether the table is under pressure now ([`PRESSURE_PERCENT`]).
    pub fn under_pressure(&self) -> bool {
        self.pressured
    }

    /// Enters or leaves pressure by the number of live flows (on the insert path, removal
    /// and the wheel's, never on a hit).
    pub(super) fn update_pressure(&mut self) {
        self.pressured = self.len >= self.pressure_at;
    }

    /// Under pressure, when the wheel must look at a flow in `state` whose last packet
    /// was at `last` (whose configured timeout ends at `expires`): after
    /// [`PRESSURE_HALF_OPEN_S`](super::PRESSURE_HALF_OPEN_S) of silence if it is a plain
    /// half-open TCP flow (the splice engine's own timers bound the flows it holds), else
    /// at `expires`.
    #[inline]
    pub(super) fn due(&self, state: TcpState, splice: Splice, last: u32, expires: u32) -> u32 {
        if self.pressured
            && matches!(state, TcpState::SynSent | TcpState::SynRecv)
            && splice.phase == Splice::PLAIN
        {
            expires.min(last.saturating_add(super::PRESSURE_HALF_OPEN_S))
        } else {
            expires
        }
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
    /// tuple is already tracked by a live flow; an expired flow still holding one is
    /// reaped, unseen: where flows carry source NAT tuples, use
    /// [`FlowTable::insert_evicting`], which shows it to their owner.
    pub fn insert(
        &mut self,
        orig: Tuple,
        reply: Tuple,
        state: TcpState,
        generation: u32,
        now: u32,
    ) -> Result<FlowId, InsertError> {
        self.admit(
            orig,
            reply,
            state,
            generation,
            now,
            None::<fn(FlowRef<'_>) -> bool>,
        )
    }

    /// [`FlowTable::insert`], and when the table is full, *early drop* as Linux
    /// conntrack does: of [`EARLY_DROP_PROBES`] entries spread over the table from a
    /// place the new flow's hash picks, the first that no live flow holds (removed,
    /// awaiting the wheel) is taken, else the flow that expired or never became a
    /// connection ([`TcpState::is_unanswered`]) whose last packet is oldest is dropped
    /// and its entry serves the new flow. `on_drop` sees every flow the insert takes out
    /// of the table before it goes, so that its owner can rest its source NAT tuple as
    /// the wheel's expiry would: the one dropped early, and an expired flow that the wheel
    /// has not reached yet (it files flows up to a minute ahead) still holding one of the
    /// new tuples. For the latter it answers whether the new flow may have the tuple now;
    /// `false` (the tuple rests) fails the insert with [`InsertError::Exists`], the
    /// expired flow gone all the same. Established and closing flows, and flows the splice engine
    /// holds (its own timers bound those), are never dropped; with none of the others
    /// among the probes the insert fails with [`InsertError::Full`]. Counted in
    /// [`FlowStats::early_dropped`].
    pub fn insert_evicting(
        &mut self,
        orig: Tuple,
        reply: Tuple,
        state: TcpState,
        generation: u32,
        now: u32,
        on_drop: impl FnMut(FlowRef<'_>) -> bool,
    ) -> Result<FlowId, InsertError> {
        self.admit(orig, reply, state, generation, now, Some(on_drop))
    }

    fn admit<F: FnMut(FlowRef<'_>) -> bool>(
        &mut self,
        orig: Tuple,
        reply: Tuple,
        state: TcpState,
        generation: u32,
        now: u32,
        mut on_drop: Option<F>,
    ) -> Result<FlowId, InsertError> {
        let (ho, hr) = (self.hash(&orig), self.hash(&reply));
        for (t, h) in [(&orig, ho), (&reply, hr)] {
            if let Some((id, _)) = self.find_hashed(t, h) {
                if self.flows[id.0 as usize].expires > now {
                    return Err(InsertError::Exists);
                }
                // Expired, not yet reaped: its tuples may be reused now, if its owner agrees.
                let reuse = on_drop.as_mut().is_none_or(|f| f(self.get(id)));
                self.reap(id);
                if !reuse {
                    return Err(InsertError::Exists);
                }
            }
        }
        // A free entry, or (full) one taken by early drop, which stays on the wheel list
        // it is filed in: the wheel re-files or expires it by its new expiry when it gets
        // there (lazy re-arming, as for any flow).
        let (id, filed) = if self.free != NIL {
            let id = self.free;
            self.free = self.flows[id as usize].next();
            (id, None)
        } else {
            match on_drop.and_then(|mut f| {
                self.early_drop(ho, now, |v| {
                    f(v);
                })
            }) {
                Some(id) => (id, Some(self.flows[id as usize].next())),
                None => {
                    self.stats.full += 1;
                    return Err(InsertError::Full);
                }
            }
        };
        let expires = now.saturating_add(self.timeouts.for_state(state));
        let (keyed, w) = Flow::keyed(&orig, &reply);
        self.flows[id as usize] = Flow {
            generation,
            expires,
            link: LIVE | filed.unwrap_or(NIL),
            state,
            ..keyed
        };
        if keyed.wide {
            self.wide[id as usize] = w;
        }
        self.index_insert(ho, id, Dir::Orig);
        self.index_insert(hr, id, Dir::Reply);
        self.len += 1;
        self.update_pressure();
        if filed.is_none() {
            self.file(id, self.due(state, Splice::NONE, now, expires));
        }
        self.stats.inserted += 1;
        Ok(FlowId(id))
    }

    /// Gives a live flow a new reply tuple and `state` at time `now`, keeping its entry,
    /// its original-direction key and its place on the wheel: delayed binding, where the
    /// client's connection is tracked from sluice's own handshake and gets its backend side
    /// later. (Removing the flow and inserting another would leave the old entry unusable
    /// until the wheel reaches it, up to a minute later: one entry more per connection.)
    /// Fails with [`InsertError::Exists`], changing nothing, when another live flow tracks
    /// `reply` or the flow is not live; an expired flow holding `reply` is reaped, shown
    /// to `on_drop` first, whose `false` fails the re-key with [`InsertError::Exists`]
    /// (as in [`FlowTable::insert_evicting`]).
    pub fn rekey_reply(
        &mut self,
        id: FlowId,
        reply: Tuple,
        state: TcpState,
        now: u32,
        on_drop: impl FnOnce(FlowRef<'_>) -> bool,
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
                let reuse = on_drop(self.get(other));
                self.reap(other);
                if !reuse {
                    return Err(InsertError::Exists);
                }
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

    /// Removes a flow now (its tuples stop matching at once; the entry is recycled when
    /// the wheel reaches it, within a minute).
    pub fn remove(&mut self, id: FlowId) {
        if self.reap(id) {
            self.stats.removed += 1;
            self.update_pressure();
        }
    }

    /// Early drop for a new flow of hash `h` at `now` in a full table (see
    /// [`FlowTable::insert_evicting`]): the entry it frees, if any, still on its wheel
    /// list.
    #[cold]
    fn early_drop(&mut self, h: u64, now: u32, on_drop: impl FnOnce(FlowRef<'_>)) -> Option<u32> {
        let cap = self.flows.len();
        let probes = EARLY_DROP_PROBES.min(cap);
        let step = cap / probes;
        // The index's home slot comes from the hash's high bits: start from its low ones.
        let start = ((u128::from(h.rotate_left(32)) * cap as u128) >> 64) as usize;
        // The candidate and the latest its last packet can have been.
        let mut victim: Option<(usize, u32)> = None;
        for k in 0..probes {
            let mut i = start + k * step;
            if i >= cap {
                i -= cap;
            }
            let f = &self.flows[i];
            if !f.live() {
                // Removed, waiting for the wheel to recycle it: free for the taking.
                return Some(i as u32);
            }
            if f.splice.phase != Splice::PLAIN {
                continue;
            }
            let last = if f.expires <= now {
                0
            } else if f.state.is_unanswered() {
                f.expires.saturating_sub(self.timeouts.for_state(f.state))
            } else {
                continue;
            };
            if victim.is_none_or(|(_, l)| last < l) {
                victim = Some((i, last));
            }
        }
        let (i, _) = victim?;
        let id = FlowId(i as u32);
        on_drop(self.get(id));
        self.reap(id);
        self.stats.early_dropped += 1;
        Some(id.0)
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
