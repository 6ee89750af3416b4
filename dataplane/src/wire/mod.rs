//! Wire formats: zero-copy packet views (`Packet<T: AsRef<[u8]>>`) and their reprs.
//!
//! Every format follows one pattern (smoltcp's `wire`):
//!
//! - a **view** (`Packet<T>` or, for ethernet, `Frame<T>`) wraps a byte buffer and reads or
//!   writes header fields at the byte ranges named in its private `mod field`. A view never
//!   copies and never casts bytes to a header struct.
//! - a **repr** (`Repr`) is the validated meaning of a header: `Repr::parse(&view)` checks
//!   what the view cannot (versions, lengths, checksums where asked) and `Repr::emit` writes
//!   it back into a view.
//!
//! ## The no-panic contract
//!
//! `Packet::new_unchecked` wraps any buffer; its accessors may panic when the buffer is too
//! short. `Packet::new_checked` (= `new_unchecked` + `check_len`) returns
//! [`Error::Truncated`] unless every fixed field *and* every length field the accessors rely
//! on (header length, total length, options) fits the buffer; after it succeeds, no accessor
//! of that view panics, whatever the bytes are. The dataplane only ever builds views with
//! `new_checked` on packets from the network, so a malformed packet is a counted drop,
//! never a panic.
//!
//! Emitting into a view created by `new_unchecked` is the caller's business: the buffer
//! must be at least `Repr::buffer_len()` (or `header_len()`) long.

pub mod arp;
pub mod checksum;
pub mod ethernet;
pub mod icmpv4;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
pub mod tcp;
pub mod udp;
pub mod vlan;

pub use ethernet::{EtherType, MacAddr};

use core::fmt;

/// Why a buffer is not a valid packet of some format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Error {
    /// The buffer is shorter than the header or than a length field says.
    Truncated,
    /// A field holds a value the format does not allow (version, header length, ...).
    Malformed,
    /// The checksum does not match the contents.
    Checksum,
    /// A valid packet of a kind this code does not handle (an ARP for another protocol, an
    /// unknown ICMP type for a repr, ...).
    Unsupported,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::Truncated => "truncated packet",
            Error::Malformed => "malformed packet",
            Error::Checksum => "bad checksum",
            Error::Unsupported => "unsupported packet",
        })
    }
}

impl std::error::Error for Error {}

/// The result of parsing a wire format.
pub type Result<T> = core::result::Result<T, Error>;

/// IP protocol numbers (the IPv4 `protocol` / IPv6 `next header` field).
pub mod ip_proto {
    /// ICMP for IPv4.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// ICMP for IPv6.
    pub const ICMPV6: u8 = 58;
    /// IPv6 hop-by-hop options.
    pub const HOPOPTS: u8 = 0;
    /// No next header (IPv6).
    pub const NONE: u8 = 59;
}

/// Big-endian reads and writes that the views share. Callers guarantee the range fits.
pub(crate) mod be {
    #[inline]
    pub fn u16(b: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([b[at], b[at + 1]])
    }
    #[inline]
    pub fn u32(b: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }
    #[inline]
    pub fn set_u16(b: &mut [u8], at: usize, v: u16) {
        b[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
    #[inline]
    pub fn set_u32(b: &mut [u8], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
}
