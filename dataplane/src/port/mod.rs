//! Ports: packets in and out of NIC queues, TAP devices, pcap files and in-memory wires.
//!
//! A backend opens a device and splits it in two:
//!
//! - a [`Port`] (shared, `Arc`): name, MAC, queue count, link state, device counters;
//! - one [`Queue`] per queue pair (owned by the worker that polls it): burst rx and tx of
//!   owned [`Pkt`]s.
//!
//! Backends: `dpdk` (cargo feature `dpdk`: any PMD, by PCI address or vdev devargs),
//! [`tap`] (Linux `/dev/net/tun`, no DPDK), [`pcap`] (a capture file as rx, another as
//! tx) and [`mem`] (two connected ports in memory, for tests and benchmarks).
//!
//! TX contract: `tx_burst` takes packets from the front of the burst; what it does not take
//! stays in the burst, and the caller frees it and counts it as a drop. Nothing leaks.
//!
//! This module (with `dpdk-sys`) is where sluice's `unsafe` lives; every block carries a
//! `// SAFETY:` comment.

mod huge;
pub mod mem;
pub mod pcap;
mod pkt;
pub mod tap;

#[cfg(feature = "dpdk")]
pub mod dpdk;

pub use huge::HugeSlice;
pub use pkt::{Burst, Pkt, Pool, BURST, DATA_ROOM, HEADROOM};

use crate::wire::MacAddr;
use std::sync::Arc;

/// Link state of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// Link up, with its speed in Mbit/s when the device knows it.
    Up {
        /// Speed in Mbit/s (0 = unknown).
        speed_mbps: u32,
    },
    /// Link down.
    Down,
}

/// Device counters of a port (what the device itself saw; the worker's counters say what
/// sluice did with the packets).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets the device dropped on receive (no buffer, queue full, ...).
    pub rx_missed: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Transmit errors.
    pub tx_errors: u64,
}

/// A device: what is shared between the workers polling its queues and the control thread.
pub trait Port: Send + Sync {
    /// The port's name (from the configuration).
    fn name(&self) -> &str;
    /// The MAC address sluice uses on this port.
    fn mac(&self) -> MacAddr;
    /// Number of rx/tx queue pairs.
    fn queues(&self) -> u16;
    /// Current link state.
    fn link(&self) -> LinkState;
    /// Device counters.
    fn stats(&self) -> PortStats;
}

/// One rx/tx queue pair of a port, polled by exactly one worker.
pub trait Queue: Send {
    /// Receives up to `out.room()` packets, appending them to `out`. Returns how many.
    fn rx_burst(&mut self, out: &mut Burst) -> usize;
    /// As [`Queue::rx_burst`], and also returns the bytes received (the worker's
    /// `rx_bytes`). The default adds up the new packets' lengths; a queue that walks its
    /// packets anyway (DPDK checks every mbuf's segment count) adds them up in that pass.
    #[inline]
    fn rx_burst_counted(&mut self, out: &mut Burst) -> (usize, u64) {
        let before = out.len();
        let n = self.rx_burst(out);
        let bytes = out.as_slice()[before..]
            .iter()
            .map(|p| p.len() as u64)
            .sum();
        (n, bytes)
    }
    /// Sends packets from the front of `pkts`, removing those the device took. Returns
    /// how many were taken; the rest stay in `pkts` for the caller to free and count.
    fn tx_burst(&mut self, pkts: &mut Burst) -> usize;
    /// As [`Queue::tx_burst`], and also returns the bytes of the packets taken (the
    /// worker's `tx_bytes`). The default adds up lengths before and after; DPDK adds them
    /// up in the pass that checks every packet is an mbuf.
    #[inline]
    fn tx_burst_counted(&mut self, pkts: &mut Burst) -> (usize, u64) {
        let len = |b: &Burst| b.as_slice().iter().map(|p| p.len() as u64).sum::<u64>();
        let before = len(pkts);
        let sent = self.tx_burst(pkts);
        (sent, before - len(pkts))
    }
    /// Packets the queue itself had to discard (foreign buffers it could not copy, ...),
    /// since the queue was opened.
    fn discarded(&self) -> u64 {
        0
    }
    /// Where fresh buffers for packets sent on this queue come from (the worker hands
    /// them to its stage for packets it makes up: ARP requests, ...). `None` (the
    /// default): the queue has no buffers of its own (in-memory ports).
    fn allocator(&self) -> Option<Allocator> {
        None
    }
}

/// A source of fresh packet buffers: a [`Pool`], or (DPDK) a port's mbuf mempool.
/// Cloning is cheap; allocation takes no lock and no heap memory.
#[derive(Clone, Debug)]
pub struct Allocator(AllocFrom);

#[derive(Clone, Debug)]
enum AllocFrom {
    Pool(Pool),
    #[cfg(feature = "dpdk")]
    Mbuf(dpdk::MbufAlloc),
}

impl Allocator {
    /// An empty packet (length 0, default headroom), or `None` if none is free.
    #[inline]
    pub fn alloc(&self) -> Option<Pkt> {
        match &self.0 {
            AllocFrom::Pool(p) => p.alloc(),
            #[cfg(feature = "dpdk")]
            AllocFrom::Mbuf(m) => m.alloc(),
        }
    }

    #[cfg(feature = "dpdk")]
    pub(crate) fn mbuf(m: dpdk::MbufAlloc) -> Allocator {
        Allocator(AllocFrom::Mbuf(m))
    }
}

impl From<Pool> for Allocator {
    fn from(p: Pool) -> Allocator {
        Allocator(AllocFrom::Pool(p))
    }
}

/// An opened device: the shared port and one queue per queue pair.
pub struct Opened {
    /// The port.
    pub port: Arc<dyn Port>,
    /// Its queues, index = queue id.
    pub queues: Vec<Box<dyn Queue>>,
}

impl core::fmt::Debug for Opened {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Opened")
            .field("port", &self.port.name())
            .field("queues", &self.queues.len())
            .finish()
    }
}

/// How to open a port (plain data; `sluice-ctrl` translates the Appliance manifest into it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortKind {
    /// A Linux TAP device of this name, created if absent.
    Tap {
        /// Interface name (at most 15 bytes).
        ifname: String,
    },
    /// A DPDK ethdev: a PCI address (`0000:3b:00.0`) or vdev devargs
    /// (`net_tap0,iface=x`, `net_ring0`, ...).
    Dpdk {
        /// Devargs.
        devargs: String,
    },
    /// A pcap file replayed as rx (once, then nothing) and a pcap file written from tx.
    Pcap {
        /// Capture to read (`None`: nothing is received).
        rx: Option<std::path::PathBuf>,
        /// Capture to write (`None`: sent packets are discarded after counting).
        tx: Option<std::path::PathBuf>,
    },
}

/// Errors opening or driving a port.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PortError {
    /// An OS call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// DPDK refused something.
    #[error("DPDK: {0}")]
    Dpdk(String),
    /// A setting that cannot work.
    #[error("{0}")]
    Config(String),
    /// The DPDK backend is not compiled in.
    #[error("port {0}: this build has no DPDK backend (rebuild with the `dpdk` feature)")]
    NoDpdk(String),
}

impl PortError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> PortError {
        PortError::Io {
            what: what.into(),
            source,
        }
    }
}

/// A locally administered unicast MAC derived from a name (stable across runs), for ports
/// whose device has no MAC of sluice's own (TAP, pcap, memory).
pub fn mac_from_name(name: &str) -> MacAddr {
    // FNV-1a, 64 bits.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let b = h.to_be_bytes();
    MacAddr([0x02, b[1], b[2], b[3], b[4], b[5]])
}

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
/// flow entry, which on the Zen 4 machine the benchmarks run on was still missing when
/// fetched into L1 (see [`crate::flow::FlowTable::prefetch_entry`] for the figures).
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

/// Asks the kernel to back the `len` bytes at `start` with transparent huge pages (2 MiB
/// on x86-64; `madvise(MADV_HUGEPAGE)` on the whole 4 KiB pages inside them), for big
/// lookup tables built off the hot path ([`HugeSlice`] calls it on fresh memory before
/// filling it, so that the first touch of each 2 MiB region faults in a huge page). The
/// range must lie inside one allocation or mapping of this program (initialised or not;
/// nothing is read or written). Only advice: where the kernel has no transparent huge
/// pages (or the range is under 2 MiB, or not on Linux) nothing happens. Returns
/// whether the kernel took the advice.
fn advise_huge_range(start_ptr: *const u8, len: usize) -> bool {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        const HUGE: usize = 2 << 20;
        let start = start_ptr as usize;
        if len < HUGE {
            return false;
        }
        let first = start.next_multiple_of(PAGE);
        let end = (start + len) & !(PAGE - 1);
        if end <= first {
            return false;
        }
        let addr = start_ptr.wrapping_add(first - start);
        // SAFETY: `[first, end)` is a page-aligned range inside the allocation that
        // `[start, start + len)` lies in (the caller's promise; rounded inwards), so it
        // maps memory this program owns. MADV_HUGEPAGE
        // only sets a flag on the mapping telling the kernel it may back these pages with
        // huge pages; it never changes their contents or their validity, and nothing is
        // read or written through the pointer.
        let rc = unsafe { libc::madvise(addr.cast_mut().cast(), end - first, libc::MADV_HUGEPAGE) };
        rc == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (start_ptr, len);
        false
    }
}
