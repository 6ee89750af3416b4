//! SNI routing, connections per second per core: HAProxy and nginx side by side, with a
//! slot for sluice. Prints JSON on stdout (figures are never asserted), progress on
//! stderr.
//!
//! Issue #7's comparison: the same backends and the same client load through
//!
//! - `haproxy`: `mode tcp`, `tcp-request inspect-delay 5s`, `tcp-request content accept if
//!   { req.ssl_hello_type 1 }`, `use_backend ... if { req.ssl_sni -i ... }`, `nbthread 1`;
//! - `nginx`: `stream` with `ssl_preread on`, `map $ssl_preread_server_name $upstream`,
//!   `proxy_pass $upstream`, `worker_processes 1`;
//! - `sluice`: SNI passthrough by delayed binding (`Worker<Balancer>` in this process on
//!   two TAP ports: a Gateway API Gateway with a TLS `Passthrough` listener on the front
//!   port and a TLSRoute per name): SYN cookie, ClientHello read, backend connected,
//!   connections spliced.
//!
//! Each contender runs on core 1 (`taskset`, or the worker's pinning); the load client
//! (64 connections in flight by default, the Firefox ClientHello of
//! `shared/testdata/tls` with SNI `a.example.test` or `b.example.test`, every answer
//! checked against the backend the SNI maps to) and the two backends run on core 0.
//! Contenders alternate in rounds (the order rotates each round); the figures are
//! medians over the rounds. Topology, accounting and caveats: `sluice_perf::sni_load`.
//!
//! CPU time: HAProxy's and nginx's from `/proc/PID/stat` (utime + stime of the process
//! tree). sluice's worker runs as `sluice run` runs it on TAP ports (busy-polls, then
//! sleeps after 256 empty rounds, up to 500 µs) and is charged its thread's CPU time
//! (`schedstat`): like the peers' figure, it does not count time the thread was
//! preempted. The TSC cycles of its busy poll rounds (`busy_cycles`: rx, pipeline, tx)
//! are reported beside it; they are wall-clock cycles, so on a machine shared with other
//! work they include preemption (seen here: 1.05 s of busy cycles in a 1 s window in
//! which the thread ran 0.33 s). `--sluice-idle spin` busy-polls without sleeping (as on
//! DPDK ports) and charges the busy cycles instead, since the thread's CPU time is then
//! the wall time.
//!
//! Needs root (namespaces, TAP) and `haproxy`, `nginx`, `libnginx-mod-stream` from
//! `scripts/setup`; installs nothing itself.
//!
//! Usage: `bench_sni_peers [--duration S] [--warmup S] [--rounds N] [--conns C]
//! [--only haproxy,nginx,sluice] [--timeout S] [--sluice-idle sleep|spin]` (`--help`).

use clap::{Parser, ValueEnum};
use serde_json::{json, Value};
use sluice_perf::sni_load::backend::Backends;
use sluice_perf::sni_load::net::{self, TapLane, Topology};
use sluice_perf::sni_load::{
    self, hello, proxy, Contender, External, InProcess, InProcessRun, Round, RoundSpec, Routing,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// SNI routing, connections per second per core: HAProxy, nginx and sluice side by
/// side, in network namespaces this creates and deletes (needs root). Prints JSON.
#[derive(Parser, Debug)]
#[command(name = "bench_sni_peers")]
struct Cli {
    /// Seconds of each measurement window (at least 0.2).
    #[arg(long, value_name = "S", value_parser = seconds, default_value_t = 3.0)]
    duration: f64,
    /// Seconds of load before each window.
    #[arg(long, value_name = "S", value_parser = seconds, default_value_t = 0.5)]
    warmup: f64,
    /// Rounds (at least 1); contenders alternate within each, figures are medians.
    #[arg(long, value_name = "N", default_value_t = 3)]
    rounds: usize,
    /// Connections the load client keeps in flight (1 to 10000).
    #[arg(long, value_name = "C", default_value_t = 64)]
    conns: usize,
    /// Seconds after which an unfinished connection is an error (at least 0.1).
    #[arg(long, value_name = "S", value_parser = seconds, default_value_t = 5.0)]
    timeout: f64,
    /// The contenders to run, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "haproxy,nginx,sluice"
    )]
    only: Vec<Peer>,
    /// sluice's worker when idle: `sleep` as `sluice run` does on TAP ports (charged its
    /// thread CPU time), or `spin` (busy-polls, charged its busy cycles).
    #[arg(long, value_enum, default_value_t = Idling::Sleep)]
    sluice_idle: Idling,
}

/// A contender of `--only`.
#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
enum Peer {
    Haproxy,
    Nginx,
    Sluice,
}

/// `--sluice-idle`.
#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
enum Idling {
    Sleep,
    Spin,
}

/// A finite, non-negative number of seconds.
fn seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err("needs a number of seconds".into()),
    }
}

struct Opts {
    /// Busy-poll sluice's worker (charged its busy cycles) instead of letting it sleep
    /// when idle as `sluice run` does on TAP ports (charged its thread CPU time).
    sluice_spin: bool,
    duration: f64,
    warmup: f64,
    rounds: usize,
    conns: usize,
    timeout: f64,
    only: Vec<String>,
}

/// Every contender, in the order a round starts them.
const ALL: [&str; 3] = ["haproxy", "nginx", "sluice"];

fn opts() -> Opts {
    let c = Cli::parse();
    Opts {
        sluice_spin: c.sluice_idle == Idling::Spin,
        duration: c.duration.max(0.2),
        warmup: c.warmup,
        rounds: c.rounds.max(1),
        conns: c.conns.clamp(1, 10_000),
        timeout: c.timeout.max(0.1),
        only: c
            .only
            .iter()
            .filter_map(|p| p.to_possible_value())
            .map(|v| v.get_name().to_string())
            .collect(),
    }
}

/// sluice's manifests: a Gateway on the lane VIP (one of the Appliance's virtual
/// addresses, as the forwarder here has it) with a TLS Passthrough listener on the front
/// port and a TLSRoute per name of [`sni_load::SNI_ROUTES`] to its backend's Service (one
/// pod on the lane's address of that backend).
fn sni_manifests() -> String {
    let mut y = format!(
        r#"{appliance}---
apiVersion: v1
kind: Namespace
metadata: {{name: sni-bench}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: sni-bench}}
spec:
  gatewayClassName: sluice
  addresses: [{{type: IPAddress, value: {vip}}}]
  listeners: [{{name: tls, port: {front}, protocol: TLS, tls: {{mode: Passthrough}}}}]
"#,
        appliance = sluice_testkit::manifests::bench_appliance(net::LANE_VIP, None),
        vip = net::LANE_VIP,
        front = net::FRONT_PORT,
    );
    for (sni, b) in sni_load::SNI_ROUTES {
        let (name, port) = net::BACKENDS[b];
        y.push_str(&format!(
            r#"---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {{name: to-{name}, namespace: sni-bench}}
spec:
  parentRefs: [{{name: gw}}]
  hostnames: [{sni}]
  rules: [{{backendRefs: [{{name: {name}, port: {port}}}]}}]
---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: sni-bench}}
spec: {{selector: {{app: {name}}}, ports: [{{port: {port}}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}-0, namespace: sni-bench, labels: {{app: {name}}}}}
status: {{podIP: {ip}}}
"#,
            ip = net::BACKEND_TAP[b],
        ));
    }
    y
}

/// Starts sluice's balancer (SNI passthrough by delayed binding) on the lane: one worker
/// pinned to the proxy core polling both TAP ports (`spin`: without ever sleeping).
fn start_sluice(lane: &TapLane, spin: bool) -> Result<InProcessRun, String> {
    let snapshot = sluice_testkit::config::try_snapshot("sni.yaml", &sni_manifests())
        .map_err(|e| format!("config: {}", e.join("; ")))?;
    sni_load::sluice::start(lane, snapshot, spin)
}

fn contenders(o: &Opts) -> Vec<Box<dyn Contender>> {
    let mut v: Vec<Box<dyn Contender>> = Vec::new();
    for name in ALL {
        if !o.only.iter().any(|s| s == name) {
            continue;
        }
        match name {
            "haproxy" => v.push(Box::new(External::haproxy())),
            "nginx" => v.push(Box::new(External::nginx())),
            _ => {
                let spin = o.sluice_spin;
                v.push(Box::new(InProcess::new(
                    "sluice",
                    Routing::Sni,
                    sni_load::sluice::cpu_method(spin),
                    move |lane: &TapLane| start_sluice(lane, spin),
                )))
            }
        }
    }
    v
}

fn ratio(a: &Value, b: &Value, key: &str) -> Value {
    match (a[key].as_f64(), b[key].as_f64()) {
        (Some(x), Some(y)) if y > 0.0 => json!(x / y),
        _ => Value::Null,
    }
}

fn main() {
    let o = opts();
    if !sluice_testkit::sys::can_admin_net() {
        eprintln!("bench_sni_peers: needs root with CAP_NET_ADMIN, /dev/net/tun and iproute2");
        std::process::exit(1);
    }
    if !core_affinity::set_for_current(core_affinity::CoreId {
        id: sni_load::LOAD_CORE,
    }) {
        eprintln!("bench_sni_peers: could not pin the control thread to core 0");
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(sig, stop.clone());
    }
    let testdata = sluice_perf::fixtures::testdata_dir();
    let spec = RoundSpec {
        conns: o.conns,
        warmup: Duration::from_secs_f64(o.warmup),
        duration: Duration::from_secs_f64(o.duration),
        timeout: Duration::from_secs_f64(o.timeout),
        ready_limit: Duration::from_secs(10),
    };
    let mut cs = contenders(&o);
    let mut hellos = Vec::new();
    for c in &cs {
        match c.routing().hellos(&testdata) {
            Ok(h) => hellos.push(h),
            Err(e) => {
                eprintln!("bench_sni_peers: ClientHellos: {e} (set SLUICE_TESTDATA to shared/testdata/tls)");
                std::process::exit(1);
            }
        }
    }
    let topo = match Topology::new() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("bench_sni_peers: topology: {e}");
            std::process::exit(1);
        }
    };
    let backends = match Backends::start(&topo.backend.name, sni_load::LOAD_CORE, &net::BACKENDS) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("bench_sni_peers: {e}");
            std::process::exit(1);
        }
    };
    let n = cs.len();
    let mut rounds: Vec<Vec<Round>> = vec![Vec::new(); n];
    let mut failures: Vec<Vec<String>> = vec![Vec::new(); n];
    'rounds: for r in 0..o.rounds {
        for k in 0..n {
            let i = (r + k) % n;
            if stop.load(Ordering::Relaxed) {
                break 'rounds;
            }
            let name = cs[i].name().to_string();
            eprintln!("bench_sni_peers: round {}/{} {name}", r + 1, o.rounds);
            match sni_load::measure(cs[i].as_mut(), &topo, &spec, &hellos[i], &stop) {
                Ok(m) => {
                    eprintln!(
                        "bench_sni_peers:   {name}: {:.0} cps, {:.0} cps per core ({:.2} CPU s), {} errors, {} mismatches, p99 {:.2} ms",
                        m.cps(),
                        m.cps_per_core(),
                        m.cpu.charged_s,
                        m.load.total_errors(),
                        m.load.mismatches,
                        m.load.quantile_ms(0.99)
                    );
                    rounds[i].push(m);
                }
                Err(e) => {
                    eprintln!("bench_sni_peers:   {name} failed: {e}");
                    failures[i].push(e);
                }
            }
        }
    }
    let backend_stats = backends.stop();
    drop(topo);

    let mut per = serde_json::Map::new();
    for (i, c) in cs.iter().enumerate() {
        per.insert(
            c.name().to_string(),
            sni_load::summary(c.as_ref(), &rounds[i], &failures[i]),
        );
    }
    let mut ratios = serde_json::Map::new();
    if let Some(s) = per.get("sluice") {
        for peer in ["haproxy", "nginx"] {
            if let Some(p) = per.get(peer) {
                ratios.insert(
                    format!("sluice_over_{peer}"),
                    json!({
                        "cps_per_core": ratio(s, p, "cps_per_core"),
                        "cps": ratio(s, p, "cps"),
                    }),
                );
            }
        }
    }
    if let (Some(h), Some(n)) = (per.get("haproxy"), per.get("nginx")) {
        ratios.insert(
            "nginx_over_haproxy".into(),
            json!({"cps_per_core": ratio(n, h, "cps_per_core"), "cps": ratio(n, h, "cps")}),
        );
    }
    let report = json!({
        "what": "TLS routing by SNI, connections per second per core: HAProxy (mode tcp, req.ssl_sni), nginx (stream, ssl_preread) and sluice (delayed binding on TAP ports) side by side on the same backends and client load",
        "bench": "sni_peers",
        "setup": {
            "contender_core": sni_load::PROXY_CORE,
            "load_core": sni_load::LOAD_CORE,
            "conns_in_flight": o.conns,
            "warmup_s": o.warmup,
            "duration_s": o.duration,
            "rounds": o.rounds,
            "per_connection_timeout_s": o.timeout,
            "sluice_idle": if o.sluice_spin { "spin" } else { "sleep (as sluice run on TAP)" },
            "client": "one epoll thread in the client netns: connect, send a ClientHello (Firefox capture, SNI a.example.test or b.example.test in turn), read to EOF, check `backend=<name>`, close; a new connection as soon as one ends",
            "backends": "one epoll thread in the backend netns: a (port 8001), b (port 8002); read the whole TLS record, answer `backend=<name>\\n`, close",
            "hello_capture": testdata.join(hello::BASE_CAPTURE).display().to_string(),
            "hello_bytes": hellos.first().and_then(|h| h.first()).map(|h| h.bytes.len()),
            "topology": "client netns -veth- proxy netns -veth- backend netns (10.95.1.0/24, 10.95.2.0/24); in-process contenders on a TAP lane between the client and backend netns (10.95.3.0/24, 10.95.4.0/24), a source NAT address of its own per round (10.95.4.100+n) so a fresh instance never reuses tuples the backends hold in TIME_WAIT",
            "cps": "right answers in the window / window seconds",
            "cps_per_core": "right answers in the window / contender CPU seconds in the window (cpu_method)",
            "aggregation": "medians over rounds of cps, cps_per_core, cpu_s, p50/p99; sums of conns, errors, mismatches",
            "haproxy_version": proxy::version("haproxy", &["-v"]),
            "nginx_version": proxy::version("nginx", &["-v"]),
            "tsc_hz": sluice_dataplane::mem::tsc_hz(),
        },
        "contenders": per,
        "ratios": ratios,
        "backends": match backend_stats {
            Ok(s) => json!({"answered": s.answered, "incomplete": s.incomplete}),
            Err(e) => json!({"error": e}),
        },
        "interrupted": stop.load(Ordering::Relaxed),
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&report).unwrap_or_default()
    );
}
