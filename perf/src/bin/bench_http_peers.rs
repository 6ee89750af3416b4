//! HTTP/1.1 proxying per core, request by request: nginx, HAProxy and sluice side by
//! side (issue #32). Prints JSON on stdout (figures are never asserted), progress on
//! stderr.
//!
//! Every request carries `Host: shop.example.test`; paths alternate between
//! `/api/items` (backend set `a`) and `/index.html` (backend set `b`), so each contender
//! routes every request anew. Contenders (`--only`):
//!
//! - `nginx`: `http { upstream a { server ...; keepalive 64; } upstream b {...} server {
//!   listen ...:80; location /api { proxy_pass http://a; proxy_http_version 1.1;
//!   proxy_set_header Connection ""; } location / { proxy_pass http://b; ... } } }`,
//!   `worker_processes 1`, `worker_cpu_affinity` to core 1, `access_log off`;
//! - `haproxy`: `mode http`, `nbthread 1`, `cpu-map` to core 1, `http-reuse always`,
//!   `use_backend a if { path_beg /api }`, `default_backend b`;
//! - `sluice`: `Worker<Balancer>` in this process on a TAP lane (as `bench_sni_peers`
//!   and `bench_tls_peers` run it) serving a Gateway API Gateway with an `HTTP` listener
//!   on port 80 and an HTTPRoute (hostnames `[shop.example.test]`; `PathPrefix /api` to
//!   Service `a`, the rest to `b`): the per-request proxy of the terminate engine;
//! - `sluice-splice`: the same with an HTTPRoute of one rule without matches (Host
//!   only) to `a`, which sluice serves by splice (delayed binding): what splicing costs
//!   per connection in `close` mode beside the per-request proxy.
//!
//! sluice's contenders report an `error` instead of figures while the control plane
//! leaves their HTTPRoute out (issue #32's engine) or their probe fails; no figure is
//! made up.
//!
//! The load is `wrk` (one thread, `--latency`) in the client namespace pinned to core 0
//! (`taskset -c 0`) with a Lua request script; modes (`--mode`): `keepalive` (`--conns`
//! connections kept alive) and `close` (`-H 'Connection: close'`: a new connection per
//! request). The backends are one nginx in the backend namespace on core 0 answering
//! `backend a\n` on port 8001 and `backend b\n` on 8002 (HTTP/1.1 keep-alive, a million
//! requests a connection). Before each round a probe sends both paths on one kept-alive
//! connection and on a connection each, and checks every answer's status and body; wrk
//! then counts socket errors and statuses of 400 or more, and a round with any is an
//! error, not a figure. Configurations: `sluice_perf::http_load::peers`.
//!
//! Figures per mode and contender (medians over the rounds; contenders alternate within
//! each round, the order rotating): `rps` (wrk's requests/s), `rps_per_core` (rps per
//! second of the contender's CPU time), `p50_ms`, `p99_ms`, `cores` (CPU seconds per
//! window second). CPU time: the proxy process tree's utime + stime (nginx, HAProxy) or
//! sluice's worker thread time, each **plus the run time of `ksoftirqd/1`** in the window
//! (`cpu_s_softirqd`): network receive work the kernel defers from core 1 to that thread
//! (`sluice_perf::sni_load::charge_softirqd`; the rest of the softirq work runs in the
//! contender's own thread and is already in its time). Ratios `sluice / best peer` of
//! `rps_per_core` per mode, from the same run. Topology, cores and the caveats of kernel
//! work charged across namespaces: `sluice_perf::sni_load`, `sluice_perf::http_load`.
//!
//! Needs root (namespaces, TAP) and `wrk`, `nginx`, `haproxy` from `scripts/setup`;
//! installs nothing itself.
//!
//! Usage: `bench_http_peers [--duration S] [--warmup S] [--rounds N] [--conns C]
//! [--mode keepalive,close] [--only nginx,haproxy,sluice,sluice-splice]
//! [--sluice-idle sleep|spin]` (`--help`); `bench_http_peers --print-manifests
//! [sluice|sluice-splice] > FILE` prints one of sluice's configurations (no root
//! needed), for `sluice check -c FILE`.

use clap::{Parser, ValueEnum};
use serde_json::{json, Value};
use sluice_perf::http_load::peers::{self, Backends, SluiceRoute};
use sluice_perf::http_load::wrk::{self, ConnMode};
use sluice_perf::http_load::{self, HttpRound, HttpRoundSpec};
use sluice_perf::sni_load::net::Topology;
use sluice_perf::sni_load::{self, proxy, Contender, RoundError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// HTTP/1.1 proxying per core, request by request: nginx, HAProxy and sluice side by
/// side, in network namespaces this creates and deletes (needs root). Prints JSON.
#[derive(Parser, Debug)]
#[command(name = "bench_http_peers")]
struct Cli {
    /// Seconds of each measurement window (whole seconds, as wrk takes them; at least 1).
    #[arg(long, value_name = "S", default_value_t = 3)]
    duration: u64,
    /// Seconds of load before each window (a wrk run of its own; 0: none).
    #[arg(long, value_name = "S", default_value_t = 1)]
    warmup: u64,
    /// Rounds (at least 1); contenders alternate within each, figures are medians.
    #[arg(long, value_name = "N", default_value_t = 3)]
    rounds: usize,
    /// Connections wrk keeps open (1 to 10000).
    #[arg(long, value_name = "C", default_value_t = 64)]
    conns: usize,
    /// The modes to run, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "keepalive,close"
    )]
    mode: Vec<ModeArg>,
    /// The contenders to run, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "nginx,haproxy,sluice,sluice-splice"
    )]
    only: Vec<Peer>,
    /// sluice's worker when idle: `sleep` as `sluice run` does on TAP ports (charged its
    /// thread CPU time), or `spin` (busy-polls, charged its busy cycles).
    #[arg(long, value_enum, default_value_t = Idling::Sleep)]
    sluice_idle: Idling,
    /// Print the manifests of sluice's contender `sluice` (per-request routes, the
    /// default) or `sluice-splice` (the Host-only route served by splice) and exit: what
    /// `sluice check -c` should accept and serve.
    #[arg(long, value_enum, value_name = "CONTENDER", num_args = 0..=1, default_missing_value = "sluice")]
    print_manifests: Option<SluicePeer>,
}

/// `--mode`.
#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
enum ModeArg {
    Keepalive,
    Close,
}

/// A contender of `--only`.
#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
enum Peer {
    Nginx,
    Haproxy,
    Sluice,
    SluiceSplice,
}

/// `--print-manifests`.
#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
enum SluicePeer {
    Sluice,
    SluiceSplice,
}

/// `--sluice-idle`.
#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
enum Idling {
    Sleep,
    Spin,
}

/// Every contender in the order a round starts them.
const ALL: [Peer; 4] = [Peer::Nginx, Peer::Haproxy, Peer::Sluice, Peer::SluiceSplice];

/// The peers sluice is compared with.
const PEERS: [&str; 2] = ["nginx", "haproxy"];

struct Opts {
    duration: u64,
    warmup: u64,
    rounds: usize,
    conns: usize,
    modes: Vec<ConnMode>,
    only: Vec<Peer>,
    spin: bool,
}

fn contender(p: Peer, spin: bool) -> Box<dyn Contender> {
    let c: Box<dyn Contender> = match p {
        Peer::Nginx => Box::new(peers::nginx()),
        Peer::Haproxy => Box::new(peers::haproxy()),
        Peer::Sluice => Box::new(peers::sluice(SluiceRoute::ByPath, spin)),
        Peer::SluiceSplice => Box::new(peers::sluice(SluiceRoute::HostOnly, spin)),
    };
    sni_load::charge_softirqd(c)
}

/// What one contender did in one mode.
struct Results {
    name: String,
    routing: String,
    cpu_method: String,
    rounds: Vec<HttpRound>,
    failures: Vec<String>,
}

/// `sluice / best peer` of `rps_per_core` for each sluice contender, from `summaries`
/// (`(name, summary)`).
fn ratios(summaries: &[(String, Value)]) -> Value {
    let key = "rps_per_core";
    let best = summaries
        .iter()
        .filter(|(n, _)| PEERS.contains(&n.as_str()))
        .filter_map(|(n, s)| s[key].as_f64().map(|x| (n, x)))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let mut out = serde_json::Map::new();
    for (name, s) in summaries.iter().filter(|(n, _)| n.starts_with("sluice")) {
        let v = match (s[key].as_f64(), best) {
            (Some(x), Some((peer, p))) if p > 0.0 => {
                json!({"sluice": x, "best_peer": peer, "best": p, "ratio": x / p})
            }
            (None, _) => json!({"error": s["error"].as_str().unwrap_or("no figure")}),
            (Some(_), _) => json!({"error": "no peer figure"}),
        };
        out.insert(name.clone(), v);
    }
    Value::Object(out)
}

fn main() {
    let c = Cli::parse();
    if let Some(p) = c.print_manifests {
        let r = match p {
            SluicePeer::Sluice => SluiceRoute::ByPath,
            SluicePeer::SluiceSplice => SluiceRoute::HostOnly,
        };
        print!("{}", peers::sluice_manifests(r));
        return;
    }
    let o = Opts {
        duration: c.duration.max(1),
        warmup: c.warmup,
        rounds: c.rounds.max(1),
        conns: c.conns.clamp(1, 10_000),
        modes: [
            (ModeArg::Keepalive, ConnMode::KeepAlive),
            (ModeArg::Close, ConnMode::Close),
        ]
        .into_iter()
        .filter(|(a, _)| c.mode.contains(a))
        .map(|(_, m)| m)
        .collect(),
        only: ALL.into_iter().filter(|p| c.only.contains(p)).collect(),
        spin: c.sluice_idle == Idling::Spin,
    };
    if !sluice_testkit::sys::can_admin_net() {
        eprintln!("bench_http_peers: needs root with CAP_NET_ADMIN, /dev/net/tun and iproute2");
        std::process::exit(1);
    }
    if !core_affinity::set_for_current(core_affinity::CoreId {
        id: sni_load::LOAD_CORE,
    }) {
        eprintln!("bench_http_peers: could not pin the control thread to core 0");
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(sig, stop.clone());
    }
    match run(&o, &stop) {
        Ok(report) => println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        ),
        Err(e) => {
            // Everything `run` made (namespaces, processes, files) is gone by now.
            eprintln!("bench_http_peers: {e}");
            std::process::exit(1);
        }
    }
}

/// The benchmark: topology, backends, every round; the report. What it creates is
/// dropped (deleted, stopped) when it returns, error or not.
fn run(o: &Opts, stop: &AtomicBool) -> Result<Value, String> {
    let dir = proxy::WorkDir::new("http-wrk")?;
    let script = dir.path.join("requests.lua");
    std::fs::write(&script, wrk::script()).map_err(|e| format!("{}: {e}", script.display()))?;
    let topo = Topology::new().map_err(|e| format!("topology: {e}"))?;
    let backends = Backends::start(&topo, sni_load::LOAD_CORE)?;
    let backend_cpu0 = backends.cpu_s();
    let mut cs: Vec<Box<dyn Contender>> = o.only.iter().map(|p| contender(*p, o.spin)).collect();
    let n = cs.len();
    let mut dead: Vec<Option<String>> = vec![None; n];
    let mut report_modes = serde_json::Map::new();
    let mut report_ratios = serde_json::Map::new();
    'modes: for mode in &o.modes {
        let spec = HttpRoundSpec {
            mode: *mode,
            conns: o.conns,
            warmup_s: o.warmup,
            duration_s: o.duration,
            ready_limit: Duration::from_secs(10),
        };
        let mut results: Vec<Results> = cs
            .iter()
            .map(|c| Results {
                name: c.name().to_string(),
                routing: c.routing().describe(),
                cpu_method: c.cpu_method().to_string(),
                rounds: Vec::new(),
                failures: Vec::new(),
            })
            .collect();
        for round in 0..o.rounds {
            for k in 0..n {
                let i = (round + k) % n;
                if stop.load(Ordering::Relaxed) {
                    break 'modes;
                }
                let name = results[i].name.clone();
                if let Some(e) = &dead[i] {
                    results[i].failures.push(format!("not run: {e}"));
                    continue;
                }
                eprintln!(
                    "bench_http_peers: {} round {}/{} {name}",
                    mode.name(),
                    round + 1,
                    o.rounds
                );
                match http_load::measure(cs[i].as_mut(), &topo, &spec, &script, stop) {
                    Ok(m) => {
                        let f = http_load::round_figures(&m);
                        eprintln!(
                            "bench_http_peers:   {name}: {} requests, {:.0}/s, {:.0} per core ({:.2} cores, ksoftirqd {:.3} s), p50 {:.2} ms, p99 {:.2} ms{}",
                            m.load.wrk.requests,
                            f[0].1,
                            f[1].1,
                            f[4].1,
                            m.cpu.softirqd_s,
                            f[2].1,
                            f[3].1,
                            m.load.wrk.error().map_or(String::new(), |e| format!(" — ERROR {e}")),
                        );
                        results[i].rounds.push(m);
                    }
                    Err(RoundError::Interrupted) => break 'modes,
                    Err(e) => {
                        eprintln!("bench_http_peers:   {name} failed: {e}");
                        if e.never_served() {
                            dead[i] = Some(e.to_string());
                        }
                        results[i].failures.push(e.to_string());
                    }
                }
            }
        }
        let summaries: Vec<(String, Value)> = results
            .iter()
            .map(|r| {
                let mut s = http_load::summary(&r.rounds, &r.failures);
                s["routing"] = json!(r.routing);
                s["cpu_method"] = json!(r.cpu_method);
                (r.name.clone(), s)
            })
            .collect();
        report_ratios.insert(mode.name().into(), ratios(&summaries));
        report_modes.insert(
            mode.name().into(),
            Value::Object(summaries.into_iter().collect()),
        );
    }
    let backend_cpu_s = backends.cpu_s() - backend_cpu0;
    drop(backends);
    drop(topo);
    drop(dir);

    Ok(json!({
        "what": "HTTP/1.1 proxying per core, each request routed by path: nginx, HAProxy and sluice (per-request proxy; and splice for a Host-only route) with the same wrk load and nginx backends",
        "bench": "http_peers",
        "setup": {
            "contender_core": sni_load::PROXY_CORE,
            "load_core": sni_load::LOAD_CORE,
            "conns": o.conns,
            "warmup_s": o.warmup,
            "duration_s": o.duration,
            "rounds": o.rounds,
            "modes": o.modes.iter().map(|m| m.name()).collect::<Vec<_>>(),
            "sluice_idle": if o.spin { "spin" } else { "sleep (as sluice run on TAP)" },
            "client": "wrk -t 1 --latency in the client netns, taskset -c 0; a Lua script alternates GET /api/items and GET /index.html, Host: shop.example.test; close mode adds Connection: close",
            "backend": "one nginx worker in the backend netns on core 0: `backend a\\n` on :8001, `backend b\\n` on :8002, keep-alive (keepalive_requests 1000000)",
            "routes": "/api* to backend a (10.95.2.11:8001 for the peers, 10.95.4.11:8001 on sluice's lane), the rest to b (.12:8002); sluice-splice: everything to a",
            "topology": "client netns -veth- proxy netns -veth- backend netns; sluice on a TAP lane between the client and backend netns (as bench_sni_peers)",
            "rps": "wrk's Requests/sec of the measured run",
            "rps_per_core": "rps x window seconds / the contender's CPU seconds in the window (cpu_method, ksoftirqd/1 included)",
            "errors": "a round with wrk socket errors or responses >= 400 has no figure; the probe checks status 200 and each backend's body",
            "aggregation": "medians over rounds; ratios sluice / best peer of rps_per_core, from the same run",
            "haproxy_version": proxy::version("haproxy", &["-v"]),
            "nginx_version": proxy::version("nginx", &["-v"]),
            "wrk_version": proxy::version("wrk", &["-v"]),
        },
        "results": report_modes,
        "ratios": report_ratios,
        "backend_cpu_s": backend_cpu_s,
        "interrupted": stop.load(Ordering::Relaxed),
    }))
}
