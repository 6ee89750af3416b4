//! [`HugeSlice`]: a fixed-length table in memory aligned to 2 MiB and advised for
//! transparent huge pages.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::ptr::NonNull;

/// Huge page size (x86-64 and aarch64 with 4 KiB base pages).
const HUGE: usize = 2 << 20;

/// A boxed slice for big lookup tables built off the hot path (the flow table's entries
/// and index, the compiled tables): when it is at least 2 MiB, a fresh mapping of whole
/// 2 MiB pages at a 2 MiB boundary, advised for transparent huge pages before it is
/// filled, so that every 2 MiB of it is one TLB entry. A `Box<[T]>` from the global
/// allocator starts a few bytes into its mapping (or anywhere in the heap, on pages
/// already faulted in), so the huge pages that advice can get for it start at the first
/// 2 MiB boundary inside it, and a table of a few MiB may get none (`perf/NOTES.md`).
pub struct HugeSlice<T> {
    ptr: NonNull<T>,
    len: usize,
    /// Whether the memory is a mapping of its own ([`map_huge`]) rather than the global
    /// allocator's.
    mapped: bool,
}

// SAFETY: a `HugeSlice<T>` owns its elements exactly like a `Box<[T]>`.
unsafe impl<T: Send> Send for HugeSlice<T> {}
// SAFETY: shared access only hands out `&[T]`.
unsafe impl<T: Sync> Sync for HugeSlice<T> {}

impl<T: Clone> HugeSlice<T> {
    /// `len` copies of `value`.
    pub fn filled(value: T, len: usize) -> HugeSlice<T> {
        Self::from_fn(len, |_| value.clone())
    }

    /// A copy of `items` (cloned one by one) in such memory.
    pub fn from_slice(items: &[T]) -> HugeSlice<T> {
        Self::from_fn(items.len(), |i| items[i].clone())
    }
}

impl<T: Clone> Clone for HugeSlice<T> {
    fn clone(&self) -> Self {
        HugeSlice::from_slice(self)
    }
}

impl<T: PartialEq> PartialEq for HugeSlice<T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: Eq> Eq for HugeSlice<T> {}

impl<T> HugeSlice<T> {
    /// `len` elements, element `i` made by `make(i)`.
    fn from_fn(len: usize, mut make: impl FnMut(usize) -> T) -> HugeSlice<T> {
        let Some(layout) = Self::layout(len) else {
            // Nothing to allocate (no elements, or zero-sized ones).
            return HugeSlice {
                ptr: NonNull::dangling(),
                len,
                mapped: false,
            };
        };
        let (ptr, mapped) = Self::allocate(layout);
        for i in 0..len {
            // SAFETY: `i < len`, so the element lies inside the allocation, which is
            // aligned for `T`; it is uninitialised, so `write` overwrites nothing that
            // needs dropping. (If `make` panicked, the elements written so far would
            // leak with the allocation: never unsound.)
            unsafe { ptr.as_ptr().add(i).write(make(i)) };
        }
        HugeSlice { ptr, len, mapped }
    }

    /// The allocation of `len` elements, `None` when it would be empty.
    fn layout(len: usize) -> Option<Layout> {
        let size = std::mem::size_of::<T>().checked_mul(len)?;
        if size == 0 {
            return None;
        }
        // A big one takes whole huge pages, its tail too: the kernel backs only whole
        // 2 MiB regions with one (the 1.2 MiB tail of a 3.2 MiB table would stay on
        // 4 KiB pages). The price is under 2 MiB of memory per table.
        if size >= HUGE {
            return Layout::from_size_align(size.checked_next_multiple_of(HUGE)?, HUGE).ok();
        }
        Layout::from_size_align(size, std::mem::align_of::<T>()).ok()
    }

    /// Memory for `layout` (non-zero size), uninitialised, and whether it is a mapping
    /// of its own. A big one is a fresh mapping, advised for huge pages before anything
    /// touches it: the global allocator may hand out heap memory that earlier
    /// allocations already faulted in with 4 KiB pages (glibc serves even requests of
    /// many MiB from the heap once big blocks have been freed), and the advice does not
    /// change pages already there.
    fn allocate(layout: Layout) -> (NonNull<T>, bool) {
        if layout.align() == HUGE {
            if let Some(p) = map_huge(layout.size()) {
                return (p.cast(), true);
            }
        }
        // SAFETY: `layout` has a non-zero size (`layout` returns `None` otherwise).
        let raw = unsafe { alloc(layout) }.cast::<T>();
        let Some(ptr) = NonNull::new(raw) else {
            handle_alloc_error(layout);
        };
        advise_huge_range(ptr.as_ptr().cast(), layout.size());
        (ptr, false)
    }
}

/// A fresh anonymous mapping of `size` bytes (a multiple of [`HUGE`]) at a 2 MiB
/// boundary, advised for transparent huge pages; `None` where that fails (or off
/// Linux), for the global allocator to serve instead.
fn map_huge(size: usize) -> Option<NonNull<u8>> {
    #[cfg(target_os = "linux")]
    {
        let span = size.checked_add(HUGE)?;
        // SAFETY: a new private anonymous mapping; it aliases nothing.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return None;
        }
        let base = raw as usize;
        let start = base.next_multiple_of(HUGE);
        let (head, tail) = (start - base, base + span - (start + size));
        // SAFETY: the head and tail lie inside the mapping just made, outside
        // `start..start + size`, and nothing uses them; unmapping page-aligned parts of
        // a mapping is allowed (`HUGE` and `size` are multiples of the page size).
        unsafe {
            if head > 0 {
                libc::munmap(raw, head);
            }
            if tail > 0 {
                libc::munmap((start + size) as *mut libc::c_void, tail);
            }
        }
        advise_huge_range(start as *const u8, size);
        NonNull::new(start as *mut u8)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = size;
        None
    }
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

impl<T> std::ops::Deref for HugeSlice<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` points to `len` initialised elements (or is dangling and aligned
        // with nothing to read), owned by `self` for as long as the borrow.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> std::ops::DerefMut for HugeSlice<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> Drop for HugeSlice<T> {
    fn drop(&mut self) {
        let Some(layout) = Self::layout(self.len) else {
            return;
        };
        // SAFETY: the `len` elements are initialised and dropped once, here.
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                self.ptr.as_ptr(),
                self.len,
            ));
        }
        if self.mapped {
            // SAFETY: the memory is the mapping `map_huge` made for this layout's size
            // (same `len`, same `T`), used by nothing else, and unmapped once.
            #[cfg(target_os = "linux")]
            unsafe {
                libc::munmap(self.ptr.as_ptr().cast(), layout.size());
            }
        } else {
            // SAFETY: the memory came from `alloc` with this layout (same `len`, same
            // `T`), and is returned once.
            unsafe { dealloc(self.ptr.as_ptr().cast(), layout) };
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for HugeSlice<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HugeSlice").field("len", &self.len).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_big_slices_hold_their_values() {
        let s = HugeSlice::filled(7u64, 3);
        assert_eq!(&*s, &[7, 7, 7]);
        let mut b = HugeSlice::filled(1u64, (HUGE / 8) * 3 / 2);
        assert_eq!(b.as_ptr() as usize % HUGE, 0);
        b[5] = 9;
        assert_eq!(b.iter().sum::<u64>(), b.len() as u64 + 8);
        let e = HugeSlice::filled(0u8, 0);
        assert!(e.is_empty());
        let z = HugeSlice::filled((), 5);
        assert_eq!(z.len(), 5);
        let d = HugeSlice::filled(vec![1u8; 4], 10);
        assert_eq!(d[9], vec![1; 4]);
        let c = HugeSlice::from_slice(&b);
        assert_eq!(c.as_ptr() as usize % HUGE, 0);
        // Big ones are mappings of their own on Linux; small ones never are.
        assert_eq!(b.mapped && c.mapped, cfg!(target_os = "linux"));
        assert!(!s.mapped && !d.mapped);
        assert!(c == b && c.clone() == b && d.clone() == d);
        assert!(c != HugeSlice::filled(1u64, b.len()));
        assert!(HugeSlice::<u64>::from_slice(&[]).is_empty());
    }
}
