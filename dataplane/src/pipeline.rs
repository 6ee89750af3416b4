//! The per-packet stage the worker calls once per burst.
//!
//! [`Stage`] is the interface: a burst of received packets in, one [`Verdict`] per packet
//! out (send on a port, or drop with a named reason). The worker does the I/O and the
//! counting of verdicts; the stage only looks at and rewrites packets, so the same code runs
//! on DPDK, TAP, pcap and in-memory ports, and later issues replace the stage.
//!
//! [`Forwarder`] is the first stage, a small router:
//!
//! - answers ARP requests and IPv6 neighbour solicitations for the port's addresses, and
//!   learns neighbours from ARP and NDP into the shared [`NeighbourCache`];
//! - answers ICMP and ICMPv6 echo requests to any of its addresses;
//! - forwards other IP packets by the [`Fib`] (connected networks + static routes): next hop
//!   resolved from the neighbour cache, TTL / hop limit decremented (IPv4 checksum updated
//!   incrementally), and ICMP time exceeded sent back when it runs out;
//! - parks packets whose next hop is unresolved while it sends ARP requests / neighbour
//!   solicitations (retried, then failed with an ICMP unreachable), and re-probes stale
//!   neighbours (module `resolve`, states in [`neigh`]);
//! - drops everything else under a [`DropReason`].
//!
//! Replies are built in the received buffer: no allocation, no copy beyond the quoted
//! header of an ICMP error. Nothing here panics on any input (see the property tests).
//!
//! The common IPv4 case (unicast to our MAC, no options, good checksum, TTL > 1, routed to a
//! resolved next hop) takes a one-pass fast path over fixed offsets; everything else takes
//! the general path, and a property test checks both decide every packet alike.
//!
//! Packets a stage makes up or sends late (requests, released packets) go out through the
//! worker's [`StageIo`] in [`Ctx::io`]; without one (a caller that offers no buffers) the
//! forwarder falls back to turning the unresolved packet into the request itself.
//!
//! Known limits of this first stage (later issues replace it): ICMP errors are not rate
//! limited; IPv6 extension headers are not walked (a packet to sluice with one is
//! `local_unhandled`, one in transit is forwarded unchanged); VLAN-tagged frames are
//! dropped; broadcast/multicast IP is never routed.

pub mod balancer;
pub mod fib;
pub mod neigh;
mod resolve;

pub use fib::{Fib, IfAddr, NextHop, Route};
pub use neigh::{NeighConfig, Neighbour, NeighbourCache};

use crate::port::{Allocator, Pkt, BURST};
use crate::stats::{Counters, DropReason, Event};
use crate::wire::{
    arp, checksum, ethernet, icmpv4, icmpv6, ip_proto, ipv4, ipv6, EtherType, MacAddr,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// What to do with one packet. Eight bytes, so it comes back from a stage in a register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Send it on this port (index in configuration order).
    Tx(u32),
    /// Hand it to this worker (the owner of its flow) through the redirect ring; it
    /// arrives there as if received on the same port.
    Redirect(u32),
    /// Drop it, counting the reason.
    Drop(DropReason),
    /// The stage kept the packet for later (parked until its next hop resolves) and left
    /// a spare buffer in its place, which the worker frees without counting anything. The
    /// packet leaves later through [`StageIo`], or is dropped and counted then.
    Kept,
}

impl Verdict {
    /// Send on port `port`.
    #[inline]
    pub const fn tx(port: usize) -> Verdict {
        Verdict::Tx(port as u32)
    }
}

/// What a stage may use besides the packets.
#[derive(Debug)]
pub struct Ctx<'a> {
    /// Milliseconds on the worker's clock (real or virtual).
    pub now_ms: u64,
    /// The worker's counters (for packets replaced by a reply: the original is counted as
    /// dropped here, the reply goes out under its verdict).
    pub counters: &'a mut Counters,
    /// Fresh buffers and packets to send besides the verdicts (the worker's); `None`
    /// where the caller offers neither (the stage then makes do without).
    pub io: Option<&'a mut StageIo>,
}

impl<'a> Ctx<'a> {
    /// A context without [`StageIo`].
    pub fn new(now_ms: u64, counters: &'a mut Counters) -> Ctx<'a> {
        Ctx {
            now_ms,
            counters,
            io: None,
        }
    }

    /// A context with the worker's [`StageIo`].
    pub fn with_io(now_ms: u64, counters: &'a mut Counters, io: &'a mut StageIo) -> Ctx<'a> {
        Ctx {
            now_ms,
            counters,
            io: Some(io),
        }
    }
}

/// Packets a [`StageIo`] holds at most between two drains by the worker.
pub const EXTRA_TX: usize = 2 * BURST;

/// What a worker lends its stage beyond the burst: an allocator of fresh buffers, and a
/// fixed-capacity list of packets to send besides the verdicts (ARP requests, packets
/// released after resolution), which the worker moves into its tx buffers after each
/// burst (before the burst's own packets, which are newer) and after `maintain`.
/// Allocated once; no allocation per packet.
#[derive(Debug)]
pub struct StageIo {
    alloc: Option<Allocator>,
    tx: Vec<(u32, Pkt)>,
}

impl StageIo {
    /// An empty list, drawing fresh buffers from `alloc` (`None`: no buffers).
    pub fn new(alloc: Option<Allocator>) -> StageIo {
        StageIo {
            alloc,
            tx: Vec::with_capacity(EXTRA_TX),
        }
    }

    /// Replaces the allocator.
    pub fn set_allocator(&mut self, alloc: Option<Allocator>) {
        self.alloc = alloc;
    }

    /// Whether there is an allocator at all.
    #[inline]
    pub fn can_alloc(&self) -> bool {
        self.alloc.is_some()
    }

    /// A fresh empty buffer, or `None` (no allocator, or none free).
    #[inline]
    pub fn alloc(&self) -> Option<Pkt> {
        self.alloc.as_ref()?.alloc()
    }

    /// Queues `pkt` to be sent on `port`; gives it back when the list is full.
    #[inline]
    pub fn send(&mut self, port: usize, pkt: Pkt) -> Result<(), Pkt> {
        if self.tx.len() >= EXTRA_TX {
            return Err(pkt);
        }
        self.tx.push((port as u32, pkt));
        Ok(())
    }

    /// Room left in the list.
    #[inline]
    pub fn room(&self) -> usize {
        EXTRA_TX - self.tx.len().min(EXTRA_TX)
    }

    /// Packets queued.
    #[inline]
    pub fn len(&self) -> usize {
        self.tx.len()
    }

    /// Whether nothing is queued.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.tx.is_empty()
    }

    /// Takes every queued packet with its port, in the order queued.
    #[inline]
    pub fn drain(&mut self) -> std::vec::Drain<'_, (u32, Pkt)> {
        self.tx.drain(..)
    }
}

/// A packet-processing stage.
pub trait Stage: Send {
    /// Decides every packet of a burst received on `in_port`; `verdicts[i]` is the fate of
    /// `pkts[i]` (`verdicts` is at least as long as `pkts`).
    fn process_burst(
        &mut self,
        in_port: usize,
        pkts: &mut [Pkt],
        verdicts: &mut [Verdict],
        ctx: &mut Ctx<'_>,
    );

    /// Called once per poll round after the bursts (the quiescent point): timers and
    /// other housekeeping. The default does nothing.
    fn maintain(&mut self, _ctx: &mut Ctx<'_>) {}
}

/// One port as the pipeline sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConf {
    /// Port name (for messages).
    pub name: String,
    /// sluice's MAC on the port.
    pub mac: MacAddr,
    /// sluice's addresses on the port.
    pub addrs: Vec<IfAddr>,
}

/// The forwarder's configuration: ports (in worker port order) and the FIB.
#[derive(Debug, Clone)]
pub struct ForwarderConfig {
    /// Ports.
    pub ports: Vec<PortConf>,
    /// Forwarding table.
    pub fib: Fib,
    /// Virtual addresses (listener addresses): sluice answers ARP/ND and echo for them on
    /// every port, and they count as its own.
    pub virtual_addrs: Vec<IpAddr>,
    /// Every IPv4 address of sluice, and every directed broadcast of its networks, as
    /// words (the per-packet "is it ours?" checks).
    local_v4: Vec<u32>,
    bcast_v4: Vec<u32>,
    /// One bit per [`filter_bit_v4`] of every address in `local_v4` and `bcast_v4`: a
    /// destination whose bit is clear is in neither list (one test instead of two scans,
    /// however many virtual addresses there are).
    special_v4: u64,
}

/// The bit of [`ForwarderConfig`]'s local-or-broadcast filter that an IPv4 address sets:
/// the top six bits of a multiplicative hash.
#[inline(always)]
fn filter_bit_v4(a: u32) -> u64 {
    1 << (a.wrapping_mul(0x9e37_79b1) >> 26)
}

impl ForwarderConfig {
    /// Builds the configuration, deriving the FIB from the ports' addresses and `routes`.
    pub fn new(ports: Vec<PortConf>, routes: &[Route]) -> Result<ForwarderConfig, String> {
        ForwarderConfig::with_virtual(ports, routes, Vec::new())
    }

    /// As [`ForwarderConfig::new`], plus virtual addresses answered on every port.
    pub fn with_virtual(
        ports: Vec<PortConf>,
        routes: &[Route],
        virtual_addrs: Vec<IpAddr>,
    ) -> Result<ForwarderConfig, String> {
        let addrs: Vec<Vec<IfAddr>> = ports.iter().map(|p| p.addrs.clone()).collect();
        let fib = Fib::new(&addrs, routes)?;
        let mut local_v4 = Vec::new();
        let mut bcast_v4 = Vec::new();
        for a in ports.iter().flat_map(|p| p.addrs.iter()) {
            if let IpAddr::V4(v) = a.addr {
                local_v4.push(u32::from(v));
                if a.prefix_len < 31 {
                    bcast_v4.push(u32::from(v) | (u32::MAX >> a.prefix_len));
                }
            }
        }
        for a in &virtual_addrs {
            if let IpAddr::V4(v) = a {
                local_v4.push(u32::from(*v));
            }
        }
        let special_v4 = local_v4
            .iter()
            .chain(&bcast_v4)
            .fold(0, |f, &a| f | filter_bit_v4(a));
        Ok(ForwarderConfig {
            ports,
            fib,
            virtual_addrs,
            local_v4,
            bcast_v4,
            special_v4,
        })
    }

    fn v4_on(&self, port: usize) -> Option<Ipv4Addr> {
        self.ports
            .get(port)?
            .addrs
            .iter()
            .find_map(|a| match a.addr {
                IpAddr::V4(v) => Some(v),
                IpAddr::V6(_) => None,
            })
    }

    fn v6_on(&self, port: usize) -> Option<Ipv6Addr> {
        self.ports
            .get(port)?
            .addrs
            .iter()
            .find_map(|a| match a.addr {
                IpAddr::V6(v) => Some(v),
                IpAddr::V4(_) => None,
            })
    }

    /// Whether `ip` is one of sluice's addresses (a port's, or a virtual one).
    pub fn is_ours(&self, ip: IpAddr) -> bool {
        self.virtual_addrs.contains(&ip)
            || self
                .ports
                .iter()
                .any(|p| p.addrs.iter().any(|a| a.addr == ip))
    }

    /// Whether `ip` is sluice's on `port` (its own address there, or a virtual one).
    fn is_ours_on(&self, port: usize, ip: IpAddr) -> bool {
        self.virtual_addrs.contains(&ip)
            || self
                .ports
                .get(port)
                .is_some_and(|p| p.addrs.iter().any(|a| a.addr == ip))
    }

    /// sluice's first address of `ip`'s family on `port` (the source address NAT uses
    /// towards hosts behind that port).
    pub fn addr_on(&self, port: usize, family_of: IpAddr) -> Option<IpAddr> {
        match family_of {
            IpAddr::V4(_) => self.v4_on(port).map(IpAddr::V4),
            IpAddr::V6(_) => self.v6_on(port).map(IpAddr::V6),
        }
    }
}

/// The first pipeline stage: ARP/ND, echo, neighbour learning, routed forwarding.
///
/// Cloning gives a forwarder with the same tables and an empty parking lot.
#[derive(Debug)]
pub struct Forwarder {
    conf: Arc<ForwarderConfig>,
    neigh: Arc<NeighbourCache>,
    /// The last next hop this worker resolved, pinned to its cache slot and sequence:
    /// a hit costs one compare and one load instead of a hash lookup.
    memo: Option<Memo>,
    /// The same for the IPv4 fast path, keyed by the next hop as a word.
    memo4: Option<Memo4>,
    /// Memos of many IPv4 destinations (out port and next hop's MAC), direct-mapped by
    /// the destination's low bits, for [`Forwarder::forward_checked_v4`]: a balancer's
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

#[derive(Debug, Clone, Copy)]
struct Memo {
    addr: IpAddr,
    slot: usize,
    seq: u32,
    until: u64,
    mac: MacAddr,
}

const ETH: usize = ethernet::HEADER_LEN;

/// The routed IPv4 packet's rewrite in frame `d` (Ethernet + an IPv4 header without
/// options, checked by the caller): the next hop's MAC and the out port's, the TTL
/// decremented with the header checksum updated. Returns whether the frame carries link
/// padding past the datagram's `total` bytes.
#[inline(always)]
fn rewrite_hop_v4(d: &mut [u8], mac: MacAddr, out_mac: MacAddr, total: usize) -> bool {
    // Both addresses in one 12-byte store.
    let mut addrs = [0u8; 12];
    addrs[..6].copy_from_slice(&mac.0);
    addrs[6..].copy_from_slice(&out_mac.0);
    d[..12].copy_from_slice(&addrs);
    d[22] -= 1;
    let c = checksum::after_ttl_decrement(u16::from_be_bytes([d[24], d[25]]));
    d[24..26].copy_from_slice(&c.to_be_bytes());
    d.len() != ETH + total
}

/// A MAC address (the first six bytes of `b`, which has at least six) as a word: one
/// compare instead of six.
#[inline(always)]
fn mac_word(b: &[u8]) -> u64 {
    u64::from(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        | u64::from(u16::from_ne_bytes([b[4], b[5]])) << 32
}

/// Whether `dst` is in `words` (the few local or broadcast IPv4 addresses), compared
/// inline and without branches (`contains` is a call).
#[inline(always)]
fn listed(words: &[u32], dst: u32) -> bool {
    words.iter().fold(false, |hit, &a| hit | (a == dst))
}

/// The ICMP errors the forwarder sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IcmpError {
    /// TTL / hop limit exhausted in transit.
    TimeExceeded,
    /// The next hop did not resolve (host / address unreachable).
    Unreachable,
}
const DEFAULT_TTL: u8 = 64;
/// The most of the offending packet an ICMPv6 error quotes (RFC 4443 §2.4: the error
/// must fit the minimum MTU of 1280).
const ICMPV6_QUOTE_MAX: usize = 1280 - ipv6::HEADER_LEN - icmpv6::HEADER_LEN;

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

    /// Whether an IPv4 destination is one the fast paths forward: unicast, and neither
    /// one of sluice's addresses nor a directed broadcast of its subnets (those take the
    /// general path).
    #[inline(always)]
    fn passes_through_v4(&self, dst: u32) -> bool {
        dst != u32::MAX
            && dst >> 28 != 0xe
            && dst != 0
            && (self.conf.special_v4 & filter_bit_v4(dst) == 0
                || !(listed(&self.conf.local_v4, dst) || listed(&self.conf.bcast_v4, dst)))
    }

    /// Decides one packet.
    #[inline]
    pub fn process(&mut self, in_port: usize, pkt: &mut Pkt, ctx: &mut Ctx<'_>) -> Verdict {
        let port_mac = self.port_mac_word(in_port);
        self.process_on(in_port, port_mac, pkt, ctx)
    }

    /// The MAC of port `in_port` as a word for [`Forwarder::fast_v4`]'s compare (`None`:
    /// no such port, which only the general path answers).
    #[inline(always)]
    fn port_mac_word(&self, in_port: usize) -> Option<u64> {
        self.macs.get(in_port).map(|m| mac_word(&m.0))
    }

    /// [`Forwarder::process`] with the in port's MAC looked up once per burst.
    #[inline(always)]
    fn process_on(
        &mut self,
        in_port: usize,
        port_mac: Option<u64>,
        pkt: &mut Pkt,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        if let Some(v) = self.fast_v4(port_mac, pkt, ctx.now_ms) {
            return v;
        }
        self.slow(in_port, pkt, ctx)
    }

    /// The common case in one pass over fixed offsets: an IPv4 packet without options,
    /// unicast to our MAC, correct header checksum, TTL > 1, not for us, routed to a
    /// resolved (Reachable) next hop. Anything else returns `None` and takes the general
    /// path, which decides it (and names the drop reason) from scratch; so does a memo miss
    /// while packets are parked (they must leave before newer ones).
    #[inline(always)]
    fn fast_v4(&mut self, port_mac: Option<u64>, pkt: &mut Pkt, now: u64) -> Option<Verdict> {
        // The packet's bytes are found once (its buffer's header read once) for the
        // checks and the rewrite.
        let d = pkt.data_mut();
        let (total, dst) = {
            let h: &[u8; 34] = d.get(..34)?.try_into().ok()?;
            // IPv4 (0x0800), version 4 without options (0x45): three bytes, one compare.
            let kind = u32::from_be_bytes([h[12], h[13], h[14], h[15]]) & 0xffff_ff00;
            if kind != 0x0800_4500 || mac_word(&h[..6]) != port_mac? {
                return None;
            }
            let total = usize::from(u16::from_be_bytes([h[16], h[17]]));
            if total < ipv4::HEADER_LEN || ETH + total > d.len() || h[22] <= 1 {
                return None;
            }
            // The ones' complement sum is byte-order independent (RFC 1071 §2): add the
            // header as five native 32-bit words; all-ones reads the same either way.
            let w = |i: usize| u64::from(u32::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]));
            if !checksum::sums_to_all_ones(w(14) + w(18) + w(22) + w(26) + w(30)) {
                return None;
            }
            let dst = u32::from_be_bytes([h[30], h[31], h[32], h[33]]);
            if !self.passes_through_v4(dst) {
                return None;
            }
            (total, dst)
        };
        let (out, nh) = self.conf.fib.lookup_v4_word(dst)?;
        let mac = match self.memo4 {
            Some(m) if m.nh == nh && now < m.until && self.neigh.unchanged(m.slot, m.seq) => m.mac,
            _ if !self.lot.is_empty() => return None,
            _ => match self
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
                    mac
                }
                _ => return None,
            },
        };
        let out_mac = *self.macs.get(out)?;
        if rewrite_hop_v4(d, mac, out_mac, total) {
            // Link padding is not part of the datagram.
            let _ = pkt.set_len(ETH + total);
        }
        Some(Verdict::tx(out))
    }

    /// Forwards an IPv4 packet that the caller has just validated and rewritten (the
    /// balancer's NAT, which updated the checksums incrementally): Ethernet addressed to
    /// this port, IPv4 without options, total length within the frame, header checksum
    /// correct. Skips what [`Forwarder::process`] would check again and looks the
    /// destination up in a memo table of many destinations, route and next hop's MAC
    /// together (a balancer's flows alternate between backends). Anything out of the
    /// ordinary (TTL exhausted, a local, broadcast or multicast destination, no route, a
    /// next hop not memoised as Reachable while packets are parked, or not Reachable at
    /// all) goes to [`Forwarder::process`], which decides it from scratch; so a caller
    /// that breaks the promise gets the general path, never a wrong packet.
    #[inline]
    pub fn forward_checked_v4(
        &mut self,
        in_port: usize,
        pkt: &mut Pkt,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        match self.checked_v4(pkt, ctx.now_ms) {
            Some(v) => v,
            None => self.process(in_port, pkt, ctx),
        }
    }

    #[inline(always)]
    fn checked_v4(&mut self, pkt: &mut Pkt, now: u64) -> Option<Verdict> {
        let (total, dst) = {
            let h: &[u8; 34] = pkt.data().get(..34)?.try_into().ok()?;
            if h[12] != 0x08 || h[13] != 0x00 || h[14] != 0x45 || h[22] <= 1 {
                return None;
            }
            let total = usize::from(u16::from_be_bytes([h[16], h[17]]));
            let dst = u32::from_be_bytes([h[30], h[31], h[32], h[33]]);
            if !self.passes_through_v4(dst) {
                return None;
            }
            (total, dst)
        };
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
        let d = pkt.data_mut();
        if total < ipv4::HEADER_LEN || d.len() < ETH + total {
            return None;
        }
        if rewrite_hop_v4(d, mac, out_mac, total) {
            // Link padding is not part of the datagram.
            let _ = pkt.set_len(ETH + total);
        }
        Some(Verdict::tx(out))
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
            EtherType::Arp => self.arp(in_port, pkt, ctx),
            EtherType::Ipv4 => self.ipv4(in_port, pkt, ctx),
            EtherType::Ipv6 => self.ipv6(in_port, pkt, ctx),
            EtherType::Vlan => Verdict::Drop(DropReason::VlanUnsupported),
            EtherType::Unknown(_) => Verdict::Drop(DropReason::UnknownEtherType),
        }
    }

    fn arp(&self, in_port: usize, pkt: &mut Pkt, ctx: &mut Ctx<'_>) -> Verdict {
        let repr =
            match arp::Packet::new_checked(&pkt.data()[ETH..]).and_then(|p| arp::Repr::parse(&p)) {
                Ok(r) => r,
                Err(_) => return Verdict::Drop(DropReason::ArpMalformed),
            };
        let target_ours = self
            .conf
            .is_ours_on(in_port, IpAddr::V4(repr.target_protocol_addr));
        let sender = repr.source_protocol_addr;
        let sender_ok = !sender.is_unspecified()
            && !sender.is_broadcast()
            && !sender.is_multicast()
            && repr.source_hardware_addr.is_unicast();
        if target_ours && sender_ok {
            self.neigh
                .learn(IpAddr::V4(sender), repr.source_hardware_addr, ctx.now_ms);
        }
        match repr.operation {
            arp::Operation::Request if target_ours => {
                let mac = self.conf.ports[in_port].mac;
                let reply = arp::Repr {
                    operation: arp::Operation::Reply,
                    source_hardware_addr: mac,
                    source_protocol_addr: repr.target_protocol_addr,
                    target_hardware_addr: repr.source_hardware_addr,
                    target_protocol_addr: repr.source_protocol_addr,
                };
                if !pkt.set_len(ETH + arp::PACKET_LEN) {
                    return Verdict::Drop(DropReason::NoRoom);
                }
                let d = pkt.data_mut();
                let mut f = ethernet::Frame::new_unchecked(&mut d[..]);
                f.set_dst_addr(repr.source_hardware_addr);
                f.set_src_addr(mac);
                reply.emit(&mut arp::Packet::new_unchecked(&mut d[ETH..]));
                Verdict::tx(in_port)
            }
            arp::Operation::Reply if target_ours => Verdict::Drop(DropReason::ArpReplyConsumed),
            _ => Verdict::Drop(DropReason::ArpNotForUs),
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
        if self.conf.local_v4.contains(&d32) {
            if proto != ip_proto::ICMP || frag {
                return Verdict::Drop(DropReason::LocalUnhandled);
            }
            return self.echo_v4(in_port, pkt);
        }
        if d32 == u32::MAX || d32 >> 28 == 0xe || d32 == 0 || self.conf.bcast_v4.contains(&d32) {
            return Verdict::Drop(DropReason::IpMulticast);
        }
        if ttl <= 1 {
            ctx.counters.drop(DropReason::TtlExceeded);
            return self.time_exceeded_v4(in_port, pkt);
        }
        let Some(nh) = self.conf.fib.lookup_v4(dst) else {
            return Verdict::Drop(DropReason::NoRoute);
        };
        self.forward_to(nh, in_port, pkt, ctx)
    }

    fn echo_v4(&self, in_port: usize, pkt: &mut Pkt) -> Verdict {
        let d = pkt.data_mut();
        let (src_mac, src, dst, hl) = {
            let f = ethernet::Frame::new_unchecked(&d[..]);
            let ip = ipv4::Packet::new_unchecked(&d[ETH..]);
            (
                f.src_addr(),
                ip.src_addr(),
                ip.dst_addr(),
                usize::from(ip.header_len()),
            )
        };
        {
            let ip = ipv4::Packet::new_unchecked(&d[ETH..]);
            let Ok(icmp) = icmpv4::Packet::new_checked(ip.payload()) else {
                return Verdict::Drop(DropReason::IcmpMalformed);
            };
            if !icmp.verify_checksum() {
                return Verdict::Drop(DropReason::IcmpMalformed);
            }
            if icmp.msg_type() != icmpv4::msg_type::ECHO_REQUEST || icmp.msg_code() != 0 {
                return Verdict::Drop(DropReason::IcmpUnhandled);
            }
        }
        if !src_mac.is_unicast() || src.is_broadcast() || src.is_multicast() || src.is_unspecified()
        {
            return Verdict::Drop(DropReason::LocalUnhandled);
        }
        let mut f = ethernet::Frame::new_unchecked(&mut d[..]);
        f.set_dst_addr(src_mac);
        f.set_src_addr(self.conf.ports[in_port].mac);
        let mut ip = ipv4::Packet::new_unchecked(&mut d[ETH..]);
        ip.set_src_addr(dst);
        ip.set_dst_addr(src);
        ip.set_ttl(DEFAULT_TTL);
        ip.fill_checksum();
        let mut icmp = icmpv4::Packet::new_unchecked(ip.payload_mut());
        let c = icmp.checksum();
        icmp.set_type_code(icmpv4::msg_type::ECHO_REPLY, 0);
        icmp.set_checksum(checksum::update16(
            c,
            u16::from(icmpv4::msg_type::ECHO_REQUEST) << 8,
            u16::from(icmpv4::msg_type::ECHO_REPLY) << 8,
        ));
        let _ = hl;
        Verdict::tx(in_port)
    }

    /// Rewrites the packet into an ICMP time exceeded to its sender, out of `in_port`.
    fn time_exceeded_v4(&self, in_port: usize, pkt: &mut Pkt) -> Verdict {
        if self.icmp_error_v4(in_port, pkt, IcmpError::TimeExceeded) {
            Verdict::tx(in_port)
        } else {
            Verdict::Drop(DropReason::TtlExceeded)
        }
    }

    /// Rewrites the packet into an ICMP error of `kind` to its sender, to go out of
    /// `in_port`. `false` (packet unchanged or garbage) when no error may be sent.
    fn icmp_error_v4(&self, in_port: usize, pkt: &mut Pkt, kind: IcmpError) -> bool {
        let Some(our) = self.conf.v4_on(in_port) else {
            return false;
        };
        let (src_mac, src, hl, total, no_error) = {
            let d = pkt.data();
            let f = ethernet::Frame::new_unchecked(d);
            let ip = ipv4::Packet::new_unchecked(&d[ETH..]);
            // Never answer an ICMP error (or anything not a plain echo) with an error, nor a
            // non-first fragment (RFC 1812 §4.3.2.7).
            let no_error = ip.frag_offset() != 0
                || (ip.protocol() == ip_proto::ICMP
                    && ip
                        .payload()
                        .first()
                        .is_none_or(|&t| t != icmpv4::msg_type::ECHO_REQUEST));
            (
                f.src_addr(),
                ip.src_addr(),
                usize::from(ip.header_len()),
                usize::from(ip.total_len()),
                no_error,
            )
        };
        if no_error
            || !src_mac.is_unicast()
            || src.is_unspecified()
            || src.is_broadcast()
            || src.is_multicast()
        {
            return false;
        }
        let quote = (hl + 8).min(total);
        let shift = ipv4::HEADER_LEN + icmpv4::HEADER_LEN;
        if !pkt.set_len(ETH + shift + quote) {
            return false;
        }
        let d = pkt.data_mut();
        d.copy_within(ETH..ETH + quote, ETH + shift);
        let mut f = ethernet::Frame::new_unchecked(&mut d[..]);
        f.set_dst_addr(src_mac);
        f.set_src_addr(self.conf.ports[in_port].mac);
        f.set_ethertype(EtherType::Ipv4);
        let repr = ipv4::Repr {
            src_addr: our,
            dst_addr: src,
            protocol: ip_proto::ICMP,
            payload_len: icmpv4::HEADER_LEN + quote,
            ttl: DEFAULT_TTL,
        };
        let mut ip = ipv4::Packet::new_unchecked(&mut d[ETH..]);
        repr.emit(&mut ip);
        match kind {
            IcmpError::TimeExceeded => icmpv4::Repr::TimeExceeded {
                code: 0,
                data_len: quote,
            },
            // Code 1: host unreachable (RFC 1812 §5.2.7.1: the next hop does not answer).
            IcmpError::Unreachable => icmpv4::Repr::DstUnreachable {
                code: 1,
                data_len: quote,
            },
        }
        .emit(&mut icmpv4::Packet::new_unchecked(ip.payload_mut()));
        true
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
                || self.conf.virtual_addrs.iter().any(solicited);
            if next == ip_proto::ICMPV6
                && (ours || dst == Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1))
            {
                return self.icmpv6_local(in_port, pkt, ctx, src, dst, hop, true);
            }
            return Verdict::Drop(DropReason::IpMulticast);
        }
        if self.conf.is_ours(IpAddr::V6(dst)) {
            if next != ip_proto::ICMPV6 {
                return Verdict::Drop(DropReason::LocalUnhandled);
            }
            return self.icmpv6_local(in_port, pkt, ctx, src, dst, hop, false);
        }
        if dst.is_unicast_link_local() || dst.is_unspecified() || src.is_unicast_link_local() {
            // Link-local traffic is never routed (RFC 4291 §2.5.6).
            return Verdict::Drop(DropReason::NoRoute);
        }
        if hop <= 1 {
            ctx.counters.drop(DropReason::TtlExceeded);
            return self.time_exceeded_v6(in_port, pkt);
        }
        let Some(nh) = self.conf.fib.lookup(IpAddr::V6(dst)) else {
            return Verdict::Drop(DropReason::NoRoute);
        };
        self.forward_to(nh, in_port, pkt, ctx)
    }

    #[allow(clippy::too_many_arguments)]
    fn icmpv6_local(
        &self,
        in_port: usize,
        pkt: &mut Pkt,
        ctx: &mut Ctx<'_>,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        hop: u8,
        multicast: bool,
    ) -> Verdict {
        let port_mac = self.conf.ports[in_port].mac;
        let (src_mac, repr) = {
            let d = pkt.data();
            let f = ethernet::Frame::new_unchecked(d);
            let ip = ipv6::Packet::new_unchecked(&d[ETH..]);
            let repr = match icmpv6::Packet::new_checked(ip.payload())
                .and_then(|p| icmpv6::Repr::parse(&p, src, dst))
            {
                Ok(r) => r,
                Err(crate::wire::Error::Unsupported) => {
                    return Verdict::Drop(DropReason::IcmpUnhandled)
                }
                Err(_) => return Verdict::Drop(DropReason::IcmpMalformed),
            };
            (f.src_addr(), repr)
        };
        match repr {
            icmpv6::Repr::EchoRequest {
                ident,
                seq_no,
                data_len,
            } if !multicast => {
                if !src_mac.is_unicast() || src.is_multicast() || src.is_unspecified() {
                    return Verdict::Drop(DropReason::LocalUnhandled);
                }
                let d = pkt.data_mut();
                let mut f = ethernet::Frame::new_unchecked(&mut d[..]);
                f.set_dst_addr(src_mac);
                f.set_src_addr(port_mac);
                let mut ip = ipv6::Packet::new_unchecked(&mut d[ETH..]);
                ip.set_src_addr(dst);
                ip.set_dst_addr(src);
                ip.set_hop_limit(DEFAULT_TTL);
                icmpv6::Repr::EchoReply {
                    ident,
                    seq_no,
                    data_len,
                }
                .emit(
                    &mut icmpv6::Packet::new_unchecked(ip.payload_mut()),
                    dst,
                    src,
                );
                Verdict::tx(in_port)
            }
            icmpv6::Repr::NeighborSolicit { target, source_ll } => {
                // RFC 4861 §7.1.1: hop limit 255, target ours.
                if hop != 255 || !self.conf.is_ours_on(in_port, IpAddr::V6(target)) {
                    return Verdict::Drop(DropReason::NdNotForUs);
                }
                let dad = src.is_unspecified();
                if let (false, Some(mac)) = (dad, source_ll) {
                    if mac.is_unicast() {
                        self.neigh.learn(IpAddr::V6(src), mac, ctx.now_ms);
                    }
                }
                let (reply_dst, reply_mac, flags) = if dad {
                    let all = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
                    (
                        all,
                        MacAddr::ipv6_multicast(all),
                        icmpv6::na_flags::OVERRIDE,
                    )
                } else {
                    (
                        src,
                        source_ll.unwrap_or(src_mac),
                        icmpv6::na_flags::SOLICITED | icmpv6::na_flags::OVERRIDE,
                    )
                };
                let na = icmpv6::Repr::NeighborAdvert {
                    flags,
                    target,
                    target_ll: Some(port_mac),
                };
                let l4 = na.buffer_len();
                if !pkt.set_len(ETH + ipv6::HEADER_LEN + l4) {
                    return Verdict::Drop(DropReason::NoRoom);
                }
                let d = pkt.data_mut();
                ethernet::Repr {
                    src_addr: port_mac,
                    dst_addr: reply_mac,
                    ethertype: EtherType::Ipv6,
                }
                .emit(&mut ethernet::Frame::new_unchecked(&mut d[..]));
                let mut ip = ipv6::Packet::new_unchecked(&mut d[ETH..]);
                ipv6::Repr {
                    src_addr: target,
                    dst_addr: reply_dst,
                    next_header: ip_proto::ICMPV6,
                    payload_len: l4,
                    hop_limit: 255,
                }
                .emit(&mut ip);
                na.emit(
                    &mut icmpv6::Packet::new_unchecked(ip.payload_mut()),
                    target,
                    reply_dst,
                );
                Verdict::tx(in_port)
            }
            icmpv6::Repr::NeighborAdvert {
                target, target_ll, ..
            } => {
                if hop != 255 {
                    return Verdict::Drop(DropReason::NdNotForUs);
                }
                if let Some(mac) = target_ll.filter(|m| m.is_unicast()) {
                    if !target.is_multicast() && !target.is_unspecified() {
                        self.neigh.learn(IpAddr::V6(target), mac, ctx.now_ms);
                    }
                }
                Verdict::Drop(DropReason::NdAdvertConsumed)
            }
            _ => Verdict::Drop(DropReason::IcmpUnhandled),
        }
    }

    fn time_exceeded_v6(&self, in_port: usize, pkt: &mut Pkt) -> Verdict {
        if self.icmp_error_v6(in_port, pkt, IcmpError::TimeExceeded) {
            Verdict::tx(in_port)
        } else {
            Verdict::Drop(DropReason::TtlExceeded)
        }
    }

    /// Rewrites the packet into an ICMPv6 error of `kind` to its sender, to go out of
    /// `in_port`. `false` (packet unchanged or garbage) when no error may be sent.
    fn icmp_error_v6(&self, in_port: usize, pkt: &mut Pkt, kind: IcmpError) -> bool {
        let Some(our) = self.conf.v6_on(in_port) else {
            return false;
        };
        let (src_mac, src, len, no_error) = {
            let d = pkt.data();
            let f = ethernet::Frame::new_unchecked(d);
            let ip = ipv6::Packet::new_unchecked(&d[ETH..]);
            let no_error = ip.next_header() == ip_proto::ICMPV6
                && ip.payload().first().is_none_or(|&t| t < 128);
            (f.src_addr(), ip.src_addr(), d.len() - ETH, no_error)
        };
        if no_error || !src_mac.is_unicast() || src.is_multicast() || src.is_unspecified() {
            return false;
        }
        let quote = len.min(ICMPV6_QUOTE_MAX);
        let shift = ipv6::HEADER_LEN + icmpv6::HEADER_LEN;
        if !pkt.set_len(ETH + shift + quote) {
            return false;
        }
        let d = pkt.data_mut();
        d.copy_within(ETH..ETH + quote, ETH + shift);
        let mut f = ethernet::Frame::new_unchecked(&mut d[..]);
        f.set_dst_addr(src_mac);
        f.set_src_addr(self.conf.ports[in_port].mac);
        f.set_ethertype(EtherType::Ipv6);
        let mut ip = ipv6::Packet::new_unchecked(&mut d[ETH..]);
        ipv6::Repr {
            src_addr: our,
            dst_addr: src,
            next_header: ip_proto::ICMPV6,
            payload_len: icmpv6::HEADER_LEN + quote,
            hop_limit: DEFAULT_TTL,
        }
        .emit(&mut ip);
        match kind {
            IcmpError::TimeExceeded => icmpv6::Repr::TimeExceeded {
                code: 0,
                data_len: quote,
            },
            // Code 3: address unreachable (RFC 4443 §3.1, for failed resolution).
            IcmpError::Unreachable => icmpv6::Repr::DstUnreachable {
                code: 3,
                data_len: quote,
            },
        }
        .emit(
            &mut icmpv6::Packet::new_unchecked(ip.payload_mut()),
            our,
            src,
        );
        true
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
        self.maintain_neighbours(ctx);
    }
}

#[cfg(test)]
mod tests;
