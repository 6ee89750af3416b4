//! ICMPv6 (RFC 4443) with Neighbor Discovery (RFC 4861): echo, errors, neighbour
//! solicitation and advertisement with their link-layer address options.

use super::error::{Error, Result};
use super::ethernet::MacAddr;
use super::{be, checksum, ip_proto};
use std::net::Ipv6Addr;

mod field {
    use core::ops::Range;
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: usize = 2;
    pub const ECHO_IDENT: usize = 4;
    pub const ECHO_SEQNO: usize = 6;
    pub const DATA: usize = 8;
    pub const NA_FLAGS: usize = 4;
    pub const ND_TARGET: Range<usize> = 8..24;
    pub const ND_OPTIONS: usize = 24;
}

/// Length of the ICMPv6 header.
pub const HEADER_LEN: usize = field::DATA;
/// Length of a neighbour solicitation/advertisement before its options.
pub const ND_LEN: usize = field::ND_OPTIONS;
/// Length of a link-layer address option for Ethernet.
pub const LL_OPTION_LEN: usize = 8;

/// ICMPv6 message types sluice knows.
pub mod msg_type {
    /// Destination unreachable.
    pub const DST_UNREACHABLE: u8 = 1;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 3;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 128;
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 129;
    /// Neighbor solicitation.
    pub const NEIGHBOR_SOLICIT: u8 = 135;
    /// Neighbor advertisement.
    pub const NEIGHBOR_ADVERT: u8 = 136;
}

/// NDP option types.
pub mod nd_option {
    /// Source link-layer address.
    pub const SOURCE_LL_ADDR: u8 = 1;
    /// Target link-layer address.
    pub const TARGET_LL_ADDR: u8 = 2;
}

/// Neighbour advertisement flags.
pub mod na_flags {
    /// Router.
    pub const ROUTER: u8 = 0x80;
    /// Solicited.
    pub const SOLICITED: u8 = 0x40;
    /// Override.
    pub const OVERRIDE: u8 = 0x20;
}

/// A view of an ICMPv6 message.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer, checking the header (and for NS/NA the target address) fits.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Err(Truncated)` unless the 8-byte header fits, and for neighbour solicitations
    /// and advertisements the 24 bytes up to the options.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if self.is_neighbor_discovery() && b.len() < ND_LEN {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Whether this is a neighbour solicitation or advertisement.
    pub fn is_neighbor_discovery(&self) -> bool {
        matches!(
            self.msg_type(),
            msg_type::NEIGHBOR_SOLICIT | msg_type::NEIGHBOR_ADVERT
        )
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
    /// Bytes after the 8-byte header.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA..]
    }
    /// Neighbour advertisement flags (router, solicited, override).
    pub fn na_flags(&self) -> u8 {
        self.buffer.as_ref()[field::NA_FLAGS]
    }
    /// Target address of a neighbour solicitation or advertisement.
    pub fn nd_target(&self) -> Ipv6Addr {
        let mut o = [0u8; 16];
        o.copy_from_slice(&self.buffer.as_ref()[field::ND_TARGET]);
        Ipv6Addr::from(o)
    }
    /// The options of a neighbour solicitation or advertisement.
    pub fn nd_options(&self) -> NdOptions<'_> {
        let b = self.buffer.as_ref();
        NdOptions {
            rest: b.get(field::ND_OPTIONS..).unwrap_or(&[]),
        }
    }
    /// The link-layer address carried in an option of the given type, if any.
    /// `Err(Malformed)` for an option of length zero or overrunning the message
    /// (RFC 4861 §4.6: such a packet is discarded).
    pub fn nd_link_layer_addr(&self, option: u8) -> Result<Option<MacAddr>> {
        for opt in self.nd_options() {
            let (t, body) = opt?;
            if t == option && body.len() >= 6 {
                return Ok(Some(MacAddr::from_bytes(body)));
            }
        }
        Ok(None)
    }
    /// Whether the checksum (with the IPv6 pseudo-header) is correct.
    pub fn verify_checksum(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        let b = self.buffer.as_ref();
        let ph = checksum::pseudo_header_v6(src, dst, ip_proto::ICMPV6, b.len() as u32);
        checksum::combine(&[ph, checksum::data(b)]) == 0xffff
    }
}

/// Iterator over NDP options: `(type, body after the 2-byte type/length)`.
#[derive(Debug, Clone)]
pub struct NdOptions<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for NdOptions<'a> {
    type Item = Result<(u8, &'a [u8])>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        if self.rest.len() < 2 {
            self.rest = &[];
            return Some(Err(Error::Truncated));
        }
        let len = usize::from(self.rest[1]) * 8;
        if len == 0 || len > self.rest.len() {
            self.rest = &[];
            return Some(Err(Error::Malformed));
        }
        let (opt, rest) = self.rest.split_at(len);
        self.rest = rest;
        Some(Ok((opt[0], &opt[2..])))
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
    /// Sets the 4 bytes after the checksum (NA flags + reserved, or the error's field).
    pub fn set_rest_of_header(&mut self, v: u32) {
        be::set_u32(self.buffer.as_mut(), 4, v);
    }
    /// Sets the NS/NA target address.
    pub fn set_nd_target(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::ND_TARGET].copy_from_slice(&a.octets());
    }
    /// Writes a link-layer address option at the start of the options.
    pub fn set_nd_link_layer_option(&mut self, option: u8, mac: MacAddr) {
        let b = &mut self.buffer.as_mut()[field::ND_OPTIONS..field::ND_OPTIONS + 8];
        b[0] = option;
        b[1] = 1;
        b[2..8].copy_from_slice(&mac.0);
    }
    /// Mutable data after the header.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA..]
    }
    /// Computes and stores the checksum (with the IPv6 pseudo-header).
    pub fn fill_checksum(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let ph = checksum::pseudo_header_v6(src, dst, ip_proto::ICMPV6, b.len() as u32);
        let c = !checksum::combine(&[ph, checksum::data(b)]);
        self.set_checksum(c);
    }
}

/// The ICMPv6 messages sluice reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repr {
    /// Echo request.
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
    /// Neighbour solicitation.
    NeighborSolicit {
        /// The address being resolved.
        target: Ipv6Addr,
        /// The sender's link-layer address (absent in DAD probes).
        source_ll: Option<MacAddr>,
    },
    /// Neighbour advertisement.
    NeighborAdvert {
        /// Router/solicited/override flags ([`na_flags`]).
        flags: u8,
        /// The address advertised.
        target: Ipv6Addr,
        /// The target's link-layer address.
        target_ll: Option<MacAddr>,
    },
    /// Time exceeded (code 0: hop limit exceeded in transit), quoting `data_len` bytes.
    TimeExceeded {
        /// Code.
        code: u8,
        /// Length of the quoted packet.
        data_len: usize,
    },
    /// Destination unreachable, quoting `data_len` bytes.
    DstUnreachable {
        /// Code.
        code: u8,
        /// Length of the quoted packet.
        data_len: usize,
    },
}

impl Repr {
    /// Parses a message, verifying the checksum against the pseudo-header.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>, src: Ipv6Addr, dst: Ipv6Addr) -> Result<Repr> {
        p.check_len()?;
        if !p.verify_checksum(src, dst) {
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
            (msg_type::NEIGHBOR_SOLICIT, 0) => Repr::NeighborSolicit {
                target: p.nd_target(),
                source_ll: p.nd_link_layer_addr(nd_option::SOURCE_LL_ADDR)?,
            },
            (msg_type::NEIGHBOR_ADVERT, 0) => Repr::NeighborAdvert {
                flags: p.na_flags(),
                target: p.nd_target(),
                target_ll: p.nd_link_layer_addr(nd_option::TARGET_LL_ADDR)?,
            },
            (msg_type::TIME_EXCEEDED, code) => Repr::TimeExceeded { code, data_len },
            (msg_type::DST_UNREACHABLE, code) => Repr::DstUnreachable { code, data_len },
            _ => return Err(Error::Unsupported),
        })
    }

    /// Total message length.
    pub fn buffer_len(&self) -> usize {
        match *self {
            Repr::EchoRequest { data_len, .. }
            | Repr::EchoReply { data_len, .. }
            | Repr::TimeExceeded { data_len, .. }
            | Repr::DstUnreachable { data_len, .. } => HEADER_LEN + data_len,
            Repr::NeighborSolicit { source_ll, .. } => {
                ND_LEN + source_ll.map_or(0, |_| LL_OPTION_LEN)
            }
            Repr::NeighborAdvert { target_ll, .. } => {
                ND_LEN + target_ll.map_or(0, |_| LL_OPTION_LEN)
            }
        }
    }

    /// Writes the message (echo/error data placed by the caller) and its checksum. The
    /// buffer must be exactly [`Repr::buffer_len`] long (the checksum covers all of it).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        p: &mut Packet<T>,
        src: Ipv6Addr,
        dst: Ipv6Addr,
    ) {
        match *self {
            Repr::EchoRequest { ident, seq_no, .. } => {
                p.set_type_code(msg_type::ECHO_REQUEST, 0);
                p.set_echo_ident(ident);
                p.set_echo_seq_no(seq_no);
            }
            Repr::EchoReply { ident, seq_no, .. } => {
                p.set_type_code(msg_type::ECHO_REPLY, 0);
                p.set_echo_ident(ident);
                p.set_echo_seq_no(seq_no);
            }
            Repr::NeighborSolicit { target, source_ll } => {
                p.set_type_code(msg_type::NEIGHBOR_SOLICIT, 0);
                p.set_rest_of_header(0);
                p.set_nd_target(target);
                if let Some(mac) = source_ll {
                    p.set_nd_link_layer_option(nd_option::SOURCE_LL_ADDR, mac);
                }
            }
            Repr::NeighborAdvert {
                flags,
                target,
                target_ll,
            } => {
                p.set_type_code(msg_type::NEIGHBOR_ADVERT, 0);
                p.set_rest_of_header(u32::from(flags) << 24);
                p.set_nd_target(target);
                if let Some(mac) = target_ll {
                    p.set_nd_link_layer_option(nd_option::TARGET_LL_ADDR, mac);
                }
            }
            Repr::TimeExceeded { code, .. } => {
                p.set_type_code(msg_type::TIME_EXCEEDED, code);
                p.set_rest_of_header(0);
            }
            Repr::DstUnreachable { code, .. } => {
                p.set_type_code(msg_type::DST_UNREACHABLE, code);
                p.set_rest_of_header(0);
            }
        }
        p.fill_checksum(src, dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src() -> Ipv6Addr {
        "fe80::1".parse().unwrap()
    }
    fn dst() -> Ipv6Addr {
        "ff02::1:ff00:2".parse().unwrap()
    }

    // Neighbour solicitation for fd77::2 from fe80::1 (02:00:00:00:00:01).
    static NS: [u8; 32] = [
        0x87, 0x00, 0x7b, 0xa0, 0x00, 0x00, 0x00, 0x00, // type, code, checksum, reserved
        0xfd, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, // target
        0x01, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // source link-layer option
    ];

    fn ns_repr() -> Repr {
        Repr::NeighborSolicit {
            target: "fd77::2".parse().unwrap(),
            source_ll: Some(MacAddr([2, 0, 0, 0, 0, 1])),
        }
    }

    #[test]
    fn deconstruct_ns() {
        let p = Packet::new_checked(&NS[..]).unwrap();
        assert_eq!(p.msg_type(), msg_type::NEIGHBOR_SOLICIT);
        assert_eq!(p.nd_target(), "fd77::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(
            p.nd_link_layer_addr(nd_option::SOURCE_LL_ADDR).unwrap(),
            Some(MacAddr([2, 0, 0, 0, 0, 1]))
        );
        assert!(p.verify_checksum(src(), dst()));
        assert_eq!(Repr::parse(&p, src(), dst()).unwrap(), ns_repr());
    }

    #[test]
    fn emit_ns() {
        let mut buf = [0u8; 32];
        let r = ns_repr();
        assert_eq!(r.buffer_len(), 32);
        r.emit(&mut Packet::new_unchecked(&mut buf[..]), src(), dst());
        assert_eq!(buf, NS);
    }

    #[test]
    fn na_round_trip() {
        let r = Repr::NeighborAdvert {
            flags: na_flags::SOLICITED | na_flags::OVERRIDE,
            target: "fd77::2".parse().unwrap(),
            target_ll: Some(MacAddr([2, 0, 0, 0, 0, 2])),
        };
        let mut buf = [0u8; 32];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]), src(), dst());
        assert_eq!(&buf[..8], &[0x88, 0, buf[2], buf[3], 0x60, 0, 0, 0]);
        assert_eq!(&buf[24..], &[2, 1, 2, 0, 0, 0, 0, 2]);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Repr::parse(&p, src(), dst()).unwrap(), r);
    }

    #[test]
    fn echo_round_trip() {
        let r = Repr::EchoRequest {
            ident: 7,
            seq_no: 9,
            data_len: 2,
        };
        let mut buf = [0u8; 10];
        buf[8..].copy_from_slice(b"hi");
        r.emit(&mut Packet::new_unchecked(&mut buf[..]), src(), dst());
        assert_eq!(&buf[..2], &[128, 0]);
        assert_eq!(&buf[4..], &[0, 7, 0, 9, b'h', b'i']);
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Repr::parse(&p, src(), dst()).unwrap(), r);
        // Same bytes, different pseudo-header: the checksum no longer matches.
        assert_eq!(
            Repr::parse(&p, dst(), "fd77::9".parse().unwrap()).unwrap_err(),
            Error::Checksum
        );
    }

    #[test]
    fn rejects_bad_options_and_short() {
        assert_eq!(
            Packet::new_checked(&NS[..20]).unwrap_err(),
            Error::Truncated
        );
        let mut bad = NS;
        bad[25] = 0; // option length zero
        let p = Packet::new_checked(&bad[..]).unwrap();
        assert_eq!(
            p.nd_link_layer_addr(nd_option::SOURCE_LL_ADDR).unwrap_err(),
            Error::Malformed
        );
        let mut bad = NS;
        bad[25] = 2; // option runs past the end
        let p = Packet::new_checked(&bad[..]).unwrap();
        assert!(p.nd_link_layer_addr(nd_option::SOURCE_LL_ADDR).is_err());
    }
}
