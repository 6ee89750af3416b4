#![no_main]
//! The HTTP/1.1 codec on arbitrary bytes: request and response heads, the body after
//! them fed in random splits (which must agree with feeding it at once), and the three
//! writers on what parsed; a written request head must parse back to the same method,
//! path, query and authority.

use std::net::{IpAddr, Ipv4Addr};

use libfuzzer_sys::fuzz_target;
use sluice_dataplane::http::{self, Body, Framing, Parse, EMPTY_HEADER, MAX_HEADERS};
use sluice_dataplane::tables::http::HeaderOps;

/// The body after a head, whole and in pieces cut by the input's own bytes.
fn body(framing: Framing, rest: &[u8], cuts: &[u8]) {
    let whole = Body::new(framing).advance(rest);
    let mut b = Body::new(framing);
    let (mut used, mut last) = (0usize, Ok((0, b.is_done())));
    let mut cuts = cuts.iter().map(|&c| usize::from(c) + 1).cycle();
    while used < rest.len() {
        let end = (used + cuts.next().unwrap_or(1)).min(rest.len());
        match b.advance(&rest[used..end]) {
            Ok((n, done)) => {
                assert!(n <= end - used);
                // Until it is done, a body takes every byte it is offered.
                assert!(done || n == end - used);
                used += n;
                last = Ok((used, done));
                if done {
                    break;
                }
            }
            Err(e) => {
                last = Err(e);
                break;
            }
        }
    }
    if rest.is_empty() {
        last = Body::new(framing).advance(rest);
    }
    match (whole, last) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(a), Err(b)) => assert_eq!(a, b),
        other => panic!("whole and split differ: {other:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let ops = HeaderOps {
        set: vec![("X-Set".into(), "1".into())].into(),
        add: vec![("X-Add".into(), "2".into())].into(),
        remove: vec!["cookie".into()].into(),
    };
    let cuts = data.get(..8).unwrap_or(data);
    let mut out = vec![0u8; 32 * 1024];

    let mut hs = [EMPTY_HEADER; MAX_HEADERS];
    if let Parse::Done(head) = http::parse_request(data, &mut hs) {
        assert!(head.len <= data.len() && head.len <= http::MAX_HEAD_LEN);
        body(head.framing, &data[head.len..], cuts);
        let edits = http::RequestEdits {
            path: None,
            authority: None,
            ops: &ops,
            forwarded_for: IpAddr::V4(Ipv4Addr::LOCALHOST),
            forwarded_proto: "http",
            upgrade: true,
            close: data.first().is_some_and(|b| b & 1 == 1),
            client_cert: data
                .first()
                .is_some_and(|b| b & 2 == 2)
                .then_some("Hash=00;Subject=\"CN=c\";URI=spiffe://x/y"),
        };
        let n = http::write_request_head(&mut out, &head, &edits).expect("fits in 32 KiB");
        let mut hs2 = [EMPTY_HEADER; MAX_HEADERS];
        match http::parse_request(&out[..n], &mut hs2) {
            Parse::Done(again) => {
                assert_eq!(again.len, n);
                assert_eq!(
                    (again.method, again.path, again.query, again.authority, again.framing),
                    (head.method, head.path, head.query, head.authority, head.framing)
                );
            }
            // Over the caps once X-Forwarded-* and the ops' lines are added.
            Parse::Error(http::HeadError::TooManyHeaders | http::HeadError::TooLarge) => {}
            other => panic!("written head does not parse: {other:?}"),
        }
    }

    let method = match data.first() {
        Some(b) if b % 4 == 0 => "HEAD",
        Some(b) if b % 4 == 1 => "CONNECT",
        _ => "GET",
    };
    let mut hs = [EMPTY_HEADER; MAX_HEADERS];
    if let Parse::Done(head) = http::parse_response(data, method, &mut hs) {
        assert!(head.len <= data.len() && (100..=599).contains(&head.status));
        body(head.framing, &data[head.len..], cuts);
        let n = http::write_response_head(&mut out, &head, &ops, data.len() % 2 == 0)
            .expect("fits in 32 KiB");
        let mut hs2 = [EMPTY_HEADER; MAX_HEADERS];
        match http::parse_response(&out[..n], method, &mut hs2) {
            Parse::Done(again) => assert_eq!(again.status, head.status),
            Parse::Error(http::HeadError::TooManyHeaders | http::HeadError::TooLarge) => {}
            other => panic!("written head does not parse: {other:?}"),
        }
    }

    let status = u16::from_le_bytes([data.first().copied().unwrap_or(0), data.get(1).copied().unwrap_or(0)]);
    let text = std::str::from_utf8(data).unwrap_or("");
    let extra = [("X-Fuzz", text)];
    let _ = http::write_local_response(&mut out, status, &extra, data, false, true);
    if let Some(n) = http::write_local_response(&mut out, status % 500 + 100, &[], data, false, false) {
        let mut hs = [EMPTY_HEADER; MAX_HEADERS];
        assert!(matches!(http::parse_response(&out[..n], "GET", &mut hs), Parse::Done(_)));
    }
});
