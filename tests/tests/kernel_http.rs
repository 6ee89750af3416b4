//! HTTP per request through sluice with real programs, on the rig of
//! `sluice_tests::tls_rig` (client 10.77.0.1 -> VIP 10.77.0.10:80 on a TAP port; python
//! HTTP/1.1 keep-alive backends on 10.78.0.11 (a) and .12 (b) behind the other). A Gateway
//! API HTTPRoute sends `/api` and `/upload` to a, `/mirror` to a with a copy to b, `/ws`
//! and everything else to b.
//!
//! - `curl` with several URLs on one connection: each reaches the backend its path names,
//!   over one client connection; `X-Forwarded-For`/`-Proto` reach the backend.
//! - Pipelined requests (python, all written at once) come back in order.
//! - A 20 MB chunked upload (`curl -T` with `Transfer-Encoding: chunked`): the backend's
//!   SHA-256 of what it decoded equals `sha256sum` of the file.
//! - A WebSocket upgrade: frames up to 70 kB echoed through the tunnel.
//! - `wrk` load with every response's status and body checked by a Lua script, keep-alive
//!   and with a connection per request (the backend connections then come from the
//!   worker's pool).
//! - RequestMirror: `curl` GET and a 1 MB POST under `/mirror` are answered by a; b's
//!   server reports each copy with the `-shadow` host and the body's SHA-256.

use sluice_dataplane::stats::Event;
use sluice_tests::kernel::{Py, BACKENDS, VIP};
use sluice_tests::kernel_tls::{curl, require_programs, wait_listening};
use sluice_tests::tls_rig::{inventory, Rig, CLIENT, HTTP_PORT};
use std::time::Duration;

/// The HTTP/1.1 backends (python; see the script's docstring).
const HTTP11_SERVER: &str = include_str!("../src/py/http11_server.py");
/// The pipelining and WebSocket client (python).
const HTTP_PROBE: &str = include_str!("../src/py/http_probe.py");

const HOST: &str = "shop.example.test";

fn config() -> String {
    format!(
        r#"{}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: ks}}
spec:
  gatewayClassName: sluice
  addresses: [{{type: IPAddress, value: {VIP}}}]
  listeners:
  - {{name: web, port: 80, protocol: HTTP}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: shop, namespace: ks}}
spec:
  parentRefs: [{{name: gw, sectionName: web}}]
  hostnames: [{HOST}]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /api}}}}, {{path: {{type: Exact, value: /upload}}}}]
    backendRefs: [{{name: a, port: {HTTP_PORT}}}]
  - matches: [{{path: {{type: PathPrefix, value: /mirror}}}}]
    filters: [{{type: RequestMirror, requestMirror: {{backendRef: {{name: b, port: {HTTP_PORT}}}}}}}]
    backendRefs: [{{name: a, port: {HTTP_PORT}}}]
  - backendRefs: [{{name: b, port: {HTTP_PORT}}}]
"#,
        inventory(HTTP_PORT)
    )
}

/// The rig with the HTTP/1.1 backends listening.
fn start() -> (Rig, Py) {
    let rig = Rig::start(&config());
    let port = HTTP_PORT.to_string();
    let mut servers = Py::start(
        &rig.topo.backend,
        HTTP11_SERVER,
        &[&port, BACKENDS[0], BACKENDS[1]],
    );
    assert_eq!(servers.line(Duration::from_secs(10)), "ready");
    wait_listening(&rig.topo.backend, BACKENDS[1], HTTP_PORT);
    (rig, servers)
}

#[test]
fn curl_urls_on_one_connection_reach_the_backends_their_paths_name() {
    let (rig, servers) = start();
    let url = |p: &str| format!("http://{HOST}{p}");
    let resolve = format!("{HOST}:80:{VIP}");
    let (code, out, err) = curl(
        &rig.topo.client,
        &[
            "-s",
            "--resolve",
            &resolve,
            "-w",
            "connects %{num_connects}\n",
            &url("/api/orders"),
            &url("/index.html"),
            &url("/api/orders/7"),
        ],
    );
    assert_eq!(code, 0, "curl: {err}");
    let lines: Vec<&str> = out.lines().collect();
    let (a, b) = (BACKENDS[0], BACKENDS[1]);
    let expect = |backend: &str, path: &str| {
        format!("backend {backend} host {HOST} path {path} xff {CLIENT} xfp http")
    };
    assert_eq!(
        lines,
        vec![
            expect(a, "/api/orders").as_str(),
            "connects 1",
            expect(b, "/index.html").as_str(),
            "connects 0",
            expect(a, "/api/orders/7").as_str(),
            "connects 0",
        ],
        "{out}"
    );
    drop(servers);
    let c = rig.finish();
    assert_eq!(c.events_of(Event::TerminateAccepted), 1, "{c:?}");
    assert_eq!(c.events_of(Event::HttpRequest), 3, "{c:?}");
    assert_eq!(c.events_of(Event::HttpResponse2xx), 3, "{c:?}");
}

#[test]
fn pipelined_requests_come_back_in_order() {
    let (rig, servers) = start();
    let mut probe = Py::start(
        &rig.topo.client,
        HTTP_PROBE,
        &[
            "pipeline", VIP, "80", HOST, "/api/1", "/x/2", "/api/3", "/x/4", "/api/5",
        ],
    );
    let (a, b) = (BACKENDS[0], BACKENDS[1]);
    for (path, backend) in [
        ("/api/1", a),
        ("/x/2", b),
        ("/api/3", a),
        ("/x/4", b),
        ("/api/5", a),
    ] {
        let line = probe.line(Duration::from_secs(20));
        assert!(
            line.starts_with(&format!("200 backend {backend} host {HOST} path {path} ")),
            "{path}: {line}"
        );
    }
    drop(probe);
    drop(servers);
    let c = rig.finish();
    assert_eq!(c.events_of(Event::HttpRequest), 5, "{c:?}");
}

#[test]
fn a_twenty_megabyte_chunked_upload_arrives_whole() {
    let (rig, servers) = start();
    let dir = tempdir();
    let file = format!("{dir}/upload.bin");
    rig.topo.client.exec(&[
        "sh",
        "-c",
        &format!("head -c 20000000 /dev/urandom > {file}"),
    ]);
    let sum = rig.topo.client.exec(&["sha256sum", &file]);
    let sum = sum.split_whitespace().next().unwrap_or("").to_string();
    let (code, out, err) = curl(
        &rig.topo.client,
        &[
            "-s",
            "--max-time",
            "60",
            "--resolve",
            &format!("{HOST}:80:{VIP}"),
            "-H",
            "Transfer-Encoding: chunked",
            "-T",
            &file,
            "-X",
            "POST",
            &format!("http://{HOST}/upload"),
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 0, "curl: {err}");
    assert_eq!(
        out.trim(),
        format!("backend {} length 20000000 sha256 {sum}", BACKENDS[0])
    );
    drop(servers);
    rig.finish();
}

#[test]
fn a_websocket_upgrade_tunnels_frames_both_ways() {
    let (rig, servers) = start();
    let mut probe = Py::start(&rig.topo.client, HTTP_PROBE, &["ws", VIP, "80", HOST, "40"]);
    assert_eq!(probe.line(Duration::from_secs(60)), "ok 40");
    drop(probe);
    drop(servers);
    let c = rig.finish();
    assert_eq!(c.events_of(Event::HttpResponse1xx), 1, "{c:?}");
}

/// The Lua script of the `wrk` run: counts responses whose status is not 200 or whose
/// body does not name backend a and the request's path.
const WRK_CHECK: &str = r#"
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) good = 0; bad = 0 end
function response(status, headers, body)
  if status == 200 and body:find("backend 10.78.0.11 host shop.example.test path /api/load", 1, true) then
    good = good + 1
  else
    bad = bad + 1
  end
end
function done(summary, latency, requests)
  local g, b = 0, 0
  for _, t in ipairs(threads) do g = g + t:get("good"); b = b + t:get("bad") end
  io.write(string.format("checked good %d bad %d errors %d\n", g, b,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.status + summary.errors.timeout))
end
"#;

/// `wrk` with every response checked, keep-alive or (`close`) a connection per request;
/// the counters at the end.
fn wrk_checked(close: bool) -> sluice_dataplane::stats::Counters {
    require_programs(&["wrk"]);
    let (rig, servers) = start();
    let dir = tempdir();
    let script = format!("{dir}/check.lua");
    std::fs::write(&script, WRK_CHECK).expect("write the wrk script");
    let host = format!("Host: {HOST}");
    let url = format!("http://{VIP}/api/load");
    let mut args = vec!["wrk", "-t1", "-c8", "-d3s", "-s", &script, "-H", &host];
    if close {
        args.extend(["-H", "Connection: close"]);
    }
    args.push(&url);
    let out = rig.topo.client.exec(&args);
    let _ = std::fs::remove_dir_all(&dir);
    let line = out
        .lines()
        .find(|l| l.starts_with("checked "))
        .unwrap_or_else(|| panic!("no summary from wrk: {out}"));
    let nums: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(nums.len(), 3, "{line}");
    assert!(nums[0] >= 100, "too few responses: {out}");
    assert_eq!(nums[1], 0, "wrong responses: {out}");
    assert_eq!(nums[2], 0, "errors: {out}");
    drop(servers);
    rig.finish()
}

#[test]
fn wrk_keep_alive_load_gets_every_response_right() {
    let c = wrk_checked(false);
    assert!(c.events_of(Event::HttpBackendReused) > 0, "{c:?}");
}

#[test]
fn wrk_with_a_connection_per_request_gets_every_response_right() {
    let c = wrk_checked(true);
    // One connection per request (up to wrk's 8 connections opened as the run ended).
    let (conns, reqs) = (
        c.events_of(Event::TerminateAccepted),
        c.events_of(Event::HttpRequest),
    );
    assert!(conns >= reqs && conns - reqs <= 8, "{c:?}");
    // The backend connections outlive their clients: most requests take one from the
    // worker's pool.
    let (pooled, opened) = (
        c.events_of(Event::HttpPoolReused),
        c.events_of(Event::TerminateBackendConnected),
    );
    assert!(pooled > 0 && opened < reqs / 2, "{c:?}");
}

#[test]
fn mirrored_copies_reach_the_mirror_backend() {
    let (rig, mut servers) = start();
    let dir = tempdir();
    let file = format!("{dir}/body");
    let body: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i * 31 + i / 7919) as u8)
        .collect();
    std::fs::write(&file, &body).expect("body");
    let sha = rig.topo.client.exec(&["sha256sum", &file]);
    let sha = sha.split_whitespace().next().unwrap_or("").to_string();
    let resolve = format!("{HOST}:80:{VIP}");
    let get_url = format!("http://{HOST}/mirror/get");
    let post_url = format!("http://{HOST}/mirror/post");
    let data = format!("@{file}");
    let (code, out, err) = curl(
        &rig.topo.client,
        &[
            "-s",
            "--resolve",
            &resolve,
            &get_url,
            "--next",
            "-s",
            "--resolve",
            &resolve,
            "-H",
            "Content-Type: application/octet-stream",
            "--data-binary",
            &data,
            &post_url,
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 0, "{out} {err}");
    // The client sees a's answers only.
    assert!(
        out.contains(&format!(
            "backend {} host {HOST} path /mirror/get",
            BACKENDS[0]
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "backend {} length 3000000 sha256 {sha}",
            BACKENDS[0]
        )),
        "{out}"
    );
    let mut copies: Vec<String> = (0..2)
        .map(|_| servers.line(Duration::from_secs(20)))
        .collect();
    copies.sort();
    let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    let shadow = "shop.example.test-shadow";
    assert_eq!(
        copies,
        [
            format!("mirror {} {shadow} /mirror/get close {empty}", BACKENDS[1]),
            format!("mirror {} {shadow} /mirror/post close {sha}", BACKENDS[1]),
        ]
    );
    drop(servers);
    let c = rig.finish();
    assert_eq!(c.events_of(Event::HttpMirrorSent), 2, "{c:?}");
    assert_eq!(c.events_of(Event::HttpMirrorDropped), 0, "{c:?}");
}

/// A fresh directory for a test's files.
fn tempdir() -> String {
    let d = std::env::temp_dir().join(sluice_tests::sys::unique_name("khttp"));
    std::fs::create_dir_all(&d).expect("temp dir");
    d.to_string_lossy().into_owned()
}
