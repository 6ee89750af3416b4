//! Compiling patterns into the table (off the hot path; may allocate): duplicates
//! refused, keys placed in their groups, long keys' tails in the arena.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use super::hash::hash_key;
use super::layout::{fingerprint, group_of, tag, Prints, Slot, EMPTY, GROUP, INLINE, PREFIX};
use super::{BuildError, HostMatcher, HostPattern, NONE, PREFETCH_MIN};
use crate::mem::HugeSlice;

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
    pub(super) fn build_sized<I>(
        patterns: I,
        slots_for: impl Fn(usize) -> usize,
    ) -> Result<HostMatcher, BuildError>
    where
        I: IntoIterator<Item = (HostPattern, u32)>,
    {
        let Input { values, any, named } = Input::read(patterns)?;
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
        let mut t = Filling {
            slots: HugeSlice::filled(EMPTY, groups * GROUP),
            prints: HugeSlice::filled(Prints([0; GROUP]), groups),
            spilled: vec![0u64; groups.div_ceil(64)].into_boxed_slice(),
            arena: Vec::with_capacity(arena_len),
            groups,
            seed: RandomState::new().hash_one(0x736c_7569_6365u64),
        };
        let mut last: Option<(&str, usize)> = None; // previous key and its slot
        for (key, wild, id) in &named {
            let i = match last {
                Some((k, i)) if k == key.as_str() => i,
                _ => t.place(key.as_bytes()),
            };
            // `id` indexes `values` (one value per input pattern).
            let value = values[*id as usize];
            if *wild {
                t.slots[i].wild = value;
            } else {
                t.slots[i].exact = value;
            }
            last = Some((key.as_str(), i));
        }
        let mut matcher = HostMatcher {
            slots: t.slots,
            prints: t.prints,
            spilled: t.spilled,
            groups,
            arena: t.arena.into_boxed_slice(),
            patterns: values.len(),
            any,
            seed: t.seed,
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
}

/// The build's input, checked: one value per input pattern, the catch-all's value (or
/// [`NONE`]), and every named pattern as `(key, is_wildcard, value id)`, sorted so that
/// equal keys are adjacent (duplicates, and exact + wildcard sharing a slot).
struct Input {
    values: Vec<u32>,
    any: u32,
    named: Vec<(String, bool, u32)>,
}

impl Input {
    /// Reads `(pattern, value)` pairs; fails on too many patterns, on the value [`NONE`],
    /// and on a pattern given twice (reporting the earliest second occurrence in input
    /// order).
    fn read<I>(patterns: I) -> Result<Input, BuildError>
    where
        I: IntoIterator<Item = (HostPattern, u32)>,
    {
        let mut values = Vec::new();
        let mut any = NONE;
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
        Ok(Input { values, any, named })
    }
}

/// The table while keys are placed in it.
struct Filling {
    slots: HugeSlice<Slot>,
    prints: HugeSlice<Prints>,
    spilled: Box<[u64]>,
    /// Tails of long keys; its final length was checked to fit in `u32`.
    arena: Vec<u8>,
    groups: usize,
    seed: u64,
}

impl Filling {
    /// Places `key` (not placed yet) in the first group with room from its own, marking
    /// the full groups it passes as spilled; returns its slot, which holds the key with
    /// no value yet.
    fn place(&mut self, key: &[u8]) -> usize {
        let h = hash_key(self.seed, key);
        // There are at least as many slots as keys, so some group has room.
        let mut g = group_of(h, self.groups);
        let i = loop {
            if let Some(lane) = self.prints[g].0.iter().position(|&p| p == 0) {
                self.prints[g].0[lane] = fingerprint(h);
                break g * GROUP + lane;
            }
            self.spilled[g / 64] |= 1 << (g % 64);
            g = if g + 1 == self.groups { 0 } else { g + 1 };
        };
        let mut inline = [0u8; INLINE];
        if key.len() <= INLINE {
            inline[..key.len()].copy_from_slice(key);
        } else {
            inline[..PREFIX].copy_from_slice(&key[..PREFIX]);
            // Checked by the caller: the arena fits in u32.
            inline[PREFIX..].copy_from_slice(&(self.arena.len() as u32).to_le_bytes());
            self.arena.extend_from_slice(&key[PREFIX..]);
        }
        self.slots[i] = Slot {
            tag: tag(h, key.len()),
            exact: NONE,
            wild: NONE,
            key: inline,
        };
        i
    }
}
