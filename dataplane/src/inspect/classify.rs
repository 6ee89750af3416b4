//! The one entry point a listener calls: what do the first bytes of this connection say?

use super::name::{Host, HostName};
use super::{http, tls};

/// What the first bytes of a connection are, as far as routing by name goes.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // by design: no heap allocation on the parse path
pub enum Inspected<'a> {
    /// Not enough bytes to tell yet.
    NeedMore {
        /// No verdict is possible before the prefix has at least this many bytes.
        at_least: usize,
    },
    /// A TLS ClientHello.
    Tls(tls::ClientHello<'a>),
    /// A TLS stream whose ClientHello is broken or too large.
    TlsMalformed(tls::Malformed),
    /// An HTTP/1.x request head.
    Http(http::RequestHead<'a>),
    /// The HTTP/2 prior-knowledge preface (no host).
    H2Preface,
    /// An HTTP/1.x stream whose request head is broken or too large.
    HttpMalformed(http::Malformed),
    /// Neither TLS nor HTTP.
    Unknown,
}

/// Classifies the bytes received so far on a connection: TLS if the first byte is a TLS
/// handshake record's, else HTTP/1 (or the HTTP/2 preface), else unknown.
///
/// Same contract as the parsers: no panic, no allocation, monotone verdicts; call again
/// with more bytes on [`Inspected::NeedMore`]. At most 16 KiB are ever needed.
pub fn classify(input: &[u8]) -> Inspected<'_> {
    match tls::parse(input) {
        tls::Outcome::NeedMore { at_least } => Inspected::NeedMore { at_least },
        tls::Outcome::Hello(hello) => Inspected::Tls(hello),
        tls::Outcome::Malformed(m) => Inspected::TlsMalformed(m),
        tls::Outcome::NotTls => match http::parse(input) {
            http::Outcome::NeedMore { at_least } => Inspected::NeedMore { at_least },
            http::Outcome::Request(head) => Inspected::Http(head),
            http::Outcome::H2Preface => Inspected::H2Preface,
            http::Outcome::NotHttp => Inspected::Unknown,
            http::Outcome::Malformed(m) => Inspected::HttpMalformed(m),
        },
    }
}

impl Inspected<'_> {
    /// The host the client named: the SNI's DNS name for TLS (an IP-literal or invalid SNI
    /// is no host), the request's host for HTTP (which may be an IP address).
    pub fn host(&self) -> Option<Host> {
        match self {
            Inspected::Tls(hello) => hello.routing_name().copied().map(Host::Dns),
            Inspected::Http(head) => head.host,
            _ => None,
        }
    }

    /// The DNS name to route on, if there is one.
    pub fn routing_name(&self) -> Option<&HostName> {
        match self {
            Inspected::Tls(hello) => hello.routing_name(),
            Inspected::Http(head) => head.routing_name(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatches_by_first_bytes() {
        assert_eq!(classify(b""), Inspected::NeedMore { at_least: 1 });
        assert_eq!(classify(b"\x16"), Inspected::NeedMore { at_least: 2 });
        assert_eq!(classify(b"G"), Inspected::NeedMore { at_least: 2 });
        assert_eq!(classify(b"\x00\x01"), Inspected::Unknown);
        assert_eq!(classify(b"SSH-2.0-OpenSSH_9.2\r\n"), Inspected::Unknown);
        assert_eq!(classify(http::H2_PREFACE), Inspected::H2Preface);
        let req = classify(b"GET / HTTP/1.1\r\nHost: Example.COM:8080\r\n\r\n");
        assert_eq!(req.routing_name().unwrap().as_str(), "example.com");
        assert!(matches!(req, Inspected::Http(_)));
        assert_eq!(
            classify(b"GET / HTTP/1.1\r\n\r\n"),
            Inspected::HttpMalformed(http::Malformed::MissingHost)
        );
        assert_eq!(
            classify(b"\x16\x03\x01\x00\x00"),
            Inspected::TlsMalformed(tls::Malformed::EmptyRecord)
        );
        let ip = classify(b"GET / HTTP/1.1\r\nHost: 10.1.2.3\r\n\r\n");
        assert_eq!(ip.host(), Some(Host::Ip("10.1.2.3".parse().unwrap())));
        assert_eq!(ip.routing_name(), None);
    }
}
