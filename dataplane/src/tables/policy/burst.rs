//! Burst lookups: up to [`BATCH`] connections per round, in stages that each prefetch
//! what the next one reads (see the [module docs](super)). Answers are those of the
//! single lookups, connection by connection.

use std::hint::select_unpredictable;
use std::net::IpAddr;

use super::layout::{
    candidates_in_order, coarse_first, pack, slot_home, Ident, EMPTY_KEY, NO_PROFILE,
};
use super::{
    Conn, Conn4, Conn6, DenyReason, DirOutcome, DirTable, Direction, PeerKind, PolicyTables,
    ProtoClass, Verdict, BATCH, NONE, PEER_KINDS,
};
use crate::mem::prefetch_line;

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

impl DirTable {
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
    /// cost a prologue and epilogue per packet and direction (slower in `bench_policy`;
    /// `perf/NOTES.md`).
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
        // mispredicts often: `perf/NOTES.md`.)
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
    pub(super) fn line_allows(&self, home: usize, key: u64, port: u16) -> Option<bool> {
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
    /// computing the keys and home lines in every plan (most of which end there) was
    /// slower, and so was an egress loop of its own for a longer prefetch distance
    /// (`bench_policy`; `perf/NOTES.md`).
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

impl PolicyTables {
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
        // isolated sources only (in stage 2, for every connection, it slowed small
        // tables), which spares many connections a plan (`perf/NOTES.md`).
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
        // then denies is made all the same, for nothing: fewer mispredictions than two
        // lists of their own (`perf/NOTES.md`).
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
    /// bytes and up ([`BURST_MIN`](super::BURST_MIN) unless the caller knows its core better).
    #[inline]
    pub fn prefers_bursts(&self, min: usize) -> bool {
        self.memory_bytes() >= min
    }
}
