//! Next-hop resolution: packets parked while ARP/ND resolves, retries, failure, and
//! re-probing of stale neighbours (Linux `neigh.c`'s `arp_queue` and timers, per worker).
//!
//! A routed packet whose next hop is not resolved is **parked** in this worker's [`Lot`]:
//! up to [`NeighConfig::queue_len`] packets per next hop, up to
//! [`NeighConfig::queue_hops`] next hops at once, in arrays allocated when the forwarder is
//! built. Parking swaps a fresh buffer from [`StageIo`] into the packet's burst slot: that
//! buffer becomes the ARP request / neighbour solicitation (when one is due) or goes back
//! to the worker as [`Verdict::Kept`]. A full next-hop queue drops its oldest packet, a
//! full lot the new one, both as `neighbour_queue_full`.
//!
//! Who sends requests, and when the address counts as failed, is decided in the shared
//! [`NeighbourCache`] ([`NeighbourCache::solicit`]), so workers parking for the same next
//! hop do not multiply requests. [`Resolver::maintain`] (the forwarder's
//! `maintain`, once per poll round) releases the packets of next hops that became
//! resolved (learned by any worker), in order, with their MACs set and TTL / hop limit
//! decremented; retransmits when due; and on failure drops the packets as
//! `neighbour_unresolved`, sending an ICMP host unreachable (ICMPv6 address unreachable)
//! back for the first one when [`NeighConfig::icmp_unreachable`] is set. A next hop that
//! is still unresolved after `(mcast_probes + 2) * retrans_ms` of waiting is failed by the
//! worker itself, whatever the cache says, so nothing waits forever.
//!
//! Order: while anything is parked, the IPv4 fast path declines next hops it has not
//! memoised, and the general path releases a next hop's parked packets before sending a
//! newer packet to it (or parks the newer one behind them when [`StageIo`] is full).
//! Released packets travel through [`StageIo`], which the worker drains before the
//! verdicts of the burst at hand.
//!
//! A stale neighbour (see [`neigh`](super::neigh)) keeps forwarding; using it sends a
//! unicast probe when due, and once its probes went unanswered the next packet finds it
//! deleted and parks while it resolves from scratch.
//!
//! Without [`StageIo`] or its allocator (a caller that offers neither), nothing is parked
//! and the packet itself becomes the request, as before parking existed.

use super::config::ForwarderConfig;
use super::fib::NextHop;
use super::local::{IcmpError, Responder};
use super::neigh::{NeighConfig, Neighbour, NeighbourCache, Probe, Solicit};
use super::stage::{Ctx, StageIo, Verdict};
use crate::port::Pkt;
use crate::stats::{DropReason, Event};
use crate::wire::{arp, ethernet, icmpv6, ip_proto, ipv4, ipv6, EtherType, MacAddr};
use std::net::IpAddr;

const ETH: usize = ethernet::HEADER_LEN;

/// The last next hop a worker resolved, pinned to its cache slot and sequence: a hit
/// costs one compare and one load instead of a hash lookup.
#[derive(Debug, Clone, Copy)]
pub(super) struct Memo {
    addr: IpAddr,
    slot: usize,
    seq: u32,
    until: u64,
    mac: MacAddr,
}

/// One parked packet and the port it came in on (for the ICMP error).
#[derive(Debug)]
struct Parked {
    pkt: Pkt,
    in_port: u32,
}

/// An unresolved next hop with parked packets.
#[derive(Debug, Clone, Copy)]
struct Hop {
    addr: IpAddr,
    port: usize,
    /// Index of the oldest packet in this hop's ring, and how many there are.
    head: usize,
    len: usize,
    /// When the first packet was parked (the give-up deadline counts from here).
    since_ms: u64,
    /// When to ask the cache again (retransmission or failure).
    due_ms: u64,
}

/// A worker's parked packets: fixed arrays, allocated once.
#[derive(Debug)]
pub(super) struct Lot {
    hops: Box<[Option<Hop>]>,
    /// `per_hop` ring slots per hop, hop `i` owning `[i * per_hop, (i + 1) * per_hop)`.
    ring: Box<[Option<Parked>]>,
    per_hop: usize,
    active: usize,
    packets: usize,
}

impl Lot {
    /// A lot sized by the configuration.
    pub(super) fn for_config(cfg: &NeighConfig) -> Lot {
        let (hops, per_hop) = (cfg.queue_hops, cfg.queue_len);
        let per_hop = if hops == 0 { 0 } else { per_hop };
        Lot {
            hops: (0..if per_hop == 0 { 0 } else { hops })
                .map(|_| None)
                .collect(),
            ring: (0..hops.saturating_mul(per_hop)).map(|_| None).collect(),
            per_hop,
            active: 0,
            packets: 0,
        }
    }

    /// Whether nothing is parked.
    #[inline(always)]
    pub(super) fn is_empty(&self) -> bool {
        self.active == 0
    }

    /// Packets parked.
    pub(super) fn packets(&self) -> usize {
        self.packets
    }

    fn can_park(&self) -> bool {
        self.per_hop > 0
    }

    fn find(&self, addr: IpAddr) -> Option<usize> {
        if self.active == 0 {
            return None;
        }
        self.hops
            .iter()
            .position(|h| h.is_some_and(|h| h.addr == addr))
    }

    fn open(&mut self, addr: IpAddr, port: usize, now: u64, due: u64) -> Option<usize> {
        let i = self.hops.iter().position(Option::is_none)?;
        self.hops[i] = Some(Hop {
            addr,
            port,
            head: 0,
            len: 0,
            since_ms: now,
            due_ms: due,
        });
        self.active += 1;
        Some(i)
    }

    /// Appends to hop `i`'s queue; when it is full, the oldest packet comes back.
    fn push(&mut self, i: usize, p: Parked) -> Option<Parked> {
        let per = self.per_hop;
        let h = self.hops.get_mut(i)?.as_mut()?;
        let mut evicted = None;
        if h.len == per {
            evicted = self.ring[i * per + h.head].take();
            h.head = (h.head + 1) % per;
            h.len -= 1;
            self.packets -= 1;
        }
        self.ring[i * per + (h.head + h.len) % per] = Some(p);
        h.len += 1;
        self.packets += 1;
        evicted
    }

    /// Takes hop `i`'s oldest packet.
    fn pop(&mut self, i: usize) -> Option<Parked> {
        let per = self.per_hop;
        let h = self.hops.get_mut(i)?.as_mut()?;
        if h.len == 0 {
            return None;
        }
        let p = self.ring[i * per + h.head].take();
        h.head = (h.head + 1) % per;
        h.len -= 1;
        self.packets -= 1;
        p
    }

    fn len_of(&self, i: usize) -> usize {
        self.hops
            .get(i)
            .and_then(|h| h.as_ref())
            .map_or(0, |h| h.len)
    }

    /// Frees hop `i` (dropping whatever is still parked there, uncounted: callers empty
    /// it first).
    fn close(&mut self, i: usize) {
        if self.hops.get(i).is_some_and(Option::is_some) {
            while self.pop(i).is_some() {}
            self.hops[i] = None;
            self.active -= 1;
        }
    }
}

/// The forwarder's resolution side for one call: its tables, borrowed, and its own memo
/// and parking lot, borrowed mutably.
#[derive(Debug)]
pub(super) struct Resolver<'a> {
    pub(super) conf: &'a ForwarderConfig,
    pub(super) neigh: &'a NeighbourCache,
    pub(super) memo: &'a mut Option<Memo>,
    pub(super) lot: &'a mut Lot,
}

impl Resolver<'_> {
    /// The answering side (ICMP errors for packets that failed).
    fn responder(&self) -> Responder<'_> {
        Responder {
            conf: self.conf,
            neigh: self.neigh,
        }
    }

    /// The neighbour entry of a next hop at `now`, through the memo (Reachable only).
    #[inline(always)]
    fn next_hop_mac(&mut self, addr: IpAddr, now: u64) -> Neighbour {
        if let Some(m) = *self.memo {
            if m.addr == addr && now < m.until && self.neigh.unchanged(m.slot, m.seq) {
                return Neighbour::Reachable(m.mac);
            }
        }
        let (n, pin) = self.neigh.lookup_pinned(addr, now);
        if let (Neighbour::Reachable(mac), Some(p)) = (n, pin) {
            *self.memo = Some(Memo {
                addr,
                slot: p.slot,
                seq: p.seq,
                until: p.fresh_until,
                mac,
            });
        }
        n
    }

    /// Sends a routed packet (TTL already checked) towards `nh`: MACs set and TTL / hop
    /// limit decremented when resolved (probing a stale entry when due, releasing older
    /// parked packets first); parked, or turned into a request, when not.
    pub(super) fn forward_to(
        &mut self,
        nh: NextHop,
        in_port: usize,
        pkt: &mut Pkt,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        let mac = match self.next_hop_mac(nh.addr, ctx.now_ms) {
            Neighbour::Reachable(mac) => mac,
            Neighbour::Stale(mac) => {
                if !self.probe_stale(nh, ctx) {
                    return self.unresolved(nh, in_port, pkt, ctx);
                }
                mac
            }
            _ => return self.unresolved(nh, in_port, pkt, ctx),
        };
        if let Some(h) = self.lot.find(nh.addr) {
            self.release(h, mac, ctx);
            if self.lot.len_of(h) > 0 {
                // StageIo is full: wait behind the older packets (out of buffers, go
                // ahead of them rather than drop a packet whose next hop is known).
                if let Some(spare) = ctx.io.as_deref().and_then(StageIo::alloc) {
                    return self.park(h, nh, in_port, pkt, spare, false, ctx);
                }
            }
        }
        self.rewrite_out(nh.port, mac, pkt)
    }

    /// A stale entry is about to be used: sends a unicast probe when one is due. `false`
    /// if its probes went unanswered and it was just deleted.
    fn probe_stale(&mut self, nh: NextHop, ctx: &mut Ctx<'_>) -> bool {
        let Some(io) = ctx.io.as_deref_mut() else {
            // Nothing to send probes with: keep using the entry rather than lose it.
            return true;
        };
        if !io.can_alloc() || io.room() == 0 {
            return true;
        }
        match self.neigh.probe(nh.addr, ctx.now_ms) {
            Probe::NotDue => true,
            Probe::Deleted => false,
            Probe::Send(mac) => {
                if let Some(mut p) = io.alloc() {
                    if self.build_request(nh, Some(mac), &mut p).is_ok()
                        && io.send(nh.port, p).is_ok()
                    {
                        ctx.counters.event(Event::NeighbourSolicited);
                    }
                }
                true
            }
        }
    }

    /// Sets the MACs towards `mac` out of `port` and decrements the TTL / hop limit of a
    /// validated, routed IPv4 or IPv6 packet.
    fn rewrite_out(&self, port: usize, mac: MacAddr, pkt: &mut Pkt) -> Verdict {
        let Some(out) = self.conf.ports.get(port) else {
            return Verdict::Drop(DropReason::BadPort);
        };
        let d = pkt.data_mut();
        if d.len() < ETH {
            return Verdict::Drop(DropReason::EthTruncated);
        }
        let mut f = ethernet::Frame::new_unchecked(&mut d[..]);
        f.set_dst_addr(mac);
        f.set_src_addr(out.mac);
        match f.ethertype() {
            EtherType::Ipv4 => match ipv4::Packet::new_checked(&mut d[ETH..]) {
                Ok(mut ip) => {
                    ip.decrement_ttl();
                }
                Err(_) => return Verdict::Drop(DropReason::Ipv4Malformed),
            },
            EtherType::Ipv6 => match ipv6::Packet::new_checked(&mut d[ETH..]) {
                Ok(mut ip) => {
                    let hop = ip.hop_limit();
                    ip.set_hop_limit(hop.saturating_sub(1));
                }
                Err(_) => return Verdict::Drop(DropReason::Ipv6Malformed),
            },
            _ => return Verdict::Drop(DropReason::UnknownEtherType),
        }
        Verdict::tx(port)
    }

    /// The next hop is not resolved: park the packet (asking for the address when due),
    /// or, without buffers to park with, turn it into the request.
    fn unresolved(
        &mut self,
        nh: NextHop,
        in_port: usize,
        pkt: &mut Pkt,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        if self.conf.ports.get(nh.port).is_none() {
            return Verdict::Drop(DropReason::BadPort);
        }
        if self.conf.addr_on(nh.port, nh.addr).is_none() {
            // No address of ours to ask from.
            return Verdict::Drop(DropReason::NoRoute);
        }
        let spare = match ctx.io.as_deref() {
            Some(io) if self.lot.can_park() => io.alloc(),
            _ => None,
        };
        let Some(spare) = spare else {
            return self.request_in_place(nh, pkt, ctx);
        };
        if let Some(h) = self.lot.find(nh.addr) {
            // Already waiting for it: join the queue; maintain drives the requests.
            return self.park(h, nh, in_port, pkt, spare, false, ctx);
        }
        let now = ctx.now_ms;
        match self.neigh.solicit(nh.addr, now) {
            Solicit::Failed => Verdict::Drop(DropReason::NeighbourUnresolved),
            Solicit::Resolved(mac) => self.rewrite_out(nh.port, mac, pkt),
            Solicit::Wait(due) => match self.lot.open(nh.addr, nh.port, now, due) {
                Some(h) => self.park(h, nh, in_port, pkt, spare, false, ctx),
                None => Verdict::Drop(DropReason::NeighbourQueueFull),
            },
            Solicit::Send(_) => {
                let due = now.saturating_add(self.neigh.config().retrans_ms);
                match self.lot.open(nh.addr, nh.port, now, due) {
                    Some(h) => self.park(h, nh, in_port, pkt, spare, true, ctx),
                    None => {
                        // No room to park, but the request is ours to send: the packet
                        // becomes it (the original is lost, as without parking).
                        drop(spare);
                        match self.build_request(nh, None, pkt) {
                            Ok(()) => {
                                ctx.counters.drop(DropReason::NeighbourQueueFull);
                                ctx.counters.event(Event::NeighbourSolicited);
                                Verdict::tx(nh.port)
                            }
                            Err(r) => Verdict::Drop(r),
                        }
                    }
                }
            }
        }
    }

    /// Parks `pkt` at hop `h`, leaving `spare` in its slot; the spare becomes a broadcast
    /// request when `request`.
    #[allow(clippy::too_many_arguments)]
    fn park(
        &mut self,
        h: usize,
        nh: NextHop,
        in_port: usize,
        pkt: &mut Pkt,
        spare: Pkt,
        request: bool,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        let orig = core::mem::replace(pkt, spare);
        let parked = Parked {
            pkt: orig,
            in_port: in_port as u32,
        };
        if let Some(old) = self.lot.push(h, parked) {
            drop(old);
            ctx.counters.drop(DropReason::NeighbourQueueFull);
        }
        ctx.counters.event(Event::NeighbourParked);
        if request && self.build_request(nh, None, pkt).is_ok() {
            ctx.counters.event(Event::NeighbourSolicited);
            return Verdict::tx(nh.port);
        }
        Verdict::Kept
    }

    /// Without buffers to park with: the packet becomes the request if one is due, else
    /// it is dropped (the behaviour before parking).
    fn request_in_place(&mut self, nh: NextHop, pkt: &mut Pkt, ctx: &mut Ctx<'_>) -> Verdict {
        match self.neigh.solicit(nh.addr, ctx.now_ms) {
            Solicit::Send(_) => self.send_in_place(nh, pkt, ctx),
            Solicit::Resolved(mac) => self.rewrite_out(nh.port, mac, pkt),
            Solicit::Wait(_) | Solicit::Failed => Verdict::Drop(DropReason::NeighbourUnresolved),
        }
    }

    /// Turns the packet into a broadcast request for `nh`, counting the original as
    /// `neighbour_unresolved`.
    fn send_in_place(&self, nh: NextHop, pkt: &mut Pkt, ctx: &mut Ctx<'_>) -> Verdict {
        match self.build_request(nh, None, pkt) {
            Ok(()) => {
                ctx.counters.drop(DropReason::NeighbourUnresolved);
                ctx.counters.event(Event::NeighbourSolicited);
                Verdict::tx(nh.port)
            }
            Err(r) => Verdict::Drop(r),
        }
    }

    /// Writes an ARP request / neighbour solicitation for `nh` into `pkt`: broadcast /
    /// solicited-node multicast, or unicast to `unicast` (a probe of a stale entry).
    fn build_request(
        &self,
        nh: NextHop,
        unicast: Option<MacAddr>,
        pkt: &mut Pkt,
    ) -> Result<(), DropReason> {
        let Some(out) = self.conf.ports.get(nh.port) else {
            return Err(DropReason::BadPort);
        };
        match nh.addr {
            IpAddr::V4(target) => {
                let Some(our) = self.conf.v4_on(nh.port) else {
                    return Err(DropReason::NoRoute);
                };
                if !pkt.set_len(ETH + arp::PACKET_LEN) {
                    return Err(DropReason::NoRoom);
                }
                let d = pkt.data_mut();
                ethernet::Repr {
                    src_addr: out.mac,
                    dst_addr: unicast.unwrap_or(MacAddr::BROADCAST),
                    ethertype: EtherType::Arp,
                }
                .emit(&mut ethernet::Frame::new_unchecked(&mut d[..]));
                arp::Repr {
                    operation: arp::Operation::Request,
                    source_hardware_addr: out.mac,
                    source_protocol_addr: our,
                    target_hardware_addr: MacAddr::ZERO,
                    target_protocol_addr: target,
                }
                .emit(&mut arp::Packet::new_unchecked(&mut d[ETH..]));
            }
            IpAddr::V6(target) => {
                let Some(our) = self.conf.v6_on(nh.port) else {
                    return Err(DropReason::NoRoute);
                };
                // RFC 4861 §7.2.2: to the solicited-node multicast address, or (a
                // reachability probe) to the target itself.
                let (dst, dst_mac) = match unicast {
                    Some(mac) => (target, mac),
                    None => {
                        let sn = ipv6::solicited_node(target);
                        (sn, MacAddr::ipv6_multicast(sn))
                    }
                };
                let ns = icmpv6::Repr::NeighborSolicit {
                    target,
                    source_ll: Some(out.mac),
                };
                let l4 = ns.buffer_len();
                if !pkt.set_len(ETH + ipv6::HEADER_LEN + l4) {
                    return Err(DropReason::NoRoom);
                }
                let d = pkt.data_mut();
                ethernet::Repr {
                    src_addr: out.mac,
                    dst_addr: dst_mac,
                    ethertype: EtherType::Ipv6,
                }
                .emit(&mut ethernet::Frame::new_unchecked(&mut d[..]));
                let mut ip = ipv6::Packet::new_unchecked(&mut d[ETH..]);
                ipv6::Repr {
                    src_addr: our,
                    dst_addr: dst,
                    next_header: ip_proto::ICMPV6,
                    payload_len: l4,
                    hop_limit: 255,
                }
                .emit(&mut ip);
                ns.emit(
                    &mut icmpv6::Packet::new_unchecked(ip.payload_mut()),
                    our,
                    dst,
                );
            }
        }
        Ok(())
    }

    /// Sends hop `h`'s parked packets to `mac`, oldest first, as far as [`StageIo`] has
    /// room; frees the hop once it is empty.
    fn release(&mut self, h: usize, mac: MacAddr, ctx: &mut Ctx<'_>) {
        let Some(hop) = self.lot.hops.get(h).copied().flatten() else {
            return;
        };
        let Ctx { counters, io, .. } = ctx;
        let Some(io) = io.as_deref_mut() else {
            // Parked packets exist only where a StageIo did; a caller without one now
            // leaves them for the next `maintain`.
            return;
        };
        while io.room() > 0 {
            let Some(mut p) = self.lot.pop(h) else { break };
            match self.rewrite_out(hop.port, mac, &mut p.pkt) {
                Verdict::Tx(port) => match io.send(port as usize, p.pkt) {
                    Ok(()) => counters.event(Event::NeighbourReleased),
                    Err(_) => counters.drop(DropReason::TxFull),
                },
                Verdict::Drop(r) => counters.drop(r),
                Verdict::Redirect(_) | Verdict::Kept => {}
            }
        }
        if self.lot.len_of(h) == 0 {
            self.lot.close(h);
        }
    }

    /// Resolution of hop `h` failed: drops its packets as `neighbour_unresolved`, the first
    /// one turned into an ICMP unreachable back to its sender when configured.
    fn fail(&mut self, h: usize, ctx: &mut Ctx<'_>) {
        let mut first = true;
        while let Some(mut p) = self.lot.pop(h) {
            ctx.counters.drop(DropReason::NeighbourUnresolved);
            if !core::mem::take(&mut first) || !self.neigh.config().icmp_unreachable {
                continue;
            }
            let in_port = p.in_port as usize;
            let is_v4 = p.pkt.data().get(12..14) == Some(&[0x08, 0x00]);
            let sent = if is_v4 {
                self.responder()
                    .icmp_error_v4(in_port, &mut p.pkt, IcmpError::Unreachable)
            } else {
                self.responder()
                    .icmp_error_v6(in_port, &mut p.pkt, IcmpError::Unreachable)
            };
            if sent {
                if let Some(io) = ctx.io.as_deref_mut() {
                    let _ = io.send(in_port, p.pkt);
                }
            }
        }
        self.lot.close(h);
    }

    /// The per-round work: releases what resolved, retransmits what is due, fails what
    /// timed out. Costs one branch when nothing is parked.
    pub(super) fn maintain(&mut self, ctx: &mut Ctx<'_>) {
        if self.lot.is_empty() {
            return;
        }
        let now = ctx.now_ms;
        let cfg = *self.neigh.config();
        let give_up = cfg
            .retrans_ms
            .saturating_mul(u64::from(cfg.mcast_probes) + 2);
        for h in 0..self.lot.hops.len() {
            let Some(hop) = self.lot.hops[h] else {
                continue;
            };
            if let Neighbour::Reachable(mac) | Neighbour::Stale(mac) =
                self.neigh.lookup_at(hop.addr, now)
            {
                self.release(h, mac, ctx);
                continue;
            }
            if now < hop.due_ms {
                continue;
            }
            if now.saturating_sub(hop.since_ms) >= give_up {
                self.fail(h, ctx);
                continue;
            }
            let io_ready = ctx
                .io
                .as_deref()
                .is_some_and(|io| io.room() > 0 && io.can_alloc());
            if !io_ready {
                // Try again next round, once the worker has drained StageIo.
                continue;
            }
            let nh = NextHop {
                addr: hop.addr,
                port: hop.port,
            };
            let due = match self.neigh.solicit(hop.addr, now) {
                Solicit::Send(_) => {
                    if let Some(io) = ctx.io.as_deref_mut() {
                        if let Some(mut p) = io.alloc() {
                            if self.build_request(nh, None, &mut p).is_ok()
                                && io.send(hop.port, p).is_ok()
                            {
                                ctx.counters.event(Event::NeighbourSolicited);
                            }
                        }
                    }
                    now.saturating_add(cfg.retrans_ms)
                }
                Solicit::Wait(due) => due,
                Solicit::Failed => {
                    self.fail(h, ctx);
                    continue;
                }
                Solicit::Resolved(mac) => {
                    self.release(h, mac, ctx);
                    continue;
                }
            };
            if let Some(Some(hop)) = self.lot.hops.get_mut(h) {
                hop.due_ms = due;
            }
        }
    }
}
