//! Ethernet II frames (IEEE 802.3 with an EtherType).

use super::be;
use super::error::{Error, Result};
use core::fmt;

/// A 48-bit MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// `ff:ff:ff:ff:ff:ff`.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
    /// `00:00:00:00:00:00`.
    pub const ZERO: MacAddr = MacAddr([0; 6]);

    /// Reads an address from the first six bytes of `b`. Panics if `b` is shorter.
    pub fn from_bytes(b: &[u8]) -> MacAddr {
        let mut a = [0; 6];
        a.copy_from_slice(&b[..6]);
        MacAddr(a)
    }

    /// The address bytes.
    pub const fn as_bytes(&self) -> &[u8; 6] {
        &self.0
    }

    /// Whether this is the broadcast address.
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }

    /// Whether the group bit is set (multicast, broadcast included).
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 != 0
    }

    /// Whether this is a unicast address (group bit clear).
    pub fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }

    /// The IPv6 multicast MAC for a multicast IPv6 address (RFC 2464 §7: `33:33` + the low
    /// 32 bits).
    pub fn ipv6_multicast(addr: std::net::Ipv6Addr) -> MacAddr {
        let o = addr.octets();
        MacAddr([0x33, 0x33, o[12], o[13], o[14], o[15]])
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl core::str::FromStr for MacAddr {
    type Err = Error;
    fn from_str(s: &str) -> Result<MacAddr> {
        let mut out = [0u8; 6];
        let mut n = 0;
        for part in s.split([':', '-']) {
            if n == 6 || part.len() != 2 {
                return Err(Error::Malformed);
            }
            out[n] = u8::from_str_radix(part, 16).map_err(|_| Error::Malformed)?;
            n += 1;
        }
        if n != 6 {
            return Err(Error::Malformed);
        }
        Ok(MacAddr(out))
    }
}

/// EtherType values sluice handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EtherType {
    /// IPv4, `0x0800`.
    Ipv4,
    /// ARP, `0x0806`.
    Arp,
    /// IEEE 802.1Q VLAN tag, `0x8100`.
    Vlan,
    /// IPv6, `0x86dd`.
    Ipv6,
    /// Anything else.
    Unknown(u16),
}

impl From<u16> for EtherType {
    fn from(v: u16) -> Self {
        match v {
            0x0800 => EtherType::Ipv4,
            0x0806 => EtherType::Arp,
            0x8100 => EtherType::Vlan,
            0x86dd => EtherType::Ipv6,
            other => EtherType::Unknown(other),
        }
    }
}

impl From<EtherType> for u16 {
    fn from(v: EtherType) -> u16 {
        match v {
            EtherType::Ipv4 => 0x0800,
            EtherType::Arp => 0x0806,
            EtherType::Vlan => 0x8100,
            EtherType::Ipv6 => 0x86dd,
            EtherType::Unknown(other) => other,
        }
    }
}

mod field {
    use core::ops::Range;
    pub const DST: Range<usize> = 0..6;
    pub const SRC: Range<usize> = 6..12;
    pub const ETHERTYPE: usize = 12;
    pub const PAYLOAD: usize = 14;
}

/// Length of an untagged Ethernet header.
pub const HEADER_LEN: usize = field::PAYLOAD;

/// A view of an Ethernet II frame.
#[derive(Debug, Clone)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    /// Wraps a buffer, checking it holds a whole header.
    pub fn new_checked(buffer: T) -> Result<Frame<T>> {
        let f = Self::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// `Err(Truncated)` unless the header fits.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Destination address.
    pub fn dst_addr(&self) -> MacAddr {
        MacAddr::from_bytes(&self.buffer.as_ref()[field::DST])
    }

    /// Source address.
    pub fn src_addr(&self) -> MacAddr {
        MacAddr::from_bytes(&self.buffer.as_ref()[field::SRC])
    }

    /// EtherType (of the outer header; `Vlan` when tagged).
    pub fn ethertype(&self) -> EtherType {
        EtherType::from(be::u16(self.buffer.as_ref(), field::ETHERTYPE))
    }

    /// Bytes after the 14-byte header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.0);
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.0);
    }

    /// Sets the EtherType.
    pub fn set_ethertype(&mut self, t: EtherType) {
        be::set_u16(self.buffer.as_mut(), field::ETHERTYPE, t.into());
    }

    /// Mutable bytes after the header.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

/// The meaning of an Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Source address.
    pub src_addr: MacAddr,
    /// Destination address.
    pub dst_addr: MacAddr,
    /// EtherType.
    pub ethertype: EtherType,
}

impl Repr {
    /// Reads the header of a checked frame.
    pub fn parse<T: AsRef<[u8]>>(frame: &Frame<T>) -> Result<Repr> {
        frame.check_len()?;
        Ok(Repr {
            src_addr: frame.src_addr(),
            dst_addr: frame.dst_addr(),
            ethertype: frame.ethertype(),
        })
    }

    /// Header length.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut Frame<T>) {
        frame.set_src_addr(self.src_addr);
        frame.set_dst_addr(self.dst_addr);
        frame.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static FRAME: [u8; 18] = [
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, // dst
        0x11, 0x12, 0x13, 0x14, 0x15, 0x16, // src
        0x08, 0x00, // IPv4
        0xaa, 0xbb, 0xcc, 0xdd, // payload
    ];

    #[test]
    fn deconstruct() {
        let f = Frame::new_checked(&FRAME[..]).unwrap();
        assert_eq!(f.dst_addr(), MacAddr([1, 2, 3, 4, 5, 6]));
        assert_eq!(f.src_addr(), MacAddr([0x11, 0x12, 0x13, 0x14, 0x15, 0x16]));
        assert_eq!(f.ethertype(), EtherType::Ipv4);
        assert_eq!(f.payload(), &[0xaa, 0xbb, 0xcc, 0xdd]);
    }

    #[test]
    fn construct_and_emit() {
        let mut buf = [0u8; 18];
        let repr = Repr {
            dst_addr: MacAddr([1, 2, 3, 4, 5, 6]),
            src_addr: MacAddr([0x11, 0x12, 0x13, 0x14, 0x15, 0x16]),
            ethertype: EtherType::Ipv4,
        };
        let mut f = Frame::new_unchecked(&mut buf[..]);
        repr.emit(&mut f);
        f.payload_mut().copy_from_slice(&[0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!(buf, FRAME);
        assert_eq!(
            Repr::parse(&Frame::new_unchecked(&FRAME[..])).unwrap(),
            repr
        );
    }

    #[test]
    fn truncated() {
        assert_eq!(
            Frame::new_checked(&FRAME[..13]).unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn mac_parse_and_flags() {
        let m: MacAddr = "02:00:5e:10:00:01".parse().unwrap();
        assert_eq!(m, MacAddr([2, 0, 0x5e, 0x10, 0, 1]));
        assert_eq!(m.to_string(), "02:00:5e:10:00:01");
        assert!(m.is_unicast());
        assert!(MacAddr::BROADCAST.is_multicast());
        assert!("02:00:5e:10:00".parse::<MacAddr>().is_err());
        assert!("02:00:5e:10:00:01:02".parse::<MacAddr>().is_err());
        assert_eq!(
            MacAddr::ipv6_multicast("ff02::1:ff00:2".parse().unwrap()),
            MacAddr([0x33, 0x33, 0xff, 0, 0, 2])
        );
    }
}
