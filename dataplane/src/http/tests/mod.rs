//! The codec on literal bytes: every strictness rule, framing in both directions, body
//! delimiting fed in any split, and the writers' exact output.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use super::*;
use crate::tables::http::HeaderOps;

/// The outcome of parsing a request, as owned text (so tests need no header array).
#[derive(Debug, PartialEq, Eq)]
enum R {
    Partial,
    Done {
        method: String,
        path: String,
        query: String,
        authority: String,
        framing: Framing,
        len: usize,
    },
    Error(HeadError),
}

fn req(buf: &[u8]) -> R {
    let mut hs = [EMPTY_HEADER; MAX_HEADERS];
    match parse_request(buf, &mut hs) {
        Parse::Partial => R::Partial,
        Parse::Error(e) => R::Error(e),
        Parse::Done(h) => R::Done {
            method: h.method.into(),
            path: h.path.into(),
            query: h.query.into(),
            authority: h.authority.into(),
            framing: h.framing,
            len: h.len,
        },
    }
}

fn req_err(buf: &[u8]) -> Option<HeadError> {
    match req(buf) {
        R::Error(e) => Some(e),
        _ => None,
    }
}

fn req_framing(buf: &[u8]) -> Result<Framing, Option<HeadError>> {
    match req(buf) {
        R::Done { framing, .. } => Ok(framing),
        R::Error(e) => Err(Some(e)),
        R::Partial => Err(None),
    }
}

/// Runs `f` on a parsed request head (panics if it does not parse).
fn with_req<T>(buf: &[u8], f: impl FnOnce(&RequestHead<'_>) -> T) -> T {
    let mut hs = [EMPTY_HEADER; MAX_HEADERS];
    match parse_request(buf, &mut hs) {
        Parse::Done(h) => f(&h),
        other => panic!("{other:?}"),
    }
}

fn resp(buf: &[u8], method: &str) -> Result<(u16, Framing, bool, bool), Option<HeadError>> {
    let mut hs = [EMPTY_HEADER; MAX_HEADERS];
    match parse_response(buf, method, &mut hs) {
        Parse::Done(h) => Ok((h.status, h.framing, h.keep_alive, h.upgrade)),
        Parse::Error(e) => Err(Some(e)),
        Parse::Partial => Err(None),
    }
}

fn resp_framing(buf: &[u8], method: &str) -> Result<Framing, Option<HeadError>> {
    resp(buf, method).map(|r| r.1)
}

// ---- request heads -------------------------------------------------------------------

#[test]
fn simple_get() {
    let buf = b"GET /a/b?x=1&y HTTP/1.1\r\nHost: Example.com:8080\r\nAccept: */*\r\n\r\nNEXT";
    with_req(buf, |h| {
        assert_eq!(h.method, "GET");
        assert_eq!(h.target, "/a/b?x=1&y");
        assert_eq!(h.path, "/a/b");
        assert_eq!(h.query, "x=1&y");
        assert_eq!(h.authority, "Example.com:8080");
        assert_eq!(h.version, Version::Http11);
        assert_eq!(h.len, buf.len() - 4);
        assert_eq!(h.framing, Framing::None);
        assert!(h.keep_alive && !h.expect_continue && !h.upgrade);
        assert_eq!(h.headers.len(), 2);
        assert_eq!(h.headers[1].name, "Accept");
        assert_eq!(h.headers[1].value, b"*/*");
    });
}

#[test]
fn leading_empty_line_is_skipped() {
    let buf = b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n";
    assert!(matches!(req(buf), R::Done { len, .. } if len == buf.len()));
}

#[test]
fn target_forms() {
    let done = |m: &str, p: &str, q: &str, a: &str| {
        (m.to_owned(), p.to_owned(), q.to_owned(), a.to_owned())
    };
    let parts = |buf: &[u8]| match req(buf) {
        R::Done {
            method,
            path,
            query,
            authority,
            ..
        } => (method, path, query, authority),
        other => panic!("{other:?}"),
    };
    // absolute-form: the target's authority wins over Host (RFC 9112 §3.2.2).
    assert_eq!(
        parts(b"GET http://b.example:81/p?q HTTP/1.1\r\nHost: a.example\r\n\r\n"),
        done("GET", "/p", "q", "b.example:81")
    );
    assert_eq!(
        parts(b"GET HTTPS://b.example HTTP/1.1\r\nHost: a\r\n\r\n"),
        done("GET", "/", "", "b.example")
    );
    assert_eq!(
        parts(b"GET http://b.example?q HTTP/1.1\r\nHost: a\r\n\r\n"),
        done("GET", "/", "q", "b.example")
    );
    assert_eq!(
        parts(b"CONNECT b.example:443 HTTP/1.1\r\nHost: b.example:443\r\n\r\n"),
        done("CONNECT", "/", "", "b.example:443")
    );
    assert_eq!(
        parts(b"CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\n\r\n"),
        done("CONNECT", "/", "", "[::1]:443")
    );
    assert_eq!(
        parts(b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n"),
        done("OPTIONS", "/", "", "a")
    );
    for bad in [
        &b"GET * HTTP/1.1\r\nHost: a\r\n\r\n"[..],
        b"CONNECT b.example HTTP/1.1\r\nHost: a\r\n\r\n",
        b"CONNECT /x HTTP/1.1\r\nHost: a\r\n\r\n",
        b"CONNECT b:99999 HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET b.example:443 HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET foo HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET ftp://b/x HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET http:///x HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET http://u:p@b/x HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET /a#frag HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET /\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET /\tx HTTP/1.1\r\nHost: a\r\n\r\n",
    ] {
        assert_eq!(
            req_err(bad),
            Some(HeadError::Malformed),
            "{}",
            bad.escape_ascii()
        );
    }
}

#[test]
fn host_rules() {
    use HeadError::Malformed as M;
    assert_eq!(req_err(b"GET / HTTP/1.1\r\nAccept: */*\r\n\r\n"), Some(M));
    assert_eq!(
        req_err(b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n"),
        Some(M)
    );
    assert_eq!(
        req_err(b"GET / HTTP/1.0\r\nHost: a\r\nhost: b\r\n\r\n"),
        Some(M)
    );
    // Still required (and single) with an absolute-form target.
    assert_eq!(req_err(b"GET http://a/ HTTP/1.1\r\n\r\n"), Some(M));
    assert_eq!(req_err(b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n"), Some(M));
    assert_eq!(req_err(b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n"), Some(M));
    assert_eq!(req_err(b"GET / HTTP/1.1\r\nHost: u@a\r\n\r\n"), Some(M));
    assert_eq!(req_err(b"GET / HTTP/1.1\r\nHost: a:8x\r\n\r\n"), Some(M));
    assert_eq!(req_err(b"GET / HTTP/1.1\r\nHost: [zz]\r\n\r\n"), Some(M));
    assert_eq!(req_err(b"GET / HTTP/1.1\r\nHost: a%zz\r\n\r\n"), Some(M));
    let authority = |buf: &[u8]| with_req(buf, |h| h.authority.to_owned());
    assert_eq!(authority(b"GET / HTTP/1.0\r\n\r\n"), "");
    assert_eq!(authority(b"GET / HTTP/1.1\r\nHost:\r\n\r\n"), "");
    assert_eq!(
        authority(b"GET / HTTP/1.1\r\nHost:  a.b:80 \r\n\r\n"),
        "a.b:80"
    );
    assert_eq!(
        authority(b"GET / HTTP/1.1\r\nHost: [2001:db8::1]:8080\r\n\r\n"),
        "[2001:db8::1]:8080"
    );
    assert_eq!(
        authority(b"GET / HTTP/1.1\r\nHost: a%41.b\r\n\r\n"),
        "a%41.b"
    );
}

#[test]
fn content_length() {
    use HeadError::BadFraming as B;
    let r =
        |cl: &str| req_framing(format!("POST / HTTP/1.1\r\nHost: a\r\n{cl}\r\n\r\n").as_bytes());
    assert_eq!(r("Content-Length: 5"), Ok(Framing::Length(5)));
    assert_eq!(r("Content-Length: 0"), Ok(Framing::Length(0)));
    assert_eq!(r("content-length:  7 "), Ok(Framing::Length(7)));
    assert_eq!(r("Content-Length: 5, 5"), Ok(Framing::Length(5)));
    assert_eq!(
        r("Content-Length: 5\r\nContent-Length: 5"),
        Ok(Framing::Length(5))
    );
    assert_eq!(
        r("Content-Length: 18446744073709551615"),
        Ok(Framing::Length(u64::MAX))
    );
    assert_eq!(r("Content-Length: 5, 6"), Err(Some(B)));
    assert_eq!(r("Content-Length: 5\r\nContent-Length: 6"), Err(Some(B)));
    assert_eq!(r("Content-Length: 5,"), Err(Some(B)));
    assert_eq!(r("Content-Length:"), Err(Some(B)));
    assert_eq!(r("Content-Length: abc"), Err(Some(B)));
    assert_eq!(r("Content-Length: +5"), Err(Some(B)));
    assert_eq!(r("Content-Length: -1"), Err(Some(B)));
    assert_eq!(r("Content-Length: 0x10"), Err(Some(B)));
    assert_eq!(r("Content-Length: 5 5"), Err(Some(B)));
    assert_eq!(r("Content-Length: 18446744073709551616"), Err(Some(B)));
    assert_eq!(r("Content-Length: 99999999999999999999999"), Err(Some(B)));
}

#[test]
fn transfer_encoding_in_requests() {
    use HeadError::{BadFraming as B, UnsupportedTransferCoding as U};
    let r =
        |te: &str| req_framing(format!("POST / HTTP/1.1\r\nHost: a\r\n{te}\r\n\r\n").as_bytes());
    assert_eq!(r("Transfer-Encoding: chunked"), Ok(Framing::Chunked));
    assert_eq!(r("transfer-encoding: Chunked"), Ok(Framing::Chunked));
    assert_eq!(r("Transfer-Encoding: , chunked"), Ok(Framing::Chunked));
    // CL and TE together: rejected (RFC 9112 §6.1 allows it; a proxy must not guess).
    assert_eq!(
        r("Transfer-Encoding: chunked\r\nContent-Length: 5"),
        Err(Some(B))
    );
    assert_eq!(
        r("Content-Length: 5\r\nTransfer-Encoding: chunked"),
        Err(Some(B))
    );
    // Final coding not chunked: 400 (RFC 9112 §6.3 item 4).
    assert_eq!(r("Transfer-Encoding: gzip"), Err(Some(B)));
    assert_eq!(r("Transfer-Encoding: chunked, gzip"), Err(Some(B)));
    assert_eq!(
        r("Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip"),
        Err(Some(B))
    );
    assert_eq!(r("Transfer-Encoding: chunked;q=1"), Err(Some(B)));
    assert_eq!(r("Transfer-Encoding: xchunked"), Err(Some(B)));
    assert_eq!(r("Transfer-Encoding:"), Err(Some(B)));
    // chunked twice (RFC 9112 §7).
    assert_eq!(r("Transfer-Encoding: chunked, chunked"), Err(Some(B)));
    assert_eq!(
        r("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked"),
        Err(Some(B))
    );
    // Other codings before chunked: 501.
    assert_eq!(r("Transfer-Encoding: gzip, chunked"), Err(Some(U)));
    assert_eq!(
        r("Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked"),
        Err(Some(U))
    );
    assert_eq!(U.status(), 501);
    // HTTP/1.0 with TE (RFC 9112 §6.1).
    assert_eq!(
        req_framing(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"),
        Err(Some(B))
    );
}

#[test]
fn line_syntax() {
    use HeadError::Malformed as M;
    for bad in [
        // whitespace before the colon (RFC 9112 §5.1)
        &b"GET / HTTP/1.1\r\nHost : a\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length\t: 5\r\n\r\n",
        // obs-fold (RFC 9112 §5.2)
        b"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n 2\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n\t2\r\n\r\n",
        b"GET / HTTP/1.1\r\n Host: a\r\n\r\n",
        // bare LF: request line, header line, final line, leading empty line
        b"GET / HTTP/1.1\nHost: a\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\n\n",
        b"\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
        // bare CR, NUL, DEL, other controls in a value
        b"GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x7fb\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x0bb\r\n\r\n",
        // bad names
        b"GET / HTTP/1.1\r\nHost: a\r\n: v\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nX(y): v\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nno colon\r\n\r\n",
        // bad method, bad version syntax
        b"G(T / HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET / HTTP/1.1x\r\nHost: a\r\n\r\n",
        b"GET / HTTP/11\r\nHost: a\r\n\r\n",
        b"GET / http/1.1\r\nHost: a\r\n\r\n",
        b"GET / HTTP/1.1 \r\nHost: a\r\n\r\n",
    ] {
        assert_eq!(req_err(bad), Some(M), "{}", bad.escape_ascii());
    }
    // obs-text in a value is allowed (RFC 9110 §5.5), HTAB too.
    with_req(
        b"GET / HTTP/1.1\r\nHost: a\r\nX: \xe9t\xe9\tx\r\n\r\n",
        |h| {
            assert_eq!(h.headers[1].value, b"\xe9t\xe9\tx");
        },
    );
}

#[test]
fn versions() {
    use HeadError::{Malformed as M, UnsupportedVersion as V};
    assert_eq!(req_err(b"GET / HTTP/2.0\r\nHost: a\r\n\r\n"), Some(V));
    assert_eq!(req_err(b"GET / HTTP/1.2\r\nHost: a\r\n\r\n"), Some(V));
    assert_eq!(req_err(b"GET / HTTP/0.9\r\nHost: a\r\n\r\n"), Some(V));
    assert_eq!(req(b"GET / HTTP/2."), R::Partial);
    assert_eq!(req_err(b"GET / HTTP/2\r\n\r\n"), Some(M));
    assert_eq!(req_err(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), Some(V));
    assert_eq!(V.status(), 505);
    assert_eq!(resp(b"HTTP/2.0 200 OK\r\n\r\n", "GET"), Err(Some(V)));
    assert_eq!(resp(b"HTTP/1.2 200 OK\r\n\r\n", "GET"), Err(Some(V)));
    assert_eq!(resp(b"HTTP/2 200 OK\r\n\r\n", "GET"), Err(Some(M)));
    assert_eq!(resp(b"HTTP/2.0", "GET"), Err(None));
    with_req(b"GET / HTTP/1.0\r\n\r\n", |h| {
        assert_eq!(h.version, Version::Http10)
    });
}

#[test]
fn limits() {
    let mut buf = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
    for i in 0..MAX_HEADERS - 1 {
        buf.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    let mut full = buf.clone();
    full.extend_from_slice(b"\r\n");
    with_req(&full, |h| assert_eq!(h.headers.len(), MAX_HEADERS));
    buf.extend_from_slice(b"One-Too-Many: v\r\n\r\n");
    assert_eq!(req_err(&buf), Some(HeadError::TooManyHeaders));
    assert_eq!(HeadError::TooManyHeaders.status(), 431);

    // A head ending exactly at the cap parses; one byte more is too large.
    let mut head = b"GET / HTTP/1.1\r\nHost: a\r\nX: ".to_vec();
    head.resize(MAX_HEAD_LEN - 4, b'v');
    head.extend_from_slice(b"\r\n\r\n");
    assert!(matches!(
        req(&head),
        R::Done {
            len: MAX_HEAD_LEN,
            ..
        }
    ));
    let mut big = b"GET / HTTP/1.1\r\nHost: a\r\nX: ".to_vec();
    big.resize(MAX_HEAD_LEN - 3, b'v');
    big.extend_from_slice(b"\r\n\r\n");
    assert_eq!(req_err(&big), Some(HeadError::TooLarge));
    assert_eq!(req(&big[..MAX_HEAD_LEN - 1]), R::Partial);
    assert_eq!(req_err(&big[..MAX_HEAD_LEN]), Some(HeadError::TooLarge));
    assert_eq!(HeadError::TooLarge.status(), 431);
}

#[test]
fn persistence_expect_upgrade() {
    let flags = |buf: &[u8]| with_req(buf, |h| (h.keep_alive, h.expect_continue, h.upgrade));
    assert_eq!(
        flags(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"),
        (true, false, false)
    );
    assert_eq!(
        flags(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Close\r\n\r\n"),
        (false, false, false)
    );
    assert_eq!(
        flags(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: x, close\r\n\r\n"),
        (false, false, false)
    );
    assert_eq!(flags(b"GET / HTTP/1.0\r\n\r\n"), (false, false, false));
    assert_eq!(
        flags(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"),
        (true, false, false)
    );
    assert_eq!(
        flags(b"PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\n"),
        (true, true, false)
    );
    assert_eq!(
        flags(b"PUT / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n"),
        (false, false, false)
    );
    assert_eq!(
        flags(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n"),
        (true, false, true)
    );
    assert_eq!(
        flags(b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n"),
        (true, false, false)
    );
    assert_eq!(
        flags(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: upgrade\r\n\r\n"),
        (true, false, false)
    );
    assert_eq!(
        flags(b"GET / HTTP/1.0\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n"),
        (false, false, false)
    );
}

/// Every prefix of a valid head is `Partial`; the whole head is `Done` with the same
/// length whatever follows it.
#[test]
fn every_prefix_is_partial() {
    let heads: [&[u8]; 4] = [
        b"GET /a?b HTTP/1.1\r\nHost: example.com\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n",
        b"\r\nPOST http://h:8/x HTTP/1.1\r\nHost: h:8\r\nTransfer-Encoding: chunked\r\nX:\r\n\r\n",
        b"OPTIONS * HTTP/1.0\r\n\r\n",
        b"GET /\xff HTTP/1.1\r\nHost: a\r\n\r\n",
    ];
    for (n, head) in heads.into_iter().enumerate() {
        let mut with_body = head.to_vec();
        with_body.extend_from_slice(b"0\r\n\r\nGET / HTTP/1.1\r\n");
        let whole = req(&with_body);
        for k in 0..head.len() {
            let r = req(&head[..k]);
            if n == 3 && r != R::Partial {
                // The invalid target: an error once the byte is seen, and from then on.
                assert_eq!(r, R::Error(HeadError::Malformed), "prefix {k}");
                assert!(k > 5);
                continue;
            }
            assert_eq!(r, R::Partial, "head {n} prefix {k}");
        }
        if n == 3 {
            assert_eq!(whole, R::Error(HeadError::Malformed));
        } else {
            assert!(
                matches!(whole, R::Done { len, .. } if len == head.len()),
                "{whole:?}"
            );
            assert_eq!(req(head), whole);
        }
    }
    let response = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nServer: x\r\n\r\n";
    for k in 0..response.len() {
        assert_eq!(resp(&response[..k], "GET"), Err(None), "prefix {k}");
    }
    assert_eq!(
        resp(response, "GET"),
        Ok((200, Framing::Length(2), true, false))
    );
}

// ---- response heads ------------------------------------------------------------------

#[test]
fn response_framing() {
    use HeadError::{BadFraming as B, Malformed as M};
    let ok = |head: &str, method: &str| resp_framing(head.as_bytes(), method);
    let r = |fields: &str| ok(&format!("HTTP/1.1 200 OK\r\n{fields}\r\n"), "GET");
    assert_eq!(r("Content-Length: 3\r\n"), Ok(Framing::Length(3)));
    assert_eq!(r("Content-Length: 3, 3\r\n"), Ok(Framing::Length(3)));
    assert_eq!(r("Content-Length: 3, 4\r\n"), Err(Some(B)));
    assert_eq!(r("Content-Length: x\r\n"), Err(Some(B)));
    assert_eq!(r("Transfer-Encoding: chunked\r\n"), Ok(Framing::Chunked));
    assert_eq!(
        r("Transfer-Encoding: gzip, chunked\r\n"),
        Ok(Framing::Chunked)
    );
    assert_eq!(r("Transfer-Encoding: gzip\r\n"), Ok(Framing::UntilClose));
    assert_eq!(r("Transfer-Encoding: chunked, gzip\r\n"), Err(Some(B)));
    assert_eq!(
        r("Transfer-Encoding: chunked\r\nContent-Length: 3\r\n"),
        Err(Some(B))
    );
    assert_eq!(r(""), Ok(Framing::UntilClose));
    assert_eq!(
        ok(
            "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET"
        ),
        Err(Some(B))
    );
    // No body whatever the fields say.
    for status in [
        "100 Continue",
        "103 Early Hints",
        "204 No Content",
        "304 Not Modified",
    ] {
        assert_eq!(
            ok(
                &format!("HTTP/1.1 {status}\r\nContent-Length: 3\r\n\r\n"),
                "GET"
            ),
            Ok(Framing::None)
        );
    }
    assert_eq!(
        ok("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", "HEAD"),
        Ok(Framing::None)
    );
    assert_eq!(
        ok(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HEAD"
        ),
        Ok(Framing::None)
    );
    // A tunnel after CONNECT; a failed CONNECT has a body as usual.
    assert_eq!(
        ok("HTTP/1.1 200 OK\r\n\r\n", "CONNECT"),
        Ok(Framing::UntilClose)
    );
    assert_eq!(
        ok(
            "HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n",
            "CONNECT"
        ),
        Ok(Framing::Length(0))
    );
    // Syntax the response side must reject as well.
    for bad in [
        "HTTP/1.1 200 OK\r\nServer : x\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX: 1\r\n 2\r\n\r\n",
        "HTTP/1.1 200 OK\nServer: x\r\n\r\n",
        "HTTP/1.1 200 OK\r\nServer: x\n\r\n",
        "HTTP/1.1 99 Low\r\n\r\n",
        "HTTP/1.1 600 High\r\n\r\n",
        "HTTP/1.1 20 OK\r\n\r\n",
        "HTTP/1.1  200 OK\r\n\r\n",
    ] {
        assert_eq!(ok(bad, "GET"), Err(Some(M)), "{bad:?}");
    }
}

#[test]
fn response_fields() {
    let r = |head: &str| resp(head.as_bytes(), "GET");
    assert_eq!(
        r("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"),
        Ok((101, Framing::None, false, true))
    );
    assert_eq!(
        r("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
        Ok((200, Framing::Length(0), false, false))
    );
    assert_eq!(
        r("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"),
        Ok((200, Framing::Length(0), false, false))
    );
    assert_eq!(
        r("HTTP/1.0 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n"),
        Ok((200, Framing::Length(0), true, false))
    );
    // Until close is never persistent.
    assert_eq!(
        r("HTTP/1.1 200 OK\r\n\r\n"),
        Ok((200, Framing::UntilClose, false, false))
    );
    let mut hs = [EMPTY_HEADER; MAX_HEADERS];
    let Parse::Done(h) = parse_response(b"HTTP/1.1 404 Not Here\r\nA: b\r\n\r\n", "GET", &mut hs)
    else {
        panic!()
    };
    assert_eq!((h.reason, h.len, h.headers.len()), ("Not Here", 31, 1));
    let mut hs = [EMPTY_HEADER; MAX_HEADERS];
    let Parse::Done(h) = parse_response(b"HTTP/1.1 204\r\n\r\n", "GET", &mut hs) else {
        panic!()
    };
    assert_eq!(h.reason, "");
}

// ---- bodies --------------------------------------------------------------------------

/// Feeds `input` in one call and byte by byte; both must agree. Returns the bytes that
/// belong to the message and whether it ended.
fn feed(framing: Framing, input: &[u8]) -> Result<(usize, bool), BodyError> {
    let whole = Body::new(framing).advance(input);
    let mut body = Body::new(framing);
    let mut used = 0;
    let mut bytewise = Ok((0, false));
    for i in 0..input.len() {
        match body.advance(&input[i..=i]) {
            Ok((n, done)) => {
                used += n;
                bytewise = Ok((used, done));
                if done {
                    break;
                }
            }
            Err(e) => {
                bytewise = Err(e);
                break;
            }
        }
    }
    if input.is_empty() {
        bytewise = Body::new(framing).advance(b"");
    }
    assert_eq!(whole, bytewise, "{}", input.escape_ascii());
    whole
}

#[test]
fn chunked_bodies() {
    let c = |s: &[u8]| feed(Framing::Chunked, s);
    let body = b"5\r\nhello\r\n0\r\n\r\n";
    assert_eq!(c(body), Ok((body.len(), true)));
    let next =
        b"1a;ext=\"q;x\" ; y\r\nabcdefghijklmnopqrstuvwxyz\r\n000\r\nX-Sum: 1\r\nY:\r\n\r\nGET /";
    assert_eq!(c(next), Ok((next.len() - 5, true)));
    assert_eq!(c(b"A\r\n0123456789\r\n0\r\n\r\n"), Ok((20, true)));
    assert_eq!(c(b"0000000000000000\r\n\r\n"), Ok((20, true)));
    assert_eq!(c(b"5\r\nhel"), Ok((6, false)));
    assert_eq!(c(b""), Ok((0, false)));
    assert_eq!(c(b"5 ;x\r\nhello\r\n0\r\n\r\n"), Ok((18, true)));
    assert!(!Body::new(Framing::Chunked).is_done());

    use BodyError::{BadChunk as B, ChunkTooLarge as L};
    for bad in [
        &b"\r\n"[..],
        b";x\r\n",
        b"g\r\n",
        b"-1\r\n",
        b"+1\r\n",
        b"0x5\r\n",
        b"5\n",
        b"5\rhello",
        b"5 \r\n",
        b"5\r\nhello\n0\r\n\r\n",
        b"5\r\nhelloX\r\n",
        b"5\r\nhello\r\r",
        b"5;a\nb\r\n",
        b"5;a\0\r\n",
        b"0\r\n\n",
        b"0\r\nX: 1\n\r\n",
        b"0\r\nX : 1\r\n\r\n",
        b" 0\r\nX: 1\r\n\r\n",
        b"0\r\nX: 1\r\n 2\r\n\r\n",
        b"0\r\nX: \x01\r\n\r\n",
        b"0\r\n: 1\r\n\r\n",
        b"0\r\nX 1\r\n\r\n",
        b"0\r\n\rx",
    ] {
        assert_eq!(c(bad), Err(B), "{}", bad.escape_ascii());
    }
    assert_eq!(c(b"10000000000000000\r\n"), Err(L));
    assert_eq!(c(b"00000000000000001\r\n"), Err(L));
    assert_eq!(c(b"ffffffffffffffff\r\n"), Ok((18, false)));
    let mut ext = b"1;".to_vec();
    ext.resize(body::MAX_CHUNK_LINE as usize, b'x');
    ext.extend_from_slice(b"\r\na\r\n0\r\n\r\n");
    assert_eq!(c(&ext), Ok((ext.len(), true)));
    let mut ext = b"1;".to_vec();
    ext.resize(body::MAX_CHUNK_LINE as usize + 1, b'x');
    ext.extend_from_slice(b"\r\n");
    assert_eq!(c(&ext), Err(L));
    let mut trailer = b"0\r\n".to_vec();
    for _ in 0..body::MAX_TRAILER / 8 {
        trailer.extend_from_slice(b"X: 123\r\n");
    }
    trailer.extend_from_slice(b"\r\n");
    assert_eq!(c(&trailer), Err(L));

    // Sticky states.
    let mut b = Body::new(Framing::Chunked);
    assert_eq!(b.advance(b"0\r\n\r\nrest"), Ok((5, true)));
    assert_eq!(b.advance(b"more"), Ok((0, true)));
    assert!(b.is_done());
    let mut b = Body::new(Framing::Chunked);
    assert_eq!(b.advance(b"z"), Err(B));
    assert_eq!(b.advance(b"0\r\n\r\n"), Err(B));
}

#[test]
fn length_and_other_bodies() {
    assert!(Body::new(Framing::None).is_done());
    assert!(Body::new(Framing::Length(0)).is_done());
    assert_eq!(Body::new(Framing::None).advance(b"GET"), Ok((0, true)));
    assert_eq!(feed(Framing::Length(3), b"abcdef"), Ok((3, true)));
    assert_eq!(feed(Framing::Length(10), b"abcdef"), Ok((6, false)));
    let mut b = Body::new(Framing::Length(u64::MAX));
    assert_eq!(b.advance(b"abc"), Ok((3, false)));
    let mut b = Body::new(Framing::UntilClose);
    assert_eq!(b.advance(b"abc"), Ok((3, false)));
    assert!(!b.is_done());
}

/// A chunked body: chunks of the given sizes, each with random extensions, then trailers.
fn chunked(chunks: &[(Vec<u8>, String, bool)], trailers: &[(String, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (data, ext, upper) in chunks {
        let size = if *upper {
            format!("{:X}", data.len())
        } else {
            format!("{:x}", data.len())
        };
        out.extend_from_slice(size.as_bytes());
        out.extend_from_slice(ext.as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n");
    for (name, value) in trailers {
        out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Feeds `input` in pieces cut at `cuts`; returns what the calls consumed in total and
/// whether the message ended.
fn feed_split(framing: Framing, input: &[u8], cuts: &[usize]) -> (usize, bool) {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    cuts.sort_unstable();
    cuts.push(input.len());
    let mut body = Body::new(framing);
    let mut used = 0;
    for cut in cuts {
        // Offer everything from the consumed point to the cut (what a proxy would hold).
        let (n, done) = body.advance(&input[used..cut.max(used)]).unwrap();
        used += n;
        if done {
            return (used, true);
        }
    }
    (used, false)
}

fn ext_strategy() -> impl Strategy<Value = String> {
    prop::collection::vec(
        (
            "[a-z!#$%&'*+.^_`|~-]{1,8}",
            prop::option::of("[a-zA-Z0-9]{0,6}|\"[a-z ;=,]{0,6}\""),
        ),
        0..3,
    )
    .prop_map(|exts| {
        exts.into_iter()
            .map(|(n, v)| match v {
                Some(v) => format!(";{n}={v}"),
                None => format!(" ;{n}"),
            })
            .collect()
    })
}

proptest! {
    #[test]
    fn chunked_any_split(
        chunks in prop::collection::vec(
            (prop::collection::vec(any::<u8>(), 1..300), ext_strategy(), any::<bool>()), 0..6),
        trailers in prop::collection::vec(("[A-Za-z-]{1,10}", "[ -~]{0,20}"), 0..3),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
        next in prop::collection::vec(any::<u8>(), 0..20),
    ) {
        let trailers: Vec<(String, String)> =
            trailers.into_iter().map(|(n, v)| (n, v.trim().to_owned())).collect();
        let body = chunked(&chunks, &trailers);
        let mut stream = body.clone();
        stream.extend_from_slice(&next);
        prop_assert_eq!(feed_split(Framing::Chunked, &stream, &cuts), (body.len(), true));
        prop_assert_eq!(Body::new(Framing::Chunked).advance(&stream), Ok((body.len(), true)));
        // One byte at a time agrees too.
        prop_assert_eq!(feed(Framing::Chunked, &stream), Ok((body.len(), true)));
        // Any strict prefix leaves the message open.
        let short = body.len() - 1;
        prop_assert_eq!(feed_split(Framing::Chunked, &body[..short], &cuts), (short, false));
    }

    #[test]
    fn length_any_split(
        len in 0u64..2000,
        extra in 0usize..100,
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let stream = vec![b'x'; len as usize + extra];
        let (used, done) = feed_split(Framing::Length(len), &stream, &cuts);
        prop_assert_eq!((used, done), (len as usize, true));
        if len > 0 {
            let short = &stream[..len as usize - 1];
            prop_assert_eq!(feed_split(Framing::Length(len), short, &cuts), (short.len(), false));
        }
    }
}

// ---- writers -------------------------------------------------------------------------

fn ops(set: &[(&str, &str)], add: &[(&str, &str)], remove: &[&str]) -> HeaderOps {
    let pairs = |v: &[(&str, &str)]| v.iter().map(|(n, v)| ((*n).into(), (*v).into())).collect();
    HeaderOps {
        set: pairs(set),
        add: pairs(add),
        remove: remove.iter().map(|n| (*n).into()).collect(),
    }
}

fn edits(ops: &HeaderOps) -> RequestEdits<'_> {
    RequestEdits {
        path: None,
        authority: None,
        ops,
        forwarded_for: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        forwarded_proto: "https",
        upgrade: false,
        close: false,
        client_cert: None,
    }
}

fn write_req(buf: &[u8], edits: &RequestEdits<'_>) -> Option<String> {
    with_req(buf, |h| {
        let mut out = [0u8; 4096];
        let n = write_request_head(&mut out, h, edits)?;
        // Every shorter buffer is refused rather than filled with a truncated head.
        for short in [0, 1, n / 2, n - 1] {
            assert_eq!(write_request_head(&mut out[..short], h, edits), None);
        }
        Some(String::from_utf8_lossy(&out[..n]).into_owned())
    })
}

#[test]
fn request_head_written() {
    let none = HeaderOps::default();
    let got = write_req(
        b"GET http://Up.example:8080/a/b?x=1 HTTP/1.1\r\nHost: ignored\r\nAccept: */*\r\n\
          Connection: keep-alive, X-Hop\r\nKeep-Alive: 5\r\nProxy-Connection: x\r\nTE: trailers\r\n\
          Upgrade: h2c\r\nX-Hop: 1\r\nTrailer: X-Sum\r\nX-Forwarded-Proto: http\r\n\
          Transfer-Encoding: chunked\r\n\r\n",
        &edits(&none),
    );
    assert_eq!(
        got.as_deref(),
        Some(
            "GET /a/b?x=1 HTTP/1.1\r\nHost: Up.example:8080\r\nAccept: */*\r\nTrailer: X-Sum\r\n\
             Transfer-Encoding: chunked\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: https\r\n\r\n"
        )
    );
}

#[test]
fn request_head_edits() {
    let o = ops(
        &[("X-Set", "s"), ("accept", "text/html")],
        &[("X-Add", "a")],
        &["x-gone"],
    );
    let mut e = edits(&o);
    e.path = Some("/new");
    e.authority = Some("backend.internal");
    e.forwarded_for = IpAddr::V6(Ipv6Addr::LOCALHOST);
    let got = write_req(
        b"POST /old?q=1&r HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.2.3.4\r\nAccept: a\r\n\
          X-Gone: 1\r\nX-Set: old\r\nX-Set: old2\r\nContent-Length: 3, 3\r\nContent-Length: 3\r\n\
          X-Forwarded-For: 5.6.7.8\r\n\r\n",
        &e,
    );
    assert_eq!(
        got.as_deref(),
        Some(
            "POST /new?q=1&r HTTP/1.1\r\nHost: backend.internal\r\nX-Forwarded-For: 1.2.3.4\r\n\
             Content-Length: 3\r\nX-Forwarded-For: 5.6.7.8, ::1\r\nX-Forwarded-Proto: https\r\n\
             X-Set: s\r\naccept: text/html\r\nX-Add: a\r\n\r\n"
        )
    );
    // An empty query is kept as sent; asterisk and CONNECT targets stay.
    let none = HeaderOps::default();
    let first_line =
        |buf: &[u8]| write_req(buf, &edits(&none)).map(|s| s.lines().next().unwrap().to_owned());
    assert_eq!(
        first_line(b"GET /a? HTTP/1.1\r\nHost: a\r\n\r\n").as_deref(),
        Some("GET /a? HTTP/1.1")
    );
    assert_eq!(
        first_line(b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n").as_deref(),
        Some("OPTIONS * HTTP/1.1")
    );
    assert_eq!(
        first_line(b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n").as_deref(),
        Some("CONNECT a:443 HTTP/1.1")
    );
    // HTTP/1.0 without Host: sent as 1.1 with an empty Host.
    assert_eq!(
        write_req(b"GET / HTTP/1.0\r\n\r\n", &edits(&none)).as_deref(),
        Some("GET / HTTP/1.1\r\nHost:\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: https\r\n\r\n")
    );
}

#[test]
fn request_head_protects_framing() {
    // A client naming the framing headers or Host in Connection must not get them
    // stripped (the backend would then frame the body as the next request).
    let none = HeaderOps::default();
    let got = write_req(
        b"POST / HTTP/1.1\r\nHost: a\r\nConnection: content-length, host, x-forwarded-for\r\n\
          X-Forwarded-For: 6.6.6.6\r\nContent-Length: 4\r\n\r\n",
        &edits(&none),
    )
    .unwrap();
    assert_eq!(
        got,
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nX-Forwarded-For: 10.0.0.1\r\n\
         X-Forwarded-Proto: https\r\n\r\n"
    );
    // Ops on reserved names are ignored; ops that would split the head refuse to write.
    let reserved = ops(
        &[("Content-Length", "0"), ("Host", "evil")],
        &[("Transfer-Encoding", "chunked")],
        &["content-length"],
    );
    let got = write_req(
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\n",
        &edits(&reserved),
    )
    .unwrap();
    assert_eq!(
        got,
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nX-Forwarded-For: 10.0.0.1\r\n\
         X-Forwarded-Proto: https\r\n\r\n"
    );
    let buf = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
    for bad in [
        ops(&[("X", "a\r\nInjected: 1")], &[], &[]),
        ops(&[], &[("X", "a\nb")], &[]),
        ops(&[], &[("Bad Name", "v")], &[]),
        ops(&[], &[], &["a:b"]),
    ] {
        assert_eq!(write_req(buf, &edits(&bad)), None);
    }
    let mut e = edits(&none);
    e.path = Some("/a\r\nX: 1");
    assert_eq!(write_req(buf, &e), None);
    e.path = Some("/a?b");
    assert_eq!(write_req(buf, &e), None);
    e.path = None;
    e.authority = Some("a\r\nX: 1");
    assert_eq!(write_req(buf, &e), None);
    e.authority = None;
    e.forwarded_proto = "ht tp";
    assert_eq!(write_req(buf, &e), None);
}

/// The written head parses back to the same method, path, query and authority.
#[test]
fn request_head_reparses() {
    let none = HeaderOps::default();
    for buf in [
        &b"GET http://h.example/x?y HTTP/1.1\r\nHost: h.example\r\n\r\n"[..],
        b"POST /p HTTP/1.1\r\nHost: [::1]:80\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n",
        b"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n",
    ] {
        let written = write_req(buf, &edits(&none)).unwrap();
        let (a, b) = (req(buf), req(written.as_bytes()));
        match (a, b) {
            (
                R::Done {
                    method,
                    path,
                    query,
                    authority,
                    framing,
                    ..
                },
                R::Done {
                    method: m2,
                    path: p2,
                    query: q2,
                    authority: a2,
                    framing: f2,
                    ..
                },
            ) => assert_eq!(
                (method, path, query, authority, framing),
                (m2, p2, q2, a2, f2)
            ),
            other => panic!("{other:?}"),
        }
    }
}

fn write_resp(buf: &[u8], method: &str, ops: &HeaderOps, close: bool) -> Option<String> {
    let mut hs = [EMPTY_HEADER; MAX_HEADERS];
    let Parse::Done(h) = parse_response(buf, method, &mut hs) else {
        panic!("{}", buf.escape_ascii())
    };
    let mut out = [0u8; 4096];
    let n = write_response_head(&mut out, &h, ops, close)?;
    assert_eq!(write_response_head(&mut out[..n - 1], &h, ops, close), None);
    Some(String::from_utf8_lossy(&out[..n]).into_owned())
}

#[test]
fn response_head_written() {
    let none = HeaderOps::default();
    let buf =
        b"HTTP/1.0 200 Fine\r\nServer: s\r\nConnection: keep-alive, X-Hop\r\nKeep-Alive: t=5\r\n\
                X-Hop: 1\r\nContent-Length: 2, 2\r\nTrailer: X\r\n\r\n";
    assert_eq!(
        write_resp(buf, "GET", &none, false).as_deref(),
        Some("HTTP/1.1 200 Fine\r\nServer: s\r\nContent-Length: 2\r\nTrailer: X\r\n\r\n")
    );
    let o = ops(&[("Server", "sluice")], &[("X-A", "1")], &["trailer"]);
    assert_eq!(
        write_resp(buf, "GET", &o, true).as_deref(),
        Some("HTTP/1.1 200 Fine\r\nContent-Length: 2\r\nServer: sluice\r\nX-A: 1\r\nConnection: close\r\n\r\n")
    );
    // An empty reason gets the standard one.
    assert_eq!(
        write_resp(
            b"HTTP/1.1 404\r\nContent-Length: 0\r\n\r\n",
            "GET",
            &none,
            false
        )
        .as_deref(),
        Some("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
    );
    // 101 keeps Upgrade and says Connection: upgrade, whatever `close` says.
    assert_eq!(
        write_resp(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
            "GET",
            &none,
            true
        )
        .as_deref(),
        Some("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n")
    );
    // Upgrade is dropped on other statuses.
    assert_eq!(
        write_resp(
            b"HTTP/1.1 200 OK\r\nUpgrade: h2c\r\nContent-Length: 0\r\n\r\n",
            "GET",
            &none,
            false
        )
        .as_deref(),
        Some("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    );
    assert_eq!(
        write_resp(buf, "GET", &ops(&[("X", "\r\n")], &[], &[]), false),
        None
    );
}

fn local(
    status: u16,
    extra: &[(&str, &str)],
    body: &[u8],
    head: bool,
    close: bool,
) -> Option<String> {
    let mut out = [0u8; 1024];
    let n = write_local_response(&mut out, status, extra, body, head, close)?;
    assert_eq!(
        write_local_response(&mut out[..n - 1], status, extra, body, head, close),
        None
    );
    Some(String::from_utf8_lossy(&out[..n]).into_owned())
}

#[test]
fn local_responses() {
    assert_eq!(
        local(404, &[], b"no route\n", false, false).as_deref(),
        Some("HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nContent-Type: text/plain\r\n\r\nno route\n")
    );
    assert_eq!(
        local(404, &[], b"no route\n", true, true).as_deref(),
        Some("HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
    );
    assert_eq!(
        local(301, &[("Location", "https://a/")], b"", false, false).as_deref(),
        Some("HTTP/1.1 301 Moved Permanently\r\nLocation: https://a/\r\nContent-Length: 0\r\n\r\n")
    );
    assert_eq!(
        local(
            200,
            &[("content-type", "application/json")],
            b"{}",
            false,
            false
        )
        .as_deref(),
        Some("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nContent-Length: 2\r\n\r\n{}")
    );
    assert_eq!(
        local(204, &[], b"ignored", false, false).as_deref(),
        Some("HTTP/1.1 204 No Content\r\n\r\n")
    );
    assert_eq!(
        local(100, &[], b"", false, false).as_deref(),
        Some("HTTP/1.1 100 Continue\r\n\r\n")
    );
    assert_eq!(
        local(299, &[], b"", false, false).as_deref(),
        Some("HTTP/1.1 299 \r\nContent-Length: 0\r\n\r\n")
    );
    assert_eq!(local(99, &[], b"", false, false), None);
    assert_eq!(local(600, &[], b"", false, false), None);
    assert_eq!(local(200, &[("X", "a\r\nb")], b"", false, false), None);
    assert_eq!(
        local(200, &[("Content-Length", "5")], b"", false, false),
        None
    );
    assert_eq!(
        local(200, &[("Connection", "keep-alive")], b"", false, false),
        None
    );
    // What it writes parses as a response with the body framed exactly.
    let written = local(503, &[("Retry-After", "1")], b"busy", false, false).unwrap();
    let mut hs = [EMPTY_HEADER; MAX_HEADERS];
    let Parse::Done(h) = parse_response(written.as_bytes(), "GET", &mut hs) else {
        panic!()
    };
    assert_eq!(
        (h.status, h.framing, h.len + 4),
        (503, Framing::Length(4), written.len())
    );
    assert_eq!(reason_phrase(418), "");
    assert_eq!(reason_phrase(431), "Request Header Fields Too Large");
}

mod edits;
