//! The neighbour cache: IP -> MAC, shared by every worker, lock-free.
//!
//! A fixed table of slots (no allocation after construction). Each slot is a seqlock:
//! a writer claims it by moving its sequence from even to odd with one compare-and-swap
//! (a writer that loses the race simply skips: learning is idempotent and repeats with the
//! next ARP/ND packet), readers retry a bounded number of times while a write is in
//! flight. Readers never block and never wait for a writer.
//!
//! An address is looked up by hash with linear probing over [`PROBE`] slots; when every
//! probed slot is taken by another address, the one written longest ago is replaced.

use crate::wire::MacAddr;
use std::net::IpAddr;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Slots probed per address.
pub const PROBE: usize = 8;
/// Seconds a resolution request stays pending before another one may be sent.
pub const RETRY_MS: u64 = 1000;

/// What the cache knows about an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Neighbour {
    /// Resolved.
    Reachable(MacAddr),
    /// A request was sent at this time (ms) and no answer has come yet.
    Incomplete(u64),
    /// Nothing known.
    Unknown,
}

const FLAG_VALID: u64 = 1 << 62;
const FLAG_COMPLETE: u64 = 1 << 63;

#[repr(align(64))]
#[derive(Default)]
struct Slot {
    seq: AtomicU32,
    key_hi: AtomicU64,
    key_lo: AtomicU64,
    /// bit 63: complete, bit 62: valid, low 48 bits: MAC.
    mac: AtomicU64,
    updated_ms: AtomicU64,
}

/// The shared neighbour cache.
pub struct NeighbourCache {
    slots: Box<[Slot]>,
    mask: usize,
}

impl core::fmt::Debug for NeighbourCache {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("NeighbourCache")
            .field("slots", &self.slots.len())
            .finish()
    }
}

fn key(ip: IpAddr) -> (u64, u64) {
    let v6 = match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    };
    let b = u128::from_be_bytes(v6.octets());
    ((b >> 64) as u64, b as u64)
}

fn hash(k: (u64, u64)) -> usize {
    let mut h = k.0 ^ k.1.rotate_left(29);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h as usize
}

fn mac_bits(m: MacAddr) -> u64 {
    let b = m.0;
    u64::from_be_bytes([0, 0, b[0], b[1], b[2], b[3], b[4], b[5]])
}

fn bits_mac(v: u64) -> MacAddr {
    let b = v.to_be_bytes();
    MacAddr([b[2], b[3], b[4], b[5], b[6], b[7]])
}

struct Read {
    key: (u64, u64),
    mac: u64,
    updated: u64,
}

impl Slot {
    fn read(&self) -> Option<Read> {
        for _ in 0..4 {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 == 1 {
                core::hint::spin_loop();
                continue;
            }
            let r = Read {
                key: (
                    self.key_hi.load(Ordering::Relaxed),
                    self.key_lo.load(Ordering::Relaxed),
                ),
                mac: self.mac.load(Ordering::Relaxed),
                updated: self.updated_ms.load(Ordering::Relaxed),
            };
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                return Some(r);
            }
        }
        None
    }

    fn write(&self, k: (u64, u64), mac: u64, now: u64) -> bool {
        let s = self.seq.load(Ordering::Relaxed);
        if s & 1 == 1
            || self
                .seq
                .compare_exchange(s, s.wrapping_add(1), Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return false;
        }
        fence(Ordering::Release);
        self.key_hi.store(k.0, Ordering::Relaxed);
        self.key_lo.store(k.1, Ordering::Relaxed);
        self.mac.store(mac, Ordering::Relaxed);
        self.updated_ms.store(now, Ordering::Relaxed);
        self.seq.store(s.wrapping_add(2), Ordering::Release);
        true
    }
}

impl NeighbourCache {
    /// A cache of at least `capacity` slots (rounded up to a power of two).
    pub fn new(capacity: usize) -> NeighbourCache {
        let n = capacity.max(PROBE).next_power_of_two();
        NeighbourCache {
            slots: (0..n).map(|_| Slot::default()).collect(),
            mask: n - 1,
        }
    }

    /// What is known about `ip`.
    #[inline]
    pub fn lookup(&self, ip: IpAddr) -> Neighbour {
        let k = key(ip);
        let start = hash(k);
        for i in 0..PROBE {
            let slot = &self.slots[(start + i) & self.mask];
            let Some(r) = slot.read() else { continue };
            if r.mac & FLAG_VALID == 0 {
                // Slots fill in probe order and are never emptied: nothing further on.
                return Neighbour::Unknown;
            }
            if r.key == k {
                return if r.mac & FLAG_COMPLETE != 0 {
                    Neighbour::Reachable(bits_mac(r.mac))
                } else {
                    Neighbour::Incomplete(r.updated)
                };
            }
        }
        Neighbour::Unknown
    }

    /// Like [`NeighbourCache::lookup`], and for a resolved address also where it sits:
    /// `(slot, sequence)`, which [`NeighbourCache::unchanged`] checks with one load. A
    /// worker memoises its last next hop this way.
    #[inline]
    pub fn lookup_pinned(&self, ip: IpAddr) -> (Neighbour, Option<(usize, u32)>) {
        let k = key(ip);
        let start = hash(k);
        for i in 0..PROBE {
            let idx = (start + i) & self.mask;
            let slot = &self.slots[idx];
            let s1 = slot.seq.load(Ordering::Acquire);
            let Some(r) = slot.read() else { continue };
            if r.mac & FLAG_VALID == 0 {
                return (Neighbour::Unknown, None);
            }
            if r.key == k {
                return if r.mac & FLAG_COMPLETE != 0 {
                    let pin = (s1 & 1 == 0).then_some((idx, s1));
                    // The entry read may be newer than s1: then the pin is stale and the
                    // next check fails, which only costs a lookup.
                    (Neighbour::Reachable(bits_mac(r.mac)), pin)
                } else {
                    (Neighbour::Incomplete(r.updated), None)
                };
            }
        }
        (Neighbour::Unknown, None)
    }

    /// Whether the slot still holds what was read at sequence `seq` (no write since).
    #[inline]
    pub fn unchanged(&self, slot: usize, seq: u32) -> bool {
        self.slots
            .get(slot)
            .is_some_and(|s| s.seq.load(Ordering::Acquire) == seq)
    }

    /// Records that `ip` is at `mac` (learning from ARP/ND).
    pub fn learn(&self, ip: IpAddr, mac: MacAddr, now_ms: u64) {
        self.store(ip, mac_bits(mac) | FLAG_VALID | FLAG_COMPLETE, now_ms);
    }

    /// Records that a resolution request for `ip` went out at `now_ms`. Returns `false`
    /// (and records nothing) if one is already pending since less than [`RETRY_MS`] or the
    /// address is already resolved: the caller then sends no request.
    pub fn mark_pending(&self, ip: IpAddr, now_ms: u64) -> bool {
        match self.lookup(ip) {
            Neighbour::Reachable(_) => false,
            Neighbour::Incomplete(t) if now_ms.saturating_sub(t) < RETRY_MS => false,
            _ => {
                self.store(ip, FLAG_VALID, now_ms);
                true
            }
        }
    }

    fn store(&self, ip: IpAddr, mac: u64, now: u64) {
        let k = key(ip);
        let start = hash(k);
        let mut victim: Option<(usize, u64)> = None;
        for i in 0..PROBE {
            let idx = (start + i) & self.mask;
            let Some(r) = self.slots[idx].read() else {
                continue;
            };
            if r.mac & FLAG_VALID == 0 || r.key == k {
                // Unchanged complete entry: avoid dirtying the cache line.
                if r.key == k && r.mac == mac && now.saturating_sub(r.updated) < RETRY_MS {
                    return;
                }
                self.slots[idx].write(k, mac, now);
                return;
            }
            if victim.is_none_or(|(_, t)| r.updated < t) {
                victim = Some((idx, r.updated));
            }
        }
        if let Some((idx, _)) = victim {
            self.slots[idx].write(k, mac, now);
        }
    }

    /// Every resolved entry (for `sluice ctl`; not for the hot path).
    pub fn entries(&self) -> Vec<(IpAddr, MacAddr)> {
        self.slots
            .iter()
            .filter_map(|s| s.read())
            .filter(|r| r.mac & FLAG_COMPLETE != 0)
            .map(|r| {
                let v6 =
                    std::net::Ipv6Addr::from((u128::from(r.key.0) << 64) | u128::from(r.key.1));
                let ip = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
                (ip, bits_mac(r.mac))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn learn_lookup_pending() {
        let c = NeighbourCache::new(64);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "fd77::1".parse().unwrap();
        assert_eq!(c.lookup(a), Neighbour::Unknown);
        assert!(c.mark_pending(a, 100));
        assert!(!c.mark_pending(a, 200), "a request is pending");
        assert_eq!(c.lookup(a), Neighbour::Incomplete(100));
        assert!(c.mark_pending(a, 100 + RETRY_MS), "retry after the timeout");
        c.learn(a, MacAddr([2, 0, 0, 0, 0, 1]), 300);
        c.learn(b, MacAddr([2, 0, 0, 0, 0, 2]), 300);
        assert_eq!(
            c.lookup(a),
            Neighbour::Reachable(MacAddr([2, 0, 0, 0, 0, 1]))
        );
        assert_eq!(
            c.lookup(b),
            Neighbour::Reachable(MacAddr([2, 0, 0, 0, 0, 2]))
        );
        assert!(!c.mark_pending(a, 10_000));
        let mut e = c.entries();
        e.sort();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].0, a);
    }

    #[test]
    fn full_probe_window_evicts_the_oldest() {
        let c = NeighbourCache::new(8); // every address probes all 8 slots
        for i in 0..8u8 {
            c.learn(
                IpAddr::from([10, 0, 0, i]),
                MacAddr([2, 0, 0, 0, 0, i]),
                u64::from(i),
            );
        }
        c.learn(
            IpAddr::from([10, 0, 1, 0]),
            MacAddr([2, 0, 0, 0, 1, 0]),
            100,
        );
        assert_eq!(c.lookup(IpAddr::from([10, 0, 0, 0])), Neighbour::Unknown);
        assert!(matches!(
            c.lookup(IpAddr::from([10, 0, 1, 0])),
            Neighbour::Reachable(_)
        ));
        assert!(matches!(
            c.lookup(IpAddr::from([10, 0, 0, 7])),
            Neighbour::Reachable(_)
        ));
    }

    #[test]
    fn concurrent_readers_never_see_torn_entries() {
        let c = Arc::new(NeighbourCache::new(16));
        let ip: IpAddr = "10.0.0.9".parse().unwrap();
        let w = {
            let c = c.clone();
            std::thread::spawn(move || {
                for i in 0..20_000u32 {
                    let b = (i % 250) as u8;
                    // MAC bytes all equal: a torn read would mix two values.
                    c.learn(ip, MacAddr([b; 6]), u64::from(i) * RETRY_MS);
                }
            })
        };
        for _ in 0..20_000 {
            if let Neighbour::Reachable(m) = c.lookup(ip) {
                assert!(m.0.iter().all(|&x| x == m.0[0]), "torn: {m}");
            }
        }
        w.join().unwrap();
    }
}
