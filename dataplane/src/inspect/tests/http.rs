//! HTTP/1 request-head parser tests, with literal bytes.

use crate::inspect::http::{
    parse, HostError, HostSource, Malformed, Outcome, RequestHead, TargetForm, Version, H2_PREFACE,
    MAX_HEAD_LEN,
};
use crate::inspect::name::{Host, NameError};

fn head(input: &[u8]) -> RequestHead<'_> {
    match parse(input) {
        Outcome::Request(h) => h,
        other => panic!(
            "expected a request head, got {other:?} for {:?}",
            String::from_utf8_lossy(input)
        ),
    }
}

fn malformed(input: &[u8]) -> Malformed {
    match parse(input) {
        Outcome::Malformed(m) => m,
        other => panic!(
            "expected malformed, got {other:?} for {:?}",
            String::from_utf8_lossy(input)
        ),
    }
}

fn host_str(h: &RequestHead<'_>) -> Option<String> {
    h.host.map(|h| h.to_string())
}

#[test]
fn origin_form_with_host_header() {
    let req = b"GET /a/b?c=d HTTP/1.1\r\nUser-Agent: x\r\nhOsT:  WWW.Example.COM:8080 \r\nAccept: */*\r\n\r\nBODY";
    let h = head(req);
    assert_eq!(h.method, "GET");
    assert_eq!(h.target, "/a/b?c=d");
    assert_eq!(h.path, "/a/b");
    assert_eq!(h.form, TargetForm::Origin);
    assert_eq!(h.version, Version::Http11);
    assert_eq!(host_str(&h).as_deref(), Some("www.example.com"));
    assert_eq!(h.routing_name().unwrap().as_str(), "www.example.com");
    assert_eq!(h.port, Some(8080));
    assert_eq!(h.host_source, Some(HostSource::Header));
    assert_eq!(h.len, req.len() - 4);
    // Every strict prefix of the head needs more; the hint never overshoots.
    for k in 0..h.len {
        match parse(&req[..k]) {
            Outcome::NeedMore { at_least } => {
                assert!(at_least > k && at_least <= h.len, "{k}: {at_least}")
            }
            other => panic!("prefix {k}: {other:?}"),
        }
    }
    for k in h.len..=req.len() {
        assert_eq!(parse(&req[..k]), Outcome::Request(h.clone()));
    }
}

#[test]
fn ipv6_and_ipv4_hosts() {
    let h = head(b"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n");
    assert_eq!(h.host, Some(Host::Ip("::1".parse().unwrap())));
    assert_eq!(h.port, Some(80));
    assert_eq!(h.routing_name(), None);
    let h = head(b"GET / HTTP/1.1\r\nHost: [2001:DB8::a]\r\n\r\n");
    assert_eq!(h.host, Some(Host::Ip("2001:db8::a".parse().unwrap())));
    assert_eq!(h.port, None);
    let h = head(b"GET / HTTP/1.1\r\nHost: 192.0.2.1:8443\r\n\r\n");
    assert_eq!(h.host, Some(Host::Ip("192.0.2.1".parse().unwrap())));
    assert_eq!(h.port, Some(8443));
    assert_eq!(
        malformed(b"GET / HTTP/1.1\r\nHost: [::1\r\n\r\n"),
        Malformed::InvalidHost(HostError::IpLiteral)
    );
    assert_eq!(
        malformed(b"GET / HTTP/1.1\r\nHost: [nope]:80\r\n\r\n"),
        Malformed::InvalidHost(HostError::IpLiteral)
    );
    assert_eq!(
        malformed(b"GET / HTTP/1.1\r\nHost: ::1\r\n\r\n"),
        Malformed::InvalidHost(HostError::Empty)
    );
}

#[test]
fn absolute_form_takes_the_host_from_the_target() {
    let h = head(b"GET http://Proxy.Example:8080/x/y?z HTTP/1.1\r\nHost: other.example\r\n\r\n");
    assert_eq!(h.form, TargetForm::Absolute);
    assert_eq!(host_str(&h).as_deref(), Some("proxy.example"));
    assert_eq!(h.port, Some(8080));
    assert_eq!(h.path, "/x/y");
    assert_eq!(h.host_source, Some(HostSource::Target));
    let h = head(b"GET HTTPS://a.example HTTP/1.1\r\nHost: a.example\r\n\r\n");
    assert_eq!(h.path, "/");
    assert_eq!(h.port, None);
    let h = head(b"GET http://[::1]:9/ HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(h.host, Some(Host::Ip("::1".parse().unwrap())));
    assert_eq!(h.port, Some(9));
    // Userinfo is not allowed in http(s) URIs.
    assert_eq!(
        malformed(b"GET http://user:pw@a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n"),
        Malformed::UserInfo
    );
    assert_eq!(
        malformed(b"GET http:///x HTTP/1.1\r\nHost: a\r\n\r\n"),
        Malformed::InvalidTargetHost(HostError::Empty)
    );
    assert_eq!(
        malformed(b"GET 1http://a/ HTTP/1.1\r\nHost: a\r\n\r\n"),
        Malformed::InvalidTarget
    );
    assert_eq!(
        malformed(b"GET foo HTTP/1.1\r\nHost: a\r\n\r\n"),
        Malformed::InvalidTarget
    );
    // The Host header is still checked (RFC 9112 §3.2), even though it is not used.
    assert_eq!(
        malformed(b"GET http://a.example/ HTTP/1.1\r\n\r\n"),
        Malformed::MissingHost
    );
    assert_eq!(
        malformed(b"GET http://a.example/ HTTP/1.1\r\nHost: b\r\nHost: c\r\n\r\n"),
        Malformed::DuplicateHost
    );
}

#[test]
fn connect_and_asterisk_forms() {
    let h = head(b"CONNECT Tunnel.Example:443 HTTP/1.1\r\nHost: tunnel.example:443\r\n\r\n");
    assert_eq!(h.form, TargetForm::Authority);
    assert_eq!(host_str(&h).as_deref(), Some("tunnel.example"));
    assert_eq!(h.port, Some(443));
    assert_eq!(h.path, "");
    assert_eq!(
        malformed(b"CONNECT tunnel.example HTTP/1.1\r\nHost: x\r\n\r\n"),
        Malformed::InvalidTargetHost(HostError::Port)
    );
    let h = head(b"OPTIONS * HTTP/1.1\r\nHost: a.example\r\n\r\n");
    assert_eq!(h.form, TargetForm::Asterisk);
    assert_eq!(h.path, "*");
    assert_eq!(host_str(&h).as_deref(), Some("a.example"));
}

#[test]
fn versions_and_hosts() {
    let h = head(b"GET / HTTP/1.0\r\n\r\n");
    assert_eq!(h.version, Version::Http10);
    assert_eq!(h.host, None);
    assert_eq!(h.host_source, None);
    // 1.x for x > 1 is 1.1 (RFC 9110 §2.5).
    assert_eq!(
        head(b"GET / HTTP/1.2\r\nHost: a\r\n\r\n").version,
        Version::Http11
    );
    assert_eq!(malformed(b"GET / HTTP/1.1\r\n\r\n"), Malformed::MissingHost);
    // An empty Host is legal and means no host.
    let h = head(b"GET / HTTP/1.1\r\nHost:\r\n\r\n");
    assert_eq!(h.host, None);
    let h = head(b"GET / HTTP/1.1\r\nHost: \t \r\n\r\n");
    assert_eq!(h.host, None);
    assert_eq!(
        malformed(b"GET / HTTP/2.0\r\nHost: a\r\n\r\n"),
        Malformed::UnsupportedVersion(2, 0)
    );
    assert_eq!(malformed(b"GET / HTTP/1.x\r\n"), Malformed::InvalidVersion);
    assert_eq!(malformed(b"GET / HTTP/11\r\n"), Malformed::InvalidVersion);
    assert_eq!(malformed(b"GET / HTTP/1.10\r\n"), Malformed::InvalidVersion);
    // A trailing dot names the same host.
    assert_eq!(
        host_str(&head(b"GET / HTTP/1.1\r\nHost: A.Example.:80\r\n\r\n")).as_deref(),
        Some("a.example")
    );
}

#[test]
fn invalid_hosts() {
    let cases: &[(&[u8], Malformed)] = &[
        (
            b"Host: a b",
            Malformed::InvalidHost(HostError::Name(NameError::InvalidByte(b' '))),
        ),
        (
            b"Host: a_b.example:x",
            Malformed::InvalidHost(HostError::Port),
        ),
        (
            b"Host: a.example:65536",
            Malformed::InvalidHost(HostError::Port),
        ),
        (
            b"Host: a.example:000080",
            Malformed::InvalidHost(HostError::Port),
        ),
        (b"Host: :80", Malformed::InvalidHost(HostError::Empty)),
        (
            b"Host: user@a.example",
            Malformed::InvalidHost(HostError::Name(NameError::InvalidByte(b'@'))),
        ),
        (
            b"Host: -a.example",
            Malformed::InvalidHost(HostError::Name(NameError::HyphenAtLabelEdge)),
        ),
        (
            b"Host: 1.2.3",
            Malformed::InvalidHost(HostError::Name(NameError::NumericLastLabel)),
        ),
    ];
    for (line, want) in cases {
        let mut req = b"GET / HTTP/1.1\r\n".to_vec();
        req.extend_from_slice(line);
        req.extend_from_slice(b"\r\n\r\n");
        assert_eq!(malformed(&req), *want, "{}", String::from_utf8_lossy(line));
    }
    // Port edge values.
    assert_eq!(
        head(b"GET / HTTP/1.1\r\nHost: a:65535\r\n\r\n").port,
        Some(65535)
    );
    assert_eq!(head(b"GET / HTTP/1.1\r\nHost: a:\r\n\r\n").port, None);
}

#[test]
fn line_syntax_errors() {
    let cases: &[(&[u8], Malformed)] = &[
        (b"GET / HTTP/1.1\nHost: a\r\n\r\n", Malformed::BareLf),
        (b"GET / HTTP/1.1\r\nHost: a\n\r\n", Malformed::BareLf),
        (b"GET / HTTP/1.1\r\nHost: a\r\n\n", Malformed::BareLf),
        (b"GET / HTTP/1.1\rHost: a\r\n\r\n", Malformed::BareCr),
        (b"GET / HTTP/1.1\r\nHost: a\rx\r\n\r\n", Malformed::BareCr),
        (b"GET / HTTP/1.1\r\nHost: a\r\n\rx", Malformed::BareCr),
        (
            b"GET / HTTP/1.1\r\nX: 1\r\n  folded\r\n\r\n",
            Malformed::ObsFold,
        ),
        (b"GET / HTTP/1.1\r\n Host: a\r\n\r\n", Malformed::ObsFold),
        (b"GET / HTTP/1.1\r\nHost : a\r\n\r\n", Malformed::HeaderName),
        (b"GET / HTTP/1.1\r\n: a\r\n\r\n", Malformed::HeaderName),
        (b"GET / HTTP/1.1\r\nX(y): a\r\n\r\n", Malformed::HeaderName),
        (
            b"GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n",
            Malformed::HeaderValue,
        ),
        (
            b"GET / HTTP/1.1\r\nX: a\x7fb\r\n\r\n",
            Malformed::HeaderValue,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: a\r\nHOST: b\r\n\r\n",
            Malformed::DuplicateHost,
        ),
    ];
    for (req, want) in cases {
        assert_eq!(malformed(req), *want, "{:?}", String::from_utf8_lossy(req));
    }
    // Obs-text and tabs in values are fine.
    let h = head(b"GET / HTTP/1.1\r\nX-Y: caf\xc3\xa9\tok\r\nHost: a\r\n\r\n");
    assert_eq!(host_str(&h).as_deref(), Some("a"));
}

#[test]
fn not_http() {
    let cases: &[&[u8]] = &[
        b"\x16\x03\x01\x02\x00",
        b"\x00\x00",
        b"SSH-2.0-OpenSSH_9.2p1\r\n",
        b" GET / HTTP/1.1\r\n",
        b"GET  / HTTP/1.1\r\n",
        b"GET /\r\n", // HTTP/0.9
        b"GET / FTP/1.0\r\n",
        b"GET /\x01 HTTP/1.1\r\n",
        b"\r\n\rx",
    ];
    for c in cases {
        assert_eq!(
            parse(c),
            Outcome::NotHttp,
            "{:?}",
            String::from_utf8_lossy(c)
        );
    }
    // Empty lines before the request line are skipped.
    let h = head(b"\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(h.method, "GET");
    assert_eq!(parse(b""), Outcome::NeedMore { at_least: 1 });
}

#[test]
fn h2_prior_knowledge_preface() {
    assert_eq!(parse(H2_PREFACE), Outcome::H2Preface);
    let mut with_settings = H2_PREFACE.to_vec();
    with_settings.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    assert_eq!(parse(&with_settings), Outcome::H2Preface);
    for k in 0..H2_PREFACE.len() {
        assert_eq!(
            parse(&H2_PREFACE[..k]),
            Outcome::NeedMore { at_least: k + 1 },
            "{k}"
        );
    }
    // "PRI" as an HTTP/1.1 method is just a method.
    let h = head(b"PRI * HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(h.method, "PRI");
    assert_eq!(h.form, TargetForm::Asterisk);
    // The preface's request line with a different tail is HTTP/2.0 spoken as HTTP/1.
    assert_eq!(
        malformed(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n"),
        Malformed::UnsupportedVersion(2, 0)
    );
}

#[test]
fn size_cap() {
    // A head of exactly MAX_HEAD_LEN bytes parses; one byte more does not.
    let make = |total: usize| {
        let start = b"GET / HTTP/1.1\r\nHost: a.example\r\nX-Pad: ".to_vec();
        let end = b"\r\n\r\n";
        let pad = total - start.len() - end.len();
        let mut r = start;
        r.extend(std::iter::repeat_n(b'p', pad));
        r.extend_from_slice(end);
        r
    };
    let at_cap = make(MAX_HEAD_LEN);
    assert_eq!(head(&at_cap).len, MAX_HEAD_LEN);
    let over = make(MAX_HEAD_LEN + 1);
    assert_eq!(malformed(&over), Malformed::TooLarge);
    // Decided as soon as a byte past the cap would be needed, without waiting for it.
    assert_eq!(malformed(&over[..MAX_HEAD_LEN]), Malformed::TooLarge);
    assert_eq!(
        parse(&over[..MAX_HEAD_LEN - 1]),
        Outcome::NeedMore {
            at_least: MAX_HEAD_LEN
        }
    );
}
