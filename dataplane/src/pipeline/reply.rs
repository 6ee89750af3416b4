//! Packets sluice writes in reply, in the received buffer: Ethernet + IP headers, the RST
//! and the ICMP port unreachable that refuse a connection, and whole TCP segments.

use super::parse::{Meta, ETH};
use super::stage::Verdict;
use crate::flow::TcpFlags;
use crate::port::Pkt;
use crate::stats::DropReason;
use crate::wire::{ethernet, icmpv4, icmpv6, ip_proto, ipv4, ipv6, tcp, EtherType};
use std::net::{IpAddr, SocketAddr};

/// The TTL / hop limit of the packets sluice writes.
pub const REPLY_TTL: u8 = 64;
/// The most of an offending packet an ICMPv6 error quotes (RFC 4443 §2.4: the error
/// must fit the minimum MTU of 1280).
pub const ICMPV6_QUOTE_MAX: usize = 1280 - ipv6::HEADER_LEN - icmpv6::HEADER_LEN;

/// Writes Ethernet + IP headers of a reply from `from` to `to`, `l4_len` bytes of payload.
pub fn reply_headers(
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
pub fn tcp_reset(
    pkt: &mut Pkt,
    meta: &Meta,
    to_mac: [u8; 6],
    from_mac: [u8; 6],
    out: usize,
) -> Verdict {
    let ip_len = if meta.v6 {
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
        meta.dst(),
        meta.src(),
        ip_proto::TCP,
        tcp::HEADER_LEN,
    );
    let mut seg = tcp::Packet::new_unchecked(&mut d[ETH + ip_len..]);
    seg.set_src_port(meta.dport());
    seg.set_dst_port(meta.sport());
    if meta.flags & TcpFlags::ACK != 0 {
        seg.set_seq_number(meta.ack());
        seg.set_ack_number(0);
        seg.set_header_len_and_flags(tcp::HEADER_LEN as u8, tcp::flags::RST);
    } else {
        let syn = u32::from(meta.flags & TcpFlags::SYN != 0);
        let fin = u32::from(meta.flags & TcpFlags::FIN != 0);
        seg.set_seq_number(0);
        seg.set_ack_number(meta.seq().wrapping_add(meta.payload + syn + fin));
        seg.set_header_len_and_flags(tcp::HEADER_LEN as u8, tcp::flags::RST | tcp::flags::ACK);
    }
    seg.set_window_len(0);
    seg.set_urgent_at(0);
    seg.fill_checksum(meta.dst(), meta.src());
    Verdict::tx(out)
}

/// Turns a datagram into the ICMP / ICMPv6 port unreachable that refuses it, quoting as
/// much of it as the RFCs allow.
pub fn port_unreachable(
    pkt: &mut Pkt,
    meta: &Meta,
    to_mac: [u8; 6],
    from_mac: [u8; 6],
    out: usize,
) -> Verdict {
    unreachable(pkt, meta, to_mac, from_mac, out, (3, 4))
}

/// Turns a packet into the ICMP / ICMPv6 "communication administratively prohibited"
/// (RFC 1812 §5.2.7.1 code 13; RFC 4443 §3.1 code 1) that tells its sender policy
/// closed its flow.
pub fn admin_prohibited(
    pkt: &mut Pkt,
    meta: &Meta,
    to_mac: [u8; 6],
    from_mac: [u8; 6],
    out: usize,
) -> Verdict {
    unreachable(pkt, meta, to_mac, from_mac, out, (13, 1))
}

/// A destination unreachable of `codes` (ICMP, ICMPv6) quoting `pkt`.
fn unreachable(
    pkt: &mut Pkt,
    meta: &Meta,
    to_mac: [u8; 6],
    from_mac: [u8; 6],
    out: usize,
    codes: (u8, u8),
) -> Verdict {
    let total = pkt.data().len().saturating_sub(ETH);
    let (ip_len, icmp_len, quote) = if meta.v6 {
        (
            ipv6::HEADER_LEN,
            icmpv6::HEADER_LEN,
            total.min(ICMPV6_QUOTE_MAX),
        )
    } else {
        let hl = meta.l4 - ETH;
        (ipv4::HEADER_LEN, icmpv4::HEADER_LEN, total.min(hl + 8))
    };
    let shift = ip_len + icmp_len;
    if !pkt.set_len(ETH + shift + quote) {
        return Verdict::Drop(DropReason::NoRoom);
    }
    let d = pkt.data_mut();
    d.copy_within(ETH..ETH + quote, ETH + shift);
    let proto = if meta.v6 {
        ip_proto::ICMPV6
    } else {
        ip_proto::ICMP
    };
    reply_headers(
        d,
        to_mac,
        from_mac,
        meta.dst(),
        meta.src(),
        proto,
        icmp_len + quote,
    );
    let icmp = &mut d[ETH + ip_len..];
    match (meta.dst(), meta.src()) {
        (IpAddr::V4(_), IpAddr::V4(_)) => icmpv4::Repr::DstUnreachable {
            code: codes.0,
            data_len: quote,
        }
        .emit(&mut icmpv4::Packet::new_unchecked(icmp)),
        (IpAddr::V6(from), IpAddr::V6(to)) => icmpv6::Repr::DstUnreachable {
            code: codes.1,
            data_len: quote,
        }
        .emit(&mut icmpv6::Packet::new_unchecked(icmp), from, to),
        _ => return Verdict::Drop(DropReason::BackendRejected),
    }
    Verdict::tx(out)
}

/// A TCP segment sluice writes.
#[derive(Debug, Clone, Copy)]
pub struct Seg<'a> {
    /// Source address and port.
    pub src: SocketAddr,
    /// Destination address and port.
    pub dst: SocketAddr,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// TCP flags ([`tcp::flags`]).
    pub flags: u16,
    /// Window field.
    pub window: u16,
    /// Options (a multiple of 4 bytes).
    pub options: &'a [u8],
    /// Payload.
    pub payload: &'a [u8],
}

/// Writes Ethernet (`to`, `from`), IP and TCP headers and the payload into `pkt`.
pub fn write_seg(pkt: &mut Pkt, to: [u8; 6], from: [u8; 6], s: &Seg<'_>) -> bool {
    let ip_len = if s.src.is_ipv6() {
        ipv6::HEADER_LEN
    } else {
        ipv4::HEADER_LEN
    };
    let tcp_len = tcp::HEADER_LEN + s.options.len();
    if !pkt.set_len(ETH + ip_len + tcp_len + s.payload.len()) {
        return false;
    }
    let d = pkt.data_mut();
    reply_headers(
        d,
        to,
        from,
        s.src.ip(),
        s.dst.ip(),
        ip_proto::TCP,
        tcp_len + s.payload.len(),
    );
    let seg = &mut d[ETH + ip_len..];
    seg[tcp::HEADER_LEN..tcp_len].copy_from_slice(s.options);
    seg[tcp_len..].copy_from_slice(s.payload);
    let mut t = tcp::Packet::new_unchecked(seg);
    t.set_src_port(s.src.port());
    t.set_dst_port(s.dst.port());
    t.set_seq_number(s.seq);
    t.set_ack_number(s.ack);
    t.set_header_len_and_flags(tcp_len as u8, s.flags);
    t.set_window_len(s.window);
    t.set_urgent_at(0);
    t.fill_checksum(s.src.ip(), s.dst.ip());
    true
}
