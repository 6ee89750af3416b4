//! IPv6 (RFC 8200), fixed header. Extension headers are not walked here: the pipeline
//! treats a next header it does not handle as such.

use super::be;
use super::error::{Error, Result};
use std::net::Ipv6Addr;

mod field {
    use core::ops::Range;
    pub const VER_TC_FLOW: usize = 0;
    pub const LENGTH: usize = 4;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: Range<usize> = 8..24;
    pub const DST: Range<usize> = 24..40;
}

/// Length of the fixed IPv6 header.
pub const HEADER_LEN: usize = 40;

/// A view of an IPv6 packet.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer, checking the header and the payload length fit.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Err(Truncated)` unless the fixed header and `payload_len` bytes fit.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || len < HEADER_LEN + usize::from(self.payload_len()) {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Version field (6).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_TC_FLOW] >> 4
    }
    /// Traffic class.
    pub fn traffic_class(&self) -> u8 {
        ((be::u16(self.buffer.as_ref(), field::VER_TC_FLOW) >> 4) & 0xff) as u8
    }
    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        be::u32(self.buffer.as_ref(), field::VER_TC_FLOW) & 0x000f_ffff
    }
    /// Payload length.
    pub fn payload_len(&self) -> u16 {
        be::u16(self.buffer.as_ref(), field::LENGTH)
    }
    /// Next header.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        addr_at(self.buffer.as_ref(), field::SRC.start)
    }
    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        addr_at(self.buffer.as_ref(), field::DST.start)
    }
    /// Payload (`payload_len` bytes after the header; link padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + usize::from(self.payload_len())]
    }
}

fn addr_at(b: &[u8], at: usize) -> Ipv6Addr {
    let mut o = [0u8; 16];
    o.copy_from_slice(&b[at..at + 16]);
    Ipv6Addr::from(o)
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets version 6, traffic class and flow label.
    pub fn set_version_tc_flow(&mut self, tc: u8, flow: u32) {
        let v = (6u32 << 28) | (u32::from(tc) << 20) | (flow & 0x000f_ffff);
        be::set_u32(self.buffer.as_mut(), field::VER_TC_FLOW, v);
    }
    /// Sets the payload length.
    pub fn set_payload_len(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::LENGTH, v);
    }
    /// Sets the next header.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = v;
    }
    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }
    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.octets());
    }
    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.octets());
    }
    /// Mutable payload.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let n = usize::from(self.payload_len());
        &mut self.buffer.as_mut()[HEADER_LEN..HEADER_LEN + n]
    }
}

/// The meaning of an IPv6 fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// Next header.
    pub next_header: u8,
    /// Payload length.
    pub payload_len: usize,
    /// Hop limit.
    pub hop_limit: u8,
}

impl Repr {
    /// Parses a checked packet (version 6).
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        p.check_len()?;
        if p.version() != 6 {
            return Err(Error::Malformed);
        }
        Ok(Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            next_header: p.next_header(),
            payload_len: usize::from(p.payload_len()),
            hop_limit: p.hop_limit(),
        })
    }

    /// Header length.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header (traffic class and flow label zero).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_version_tc_flow(0, 0);
        p.set_payload_len(self.payload_len as u16);
        p.set_next_header(self.next_header);
        p.set_hop_limit(self.hop_limit);
        p.set_src_addr(self.src_addr);
        p.set_dst_addr(self.dst_addr);
    }
}

/// The solicited-node multicast address of `addr` (`ff02::1:ffXX:XXXX`, RFC 4291 §2.7.1).
pub fn solicited_node(addr: Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | u16::from(o[13]),
        u16::from_be_bytes([o[14], o[15]]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    static PACKET: [u8; 44] = [
        0x60, 0x12, 0x34, 0x56, // version 6, tc 0x01, flow 0x23456
        0x00, 0x04, 0x11, 0x40, // payload 4, UDP, hop limit 64
        0xfd, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, // src fd77::1
        0xfd, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, // dst fd77::2
        0xca, 0xfe, 0xba, 0xbe,
    ];

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0x01);
        assert_eq!(p.flow_label(), 0x23456);
        assert_eq!(p.payload_len(), 4);
        assert_eq!(p.next_header(), 17);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.src_addr(), "fd77::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst_addr(), "fd77::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.payload(), &[0xca, 0xfe, 0xba, 0xbe]);
    }

    #[test]
    fn emit_and_parse() {
        let repr = Repr {
            src_addr: "fd77::1".parse().unwrap(),
            dst_addr: "fd77::2".parse().unwrap(),
            next_header: 17,
            payload_len: 4,
            hop_limit: 64,
        };
        let mut buf = [0u8; 44];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        repr.emit(&mut p);
        p.set_version_tc_flow(0x01, 0x23456);
        p.payload_mut().copy_from_slice(&[0xca, 0xfe, 0xba, 0xbe]);
        assert_eq!(buf, PACKET);
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&PACKET[..])).unwrap(),
            repr
        );
    }

    #[test]
    fn rejects() {
        assert_eq!(
            Packet::new_checked(&PACKET[..39]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Packet::new_checked(&PACKET[..43]).unwrap_err(),
            Error::Truncated
        );
        let mut bad = PACKET;
        bad[0] = 0x40;
        let p = Packet::new_checked(&bad[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap_err(), Error::Malformed);
    }

    #[test]
    fn solicited_node_address() {
        assert_eq!(
            solicited_node("fd77::1:2:3344:5566".parse().unwrap()),
            "ff02::1:ff44:5566".parse::<Ipv6Addr>().unwrap()
        );
    }
}
