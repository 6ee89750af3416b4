//! IPv4 (RFC 791).

use super::error::{Error, Result};
use super::{be, checksum};
use std::net::Ipv4Addr;

mod field {
    use core::ops::Range;
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLG_OFF: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: Range<usize> = 12..16;
    pub const DST: Range<usize> = 16..20;
}

/// Length of an IPv4 header without options.
pub const HEADER_LEN: usize = 20;

/// A view of an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer, checking the header, its options and the total length fit.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Err(Truncated)` unless the fixed header, the options (IHL) and the total length
    /// fit the buffer; `Err(Malformed)` if IHL < 5 or the total length is shorter than the
    /// header.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = usize::from(self.header_len());
        if hl < HEADER_LEN {
            return Err(Error::Malformed);
        }
        let total = usize::from(self.total_len());
        if total < hl {
            return Err(Error::Malformed);
        }
        if len < hl || len < total {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Version field (4 for IPv4).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }
    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> u8 {
        (self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }
    /// DSCP (6 bits).
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] >> 2
    }
    /// ECN (2 bits).
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] & 3
    }
    /// Total length (header + payload).
    pub fn total_len(&self) -> u16 {
        be::u16(self.buffer.as_ref(), field::LENGTH)
    }
    /// Identification.
    pub fn ident(&self) -> u16 {
        be::u16(self.buffer.as_ref(), field::IDENT)
    }
    /// Don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        be::u16(self.buffer.as_ref(), field::FLG_OFF) & 0x4000 != 0
    }
    /// More-fragments flag.
    pub fn more_frags(&self) -> bool {
        be::u16(self.buffer.as_ref(), field::FLG_OFF) & 0x2000 != 0
    }
    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        (be::u16(self.buffer.as_ref(), field::FLG_OFF) & 0x1fff) << 3
    }
    /// Whether this is a fragment (not the whole datagram).
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }
    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }
    /// Protocol of the payload.
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }
    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        be::u16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SRC];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }
    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DST];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }
    /// Whether the header checksum is correct.
    pub fn verify_checksum(&self) -> bool {
        checksum::data(&self.buffer.as_ref()[..usize::from(self.header_len())]) == 0xffff
    }
    /// The whole header including options.
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..usize::from(self.header_len())]
    }
    /// Payload: from the end of the header to the total length (link padding excluded).
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[usize::from(self.header_len())..usize::from(self.total_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets version 4 and the header length in bytes (a multiple of 4).
    pub fn set_version_and_header_len(&mut self, header_len: u8) {
        self.buffer.as_mut()[field::VER_IHL] = 0x40 | (header_len / 4);
    }
    /// Sets DSCP and ECN.
    pub fn set_dscp_ecn(&mut self, dscp: u8, ecn: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = (dscp << 2) | (ecn & 3);
    }
    /// Sets the total length.
    pub fn set_total_len(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::LENGTH, v);
    }
    /// Sets the identification.
    pub fn set_ident(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::IDENT, v);
    }
    /// Sets flags and fragment offset: DF as given, MF clear, offset zero.
    pub fn set_dont_frag_only(&mut self, df: bool) {
        be::set_u16(
            self.buffer.as_mut(),
            field::FLG_OFF,
            if df { 0x4000 } else { 0 },
        );
    }
    /// Sets the TTL.
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }
    /// Sets the protocol.
    pub fn set_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = v;
    }
    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::CHECKSUM, v);
    }
    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.octets());
    }
    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.octets());
    }
    /// Computes and stores the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = !checksum::data(&self.buffer.as_ref()[..usize::from(self.header_len())]);
        self.set_checksum(c);
    }
    /// Decrements the TTL and updates the checksum incrementally (RFC 1624). Returns the
    /// new TTL; a TTL of 0 is left alone (the caller answers time-exceeded).
    pub fn decrement_ttl(&mut self) -> u8 {
        let b = self.buffer.as_mut();
        let ttl = b[field::TTL];
        if ttl == 0 {
            return 0;
        }
        let old = be::u16(b, field::TTL);
        b[field::TTL] = ttl - 1;
        let new = be::u16(b, field::TTL);
        let c = checksum::update16(be::u16(b, field::CHECKSUM), old, new);
        be::set_u16(b, field::CHECKSUM, c);
        ttl - 1
    }
    /// Mutable payload (up to the total length).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (h, t) = (
            usize::from(self.header_len()),
            usize::from(self.total_len()),
        );
        &mut self.buffer.as_mut()[h..t]
    }
}

/// The meaning of an IPv4 header (options are not represented; emitted headers have none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Payload protocol.
    pub protocol: u8,
    /// Payload length.
    pub payload_len: usize,
    /// Time to live.
    pub ttl: u8,
}

impl Repr {
    /// Parses a checked packet: version 4 and a correct header checksum.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        p.check_len()?;
        if p.version() != 4 {
            return Err(Error::Malformed);
        }
        if !p.verify_checksum() {
            return Err(Error::Checksum);
        }
        Ok(Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            protocol: p.protocol(),
            payload_len: usize::from(p.total_len()) - usize::from(p.header_len()),
            ttl: p.ttl(),
        })
    }

    /// Header length when emitted (no options).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes a 20-byte header with DF set, ident 0 and a correct checksum.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_version_and_header_len(HEADER_LEN as u8);
        p.set_dscp_ecn(0, 0);
        p.set_total_len((HEADER_LEN + self.payload_len) as u16);
        p.set_ident(0);
        p.set_dont_frag_only(true);
        p.set_ttl(self.ttl);
        p.set_protocol(self.protocol);
        p.set_src_addr(self.src_addr);
        p.set_dst_addr(self.dst_addr);
        p.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // 10.0.0.1 -> 10.0.0.2, ICMP, TTL 64, DF, 4 bytes of payload, plus 2 bytes of padding.
    static PACKET: [u8; 26] = [
        0x45, 0x00, 0x00, 0x18, 0x00, 0x00, 0x40, 0x00, 0x40, 0x01, 0x26, 0xe3, 10, 0, 0, 1, 10, 0,
        0, 2, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x00,
    ];

    fn repr() -> Repr {
        Repr {
            src_addr: Ipv4Addr::new(10, 0, 0, 1),
            dst_addr: Ipv4Addr::new(10, 0, 0, 2),
            protocol: 1,
            payload_len: 4,
            ttl: 64,
        }
    }

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 24);
        assert!(p.dont_frag());
        assert!(!p.is_fragment());
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), 1);
        assert_eq!(p.checksum(), 0x26e3);
        assert!(p.verify_checksum());
        assert_eq!(p.payload(), &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(Repr::parse(&p).unwrap(), repr());
    }

    #[test]
    fn emit() {
        let mut buf = [0u8; 24];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        repr().emit(&mut p);
        p.payload_mut().copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(buf, PACKET[..24]);
    }

    #[test]
    fn ttl_decrement_keeps_checksum_valid() {
        let mut buf = PACKET;
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        assert_eq!(p.decrement_ttl(), 63);
        assert!(p.verify_checksum());
        p.set_ttl(0);
        p.fill_checksum();
        assert_eq!(p.decrement_ttl(), 0);
    }

    #[test]
    fn rejects() {
        assert_eq!(
            Packet::new_checked(&PACKET[..19]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Packet::new_checked(&PACKET[..23]).unwrap_err(),
            Error::Truncated
        );
        let mut bad = PACKET;
        bad[0] = 0x44; // IHL 4
        assert_eq!(Packet::new_checked(&bad[..]).unwrap_err(), Error::Malformed);
        let mut bad = PACKET;
        bad[0] = 0x4f; // IHL 15: 60 bytes of header
        assert_eq!(Packet::new_checked(&bad[..]).unwrap_err(), Error::Malformed);
        let mut bad = PACKET;
        bad[3] = 0x10; // total 16 < header
        assert_eq!(Packet::new_checked(&bad[..]).unwrap_err(), Error::Malformed);
        let mut bad = PACKET;
        bad[11] ^= 1;
        let p = Packet::new_checked(&bad[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap_err(), Error::Checksum);
        let mut bad = PACKET;
        bad[0] = 0x65;
        let p = Packet::new_checked(&bad[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap_err(), Error::Malformed);
    }
}
