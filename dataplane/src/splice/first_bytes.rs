//! The first bytes of a connection, as they arrive: segments placed by sequence number
//! into a fixed buffer, in any order, duplicates and overlaps merged, so the parsers see
//! the contiguous prefix.

/// Why bytes were not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// They reach beyond the buffer.
    TooLong,
    /// They would make more separate pieces (holes between them) than allowed.
    TooManyPieces,
}

/// The most separate pieces a buffer tracks.
pub const MAX_PIECES: usize = 8;

/// Which byte ranges of a buffer hold data: sorted, disjoint, non-adjacent `[start,
/// end)` pieces (24 + 8·[`MAX_PIECES`] bytes; the bytes themselves live in the caller's
/// buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pieces {
    ranges: [(u32, u32); MAX_PIECES],
    n: u8,
    max: u8,
}

impl Pieces {
    /// No bytes, up to [`MAX_PIECES`] pieces.
    pub const EMPTY: Pieces = Pieces {
        ranges: [(0, 0); MAX_PIECES],
        n: 0,
        max: MAX_PIECES as u8,
    };

    /// No bytes yet; at most `max` pieces (1..=8) at a time.
    pub fn new(max: usize) -> Pieces {
        Pieces {
            max: max.clamp(1, MAX_PIECES) as u8,
            ..Pieces::default()
        }
    }

    /// Copies `data`, which starts `offset` bytes into the stream, into `buf`. Bytes
    /// already held are overwritten with the same offsets (a retransmission carries the
    /// same bytes; a peer that sends different bytes for one offset gets the last ones both
    /// parsed and replayed, so routing and backend agree). Fails, taking nothing, if the
    /// bytes do not fit.
    pub fn insert(&mut self, buf: &mut [u8], offset: u32, data: &[u8]) -> Result<(), Overflow> {
        if data.is_empty() {
            return Ok(());
        }
        let start = offset as usize;
        let end = start.saturating_add(data.len());
        if end > buf.len() {
            return Err(Overflow::TooLong);
        }
        let (s, e) = (start as u32, end as u32);
        // Merge with every piece that overlaps or touches [s, e).
        let n = usize::from(self.n);
        let first = self.ranges[..n].partition_point(|r| r.1 < s);
        let last = self.ranges[..n].partition_point(|r| r.0 <= e);
        let merged = last.saturating_sub(first);
        if merged == 0 && n >= usize::from(self.max) {
            return Err(Overflow::TooManyPieces);
        }
        buf[start..end].copy_from_slice(data);
        let (ns, ne) = if merged == 0 {
            (s, e)
        } else {
            (s.min(self.ranges[first].0), e.max(self.ranges[last - 1].1))
        };
        if merged == 0 {
            self.ranges.copy_within(first..n, first + 1);
            self.n += 1;
        } else {
            self.ranges.copy_within(last..n, first + 1);
            self.n -= (merged - 1) as u8;
        }
        self.ranges[first] = (ns, ne);
        Ok(())
    }

    /// Bytes held from offset 0 without a hole.
    pub fn contiguous(&self) -> usize {
        match self.ranges[..usize::from(self.n)].first() {
            Some(&(0, e)) => e as usize,
            _ => 0,
        }
    }

    /// Separate pieces held.
    pub fn pieces(&self) -> usize {
        usize::from(self.n)
    }

    /// The end of the furthest byte held.
    pub fn end(&self) -> usize {
        self.ranges[..usize::from(self.n)]
            .last()
            .map_or(0, |r| r.1 as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn in_order_out_of_order_and_duplicates() {
        let mut buf = [0u8; 32];
        let mut p = Pieces::new(8);
        p.insert(&mut buf, 5, b"fgh").unwrap();
        assert_eq!(p.contiguous(), 0);
        p.insert(&mut buf, 0, b"abc").unwrap();
        assert_eq!((p.contiguous(), p.pieces()), (3, 2));
        p.insert(&mut buf, 3, b"de").unwrap();
        assert_eq!((p.contiguous(), p.pieces()), (8, 1));
        p.insert(&mut buf, 2, b"cdef").unwrap();
        assert_eq!((p.contiguous(), p.pieces()), (8, 1));
        assert_eq!(&buf[..8], b"abcdefgh");
        assert_eq!(p.insert(&mut buf, 30, b"xyz"), Err(Overflow::TooLong));
        assert_eq!(p.end(), 8);
    }

    #[test]
    fn too_many_pieces() {
        let mut buf = [0u8; 64];
        let mut p = Pieces::new(2);
        p.insert(&mut buf, 10, b"a").unwrap();
        p.insert(&mut buf, 20, b"b").unwrap();
        assert_eq!(p.insert(&mut buf, 30, b"c"), Err(Overflow::TooManyPieces));
        // Touching an existing piece still fits.
        p.insert(&mut buf, 11, b"x").unwrap();
        p.insert(&mut buf, 12, b"yyyyyyyy").unwrap();
        assert_eq!(p.pieces(), 1);
        p.insert(&mut buf, 0, &[1; 10]).unwrap();
        assert_eq!(p.contiguous(), 21);
    }

    proptest! {
        /// Against a plain bitmap: same coverage, same bytes, for any arrival order.
        #[test]
        fn matches_a_bitmap(segs in prop::collection::vec((0u32..200, 1usize..40), 1..30)) {
            let stream: Vec<u8> = (0..256u32).map(|i| (i * 7) as u8).collect();
            let mut buf = [0u8; 240];
            let mut have = [false; 240];
            let mut p = Pieces::new(MAX_PIECES);
            for (off, len) in segs {
                let end = (off as usize + len).min(256);
                let data = &stream[off as usize..end];
                let before = p;
                match p.insert(&mut buf, off, data) {
                    Ok(()) => {
                        for h in &mut have[off as usize..end] { *h = true; }
                    }
                    Err(Overflow::TooLong) => { prop_assert!(end > 240); prop_assert_eq!(p, before); }
                    Err(Overflow::TooManyPieces) => { prop_assert_eq!(p, before); }
                }
                let contiguous = have.iter().take_while(|&&h| h).count();
                prop_assert_eq!(p.contiguous(), contiguous);
                let pieces = have.windows(2).filter(|w| !w[0] && w[1]).count() + usize::from(have[0]);
                prop_assert_eq!(p.pieces(), pieces);
                for (i, h) in have.iter().enumerate() {
                    if *h { prop_assert_eq!(buf[i], stream[i]); }
                }
            }
        }
    }
}
