//! [`HugeSlice`]: a fixed-length table in memory aligned to 2 MiB and advised for
//! transparent huge pages.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::ptr::NonNull;

/// Huge page size (x86-64 and aarch64 with 4 KiB base pages).
const HUGE: usize = 2 << 20;

/// A boxed slice for big lookup tables built off the hot path (the flow table's entries
/// and index): allocated here at a 2 MiB boundary when it is at least 2 MiB, and advised
/// for transparent huge pages before it is filled, so that every 2 MiB of it (the tail
/// too, when the kernel can) is one TLB entry. A `Box<[T]>` from the global allocator
/// starts a few bytes into its mapping (or anywhere in the heap), so the huge pages that
/// [`advise_huge_pages`](super::advise_huge_pages) can get for it start at the first 2 MiB
/// boundary inside it: a 2.4 MB flow index (100k flows) had none.
pub struct HugeSlice<T> {
    ptr: NonNull<T>,
    len: usize,
}

// SAFETY: a `HugeSlice<T>` owns its elements exactly like a `Box<[T]>`.
unsafe impl<T: Send> Send for HugeSlice<T> {}
// SAFETY: shared access only hands out `&[T]`.
unsafe impl<T: Sync> Sync for HugeSlice<T> {}

impl<T: Clone> HugeSlice<T> {
    /// `len` copies of `value`.
    pub fn filled(value: T, len: usize) -> HugeSlice<T> {
        let Some(layout) = Self::layout(len) else {
            // Nothing to allocate (no elements, or zero-sized ones).
            return HugeSlice {
                ptr: NonNull::dangling(),
                len,
            };
        };
        // SAFETY: `layout` has a non-zero size (`layout` returns `None` otherwise).
        let raw = unsafe { alloc(layout) }.cast::<T>();
        let Some(ptr) = NonNull::new(raw) else {
            handle_alloc_error(layout);
        };
        super::advise_huge_range(ptr.as_ptr().cast(), layout.size());
        for i in 0..len {
            // SAFETY: `i < len`, so the element lies inside the allocation, which is
            // aligned for `T`; it is uninitialised, so `write` overwrites nothing that
            // needs dropping. (If `clone` panicked, the elements written so far would
            // leak with the allocation: never unsound.)
            unsafe { ptr.as_ptr().add(i).write(value.clone()) };
        }
        HugeSlice { ptr, len }
    }
}

impl<T: Clone> HugeSlice<T> {
    /// A copy of `items` (cloned one by one) in such memory.
    pub fn from_slice(items: &[T]) -> HugeSlice<T> {
        let len = items.len();
        let Some(layout) = Self::layout(len) else {
            return HugeSlice {
                ptr: NonNull::dangling(),
                len,
            };
        };
        // SAFETY: `layout` has a non-zero size (`layout` returns `None` otherwise).
        let raw = unsafe { alloc(layout) }.cast::<T>();
        let Some(ptr) = NonNull::new(raw) else {
            handle_alloc_error(layout);
        };
        super::advise_huge_range(ptr.as_ptr().cast(), layout.size());
        for (i, item) in items.iter().enumerate() {
            // SAFETY: as in `filled`: `i < len`, inside the aligned allocation, and
            // nothing there yet needs dropping.
            unsafe { ptr.as_ptr().add(i).write(item.clone()) };
        }
        HugeSlice { ptr, len }
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
    /// The allocation of `len` elements, `None` when it would be empty.
    fn layout(len: usize) -> Option<Layout> {
        let size = std::mem::size_of::<T>().checked_mul(len)?;
        if size == 0 {
            return None;
        }
        let align = if size >= HUGE {
            HUGE
        } else {
            std::mem::align_of::<T>()
        };
        Layout::from_size_align(size, align).ok()
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
        // SAFETY: the `len` elements are initialised and dropped once, here; then the
        // memory is returned with the layout it was allocated with (same `len`, same `T`).
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                self.ptr.as_ptr(),
                self.len,
            ));
            dealloc(self.ptr.as_ptr().cast(), layout);
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
        assert!(c == b && c.clone() == b && d.clone() == d);
        assert!(c != HugeSlice::filled(1u64, b.len()));
        assert!(HugeSlice::<u64>::from_slice(&[]).is_empty());
    }
}
