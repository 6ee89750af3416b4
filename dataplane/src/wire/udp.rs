//! UDP (RFC 768).

use super::error::{Error, Result};
use super::{be, checksum, ip_proto};
use std::net::IpAddr;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
}

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;

/// A view of a UDP datagram.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer, checking the header and the length field.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Err(Truncated)` unless the header and `length` bytes fit; `Err(Malformed)` if
    /// `length` < 8.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let l = usize::from(self.len());
        if l < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if len < l {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        be::u16(self.buffer.as_ref(), field::SRC_PORT)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be::u16(self.buffer.as_ref(), field::DST_PORT)
    }
    /// Length field (header + payload).
    pub fn len(&self) -> u16 {
        be::u16(self.buffer.as_ref(), field::LENGTH)
    }
    /// Whether the length field says there is no payload.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }
    /// Checksum field (0 = none, IPv4 only).
    pub fn checksum(&self) -> u16 {
        be::u16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// Payload (up to the length field).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.len())]
    }
    /// Whether the checksum is correct for these addresses (a zero checksum over IPv4
    /// means "none" and verifies).
    pub fn verify_checksum(&self, src: IpAddr, dst: IpAddr) -> bool {
        if src.is_ipv4() && self.checksum() == 0 {
            return true;
        }
        let d = &self.buffer.as_ref()[..usize::from(self.len())];
        checksum::combine(&[pseudo(src, dst, d.len()), checksum::data(d)]) == 0xffff
    }
}

fn pseudo(src: IpAddr, dst: IpAddr, len: usize) -> u16 {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            checksum::pseudo_header_v4(s, d, ip_proto::UDP, len as u32)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            checksum::pseudo_header_v6(s, d, ip_proto::UDP, len as u32)
        }
        // Mixed families never occur in one packet; sum the v6-mapped forms.
        (s, d) => checksum::pseudo_header_v6(to_v6(s), to_v6(d), ip_proto::UDP, len as u32),
    }
}

fn to_v6(a: IpAddr) -> std::net::Ipv6Addr {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::SRC_PORT, v);
    }
    /// Sets the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::DST_PORT, v);
    }
    /// Sets the length field.
    pub fn set_len(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::LENGTH, v);
    }
    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::CHECKSUM, v);
    }
    /// Mutable payload.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let l = usize::from(self.len());
        &mut self.buffer.as_mut()[HEADER_LEN..l]
    }
    /// Computes and stores the checksum (0 is sent as 0xffff).
    pub fn fill_checksum(&mut self, src: IpAddr, dst: IpAddr) {
        self.set_checksum(0);
        let l = usize::from(self.len());
        let d = &self.buffer.as_ref()[..l];
        let c = !checksum::combine(&[pseudo(src, dst, l), checksum::data(d)]);
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }
}

/// The meaning of a UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Payload length.
    pub payload_len: usize,
}

impl Repr {
    /// Parses a datagram, verifying its checksum; destination port 0 is malformed.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>, src: IpAddr, dst: IpAddr) -> Result<Repr> {
        p.check_len()?;
        if p.dst_port() == 0 {
            return Err(Error::Malformed);
        }
        if !p.verify_checksum(src, dst) {
            return Err(Error::Checksum);
        }
        Ok(Repr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            payload_len: usize::from(p.len()) - HEADER_LEN,
        })
    }

    /// Header + payload length.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the header (payload placed by the caller) and the checksum.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>, src: IpAddr, dst: IpAddr) {
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_len((HEADER_LEN + self.payload_len) as u16);
        p.fill_checksum(src, dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const SRC: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 168, 1, 1));
    const DST: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 168, 1, 2));

    static DGRAM: [u8; 12] = [
        0xbf, 0x00, 0x00, 0x35, 0x00, 0x0c, 0x12, 0x4d, 0xaa, 0x00, 0x00, 0xff,
    ];

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&DGRAM[..]).unwrap();
        assert_eq!(p.src_port(), 48896);
        assert_eq!(p.dst_port(), 53);
        assert_eq!(p.len(), 12);
        assert_eq!(p.checksum(), 0x124d);
        assert_eq!(p.payload(), &[0xaa, 0x00, 0x00, 0xff]);
        assert!(p.verify_checksum(SRC, DST));
    }

    #[test]
    fn emit_and_parse() {
        let repr = Repr {
            src_port: 48896,
            dst_port: 53,
            payload_len: 4,
        };
        let mut buf = [0u8; 12];
        buf[8..].copy_from_slice(&[0xaa, 0x00, 0x00, 0xff]);
        repr.emit(&mut Packet::new_unchecked(&mut buf[..]), SRC, DST);
        assert_eq!(buf, DGRAM);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Repr::parse(&p, SRC, DST).unwrap(), repr);
    }

    #[test]
    fn rejects() {
        assert_eq!(
            Packet::new_checked(&DGRAM[..7]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Packet::new_checked(&DGRAM[..11]).unwrap_err(),
            Error::Truncated
        );
        let mut bad = DGRAM;
        bad[5] = 4;
        assert_eq!(Packet::new_checked(&bad[..]).unwrap_err(), Error::Malformed);
        let mut bad = DGRAM;
        bad[9] = 1;
        let p = Packet::new_checked(&bad[..]).unwrap();
        assert_eq!(Repr::parse(&p, SRC, DST).unwrap_err(), Error::Checksum);
        let mut none = DGRAM;
        none[6] = 0;
        none[7] = 0;
        assert!(Packet::new_checked(&none[..])
            .unwrap()
            .verify_checksum(SRC, DST));
    }
}
