//! HTTP per request in simulation: smoltcp clients send requests to a Gateway API
//! HTTPRoute listener on the in-memory wire; sluice's terminate engine parses each head,
//! routes it on its own and proxies it to smoltcp keep-alive backends that say who they
//! are and what they received.
//!
//! - Several requests on one connection reach the backends their paths name; the backend
//!   connection is reused while the backend stays the same.
//! - Pipelined requests are answered in order, a 404 among them.
//! - A head whose every byte is its own segment; heads split at every point.
//! - Chunked bodies both ways, byte for byte; a large response to a slow reader.
//! - A backend that resets in the middle of a response resets the client; a backend that
//!   refuses is retried on another.
//! - Malformed and oversized heads get 400 and 431; the client's end ends the exchange.
//! - Per-rule counters: requests and responses by status class, sluice's own answers
//!   included, counted for the rule that took each request and kept across a reload.

use sluice_ctrl::rule_counters::{RuleRegistry, RuleRow};
use sluice_dataplane::balancer::Balancer;
use sluice_dataplane::rcu::Publisher;
use sluice_dataplane::stats::{Event, RuleCounts, RULE_SLOTS};
use sluice_dataplane::tables::snapshot::Snapshot;
use sluice_testkit::config;
use sluice_tests::http_apps::{get, HttpBackends, HttpClient};
use sluice_tests::sim::{Faults, Sim};
use sluice_tests::splice::{
    balancer_config, ip, print_counters, sim_snapshot, CLIENT, INVENTORY, VIP,
};
use smoltcp::socket::tcp;
use smoltcp::wire::IpAddress;

/// The HTTP listener's port.
const PORT: u16 = 8000;

/// A Gateway API Gateway with a plain HTTP listener on [`PORT`] and its routes:
/// `shop.example.test` sends `/api` (path prefix) to a and the rest to b; `flaky.example.test`
/// goes to `pair` on 7001 (a and b; the tests make only b listen there);
/// `slow.example.test` goes to a with a 500 ms request timeout; and an Istio Gateway on
/// 8001 whose `retry.example.test` route retries twice (5xx, connect failures) with a
/// 200 ms per-try timeout; `mirror.example.test` goes to a with copies to c (all
/// requests, or half under `/half`) or to `sink` (nobody listens) under `/lost`.
const HTTP_CONFIG: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: http, namespace: sim}
spec:
  gatewayClassName: sluice
  listeners:
  - {name: web, port: 8000, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: shop, namespace: sim}
spec:
  parentRefs: [{name: http, sectionName: web}]
  hostnames: [shop.example.test]
  rules:
  - matches: [{path: {type: PathPrefix, value: /api}}]
    backendRefs: [{name: a, port: 7000}]
  - backendRefs: [{name: b, port: 7000}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: flaky, namespace: sim}
spec:
  parentRefs: [{name: http, sectionName: web}]
  hostnames: [flaky.example.test]
  rules:
  - backendRefs: [{name: pair, port: 7001}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: slow, namespace: sim}
spec:
  parentRefs: [{name: http, sectionName: web}]
  hostnames: [slow.example.test]
  rules:
  - backendRefs: [{name: a, port: 7000}]
    timeouts: {request: 500ms}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: mirror, namespace: sim}
spec:
  parentRefs: [{name: http, sectionName: web}]
  hostnames: [mirror.example.test]
  rules:
  - matches: [{path: {type: PathPrefix, value: /half}}]
    filters: [{type: RequestMirror, requestMirror: {backendRef: {name: c, port: 7000}, percent: 50}}]
    backendRefs: [{name: a, port: 7000}]
  - matches: [{path: {type: PathPrefix, value: /lost}}]
    filters: [{type: RequestMirror, requestMirror: {backendRef: {name: sink, port: 7002}}}]
    backendRefs: [{name: a, port: 7000}]
  - filters: [{type: RequestMirror, requestMirror: {backendRef: {name: c, port: 7000}}}]
    backendRefs: [{name: a, port: 7000}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: istio-http, namespace: sim}
spec:
  servers:
  - port: {number: 8001, name: http, protocol: HTTP}
    hosts: [retry.example.test]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: retry, namespace: sim}
spec:
  hosts: [retry.example.test]
  gateways: [istio-http]
  http:
  - route: [{destination: {host: a, port: {number: 7000}}}]
    retries: {attempts: 2, perTryTimeout: 200ms, retryOn: "5xx,connect-failure"}
"#;

/// The sim appliance's tables with [`HTTP_CONFIG`].
fn http_snapshot() -> Snapshot {
    config::snapshot(
        "sim_http.yaml",
        &format!(
            "{}\n---\n{HTTP_CONFIG}\n---\n{INVENTORY}",
            sluice_tests::fixtures::SIM_APPLIANCE
        ),
    )
}

fn world(seed: u64, faults: Faults) -> (Sim<Balancer>, Publisher<Snapshot>, HttpBackends) {
    world_on(http_snapshot(), seed, faults)
}

/// [`world`] over the tables `snap`.
fn world_on(
    snap: Snapshot,
    seed: u64,
    faults: Faults,
) -> (Sim<Balancer>, Publisher<Snapshot>, HttpBackends) {
    let (mut sim, p) = sim_snapshot(snap, faults, faults, balancer_config(seed));
    let backends = HttpBackends::new()
        .listen(&mut sim.hosts[1].sockets, 7000, 8, 64 * 1024)
        .listen(
            &mut sim.hosts[1].sockets,
            (IpAddress::from(ip("10.78.0.12")), 7001),
            16,
            64 * 1024,
        );
    (sim, p, backends)
}

fn client(sim: &mut Sim<Balancer>, port: u16, requests: Vec<Vec<u8>>) -> HttpClient {
    let host = &mut sim.hosts[0];
    HttpClient::new(
        &mut host.sockets,
        host.iface.context(),
        (Sim::addr(ip(VIP)), PORT),
        port,
        requests,
    )
}

/// Runs until every client is closed or `limit_ms` of simulated time pass.
fn run(
    sim: &mut Sim<Balancer>,
    backends: &mut HttpBackends,
    clients: &mut [HttpClient],
    limit_ms: u64,
) {
    let end = sim.now_ms + limit_ms;
    while sim.now_ms < end {
        for _ in 0..8 {
            sim.round();
            backends.step(&mut sim.hosts[1].sockets);
            for c in clients.iter_mut() {
                c.step(&mut sim.hosts[0].sockets);
            }
        }
        sim.now_ms += 1;
        let closed = clients.iter().all(|c| {
            matches!(
                c.state(&sim.hosts[0].sockets),
                tcp::State::Closed | tcp::State::TimeWait
            )
        });
        if closed {
            break;
        }
    }
}

/// Runs `ms` of simulated time (what goes on without clients: mirrors, the pool).
fn settle(sim: &mut Sim<Balancer>, backends: &mut HttpBackends, ms: u64) {
    for _ in 0..ms {
        for _ in 0..8 {
            sim.round();
            backends.step(&mut sim.hosts[1].sockets);
        }
        sim.now_ms += 1;
    }
}

/// The backend address a response names (the first word of the echo body).
fn backend_of(r: &sluice_tests::http_apps::Response) -> String {
    r.text().split(' ').next().unwrap_or("").to_string()
}

#[test]
fn requests_on_one_connection_reach_the_backends_their_paths_name() {
    let (mut sim, _p, mut backends) = world(1, Faults::NONE);
    let host = "shop.example.test";
    let reqs = vec![
        get(host, "/api/orders", &[]),
        get(host, "/api/orders/7", &[]),
        get(host, "/index.html", &["X-Forwarded-For: 192.0.2.9"]),
        get(
            host,
            "/api",
            &[
                "Connection: keep-alive, X-Drop",
                "X-Drop: 1",
                "Keep-Alive: 5",
            ],
        ),
        get(host, "/apix", &[]),
    ];
    let mut c = vec![client(&mut sim, 40_001, reqs)];
    run(&mut sim, &mut backends, &mut c, 20_000);
    print_counters(&sim);
    let got: Vec<(u16, String)> = c[0]
        .responses
        .iter()
        .map(|r| (r.status, backend_of(r)))
        .collect();
    assert_eq!(
        got,
        vec![
            (200, "10.78.0.11".to_string()),
            (200, "10.78.0.11".to_string()),
            (200, "10.78.0.12".to_string()),
            (200, "10.78.0.11".to_string()),
            // PathPrefix matches whole segments: /apix is not under /api.
            (200, "10.78.0.12".to_string()),
        ]
    );
    let r = &backends.received;
    assert_eq!(r.len(), 5);
    // Host kept; X-Forwarded-For appended to, X-Forwarded-Proto set; hop-by-hop gone
    // (Connection, Keep-Alive and what Connection names).
    assert_eq!(r[0].header("host"), Some(host));
    assert_eq!(r[0].header("x-forwarded-for"), Some(CLIENT));
    assert_eq!(r[0].header("x-forwarded-proto"), Some("http"));
    assert_eq!(
        r[2].header("x-forwarded-for"),
        Some(format!("192.0.2.9, {CLIENT}").as_str())
    );
    assert_eq!(r[3].header("connection"), None);
    assert_eq!(r[3].header("keep-alive"), None);
    assert_eq!(r[3].header("x-drop"), None);
    assert_eq!(r[0].line, "GET /api/orders HTTP/1.1");
    let k = sim.worker.counters();
    assert_eq!(k.events_of(Event::HttpRequest), 5);
    assert_eq!(k.events_of(Event::HttpResponse2xx), 5);
    // The second request reused the first's backend connection.
    assert!(k.events_of(Event::HttpBackendReused) >= 1);
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let (mut sim, _p, mut backends) = world(2, Faults::NONE);
    let mut reqs = Vec::new();
    for i in 0..6 {
        let path = if i % 2 == 0 {
            format!("/api/{i}")
        } else {
            format!("/page/{i}")
        };
        reqs.push(get("shop.example.test", &path, &[]));
    }
    // A host without a route: 404, and the connection goes on.
    reqs.insert(3, get("nobody.example.test", "/", &[]));
    let mut c = vec![client(&mut sim, 40_002, reqs)];
    c[0].pipeline = true;
    run(&mut sim, &mut backends, &mut c, 20_000);
    print_counters(&sim);
    let statuses: Vec<u16> = c[0].responses.iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![200, 200, 200, 404, 200, 200, 200]);
    let paths: Vec<String> = c[0]
        .responses
        .iter()
        .filter(|r| r.status == 200)
        .map(|r| r.text().split(' ').nth(2).unwrap_or("").to_string())
        .collect();
    assert_eq!(
        paths,
        ["/api/0", "/page/1", "/api/2", "/page/3", "/api/4", "/page/5"]
    );
    assert_eq!(sim.worker.counters().events_of(Event::HttpNoRoute), 1);
}

#[test]
fn a_head_sent_one_byte_per_segment_is_routed() {
    let (mut sim, _p, mut backends) = world(3, Faults::NONE);
    let req = get(
        "shop.example.test",
        "/api/bytes",
        &["User-Agent: sim", "Accept: */*", "X-Long: 0123456789abcdef"],
    );
    let mut c = vec![client(&mut sim, 40_003, vec![req.clone(), req])];
    c[0].segment = 1;
    run(&mut sim, &mut backends, &mut c, 30_000);
    let got: Vec<(u16, String)> = c[0]
        .responses
        .iter()
        .map(|r| (r.status, backend_of(r)))
        .collect();
    assert_eq!(
        got,
        vec![(200, "10.78.0.11".into()), (200, "10.78.0.11".into())]
    );
    assert_eq!(
        backends.received[0].header("x-long"),
        Some("0123456789abcdef")
    );
}

#[test]
fn heads_split_at_every_point_are_routed_alike() {
    let req = get("shop.example.test", "/api/split", &["Accept: */*"]);
    for split in (1..req.len()).step_by(3) {
        let (mut sim, _p, mut backends) = world(100 + split as u64, Faults::NONE);
        // Two sends: the first `split` bytes, then the rest (two segments).
        let mut c = vec![client(
            &mut sim,
            40_100,
            vec![req[..split].to_vec(), req[split..].to_vec()],
        )];
        c[0].pipeline = true;
        run(&mut sim, &mut backends, &mut c, 5_000);
        assert_eq!(backends.received.len(), 1, "split at {split}");
        assert_eq!(backends.received[0].line, "GET /api/split HTTP/1.1");
        assert_eq!(backends.received[0].backend, "10.78.0.11");
    }
}

#[test]
fn chunked_bodies_pass_byte_for_byte_under_faults() {
    let faults = Faults {
        drop: 0.02,
        duplicate: 0.01,
        reorder: 0.02,
        corrupt: 0.0,
    };
    let (mut sim, _p, mut backends) = world(4, faults);
    let body: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let mut upload =
        b"POST /api/upload HTTP/1.1\r\nHost: shop.example.test\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    for chunk in body.chunks(7_001) {
        upload.extend_from_slice(format!("{:x};ext=1\r\n", chunk.len()).as_bytes());
        upload.extend_from_slice(chunk);
        upload.extend_from_slice(b"\r\n");
    }
    upload.extend_from_slice(b"0\r\nX-Trailer: t\r\n\r\n");
    let reqs = vec![
        upload,
        get("shop.example.test", "/chunked/250000", &[]),
        get("shop.example.test", "/big/400000", &[]),
    ];
    let mut c = vec![client(&mut sim, 40_004, reqs)];
    run(&mut sim, &mut backends, &mut c, 120_000);
    print_counters(&sim);
    assert_eq!(c[0].responses.len(), 3);
    assert!(backends.received[0].body == body, "upload differs");
    let expect = |n: usize| -> Vec<u8> { b"0123456789".iter().copied().cycle().take(n).collect() };
    assert!(
        c[0].responses[1].body == expect(250_000),
        "chunked download differs"
    );
    assert_eq!(
        c[0].responses[1].header("transfer-encoding"),
        Some("chunked")
    );
    assert!(
        c[0].responses[2].body == expect(400_000),
        "download differs"
    );
}

#[test]
fn a_response_cut_short_resets_the_client() {
    let (mut sim, _p, mut backends) = world(5, Faults::NONE);
    // The backends cut `/cut` after 10 of 100000 announced bytes.
    let mut c = vec![client(
        &mut sim,
        40_006,
        vec![get("shop.example.test", "/cut", &[])],
    )];
    run(&mut sim, &mut backends, &mut c, 10_000);
    print_counters(&sim);
    assert!(c[0].responses.is_empty(), "no complete response");
    assert_eq!(c[0].state(&sim.hosts[0].sockets), tcp::State::Closed);
    assert_eq!(sim.worker.counters().events_of(Event::HttpUpstreamReset), 1);
}

#[test]
fn a_refusing_backend_is_retried_on_another() {
    let (mut sim, _p, mut backends) = world(6, Faults::NONE);
    let mut c: Vec<HttpClient> = (0..12)
        .map(|i| {
            client(
                &mut sim,
                40_010 + i,
                vec![
                    get("flaky.example.test", "/", &[]),
                    get("flaky.example.test", "/2", &[]),
                ],
            )
        })
        .collect();
    run(&mut sim, &mut backends, &mut c, 20_000);
    print_counters(&sim);
    for (i, cl) in c.iter().enumerate() {
        let s: Vec<u16> = cl.responses.iter().map(|r| r.status).collect();
        assert_eq!(s, vec![200, 200], "client {i}");
    }
    // Only b listens on 7001: every request got there, some after a refusal.
    assert_eq!(backends.hits("10.78.0.12"), 24);
    assert!(sim.worker.counters().events_of(Event::BackendFailover) > 0);
}

#[test]
fn a_slow_reader_gets_a_large_response_whole() {
    let (mut sim, _p, mut backends) = world(7, Faults::NONE);
    let mut cl = client(
        &mut sim,
        40_007,
        vec![get("shop.example.test", "/big/3000000", &[])],
    );
    // Reads at most 512 bytes a step: sluice's send buffer fills, the window closes.
    cl.read_per_step = 512;
    let mut c = vec![cl];
    run(&mut sim, &mut backends, &mut c, 600_000);
    print_counters(&sim);
    assert_eq!(c[0].responses.len(), 1);
    let expect: Vec<u8> = b"0123456789"
        .iter()
        .copied()
        .cycle()
        .take(3_000_000)
        .collect();
    assert!(c[0].responses[0].body == expect);
}

#[test]
fn malformed_and_oversized_heads_are_answered_and_closed() {
    let (mut sim, _p, mut backends) = world(8, Faults::NONE);
    let bad = b"GET /x HTTP/1.1\r\nHost: shop.example.test\r\nBad Header: 1\r\n\r\n".to_vec();
    let mut big = b"GET /x HTTP/1.1\r\nHost: shop.example.test\r\n".to_vec();
    for i in 0..120 {
        big.extend_from_slice(format!("X-H{i}: v\r\n").as_bytes());
    }
    big.extend_from_slice(b"\r\n");
    let mut c = vec![
        client(&mut sim, 40_020, vec![bad]),
        client(&mut sim, 40_021, vec![big]),
    ];
    run(&mut sim, &mut backends, &mut c, 10_000);
    assert_eq!(c[0].responses.first().map(|r| r.status), Some(400));
    assert_eq!(c[1].responses.first().map(|r| r.status), Some(431));
    assert_eq!(c[0].responses[0].header("connection"), Some("close"));
    assert!(backends.received.is_empty());
    let k = sim.worker.counters();
    assert_eq!(k.events_of(Event::HttpBadRequest), 1);
    assert_eq!(k.events_of(Event::HttpHeadTooLarge), 1);
}

/// Istio (the delayed-binding simulation's configuration, port 80): a VirtualService
/// `http` route whose `/api/` rule splits 3:1 over a and b, the rest to c, served per
/// request: the weights hold over the requests of a few keep-alive connections, the
/// Host's case and port do not matter, a Host without a route gets 404 and the
/// connection goes on.
#[test]
fn istio_weights_hold_per_request() {
    let (mut sim, _p) = sim_snapshot(
        sluice_tests::splice::snapshot(),
        Faults::NONE,
        Faults::NONE,
        balancer_config(9),
    );
    // Enough server sockets for the connections the worker's pool keeps to a and b
    // besides the ones in use.
    let mut backends = HttpBackends::new().listen(&mut sim.hosts[1].sockets, 7000, 16, 64 * 1024);
    let mut c: Vec<HttpClient> = (0..4)
        .map(|i| {
            let mut reqs: Vec<Vec<u8>> = (0..100)
                .map(|k| get("www.example.test", &format!("/api/{i}/{k}"), &[]))
                .collect();
            reqs.push(get("WWW.Example.Test:80", "/index.html", &[]));
            reqs.push(get("nobody.example.test", "/", &[]));
            reqs.push(get("www.example.test", "/api/last", &[]));
            let host = &mut sim.hosts[0];
            HttpClient::new(
                &mut host.sockets,
                host.iface.context(),
                (Sim::addr(ip(VIP)), 80),
                41_000 + i,
                reqs,
            )
        })
        .collect();
    run(&mut sim, &mut backends, &mut c, 60_000);
    print_counters(&sim);
    for cl in &c {
        let s: Vec<u16> = cl.responses.iter().map(|r| r.status).collect();
        assert_eq!(s.len(), 103);
        assert_eq!(&s[100..], &[200, 404, 200]);
        assert_eq!(backend_of(&cl.responses[100]), "10.78.0.13");
    }
    let (a, b) = (backends.hits("10.78.0.11"), backends.hits("10.78.0.12"));
    assert_eq!(a + b, 404);
    let share = a as f64 / 404.0;
    assert!(
        (0.65..0.85).contains(&share),
        "/api/ split a {a} : b {b}, expected 3:1"
    );
    assert_eq!(backends.hits("10.78.0.13"), 4);
}

#[test]
fn timeouts_answer_504_and_retries_cover_5xx_and_slow_tries() {
    let (mut sim, _p, mut backends) = world(10, Faults::NONE);
    let to = |sim: &mut Sim<Balancer>, port: u16, dst: u16, reqs: Vec<Vec<u8>>| {
        let host = &mut sim.hosts[0];
        HttpClient::new(
            &mut host.sockets,
            host.iface.context(),
            (Sim::addr(ip(VIP)), dst),
            port,
            reqs,
        )
    };
    // The rule's timeout: 504, and the connection goes on.
    let slow = vec![
        get("slow.example.test", "/hang", &[]),
        get("slow.example.test", "/ok", &[]),
    ];
    // Retries: a 503 three times (then passed on), a hanging backend three times.
    let retried = vec![get("retry.example.test", "/status/503", &[])];
    let hung = vec![get("retry.example.test", "/hang/2", &[])];
    let mut c = vec![
        to(&mut sim, 40_030, PORT, slow),
        to(&mut sim, 40_031, 8001, retried),
        to(&mut sim, 40_032, 8001, hung),
    ];
    run(&mut sim, &mut backends, &mut c, 10_000);
    print_counters(&sim);
    let statuses: Vec<Vec<u16>> = c
        .iter()
        .map(|cl| cl.responses.iter().map(|r| r.status).collect())
        .collect();
    assert_eq!(statuses, vec![vec![504, 200], vec![503], vec![504]]);
    let tries = |p: &str| {
        backends
            .received
            .iter()
            .filter(|r| r.line.contains(p))
            .count()
    };
    assert_eq!(tries("/status/503"), 3, "the first try and two retries");
    assert_eq!(tries("/hang/2"), 3, "each try timed out");
    assert_eq!(tries("/hang "), 1, "the request timeout does not retry");
    let k = sim.worker.counters();
    assert_eq!(k.events_of(Event::HttpRequestTimeout), 4);
}

#[test]
fn expect_100_continue_reaches_the_backend_and_its_100_comes_back() {
    let (mut sim, _p, mut backends) = world(11, Faults::NONE);
    let body = vec![b'x'; 50_000];
    let mut req = b"PUT /api/blob HTTP/1.1\r\nHost: shop.example.test\r\nExpect: 100-continue\r\nContent-Length: 50000\r\n\r\n".to_vec();
    req.extend_from_slice(&body);
    let mut c = vec![client(
        &mut sim,
        40_040,
        vec![req, get("shop.example.test", "/after", &[])],
    )];
    run(&mut sim, &mut backends, &mut c, 10_000);
    print_counters(&sim);
    // The client sent its body only after the backend's 100, which sluice passed on.
    assert_eq!(c[0].interim, vec![100]);
    let s: Vec<u16> = c[0].responses.iter().map(|r| r.status).collect();
    assert_eq!(s, vec![200, 200]);
    assert_eq!(backends.received[0].header("expect"), Some("100-continue"));
    assert!(backends.received[0].body == body);
}

#[test]
fn a_backend_closing_after_its_response_leaves_the_client_connection_open() {
    let (mut sim, _p, mut backends) = world(12, Faults::NONE);
    let host = "shop.example.test";
    // b answers `/close` with `Connection: close` and closes: the client's connection
    // stays (the header is hop-by-hop), the next request gets a new backend connection.
    let reqs = vec![
        get(host, "/close", &[]),
        get(host, "/next", &[]),
        get(host, "/close", &[]),
    ];
    let mut c = vec![client(&mut sim, 40_050, reqs)];
    run(&mut sim, &mut backends, &mut c, 10_000);
    print_counters(&sim);
    let s: Vec<u16> = c[0].responses.iter().map(|r| r.status).collect();
    assert_eq!(s, vec![200, 200, 200]);
    assert_eq!(c[0].responses[0].header("connection"), None);
    let k = sim.worker.counters();
    assert_eq!(k.events_of(Event::TerminateAccepted), 1);
    assert_eq!(k.events_of(Event::TerminateBackendConnected), 2);
}

#[test]
fn answered_requests_discard_their_bodies_and_the_connection_goes_on() {
    let (mut sim, _p, mut backends) = world(13, Faults::NONE);
    // A 100 kB body to a host without a route (404, the body read and dropped), a chunked
    // one likewise, then a request that reaches its backend on the same connection.
    let mut post =
        b"POST /x HTTP/1.1\r\nHost: nobody.example.test\r\nContent-Length: 100000\r\n\r\n".to_vec();
    post.extend(std::iter::repeat_n(b'p', 100_000));
    let mut chunked =
        b"POST /y HTTP/1.1\r\nHost: nobody.example.test\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    for _ in 0..10 {
        chunked.extend_from_slice(b"400\r\n");
        chunked.extend(std::iter::repeat_n(b'c', 0x400));
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let reqs = vec![post, chunked, get("shop.example.test", "/api/after", &[])];
    let mut c = vec![client(&mut sim, 40_060, reqs)];
    c[0].pipeline = true;
    run(&mut sim, &mut backends, &mut c, 10_000);
    print_counters(&sim);
    let s: Vec<u16> = c[0].responses.iter().map(|r| r.status).collect();
    assert_eq!(s, vec![404, 404, 200]);
    assert_eq!(backends.received.len(), 1);
    assert_eq!(backends.received[0].line, "GET /api/after HTTP/1.1");
}

#[test]
fn http10_clients_and_absolute_targets() {
    let (mut sim, _p, mut backends) = world(14, Faults::NONE);
    // An absolute-form target: the backend gets origin form and the target's host.
    let absolute =
        b"GET http://shop.example.test/api/abs?q=1 HTTP/1.1\r\nHost: shop.example.test\r\n\r\n"
            .to_vec();
    // HTTP/1.0 without keep-alive: one answer, then sluice closes.
    let old = b"GET /api/old HTTP/1.0\r\nHost: shop.example.test\r\n\r\n".to_vec();
    let mut c = vec![
        client(&mut sim, 40_070, vec![absolute]),
        client(&mut sim, 40_071, vec![old]),
    ];
    c[1].close_when_done = false;
    run(&mut sim, &mut backends, &mut c, 10_000);
    print_counters(&sim);
    assert_eq!(c[0].responses.first().map(|r| r.status), Some(200));
    assert_eq!(c[1].responses.first().map(|r| r.status), Some(200));
    assert_eq!(c[1].responses[0].header("connection"), Some("close"));
    let lines: Vec<&str> = backends.received.iter().map(|r| r.line.as_str()).collect();
    assert!(lines.contains(&"GET /api/abs?q=1 HTTP/1.1"), "{lines:?}");
    assert!(lines.contains(&"GET /api/old HTTP/1.1"), "{lines:?}");
    // The HTTP/1.0 client's connection was closed by sluice (it never closed it).
    let st = c[1].state(&sim.hosts[0].sockets);
    assert!(
        matches!(
            st,
            tcp::State::CloseWait | tcp::State::Closed | tcp::State::LastAck
        ),
        "{st}"
    );
}

/// The worker's pool: a client alternating between two backends keeps one connection
/// to each (the idle one waits in the pool); a later client's request to the same
/// backend takes a pooled connection; one idle past `pool_idle_ms` is closed and the
/// next request opens a new one.
#[test]
fn idle_backend_connections_are_pooled_across_requests_and_clients() {
    let (mut sim, _p, mut backends) = world(21, Faults::NONE);
    let host = "shop.example.test";
    let reqs: Vec<Vec<u8>> = (0..8)
        .map(|i| get(host, if i % 2 == 0 { "/api/x" } else { "/index" }, &[]))
        .collect();
    let mut c = vec![client(&mut sim, 40_101, reqs)];
    run(&mut sim, &mut backends, &mut c, 20_000);
    let got: Vec<String> = c[0].responses.iter().map(backend_of).collect();
    assert_eq!(got.len(), 8);
    for (i, b) in got.iter().enumerate() {
        let want = if i % 2 == 0 {
            "10.78.0.11"
        } else {
            "10.78.0.12"
        };
        assert_eq!(b, want, "request {i}");
    }
    let k = sim.worker.counters();
    print_counters(&sim);
    // One connection to each backend, each reused from the pool after the first.
    assert_eq!(k.events_of(Event::TerminateBackendConnected), 2);
    assert_eq!(k.events_of(Event::HttpPoolReused), 6);
    // The client's close left its last backend's connection in the pool too.
    assert_eq!(k.events_of(Event::HttpBackendPooled), 8);

    // A second client, a moment later: both backends' connections are waiting.
    let reqs = vec![get(host, "/api/y", &[]), get(host, "/z", &[])];
    let mut c = vec![client(&mut sim, 40_102, reqs)];
    run(&mut sim, &mut backends, &mut c, 20_000);
    let got: Vec<String> = c[0].responses.iter().map(backend_of).collect();
    assert_eq!(got, ["10.78.0.11", "10.78.0.12"]);
    let k = sim.worker.counters();
    assert_eq!(k.events_of(Event::TerminateBackendConnected), 2);
    assert_eq!(k.events_of(Event::HttpPoolReused), 8);

    // Idle past pool_idle_ms (10 s): closed; the next request connects anew.
    settle(&mut sim, &mut backends, 11_000);
    let k = sim.worker.counters();
    assert_eq!(
        k.events_of(Event::HttpPoolClosed),
        2,
        "both idle connections closed"
    );
    let mut c = vec![client(&mut sim, 40_103, vec![get(host, "/api/z", &[])])];
    run(&mut sim, &mut backends, &mut c, 20_000);
    assert_eq!(c[0].responses.len(), 1);
    assert_eq!(c[0].responses[0].status, 200);
    let k = sim.worker.counters();
    print_counters(&sim);
    assert_eq!(k.events_of(Event::TerminateBackendConnected), 3);
    assert_eq!(k.events_of(Event::HttpPoolReused), 8);
    assert_eq!(backends.received.len(), 11);
}

/// A pooled connection its backend closes while idle is not handed out: the next
/// request connects anew and is answered.
#[test]
fn a_pooled_connection_closed_by_its_backend_is_not_reused() {
    let (mut sim, _p, mut backends) = world(22, Faults::NONE);
    let host = "shop.example.test";
    // `/api/x` then `/index`: a's connection goes to the pool; then a's server closes
    // every idle connection.
    let mut c = vec![client(
        &mut sim,
        40_111,
        vec![get(host, "/api/x", &[]), get(host, "/index", &[])],
    )];
    run(&mut sim, &mut backends, &mut c, 20_000);
    assert_eq!(c[0].responses.len(), 2);
    backends.close_idle(&mut sim.hosts[1].sockets);
    settle(&mut sim, &mut backends, 500);
    assert!(sim.worker.counters().events_of(Event::HttpPoolClosed) >= 1);
    let mut c = vec![client(&mut sim, 40_112, vec![get(host, "/api/again", &[])])];
    run(&mut sim, &mut backends, &mut c, 20_000);
    assert_eq!(c[0].responses.len(), 1);
    assert_eq!(backend_of(&c[0].responses[0]), "10.78.0.11");
    let k = sim.worker.counters();
    print_counters(&sim);
    assert_eq!(k.events_of(Event::TerminateBackendConnected), 3);
}

/// RequestMirror: each request's copy reaches the mirror's backend with the host
/// suffixed `-shadow`, `Connection: close` and the whole body (a 200 KB chunked upload
/// included); the client sees only the main backend's answers; `percent: 50` copies
/// about half; a mirror whose backend refuses is counted and changes nothing for the
/// client.
#[test]
fn mirrored_copies_reach_the_mirror_and_their_answers_are_dropped() {
    let (mut sim, _p, mut backends) = world(23, Faults::NONE);
    let host = "mirror.example.test";
    let body: Vec<u8> = (0..200_000u32).map(|i| (i * 13 + i / 97) as u8).collect();
    let mut upload =
        format!("POST /up HTTP/1.1\r\nHost: {host}:8000\r\nTransfer-Encoding: chunked\r\n\r\n")
            .into_bytes();
    for chunk in body.chunks(9_000) {
        upload.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        upload.extend_from_slice(chunk);
        upload.extend_from_slice(b"\r\n");
    }
    upload.extend_from_slice(b"0\r\n\r\n");
    let mut reqs = vec![
        get(host, "/one", &["X-Id: 1"]),
        upload,
        get(host, "/lost/1", &[]),
    ];
    reqs.extend((0..100).map(|i| get(host, &format!("/half/{i}"), &[])));
    let mut c = vec![client(&mut sim, 40_121, reqs)];
    run(&mut sim, &mut backends, &mut c, 60_000);
    settle(&mut sim, &mut backends, 3_000);
    print_counters(&sim);
    let r = &c[0].responses;
    assert_eq!(r.len(), 103);
    assert!(r
        .iter()
        .all(|r| r.status == 200 && backend_of(r) == "10.78.0.11"));
    let copies: Vec<_> = backends
        .received
        .iter()
        .filter(|x| x.backend == "10.78.0.13")
        .collect();
    // The first two requests' copies, whole.
    assert_eq!(copies[0].line, "GET /one HTTP/1.1");
    assert_eq!(copies[0].header("host"), Some("mirror.example.test-shadow"));
    assert_eq!(copies[0].header("x-id"), Some("1"));
    assert_eq!(copies[0].header("connection"), Some("close"));
    assert_eq!(copies[1].line, "POST /up HTTP/1.1");
    assert_eq!(
        copies[1].header("host"),
        Some("mirror.example.test-shadow:8000")
    );
    assert!(copies[1].body == body, "the mirrored upload differs");
    // The main backend got the upload too, without the shadow host.
    let main: Vec<_> = backends
        .received
        .iter()
        .filter(|x| x.backend == "10.78.0.11")
        .collect();
    assert_eq!(main.len(), 103);
    assert_eq!(main[1].header("host"), Some("mirror.example.test:8000"));
    assert!(main[1].body == body);
    // About half of /half/*.
    let half = copies.len() - 2;
    assert!((30..=70).contains(&half), "{half} of 100 mirrored at 50%");
    let k = sim.worker.counters();
    assert_eq!(k.events_of(Event::HttpMirrorSent), 3 + half as u64);
    // The copy to a backend that refuses: counted, nothing else.
    assert_eq!(k.events_of(Event::HttpMirrorDropped), 1);
}

/// An HTTPRoute on [`PORT`] whose rules answer in known ways: `/status/NNN` goes to a
/// (which answers NNN), `/old` is redirected (301), `/missing` has only a backend that
/// does not exist (500), `/refused` goes to `sink` on 7002, where nothing listens (503
/// once every try is refused); with `refused: false`, without that last rule.
fn counted_config(refused: bool) -> String {
    let mut rules = String::from(
        "  - matches: [{path: {type: PathPrefix, value: /status}}]
    backendRefs: [{name: a, port: 7000}]
  - matches: [{path: {type: PathPrefix, value: /old}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: new.example.test, statusCode: 301}}]
  - matches: [{path: {type: PathPrefix, value: /missing}}]
    backendRefs: [{name: nowhere, port: 7000}]
",
    );
    if refused {
        rules.push_str(
            "  - matches: [{path: {type: PathPrefix, value: /refused}}]
    backendRefs: [{name: sink, port: 7002}]
",
        );
    }
    format!(
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: counted, namespace: sim}}
spec:
  parentRefs: [{{name: http, sectionName: web}}]
  hostnames: [counted.example.test]
  rules:
{rules}"
    )
}

/// The sim tables with [`HTTP_CONFIG`] and [`counted_config`], their rules given counter
/// slots by `registry` as a reload of `sluice run` gives them.
fn counted_snapshot(registry: &mut RuleRegistry, refused: bool) -> Snapshot {
    let mut snap = config::snapshot(
        "sim_http_counted.yaml",
        &format!(
            "{}\n---\n{HTTP_CONFIG}\n---\n{}\n---\n{INVENTORY}",
            sluice_tests::fixtures::SIM_APPLIANCE,
            counted_config(refused)
        ),
    );
    registry.assign(&mut snap);
    snap
}

/// The counts of rule `name` among `rows` (`None`: no row).
fn row<'a>(rows: &'a [RuleRow], name: &str) -> Option<&'a RuleCounts> {
    rows.iter().find(|r| r.rule == name).map(|r| &r.counts)
}

/// `requests` and `[1xx, 2xx, 3xx, 4xx, 5xx]` responses.
fn counts(requests: u64, responses: [u64; 5]) -> RuleCounts {
    RuleCounts {
        requests,
        responses,
    }
}

/// Per-rule counters: each request counts for the rule that took it, and so does the
/// response that answered it, whether a backend's (200, 201, 404, 503 after retries) or
/// sluice's own (redirect, 500 for a missing backend, 503 when every backend refuses);
/// requests no rule takes (404) count only globally. Across a reload a rule that stays
/// counts on and one that goes leaves the rows.
#[test]
fn rules_count_their_requests_and_responses_by_status_class() {
    let mut registry = RuleRegistry::new(RULE_SLOTS);
    let snap = counted_snapshot(&mut registry, true);
    let (mut sim, mut p, mut backends) = world_on(snap, 15, Faults::NONE);
    let cells = vec![sim.worker.rule_counters()];
    let host = "counted.example.test";
    let reqs = vec![
        get(host, "/status/200", &[]),
        get(host, "/status/201", &[]),
        get(host, "/status/404", &[]),
        get(host, "/status/503", &[]),
        get(host, "/old/a", &[]),
        get(host, "/old/b", &[]),
        get(host, "/missing", &[]),
        get(host, "/refused", &[]),
        // No rule of the route matches; no route for the host: 404 both, no rule's.
        get(host, "/elsewhere", &[]),
        get("nobody.example.test", "/", &[]),
    ];
    let retry = vec![get("retry.example.test", "/status/503", &[])];
    let mut c = vec![client(&mut sim, 40_080, reqs), {
        let host = &mut sim.hosts[0];
        HttpClient::new(
            &mut host.sockets,
            host.iface.context(),
            (Sim::addr(ip(VIP)), 8001),
            40_081,
            retry,
        )
    }];
    run(&mut sim, &mut backends, &mut c, 20_000);
    print_counters(&sim);
    let statuses: Vec<Vec<u16>> = c
        .iter()
        .map(|cl| cl.responses.iter().map(|r| r.status).collect())
        .collect();
    assert_eq!(
        statuses,
        [
            vec![200, 201, 404, 503, 301, 301, 500, 503, 404, 404],
            vec![503]
        ]
    );
    let rows = registry.slots().rows(&cells);
    for r in &rows {
        eprintln!("{}", r.to_json());
    }
    let rule = |i: usize| format!("HTTPRoute sim/counted rules[{i}]");
    assert_eq!(row(&rows, &rule(0)), Some(&counts(4, [0, 2, 0, 1, 1])));
    assert_eq!(row(&rows, &rule(1)), Some(&counts(2, [0, 0, 2, 0, 0])));
    assert_eq!(row(&rows, &rule(2)), Some(&counts(1, [0, 0, 0, 0, 1])));
    assert_eq!(row(&rows, &rule(3)), Some(&counts(1, [0, 0, 0, 0, 1])));
    // Three tries (the rule retries 5xx twice), one request and one response.
    assert_eq!(
        row(&rows, "VirtualService sim/retry http[0]"),
        Some(&counts(1, [0, 0, 0, 0, 1]))
    );
    assert_eq!(
        row(&rows, "HTTPRoute sim/shop rules[0]"),
        Some(&RuleCounts::default()),
        "a rule without requests has its row"
    );
    assert!(rows.iter().all(|r| !r.rule.starts_with('(')), "{rows:?}");
    // The global counters saw the same responses, and the 404s besides.
    let k = sim.worker.counters();
    assert_eq!(k.events_of(Event::HttpRequest), 11);
    assert_eq!(k.events_of(Event::HttpNoRoute), 2);
    assert_eq!(k.events_of(Event::HttpResponse4xx), 3);
    assert_eq!(k.events_of(Event::HttpResponse5xx), 4);

    // A reload without `/refused`: the kept rules count on, the removed one is gone.
    p.publish(counted_snapshot(&mut registry, false));
    let reqs = vec![get(host, "/status/200", &[]), get(host, "/old/c", &[])];
    let mut c = vec![client(&mut sim, 40_082, reqs)];
    run(&mut sim, &mut backends, &mut c, 20_000);
    let s: Vec<u16> = c[0].responses.iter().map(|r| r.status).collect();
    assert_eq!(s, [200, 301]);
    let rows = registry.slots().rows(&cells);
    assert_eq!(row(&rows, &rule(0)), Some(&counts(5, [0, 3, 0, 1, 1])));
    assert_eq!(row(&rows, &rule(1)), Some(&counts(3, [0, 0, 3, 0, 0])));
    assert_eq!(row(&rows, &rule(2)), Some(&counts(1, [0, 0, 0, 0, 1])));
    assert_eq!(row(&rows, &rule(3)), None, "removed by the reload");
}
