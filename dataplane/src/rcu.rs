//! Snapshot publication, RCU-style with quiescent-state-based reclamation (QSBR), as
//! DESIGN.md §4 and DPDK's `rte_rcu_qsbr` describe it.
//!
//! - The control thread [`Publisher::publish`]es a new immutable value (a `Snapshot` of
//!   every table a packet needs): one atomic pointer store, one generation number.
//! - Each worker owns a [`Reader`]. Once per burst it calls [`Reader::read`]: one atomic
//!   load of the pointer and one store of the generation it saw into its own cache line.
//!   That store is its quiescent state: "I hold nothing older than this generation".
//! - The control thread frees a retired value ([`Publisher::reclaim`]) only once every
//!   online reader has recorded a newer generation. Nothing is ever freed on a worker,
//!   and the read side takes no lock and touches no shared reference count.
//!
//! The borrow checker carries half of the contract: the reference [`Reader::read`]
//! returns borrows the reader mutably, so it cannot outlive the next `read` (the next
//! quiescent point). [`Reader::offline`] lets a worker that stops polling (or parks)
//! drop out of the grace-period computation; a reader comes back online with a
//! conservative generation first, so a value cannot be freed under it.
//!
//! This module holds `unsafe` code (raw pointers to published values); each block says
//! why it is sound. It is one of the "documented few others" of DESIGN.md §2.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Recorded by a reader that is offline (not holding anything).
const OFFLINE: u64 = u64::MAX;

/// A published value and its generation.
struct Versioned<T> {
    generation: u64,
    value: T,
}

/// One reader's quiescent state, alone on its cache line.
#[repr(align(64))]
struct Slot {
    seen: AtomicU64,
}

/// State shared by the publisher and the readers.
struct Shared<T> {
    current: AtomicPtr<Versioned<T>>,
    slots: Box<[Slot]>,
    /// Reader slots handed out (index = slot).
    taken: Mutex<Vec<bool>>,
}

// SAFETY: `Shared<T>` hands `&T` to several threads (readers) and moves `T` to the
// thread that frees it (the publisher); that needs `T: Send + Sync`, which the bounds
// require. The raw pointer is only dereferenced under the QSBR protocol described in
// the module docs.
#[allow(unsafe_code)]
unsafe impl<T: Send + Sync> Send for Shared<T> {}
// SAFETY: as above; all shared mutation goes through atomics or the mutex.
#[allow(unsafe_code)]
unsafe impl<T: Send + Sync> Sync for Shared<T> {}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        let p = *self.current.get_mut();
        if !p.is_null() {
            // SAFETY: `p` came from `Box::into_raw` in `publish`/`new`, was never freed
            // (only retired values are freed, and the current one is never retired), and
            // no reader can exist any more: every `Reader` holds an `Arc<Shared>`.
            #[allow(unsafe_code)]
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

/// The control thread's end: publishes values and frees retired ones.
pub struct Publisher<T> {
    shared: Arc<Shared<T>>,
    generation: u64,
    retired: Vec<*mut Versioned<T>>,
}

// SAFETY: the publisher owns the retired values (moved between threads with it) and
// shares the current one with readers: `T: Send + Sync` covers both.
#[allow(unsafe_code)]
unsafe impl<T: Send + Sync> Send for Publisher<T> {}

/// A worker's end: reads the current value once per burst.
pub struct Reader<T> {
    shared: Arc<Shared<T>>,
    index: usize,
}

impl<T> std::fmt::Debug for Reader<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("index", &self.index)
            .finish()
    }
}

impl<T> std::fmt::Debug for Publisher<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("generation", &self.generation)
            .field("retired", &self.retired.len())
            .finish()
    }
}

impl<T: Send + Sync> Publisher<T> {
    /// Starts with `value` as generation 1, with room for `max_readers` readers.
    pub fn new(value: T, max_readers: usize) -> Self {
        let first = Box::into_raw(Box::new(Versioned {
            generation: 1,
            value,
        }));
        let slots = (0..max_readers)
            .map(|_| Slot {
                seen: AtomicU64::new(OFFLINE),
            })
            .collect();
        Publisher {
            shared: Arc::new(Shared {
                current: AtomicPtr::new(first),
                slots,
                taken: Mutex::new(vec![false; max_readers]),
            }),
            generation: 1,
            retired: Vec::new(),
        }
    }

    /// A reader for one worker (offline until its first [`Reader::read`]); `None` when
    /// every slot is taken.
    pub fn reader(&self) -> Option<Reader<T>> {
        let mut taken = self.shared.taken.lock().ok()?;
        let index = taken.iter().position(|t| !t)?;
        taken[index] = true;
        Some(Reader {
            shared: Arc::clone(&self.shared),
            index,
        })
    }

    /// The generation of the current value.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The current value (the control thread may read it too).
    pub fn current(&self) -> &T {
        let p = self.shared.current.load(Ordering::Acquire);
        // SAFETY: only this publisher replaces and frees values, and it never frees the
        // current one; `&self` keeps it from publishing while this borrow lives.
        #[allow(unsafe_code)]
        unsafe {
            &(*p).value
        }
    }

    /// Makes `value` current and retires the previous one; returns the new generation.
    /// Readers see it at their next [`Reader::read`]. Call [`Publisher::reclaim`] (or
    /// [`Publisher::synchronize`]) to free retired values.
    pub fn publish(&mut self, value: T) -> u64 {
        self.generation += 1;
        let next = Box::into_raw(Box::new(Versioned {
            generation: self.generation,
            value,
        }));
        let old = self.shared.current.swap(next, Ordering::SeqCst);
        self.retired.push(old);
        self.reclaim();
        self.generation
    }

    /// The oldest generation an online reader may still hold (`u64::MAX` when none is
    /// online).
    pub fn oldest_in_use(&self) -> u64 {
        self.shared
            .slots
            .iter()
            .map(|s| s.seen.load(Ordering::SeqCst))
            .min()
            .unwrap_or(OFFLINE)
    }

    /// Frees every retired value that no online reader can still hold; returns how many
    /// retired values are still waiting.
    pub fn reclaim(&mut self) -> usize {
        let oldest = self.oldest_in_use();
        self.retired.retain(|&p| {
            // SAFETY: `p` is a retired value from `Box::into_raw`, not yet freed (it is
            // still in the list); reading its generation is fine while it is alive.
            #[allow(unsafe_code)]
            let generation = unsafe { (*p).generation };
            if generation < oldest {
                // SAFETY: every online reader recorded a generation newer than `p`'s
                // after loading the pointer it uses, so none holds `p`; offline readers
                // hold nothing; `p` is no longer current (it was swapped out). The box
                // is freed once: it leaves the list here.
                #[allow(unsafe_code)]
                drop(unsafe { Box::from_raw(p) });
                false
            } else {
                true
            }
        });
        self.retired.len()
    }

    /// Waits (polling every `poll`) until every retired value is freed, or until `limit`
    /// polls have passed; returns whether everything was freed. A reader that stops
    /// reading without going offline holds reclamation back; that is what this reports.
    pub fn synchronize(&mut self, poll: std::time::Duration, limit: u32) -> bool {
        for _ in 0..limit {
            if self.reclaim() == 0 {
                return true;
            }
            std::thread::sleep(poll);
        }
        self.reclaim() == 0
    }

    /// Retired values not yet freed.
    pub fn pending(&self) -> usize {
        self.retired.len()
    }
}

impl<T> Drop for Publisher<T> {
    fn drop(&mut self) {
        // Readers may outlive the publisher, so retired values can only be freed when
        // no reader can hold them. Wait briefly for online readers to move on; values a
        // stuck reader still holds are leaked rather than freed under it.
        let oldest = || {
            self.shared
                .slots
                .iter()
                .map(|s| s.seen.load(Ordering::Acquire))
                .min()
                .unwrap_or(OFFLINE)
        };
        for _ in 0..1000 {
            let o = oldest();
            let all_free = self.retired.iter().all(|&p| {
                // SAFETY: retired pointers are alive until freed below.
                #[allow(unsafe_code)]
                let g = unsafe { (*p).generation };
                g < o
            });
            if all_free {
                for p in self.retired.drain(..) {
                    // SAFETY: as in `reclaim`: no reader holds it and it is not current.
                    #[allow(unsafe_code)]
                    drop(unsafe { Box::from_raw(p) });
                }
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

impl<T> Reader<T> {
    /// The current value, marking a quiescent state: the caller holds nothing older.
    /// One atomic load and one atomic store.
    #[inline]
    pub fn read(&mut self) -> (u64, &T) {
        let slot = &self.shared.slots[self.index].seen;
        let order = if slot.load(Ordering::Relaxed) == OFFLINE {
            // Coming online: first record generation 0, which no value is older than, so
            // the publisher frees nothing from here on; the SeqCst store-then-load pairs
            // with the publisher's SeqCst swap-then-scan, so it either sees this 0 or we
            // load the value it just published.
            slot.store(0, Ordering::SeqCst);
            Ordering::SeqCst
        } else {
            Ordering::Acquire
        };
        let p = self.shared.current.load(order);
        // SAFETY: our slot holds a generation no newer than `p`'s (0, or an older
        // generation recorded at a previous read), so the publisher will not free `p`
        // before we record a newer generation at a later `read` — which needs `&mut
        // self`, so the reference returned here is dead by then.
        #[allow(unsafe_code)]
        let v = unsafe { &*p };
        slot.store(v.generation, Ordering::Release);
        (v.generation, &v.value)
    }

    /// Marks this reader offline (it holds nothing): a parked worker does not hold
    /// reclamation back.
    pub fn offline(&mut self) {
        self.shared.slots[self.index]
            .seen
            .store(OFFLINE, Ordering::Release);
    }
}

impl<T> Drop for Reader<T> {
    fn drop(&mut self) {
        self.offline();
        if let Ok(mut taken) = self.shared.taken.lock() {
            if let Some(t) = taken.get_mut(self.index) {
                *t = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::atomic::Ordering::SeqCst;

    /// Counts live values so tests can see exactly when one is freed.
    struct Tracked {
        n: u64,
        live: Arc<AtomicUsize>,
    }
    impl Drop for Tracked {
        fn drop(&mut self) {
            self.live.fetch_sub(1, SeqCst);
        }
    }
    fn tracked(n: u64, live: &Arc<AtomicUsize>) -> Tracked {
        live.fetch_add(1, SeqCst);
        Tracked {
            n,
            live: Arc::clone(live),
        }
    }

    #[test]
    fn old_values_wait_for_every_online_reader() {
        let live = Arc::new(AtomicUsize::new(0));
        let mut p = Publisher::new(tracked(1, &live), 2);
        let mut a = p.reader().expect("reader");
        let mut b = p.reader().expect("reader");
        assert_eq!(a.read().1.n, 1);
        assert_eq!(b.read().1.n, 1);
        assert_eq!(p.publish(tracked(2, &live)), 2);
        assert_eq!(live.load(SeqCst), 2, "both readers may hold generation 1");
        assert_eq!(a.read().1.n, 2);
        assert_eq!(p.reclaim(), 1, "b still holds generation 1");
        assert_eq!(b.read().1.n, 2);
        assert_eq!(p.reclaim(), 0);
        assert_eq!(live.load(SeqCst), 1);
        b.offline();
        p.publish(tracked(3, &live));
        assert_eq!(p.reclaim(), 1, "a still holds 2");
        a.offline();
        assert_eq!(p.reclaim(), 0, "offline readers hold nothing");
        drop((a, b));
        drop(p);
        assert_eq!(live.load(SeqCst), 0, "nothing leaked");
    }

    #[test]
    fn reader_slots_are_bounded_and_reused() {
        let p = Publisher::new(0u32, 1);
        let r = p.reader().expect("one slot");
        assert!(p.reader().is_none());
        drop(r);
        assert!(p.reader().is_some());
    }

    /// Readers on other threads hammer `read` while the publisher swaps thousands of
    /// times: every value read is intact (its checksum matches), nothing is freed early,
    /// and nothing leaks.
    #[test]
    fn concurrent_swaps_never_free_under_a_reader() {
        let live = Arc::new(AtomicUsize::new(0));
        let mut p = Publisher::new((tracked(0, &live), [0u64; 16]), 4);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let total_reads = Arc::new(AtomicUsize::new(0));
        let mut handles = Vec::new();
        for _ in 0..3 {
            let mut r = p.reader().expect("reader");
            let stop = Arc::clone(&stop);
            let total_reads = Arc::clone(&total_reads);
            handles.push(std::thread::spawn(move || {
                let mut reads = 0u64;
                let mut last = 0;
                while !stop.load(SeqCst) {
                    total_reads.fetch_add(1, SeqCst);
                    let (g, (t, payload)) = r.read();
                    assert!(g >= last, "generations never go back");
                    last = g;
                    assert!(payload.iter().all(|&x| x == t.n), "torn or freed value");
                    reads += 1;
                }
                r.offline();
                reads
            }));
        }
        // Publish while the readers read: at least 5000 swaps, and on until the readers
        // have read 20000 times between them (the machine may start them late).
        let mut n = 0u64;
        while n < 5000 || total_reads.load(SeqCst) < 20_000 {
            n += 1;
            p.publish((tracked(n, &live), [n; 16]));
            if n.is_multiple_of(64) {
                p.reclaim();
                std::thread::yield_now();
            }
            assert!(n < 50_000_000, "readers never ran");
        }
        stop.store(true, SeqCst);
        let reads: u64 = handles.into_iter().map(|h| h.join().expect("reader")).sum();
        assert!(reads > 0);
        assert!(p.synchronize(std::time::Duration::from_millis(1), 1000));
        assert_eq!(live.load(SeqCst), 1, "only the current value is alive");
        drop(p);
        assert_eq!(live.load(SeqCst), 0);
    }
}
