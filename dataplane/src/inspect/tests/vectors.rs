//! The real ClientHellos of `shared/testdata/tls` as test input, and a small pcap reader.
//!
//! The data lives outside the repository, beside it: `<repo>/../shared/testdata/tls`
//! (the workplace and CI both lay `shared/` next to the clone). Missing data fails the
//! test loudly; it is never skipped.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// `<repo>/../shared/testdata/tls`, from this crate's manifest directory.
pub fn dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/testdata/tls");
    assert!(
        dir.join("README.md").is_file(),
        "TLS test vectors not found at {} (expected <repo>/../shared/testdata/tls)",
        dir.display()
    );
    dir
}

fn read(name: &str) -> Vec<u8> {
    let path = dir().join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn unhex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text
        .bytes()
        .filter(|b| !b.is_ascii_whitespace())
        .map(|b| match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => panic!("not hex: {b:#x}"),
        })
        .collect();
    assert!(digits.len() & 1 == 0, "odd number of hex digits");
    digits.chunks(2).map(|p| p[0] << 4 | p[1]).collect()
}

/// One client stream: a name for messages and the bytes the client sent first.
pub struct Vector {
    pub name: String,
    pub bytes: Vec<u8>,
    pub expect: Expect,
}

/// What the parser must find in a vector (independently decoded, see the README table).
#[derive(Clone, Debug)]
pub struct Expect {
    /// `Some(name)` for a DNS SNI, `None` for no SNI.
    pub sni: Option<&'static str>,
    /// An IP-literal SNI, reported as such.
    pub ip_literal: Option<&'static str>,
    pub alpn: &'static [&'static str],
    pub versions: &'static [u16],
    pub ech: bool,
    /// Bytes the hello takes from the start of the stream.
    pub len: usize,
    pub records: usize,
}

const H2_H1: &[&str] = &["h2", "http/1.1"];

/// Every vector of the directory: hex files, bin files, and the client streams of the pcaps
/// (read once per test process).
pub fn all() -> &'static [Vector] {
    static ALL: std::sync::OnceLock<Vec<Vector>> = std::sync::OnceLock::new();
    ALL.get_or_init(load)
}

fn load() -> Vec<Vector> {
    let mut v = vec![
        Vector {
            name: "chrome-psk.hex".into(),
            bytes: unhex(&String::from_utf8(read("chrome-psk.hex")).expect("hex is text")),
            expect: Expect {
                sni: Some("edgeapi.slack.com"),
                ip_literal: None,
                alpn: H2_H1,
                versions: &[0x0304, 0x0303, 0x0302, 0x0301],
                ech: false,
                len: 581,
                records: 1,
            },
        },
        Vector {
            name: "firefox-padding.hex".into(),
            bytes: unhex(&String::from_utf8(read("firefox-padding.hex")).expect("hex is text")),
            expect: Expect {
                sni: Some("people-pa.clients6.google.com"),
                ip_literal: None,
                alpn: H2_H1,
                versions: &[0x0304, 0x0303],
                ech: false,
                len: 517,
                records: 1,
            },
        },
        Vector {
            name: "curl-trailing-bytes.hex".into(),
            bytes: unhex(&String::from_utf8(read("curl-trailing-bytes.hex")).expect("hex is text")),
            expect: Expect {
                sni: Some("localhost"),
                ip_literal: None,
                alpn: H2_H1,
                versions: &[0x0304, 0x0303],
                ech: false,
                len: 517,
                records: 1,
            },
        },
        Vector {
            name: "tls12-dhe-no-sni.bin".into(),
            bytes: read("tls12-dhe-no-sni.bin"),
            expect: Expect {
                sni: None,
                ip_literal: None,
                alpn: &[],
                versions: &[],
                ech: false,
                len: 154,
                records: 1,
            },
        },
        Vector {
            name: "split-record-1.bin + split-record-2.bin".into(),
            bytes: [read("split-record-1.bin"), read("split-record-2.bin")].concat(),
            expect: Expect {
                sni: None,
                ip_literal: None,
                alpn: &[],
                versions: &[],
                ech: false,
                len: 61,
                records: 2,
            },
        },
    ];
    let pcaps: [(&str, Expect); 3] = [
        (
            "chrome-x25519kyber768-two-segments.pcap",
            Expect {
                sni: Some("lh3.google.com"),
                ip_literal: None,
                alpn: H2_H1,
                versions: &[0x0304, 0x0303],
                ech: true,
                len: 1756,
                records: 1,
            },
        ),
        (
            "chrome-ech.pcap",
            Expect {
                sni: Some("cloudflare-ech.com"),
                ip_literal: None,
                alpn: H2_H1,
                versions: &[0x0304, 0x0303],
                ech: true,
                len: 517,
                records: 1,
            },
        ),
        (
            "ip-literal-sni.pcap",
            Expect {
                sni: None,
                ip_literal: Some("104.236.167.107"),
                alpn: &[],
                versions: &[],
                ech: false,
                len: 186,
                records: 1,
            },
        ),
    ];
    for (file, expect) in pcaps {
        let streams = client_streams(&read(file));
        assert!(!streams.is_empty(), "{file}: no client stream with a SYN");
        for (port, bytes) in streams {
            v.push(Vector {
                name: format!("{file} (client port {port})"),
                bytes,
                expect: expect.clone(),
            });
        }
    }
    v
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Reads a classic libpcap file (either byte order, micro- or nanosecond stamps) with
/// Ethernet frames, and returns, for each TCP connection whose SYN is in the capture, the
/// client-to-server byte stream reassembled by sequence number (up to the first gap),
/// keyed by the client's port. Only non-empty streams are returned.
pub fn client_streams(pcap: &[u8]) -> BTreeMap<u16, Vec<u8>> {
    assert!(pcap.len() >= 24, "pcap shorter than its global header");
    let magic = [pcap[0], pcap[1], pcap[2], pcap[3]];
    let le = match magic {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        _ => panic!("not a classic pcap file (magic {magic:02x?})"),
    };
    let u32_at = |at: usize| {
        let b = [pcap[at], pcap[at + 1], pcap[at + 2], pcap[at + 3]];
        if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }
    };
    assert_eq!(u32_at(20), 1, "only Ethernet captures are supported");

    // flow (src ip, src port, dst ip, dst port) -> (isn if SYN seen, segments by seq)
    type Flow = (Option<u32>, Vec<(u32, Vec<u8>)>);
    let mut flows: BTreeMap<([u8; 16], u16, [u8; 16], u16), Flow> = BTreeMap::new();
    let mut off = 24;
    while off + 16 <= pcap.len() {
        let incl = u32_at(off + 8) as usize;
        let frame = &pcap[off + 16..(off + 16 + incl).min(pcap.len())];
        off += 16 + incl;
        if frame.len() < 14 {
            continue;
        }
        let mut ethertype = be16(frame, 12);
        let mut l3 = 14;
        while ethertype == 0x8100 && frame.len() >= l3 + 4 {
            ethertype = be16(frame, l3 + 2);
            l3 += 4;
        }
        let ip = &frame[l3..];
        let (src, dst, proto, l4) = match ethertype {
            0x0800 if ip.len() >= 20 => {
                let ihl = usize::from(ip[0] & 0x0f) * 4;
                let total = usize::from(be16(ip, 2)).min(ip.len());
                let mut s = [0u8; 16];
                let mut d = [0u8; 16];
                s[..4].copy_from_slice(&ip[12..16]);
                d[..4].copy_from_slice(&ip[16..20]);
                (s, d, ip[9], &ip[ihl.min(total)..total])
            }
            0x86dd if ip.len() >= 40 => {
                let total = (40 + usize::from(be16(ip, 4))).min(ip.len());
                let mut s = [0u8; 16];
                let mut d = [0u8; 16];
                s.copy_from_slice(&ip[8..24]);
                d.copy_from_slice(&ip[24..40]);
                (s, d, ip[6], &ip[40..total])
            }
            _ => continue,
        };
        if proto != 6 || l4.len() < 20 {
            continue;
        }
        let (sport, dport, seq) = (be16(l4, 0), be16(l4, 2), be32(l4, 4));
        let data_off = (usize::from(l4[12] >> 4) * 4).min(l4.len());
        let flags = l4[13];
        let flow = flows.entry((src, sport, dst, dport)).or_default();
        if flags & 0x02 != 0 && flags & 0x10 == 0 {
            flow.0 = Some(seq.wrapping_add(1));
        }
        let payload = &l4[data_off..];
        if !payload.is_empty() {
            flow.1.push((seq, payload.to_vec()));
        }
    }

    let mut out = BTreeMap::new();
    for ((_, sport, _, _), (isn, segments)) in flows {
        let Some(isn) = isn else { continue };
        let mut by_offset: Vec<(u32, Vec<u8>)> = segments
            .into_iter()
            .map(|(seq, p)| (seq.wrapping_sub(isn), p))
            .collect();
        by_offset.sort_by_key(|(rel, _)| *rel);
        let mut stream: Vec<u8> = Vec::new();
        for (rel, payload) in by_offset {
            let rel = rel as usize;
            if rel > stream.len() {
                break; // a gap: the stream is known only up to here
            }
            let overlap = stream.len() - rel;
            if overlap < payload.len() {
                stream.extend_from_slice(&payload[overlap..]);
            }
        }
        if !stream.is_empty() {
            out.insert(sport, stream);
        }
    }
    out
}

#[test]
fn pcap_reader_reassembles_out_of_order_segments() {
    // A hand-made capture: SYN (seq 99), then "world" (seq 105) before "hello" (seq 100),
    // a retransmitted "hel", and a server-to-client segment that must not be mixed in.
    fn frame(
        src: [u8; 4],
        dst: [u8; 4],
        sp: u16,
        dp: u16,
        seq: u32,
        flags: u8,
        data: &[u8],
    ) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&0x0800u16.to_be_bytes());
        let total = (20 + 20 + data.len()) as u16;
        let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 6, 0, 0];
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip.extend_from_slice(&src);
        ip.extend_from_slice(&dst);
        f.extend_from_slice(&ip);
        let mut tcp = Vec::new();
        tcp.extend_from_slice(&sp.to_be_bytes());
        tcp.extend_from_slice(&dp.to_be_bytes());
        tcp.extend_from_slice(&seq.to_be_bytes());
        tcp.extend_from_slice(&[0, 0, 0, 0, 0x50, flags, 0, 0, 0, 0, 0, 0]);
        f.extend_from_slice(&tcp);
        f.extend_from_slice(data);
        f
    }
    let (c, s) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    let frames = [
        frame(c, s, 40000, 443, 99, 0x02, b""),
        frame(s, c, 443, 40000, 7, 0x12, b""),
        frame(c, s, 40000, 443, 105, 0x18, b"world"),
        frame(c, s, 40000, 443, 100, 0x18, b"hello"),
        frame(c, s, 40000, 443, 100, 0x18, b"hel"),
        frame(s, c, 443, 40000, 8, 0x18, b"server"),
    ];
    let mut pcap = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
    pcap.extend_from_slice(&[0; 8]);
    pcap.extend_from_slice(&65535u32.to_le_bytes());
    pcap.extend_from_slice(&1u32.to_le_bytes());
    for f in &frames {
        pcap.extend_from_slice(&[0; 8]);
        pcap.extend_from_slice(&(f.len() as u32).to_le_bytes());
        pcap.extend_from_slice(&(f.len() as u32).to_le_bytes());
        pcap.extend_from_slice(f);
    }
    let streams = client_streams(&pcap);
    assert_eq!(
        streams.len(),
        1,
        "the server's side has no SYN of its own here"
    );
    assert_eq!(streams[&40000], b"helloworld");
}
