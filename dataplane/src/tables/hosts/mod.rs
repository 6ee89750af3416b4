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
//!
//! ## Where things are
//!
//! As in DPDK's `lib/acl`, building, layout and lookup are kept apart: this file holds
//! the public types and the contract; `build` compiles patterns into the table,
//! `layout` is its memory layout (slots, fingerprint lines, where a key lives), `hash`
//! the word-wise, case-folding hash of names and their suffixes, and `lookup` the
//! lookups.

mod build;
mod hash;
mod layout;
mod lookup;
#[cfg(test)]
mod tests;

use core::fmt;

use crate::inspect::name::MAX_NAME_LEN;
use crate::mem::HugeSlice;
use layout::{Prints, Slot};

pub use layout::NONE;

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

/// Tables from this size up have a lookup fetch the slots of all a name's candidates at
/// once; smaller ones stay in the core's L2, where prefetching costs instructions and
/// buys nothing. Set for a core with 512 KiB of L2 from `bench_inspect --hosts-only`
/// (the crossover lay between 256 and 512 KiB of table; figures in `perf/NOTES.md`).
pub const PREFETCH_MIN: usize = 384 << 10;

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
    /// Tails (past [`PREFIX`](layout::PREFIX)) of keys longer than [`INLINE`](layout::INLINE).
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
