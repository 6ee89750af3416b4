//! Longest-prefix match over IPv4 and IPv6 addresses, built once and read many times.
//!
//! Both tables are multibit tries with controlled prefix expansion (DPDK's `rte_lpm`
//! family): a 2^16-entry root indexed by the top 16 bits, then 256-entry groups, one per
//! further 8 bits. IPv4 is therefore DIR-16-8-8: at most three dependent loads, and the
//! 256 KiB root stays in L2 where DIR-24-8's 64 MiB first level would not. IPv6 uses the
//! same trie (16 + 14 x 8 bits) for prefixes up to /127 and keeps host routes (/128, what
//! pods are) in an open-addressing hash table, probed first: a /128 is always the longest
//! match, and sparse host addresses would otherwise cost up to fourteen groups each.
//!
//! Entries are `u32`: `0` is "no route", bit 31 marks a pointer to a group, anything else
//! is a value plus one. Values are therefore limited to [`MAX_VALUE`].
//!
//! Building sorts the prefixes by length and writes the shorter ones first, so a longer
//! prefix only ever overwrites (or pushes into a new group) what a shorter one wrote.
//! Lookups never allocate and never panic.
//!
//! Besides one-address [`Lpm4::lookup`] / [`Lpm6::lookup`] there are bulk forms
//! ([`Lpm4::lookup_bulk`], [`Lpm6::lookup_bulk`], like DPDK's `rte_lpm_lookup_bulk`):
//! they walk every address of a burst one level at a time and prefetch each address's
//! next level before reading any of them, so the cache misses of a burst overlap instead
//! of queueing behind each other.

use super::frozen;
use crate::mem::{prefetch_line, HugeSlice};

use thiserror::Error;

/// The largest value a table can hold.
pub const MAX_VALUE: u32 = (1 << 31) - 2;

const EMPTY: u32 = 0;
const GROUP: u32 = 1 << 31;
const ROOT_BITS: u32 = 16;
const ROOT_SIZE: usize = 1 << ROOT_BITS;
const STRIDE: u32 = 8;
const GROUP_SIZE: usize = 1 << STRIDE;
/// At most 2^31 - 1 group indices fit the pointer encoding; far more than memory allows.
const MAX_GROUPS: usize = (1 << 23) - 1;

/// Why a table could not be built.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum LpmError {
    /// The prefix length exceeds the address width.
    #[error("prefix length {len} is longer than the address ({width} bits)")]
    PrefixTooLong {
        /// The length given.
        len: u8,
        /// The address width.
        width: u8,
    },
    /// The value does not fit the entry encoding.
    #[error("value {0} exceeds the largest storable value {MAX_VALUE}")]
    ValueTooLarge(u32),
    /// The same prefix was given twice (with the same or another value).
    #[error("prefix {0} is given twice")]
    Duplicate(String),
    /// The trie would need more groups than the encoding can address.
    #[error("the prefixes need more than {MAX_GROUPS} trie groups")]
    TooManyGroups,
}

/// The trie shared by both families, as built: `width` is 32 or 128; keys sit in the low
/// bits. [`TrieBuilder::finish`] freezes it into a [`Trie`].
struct TrieBuilder {
    width: u32,
    root: Box<[u32; ROOT_SIZE]>,
    groups: Vec<u32>,
}

/// The trie shared by both families, for lookups: the groups in huge pages when they
/// are large (see [`frozen`]).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Trie {
    root: Box<[u32; ROOT_SIZE]>,
    groups: HugeSlice<u32>,
}

impl TrieBuilder {
    fn new(width: u32) -> Self {
        let root: Box<[u32; ROOT_SIZE]> = match vec![EMPTY; ROOT_SIZE].into_boxed_slice().try_into()
        {
            Ok(r) => r,
            Err(_) => unreachable!("a vector of ROOT_SIZE converts to an array of ROOT_SIZE"),
        };
        TrieBuilder {
            width,
            root,
            groups: Vec::new(),
        }
    }

    fn finish(self) -> Trie {
        Trie {
            root: self.root,
            groups: frozen(self.groups),
        }
    }

    /// The index bits of `key` for the stride ending `consumed + STRIDE` bits from the top.
    fn group_index(&self, key: u128, consumed: u32) -> usize {
        ((key >> (self.width - consumed - STRIDE)) & 0xff) as usize
    }

    fn new_group(&mut self, fill: u32) -> Result<u32, LpmError> {
        let g = self.groups.len() / GROUP_SIZE;
        if g >= MAX_GROUPS {
            return Err(LpmError::TooManyGroups);
        }
        self.groups.resize(self.groups.len() + GROUP_SIZE, fill);
        Ok(GROUP | g as u32)
    }

    /// Writes one prefix. Callers insert in ascending length order, so the range written
    /// never contains a group pointer (a pointer is created only by a longer prefix).
    fn insert(&mut self, key: u128, len: u32, encoded: u32) -> Result<(), LpmError> {
        let top = ((key >> (self.width - ROOT_BITS)) & 0xffff) as usize;
        if len <= ROOT_BITS {
            let span = 1usize << (ROOT_BITS - len);
            let base = top & !(span - 1);
            for e in &mut self.root[base..base + span] {
                debug_assert!(*e & GROUP == 0);
                *e = encoded;
            }
            return Ok(());
        }
        // Descend, creating groups that inherit what the shorter prefixes wrote.
        let mut consumed = ROOT_BITS;
        let mut slot = self.root[top];
        if slot & GROUP == 0 {
            let g = self.new_group(slot)?;
            self.root[top] = g;
            slot = g;
        }
        loop {
            let g = (slot & !GROUP) as usize * GROUP_SIZE;
            let idx = self.group_index(key, consumed);
            if len <= consumed + STRIDE {
                let span = 1usize << (consumed + STRIDE - len);
                let base = idx & !(span - 1);
                for e in &mut self.groups[g + base..g + base + span] {
                    debug_assert!(*e & GROUP == 0);
                    *e = encoded;
                }
                return Ok(());
            }
            let cur = self.groups[g + idx];
            slot = if cur & GROUP == 0 {
                let n = self.new_group(cur)?;
                self.groups[g + idx] = n;
                n
            } else {
                cur
            };
            consumed += STRIDE;
        }
    }
}

impl Trie {
    fn bytes(&self) -> usize {
        (ROOT_SIZE + self.groups.len()) * std::mem::size_of::<u32>()
    }

    /// Where the entry under `e` for the low 8 bits of `bits` is, when `e` points to a
    /// group; entry 0 otherwise (a stand-in that stays in L1: the bulk lookups read or
    /// prefetch it rather than branch on whether an address goes on).
    #[inline]
    fn child_index(e: u32, bits: usize) -> usize {
        let at = (((e & !GROUP) as usize) << STRIDE) | (bits & 0xff);
        if e & GROUP != 0 {
            at
        } else {
            0
        }
    }

    /// The entry at `at` (from [`Self::child_index`]) when `e` points to a group, `e`
    /// itself when it is a value (or empty). Without a branch on which.
    #[inline]
    fn step_at(&self, e: u32, at: usize) -> u32 {
        let child = self.groups.get(at).copied().unwrap_or(EMPTY);
        if e & GROUP != 0 {
            child
        } else {
            e
        }
    }

    /// Prefetches what [`Self::step_at`] reads.
    #[inline]
    fn prefetch_at(&self, at: usize) {
        if let Some(x) = self.groups.get(at) {
            prefetch_line(x);
        }
    }
}

/// Addresses per round of the bulk lookups (a burst's sources and destinations).
pub const BULK: usize = 64;

#[inline]
fn decode(e: u32) -> Option<u32> {
    if e == EMPTY {
        None
    } else {
        Some(e - 1)
    }
}

/// Normalises, checks and sorts `(key, len, value)` by ascending length; rejects
/// duplicates. Returns the largest value seen.
fn prepare(prefixes: &mut [(u128, u8, u32)], width: u32) -> Result<Option<u32>, LpmError> {
    let mut max = None;
    for p in prefixes.iter_mut() {
        if u32::from(p.1) > width {
            return Err(LpmError::PrefixTooLong {
                len: p.1,
                width: width as u8,
            });
        }
        if p.2 > MAX_VALUE {
            return Err(LpmError::ValueTooLarge(p.2));
        }
        // Clear host bits so that two spellings of one prefix are one prefix.
        let host = width - u32::from(p.1);
        if host >= 128 {
            p.0 = 0;
        } else {
            p.0 = (p.0 >> host) << host;
        }
        max = max.max(Some(p.2));
    }
    prefixes.sort_unstable_by_key(|p| (p.1, p.0));
    if let Some(w) = prefixes
        .windows(2)
        .find(|w| w[0].0 == w[1].0 && w[0].1 == w[1].1)
    {
        return Err(LpmError::Duplicate(format!("{:#x}/{}", w[0].0, w[0].1)));
    }
    Ok(max)
}

/// IPv4 longest-prefix match (DIR-16-8-8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lpm4 {
    trie: Trie,
    prefixes: usize,
    max_value: Option<u32>,
}

impl Lpm4 {
    /// Builds the table from `(address, prefix length, value)`; host bits are ignored.
    pub fn new(prefixes: impl IntoIterator<Item = (u32, u8, u32)>) -> Result<Self, LpmError> {
        let mut list: Vec<(u128, u8, u32)> = prefixes
            .into_iter()
            .map(|(a, l, v)| (u128::from(a), l, v))
            .collect();
        let max_value = prepare(&mut list, 32)?;
        let mut trie = TrieBuilder::new(32);
        for &(key, len, value) in &list {
            trie.insert(key, u32::from(len), value + 1)?;
        }
        Ok(Lpm4 {
            trie: trie.finish(),
            prefixes: list.len(),
            max_value,
        })
    }

    /// The value of the longest prefix containing `addr` (host byte order).
    #[inline]
    pub fn lookup(&self, addr: u32) -> Option<u32> {
        let mut e = self.trie.root[(addr >> 16) as usize];
        if e & GROUP != 0 {
            let g = ((e & !GROUP) as usize) << STRIDE;
            e = self
                .trie
                .groups
                .get(g | ((addr >> 8) & 0xff) as usize)
                .copied()
                .unwrap_or(EMPTY);
            if e & GROUP != 0 {
                let g = ((e & !GROUP) as usize) << STRIDE;
                e = self
                    .trie
                    .groups
                    .get(g | (addr & 0xff) as usize)
                    .copied()
                    .unwrap_or(EMPTY);
            }
        }
        decode(e)
    }

    /// [`Self::lookup`] for many addresses: `out[i]` answers `addrs[i]` (extra elements
    /// of the longer slice are left alone). Up to [`BULK`] addresses at a time go through
    /// the trie level by level: every root entry, then every second-level group entry,
    /// then every third-level one, each group level prefetched for all addresses before
    /// the first is read.
    pub fn lookup_bulk(&self, addrs: &[u32], out: &mut [Option<u32>]) {
        for (a, o) in addrs.chunks(BULK).zip(out.chunks_mut(BULK)) {
            // Each address's entry, and where its next one is.
            let mut e = [(EMPTY, 0usize); BULK];
            let n = a.len().min(o.len());
            let (a, e) = (&a[..n], &mut e[..n]);
            // The root (16 bits, small enough to stay cached: read without a prefetch
            // pass), then the two 8-bit levels; an address whose entry is already a
            // value steps in place (no branch on which addresses go on).
            for ((e, at), &x) in e.iter_mut().zip(a) {
                *e = self.trie.root[(x >> 16) as usize];
                *at = Trie::child_index(*e, (x >> 8) as usize);
                self.trie.prefetch_at(*at);
            }
            for ((e, at), &x) in e.iter_mut().zip(a) {
                *e = self.trie.step_at(*e, *at);
                *at = Trie::child_index(*e, x as usize);
                self.trie.prefetch_at(*at);
            }
            for (oi, &(e, at)) in o.iter_mut().zip(e.iter()) {
                *oi = decode(self.trie.step_at(e, at));
            }
        }
    }

    /// Number of prefixes stored.
    pub fn len(&self) -> usize {
        self.prefixes
    }

    /// Whether the table holds no prefix.
    pub fn is_empty(&self) -> bool {
        self.prefixes == 0
    }

    /// The largest value stored, if any.
    pub fn max_value(&self) -> Option<u32> {
        self.max_value
    }

    /// Bytes of lookup memory (root and groups).
    pub fn memory_bytes(&self) -> usize {
        self.trie.bytes()
    }
}

/// Exact-match table of IPv6 host addresses: lines of [`HOST_WAYS`] addresses and their
/// values, one cache line each. An address lives in its home line ([`host_hash`]) or,
/// when that was full, in the next line with room; a line that a key had to pass over
/// says so (`spilled`), and only there does a probe go on. So a lookup, hit or miss,
/// reads its home line alone unless that line spilled (about 6 % of lines at the
/// table's load of 1.5 addresses a line), and a burst can prefetch exactly that line.
/// It needs no empty slot to end a probe, and lives in 2 MiB-aligned huge pages
/// ([`HugeSlice`]). An earlier layout of one address per slot with linear probing often
/// went on to a next line nobody had prefetched; `perf/NOTES.md` has the comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HostTable {
    lines: HugeSlice<HostLine>,
}

/// Addresses per line of the host table.
const HOST_WAYS: usize = 3;

/// One line of the host table: `values[w]` is [`HOST_EMPTY`] where way `w` is free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(64))]
struct HostLine {
    /// Low and high halves of the addresses (apart, so that the low ones, where host
    /// addresses differ most, are compared first).
    lo: [u64; HOST_WAYS],
    hi: [u64; HOST_WAYS],
    values: [u32; HOST_WAYS],
    /// Non-zero when some key, finding this line full, went on to a later one: a probe
    /// that reaches this line without finding its key goes on to the next.
    spilled: u32,
}

const _: () = assert!(std::mem::size_of::<HostLine>() == 64);

const HOST_EMPTY: u32 = u32::MAX;

const EMPTY_LINE: HostLine = HostLine {
    lo: [0; HOST_WAYS],
    hi: [0; HOST_WAYS],
    values: [HOST_EMPTY; HOST_WAYS],
    spilled: 0,
};

/// A 64-bit hash of a host address: its halves folded and multiplied (the product's
/// high bits, which [`HostTable::home_of`] uses, depend on every bit of the address).
#[inline]
fn host_hash(key: u128) -> u64 {
    let folded = (key as u64) ^ ((key >> 64) as u64).rotate_left(29);
    folded.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl HostTable {
    fn new(hosts: &[(u128, u32)]) -> Self {
        // 1.5 addresses a line on average (half the ways), never fewer lines than one:
        // there is always a free way, so every insertion ends.
        let n = (hosts.len() * 2 / HOST_WAYS + 1).max(1);
        let mut lines = vec![EMPTY_LINE; n];
        for &(k, v) in hosts {
            let mut i = Self::home_of(k, n);
            loop {
                let line = &mut lines[i];
                if let Some(w) = line.values.iter().position(|&x| x == HOST_EMPTY) {
                    line.lo[w] = k as u64;
                    line.hi[w] = (k >> 64) as u64;
                    line.values[w] = v;
                    break;
                }
                line.spilled = 1;
                i = if i + 1 == n { 0 } else { i + 1 };
            }
        }
        HostTable {
            lines: frozen(lines),
        }
    }

    /// The home line of `key` among `n` (the hash's high bits scaled to `0..n`).
    #[inline]
    fn home_of(key: u128, n: usize) -> usize {
        ((u128::from(host_hash(key)) * n as u128) >> 64) as usize
    }

    #[inline]
    fn prefetch(&self, key: u128) {
        if let Some(l) = self.lines.get(Self::home_of(key, self.lines.len())) {
            prefetch_line(l);
        }
    }

    #[inline]
    fn get(&self, key: u128) -> Option<u32> {
        let n = self.lines.len();
        let mut i = Self::home_of(key, n);
        let (lo, hi) = (key as u64, (key >> 64) as u64);
        for _ in 0..n {
            let line = self.lines.get(i)?;
            // The ways whose low halves match, found without branching on them; the
            // high half is compared at those alone (nearly always one, or none).
            let mut ways = 0u32;
            for (w, &k) in line.lo.iter().enumerate() {
                ways |= u32::from(k == lo) << w;
            }
            while ways != 0 {
                let w = ways.trailing_zeros() as usize;
                ways &= ways - 1;
                if let (Some(&h), Some(&v)) = (line.hi.get(w), line.values.get(w)) {
                    if h == hi && v != HOST_EMPTY {
                        return Some(v);
                    }
                }
            }
            if line.spilled == 0 {
                return None;
            }
            i = if i + 1 == n { 0 } else { i + 1 };
        }
        None
    }

    fn bytes(&self) -> usize {
        self.lines.len() * std::mem::size_of::<HostLine>()
    }
}

/// IPv6 longest-prefix match: a host-route hash in front of a 16-8-...-8 trie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lpm6 {
    hosts: HostTable,
    trie: Trie,
    prefixes: usize,
    max_value: Option<u32>,
}

impl Lpm6 {
    /// Builds the table from `(address, prefix length, value)`; host bits are ignored.
    pub fn new(prefixes: impl IntoIterator<Item = (u128, u8, u32)>) -> Result<Self, LpmError> {
        let mut list: Vec<(u128, u8, u32)> = prefixes.into_iter().collect();
        let max_value = prepare(&mut list, 128)?;
        let mut trie = TrieBuilder::new(128);
        let mut hosts = Vec::new();
        for &(key, len, value) in &list {
            if len == 128 {
                hosts.push((key, value));
            } else {
                trie.insert(key, u32::from(len), value + 1)?;
            }
        }
        Ok(Lpm6 {
            hosts: HostTable::new(&hosts),
            trie: trie.finish(),
            prefixes: list.len(),
            max_value,
        })
    }

    /// The value of the longest prefix containing `addr`.
    #[inline]
    pub fn lookup(&self, addr: u128) -> Option<u32> {
        if let Some(v) = self.hosts.get(addr) {
            return Some(v);
        }
        let mut e = self.trie.root[(addr >> 112) as usize];
        let mut consumed = ROOT_BITS;
        while e & GROUP != 0 && consumed < 128 {
            let g = ((e & !GROUP) as usize) << STRIDE;
            let idx = ((addr >> (128 - consumed - STRIDE)) & 0xff) as usize;
            e = self.trie.groups.get(g | idx).copied().unwrap_or(EMPTY);
            consumed += STRIDE;
        }
        decode(e)
    }

    /// [`Self::lookup`] for many addresses: `out[i]` answers `addrs[i]` (extra elements
    /// of the longer slice are left alone). Up to [`BULK`] addresses at a time: every host
    /// slot and root entry is prefetched, then the host table is probed, and the
    /// addresses it does not hold walk the trie one level at a time, each level
    /// prefetched for all of them before the first is read.
    pub fn lookup_bulk(&self, addrs: &[u128], out: &mut [Option<u32>]) {
        for (a, o) in addrs.chunks(BULK).zip(out.chunks_mut(BULK)) {
            let n = a.len().min(o.len());
            let (a, o) = (&a[..n], &mut o[..n]);
            for &x in a {
                self.hosts.prefetch(x);
                prefetch_line(&self.trie.root[(x >> 112) as usize]);
            }
            // Entries of the addresses still walking, with a bit per address.
            let mut e = [EMPTY; BULK];
            let mut walking = 0u64;
            for (i, ((oi, ei), &x)) in o.iter_mut().zip(e.iter_mut()).zip(a).enumerate() {
                *oi = self.hosts.get(x);
                if oi.is_none() {
                    *ei = self.trie.root[(x >> 112) as usize];
                    if *ei & GROUP != 0 {
                        self.trie.prefetch_at(Trie::child_index(
                            *ei,
                            (x >> (128 - ROOT_BITS - STRIDE)) as usize,
                        ));
                        walking |= 1 << i;
                    } else {
                        *oi = decode(*ei);
                    }
                }
            }
            let mut consumed = ROOT_BITS;
            while walking != 0 && consumed < 128 {
                let shift = 128 - consumed - STRIDE;
                let mut bits = walking;
                while bits != 0 {
                    let i = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    let (Some(ei), Some(&x)) = (e.get_mut(i), a.get(i)) else {
                        break;
                    };
                    *ei = self
                        .trie
                        .step_at(*ei, Trie::child_index(*ei, (x >> shift) as usize));
                    if *ei & GROUP != 0 && shift >= STRIDE {
                        self.trie
                            .prefetch_at(Trie::child_index(*ei, (x >> (shift - STRIDE)) as usize));
                    } else {
                        walking &= !(1 << i);
                        if let Some(oi) = o.get_mut(i) {
                            *oi = decode(*ei);
                        }
                    }
                }
                consumed += STRIDE;
            }
        }
    }

    /// Number of prefixes stored.
    pub fn len(&self) -> usize {
        self.prefixes
    }

    /// Whether the table holds no prefix.
    pub fn is_empty(&self) -> bool {
        self.prefixes == 0
    }

    /// The largest value stored, if any.
    pub fn max_value(&self) -> Option<u32> {
        self.max_value
    }

    /// Bytes of lookup memory (host hash, root and groups).
    pub fn memory_bytes(&self) -> usize {
        self.hosts.bytes() + self.trie.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn v4(s: &str) -> u32 {
        u32::from(s.parse::<std::net::Ipv4Addr>().expect("addr"))
    }

    fn v6(s: &str) -> u128 {
        u128::from(s.parse::<std::net::Ipv6Addr>().expect("addr"))
    }

    #[test]
    fn ipv4_longest_wins_at_every_level() {
        let t = Lpm4::new([
            (v4("0.0.0.0"), 0, 1),
            (v4("10.0.0.0"), 8, 2),
            (v4("10.1.0.0"), 16, 3),
            (v4("10.1.2.0"), 24, 4),
            (v4("10.1.2.128"), 25, 5),
            (v4("10.1.2.200"), 32, 6),
            (v4("10.1.3.0"), 20, 7),
        ])
        .expect("build");
        assert_eq!(t.lookup(v4("192.0.2.1")), Some(1));
        assert_eq!(t.lookup(v4("10.200.0.1")), Some(2));
        assert_eq!(t.lookup(v4("10.1.99.9")), Some(3));
        assert_eq!(t.lookup(v4("10.1.2.1")), Some(4));
        assert_eq!(t.lookup(v4("10.1.2.129")), Some(5));
        assert_eq!(t.lookup(v4("10.1.2.200")), Some(6));
        assert_eq!(t.lookup(v4("10.1.2.201")), Some(5));
        // 10.1.3.0/20 is really 10.1.0.0/20 after clearing host bits: it covers
        // 10.1.0.0-10.1.15.255 except the longer 10.1.2.0/24.
        assert_eq!(t.lookup(v4("10.1.3.1")), Some(7));
        assert_eq!(t.lookup(v4("10.1.16.1")), Some(3));
        assert_eq!(t.len(), 7);
        assert_eq!(t.max_value(), Some(7));
    }

    #[test]
    fn ipv4_without_default_misses() {
        let t = Lpm4::new([(v4("192.168.0.0"), 16, 9)]).expect("build");
        assert_eq!(t.lookup(v4("192.168.255.255")), Some(9));
        assert_eq!(t.lookup(v4("192.169.0.0")), None);
        assert_eq!(t.lookup(0), None);
    }

    #[test]
    fn duplicates_and_bad_input_are_rejected() {
        assert!(matches!(
            Lpm4::new([(v4("10.0.0.0"), 8, 1), (v4("10.9.9.9"), 8, 2)]),
            Err(LpmError::Duplicate(_))
        ));
        assert_eq!(
            Lpm4::new([(0, 33, 1)]),
            Err(LpmError::PrefixTooLong { len: 33, width: 32 })
        );
        assert_eq!(
            Lpm4::new([(0, 1, MAX_VALUE + 1)]),
            Err(LpmError::ValueTooLarge(MAX_VALUE + 1))
        );
        assert!(Lpm6::new([(0, 129, 1)]).is_err());
    }

    #[test]
    fn ipv6_hosts_and_prefixes() {
        let t = Lpm6::new([
            (0, 0, 1),
            (v6("2001:db8::"), 32, 2),
            (v6("2001:db8:bad::"), 48, 3),
            (v6("2001:db8:bad::1"), 128, 4),
            (v6("2001:db8:bad::fe"), 127, 5),
            (v6("fd00::"), 8, 6),
        ])
        .expect("build");
        assert_eq!(t.lookup(v6("::1")), Some(1));
        assert_eq!(t.lookup(v6("2001:db8:1::1")), Some(2));
        assert_eq!(t.lookup(v6("2001:db8:bad::2")), Some(3));
        assert_eq!(t.lookup(v6("2001:db8:bad::1")), Some(4));
        assert_eq!(t.lookup(v6("2001:db8:bad::ff")), Some(5));
        assert_eq!(t.lookup(v6("2001:db8:bad::fe")), Some(5));
        assert_eq!(t.lookup(v6("2001:db8:bad::fd")), Some(3));
        assert_eq!(t.lookup(v6("fd12:3456::1")), Some(6));
        assert_eq!(t.lookup(v6("fe80::1")), Some(1));
    }

    /// Many host routes (pod-like runs, and scattered ones), so that lines fill and
    /// spill: every host is found, alone and in bulk, and addresses beside them are not
    /// (they get the covering prefix), including `::` as a host and as a miss.
    #[test]
    fn ipv6_host_table_hits_misses_and_spills() {
        let mut rng = 0x9e37_79b9_u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let base = v6("2001:db8:42::");
        let mut hosts: Vec<u128> = (0..6000u128).map(|i| base + 2 * i).collect();
        hosts.extend((0..6000).map(|_| (u128::from(next()) << 64) | u128::from(next())));
        // Addresses alike in their low halves: a line's ways all pass the low-half test.
        hosts.extend((0..3000).map(|_| (u128::from(next()) << 64) | 0x53));
        hosts.push(0);
        hosts.sort_unstable();
        hosts.dedup();
        let list: Vec<(u128, u8, u32)> = std::iter::once((v6("2001:db8::"), 32, 1))
            .chain(std::iter::once((0, 0, 2)))
            .chain(hosts.iter().zip(3..).map(|(&h, v)| (h, 128, v)))
            .collect();
        let t = Lpm6::new(list.clone()).expect("build");
        let spilled = t.hosts.lines.iter().filter(|l| l.spilled != 0).count();
        assert!(spilled > 0, "no line spilled: the probe chain is untested");
        let mut probes: Vec<u128> = Vec::new();
        for &h in &hosts {
            probes.extend([h, h.wrapping_add(1), h ^ (1 << 64)]);
        }
        let expected: Vec<Option<u32>> = probes.iter().map(|&p| naive(&list, 128, p)).collect();
        for (&p, &e) in probes.iter().zip(&expected) {
            assert_eq!(t.lookup(p), e, "{p:#x}");
        }
        let mut out = vec![None; probes.len()];
        t.lookup_bulk(&probes, &mut out);
        assert_eq!(out, expected);
        assert_eq!(t.lookup(0), Some(3));
        let without_zero =
            Lpm6::new(list.iter().copied().filter(|e| *e != (0, 128, 3))).expect("build");
        assert_eq!(without_zero.lookup(0), Some(2));
    }

    /// Naive longest match over the prefix list.
    fn naive(list: &[(u128, u8, u32)], width: u32, addr: u128) -> Option<u32> {
        list.iter()
            .filter(|(k, l, _)| {
                let host = width - u32::from(*l);
                host >= 128 || (k >> host) == (addr >> host)
            })
            .max_by_key(|(_, l, _)| *l)
            .map(|(_, _, v)| *v)
    }

    fn dedup(list: Vec<(u128, u8, u32)>, width: u32) -> Vec<(u128, u8, u32)> {
        let mut seen = std::collections::BTreeSet::new();
        list.into_iter()
            .filter(|(k, l, _)| {
                let host = width - u32::from(*l);
                let k = if host >= 128 { 0 } else { (k >> host) << host };
                seen.insert((k, *l))
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn ipv4_matches_naive(
            raw in proptest::collection::vec((any::<u32>(), 0u8..=32, 0u32..1000), 0..40),
            probes in proptest::collection::vec(any::<u32>(), 64),
        ) {
            // Cluster the prefixes so that they nest and overlap often.
            let list = dedup(raw.into_iter().map(|(a, l, v)| (u128::from(a & 0xff0f_f0ff), l, v)).collect(), 32);
            let t = Lpm4::new(list.iter().map(|&(a, l, v)| (a as u32, l, v))).expect("build");
            for &p in &probes {
                let p = p & 0xff0f_f0ff;
                prop_assert_eq!(t.lookup(p), naive(&list, 32, u128::from(p)));
            }
            for &(a, _, _) in &list {
                prop_assert_eq!(t.lookup(a as u32), naive(&list, 32, a));
            }
            // The bulk form answers like the single one, over more than one round.
            let all: Vec<u32> = probes.iter().map(|p| p & 0xff0f_f0ff).chain(list.iter().map(|&(a, _, _)| a as u32)).collect();
            let mut out = vec![Some(u32::MAX); all.len()];
            t.lookup_bulk(&all, &mut out);
            for (&a, &o) in all.iter().zip(&out) {
                prop_assert_eq!(o, t.lookup(a));
            }
        }

        #[test]
        fn ipv6_matches_naive(
            raw in proptest::collection::vec((any::<u128>(), 0u8..=128, 0u32..1000), 0..40),
            probes in proptest::collection::vec(any::<u128>(), 64),
        ) {
            let squash = |a: u128| a & 0xffff_0000_0000_00ff_0000_0000_0000_f00f;
            let list = dedup(raw.into_iter().map(|(a, l, v)| (squash(a), l, v)).collect(), 128);
            let t = Lpm6::new(list.clone()).expect("build");
            for &p in &probes {
                let p = squash(p);
                prop_assert_eq!(t.lookup(p), naive(&list, 128, p));
            }
            for &(a, _, _) in &list {
                prop_assert_eq!(t.lookup(a), naive(&list, 128, a));
            }
            let all: Vec<u128> = probes.iter().map(|&p| squash(p)).chain(list.iter().map(|&(a, _, _)| a)).collect();
            let mut out = vec![Some(u32::MAX); all.len()];
            t.lookup_bulk(&all, &mut out);
            for (&a, &o) in all.iter().zip(&out) {
                prop_assert_eq!(o, t.lookup(a));
            }
        }
    }
}
