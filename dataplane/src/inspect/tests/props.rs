//! Stable-Rust fuzzing: random and mutated bytes through every parser, checking the
//! contract (no panic; verdicts monotone in the prefix; `NeedMore` hints are lower bounds).
//! The coverage-guided fuzz targets in `dataplane/fuzz/` check the same with libFuzzer.

use proptest::prelude::*;

use super::tls::{alpn, records, sni, versions, Hello};
use super::vectors;
use crate::inspect::{classify, http, tls, Inspected};

/// Checks the prefix contract of a parser on `input` at prefix lengths `ks`. `verdict`
/// returns `Err(at_least)` for "need more" and `Ok(debug text)` for a verdict.
/// - a verdict at `k` is the verdict of the whole input (monotone);
/// - `NeedMore { at_least }` at `k` means `at_least > k` and the prefix `at_least - 1`
///   still has no verdict.
fn check_prefixes(input: &[u8], ks: &[usize], verdict: impl Fn(&[u8]) -> Result<String, usize>) {
    let full = verdict(input);
    for &k in ks {
        let k = k.min(input.len());
        match verdict(&input[..k]) {
            Err(at_least) => {
                assert!(at_least > k, "at_least {at_least} <= prefix {k}");
                let before = (at_least - 1).min(input.len());
                assert!(
                    verdict(&input[..before]).is_err(),
                    "prefix {before} has a verdict although {k} said at_least {at_least}"
                );
            }
            out => assert_eq!(out, full, "verdict at prefix {k} differs from the whole"),
        }
    }
}

fn tls_verdict(input: &[u8]) -> Result<String, usize> {
    match tls::parse(input) {
        tls::Outcome::NeedMore { at_least } => Err(at_least),
        other => Ok(format!("{other:?}")),
    }
}

fn http_verdict(input: &[u8]) -> Result<String, usize> {
    match http::parse(input) {
        http::Outcome::NeedMore { at_least } => Err(at_least),
        other => Ok(format!("{other:?}")),
    }
}

fn any_verdict(input: &[u8]) -> Result<String, usize> {
    match classify(input) {
        Inspected::NeedMore { at_least } => Err(at_least),
        other => Ok(format!("{other:?}")),
    }
}

fn check_all(input: &[u8], ks: &[usize]) {
    check_prefixes(input, ks, tls_verdict);
    check_prefixes(input, ks, http_verdict);
    check_prefixes(input, ks, any_verdict);
}

/// One edit to a byte string.
#[derive(Clone, Debug)]
enum Edit {
    Flip(prop::sample::Index, u8),
    Set(prop::sample::Index, u8),
    Insert(prop::sample::Index, Vec<u8>),
    Delete(prop::sample::Index, usize),
    Truncate(prop::sample::Index),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<prop::sample::Index>(), 1..=255u8).prop_map(|(i, m)| Edit::Flip(i, m)),
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Edit::Set(i, b)),
        (
            any::<prop::sample::Index>(),
            prop::collection::vec(any::<u8>(), 1..8)
        )
            .prop_map(|(i, b)| Edit::Insert(i, b)),
        (any::<prop::sample::Index>(), 1..16usize).prop_map(|(i, n)| Edit::Delete(i, n)),
        any::<prop::sample::Index>().prop_map(Edit::Truncate),
    ]
}

fn apply(mut bytes: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        if bytes.is_empty() {
            break;
        }
        let n = bytes.len();
        match e {
            Edit::Flip(i, m) => bytes[i.index(n)] ^= m,
            Edit::Set(i, b) => bytes[i.index(n)] = *b,
            Edit::Insert(i, b) => {
                let at = i.index(n + 1);
                bytes.splice(at..at, b.iter().copied());
            }
            Edit::Delete(i, k) => {
                let at = i.index(n);
                bytes.drain(at..(at + k).min(n));
            }
            Edit::Truncate(i) => bytes.truncate(i.index(n + 1)),
        }
    }
    bytes
}

/// Seeds for mutation: the real hellos, re-framed hellos, and HTTP heads.
fn seeds() -> Vec<Vec<u8>> {
    let mut s: Vec<Vec<u8>> = vectors::all().iter().map(|v| v.bytes.clone()).collect();
    let h = Hello::default()
        .with(0x0a0a, vec![])
        .with(16, alpn(&[b"h2", b"http/1.1"]))
        .with(43, versions(&[0x0304, 0x0303]))
        .with(0, sni(b"seed.example"))
        .with(0xfe0d, vec![0, 1, 2]);
    s.push(h.record());
    s.push(records(&h.message(), &[3, 40, 41, 90]));
    s.push(b"GET /x?y HTTP/1.1\r\nHost: Seed.Example:8080\r\nAccept: */*\r\n\r\n".to_vec());
    s.push(b"GET http://[::1]:80/p HTTP/1.1\r\nHost: a\r\n\r\nbody".to_vec());
    s.push(b"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n".to_vec());
    s.push(http::H2_PREFACE.to_vec());
    s
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes(input in prop::collection::vec(any::<u8>(), 0..600), ks in prop::collection::vec(0..700usize, 1..6)) {
        check_all(&input, &ks);
    }

    #[test]
    fn random_bytes_that_start_like_tls(tail in prop::collection::vec(any::<u8>(), 0..400), minor in 0..5u8, ks in prop::collection::vec(0..420usize, 1..6)) {
        let mut input = vec![0x16, 0x03, minor];
        input.extend_from_slice(&tail);
        check_all(&input, &ks);
    }

    #[test]
    fn random_bytes_that_start_like_http(tail in prop::collection::vec(prop_oneof![Just(b'\r'), Just(b'\n'), Just(b' '), Just(b':'), Just(b'['), Just(b']'), any::<u8>(), 0x20..0x7fu8], 0..300), ks in prop::collection::vec(0..330usize, 1..6)) {
        let mut input = b"GET / HTTP/1.1\r\nHost: ".to_vec();
        input.extend_from_slice(&tail);
        check_all(&input, &ks);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn mutated_seeds(seed in any::<prop::sample::Index>(), edits in prop::collection::vec(edit(), 1..5), ks in prop::collection::vec(any::<prop::sample::Index>(), 1..5)) {
        let seeds = seeds();
        let input = apply(seeds[seed.index(seeds.len())].clone(), &edits);
        let ks: Vec<usize> = ks.iter().map(|k| k.index(input.len() + 1)).collect();
        check_all(&input, &ks);
    }
}
