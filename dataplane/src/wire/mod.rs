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
pub(crate) mod be;
pub mod checksum;
mod error;
pub mod ethernet;
pub mod icmpv4;
pub mod icmpv6;
pub mod ip_proto;
pub mod ipv4;
pub mod ipv6;
pub mod tcp;
pub mod udp;
pub mod vlan;

pub use error::{Error, Result};
pub use ethernet::{EtherType, MacAddr};
