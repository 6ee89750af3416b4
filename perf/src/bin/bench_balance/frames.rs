//! The clients and their 60-byte TCP segments, in memory like a capture.

use crate::world::{CLIENT_MAC, FRAME, SLUICE_MAC, STRIDE, VIP, VIP_PORT};
pub(crate) use sluice_perf::fixtures::tcp_frame;
use std::net::Ipv4Addr;

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
