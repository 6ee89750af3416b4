//! Host names as the dataplane routes on them: validated, lowercased, stored inline.
//!
//! Both first-payload parsers ([`super::tls`] for the ClientHello's `server_name`,
//! [`super::http`] for the `Host` header or an absolute request target) hand out a name in
//! one of the forms here, so the host matcher (`tables::hosts`) and the control plane's
//! `explain` see the same thing whichever protocol carried it.
//!
//! A [`HostName`] is a fixed-capacity, inline copy (at most [`MAX_NAME_LEN`] bytes): the
//! parsers lowercase while copying, so every later comparison is a plain byte comparison and
//! nothing is allocated.
//!
//! ## What counts as a DNS name here
//!
//! [`HostName::parse`] accepts the preferred name syntax of RFC 1034 §3.5 as relaxed by
//! RFC 1123 §2.1, with two deliberate leniencies that real clients need:
//!
//! - labels of letters, digits, `-` and `_` (underscores appear in real internal names and
//!   browsers send them; Gateway API patterns cannot contain them, so such a name can only
//!   reach a catch-all route);
//! - one trailing dot (an absolute name, `example.com.`) is removed: it names the same host.
//!
//! Every label is 1..=63 bytes and does not start or end with `-`; the whole name is
//! 1..=253 bytes (without the trailing dot); the last label is not all digits, so that a
//! name can never be mistaken for an IPv4 address (`127.1`, `1.2.3`). IP literals are
//! recognised separately by [`NameKind::classify`].

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The longest DNS name in its text form, without a trailing dot (RFC 1035 §2.3.4 allows
/// 255 octets on the wire, i.e. 253 characters of text).
pub const MAX_NAME_LEN: usize = 253;

/// The longest label of a DNS name (RFC 1035 §2.3.4).
pub const MAX_LABEL_LEN: usize = 63;

/// Why a byte string is not a DNS name (see the [module docs](self) for the rules).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NameError {
    /// The name is empty (or is a lone `.`).
    Empty,
    /// The name is longer than [`MAX_NAME_LEN`] bytes.
    TooLong,
    /// Two dots in a row, or a leading dot.
    EmptyLabel,
    /// A label is longer than [`MAX_LABEL_LEN`] bytes.
    LabelTooLong,
    /// A label starts or ends with `-`.
    HyphenAtLabelEdge,
    /// A byte that is not a letter, a digit, `-`, `_` or `.`; holds the byte.
    InvalidByte(u8),
    /// The last label is all digits: the name would read as a (non-standard) IPv4 address.
    NumericLastLabel,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::Empty => f.write_str("empty name"),
            NameError::TooLong => write!(f, "name longer than {MAX_NAME_LEN} bytes"),
            NameError::EmptyLabel => f.write_str("empty label"),
            NameError::LabelTooLong => write!(f, "label longer than {MAX_LABEL_LEN} bytes"),
            NameError::HyphenAtLabelEdge => f.write_str("label starts or ends with '-'"),
            NameError::InvalidByte(b) => write!(f, "invalid byte 0x{b:02x} in name"),
            NameError::NumericLastLabel => f.write_str("last label is all digits"),
        }
    }
}

/// Bytes allowed in a DNS name, mapped to their lowercase form; 0 for the others.
const NAME_BYTE: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = match c {
            b'A'..=b'Z' => c.to_ascii_lowercase(),
            b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => c,
            _ => 0,
        };
        b += 1;
    }
    t
};

/// A validated DNS name, lowercased, stored inline (no allocation).
///
/// Invariant: 1..=[`MAX_NAME_LEN`] bytes, ASCII, lowercase, valid per the
/// [module docs](self), no trailing dot.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct HostName {
    len: u8,
    buf: [u8; MAX_NAME_LEN],
}

impl HostName {
    /// Validates `name` as a DNS name and returns its lowercased copy.
    ///
    /// One trailing dot is accepted and removed. Case is ignored.
    pub fn parse(name: &[u8]) -> Result<HostName, NameError> {
        let name = match name {
            [rest @ .., b'.'] if !rest.is_empty() => rest,
            [b'.'] | [] => return Err(NameError::Empty),
            _ => name,
        };
        if name.len() > MAX_NAME_LEN {
            return Err(NameError::TooLong);
        }
        let mut out = HostName {
            len: 0,
            buf: [0; MAX_NAME_LEN],
        };
        let mut label_len = 0usize;
        let mut label_all_digits = true;
        let mut prev = b'.';
        for (dst, &b) in out.buf.iter_mut().zip(name) {
            let lower = NAME_BYTE[usize::from(b)];
            if lower == 0 {
                return Err(NameError::InvalidByte(b));
            }
            if b == b'.' {
                if label_len == 0 {
                    return Err(NameError::EmptyLabel);
                }
                if prev == b'-' {
                    return Err(NameError::HyphenAtLabelEdge);
                }
                label_len = 0;
                label_all_digits = true;
            } else {
                if b == b'-' && label_len == 0 {
                    return Err(NameError::HyphenAtLabelEdge);
                }
                label_len += 1;
                if label_len > MAX_LABEL_LEN {
                    return Err(NameError::LabelTooLong);
                }
                label_all_digits &= b.is_ascii_digit();
            }
            *dst = lower;
            prev = b;
        }
        if label_len == 0 {
            // Only reachable with a trailing dot left after stripping one ("a..").
            return Err(NameError::EmptyLabel);
        }
        if prev == b'-' {
            return Err(NameError::HyphenAtLabelEdge);
        }
        if label_all_digits {
            return Err(NameError::NumericLastLabel);
        }
        // `name.len() <= MAX_NAME_LEN < 256` was checked above.
        out.len = name.len() as u8;
        Ok(out)
    }

    /// The name's bytes: lowercase ASCII, no trailing dot.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        // The bytes are ASCII by construction, so this never takes the fallback.
        core::str::from_utf8(self.as_bytes()).unwrap_or("")
    }

    /// Length in bytes (1..=[`MAX_NAME_LEN`]).
    #[allow(clippy::len_without_is_empty)] // never empty, by construction
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }
}

impl fmt::Debug for HostName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostName({:?})", self.as_str())
    }
}

impl fmt::Display for HostName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for HostName {
    fn eq(&self, other: &str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl PartialEq<&str> for HostName {
    fn eq(&self, other: &&str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

/// A host as a client named it: a DNS name or an IP address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(clippy::large_enum_variant)] // the name is inline by design: no allocation
pub enum Host {
    /// A DNS name, validated and lowercased.
    Dns(HostName),
    /// An IPv4 or IPv6 address literal.
    Ip(IpAddr),
}

impl Host {
    /// The DNS name, if this host is one.
    pub fn dns(&self) -> Option<&HostName> {
        match self {
            Host::Dns(name) => Some(name),
            Host::Ip(_) => None,
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Dns(name) => name.fmt(f),
            Host::Ip(IpAddr::V4(a)) => a.fmt(f),
            Host::Ip(IpAddr::V6(a)) => write!(f, "[{a}]"),
        }
    }
}

/// What a name-shaped byte string turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(clippy::large_enum_variant)] // the name is inline by design: no allocation
pub enum NameKind {
    /// A valid DNS name (lowercased).
    Dns(HostName),
    /// An IP address literal: dotted-quad IPv4, or IPv6 text with or without brackets.
    Ip(IpAddr),
    /// Neither: why it is not a DNS name.
    Invalid(NameError),
}

impl NameKind {
    /// Classifies `name`: an IP literal if it parses as one (dotted-quad IPv4 as
    /// `core::net` reads it, or IPv6 text, bracketed or not), else a DNS name if it is one,
    /// else why not.
    pub fn classify(name: &[u8]) -> NameKind {
        if let Some(ip) = parse_ip_literal(name) {
            return NameKind::Ip(ip);
        }
        match HostName::parse(name) {
            Ok(n) => NameKind::Dns(n),
            Err(e) => NameKind::Invalid(e),
        }
    }
}

/// Parses a dotted-quad IPv4 address or an IPv6 address (optionally in brackets).
pub fn parse_ip_literal(name: &[u8]) -> Option<IpAddr> {
    // Cheap rejections first: IPv4 text is digits and dots, IPv6 text has a colon.
    let v4_shaped = name.iter().all(|&b| b.is_ascii_digit() || b == b'.');
    if !v4_shaped && !name.contains(&b':') {
        return None;
    }
    let text = core::str::from_utf8(name).ok()?;
    if let Ok(v4) = text.parse::<Ipv4Addr>() {
        return Some(IpAddr::V4(v4));
    }
    let inner = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(text);
    inner.parse::<Ipv6Addr>().ok().map(IpAddr::V6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowercases_and_strips_one_trailing_dot() {
        let n = HostName::parse(b"WWW.Example.COM.").unwrap();
        assert_eq!(n.as_str(), "www.example.com");
        assert_eq!(n.len(), 15);
        assert_eq!(HostName::parse(b"a..").unwrap_err(), NameError::EmptyLabel);
        assert_eq!(HostName::parse(b".").unwrap_err(), NameError::Empty);
        assert_eq!(HostName::parse(b"").unwrap_err(), NameError::Empty);
    }

    #[test]
    fn rejects_what_is_not_a_dns_name() {
        let cases: &[(&[u8], NameError)] = &[
            (b".example.com", NameError::EmptyLabel),
            (b"a..b", NameError::EmptyLabel),
            (b"-a.com", NameError::HyphenAtLabelEdge),
            (b"a-.com", NameError::HyphenAtLabelEdge),
            (b"a.com-", NameError::HyphenAtLabelEdge),
            (b"a b.com", NameError::InvalidByte(b' ')),
            (b"*.example.com", NameError::InvalidByte(b'*')),
            (b"caf\xc3\xa9.fr", NameError::InvalidByte(0xc3)),
            (b"1.2.3", NameError::NumericLastLabel),
            (b"127.1", NameError::NumericLastLabel),
            (b"localhost:80", NameError::InvalidByte(b':')),
        ];
        for (input, want) in cases {
            assert_eq!(HostName::parse(input), Err(*want), "{input:?}");
        }
        let label64 = [b'a'; 64];
        assert_eq!(HostName::parse(&label64), Err(NameError::LabelTooLong));
        assert!(HostName::parse(&[b'a'; 63]).is_ok());
    }

    #[test]
    fn length_limits() {
        // 4 labels of 63 + 3 dots = 255 > 253; 63+1+63+1+63+1+61 = 253.
        let mut ok = Vec::new();
        for (i, n) in [63, 63, 63, 61].iter().enumerate() {
            if i > 0 {
                ok.push(b'.');
            }
            ok.extend(std::iter::repeat_n(b'x', *n));
        }
        assert_eq!(ok.len(), 253);
        assert_eq!(HostName::parse(&ok).unwrap().len(), 253);
        let mut dotted = ok.clone();
        dotted.push(b'.');
        assert_eq!(HostName::parse(&dotted).unwrap().len(), 253);
        ok.push(b'x');
        assert_eq!(HostName::parse(&ok), Err(NameError::TooLong));
    }

    #[test]
    fn underscores_and_digits() {
        assert_eq!(
            HostName::parse(b"_acme.Host-1.example").unwrap().as_str(),
            "_acme.host-1.example"
        );
        assert!(HostName::parse(b"1.2.3.com").is_ok());
        assert!(HostName::parse(b"123abc").is_ok());
    }

    #[test]
    fn classify_ip_literals() {
        assert_eq!(
            NameKind::classify(b"104.236.167.107"),
            NameKind::Ip("104.236.167.107".parse().unwrap())
        );
        assert_eq!(
            NameKind::classify(b"::1"),
            NameKind::Ip("::1".parse().unwrap())
        );
        assert_eq!(
            NameKind::classify(b"[2001:db8::1]"),
            NameKind::Ip("2001:db8::1".parse().unwrap())
        );
        assert_eq!(
            NameKind::classify(b"1.2.3.4.5"),
            NameKind::Invalid(NameError::NumericLastLabel)
        );
        match NameKind::classify(b"Example.org") {
            NameKind::Dns(n) => assert_eq!(n, "example.org"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn host_display() {
        let h = Host::Ip("::1".parse().unwrap());
        assert_eq!(h.to_string(), "[::1]");
        assert_eq!(h.dns(), None);
        let d = Host::Dns(HostName::parse(b"a.b").unwrap());
        assert_eq!(d.to_string(), "a.b");
        assert_eq!(d.dns().unwrap().as_str(), "a.b");
    }
}
