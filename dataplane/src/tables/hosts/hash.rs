//! The hash of a name: one right-to-left pass, 8 bytes at a time, case folded, which
//! yields the hash of every suffix that starts at a label boundary on the way (see
//! the [module docs](super)).

/// Mixes `v` into `h` (a 64x64->128 multiply folded to 64 bits).
#[inline]
pub(super) fn mix(h: u64, v: u64) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let r = u128::from(h ^ v) * u128::from(K ^ v.rotate_left(32));
    (r as u64) ^ ((r >> 64) as u64)
}

/// ASCII-lowercases the 8 bytes of `w` at once: bytes `A..=Z` get bit 5 set, every other
/// byte (non-ASCII included) is left as it is. No carry crosses a byte: each sum below
/// adds at most 0x3f to a value of at most 0x7f.
#[inline]
pub(super) fn lower8(w: u64) -> u64 {
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
pub(super) fn word(bytes: &[u8]) -> u64 {
    match bytes.first_chunk::<8>() {
        Some(w) => u64::from_le_bytes(*w),
        None => bytes.iter().rev().fold(0, |w, &b| (w << 8) | u64::from(b)),
    }
}

/// Whether `query` (any case) equals `lower` (lowercase), 8 bytes at a time.
#[inline]
pub(super) fn eq_folded(query: &[u8], lower: &[u8]) -> bool {
    query.len() == lower.len()
        && query
            .chunks(8)
            .zip(lower.chunks(8))
            .all(|(q, l)| lower8(word(q)) == word(l))
}

/// The lanes (`0x80` in each byte) of `w` that hold a dot.
#[inline]
pub(super) fn dot_lanes(w: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let x = w ^ 0x2e2e_2e2e_2e2e_2e2e;
    // A lane is 0x80 exactly where `x` has a zero byte (no carry crosses a lane).
    !(((x & LOW7) + LOW7) | x | LOW7)
}

/// The first `bytes.len()` (< 8) bytes of a name as the high lanes of a word whose low
/// lanes are zero: the leftmost, partial word of a name cut into 8-byte words from its
/// end.
#[inline]
pub(super) fn high_word(head: &[u8], name: &[u8]) -> u64 {
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
pub(super) fn hash_name(seed: u64, name: &[u8], mut suffix: impl FnMut(usize, u64)) -> u64 {
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
pub(super) fn hash_key(seed: u64, key: &[u8]) -> u64 {
    hash_name(seed, key, |_, _| {})
}
