//! Finding a flow by tuple: the open-addressing index (linear probing, backward-shift
//! deletion, a 32-bit tag beside each key), its hashing, prefetches and lookups.

use super::entry::FlowId;
use super::table::{FlowTable, EMPTY_SLOT};
use super::tuple::{Dir, Tuple, Tuple4};

/// The flow and direction an index slot's value points to.
#[inline(always)]
pub(super) fn slot_target(v: u64) -> (u32, Dir) {
    let low = (v & 0xffff_ffff) as u32 - 1;
    let dir = if low & 1 == 1 { Dir::Reply } else { Dir::Orig };
    (low >> 1, dir)
}

impl FlowTable {
    /// The tag stored beside a key: the hash's low half (the slot comes from the high
    /// half, so the tag still tells apart the keys of one probe run).
    pub(super) fn tag(h: u64) -> u64 {
        u64::from(h as u32 | 1)
    }

    /// The home slot of a hash: `h × len / 2^64` (multiply-shift range reduction).
    #[inline]
    pub(super) fn home(&self, h: u64) -> usize {
        ((u128::from(h) * self.index.len() as u128) >> 64) as usize
    }

    /// The slot after `i`, wrapping at the end of the index.
    #[inline]
    pub(super) fn next_slot(&self, i: usize) -> usize {
        if i + 1 == self.index.len() {
            0
        } else {
            i + 1
        }
    }

    /// Slots from `from` forward to `to`, cyclically.
    #[inline]
    pub(super) fn distance(&self, from: usize, to: usize) -> usize {
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
    /// `PREFETCHT1`), not its L1, because the packet that reads it also writes it (state,
    /// expiry); the index line of [`FlowTable::prefetch`] goes to L2 too, the wide record,
    /// only ever read, to L1. Shown by `bench_balance --only-flows 100000`.
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
    pub(super) fn slot_tuple(&self, v: u64) -> (u32, Dir, Tuple) {
        let (id, dir) = slot_target(v);
        (id, dir, self.get(FlowId(id)).tuple(dir))
    }

    /// The hash of a live flow's `dir` key, from the entry (and its wide record).
    pub(super) fn key_hash(&self, id: u32, dir: Dir) -> u64 {
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
    pub(super) fn find(&self, t: &Tuple) -> Option<(FlowId, Dir)> {
        self.find_hashed(t, self.hash(t))
    }

    #[inline]
    pub(super) fn find_hashed(&self, t: &Tuple, h: u64) -> Option<(FlowId, Dir)> {
        if let Some(k) = t.to_v4() {
            return self.find4(&k, h);
        }
        self.probe(h, |id, dir| self.get(FlowId(id)).matches(dir, t))
    }

    /// Inlined into the burst's lookup pass: a call there costs its register saves on
    /// every packet (`bench_balance_instructions established`).
    #[inline(always)]
    pub(super) fn find4(&self, k: &Tuple4, h: u64) -> Option<(FlowId, Dir)> {
        self.probe(h, |id, dir| self.key4_matches(id, dir, k))
    }

    /// Walks the index from the home slot of hash `h` to the first empty slot, and returns
    /// the first entry whose tag matches and that `matches` (given its id and direction)
    /// accepts.
    #[inline(always)]
    pub(super) fn probe(
        &self,
        h: u64,
        matches: impl Fn(u32, Dir) -> bool,
    ) -> Option<(FlowId, Dir)> {
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
    pub(super) fn key4_matches(&self, id: u32, dir: Dir, k: &Tuple4) -> bool {
        let f = &self.flows[id as usize];
        f.narrow_matches(dir, k) || (f.wide && self.wide_key4_matches(id, dir, k))
    }

    #[cold]
    pub(super) fn wide_key4_matches(&self, id: u32, dir: Dir, k: &Tuple4) -> bool {
        self.get(FlowId(id)).matches(dir, &k.to_tuple())
    }

    pub(super) fn index_insert(&mut self, h: u64, id: u32, dir: Dir) {
        let v = Self::tag(h) << 32 | u64::from((id << 1 | u32::from(dir == Dir::Reply)) + 1);
        // At most 2 keys a flow in 3 slots a flow: there is always an empty slot.
        let mut i = self.home(h);
        while self.index[i] != EMPTY_SLOT {
            i = self.next_slot(i);
        }
        self.index[i] = v;
    }

    /// Removes flow `id`'s key of hash `h` from the index.
    pub(super) fn index_remove(&mut self, h: u64, id: u32) {
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
    pub(super) fn index_remove_flow(&mut self, id: u32) {
        let (ho, hr) = (self.key_hash(id, Dir::Orig), self.key_hash(id, Dir::Reply));
        self.index_remove(ho, id);
        self.index_remove(hr, id);
    }
}
