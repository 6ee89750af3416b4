//! The owned packet buffer ([`Pkt`]), the pool of plain buffers behind the TAP, pcap and
//! in-memory ports ([`Pool`]), and the fixed-capacity [`Burst`].
//!
//! A `Pkt` owns its memory: an mbuf (DPDK) or one buffer of a [`Pool`]. Dropping it returns
//! the memory to where it came from; nothing is ever leaked or forgotten.
//!
//! **Per-thread cache.** Like DPDK's per-lcore mempool cache, each thread keeps a small
//! LIFO stack of one pool's free buffers in front of the pool's shared lock-free queue:
//! allocating and freeing on a thread whose cache belongs to the packet's pool is a plain
//! pop or push, with no atomic instruction, and the buffers it hands out are the ones
//! freed last (still in the CPU's caches) rather than the least recently used of the
//! whole pool. The cache is bound to the pool of the first buffer it takes and re-bound
//! when it is empty (or holds the last buffers of a pool nobody else uses any more); it
//! refills from and spills to the shared queue half a cache at a time, and gives
//! everything back when its thread exits. It holds at most 1/16 of a pool (none for pools
//! under 128 buffers), so threads' caches cannot starve the shared queue.

use core::ptr::NonNull;
use crossbeam_queue::ArrayQueue;
use std::sync::Arc;

/// Packets per burst: the unit of rx, processing and tx.
pub const BURST: usize = 32;

/// Bytes reserved before the data of a pool buffer, so headers can be prepended (the same
/// as DPDK's default `RTE_PKTMBUF_HEADROOM`).
pub const HEADROOM: usize = 128;

/// Room for data in a pool buffer after the headroom: a standard MTU frame and then some
/// (DPDK's default mbuf data room is 2048 + headroom as well).
pub const DATA_ROOM: usize = 2048;

/// Tag in the low bit of a packet's pointer: set for pool buffers, clear for mbufs (which
/// are cache-line aligned, so their low bit is always clear).
const POOL_TAG: usize = 1;

/// Bytes reserved at the start of each pool buffer for its [`PoolHdr`].
const HDR_ROOM: usize = 64;

/// The header of a pool buffer: where its data is and whom to give it back to. Lives in the
/// first [`HDR_ROOM`] bytes of the buffer itself, like an mbuf's header.
#[repr(C, align(64))]
struct PoolHdr {
    /// The pool; the packet holds one strong count of it while it lives.
    pool: NonNull<PoolInner>,
    /// Start of the buffer room (after this header).
    base: NonNull<u8>,
    idx: u32,
    off: u16,
    len: u16,
    room: u16,
}

/// An owned packet buffer, one pointer wide (bursts are arrays of pointers, as in DPDK):
/// an mbuf, or a [`Pool`] buffer whose header sits in front of its data. `len` bytes of
/// data start at an offset (the headroom) into a buffer room.
#[repr(transparent)]
pub struct Pkt {
    ptr: NonNull<u8>,
}

// SAFETY: a `Pkt` is the only handle to its buffer (pool buffers are handed out once until
// returned; mbufs are owned after rx/alloc), and both places it may return to (crossbeam
// `ArrayQueue`, DPDK mempools) are thread-safe, so moving it across threads is sound.
unsafe impl Send for Pkt {}

/// The four numbers that locate a packet's data.
#[derive(Clone, Copy)]
struct Geom {
    base: *mut u8,
    off: u16,
    len: u16,
    room: u16,
}

impl Pkt {
    #[inline(always)]
    fn hdr(&self) -> Option<*mut PoolHdr> {
        let a = self.ptr.as_ptr() as usize;
        (a & POOL_TAG != 0).then_some((a & !POOL_TAG) as *mut PoolHdr)
    }

    #[inline(always)]
    fn geom(&self) -> Geom {
        match self.hdr() {
            Some(h) => {
                // SAFETY: a tagged pointer always points at the live header of the pool
                // buffer this packet owns.
                let h = unsafe { &*h };
                Geom {
                    base: h.base.as_ptr(),
                    off: h.off,
                    len: h.len,
                    room: h.room,
                }
            }
            #[cfg(feature = "dpdk")]
            None => {
                // SAFETY: an untagged pointer is an mbuf this packet owns.
                let m = unsafe { &*self.ptr.as_ptr().cast::<dpdk_sys::rte_mbuf>() };
                Geom {
                    base: m.buf_addr.cast::<u8>(),
                    off: m.data_off,
                    len: m.data_len,
                    room: m.buf_len,
                }
            }
            #[cfg(not(feature = "dpdk"))]
            None => unreachable!("without DPDK every packet is a pool buffer"),
        }
    }

    #[inline]
    fn set_geom(&mut self, off: u16, len: u16) {
        match self.hdr() {
            Some(h) => {
                // SAFETY: as in `geom`; `&mut self` makes the access exclusive.
                let h = unsafe { &mut *h };
                h.off = off;
                h.len = len;
            }
            #[cfg(feature = "dpdk")]
            None => {
                // SAFETY: as in `geom`; a single-segment mbuf has pkt_len == data_len.
                let m = unsafe { &mut *self.ptr.as_ptr().cast::<dpdk_sys::rte_mbuf>() };
                m.data_off = off;
                m.data_len = len;
                m.pkt_len = u32::from(len);
            }
            #[cfg(not(feature = "dpdk"))]
            None => unreachable!("without DPDK every packet is a pool buffer"),
        }
    }

    /// The packet's bytes.
    #[inline]
    pub fn data(&self) -> &[u8] {
        let g = self.geom();
        // SAFETY: [base+off, base+off+len) lies inside the buffer this packet owns
        // (invariant kept by every constructor and setter: off + len <= room).
        unsafe { core::slice::from_raw_parts(g.base.add(usize::from(g.off)), usize::from(g.len)) }
    }

    /// The packet's bytes, mutable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let g = self.geom();
        // SAFETY: as in `data`; `&mut self` makes the access exclusive.
        unsafe {
            core::slice::from_raw_parts_mut(g.base.add(usize::from(g.off)), usize::from(g.len))
        }
    }

    /// Data length.
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.geom().len)
    }

    /// Whether the packet holds no data.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes free before the data.
    #[inline]
    pub fn headroom(&self) -> usize {
        usize::from(self.geom().off)
    }

    /// Bytes free after the data.
    #[inline]
    pub fn tailroom(&self) -> usize {
        let g = self.geom();
        usize::from(g.room - g.off - g.len)
    }

    /// The largest `len` that [`Pkt::set_len`] accepts.
    #[inline]
    pub fn capacity(&self) -> usize {
        let g = self.geom();
        usize::from(g.room - g.off)
    }

    /// Sets the data length (growing exposes whatever bytes the buffer holds there).
    /// Returns `false` and changes nothing if `len` exceeds [`Pkt::capacity`].
    #[inline]
    pub fn set_len(&mut self, len: usize) -> bool {
        let g = self.geom();
        if len > usize::from(g.room - g.off) {
            return false;
        }
        self.set_geom(g.off, len as u16);
        true
    }

    /// Moves the start of the data `n` bytes earlier (into the headroom). `false` if the
    /// headroom is smaller.
    #[inline]
    pub fn prepend(&mut self, n: usize) -> bool {
        let g = self.geom();
        if n > usize::from(g.off) {
            return false;
        }
        self.set_geom(g.off - n as u16, g.len + n as u16);
        true
    }

    /// Removes `n` bytes from the front of the data. `false` if the data is shorter.
    #[inline]
    pub fn adj(&mut self, n: usize) -> bool {
        let g = self.geom();
        if n > usize::from(g.len) {
            return false;
        }
        self.set_geom(g.off + n as u16, g.len - n as u16);
        true
    }

    /// Replaces the data with a copy of `bytes` at the default headroom. `false` if it does
    /// not fit.
    pub fn copy_from(&mut self, bytes: &[u8]) -> bool {
        let g = self.geom();
        let off = usize::from(g.off).min(HEADROOM);
        if off + bytes.len() > usize::from(g.room) {
            return false;
        }
        self.set_geom(off as u16, bytes.len() as u16);
        self.data_mut().copy_from_slice(bytes);
        true
    }

    /// Wraps a received or allocated mbuf.
    ///
    /// # Safety
    /// `m` must be a valid, exclusively owned, single-segment mbuf.
    #[cfg(feature = "dpdk")]
    #[inline]
    pub(crate) unsafe fn from_mbuf(m: NonNull<dpdk_sys::rte_mbuf>) -> Pkt {
        debug_assert_eq!(m.as_ptr() as usize & POOL_TAG, 0);
        Pkt { ptr: m.cast() }
    }

    /// If this packet is an mbuf, gives it up (the caller now owns the mbuf, whose header
    /// already holds the packet's offset and length); otherwise returns the packet.
    #[cfg(feature = "dpdk")]
    #[inline]
    pub(crate) fn into_mbuf(self) -> Result<NonNull<dpdk_sys::rte_mbuf>, Pkt> {
        if self.hdr().is_some() {
            return Err(self);
        }
        // Ownership moves to the returned mbuf: our Drop must not free it.
        let this = core::mem::ManuallyDrop::new(self);
        Ok(this.ptr.cast())
    }

    /// Number of buffer segments (1 unless a PMD chained mbufs).
    #[inline]
    pub fn segments(&self) -> u16 {
        match self.hdr() {
            Some(_) => 1,
            #[cfg(feature = "dpdk")]
            // SAFETY: an untagged pointer is an mbuf this packet owns.
            None => unsafe { (*self.ptr.as_ptr().cast::<dpdk_sys::rte_mbuf>()).nb_segs },
            #[cfg(not(feature = "dpdk"))]
            None => 1,
        }
    }

    /// Whether this packet is an mbuf.
    #[inline]
    pub fn is_mbuf(&self) -> bool {
        self.hdr().is_none()
    }
}

impl Drop for Pkt {
    #[inline]
    fn drop(&mut self) {
        match self.hdr() {
            Some(h) => {
                // SAFETY: the header is live; the packet holds one strong count of the pool
                // (taken in `Pool::alloc` or carried over from a thread cache).
                let (pool, idx) = unsafe { ((*h).pool, (*h).idx) };
                if cache_put(pool, idx) {
                    return; // the buffer and its strong count went to this thread's cache
                }
                // SAFETY: the packet's strong count keeps the pool alive until it is given
                // back right here, after the buffer index went back on the free list.
                unsafe {
                    let pool = Arc::from_raw(pool.as_ptr().cast_const());
                    // Cannot fail: the queue has room for every buffer and idx was taken
                    // from it once.
                    let _ = pool.free.push(idx);
                    drop(pool);
                }
            }
            #[cfg(feature = "dpdk")]
            // SAFETY: the packet owns the mbuf (chain); it is freed exactly once, here.
            None => unsafe { dpdk_sys::rte_pktmbuf_free(self.ptr.as_ptr().cast()) },
            #[cfg(not(feature = "dpdk"))]
            None => {}
        }
    }
}

impl core::fmt::Debug for Pkt {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let g = self.geom();
        f.debug_struct("Pkt")
            .field("len", &g.len)
            .field("headroom", &g.off)
            .field("mbuf", &self.is_mbuf())
            .finish()
    }
}

struct PoolInner {
    mem: NonNull<u8>,
    layout: std::alloc::Layout,
    slot: usize,
    count: usize,
    /// Buffers a thread cache holds at most for this pool (0: no caching).
    cache_cap: usize,
    free: ArrayQueue<u32>,
}

/// Buffers a thread's cache holds at most (DPDK's default mempool cache is 256 or 512).
const CACHE_MAX: usize = 256;
/// A thread's cache holds at most this fraction of a pool (1/16).
const CACHE_SHARE: usize = 16;

/// A thread's cache of one pool's free buffers (see the module docs). Each cached buffer
/// holds one strong count of its pool, which moves with it into the packet it becomes
/// and back, so the pool's memory outlives every cached buffer.
struct Cache {
    /// The pool the cached buffers belong to; only meaningful while `len > 0` (an empty
    /// cache is re-bound by the next user).
    pool: *const PoolInner,
    /// `pool`'s `cache_cap`.
    cap: usize,
    len: usize,
    idx: [u32; CACHE_MAX],
}

impl Cache {
    const EMPTY: Cache = Cache {
        pool: core::ptr::null(),
        cap: 0,
        len: 0,
        idx: [0; CACHE_MAX],
    };

    /// Gives cached buffers back to the shared queue until `keep` are left, with their
    /// strong counts (which may free the pool).
    fn spill(&mut self, keep: usize) {
        let Some(pool) = NonNull::new(self.pool.cast_mut()) else {
            return;
        };
        while self.len > keep {
            self.len -= 1;
            // SAFETY: each cached buffer holds a strong count of `pool` (see `Cache`), so
            // the pool is alive here; the buffer's count is given back after its index is
            // on the free list, and the pool is not touched again once the last count of
            // this loop may have gone.
            unsafe {
                // Cannot fail: the queue has room for every buffer.
                let _ = (*pool.as_ptr()).free.push(self.idx[self.len]);
                Arc::decrement_strong_count(pool.as_ptr().cast_const());
            }
        }
    }
}

impl Drop for Cache {
    fn drop(&mut self) {
        self.spill(0);
    }
}

thread_local! {
    static CACHE: core::cell::RefCell<Cache> = const { core::cell::RefCell::new(Cache::EMPTY) };
}

/// Puts a freed buffer (with its strong count) in this thread's cache if the cache is
/// for its pool (binding an empty cache to it). `false`: the caller frees it to the pool.
#[inline]
fn cache_put(pool: NonNull<PoolInner>, idx: u32) -> bool {
    CACHE
        .try_with(|c| {
            let Ok(mut c) = c.try_borrow_mut() else {
                return false;
            };
            if c.len == 0 {
                // SAFETY: the caller's packet holds a strong count of `pool`: it is alive.
                let cap = unsafe { (*pool.as_ptr()).cache_cap };
                if cap == 0 {
                    return false;
                }
                c.pool = pool.as_ptr();
                c.cap = cap;
            } else if c.pool != pool.as_ptr().cast_const() {
                return false;
            }
            if c.len == c.cap {
                // Full: half of it goes back (never the last count: the caller's packet
                // still holds one).
                let keep = c.cap / 2;
                c.spill(keep);
            }
            let n = c.len;
            c.idx[n] = idx;
            c.len = n + 1;
            true
        })
        .unwrap_or(false)
}

// SAFETY: the memory is only reached through packets, each of which owns a disjoint buffer;
// the free list is a lock-free MPMC queue.
unsafe impl Send for PoolInner {}
// SAFETY: as above.
unsafe impl Sync for PoolInner {}

impl Drop for PoolInner {
    fn drop(&mut self) {
        // SAFETY: `mem` came from `alloc_zeroed(layout)` in `Pool::new`, and no packet
        // refers to it any more (each holds a strong count).
        unsafe { std::alloc::dealloc(self.mem.as_ptr(), self.layout) };
    }
}

/// A fixed pool of packet buffers, allocated once. Allocation and free are a pop and a
/// push on a lock-free queue: no heap allocation per packet.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<PoolInner>,
}

impl core::fmt::Debug for Pool {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Pool")
            .field("count", &self.inner.count)
            .field("in_use", &self.in_use())
            .finish()
    }
}

impl Pool {
    /// A pool of `count` buffers of `HEADROOM + DATA_ROOM` bytes (plus a 64-byte header).
    pub fn new(count: usize) -> Pool {
        let count = count.clamp(1, 1 << 24);
        let slot = HDR_ROOM + HEADROOM + DATA_ROOM;
        let layout = std::alloc::Layout::from_size_align(slot * count, 64)
            .unwrap_or_else(|_| std::alloc::Layout::new::<PoolHdr>());
        // SAFETY: the layout has a non-zero size.
        let mem = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(mem) = NonNull::new(mem) else {
            std::alloc::handle_alloc_error(layout)
        };
        let free = ArrayQueue::new(count);
        for i in 0..count as u32 {
            let _ = free.push(i);
        }
        let cache_cap = if count >= 8 * CACHE_SHARE {
            (count / CACHE_SHARE).min(CACHE_MAX)
        } else {
            0
        };
        Pool {
            inner: Arc::new(PoolInner {
                mem,
                layout,
                slot,
                count,
                cache_cap,
                free,
            }),
        }
    }

    /// Takes a buffer index from this thread's cache, refilling it (or binding it to this
    /// pool) when it is empty. `None`: the cache is another pool's, or there is no free
    /// buffer; the caller falls back to the shared queue. A returned index carries one
    /// strong count of the pool.
    #[inline]
    fn cache_take(&self) -> Option<u32> {
        let me = Arc::as_ptr(&self.inner);
        CACHE
            .try_with(|c| {
                let mut c = c.try_borrow_mut().ok()?;
                if c.len > 0 && c.pool != me {
                    // SAFETY: the cached buffers hold strong counts of `c.pool`, so it is
                    // alive; the handle only reads the count and is never dropped (it
                    // stands for one of the cache's counts, which stays the cache's).
                    let other = core::mem::ManuallyDrop::new(unsafe { Arc::from_raw(c.pool) });
                    // Only the cache holds that pool (no handle, no packet, so nobody can
                    // take another count of it): give its buffers back, which frees it,
                    // and take the cache over. Otherwise leave the cache to it.
                    if Arc::strong_count(&other) != c.len {
                        return None;
                    }
                    c.spill(0);
                }
                if c.len == 0 {
                    let cap = self.inner.cache_cap;
                    if cap == 0 {
                        return None;
                    }
                    c.pool = me;
                    c.cap = cap;
                    while c.len < cap / 2 {
                        let Some(i) = self.inner.free.pop() else {
                            break;
                        };
                        // SAFETY: `me` is a live `Arc` (we hold `self`): the count taken
                        // here travels with the cached buffer.
                        unsafe { Arc::increment_strong_count(me) };
                        let n = c.len;
                        c.idx[n] = i;
                        c.len = n + 1;
                    }
                    if c.len == 0 {
                        return None;
                    }
                }
                c.len -= 1;
                Some(c.idx[c.len])
            })
            .ok()
            .flatten()
    }

    /// Gives this thread's cached buffers of this pool back to the shared queue.
    fn cache_flush(&self) {
        let me = Arc::as_ptr(&self.inner);
        let _ = CACHE.try_with(|c| {
            if let Ok(mut c) = c.try_borrow_mut() {
                if c.len > 0 && c.pool == me {
                    c.spill(0);
                }
            }
        });
    }

    /// An empty packet with [`HEADROOM`] bytes of headroom, or `None` if every buffer is
    /// in use.
    #[inline]
    pub fn alloc(&self) -> Option<Pkt> {
        let (idx, raw) = match self.cache_take() {
            // The index carries its strong count.
            Some(i) => (i, Arc::as_ptr(&self.inner)),
            None => {
                let i = self.inner.free.pop()?;
                (i, Arc::into_raw(Arc::clone(&self.inner)))
            }
        };
        // SAFETY: idx < count, so the slot lies inside the pool's allocation; it is
        // 64-byte aligned (slot size and base are multiples of 64) and nobody else uses it.
        unsafe {
            let h = self.inner.mem.as_ptr().add(idx as usize * self.inner.slot);
            h.cast::<PoolHdr>().write(PoolHdr {
                pool: NonNull::new_unchecked(raw.cast_mut()),
                base: NonNull::new_unchecked(h.add(HDR_ROOM)),
                idx,
                off: HEADROOM as u16,
                len: 0,
                room: (HEADROOM + DATA_ROOM) as u16,
            });
            Some(Pkt {
                ptr: NonNull::new_unchecked(h.map_addr(|a| a | POOL_TAG)),
            })
        }
    }

    /// A packet holding a copy of `bytes`, or `None` if the pool is empty or the bytes
    /// do not fit.
    pub fn alloc_copy(&self, bytes: &[u8]) -> Option<Pkt> {
        let mut p = self.alloc()?;
        if p.copy_from(bytes) {
            Some(p)
        } else {
            None
        }
    }

    /// Number of buffers.
    pub fn count(&self) -> usize {
        self.inner.count
    }

    /// Buffers currently held by packets (or by another live thread's cache: this
    /// thread's cache is given back first; a thread's cache empties when it exits).
    pub fn in_use(&self) -> usize {
        self.cache_flush();
        self.inner.count - self.inner.free.len()
    }
}

/// A burst: up to [`BURST`] packets, in a vector allocated once and never grown.
#[derive(Debug)]
pub struct Burst {
    pkts: Vec<Pkt>,
}

impl Default for Burst {
    fn default() -> Self {
        Burst::new()
    }
}

impl Burst {
    /// An empty burst with room for [`BURST`] packets.
    pub fn new() -> Burst {
        Burst {
            pkts: Vec::with_capacity(BURST),
        }
    }

    /// Number of packets.
    #[inline]
    pub fn len(&self) -> usize {
        self.pkts.len()
    }

    /// Whether the burst is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pkts.is_empty()
    }

    /// Whether the burst holds [`BURST`] packets.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.pkts.len() >= BURST
    }

    /// Room left.
    #[inline]
    pub fn room(&self) -> usize {
        BURST - self.pkts.len().min(BURST)
    }

    /// Appends a packet; gives it back if the burst is full.
    #[inline]
    pub fn push(&mut self, p: Pkt) -> Result<(), Pkt> {
        if self.is_full() {
            Err(p)
        } else {
            self.pkts.push(p);
            Ok(())
        }
    }

    /// Removes and returns the packet at `i` (later ones move up), if there is one.
    #[inline]
    pub fn remove(&mut self, i: usize) -> Option<Pkt> {
        (i < self.pkts.len()).then(|| self.pkts.remove(i))
    }

    /// Removes and returns the last packet.
    #[inline]
    pub fn pop(&mut self) -> Option<Pkt> {
        self.pkts.pop()
    }

    /// The packets.
    #[inline]
    pub fn as_slice(&self) -> &[Pkt] {
        &self.pkts
    }

    /// The packets, mutable.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [Pkt] {
        &mut self.pkts
    }

    /// Removes the first `n` packets (they were sent) and returns them.
    #[inline]
    pub fn drain_front(&mut self, n: usize) -> std::vec::Drain<'_, Pkt> {
        let n = n.min(self.pkts.len());
        self.pkts.drain(..n)
    }

    /// Removes every packet, in order.
    #[inline]
    pub fn drain(&mut self) -> std::vec::Drain<'_, Pkt> {
        self.pkts.drain(..)
    }

    /// Removes the first `n` packets *without* dropping them: their ownership went
    /// elsewhere (a device took them).
    #[cfg(feature = "dpdk")]
    #[inline]
    pub(crate) fn release_front(&mut self, n: usize) {
        let len = self.pkts.len();
        let n = n.min(len);
        // SAFETY: the first n elements are given up (not dropped); the remaining len - n
        // are moved to the front (ptr::copy handles the overlap) before the length is
        // set, so every element is owned exactly once afterwards.
        unsafe {
            let p = self.pkts.as_mut_ptr();
            self.pkts.set_len(0);
            core::ptr::copy(p.add(n), p, len - n);
            self.pkts.set_len(len - n);
        }
    }

    /// The burst as an array of mbuf pointers, with the bytes they hold, if every packet
    /// is an mbuf (for tx). The check ORs the pointers' tag bits (no early exit, so it
    /// vectorises); the bytes are summed straight from the mbufs' headers.
    #[cfg(feature = "dpdk")]
    #[inline]
    pub(crate) fn as_mbuf_array(&mut self) -> Option<(*mut *mut dpdk_sys::rte_mbuf, u64)> {
        let tags = self
            .pkts
            .iter()
            .fold(0usize, |t, p| t | p.ptr.as_ptr() as usize);
        if tags & POOL_TAG != 0 {
            return None;
        }
        let bytes = self
            .pkts
            .iter()
            .map(|p| {
                // SAFETY: no pointer is tagged, so each is an mbuf this burst owns.
                u64::from(unsafe { (*p.ptr.as_ptr().cast::<dpdk_sys::rte_mbuf>()).data_len })
            })
            .sum();
        // `Pkt` is a transparent untagged mbuf pointer for mbufs.
        Some((self.pkts.as_mut_ptr().cast(), bytes))
    }

    /// Lets `fill` write up to `room` mbuf pointers after the current packets and takes
    /// ownership of the `n` it reports.
    ///
    /// # Safety
    /// `fill` must write `n <= room` valid, exclusively owned mbuf pointers to the start of
    /// the array it is given, and return `n`.
    #[cfg(feature = "dpdk")]
    #[inline]
    pub(crate) unsafe fn fill_mbufs(
        &mut self,
        fill: impl FnOnce(*mut *mut dpdk_sys::rte_mbuf, u16) -> u16,
    ) -> usize {
        let len = self.pkts.len();
        let room = self.room();
        // SAFETY: capacity is BURST >= len + room, so the spare part holds `room` slots;
        // `Pkt` is a transparent pointer and untagged mbuf pointers are valid `Pkt`s.
        unsafe {
            let spare = self
                .pkts
                .as_mut_ptr()
                .add(len)
                .cast::<*mut dpdk_sys::rte_mbuf>();
            let n = usize::from(fill(spare, room as u16)).min(room);
            self.pkts.set_len(len + n);
            n
        }
    }

    /// Drops every packet (returning their buffers); returns how many there were.
    #[inline]
    pub fn clear(&mut self) -> usize {
        let n = self.pkts.len();
        self.pkts.clear();
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_free_and_bounds() {
        let pool = Pool::new(4);
        let mut a = pool.alloc_copy(b"hello").unwrap();
        assert_eq!(a.data(), b"hello");
        assert_eq!(a.headroom(), HEADROOM);
        assert_eq!(pool.in_use(), 1);
        assert!(a.prepend(2));
        a.data_mut()[..2].copy_from_slice(b"<<");
        assert_eq!(a.data(), b"<<hello");
        assert!(a.adj(2));
        assert_eq!(a.data(), b"hello");
        assert!(!a.adj(6));
        assert!(!a.set_len(DATA_ROOM + 1));
        assert!(a.set_len(DATA_ROOM));
        assert_eq!(a.tailroom(), 0);
        assert_eq!(core::mem::size_of::<Pkt>(), core::mem::size_of::<usize>());
        assert!(!a.is_mbuf());
        let b = pool.alloc().unwrap();
        let c = pool.alloc().unwrap();
        let d = pool.alloc().unwrap();
        assert!(pool.alloc().is_none());
        drop((a, b));
        assert_eq!(pool.in_use(), 2);
        drop((c, d));
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn packets_outlive_the_pool_handle_and_cross_threads() {
        let pool = Pool::new(2);
        let p = pool.alloc_copy(&[1, 2, 3]).unwrap();
        let probe = pool.clone();
        drop(pool);
        let p = std::thread::spawn(move || {
            assert_eq!(p.data(), &[1, 2, 3]);
            p
        })
        .join()
        .unwrap();
        assert_eq!(probe.in_use(), 1);
        drop(p);
        assert_eq!(probe.in_use(), 0);
    }

    #[test]
    fn thread_cache_reuses_buffers_and_gives_them_back() {
        let pool = Pool::new(1024);
        assert_eq!(pool.inner.cache_cap, 64);
        // LIFO: the buffer freed last is the next one handed out.
        let a = pool.alloc().unwrap();
        let at = a.ptr;
        drop(a);
        let b = pool.alloc().unwrap();
        assert_eq!(b.ptr, at);
        // Every buffer can still be taken (the cache's and the queue's), then none.
        let mut all = vec![b];
        while let Some(p) = pool.alloc() {
            all.push(p);
        }
        assert_eq!(all.len(), 1024);
        assert_eq!(pool.in_use(), 1024);
        // Freeing more than a cache holds spills to the shared queue.
        all.clear();
        assert_eq!(pool.in_use(), 0);
        // Another thread's cache gives its buffers back when the thread exits.
        let p2 = pool.clone();
        std::thread::spawn(move || {
            let v: Vec<Pkt> = (0..100).filter_map(|_| p2.alloc()).collect();
            assert_eq!(v.len(), 100);
        })
        .join()
        .unwrap();
        assert_eq!(pool.in_use(), 0);
        // Packets freed on a thread whose cache is another live pool's go to their own
        // pool's queue.
        let other = Pool::new(512);
        let x = other.alloc().unwrap(); // binds this thread's cache to `other`
        let y = pool.alloc().unwrap();
        drop(y);
        assert_eq!(pool.in_use(), 0);
        drop(x);
        // A pool whose only references are cached buffers is released by the next pool
        // that needs the cache.
        let weak = Arc::downgrade(&other.inner);
        drop(other);
        assert!(
            weak.upgrade().is_some(),
            "the cache still holds its buffers"
        );
        let z = pool.alloc().unwrap();
        assert!(weak.upgrade().is_none(), "the orphaned pool was freed");
        drop(z);
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn burst_is_bounded() {
        let pool = Pool::new(BURST + 1);
        let mut b = Burst::new();
        for _ in 0..BURST {
            assert!(b.push(pool.alloc().unwrap()).is_ok());
        }
        assert!(b.push(pool.alloc().unwrap()).is_err());
        assert_eq!(b.drain_front(10).count(), 10);
        assert_eq!(b.len(), BURST - 10);
        assert_eq!(b.clear(), BURST - 10);
        assert_eq!(pool.in_use(), 0);
    }
}
