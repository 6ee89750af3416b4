//! Lookups: one pass over the name for its hashes, then its candidates' fingerprint
//! lines, then the probes: exact, longest wildcard, catch-all.

use super::hash::{eq_folded, hash_key, hash_name};
use super::layout::{fingerprint, group_of, lanes, tag, Slot, GROUP, INLINE, PREFIX};
use super::{HostMatcher, Match, MatchKind, NONE};
use crate::inspect::name::MAX_NAME_LEN;

/// Suffix hashes kept per name from the one right-to-left pass; names with more label
/// boundaries (with a non-empty part before them) take the slow path.
const KEPT: usize = 16;

/// A name's hashes, from the one right-to-left pass of [`HostMatcher::prepare`].
#[derive(Clone, Copy)]
struct Prep {
    /// Hash of the whole name.
    full: u64,
    /// Hashes of the suffixes that start after a dot with a non-empty part before it
    /// (the ones a wildcard can match), shortest first; the first `count.min(KEPT)`.
    hashes: [u64; KEPT],
    /// Where each of those suffixes starts in the name (names are at most 253 bytes).
    starts: [u8; KEPT],
    /// How many such suffixes the name has (more than [`KEPT`]: the slow path).
    count: usize,
}

const PREP: Prep = Prep {
    full: 0,
    hashes: [0; KEPT],
    starts: [0; KEPT],
    count: 0,
};

/// How a name is looked up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plan {
    /// Nothing but the catch-all can match (empty or over-long name, no named pattern).
    CatchAll,
    /// Probe the candidates that [`Prep`] holds.
    Fast,
    /// More suffixes than [`Prep`] keeps: hash each on its own.
    Slow,
}

impl HostMatcher {
    /// The value of the most specific pattern matching `name` (see the
    /// [module docs](super)). `name` may be in any case. No allocation.
    pub fn lookup(&self, name: &[u8]) -> Option<u32> {
        self.find(name).map(|m| m.value)
    }

    /// Like [`HostMatcher::lookup`], and says what matched.
    pub fn find(&self, name: &[u8]) -> Option<Match> {
        let mut prep = PREP;
        let found = match self.prepare(name, &mut prep) {
            Plan::CatchAll => None,
            Plan::Fast => {
                // A big table: fetch every candidate's slot at once rather than one probe
                // after the other.
                let mask = self.candidates(&prep, self.prefetch);
                self.resolve(name, &prep, mask)
            }
            Plan::Slow => self.find_slow(name, &prep),
        };
        found.or_else(|| self.catch_all())
    }

    /// How many patterns (exact, wildcard and catch-all) the matcher holds.
    pub fn len(&self) -> usize {
        self.patterns
    }

    /// Whether the matcher holds no pattern at all.
    pub fn is_empty(&self) -> bool {
        self.patterns == 0
    }

    /// Bytes used by the table (slots with their values, fingerprints, spill bits and
    /// key arena).
    pub fn table_bytes(&self) -> usize {
        core::mem::size_of_val(&self.slots[..])
            + core::mem::size_of_val(&self.prints[..])
            + core::mem::size_of_val(&self.spilled[..])
            + self.arena.len()
    }

    /// Whether the matcher holds any exact or wildcard pattern.
    fn has_names(&self) -> bool {
        self.exact_count + self.wildcard_count > 0
    }

    /// A match of `kind` with `value`, unless `value` is [`NONE`] (no pattern).
    fn value(value: u32, kind: MatchKind) -> Option<Match> {
        (value != NONE).then_some(Match { value, kind })
    }

    fn catch_all(&self) -> Option<Match> {
        HostMatcher::value(self.any, MatchKind::Any)
    }

    /// One right-to-left pass over `name`: the hash of every suffix that starts at a label
    /// boundary (the hash of a name is defined label-wise from the right, so `example.com`
    /// hashes the same alone and as the tail of `a.example.com`), case ignored. Says how
    /// the lookup goes on.
    #[inline]
    fn prepare(&self, name: &[u8], prep: &mut Prep) -> Plan {
        let len = name.len();
        if len == 0 || len > MAX_NAME_LEN || !self.has_names() {
            return Plan::CatchAll;
        }
        let mut count = 0;
        let (hashes, starts) = (&mut prep.hashes, &mut prep.starts);
        prep.full = hash_name(self.seed, name, |start, h| {
            if let (Some(hash), Some(at)) = (hashes.get_mut(count), starts.get_mut(count)) {
                *hash = h;
                // `start <= 253`.
                *at = start as u8;
            }
            count += 1;
        });
        prep.count = count;
        if count > KEPT {
            Plan::Slow
        } else {
            Plan::Fast
        }
    }

    /// Whether group `g` spilled into the next one.
    #[inline]
    fn spilled(&self, g: usize) -> bool {
        self.spilled
            .get(g / 64)
            .is_some_and(|w| (w >> (g % 64)) & 1 != 0)
    }

    /// Whether a key with this hash may be in the table (its group's line holds its
    /// fingerprint, or the group spilled); with `prefetch`, prefetches the slots whose
    /// fingerprint matched.
    #[inline]
    fn may_hold(&self, hash: u64, prefetch: bool) -> bool {
        let (g, hits) = self.matching_slots(hash, prefetch);
        hits != 0 || self.spilled(g)
    }

    /// The candidates of a prepared name that may be keys: bit 0 for the whole name as an
    /// exact key, bit `k + 1` for suffix `k` (shortest first) as a wildcard key. With
    /// `prefetch`, also prefetches the slots they may be in.
    #[inline]
    fn candidates(&self, prep: &Prep, prefetch: bool) -> u32 {
        let mut mask = 0;
        if self.exact_count > 0 && self.may_hold(prep.full, prefetch) {
            mask |= 1;
        }
        mask | self.suffix_candidates(prep, prefetch)
    }

    /// The suffixes of a prepared name (bit `k`: suffix `k`, which has `k + 1` labels)
    /// with as many labels as some wildcard's suffix: the only ones that can be wildcard
    /// keys. (A table rarely has a wildcard of one label, `*.com`; so the top-level
    /// domain of a name is usually not even looked for.)
    #[inline]
    fn wild_suffixes(&self, prep: &Prep) -> u32 {
        // `count.min(KEPT) <= 16`.
        self.wild_labels & ((1u32 << prep.count.min(KEPT)) - 1)
    }

    /// The group of a key with this hash, and the slots of that group whose fingerprint is
    /// the key's (bit `i`: the group's slot `i`); with `prefetch`, prefetches those slots.
    #[inline]
    fn matching_slots(&self, hash: u64, prefetch: bool) -> (usize, u32) {
        let g = group_of(hash, self.groups);
        let hits = self
            .prints
            .get(g)
            .map_or(0, |p| lanes(p, fingerprint(hash)));
        if prefetch {
            let mut rest = hits;
            while rest != 0 {
                let lane = rest.trailing_zeros() as usize;
                rest &= rest - 1;
                if let Some(slot) = self.slots.get(g * GROUP + lane) {
                    crate::mem::prefetch_line(slot);
                }
            }
        }
        (g, hits)
    }

    /// The wildcard candidates of a prepared name that may be keys, as bits `k + 1` of
    /// [`HostMatcher::candidates`]; with `prefetch`, prefetches their slots.
    #[inline]
    fn suffix_candidates(&self, prep: &Prep, prefetch: bool) -> u32 {
        let mut mask = 0;
        let mut rest = self.wild_suffixes(prep);
        while rest != 0 {
            let k = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            let h = prep.hashes.get(k).copied().unwrap_or_default();
            if self.may_hold(h, prefetch) {
                mask |= 2 << k;
            }
        }
        mask
    }

    /// Probes the candidates in `mask`: the exact name, then the suffixes longest first;
    /// the first that holds a pattern of its kind wins. Always inlined, as
    /// [`HostMatcher::key_is`] is: as calls, they made lookups slower (`bench_inspect`;
    /// `perf/NOTES.md`).
    #[inline(always)]
    fn resolve(&self, name: &[u8], prep: &Prep, mask: u32) -> Option<Match> {
        if mask & 1 != 0 {
            if let Some(slot) = self.probe(prep.full, name) {
                if slot.exact != NONE {
                    return HostMatcher::value(slot.exact, MatchKind::Exact);
                }
            }
        }
        let mut rest = mask >> 1;
        while rest != 0 {
            let k = (u32::BITS - 1 - rest.leading_zeros()) as usize;
            rest &= !(1 << k);
            let (Some(&h), Some(&start)) = (prep.hashes.get(k), prep.starts.get(k)) else {
                continue;
            };
            let suffix = name.get(usize::from(start)..).unwrap_or_default();
            if let Some(slot) = self.probe(h, suffix) {
                if slot.wild != NONE {
                    let kind = MatchKind::Wildcard {
                        suffix_len: suffix.len(),
                    };
                    return HostMatcher::value(slot.wild, kind);
                }
            }
        }
        None
    }

    /// [`HostMatcher::resolve`] for a name with more label boundaries than [`Prep`]
    /// keeps hashes for (only possible with many tiny or empty labels): each suffix is
    /// hashed on its own. Slower, same answer.
    #[cold]
    fn find_slow(&self, name: &[u8], prep: &Prep) -> Option<Match> {
        if self.exact_count > 0 {
            if let Some(slot) = self.probe(prep.full, name) {
                if slot.exact != NONE {
                    return HostMatcher::value(slot.exact, MatchKind::Exact);
                }
            }
        }
        if self.wildcard_count == 0 {
            return None;
        }
        // Longest suffix first: dots left to right, skipping a dot at 0.
        name.iter()
            .enumerate()
            .skip(1)
            .filter(|&(_, &b)| b == b'.')
            .find_map(|(i, _)| {
                let suffix = name.get(i + 1..)?;
                let h = hash_key(self.seed, suffix);
                let slot = self.probe(h, suffix)?;
                let kind = MatchKind::Wildcard {
                    suffix_len: suffix.len(),
                };
                HostMatcher::value(slot.wild, kind)
            })
    }

    /// The slot whose key is `key` (any case, 1..=253 bytes), if any.
    #[inline]
    fn probe(&self, hash: u64, key: &[u8]) -> Option<&Slot> {
        if key.is_empty() {
            return None;
        }
        let want = tag(hash, key.len());
        let fp = fingerprint(hash);
        let mut g = group_of(hash, self.groups);
        // A key is in its own group or, past groups that spilled, in a later one; no group
        // is read twice.
        for _ in 0..self.prints.len() {
            let mut hits = lanes(self.prints.get(g)?, fp);
            while hits != 0 {
                let lane = hits.trailing_zeros() as usize;
                hits &= hits - 1;
                let slot = self.slots.get(g * GROUP + lane)?;
                if slot.tag == want && self.key_is(slot, key) {
                    return Some(slot);
                }
            }
            if !self.spilled(g) {
                return None;
            }
            g = if g + 1 == self.groups { 0 } else { g + 1 };
        }
        None
    }

    /// Whether `slot` holds `key` (any case; its length the tag already matched).
    #[inline(always)]
    fn key_is(&self, slot: &Slot, key: &[u8]) -> bool {
        if key.len() <= INLINE {
            return slot.key.get(..key.len()).is_some_and(|k| eq_folded(key, k));
        }
        let [prefix @ .., a, b, c, d] = slot.key;
        let Some((head, rest)) = key.split_at_checked(PREFIX) else {
            return false;
        };
        if !eq_folded(head, &prefix) {
            return false;
        }
        let start = u32::from_le_bytes([a, b, c, d]) as usize;
        self.arena
            .get(start..start + rest.len())
            .is_some_and(|tail| eq_folded(rest, tail))
    }
}
