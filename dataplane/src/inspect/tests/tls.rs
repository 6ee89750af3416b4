//! ClientHello parser tests: literal bytes, every real vector, every split.

use proptest::prelude::*;

use super::vectors::{self, Expect, Vector};
use crate::inspect::name::NameError;
use crate::inspect::tls::{self, parse, ClientHello, Field, Malformed, Outcome, ServerName};

// ---------------------------------------------------------------------------------------
// Building hellos for the tests.

/// A ClientHello under construction; `message()` encodes it with its handshake header.
#[derive(Clone)]
pub struct Hello {
    pub version: u16,
    pub session_id: Vec<u8>,
    pub suites: Vec<u16>,
    pub compression: Vec<u8>,
    /// `None`: no extensions block at all.
    pub extensions: Option<Vec<(u16, Vec<u8>)>>,
}

impl Default for Hello {
    fn default() -> Self {
        Hello {
            version: 0x0303,
            session_id: vec![0x55; 32],
            suites: vec![0x1301, 0x1302, 0xc02f],
            compression: vec![0],
            extensions: Some(Vec::new()),
        }
    }
}

fn u16b(v: usize) -> [u8; 2] {
    u16::try_from(v).unwrap().to_be_bytes()
}

impl Hello {
    pub fn with(mut self, typ: u16, data: Vec<u8>) -> Self {
        self.extensions
            .get_or_insert_with(Vec::new)
            .push((typ, data));
        self
    }

    pub fn body(&self) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&self.version.to_be_bytes());
        b.extend_from_slice(&[0xab; 32]);
        b.push(self.session_id.len() as u8);
        b.extend_from_slice(&self.session_id);
        b.extend_from_slice(&u16b(self.suites.len() * 2));
        for s in &self.suites {
            b.extend_from_slice(&s.to_be_bytes());
        }
        b.push(self.compression.len() as u8);
        b.extend_from_slice(&self.compression);
        if let Some(exts) = &self.extensions {
            let mut e = Vec::new();
            for (t, d) in exts {
                e.extend_from_slice(&t.to_be_bytes());
                e.extend_from_slice(&u16b(d.len()));
                e.extend_from_slice(d);
            }
            b.extend_from_slice(&u16b(e.len()));
            b.extend_from_slice(&e);
        }
        b
    }

    pub fn message(&self) -> Vec<u8> {
        message_of(&self.body())
    }

    /// The hello in one record.
    pub fn record(&self) -> Vec<u8> {
        records(&self.message(), &[])
    }
}

pub fn message_of(body: &[u8]) -> Vec<u8> {
    let mut m = vec![1];
    m.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    m.extend_from_slice(body);
    m
}

/// Frames `msg` into handshake records, cutting after each of `cuts` (message offsets,
/// increasing); the last record takes the rest.
pub fn records(msg: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut start = 0;
    for &c in cuts.iter().chain(std::iter::once(&msg.len())) {
        let c = c.clamp(start, msg.len());
        if c == start {
            continue;
        }
        out.extend_from_slice(&[0x16, 0x03, 0x01]);
        out.extend_from_slice(&u16b(c - start));
        out.extend_from_slice(&msg[start..c]);
        start = c;
    }
    out
}

pub fn sni(name: &[u8]) -> Vec<u8> {
    let mut entry = vec![0];
    entry.extend_from_slice(&u16b(name.len()));
    entry.extend_from_slice(name);
    let mut d = u16b(entry.len()).to_vec();
    d.extend_from_slice(&entry);
    d
}

pub fn alpn(names: &[&[u8]]) -> Vec<u8> {
    let mut list = Vec::new();
    for n in names {
        list.push(n.len() as u8);
        list.extend_from_slice(n);
    }
    let mut d = u16b(list.len()).to_vec();
    d.extend_from_slice(&list);
    d
}

pub fn versions(vs: &[u16]) -> Vec<u8> {
    let mut d = vec![(vs.len() * 2) as u8];
    for v in vs {
        d.extend_from_slice(&v.to_be_bytes());
    }
    d
}

fn hello(input: &[u8]) -> ClientHello<'_> {
    match parse(input) {
        Outcome::Hello(h) => h,
        other => panic!("expected a hello, got {other:?}"),
    }
}

fn malformed(input: &[u8]) -> Malformed {
    match parse(input) {
        Outcome::Malformed(m) => m,
        other => panic!("expected malformed, got {other:?}"),
    }
}

fn alpn_list(h: &ClientHello<'_>) -> Vec<String> {
    h.alpn
        .iter()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect()
}

// ---------------------------------------------------------------------------------------
// Literal bytes.

/// A complete minimal TLS 1.3 ClientHello, byte by byte.
const MINIMAL: &[u8] = &[
    0x16, 0x03, 0x01, 0x00, 0x3f, // record: handshake, TLS 1.0, 63 bytes
    0x01, 0x00, 0x00, 0x3b, // ClientHello, 59 bytes
    0x03, 0x03, // legacy_version
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, // random
    16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,   //
    0x00, // session id: empty
    0x00, 0x02, 0x13, 0x01, // cipher_suites: TLS_AES_128_GCM_SHA256
    0x01, 0x00, // compression: null
    0x00, 0x10, // extensions: 16 bytes
    0x00, 0x00, 0x00, 0x0c, // server_name, 12 bytes
    0x00, 0x0a, // list: 10 bytes
    0x00, 0x00, 0x07, b'E', b'x', b'.', b'O', b'r', b'g', b'.', // host_name "Ex.Org."
];

#[test]
fn minimal_hello_literal_bytes() {
    let h = hello(MINIMAL);
    assert_eq!(h.legacy_version, 0x0303);
    assert_eq!(h.routing_name().unwrap().as_str(), "ex.org");
    assert!(h.alpn.is_empty());
    assert!(h.supported_versions.as_slice().is_empty());
    assert!(!h.ech);
    assert_eq!(h.len, MINIMAL.len());
    assert_eq!(h.records, 1);
    // Every strict prefix needs more, and says exactly how much where it can.
    for k in 0..MINIMAL.len() {
        match parse(&MINIMAL[..k]) {
            Outcome::NeedMore { at_least } => {
                assert!(
                    at_least > k && at_least <= MINIMAL.len(),
                    "k={k} at_least={at_least}"
                )
            }
            other => panic!("prefix {k}: {other:?}"),
        }
    }
    assert_eq!(parse(&MINIMAL[..5]), Outcome::NeedMore { at_least: 6 });
    assert_eq!(parse(&MINIMAL[..6]), Outcome::NeedMore { at_least: 9 });
    assert_eq!(parse(&MINIMAL[..9]), Outcome::NeedMore { at_least: 68 });
    assert_eq!(parse(&MINIMAL[..60]), Outcome::NeedMore { at_least: 68 });
    // Bytes after the hello are not its business.
    let mut more = MINIMAL.to_vec();
    more.extend_from_slice(b"\x17\x03\x03\x00\x05hello");
    assert_eq!(parse(&more), parse(MINIMAL));
}

#[test]
fn not_tls() {
    assert_eq!(parse(b""), Outcome::NeedMore { at_least: 1 });
    assert_eq!(parse(b"\x16"), Outcome::NeedMore { at_least: 2 });
    assert_eq!(parse(b"\x16\x03"), Outcome::NeedMore { at_least: 5 });
    assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Outcome::NotTls);
    // An alert or application-data record first is not a hello.
    assert_eq!(parse(b"\x15\x03\x03\x00\x02\x02\x28"), Outcome::NotTls);
    // Handshake type byte but not version 3.x.
    assert_eq!(parse(b"\x16\x02\x00"), Outcome::NotTls);
    // SSLv2-compatible ClientHello (RFC 5246 appendix E.2): 2-byte length with the top bit
    // set, msg_type 1, version 3.1.
    let sslv2 = [
        0x80, 0x2e, 0x01, 0x03, 0x01, 0x00, 0x15, 0x00, 0x00, 0x00, 0x10, 0x07, 0x00, 0xc0,
    ];
    assert_eq!(parse(&sslv2), Outcome::NotTls);
    assert_eq!(parse(&sslv2[..1]), Outcome::NotTls);
}

#[test]
fn record_layer_errors() {
    assert_eq!(malformed(b"\x16\x03\x01\x00\x00"), Malformed::EmptyRecord);
    assert_eq!(
        malformed(b"\x16\x03\x01\x40\x01"),
        Malformed::RecordOverflow
    );
    assert_eq!(
        malformed(b"\x16\x03\x01\x00\x04\x02\x00\x00\x00"),
        Malformed::NotClientHello(2)
    );
    // Decided on the first message byte, before the rest of the record arrives.
    assert_eq!(
        malformed(b"\x16\x03\x01\x00\x40\x0b"),
        Malformed::NotClientHello(11)
    );

    // The hello continues in a second record that is not a handshake record, or not 3.x.
    let msg = Hello::default().with(0, sni(b"a.example")).message();
    let mut two = records(&msg, &[10]);
    let second = 5 + 10;
    two[second] = 0x17;
    assert_eq!(malformed(&two), Malformed::InterleavedRecord(0x17));
    let mut two = records(&msg, &[10]);
    two[second + 1] = 0x02;
    assert_eq!(malformed(&two), Malformed::RecordVersion);
    let mut two = records(&msg, &[10]);
    two[second + 3] = 0;
    two[second + 4] = 0;
    assert_eq!(malformed(&two), Malformed::EmptyRecord);
}

#[test]
fn too_large() {
    // Declared message length alone exceeds the cap: decided from the 9 header bytes.
    let decl = [0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0x00, 0x40, 0x00];
    assert_eq!(malformed(&decl), Malformed::TooLarge);
    assert_eq!(parse(&decl[..8]), Outcome::NeedMore { at_least: 9 });

    // A hello of exactly the cap parses; one byte more is too large.
    let fits = |total: usize| {
        // total = 5 (record) + 4 (handshake) + body; pad with a padding extension.
        let empty_padding = Hello::default()
            .with(0, sni(b"big.example"))
            .with(21, Vec::new());
        let pad = total - empty_padding.record().len();
        Hello::default()
            .with(0, sni(b"big.example"))
            .with(21, vec![0; pad])
            .record()
    };
    let at_cap = fits(tls::MAX_HELLO_LEN);
    assert_eq!(at_cap.len(), tls::MAX_HELLO_LEN);
    assert_eq!(
        hello(&at_cap).routing_name().unwrap().as_str(),
        "big.example"
    );
    let over = fits(tls::MAX_HELLO_LEN + 1);
    assert_eq!(malformed(&over), Malformed::TooLarge);

    // Tiny records: record headers count against the cap too.
    let h = Hello::default()
        .with(0, sni(b"x.example"))
        .with(21, vec![0; 3000]);
    let msg = h.message();
    let cuts: Vec<usize> = (1..msg.len()).collect(); // one byte per record
    let framed = records(&msg, &cuts);
    assert!(framed.len() > tls::MAX_HELLO_LEN);
    assert_eq!(malformed(&framed), Malformed::TooLarge);
}

#[test]
fn body_errors() {
    let base = Hello::default();
    let long_sid = Hello {
        session_id: vec![0; 33],
        ..base.clone()
    };
    assert_eq!(malformed(&long_sid.record()), Malformed::SessionIdTooLong);
    let no_suites = Hello {
        suites: vec![],
        ..base.clone()
    };
    assert_eq!(malformed(&no_suites.record()), Malformed::CipherSuites);
    let no_comp = Hello {
        compression: vec![],
        ..base.clone()
    };
    assert_eq!(malformed(&no_comp.record()), Malformed::CompressionMethods);

    // Odd cipher_suites length, by hand.
    let mut body = base.body();
    body[2 + 32 + 1 + 32 + 1] = 5; // low byte of cipher_suites length (was 6)
    assert_eq!(
        malformed(&records(&message_of(&body), &[])),
        Malformed::CipherSuites
    );

    // Extensions block longer than the body.
    let mut body = base.clone().with(0, sni(b"a.b")).body();
    let ext_len_at = body.len() - sni(b"a.b").len() - 4 - 2;
    body[ext_len_at + 1] += 1;
    assert_eq!(
        malformed(&records(&message_of(&body), &[])),
        Malformed::Truncated(Field::Extensions)
    );
    // A byte after the extensions block.
    let mut body = base.clone().body();
    body.push(0);
    assert_eq!(
        malformed(&records(&message_of(&body), &[])),
        Malformed::TrailingBytes(Field::ClientHello)
    );
    // An extension header cut short.
    let mut body = base.clone().body();
    let n = body.len();
    body[n - 1] = 3;
    body.extend_from_slice(&[0, 0, 0]);
    assert_eq!(
        malformed(&records(&message_of(&body), &[])),
        Malformed::Truncated(Field::Extension)
    );
    // Body shorter than legacy_version + random.
    assert_eq!(
        malformed(&records(&message_of(&[3, 3, 1, 2]), &[])),
        Malformed::Truncated(Field::Random)
    );
    assert_eq!(
        malformed(&records(&message_of(&[]), &[])),
        Malformed::Truncated(Field::LegacyVersion)
    );
}

#[test]
fn legacy_hello_without_extensions() {
    let h = Hello {
        extensions: None,
        ..Hello::default()
    };
    let bytes = h.record();
    let parsed = hello(&bytes);
    assert_eq!(parsed.server_name, ServerName::Absent);
    assert!(parsed.alpn.is_empty());
}

#[test]
fn sni_not_first_grease_everywhere_padding_and_ech() {
    let h = Hello {
        suites: vec![0x0a0a, 0x1301, 0xfafa],
        ..Hello::default()
    }
    .with(0x1a1a, vec![]) // GREASE extension, empty
    .with(10, vec![0x00, 0x04, 0x2a, 0x2a, 0x00, 0x1d]) // groups with GREASE
    .with(16, alpn(&[b"\x3a\x3a", b"h2", b"http/1.1"])) // GREASE ALPN id first
    .with(43, versions(&[0x7a7a, 0x0304, 0x0303]))
    .with(0xfe0d, vec![0x00, 0x00, 0x01, 0x00, 0x01, 0x42]) // ECH outer (body irrelevant)
    .with(0x4a4a, vec![0]) // another GREASE extension, 1 byte
    .with(0, sni(b"Public.Example.NET"))
    .with(21, vec![0; 200]); // padding
    let bytes = h.record();
    let p = hello(&bytes);
    assert_eq!(p.routing_name().unwrap().as_str(), "public.example.net");
    assert_eq!(alpn_list(&p), ["h2", "http/1.1"]);
    assert!(p.alpn.contains(b"h2"));
    assert!(!p.alpn.is_truncated());
    assert_eq!(p.supported_versions.as_slice(), &[0x0304, 0x0303]);
    assert!(p.ech);
}

#[test]
fn server_name_variants() {
    let name_of = |d: Vec<u8>| hello(&Hello::default().with(0, d).record()).server_name;
    // IP literals: forbidden by RFC 6066, reported distinctly, never a routing name.
    let v4 = name_of(sni(b"192.0.2.7"));
    assert_eq!(v4, ServerName::IpLiteral("192.0.2.7".parse().unwrap()));
    assert_eq!(v4.routing_name(), None);
    assert_eq!(
        name_of(sni(b"2001:db8::1")),
        ServerName::IpLiteral("2001:db8::1".parse().unwrap())
    );
    // Not a DNS name.
    assert_eq!(
        name_of(sni(b"bad name.example")),
        ServerName::Invalid(NameError::InvalidByte(b' '))
    );
    assert_eq!(
        name_of(sni(&[b'a'; 300])),
        ServerName::Invalid(NameError::TooLong)
    );
    // A trailing dot names the same host.
    match name_of(sni(b"Host.Example.")) {
        ServerName::Dns(n) => assert_eq!(n.as_str(), "host.example"),
        other => panic!("{other:?}"),
    }
    // A list with only an unknown name type: no host name.
    assert_eq!(name_of(vec![0, 4, 7, 0, 1, b'x']), ServerName::Absent);
    // An unknown name type before the host name is skipped.
    let mut d = vec![0, 4 + 3 + 5, 7, 0, 1, b'x'];
    d.extend_from_slice(&[0, 0, 5]);
    d.extend_from_slice(b"a.com");
    d[1] = (d.len() - 2) as u8;
    match name_of(d) {
        ServerName::Dns(n) => assert_eq!(n.as_str(), "a.com"),
        other => panic!("{other:?}"),
    }

    let bad = |d: Vec<u8>| malformed(&Hello::default().with(0, d).record());
    assert_eq!(bad(vec![0, 0]), Malformed::EmptyServerNameList);
    assert_eq!(bad(vec![]), Malformed::Truncated(Field::ServerNameList));
    assert_eq!(bad(vec![0, 3, 0, 0, 0]), Malformed::EmptyHostName);
    assert_eq!(
        bad(vec![0, 4, 0, 0, 5, b'a']),
        Malformed::Truncated(Field::ServerName)
    );
    assert_eq!(
        bad(vec![0, 9, 0, 0, 1, b'a']),
        Malformed::Truncated(Field::ServerNameList)
    );
    let mut two = sni(b"a.com");
    two.extend_from_slice(&[9]);
    assert_eq!(bad(two), Malformed::TrailingBytes(Field::ServerNameList));
    let dup = vec![0, 8, 0, 0, 1, b'a', 0, 0, 1, b'b'];
    assert_eq!(bad(dup), Malformed::DuplicateHostName);
    // The extension itself twice.
    let twice = Hello::default()
        .with(0, sni(b"a.com"))
        .with(0, sni(b"b.com"));
    assert_eq!(malformed(&twice.record()), Malformed::DuplicateExtension(0));
}

#[test]
fn alpn_and_versions_edge_cases() {
    let bad = |t: u16, d: Vec<u8>| malformed(&Hello::default().with(t, d).record());
    assert_eq!(bad(16, vec![0, 0]), Malformed::EmptyAlpnList);
    assert_eq!(
        bad(16, vec![0, 3, 0, b'h', b'2']),
        Malformed::EmptyAlpnProtocol
    );
    assert_eq!(
        bad(16, vec![0, 3, 3, b'h', b'2']),
        Malformed::Truncated(Field::AlpnProtocol)
    );
    assert_eq!(
        bad(16, vec![0, 9, 2, b'h', b'2']),
        Malformed::Truncated(Field::AlpnList)
    );
    assert_eq!(bad(43, vec![0]), Malformed::SupportedVersions);
    assert_eq!(bad(43, vec![3, 3, 4, 3]), Malformed::SupportedVersions);
    assert_eq!(
        bad(43, vec![4, 3, 4]),
        Malformed::Truncated(Field::SupportedVersions)
    );
    assert_eq!(
        bad(43, vec![2, 3, 4, 0]),
        Malformed::TrailingBytes(Field::SupportedVersions)
    );
    let dup = Hello::default()
        .with(16, alpn(&[b"h2"]))
        .with(16, alpn(&[b"h2"]));
    assert_eq!(malformed(&dup.record()), Malformed::DuplicateExtension(16));
    let dup = Hello::default().with(0xfe0d, vec![]).with(0xfe0d, vec![]);
    assert_eq!(
        malformed(&dup.record()),
        Malformed::DuplicateExtension(0xfe0d)
    );

    // More protocols than are kept: the first 8 are kept, the list says it is truncated.
    let names: Vec<Vec<u8>> = (0..11).map(|i| format!("proto-{i}").into_bytes()).collect();
    let refs: Vec<&[u8]> = names.iter().map(|n| n.as_slice()).collect();
    let bytes = Hello::default().with(16, alpn(&refs)).record();
    let p = hello(&bytes).alpn;
    assert_eq!(p.len(), tls::MAX_ALPN_PROTOCOLS);
    assert!(p.is_truncated());
    assert_eq!(p.iter().last().unwrap(), b"proto-7");

    // Versions: more than kept.
    let many: Vec<u16> = (0..12).map(|i| 0x0300 + i).collect();
    let v = hello(&Hello::default().with(43, versions(&many)).record()).supported_versions;
    assert_eq!(v.as_slice().len(), tls::MAX_VERSIONS);
    assert!(v.is_truncated());
}

#[test]
fn grease_values() {
    for hi in 0..16u16 {
        let g = (hi << 12) | 0x0a00 | (hi << 4) | 0x0a;
        assert!(tls::is_grease(g), "{g:#06x}");
    }
    assert!(!tls::is_grease(0x0a1a));
    assert!(!tls::is_grease(0x0304));
    assert!(!tls::is_grease(0x1a0a));
}

#[test]
fn hello_over_many_records_with_fields_straddling_boundaries() {
    let h = Hello::default()
        .with(16, alpn(&[b"h2", b"a-long-protocol-name/1.0", b"http/1.1"]))
        .with(43, versions(&[0x0304, 0x0303]))
        .with(0, sni(b"Straddle.Example.COM"));
    let msg = h.message();
    let one = records(&msg, &[]);
    let whole = hello(&one);
    // Cut at every offset, then at every pair of offsets (3 records).
    for a in 1..msg.len() {
        let framed = records(&msg, &[a]);
        let p = hello(&framed);
        assert_eq!(summary(&p), summary(&whole), "cut at {a}");
        assert_eq!(p.records, 2);
        assert_eq!(p.len, framed.len());
    }
    for a in (1..msg.len()).step_by(7) {
        for b in (a + 1..msg.len()).step_by(5) {
            let framed = records(&msg, &[a, b]);
            let p = hello(&framed);
            assert_eq!(summary(&p), summary(&whole), "cuts at {a},{b}");
        }
    }
    // One byte per record: every length field straddles.
    let cuts: Vec<usize> = (1..msg.len()).collect();
    let framed = records(&msg, &cuts);
    let p = hello(&framed);
    assert_eq!(summary(&p), summary(&whole));
    assert_eq!(p.records, msg.len());
}

// ---------------------------------------------------------------------------------------
// The real vectors.

/// What a hello says, independent of where its bytes were.
#[derive(Debug, PartialEq, Eq)]
pub struct Summary {
    pub sni: Option<String>,
    pub ip_literal: Option<String>,
    pub alpn: Vec<Vec<u8>>,
    pub versions: Vec<u16>,
    pub ech: bool,
    pub legacy_version: u16,
}

pub fn summary(h: &ClientHello<'_>) -> Summary {
    Summary {
        sni: h.routing_name().map(|n| n.as_str().to_owned()),
        ip_literal: match h.server_name {
            ServerName::IpLiteral(ip) => Some(ip.to_string()),
            _ => None,
        },
        alpn: h.alpn.iter().map(<[u8]>::to_vec).collect(),
        versions: h.supported_versions.as_slice().to_vec(),
        ech: h.ech,
        legacy_version: h.legacy_version,
    }
}

fn expected(e: &Expect) -> Summary {
    Summary {
        sni: e.sni.map(str::to_owned),
        ip_literal: e.ip_literal.map(str::to_owned),
        alpn: e.alpn.iter().map(|a| a.as_bytes().to_vec()).collect(),
        versions: e.versions.to_vec(),
        ech: e.ech,
        legacy_version: 0x0303,
    }
}

#[test]
fn every_vector_parses_to_its_expected_hello() {
    let all = vectors::all();
    // 5 files + 4 client streams (chrome-ech has two connections).
    assert_eq!(
        all.len(),
        9,
        "{:?}",
        all.iter().map(|v| &v.name).collect::<Vec<_>>()
    );
    for Vector {
        name,
        bytes,
        expect,
    } in all
    {
        let h = match parse(bytes) {
            Outcome::Hello(h) => h,
            other => panic!("{name}: {other:?}"),
        };
        assert_eq!(summary(&h), expected(expect), "{name}");
        assert_eq!(h.len, expect.len, "{name}: hello length");
        assert_eq!(h.records, expect.records, "{name}: records");
    }
}

#[test]
fn trailing_bytes_are_really_there() {
    // The README promises bytes after the record in these: make sure the test covers them.
    for v in vectors::all() {
        if v.name.starts_with("curl") || v.name.starts_with("chrome-ech") {
            assert!(v.bytes.len() > v.expect.len, "{}", v.name);
        }
    }
}

/// Feeding a vector as two segments (prefix, then all of it) at every boundary gives the
/// same hello; every prefix shorter than the hello needs more, with an honest hint.
#[test]
fn every_vector_split_at_every_byte() {
    for v in vectors::all() {
        let full = parse(&v.bytes);
        assert!(matches!(full, Outcome::Hello(_)), "{}", v.name);
        for k in 0..=v.bytes.len() {
            let first = parse(&v.bytes[..k]);
            if k < v.expect.len {
                match first {
                    Outcome::NeedMore { at_least } => assert!(
                        at_least > k && at_least <= v.expect.len,
                        "{}: prefix {k}: at_least {at_least}",
                        v.name
                    ),
                    other => panic!("{}: prefix {k}: {other:?}", v.name),
                }
            } else {
                assert_eq!(first, full, "{}: prefix {k}", v.name);
            }
            assert_eq!(parse(&v.bytes), full);
        }
    }
}

/// Delivers `bytes` in segments ending at `cuts`; returns the first verdict and the prefix
/// length it came at. Panics if a verdict changes.
fn deliver<'a>(bytes: &'a [u8], cuts: &[usize]) -> (Outcome<'a>, usize) {
    let mut verdict: Option<(Outcome<'a>, usize)> = None;
    for &end in cuts.iter().chain(std::iter::once(&bytes.len())) {
        let out = parse(&bytes[..end]);
        match (&verdict, out) {
            (None, Outcome::NeedMore { at_least }) => assert!(at_least > end),
            (None, out) => verdict = Some((out, end)),
            (Some((v, _)), out) => assert_eq!(&out, v, "verdict changed at {end}"),
        }
    }
    verdict.expect("a complete vector gives a verdict")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Three segments at random boundaries: same hello as in one piece.
    #[test]
    fn every_vector_random_three_way_splits(a in any::<prop::sample::Index>(), b in any::<prop::sample::Index>()) {
        for v in vectors::all() {
            let n = v.bytes.len() + 1;
            let (x, y) = (a.index(n), b.index(n));
            let (x, y) = (x.min(y), x.max(y));
            let (out, _) = deliver(&v.bytes, &[x, y]);
            prop_assert_eq!(&out, &parse(&v.bytes), "{}", v.name);
        }
    }

    /// Re-framing a vector's hello into random records changes nothing but `records`/`len`.
    #[test]
    fn every_vector_random_reframing(cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6)) {
        for v in vectors::all() {
            let whole = match parse(&v.bytes) { Outcome::Hello(h) => summary(&h), o => panic!("{o:?}") };
            let msg = handshake_message(&v.bytes);
            let mut offsets: Vec<usize> = cuts.iter().map(|i| i.index(msg.len())).collect();
            offsets.sort_unstable();
            let framed = records(&msg, &offsets);
            match parse(&framed) {
                Outcome::Hello(h) => {
                    prop_assert_eq!(summary(&h), whole, "{}", v.name);
                    prop_assert_eq!(h.len, framed.len());
                }
                other => prop_assert!(false, "{}: {:?}", v.name, other),
            }
        }
    }
}

/// The handshake message of a vector, gathered from its records (test-side, simple).
pub fn handshake_message(stream: &[u8]) -> Vec<u8> {
    let mut msg = Vec::new();
    let mut p = 0;
    loop {
        let len = usize::from(u16::from_be_bytes([stream[p + 3], stream[p + 4]]));
        msg.extend_from_slice(&stream[p + 5..p + 5 + len]);
        p += 5 + len;
        if msg.len() >= 4 {
            let total =
                4 + (usize::from(msg[1]) << 16 | usize::from(msg[2]) << 8 | usize::from(msg[3]));
            if msg.len() >= total {
                msg.truncate(total);
                return msg;
            }
        }
    }
}
