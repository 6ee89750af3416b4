//! The host matcher: a compiled, immutable map from host-name patterns to `u32` values (a
//! listener's route indices), looked up with the SNI or `Host` of a connection.
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
//! One hash table keyed by name text holds every exact name and every wildcard suffix; a
//! slot has room for both (an exact value and a wildcard value), so `a.example.com` and
//! `*.a.example.com` share one. A lookup:
//!
//! 1. hashes the name in one right-to-left pass, 8 bytes at a time, lowercasing and
//!    finding the dots word-wise (no copy, no allocation). The hash of a key is defined
//!    over 8-byte words aligned to its end, so the name's words are its suffixes' words
//!    too: the hash of every suffix that starts at a label boundary falls out of the same
//!    pass (`example.com` hashes the same alone and as the tail of `a.example.com`);
//! 2. takes as candidates the whole name (an exact key) and those suffixes with as many
//!    labels as some wildcard's suffix (wildcard keys), and reads each candidate's
//!    fingerprint line: which slot, if any, may hold it;
//! 3. probes the whole name for an exact pattern, then the suffixes longest first for a
//!    wildcard pattern, stopping at the first hit;
//! 4. falls back to the catch-all.
//!
//! So a lookup costs one pass over the name and at most `labels` probes, whatever the
//! number of patterns. (Names with more than 16 label boundaries — only possible with
//! many tiny or empty labels — hash each suffix on its own: slower, same answer.) The hash
//! is a folded multiply over 8-byte words, seeded at random per build; keys come from the
//! control plane, queries only choose which slot they probe. What keeps the cost flat in
//! practice is how little memory a probe touches, since a large table lives far from the
//! core:
//!
//! - the slots come in groups of 32, and a key lives in any slot of the group its hash
//!   picks (in the next group with room if that one is full, which at the table's load —
//!   five keys for every eight slots — happens to about one group in 200). Beside the
//!   slots, each group has one cache line of 16-bit fingerprints, one per slot (2 bytes a
//!   slot: 3.2 MiB for a million names). A probe reads its group's line, compares
//!   all 32 fingerprints at once, and touches the table only at a slot whose fingerprint
//!   is its own: for a key, exactly its slot, one cache line; for a name that is not a key,
//!   almost never any (one chance in about three thousand);
//! - a slot is one cache line (64 bytes) and holds a 24-bit hash tag with the key's
//!   length, both values (so no other line is read for them), and the key itself when
//!   it is at most 52 bytes (else its first 48 bytes and where the rest lies in an
//!   arena), so a hit on any but a very long name is verified within that one line;
//! - the big arrays live in transparent huge pages ([`HugeSlice`]: whole 2 MiB pages
//!   from a 2 MiB boundary, so that the 3.2 MiB of fingerprint lines get two, where a
//!   `Box` got one at best): a million names take ~100 MiB of table, which 4 KiB pages
//!   would spread over 26k TLB entries (a page walk per probe); 2 MiB pages need 51.
//!
//! Beyond that, a big table costs what the memory system charges: a cache miss for the
//! slot, and the fingerprint lines' trips to the last-level cache, where a small table
//! has neither. A lookup pays them one after the other, except that a table of
//! [`PREFETCH_MIN`] bytes or more has it fetch the slots of all its candidates at once.
//! `bench_inspect --hosts-only` shows the cost by table size and working set.
//!
//! There is no burst lookup: the names delayed binding routes by arrive one per
//! connection, with its first bytes, so a burst of them per rx burst is rare, and the
//! burst lookup that once existed paid only on very large tables while costing more on
//! small ones (`perf/NOTES.md` has its figures and the commit to recover it from).
//!
//! Building may allocate and fails on duplicate patterns ([`BuildError`]): the control
//! plane decides which of two claims on a name wins, never this table.

use core::fmt;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use crate::inspect::name::MAX_NAME_LEN;
use crate::mem::HugeSlice;

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
    /// A pattern with the value [`NONE`] (`u32::MAX`), which marks "no pattern" in the
    /// table; holds the pattern's position in the input.
    ReservedValue {
        /// Position of the pattern in the input.
        index: usize,
    },
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
            BuildError::ReservedValue { index } => {
                write!(f, "host pattern #{index}: value {NONE} is reserved")
            }
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
pub struct Match {
    /// The matched pattern's value.
    pub value: u32,
    /// What matched.
    pub kind: MatchKind,
}

/// No value in this half of a slot; the one value a pattern cannot have.
pub const NONE: u32 = u32::MAX;

/// Key bytes kept in the slot itself: keys up to this long (nearly every real host name)
/// are compared without leaving the slot's cache line. Longer keys keep a [`PREFIX`]-byte
/// prefix and the arena offset of the rest here.
const INLINE: usize = 52;
/// Prefix of a long key kept in its slot.
const PREFIX: usize = INLINE - 4;

/// Suffix hashes kept per name from the one right-to-left pass; names with more label
/// boundaries (with a non-empty part before them) take the slow path.
const KEPT: usize = 16;

/// Tables from this size up have a lookup fetch the slots of all a name's candidates at
/// once; smaller ones stay in the core's L2, where prefetching costs instructions and
/// buys nothing. Set for a core with 512 KiB of L2 from `bench_inspect --hosts-only`
/// (the crossover lay between 256 and 512 KiB of table; figures in `perf/NOTES.md`).
pub const PREFETCH_MIN: usize = 384 << 10;

/// Slots per group. A key lives in the group its hash picks (or, when that group is
/// full, in the first later one with room), in any of the group's slots; the group's
/// fingerprints ([`Prints`]) fill one cache line.
const GROUP: usize = 32;

/// The 16-bit fingerprints of one group's keys, in slot order (0: the slot is empty):
/// one cache line that says which of the group's slots, if any, may hold a key.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct Prints([u16; GROUP]);

/// One table slot: one cache line (64 bytes, line-aligned). `tag == 0` marks an empty
/// slot; otherwise its low 8 bits are the key's length (1..=253) and its high 24 bits come
/// from the key's hash, so a fingerprint that matched by chance is usually caught by the
/// tag before the key is compared.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
struct Slot {
    tag: u32,
    /// Value of the exact pattern with this name, or [`NONE`].
    exact: u32,
    /// Value of the wildcard pattern with this suffix, or [`NONE`].
    wild: u32,
    /// The key (lowercase, zero-padded) if it is at most [`INLINE`] bytes; else its first
    /// [`PREFIX`] bytes and the little-endian arena offset of the remaining bytes.
    key: [u8; INLINE],
}

const EMPTY: Slot = Slot {
    tag: 0,
    exact: NONE,
    wild: NONE,
    key: [0; INLINE],
};

/// The compiled host matcher (see the [module docs](self)).
pub struct HostMatcher {
    /// `GROUP` slots per group, group after group.
    slots: HugeSlice<Slot>,
    /// One line of fingerprints per group (2 bytes a slot, 1/32 of the slots' size, so it
    /// stays in cache when the slots do not): a probe reads its group's line, and goes to
    /// the table only at a slot whose fingerprint is its own. That is exactly the key's
    /// slot for a hit, and almost never any slot for a name that is not a key.
    prints: HugeSlice<Prints>,
    /// One bit per group: set when a key that hashes to the group lives in a later one
    /// (the group was full), so that a probe goes on to the next group.
    spilled: Box<[u64]>,
    /// How many groups there are.
    groups: usize,
    /// Tails (past [`PREFIX`]) of keys longer than [`INLINE`].
    arena: Box<[u8]>,
    /// How many patterns the matcher was built from.
    patterns: usize,
    /// The catch-all's value, or [`NONE`].
    any: u32,
    seed: u64,
    /// Whether the table is big enough ([`PREFETCH_MIN`]) for a lookup to fetch the slots
    /// of all its candidates at once.
    prefetch: bool,
    exact_count: usize,
    wildcard_count: usize,
    /// Bit `k` set: some wildcard's suffix has `k + 1` labels (bit 31: 32 or more).
    wild_labels: u32,
}

/// Mixes `v` into `h` (a 64x64->128 multiply folded to 64 bits).
#[inline]
fn mix(h: u64, v: u64) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let r = u128::from(h ^ v) * u128::from(K ^ v.rotate_left(32));
    (r as u64) ^ ((r >> 64) as u64)
}

/// ASCII-lowercases the 8 bytes of `w` at once: bytes `A..=Z` get bit 5 set, every other
/// byte (non-ASCII included) is left as it is. No carry crosses a byte: each sum below
/// adds at most 0x3f to a value of at most 0x7f.
#[inline]
fn lower8(w: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const ONES: u64 = 0x0101_0101_0101_0101;
    let low = w & LOW7;
    let at_least_a = low + ONES * (0x80 - b'A' as u64);
    let above_z = low + ONES * (0x80 - b'Z' as u64 - 1);
    let upper = at_least_a & !above_z & !w & HIGH;
    w | (upper >> 2)
}

/// Up to 8 bytes as a little-endian word, zero-padded.
#[inline]
fn word(bytes: &[u8]) -> u64 {
    match bytes.first_chunk::<8>() {
        Some(w) => u64::from_le_bytes(*w),
        None => bytes.iter().rev().fold(0, |w, &b| (w << 8) | u64::from(b)),
    }
}

/// Whether `query` (any case) equals `lower` (lowercase), 8 bytes at a time.
#[inline]
fn eq_folded(query: &[u8], lower: &[u8]) -> bool {
    query.len() == lower.len()
        && query
            .chunks(8)
            .zip(lower.chunks(8))
            .all(|(q, l)| lower8(word(q)) == word(l))
}

/// The lanes (`0x80` in each byte) of `w` that hold a dot.
#[inline]
fn dot_lanes(w: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let x = w ^ 0x2e2e_2e2e_2e2e_2e2e;
    // A lane is 0x80 exactly where `x` has a zero byte (no carry crosses a lane).
    !(((x & LOW7) + LOW7) | x | LOW7)
}

/// The first `bytes.len()` (< 8) bytes of a name as the high lanes of a word whose low
/// lanes are zero: the leftmost, partial word of a name cut into 8-byte words from its
/// end.
#[inline]
fn high_word(head: &[u8], name: &[u8]) -> u64 {
    let r = head.len();
    if r == 0 {
        return 0;
    }
    let w = match name.first_chunk::<8>() {
        Some(w) => u64::from_le_bytes(*w),
        None => head.iter().rev().fold(0, |w, &b| (w << 8) | u64::from(b)),
    };
    w << (8 * (8 - r))
}

/// Hashes `name` (any case) 8 bytes at a time from its end, and hands `suffix` the start
/// and hash of every suffix that begins right after a dot at position 1 or later (a
/// wildcard needs a non-empty part before its suffix), shortest first. Returns the hash of
/// the whole name.
///
/// The words are aligned to the end of the name, so a suffix's words are the name's,
/// except its leftmost, partial one: the name's word with the bytes before the suffix
/// masked off. The hash of a suffix found here is therefore the hash of that suffix
/// alone, and one pass gives them all.
#[inline]
fn hash_name(seed: u64, name: &[u8], mut suffix: impl FnMut(usize, u64)) -> u64 {
    let len = name.len();
    let mut state = seed;
    // Words from the right; `end` is where the current one ends.
    let mut end = len;
    let mut rest: &[u8] = name;
    loop {
        let (w, last) = match rest.split_last_chunk::<8>() {
            Some((head, w)) => {
                rest = head;
                (u64::from_le_bytes(*w), false)
            }
            None => (high_word(rest, name), true),
        };
        let w = lower8(w);
        let mut dots = dot_lanes(w);
        while dots != 0 {
            let bit = 63 - dots.leading_zeros() as usize;
            dots &= !(1u64 << bit);
            let lane = bit / 8;
            // The dot's position in the name (`end + lane >= 8` for every real lane).
            let at = (end + lane).wrapping_sub(8);
            if at >= 1 && at < len {
                // The suffix's bytes in this word: the lanes above the dot.
                let above = 7 - lane;
                let part = match above {
                    0 => 0,
                    n => w & (u64::MAX << (8 * (8 - n))),
                };
                suffix(at + 1, mix(state, part ^ (len - at - 1) as u64));
            }
        }
        if last {
            return mix(state, w ^ len as u64);
        }
        state = mix(state, w);
        end -= 8;
    }
}

/// The hash of a whole key (any case): [`hash_name`] without the suffixes.
fn hash_key(seed: u64, key: &[u8]) -> u64 {
    hash_name(seed, key, |_, _| {})
}

#[inline]
fn tag(hash: u64, len: usize) -> u32 {
    // `len` is 1..=253 for every key and probe that gets here.
    ((hash >> 32) as u32 & 0xffff_ff00) | (len as u32 & 0xff)
}

/// The group a key with this hash belongs to: the low 32 bits of the hash scaled to
/// `0..groups` (a multiply and a shift, so any number of groups will do).
#[inline]
fn group_of(hash: u64, groups: usize) -> usize {
    ((u64::from(hash as u32) * groups as u64) >> 32) as usize
}

/// A key's fingerprint: hash bits 32..48, apart from the group's (0..32) and mostly from
/// the tag's (40..64, so a fingerprint that matched by chance still meets 16 fresh bits
/// of tag); never 0, which marks an empty slot.
#[inline]
fn fingerprint(hash: u64) -> u16 {
    ((hash >> 32) as u16).max(1)
}

/// The slots of a group whose fingerprint is `fp`, as a bit mask (bit `i`: slot `i`).
#[inline]
fn lanes(prints: &Prints, fp: u16) -> u32 {
    crate::mem::eq_lanes_u16x32(&prints.0, fp)
}

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
    /// Compiles `(pattern, value)` pairs. Fails on a pattern given twice, or on the value
    /// [`NONE`].
    pub fn build<I>(patterns: I) -> Result<HostMatcher, BuildError>
    where
        I: IntoIterator<Item = (HostPattern, u32)>,
    {
        // Five keys for every eight slots: a group of 32 holds 20 keys on average, and about
        // one group in 200 spills (a probe then reads the next group's line too, which is
        // in cache: fingerprint lines are).
        HostMatcher::build_sized(patterns, |keys| keys * 8 / 5)
    }

    /// [`HostMatcher::build`] with `slots_for(keys)` slots (rounded up to whole groups, at
    /// least one; never fewer than the keys).
    fn build_sized<I>(
        patterns: I,
        slots_for: impl Fn(usize) -> usize,
    ) -> Result<HostMatcher, BuildError>
    where
        I: IntoIterator<Item = (HostPattern, u32)>,
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
            if value == NONE {
                return Err(BuildError::ReservedValue { index });
            }
            match pattern {
                HostPattern::Any => {
                    if any != NONE && duplicate_at.is_none() {
                        duplicate_at = Some((index, "*".to_string()));
                    }
                    any = value;
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
        let wild_labels = named
            .iter()
            .filter(|(_, w, _)| *w)
            .fold(0u32, |m, (k, _, _)| {
                let labels = k.bytes().filter(|&b| b == b'.').count() + 1;
                m | 1 << (labels - 1).min(31)
            });

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
        let groups = slots_for(keys).max(keys).div_ceil(GROUP).max(1);
        let mut slots = HugeSlice::filled(EMPTY, groups * GROUP);
        let mut prints = HugeSlice::filled(Prints([0; GROUP]), groups);
        let mut spilled = vec![0u64; groups.div_ceil(64)].into_boxed_slice();
        let mut arena = Vec::with_capacity(arena_len);
        let seed = RandomState::new().hash_one(0x736c_7569_6365u64);
        let mut last: Option<(&str, usize)> = None; // previous key and its slot
        for (key, wild, id) in &named {
            let i = match last {
                Some((k, i)) if k == key.as_str() => i,
                _ => {
                    let bytes = key.as_bytes();
                    let h = hash_key(seed, bytes);
                    // There are at least as many slots as keys, so some group has room.
                    let mut g = group_of(h, groups);
                    let i = loop {
                        if let Some(lane) = prints[g].0.iter().position(|&p| p == 0) {
                            prints[g].0[lane] = fingerprint(h);
                            break g * GROUP + lane;
                        }
                        spilled[g / 64] |= 1 << (g % 64);
                        g = if g + 1 == groups { 0 } else { g + 1 };
                    };
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
            // `id` indexes `values` (one value per input pattern).
            let value = values[*id as usize];
            if *wild {
                slots[i].wild = value;
            } else {
                slots[i].exact = value;
            }
            last = Some((key.as_str(), i));
        }
        let mut matcher = HostMatcher {
            slots,
            prints,
            spilled,
            groups,
            arena: arena.into_boxed_slice(),
            patterns: values.len(),
            any,
            seed,
            prefetch: false,
            exact_count,
            wildcard_count,
            wild_labels,
        };
        matcher.prefetch = matcher.table_bytes() >= PREFETCH_MIN;
        Ok(matcher)
    }

    /// Compiles `(pattern text, value)` pairs, parsing each with [`HostPattern::parse`].
    pub fn from_strs<'s, I>(patterns: I) -> Result<HostMatcher, BuildError>
    where
        I: IntoIterator<Item = (&'s str, u32)>,
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
}

impl fmt::Debug for HostMatcher {
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

    fn matcher(patterns: &[&str]) -> HostMatcher {
        HostMatcher::from_strs(patterns.iter().copied().zip(0..)).unwrap()
    }

    /// The index of the pattern a name selects, via the matcher.
    fn pick(m: &HostMatcher, name: &str) -> Option<u32> {
        m.lookup(name.as_bytes())
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
        assert_eq!(found.value, 4);
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
        let empty: HostMatcher = HostMatcher::build(Vec::new()).unwrap();
        assert!(empty.is_empty());
        assert_eq!(empty.lookup(b"a.b"), None);
    }

    #[test]
    fn long_keys_with_equal_prefixes() {
        // Keys longer than INLINE share their first PREFIX bytes; the arena tails decide.
        let head = "abcdefghijklmnop.qrstuvwxyz0123456789-abcdefghij"; // PREFIX bytes
        assert_eq!(head.len(), PREFIX);
        let a = format!("{head}-first.example.com");
        let b = format!("{head}-second.example.com");
        let inline = format!("{}ab.example.o", "abcdefghij".repeat(4)); // exactly INLINE
        let one_more = format!("{inline}r");
        assert_eq!((inline.len(), one_more.len()), (INLINE, INLINE + 1));
        let wild = format!("*.{a}");
        let m = matcher(&[&a, &b, &inline, &one_more, &wild]);
        assert_eq!(pick(&m, &a), Some(0));
        assert_eq!(pick(&m, &b.to_uppercase()), Some(1));
        assert_eq!(pick(&m, &inline), Some(2));
        assert_eq!(pick(&m, &one_more.to_uppercase()), Some(3));
        assert_eq!(pick(&m, &format!("{head}-third.example.com")), None);
        assert_eq!(pick(&m, &format!("{head}-firsT.example.con")), None);
        assert_eq!(pick(&m, &format!("{}Z", &inline[..INLINE - 1])), None);
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
        // The one value that marks "no pattern" in the table is refused, whatever the kind.
        for p in ["a.com", "*.a.com", "*"] {
            let reserved = HostMatcher::from_strs([("b.com", 0), (p, NONE)]);
            assert_eq!(
                reserved.unwrap_err(),
                BuildError::ReservedValue { index: 1 }
            );
        }
        let max = HostMatcher::from_strs([("a.com", NONE - 1), ("*", 0)]).unwrap();
        assert_eq!(max.lookup(b"A.com"), Some(NONE - 1));
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
                HostMatcher::from_strs([("ok.com", 0), (p, 1)]).unwrap_err(),
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
            // Values are positions in `routes`.
            let mut patterns = Vec::new();
            for (r, (hostnames, _)) in (0..).zip(&routes) {
                let narrowed = narrow_route_hostnames(listener, hostnames).expect("attached");
                for h in narrowed {
                    patterns.push((HostPattern::parse(h).unwrap(), r));
                }
            }
            let m = HostMatcher::build(patterns).unwrap();
            for (sni, want) in checks {
                assert_eq!(
                    m.lookup(sni.as_bytes()).map(|r| routes[r as usize].1),
                    want,
                    "listener {listener:?}, SNI {sni}"
                );
            }
        }
    }

    /// The plain reference: scan every pattern, keep the most specific match.
    fn reference(patterns: &[HostPattern], name: &[u8]) -> Option<u32> {
        patterns
            .iter()
            .enumerate()
            .filter(|(_, p)| p.matches(name))
            .max_by_key(|(_, p)| p.specificity())
            .map(|(i, _)| i as u32)
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
            // As many slots as keys: full groups spill into the next ones.
            let dense =
                HostMatcher::build_sized(unique.iter().cloned().zip(0..), |keys| keys).unwrap();
            // Ask for every pattern's own name too, and names one label below.
            let mut asked: Vec<Vec<u8>> = queries;
            for p in &unique {
                if let HostPattern::Exact(n) | HostPattern::Wildcard(n) = p {
                    asked.push(n.clone().into_bytes());
                    asked.push(format!("Z.{n}").into_bytes());
                }
            }
            for q in &asked {
                let want = reference(&unique, q);
                prop_assert_eq!(m.lookup(q), want, "query {:?}", String::from_utf8_lossy(q));
                prop_assert_eq!(dense.lookup(q), want, "dense, query {:?}", String::from_utf8_lossy(q));
            }
        }

        /// Single lookups answer what the plain reference does on mixed and odd queries
        /// (malformed, over-long, more label boundaries than the fast path keeps), and
        /// `find` agrees with `lookup`, whether the table prefetches candidates' slots or
        /// not.
        #[test]
        fn lookups_agree_with_the_reference_on_odd_queries(
            patterns in prop::collection::vec(pattern(), 0..40),
            queries in prop::collection::vec(
                prop_oneof![3 => query(), 1 => odd_query()],
                0..71,
            ),
        ) {
            let mut unique: Vec<HostPattern> = Vec::new();
            for p in patterns {
                if !unique.contains(&p) {
                    unique.push(p);
                }
            }
            let mut m = HostMatcher::build(unique.iter().cloned().zip(0..)).unwrap();
            let mut asked: Vec<Vec<u8>> = queries;
            for p in unique.iter().take(8) {
                if let HostPattern::Exact(n) | HostPattern::Wildcard(n) = p {
                    asked.push(n.to_uppercase().into_bytes());
                    asked.push(format!("z.Q.{n}").into_bytes());
                }
            }
            for prefetch in [false, true] {
                m.prefetch = prefetch;
                for q in &asked {
                    let shown = String::from_utf8_lossy(q);
                    let want = reference(&unique, q);
                    prop_assert_eq!(m.lookup(q), want, "query {:?}", shown);
                    prop_assert_eq!(m.find(q).map(|f| f.value), want, "query {:?}", shown);
                }
            }
        }

        /// The word-at-a-time lowercase and comparison agree with the byte-wise ones on
        /// any bytes.
        #[test]
        fn folding_agrees_with_bytewise(
            a in prop_oneof![
                prop::collection::vec(any::<u8>(), 0..40),
                prop::collection::vec(prop_oneof![Just(b'.'), Just(b'A'), Just(b'z')], 0..40),
            ]
        ) {
            let lowered = a.to_ascii_lowercase();
            for chunk in a.chunks(8) {
                prop_assert_eq!(lower8(word(chunk)), word(&chunk.to_ascii_lowercase()));
            }
            prop_assert!(eq_folded(&a, &lowered));
            prop_assert_eq!(hash_key(7, &a), hash_key(7, &lowered));
            // Every suffix hash of the one pass is the hash of that suffix alone.
            let mut starts = Vec::new();
            let full = hash_name(7, &a, |start, h| {
                starts.push(start);
                assert_eq!(h, hash_key(7, &a[start..]), "{a:?} from {start}");
            });
            prop_assert_eq!(full, hash_key(7, &a));
            let dots: Vec<usize> = (1..a.len()).rev().filter(|&i| a[i] == b'.').map(|i| i + 1).collect();
            prop_assert_eq!(starts, dots);
            let mut other = lowered.clone();
            if let Some(b) = other.last_mut() {
                *b = b.wrapping_add(1);
                prop_assert!(!eq_folded(&a, &other));
            }
            prop_assert!(!eq_folded(&a, &lowered[..lowered.len().saturating_sub(1)]) || a.is_empty());
        }
    }

    /// Malformed and unusual names: empty, dots only, over-long, more label boundaries
    /// than the fast path keeps hashes for, non-ASCII bytes next to the letters, bytes
    /// that only look like letters with their high bit set.
    fn odd_query() -> impl Strategy<Value = Vec<u8>> {
        let tail = || name().prop_map(String::into_bytes);
        prop_oneof![
            Just(Vec::new()),
            Just(b".".to_vec()),
            (1..300usize).prop_map(|n| b".".repeat(n)),
            (17..40usize, tail()).prop_map(|(n, t)| [b"a.".repeat(n), t].concat()),
            (10..30usize, tail()).prop_map(|(n, t)| [b".".repeat(n), t].concat()),
            (prop::collection::vec(any::<u8>(), 1..6), tail()).prop_map(|(junk, t)| [
                junk,
                b".".to_vec(),
                t
            ]
            .concat()),
            tail().prop_map(|t| t.iter().map(|&b| b | 0x80).collect()),
            tail().prop_map(|t| t
                .iter()
                .map(|&b| if b == b'a' { b'@' } else { b })
                .collect()),
            prop::collection::vec(any::<u8>(), 0..260),
        ]
    }

    /// The fingerprint compare finds exactly the equal lanes, wherever they are.
    #[test]
    fn fingerprint_lanes() {
        let mut p = Prints([0; GROUP]);
        assert_eq!(lanes(&p, 1), 0);
        assert_eq!(lanes(&p, 0), u32::MAX);
        for (i, l) in p.0.iter_mut().enumerate() {
            *l = [7u16, 0x8007, 0xffff, 7][i % 4].wrapping_add((i / 4) as u16 * 0x100);
        }
        for fp in [7u16, 0x8007, 0xffff, 0x107, 0x7f07, 1] {
            let plain =
                p.0.iter()
                    .enumerate()
                    .fold(0, |m, (i, &l)| m | (u32::from(l == fp) << i));
            assert_eq!(lanes(&p, fp), plain, "{fp:#x}");
        }
        p.0[31] = 0x4242;
        assert_eq!(lanes(&p, 0x4242), 1 << 31);
    }

    /// Names a lookup must answer with nothing but the catch-all or an exact rule
    /// (empty, over-long, a suffix that is not a name), on a table without a catch-all.
    #[test]
    fn edge_names_answer_as_the_rule_says() {
        let other = matcher(&["b.three.test", "*.four.test"]);
        let long = vec![b'a'; MAX_NAME_LEN + 1];
        let names: [&[u8]; 7] = [
            b"",
            &long,
            b"a.one.test",
            b"b.three.test",
            b"z.four.test",
            b"x1.one.test",
            b"four.test",
        ];
        let want: Vec<Option<u32>> = names.iter().map(|n| other.lookup(n)).collect();
        assert_eq!(want, [None, None, None, Some(0), Some(1), None, None]);
    }

    /// A table with as many slots as keys: most groups are full and spill into the next
    /// ones (the build's usual load has this happen in about one group in 200),
    /// and every lookup still answers what the reference does.
    #[test]
    fn full_groups_spill_into_the_next() {
        let mut patterns: Vec<HostPattern> = (0..1000)
            .map(|i| match i % 4 {
                0 => HostPattern::Wildcard(format!("w{i}.example.com")),
                _ => HostPattern::Exact(format!("h{i}.example.com")),
            })
            .collect();
        patterns.push(HostPattern::Wildcard("example.com".to_string()));
        let m = HostMatcher::build_sized(patterns.iter().cloned().zip(0..), |keys| keys).unwrap();
        assert_eq!(m.slots.len(), 1024);
        let spilled: u32 = m.spilled.iter().map(|w| w.count_ones()).sum();
        assert!(spilled >= 16, "{spilled} of 32 groups spilled");
        let mut asked = Vec::new();
        for i in 0..1100 {
            asked.push(format!("h{i}.example.com"));
            asked.push(format!("x.w{i}.EXAMPLE.com"));
            asked.push(format!("w{i}.example.com"));
        }
        asked.push("example.com".to_string());
        let names: Vec<&[u8]> = asked.iter().map(|q| q.as_bytes()).collect();
        let mut m = m;
        for prefetch in [false, true] {
            m.prefetch = prefetch;
            for q in &names {
                let want = reference(&patterns, q);
                assert_eq!(m.lookup(q), want, "{}", String::from_utf8_lossy(q));
            }
        }
    }

    /// A table that outgrows a small L2 is prefetched for; one that fits stays on the
    /// one-by-one path (see [`PREFETCH_MIN`]'s measurements).
    #[test]
    fn tables_past_a_small_l2_are_prefetched_for() {
        let table = |n: u32| {
            HostMatcher::build((0..n).map(|i| {
                (
                    HostPattern::Exact(format!("host{i}.team{}.example.com", i % 97)),
                    i,
                )
            }))
            .unwrap()
        };
        let (small, big) = (table(2_000), table(10_000));
        assert!(small.table_bytes() < 256 << 10, "{}", small.table_bytes());
        assert!(!small.prefetch);
        assert!(
            big.prefetch,
            "a 10k-name table ({} bytes) is prefetched for",
            big.table_bytes()
        );
    }

    #[test]
    fn huge_page_advice_is_harmless() {
        let t: HostMatcher = HostMatcher::build(
            (0..40_000u32).map(|i| (HostPattern::Exact(format!("h{i}.example.com")), i)),
        )
        .unwrap();
        assert!(t.table_bytes() >= PREFETCH_MIN);
        assert!(t.prefetch, "a big table is prefetched for");
        assert_eq!(t.lookup(b"H39999.example.COM"), Some(39_999));
        let names: [&[u8]; 3] = [
            b"H39999.example.COM",
            b"h40000.example.com",
            b"h7.example.com",
        ];
        assert_eq!(names.map(|n| t.lookup(n)), [Some(39_999), None, Some(7)]);
        assert_eq!(t.lookup(b"h40000.example.com"), None);
        let v = HugeSlice::filled(7u8, 5 << 20);
        assert!(v.iter().all(|&b| b == 7));
    }
}
