//! The parse step: one pass over a received frame's headers fills its [`Meta`], which the
//! balancer and the forwarder both read instead of the bytes.
//!
//! Contract: [`parse`] and [`parse_ip`] read only within the frame, never panic, never
//! allocate, and say which fields they filled ([`Meta::found`], [`Meta::plain_v4`]). The
//! common case (Ethernet to the port's MAC, IPv4 without options, a total length within
//! the frame, a correct header checksum, then TCP or UDP) takes one pass over fixed
//! offsets; IPv4 with options, IPv6 and everything else go through the
//! [`wire`](crate::wire) views, and what no stage here handles (ARP, ICMP, neighbour
//! discovery, malformed frames) is left to the forwarder's general path, which names the
//! drop.
//!
//! Why: a packet the balancer does not take falls to the forwarder, and a packet the
//! balancer rewrites is routed by the forwarder; parsed once, neither parses it again.
//! Measured with `bench_forward` and `bench_balance` (`perf/NOTES.md`).

use crate::flow::{TcpFlags, Tuple, Tuple4};
use crate::wire::{checksum, ethernet, ip_proto, ipv4, ipv6, tcp};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Length of the Ethernet header (no VLAN tag): where the IP header starts.
pub const ETH: usize = ethernet::HEADER_LEN;

/// What [`parse`] found in a frame, and so which fields of its [`Meta`] hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// TCP or UDP over IPv4 or IPv6 (IPv6: right after the fixed header): every field.
    Transport,
    /// Another IP protocol (an IPv4 fragment of one too), or IPv6 with extension headers:
    /// `v6`, `proto` and the addresses.
    OtherIp,
    /// A TCP or UDP IPv4 fragment (sluice does not reassemble).
    Fragment,
    /// Anything else: not IP (ARP), not to the port's MAC, ICMPv6 or IPv6 multicast
    /// (neighbour discovery), or malformed. The forwarder's general path decides it.
    Other,
}

/// A packet's headers as the stages read them.
///
/// The layout is plain words, written whole by [`parse`] and read at once by the burst's
/// first pass (the flow hash): addresses as `[u32; 4]`, not `IpAddr`, whose one-byte
/// alignment had the compiler copy them in odd-sized pieces that the following loads
/// could not take from the store buffer; both ports in one word and both TCP sequence
/// numbers in one, for the same reason (two halves written apart and read as one word are
/// not forwarded). 64 bytes.
#[derive(Debug, Clone, Copy)]
pub struct Meta {
    /// What the parse found (which fields below hold).
    pub found: Found,
    /// Ethernet to the port's MAC, IPv4 without options, total length within the frame,
    /// header checksum correct: `ttl`, `total`, `proto` and the addresses hold (whatever
    /// `found` says), and the forwarder's fast path routes it from them.
    pub plain_v4: bool,
    /// IPv4 TTL (with `plain_v4`).
    pub ttl: u8,
    /// IPv4 total length (with `plain_v4`): the datagram without link padding.
    pub total: u16,
    /// IPv6 (else IPv4).
    pub v6: bool,
    /// The IP protocol (next header).
    pub proto: u8,
    /// TCP flags (low byte), 0 for UDP.
    pub flags: u8,
    /// Offset of the TCP/UDP header in the frame.
    pub l4: usize,
    /// Source address: IPv4 in the last word (`u32::from(Ipv4Addr)`, the others zero),
    /// IPv6 as four big-endian words.
    pub src: [u32; 4],
    /// Destination address, like `src`.
    pub dst: [u32; 4],
    /// Source port (low half) and destination port (high half).
    pub ports: u32,
    /// TCP: the sequence number (low half) and the acknowledgment number (high half).
    pub seq_ack: u64,
    /// TCP payload length (for a RST and delayed binding).
    pub payload: u32,
}

const _: () = assert!(std::mem::size_of::<Meta>() == 64);

/// An address as [`Meta`] holds it.
#[inline(always)]
pub fn addr_words(a: IpAddr) -> [u32; 4] {
    match a {
        IpAddr::V4(a) => [0, 0, 0, u32::from(a)],
        IpAddr::V6(a) => {
            let o = a.octets();
            let w = |i: usize| u32::from_be_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]);
            [w(0), w(4), w(8), w(12)]
        }
    }
}

/// A MAC address (six bytes) as a word: one compare instead of six.
#[inline(always)]
pub fn mac_word(b: &[u8; 6]) -> u64 {
    u64::from(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        | u64::from(u16::from_ne_bytes([b[4], b[5]])) << 32
}

impl Meta {
    /// Nothing found; a placeholder that [`parse`] overwrites.
    pub const EMPTY: Meta = Meta {
        found: Found::Other,
        plain_v4: false,
        ttl: 0,
        total: 0,
        v6: false,
        proto: 0,
        flags: 0,
        l4: 0,
        src: [0; 4],
        dst: [0; 4],
        ports: 0,
        seq_ack: 0,
        payload: 0,
    };

    /// An address of this packet's family from its words.
    pub fn addr(&self, w: [u32; 4]) -> IpAddr {
        if self.v6 {
            let mut o = [0u8; 16];
            for (c, w) in o.chunks_exact_mut(4).zip(w) {
                c.copy_from_slice(&w.to_be_bytes());
            }
            IpAddr::V6(Ipv6Addr::from(o))
        } else {
            IpAddr::V4(Ipv4Addr::from(w[3]))
        }
    }

    /// The source port.
    #[inline(always)]
    pub fn sport(&self) -> u16 {
        self.ports as u16
    }

    /// The destination port.
    #[inline(always)]
    pub fn dport(&self) -> u16 {
        (self.ports >> 16) as u16
    }

    /// Both ports as [`Meta::ports`] holds them.
    #[inline(always)]
    pub fn ports_word(sport: u16, dport: u16) -> u32 {
        u32::from(sport) | u32::from(dport) << 16
    }

    /// The TCP sequence number.
    pub fn seq(&self) -> u32 {
        self.seq_ack as u32
    }

    /// The TCP acknowledgment number.
    pub fn ack(&self) -> u32 {
        (self.seq_ack >> 32) as u32
    }

    /// The source address.
    pub fn src(&self) -> IpAddr {
        self.addr(self.src)
    }

    /// The destination address.
    pub fn dst(&self) -> IpAddr {
        self.addr(self.dst)
    }

    /// The 5-tuple, as the flow table keys it.
    pub fn tuple(&self) -> Tuple {
        Tuple::new(
            SocketAddr::new(self.src(), self.sport()),
            SocketAddr::new(self.dst(), self.dport()),
            self.proto,
        )
    }

    /// The IPv4 key (no IPv4-mapped copies), for an IPv4 packet.
    #[inline]
    pub fn tuple4(&self) -> Option<Tuple4> {
        (!self.v6).then_some(Tuple4 {
            src: self.src[3],
            dst: self.dst[3],
            sport: self.sport(),
            dport: self.dport(),
            proto: self.proto,
        })
    }

    /// The TCP flags, for a TCP packet.
    pub fn tcp_flags(&self) -> Option<TcpFlags> {
        (self.proto == ip_proto::TCP).then_some(TcpFlags(self.flags))
    }
}

/// The IP layer of a frame, before the transport header is read.
#[derive(Clone, Copy)]
struct Ip {
    plain_v4: bool,
    ttl: u8,
    total: u16,
    v6: bool,
    proto: u8,
    src: [u32; 4],
    dst: [u32; 4],
}

impl Ip {
    /// The metadata of a packet whose transport header is not read.
    #[inline(always)]
    fn without_ports(self, found: Found) -> Meta {
        Meta {
            found,
            plain_v4: self.plain_v4,
            ttl: self.ttl,
            total: self.total,
            v6: self.v6,
            proto: self.proto,
            src: self.src,
            dst: self.dst,
            ..Meta::EMPTY
        }
    }
}

/// The Ethernet and IPv4 fixed headers in one pass over fixed offsets: to `port_mac`
/// (as [`mac_word`]), IPv4 (0x0800) version 4 without options (0x45), a total length
/// within the frame, a correct header checksum. Its TTL and fragment word are read but not
/// judged.
#[inline(always)]
fn plain_v4(d: &[u8], port_mac: u64) -> Option<(Ip, u16)> {
    let h: &[u8; 34] = d.get(..34)?.try_into().ok()?;
    // IPv4 (0x0800), version 4 without options (0x45): three bytes, one compare.
    let kind = u32::from_be_bytes([h[12], h[13], h[14], h[15]]) & 0xffff_ff00;
    if kind != 0x0800_4500 || mac_word(&[h[0], h[1], h[2], h[3], h[4], h[5]]) != port_mac {
        return None;
    }
    let total = u16::from_be_bytes([h[16], h[17]]);
    if usize::from(total) < ipv4::HEADER_LEN || ETH + usize::from(total) > d.len() {
        return None;
    }
    // The ones' complement sum is byte-order independent (RFC 1071 §2): add the header as
    // five native 32-bit words; all-ones reads the same either way.
    let w = |i: usize| u64::from(u32::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]));
    if !checksum::sums_to_all_ones(w(14) + w(18) + w(22) + w(26) + w(30)) {
        return None;
    }
    let ip = Ip {
        plain_v4: true,
        ttl: h[22],
        total,
        v6: false,
        proto: h[23],
        src: [0, 0, 0, u32::from_be_bytes([h[26], h[27], h[28], h[29]])],
        dst: [0, 0, 0, u32::from_be_bytes([h[30], h[31], h[32], h[33]])],
    };
    Some((ip, u16::from_be_bytes([h[20], h[21]]) & 0x3fff))
}

/// The IP layer only, as the forwarder's own stage needs it: fills [`Meta::plain_v4`]
/// and, when it is set, `ttl`, `total`, `v6`, `proto`, the addresses and `l4`; nothing
/// else (`found` is left as it was). Returns `plain_v4`.
#[inline(always)]
pub fn parse_ip(d: &[u8], port_mac: u64, out: &mut Meta) -> bool {
    let Some((ip, _)) = plain_v4(d, port_mac) else {
        out.plain_v4 = false;
        return false;
    };
    out.plain_v4 = true;
    out.ttl = ip.ttl;
    out.total = ip.total;
    out.v6 = false;
    out.proto = ip.proto;
    out.src = ip.src;
    out.dst = ip.dst;
    out.l4 = ETH + ipv4::HEADER_LEN;
    true
}

/// Fills `out` from the frame `d` received on a port whose MAC is `port_mac` (as
/// [`mac_word`]); returns [`Meta::found`].
///
/// Written into the caller's `out` whole, in place, and inlined into the burst's first
/// pass: returned, or called, the result went through memory in pieces and the flow hash
/// that reads it at once stalled on store forwarding.
#[inline(always)]
pub fn parse(d: &[u8], port_mac: u64, out: &mut Meta) -> Found {
    match plain_v4(d, port_mac) {
        Some((ip, frag)) => {
            if ip.proto != ip_proto::TCP && ip.proto != ip_proto::UDP {
                *out = ip.without_ports(Found::OtherIp);
                Found::OtherIp
            } else if frag != 0 {
                *out = ip.without_ports(Found::Fragment);
                Found::Fragment
            } else {
                let end = ETH + usize::from(ip.total);
                transport(d, ETH + ipv4::HEADER_LEN, end, ip, out)
            }
        }
        None => parse_general(d, port_mac, out),
    }
}

/// Every frame the fixed IPv4 pass declines: another EtherType, IPv4 with options or a
/// bad checksum or length, IPv6.
#[inline(never)]
fn parse_general(d: &[u8], port_mac: u64, out: &mut Meta) -> Found {
    *out = Meta::EMPTY;
    let Some(h) = d.get(..ETH) else {
        return Found::Other;
    };
    if mac_word(&[h[0], h[1], h[2], h[3], h[4], h[5]]) != port_mac {
        return Found::Other;
    }
    match u16::from_be_bytes([h[12], h[13]]) {
        0x0800 => parse_v4_general(d, out),
        0x86dd => parse_v6(d, out),
        _ => Found::Other,
    }
}

/// IPv4 with options, a bad checksum or length (through the view).
#[cold]
#[inline(never)]
fn parse_v4_general(d: &[u8], out: &mut Meta) -> Found {
    let Ok(ip) = ipv4::Packet::new_checked(&d[ETH..]) else {
        return Found::Other;
    };
    if ip.version() != 4 || !ip.verify_checksum() {
        return Found::Other;
    }
    let v4 = Ip {
        plain_v4: false,
        ttl: 0,
        total: 0,
        v6: false,
        proto: ip.protocol(),
        src: addr_words(IpAddr::V4(ip.src_addr())),
        dst: addr_words(IpAddr::V4(ip.dst_addr())),
    };
    if v4.proto != ip_proto::TCP && v4.proto != ip_proto::UDP {
        *out = v4.without_ports(Found::OtherIp);
        return Found::OtherIp;
    }
    if ip.more_frags() || ip.frag_offset() != 0 {
        *out = v4.without_ports(Found::Fragment);
        return Found::Fragment;
    }
    let l4 = ETH + usize::from(ip.header_len());
    let end = ETH + usize::from(ip.total_len());
    transport(d, l4, end, v4, out)
}

/// IPv6: TCP or UDP right after the fixed header (through the view).
#[inline(always)]
fn parse_v6(d: &[u8], out: &mut Meta) -> Found {
    let Ok(ip) = ipv6::Packet::new_checked(&d[ETH..]) else {
        return Found::Other;
    };
    if ip.version() != 6 {
        return Found::Other;
    }
    let (dst, proto) = (ip.dst_addr(), ip.next_header());
    if dst.is_multicast() || proto == ip_proto::ICMPV6 {
        return Found::Other;
    }
    let v6 = Ip {
        plain_v4: false,
        ttl: 0,
        total: 0,
        v6: true,
        proto,
        src: addr_words(IpAddr::V6(ip.src_addr())),
        dst: addr_words(IpAddr::V6(dst)),
    };
    if proto != ip_proto::TCP && proto != ip_proto::UDP {
        *out = v6.without_ports(Found::OtherIp);
        return Found::OtherIp;
    }
    let l4 = ETH + ipv6::HEADER_LEN;
    let end = l4 + usize::from(ip.payload_len());
    transport(d, l4, end, v6, out)
}

/// The TCP or UDP header at `l4` of a datagram ending at `end`: its ports (and TCP's
/// flags, sequence numbers and payload length), or [`Found::Other`] when it does not fit.
#[inline(always)]
fn transport(d: &[u8], l4: usize, end: usize, ip: Ip, out: &mut Meta) -> Found {
    let Some(seg) = d.get(l4..end) else {
        *out = ip.without_ports(Found::Other);
        return Found::Other;
    };
    let need = if ip.proto == ip_proto::TCP {
        tcp::HEADER_LEN
    } else {
        8
    };
    if seg.len() < need {
        *out = ip.without_ports(Found::Other);
        return Found::Other;
    }
    let sport = u16::from_be_bytes([seg[0], seg[1]]);
    let dport = u16::from_be_bytes([seg[2], seg[3]]);
    let (flags, seq, ack, payload) = if ip.proto == ip_proto::TCP {
        let hl = usize::from(seg[12] >> 4) * 4;
        if hl < tcp::HEADER_LEN || hl > seg.len() {
            *out = ip.without_ports(Found::Other);
            return Found::Other;
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
    *out = Meta {
        found: Found::Transport,
        plain_v4: ip.plain_v4,
        ttl: ip.ttl,
        total: ip.total,
        v6: ip.v6,
        proto: ip.proto,
        flags,
        l4,
        src: ip.src,
        dst: ip.dst,
        ports: Meta::ports_word(sport, dport),
        seq_ack: u64::from(seq) | u64::from(ack) << 32,
        payload,
    };
    Found::Transport
}

#[cfg(test)]
mod tests;
