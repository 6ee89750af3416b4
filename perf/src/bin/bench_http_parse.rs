//! `bench_http_parse`: ns per request head for the proxy's codec (`http::parse_request`,
//! httparse underneath plus sluice's strictness checks and framing) and for the
//! first-request parser of delayed binding (`inspect::http::parse`, hand-written, Host
//! only), on three realistic heads: a curl GET (3 headers), a browser GET (15 headers,
//! about 700 bytes) and an API POST (30 headers). The two do different work (the codec
//! records every header line and derives framing; inspect validates and lowercases the
//! host), so the ratio prices the codec's extra work, not only the parsers.
//!
//! Both contenders are timed round-robin in the same run (median of [`ROUNDS`] rounds),
//! so load from elsewhere on the machine falls on both. Printed as JSON, never asserted:
//! `{"bench":"http_parse","cases":[{"name","bytes","sluice_ns","inspect_ns","ratio"}]}`
//! with `ratio` = sluice_ns / inspect_ns; `sluice_ns` includes making the 100-slot header
//! array (3.2 KB) per head, as the engine must; `sluice_reused_array_ns` is without it.
//!
//! Usage: `cargo run --release -p sluice-perf --bin bench_http_parse`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use serde_json::json;
use sluice_dataplane::http::{self, Parse, EMPTY_HEADER, MAX_HEADERS};
use sluice_dataplane::inspect;

/// Timed rounds per contender; the median is reported.
const ROUNDS: usize = 21;
/// Target duration of one round.
const ROUND_TIME: Duration = Duration::from_millis(30);

const CURL: &str = "GET /api/v1/items?limit=10 HTTP/1.1\r\n\
Host: api.example.com\r\n\
User-Agent: curl/8.5.0\r\n\
Accept: */*\r\n\r\n";

const BROWSER: &str = "GET /products/shoes/running?color=blue&size=42 HTTP/1.1\r\n\
Host: www.shop.example.com\r\n\
Connection: keep-alive\r\n\
sec-ch-ua: \"Chromium\";v=\"124\", \"Google Chrome\";v=\"124\", \"Not-A.Brand\";v=\"99\"\r\n\
sec-ch-ua-mobile: ?0\r\n\
sec-ch-ua-platform: \"Linux\"\r\n\
Upgrade-Insecure-Requests: 1\r\n\
User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36\r\n\
Accept: text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8\r\n\
Sec-Fetch-Site: same-origin\r\n\
Sec-Fetch-Mode: navigate\r\n\
Sec-Fetch-User: ?1\r\n\
Sec-Fetch-Dest: document\r\n\
Referer: https://www.shop.example.com/products/shoes\r\n\
Accept-Encoding: gzip, deflate, br, zstd\r\n\
Accept-Language: en-GB,en;q=0.9,de;q=0.8\r\n\r\n";

fn post() -> String {
    let mut s = String::from(
        "POST /v2/orders/create HTTP/1.1\r\nHost: orders.internal.example.com:8443\r\n\
         Content-Type: application/json\r\nContent-Length: 512\r\n\
         Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl\r\n\
         Accept: application/json\r\nUser-Agent: orders-client/3.2.1 (go1.22)\r\n\
         X-Request-Id: 4f9c2d1e-8a7b-4c3d-9e2f-1a2b3c4d5e6f\r\n\
         X-B3-TraceId: 80f198ee56343ba864fe8b2a57d3eff7\r\nX-B3-SpanId: e457b5a2e4d86bd1\r\n\
         X-B3-Sampled: 1\r\nX-Forwarded-For: 203.0.113.7, 10.1.2.3\r\nX-Forwarded-Proto: https\r\n",
    );
    for i in 0..18 {
        s.push_str(&format!(
            "X-Custom-Attribute-{i:02}: value-{i}-abcdefghijklmnop\r\n"
        ));
    }
    s.push_str("\r\n");
    s
}

/// Median ns per call of each closure, timed round-robin.
fn time_interleaved(work: &mut [&mut dyn FnMut() -> usize]) -> Vec<f64> {
    let batches: Vec<u64> = work
        .iter_mut()
        .map(|f| {
            let mut batch = 1u64;
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
            let mut calls = 0u64;
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
        .into_iter()
        .map(|mut s| {
            s.sort_by(f64::total_cmp);
            s[s.len() / 2]
        })
        .collect()
}

fn main() {
    let post = post();
    let cases = [
        ("curl_get_3", CURL),
        ("browser_get_15", BROWSER),
        ("api_post_30", post.as_str()),
    ];
    let mut out = Vec::new();
    for (name, head) in cases {
        let bytes = head.as_bytes();
        // Both must accept the head in full, or the comparison means nothing.
        let mut hs = [EMPTY_HEADER; MAX_HEADERS];
        assert!(
            matches!(http::parse_request(bytes, &mut hs), Parse::Done(h) if h.len == bytes.len())
        );
        assert!(
            matches!(inspect::http::parse(bytes), inspect::http::Outcome::Request(h) if h.len == bytes.len())
        );

        // As the engine will call it: a fresh header array per head (the buffer changes
        // between heads), and, apart, an array reused over an unchanged buffer.
        let mut sluice = || {
            let mut hs = [EMPTY_HEADER; MAX_HEADERS];
            match http::parse_request(black_box(bytes), &mut hs) {
                Parse::Done(h) => h.len + h.headers.len(),
                _ => 0,
            }
        };
        let mut hs = [EMPTY_HEADER; MAX_HEADERS];
        let mut reuse = || match http::parse_request(black_box(bytes), &mut hs) {
            Parse::Done(h) => h.len + h.headers.len(),
            _ => 0,
        };
        let mut insp = || match inspect::http::parse(black_box(bytes)) {
            inspect::http::Outcome::Request(h) => h.len,
            _ => 0,
        };
        let ns = time_interleaved(&mut [&mut sluice, &mut insp, &mut reuse]);
        out.push(json!({
            "name": name,
            "bytes": bytes.len(),
            "sluice_ns": (ns[0] * 10.0).round() / 10.0,
            "inspect_ns": (ns[1] * 10.0).round() / 10.0,
            "sluice_reused_array_ns": (ns[2] * 10.0).round() / 10.0,
            "ratio": (ns[0] / ns[1] * 100.0).round() / 100.0,
        }));
    }
    println!("{}", json!({ "bench": "http_parse", "cases": out }));
}
