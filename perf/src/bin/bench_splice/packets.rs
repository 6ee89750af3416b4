//! Frames in and out: client hellos, TCP segments as the clients and backends send
//! them, and reading what sluice sent.

use crate::world::WINDOW;
use sluice_dataplane::splice::options;
use sluice_dataplane::wire::{ethernet, ip_proto, ipv4, tcp, EtherType, MacAddr};
use std::net::{IpAddr, SocketAddrV4};

pub(crate) fn u16b(v: usize) -> [u8; 2] {
    (v as u16).to_be_bytes()
}

/// A Chrome-like TLS 1.3 ClientHello naming `sni` in one record: 16 cipher suites, SNI,
/// extended master secret, renegotiation info, groups, point formats, session ticket,
/// ALPN (h2, http/1.1), OCSP, signature algorithms, SCT, an X25519 key share, PSK modes,
/// supported versions, certificate compression, and padding to a 512-byte message (as
/// Chrome pads): 517 bytes on the wire.
pub(crate) fn client_hello(sni: &str, seed: u8) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&[0x03, 0x03]);
    body.extend((0..32u8).map(|i| i.wrapping_mul(37) ^ seed));
    body.push(32);
    body.extend((0..32u8).map(|i| i ^ 0x5a ^ seed));
    let suites: [u16; 16] = [
        0x0a0a, 0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013,
        0xc014, 0x009c, 0x009d, 0x002f, 0x0035,
    ];
    body.extend_from_slice(&u16b(suites.len() * 2));
    for s in suites {
        body.extend_from_slice(&s.to_be_bytes());
    }
    body.extend_from_slice(&[1, 0]);
    let mut ext = Vec::new();
    let mut put = |ty: u16, data: &[u8]| {
        ext.extend_from_slice(&ty.to_be_bytes());
        ext.extend_from_slice(&u16b(data.len()));
        ext.extend_from_slice(data);
    };
    put(0x2a2a, &[]);
    let n = sni.as_bytes();
    let mut sn = Vec::new();
    sn.extend_from_slice(&u16b(n.len() + 3));
    sn.push(0);
    sn.extend_from_slice(&u16b(n.len()));
    sn.extend_from_slice(n);
    put(0x0000, &sn);
    put(0x0017, &[]);
    put(0xff01, &[0]);
    put(0x000a, &[0, 8, 0x2a, 0x2a, 0, 0x1d, 0, 0x17, 0, 0x18]);
    put(0x000b, &[1, 0]);
    put(0x0023, &[]);
    put(
        0x0010,
        &[
            0, 12, 2, b'h', b'2', 8, b'h', b't', b't', b'p', b'/', b'1', b'.', b'1',
        ],
    );
    put(0x0005, &[1, 0, 0, 0, 0]);
    put(
        0x000d,
        &[0, 16, 4, 3, 8, 4, 4, 1, 5, 3, 8, 5, 5, 1, 8, 6, 6, 1],
    );
    put(0x0012, &[]);
    let mut ks = vec![0, 41, 0x2a, 0x2a, 0, 1, 0, 0, 0x1d, 0, 32];
    ks.extend((0..32u8).map(|i| i.wrapping_mul(91) ^ seed));
    put(0x0033, &ks);
    put(0x002d, &[1, 1]);
    put(0x002b, &[6, 0x3a, 0x3a, 3, 4, 3, 3]);
    put(0x001b, &[2, 0, 2]);
    put(0x1a1a, &[0]);
    // Padding: the handshake message (4 + body + 2 + extensions) to 512 bytes.
    let len = 4 + body.len() + 2 + ext.len() + 4;
    let pad = 512usize.saturating_sub(len);
    ext.extend_from_slice(&[0x00, 0x15]);
    ext.extend_from_slice(&u16b(pad));
    ext.extend(std::iter::repeat_n(0u8, pad));
    body.extend_from_slice(&u16b(ext.len()));
    body.extend_from_slice(&ext);
    let mut rec = vec![0x16, 0x03, 0x01];
    rec.extend_from_slice(&u16b(body.len() + 4));
    rec.push(1);
    rec.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    rec.extend_from_slice(&body);
    rec
}

// ---------------------------------------------------------------------------------------
// Frames.

/// A TCP segment the driver sends.
pub(crate) struct Seg<'a> {
    pub(crate) src: SocketAddrV4,
    pub(crate) dst: SocketAddrV4,
    pub(crate) seq: u32,
    pub(crate) ack: u32,
    pub(crate) flags: u16,
    pub(crate) options: &'a [u8],
    pub(crate) payload: &'a [u8],
}

/// Writes `s` as an Ethernet frame to sluice (`to`: the port's MAC) into `out`, padded to
/// 60 bytes.
pub(crate) fn frame(out: &mut Vec<u8>, to: MacAddr, from: MacAddr, s: &Seg<'_>) {
    let tcp_len = tcp::HEADER_LEN + s.options.len();
    let ip_len = ipv4::HEADER_LEN + tcp_len + s.payload.len();
    out.clear();
    out.resize((14 + ip_len).max(60), 0);
    ethernet::Repr {
        dst_addr: to,
        src_addr: from,
        ethertype: EtherType::Ipv4,
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut out[..]));
    ipv4::Repr {
        src_addr: *s.src.ip(),
        dst_addr: *s.dst.ip(),
        protocol: ip_proto::TCP,
        payload_len: tcp_len + s.payload.len(),
        ttl: 64,
    }
    .emit(&mut ipv4::Packet::new_unchecked(&mut out[14..14 + ip_len]));
    let seg = &mut out[34..14 + ip_len];
    seg[tcp::HEADER_LEN..tcp_len].copy_from_slice(s.options);
    seg[tcp_len..].copy_from_slice(s.payload);
    let mut t = tcp::Packet::new_unchecked(seg);
    t.set_src_port(s.src.port());
    t.set_dst_port(s.dst.port());
    t.set_seq_number(s.seq);
    t.set_ack_number(s.ack);
    t.set_header_len_and_flags(tcp_len as u8, s.flags);
    t.set_window_len(WINDOW);
    t.set_urgent_at(0);
    t.fill_checksum(IpAddr::V4(*s.src.ip()), IpAddr::V4(*s.dst.ip()));
}

/// A segment sluice sent, as read back by the driver.
pub(crate) struct Out<'a> {
    pub(crate) dst_mac: [u8; 6],
    pub(crate) src: SocketAddrV4,
    pub(crate) dst: SocketAddrV4,
    pub(crate) seq: u32,
    pub(crate) ack: u32,
    pub(crate) flags: u16,
    pub(crate) window: u16,
    pub(crate) options: &'a [u8],
    pub(crate) payload: &'a [u8],
    pub(crate) checksums_ok: bool,
}

pub(crate) fn read_out(d: &[u8]) -> Option<Out<'_>> {
    if d.len() < 54 || d[12..14] != [0x08, 0x00] {
        return None;
    }
    let ip = ipv4::Packet::new_checked(&d[14..]).ok()?;
    if ip.protocol() != ip_proto::TCP || ip.header_len() != 20 {
        return None;
    }
    let total = usize::from(ip.total_len());
    let seg_bytes = d.get(34..14 + total)?;
    let t = tcp::Packet::new_checked(seg_bytes).ok()?;
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let hl = usize::from(t.header_len());
    Some(Out {
        dst_mac: d[..6].try_into().ok()?,
        src: SocketAddrV4::new(src, t.src_port()),
        dst: SocketAddrV4::new(dst, t.dst_port()),
        seq: t.seq_number(),
        ack: t.ack_number(),
        flags: t.flags() & 0x1ff,
        window: t.window_len(),
        options: &seg_bytes[tcp::HEADER_LEN..hl],
        payload: &seg_bytes[hl..],
        checksums_ok: ip.verify_checksum() && t.verify_checksum(IpAddr::V4(src), IpAddr::V4(dst)),
    })
}

/// SYN options of a Linux client without timestamps: MSS 1460, SACK, window scale 7.
pub(crate) fn syn_options() -> ([u8; 20], usize) {
    let mut o = [0u8; 20];
    let n = options::emit_syn(&mut o, 1460, Some(7), true);
    (o, n)
}

/// NOP, NOP, SACK with two blocks (`a`..`b`, `c`..`d`): 20 bytes, Linux's layout.
pub(crate) fn sack_options(a: u32, b: u32, c: u32, d: u32) -> [u8; 20] {
    let mut o = [0u8; 20];
    o[..4].copy_from_slice(&[1, 1, 5, 18]);
    for (i, e) in [a, b, c, d].into_iter().enumerate() {
        o[4 + 4 * i..8 + 4 * i].copy_from_slice(&e.to_be_bytes());
    }
    o
}

// ---------------------------------------------------------------------------------------
// The harness: the stage, its context and the timing.
