//! Unit tests of the delayed-binding decisions and the embryo slots.

use super::*;
use crate::flow::Tuple;
use crate::inspect::name::HostName;

fn hello(sni: &str) -> Vec<u8> {
    // The minimal TLS 1.2 hello of the inspect tests, with an SNI.
    let n = sni.as_bytes();
    let mut ext = vec![0, 0];
    ext.extend_from_slice(&((n.len() + 5) as u16).to_be_bytes());
    ext.extend_from_slice(&((n.len() + 3) as u16).to_be_bytes());
    ext.push(0);
    ext.extend_from_slice(&(n.len() as u16).to_be_bytes());
    ext.extend_from_slice(n);
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7; 32]);
    body.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0]);
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&ext);
    let mut msg = vec![1, 0];
    msg.extend_from_slice(&(body.len() as u16).to_be_bytes());
    msg.extend_from_slice(&body);
    let mut rec = vec![0x16, 3, 1];
    rec.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    rec.extend_from_slice(&msg);
    rec
}

fn name(s: &str) -> Option<HostName> {
    HostName::parse(s.as_bytes()).ok()
}

#[test]
fn tls_first_bytes() {
    let h = hello("A.Example.com");
    for cut in [0, 1, 5, 20, h.len() - 1] {
        assert!(matches!(
            inspect(ListenerKind::TlsPassthrough, false, &h[..cut], None),
            Verdict::NeedMore(n) if n > cut
        ));
    }
    assert_eq!(
        inspect(ListenerKind::TlsPassthrough, false, &h, None),
        Verdict::Route {
            name: name("a.example.com"),
            path: "",
            why: None
        }
    );
    // Incomplete at the deadline: the default route, counted as the deadline.
    assert_eq!(
        inspect(
            ListenerKind::TlsPassthrough,
            false,
            &h[..10],
            Some(Event::FirstBytesTimeout)
        ),
        Verdict::Route {
            name: None,
            path: "",
            why: Some(Event::FirstBytesTimeout)
        }
    );
    // Plain text on a TLS port.
    assert_eq!(
        inspect(
            ListenerKind::TlsAutoPassthrough,
            false,
            b"GET / HTTP/1.1\r\n",
            None
        ),
        Verdict::Route {
            name: None,
            path: "",
            why: Some(Event::FirstBytesUnrecognised)
        }
    );
    // Nothing at all by the deadline (a server-first protocol).
    assert_eq!(
        inspect(
            ListenerKind::TlsPassthrough,
            false,
            b"",
            Some(Event::FirstBytesTimeout)
        ),
        Verdict::Route {
            name: None,
            path: "",
            why: Some(Event::FirstBytesTimeout)
        }
    );
}

#[test]
fn http_first_bytes_and_redirects() {
    let req = b"GET /a/b?x=1 HTTP/1.1\r\nHost: WWW.example.com:8080\r\n\r\n";
    assert_eq!(
        inspect(ListenerKind::Http, false, req, None),
        Verdict::Route {
            name: name("www.example.com"),
            path: "/a/b",
            why: None
        }
    );
    assert!(matches!(
        inspect(ListenerKind::Http, false, &req[..30], None),
        Verdict::NeedMore(_)
    ));
    assert_eq!(
        inspect(ListenerKind::Http, true, req, None),
        Verdict::HttpsRedirect {
            host: name("www.example.com").expect("name"),
            target: "/a/b?x=1"
        }
    );
    let v10 = b"GET / HTTP/1.0\r\n\r\n";
    assert_eq!(
        inspect(ListenerKind::Http, false, v10, None),
        Verdict::Route {
            name: None,
            path: "/",
            why: Some(Event::FirstBytesNoName)
        }
    );
    assert_eq!(
        inspect(ListenerKind::Http, false, &hello("x.y"), None),
        Verdict::Route {
            name: None,
            path: "",
            why: Some(Event::FirstBytesUnrecognised)
        }
    );
    let mut out = [0u8; 256];
    let n = redirect_answer(&mut out, 301, &["https://", "www.example.com", "/a?b"]).expect("fits");
    assert_eq!(
        &out[..n],
        &b"HTTP/1.1 301 Moved Permanently\r\nLocation: https://www.example.com/a?b\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"[..]
    );
    assert!(redirect_answer(&mut out, 301, &["https://", "a\r\nX: y", "/"]).is_none());
    assert!(redirect_answer(&mut out[..40], 301, &["https://", "a", "/"]).is_none());
}

#[test]
fn embryo_slots_open_close_and_run_out() {
    let mut e = Embryos::new(3, 64);
    let t = Tuple::new(
        "10.0.0.1:1".parse().expect("a"),
        "10.0.0.2:2".parse().expect("a"),
        6,
    );
    let opts = cookie::SynOptions {
        mss: 1460,
        wscale: None,
        sack: false,
    };
    let a = e.open(Embryo::new(t, opts, 1, 2)).expect("a");
    let b = e.open(Embryo::new(t, opts, 3, 4)).expect("b");
    let c = e.open(Embryo::new(t, opts, 5, 6)).expect("c");
    assert!(e.open(Embryo::new(t, opts, 7, 8)).is_none());
    assert_eq!(e.len(), 3);
    e.close(b);
    assert!(!e.is_open(b) && e.is_open(a) && e.is_open(c));
    e.close(b); // twice: no effect
    assert_eq!(e.len(), 2);
    let d = e.open(Embryo::new(t, opts, 9, 10)).expect("d");
    assert_eq!(e.get(d).client_isn, 9);
    let active: Vec<u32> = (0..e.len()).filter_map(|k| e.active(k)).collect();
    assert_eq!(active.len(), 3);
    assert_eq!(e.memory_bytes(), 3 * (std::mem::size_of::<Embryo>() + 64));
}

#[test]
fn backend_syns_default_to_three_with_exponential_backoff() {
    let c = super::SpliceConfig::default();
    assert_eq!((c.syn_tries, c.syn_rto_ms), (3, 1000));
    // SYNs at 0, 1 s and 3 s; the next backend at 7 s (Linux: 1, 2, 4 s).
    let waits: Vec<u64> = (1..=c.syn_tries)
        .map(|n| super::syn_timeout_ms(c.syn_rto_ms, n))
        .collect();
    assert_eq!(waits, vec![1000, 2000, 4000]);
    assert_eq!(super::syn_timeout_ms(1000, 200), 64_000, "capped");
    assert_eq!(super::syn_timeout_ms(u64::MAX, 3), u64::MAX, "saturates");
}
