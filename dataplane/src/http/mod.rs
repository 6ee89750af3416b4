//! HTTP/1.1 message codec for the reverse proxy: request and response heads parsed into
//! views of the received bytes ([`head`]), message bodies delimited as they stream by
//! ([`body`]), and the heads sluice sends written into a caller's buffer
//! ([`write`](mod@write)).
//!
//! The codec does no I/O and keeps no connection state beyond one [`Body`]; the engine
//! that owns the sockets calls it.
//!
//! ## Contract
//!
//! No function here allocates, panics on any input, locks, or uses `unsafe`. The parsers
//! take the bytes received so far (a contiguous prefix of the stream) and answer
//! [`Parse::Partial`] until a verdict is possible; verdicts are monotone (a longer prefix
//! gives the same one). Writers return `None` rather than write a truncated head.
//!
//! ## Framing is the security boundary
//!
//! A proxy that delimits a message differently from the server behind it lets a client
//! smuggle a second request inside the first. So the parsers follow RFC 9112 and RFC 9110
//! strictly and reject every ambiguity rather than pick a reading: `Content-Length` with
//! `Transfer-Encoding`, differing `Content-Length` values, a request whose final transfer
//! coding is not `chunked`, `Transfer-Encoding` in HTTP/1.0, bare LF line endings,
//! obsolete line folding, whitespace before a colon, control characters in values. The
//! head is parsed by `httparse` (its lenient options off) and the checks it leaves out
//! are made here. Bodies are forwarded unchanged, framing included: [`Body`] only finds
//! where a message ends, with bounded chunk-size, extension and trailer lines.

pub mod body;
pub mod head;
pub mod write;

pub use body::{Body, BodyError};
pub use head::{parse_request, parse_response};
pub use write::{
    append_head, ops_len, reason_phrase, write_local_response, write_request_head,
    write_response_head, RequestEdits,
};

use crate::tables::http::Header;

/// The most header lines a head may carry; more is [`HeadError::TooManyHeaders`].
pub const MAX_HEADERS: usize = 100;

/// The most bytes a head may take (start line, header lines, the empty line); a head not
/// ended within them is [`HeadError::TooLarge`].
pub const MAX_HEAD_LEN: usize = 16 * 1024;

/// An empty header, to fill the array the parsers write into:
/// `let mut headers = [EMPTY_HEADER; MAX_HEADERS];`.
pub const EMPTY_HEADER: Header<'static> = Header {
    name: "",
    value: b"",
};

/// The protocol version of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Version {
    /// HTTP/1.0.
    Http10,
    /// HTTP/1.1.
    Http11,
}

/// How the body of a message is delimited (RFC 9112 §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Framing {
    /// No body.
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding, up to and including the trailer section.
    Chunked,
    /// Everything until the server closes the connection (responses only; also a tunnel
    /// after a successful `CONNECT`).
    UntilClose,
}

/// The outcome of parsing the bytes received so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parse<T> {
    /// The head has not ended yet: call again with more bytes.
    Partial,
    /// A complete, valid head.
    Done(T),
    /// The head is invalid; the connection cannot be used further.
    Error(HeadError),
}

/// Why a head was rejected.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum HeadError {
    /// The head does not end within [`MAX_HEAD_LEN`] bytes.
    #[error("head larger than {MAX_HEAD_LEN} bytes")]
    TooLarge,
    /// More than [`MAX_HEADERS`] header lines.
    #[error("more than {MAX_HEADERS} header lines")]
    TooManyHeaders,
    /// Not valid HTTP/1.x syntax, an invalid request target, or a missing, repeated or
    /// invalid `Host`.
    #[error("malformed head")]
    Malformed,
    /// The body's length cannot be determined without ambiguity.
    #[error("ambiguous or invalid message framing")]
    BadFraming,
    /// A version other than HTTP/1.0 and HTTP/1.1.
    #[error("unsupported HTTP version")]
    UnsupportedVersion,
    /// A request transfer coding other than `chunked`.
    #[error("unsupported transfer coding")]
    UnsupportedTransferCoding,
}

impl HeadError {
    /// The status to answer a request with this error (RFC 9110 §15, RFC 6585 §5). A
    /// response from a backend that fails to parse is answered with 502 instead.
    pub fn status(self) -> u16 {
        match self {
            HeadError::TooLarge | HeadError::TooManyHeaders => 431,
            HeadError::Malformed | HeadError::BadFraming => 400,
            HeadError::UnsupportedVersion => 505,
            HeadError::UnsupportedTransferCoding => 501,
        }
    }
}

/// A parsed request head, borrowed from the received bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHead<'a> {
    /// The method, as sent (case-sensitive).
    pub method: &'a str,
    /// The request target, as sent.
    pub target: &'a str,
    /// The path without the query: as sent for origin-form, the path of an absolute-form
    /// target (`/` when empty), `/` for asterisk-form (`*`) and authority-form (`CONNECT`).
    pub path: &'a str,
    /// The query without its `?` (empty when none).
    pub query: &'a str,
    /// The protocol version.
    pub version: Version,
    /// The target's authority for absolute-form and authority-form (`CONNECT`) targets,
    /// else the `Host` value; empty when there is none (HTTP/1.0 without `Host`, or an
    /// empty `Host`). As sent: case and port kept.
    pub authority: &'a str,
    /// Every header line in order (values trimmed of surrounding whitespace).
    pub headers: &'a [Header<'a>],
    /// Bytes of the head, including the empty line that ends it: the body starts here.
    pub len: usize,
    /// The body's framing: [`Framing::None`], [`Framing::Length`] or [`Framing::Chunked`].
    pub framing: Framing,
    /// The `Content-Length` value when one was sent (repeats validated and merged).
    pub content_length: Option<u64>,
    /// Whether the client wants the connection kept open: HTTP/1.1 unless `Connection`
    /// lists `close`; HTTP/1.0 only when it lists `keep-alive` (and not `close`).
    pub keep_alive: bool,
    /// `Expect: 100-continue` in an HTTP/1.1 request (ignored in HTTP/1.0, RFC 9110
    /// §10.1.1).
    pub expect_continue: bool,
    /// `Connection` lists `upgrade` and an `Upgrade` header is present, in HTTP/1.1 (an
    /// HTTP/1.0 `Upgrade` is ignored, RFC 9110 §7.8).
    pub upgrade: bool,
}

/// A parsed response head, borrowed from the received bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponseHead<'a> {
    /// The status code, 100 to 599.
    pub status: u16,
    /// The reason phrase as sent (empty when none or when it holds non-ASCII bytes).
    pub reason: &'a str,
    /// The protocol version.
    pub version: Version,
    /// Every header line in order (values trimmed of surrounding whitespace).
    pub headers: &'a [Header<'a>],
    /// Bytes of the head, including the empty line that ends it: the body starts here.
    pub len: usize,
    /// The body's framing (RFC 9112 §6.3): none for 1xx, 204, 304 and responses to
    /// `HEAD`; [`Framing::UntilClose`] for a 2xx to `CONNECT` (a tunnel) and when neither
    /// `Content-Length` nor a final `chunked` coding delimits the body.
    pub framing: Framing,
    /// The `Content-Length` value when one was sent (repeats validated and merged).
    pub content_length: Option<u64>,
    /// Whether the server keeps the connection open: as for requests, and false when the
    /// body runs until close or the connection is upgraded.
    pub keep_alive: bool,
    /// 101 Switching Protocols: after this head the connection is a tunnel.
    pub upgrade: bool,
}

#[cfg(test)]
mod tests;
