//! `bench_inspect`: first-payload inspection and host matching, printed as JSON.
//!
//! 1. **ClientHello parsing**, per hello, on the real vectors of `shared/testdata/tls`
//!    (hex, bin and the client streams of the pcaps), side by side in the same run with the
//!    `tls-parser` crate (record + ClientHello + extensions, SNI and ALPN extracted) and
//!    rustls's `server::Acceptor` (`read_tls` + `accept`, SNI and ALPN read). Each cell is
//!    the median of several timed rounds; ratios are peer / sluice (> 1: sluice faster).
//! 2. **Host lookup** in `tables::hosts::HostMatcher` at 10, 10k and 1M hostnames (80 %
//!    exact names, 20 % wildcards, plus a catch-all), with a query mix of exact hits,
//!    wildcard hits and misses in mixed case, for several query pools (64 to 256Ki
//!    distinct queries cycled, each pool's bytes in one contiguous arena as packet
//!    buffers would be), one `lookup` per name as delayed binding makes them. The
//!    lookup's work is the same at every size; what grows with the table is the memory a
//!    working set of queries touches: a fingerprint line per candidate key and a slot per
//!    name, which a small table keeps in cache and a big one fetches from the last-level
//!    cache and DRAM. Printed: ns per lookup per pool and the 1M/10 ratios per pool, from
//!    the rounds' medians and from their lower quartiles (`quiet`: DRAM latency here
//!    rises and falls with load from outside the VM, which slows only the big table).
//!    Beside them, the latency of one dependent load over 1 MiB, 4 MiB and the 1M table's
//!    size (a pointer chase): the price of each level of indirection a lookup cannot find
//!    in cache, which is what separates the sizes.
//!
//! All contenders of a table are timed round-robin in the same run (see
//! [`time_interleaved`]), so load from elsewhere on the machine falls on all of them.
//!
//! Usage: `cargo run --release -p sluice-perf --bin bench_inspect [TESTDATA_DIR]`
//! (default `$SLUICE_TESTDATA`, else `<repo>/../shared/testdata/tls`), or `... --bin
//! bench_inspect -- --hosts-only` for the host lookups alone (`--help` explains). Numbers are printed, never asserted; the run takes well
//! under a minute on two cores.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::{json, Value};
use sluice_dataplane::inspect::tls;
use sluice_dataplane::tables::hosts::{HostMatcher, HostPattern, MatchKind};
use sluice_perf::fixtures::{testdata_dir, unhex};
use sluice_perf::stats;

/// Timed rounds per cell; the median is reported, and for host lookups the quiet
/// figure too (see [`time_interleaved`]).
const ROUNDS: usize = 15;
/// Target duration of one round.
const ROUND_TIME: Duration = Duration::from_millis(40);

/// A measured closure; returns something derived from its work (kept from the optimiser).
type Work<'a> = Box<dyn FnMut() -> usize + 'a>;

/// Times each closure in `work`, round-robin: `ROUNDS` rounds, each giving every closure
/// about `ROUND_TIME`, so that noise from other load falls on all of them alike. Returns
/// the median ns per call of each, and its quiet figure: the lower quartile of its
/// rounds (the machine's memory system is disturbed from outside in phases, which slows
/// the lookups that go to DRAM and not those that stay in cache; see
/// `sluice_perf::WINDOW`).
fn time_interleaved(mut work: Vec<Work<'_>>) -> Vec<(f64, f64)> {
    // A batch size per closure that takes about 1 ms.
    let batches: Vec<usize> = work
        .iter_mut()
        .map(|f| {
            let mut batch = 1usize;
            loop {
                let t = Instant::now();
                for _ in 0..batch {
                    black_box(f());
                }
                if t.elapsed() >= Duration::from_millis(1) || batch >= 1 << 30 {
                    return batch;
                }
                batch *= 2;
            }
        })
        .collect();
    let mut samples = vec![Vec::with_capacity(ROUNDS); work.len()];
    for _ in 0..ROUNDS {
        for ((f, &batch), out) in work.iter_mut().zip(&batches).zip(&mut samples) {
            let t = Instant::now();
            let mut calls = 0usize;
            while t.elapsed() < ROUND_TIME {
                for _ in 0..batch {
                    black_box(f());
                }
                calls += batch;
            }
            out.push(t.elapsed().as_nanos() as f64 / calls as f64);
        }
    }
    samples
        .iter()
        .map(|v| (stats::median(v), stats::quantile(v, 0.25)))
        .collect()
}

// ---------------------------------------------------------------------------------------
// ClientHello vectors.

/// Client-to-server streams (keyed by client port) of the connections whose SYN is in a
/// classic little- or big-endian Ethernet pcap, reassembled by sequence number.
fn pcap_client_streams(pcap: &[u8]) -> BTreeMap<u16, Vec<u8>> {
    let be16 = |b: &[u8], at: usize| u16::from_be_bytes([b[at], b[at + 1]]);
    let be32 = |b: &[u8], at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let le = pcap.get(..4) == Some(&[0xd4, 0xc3, 0xb2, 0xa1])
        || pcap.get(..4) == Some(&[0x4d, 0x3c, 0xb2, 0xa1]);
    let u32_at = |at: usize| {
        let b = [pcap[at], pcap[at + 1], pcap[at + 2], pcap[at + 3]];
        if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }
    };
    type Flow = (Option<u32>, Vec<(u32, Vec<u8>)>);
    let mut flows: BTreeMap<([u8; 4], u16, [u8; 4], u16), Flow> = BTreeMap::new();
    let mut off = 24;
    while off + 16 <= pcap.len() {
        let incl = u32_at(off + 8) as usize;
        let frame = &pcap[off + 16..(off + 16 + incl).min(pcap.len())];
        off += 16 + incl;
        if frame.len() < 34 || be16(frame, 12) != 0x0800 || frame[23] != 6 {
            continue;
        }
        let ip = &frame[14..];
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        let total = usize::from(be16(ip, 2)).min(ip.len());
        let l4 = &ip[ihl.min(total)..total];
        if l4.len() < 20 {
            continue;
        }
        let key = (
            [ip[12], ip[13], ip[14], ip[15]],
            be16(l4, 0),
            [ip[16], ip[17], ip[18], ip[19]],
            be16(l4, 2),
        );
        let flow = flows.entry(key).or_default();
        let flags = l4[13];
        if flags & 0x12 == 0x02 {
            flow.0 = Some(be32(l4, 4).wrapping_add(1));
        }
        let payload = &l4[(usize::from(l4[12] >> 4) * 4).min(l4.len())..];
        if !payload.is_empty() {
            flow.1.push((be32(l4, 4), payload.to_vec()));
        }
    }
    let mut out = BTreeMap::new();
    for ((_, sport, _, _), (isn, mut segments)) in flows {
        let Some(isn) = isn else { continue };
        segments.sort_by_key(|(seq, _)| seq.wrapping_sub(isn));
        let mut stream: Vec<u8> = Vec::new();
        for (seq, p) in segments {
            let rel = seq.wrapping_sub(isn) as usize;
            if rel > stream.len() {
                break;
            }
            let overlap = stream.len() - rel;
            if overlap < p.len() {
                stream.extend_from_slice(&p[overlap..]);
            }
        }
        if !stream.is_empty() {
            out.insert(sport, stream);
        }
    }
    out
}

fn vectors(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let read = |name: &str| {
        std::fs::read(dir.join(name)).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (pass the testdata dir as argument)",
                dir.join(name).display()
            )
        })
    };
    let mut v = Vec::new();
    for f in [
        "chrome-psk.hex",
        "firefox-padding.hex",
        "curl-trailing-bytes.hex",
    ] {
        v.push((f.to_string(), unhex(&String::from_utf8_lossy(&read(f)))));
    }
    v.push(("tls12-dhe-no-sni.bin".into(), read("tls12-dhe-no-sni.bin")));
    v.push((
        "split-record-1+2.bin".into(),
        [read("split-record-1.bin"), read("split-record-2.bin")].concat(),
    ));
    for f in [
        "chrome-x25519kyber768-two-segments.pcap",
        "chrome-ech.pcap",
        "ip-literal-sni.pcap",
    ] {
        for (port, stream) in pcap_client_streams(&read(f)) {
            v.push((format!("{f}:{port}"), stream));
        }
    }
    v
}

/// What a parser found: (SNI, ALPN protocol count), or why it failed.
type Found = Result<(Option<String>, usize), String>;

fn sluice_parse(bytes: &[u8]) -> Found {
    match tls::parse(bytes) {
        tls::Outcome::Hello(h) => {
            let sni = match h.server_name {
                tls::ServerName::Dns(n) => Some(n.to_string()),
                tls::ServerName::IpLiteral(ip) => Some(ip.to_string()),
                _ => None,
            };
            Ok((sni, h.alpn.len()))
        }
        other => Err(format!("{other:?}")),
    }
}

fn sluice_once(bytes: &[u8]) -> usize {
    match tls::parse(bytes) {
        tls::Outcome::Hello(h) => h.routing_name().map_or(0, |n| n.len()) + h.alpn.len(),
        _ => 0,
    }
}

fn tls_parser_parse(bytes: &[u8]) -> Found {
    use tls_parser::{
        parse_tls_extensions, parse_tls_plaintext, TlsExtension, TlsMessage, TlsMessageHandshake,
    };
    let (_, record) = parse_tls_plaintext(bytes).map_err(|e| format!("record: {e:?}"))?;
    for msg in &record.msg {
        if let TlsMessage::Handshake(TlsMessageHandshake::ClientHello(ch)) = msg {
            let (mut sni, mut alpn) = (None, 0);
            if let Some(ext) = ch.ext {
                let (_, exts) = parse_tls_extensions(ext).map_err(|e| format!("ext: {e:?}"))?;
                for e in exts {
                    match e {
                        TlsExtension::SNI(names) => {
                            sni = names
                                .first()
                                .map(|(_, n)| String::from_utf8_lossy(n).to_ascii_lowercase())
                        }
                        TlsExtension::ALPN(list) => alpn = list.len(),
                        _ => {}
                    }
                }
            }
            return Ok((sni, alpn));
        }
    }
    Err("no ClientHello".into())
}

fn tls_parser_once(bytes: &[u8]) -> usize {
    use tls_parser::{
        parse_tls_extensions, parse_tls_plaintext, TlsExtension, TlsMessage, TlsMessageHandshake,
    };
    let Ok((_, record)) = parse_tls_plaintext(bytes) else {
        return 0;
    };
    let mut n = 0;
    for msg in &record.msg {
        if let TlsMessage::Handshake(TlsMessageHandshake::ClientHello(ch)) = msg {
            if let Some(Ok((_, exts))) = ch.ext.map(parse_tls_extensions) {
                for e in exts {
                    match e {
                        TlsExtension::SNI(names) => n += names.first().map_or(0, |(_, s)| s.len()),
                        TlsExtension::ALPN(list) => n += list.len(),
                        _ => {}
                    }
                }
            }
        }
    }
    n
}

fn rustls_parse(bytes: &[u8]) -> Found {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut rd = bytes;
    while !rd.is_empty() {
        acceptor
            .read_tls(&mut rd)
            .map_err(|e| format!("read_tls: {e}"))?;
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                let ch = accepted.client_hello();
                let sni = ch.server_name().map(str::to_owned);
                let alpn = ch.alpn().map_or(0, Iterator::count);
                return Ok((sni, alpn));
            }
            Ok(None) => continue,
            Err((e, _)) => return Err(format!("accept: {e}")),
        }
    }
    Err("need more".into())
}

fn rustls_once(bytes: &[u8]) -> usize {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut rd = bytes;
    while !rd.is_empty() {
        if acceptor.read_tls(&mut rd).is_err() {
            return 0;
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                let ch = accepted.client_hello();
                return ch.server_name().map_or(0, str::len) + ch.alpn().map_or(0, Iterator::count);
            }
            Ok(None) => continue,
            Err(_) => return 0,
        }
    }
    0
}

fn ratio(peer: Option<f64>, ours: f64) -> Value {
    peer.map_or(Value::Null, |p| json!((p / ours * 100.0).round() / 100.0))
}

fn bench_client_hello(dir: &Path) -> Value {
    let mut rows = Vec::new();
    let (mut log_tp, mut n_tp, mut log_rl, mut n_rl) = (0.0, 0, 0.0, 0);
    for (name, bytes) in vectors(dir) {
        let found = sluice_parse(&bytes);
        let tp = tls_parser_parse(&bytes);
        let rl = rustls_parse(&bytes);
        // A peer is timed only where it finds the same hello.
        let mut work: Vec<Work<'_>> = vec![Box::new(|| sluice_once(black_box(&bytes)))];
        if tp == found {
            work.push(Box::new(|| tls_parser_once(black_box(&bytes))));
        }
        if rl == found {
            work.push(Box::new(|| rustls_once(black_box(&bytes))));
        }
        let times: Vec<f64> = time_interleaved(work).into_iter().map(|t| t.0).collect();
        let ours = times[0];
        let mut rest = times[1..].iter().copied();
        let tp_ns = if tp == found { rest.next() } else { None };
        let rl_ns = if rl == found { rest.next() } else { None };
        if let Some(t) = tp_ns {
            log_tp += (t / ours).ln();
            n_tp += 1;
        }
        if let Some(t) = rl_ns {
            log_rl += (t / ours).ln();
            n_rl += 1;
        }
        let describe = |f: &Found| match f {
            Ok((sni, alpn)) => json!({"sni": sni, "alpn": alpn}),
            Err(e) => json!({"error": e}),
        };
        rows.push(json!({
            "vector": name,
            "bytes": bytes.len(),
            "sluice": describe(&found),
            "sluice_ns": (ours * 10.0).round() / 10.0,
            "tls_parser_ns": tp_ns.map(|t| (t * 10.0).round() / 10.0),
            "rustls_acceptor_ns": rl_ns.map(|t| (t * 10.0).round() / 10.0),
            "ratio_tls_parser": ratio(tp_ns, ours),
            "ratio_rustls_acceptor": ratio(rl_ns, ours),
            "tls_parser_result": if tp == found { json!("same") } else { describe(&tp) },
            "rustls_result": if rl == found { json!("same") } else { describe(&rl) },
        }));
    }
    let geo = |sum: f64, n: i32| {
        if n == 0 {
            Value::Null
        } else {
            json!(((sum / f64::from(n)).exp() * 100.0).round() / 100.0)
        }
    };
    json!({
        "what": "ns per ClientHello parse (median of rounds); ratio = peer_ns / sluice_ns",
        "vectors": rows,
        "geomean_ratio_tls_parser": geo(log_tp, n_tp),
        "geomean_ratio_rustls_acceptor": geo(log_rl, n_rl),
    })
}

// ---------------------------------------------------------------------------------------
// Host lookup.

/// xorshift64*: deterministic, good enough to make names.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn label(&mut self) -> String {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        let len = 3 + self.below(8);
        (0..len)
            .map(|_| ALPHABET[self.below(ALPHABET.len())] as char)
            .collect()
    }
}

const TLDS: [&str; 6] = ["com", "net", "org", "io", "dev", "cloud"];

/// `n` distinct patterns: 80 % exact names (2-4 labels), 20 % wildcards, plus `*`.
fn hostnames(n: usize, rng: &mut Rng) -> (Vec<String>, Vec<String>) {
    let mut exact = Vec::new();
    let mut wild = Vec::new();
    let mut seen = std::collections::HashSet::new();
    while exact.len() + wild.len() < n {
        let labels = 1 + rng.below(3);
        let mut name: Vec<String> = (0..labels).map(|_| rng.label()).collect();
        name.push(TLDS[rng.below(TLDS.len())].to_string());
        let name = name.join(".");
        let is_wild = rng.below(5) == 0;
        if !seen.insert((is_wild, name.clone())) {
            continue;
        }
        if is_wild {
            wild.push(name)
        } else {
            exact.push(name)
        }
    }
    (exact, wild)
}

/// Mixed-case copy.
fn shout(s: &str, rng: &mut Rng) -> Vec<u8> {
    s.bytes()
        .map(|b| {
            if rng.below(4) == 0 {
                b.to_ascii_uppercase()
            } else {
                b
            }
        })
        .collect()
}

/// Queries: 50 % exact hits, 30 % wildcard hits (one or two labels under a wildcard),
/// 20 % misses (random names, caught by `*`).
fn queries(exact: &[String], wild: &[String], count: usize, rng: &mut Rng) -> Vec<Vec<u8>> {
    (0..count)
        .map(|_| {
            let dice = rng.below(10);
            if dice < 5 && !exact.is_empty() {
                shout(&exact[rng.below(exact.len())], rng)
            } else if dice < 8 && !wild.is_empty() {
                let mut q = rng.label();
                if rng.below(2) == 0 {
                    q = format!("{}.{q}", rng.label());
                }
                shout(&format!("{q}.{}", wild[rng.below(wild.len())]), rng)
            } else {
                shout(&format!("{}.{}.example", rng.label(), rng.label()), rng)
            }
        })
        .collect()
}

/// A query pool laid out the way a dataplane holds names (packet buffers of one mempool):
/// every query's bytes in one contiguous arena, in pool order, whatever the heap looked
/// like when they were made. (Separately allocated queries ended up scattered over a heap
/// fragmented by building the big name sets, so the 1M table's queries missed cache and
/// TLB on their own bytes, ~10x more than the 10-name table's: a cost of the benchmark,
/// not of the matcher.)
fn contiguous(pool: &[Vec<u8>]) -> (Vec<u8>, Vec<std::ops::Range<usize>>) {
    let mut arena = Vec::with_capacity(pool.iter().map(Vec::len).sum());
    let spans = pool
        .iter()
        .map(|q| {
            let start = arena.len();
            arena.extend_from_slice(q);
            start..arena.len()
        })
        .collect();
    (arena, spans)
}

/// Query pools, by number of distinct queries cycled: from a working set that stays in
/// the TLB's and caches' reach to one spread over the whole table.
const POOLS: [usize; 4] = [64, 256, 1024, 1 << 18];

fn bench_hosts() -> Value {
    struct Size {
        n: usize,
        exact: usize,
        wild: usize,
        build_ms: f64,
        matcher: HostMatcher,
        /// Each pool's query bytes (one arena) and where each query lies in it.
        pools: Vec<(Vec<u8>, Vec<std::ops::Range<usize>>)>,
    }
    let sizes: Vec<Size> = [10usize, 10_000, 1_000_000]
        .iter()
        .map(|&n| {
            let mut rng = Rng(0x5eed_0000 + n as u64);
            let (exact, wild) = hostnames(n, &mut rng);
            let (e, w) = (exact.len(), wild.len());
            let patterns: Vec<(HostPattern, u32)> = exact
                .iter()
                .cloned()
                .map(HostPattern::Exact)
                .chain(wild.iter().cloned().map(HostPattern::Wildcard))
                .chain(std::iter::once(HostPattern::Any))
                .zip(0..)
                .collect();
            // Built before the query pools are made, so that freeing their scratch
            // (hundreds of thousands of small allocations) does not leave the allocator
            // work to do inside the timed build.
            let t = Instant::now();
            let matcher = HostMatcher::build(patterns).expect("distinct patterns");
            let build_ms = t.elapsed().as_secs_f64() * 1e3;
            let pools = POOLS
                .iter()
                .map(|&q| contiguous(&queries(&exact, &wild, q, &mut rng)))
                .collect();
            Size {
                n,
                exact: e,
                wild: w,
                build_ms,
                matcher,
                pools,
            }
        })
        .collect();

    // The queries of each pool as slices.
    let refs: Vec<Vec<Vec<&[u8]>>> = sizes
        .iter()
        .map(|size| {
            size.pools
                .iter()
                .map(|(arena, spans)| spans.iter().map(|r| &arena[r.clone()]).collect())
                .collect()
        })
        .collect();
    let mut work: Vec<Work<'_>> = Vec::new();
    for (size, pools) in sizes.iter().zip(&refs) {
        for pool in pools {
            let matcher = &size.matcher;
            let mut i = 0usize;
            work.push(Box::new(move || {
                let q = pool[i & (pool.len() - 1)];
                i = i.wrapping_add(1);
                matcher.lookup(black_box(q)).map_or(0, |v| v as usize)
            }));
        }
    }
    let times = time_interleaved(work);
    let ns = |size: usize, pool: usize| times[size * POOLS.len() + pool].0;
    let quiet_ns = |size: usize, pool: usize| times[size * POOLS.len() + pool].1;
    let round = |x: f64| (x * 10.0).round() / 10.0;
    let ratio = |x: f64| (x * 100.0).round() / 100.0;

    let mut rows = Vec::new();
    for (k, size) in sizes.iter().enumerate() {
        // How the 1024-query pool splits between exact, wildcard and catch-all matches.
        let mut kinds = [0usize; 3];
        for q in &refs[k][2] {
            match size.matcher.find(q).map(|m| m.kind) {
                Some(MatchKind::Exact) => kinds[0] += 1,
                Some(MatchKind::Wildcard { .. }) => kinds[1] += 1,
                _ => kinds[2] += 1,
            }
        }
        let by_pool = |f: &dyn Fn(usize, usize) -> f64| -> serde_json::Map<String, Value> {
            POOLS
                .iter()
                .enumerate()
                .map(|(p, q)| (q.to_string(), json!(round(f(k, p)))))
                .collect()
        };
        rows.push(json!({
            "hostnames": size.n,
            "exact": size.exact,
            "wildcard": size.wild,
            "build_ms": round(size.build_ms),
            "table_mib": ((size.matcher.table_bytes() as f64 / f64::from(1 << 20)) * 100.0).round() / 100.0,
            "lookup_ns_by_query_pool": by_pool(&ns),
            "lookup_quiet_ns_by_query_pool": by_pool(&quiet_ns),
            "matches_in_1024_pool": {"exact": kinds[0], "wildcard": kinds[1], "catch_all": kinds[2]},
        }));
    }
    let last = sizes.len() - 1;
    let ratios = |f: &dyn Fn(usize, usize) -> f64| -> serde_json::Map<String, Value> {
        POOLS
            .iter()
            .enumerate()
            .map(|(p, q)| (q.to_string(), json!(ratio(f(last, p) / f(0, p)))))
            .collect()
    };
    // What one dependent memory access costs at the sizes involved: the floor under a
    // lookup whose slot is not in cache.
    let latency: serde_json::Map<String, Value> =
        [1usize << 20, 4 << 20, sizes[last].matcher.table_bytes()]
            .iter()
            .map(|&bytes| (format!("{}KiB", bytes >> 10), json!(round(chase_ns(bytes)))))
            .collect();
    json!({
        "what": "ns per lookup() call (median of interleaved rounds; quiet: their lower quartile), by the number of distinct queries cycled (the working set); queries are 50% exact hits, 30% wildcard hits, 20% misses, mixed case",
        "sizes": rows,
        "ratio_1m_over_10_by_query_pool": ratios(&ns),
        "quiet_ratio_1m_over_10_by_query_pool": ratios(&quiet_ns),
        "quiet": "`quiet`: the lower quartile of a cell's rounds instead of their median (the 10-name table stays in cache, the 1M-name one goes to DRAM, whose latency here rises and falls in phases with load from outside the VM)",
        "dependent_load_ns_by_working_set": latency,
        // Other work on the machine inflates every cell (the ratios less, since all
        // cells are timed round-robin): the load average says how much there was.
        "loadavg_at_end": std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split_whitespace().next().map(str::to_owned)),
    })
}

/// ns per dependent load over a random cyclic chain of cache lines spanning `bytes`
/// (in huge pages, as the matcher's tables are): the memory latency a lookup
/// pays per level of indirection that is not in cache.
fn chase_ns(bytes: usize) -> f64 {
    let lines = (bytes / 64).max(2);
    let mut next = sluice_dataplane::mem::HugeSlice::filled([0usize; 8], lines);
    // Sattolo's shuffle: one cycle through every line.
    let mut order: Vec<usize> = (0..lines).collect();
    let mut rng = Rng(0x0c4a_5e00 ^ bytes as u64);
    for i in (1..lines).rev() {
        order.swap(i, rng.below(i));
    }
    for (i, &at) in order.iter().enumerate() {
        next[at][0] = order[(i + 1) % lines];
    }
    let steps = 1_000_000;
    let mut at = order[0];
    let t = Instant::now();
    for _ in 0..steps {
        at = next[at][0];
    }
    black_box(at);
    t.elapsed().as_nanos() as f64 / steps as f64
}

/// `bench_inspect --loop N [TESTDATA_DIR]`: only parse every vector N times with sluice,
/// tls-parser and rustls (no timing), for instruction counts under callgrind, which do
/// not depend on machine load (the command line: perf/NOTES.md, "Benchmark harness").
fn loop_only(n: usize, dir: &Path) {
    let vs = vectors(dir);
    let mut sum = 0usize;
    for _ in 0..n {
        for (_, b) in &vs {
            sum += sluice_once(black_box(b));
        }
    }
    for _ in 0..n {
        for (_, b) in &vs {
            sum += tls_parser_once(black_box(b));
        }
    }
    for _ in 0..n {
        for (_, b) in &vs {
            sum += rustls_once(black_box(b));
        }
    }
    println!("{sum}");
}

/// First-payload inspection and host matching: ClientHello parsing beside tls-parser and
/// rustls on the real vectors, host-name lookups at 10, 10k and 1M names. Prints JSON.
#[derive(Parser, Debug)]
#[command(name = "bench_inspect")]
struct Opts {
    /// The ClientHello vectors (default: `$SLUICE_TESTDATA`, else
    /// `<repo>/../shared/testdata/tls`).
    testdata_dir: Option<PathBuf>,
    /// Only parse every vector N times with sluice, tls-parser and rustls, untimed (for
    /// instruction counts under callgrind).
    #[arg(long = "loop", value_name = "N", num_args = 0..=1, default_missing_value = "1000")]
    loop_n: Option<usize>,
    /// Only the host lookups.
    #[arg(long, conflicts_with = "loop_n")]
    hosts_only: bool,
}

fn main() {
    let o = Opts::parse();
    let dir = o.testdata_dir.unwrap_or_else(testdata_dir);
    if let Some(n) = o.loop_n {
        loop_only(n, &dir);
        return;
    }
    if o.hosts_only {
        let t = Instant::now();
        let hosts = bench_hosts();
        let out = json!({
            "bench": "inspect",
            "host_lookup": hosts,
            "elapsed_s": (t.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return;
    }
    let t = Instant::now();
    let client_hello = bench_client_hello(&dir);
    let hosts = bench_hosts();
    let out = json!({
        "bench": "inspect",
        "client_hello": client_hello,
        "host_lookup": hosts,
        "elapsed_s": (t.elapsed().as_secs_f64() * 10.0).round() / 10.0,
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
}
