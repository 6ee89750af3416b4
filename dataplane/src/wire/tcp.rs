//! TCP (RFC 9293) segment header.

use super::error::{Error, Result};
use super::{be, checksum, ip_proto};
use std::net::IpAddr;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const SEQ_NUM: usize = 4;
    pub const ACK_NUM: usize = 8;
    pub const FLAGS: usize = 12;
    pub const WIN_SIZE: usize = 14;
    pub const CHECKSUM: usize = 16;
    pub const URGENT: usize = 18;
    pub const OPTIONS: usize = 20;
}

/// Length of a TCP header without options.
pub const HEADER_LEN: usize = field::OPTIONS;

/// TCP flag bits (low byte of the flags word, plus NS in bit 8).
pub mod flags {
    /// FIN.
    pub const FIN: u16 = 0x001;
    /// SYN.
    pub const SYN: u16 = 0x002;
    /// RST.
    pub const RST: u16 = 0x004;
    /// PSH.
    pub const PSH: u16 = 0x008;
    /// ACK.
    pub const ACK: u16 = 0x010;
    /// URG.
    pub const URG: u16 = 0x020;
    /// ECE.
    pub const ECE: u16 = 0x040;
    /// CWR.
    pub const CWR: u16 = 0x080;
    /// NS (RFC 3540, historic).
    pub const NS: u16 = 0x100;
}

/// A view of a TCP segment.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer, checking the header and its options fit.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Err(Truncated)` unless the fixed header and the options fit; `Err(Malformed)` if
    /// the data offset is below 5.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = usize::from(self.header_len());
        if hl < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if len < hl {
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
    /// Sequence number.
    pub fn seq_number(&self) -> u32 {
        be::u32(self.buffer.as_ref(), field::SEQ_NUM)
    }
    /// Acknowledgement number.
    pub fn ack_number(&self) -> u32 {
        be::u32(self.buffer.as_ref(), field::ACK_NUM)
    }
    /// Header length in bytes (data offset × 4).
    pub fn header_len(&self) -> u8 {
        (self.buffer.as_ref()[field::FLAGS] >> 4) * 4
    }
    /// Flag bits ([`flags`]).
    pub fn flags(&self) -> u16 {
        be::u16(self.buffer.as_ref(), field::FLAGS) & 0x01ff
    }
    /// Whether SYN is set.
    pub fn syn(&self) -> bool {
        self.flags() & flags::SYN != 0
    }
    /// Whether ACK is set.
    pub fn ack(&self) -> bool {
        self.flags() & flags::ACK != 0
    }
    /// Whether FIN is set.
    pub fn fin(&self) -> bool {
        self.flags() & flags::FIN != 0
    }
    /// Whether RST is set.
    pub fn rst(&self) -> bool {
        self.flags() & flags::RST != 0
    }
    /// Window size (unscaled).
    pub fn window_len(&self) -> u16 {
        be::u16(self.buffer.as_ref(), field::WIN_SIZE)
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be::u16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// Urgent pointer.
    pub fn urgent_at(&self) -> u16 {
        be::u16(self.buffer.as_ref(), field::URGENT)
    }
    /// Option bytes.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::OPTIONS..usize::from(self.header_len())]
    }
    /// Payload (everything after the header; the IP layer bounds the buffer).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[usize::from(self.header_len())..]
    }
    /// Whether the checksum over the whole buffer is correct for these addresses.
    pub fn verify_checksum(&self, src: IpAddr, dst: IpAddr) -> bool {
        let d = self.buffer.as_ref();
        checksum::combine(&[pseudo(src, dst, d.len()), checksum::data(d)]) == 0xffff
    }
}

fn pseudo(src: IpAddr, dst: IpAddr, len: usize) -> u16 {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            checksum::pseudo_header_v4(s, d, ip_proto::TCP, len as u32)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            checksum::pseudo_header_v6(s, d, ip_proto::TCP, len as u32)
        }
        (s, d) => {
            let v6 = |a: IpAddr| match a {
                IpAddr::V4(v) => v.to_ipv6_mapped(),
                IpAddr::V6(v) => v,
            };
            checksum::pseudo_header_v6(v6(s), v6(d), ip_proto::TCP, len as u32)
        }
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
    /// Sets the sequence number.
    pub fn set_seq_number(&mut self, v: u32) {
        be::set_u32(self.buffer.as_mut(), field::SEQ_NUM, v);
    }
    /// Sets the acknowledgement number.
    pub fn set_ack_number(&mut self, v: u32) {
        be::set_u32(self.buffer.as_mut(), field::ACK_NUM, v);
    }
    /// Sets the header length (bytes, multiple of 4) and the flags.
    pub fn set_header_len_and_flags(&mut self, header_len: u8, f: u16) {
        let v = (u16::from(header_len / 4) << 12) | (f & 0x01ff);
        be::set_u16(self.buffer.as_mut(), field::FLAGS, v);
    }
    /// Sets the window.
    pub fn set_window_len(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::WIN_SIZE, v);
    }
    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::CHECKSUM, v);
    }
    /// Sets the urgent pointer.
    pub fn set_urgent_at(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::URGENT, v);
    }
    /// Mutable payload.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let h = usize::from(self.header_len());
        &mut self.buffer.as_mut()[h..]
    }
    /// Computes and stores the checksum over the whole buffer.
    pub fn fill_checksum(&mut self, src: IpAddr, dst: IpAddr) {
        self.set_checksum(0);
        let d = self.buffer.as_ref();
        let c = !checksum::combine(&[pseudo(src, dst, d.len()), checksum::data(d)]);
        self.set_checksum(c);
    }
}

/// The meaning of a TCP header (options are not represented; emitted headers have none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq_number: u32,
    /// Acknowledgement number (meaningful with ACK).
    pub ack_number: u32,
    /// Flags ([`flags`]).
    pub flags: u16,
    /// Window.
    pub window_len: u16,
    /// Payload length.
    pub payload_len: usize,
}

impl Repr {
    /// Parses a segment, verifying its checksum; port 0 on either side is malformed.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>, src: IpAddr, dst: IpAddr) -> Result<Repr> {
        p.check_len()?;
        if p.src_port() == 0 || p.dst_port() == 0 {
            return Err(Error::Malformed);
        }
        if !p.verify_checksum(src, dst) {
            return Err(Error::Checksum);
        }
        Ok(Repr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            seq_number: p.seq_number(),
            ack_number: p.ack_number(),
            flags: p.flags(),
            window_len: p.window_len(),
            payload_len: p.payload().len(),
        })
    }

    /// Header + payload length.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes a 20-byte header (payload placed by the caller) and the checksum. The buffer
    /// must be exactly [`Repr::buffer_len`] long.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>, src: IpAddr, dst: IpAddr) {
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        p.set_seq_number(self.seq_number);
        p.set_ack_number(self.ack_number);
        p.set_header_len_and_flags(HEADER_LEN as u8, self.flags);
        p.set_window_len(self.window_len);
        p.set_urgent_at(0);
        p.fill_checksum(src, dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const SRC: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 168, 1, 1));
    const DST: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 168, 1, 2));

    // 48896 -> 80, seq 0x01234567, ack 0x89abcdef, PSH|ACK, window 0x0123, "abc".
    static SEGMENT: [u8; 23] = [
        0xbf, 0x00, 0x00, 0x50, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x50, 0x18, 0x01,
        0x23, 0x09, 0x7a, 0x00, 0x00, b'a', b'b', b'c',
    ];

    fn repr() -> Repr {
        Repr {
            src_port: 48896,
            dst_port: 80,
            seq_number: 0x0123_4567,
            ack_number: 0x89ab_cdef,
            flags: flags::PSH | flags::ACK,
            window_len: 0x0123,
            payload_len: 3,
        }
    }

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&SEGMENT[..]).unwrap();
        assert_eq!(p.src_port(), 48896);
        assert_eq!(p.dst_port(), 80);
        assert_eq!(p.seq_number(), 0x0123_4567);
        assert_eq!(p.ack_number(), 0x89ab_cdef);
        assert_eq!(p.header_len(), 20);
        assert!(p.ack() && !p.syn() && !p.fin() && !p.rst());
        assert_eq!(p.flags(), flags::PSH | flags::ACK);
        assert_eq!(p.window_len(), 0x0123);
        assert_eq!(p.options(), &[] as &[u8]);
        assert_eq!(p.payload(), b"abc");
        assert!(p.verify_checksum(SRC, DST));
        assert_eq!(Repr::parse(&p, SRC, DST).unwrap(), repr());
    }

    #[test]
    fn emit() {
        let mut buf = [0u8; 23];
        buf[20..].copy_from_slice(b"abc");
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]), SRC, DST);
        assert_eq!(buf, SEGMENT);
    }

    #[test]
    fn rejects() {
        assert_eq!(
            Packet::new_checked(&SEGMENT[..19]).unwrap_err(),
            Error::Truncated
        );
        let mut bad = SEGMENT;
        bad[12] = 0x40; // data offset 4
        assert_eq!(Packet::new_checked(&bad[..]).unwrap_err(), Error::Malformed);
        let mut bad = SEGMENT;
        bad[12] = 0x60; // 24-byte header, 23-byte buffer
        assert_eq!(Packet::new_checked(&bad[..]).unwrap_err(), Error::Truncated);
        let mut bad = SEGMENT;
        bad[22] = b'x';
        let p = Packet::new_checked(&bad[..]).unwrap();
        assert_eq!(Repr::parse(&p, SRC, DST).unwrap_err(), Error::Checksum);
    }
}
