//! Request and response heads: `httparse` reads the syntax (strict settings), then this
//! module adds what it leaves out (bare LF, request-target forms, `Host`, version
//! classes) and derives framing, persistence and upgrade from the header fields.

use core::mem::MaybeUninit;

use super::{
    Framing, HeadError, Parse, RequestHead, ResponseHead, Version, MAX_HEADERS, MAX_HEAD_LEN,
};
use crate::tables::http::Header;

/// Parses the start of a client stream as a request head (see the [module docs](super)).
///
/// `headers` receives the header lines; the head borrows it (and `buf`). The array can be
/// reused for later calls on the same, unchanged buffer; over a buffer that changes
/// between calls, make it afresh for each call (`[EMPTY_HEADER; MAX_HEADERS]`). Errors map to a status with
/// [`HeadError::status`]: 400 for a malformed head, 431 for one too large, 501 for a
/// transfer coding other than `chunked`, 505 for a version other than 1.0 and 1.1.
pub fn parse_request<'b, 'h>(
    buf: &'b [u8],
    headers: &'h mut [Header<'b>; MAX_HEADERS],
) -> Parse<RequestHead<'h>> {
    let window = buf.get(..MAX_HEAD_LEN).unwrap_or(buf);
    let mut raw = [MaybeUninit::<httparse::Header<'b>>::uninit(); MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let len = match strict().parse_request_with_uninit_headers(&mut req, window, &mut raw) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return partial(window),
        Err(httparse::Error::TooManyHeaders) => return Parse::Error(HeadError::TooManyHeaders),
        Err(httparse::Error::Version) => return version_error(window, Side::Request),
        Err(_) => return Parse::Error(HeadError::Malformed),
    };
    let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return Parse::Error(HeadError::Malformed);
    };
    if has_bare_lf(window.get(..len).unwrap_or(window)) {
        return Parse::Error(HeadError::Malformed);
    }
    let version = if minor == 0 {
        Version::Http10
    } else {
        Version::Http11
    };
    let n = copy_headers(req.headers, headers);
    let headers: &'h [Header<'h>] = headers.get(..n).unwrap_or_default();
    match request(method, target, version, headers, len) {
        Ok(head) => Parse::Done(head),
        Err(e) => Parse::Error(e),
    }
}

/// Parses the start of a backend stream as a response head to a request with
/// `request_method` (see the [module docs](super)).
///
/// An error means the backend's response cannot be forwarded safely: the proxy closes
/// the backend connection and answers the client 502 (RFC 9112 §6.3), whatever
/// [`HeadError::status`] says.
pub fn parse_response<'b, 'h>(
    buf: &'b [u8],
    request_method: &str,
    headers: &'h mut [Header<'b>; MAX_HEADERS],
) -> Parse<ResponseHead<'h>> {
    let window = buf.get(..MAX_HEAD_LEN).unwrap_or(buf);
    let mut raw = [MaybeUninit::<httparse::Header<'b>>::uninit(); MAX_HEADERS];
    let mut res = httparse::Response::new(&mut []);
    let len = match strict().parse_response_with_uninit_headers(&mut res, window, &mut raw) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return partial(window),
        Err(httparse::Error::TooManyHeaders) => return Parse::Error(HeadError::TooManyHeaders),
        Err(httparse::Error::Version) => return version_error(window, Side::Response),
        Err(_) => return Parse::Error(HeadError::Malformed),
    };
    let (Some(status), Some(minor)) = (res.code, res.version) else {
        return Parse::Error(HeadError::Malformed);
    };
    if has_bare_lf(window.get(..len).unwrap_or(window)) || !(100..=599).contains(&status) {
        return Parse::Error(HeadError::Malformed);
    }
    let version = if minor == 0 {
        Version::Http10
    } else {
        Version::Http11
    };
    let reason = res.reason.unwrap_or("");
    let n = copy_headers(res.headers, headers);
    let headers: &'h [Header<'h>] = headers.get(..n).unwrap_or_default();
    match response(status, reason, version, headers, len, request_method) {
        Ok(head) => Parse::Done(head),
        Err(e) => Parse::Error(e),
    }
}

/// httparse with every lenient option off (its default, spelled out here): no spaces
/// before a colon, no obsolete line folding, single spaces in the start line, no invalid
/// header lines skipped.
fn strict() -> httparse::ParserConfig {
    let mut config = httparse::ParserConfig::default();
    config
        .allow_spaces_after_header_name_in_responses(false)
        .allow_obsolete_multiline_headers_in_responses(false)
        .allow_multiple_spaces_in_request_line_delimiters(false)
        .allow_multiple_spaces_in_response_status_delimiters(false)
        .allow_space_before_first_header_name(false)
        .ignore_invalid_headers_in_responses(false)
        .ignore_invalid_headers_in_requests(false);
    config
}

/// `Partial`, or `TooLarge` when the window already holds the whole allowance.
fn partial<T>(window: &[u8]) -> Parse<T> {
    if window.len() >= MAX_HEAD_LEN {
        Parse::Error(HeadError::TooLarge)
    } else {
        Parse::Partial
    }
}

fn copy_headers<'b>(from: &[httparse::Header<'b>], to: &mut [Header<'b>]) -> usize {
    let mut n = 0;
    for (src, dst) in from.iter().zip(to.iter_mut()) {
        *dst = Header {
            name: src.name,
            value: trim_ows(src.value),
        };
        n += 1;
    }
    n
}

/// Whether an LF is not preceded by CR (httparse accepts bare LF line endings).
fn has_bare_lf(head: &[u8]) -> bool {
    let mut prev = 0u8;
    for &b in head {
        if b == b'\n' && prev != b'\r' {
            return true;
        }
        prev = b;
    }
    false
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Request,
    Response,
}

/// Classifies a version httparse rejected: `HTTP/` DIGIT `.` DIGIT in its place is a
/// well-formed but unsupported version (505); anything else is malformed. `Partial` when
/// the version has not been received in full yet.
fn version_error<T>(window: &[u8], side: Side) -> Parse<T> {
    // Skip the empty lines httparse skips, then (request) the method and target.
    let mut rest = window;
    while let Some(r) = rest.strip_prefix(b"\r\n") {
        rest = r;
    }
    if side == Side::Request {
        for _ in 0..2 {
            match rest.iter().position(|&b| b == b' ') {
                Some(sp) => rest = rest.get(sp + 1..).unwrap_or_default(),
                None => return partial(window),
            }
        }
    }
    let end = if side == Side::Request { b'\r' } else { b' ' };
    let pattern = |i: usize, b: u8| match i {
        0..=4 => b == b"HTTP/".get(i).copied().unwrap_or(0),
        5 | 7 => b.is_ascii_digit(),
        6 => b == b'.',
        _ => b == end,
    };
    for i in 0..9 {
        match rest.get(i) {
            None => return partial(window),
            Some(&b) if !pattern(i, b) => return Parse::Error(HeadError::Malformed),
            Some(_) => {}
        }
    }
    Parse::Error(HeadError::UnsupportedVersion)
}

/// What the header fields say about a message, gathered in one pass.
#[derive(Default)]
struct Fields<'a> {
    hosts: usize,
    host: &'a [u8],
    content_length: Option<u64>,
    te: Te,
    conn_close: bool,
    conn_keep_alive: bool,
    conn_upgrade: bool,
    upgrade_header: bool,
    expect_continue: bool,
}

/// The transfer codings of every `Transfer-Encoding` line, in order.
#[derive(Default)]
struct Te {
    present: bool,
    /// The last coding seen is `chunked`.
    last_chunked: bool,
    /// `chunked` appears before another coding (applied twice, or not last).
    chunked_not_last: bool,
    /// A coding other than `chunked` appears.
    other: bool,
}

fn fields<'a>(headers: &[Header<'a>]) -> Result<Fields<'a>, HeadError> {
    let mut f = Fields::default();
    for h in headers {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"host") {
            f.hosts += 1;
            f.host = h.value;
        } else if name.eq_ignore_ascii_case(b"content-length") {
            for element in h.value.split(|&b| b == b',') {
                let n = parse_decimal(trim_ows(element)).ok_or(HeadError::BadFraming)?;
                if f.content_length.is_some_and(|m| m != n) {
                    return Err(HeadError::BadFraming);
                }
                f.content_length = Some(n);
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            f.te.present = true;
            for coding in list(h.value) {
                if f.te.last_chunked {
                    f.te.chunked_not_last = true;
                }
                f.te.last_chunked = coding.eq_ignore_ascii_case(b"chunked");
                f.te.other |= !f.te.last_chunked;
            }
        } else if name.eq_ignore_ascii_case(b"connection") {
            for option in list(h.value) {
                f.conn_close |= option.eq_ignore_ascii_case(b"close");
                f.conn_keep_alive |= option.eq_ignore_ascii_case(b"keep-alive");
                f.conn_upgrade |= option.eq_ignore_ascii_case(b"upgrade");
            }
        } else if name.eq_ignore_ascii_case(b"upgrade") {
            f.upgrade_header = true;
        } else if name.eq_ignore_ascii_case(b"expect") {
            f.expect_continue |= h.value.eq_ignore_ascii_case(b"100-continue");
        }
    }
    Ok(f)
}

impl Fields<'_> {
    fn keep_alive(&self, version: Version) -> bool {
        !self.conn_close && (version == Version::Http11 || self.conn_keep_alive)
    }

    /// Framing checks common to both directions: CL with TE, TE in HTTP/1.0, no coding,
    /// `chunked` twice or not last.
    fn check_te(&self, version: Version) -> Result<(), HeadError> {
        if !self.te.present {
            return Ok(());
        }
        let no_coding = !self.te.last_chunked && !self.te.other;
        if self.content_length.is_some()
            || version == Version::Http10
            || no_coding
            || self.te.chunked_not_last
        {
            return Err(HeadError::BadFraming);
        }
        Ok(())
    }
}

fn request<'a>(
    method: &'a str,
    target: &'a str,
    version: Version,
    headers: &'a [Header<'a>],
    len: usize,
) -> Result<RequestHead<'a>, HeadError> {
    let t = classify_target(method, target).ok_or(HeadError::Malformed)?;
    let f = fields(headers)?;
    // RFC 9112 §3.2: a missing (HTTP/1.1), repeated or invalid Host is a 400, even when
    // the target's authority is the one used.
    if f.hosts > 1 || (f.hosts == 0 && version == Version::Http11) {
        return Err(HeadError::Malformed);
    }
    if !f.host.is_empty() && !valid_authority(f.host, false) {
        return Err(HeadError::Malformed);
    }
    let authority = match t.authority {
        Some(a) => a,
        None => core::str::from_utf8(f.host).map_err(|_| HeadError::Malformed)?,
    };
    f.check_te(version)?;
    let framing = if f.te.present {
        // RFC 9112 §6.3 (4): a request whose final coding is not chunked cannot be
        // delimited (checked above); other codings before it are not supported.
        if !f.te.last_chunked {
            return Err(HeadError::BadFraming);
        }
        if f.te.other {
            return Err(HeadError::UnsupportedTransferCoding);
        }
        Framing::Chunked
    } else {
        match f.content_length {
            Some(n) => Framing::Length(n),
            None => Framing::None,
        }
    };
    let http11 = version == Version::Http11;
    Ok(RequestHead {
        method,
        target,
        path: t.path,
        query: t.query,
        version,
        authority,
        headers,
        len,
        framing,
        content_length: f.content_length,
        keep_alive: f.keep_alive(version),
        expect_continue: http11 && f.expect_continue,
        upgrade: http11 && f.conn_upgrade && f.upgrade_header,
    })
}

fn response<'a>(
    status: u16,
    reason: &'a str,
    version: Version,
    headers: &'a [Header<'a>],
    len: usize,
    request_method: &str,
) -> Result<ResponseHead<'a>, HeadError> {
    let f = fields(headers)?;
    f.check_te(version)?;
    let framing = if request_method == "HEAD" || matches!(status, 100..=199 | 204 | 304) {
        Framing::None
    } else if request_method == "CONNECT" && (200..=299).contains(&status) {
        Framing::UntilClose
    } else if f.te.present {
        if f.te.last_chunked {
            Framing::Chunked
        } else {
            Framing::UntilClose
        }
    } else {
        match f.content_length {
            Some(n) => Framing::Length(n),
            None => Framing::UntilClose,
        }
    };
    let upgrade = status == 101;
    Ok(ResponseHead {
        status,
        reason,
        version,
        headers,
        len,
        framing,
        content_length: f.content_length,
        keep_alive: f.keep_alive(version) && framing != Framing::UntilClose && !upgrade,
        upgrade,
    })
}

/// The parts of a request target (RFC 9112 §3.2).
pub(crate) struct Target<'a> {
    pub(crate) path: &'a str,
    pub(crate) query: &'a str,
    /// The authority of an absolute-form or authority-form target.
    pub(crate) authority: Option<&'a str>,
}

/// Splits a target in origin form, absolute form (`http` or `https`), authority form
/// (`CONNECT` only, port required) or asterisk form (`OPTIONS` only); `None` for any
/// other target, for a fragment, and for bytes outside visible ASCII.
pub(crate) fn classify_target<'a>(method: &str, target: &'a str) -> Option<Target<'a>> {
    if target.is_empty()
        || !target
            .bytes()
            .all(|b| matches!(b, 0x21..=0x7e) && b != b'#')
    {
        return None;
    }
    if method == "CONNECT" {
        let valid = valid_authority(target.as_bytes(), true);
        return valid.then_some(Target {
            path: "/",
            query: "",
            authority: Some(target),
        });
    }
    if target == "*" {
        return (method == "OPTIONS").then_some(Target {
            path: "/",
            query: "",
            authority: None,
        });
    }
    if target.starts_with('/') {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        return Some(Target {
            path,
            query,
            authority: None,
        });
    }
    let (scheme, rest) = target.split_once("://")?;
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return None;
    }
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, rest) = rest.split_at_checked(end)?;
    if authority.is_empty() || !valid_authority(authority.as_bytes(), false) {
        return None;
    }
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    Some(Target {
        path: if path.is_empty() { "/" } else { path },
        query,
        authority: Some(authority),
    })
}

/// `uri-host [":" port]` (RFC 9110 §4.2.3, RFC 3986 §3.2.2): a non-empty reg-name or IPv4
/// address, or an IP literal in brackets; a port of at most five digits up to 65535
/// (`port_required`: present and non-empty). Userinfo is not allowed.
pub(crate) fn valid_authority(a: &[u8], port_required: bool) -> bool {
    let (host_ok, port) = if let Some(inner) = a.strip_prefix(b"[") {
        let Some(close) = inner.iter().position(|&b| b == b']') else {
            return false;
        };
        let (literal, after) = inner.split_at(close);
        let ok = !literal.is_empty()
            && literal
                .iter()
                .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
        let port = match after.get(1..).unwrap_or_default() {
            [] => None,
            [b':', port @ ..] => Some(port),
            _ => return false,
        };
        (ok, port)
    } else {
        let (host, port) = match a.iter().position(|&b| b == b':') {
            Some(c) => (a.get(..c).unwrap_or_default(), a.get(c + 1..)),
            None => (a, None),
        };
        (!host.is_empty() && valid_reg_name(host), port)
    };
    let port_ok = match port {
        None => !port_required,
        Some([]) => !port_required,
        Some(p) => p.len() <= 5 && parse_decimal(p).is_some_and(|n| n <= 65535),
    };
    host_ok && port_ok
}

/// `*( unreserved / pct-encoded / sub-delims )`.
fn valid_reg_name(host: &[u8]) -> bool {
    let mut i = 0;
    while let Some(&b) = host.get(i) {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {}
            b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'=' => {}
            b'%' => {
                let hex = |j: usize| host.get(j).is_some_and(u8::is_ascii_hexdigit);
                if !hex(i + 1) || !hex(i + 2) {
                    return false;
                }
                i += 2;
            }
            _ => return false,
        }
        i += 1;
    }
    true
}

/// `1*DIGIT` as a `u64`; `None` when empty, not digits, or too large.
pub(crate) fn parse_decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(n)
}

/// The non-empty elements of a comma-separated list, trimmed (RFC 9110 §5.6.1: empty
/// elements are ignored).
pub(crate) fn list(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(trim_ows)
        .filter(|e| !e.is_empty())
}

/// Strips spaces and tabs from both ends.
pub(crate) fn trim_ows(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}
