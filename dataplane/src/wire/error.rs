//! The one error of every wire format: why a buffer is not a valid packet.

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
