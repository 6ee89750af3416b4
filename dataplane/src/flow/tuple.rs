//! The keys of the flow table: a flow's direction as a 5-tuple ([`Tuple`], and
//! [`Tuple4`] for the IPv4 hot path, which hashes alike) and which direction a packet
//! travels ([`Dir`]).

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// One direction of a flow: addresses (IPv4 stored IPv4-mapped), ports and protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Tuple {
    /// Source address (16 bytes; IPv4 as `::ffff:a.b.c.d`).
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Source port (ICMP: identifier).
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// IP protocol number.
    pub proto: u8,
}

/// One direction of an IPv4 flow as the hot path reads it off a packet: addresses as
/// `u32` (`u32::from(Ipv4Addr)`, the header's big-endian word read as a number), so a
/// lookup copies no IPv4-mapped 16-byte addresses. The same key as the [`Tuple`] with
/// those addresses mapped ([`Tuple::to_v4`], [`Tuple4::to_tuple`]): both hash alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Tuple4 {
    /// Source address.
    pub src: u32,
    /// Destination address.
    pub dst: u32,
    /// Source port (ICMP: identifier).
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// IP protocol number.
    pub proto: u8,
}

/// The 16-byte form of an IPv4 address given as a `u32` (`::ffff:a.b.c.d`).
pub(super) fn mapped(a: u32) -> [u8; 16] {
    std::net::Ipv4Addr::from(a).to_ipv6_mapped().octets()
}

/// The IPv4 address (as a `u32`) of an IPv4-mapped 16-byte address.
fn unmapped(o: &[u8; 16]) -> Option<u32> {
    std::net::Ipv6Addr::from(*o).to_ipv4_mapped().map(u32::from)
}

/// A 16-byte address as four big-endian words (how the wide form stores it).
pub(super) fn words(o: &[u8; 16]) -> [u32; 4] {
    let w = |i: usize| u32::from_be_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]);
    [w(0), w(4), w(8), w(12)]
}

/// The address [`words`] was given.
pub(super) fn from_words(w: &[u32]) -> [u8; 16] {
    let mut o = [0u8; 16];
    for (c, w) in o.chunks_exact_mut(4).zip(w) {
        c.copy_from_slice(&w.to_be_bytes());
    }
    o
}

/// The table's hash step (FxHash-style multiply-rotate).
#[inline(always)]
fn mix(h: u64, v: u64) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    (h.rotate_left(5) ^ v).wrapping_mul(K)
}

fn octets(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

fn ip_of(o: [u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(o);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

impl Tuple {
    /// A tuple from socket addresses.
    pub fn new(src: SocketAddr, dst: SocketAddr, proto: u8) -> Tuple {
        Tuple {
            src: octets(src.ip()),
            dst: octets(dst.ip()),
            sport: src.port(),
            dport: dst.port(),
            proto,
        }
    }

    /// Source address and port.
    pub fn source(&self) -> SocketAddr {
        SocketAddr::new(ip_of(self.src), self.sport)
    }

    /// Destination address and port.
    pub fn destination(&self) -> SocketAddr {
        SocketAddr::new(ip_of(self.dst), self.dport)
    }

    /// The same tuple seen from the other side.
    pub fn reversed(&self) -> Tuple {
        Tuple {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            proto: self.proto,
        }
    }

    /// The IPv4 form, if both addresses are IPv4 (mapped).
    pub fn to_v4(&self) -> Option<Tuple4> {
        Some(Tuple4 {
            src: unmapped(&self.src)?,
            dst: unmapped(&self.dst)?,
            sport: self.sport,
            dport: self.dport,
            proto: self.proto,
        })
    }

    pub(super) fn hash(&self, seed: u64) -> u64 {
        if let Some(t) = self.to_v4() {
            return t.hash(seed);
        }
        // Seeded per table so that crafted tuples cannot be aimed at one bucket across
        // restarts.
        let word = |a: &[u8; 16], i: usize| {
            u64::from_le_bytes([
                a[i],
                a[i + 1],
                a[i + 2],
                a[i + 3],
                a[i + 4],
                a[i + 5],
                a[i + 6],
                a[i + 7],
            ])
        };
        let mut h = seed;
        h = mix(h, word(&self.src, 0));
        h = mix(h, word(&self.src, 8));
        h = mix(h, word(&self.dst, 0));
        h = mix(h, word(&self.dst, 8));
        h = mix(
            h,
            u64::from(self.sport) | u64::from(self.dport) << 16 | u64::from(self.proto) << 32,
        );
        h ^ (h >> 29)
    }
}

impl Tuple4 {
    /// The tuple with its addresses IPv4-mapped.
    pub fn to_tuple(&self) -> Tuple {
        Tuple {
            src: mapped(self.src),
            dst: mapped(self.dst),
            sport: self.sport,
            dport: self.dport,
            proto: self.proto,
        }
    }

    #[inline]
    pub(super) fn hash(&self, seed: u64) -> u64 {
        // Two steps over the 13 key bytes (an IPv4 key never mixes the mapped form's
        // constant words).
        let mut h = mix(seed, u64::from(self.src) | u64::from(self.dst) << 32);
        h = mix(
            h,
            u64::from(self.sport) | u64::from(self.dport) << 16 | u64::from(self.proto) << 32,
        );
        h ^ (h >> 29)
    }
}

/// Which direction of its flow a packet travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// As the client sent it.
    Orig,
    /// As the backend answers.
    Reply,
}
