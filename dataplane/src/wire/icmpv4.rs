//! ICMP for IPv4 (RFC 792): echo, destination unreachable, time exceeded.

use super::error::{Error, Result};
use super::{be, checksum};

mod field {
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: usize = 2;
    pub const ECHO_IDENT: usize = 4;
    pub const ECHO_SEQNO: usize = 6;
    pub const DATA: usize = 8;
}

/// Length of the ICMP header (type, code, checksum and the 4-byte rest of header).
pub const HEADER_LEN: usize = field::DATA;

/// ICMP message types sluice knows.
pub mod msg_type {
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 0;
    /// Destination unreachable.
    pub const DST_UNREACHABLE: u8 = 3;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 8;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 11;
}

/// A view of an ICMPv4 message.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer, checking the 8-byte header fits.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Err(Truncated)` unless the header fits.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }
    /// Message code.
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be::u16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// Echo identifier.
    pub fn echo_ident(&self) -> u16 {
        be::u16(self.buffer.as_ref(), field::ECHO_IDENT)
    }
    /// Echo sequence number.
    pub fn echo_seq_no(&self) -> u16 {
        be::u16(self.buffer.as_ref(), field::ECHO_SEQNO)
    }
    /// Bytes after the 8-byte header (echo data; the offending datagram in errors).
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA..]
    }
    /// Whether the checksum over the whole buffer is correct.
    pub fn verify_checksum(&self) -> bool {
        checksum::data(self.buffer.as_ref()) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets type and code.
    pub fn set_type_code(&mut self, t: u8, c: u8) {
        let b = self.buffer.as_mut();
        b[field::TYPE] = t;
        b[field::CODE] = c;
    }
    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::CHECKSUM, v);
    }
    /// Sets the echo identifier.
    pub fn set_echo_ident(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::ECHO_IDENT, v);
    }
    /// Sets the echo sequence number.
    pub fn set_echo_seq_no(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::ECHO_SEQNO, v);
    }
    /// Clears the 4-byte "rest of header" (unused in unreachable / time exceeded).
    pub fn clear_rest_of_header(&mut self) {
        self.buffer.as_mut()[4..8].fill(0);
    }
    /// Mutable data after the header.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA..]
    }
    /// Computes and stores the checksum over the whole buffer.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = !checksum::data(self.buffer.as_ref());
        self.set_checksum(c);
    }
}

/// The ICMPv4 messages sluice reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repr {
    /// Echo request with `data_len` bytes of data.
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Length of the echo data.
        data_len: usize,
    },
    /// Echo reply.
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Length of the echo data.
        data_len: usize,
    },
    /// Destination unreachable with a code; the data holds the offending datagram's start.
    DstUnreachable {
        /// Code (0 net, 1 host, 3 port, 4 fragmentation needed, ...).
        code: u8,
        /// Length of the quoted datagram.
        data_len: usize,
    },
    /// Time exceeded (code 0: TTL exceeded in transit).
    TimeExceeded {
        /// Code.
        code: u8,
        /// Length of the quoted datagram.
        data_len: usize,
    },
}

impl Repr {
    /// Parses a message, verifying its checksum.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        p.check_len()?;
        if !p.verify_checksum() {
            return Err(Error::Checksum);
        }
        let data_len = p.data().len();
        Ok(match (p.msg_type(), p.msg_code()) {
            (msg_type::ECHO_REQUEST, 0) => Repr::EchoRequest {
                ident: p.echo_ident(),
                seq_no: p.echo_seq_no(),
                data_len,
            },
            (msg_type::ECHO_REPLY, 0) => Repr::EchoReply {
                ident: p.echo_ident(),
                seq_no: p.echo_seq_no(),
                data_len,
            },
            (msg_type::DST_UNREACHABLE, code) => Repr::DstUnreachable { code, data_len },
            (msg_type::TIME_EXCEEDED, code) => Repr::TimeExceeded { code, data_len },
            _ => return Err(Error::Unsupported),
        })
    }

    /// Total message length.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
            + match *self {
                Repr::EchoRequest { data_len, .. }
                | Repr::EchoReply { data_len, .. }
                | Repr::DstUnreachable { data_len, .. }
                | Repr::TimeExceeded { data_len, .. } => data_len,
            }
    }

    /// Writes the header; the caller has placed the data already. Fills the checksum.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        match *self {
            Repr::EchoRequest { ident, seq_no, .. } | Repr::EchoReply { ident, seq_no, .. } => {
                let t = if matches!(self, Repr::EchoRequest { .. }) {
                    msg_type::ECHO_REQUEST
                } else {
                    msg_type::ECHO_REPLY
                };
                p.set_type_code(t, 0);
                p.set_echo_ident(ident);
                p.set_echo_seq_no(seq_no);
            }
            Repr::DstUnreachable { code, .. } => {
                p.set_type_code(msg_type::DST_UNREACHABLE, code);
                p.clear_rest_of_header();
            }
            Repr::TimeExceeded { code, .. } => {
                p.set_type_code(msg_type::TIME_EXCEEDED, code);
                p.clear_rest_of_header();
            }
        }
        p.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Echo request, ident 0x1234, seq 1, data "abcd".
    static ECHO: [u8; 12] = [
        0x08, 0x00, 0x21, 0x04, 0x12, 0x34, 0x00, 0x01, 0x61, 0x62, 0x63, 0x64,
    ];

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&ECHO[..]).unwrap();
        assert_eq!(p.msg_type(), msg_type::ECHO_REQUEST);
        assert_eq!(p.echo_ident(), 0x1234);
        assert_eq!(p.echo_seq_no(), 1);
        assert_eq!(p.data(), b"abcd");
        assert!(p.verify_checksum());
        assert_eq!(
            Repr::parse(&p).unwrap(),
            Repr::EchoRequest {
                ident: 0x1234,
                seq_no: 1,
                data_len: 4
            }
        );
    }

    #[test]
    fn emit() {
        let mut buf = [0u8; 12];
        buf[8..].copy_from_slice(b"abcd");
        let repr = Repr::EchoRequest {
            ident: 0x1234,
            seq_no: 1,
            data_len: 4,
        };
        assert_eq!(repr.buffer_len(), 12);
        repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, ECHO);
    }

    #[test]
    fn time_exceeded_round_trip() {
        let mut buf = [0xaau8; 36];
        let repr = Repr::TimeExceeded {
            code: 0,
            data_len: 28,
        };
        repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[..8], &[11, 0, buf[2], buf[3], 0, 0, 0, 0]);
        assert_eq!(Repr::parse(&Packet::new_unchecked(&buf[..])).unwrap(), repr);
    }

    #[test]
    fn rejects() {
        assert_eq!(
            Packet::new_checked(&ECHO[..7]).unwrap_err(),
            Error::Truncated
        );
        let mut bad = ECHO;
        bad[11] ^= 0x10;
        let p = Packet::new_checked(&bad[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap_err(), Error::Checksum);
    }
}
