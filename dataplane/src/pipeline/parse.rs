//! The parse step of the L4 path: a frame's Ethernet, IP and TCP/UDP headers into an [`L4`].

use crate::flow::{TcpFlags, Tuple, Tuple4};
use crate::wire::{checksum, ethernet, ip_proto, ipv4, ipv6, tcp};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Length of the Ethernet header (no VLAN tag): where the IP header starts.
pub(crate) const ETH: usize = ethernet::HEADER_LEN;

/// The transport header of a packet, as the balancer needs it.
#[derive(Debug, Clone, Copy)]
pub struct L4 {
    /// IPv6 (else IPv4).
    pub v6: bool,
    /// Offset of the TCP/UDP header in the frame.
    pub l4: usize,
    /// The IP protocol (next header): TCP or UDP.
    pub proto: u8,
    /// Source address: IPv4 in the last word (`u32::from(Ipv4Addr)`, the others zero),
    /// IPv6 as four big-endian words. Plain aligned words, not `IpAddr`: the burst's first
    /// pass hashes them as soon as `parse` has written them, and `IpAddr`'s one-byte
    /// alignment had the compiler copy them in odd-sized pieces that the following loads
    /// could not take from the store buffer.
    pub src: [u32; 4],
    /// Destination address, like `src`.
    pub dst: [u32; 4],
    /// Source port (low half) and destination port (high half): one word, written once
    /// and read whole by the hash (two `u16` fields were written apart and read as one
    /// word, which the store buffer could not forward).
    pub ports: u32,
    /// TCP flags (low byte), 0 for UDP.
    pub flags: u8,
    /// TCP: the sequence number (low half) and the acknowledgment number (high half), one
    /// word for the same store-forwarding reason as `ports`.
    pub seq_ack: u64,
    /// TCP payload length (for a RST and delayed binding).
    pub payload: u32,
}

/// An address as [`L4`] holds it.
#[inline(always)]
pub(crate) fn addr_words(a: IpAddr) -> [u32; 4] {
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
    pub(crate) const EMPTY: L4 = L4 {
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
    pub(crate) fn addr(&self, w: [u32; 4]) -> IpAddr {
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
    pub(crate) fn sport(&self) -> u16 {
        self.ports as u16
    }

    /// The destination port.
    #[inline(always)]
    pub(crate) fn dport(&self) -> u16 {
        (self.ports >> 16) as u16
    }

    /// The TCP sequence number.
    pub(crate) fn seq(&self) -> u32 {
        self.seq_ack as u32
    }

    /// The TCP acknowledgment number.
    pub(crate) fn ack(&self) -> u32 {
        (self.seq_ack >> 32) as u32
    }

    /// The source address.
    pub(crate) fn src(&self) -> IpAddr {
        self.addr(self.src)
    }

    /// The destination address.
    pub(crate) fn dst(&self) -> IpAddr {
        self.addr(self.dst)
    }

    pub(crate) fn tuple(&self) -> Tuple {
        Tuple::new(
            SocketAddr::new(self.src(), self.sport()),
            SocketAddr::new(self.dst(), self.dport()),
            self.proto,
        )
    }

    /// The IPv4 key (no IPv4-mapped copies), for an IPv4 packet.
    #[inline]
    pub(crate) fn tuple4(&self) -> Option<Tuple4> {
        (!self.v6).then_some(Tuple4 {
            src: self.src[3],
            dst: self.dst[3],
            sport: self.sport(),
            dport: self.dport(),
            proto: self.proto,
        })
    }

    pub(crate) fn tcp_flags(&self) -> Option<TcpFlags> {
        (self.proto == ip_proto::TCP).then_some(TcpFlags(self.flags))
    }
}

/// What the parser made of a frame.
pub(crate) enum Parsed {
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
pub(crate) fn parse(d: &[u8], port_mac: &[u8; 6], out: &mut L4) -> Parsed {
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
