//! CPU helpers for the hot path: the time-stamp counter, software prefetches and a
//! SIMD fingerprint compare. Each is a few instructions with a portable fallback on
//! architectures other than x86-64.

/// The CPU's time-stamp counter (constant-rate on every x86-64 CPU DPDK supports); on
/// other architectures, nanoseconds since the first call.
#[inline]
pub fn tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no preconditions and touches no memory.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos() as u64
    }
}

/// Ticks of [`tsc`] per second, measured once against the monotonic clock (20 ms).
pub fn tsc_hz() -> u64 {
    static HZ: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *HZ.get_or_init(|| {
        let (t0, c0) = (std::time::Instant::now(), tsc());
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (dt, dc) = (t0.elapsed(), tsc().wrapping_sub(c0));
        ((dc as f64) / dt.as_secs_f64()).max(1.0) as u64
    })
}

/// Hints the CPU to bring the cache lines holding `*p` into every cache level (a read
/// prefetch, `PREFETCHT0`): for a burst that looks up many hashed tables, prefetching
/// every packet's slot before the first lookup overlaps the cache misses. `T` may be
/// unsized (a byte slice: every line it spans; an empty one: the line of its address).
/// Only a hint: no effect on program state, a no-op on architectures other than x86-64.
#[inline]
pub fn prefetch_read<T: ?Sized>(p: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        const LINE: usize = 64;
        let base = (p as *const T).cast::<i8>();
        let size = std::mem::size_of_val(p).max(1);
        // The first byte's offset in its line: lines start at `-skew`, `LINE - skew`, ...
        let skew = base as usize % LINE;
        let mut off = 0;
        while off < skew + size {
            // SAFETY: PREFETCHT0 is a hint that never faults and neither reads nor writes
            // program-visible memory, whatever the address; the address is computed with
            // `wrapping_*` arithmetic (no out-of-bounds `add`) from a valid reference, and
            // it is never dereferenced.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(base.wrapping_add(off).wrapping_sub(skew)) };
            off += LINE;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = p;
    }
}

/// Prefetches the cache line holding the start of `*p` into the core's L2, not its L1
/// (`PREFETCHT1`): for a line that a later stage of a burst reads *and writes*, such as a
/// flow entry ([`crate::flow::FlowTable::prefetch_entry`]), which arrives late when
/// fetched into L1; see `bench_balance` and `perf/NOTES.md`.
#[inline(always)]
pub fn prefetch_l2<T>(p: &T) {
    #[cfg(target_arch = "x86_64")]
    prefetch_hint::<{ core::arch::x86_64::_MM_HINT_T1 }, T>(p);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Like [`prefetch_read`], for the one cache line that holds the start of `*p` (a table
/// slot, a filter word, one byte of a name): a single instruction, no loop.
#[inline]
pub fn prefetch_line<T>(p: &T) {
    #[cfg(target_arch = "x86_64")]
    prefetch_hint::<{ core::arch::x86_64::_MM_HINT_T0 }, T>(p);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Which of 32 16-bit lanes (one 64-byte line of them) equal `value`, as a bit mask (bit
/// `i`: lane `i`): the fingerprint compare of a hash table whose groups keep their
/// fingerprints in one line. On x86-64, four SSE2 compares and two byte masks (about a
/// dozen instructions, where a plain loop compiles to about sixty).
#[inline]
pub fn eq_lanes_u16x32(lanes: &[u16; 32], value: u16) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{
            __m128i, _mm_cmpeq_epi16, _mm_loadu_si128, _mm_movemask_epi8, _mm_packs_epi16,
            _mm_set1_epi16,
        };
        let base = lanes.as_ptr().cast::<__m128i>();
        // SAFETY: SSE2 is part of x86-64, so its intrinsics run on every CPU this code
        // can run on; `lanes` is 64 readable bytes, so the four unaligned 16-byte loads at
        // offsets 0, 16, 32 and 48 stay inside it. Equal lanes compare to 0xffff (-1),
        // the others to 0; packing to bytes keeps both, and each byte mask then has one
        // bit per lane.
        unsafe {
            let [a, b, c, d] = [0, 1, 2, 3].map(|k| _mm_loadu_si128(base.add(k)));
            let v = _mm_set1_epi16(value as i16);
            let low = _mm_packs_epi16(_mm_cmpeq_epi16(a, v), _mm_cmpeq_epi16(b, v));
            let high = _mm_packs_epi16(_mm_cmpeq_epi16(c, v), _mm_cmpeq_epi16(d, v));
            (_mm_movemask_epi8(low) as u32 & 0xffff) | ((_mm_movemask_epi8(high) as u32) << 16)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        lanes
            .iter()
            .enumerate()
            .fold(0, |m, (i, &l)| m | (u32::from(l == value) << i))
    }
}

/// One `PREFETCHh` of the line holding the start of `*p`, `HINT` saying which cache.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_hint<const HINT: i32, T>(p: &T) {
    // SAFETY: PREFETCHh is a hint that never faults and neither reads nor writes
    // program-visible memory; the address comes from a valid reference and is never
    // dereferenced.
    unsafe { core::arch::x86_64::_mm_prefetch::<HINT>((p as *const T).cast::<i8>()) };
}
