//! The owned packet buffer ([`Pkt`]), the pool of plain buffers behind the TAP, pcap and
//! in-memory ports ([`Pool`]), and the fixed-capacity [`Burst`].
//!
//! A `Pkt` owns its memory: an mbuf (DPDK) or one buffer of a [`Pool`]. Dropping it returns
//! the memory to where it came from; nothing is ever leaked or forgotten.

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

/// Where a packet's memory came from and goes back to.
enum Owner {
    /// Buffer `idx` of a [`Pool`]; the packet holds one strong count of the pool.
    Pool(NonNull<PoolInner>, u32),
    /// A single-segment DPDK mbuf.
    #[cfg(feature = "dpdk")]
    Mbuf(NonNull<dpdk_sys::rte_mbuf>),
}

/// An owned packet buffer: `len` bytes of data at offset `off` of a buffer of `room` bytes.
pub struct Pkt {
    base: NonNull<u8>,
    off: u16,
    len: u16,
    room: u16,
    owner: Owner,
}

// SAFETY: a `Pkt` is the only handle to its buffer region (pool buffers are handed out
// once until returned; mbufs are owned after rx/alloc), and both pools it may return to
// (crossbeam `ArrayQueue`, DPDK mempools) are thread-safe, so moving it across threads is
// sound.
unsafe impl Send for Pkt {}

impl Pkt {
    /// The packet's bytes.
    #[inline]
    pub fn data(&self) -> &[u8] {
        // SAFETY: [base+off, base+off+len) lies inside the buffer this packet owns
        // (invariant kept by every constructor and setter: off + len <= room).
        unsafe {
            core::slice::from_raw_parts(
                self.base.as_ptr().add(usize::from(self.off)),
                usize::from(self.len),
            )
        }
    }

    /// The packet's bytes, mutable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `data`; `&mut self` makes the access exclusive.
        unsafe {
            core::slice::from_raw_parts_mut(
                self.base.as_ptr().add(usize::from(self.off)),
                usize::from(self.len),
            )
        }
    }

    /// Data length.
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether the packet holds no data.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes free before the data.
    #[inline]
    pub fn headroom(&self) -> usize {
        usize::from(self.off)
    }

    /// Bytes free after the data.
    #[inline]
    pub fn tailroom(&self) -> usize {
        usize::from(self.room - self.off - self.len)
    }

    /// The largest `len` that [`Pkt::set_len`] accepts.
    #[inline]
    pub fn capacity(&self) -> usize {
        usize::from(self.room - self.off)
    }

    /// Sets the data length (growing exposes whatever bytes the buffer holds there).
    /// Returns `false` and changes nothing if `len` exceeds [`Pkt::capacity`].
    #[inline]
    pub fn set_len(&mut self, len: usize) -> bool {
        if len > self.capacity() {
            return false;
        }
        self.len = len as u16;
        true
    }

    /// Moves the start of the data `n` bytes earlier (into the headroom). `false` if the
    /// headroom is smaller.
    #[inline]
    pub fn prepend(&mut self, n: usize) -> bool {
        if n > self.headroom() {
            return false;
        }
        self.off -= n as u16;
        self.len += n as u16;
        true
    }

    /// Removes `n` bytes from the front of the data. `false` if the data is shorter.
    #[inline]
    pub fn adj(&mut self, n: usize) -> bool {
        if n > self.len() {
            return false;
        }
        self.off += n as u16;
        self.len -= n as u16;
        true
    }

    /// Replaces the data with a copy of `bytes` at the default headroom. `false` if it does
    /// not fit.
    pub fn copy_from(&mut self, bytes: &[u8]) -> bool {
        let off = usize::from(self.off).min(HEADROOM);
        if off + bytes.len() > usize::from(self.room) {
            return false;
        }
        self.off = off as u16;
        self.len = bytes.len() as u16;
        self.data_mut().copy_from_slice(bytes);
        true
    }

    /// Wraps a received single-segment mbuf.
    ///
    /// # Safety
    /// `m` must be a valid, exclusively owned, single-segment mbuf.
    #[cfg(feature = "dpdk")]
    #[inline]
    pub(crate) unsafe fn from_mbuf(m: NonNull<dpdk_sys::rte_mbuf>) -> Pkt {
        // SAFETY: the caller hands over a valid mbuf; we only read its header fields.
        let r = unsafe { m.as_ref() };
        Pkt {
            // SAFETY: buf_addr of a pktmbuf is never null.
            base: unsafe { NonNull::new_unchecked(r.buf_addr.cast::<u8>()) },
            off: r.data_off,
            len: r.data_len,
            room: r.buf_len,
            owner: Owner::Mbuf(m),
        }
    }

    /// If this packet is an mbuf, gives it up: writes the data offset and length back into
    /// the mbuf header and returns the mbuf, which the caller now owns. Otherwise returns
    /// the packet unchanged.
    #[cfg(feature = "dpdk")]
    #[inline]
    pub(crate) fn into_mbuf(self) -> Result<NonNull<dpdk_sys::rte_mbuf>, Pkt> {
        match self.owner {
            Owner::Mbuf(mut m) => {
                let (off, len) = (self.off, self.len);
                // Ownership moves to the returned mbuf: our Drop must not free it.
                let _this = core::mem::ManuallyDrop::new(self);
                // SAFETY: we owned the mbuf exclusively until this point.
                let r = unsafe { m.as_mut() };
                r.data_off = off;
                r.data_len = len;
                r.pkt_len = u32::from(len);
                Ok(m)
            }
            Owner::Pool(..) => Err(self),
        }
    }
}

impl Drop for Pkt {
    #[inline]
    fn drop(&mut self) {
        match self.owner {
            Owner::Pool(inner, idx) => {
                // SAFETY: the packet holds one strong count of the pool (taken in
                // `Pool::alloc`), so `inner` is alive; it is given back right here.
                unsafe {
                    let pool = Arc::from_raw(inner.as_ptr().cast_const());
                    // Cannot fail: the queue has room for every buffer and idx was taken
                    // from it once.
                    let _ = pool.free.push(idx);
                    drop(pool);
                }
            }
            #[cfg(feature = "dpdk")]
            // SAFETY: the packet owns the mbuf; it is freed exactly once, here.
            Owner::Mbuf(m) => unsafe { dpdk_sys::rte_pktmbuf_free(m.as_ptr()) },
        }
    }
}

impl core::fmt::Debug for Pkt {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Pkt")
            .field("len", &self.len)
            .field("headroom", &self.off)
            .finish()
    }
}

struct PoolInner {
    mem: NonNull<u8>,
    buf_size: usize,
    count: usize,
    free: ArrayQueue<u32>,
}

// SAFETY: the memory is only reached through packets, each of which owns a disjoint buffer;
// the free list is a lock-free MPMC queue.
unsafe impl Send for PoolInner {}
// SAFETY: as above.
unsafe impl Sync for PoolInner {}

impl Drop for PoolInner {
    fn drop(&mut self) {
        let size = self.buf_size * self.count;
        // SAFETY: `mem` came from `Box<[u8]>` of exactly `size` bytes in `Pool::new`, and no
        // packet refers to it any more (each holds a strong count).
        unsafe {
            drop(Box::from_raw(core::ptr::slice_from_raw_parts_mut(
                self.mem.as_ptr(),
                size,
            )));
        }
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
    /// A pool of `count` buffers of `HEADROOM + DATA_ROOM` bytes.
    pub fn new(count: usize) -> Pool {
        let count = count.clamp(1, u32::MAX as usize);
        let buf_size = HEADROOM + DATA_ROOM;
        let mem: Box<[u8]> = vec![0u8; buf_size * count].into_boxed_slice();
        let mem = NonNull::from(Box::leak(mem)).cast::<u8>();
        let free = ArrayQueue::new(count);
        for i in 0..count as u32 {
            let _ = free.push(i);
        }
        Pool {
            inner: Arc::new(PoolInner {
                mem,
                buf_size,
                count,
                free,
            }),
        }
    }

    /// An empty packet with [`HEADROOM`] bytes of headroom, or `None` if every buffer is
    /// in use.
    #[inline]
    pub fn alloc(&self) -> Option<Pkt> {
        let idx = self.inner.free.pop()?;
        let raw = Arc::into_raw(Arc::clone(&self.inner));
        // SAFETY: idx < count, so the offset stays inside the pool's allocation.
        let base = unsafe { self.inner.mem.add(idx as usize * self.inner.buf_size) };
        Some(Pkt {
            base,
            off: HEADROOM as u16,
            len: 0,
            room: self.inner.buf_size as u16,
            // SAFETY: Arc::into_raw never returns null.
            owner: Owner::Pool(unsafe { NonNull::new_unchecked(raw.cast_mut()) }, idx),
        })
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

    /// Buffers currently held by packets.
    pub fn in_use(&self) -> usize {
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
