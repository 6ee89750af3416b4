//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).

use std::net::{Ipv4Addr, Ipv6Addr};

/// The ones-complement sum of `data` as 16-bit big-endian words (odd tail padded with
/// zero), folded to 16 bits. Not complemented.
pub fn data(data: &[u8]) -> u16 {
    let mut acc: u64 = 0;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        acc += u64::from(u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
        acc += u64::from(u32::from_be_bytes([c[4], c[5], c[6], c[7]]));
    }
    let rest = chunks.remainder();
    let mut words = rest.chunks_exact(2);
    for w in &mut words {
        acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        acc += u64::from(*last) << 8;
    }
    fold(acc)
}

/// Folds a wide ones-complement accumulator to 16 bits.
///
/// Four fixed end-around-carry steps, no loop: the number of steps a loop takes depends
/// on the data, and on the forwarding path its exit branch was mispredicted often
/// enough to show in profiles. Folding 64 bits to 32 leaves at most `2^33 - 2`; the
/// 16-bit steps then leave at most `0x2fffe`, `0x10000` and `0xffff`.
#[inline]
pub fn fold(acc: u64) -> u16 {
    let acc = (acc & 0xffff_ffff) + (acc >> 32);
    let acc = (acc & 0xffff) + (acc >> 16);
    let acc = (acc & 0xffff) + (acc >> 16);
    let acc = (acc & 0xffff) + (acc >> 16);
    acc as u16
}

/// Whether words summed into `acc` (any width, at most 2^64 - 1 in total) have the
/// ones'-complement sum `0xffff`, the mark of a correct header checksum: without folding.
/// `2^16 ≡ 1 (mod 0xffff)`, so the folded sum is congruent to `acc` modulo `0xffff`; it
/// lies in `1..=0xffff` unless `acc` is 0, so it is `0xffff` exactly when `acc` is a
/// non-zero multiple of `0xffff`. (The modulo by a constant is a multiply and a shift.)
#[inline(always)]
pub fn sums_to_all_ones(acc: u64) -> bool {
    acc != 0 && acc.is_multiple_of(0xffff)
}

/// The checksum of an IPv4 header whose TTL (the high byte of its big-endian word 4) was
/// just decremented: RFC 1624 eqn. 3 with `m' = m - 0x100`, where `~m + m'` is the
/// constant `0xfeff` whatever `m` was.
#[inline(always)]
pub fn after_ttl_decrement(checksum: u16) -> u16 {
    let acc = u32::from(!checksum) + 0xfeff;
    let acc = (acc & 0xffff) + (acc >> 16);
    let acc = (acc & 0xffff) + (acc >> 16);
    !(acc as u16)
}

/// Ones-complement sum of several partial sums.
pub fn combine(parts: &[u16]) -> u16 {
    fold(parts.iter().map(|&p| u64::from(p)).sum())
}

/// Partial sum of the IPv4 pseudo-header (RFC 768/793).
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: u32) -> u16 {
    let mut acc: u64 = 0;
    for a in [src.octets(), dst.octets()] {
        acc += u64::from(u16::from_be_bytes([a[0], a[1]]));
        acc += u64::from(u16::from_be_bytes([a[2], a[3]]));
    }
    acc += u64::from(proto);
    acc += u64::from(len);
    fold(acc)
}

/// Partial sum of the IPv6 pseudo-header (RFC 8200 §8.1).
pub fn pseudo_header_v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, len: u32) -> u16 {
    let mut acc: u64 = 0;
    for seg in src.segments().into_iter().chain(dst.segments()) {
        acc += u64::from(seg);
    }
    acc += u64::from(len >> 16) + u64::from(len & 0xffff);
    acc += u64::from(next_header);
    fold(acc)
}

/// Incremental update of a checksum field when one 16-bit word of the covered data changes
/// from `old` to `new` (RFC 1624, eqn. 3: `HC' = ~(~HC + ~m + m')`).
#[inline]
pub fn update16(checksum: u16, old: u16, new: u16) -> u16 {
    // Three 16-bit terms sum to at most 0x2fffd: two carry steps leave at most 0xffff.
    let acc = u32::from(!checksum) + u32::from(!old) + u32::from(new);
    let acc = (acc & 0xffff) + (acc >> 16);
    let acc = (acc & 0xffff) + (acc >> 16);
    !(acc as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` pseudo-random words (xorshift64), reproducible from `seed`.
    fn words(seed: u64, n: usize) -> impl Iterator<Item = u64> {
        let mut x = seed;
        (0..n).map(move |_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        })
    }

    #[test]
    fn fold_matches_the_carry_loop() {
        fn looped(mut acc: u64) -> u16 {
            while acc >> 16 != 0 {
                acc = (acc & 0xffff) + (acc >> 16);
            }
            acc as u16
        }
        let edges = [
            0,
            0xffff,
            0x1_0000,
            0x2_fffe,
            0xffff_ffff,
            0x1_ffff_fffe,
            0xffff_ffff_0000_ffff,
            u64::MAX,
        ];
        let random = words(0x9e37_79b9_7f4a_7c15, 100_000).map(|x| x >> (x % 48));
        for v in edges.into_iter().chain(random) {
            assert_eq!(fold(v), looped(v), "{v:#x}");
        }
    }

    #[test]
    fn all_ones_without_folding() {
        let edges = [
            0,
            0xffff,
            0x1_fffe,
            0xffff_0000,
            0xffff_ffff,
            0xfffe_0001,
            u64::MAX,
        ];
        // Half of them near multiples of 0xffff.
        let random = words(0x2545_f491_4f6c_dd1d, 200_000)
            .enumerate()
            .map(|(i, x)| {
                if i % 2 == 0 {
                    (x >> 30) / 0xffff * 0xffff + (x & 3)
                } else {
                    x >> (x % 40)
                }
            });
        for v in edges.into_iter().chain(random) {
            assert_eq!(sums_to_all_ones(v), fold(v) == 0xffff, "{v:#x}");
        }
    }

    #[test]
    fn ttl_decrement_is_rfc1624() {
        for c in 0..=u16::MAX {
            for ttl in [2u16, 64, 255] {
                let old = ttl << 8 | 17;
                assert_eq!(after_ttl_decrement(c), update16(c, old, old - 0x100));
            }
        }
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: the words 0001 f203 f4f5 f6f7 sum to ddf2.
        assert_eq!(
            data(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            0xddf2
        );
        // Odd length: the last byte is the high half of a word.
        assert_eq!(data(&[0x01]), 0x0100);
        assert_eq!(data(&[0x00, 0x01, 0xf2]), 0xf201);
    }

    #[test]
    fn incremental_matches_full_recompute() {
        let mut hdr = [
            0x45, 0x00, 0x00, 0x54, 0x12, 0x34, 0x40, 0x00, 0x40, 0x01, 0x00, 0x00, 10, 0, 0, 1,
            10, 0, 0, 2,
        ];
        let c = !data(&hdr);
        hdr[10..12].copy_from_slice(&c.to_be_bytes());
        // Decrement the TTL (byte 8, high half of word 4).
        let old = u16::from_be_bytes([hdr[8], hdr[9]]);
        hdr[8] -= 1;
        let new = u16::from_be_bytes([hdr[8], hdr[9]]);
        let inc = update16(c, old, new);
        hdr[10..12].copy_from_slice(&[0, 0]);
        assert_eq!(inc, !data(&hdr));
    }
}
