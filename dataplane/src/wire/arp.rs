//! ARP (RFC 826) for Ethernet and IPv4.

use super::be;
use super::error::{Error, Result};
use super::ethernet::MacAddr;
use std::net::Ipv4Addr;

mod field {
    use core::ops::Range;
    pub const HTYPE: usize = 0;
    pub const PTYPE: usize = 2;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: usize = 6;
    // Offsets below hold for Ethernet/IPv4 (hlen 6, plen 4), the only kind parsed.
    pub const SHA: Range<usize> = 8..14;
    pub const SPA: Range<usize> = 14..18;
    pub const THA: Range<usize> = 18..24;
    pub const TPA: Range<usize> = 24..28;
}

/// Length of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = 28;

/// ARP operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Who has `target_protocol_addr`?
    Request,
    /// `source_protocol_addr` is at `source_hardware_addr`.
    Reply,
    /// Any other operation code.
    Unknown(u16),
}

impl From<u16> for Operation {
    fn from(v: u16) -> Self {
        match v {
            1 => Operation::Request,
            2 => Operation::Reply,
            o => Operation::Unknown(o),
        }
    }
}

impl From<Operation> for u16 {
    fn from(v: Operation) -> u16 {
        match v {
            Operation::Request => 1,
            Operation::Reply => 2,
            Operation::Unknown(o) => o,
        }
    }
}

/// A view of an ARP packet.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer, checking the fixed header and the address fields its lengths name.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Err(Truncated)` unless the fixed part, the four addresses its lengths name, and
    /// the 28 bytes of the Ethernet/IPv4 layout fit.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < field::OPER + 2 {
            return Err(Error::Truncated);
        }
        let need = 8 + 2 * (usize::from(b[field::HLEN]) + usize::from(b[field::PLEN]));
        // The address accessors read the Ethernet/IPv4 layout, so 28 bytes are required
        // whatever the lengths say.
        if b.len() < need.max(PACKET_LEN) {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Hardware type (1 = Ethernet).
    pub fn hardware_type(&self) -> u16 {
        be::u16(self.buffer.as_ref(), field::HTYPE)
    }
    /// Protocol type (0x0800 = IPv4).
    pub fn protocol_type(&self) -> u16 {
        be::u16(self.buffer.as_ref(), field::PTYPE)
    }
    /// Hardware address length.
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }
    /// Protocol address length.
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }
    /// Operation.
    pub fn operation(&self) -> Operation {
        Operation::from(be::u16(self.buffer.as_ref(), field::OPER))
    }
    /// Whether this is Ethernet/IPv4 (the only kind whose addresses the accessors read).
    pub fn is_ethernet_ipv4(&self) -> bool {
        self.hardware_type() == 1
            && self.protocol_type() == 0x0800
            && self.hardware_len() == 6
            && self.protocol_len() == 4
    }
    /// Sender hardware address (Ethernet/IPv4 layout).
    pub fn source_hardware_addr(&self) -> MacAddr {
        MacAddr::from_bytes(&self.buffer.as_ref()[field::SHA])
    }
    /// Sender protocol address (Ethernet/IPv4 layout).
    pub fn source_protocol_addr(&self) -> Ipv4Addr {
        ipv4_at(self.buffer.as_ref(), field::SPA.start)
    }
    /// Target hardware address (Ethernet/IPv4 layout).
    pub fn target_hardware_addr(&self) -> MacAddr {
        MacAddr::from_bytes(&self.buffer.as_ref()[field::THA])
    }
    /// Target protocol address (Ethernet/IPv4 layout).
    pub fn target_protocol_addr(&self) -> Ipv4Addr {
        ipv4_at(self.buffer.as_ref(), field::TPA.start)
    }
}

fn ipv4_at(b: &[u8], at: usize) -> Ipv4Addr {
    Ipv4Addr::new(b[at], b[at + 1], b[at + 2], b[at + 3])
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes the Ethernet/IPv4 fixed fields and the operation.
    pub fn set_ethernet_ipv4(&mut self, op: Operation) {
        let b = self.buffer.as_mut();
        be::set_u16(b, field::HTYPE, 1);
        be::set_u16(b, field::PTYPE, 0x0800);
        b[field::HLEN] = 6;
        b[field::PLEN] = 4;
        be::set_u16(b, field::OPER, op.into());
    }
    /// Sets the sender hardware address.
    pub fn set_source_hardware_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[field::SHA].copy_from_slice(&a.0);
    }
    /// Sets the sender protocol address.
    pub fn set_source_protocol_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SPA].copy_from_slice(&a.octets());
    }
    /// Sets the target hardware address.
    pub fn set_target_hardware_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[field::THA].copy_from_slice(&a.0);
    }
    /// Sets the target protocol address.
    pub fn set_target_protocol_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::TPA].copy_from_slice(&a.octets());
    }
}

/// An Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Operation.
    pub operation: Operation,
    /// Sender MAC.
    pub source_hardware_addr: MacAddr,
    /// Sender IPv4 address.
    pub source_protocol_addr: Ipv4Addr,
    /// Target MAC (zero in requests).
    pub target_hardware_addr: MacAddr,
    /// Target IPv4 address.
    pub target_protocol_addr: Ipv4Addr,
}

impl Repr {
    /// Parses an Ethernet/IPv4 ARP packet; other kinds are `Unsupported`.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        p.check_len()?;
        if !p.is_ethernet_ipv4() {
            return Err(Error::Unsupported);
        }
        Ok(Repr {
            operation: p.operation(),
            source_hardware_addr: p.source_hardware_addr(),
            source_protocol_addr: p.source_protocol_addr(),
            target_hardware_addr: p.target_hardware_addr(),
            target_protocol_addr: p.target_protocol_addr(),
        })
    }

    /// Length of the packet.
    pub const fn buffer_len(&self) -> usize {
        PACKET_LEN
    }

    /// Writes the packet (the buffer must hold [`PACKET_LEN`] bytes).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_ethernet_ipv4(self.operation);
        p.set_source_hardware_addr(self.source_hardware_addr);
        p.set_source_protocol_addr(self.source_protocol_addr);
        p.set_target_hardware_addr(self.target_hardware_addr);
        p.set_target_protocol_addr(self.target_protocol_addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static REQUEST: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, // eth/ipv4, request
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 10, 77, 0, 1, // sender
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 10, 77, 0, 2, // target
    ];

    fn repr() -> Repr {
        Repr {
            operation: Operation::Request,
            source_hardware_addr: MacAddr([2, 0, 0, 0, 0, 1]),
            source_protocol_addr: Ipv4Addr::new(10, 77, 0, 1),
            target_hardware_addr: MacAddr::ZERO,
            target_protocol_addr: Ipv4Addr::new(10, 77, 0, 2),
        }
    }

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&REQUEST[..]).unwrap();
        assert!(p.is_ethernet_ipv4());
        assert_eq!(p.operation(), Operation::Request);
        assert_eq!(p.source_protocol_addr(), Ipv4Addr::new(10, 77, 0, 1));
        assert_eq!(p.target_protocol_addr(), Ipv4Addr::new(10, 77, 0, 2));
        assert_eq!(Repr::parse(&p).unwrap(), repr());
    }

    #[test]
    fn emit() {
        let mut buf = [0xffu8; 28];
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, REQUEST);
    }

    #[test]
    fn rejects_short_and_foreign() {
        assert_eq!(
            Packet::new_checked(&REQUEST[..27]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Packet::new_checked(&REQUEST[..5]).unwrap_err(),
            Error::Truncated
        );
        let mut other = REQUEST;
        other[2] = 0x86; // protocol type IPv6
        other[3] = 0xdd;
        let p = Packet::new_checked(&other[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap_err(), Error::Unsupported);
        // Lengths that claim longer addresses than the buffer holds.
        let mut long = REQUEST;
        long[4] = 16;
        assert_eq!(
            Packet::new_checked(&long[..]).unwrap_err(),
            Error::Truncated
        );
    }
}
