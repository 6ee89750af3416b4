//! The host matcher: a compiled, immutable map from host-name patterns to values (a
//! listener's routes), looked up with the SNI or `Host` of a connection.
//!
//! ## Semantics
//!
//! Patterns ([`HostPattern`]) are exact names, wildcards `*.suffix`, or the catch-all
//! (`*`, or no hostname). A name matches (DESIGN §6, Gateway API, Envoy):
//!
//! - an exact pattern equal to it;
//! - a wildcard `*.s` when the name is `p.s` with `p` non-empty: `*.example.com` matches
//!   `a.example.com` and `a.b.example.com`, never `example.com`;
//! - the catch-all, always.
//!
//! ASCII case is ignored on both sides. Names longer than 253 bytes (not DNS names) match
//! only the catch-all.
//!
//! [`HostMatcher::find`] returns the single most specific match: the exact pattern, else
//! the wildcard with the longest suffix, else the catch-all. **No backtracking** (Envoy's
//! rule for server names): the most specific matching pattern is the answer even if the
//! caller then finds its value unusable — for instance because the route behind
//! `*.example.com` has nothing for this connection's port or ALPN while `*` would have.
//! The matcher offers no "next less specific match" on purpose; callers must treat the
//! selected pattern's verdict as final (reject, not fall through). A pattern that exists
//! at several levels (say `foo.example.com` exact and `*.foo.example.com`) is two patterns:
//! the exact one never matches `bar.foo.example.com`, and the lookup goes on to the
//! wildcard — that is not backtracking, because no more specific pattern matched.
//!
//! ## Structure and cost
//!
//! One open-addressing hash table keyed by name text holds every exact name and every
//! wildcard suffix; a slot has room for both (an exact value and a wildcard value), so
//! `a.example.com` and `*.a.example.com` share one. A lookup:
//!
//! 1. copies the name lowercased into a stack buffer (no allocation) while scanning its
//!    labels right to left and extending one hash label by label, so that the hash of
//!    every suffix that starts at a label boundary is known after one pass (the hash of
//!    a name is defined label-wise from the right, so `example.com` hashes the same alone
//!    and as the tail of `a.example.com`);
//! 2. probes the whole name for an exact pattern;
//! 3. probes the suffixes after each dot, longest first, for a wildcard pattern, stopping
//!    at the first hit;
//! 4. falls back to the catch-all.
//!
//! So a lookup costs one pass over the name and at most `labels` probes, whatever the
//! number of patterns. (Names with more than 16 label boundaries — only possible with
//! many tiny or empty labels — hash each suffix on its own: slower, same answer.) The hash
//! is a folded-multiply over 8-byte words, seeded at random per build; keys come from the
//! control plane, queries only choose which slot they probe. What keeps the cost flat in
//! practice is how little memory a probe
//! touches, since a large table lives far from the core:
//!
//! - a blocked Bloom filter (two bits of one 64-bit word per key, ~8 bits per key: 1 MiB
//!   for a million names) answers most probes for suffixes that are not keys, without
//!   touching the table;
//! - the table is kept at most half full with linear probing; a slot is 32 bytes and holds
//!   a 24-bit hash tag with the key's length, both values, and the key itself when it is at
//!   most 20 bytes (else its first 16 bytes and where the rest lies in an arena), so a hit
//!   on a short name is verified within one cache line.
//!
//! Beyond that, a big table costs what the memory system charges: a working set of names
//! that outgrows the TLB's reach pays page walks (`perf`'s `bench_inspect` shows it);
//! hugepage-backed memory is the cure, not a different algorithm.
//!
//! Building may allocate and fails on duplicate patterns ([`BuildError`]): the control
//! plane decides which of two claims on a name wins, never this table.

use core::fmt;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use crate::inspect::name::MAX_NAME_LEN;

/// A host-name pattern.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// An exact name (lowercased).
    Exact(String),
    /// `*.suffix`: holds the suffix (lowercased), without `*.`.
    Wildcard(String),
    /// The catch-all: `*` or no hostname.
    Any,
}

/// Why a pattern was refused.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PatternError {
    /// An empty label (`a..b`, a leading or trailing dot, `*.`), or an empty pattern where
    /// one is required.
    EmptyLabel,
    /// Longer than 253 bytes (the suffix, for a wildcard).
    TooLong,
    /// A label longer than 63 bytes.
    LabelTooLong,
    /// `*` anywhere but as the whole first label.
    MisplacedWildcard,
    /// A byte that is not printable ASCII; holds it.
    InvalidByte(u8),
}

impl fmt::Display for PatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PatternError::EmptyLabel => f.write_str("empty label"),
            PatternError::TooLong => write!(f, "longer than {MAX_NAME_LEN} bytes"),
            PatternError::LabelTooLong => f.write_str("label longer than 63 bytes"),
            PatternError::MisplacedWildcard => {
                f.write_str("'*' is only allowed as the whole first label")
            }
            PatternError::InvalidByte(b) => write!(f, "invalid byte 0x{b:02x}"),
        }
    }
}

impl std::error::Error for PatternError {}

impl HostPattern {
    /// Parses `*` or the empty string (catch-all), `*.suffix` (wildcard) or a name
    /// (exact). Names are lowercased; labels must be non-empty and at most 63 bytes of
    /// printable ASCII (letters, digits, `-`, `_`, and `:`/`[`/`]` so that IP literals can
    /// be exact patterns).
    pub fn parse(pattern: &str) -> Result<HostPattern, PatternError> {
        match pattern {
            "" | "*" => Ok(HostPattern::Any),
            _ => {
                if let Some(suffix) = pattern.strip_prefix("*.") {
                    check_name(suffix)?;
                    Ok(HostPattern::Wildcard(suffix.to_ascii_lowercase()))
                } else {
                    check_name(pattern)?;
                    Ok(HostPattern::Exact(pattern.to_ascii_lowercase()))
                }
            }
        }
    }

    /// Whether `name` matches this pattern (the rule of the [module docs](self), written
    /// plainly; the compiled [`HostMatcher`] must agree with it).
    pub fn matches(&self, name: &[u8]) -> bool {
        match self {
            HostPattern::Any => true,
            _ if name.len() > MAX_NAME_LEN => false,
            HostPattern::Exact(e) => name.eq_ignore_ascii_case(e.as_bytes()),
            HostPattern::Wildcard(s) => {
                let s = s.as_bytes();
                name.len() > s.len() + 1
                    && name[name.len() - s.len() - 1] == b'.'
                    && name[name.len() - s.len()..].eq_ignore_ascii_case(s)
            }
        }
    }

    /// How specific the pattern is: exact beats every wildcard, a longer wildcard suffix
    /// beats a shorter one, the catch-all is last. Larger is more specific.
    pub fn specificity(&self) -> usize {
        match self {
            HostPattern::Exact(_) => usize::MAX,
            HostPattern::Wildcard(s) => 1 + s.len(),
            HostPattern::Any => 0,
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Exact(e) => f.write_str(e),
            HostPattern::Wildcard(s) => write!(f, "*.{s}"),
            HostPattern::Any => f.write_str("*"),
        }
    }
}

fn check_name(name: &str) -> Result<(), PatternError> {
    if name.len() > MAX_NAME_LEN {
        return Err(PatternError::TooLong);
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(PatternError::EmptyLabel);
        }
        if label.len() > 63 {
            return Err(PatternError::LabelTooLong);
        }
        for b in label.bytes() {
            match b {
                b'*' => return Err(PatternError::MisplacedWildcard),
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b':' | b'[' | b']' => {}
                _ => return Err(PatternError::InvalidByte(b)),
            }
        }
    }
    Ok(())
}

/// Why a matcher could not be built.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BuildError {
    /// The same pattern twice; holds its index in the input and the pattern.
    Duplicate {
        /// Position of the second occurrence in the input.
        index: usize,
        /// The pattern.
        pattern: String,
    },
    /// A pattern text that does not parse ([`HostMatcher::from_strs`]).
    Pattern {
        /// Position of the pattern in the input.
        index: usize,
        /// Why it does not parse.
        error: PatternError,
    },
    /// More patterns than the table can index (2^31), or more than 4 GiB of names.
    TooMany,
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Duplicate { index, pattern } => {
                write!(
                    f,
                    "host pattern {pattern:?} given twice (second at #{index})"
                )
            }
            BuildError::Pattern { index, error } => {
                write!(f, "host pattern #{index}: {error}")
            }
            BuildError::TooMany => f.write_str("too many host patterns"),
        }
    }
}

impl std::error::Error for BuildError {}

/// Which kind of pattern a lookup matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatchKind {
    /// An exact name.
    Exact,
    /// A wildcard; holds the length of its suffix (`example.com` for `*.example.com`).
    Wildcard {
        /// Bytes in the matched suffix.
        suffix_len: usize,
    },
    /// The catch-all.
    Any,
}

/// The result of [`HostMatcher::find`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Match<'m, V> {
    /// The matched pattern's value.
    pub value: &'m V,
    /// What matched.
    pub kind: MatchKind,
    /// The matched pattern's position in the build input.
    pub index: usize,
}

/// No value in this half of a slot.
const NONE: u32 = u32::MAX;

/// Key bytes kept in the slot itself. Keys up to this long are compared without leaving
/// the slot's cache line; longer keys keep a [`PREFIX`]-byte prefix and the arena offset
/// of the rest here.
const INLINE: usize = 20;
/// Prefix of a long key kept in its slot.
const PREFIX: usize = INLINE - 4;

/// One table slot (32 bytes, two per cache line). `tag == 0` marks an empty slot;
/// otherwise its low 8 bits are the key's length (1..=253) and its high 24 bits come from
/// the key's hash.
#[derive(Clone, Copy, Debug)]
struct Slot {
    tag: u32,
    /// Value index of the exact pattern with this name, or [`NONE`].
    exact: u32,
    /// Value index of the wildcard pattern with this suffix, or [`NONE`].
    wild: u32,
    /// The key if it is at most [`INLINE`] bytes; else its first [`PREFIX`] bytes and the
    /// little-endian arena offset of the remaining bytes.
    key: [u8; INLINE],
}

const EMPTY: Slot = Slot {
    tag: 0,
    exact: NONE,
    wild: NONE,
    key: [0; INLINE],
};

/// The compiled host matcher (see the [module docs](self)).
pub struct HostMatcher<V> {
    slots: Box<[Slot]>,
    mask: usize,
    /// A blocked Bloom filter over the keys' hashes (two bits in one 64-bit word per key,
    /// about 8 bits per key): a probe for a name that is not a key is usually answered
    /// here, in an array small enough to stay in cache, without touching the table.
    filter: Box<[u64]>,
    filter_mask: usize,
    /// Tails (past [`PREFIX`]) of keys longer than [`INLINE`].
    arena: Box<[u8]>,
    values: Box<[V]>,
    /// Input position of each value (values are stored in input order, so identity).
    any: u32,
    seed: u64,
    exact_count: usize,
    wildcard_count: usize,
}

/// Mixes `v` into `h` (a 64x64->128 multiply folded to 64 bits).
#[inline]
fn mix(h: u64, v: u64) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let r = u128::from(h ^ v) * u128::from(K ^ v.rotate_left(32));
    (r as u64) ^ ((r >> 64) as u64)
}

/// Extends hash `h` of a suffix by the label to its left (`label` holds no dot).
#[inline]
fn hash_label(mut h: u64, label: &[u8]) -> u64 {
    h = mix(h, label.len() as u64 ^ 0x5bd1_e995_0000_0000);
    let mut chunks = label.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = mix(h, u64::from_le_bytes(w));
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        let mut w = [0u8; 8];
        w[..tail.len()].copy_from_slice(tail);
        h = mix(h, u64::from_le_bytes(w));
    }
    h
}

/// The hash of a whole key: its labels from the right, starting from `seed`.
fn hash_key(seed: u64, key: &[u8]) -> u64 {
    key.rsplit(|&b| b == b'.').fold(seed, hash_label)
}

#[inline]
fn tag(hash: u64, len: usize) -> u32 {
    // `len` is 1..=253 for every key and probe that gets here.
    ((hash >> 32) as u32 & 0xffff_ff00) | (len as u32 & 0xff)
}

/// The filter word and its two bits for a hash (bits independent of the tag's).
#[inline]
fn filter_bits(hash: u64, filter_mask: usize) -> (usize, u64) {
    let word = (hash as usize) & filter_mask;
    let bits = (1u64 << ((hash >> 26) & 63)) | (1u64 << ((hash >> 32) & 63));
    (word, bits)
}

impl<V> HostMatcher<V> {
    /// Compiles `(pattern, value)` pairs. Fails on a pattern given twice.
    pub fn build<I>(patterns: I) -> Result<HostMatcher<V>, BuildError>
    where
        I: IntoIterator<Item = (HostPattern, V)>,
    {
        let mut values = Vec::new();
        let mut any = NONE;
        // (key, is_wildcard, value id) for every named pattern; sorted below so that equal
        // keys are adjacent (duplicates, and exact + wildcard sharing a slot).
        let mut named: Vec<(String, bool, u32)> = Vec::new();
        let mut duplicate_at: Option<(usize, String)> = None;
        for (index, (pattern, value)) in patterns.into_iter().enumerate() {
            let id = u32::try_from(index)
                .ok()
                .filter(|&i| i < NONE >> 1)
                .ok_or(BuildError::TooMany)?;
            match pattern {
                HostPattern::Any => {
                    if any != NONE && duplicate_at.is_none() {
                        duplicate_at = Some((index, "*".to_string()));
                    }
                    any = id;
                }
                HostPattern::Exact(mut name) => {
                    name.make_ascii_lowercase();
                    named.push((name, false, id));
                }
                HostPattern::Wildcard(mut name) => {
                    name.make_ascii_lowercase();
                    named.push((name, true, id));
                }
            }
            values.push(value);
        }
        named.sort_unstable();
        // Report the earliest second occurrence in input order.
        for pair in named.windows(2) {
            let ((k1, w1, _), (k2, w2, id2)) = (&pair[0], &pair[1]);
            let earlier = match &duplicate_at {
                Some((i, _)) => (*id2 as usize) < *i,
                None => true,
            };
            if k1 == k2 && w1 == w2 && earlier {
                let text = if *w2 { format!("*.{k2}") } else { k2.clone() };
                duplicate_at = Some((*id2 as usize, text));
            }
        }
        if let Some((index, pattern)) = duplicate_at {
            return Err(BuildError::Duplicate { index, pattern });
        }
        let exact_count = named.iter().filter(|(_, w, _)| !w).count();
        let wildcard_count = named.len() - exact_count;

        let mut keys = 0usize;
        let mut arena_len = 0usize;
        for (i, (k, _, _)) in named.iter().enumerate() {
            if i == 0 || named[i - 1].0 != *k {
                keys += 1;
                arena_len += k.len().saturating_sub(PREFIX);
            }
        }
        if u32::try_from(arena_len).is_err() {
            return Err(BuildError::TooMany);
        }
        let capacity = (keys * 2).next_power_of_two().max(8);
        let mask = capacity - 1;
        let mut slots = vec![EMPTY; capacity].into_boxed_slice();
        let filter_words = (keys / 8).next_power_of_two().max(1);
        let filter_mask = filter_words - 1;
        let mut filter = vec![0u64; filter_words].into_boxed_slice();
        let mut arena = Vec::with_capacity(arena_len);
        let seed = RandomState::new().hash_one(0x736c_7569_6365u64);
        let mut last: Option<(&str, usize)> = None; // previous key and its slot
        for (key, wild, id) in &named {
            let i = match last {
                Some((k, i)) if k == key.as_str() => i,
                _ => {
                    let bytes = key.as_bytes();
                    let h = hash_key(seed, bytes);
                    let (word, bits) = filter_bits(h, filter_mask);
                    filter[word] |= bits;
                    let mut i = (h as usize) & mask;
                    while slots[i].tag != 0 {
                        i = (i + 1) & mask;
                    }
                    let mut inline = [0u8; INLINE];
                    if bytes.len() <= INLINE {
                        inline[..bytes.len()].copy_from_slice(bytes);
                    } else {
                        inline[..PREFIX].copy_from_slice(&bytes[..PREFIX]);
                        // Checked above: the arena fits in u32.
                        inline[PREFIX..].copy_from_slice(&(arena.len() as u32).to_le_bytes());
                        arena.extend_from_slice(&bytes[PREFIX..]);
                    }
                    slots[i] = Slot {
                        tag: tag(h, bytes.len()),
                        exact: NONE,
                        wild: NONE,
                        key: inline,
                    };
                    i
                }
            };
            if *wild {
                slots[i].wild = *id;
            } else {
                slots[i].exact = *id;
            }
            last = Some((key.as_str(), i));
        }
        Ok(HostMatcher {
            slots,
            mask,
            filter,
            filter_mask,
            arena: arena.into_boxed_slice(),
            values: values.into_boxed_slice(),
            any,
            seed,
            exact_count,
            wildcard_count,
        })
    }

    /// Compiles `(pattern text, value)` pairs, parsing each with [`HostPattern::parse`].
    pub fn from_strs<'s, I>(patterns: I) -> Result<HostMatcher<V>, BuildError>
    where
        I: IntoIterator<Item = (&'s str, V)>,
    {
        let mut parsed = Vec::new();
        for (index, (p, v)) in patterns.into_iter().enumerate() {
            let pattern =
                HostPattern::parse(p).map_err(|error| BuildError::Pattern { index, error })?;
            parsed.push((pattern, v));
        }
        HostMatcher::build(parsed)
    }

    /// The value of the most specific pattern matching `name` (see the
    /// [module docs](self)). `name` may be in any case. No allocation.
    pub fn lookup(&self, name: &[u8]) -> Option<&V> {
        self.find(name).map(|m| m.value)
    }

    /// Like [`HostMatcher::lookup`], and says what matched.
    pub fn find(&self, name: &[u8]) -> Option<Match<'_, V>> {
        if !name.is_empty() && name.len() <= MAX_NAME_LEN && self.has_names() {
            if let Some(m) = self.find_name(name) {
                return Some(m);
            }
        }
        self.value(self.any, MatchKind::Any)
    }

    fn has_names(&self) -> bool {
        self.exact_count + self.wildcard_count > 0
    }

    fn value(&self, id: u32, kind: MatchKind) -> Option<Match<'_, V>> {
        let index = id as usize;
        self.values
            .get(index)
            .map(|value| Match { value, kind, index })
    }

    fn find_name(&self, name: &[u8]) -> Option<Match<'_, V>> {
        /// Suffix hashes kept from the one right-to-left pass; names with more dots (with
        /// a non-empty part before them) take the slow path.
        const KEPT: usize = 16;
        let len = name.len();
        let mut buf = [0u8; MAX_NAME_LEN];
        let lower = buf.get_mut(..len)?;
        // Right to left: lowercase, and hash each suffix that starts after a dot with a
        // non-empty part before it (a wildcard needs one). `hashes[k]` is the hash of the
        // k-th shortest such suffix.
        let mut hashes = [0u64; KEPT];
        let mut count = 0;
        let mut h = self.seed;
        let mut end = len;
        for i in (0..len).rev() {
            let b = name[i].to_ascii_lowercase();
            lower[i] = b;
            if b == b'.' {
                h = hash_label(h, &lower[i + 1..end]);
                if i >= 1 {
                    if let Some(slot) = hashes.get_mut(count) {
                        *slot = h;
                    }
                    count += 1;
                }
                end = i;
            }
        }
        let full = hash_label(h, &lower[..end]);
        let lower = &*lower;

        if self.exact_count > 0 {
            if let Some(slot) = self.probe(full, lower) {
                if slot.exact != NONE {
                    return self.value(slot.exact, MatchKind::Exact);
                }
            }
        }
        if self.wildcard_count == 0 {
            return None;
        }
        // Longest suffix first: dots left to right (skipping a dot at 0), hashes in reverse
        // scan order.
        let mut starts = lower
            .iter()
            .enumerate()
            .skip(1)
            .filter(|&(_, &b)| b == b'.')
            .map(|(i, _)| i + 1);
        let wildcard = |start: usize, h: u64| {
            let suffix = lower.get(start..)?;
            let slot = self.probe(h, suffix)?;
            (slot.wild != NONE).then(|| {
                let kind = MatchKind::Wildcard {
                    suffix_len: suffix.len(),
                };
                self.value(slot.wild, kind)
            })?
        };
        if count <= KEPT {
            starts
                .zip(hashes[..count].iter().rev())
                .find_map(|(start, &h)| wildcard(start, h))
        } else {
            // More label boundaries than kept hashes (a name with many short or empty
            // labels): hash each suffix on its own.
            starts.find_map(|start| {
                let suffix = lower.get(start..)?;
                wildcard(start, hash_key(self.seed, suffix))
            })
        }
    }

    /// The slot whose key is `key` (lowercase, 1..=253 bytes), if any.
    #[inline]
    fn probe(&self, hash: u64, key: &[u8]) -> Option<&Slot> {
        if key.is_empty() {
            return None;
        }
        let (word, bits) = filter_bits(hash, self.filter_mask);
        if self.filter.get(word)? & bits != bits {
            return None;
        }
        let want = tag(hash, key.len());
        let mut i = (hash as usize) & self.mask;
        // The table is at most half full, so an empty slot ends every probe sequence.
        loop {
            let slot = self.slots.get(i)?;
            if slot.tag == 0 {
                return None;
            }
            if slot.tag == want && self.key_is(slot, key) {
                return Some(slot);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Whether `slot` holds `key` (whose length the tag already matched).
    #[inline]
    fn key_is(&self, slot: &Slot, key: &[u8]) -> bool {
        if key.len() <= INLINE {
            return slot.key.get(..key.len()) == Some(key);
        }
        let [prefix @ .., a, b, c, d] = slot.key;
        if prefix[..] != key[..PREFIX] {
            return false;
        }
        let start = u32::from_le_bytes([a, b, c, d]) as usize;
        let rest = &key[PREFIX..];
        self.arena.get(start..start + rest.len()) == Some(rest)
    }

    /// How many patterns (exact, wildcard and catch-all) the matcher holds.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the matcher holds no pattern at all.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The values, in build-input order.
    pub fn values(&self) -> &[V] {
        &self.values
    }

    /// Bytes used by the table itself (slots, filter and key arena; not the values).
    pub fn table_bytes(&self) -> usize {
        self.slots.len() * core::mem::size_of::<Slot>() + self.filter.len() * 8 + self.arena.len()
    }
}

impl<V> fmt::Debug for HostMatcher<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostMatcher")
            .field("exact", &self.exact_count)
            .field("wildcard", &self.wildcard_count)
            .field("catch_all", &(self.any != NONE))
            .field("slots", &self.slots.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::hostname::narrow_route_hostnames;
    use proptest::prelude::*;

    fn matcher(patterns: &[&str]) -> HostMatcher<usize> {
        HostMatcher::from_strs(patterns.iter().copied().zip(0..)).unwrap()
    }

    /// The index of the pattern a name selects, via the matcher.
    fn pick(m: &HostMatcher<usize>, name: &str) -> Option<usize> {
        m.lookup(name.as_bytes()).copied()
    }

    #[test]
    fn precedence_exact_then_longest_wildcard_then_catch_all() {
        let m = matcher(&[
            "*",
            "*.com",
            "*.example.com",
            "www.example.com",
            "*.b.example.com",
        ]);
        assert_eq!(pick(&m, "www.example.com"), Some(3));
        assert_eq!(pick(&m, "WWW.Example.COM"), Some(3), "case is ignored");
        assert_eq!(pick(&m, "a.example.com"), Some(2));
        assert_eq!(pick(&m, "a.b.example.com"), Some(4));
        assert_eq!(pick(&m, "x.a.b.example.com"), Some(4));
        assert_eq!(
            pick(&m, "b.example.com"),
            Some(2),
            "*.b.example.com needs one more label"
        );
        assert_eq!(
            pick(&m, "example.com"),
            Some(1),
            "*.example.com never matches example.com"
        );
        assert_eq!(pick(&m, "com"), Some(0));
        assert_eq!(pick(&m, "example.org"), Some(0));
        assert_eq!(pick(&m, ""), Some(0));
        let found = m.find(b"q.b.example.com").unwrap();
        assert_eq!(found.kind, MatchKind::Wildcard { suffix_len: 13 });
        assert_eq!(found.index, 4);
        assert_eq!(m.find(b"www.example.com").unwrap().kind, MatchKind::Exact);
        assert_eq!(m.find(b"zzz").unwrap().kind, MatchKind::Any);
        assert_eq!(m.len(), 5);
    }

    #[test]
    fn without_catch_all_nothing_else_matches() {
        let m = matcher(&["a.example.com", "*.example.com"]);
        assert_eq!(pick(&m, "example.com"), None);
        assert_eq!(pick(&m, "a.example.org"), None);
        assert_eq!(
            pick(&m, ".example.com"),
            None,
            "empty first label is not a label"
        );
        assert_eq!(
            pick(&m, "a.example.com."),
            None,
            "callers strip the trailing dot"
        );
        assert_eq!(pick(&m, "a..example.com"), Some(1), "p = 'a.' is non-empty");
        let empty: HostMatcher<usize> = HostMatcher::build(Vec::new()).unwrap();
        assert!(empty.is_empty());
        assert_eq!(empty.lookup(b"a.b"), None);
    }

    #[test]
    fn long_keys_with_equal_prefixes() {
        // Keys longer than INLINE share their first PREFIX bytes; the arena tails decide.
        let a = "abcdefghijklmnop-first.example.com";
        let b = "abcdefghijklmnop-second.example.com";
        let twenty = "abcdefghij.example.o"; // exactly INLINE bytes
        let twenty_one = "abcdefghij.example.or"; // one more
        assert_eq!((twenty.len(), twenty_one.len()), (INLINE, INLINE + 1));
        let m = matcher(&[
            a,
            b,
            twenty,
            twenty_one,
            "*.abcdefghijklmnop-first.example.com",
        ]);
        assert_eq!(pick(&m, a), Some(0));
        assert_eq!(pick(&m, &b.to_uppercase()), Some(1));
        assert_eq!(pick(&m, twenty), Some(2));
        assert_eq!(pick(&m, twenty_one), Some(3));
        assert_eq!(pick(&m, "abcdefghijklmnop-third.example.com"), None);
        assert_eq!(pick(&m, "abcdefghijklmnop-firsT.example.con"), None);
        assert_eq!(pick(&m, &format!("x.{a}")), Some(4));
    }

    #[test]
    fn exact_and_wildcard_on_the_same_name() {
        let m = matcher(&["foo.example.com", "*.foo.example.com", "*.example.com"]);
        assert_eq!(pick(&m, "foo.example.com"), Some(0));
        assert_eq!(pick(&m, "bar.foo.example.com"), Some(1));
        assert_eq!(pick(&m, "bar.example.com"), Some(2));
    }

    #[test]
    fn long_names_match_only_the_catch_all() {
        let long = format!("{}.example.com", "a.".repeat(125));
        assert!(long.len() > MAX_NAME_LEN);
        let m = matcher(&["*.example.com", "*"]);
        assert_eq!(pick(&m, &long), Some(1));
        let m = matcher(&["*.example.com"]);
        assert_eq!(pick(&m, &long), None);
        // The longest name that fits still matches.
        let fits = format!("{}.example.com", "a".repeat(MAX_NAME_LEN - 12));
        assert_eq!(fits.len(), MAX_NAME_LEN);
        assert_eq!(pick(&m, &fits), Some(0));
        // 126 labels before the suffix: every dot is a probe point.
        let many = format!("{}example.com", "a.".repeat(121));
        assert!(many.len() <= MAX_NAME_LEN);
        assert_eq!(pick(&m, &many), Some(0));
        // A name of dots only: nothing but a catch-all could match.
        assert_eq!(pick(&m, &".".repeat(253)), None);
        // More dots than the lookup keeps suffix hashes for (slow path): the matchable
        // suffix on the right is still found, and the longest suffix still wins.
        let dotty = format!("{}a.example.com", ".".repeat(200));
        assert_eq!(pick(&m, &dotty), Some(0));
        let m = matcher(&[
            "*.example.com",
            "*.a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.example.com",
        ]);
        let deep = "x.y.a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.example.com";
        assert_eq!(pick(&m, deep), Some(1));
        assert_eq!(pick(&m, &deep[4..]), Some(0));
    }

    #[test]
    fn build_errors() {
        let dup = HostMatcher::from_strs([("a.com", 0), ("*.a.com", 1), ("A.COM", 2)]);
        assert_eq!(
            dup.unwrap_err(),
            BuildError::Duplicate {
                index: 2,
                pattern: "a.com".into()
            }
        );
        let dup = HostMatcher::from_strs([("*", 0), ("", 1)]);
        assert!(matches!(dup, Err(BuildError::Duplicate { index: 1, .. })));
        let cases: &[(&str, PatternError)] = &[
            ("a..com", PatternError::EmptyLabel),
            ("*.", PatternError::EmptyLabel),
            (".a.com", PatternError::EmptyLabel),
            ("a.com.", PatternError::EmptyLabel),
            ("*a.com", PatternError::MisplacedWildcard),
            ("a.*.com", PatternError::MisplacedWildcard),
            ("*.*.com", PatternError::MisplacedWildcard),
            ("a b.com", PatternError::InvalidByte(b' ')),
        ];
        for (p, e) in cases {
            assert_eq!(HostPattern::parse(p), Err(e.clone()), "{p}");
            assert_eq!(
                HostMatcher::<u8>::from_strs([("ok.com", 0), (p, 1)]).unwrap_err(),
                BuildError::Pattern {
                    index: 1,
                    error: e.clone()
                }
            );
        }
        assert_eq!(
            HostPattern::parse(&"a".repeat(64)),
            Err(PatternError::LabelTooLong)
        );
        let too_long = ["a"; 128].join(".");
        assert_eq!(HostPattern::parse(&too_long), Err(PatternError::TooLong));
        assert_eq!(
            HostPattern::parse("10.1.2.3"),
            Ok(HostPattern::Exact("10.1.2.3".into()))
        );
        assert_eq!(
            HostPattern::parse("*.A.com").unwrap().to_string(),
            "*.a.com"
        );
    }

    /// The Gateway API `TLSRouteHostnameIntersection` conformance scenarios, end to end:
    /// routes narrowed to the listener's hostname, compiled, and SNIs routed.
    #[test]
    fn tlsroute_hostname_intersection_routing() {
        // (listener hostname, [(route hostnames, backend)], [(sni, expected backend)])
        type Scenario<'a> = (
            Option<&'a str>,
            Vec<(&'a [&'a str], &'a str)>,
            Vec<(&'a str, Option<&'a str>)>,
        );
        let scenarios: Vec<Scenario<'_>> = vec![
            (
                Some("abc.example.com"),
                vec![(&["*.example.com"], "tls-backend")],
                vec![
                    ("abc.example.com", Some("tls-backend")),
                    ("non.matching.com", None),
                ],
            ),
            (
                Some("*.example.com"),
                vec![
                    (&["abc.example.com"], "tls-backend"),
                    (&["*.com"], "tls-backend-2"),
                ],
                vec![
                    ("abc.example.com", Some("tls-backend")),
                    ("other.example.com", Some("tls-backend-2")),
                    ("non.matching.com", None),
                ],
            ),
            (
                Some("*.com"),
                vec![
                    (&["abc.example.com"], "tls-backend"),
                    (&["*.example.com"], "tls-backend-2"),
                ],
                vec![
                    ("abc.example.com", Some("tls-backend")),
                    ("other.example.com", Some("tls-backend-2")),
                    ("non.matching.com", None),
                ],
            ),
            (
                None,
                vec![
                    (&["abc.example.com"], "tls-backend"),
                    (&["*.com"], "tls-backend-2"),
                ],
                vec![
                    ("abc.example.com", Some("tls-backend")),
                    ("other.example.com", Some("tls-backend-2")),
                    ("non.matching.org", None),
                ],
            ),
        ];
        for (listener, routes, checks) in scenarios {
            let mut patterns = Vec::new();
            for (hostnames, backend) in routes {
                let narrowed = narrow_route_hostnames(listener, hostnames).expect("attached");
                for h in narrowed {
                    patterns.push((HostPattern::parse(h).unwrap(), backend));
                }
            }
            let m = HostMatcher::build(patterns).unwrap();
            for (sni, want) in checks {
                assert_eq!(
                    m.lookup(sni.as_bytes()).copied(),
                    want,
                    "listener {listener:?}, SNI {sni}"
                );
            }
        }
    }

    /// The plain reference: scan every pattern, keep the most specific match.
    fn reference(patterns: &[HostPattern], name: &[u8]) -> Option<usize> {
        patterns
            .iter()
            .enumerate()
            .filter(|(_, p)| p.matches(name))
            .max_by_key(|(_, p)| p.specificity())
            .map(|(i, _)| i)
    }

    fn label() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("a".to_string()),
            Just("b".to_string()),
            Just("com".to_string()),
            Just("example".to_string()),
            Just("x-1".to_string()),
            "[a-c]{1,3}",
            "[a-z0-9]{1,20}",
        ]
    }

    fn name() -> impl Strategy<Value = String> {
        prop::collection::vec(label(), 1..5).prop_map(|l| l.join("."))
    }

    fn pattern() -> impl Strategy<Value = HostPattern> {
        prop_oneof![
            6 => name().prop_map(HostPattern::Exact),
            6 => name().prop_map(HostPattern::Wildcard),
            1 => Just(HostPattern::Any),
        ]
    }

    /// Random case, and now and then a stray dot or an over-long name.
    fn query() -> impl Strategy<Value = Vec<u8>> {
        (name(), prop::collection::vec(any::<bool>(), 0..40), 0..8u8).prop_map(|(n, upper, odd)| {
            let mut b: Vec<u8> = n.into_bytes();
            for (c, u) in b.iter_mut().zip(upper) {
                if u {
                    c.make_ascii_uppercase();
                }
            }
            match odd {
                0 => b.insert(0, b'.'),
                1 => b.push(b'.'),
                2 => {
                    let at = b.len() / 2;
                    b.insert(at, b'.');
                }
                3 => {
                    let mut long = b"q.".repeat(130);
                    long.extend_from_slice(&b);
                    b = long;
                }
                _ => {}
            }
            b
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

        #[test]
        fn agrees_with_the_reference(
            patterns in prop::collection::vec(pattern(), 0..40),
            queries in prop::collection::vec(query(), 1..30),
        ) {
            // Duplicates are a build error; keep the first of each.
            let mut unique: Vec<HostPattern> = Vec::new();
            for p in patterns {
                if !unique.contains(&p) {
                    unique.push(p);
                }
            }
            let m = HostMatcher::build(unique.iter().cloned().zip(0..)).unwrap();
            // Ask for every pattern's own name too, and names one label below.
            let mut asked: Vec<Vec<u8>> = queries;
            for p in &unique {
                if let HostPattern::Exact(n) | HostPattern::Wildcard(n) = p {
                    asked.push(n.clone().into_bytes());
                    asked.push(format!("Z.{n}").into_bytes());
                }
            }
            for q in &asked {
                prop_assert_eq!(
                    m.lookup(q).copied(),
                    reference(&unique, q),
                    "query {:?}", String::from_utf8_lossy(q)
                );
            }
        }
    }
}
