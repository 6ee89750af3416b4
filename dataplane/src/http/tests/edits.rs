//! The request head writer's connection-level edits: `Upgrade`, `Connection: close`,
//! `X-Forwarded-Client-Cert`, and [`append_head`]'s sizing.

use super::*;

#[test]
fn request_head_upgrade() {
    let none = HeaderOps::default();
    let buf = b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
                Sec-WebSocket-Key: k\r\n\r\n";
    let mut e = edits(&none);
    e.upgrade = true;
    assert_eq!(
        write_req(buf, &e).as_deref(),
        Some(
            "GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\n\
             X-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: https\r\nConnection: upgrade\r\n\r\n"
        )
    );
    e.upgrade = false;
    assert_eq!(
        write_req(buf, &e).as_deref(),
        Some(
            "GET /ws HTTP/1.1\r\nHost: a\r\nSec-WebSocket-Key: k\r\n\
             X-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: https\r\n\r\n"
        )
    );
    // `close` asks the backend to close after its answer (mirrored copies); an upgrade
    // wins over it.
    e.close = true;
    assert_eq!(
        write_req(buf, &e).as_deref(),
        Some(
            "GET /ws HTTP/1.1\r\nHost: a\r\nSec-WebSocket-Key: k\r\n\
             X-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Proto: https\r\nConnection: close\r\n\r\n"
        )
    );
    e.upgrade = true;
    assert!(write_req(buf, &e)
        .is_some_and(|h| h.ends_with("Connection: upgrade\r\n\r\n") && !h.contains("close")));
}

/// `append_head`: a short estimate falls back to the limit with the same result; a head
/// that fits in neither leaves the buffer as it was.
#[test]
fn append_head_estimates_and_falls_back() {
    let none = HeaderOps::default();
    let e = edits(&none);
    let buf = b"GET /p?q=1 HTTP/1.1\r\nHost: a.example\r\nAccept: */*\r\n\r\n";
    let whole = write_req(buf, &e).expect("fits");
    with_req(buf, |h| {
        for estimate in [0, 10, whole.len() - 1, whole.len(), 4096] {
            let mut out = b"before".to_vec();
            let n = append_head(&mut out, estimate, 4096, |o| write_request_head(o, h, &e));
            assert_eq!(n, Some(whole.len()), "estimate {estimate}");
            assert_eq!(&out[..6], b"before");
            assert_eq!(&out[6..], whole.as_bytes(), "estimate {estimate}");
        }
        let mut out = b"kept".to_vec();
        let n = append_head(&mut out, 8, whole.len() - 1, |o| {
            write_request_head(o, h, &e)
        });
        assert_eq!((n, &out[..]), (None, &b"kept"[..]));
        Some(())
    });
}

/// `X-Forwarded-Client-Cert`: what the client sent is dropped, with or without a
/// verified certificate; the connection's value is set when there is one; a value that
/// is no valid field refuses the head.
#[test]
fn request_head_forwarded_client_cert() {
    let none = HeaderOps::default();
    let buf = b"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-Client-Cert: By=forged\r\n\r\n";
    let mut e = edits(&none);
    let plain = write_req(buf, &e).expect("fits");
    assert!(
        !plain
            .to_ascii_lowercase()
            .contains("x-forwarded-client-cert"),
        "{plain}"
    );
    e.client_cert = Some("Hash=ab;Subject=\"CN=c\";URI=spiffe://x/y");
    let set = write_req(buf, &e).expect("fits");
    assert!(!set.contains("forged"), "{set}");
    assert!(
        set.contains("\r\nX-Forwarded-Client-Cert: Hash=ab;Subject=\"CN=c\";URI=spiffe://x/y\r\n"),
        "{set}"
    );
    e.client_cert = Some("a\r\nInjected: 1");
    assert_eq!(write_req(buf, &e), None);
}
