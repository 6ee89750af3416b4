//! Per-source admission: how many new connections one source address may open per
//! second on this worker, so that one source cannot take the shared state (flow table,
//! SNAT ports, embryos) from every other.
//!
//! A fixed, direct-mapped table of [`SOURCE_BUCKETS`] counters (16 bytes each, 64 KiB a
//! worker, allocated at start), indexed by a seeded hash of the source address; a bucket
//! counts the new connections of its current one-second window. Two sources that share
//! a bucket share its budget: a bucket is 1/4096 of the address space's sources, and the
//! seed differs per run and worker, so a flooder cannot aim at one victim. Checked once
//! per new connection (the miss path), never on a flow hit.

use std::net::IpAddr;

/// Buckets of the table (a power of two).
pub const SOURCE_BUCKETS: usize = 4096;

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    /// The window (table seconds) `count` belongs to.
    second: u32,
    /// New connections admitted in it.
    count: u32,
}

/// The per-source new-connection budget of one worker (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct SourceRates {
    buckets: Box<[Bucket]>,
    seed: u64,
    /// New connections a source may open per second (0: no limit).
    per_second: u32,
}

/// A source address's bucket index under `seed`.
pub(crate) fn bucket_of(src: IpAddr, seed: u64, buckets: usize) -> usize {
    let (hi, lo) = match src {
        IpAddr::V4(a) => (0, u64::from(u32::from(a))),
        IpAddr::V6(a) => {
            let b = a.to_bits();
            ((b >> 64) as u64, b as u64)
        }
    };
    let h = (lo ^ seed)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .rotate_left(31)
        ^ hi.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    let h = h.wrapping_mul(0x1656_67b1_9e37_79f9);
    (h >> 32) as usize & (buckets - 1)
}

impl SourceRates {
    /// A table admitting `per_second` new connections a source per second (0: all).
    pub fn new(per_second: u32, seed: u64) -> SourceRates {
        SourceRates {
            buckets: vec![Bucket::default(); SOURCE_BUCKETS].into_boxed_slice(),
            seed,
            per_second,
        }
    }

    /// Whether `src` may open one more connection at `now` (seconds); if so, counted.
    #[inline]
    pub fn admit(&mut self, src: IpAddr, now: u32) -> bool {
        if self.per_second == 0 {
            return true;
        }
        let i = bucket_of(src, self.seed, SOURCE_BUCKETS);
        let Some(b) = self.buckets.get_mut(i) else {
            return true;
        };
        if b.second != now {
            *b = Bucket {
                second: now,
                count: 0,
            };
        }
        if b.count >= self.per_second {
            return false;
        }
        b.count += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_gets_its_budget_per_second_and_others_theirs() {
        let mut r = SourceRates::new(3, 7);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "fd00::2".parse().unwrap());
        assert_ne!(
            bucket_of(a, 7, SOURCE_BUCKETS),
            bucket_of(b, 7, SOURCE_BUCKETS)
        );
        for _ in 0..3 {
            assert!(r.admit(a, 10));
        }
        assert!(!r.admit(a, 10));
        assert!(r.admit(b, 10));
        assert!(r.admit(a, 11));
        assert!(SourceRates::new(0, 7).admit(a, 10));
    }
}
