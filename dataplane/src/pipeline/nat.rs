//! Full NAT on the packet path: the rewrite of addresses and ports with incremental
//! checksums (RFC 1624). A worker's SNAT ports (which tuples it may hand out, and how
//! long a closed one rests) are [`super::snat`]'s; re-exported here.

use super::parse::{Meta, ETH};
pub use super::snat::{
    admit, forget, insert_own, insert_snat, rekey_snat, rest_tuple, SnatPorts, SNAT_ATTEMPTS,
    SNAT_SCAN,
};
use crate::flow::Tuple;
use crate::port::Pkt;
use crate::wire::{checksum, ip_proto, ipv4, ipv6};
use std::net::SocketAddr;

/// Rewrites source and destination (addresses and ports) of a TCP/UDP packet, updating
/// the IPv4 header checksum and the transport checksum incrementally (RFC 1624), and
/// `meta`'s addresses and ports with them (so the forwarder routes it from `meta`).
pub fn rewrite(pkt: &mut Pkt, meta: &mut Meta, src: SocketAddr, dst: SocketAddr) {
    let t = Tuple::new(src, dst, meta.proto);
    rewrite_raw(pkt, meta, &t.src, src.port(), &t.dst, dst.port());
}

/// [`rewrite`] with addresses as the flow table stores them (16 bytes, IPv4 mapped).
#[inline]
pub fn rewrite_raw(
    pkt: &mut Pkt,
    meta: &mut Meta,
    src: &[u8; 16],
    sport: u16,
    dst: &[u8; 16],
    dport: u16,
) {
    if !meta.v6 {
        let v4 = |a: &[u8; 16]| u32::from_be_bytes([a[12], a[13], a[14], a[15]]);
        return rewrite_v4(pkt, meta, v4(src), sport, v4(dst), dport);
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
    (meta.src, meta.dst) = (words(src), words(dst));
    let seg = &mut d[meta.l4..];
    old_sum += sum(&seg[0..4]);
    seg[0..2].copy_from_slice(&sport.to_be_bytes());
    seg[2..4].copy_from_slice(&dport.to_be_bytes());
    new_sum += sum(&seg[0..4]);
    meta.ports = Meta::ports_word(sport, dport);
    let at = if meta.proto == ip_proto::TCP { 16 } else { 6 };
    let old_check = u16::from_be_bytes([seg[at], seg[at + 1]]);
    let mut c = !checksum::fold(u64::from(!old_check) + fold_not(old_sum) + new_sum);
    if meta.proto == ip_proto::UDP && c == 0 {
        c = 0xffff; // RFC 768: a computed zero is sent as all ones.
    }
    seg[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

/// [`rewrite_raw`] for IPv4 on 32-bit words: the same RFC 1624 updates of the header
/// and transport checksums (and of `meta`), without a pass over byte pairs.
///
/// Inlined into the flow hit path, as the flow table's IPv4 lookup and `on_packet` are
/// (measured: `perf/NOTES.md`).
#[inline(always)]
pub fn rewrite_v4(pkt: &mut Pkt, meta: &mut Meta, src: u32, sport: u16, dst: u32, dport: u16) {
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
    (meta.src[3], meta.dst[3]) = (src, dst);
    let hc = u16::from_be_bytes([ip[10], ip[11]]);
    let hc = !checksum::fold(u64::from(!hc) + sum_not(old, 4) + new);
    ip[10..12].copy_from_slice(&hc.to_be_bytes());
    let at = if meta.proto == ip_proto::TCP { 16 } else { 6 };
    let Some(seg) = d.get_mut(meta.l4..meta.l4 + at + 2) else {
        return;
    };
    let ports = u32::from(sport) << 16 | u32::from(dport);
    let old_sum = old + halves(word(seg, 0));
    let new_sum = new + halves(ports);
    seg[0..4].copy_from_slice(&ports.to_be_bytes());
    meta.ports = Meta::ports_word(sport, dport);
    let old_check = u16::from_be_bytes([seg[at], seg[at + 1]]);
    if meta.proto == ip_proto::UDP && old_check == 0 {
        return; // IPv4 UDP without a checksum stays without one.
    }
    let mut c = !checksum::fold(u64::from(!old_check) + sum_not(old_sum, 6) + new_sum);
    if meta.proto == ip_proto::UDP && c == 0 {
        c = 0xffff; // RFC 768: a computed zero is sent as all ones.
    }
    seg[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

/// An address as the flow table stores it (16 bytes) as [`Meta`]'s words.
#[inline]
fn words(a: &[u8; 16]) -> [u32; 4] {
    let w = |i: usize| u32::from_be_bytes([a[i], a[i + 1], a[i + 2], a[i + 3]]);
    [w(0), w(4), w(8), w(12)]
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
/// sums of any number of words (`sum_not` when the count is known).
#[inline(always)]
pub fn fold_not(sum: u64) -> u64 {
    u64::from(!checksum::fold(sum))
}
