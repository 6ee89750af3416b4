//! The matcher's memory layout: groups of [`GROUP`] one-line slots, a line of 16-bit
//! fingerprints per group, and where a key with a given hash lives (its group, its
//! fingerprint, its slot tag).

/// No value in this half of a slot; the one value a pattern cannot have.
pub const NONE: u32 = u32::MAX;

/// Key bytes kept in the slot itself: keys up to this long (nearly every real host name)
/// are compared without leaving the slot's cache line. Longer keys keep a [`PREFIX`]-byte
/// prefix and the arena offset of the rest here.
pub(super) const INLINE: usize = 52;

/// Prefix of a long key kept in its slot.
pub(super) const PREFIX: usize = INLINE - 4;

/// Slots per group. A key lives in the group its hash picks (or, when that group is
/// full, in the first later one with room), in any of the group's slots; the group's
/// fingerprints ([`Prints`]) fill one cache line.
pub(super) const GROUP: usize = 32;

/// The 16-bit fingerprints of one group's keys, in slot order (0: the slot is empty):
/// one cache line that says which of the group's slots, if any, may hold a key.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub(super) struct Prints(pub(super) [u16; GROUP]);

/// One table slot: one cache line (64 bytes, line-aligned). `tag == 0` marks an empty
/// slot; otherwise its low 8 bits are the key's length (1..=253) and its high 24 bits come
/// from the key's hash, so a fingerprint that matched by chance is usually caught by the
/// tag before the key is compared.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub(super) struct Slot {
    pub(super) tag: u32,
    /// Value of the exact pattern with this name, or [`NONE`].
    pub(super) exact: u32,
    /// Value of the wildcard pattern with this suffix, or [`NONE`].
    pub(super) wild: u32,
    /// The key (lowercase, zero-padded) if it is at most [`INLINE`] bytes; else its first
    /// [`PREFIX`] bytes and the little-endian arena offset of the remaining bytes.
    pub(super) key: [u8; INLINE],
}

pub(super) const EMPTY: Slot = Slot {
    tag: 0,
    exact: NONE,
    wild: NONE,
    key: [0; INLINE],
};

#[inline]
pub(super) fn tag(hash: u64, len: usize) -> u32 {
    // `len` is 1..=253 for every key and probe that gets here.
    ((hash >> 32) as u32 & 0xffff_ff00) | (len as u32 & 0xff)
}

/// The group a key with this hash belongs to: the low 32 bits of the hash scaled to
/// `0..groups` (a multiply and a shift, so any number of groups will do).
#[inline]
pub(super) fn group_of(hash: u64, groups: usize) -> usize {
    ((u64::from(hash as u32) * groups as u64) >> 32) as usize
}

/// A key's fingerprint: hash bits 32..48, apart from the group's (0..32) and mostly from
/// the tag's (40..64, so a fingerprint that matched by chance still meets 16 fresh bits
/// of tag); never 0, which marks an empty slot.
#[inline]
pub(super) fn fingerprint(hash: u64) -> u16 {
    ((hash >> 32) as u16).max(1)
}

/// The slots of a group whose fingerprint is `fp`, as a bit mask (bit `i`: slot `i`).
#[inline]
pub(super) fn lanes(prints: &Prints, fp: u16) -> u32 {
    crate::mem::eq_lanes_u16x32(&prints.0, fp)
}
