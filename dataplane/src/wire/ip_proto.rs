//! IP protocol numbers (the IPv4 `protocol` / IPv6 `next header` field).

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
