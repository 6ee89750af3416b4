//! Building the tables (off the hot path; may allocate): entries merged per key into
//! the hash table, profile summaries and their filters, identity lines, and the
//! cross-checks of [`PolicyTables::new`].

use std::collections::HashMap;

use super::layout::{
    bloom_bit, bloom_bits, bloom_slot, coarse_first, pack, slot_home, Ident, ProfileInfo, Slot,
    Slots, EMPTY_KEY, NO_PROFILE, SENTINEL, UNION_INLINE, UNION_KIND,
};
use super::{
    DirEntry, DirRange, DirTable, Direction, IdentityEntry, PeerKind, PolicyError, PolicyTables,
    PortRange, ProtoClass, MAX_PROFILE, NONE, PEER_KINDS,
};
use crate::tables::frozen;
use crate::tables::ipcache::IpCache;

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
}

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
    pub(super) fn of_peer(peer: [u32; PEER_KINDS]) -> Self {
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
}
