//! HTTP/1.x request-head parser: method, request target and the host to route on, from the
//! first bytes of a plain-text connection; plus the HTTP/2 prior-knowledge preface.
//!
//! [`parse`] takes the bytes received so far (a contiguous prefix of the stream) and says:
//! a request head ([`Outcome::Request`]), the HTTP/2 connection preface
//! ([`Outcome::H2Preface`], RFC 9113 §3.4: no host, routed as a connection without one),
//! not HTTP/1 ([`Outcome::NotHttp`]), a broken head ([`Outcome::Malformed`]), or "need more
//! bytes" ([`Outcome::NeedMore`]). It keeps no state between calls.
//!
//! ## Contract
//!
//! The same as [`super::tls`]: no panic, no allocation, no read outside the input; a single
//! left-to-right pass in which every verdict depends only on the bytes before the point
//! where it is decided, so verdicts are monotone (a longer prefix gives the same verdict)
//! and `NeedMore { at_least }` is a lower bound on the prefix length of any verdict. The
//! head (request line, header lines and the empty line) must end within the first
//! [`MAX_HEAD_LEN`] bytes, otherwise [`Malformed::TooLarge`].
//!
//! ## Syntax and semantics (RFC 9112, RFC 9110)
//!
//! - Request line `method SP request-target SP HTTP/1.x CRLF`; empty lines before it are
//!   skipped (RFC 9112 §2.2). Until `HTTP/` has been matched, any deviation means
//!   [`Outcome::NotHttp`]; after it, [`Outcome::Malformed`]. Versions `1.x` with `x >= 1`
//!   are treated as 1.1 (RFC 9110 §2.5); other major versions are
//!   [`Malformed::UnsupportedVersion`].
//! - Lines end in CRLF; a bare LF or CR is rejected (no lenient line endings: a router that
//!   reads a different head than the backend invites request smuggling). Obsolete line
//!   folding is rejected (RFC 9112 §5.2), as is whitespace between a field name and its
//!   colon (§5.1). Field values may hold HTAB, SP, visible ASCII and obs-text.
//! - The host: from the request target when it carries an authority (absolute-form
//!   `GET http://h:8080/x HTTP/1.1`, or authority-form for `CONNECT`), else from the `Host`
//!   header (field names are case-insensitive). As RFC 9112 §3.2 requires, an HTTP/1.1
//!   request without `Host`, with two `Host` lines, or with an invalid `Host` value is
//!   malformed, even when the target's authority is the one used. An empty `Host` value is
//!   legal and means no host. The port is stripped (and reported separately); names are
//!   lowercased; `[v6]` literals are recognised; a trailing dot is dropped (see
//!   [`HostName`]). Userinfo in an absolute target is rejected (RFC 9110 §4.2.4).

use core::fmt;

use super::name::{parse_ip_literal, Host, HostName, NameError};

/// The most bytes a request head may take (request line, header lines, empty line).
pub const MAX_HEAD_LEN: usize = 16 * 1024;

/// The HTTP/2 client connection preface (RFC 9113 §3.4).
pub const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The result of [`parse`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // by design: no heap allocation on the parse path
pub enum Outcome<'a> {
    /// The prefix is a plausible start of a request head but ends too early.
    NeedMore {
        /// No verdict is possible before the prefix has at least this many bytes.
        at_least: usize,
    },
    /// A complete, well-formed HTTP/1.x request head.
    Request(RequestHead<'a>),
    /// The HTTP/2 prior-knowledge preface: HTTP/2 without TLS, carrying no host here.
    H2Preface,
    /// The stream does not start with an HTTP/1.x request line.
    NotHttp,
    /// The stream starts like HTTP/1.x but the head is broken or too large.
    Malformed(Malformed),
}

/// Why a request head was rejected.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Malformed {
    /// The head does not end within the first [`MAX_HEAD_LEN`] bytes.
    TooLarge,
    /// `HTTP/` is not followed by `DIGIT "." DIGIT CRLF`.
    InvalidVersion,
    /// A version other than HTTP/1.x; holds the major and minor digits.
    UnsupportedVersion(u8, u8),
    /// The request target is not in origin, absolute, authority (for CONNECT only) or
    /// asterisk form.
    InvalidTarget,
    /// An absolute request target has userinfo (`user@host`).
    UserInfo,
    /// The authority in the request target is not a valid `host[:port]`.
    InvalidTargetHost(HostError),
    /// A line ends in a bare LF.
    BareLf,
    /// A CR not followed by LF.
    BareCr,
    /// A header line starts with whitespace (obsolete line folding).
    ObsFold,
    /// A field name is empty, is not a token, or is followed by whitespace before `:`.
    HeaderName,
    /// A field value holds a control character other than HTAB.
    HeaderValue,
    /// An HTTP/1.1 request without a `Host` header.
    MissingHost,
    /// More than one `Host` header line.
    DuplicateHost,
    /// The `Host` header value is not a valid `host[:port]`.
    InvalidHost(HostError),
}

/// Why a `host[:port]` is invalid.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HostError {
    /// No host before the port (or an empty authority in a request target).
    Empty,
    /// The host is not a DNS name or IPv4 address.
    Name(NameError),
    /// A `[...]` literal that is not an IPv6 address, or is not closed.
    IpLiteral,
    /// The port is not 1 to 5 digits or exceeds 65535.
    Port,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Malformed::TooLarge => write!(f, "request head larger than {MAX_HEAD_LEN} bytes"),
            Malformed::InvalidVersion => f.write_str("invalid HTTP version"),
            Malformed::UnsupportedVersion(a, b) => write!(f, "unsupported version HTTP/{a}.{b}"),
            Malformed::InvalidTarget => f.write_str("invalid request target"),
            Malformed::UserInfo => f.write_str("userinfo in request target"),
            Malformed::InvalidTargetHost(e) => write!(f, "invalid host in request target: {e}"),
            Malformed::BareLf => f.write_str("bare LF line ending"),
            Malformed::BareCr => f.write_str("CR not followed by LF"),
            Malformed::ObsFold => f.write_str("obsolete line folding"),
            Malformed::HeaderName => f.write_str("invalid header field name"),
            Malformed::HeaderValue => f.write_str("control character in header field value"),
            Malformed::MissingHost => f.write_str("HTTP/1.1 request without Host"),
            Malformed::DuplicateHost => f.write_str("more than one Host header"),
            Malformed::InvalidHost(e) => write!(f, "invalid Host header: {e}"),
        }
    }
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostError::Empty => f.write_str("empty host"),
            HostError::Name(e) => e.fmt(f),
            HostError::IpLiteral => f.write_str("invalid IPv6 literal"),
            HostError::Port => f.write_str("invalid port"),
        }
    }
}

/// The HTTP version of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Version {
    /// HTTP/1.0.
    Http10,
    /// HTTP/1.1 (and HTTP/1.x for x > 1, treated as 1.1).
    Http11,
}

/// The form of a request target (RFC 9112 §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TargetForm {
    /// `/path?query`.
    Origin,
    /// `scheme://authority/path?query`.
    Absolute,
    /// `host:port` (CONNECT).
    Authority,
    /// `*` (server-wide OPTIONS).
    Asterisk,
}

/// Where the routing host came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HostSource {
    /// The request target's authority (absolute- or authority-form).
    Target,
    /// The `Host` header.
    Header,
}

/// A parsed request head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHead<'a> {
    /// The method, as sent (methods are case-sensitive).
    pub method: &'a str,
    /// The request target, as sent.
    pub target: &'a str,
    /// The target's form.
    pub form: TargetForm,
    /// The path without the query: as sent for origin-form, the path part of an absolute
    /// target (`/` when empty), `*` for asterisk-form, empty for authority-form.
    pub path: &'a str,
    /// The protocol version.
    pub version: Version,
    /// The host to route on: lowercased, port stripped; `None` for an HTTP/1.0 request
    /// without `Host` or an empty `Host` value.
    pub host: Option<Host>,
    /// The port given with the host, if any.
    pub port: Option<u16>,
    /// Where [`RequestHead::host`] came from (`None` when there is no host).
    pub host_source: Option<HostSource>,
    /// The head's length in bytes, up to and including the empty line; the body (if any)
    /// starts here.
    pub len: usize,
}

impl RequestHead<'_> {
    /// The DNS name to route on, if the host is one (IP literals are not names).
    pub fn routing_name(&self) -> Option<&HostName> {
        self.host.as_ref().and_then(Host::dns)
    }
}

/// `tchar` of RFC 9110 §5.6.2.
fn is_tchar(b: u8) -> bool {
    matches!(b,
        b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_'
        | b'`' | b'|' | b'~' | b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z')
}

/// A verdict reached before the head is complete (a small [`Outcome`]).
enum Stop {
    NeedMore(usize),
    NotHttp,
    Malformed(Malformed),
}

/// The byte at `i`, or why there is none: past the cap, or not received yet.
fn byte(input: &[u8], i: usize) -> Result<u8, Stop> {
    if i >= MAX_HEAD_LEN {
        return Err(Stop::Malformed(Malformed::TooLarge));
    }
    input.get(i).copied().ok_or(Stop::NeedMore(i + 1))
}

/// ASCII bytes (checked by the scanner) as text.
fn ascii(bytes: &[u8]) -> &str {
    core::str::from_utf8(bytes).unwrap_or("")
}

/// Parses the start of a stream as an HTTP/1.x request head (see the [module docs](self)).
pub fn parse(input: &[u8]) -> Outcome<'_> {
    let n = input.len().min(H2_PREFACE.len());
    if input.get(..n) == H2_PREFACE.get(..n) {
        return if n == H2_PREFACE.len() {
            Outcome::H2Preface
        } else {
            Outcome::NeedMore {
                at_least: input.len() + 1,
            }
        };
    }
    match scan(input) {
        Ok(head) => Outcome::Request(head),
        Err(Stop::NeedMore(at_least)) => Outcome::NeedMore { at_least },
        Err(Stop::NotHttp) => Outcome::NotHttp,
        Err(Stop::Malformed(m)) => Outcome::Malformed(m),
    }
}

fn scan(input: &[u8]) -> Result<RequestHead<'_>, Stop> {
    use Malformed as M;
    let mut i = 0;
    // Empty lines before the request line (RFC 9112 §2.2).
    while byte(input, i)? == b'\r' {
        if byte(input, i + 1)? != b'\n' {
            return Err(Stop::NotHttp);
        }
        i += 2;
    }

    // method SP
    let method_start = i;
    loop {
        let b = byte(input, i)?;
        if is_tchar(b) {
            i += 1;
        } else if b == b' ' && i > method_start {
            break;
        } else {
            return Err(Stop::NotHttp);
        }
    }
    let method = input.get(method_start..i).unwrap_or_default();
    i += 1;

    // request-target SP: visible ASCII only.
    let target_start = i;
    loop {
        match byte(input, i)? {
            0x21..=0x7e => i += 1,
            b' ' if i > target_start => break,
            _ => return Err(Stop::NotHttp),
        }
    }
    let target = input.get(target_start..i).unwrap_or_default();
    i += 1;

    // HTTP-version CRLF
    for &want in b"HTTP/" {
        if byte(input, i)? != want {
            return Err(Stop::NotHttp);
        }
        i += 1;
    }
    let major = byte(input, i)?;
    let dot = byte(input, i + 1)?;
    if !major.is_ascii_digit() || dot != b'.' {
        return Err(Stop::Malformed(M::InvalidVersion));
    }
    let minor = byte(input, i + 2)?;
    if !minor.is_ascii_digit() {
        return Err(Stop::Malformed(M::InvalidVersion));
    }
    let (major, minor) = (major - b'0', minor - b'0');
    if major != 1 {
        return Err(Stop::Malformed(M::UnsupportedVersion(major, minor)));
    }
    let version = if minor == 0 {
        Version::Http10
    } else {
        Version::Http11
    };
    i += 3;
    end_of_line(input, &mut i, M::InvalidVersion)?;

    // Header lines.
    let mut host_header: Option<Option<(Host, Option<u16>)>> = None;
    loop {
        let b = byte(input, i)?;
        if b == b'\r' || b == b'\n' {
            end_of_line(input, &mut i, M::BareCr)?;
            break;
        }
        if b == b' ' || b == b'\t' {
            return Err(Stop::Malformed(M::ObsFold));
        }
        let name_start = i;
        loop {
            let b = byte(input, i)?;
            if is_tchar(b) {
                i += 1;
            } else if b == b':' && i > name_start {
                break;
            } else {
                return Err(Stop::Malformed(M::HeaderName));
            }
        }
        let name = input.get(name_start..i).unwrap_or_default();
        i += 1;
        let value_start = i;
        loop {
            match byte(input, i)? {
                b'\r' | b'\n' => break,
                b'\t' | 0x20..=0x7e | 0x80..=0xff => i += 1,
                _ => return Err(Stop::Malformed(M::HeaderValue)),
            }
        }
        let value = input.get(value_start..i).unwrap_or_default();
        end_of_line(input, &mut i, M::BareCr)?;
        if name.eq_ignore_ascii_case(b"host") {
            if host_header.is_some() {
                return Err(Stop::Malformed(M::DuplicateHost));
            }
            let value = trim_ows(value);
            let parsed = if value.is_empty() {
                None
            } else {
                Some(parse_authority(value).map_err(|e| Stop::Malformed(M::InvalidHost(e)))?)
            };
            host_header = Some(parsed);
        }
    }
    let len = i;

    // The target's form, and its authority if it has one.
    let (form, path, target_authority) = classify_target(method, target)?;
    if version == Version::Http11 && host_header.is_none() {
        return Err(Stop::Malformed(M::MissingHost));
    }
    let (host, port, host_source) = match (target_authority, host_header.flatten()) {
        (Some((h, p)), _) => (Some(h), p, Some(HostSource::Target)),
        (None, Some((h, p))) => (Some(h), p, Some(HostSource::Header)),
        (None, None) => (None, None, None),
    };
    Ok(RequestHead {
        method: ascii(method),
        target: ascii(target),
        form,
        path,
        version,
        host,
        port,
        host_source,
        len,
    })
}

/// Expects CRLF at `*i` and steps over it; a bare LF is [`Malformed::BareLf`], a CR
/// followed by anything else is [`Malformed::BareCr`], any other byte is `other`.
fn end_of_line(input: &[u8], i: &mut usize, other: Malformed) -> Result<(), Stop> {
    match byte(input, *i)? {
        b'\r' => {
            if byte(input, *i + 1)? != b'\n' {
                return Err(Stop::Malformed(Malformed::BareCr));
            }
            *i += 2;
            Ok(())
        }
        b'\n' => Err(Stop::Malformed(Malformed::BareLf)),
        _ => Err(Stop::Malformed(other)),
    }
}

fn trim_ows(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

type Authority = (Host, Option<u16>);

/// The target's form, path, and authority (absolute- and authority-form only).
fn classify_target<'a>(
    method: &[u8],
    target: &'a [u8],
) -> Result<(TargetForm, &'a str, Option<Authority>), Stop> {
    use Malformed as M;
    if method == b"CONNECT" {
        // authority-form: uri-host ":" port, port required (RFC 9110 §9.3.6).
        if target.contains(&b'@') {
            return Err(Stop::Malformed(M::UserInfo));
        }
        let auth = parse_authority(target).map_err(|e| Stop::Malformed(M::InvalidTargetHost(e)))?;
        if auth.1.is_none() {
            return Err(Stop::Malformed(M::InvalidTargetHost(HostError::Port)));
        }
        return Ok((TargetForm::Authority, "", Some(auth)));
    }
    if target == b"*" {
        return Ok((TargetForm::Asterisk, "*", None));
    }
    if target.first() == Some(&b'/') {
        let path = target.split(|&b| b == b'?').next().unwrap_or_default();
        return Ok((TargetForm::Origin, ascii(path), None));
    }
    // absolute-form: scheme "://" authority path-abempty [ "?" query ]
    let Some(colon) = target.iter().position(|&b| b == b':') else {
        return Err(Stop::Malformed(M::InvalidTarget));
    };
    let (scheme, rest) = target.split_at(colon);
    let valid_scheme = matches!(scheme.first(), Some(b) if b.is_ascii_alphabetic())
        && scheme
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    let Some(rest) = rest.strip_prefix(b"://") else {
        return Err(Stop::Malformed(M::InvalidTarget));
    };
    if !valid_scheme {
        return Err(Stop::Malformed(M::InvalidTarget));
    }
    let auth_end = rest
        .iter()
        .position(|&b| matches!(b, b'/' | b'?' | b'#'))
        .unwrap_or(rest.len());
    let (authority, after) = rest.split_at(auth_end);
    if authority.contains(&b'@') {
        return Err(Stop::Malformed(M::UserInfo));
    }
    let auth = parse_authority(authority).map_err(|e| Stop::Malformed(M::InvalidTargetHost(e)))?;
    let path = after
        .split(|&b| b == b'?' || b == b'#')
        .next()
        .unwrap_or_default();
    let path = if path.is_empty() { "/" } else { ascii(path) };
    Ok((TargetForm::Absolute, path, Some(auth)))
}

/// Parses `host [":" port]` where host is a DNS name, an IPv4 address or `[IPv6]`.
pub fn parse_authority(a: &[u8]) -> Result<(Host, Option<u16>), HostError> {
    let (host, port) = if let Some(inner) = a.strip_prefix(b"[") {
        let close = inner
            .iter()
            .position(|&b| b == b']')
            .ok_or(HostError::IpLiteral)?;
        let (literal, after) = inner.split_at(close);
        let after = after.get(1..).unwrap_or_default();
        let port = match after {
            [] => None,
            [b':', port @ ..] => Some(port),
            _ => return Err(HostError::IpLiteral),
        };
        let ip = core::str::from_utf8(literal)
            .ok()
            .and_then(|t| t.parse::<core::net::Ipv6Addr>().ok())
            .ok_or(HostError::IpLiteral)?;
        (Host::Ip(core::net::IpAddr::V6(ip)), port)
    } else {
        let (name, port) = match a.iter().position(|&b| b == b':') {
            Some(c) => (a.get(..c).unwrap_or_default(), a.get(c + 1..)),
            None => (a, None),
        };
        if name.is_empty() {
            return Err(HostError::Empty);
        }
        let host = match parse_ip_literal(name) {
            Some(ip @ core::net::IpAddr::V4(_)) => Host::Ip(ip),
            _ => Host::Dns(HostName::parse(name).map_err(HostError::Name)?),
        };
        (host, port)
    };
    let port = match port {
        None | Some([]) => None,
        Some(digits) => Some(parse_port(digits)?),
    };
    Ok((host, port))
}

fn parse_port(digits: &[u8]) -> Result<u16, HostError> {
    if digits.len() > 5 {
        return Err(HostError::Port);
    }
    let mut v: u32 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return Err(HostError::Port);
        }
        v = v * 10 + u32::from(d - b'0');
    }
    u16::try_from(v).map_err(|_| HostError::Port)
}
