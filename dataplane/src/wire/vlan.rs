//! IEEE 802.1Q VLAN tags: the four bytes after the outer EtherType `0x8100`.

use super::be;
use super::error::{Error, Result};
use super::ethernet::EtherType;

mod field {
    pub const TCI: usize = 0;
    pub const ETHERTYPE: usize = 2;
    pub const PAYLOAD: usize = 4;
}

/// Length of a VLAN tag (TCI + inner EtherType).
pub const HEADER_LEN: usize = field::PAYLOAD;

/// A view of a VLAN tag followed by its payload.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer, checking the tag fits.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Err(Truncated)` unless the tag fits.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Priority code point (3 bits).
    pub fn pcp(&self) -> u8 {
        (be::u16(self.buffer.as_ref(), field::TCI) >> 13) as u8
    }

    /// Drop eligible indicator.
    pub fn dei(&self) -> bool {
        be::u16(self.buffer.as_ref(), field::TCI) & 0x1000 != 0
    }

    /// VLAN identifier (12 bits).
    pub fn vid(&self) -> u16 {
        be::u16(self.buffer.as_ref(), field::TCI) & 0x0fff
    }

    /// The inner EtherType.
    pub fn ethertype(&self) -> EtherType {
        EtherType::from(be::u16(self.buffer.as_ref(), field::ETHERTYPE))
    }

    /// Bytes after the tag.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets PCP, DEI and VID at once.
    pub fn set_tci(&mut self, pcp: u8, dei: bool, vid: u16) {
        let tci = (u16::from(pcp & 7) << 13) | (u16::from(dei) << 12) | (vid & 0x0fff);
        be::set_u16(self.buffer.as_mut(), field::TCI, tci);
    }

    /// Sets the inner EtherType.
    pub fn set_ethertype(&mut self, t: EtherType) {
        be::set_u16(self.buffer.as_mut(), field::ETHERTYPE, t.into());
    }
}

/// The meaning of a VLAN tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Priority code point.
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN id.
    pub vid: u16,
    /// Inner EtherType.
    pub ethertype: EtherType,
}

impl Repr {
    /// Reads a tag.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        p.check_len()?;
        Ok(Repr {
            pcp: p.pcp(),
            dei: p.dei(),
            vid: p.vid(),
            ethertype: p.ethertype(),
        })
    }

    /// Writes a tag.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_tci(self.pcp, self.dei, self.vid);
        p.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static TAG: [u8; 6] = [0xb0, 0x64, 0x86, 0xdd, 0x60, 0x00];

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&TAG[..]).unwrap();
        assert_eq!(p.pcp(), 5);
        assert!(p.dei());
        assert_eq!(p.vid(), 100);
        assert_eq!(p.ethertype(), EtherType::Ipv6);
        assert_eq!(p.payload(), &[0x60, 0x00]);
    }

    #[test]
    fn emit() {
        let mut buf = [0u8; 4];
        let repr = Repr {
            pcp: 5,
            dei: true,
            vid: 100,
            ethertype: EtherType::Ipv6,
        };
        repr.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, TAG[..4]);
        assert_eq!(Repr::parse(&Packet::new_unchecked(&TAG[..])).unwrap(), repr);
        assert_eq!(
            Packet::new_checked(&TAG[..3]).unwrap_err(),
            Error::Truncated
        );
    }
}
