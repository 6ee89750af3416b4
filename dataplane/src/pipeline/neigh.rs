//! The neighbour cache: IP -> MAC, shared by every worker, lock-free; and its states.
//!
//! A fixed table of slots (no allocation after construction). Each slot is a seqlock:
//! a writer claims it by moving its sequence from even to odd with one compare-and-swap
//! (a writer that loses the race simply skips: learning is idempotent and repeats with the
//! next ARP/ND packet), readers retry a bounded number of times while a write is in
//! flight. Readers never block and never wait for a writer. State changes that decide who
//! sends a request ([`NeighbourCache::solicit`], [`NeighbourCache::probe`]) write only if
//! the slot is still at the sequence they read, so of several workers racing for the same
//! transition exactly one wins and sends.
//!
//! An address is looked up by hash with linear probing over [`PROBE`] slots; when every
//! probed slot is taken by another address, the one written longest ago is replaced.
//! Slots are never emptied (that would cut probe chains): a deleted entry stays as a
//! tombstone that reads as [`Neighbour::Unknown`].
//!
//! # States (Linux `neigh.c` / RFC 4861 §7.3, sized for a dataplane)
//!
//! - **Incomplete**: broadcast ARP requests / multicast solicitations go out every
//!   [`NeighConfig::retrans_ms`], at most [`NeighConfig::mcast_probes`] in all (RFC 4861's
//!   MAX_MULTICAST_SOLICIT, 3). When the last one has gone unanswered for `retrans_ms` the
//!   entry becomes **Failed** ([`NeighbourCache::solicit`] says so once; the worker that
//!   parked packets drops them).
//! - **Failed**: for [`NeighConfig::failed_ms`] no new request is sent and packets to the
//!   address are dropped at once (a flood towards a dead host costs no requests and
//!   parks nothing). After that the next packet starts over.
//! - **Reachable**: confirmed (an ARP request or reply, a solicitation or advertisement
//!   from it) less than [`NeighConfig::reachable_ms`] ago.
//! - **Stale**: confirmed longer ago. Still used, and used it gets re-probed: unicast
//!   requests to the known MAC every `retrans_ms`, at most [`NeighConfig::ucast_probes`]
//!   (Linux's PROBE state; there is no DELAY state, a router has no upper-layer hints).
//!   Any confirmation makes it Reachable again. When the last probe has gone unanswered
//!   for `retrans_ms`, the next use deletes the entry (see [`NeighbourCache::probe`]) and
//!   resolution starts over from Incomplete. An entry nobody uses is never probed; it
//!   stays Stale until it is used or its slot is reused.
//!
//! # Who may change an entry (hostile input)
//!
//! Learning from ARP/NDP goes through [`NeighbourCache::claim`]; the forwarder first
//! refuses claims for sluice's own addresses and claims arriving on a port whose
//! connected networks do not hold the address (`local`). The cache then refuses:
//!
//! - any change of a **static** entry ([`NeighbourCache::set_static`]: configured, never
//!   overwritten, never stale, never probed, never evicted);
//! - a change of the MAC that sluice did not ask for, of an entry that sluice resolved
//!   itself (an answer to its own request or probe) or that is still Reachable: only an
//!   answer (ARP reply, solicited advertisement) while sluice's request or probe for the
//!   address is out may change those. An unsolicited claim may change only a Stale entry
//!   that was itself learned unsolicited (from a neighbour's own request, say). A
//!   resolved entry whose owner moved is re-probed when stale, deleted when the probes
//!   go unanswered and resolved afresh;
//! - any change of the MAC sooner than [`NeighConfig::locktime_ms`] after the last one
//!   (Linux's `locktime`): a flood of alternating claims moves an entry at most once per
//!   lock time.
//!
//! The caller counts what is refused (`arp_spoofed`).
//!
//! Times are the workers' milliseconds; every comparison saturates, so a worker whose
//! clock runs a little behind another's sees at worst a slightly late transition.

use crate::wire::MacAddr;
use std::net::IpAddr;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Slots probed per address.
pub const PROBE: usize = 8;
/// Default milliseconds between resolution requests (RFC 4861 RETRANS_TIMER).
pub const RETRY_MS: u64 = 1000;

/// Neighbour resolution settings (Linux's `neigh` sysctls, the ones a dataplane needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighConfig {
    /// Milliseconds between two requests for one address (`retrans_time_ms`).
    pub retrans_ms: u64,
    /// Broadcast/multicast requests sent before an unresolved address fails
    /// (`mcast_solicit`).
    pub mcast_probes: u32,
    /// Unicast probes of a stale entry before it is deleted (`ucast_solicit`).
    pub ucast_probes: u32,
    /// Milliseconds an entry stays Reachable after a confirmation
    /// (`base_reachable_time_ms`, without the random factor).
    pub reachable_ms: u64,
    /// Milliseconds a failed address is not asked for again.
    pub failed_ms: u64,
    /// Milliseconds after a change of an entry's MAC during which it may not change
    /// again (Linux's `locktime`).
    pub locktime_ms: u64,
    /// Packets parked per unresolved next hop, per worker (`unres_qlen`).
    pub queue_len: usize,
    /// Unresolved next hops with parked packets, per worker.
    pub queue_hops: usize,
    /// Send an ICMP host unreachable / ICMPv6 address unreachable back for the first
    /// parked packet when resolution fails.
    pub icmp_unreachable: bool,
}

impl Default for NeighConfig {
    fn default() -> NeighConfig {
        NeighConfig {
            retrans_ms: RETRY_MS,
            mcast_probes: 3,
            ucast_probes: 3,
            reachable_ms: 30_000,
            failed_ms: 1000,
            locktime_ms: 1000,
            queue_len: 8,
            queue_hops: 64,
            icmp_unreachable: true,
        }
    }
}

/// Where a resolved neighbour entry came from ([`NeighbourCache::entries`]): what decides
/// who may change it (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NeighbourSource {
    /// Configured (`spec.neighbours`, [`NeighbourCache::set_static`]): never overwritten,
    /// never stale, never probed.
    Static,
    /// An answer to sluice's own request or probe (or seeded by
    /// [`NeighbourCache::learn`]): only another answer changes its MAC.
    Resolved,
    /// Taken from what the neighbour sent unasked (its own request, an unsolicited
    /// advertisement).
    Learned,
}

impl NeighbourSource {
    /// The stable name (`sluice ctl neighbours`): `static`, `resolved` or `learned`.
    pub const fn name(self) -> &'static str {
        match self {
            NeighbourSource::Static => "static",
            NeighbourSource::Resolved => "resolved",
            NeighbourSource::Learned => "learned",
        }
    }
}

/// One resolved entry of the cache ([`NeighbourCache::entries`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct NeighbourEntry {
    /// The neighbour's address.
    pub ip: IpAddr,
    /// Its MAC.
    pub mac: MacAddr,
    /// Where the entry came from.
    pub source: NeighbourSource,
}

/// What the cache knows about an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Neighbour {
    /// Resolved (and, where the caller gave a time, confirmed within the reachable time).
    Reachable(MacAddr),
    /// Resolved but not confirmed within the reachable time: usable, to be re-probed.
    Stale(MacAddr),
    /// A request was last sent at this time (ms) and no answer has come yet.
    Incomplete(u64),
    /// Resolution failed at this time (ms).
    Failed(u64),
    /// Nothing known.
    Unknown,
}

/// What a worker holding packets for an unresolved address should do now
/// ([`NeighbourCache::solicit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Solicit {
    /// Send a broadcast/multicast request now: this worker won the right to send the
    /// `n`-th one (1-based).
    Send(u32),
    /// A request is out and has not timed out yet (perhaps another worker's): wait
    /// until the given time (ms), then ask again.
    Wait(u64),
    /// Resolution failed (every request went unanswered, or the address is in its
    /// failed hold-down): drop what waits for it.
    Failed,
    /// The address is resolved (perhaps stale): use this MAC.
    Resolved(MacAddr),
}

/// What a worker using a stale entry should do ([`NeighbourCache::probe`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// Nothing (the entry is fresh, a probe went out recently, or another worker won).
    NotDue,
    /// Send a unicast request to this MAC now.
    Send(MacAddr),
    /// The probes went unanswered: the entry was deleted; resolve from scratch.
    Deleted,
}

/// What [`NeighbourCache::claim`] did with a claim that an address is at a MAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Recorded (a new entry, a confirmation, or an allowed change of the MAC).
    Learned,
    /// Refused: a static entry, a change of a fresh entry sluice did not ask for, or a
    /// change within the lock time. The caller counts it (`arp_spoofed`).
    Refused,
}

/// Where a resolved entry sits: a worker memoises it and checks it with one load
/// ([`NeighbourCache::unchanged`]) and one compare against `fresh_until`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pin {
    /// Slot index.
    pub slot: usize,
    /// The slot's sequence when read.
    pub seq: u32,
    /// Until when (ms, exclusive) the entry is Reachable.
    pub fresh_until: u64,
}

const FLAG_VALID: u64 = 1 << 62;
const FLAG_COMPLETE: u64 = 1 << 63;
const FLAG_FAILED: u64 = 1 << 61;
const FLAG_DELETED: u64 = 1 << 60;
const FLAG_STATIC: u64 = 1 << 59;
const FLAG_RESOLVED: u64 = 1 << 58;
const COUNT_SHIFT: u32 = 48;
const COUNT_MASK: u64 = 0xff << COUNT_SHIFT;
const MAC_MASK: u64 = (1 << 48) - 1;

#[repr(align(64))]
#[derive(Default)]
struct Slot {
    seq: AtomicU32,
    key_hi: AtomicU64,
    key_lo: AtomicU64,
    /// bit 63: complete, bit 62: valid, bit 61: failed, bit 60: deleted, bit 59: static,
    /// bit 58: resolved by sluice's own request (both with complete), bits 48..56:
    /// requests sent (incomplete) or probes sent (complete, stale), low 48 bits: MAC.
    mac: AtomicU64,
    /// Complete without probes: confirmation time. Complete with probes, incomplete:
    /// time of the last request. Failed, deleted: when it happened.
    updated_ms: AtomicU64,
    /// When the MAC was last set to a different value (or first set).
    changed_ms: AtomicU64,
}

/// Counts completed writes to any slot, on a cache line of its own.
#[repr(align(64))]
#[derive(Default)]
struct Epoch(AtomicU32);

/// The shared neighbour cache.
pub struct NeighbourCache {
    slots: Box<[Slot]>,
    /// Bumped after every write to a slot ([`NeighbourCache::epoch`]).
    epoch: Epoch,
    mask: usize,
    cfg: NeighConfig,
}

impl core::fmt::Debug for NeighbourCache {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("NeighbourCache")
            .field("slots", &self.slots.len())
            .field("cfg", &self.cfg)
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
    let b = (v & MAC_MASK).to_be_bytes();
    MacAddr([b[2], b[3], b[4], b[5], b[6], b[7]])
}

fn count(v: u64) -> u32 {
    ((v & COUNT_MASK) >> COUNT_SHIFT) as u32
}

fn with_count(v: u64, n: u32) -> u64 {
    (v & !COUNT_MASK) | (u64::from(n.min(0xff)) << COUNT_SHIFT)
}

#[derive(Clone, Copy)]
struct Read {
    key: (u64, u64),
    mac: u64,
    updated: u64,
    changed: u64,
}

impl Slot {
    /// A consistent read and the (even) sequence it was made at.
    fn read_seq(&self) -> Option<(Read, u32)> {
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
                changed: self.changed_ms.load(Ordering::Relaxed),
            };
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                return Some((r, s1));
            }
        }
        None
    }

    fn read(&self) -> Option<Read> {
        self.read_seq().map(|(r, _)| r)
    }

    /// Writes if the slot is still at (even) sequence `s`.
    fn write_at(&self, s: u32, k: (u64, u64), mac: u64, now: u64, changed: u64) -> bool {
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
        self.changed_ms.store(changed, Ordering::Relaxed);
        self.seq.store(s.wrapping_add(2), Ordering::Release);
        true
    }
}

/// An entry's state at a time, from its raw words.
fn state(cfg: &NeighConfig, r: &Read, now: Option<u64>) -> Neighbour {
    if r.mac & FLAG_COMPLETE != 0 {
        let mac = bits_mac(r.mac);
        let stale = match now {
            _ if r.mac & FLAG_STATIC != 0 => false,
            Some(now) => count(r.mac) > 0 || now.saturating_sub(r.updated) >= cfg.reachable_ms,
            None => false,
        };
        if stale {
            Neighbour::Stale(mac)
        } else {
            Neighbour::Reachable(mac)
        }
    } else if r.mac & FLAG_DELETED != 0 {
        Neighbour::Unknown
    } else if r.mac & FLAG_FAILED != 0 {
        Neighbour::Failed(r.updated)
    } else {
        Neighbour::Incomplete(r.updated)
    }
}

/// Where an address is or would go: its slot (holding it, empty, or the victim), what
/// the slot held and at which sequence.
struct Place {
    idx: usize,
    seq: u32,
    read: Read,
    /// The slot holds this address.
    found: bool,
}

impl NeighbourCache {
    /// A cache of at least `capacity` slots (rounded up to a power of two) with the
    /// default [`NeighConfig`].
    pub fn new(capacity: usize) -> NeighbourCache {
        NeighbourCache::with_config(capacity, NeighConfig::default())
    }

    /// A cache of at least `capacity` slots with the given settings.
    pub fn with_config(capacity: usize, cfg: NeighConfig) -> NeighbourCache {
        let n = capacity.max(PROBE).next_power_of_two();
        NeighbourCache {
            slots: (0..n).map(|_| Slot::default()).collect(),
            mask: n - 1,
            epoch: Epoch::default(),
            cfg,
        }
    }

    /// The settings.
    pub fn config(&self) -> &NeighConfig {
        &self.cfg
    }

    /// The slot holding `k`, if any, with its contents.
    #[inline]
    fn find(&self, k: (u64, u64)) -> Option<(usize, Read, u32)> {
        let start = hash(k);
        for i in 0..PROBE {
            let idx = (start + i) & self.mask;
            let Some((r, s)) = self.slots[idx].read_seq() else {
                continue;
            };
            if r.mac & FLAG_VALID == 0 {
                // Slots fill in probe order and are never emptied: nothing further on.
                return None;
            }
            if r.key == k {
                return Some((idx, r, s));
            }
        }
        None
    }

    /// What is known about `ip`, regardless of age: a resolved entry reads as
    /// [`Neighbour::Reachable`] even when stale (for `sluice ctl` and tests).
    #[inline]
    pub fn lookup(&self, ip: IpAddr) -> Neighbour {
        match self.find(key(ip)) {
            Some((_, r, _)) => state(&self.cfg, &r, None),
            None => Neighbour::Unknown,
        }
    }

    /// What is known about `ip` at `now_ms` (distinguishing Reachable from Stale).
    #[inline]
    pub fn lookup_at(&self, ip: IpAddr, now_ms: u64) -> Neighbour {
        match self.find(key(ip)) {
            Some((_, r, _)) => state(&self.cfg, &r, Some(now_ms)),
            None => Neighbour::Unknown,
        }
    }

    /// Like [`NeighbourCache::lookup_at`], and for a Reachable address also where it sits
    /// and until when it stays fresh, which a worker memoises.
    #[inline]
    pub fn lookup_pinned(&self, ip: IpAddr, now_ms: u64) -> (Neighbour, Option<Pin>) {
        match self.find(key(ip)) {
            Some((slot, r, seq)) => {
                let n = state(&self.cfg, &r, Some(now_ms));
                let fresh_until = if r.mac & FLAG_STATIC != 0 {
                    u64::MAX
                } else {
                    r.updated.saturating_add(self.cfg.reachable_ms)
                };
                let pin = matches!(n, Neighbour::Reachable(_)).then_some(Pin {
                    slot,
                    seq,
                    fresh_until,
                });
                (n, pin)
            }
            None => (Neighbour::Unknown, None),
        }
    }

    /// Writes slot `idx` if it is still at sequence `s`, and then moves the epoch on.
    /// `changed`: when the MAC last changed (kept from the read unless it changes now).
    fn write(&self, idx: usize, s: u32, k: (u64, u64), mac: u64, now: u64, changed: u64) -> bool {
        let done = self.slots[idx].write_at(s, k, mac, now, changed);
        if done {
            self.epoch.0.fetch_add(1, Ordering::Release);
        }
        done
    }

    /// The cache's epoch: it moves on after every change to any entry. A worker that
    /// reads it *before* a lookup and finds it unchanged later knows that no entry has
    /// changed since (a memo of many next hops checked with one load of one line that
    /// nothing writes while the neighbours are quiet, rather than a load of each entry's
    /// own slot). Learning that only confirms an entry within its quiet period writes
    /// nothing and so leaves the epoch alone.
    #[inline]
    pub fn epoch(&self) -> u32 {
        self.epoch.0.load(Ordering::Acquire)
    }

    /// Whether the slot still holds what was read at sequence `seq` (no write since).
    #[inline]
    pub fn unchanged(&self, slot: usize, seq: u32) -> bool {
        self.slots
            .get(slot)
            .is_some_and(|s| s.seq.load(Ordering::Acquire) == seq)
    }

    /// Records that `ip` is at `mac`: Reachable from `now_ms`, whatever it was before
    /// unless static (seeding and tests; packets go through [`NeighbourCache::claim`]).
    pub fn learn(&self, ip: IpAddr, mac: MacAddr, now_ms: u64) {
        let k = key(ip);
        let Some(p) = self.place(k) else { return };
        if p.found && p.read.mac & FLAG_STATIC != 0 {
            return;
        }
        self.confirm(k, &p, mac, now_ms, true);
    }

    /// Writes `mac` as `k`'s confirmed MAC at `now` into place `p`, `resolved` if sluice
    /// asked for it (or, the MAC unchanged, if it was so already). Nothing is written
    /// when it only confirms an entry within its quiet period: that avoids dirtying the
    /// cache line.
    fn confirm(&self, k: (u64, u64), p: &Place, mac: MacAddr, now: u64, resolved: bool) {
        let old = p.read.mac;
        let same = p.found && old & FLAG_COMPLETE != 0 && old & MAC_MASK == mac_bits(mac);
        let resolved = resolved || (same && old & FLAG_RESOLVED != 0);
        let new =
            mac_bits(mac) | FLAG_VALID | FLAG_COMPLETE | if resolved { FLAG_RESOLVED } else { 0 };
        let quiet = self.cfg.retrans_ms.min(self.cfg.reachable_ms / 2);
        if same && old == new && now.saturating_sub(p.read.updated) < quiet {
            return;
        }
        let changed = if same { p.read.changed } else { now };
        self.write(p.idx, p.seq, k, new, now, changed);
    }

    /// A packet received at `now_ms` claims that `ip` is at `mac`; `answer`: the packet
    /// answers a request (an ARP reply, a solicited neighbour advertisement). Learned or
    /// refused by the rules in the module docs.
    pub fn claim(&self, ip: IpAddr, mac: MacAddr, now_ms: u64, answer: bool) -> Claim {
        let k = key(ip);
        let Some(p) = self.place(k) else {
            // Every probed slot is mid-write: nothing is changed, nothing refused.
            return Claim::Learned;
        };
        let old = p.read.mac;
        let complete = p.found && old & FLAG_COMPLETE != 0;
        // Sluice's own request or probe for the address is out.
        let asked = p.found
            && if complete {
                count(old) > 0
            } else {
                old & (FLAG_FAILED | FLAG_DELETED) == 0
            };
        let solicited = answer && asked;
        if complete && old & FLAG_STATIC != 0 {
            return if old & MAC_MASK == mac_bits(mac) {
                Claim::Learned
            } else {
                Claim::Refused
            };
        }
        if complete && old & MAC_MASK != mac_bits(mac) {
            let locked = now_ms.saturating_sub(p.read.changed) < self.cfg.locktime_ms;
            let fresh =
                count(old) == 0 && now_ms.saturating_sub(p.read.updated) < self.cfg.reachable_ms;
            let kept = old & FLAG_RESOLVED != 0 || fresh;
            if locked || (!solicited && kept) {
                return Claim::Refused;
            }
        }
        self.confirm(k, &p, mac, now_ms, solicited);
        Claim::Learned
    }

    /// Makes `ip` a static neighbour at `mac`: Reachable for ever, never overwritten by
    /// what packets claim, never probed, never evicted. `false` if every slot it could
    /// take holds another static entry.
    pub fn set_static(&self, ip: IpAddr, mac: MacAddr) -> bool {
        let k = key(ip);
        let new = mac_bits(mac) | FLAG_VALID | FLAG_COMPLETE | FLAG_STATIC;
        // Control thread only, at start: retry a slot a worker is writing.
        for _ in 0..1000 {
            let Some(p) = self.place(k) else { continue };
            if !p.found && p.read.mac & FLAG_STATIC != 0 {
                return false;
            }
            if self.write(p.idx, p.seq, k, new, 0, 0) {
                return true;
            }
        }
        false
    }

    /// Decides whether a resolution request for `ip` goes out now (see the module docs).
    /// A `Send` answer has already been recorded: the caller must send the request.
    pub fn solicit(&self, ip: IpAddr, now_ms: u64) -> Solicit {
        let k = key(ip);
        let Some(p) = self.place(k) else {
            // Every probed slot is being written: try again shortly.
            return Solicit::Wait(now_ms.saturating_add(1));
        };
        let retrans = self.cfg.retrans_ms;
        let mut n = 1;
        if p.found {
            match state(&self.cfg, &p.read, Some(now_ms)) {
                Neighbour::Reachable(mac) | Neighbour::Stale(mac) => return Solicit::Resolved(mac),
                Neighbour::Failed(t) if now_ms.saturating_sub(t) < self.cfg.failed_ms => {
                    return Solicit::Failed
                }
                Neighbour::Incomplete(t) => {
                    let due = t.saturating_add(retrans);
                    if now_ms < due {
                        return Solicit::Wait(due);
                    }
                    let sent = count(p.read.mac);
                    if sent >= self.cfg.mcast_probes {
                        let failed = FLAG_VALID | FLAG_FAILED;
                        return if self.write(p.idx, p.seq, k, failed, now_ms, p.read.changed) {
                            Solicit::Failed
                        } else {
                            Solicit::Wait(now_ms.saturating_add(1))
                        };
                    }
                    n = sent + 1;
                }
                Neighbour::Failed(_) | Neighbour::Unknown => {}
            }
        }
        if self.cfg.mcast_probes == 0 {
            return Solicit::Failed;
        }
        let incomplete = with_count(FLAG_VALID, n);
        if self.write(p.idx, p.seq, k, incomplete, now_ms, p.read.changed) {
            Solicit::Send(n)
        } else {
            // Another worker changed the entry in between: it sends, or will tell us.
            Solicit::Wait(now_ms.saturating_add(1))
        }
    }

    /// Called by a worker about to use `ip`'s entry: says whether a unicast probe of a
    /// stale entry is due (and records it), or that the probes went unanswered and the
    /// entry was just deleted.
    pub fn probe(&self, ip: IpAddr, now_ms: u64) -> Probe {
        let k = key(ip);
        let Some((idx, r, seq)) = self.find(k) else {
            return Probe::NotDue;
        };
        if r.mac & FLAG_COMPLETE == 0 || r.mac & FLAG_STATIC != 0 {
            return Probe::NotDue;
        }
        let sent = count(r.mac);
        let since = now_ms.saturating_sub(r.updated);
        if (sent == 0 && since < self.cfg.reachable_ms) || (sent > 0 && since < self.cfg.retrans_ms)
        {
            return Probe::NotDue;
        }
        if sent >= self.cfg.ucast_probes {
            let deleted = FLAG_VALID | FLAG_DELETED;
            return if self.write(idx, seq, k, deleted, now_ms, r.changed) {
                Probe::Deleted
            } else {
                Probe::NotDue
            };
        }
        if self.write(idx, seq, k, with_count(r.mac, sent + 1), now_ms, r.changed) {
            Probe::Send(bits_mac(r.mac))
        } else {
            Probe::NotDue
        }
    }

    /// Records that a resolution request for `ip` went out at `now_ms`. Returns `false`
    /// (and records nothing) if one is already pending since less than the retransmit
    /// time, the address failed recently, or it is already resolved: the caller then
    /// sends no request. (The same as [`NeighbourCache::solicit`] answering `Send`.)
    pub fn mark_pending(&self, ip: IpAddr, now_ms: u64) -> bool {
        matches!(self.solicit(ip, now_ms), Solicit::Send(_))
    }

    /// The slot for `k`: the one holding it, else the first empty one, else the one
    /// written longest ago that is not static. `None` only if every probed slot was
    /// mid-write (or, with every other one static, none is left).
    fn place(&self, k: (u64, u64)) -> Option<Place> {
        let start = hash(k);
        let mut victim: Option<Place> = None;
        for i in 0..PROBE {
            let idx = (start + i) & self.mask;
            let Some((read, seq)) = self.slots[idx].read_seq() else {
                continue;
            };
            if read.mac & FLAG_VALID == 0 || read.key == k {
                let found = read.mac & FLAG_VALID != 0;
                return Some(Place {
                    idx,
                    seq,
                    read,
                    found,
                });
            }
            if read.mac & FLAG_STATIC == 0
                && victim
                    .as_ref()
                    .is_none_or(|v| read.updated < v.read.updated)
            {
                victim = Some(Place {
                    idx,
                    seq,
                    read,
                    found: false,
                });
            }
        }
        victim
    }

    /// Every resolved entry with where it came from (for `sluice ctl neighbours`; not
    /// for the hot path).
    pub fn entries(&self) -> Vec<NeighbourEntry> {
        self.slots
            .iter()
            .filter_map(|s| s.read())
            .filter(|r| r.mac & FLAG_COMPLETE != 0)
            .map(|r| {
                let v6 =
                    std::net::Ipv6Addr::from((u128::from(r.key.0) << 64) | u128::from(r.key.1));
                let ip = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
                let source = if r.mac & FLAG_STATIC != 0 {
                    NeighbourSource::Static
                } else if r.mac & FLAG_RESOLVED != 0 {
                    NeighbourSource::Resolved
                } else {
                    NeighbourSource::Learned
                };
                NeighbourEntry {
                    ip,
                    mac: bits_mac(r.mac),
                    source,
                }
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
        assert_eq!(e[0].ip, a);
    }

    #[test]
    fn entries_say_where_they_came_from() {
        let c = NeighbourCache::new(64);
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        let mac = |b: u8| MacAddr([2, 0, 0, 0, 0, b]);
        assert!(c.set_static(ip("10.0.0.1"), mac(1)));
        // Asked for and answered.
        assert!(c.mark_pending(ip("10.0.0.2"), 100));
        assert_eq!(c.claim(ip("10.0.0.2"), mac(2), 150, true), Claim::Learned);
        // Claimed unasked (the neighbour's own request).
        assert_eq!(c.claim(ip("fd00::3"), mac(3), 150, false), Claim::Learned);
        // A refused claim changes nothing.
        assert_eq!(c.claim(ip("10.0.0.1"), mac(9), 200, true), Claim::Refused);
        assert!(c.mark_pending(ip("10.0.0.4"), 100), "pending: not listed");
        let mut e = c.entries();
        e.sort();
        let got: Vec<(IpAddr, MacAddr, &str)> =
            e.iter().map(|e| (e.ip, e.mac, e.source.name())).collect();
        assert_eq!(
            got,
            [
                (ip("10.0.0.1"), mac(1), "static"),
                (ip("10.0.0.2"), mac(2), "resolved"),
                (ip("fd00::3"), mac(3), "learned"),
            ]
        );
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
