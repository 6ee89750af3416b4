//! Announcing served addresses: when a tables generation brings listener addresses that
//! were not served before ([`Addresses`], [`Served::since`]), the first worker sends, on
//! the port whose network holds each one, a gratuitous ARP (IPv4: an ARP announcement as
//! RFC 5227 §2.3 describes it, a broadcast request with sender and target both the address
//! and a zero target MAC) or an unsolicited neighbour advertisement (IPv6, RFC 4861
//! §7.2.6: to all-nodes `ff02::1`, Override set, Solicited clear, with the target
//! link-layer address option), from sluice's MAC on that port. Neighbours that had the
//! address cached elsewhere (a previous owner, a failed-over appliance) move to sluice
//! without waiting for their entry to expire.
//!
//! Each announcement is sent [`ANNOUNCE_COUNT`] times, [`ANNOUNCE_INTERVAL_MS`] apart, the
//! first at once (RFC 5227 sends two, 2 s apart; keepalived, MetalLB and others a few, a
//! second or so apart: three, one second apart, survives a lost frame or two and is done in
//! two seconds). The addresses each generation brings are announced on their own schedule
//! (up to 16 generations side by side), so a reload during an announcement neither repeats
//! nor delays the others. Counted as `address_announced`, one per frame sent.
//!
//! [`Announcer::maintain`] runs at the worker's quiescent point, after the bursts: it
//! costs two compares when nothing is due (the table's epoch, the next pass's time). Frames are built in pool buffers from
//! [`StageIo`](super::StageIo); when it has no room or no buffer, the rest waits for the
//! next round. Nothing is allocated on the heap and nothing here panics.

use super::config::ForwarderConfig;
use super::stage::Ctx;
use crate::port::Pkt;
use crate::stats::Event;
use crate::tables::addresses::{Addresses, Served};
use crate::wire::{arp, ethernet, icmpv6, EtherType, MacAddr};
use std::net::{IpAddr, Ipv6Addr};

/// How many times each new address is announced.
pub const ANNOUNCE_COUNT: u8 = 3;
/// Milliseconds between two announcements of the same address.
pub const ANNOUNCE_INTERVAL_MS: u64 = 1000;
/// Announcements under way at once, one per generation that brought addresses. A
/// generation that brings some while all are busy (more than this many such reloads
/// within two seconds) joins the newest, which starts over: its addresses may then be
/// announced more than [`ANNOUNCE_COUNT`] times, never fewer.
const COHORTS: usize = 16;

/// The addresses one generation brought ([`Served::since`] in `after + 1 ..= upto`) and
/// where their announcement is.
#[derive(Debug, Clone, Copy, Default)]
struct Cohort {
    after: u64,
    upto: u64,
    /// Passes still to make (0: this slot is free).
    left: u8,
    /// When the next pass is due (ms on the worker's clock).
    due_ms: u64,
    /// The next entry of the pass under way.
    cursor: usize,
}

/// Where a worker is in announcing the served addresses (see the [module docs](self)):
/// the epoch of the last table seen, and the announcements under way, each of the
/// addresses one generation brought, on its own schedule, so that a reload during an
/// announcement neither repeats the addresses already announced nor delays the new ones.
#[derive(Debug, Clone)]
pub struct Announcer {
    /// The epoch of the last [`Addresses`] seen (0: none yet).
    seen: u64,
    /// The earliest pass due (`u64::MAX`: none).
    next_due: u64,
    cohorts: [Cohort; COHORTS],
}

impl Default for Announcer {
    fn default() -> Self {
        Announcer::new()
    }
}

impl Announcer {
    /// Nothing seen, nothing to announce.
    pub fn new() -> Announcer {
        Announcer {
            seen: 0,
            next_due: u64::MAX,
            cohorts: [Cohort::default(); COHORTS],
        }
    }

    /// Whether announcements are still to be sent.
    pub fn pending(&self) -> bool {
        self.next_due != u64::MAX
    }

    /// Sends what is due: on a new epoch of `addrs`, starts announcing its entries that
    /// are newer than the epoch seen before (the first table seen: all of them); then,
    /// for each announcement whose pass is due, sends one frame per such entry on its
    /// port through `ctx`'s [`StageIo`](super::StageIo), as far as it has room and
    /// buffers (the rest waits for the next call).
    pub fn maintain(&mut self, conf: &ForwarderConfig, addrs: &Addresses, ctx: &mut Ctx<'_>) {
        let now = ctx.now_ms;
        let epoch = addrs.epoch();
        // (A generation that brings nothing new takes no slot.)
        if epoch != self.seen && addrs.entries().iter().all(|e| e.since <= self.seen) {
            self.seen = epoch;
        }
        if epoch != self.seen {
            let fresh = Cohort {
                after: self.seen,
                upto: epoch,
                left: ANNOUNCE_COUNT,
                due_ms: now,
                cursor: 0,
            };
            match self.cohorts.iter_mut().find(|c| c.left == 0) {
                Some(free) => *free = fresh,
                None => {
                    // Every slot busy (many reloads within a few seconds): the newest
                    // announcement takes this generation's addresses too, from the start.
                    if let Some(newest) = self.cohorts.iter_mut().max_by_key(|c| c.upto) {
                        *newest = Cohort {
                            after: newest.after,
                            ..fresh
                        };
                    }
                }
            }
            self.seen = epoch;
            self.next_due = now;
        }
        if now < self.next_due {
            return;
        }
        let Ctx { counters, io, .. } = ctx;
        let Some(io) = io.as_deref_mut() else {
            return;
        };
        let entries = addrs.entries();
        for c in self
            .cohorts
            .iter_mut()
            .filter(|c| c.left > 0 && now >= c.due_ms)
        {
            while let Some(e) = entries.get(c.cursor) {
                if e.since > c.after && e.since <= c.upto {
                    let Some(mac) = conf.ports.get(usize::from(e.port)).map(|p| p.mac) else {
                        c.cursor += 1;
                        continue;
                    };
                    if io.room() == 0 {
                        return;
                    }
                    let Some(mut pkt) = io.alloc() else {
                        return;
                    };
                    if announcement(e, mac, &mut pkt) {
                        if io.send(usize::from(e.port), pkt).is_err() {
                            return;
                        }
                        counters.event(Event::AddressAnnounced);
                    }
                }
                c.cursor += 1;
            }
            c.cursor = 0;
            c.left -= 1;
            c.due_ms = now.saturating_add(ANNOUNCE_INTERVAL_MS);
        }
        self.next_due = self
            .cohorts
            .iter()
            .filter(|c| c.left > 0)
            .map(|c| c.due_ms)
            .min()
            .unwrap_or(u64::MAX);
    }
}

/// Writes the announcement of `e` from `mac` into `pkt`; `false` if the buffer is too
/// small.
fn announcement(e: &Served, mac: MacAddr, pkt: &mut Pkt) -> bool {
    match e.addr {
        IpAddr::V4(a) => gratuitous_arp(mac, a, pkt),
        IpAddr::V6(a) => unsolicited_na(mac, a, pkt),
    }
}

/// Writes a gratuitous ARP for `addr` at `mac` into `pkt` (an ARP announcement: a
/// broadcast request whose sender and target addresses are both `addr`, target MAC
/// zero); `false` if the buffer is too small.
pub fn gratuitous_arp(mac: MacAddr, addr: std::net::Ipv4Addr, pkt: &mut Pkt) -> bool {
    const ETH: usize = ethernet::HEADER_LEN;
    if !pkt.set_len(ETH + arp::PACKET_LEN) {
        return false;
    }
    let d = pkt.data_mut();
    ethernet::Repr {
        src_addr: mac,
        dst_addr: MacAddr::BROADCAST,
        ethertype: EtherType::Arp,
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut d[..]));
    arp::Repr {
        operation: arp::Operation::Request,
        source_hardware_addr: mac,
        source_protocol_addr: addr,
        target_hardware_addr: MacAddr::ZERO,
        target_protocol_addr: addr,
    }
    .emit(&mut arp::Packet::new_unchecked(&mut d[ETH..]));
    true
}

/// Writes an unsolicited neighbour advertisement for `addr` at `mac` into `pkt`: from
/// `addr` to all-nodes `ff02::1`, hop limit 255, Override set, with the target link-layer
/// address option; `false` if the buffer is too small.
pub fn unsolicited_na(mac: MacAddr, addr: Ipv6Addr, pkt: &mut Pkt) -> bool {
    let all = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
    let na = icmpv6::Repr::NeighborAdvert {
        flags: icmpv6::na_flags::OVERRIDE,
        target: addr,
        target_ll: Some(mac),
    };
    let eth = (mac, MacAddr::ipv6_multicast(all));
    super::local::write_na(pkt, eth, (addr, all), &na)
}
