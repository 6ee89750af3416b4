//! The heads sluice sends: a request to the backend, a response to the client, and the
//! responses sluice makes itself. Each is written into the caller's buffer in one pass,
//! or not at all (`None`: the buffer is too small, or an edit is not valid syntax).
//!
//! Hop-by-hop fields (RFC 9110 §7.6.1) are dropped: `Connection`, `Keep-Alive`,
//! `Proxy-Connection`, `TE`, `Upgrade` (unless the connection is being upgraded) and every
//! field `Connection` names, except the ones the framing or routing depends on (`Host`,
//! `Content-Length`, `Transfer-Encoding`: a client naming them in `Connection` must not
//! make the proxy strip them and reframe the message). `Trailer` is kept. Repeated
//! `Content-Length` values (validated identical by the parser) are sent as one.
//!
//! [`HeaderOps`] are applied after the proxy's own changes: a line whose name is in
//! `remove` or `set` is dropped (names compared case-insensitively), then the `set` lines
//! and the `add` lines are appended. Ops naming `Host` or a framing or connection field
//! are ignored (the control plane rejects them; the authority has its own edit). An op,
//! path or authority that is not valid syntax (a CR or LF would split the head) makes
//! the writer return `None`.

use core::fmt::{self, Write as _};
use std::net::IpAddr;

use super::body::is_tchar;
use super::head::{list, valid_authority};
use super::{RequestHead, ResponseHead};
use crate::tables::http::{Header, HeaderOps};

/// What the proxy changes in a request on its way to the backend.
#[derive(Clone, Copy, Debug)]
pub struct RequestEdits<'a> {
    /// Replaces the path (an origin-form path without query); the original query is kept
    /// (appended as `?query`).
    pub path: Option<&'a str>,
    /// Replaces the `Host`.
    pub authority: Option<&'a str>,
    /// Applied after the proxy's own changes: `set` replaces every line of that name
    /// (case-insensitive), `add` appends, `remove` deletes.
    pub ops: &'a HeaderOps,
    /// Appended to `X-Forwarded-For` (`", "` joined), or sent as a new header.
    pub forwarded_for: IpAddr,
    /// `X-Forwarded-Proto` is set (replaced) to this.
    pub forwarded_proto: &'a str,
    /// Keep `Upgrade` and send `Connection: upgrade` (only when the request asks for an
    /// upgrade, [`RequestHead::upgrade`]).
    pub upgrade: bool,
    /// Send `Connection: close` (the backend closes after its response); ignored when
    /// upgrading.
    pub close: bool,
    /// The `X-Forwarded-Client-Cert` value of the connection's verified client
    /// certificate. Whatever XFCC the client sent is dropped either way (Istio's gateway
    /// default, `SANITIZE_SET`: a client cannot claim an identity).
    pub client_cert: Option<&'a str>,
}

/// Runs a head writer (`None` when the head does not fit) into `out` after its current
/// bytes: first into room for `estimate` bytes, then, if that was short, into room for
/// `max`; `out` keeps what was written, and the written length is returned. The room is
/// zeroed as it is made, so an estimate near the head's real size keeps a request's cost
/// near its head's (heads are small, the limits large).
pub fn append_head(
    out: &mut Vec<u8>,
    estimate: usize,
    max: usize,
    write: impl Fn(&mut [u8]) -> Option<usize>,
) -> Option<usize> {
    let at = out.len();
    for room in [estimate.min(max), max] {
        out.resize(at + room, 0);
        if let Some(n) = write(&mut out[at..]) {
            out.truncate(at + n);
            return Some(n);
        }
        if room >= max {
            break;
        }
    }
    out.truncate(at);
    None
}

/// Bytes `ops` may add to a head (an estimate for [`append_head`]).
pub fn ops_len(ops: &HeaderOps) -> usize {
    ops.set
        .iter()
        .chain(ops.add.iter())
        .map(|(n, v)| n.len() + v.len() + 4)
        .sum()
}

/// Writes the head to send to the backend: `METHOD SP origin-form SP HTTP/1.1 CRLF`, Host
/// first (the authority; absolute-form targets become origin-form), the other headers in
/// order minus hop-by-hop ones (Connection, Keep-Alive, Proxy-Connection, TE, Upgrade
/// unless `upgrade`, and every header named in Connection; Trailer is kept), then
/// `X-Forwarded-For`, `X-Forwarded-Proto`, `Connection: upgrade` and the ops' lines.
/// Transfer-Encoding and Content-Length are kept as received (the body is passed through
/// unchanged). An asterisk-form target stays `*` and a `CONNECT` target stays in
/// authority form unless `path` is edited. `head` must come from
/// [`parse_request`](super::parse_request) (its fields are not validated again).
///
/// `None` if it does not fit in `out` or an edit is not valid syntax.
pub fn write_request_head(
    out: &mut [u8],
    head: &RequestHead<'_>,
    edits: &RequestEdits<'_>,
) -> Option<usize> {
    let ops = edits.ops;
    if !valid_ops(ops)
        || !edits.path.is_none_or(valid_path)
        || !edits
            .authority
            .is_none_or(|a| !a.is_empty() && valid_authority(a.as_bytes(), false))
        || !valid_token(edits.forwarded_proto)
        || !edits
            .client_cert
            .is_none_or(|v| valid_field("x-forwarded-client-cert", v))
    {
        return None;
    }
    let upgrade = edits.upgrade && head.upgrade;
    let mut w = Cursor::new(out);

    // Request line.
    w.put(head.method);
    w.put(" ");
    match edits.path {
        Some(path) => {
            w.put(path);
            put_query(&mut w, head);
        }
        None if head.target == "*" || head.method == "CONNECT" => w.put(head.target),
        None => {
            w.put(head.path);
            put_query(&mut w, head);
        }
    }
    w.put(" HTTP/1.1\r\n");

    // Host first.
    let authority = edits.authority.unwrap_or(head.authority);
    if authority.is_empty() {
        w.put("Host:\r\n");
    } else {
        w.line("Host", authority.as_bytes());
    }

    let named = connection_names_extra(head.headers);
    let last_xff = head.headers.iter().rposition(|h| {
        h.name.eq_ignore_ascii_case("x-forwarded-for")
            && !(named && named_in_connection(h.name, head.headers))
    });
    let mut content_length_sent = false;
    for (i, h) in head.headers.iter().enumerate() {
        let name = h.name;
        if name.eq_ignore_ascii_case("host")
            || name.eq_ignore_ascii_case("x-forwarded-proto")
            || name.eq_ignore_ascii_case("x-forwarded-client-cert")
            || is_hop_by_hop(name, upgrade)
            || (named && named_in_connection(name, head.headers))
            || dropped_by(ops, name)
        {
            continue;
        }
        if name.eq_ignore_ascii_case("content-length") {
            if !content_length_sent {
                put_content_length(&mut w, head.content_length);
                content_length_sent = true;
            }
        } else if Some(i) == last_xff {
            w.put(name);
            w.put(": ");
            if !h.value.is_empty() {
                w.put_bytes(h.value);
                w.put(", ");
            }
            let _ = write!(w, "{}\r\n", edits.forwarded_for);
        } else {
            w.line(name, h.value);
        }
    }
    if last_xff.is_none() && !dropped_by(ops, "x-forwarded-for") {
        let _ = write!(w, "X-Forwarded-For: {}\r\n", edits.forwarded_for);
    }
    if !dropped_by(ops, "x-forwarded-proto") {
        w.line("X-Forwarded-Proto", edits.forwarded_proto.as_bytes());
    }
    if let Some(xfcc) = edits.client_cert {
        w.line("X-Forwarded-Client-Cert", xfcc.as_bytes());
    }
    if upgrade {
        w.put("Connection: upgrade\r\n");
    } else if edits.close {
        w.put("Connection: close\r\n");
    }
    put_ops(&mut w, ops);
    w.put("\r\n");
    w.finish()
}

/// The response head to send to the client: `HTTP/1.1 status reason` (the standard
/// reason when none was received), headers minus hop-by-hop (see the [module
/// docs](self)), `ops` applied, `Connection: close` added when `close`; for 101 the
/// `Upgrade` lines are kept and `Connection: upgrade` is sent (and `close` ignored).
/// `head` must come from [`parse_response`](super::parse_response).
///
/// The caller passes `close` when it will close the client connection after this
/// response: always when the body runs until close ([`Framing::UntilClose`]), and for an
/// HTTP/1.0 client (this writer does not add `Connection: keep-alive`).
///
/// `None` if it does not fit in `out` or an op is not valid syntax.
///
/// [`Framing::UntilClose`]: super::Framing::UntilClose
pub fn write_response_head(
    out: &mut [u8],
    head: &ResponseHead<'_>,
    ops: &HeaderOps,
    close: bool,
) -> Option<usize> {
    if !valid_ops(ops) {
        return None;
    }
    let mut w = Cursor::new(out);
    let reason = if head.reason.is_empty() {
        reason_phrase(head.status)
    } else {
        head.reason
    };
    let _ = write!(w, "HTTP/1.1 {:03} {reason}\r\n", head.status);
    let named = connection_names_extra(head.headers);
    let mut content_length_sent = false;
    for h in head.headers {
        let name = h.name;
        if is_hop_by_hop(name, head.upgrade)
            || (named && named_in_connection(name, head.headers))
            || dropped_by(ops, name)
        {
            continue;
        }
        if name.eq_ignore_ascii_case("content-length") {
            if !content_length_sent {
                put_content_length(&mut w, head.content_length);
                content_length_sent = true;
            }
        } else {
            w.line(name, h.value);
        }
    }
    put_ops(&mut w, ops);
    if head.upgrade {
        w.put("Connection: upgrade\r\n");
    } else if close {
        w.put("Connection: close\r\n");
    }
    w.put("\r\n");
    w.finish()
}

/// A response sluice makes itself: status line with the standard reason phrase, the extra
/// headers given, `Content-Length` (even 0), `Content-Type: text/plain` when the body is
/// not empty and `extra` has no content type, `Connection: close` when `close`, then the
/// body (none for a `HEAD` request: `head_request`, same headers).
///
/// As RFC 9110 §6.4.1 and §8.6 require, 1xx, 204 and 304 responses carry neither
/// `Content-Length` nor a body (`body` is ignored for them). No `Date` is added (the
/// codec has no clock): pass one in `extra` if wanted.
///
/// `None` if it does not fit in `out`, `status` is not 100 to 599, or `extra` holds an
/// invalid field or one this writer owns (`Content-Length`, `Transfer-Encoding`,
/// `Connection`).
pub fn write_local_response(
    out: &mut [u8],
    status: u16,
    extra: &[(&str, &str)],
    body: &[u8],
    head_request: bool,
    close: bool,
) -> Option<usize> {
    if !(100..=599).contains(&status) {
        return None;
    }
    let mut has_type = false;
    for &(name, value) in extra {
        if !valid_field(name, value)
            || ["content-length", "transfer-encoding", "connection"]
                .iter()
                .any(|o| name.eq_ignore_ascii_case(o))
        {
            return None;
        }
        has_type |= name.eq_ignore_ascii_case("content-type");
    }
    let bodiless = matches!(status, 100..=199 | 204 | 304);
    let mut w = Cursor::new(out);
    let _ = write!(w, "HTTP/1.1 {status} {}\r\n", reason_phrase(status));
    for &(name, value) in extra {
        w.line(name, value.as_bytes());
    }
    if !bodiless {
        let _ = write!(w, "Content-Length: {}\r\n", body.len());
        if !body.is_empty() && !has_type {
            w.put("Content-Type: text/plain\r\n");
        }
    }
    if close {
        w.put("Connection: close\r\n");
    }
    w.put("\r\n");
    if !bodiless && !head_request {
        w.put_bytes(body);
    }
    w.finish()
}

/// The reason phrase RFC 9110 §15 (and RFC 6585, RFC 8297) gives a status code; empty
/// for codes they do not define.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        103 => "Early Hints",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        305 => "Use Proxy",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

/// Writes into a buffer, remembering whether everything fitted.
struct Cursor<'a> {
    out: &'a mut [u8],
    pos: usize,
    ok: bool,
}

impl<'a> Cursor<'a> {
    fn new(out: &'a mut [u8]) -> Self {
        Cursor {
            out,
            pos: 0,
            ok: true,
        }
    }

    fn put_bytes(&mut self, bytes: &[u8]) {
        let end = self.pos.saturating_add(bytes.len());
        match self.out.get_mut(self.pos..end) {
            Some(dst) if self.ok => {
                dst.copy_from_slice(bytes);
                self.pos = end;
            }
            _ => self.ok = false,
        }
    }

    fn put(&mut self, s: &str) {
        self.put_bytes(s.as_bytes());
    }

    /// `name: value CRLF`.
    fn line(&mut self, name: &str, value: &[u8]) {
        self.put(name);
        self.put(": ");
        self.put_bytes(value);
        self.put("\r\n");
    }

    fn finish(self) -> Option<usize> {
        self.ok.then_some(self.pos)
    }
}

impl fmt::Write for Cursor<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.put(s);
        if self.ok {
            Ok(())
        } else {
            Err(fmt::Error)
        }
    }
}

fn put_query(w: &mut Cursor<'_>, head: &RequestHead<'_>) {
    if head.target.contains('?') {
        w.put("?");
        w.put(head.query);
    }
}

fn put_content_length(w: &mut Cursor<'_>, n: Option<u64>) {
    if let Some(n) = n {
        let _ = write!(w, "Content-Length: {n}\r\n");
    }
}

fn put_ops(w: &mut Cursor<'_>, ops: &HeaderOps) {
    for (name, value) in ops.set.iter().chain(ops.add.iter()) {
        if !is_reserved(name) {
            w.line(name, value.as_bytes());
        }
    }
}

/// Hop-by-hop by name (RFC 9110 §7.6.1); `Upgrade` only when not upgrading.
fn is_hop_by_hop(name: &str, upgrade: bool) -> bool {
    ["connection", "keep-alive", "proxy-connection", "te"]
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h))
        || (!upgrade && name.eq_ignore_ascii_case("upgrade"))
}

/// Fields the proxy owns: ops naming them are ignored, `Connection` cannot remove the
/// first three.
fn is_reserved(name: &str) -> bool {
    [
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "upgrade",
    ]
    .iter()
    .any(|r| name.eq_ignore_ascii_case(r))
}

/// Whether some `Connection` line lists an option other than the ones handled by name
/// (`close`, `keep-alive`, `upgrade`): only then must every header be checked against it.
fn connection_names_extra(headers: &[Header<'_>]) -> bool {
    connection_options(headers).any(|o| {
        !o.eq_ignore_ascii_case(b"close")
            && !o.eq_ignore_ascii_case(b"keep-alive")
            && !o.eq_ignore_ascii_case(b"upgrade")
    })
}

/// Whether `Connection` names this field (and it may be removed that way).
fn named_in_connection(name: &str, headers: &[Header<'_>]) -> bool {
    let protected = ["host", "content-length", "transfer-encoding"]
        .iter()
        .any(|p| name.eq_ignore_ascii_case(p));
    !protected && connection_options(headers).any(|o| o.eq_ignore_ascii_case(name.as_bytes()))
}

fn connection_options<'h>(headers: &'h [Header<'h>]) -> impl Iterator<Item = &'h [u8]> + 'h {
    headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("connection"))
        .flat_map(|h| list(h.value))
}

/// Whether `ops` removes or replaces lines named `name`.
fn dropped_by(ops: &HeaderOps, name: &str) -> bool {
    if is_reserved(name) {
        return false;
    }
    ops.remove.iter().any(|r| name.eq_ignore_ascii_case(r))
        || ops.set.iter().any(|(s, _)| name.eq_ignore_ascii_case(s))
}

fn valid_ops(ops: &HeaderOps) -> bool {
    ops.set
        .iter()
        .chain(ops.add.iter())
        .all(|(n, v)| valid_field(n, v))
        && ops.remove.iter().all(|n| valid_token(n))
}

/// A field name that is a token and a value of visible ASCII, obs-text, SP and HTAB
/// without surrounding whitespace (RFC 9110 §5.5).
fn valid_field(name: &str, value: &str) -> bool {
    let v = value.as_bytes();
    valid_token(name)
        && v.iter()
            .all(|&b| matches!(b, b'\t' | 0x20..=0x7e | 0x80..=0xff))
        && !matches!(v.first(), Some(b' ' | b'\t'))
        && !matches!(v.last(), Some(b' ' | b'\t'))
}

fn valid_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(is_tchar)
}

/// An origin-form path without query: `/` then visible ASCII other than `?` and `#`.
fn valid_path(p: &str) -> bool {
    p.starts_with('/')
        && p.bytes()
            .all(|b| matches!(b, 0x21..=0x7e) && b != b'?' && b != b'#')
}
