//! The clients and their 60-byte TCP segments, in memory like a capture.

use crate::world::{CLIENT_MAC, FRAME, SLUICE_MAC, STRIDE, VIP, VIP_PORT};
use sluice_dataplane::wire::{ethernet, ip_proto, ipv4, tcp, EtherType, MacAddr};
use std::net::{IpAddr, Ipv4Addr};

/// Frames of a fixed stride in one buffer (a capture in memory).
pub(crate) struct Frames {
    pub(crate) data: Vec<u8>,
}

impl Frames {
    pub(crate) fn len(&self) -> usize {
        self.data.len() / STRIDE
    }
    pub(crate) fn get(&self, i: usize) -> &[u8] {
        &self.data[i * STRIDE..i * STRIDE + FRAME]
    }
}

/// Client `i`'s address and port (50,000 ports per address from 10.77.1.1 on).
pub(crate) fn client(i: usize) -> (Ipv4Addr, u16) {
    let a = 0x0a4d_0101u32 + (i / 50_000) as u32;
    (Ipv4Addr::from(a), 10_000 + (i % 50_000) as u16)
}

/// A 60-byte TCP segment from client `i` to the VIP with `flags`.
pub(crate) fn segment(i: usize, flags: u16, out: &mut [u8]) {
    let (src, sport) = client(i);
    segment_from(src, sport, flags, out);
}

/// A 60-byte TCP segment from `src:sport` to the VIP with `flags`.
pub(crate) fn segment_from(src: Ipv4Addr, sport: u16, flags: u16, out: &mut [u8]) {
    let eth = (CLIENT_MAC, SLUICE_MAC);
    tcp_frame(eth, (src, sport), (VIP, VIP_PORT), flags, out);
}

/// A 60-byte TCP segment with `flags` between the Ethernet addresses `(src, dst)`, from
/// `src` to `dst`.
pub(crate) fn tcp_frame(
    (src_mac, dst_mac): (MacAddr, MacAddr),
    (src, sport): (Ipv4Addr, u16),
    (dst, dport): (Ipv4Addr, u16),
    flags: u16,
    out: &mut [u8],
) {
    ethernet::Repr {
        dst_addr: dst_mac,
        src_addr: src_mac,
        ethertype: EtherType::Ipv4,
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut out[..]));
    let mut ip = ipv4::Packet::new_unchecked(&mut out[14..14 + 40]);
    ipv4::Repr {
        src_addr: src,
        dst_addr: dst,
        protocol: ip_proto::TCP,
        payload_len: 20,
        ttl: 64,
    }
    .emit(&mut ip);
    let syn = flags == tcp::flags::SYN;
    tcp::Repr {
        src_port: sport,
        dst_port: dport,
        seq_number: 1000 + u32::from(!syn),
        ack_number: if syn { 0 } else { 5000 },
        flags,
        window_len: 1000,
        payload_len: 0,
    }
    .emit(
        &mut tcp::Packet::new_unchecked(ip.payload_mut()),
        IpAddr::V4(src),
        IpAddr::V4(dst),
    );
}

/// Segments of the clients in `order`.
pub(crate) fn frames(order: impl ExactSizeIterator<Item = usize>, flags: u16) -> Frames {
    let mut data = vec![0u8; order.len() * STRIDE];
    for (k, i) in order.enumerate() {
        segment(i, flags, &mut data[k * STRIDE..k * STRIDE + FRAME]);
    }
    Frames { data }
}

/// 0..n in a fixed pseudo-random order (Fisher-Yates over a xorshift).
pub(crate) fn shuffled(n: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}
