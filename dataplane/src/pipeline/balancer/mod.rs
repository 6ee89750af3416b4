//! The L4 load-balancing stage: connection tracking, NetworkPolicy on new flows, Maglev
//! backend choice and full NAT, in front of the [`Forwarder`].
//!
//! Per packet (one snapshot read per burst, see [`crate::rcu`]):
//!
//! 1. **Parse** Ethernet -> IPv4 (no fragments) / IPv6 (TCP or UDP right after the fixed
//!    header) -> TCP/UDP ports. Anything else (ARP, ND, ICMP, IPv6 with extension headers)
//!    goes to the [`Forwarder`] unchanged; routed non-TCP/UDP traffic passes the policy
//!    tables first (stateless: protocol and addresses).
//! 2. **Flow hit** (either direction's 5-tuple): re-check policy if the snapshot
//!    generation moved on since the flow was admitted (a flow the new policy denies is
//!    closed), advance the TCP state and expiry, rewrite addresses and ports with
//!    incremental checksums (IPv4 header, TCP/UDP over the pseudo-header; IPv6 alike),
//!    then let the forwarder route it (TTL/hop limit, next hop, MACs).
//! 3. **New flow to a listener** (a bound listener address, or an any-address listener on
//!    one of sluice's addresses): the route's Maglev table picks a backend from the
//!    client-side 5-tuple ([`flow_hash`](crate::tables::maglev::flow_hash)); a *reject*
//!    slot answers TCP with RST and UDP with ICMP port unreachable; the policy tables must
//!    allow source -> backend; then the flow is created with a source NAT address (sluice's
//!    address of the backend's family on the port towards it) and port from this worker's
//!    range, or, for a transparent listener, with the client's own address. TCP flows
//!    start only on a SYN; other segments without a flow are dropped (`no_flow`).
//! 4. **New routed flow** (no listener, not addressed to sluice): policy source ->
//!    destination, then a flow without rewrite so that replies pass (Kubernetes: replies
//!    of an allowed connection are allowed).
//!
//! With policy tables of [`BalancerConfig::policy_bursts_from`] bytes and up (4 MiB by
//! default), the policy checks of 4 (and of 3 for listeners bound to addresses that are
//! not sluice's own) are made for the whole burst at once, before the
//! flow lookups, in one staged lookup whose cache misses overlap (`PolicyAhead`); a
//! packet uses that verdict only if its own check asks exactly the same question.
//!
//! ## Multi-core
//!
//! A flow lives in the table of the worker that received its first packet. Both
//! directions reach that worker because: the client side arrives by symmetric RSS (the
//! NIC's Toeplitz with the repeated `0x6d5a` key, the kernel's TAP queue choice, or the
//! in-memory port's symmetric hash all keep a 5-tuple on one queue, and routed flows'
//! two directions hash alike); the backend side of a NAT flow is addressed to a SNAT port
//! from the owner's own port range, so a worker that receives a reply for a port of
//! another worker's range hands the packet to that worker through the lock-free
//! [`Redirects`](crate::worker::Redirects) rings ([`Verdict::Redirect`]). This is the
//! software fallback DESIGN.md §3 names; it needs no NIC feature and works on TAP and
//! single-queue vdevs. (Choosing the SNAT port so that the reply's Toeplitz hash also lands
//! on the owner's queue would save the ring hop on NICs; it is not done yet.)
//!
//! Transparent listeners (no SNAT) keep the client address towards the backend, so the
//! backend's reply arrives as routed traffic by the symmetric hash of (backend, client):
//! with more than one worker that can be another worker than the client side's, which then
//! has no flow for it. Use one worker, or SNAT, for transparent listeners until rte_flow
//! steering lands.
//!
//! Nothing here allocates after [`Balancer::new`], takes a lock, or panics on input; every
//! packet that does not go out is counted under a [`DropReason`].

mod delayed;

use super::{Ctx, Forwarder, Stage, Verdict};
use crate::flow::{Dir, FlowId, FlowTable, Splice, TcpFlags, TcpState, Timeouts, Tuple, Tuple4};
use crate::port::{Pkt, BURST};
use crate::rcu::Reader;
use crate::splice::SpliceConfig;
use crate::stats::{DropReason, Event};
use crate::tables::listeners::ListenerKind;
use crate::tables::maglev::Pick;
use crate::tables::policy::{self, Conn};
use crate::tables::snapshot::Snapshot;
use crate::wire::{checksum, ethernet, icmpv4, icmpv6, ip_proto, ipv4, ipv6, tcp, EtherType};
use delayed::Splicer;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

const ETH: usize = ethernet::HEADER_LEN;
const REPLY_TTL: u8 = 64;
/// SNAT ports tried for one new flow before giving up.
const SNAT_ATTEMPTS: u32 = 256;
/// The most of an offending packet an ICMPv6 error quotes (fits the minimum MTU).
const ICMPV6_QUOTE_MAX: usize = 1280 - ipv6::HEADER_LEN - icmpv6::HEADER_LEN;

/// A worker's balancer settings (plain data; `sluice-ctrl` fills it from the Appliance).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BalancerConfig {
    /// This worker's index.
    pub worker: usize,
    /// Number of workers (the SNAT port range is split among them).
    pub workers: usize,
    /// Flow table capacity (fixed; all memory allocated at start).
    pub flow_capacity: usize,
    /// Connection-tracking timeouts.
    pub timeouts: Timeouts,
    /// The SNAT port range, inclusive, split evenly among the workers.
    pub snat_ports: (u16, u16),
    /// Seeds the flow table's hash and the SNAT port cursor.
    pub seed: u64,
    /// Delayed binding (SNI/Host listeners): embryos, buffers, timers, cookie secret.
    pub splice: SpliceConfig,
    /// Policy tables of this many bytes and up check a burst's new connections with one
    /// burst lookup ([`policy::PolicyTables::prefers_bursts`]); smaller ones, one
    /// lookup per connection. Default [`policy::BURST_MIN`].
    pub policy_bursts_from: usize,
}

impl Default for BalancerConfig {
    fn default() -> Self {
        BalancerConfig {
            worker: 0,
            workers: 1,
            flow_capacity: 1 << 20,
            timeouts: Timeouts::default(),
            snat_ports: (1024, 65535),
            seed: 0x5eed_5eed,
            splice: SpliceConfig::default(),
            policy_bursts_from: policy::BURST_MIN,
        }
    }
}

/// This worker's slice of the SNAT port range.
#[derive(Debug, Clone, Copy)]
struct SnatPorts {
    /// First port of the whole range.
    base: u16,
    /// Ports per worker.
    per_worker: u32,
    workers: u32,
    /// This worker's first and last port.
    lo: u16,
    hi: u16,
    next: u16,
}

impl SnatPorts {
    fn new(cfg: &BalancerConfig) -> SnatPorts {
        let (a, b) = (
            cfg.snat_ports.0.min(cfg.snat_ports.1),
            cfg.snat_ports.0.max(cfg.snat_ports.1),
        );
        let workers = cfg.workers.max(1) as u32;
        let per_worker = ((u32::from(b) - u32::from(a) + 1) / workers).max(1);
        let w = (cfg.worker as u32).min(workers - 1);
        let lo = (u32::from(a) + w * per_worker).min(65535) as u16;
        let hi = (u32::from(lo) + per_worker - 1).min(65535) as u16;
        let span = u64::from(hi - lo) + 1;
        SnatPorts {
            base: a,
            per_worker,
            workers,
            lo,
            hi,
            next: lo + (cfg.seed % span) as u16,
        }
    }

    /// The worker whose range holds `port`, if any.
    fn owner(&self, port: u16) -> Option<u32> {
        let off = u32::from(port.checked_sub(self.base)?);
        let w = off / self.per_worker;
        (w < self.workers).then_some(w)
    }

    fn take(&mut self) -> u16 {
        let p = self.next;
        self.next = if p >= self.hi { self.lo } else { p + 1 };
        p
    }
}

/// The transport header of a packet, as the balancer needs it.
#[derive(Debug, Clone, Copy)]
struct L4 {
    v6: bool,
    /// Offset of the TCP/UDP header in the frame.
    l4: usize,
    proto: u8,
    /// Source address: IPv4 in the last word (`u32::from(Ipv4Addr)`, the others zero),
    /// IPv6 as four big-endian words. Plain aligned words, not `IpAddr`: the burst's first
    /// pass hashes them as soon as `parse` has written them, and `IpAddr`'s one-byte
    /// alignment had the compiler copy them in odd-sized pieces that the following loads
    /// could not take from the store buffer.
    src: [u32; 4],
    /// Destination address, like `src`.
    dst: [u32; 4],
    /// Source port (low half) and destination port (high half): one word, written once
    /// and read whole by the hash (two `u16` fields were written apart and read as one
    /// word, which the store buffer could not forward).
    ports: u32,
    /// TCP flags (low byte), 0 for UDP.
    flags: u8,
    /// TCP: the sequence number (low half) and the acknowledgment number (high half), one
    /// word for the same store-forwarding reason as `ports`.
    seq_ack: u64,
    /// TCP payload length (for a RST and delayed binding).
    payload: u32,
}

/// An address as [`L4`] holds it.
#[inline(always)]
fn addr_words(a: IpAddr) -> [u32; 4] {
    match a {
        IpAddr::V4(a) => [0, 0, 0, u32::from(a)],
        IpAddr::V6(a) => {
            let o = a.octets();
            let w = |i: usize| u32::from_be_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]);
            [w(0), w(4), w(8), w(12)]
        }
    }
}

impl L4 {
    /// A placeholder, overwritten by [`parse`].
    const EMPTY: L4 = L4 {
        v6: false,
        l4: 0,
        proto: 0,
        src: [0; 4],
        dst: [0; 4],
        ports: 0,
        flags: 0,
        seq_ack: 0,
        payload: 0,
    };

    /// An address of this packet's family from its [`L4`] words.
    fn addr(&self, w: [u32; 4]) -> IpAddr {
        if self.v6 {
            let mut o = [0u8; 16];
            for (c, w) in o.chunks_exact_mut(4).zip(w) {
                c.copy_from_slice(&w.to_be_bytes());
            }
            IpAddr::V6(std::net::Ipv6Addr::from(o))
        } else {
            IpAddr::V4(Ipv4Addr::from(w[3]))
        }
    }

    /// The source port.
    #[inline(always)]
    fn sport(&self) -> u16 {
        self.ports as u16
    }

    /// The destination port.
    #[inline(always)]
    fn dport(&self) -> u16 {
        (self.ports >> 16) as u16
    }

    /// The TCP sequence number.
    fn seq(&self) -> u32 {
        self.seq_ack as u32
    }

    /// The TCP acknowledgment number.
    fn ack(&self) -> u32 {
        (self.seq_ack >> 32) as u32
    }

    /// The source address.
    fn src(&self) -> IpAddr {
        self.addr(self.src)
    }

    /// The destination address.
    fn dst(&self) -> IpAddr {
        self.addr(self.dst)
    }

    fn tuple(&self) -> Tuple {
        Tuple::new(
            SocketAddr::new(self.src(), self.sport()),
            SocketAddr::new(self.dst(), self.dport()),
            self.proto,
        )
    }

    /// The IPv4 key (no IPv4-mapped copies), for an IPv4 packet.
    #[inline]
    fn tuple4(&self) -> Option<Tuple4> {
        (!self.v6).then_some(Tuple4 {
            src: self.src[3],
            dst: self.dst[3],
            sport: self.sport(),
            dport: self.dport(),
            proto: self.proto,
        })
    }

    fn tcp_flags(&self) -> Option<TcpFlags> {
        (self.proto == ip_proto::TCP).then_some(TcpFlags(self.flags))
    }
}

/// How many packets ahead of the one being decided the burst's last pass moves a flow
/// entry from L2 (where the second pass prefetched it) into L1. Medians of alternating
/// `bench_balance --only-flows` runs' quiet rates, cycles a packet, without -> with (2):
/// 1k flows 148 -> 148, 100k 185 -> 179-182, 1M 257 -> 245; leads of 1 to 4 were alike.
const L1_LEAD: usize = 2;

/// A packet of the burst, parsed and hashed ahead of the decision pass (its key is
/// rebuilt from `l4` where needed: for IPv4 that is two words, cheaper than carrying it).
#[derive(Clone, Copy)]
struct Ahead {
    /// Valid when `is_l4`.
    l4: L4,
    is_l4: bool,
    hash: u64,
}

impl Ahead {
    const NONE: Ahead = Ahead {
        l4: L4::EMPTY,
        is_l4: false,
        hash: 0,
    };
}

/// What the parser made of a frame.
enum Parsed {
    /// TCP or UDP over IPv4/IPv6, written into the caller's [`L4`] (in place: returned,
    /// it went through the stack in pieces that the burst's next loads could not take
    /// from the store buffer).
    L4,
    /// Another IP protocol (or IPv6 with extension headers): policy check if routed.
    OtherIp { src: IpAddr, dst: IpAddr, proto: u8 },
    /// A fragment: sluice does not reassemble.
    Fragment,
    /// Not IP, not for our MAC, or malformed: the forwarder decides and names the drop.
    Other,
}

// `parse`, its IPv4 fast path and `l4_ports` are inlined into the burst's first pass:
// called, the result went through memory in pieces and the hash that reads it at once
// stalled on store forwarding (about 9 cycles a packet in `perf annotate`).
#[inline(always)]
fn parse(d: &[u8], port_mac: &[u8; 6], out: &mut L4) -> Parsed {
    let Some(h) = d.get(..ETH) else {
        return Parsed::Other;
    };
    if h[..6] != port_mac[..] {
        return Parsed::Other;
    }
    match u16::from_be_bytes([h[12], h[13]]) {
        0x0800 => parse_v4(d, out),
        0x86dd => parse_v6(d, out),
        _ => Parsed::Other,
    }
}

#[inline(always)]
fn parse_v4(d: &[u8], out: &mut L4) -> Parsed {
    // The common case in one pass over fixed offsets: no options, a sound length, a good
    // header checksum, TCP or UDP, not a fragment. Everything else takes the general path.
    if let Some(h) = d.get(ETH..ETH + ipv4::HEADER_LEN) {
        let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
        let proto = h[9];
        let frag = u16::from_be_bytes([h[6], h[7]]) & 0x3fff;
        if h[0] == 0x45
            && total >= ipv4::HEADER_LEN
            && ETH + total <= d.len()
            && frag == 0
            && (proto == ip_proto::TCP || proto == ip_proto::UDP)
        {
            // Byte-order independent ones' complement sum (RFC 1071 §2).
            let w = |i: usize| u64::from(u32::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]));
            if checksum::fold(w(0) + w(4) + w(8) + w(12) + w(16)) == 0xffff {
                let src = u32::from_be_bytes([h[12], h[13], h[14], h[15]]);
                let dst = u32::from_be_bytes([h[16], h[17], h[18], h[19]]);
                return l4_ports(
                    d,
                    ETH + ipv4::HEADER_LEN,
                    ETH + total,
                    false,
                    [0, 0, 0, src],
                    [0, 0, 0, dst],
                    proto,
                    out,
                );
            }
        }
    }
    parse_v4_general(d, out)
}

/// IPv4 with options, a bad checksum, fragments or another protocol.
#[cold]
#[inline(never)]
fn parse_v4_general(d: &[u8], out: &mut L4) -> Parsed {
    let Ok(ip) = ipv4::Packet::new_checked(&d[ETH..]) else {
        return Parsed::Other;
    };
    if ip.version() != 4 || !ip.verify_checksum() {
        return Parsed::Other;
    }
    let (src, dst, proto) = (
        IpAddr::V4(ip.src_addr()),
        IpAddr::V4(ip.dst_addr()),
        ip.protocol(),
    );
    if proto != ip_proto::TCP && proto != ip_proto::UDP {
        return Parsed::OtherIp { src, dst, proto };
    }
    if ip.more_frags() || ip.frag_offset() != 0 {
        return Parsed::Fragment;
    }
    let l4 = ETH + usize::from(ip.header_len());
    let end = ETH + usize::from(ip.total_len());
    l4_ports(
        d,
        l4,
        end,
        false,
        addr_words(src),
        addr_words(dst),
        proto,
        out,
    )
}

#[inline(never)]
fn parse_v6(d: &[u8], out: &mut L4) -> Parsed {
    let Ok(ip) = ipv6::Packet::new_checked(&d[ETH..]) else {
        return Parsed::Other;
    };
    if ip.version() != 6 {
        return Parsed::Other;
    }
    let (src, dst, proto) = (
        IpAddr::V6(ip.src_addr()),
        IpAddr::V6(ip.dst_addr()),
        ip.next_header(),
    );
    if dst.is_multicast() || proto == ip_proto::ICMPV6 {
        return Parsed::Other;
    }
    if proto != ip_proto::TCP && proto != ip_proto::UDP {
        return Parsed::OtherIp { src, dst, proto };
    }
    let l4 = ETH + ipv6::HEADER_LEN;
    let end = l4 + usize::from(ip.payload_len());
    l4_ports(
        d,
        l4,
        end,
        true,
        addr_words(src),
        addr_words(dst),
        proto,
        out,
    )
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn l4_ports(
    d: &[u8],
    l4: usize,
    end: usize,
    v6: bool,
    src: [u32; 4],
    dst: [u32; 4],
    proto: u8,
    out: &mut L4,
) -> Parsed {
    let Some(seg) = d.get(l4..end) else {
        return Parsed::Other;
    };
    let need = if proto == ip_proto::TCP {
        tcp::HEADER_LEN
    } else {
        8
    };
    if seg.len() < need {
        return Parsed::Other;
    }
    let sport = u16::from_be_bytes([seg[0], seg[1]]);
    let dport = u16::from_be_bytes([seg[2], seg[3]]);
    let (flags, seq, ack, payload) = if proto == ip_proto::TCP {
        let hl = usize::from(seg[12] >> 4) * 4;
        if hl < tcp::HEADER_LEN || hl > seg.len() {
            return Parsed::Other;
        }
        (
            seg[13],
            u32::from_be_bytes([seg[4], seg[5], seg[6], seg[7]]),
            u32::from_be_bytes([seg[8], seg[9], seg[10], seg[11]]),
            (seg.len() - hl) as u32,
        )
    } else {
        (0, 0, 0, 0)
    };
    *out = L4 {
        v6,
        l4,
        proto,
        src,
        dst,
        ports: u32::from(sport) | u32::from(dport) << 16,
        flags,
        seq_ack: u64::from(seq) | u64::from(ack) << 32,
        payload,
    };
    Parsed::L4
}

/// The load-balancing stage of one worker (see the [module docs](self)).
pub struct Balancer {
    state: State,
    snapshot: Reader<Snapshot>,
    /// The burst's parse results, reused from burst to burst: each burst overwrites the
    /// entries of its own packets and reads no others, so nothing is cleared.
    ahead: [Ahead; BURST],
    /// The burst's new connections' policy, decided ahead (big tables only).
    checks: PolicyAhead,
    /// [`BalancerConfig::policy_bursts_from`].
    policy_bursts_from: usize,
}

/// New connections' policy checks made ahead, a burst at a time: the connections that
/// [`State::miss`] would check for the burst's packets whose flow the index did not show
/// and that are not addressed to sluice itself (routed traffic, and listeners bound to
/// other addresses),
/// and the verdicts of one [`policy::PolicyTables::verdicts`] call for them, whose
/// stages overlap the big tables' cache misses. Only a hint, like the flow prefetches:
/// a packet's check takes a verdict from here only for exactly the connection it asks
/// about (a flow an earlier packet of the burst created is found, and nothing is asked),
/// and otherwise asks the tables itself. Reused from burst to burst: a burst reads only
/// the entries its mask says it wrote.
struct PolicyAhead {
    conns: [Conn; BURST],
    verdicts: [policy::Verdict; BURST],
    /// Per packet of the burst: its connection's index in `conns`.
    at: [u8; BURST],
    /// Per packet of the burst: where it goes ([`State::target`], which `miss` then
    /// need not work out again: listener lookup, Maglev pick).
    targets: [Target; BURST],
}

// The mask of packets with a decision is a `u32`.
const _: () = assert!(BURST <= 32);

impl PolicyAhead {
    const NONE: Conn = Conn {
        src: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        dst: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        proto: 0,
        dst_port: 0,
    };

    fn new() -> PolicyAhead {
        PolicyAhead {
            conns: [Self::NONE; BURST],
            verdicts: [policy::Verdict::Allow; BURST],
            at: [0; BURST],
            targets: [Target::Routed; BURST],
        }
    }

    /// Decides the connections the packets of `ahead` without a flow in the index
    /// (`entries`, from [`FlowTable::prefetch_entry`]) would be checked for; returns the
    /// mask of the packets (bit `i` for `ahead[i]`) that got a decision.
    fn decide(
        &mut self,
        st: &State,
        snap: &Snapshot,
        ahead: &[Ahead],
        entries: &[Option<FlowId>; BURST],
    ) -> u32 {
        let (mut mask, mut n) = (0u32, 0usize);
        let per_packet = self.at.iter_mut().zip(&mut self.targets);
        for (i, ((a, e), (at, target))) in ahead.iter().zip(entries).zip(per_packet).enumerate() {
            // Connections to sluice's own addresses (its virtual addresses) are left to
            // `miss`: their backends are few and cached, and with one end of the lookup
            // in cache the burst's stages cost more than they overlap
            // (`bench_balance_policy`'s `ipv4_vip`: 0.88-0.94 of one-by-one at 22 MiB of
            // tables, while routed connections, both ends spread over the cluster, gained
            // 1.06-1.09 in the same runs).
            if !a.is_l4 || e.is_some() || st.fwd.config().is_ours(a.l4.dst()) {
                continue;
            }
            *target = st.target(&a.l4, snap);
            let Some(conn) = State::checks(&a.l4, *target) else {
                continue;
            };
            if let Some(c) = self.conns.get_mut(n) {
                *c = conn;
                *at = n as u8;
                n += 1;
                mask |= 1 << i;
            }
        }
        if let (Some(conns), Some(out)) = (self.conns.get(..n), self.verdicts.get_mut(..n)) {
            snap.policy.verdicts(conns, out);
        }
        mask
    }

    /// What the pass found for packet `i` of the burst, if it checked it (per `mask`).
    #[inline]
    fn get(&self, mask: u32, i: usize) -> Option<Prechecked> {
        if i >= BURST || (mask >> i) & 1 == 0 {
            return None;
        }
        let k = usize::from(*self.at.get(i)?);
        Some(Prechecked {
            target: *self.targets.get(i)?,
            conn: *self.conns.get(k)?,
            verdict: *self.verdicts.get(k)?,
        })
    }
}

/// Whether policy allows `conn`: the verdict `ahead` holds when it was decided for
/// exactly this connection (counted as [`Event::PolicyBurstChecked`]), else one lookup.
#[inline]
fn policy_allows(
    snap: &Snapshot,
    ahead: Option<&Prechecked>,
    conn: Conn,
    ctx: &mut Ctx<'_>,
) -> bool {
    match ahead {
        Some(p) if p.conn == conn => {
            ctx.counters.event(Event::PolicyBurstChecked);
            p.verdict.is_allow()
        }
        _ => snap
            .policy
            .verdict(conn.src, conn.dst, conn.proto, conn.dst_port)
            .is_allow(),
    }
}

/// Where a TCP/UDP packet without a flow goes, before anything is changed (see
/// [`State::target`]).
#[derive(Debug, Clone, Copy)]
enum Target {
    /// Not to sluice and no listener bound to its address: routed, policy permitting.
    Routed,
    /// To one of sluice's addresses without a listener: a reply to a SNAT port.
    SnatReply,
    /// A listener of this kind, which routes by name (SNI or Host): delayed binding.
    ByName(ListenerKind),
    /// Dropped for this reason.
    Drop(DropReason),
    /// The route's pick rejects the connection (a reject share, or a backend of the
    /// other family).
    Reject,
    /// A new flow to this backend, policy permitting; `transparent`: the listener keeps
    /// the client's address (no SNAT).
    Backend {
        backend: SocketAddr,
        transparent: bool,
    },
}

/// What the burst's pass ahead found for one packet without a flow: where it goes, and
/// the connection whose policy it checked, with the verdict.
#[derive(Debug, Clone, Copy)]
struct Prechecked {
    target: Target,
    conn: Conn,
    verdict: policy::Verdict,
}

/// Everything but the snapshot reader (so a burst can hold the snapshot while the rest is
/// mutated).
struct State {
    fwd: Forwarder,
    flows: FlowTable,
    snat: SnatPorts,
    worker: u32,
    macs: Box<[[u8; 6]]>,
    splice: Splicer,
}

impl std::fmt::Debug for Balancer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Balancer")
            .field("worker", &self.state.worker)
            .field("flows", &self.state.flows)
            .finish_non_exhaustive()
    }
}

impl Balancer {
    /// A balancer over a forwarder (ports, FIB, neighbours), reading its tables through
    /// `snapshot`. Allocates the flow table here.
    pub fn new(fwd: Forwarder, snapshot: Reader<Snapshot>, cfg: BalancerConfig) -> Balancer {
        let macs = fwd.config().ports.iter().map(|p| p.mac.0).collect();
        Balancer {
            state: State {
                flows: FlowTable::new(cfg.flow_capacity, cfg.timeouts, 0, cfg.seed),
                snat: SnatPorts::new(&cfg),
                worker: cfg.worker as u32,
                fwd,
                macs,
                splice: Splicer::new(cfg.splice.clone()),
            },
            snapshot,
            ahead: [Ahead::NONE; BURST],
            checks: PolicyAhead::new(),
            policy_bursts_from: cfg.policy_bursts_from,
        }
    }

    /// The worker's flow table.
    pub fn flows(&self) -> &FlowTable {
        &self.state.flows
    }

    /// Delayed-binding connections open now (between the cookie's return and the splice
    /// or sluice's own answer).
    pub fn embryos(&self) -> usize {
        self.state.splice.embryos.len()
    }

    /// The forwarder behind the balancer.
    pub fn forwarder(&self) -> &Forwarder {
        &self.state.fwd
    }

    /// This worker's SNAT ports, inclusive.
    pub fn snat_ports(&self) -> (u16, u16) {
        (self.state.snat.lo, self.state.snat.hi)
    }
}

impl Stage for Balancer {
    fn process_burst(
        &mut self,
        in_port: usize,
        pkts: &mut [Pkt],
        verdicts: &mut [Verdict],
        ctx: &mut Ctx<'_>,
    ) {
        let (generation, snap) = self.snapshot.read();
        let generation = generation as u32;
        let now_s = (ctx.now_ms / 1000) as u32;
        let st = &mut self.state;
        let n = pkts.len().min(verdicts.len()).min(BURST);
        let Some(&mac) = st.macs.get(in_port) else {
            verdicts[..n].fill(Verdict::Drop(DropReason::BadPort));
            return;
        };
        // Three passes over the burst so that the flow table's cache misses overlap
        // (as VPP and DPDK's hash library do): parse and hash every packet and prefetch
        // its index slot; read the index slots (now cached) and prefetch the flow entries
        // they point to (into L2: `FlowTable::prefetch_entry` says why); then look up
        // (both now cached, each entry moved into L1 a little ahead: `L1_LEAD`) and
        // decide. The lookup itself waits for the last pass, so a flow an earlier packet
        // of the burst created, removed or re-keyed is seen as it is now.
        let ahead = &mut self.ahead[..n];
        // `parse` writes the packet's fields straight into its entry: a returned `L4`
        // (or one `*a = match ...` choosing between it and `NONE`) was copied through the
        // stack, and that copy waited on store forwarding.
        for (a, p) in ahead.iter_mut().zip(pkts[..n].iter()) {
            a.is_l4 = matches!(parse(p.data(), &mac, &mut a.l4), Parsed::L4);
            if a.is_l4 {
                let h = match a.l4.tuple4() {
                    Some(k) => st.flows.hash4(&k),
                    None => st.flows.hash(&a.l4.tuple()),
                };
                st.flows.prefetch(h);
                a.hash = h;
            }
        }
        // The entries the second pass found (a hint, like the prefetch itself).
        let mut entries = [None; BURST];
        for (a, e) in ahead
            .iter()
            .zip(entries.iter_mut())
            .filter(|(a, _)| a.is_l4)
        {
            *e = st.flows.prefetch_entry(a.hash, a.l4.v6);
        }
        // Big policy tables: the new connections' checks in one burst lookup.
        let checked = if snap.policy.prefers_bursts(self.policy_bursts_from) {
            self.checks.decide(st, snap, ahead, &entries)
        } else {
            0
        };
        let checks = &self.checks;
        for (i, ((a, p), v)) in ahead
            .iter()
            .zip(pkts.iter_mut())
            .zip(verdicts.iter_mut())
            .enumerate()
        {
            // The second pass left the entries in L2; move the one L1_LEAD packets on
            // into L1 while this one is decided.
            if let Some(&Some(id)) = entries.get(i + L1_LEAD) {
                st.flows.prefetch_flow(id);
            }
            *v = match a.is_l4.then_some(&a.l4) {
                Some(l4) => {
                    let found = match l4.tuple4() {
                        Some(k) => st.flows.lookup4_hashed(&k, a.hash, now_s),
                        None => st.flows.lookup_hashed(&l4.tuple(), a.hash, now_s),
                    };
                    match found {
                        Some(hit) => st.hit(in_port, p, l4, hit, snap, generation, now_s, ctx),
                        None => {
                            let ahead = checks.get(checked, i);
                            st.miss(
                                in_port,
                                p,
                                l4,
                                l4.tuple(),
                                snap,
                                generation,
                                now_s,
                                ctx,
                                ahead,
                            )
                        }
                    }
                }
                None => st.process(in_port, p, snap, generation, now_s, ctx),
            };
        }
    }

    fn maintain(&mut self, ctx: &mut Ctx<'_>) {
        // The quiescent point: an idle worker still moves to the newest snapshot, so the
        // control thread can free the older ones (one load and one store).
        let (generation, snap) = self.snapshot.read();
        // The forwarder's neighbour timers: parked packets, retries, failures.
        self.state.fwd.maintain(ctx);
        self.state.splice_timers(snap, generation as u32, ctx);
        let now_s = (ctx.now_ms / 1000) as u32;
        let embryos = &mut self.state.splice.embryos;
        let expired = self.state.flows.expire(now_s, |f| {
            if matches!(f.splice.phase, Splice::EMBRYO | Splice::REPLAYING) {
                embryos.close(f.splice.value);
            }
        });
        ctx.counters.events[Event::FlowExpired as usize] += expired as u64;
        ctx.counters.flows = self.state.flows.len() as u64;
    }
}

impl State {
    #[inline]
    fn process(
        &mut self,
        in_port: usize,
        pkt: &mut Pkt,
        snap: &Snapshot,
        generation: u32,
        now_s: u32,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        let Some(mac) = self.macs.get(in_port) else {
            return Verdict::Drop(DropReason::BadPort);
        };
        let mut l4 = L4::EMPTY;
        match parse(pkt.data(), mac, &mut l4) {
            Parsed::L4 => self.l4(in_port, pkt, &l4, snap, generation, now_s, ctx),
            Parsed::OtherIp { src, dst, proto } => {
                let ours = self.fwd.config().is_ours(dst);
                if !ours && !snap.policy.verdict(src, dst, proto, 0).is_allow() {
                    return Verdict::Drop(DropReason::PolicyDenied);
                }
                self.fwd.process(in_port, pkt, ctx)
            }
            Parsed::Fragment => Verdict::Drop(DropReason::Fragment),
            Parsed::Other => self.fwd.process(in_port, pkt, ctx),
        }
    }

    /// A packet of a tracked flow: lazy policy re-check after a swap, state and expiry,
    /// rewrite, route.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn hit(
        &mut self,
        in_port: usize,
        pkt: &mut Pkt,
        l4: &L4,
        (id, dir): (FlowId, Dir),
        snap: &Snapshot,
        generation: u32,
        now_s: u32,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        let f = self.flows.entry(id);
        if dir == Dir::Orig
            && matches!(f.state, TcpState::TimeWait | TcpState::Close)
            && l4.tcp_flags().is_some_and(TcpFlags::is_syn_only)
        {
            // A new connection reusing a closed one's 5-tuple (as Linux conntrack does on
            // a SYN in TIME_WAIT or CLOSE): forget the old flow, so the new connection
            // gets the current tables' backend and policy (a drained backend stays
            // drained).
            self.flows.remove(id);
            return self.l4(in_port, pkt, l4, snap, generation, now_s, ctx);
        }
        let mut sp = f.splice;
        if sp.phase == Splice::EMBRYO {
            return self.embryo_packet(
                in_port,
                pkt,
                l4,
                (id, dir),
                sp.value,
                snap,
                generation,
                ctx,
            );
        }
        if sp.phase == Splice::REPLAYING {
            match self.replaying(in_port, pkt, l4, (id, dir), sp.value, ctx) {
                Ok(s) => sp = s,
                Err(v) => return v,
            }
        }
        if self.flows.entry(id).generation != generation {
            // A newer snapshot: the verdict source -> what the flow really reaches.
            ctx.counters.event(Event::PolicyRechecked);
            let f = self.flows.get(id);
            let (orig, to) = (f.orig(), f.reply().source());
            if !snap
                .policy
                .verdict(orig.source().ip(), to.ip(), orig.proto, to.port())
                .is_allow()
            {
                self.flows.remove(id);
                return Verdict::Drop(DropReason::PolicyRevoked);
            }
            self.flows.get_mut(id).generation = generation;
        }
        if sp.phase & 0x0f == Splice::SPLICED {
            if dir == Dir::Reply && l4.flags & TcpFlags::SYN != 0 {
                return self.splice_reack(in_port, pkt, l4, id, ctx);
            }
            delayed::splice_rewrite(pkt, l4, dir, sp);
        }
        // The packet leaves as the other direction's tuple, reversed.
        let other_dir = match dir {
            Dir::Orig => Dir::Reply,
            Dir::Reply => Dir::Orig,
        };
        match (self.flows.entry(id).tuple4(other_dir), l4.tuple4()) {
            (Some(o), Some(k)) => {
                self.flows.on_packet(id, dir, l4.tcp_flags(), now_s);
                if o.dst != k.src || o.src != k.dst || o.dport != k.sport || o.sport != k.dport {
                    rewrite_v4(pkt, l4, o.dst, o.dport, o.src, o.sport);
                }
            }
            _ => {
                let other = self.flows.get(id).tuple(other_dir);
                self.flows.on_packet(id, dir, l4.tcp_flags(), now_s);
                if other != l4.tuple().reversed() {
                    rewrite_raw(pkt, l4, &other.dst, other.dport, &other.src, other.sport);
                }
            }
        }
        self.forward(in_port, pkt, l4, ctx)
    }

    /// Routes a packet that [`parse`] validated and the flow's action rewrote (checksums
    /// kept correct incrementally): IPv4 without options skips the forwarder's
    /// re-validation.
    #[inline]
    fn forward(&mut self, in_port: usize, pkt: &mut Pkt, l4: &L4, ctx: &mut Ctx<'_>) -> Verdict {
        if !l4.v6 && l4.l4 == ETH + ipv4::HEADER_LEN {
            self.fwd.forward_checked_v4(in_port, pkt, ctx)
        } else {
            self.fwd.process(in_port, pkt, ctx)
        }
    }

    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn l4(
        &mut self,
        in_port: usize,
        pkt: &mut Pkt,
        l4: &L4,
        snap: &Snapshot,
        generation: u32,
        now_s: u32,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        let t = l4.tuple();
        if let Some((id, dir)) = self.flows.lookup(&t, now_s) {
            return self.hit(in_port, pkt, l4, (id, dir), snap, generation, now_s, ctx);
        }
        self.miss(in_port, pkt, l4, t, snap, generation, now_s, ctx, None)
    }

    /// Where a TCP/UDP packet without a flow goes ([`State::miss`] acts on it). Reads
    /// only, so a burst can also ask it ahead ([`State::new_conn_check`]).
    #[inline]
    fn target(&self, l4: &L4, snap: &Snapshot) -> Target {
        let ours = self.fwd.config().is_ours(l4.dst());
        let listener = if ours {
            snap.listeners.lookup(l4.dst(), l4.dport(), l4.proto)
        } else {
            snap.listeners.lookup_bound(l4.dst(), l4.dport(), l4.proto)
        };
        let Some(listener) = listener else {
            return if ours {
                Target::SnatReply
            } else {
                Target::Routed
            };
        };
        if listener.kind.routes_by_name() {
            return Target::ByName(listener.kind);
        }
        if l4.tcp_flags().is_some_and(|f| !f.is_syn_only()) {
            return Target::Drop(DropReason::NoFlow);
        }
        let Some(route) = listener.route(b"").and_then(|i| snap.listeners.route(i)) else {
            return Target::Drop(DropReason::NoRouteMatch);
        };
        if !route.applies_to(l4.dst()) {
            return Target::Drop(DropReason::NoRouteMatch);
        }
        let client = SocketAddr::new(l4.src(), l4.sport());
        let vip = SocketAddr::new(l4.dst(), l4.dport());
        match route.pick(client, vip, l4.proto) {
            // Full NAT keeps the family (NAT64 would need header translation): a backend
            // of the other family is as unreachable as an invalid one.
            Pick::Backend(backend) if backend.is_ipv4() == l4.src().is_ipv4() => Target::Backend {
                backend,
                transparent: listener.transparent,
            },
            Pick::Backend(_) | Pick::Reject => Target::Reject,
        }
    }

    /// The connection whose policy [`State::miss`] checks for a packet without a flow
    /// that goes to `target`, if it checks one: routed traffic as addressed, a new flow
    /// to its backend.
    #[inline]
    fn checks(l4: &L4, target: Target) -> Option<Conn> {
        let (dst, dst_port) = match target {
            Target::Routed => (l4.dst(), l4.dport()),
            Target::Backend { backend, .. } => (backend.ip(), backend.port()),
            _ => return None,
        };
        Some(Conn {
            src: l4.src(),
            dst,
            proto: l4.proto,
            dst_port,
        })
    }

    /// A TCP/UDP packet that matches no flow: a listener's new flow, a reply for another
    /// worker, or routed traffic. `ahead`: what the burst's pass ahead found for the
    /// packet, if it checked it ([`PolicyAhead`]).
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn miss(
        &mut self,
        in_port: usize,
        pkt: &mut Pkt,
        l4: &L4,
        t: Tuple,
        snap: &Snapshot,
        generation: u32,
        now_s: u32,
        ctx: &mut Ctx<'_>,
        ahead: Option<Prechecked>,
    ) -> Verdict {
        let target = match ahead {
            Some(p) => p.target,
            None => self.target(l4, snap),
        };
        let (backend, transparent) = match target {
            Target::Backend {
                backend,
                transparent,
            } => (backend, transparent),
            Target::Routed => {
                return self.routed(in_port, pkt, l4, t, snap, generation, now_s, ctx, ahead)
            }
            // A reply to a SNAT port without a flow here: its owner may be another
            // worker (its port range says which).
            Target::SnatReply => {
                return match self.snat.owner(l4.dport()) {
                    Some(w) if w != self.worker => Verdict::Redirect(w),
                    Some(_) => Verdict::Drop(DropReason::NoFlow),
                    None => self.fwd.process(in_port, pkt, ctx),
                };
            }
            Target::ByName(kind) => {
                if kind == ListenerKind::TlsTerminate {
                    return Verdict::Drop(DropReason::TlsTerminateUnsupported);
                }
                if l4.proto != ip_proto::TCP {
                    return Verdict::Drop(DropReason::NoRouteMatch);
                }
                return if l4.tcp_flags().is_some_and(TcpFlags::is_syn_only) {
                    self.splice_syn(in_port, pkt, l4, ctx)
                } else {
                    self.splice_open(in_port, pkt, l4, snap, generation, now_s, ctx)
                };
            }
            Target::Drop(reason) => return Verdict::Drop(reason),
            Target::Reject => {
                ctx.counters.drop(DropReason::BackendRejected);
                let v = self.reject(in_port, pkt, l4);
                if matches!(v, Verdict::Tx(_)) {
                    ctx.counters.event(Event::RejectSent);
                }
                return v;
            }
        };
        let flags = l4.tcp_flags();
        let client = SocketAddr::new(l4.src(), l4.sport());
        let conn = Conn {
            src: l4.src(),
            dst: backend.ip(),
            proto: l4.proto,
            dst_port: backend.port(),
        };
        if !policy_allows(snap, ahead.as_ref(), conn, ctx) {
            return Verdict::Drop(DropReason::PolicyDenied);
        }
        let Some(nh) = self.fwd.config().fib.lookup(backend.ip()) else {
            return Verdict::Drop(DropReason::NoRoute);
        };
        let state = if flags.is_some() {
            TcpState::SynSent
        } else {
            TcpState::UdpUnreplied
        };
        let created = if transparent {
            let reply = Tuple::new(backend, client, l4.proto);
            self.flows
                .insert(t, reply, state, generation, now_s)
                .map_err(|e| match e {
                    crate::flow::InsertError::Full => DropReason::FlowTableFull,
                    crate::flow::InsertError::Exists => DropReason::NoFlow,
                })
        } else {
            let Some(snat_ip) = self.fwd.config().addr_on(nh.port, backend.ip()) else {
                return Verdict::Drop(DropReason::NoSnatAddress);
            };
            self.insert_snat(t, backend, snat_ip, state, generation, now_s)
        };
        match created {
            Ok(id) => {
                ctx.counters.event(Event::FlowCreated);
                let (src, dst) = self.flows.get(id).rewrite(Dir::Orig);
                rewrite(pkt, l4, src, dst);
                self.fwd.process(in_port, pkt, ctx)
            }
            Err(reason) => Verdict::Drop(reason),
        }
    }

    /// Creates a NAT flow with a free port of this worker's range.
    fn insert_snat(
        &mut self,
        orig: Tuple,
        backend: SocketAddr,
        snat_ip: IpAddr,
        state: TcpState,
        generation: u32,
        now_s: u32,
    ) -> Result<crate::flow::FlowId, DropReason> {
        for _ in 0..SNAT_ATTEMPTS {
            let port = self.snat.take();
            let reply = Tuple::new(backend, SocketAddr::new(snat_ip, port), orig.proto);
            match self.flows.insert(orig, reply, state, generation, now_s) {
                Ok(id) => return Ok(id),
                Err(crate::flow::InsertError::Full) => return Err(DropReason::FlowTableFull),
                Err(crate::flow::InsertError::Exists) => {
                    if self.flows.lookup(&orig, now_s).is_some() {
                        // The client tuple itself is tracked (cannot happen after a
                        // missed lookup, but never loop on it).
                        return Err(DropReason::NoFlow);
                    }
                }
            }
        }
        Err(DropReason::SnatPortsExhausted)
    }

    /// Traffic through sluice that matches no listener: policy, then a flow without
    /// rewrite so replies pass.
    #[allow(clippy::too_many_arguments)]
    fn routed(
        &mut self,
        in_port: usize,
        pkt: &mut Pkt,
        l4: &L4,
        t: Tuple,
        snap: &Snapshot,
        generation: u32,
        now_s: u32,
        ctx: &mut Ctx<'_>,
        ahead: Option<Prechecked>,
    ) -> Verdict {
        let conn = Conn {
            src: l4.src(),
            dst: l4.dst(),
            proto: l4.proto,
            dst_port: l4.dport(),
        };
        if !policy_allows(snap, ahead.as_ref(), conn, ctx) {
            return Verdict::Drop(DropReason::PolicyDenied);
        }
        let state = match l4.tcp_flags() {
            Some(f) if f.is_syn_only() => TcpState::SynSent,
            // Picked up mid-stream (sluice restarted, or the flow expired): conntrack's
            // loose mode.
            Some(_) => TcpState::Established,
            None => TcpState::UdpUnreplied,
        };
        match self.flows.insert(t, t.reversed(), state, generation, now_s) {
            Ok(_) => ctx.counters.event(Event::FlowCreated),
            Err(crate::flow::InsertError::Full) => return Verdict::Drop(DropReason::FlowTableFull),
            Err(crate::flow::InsertError::Exists) => {}
        }
        self.fwd.process(in_port, pkt, ctx)
    }

    /// Answers a connection that fell in a reject slot: TCP RST, or ICMP port
    /// unreachable (UDP), back out of `in_port`.
    fn reject(&self, in_port: usize, pkt: &mut Pkt, l4: &L4) -> Verdict {
        let Some(&port_mac) = self.macs.get(in_port) else {
            return Verdict::Drop(DropReason::BadPort);
        };
        let src_mac = {
            let f = ethernet::Frame::new_unchecked(pkt.data());
            f.src_addr()
        };
        if !src_mac.is_unicast() || l4.src().is_multicast() || l4.src().is_unspecified() {
            return Verdict::Drop(DropReason::BackendRejected);
        }
        if l4.proto == ip_proto::TCP {
            if l4.flags & TcpFlags::RST != 0 {
                return Verdict::Drop(DropReason::BackendRejected);
            }
            tcp_reset(pkt, l4, src_mac.0, port_mac, in_port)
        } else {
            port_unreachable(pkt, l4, src_mac.0, port_mac, in_port)
        }
    }
}

/// Rewrites source and destination (addresses and ports) of a TCP/UDP packet, updating
/// the IPv4 header checksum and the transport checksum incrementally (RFC 1624).
fn rewrite(pkt: &mut Pkt, l4: &L4, src: SocketAddr, dst: SocketAddr) {
    let t = Tuple::new(src, dst, l4.proto);
    rewrite_raw(pkt, l4, &t.src, src.port(), &t.dst, dst.port());
}

/// [`rewrite`] with addresses as the flow table stores them (16 bytes, IPv4 mapped).
#[inline]
fn rewrite_raw(pkt: &mut Pkt, l4: &L4, src: &[u8; 16], sport: u16, dst: &[u8; 16], dport: u16) {
    if !l4.v6 {
        let v4 = |a: &[u8; 16]| u32::from_be_bytes([a[12], a[13], a[14], a[15]]);
        return rewrite_v4(pkt, l4, v4(src), sport, v4(dst), dport);
    }
    let d = pkt.data_mut();
    // Ones' complement sums of the old and new words the transport checksum covers (IPv6
    // has no header checksum; IPv4 went to `rewrite_v4` above).
    let sum = |b: &[u8]| -> u64 {
        b.chunks_exact(2)
            .map(|w| u64::from(u16::from_be_bytes([w[0], w[1]])))
            .sum()
    };
    let ip = &mut d[ETH..ETH + ipv6::HEADER_LEN];
    let mut old_sum = sum(&ip[8..40]);
    ip[8..24].copy_from_slice(src);
    ip[24..40].copy_from_slice(dst);
    let mut new_sum = sum(&ip[8..40]);
    let seg = &mut d[l4.l4..];
    old_sum += sum(&seg[0..4]);
    seg[0..2].copy_from_slice(&sport.to_be_bytes());
    seg[2..4].copy_from_slice(&dport.to_be_bytes());
    new_sum += sum(&seg[0..4]);
    let at = if l4.proto == ip_proto::TCP { 16 } else { 6 };
    let old_check = u16::from_be_bytes([seg[at], seg[at + 1]]);
    let mut c = !checksum::fold(u64::from(!old_check) + fold_not(old_sum) + new_sum);
    if l4.proto == ip_proto::UDP && c == 0 {
        c = 0xffff; // RFC 768: a computed zero is sent as all ones.
    }
    seg[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

/// [`rewrite_raw`] for IPv4 on 32-bit words: the same RFC 1624 updates of the header
/// and transport checksums, without a pass over byte pairs.
///
/// Inlined (with the flow table's IPv4 lookup and `on_packet`) into the hit path: about
/// 4 cycles a packet less in `bench_balance` at 1k and 100k flows, once [`L4`] no longer
/// went through the store buffer in pieces (a plain `#[inline]` left all three calls).
#[inline(always)]
fn rewrite_v4(pkt: &mut Pkt, l4: &L4, src: u32, sport: u16, dst: u32, dport: u16) {
    // The ones' complement sum of a word's two halves.
    let halves = |w: u32| u64::from(w >> 16) + u64::from(w & 0xffff);
    let word = |b: &[u8], i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let d = pkt.data_mut();
    let Some(ip) = d.get_mut(ETH..ETH + ipv4::HEADER_LEN) else {
        return;
    };
    let old = halves(word(ip, 12)) + halves(word(ip, 16));
    let new = halves(src) + halves(dst);
    ip[12..16].copy_from_slice(&src.to_be_bytes());
    ip[16..20].copy_from_slice(&dst.to_be_bytes());
    let hc = u16::from_be_bytes([ip[10], ip[11]]);
    let hc = !checksum::fold(u64::from(!hc) + sum_not(old, 4) + new);
    ip[10..12].copy_from_slice(&hc.to_be_bytes());
    let at = if l4.proto == ip_proto::TCP { 16 } else { 6 };
    let Some(seg) = d.get_mut(l4.l4..l4.l4 + at + 2) else {
        return;
    };
    let ports = u32::from(sport) << 16 | u32::from(dport);
    let old_sum = old + halves(word(seg, 0));
    let new_sum = new + halves(ports);
    seg[0..4].copy_from_slice(&ports.to_be_bytes());
    let old_check = u16::from_be_bytes([seg[at], seg[at + 1]]);
    if l4.proto == ip_proto::UDP && old_check == 0 {
        return; // IPv4 UDP without a checksum stays without one.
    }
    let mut c = !checksum::fold(u64::from(!old_check) + sum_not(old_sum, 6) + new_sum);
    if l4.proto == ip_proto::UDP && c == 0 {
        c = 0xffff; // RFC 768: a computed zero is sent as all ones.
    }
    seg[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

/// `~m` of RFC 1624's `~HC + ~m + m'` for `m`, the unfolded sum of `words` 16-bit
/// words, without folding it first: the words' complements `0xffff - w` add up to
/// `words × 0xffff - m`, which is congruent to the folded complement modulo `0xffff`, so
/// the one fold at the end gives the same checksum (two folds less a packet).
#[inline(always)]
fn sum_not(sum: u64, words: u64) -> u64 {
    words * 0xffff - sum
}

/// The ones' complement of a wide sum, folded (`~m` in RFC 1624's `~HC + ~m + m'`), for
/// sums of any number of words ([`sum_not`] when the count is known).
#[inline(always)]
fn fold_not(sum: u64) -> u64 {
    u64::from(!checksum::fold(sum))
}

/// Writes Ethernet + IP headers of a reply from `from` to `to`, `l4_len` bytes of payload.
fn reply_headers(
    d: &mut [u8],
    to_mac: [u8; 6],
    from_mac: [u8; 6],
    from: IpAddr,
    to: IpAddr,
    proto: u8,
    l4_len: usize,
) {
    let v6 = from.is_ipv6();
    ethernet::Repr {
        src_addr: crate::wire::MacAddr(from_mac),
        dst_addr: crate::wire::MacAddr(to_mac),
        ethertype: if v6 { EtherType::Ipv6 } else { EtherType::Ipv4 },
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut d[..]));
    match (from, to) {
        (IpAddr::V4(s), IpAddr::V4(t)) => ipv4::Repr {
            src_addr: s,
            dst_addr: t,
            protocol: proto,
            payload_len: l4_len,
            ttl: REPLY_TTL,
        }
        .emit(&mut ipv4::Packet::new_unchecked(&mut d[ETH..])),
        (IpAddr::V6(s), IpAddr::V6(t)) => ipv6::Repr {
            src_addr: s,
            dst_addr: t,
            next_header: proto,
            payload_len: l4_len,
            hop_limit: REPLY_TTL,
        }
        .emit(&mut ipv6::Packet::new_unchecked(&mut d[ETH..])),
        _ => {}
    }
}

/// Turns a TCP segment into the RST that refuses it (RFC 9293 §3.10.7.1).
fn tcp_reset(pkt: &mut Pkt, l4: &L4, to_mac: [u8; 6], from_mac: [u8; 6], out: usize) -> Verdict {
    let ip_len = if l4.v6 {
        ipv6::HEADER_LEN
    } else {
        ipv4::HEADER_LEN
    };
    if !pkt.set_len(ETH + ip_len + tcp::HEADER_LEN) {
        return Verdict::Drop(DropReason::NoRoom);
    }
    let d = pkt.data_mut();
    reply_headers(
        d,
        to_mac,
        from_mac,
        l4.dst(),
        l4.src(),
        ip_proto::TCP,
        tcp::HEADER_LEN,
    );
    let mut seg = tcp::Packet::new_unchecked(&mut d[ETH + ip_len..]);
    seg.set_src_port(l4.dport());
    seg.set_dst_port(l4.sport());
    if l4.flags & TcpFlags::ACK != 0 {
        seg.set_seq_number(l4.ack());
        seg.set_ack_number(0);
        seg.set_header_len_and_flags(tcp::HEADER_LEN as u8, tcp::flags::RST);
    } else {
        let syn = u32::from(l4.flags & TcpFlags::SYN != 0);
        let fin = u32::from(l4.flags & TcpFlags::FIN != 0);
        seg.set_seq_number(0);
        seg.set_ack_number(l4.seq().wrapping_add(l4.payload + syn + fin));
        seg.set_header_len_and_flags(tcp::HEADER_LEN as u8, tcp::flags::RST | tcp::flags::ACK);
    }
    seg.set_window_len(0);
    seg.set_urgent_at(0);
    seg.fill_checksum(l4.dst(), l4.src());
    Verdict::tx(out)
}

/// Turns a datagram into the ICMP / ICMPv6 port unreachable that refuses it, quoting as
/// much of it as the RFCs allow.
fn port_unreachable(
    pkt: &mut Pkt,
    l4: &L4,
    to_mac: [u8; 6],
    from_mac: [u8; 6],
    out: usize,
) -> Verdict {
    let total = pkt.data().len().saturating_sub(ETH);
    let (ip_len, icmp_len, quote) = if l4.v6 {
        (
            ipv6::HEADER_LEN,
            icmpv6::HEADER_LEN,
            total.min(ICMPV6_QUOTE_MAX),
        )
    } else {
        let hl = l4.l4 - ETH;
        (ipv4::HEADER_LEN, icmpv4::HEADER_LEN, total.min(hl + 8))
    };
    let shift = ip_len + icmp_len;
    if !pkt.set_len(ETH + shift + quote) {
        return Verdict::Drop(DropReason::NoRoom);
    }
    let d = pkt.data_mut();
    d.copy_within(ETH..ETH + quote, ETH + shift);
    let proto = if l4.v6 {
        ip_proto::ICMPV6
    } else {
        ip_proto::ICMP
    };
    reply_headers(
        d,
        to_mac,
        from_mac,
        l4.dst(),
        l4.src(),
        proto,
        icmp_len + quote,
    );
    let icmp = &mut d[ETH + ip_len..];
    match (l4.dst(), l4.src()) {
        (IpAddr::V4(_), IpAddr::V4(_)) => icmpv4::Repr::DstUnreachable {
            code: 3,
            data_len: quote,
        }
        .emit(&mut icmpv4::Packet::new_unchecked(icmp)),
        (IpAddr::V6(from), IpAddr::V6(to)) => icmpv6::Repr::DstUnreachable {
            code: 4,
            data_len: quote,
        }
        .emit(&mut icmpv6::Packet::new_unchecked(icmp), from, to),
        _ => return Verdict::Drop(DropReason::BackendRejected),
    }
    Verdict::tx(out)
}
