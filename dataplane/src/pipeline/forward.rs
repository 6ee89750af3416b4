//! The [`Forwarder`], the first stage: a small router.
//!
//! - answers ARP requests and IPv6 neighbour solicitations for the port's addresses (its
//!   own, the virtual ones and the listener addresses the tables in use serve there,
//!   [`Ctx::served`]), and learns neighbours from ARP and NDP into the shared
//!   [`NeighbourCache`];
//! - answers ICMP and ICMPv6 echo requests to any of its addresses;
//! - forwards other IP packets by the [`Fib`](super::Fib) (connected networks + static
//!   routes): next hop resolved from the neighbour cache, TTL / hop limit decremented
//!   (IPv4 checksum updated incrementally), and ICMP time exceeded sent back when it runs
//!   out;
//! - parks packets whose next hop is unresolved while it sends ARP requests / neighbour
//!   solicitations (retried, then failed with an ICMP unreachable), and re-probes stale
//!   neighbours (module `resolve`, states in [`neigh`](super::neigh));
//! - drops everything else under a [`DropReason`].
//!
//! Replies are built in the received buffer (module `local`): no allocation, no copy
//! beyond the quoted header of an ICMP error. Nothing here panics on any input (see the
//! property tests).
//!
//! The common IPv4 case (unicast to our MAC, no options, good checksum, TTL > 1, routed to a
//! resolved next hop) takes a fast path that reads the packet's [`Meta`] (filled by the one
//! parse pass over fixed offsets, [`parse_ip`] here or the balancer's
//! [`parse`](super::parse::parse)); everything else takes the general path over the
//! [`wire`](crate::wire) views, and a property test checks both decide every packet alike,
//! whichever way it came in. Why: the common case in one pass, and never parsed twice.
//! Measured with `bench_forward` and `bench_forward_pipeline` (`perf/NOTES.md`).
//!
//! The listener addresses of the tables in use come with each burst in [`Ctx::served`]
//! (set by the balancer from its snapshot); a forwarder run as a stage of its own has no
//! snapshot and serves only its ports' own and the virtual addresses.
//!
//! Packets a stage makes up or sends late (requests, released packets) go out through the
//! worker's [`StageIo`](super::StageIo) in [`Ctx::io`]; without one (a caller that offers
//! no buffers) the forwarder falls back to turning the unresolved packet into the request
//! itself.
//!
//! Known limits of this first stage (later issues replace it): ICMP errors are not rate
//! limited; IPv6 extension headers are not walked (a packet to sluice with one is
//! `local_unhandled`, one in transit is forwarded unchanged); VLAN-tagged frames are
//! dropped; broadcast/multicast IP is never routed.

use super::config::ForwarderConfig;
use super::local::Responder;
use super::neigh::{Neighbour, NeighbourCache};
use super::parse::{mac_word, parse_ip, Meta, ETH};
use super::resolve::{self, Resolver};
use super::stage::{Ctx, Stage, Verdict};
use crate::port::Pkt;
use crate::stats::DropReason;
use crate::tables::addresses::Addresses;
use crate::wire::{checksum, ethernet, ip_proto, ipv4, ipv6, EtherType, MacAddr};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// The first pipeline stage: ARP/ND, echo, neighbour learning, routed forwarding.
///
/// Cloning gives a forwarder with the same tables and an empty parking lot.
#[derive(Debug)]
pub struct Forwarder {
    conf: Arc<ForwarderConfig>,
    neigh: Arc<NeighbourCache>,
    /// The last next hop this worker resolved, pinned to its cache slot and sequence:
    /// a hit costs one compare and one load instead of a hash lookup.
    memo: Option<resolve::Memo>,
    /// The same for the IPv4 fast path, keyed by the next hop as a word.
    memo4: Option<Memo4>,
    /// Memos of many IPv4 destinations (out port and next hop's MAC), direct-mapped by
    /// the destination's low bits, for [`Forwarder::forward_parsed`]: a balancer's
    /// flows alternate between many backends, which would defeat a one-entry memo, and a
    /// hit skips the route lookup too.
    hops4: Box<[Hop4]>,
    /// sluice's MAC per port (a copy of the configuration's, for the fast path).
    macs: Box<[MacAddr]>,
    /// Packets waiting for their next hop's MAC (this worker's).
    lot: resolve::Lot,
}

impl Clone for Forwarder {
    fn clone(&self) -> Forwarder {
        Forwarder {
            conf: self.conf.clone(),
            neigh: self.neigh.clone(),
            memo: None,
            memo4: None,
            hops4: empty_hops4(),
            macs: self.macs.clone(),
            lot: resolve::Lot::for_config(self.neigh.config()),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Memo4 {
    nh: u32,
    slot: usize,
    seq: u32,
    /// The entry is Reachable before this time (ms); Stale from then on.
    until: u64,
    mac: MacAddr,
}

/// A memoised IPv4 destination of [`Forwarder`]'s table: its out port and its next hop's
/// MAC. The route part never goes stale (a forwarder's [`ForwarderConfig`] is fixed for
/// its life); the MAC is valid while the neighbour cache's epoch is unchanged (no entry
/// written since it was read) and the entry is Reachable.
#[derive(Debug, Clone, Copy)]
struct Hop4 {
    dst: u32,
    /// [`NeighbourCache::epoch`] read before the lookup.
    epoch: u32,
    /// The entry is Reachable before this time (ms).
    until: u64,
    mac: MacAddr,
    /// The out port (fits the padding after `mac`).
    out: u16,
}

impl Hop4 {
    /// Matches nothing: `until` 0 is never in the future.
    const EMPTY: Hop4 = Hop4 {
        dst: 0,
        epoch: 0,
        until: 0,
        mac: MacAddr([0; 6]),
        out: 0,
    };
}

const _: () = assert!(std::mem::size_of::<Hop4>() == 24);

/// Entries of [`Forwarder`]'s destination memo table (a power of two; 24 KiB).
const HOPS4: usize = 1024;

fn empty_hops4() -> Box<[Hop4]> {
    vec![Hop4::EMPTY; HOPS4].into_boxed_slice()
}

/// What a fast path did with a packet's bytes: rewrote them to go out as `verdict`;
/// `padded`: the frame carries link padding past the datagram, which [`finish`] cuts.
#[derive(Debug, Clone, Copy)]
struct Rewritten {
    verdict: Verdict,
    padded: bool,
}

/// The routed IPv4 packet's rewrite for port `out` in frame `d` (Ethernet + an IPv4
/// header without options, `total` bytes of datagram, as the caller's [`Meta`] says): the
/// next hop's MAC and the out port's, the TTL decremented with the header checksum
/// updated. `None` (nothing written) if the frame is shorter than `meta` said.
#[inline(always)]
fn rewrite_hop_v4(
    d: &mut [u8],
    out: usize,
    mac: MacAddr,
    out_mac: MacAddr,
    total: usize,
) -> Option<Rewritten> {
    let len = d.len();
    if total < ipv4::HEADER_LEN || len < ETH + total {
        return None;
    }
    let h: &mut [u8; 26] = d.get_mut(..26)?.try_into().ok()?;
    // Both addresses in one 12-byte store.
    let mut addrs = [0u8; 12];
    addrs[..6].copy_from_slice(&mac.0);
    addrs[6..].copy_from_slice(&out_mac.0);
    h[..12].copy_from_slice(&addrs);
    h[22] -= 1;
    let c = checksum::after_ttl_decrement(u16::from_be_bytes([h[24], h[25]]));
    h[24..26].copy_from_slice(&c.to_be_bytes());
    Some(Rewritten {
        verdict: Verdict::tx(out),
        padded: d.len() != ETH + total,
    })
}

/// The verdict of a packet a fast path rewrote, its link padding cut (not part of the
/// datagram).
#[inline(always)]
fn finish(pkt: &mut Pkt, meta: &Meta, r: Rewritten) -> Verdict {
    if r.padded {
        let _ = pkt.set_len(ETH + usize::from(meta.total));
    }
    r.verdict
}

impl Forwarder {
    /// A forwarder over a shared configuration and neighbour cache (one per worker).
    pub fn new(conf: Arc<ForwarderConfig>, neigh: Arc<NeighbourCache>) -> Forwarder {
        let macs = conf.ports.iter().map(|p| p.mac).collect();
        let lot = resolve::Lot::for_config(neigh.config());
        Forwarder {
            conf,
            neigh,
            memo: None,
            memo4: None,
            hops4: empty_hops4(),
            macs,
            lot,
        }
    }

    /// Packets this forwarder has parked (waiting for their next hop's MAC).
    pub fn parked(&self) -> usize {
        self.lot.packets()
    }

    /// The configuration (ports, FIB, addresses).
    pub fn config(&self) -> &ForwarderConfig {
        &self.conf
    }

    /// The shared neighbour cache.
    pub fn neighbours(&self) -> &Arc<NeighbourCache> {
        &self.neigh
    }

    /// The answering side (ARP, ND, echo, ICMP errors), borrowing the tables.
    #[inline]
    fn responder(&self) -> Responder<'_> {
        Responder {
            conf: &self.conf,
            neigh: &self.neigh,
        }
    }

    /// The next-hop resolution side (parking, requests, release), borrowing the tables,
    /// the next-hop memo and the parking lot.
    #[inline]
    fn resolver(&mut self) -> Resolver<'_> {
        Resolver {
            conf: &self.conf,
            neigh: &self.neigh,
            memo: &mut self.memo,
            lot: &mut self.lot,
        }
    }

    /// Decides one packet.
    #[inline]
    pub fn process(&mut self, in_port: usize, pkt: &mut Pkt, ctx: &mut Ctx<'_>) -> Verdict {
        let port_mac = self.port_mac_word(in_port);
        self.process_on(in_port, port_mac, pkt, ctx)
    }

    /// The MAC of port `in_port` as a word for the parse's compare (`None`: no such port,
    /// which only the general path answers).
    #[inline(always)]
    fn port_mac_word(&self, in_port: usize) -> Option<u64> {
        self.macs.get(in_port).map(|m| mac_word(&m.0))
    }

    /// [`Forwarder::process`] with the in port's MAC looked up once per burst: the IP
    /// layer parsed ([`parse_ip`]), then the fast path or the general path.
    #[inline(always)]
    fn process_on(
        &mut self,
        in_port: usize,
        port_mac: Option<u64>,
        pkt: &mut Pkt,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        if let Some(mac) = port_mac {
            // The packet's bytes are found once (its buffer's header read once) for the
            // parse and the rewrite.
            let d = pkt.data_mut();
            let mut meta = Meta::EMPTY;
            if parse_ip(d, mac, &mut meta) {
                if let Some(r) = self.fast_v4(&meta, || d, ctx.now_ms, ctx.served) {
                    return finish(pkt, &meta, r);
                }
            }
        }
        self.slow(in_port, pkt, ctx)
    }

    /// Decides a packet that [`parse`](super::parse::parse) has described in `meta`
    /// (received on `in_port`, unchanged since, or rewritten with `meta` kept in step):
    /// the fast path from `meta`, else the general path. What [`Forwarder::process`]
    /// decides, without parsing the packet again.
    ///
    /// Always inlined into the balancer's paths: left to LLVM, it became a call on every
    /// packet the balancer leaves to the forwarder (measured: `perf/NOTES.md`).
    #[inline(always)]
    pub fn process_parsed(
        &mut self,
        in_port: usize,
        pkt: &mut Pkt,
        meta: &Meta,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        if let Some(r) = self.fast_v4(meta, || pkt.data_mut(), ctx.now_ms, ctx.served) {
            return finish(pkt, meta, r);
        }
        self.slow(in_port, pkt, ctx)
    }

    /// The common case, from the packet's [`Meta`]: an IPv4 packet without options,
    /// unicast to our MAC, correct header checksum ([`Meta::plain_v4`]), TTL > 1, not for
    /// us, routed to a resolved (Reachable) next hop. Anything else returns `None` and
    /// takes the general path, which decides it (and names the drop reason) from scratch;
    /// so does a memo miss while packets are parked (they must leave before newer ones).
    ///
    /// `bytes` gives the packet's bytes for the rewrite: asked only once the route is
    /// known (a caller that has them already passes them in); `served`: the tables'
    /// served addresses ([`Ctx::served`]), which are sluice's own.
    #[inline(always)]
    fn fast_v4<'d>(
        &mut self,
        meta: &Meta,
        bytes: impl FnOnce() -> &'d mut [u8],
        now: u64,
        served: &Addresses,
    ) -> Option<Rewritten> {
        if !meta.plain_v4 || meta.ttl <= 1 {
            return None;
        }
        let (total, dst) = (usize::from(meta.total), meta.dst[3]);
        if !self.conf.passes_through_v4(dst, served) {
            return None;
        }
        let (out, nh) = self.conf.fib.lookup_v4_word(dst)?;
        let mac = match self.memo4 {
            Some(m) if m.nh == nh && now < m.until && self.neigh.unchanged(m.slot, m.seq) => m.mac,
            _ if !self.lot.is_empty() => return None,
            _ => self.memo4_miss(nh, now)?,
        };
        let out_mac = *self.macs.get(out)?;
        rewrite_hop_v4(bytes(), out, mac, out_mac, total)
    }

    /// The fast path's next hop `nh` missed the memo: looked up (Reachable only) and
    /// memoised. Out of line: a worker's traffic goes to few next hops, and inlined, the
    /// lookup took registers from the fast path around it.
    #[inline(never)]
    fn memo4_miss(&mut self, nh: u32, now: u64) -> Option<MacAddr> {
        match self
            .neigh
            .lookup_pinned(IpAddr::V4(Ipv4Addr::from(nh)), now)
        {
            (Neighbour::Reachable(mac), pin) => {
                if let Some(p) = pin {
                    self.memo4 = Some(Memo4 {
                        nh,
                        slot: p.slot,
                        seq: p.seq,
                        until: p.fresh_until,
                        mac,
                    });
                }
                Some(mac)
            }
            _ => None,
        }
    }

    /// Forwards a packet that the caller has parsed into `meta` and may have rewritten
    /// since (the balancer's NAT, which updates the checksums incrementally and keeps
    /// `meta`'s addresses and ports in step). An IPv4 packet without options
    /// ([`Meta::plain_v4`]) skips everything the parse vouches for and looks its
    /// destination up in a memo table of many destinations, route and next hop's MAC
    /// together (a balancer's flows alternate between backends). Anything out of the
    /// ordinary (TTL exhausted, a local, broadcast or multicast destination, no route, a
    /// next hop not memoised as Reachable while packets are parked, or not Reachable at
    /// all) goes to [`Forwarder::process_parsed`], and the rest (IPv6, IPv4 options) to the
    /// general path, which decides from the bytes.
    #[inline]
    pub fn forward_parsed(
        &mut self,
        in_port: usize,
        pkt: &mut Pkt,
        meta: &Meta,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        if !meta.plain_v4 {
            return self.slow(in_port, pkt, ctx);
        }
        match self.checked_v4(meta, || pkt.data_mut(), ctx.now_ms, ctx.served) {
            Some(r) => finish(pkt, meta, r),
            None => self.process_parsed(in_port, pkt, meta, ctx),
        }
    }

    /// [`Forwarder::forward_parsed`]'s way for IPv4 without options: the destination
    /// memo (route and next hop together), then the rewrite; `None` for anything out of
    /// the ordinary. `bytes` as for [`Forwarder::fast_v4`].
    #[inline(always)]
    fn checked_v4<'d>(
        &mut self,
        meta: &Meta,
        bytes: impl FnOnce() -> &'d mut [u8],
        now: u64,
        served: &Addresses,
    ) -> Option<Rewritten> {
        if meta.ttl <= 1 {
            return None;
        }
        let (total, dst) = (usize::from(meta.total), meta.dst[3]);
        if !self.conf.passes_through_v4(dst, served) {
            return None;
        }
        let slot = dst as usize & (HOPS4 - 1);
        // Read before any lookup, so that a change after it invalidates what it finds.
        let epoch = self.neigh.epoch();
        let m = self.hops4.get(slot)?;
        let (out, mac) = if m.dst == dst && now < m.until && m.epoch == epoch {
            (usize::from(m.out), m.mac)
        } else {
            if !self.lot.is_empty() {
                return None;
            }
            let (out, nh) = self.conf.fib.lookup_v4_word(dst)?;
            match self
                .neigh
                .lookup_pinned(IpAddr::V4(Ipv4Addr::from(nh)), now)
            {
                (Neighbour::Reachable(mac), Some(p)) => {
                    self.hops4[slot] = Hop4 {
                        dst,
                        epoch,
                        until: p.fresh_until,
                        mac,
                        out: u16::try_from(out).ok()?,
                    };
                    (out, mac)
                }
                _ => return None,
            }
        };
        let out_mac = *self.macs.get(out)?;
        rewrite_hop_v4(bytes(), out, mac, out_mac, total)
    }

    /// The general path: every packet the fast path declines.
    #[inline(never)]
    fn slow(&mut self, in_port: usize, pkt: &mut Pkt, ctx: &mut Ctx<'_>) -> Verdict {
        let Some(port) = self.conf.ports.get(in_port) else {
            return Verdict::Drop(DropReason::BadPort);
        };
        let (dst, ethertype) = {
            let Ok(f) = ethernet::Frame::new_checked(pkt.data()) else {
                return Verdict::Drop(DropReason::EthTruncated);
            };
            (f.dst_addr(), f.ethertype())
        };
        let for_us =
            dst == port.mac || dst.is_broadcast() || (dst.0[0] == 0x33 && dst.0[1] == 0x33);
        if !for_us {
            return Verdict::Drop(DropReason::NotForUs);
        }
        match ethertype {
            EtherType::Arp => self.responder().arp(in_port, pkt, ctx),
            EtherType::Ipv4 => self.ipv4(in_port, pkt, ctx),
            EtherType::Ipv6 => self.ipv6(in_port, pkt, ctx),
            EtherType::Vlan => Verdict::Drop(DropReason::VlanUnsupported),
            EtherType::Unknown(_) => Verdict::Drop(DropReason::UnknownEtherType),
        }
    }

    fn ipv4(&mut self, in_port: usize, pkt: &mut Pkt, ctx: &mut Ctx<'_>) -> Verdict {
        let (dst, total, proto, frag, ttl) = {
            let Ok(ip) = ipv4::Packet::new_checked(&pkt.data()[ETH..]) else {
                return Verdict::Drop(DropReason::Ipv4Malformed);
            };
            if ip.version() != 4 {
                return Verdict::Drop(DropReason::Ipv4Malformed);
            }
            if !ip.verify_checksum() {
                return Verdict::Drop(DropReason::Ipv4Checksum);
            }
            (
                ip.dst_addr(),
                usize::from(ip.total_len()),
                ip.protocol(),
                ip.is_fragment(),
                ip.ttl(),
            )
        };
        // Drop link padding so replies and forwarded packets carry only the datagram.
        let _ = pkt.set_len(ETH + total);
        let d32 = u32::from(dst);
        if self.conf.local_v4.contains(&d32) || ctx.served.has_v4(d32) {
            if proto != ip_proto::ICMP || frag {
                return Verdict::Drop(DropReason::LocalUnhandled);
            }
            return self.responder().echo_v4(in_port, pkt);
        }
        if d32 == u32::MAX || d32 >> 28 == 0xe || d32 == 0 || self.conf.bcast_v4.contains(&d32) {
            return Verdict::Drop(DropReason::IpMulticast);
        }
        if ttl <= 1 {
            ctx.counters.drop(DropReason::TtlExceeded);
            return self.responder().time_exceeded_v4(in_port, pkt);
        }
        let Some(nh) = self.conf.fib.lookup_v4(dst) else {
            return Verdict::Drop(DropReason::NoRoute);
        };
        self.resolver().forward_to(nh, in_port, pkt, ctx)
    }

    fn ipv6(&mut self, in_port: usize, pkt: &mut Pkt, ctx: &mut Ctx<'_>) -> Verdict {
        let (src, dst, next, plen, hop) = {
            let Ok(ip) = ipv6::Packet::new_checked(&pkt.data()[ETH..]) else {
                return Verdict::Drop(DropReason::Ipv6Malformed);
            };
            if ip.version() != 6 {
                return Verdict::Drop(DropReason::Ipv6Malformed);
            }
            (
                ip.src_addr(),
                ip.dst_addr(),
                ip.next_header(),
                usize::from(ip.payload_len()),
                ip.hop_limit(),
            )
        };
        let _ = pkt.set_len(ETH + ipv6::HEADER_LEN + plen);
        if dst.is_multicast() {
            let solicited = |a: &IpAddr| match a {
                IpAddr::V6(v) => ipv6::solicited_node(*v) == dst,
                IpAddr::V4(_) => false,
            };
            let ours = self
                .conf
                .ports
                .get(in_port)
                .is_some_and(|p| p.addrs.iter().any(|a| solicited(&a.addr)))
                || self.conf.virtual_addrs.iter().any(solicited)
                || ctx.served.solicits_on(in_port, dst);
            if next == ip_proto::ICMPV6
                && (ours || dst == Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1))
            {
                return self
                    .responder()
                    .icmpv6_local(in_port, pkt, ctx, src, dst, hop, true);
            }
            return Verdict::Drop(DropReason::IpMulticast);
        }
        if self.conf.is_ours(IpAddr::V6(dst), ctx.served) {
            if next != ip_proto::ICMPV6 {
                return Verdict::Drop(DropReason::LocalUnhandled);
            }
            return self
                .responder()
                .icmpv6_local(in_port, pkt, ctx, src, dst, hop, false);
        }
        if dst.is_unicast_link_local() || dst.is_unspecified() || src.is_unicast_link_local() {
            // Link-local traffic is never routed (RFC 4291 §2.5.6).
            return Verdict::Drop(DropReason::NoRoute);
        }
        if hop <= 1 {
            ctx.counters.drop(DropReason::TtlExceeded);
            return self.responder().time_exceeded_v6(in_port, pkt);
        }
        let Some(nh) = self.conf.fib.lookup(IpAddr::V6(dst)) else {
            return Verdict::Drop(DropReason::NoRoute);
        };
        self.resolver().forward_to(nh, in_port, pkt, ctx)
    }
}

impl Stage for Forwarder {
    #[inline]
    fn process_burst(
        &mut self,
        in_port: usize,
        pkts: &mut [Pkt],
        verdicts: &mut [Verdict],
        ctx: &mut Ctx<'_>,
    ) {
        let port_mac = self.port_mac_word(in_port);
        for (p, v) in pkts.iter_mut().zip(verdicts.iter_mut()) {
            *v = self.process_on(in_port, port_mac, p, ctx);
        }
    }

    fn maintain(&mut self, ctx: &mut Ctx<'_>) {
        self.resolver().maintain(ctx);
    }
}

#[cfg(test)]
mod tests;
