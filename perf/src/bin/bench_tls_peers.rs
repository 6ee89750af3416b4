//! TLS termination per core: full handshakes, resumed handshakes and bulk throughput of
//! nginx, HAProxy and sluice side by side (issue #31). Prints JSON on stdout (figures
//! are never asserted), progress on stderr.
//!
//! Contenders (`--only`; `nginx`, `haproxy`, `sluice` name both variants):
//!
//! - `nginx-stream`: `stream { server { listen ... ssl; proxy_pass backend; } }`;
//! - `nginx-http`: `http { server { listen ... ssl; location / { proxy_pass
//!   http://backend; } } }` (HTTP/1.0 to the backend, no upstream keep-alive: the
//!   backend closes after each answer, so nobody could reuse its connections);
//! - `haproxy-tcp`, `haproxy-http`: `bind ... ssl crt FILE`, `mode tcp` / `mode http`;
//! - `sluice-stream`: `Worker<Balancer>` in this process on a TAP lane (as
//!   `bench_sni_peers` runs it) serving a Gateway API Gateway with a `TLS` listener in
//!   mode `Terminate` (`certificateRefs` to a `kubernetes.io/tls` Secret made of the same
//!   PEM files) and a TLSRoute;
//! - `sluice-http`: the same worker serving an Istio Gateway `HTTPS` server (`SIMPLE`,
//!   `credentialName` to that Secret) and a VirtualService `http` route, or
//!   (`--sluice-http-api gateway-api`) a Gateway API `HTTPS` listener and an HTTPRoute.
//!
//! Every peer is one worker / one thread pinned to core 1, TLS 1.3 only, resumption on;
//! configurations in `sluice_perf::tls_load::peers`. sluice's contenders report an
//! `error` instead of figures while the control plane leaves their configuration out or
//! their probe connection fails.
//!
//! The client (`sluice_perf::tls_load::client`, rustls on ring, one epoll thread on core
//! 0 with the backend) offers TLS 1.3, `TLS13_AES_128_GCM_SHA256` and X25519 only, SNI
//! `tls.example.test`, and pins the run's certificate. Modes (`--mode`): `full` (no
//! resumption; `hello` / `GET /hello`, answer checked), `resumed` (each slot resumes
//! with the ticket of its previous connection; the share of resumed handshakes is
//! reported and below 90 % the figure is an error), `bulk` (`--bulk-mib` per connection
//! from the backend through the contender, every byte checked). Key types (`--keys`):
//! ECDSA P-256 and RSA 2048 certificates made with `openssl` at start.
//!
//! Contenders alternate within each round (the order rotates); figures are medians over
//! the rounds; ratios `sluice / best peer` compare each sluice variant with the better of
//! the peers carrying the same protocol (`best_same_protocol`) and with the best of all
//! four (`best_any`), from the same run. CPU accounting and topology as in
//! `bench_sni_peers` (`sluice_perf::sni_load`).
//!
//! Needs root (namespaces, TAP) and `haproxy`, `nginx`, `libnginx-mod-stream`, `openssl`
//! from `scripts/setup`; installs nothing itself.
//!
//! Usage: `bench_tls_peers [--duration S] [--warmup S] [--rounds N] [--conns C]
//! [--bulk-conns C] [--bulk-mib M] [--mode full,resumed,bulk] [--keys ecdsa,rsa]
//! [--only nginx,haproxy,sluice] [--timeout S] [--sluice-idle sleep|spin]
//! [--sluice-http-api istio|gateway-api] [--client-auth]` (`--help`). With
//! `--client-auth` every contender requires a client certificate and verifies it against
//! a client CA made at start (issue #33's mutual handshakes: `--mode full --client-auth`).

use clap::{Parser, ValueEnum};
use serde_json::{json, Value};
use sluice_perf::sni_load::net::{self, Topology};
use sluice_perf::sni_load::{self, proxy, Contender, RoundError};
use sluice_perf::tls_load::backend::Backend;
use sluice_perf::tls_load::certs::{Certs, KeyType};
use sluice_perf::tls_load::client::{Mode, Protocol, TlsClient};
use sluice_perf::tls_load::peers::{self, HttpApi};
use sluice_perf::tls_load::{self, Negotiated, TlsRound, TlsRoundSpec};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// TLS termination per core: nginx, HAProxy and sluice side by side, in network
/// namespaces this creates and deletes (needs root). Prints JSON.
#[derive(Parser, Debug)]
#[command(name = "bench_tls_peers")]
struct Cli {
    /// Seconds of each measurement window (at least 0.2).
    #[arg(long, value_name = "S", value_parser = seconds, default_value_t = 3.0)]
    duration: f64,
    /// Seconds of load before each window (resumed: every slot's first, full, handshake
    /// happens in it).
    #[arg(long, value_name = "S", value_parser = seconds, default_value_t = 0.5)]
    warmup: f64,
    /// Rounds (at least 1); contenders alternate within each, figures are medians.
    #[arg(long, value_name = "N", default_value_t = 3)]
    rounds: usize,
    /// Connections in flight for the handshake modes (1 to 10000).
    #[arg(long, value_name = "C", default_value_t = 64)]
    conns: usize,
    /// Connections in flight in bulk mode (1 to 1000).
    #[arg(long, value_name = "C", default_value_t = 4)]
    bulk_conns: usize,
    /// MiB each bulk connection moves from the backend to the client.
    #[arg(long, value_name = "M", default_value_t = 64)]
    bulk_mib: u64,
    /// Seconds after which an unfinished connection is an error (at least 0.1; a bulk
    /// connection only before its body begins).
    #[arg(long, value_name = "S", value_parser = seconds, default_value_t = 5.0)]
    timeout: f64,
    /// The modes to run, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "full,resumed,bulk"
    )]
    mode: Vec<ModeArg>,
    /// The server key types, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "ecdsa,rsa")]
    keys: Vec<KeyArg>,
    /// The contenders to run, comma-separated (`nginx`, `haproxy`, `sluice`: both
    /// variants).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "nginx,haproxy,sluice"
    )]
    only: Vec<Peer>,
    /// sluice's worker when idle: `sleep` as `sluice run` does on TAP ports (charged its
    /// thread CPU time), or `spin` (busy-polls, charged its busy cycles).
    #[arg(long, value_enum, default_value_t = Idling::Sleep)]
    sluice_idle: Idling,
    /// How sluice-http is configured: an Istio Gateway + VirtualService (routed by the
    /// control plane today), or a Gateway API HTTPS listener + HTTPRoute.
    #[arg(long, value_enum, default_value_t = ApiArg::Istio)]
    sluice_http_api: ApiArg,
    /// Client certificates: every contender requires one and verifies it against a
    /// client CA made at start (nginx `ssl_verify_client on`, HAProxy `verify required`,
    /// sluice Istio `MUTUAL` / Gateway API `frontendValidation`); the client presents
    /// one (ECDSA P-256) on every full handshake. `--mode full --client-auth` measures
    /// mutual handshakes.
    #[arg(long)]
    client_auth: bool,
    /// Print sluice's manifests for the first of `--keys` (stream, then HTTP; with a
    /// certificate made for the occasion) and exit: what `sluice check -c` should
    /// accept and serve.
    #[arg(long)]
    print_sluice_config: bool,
}

/// `--mode`.
#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
enum ModeArg {
    Full,
    Resumed,
    Bulk,
}

/// `--keys`.
#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
enum KeyArg {
    Ecdsa,
    Rsa,
}

/// A contender (or a pair) of `--only`.
#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
enum Peer {
    Nginx,
    NginxStream,
    NginxHttp,
    Haproxy,
    HaproxyTcp,
    HaproxyHttp,
    Sluice,
    SluiceStream,
    SluiceHttp,
}

/// `--sluice-idle`.
#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
enum Idling {
    Sleep,
    Spin,
}

/// `--sluice-http-api`.
#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
enum ApiArg {
    Istio,
    GatewayApi,
}

/// A finite, non-negative number of seconds.
fn seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err("needs a number of seconds".into()),
    }
}

/// Every contender, in the order a round starts them: name and protocol.
const ALL: [(&str, Protocol); 6] = [
    ("nginx-stream", Protocol::Stream),
    ("nginx-http", Protocol::Http),
    ("haproxy-tcp", Protocol::Stream),
    ("haproxy-http", Protocol::Http),
    ("sluice-stream", Protocol::Stream),
    ("sluice-http", Protocol::Http),
];

/// The peers sluice is compared with.
const PEERS: [&str; 4] = ["nginx-stream", "nginx-http", "haproxy-tcp", "haproxy-http"];

struct Opts {
    duration: f64,
    warmup: f64,
    rounds: usize,
    conns: usize,
    bulk_conns: usize,
    bulk_bytes: u64,
    timeout: f64,
    modes: Vec<Mode>,
    keys: Vec<KeyType>,
    only: Vec<&'static str>,
    spin: bool,
    http_api: HttpApi,
    client_auth: bool,
    print_config: bool,
}

fn opts() -> Opts {
    let c = Cli::parse();
    let selected = |name: &str| {
        c.only.iter().any(|p| {
            let v = p.to_possible_value().map(|v| v.get_name().to_string());
            v.is_some_and(|v| name == v || name.starts_with(&format!("{v}-")))
        })
    };
    let mut modes = Vec::new();
    for m in [ModeArg::Full, ModeArg::Resumed, ModeArg::Bulk] {
        if c.mode.contains(&m) {
            modes.push(match m {
                ModeArg::Full => Mode::Full,
                ModeArg::Resumed => Mode::Resumed,
                ModeArg::Bulk => Mode::Bulk {
                    bytes: c.bulk_mib.max(1) << 20,
                },
            });
        }
    }
    let mut keys = Vec::new();
    for (a, k) in [
        (KeyArg::Ecdsa, KeyType::EcdsaP256),
        (KeyArg::Rsa, KeyType::Rsa2048),
    ] {
        if c.keys.contains(&a) {
            keys.push(k);
        }
    }
    Opts {
        duration: c.duration.max(0.2),
        warmup: c.warmup,
        rounds: c.rounds.max(1),
        conns: c.conns.clamp(1, 10_000),
        bulk_conns: c.bulk_conns.clamp(1, 1000),
        bulk_bytes: c.bulk_mib.max(1) << 20,
        timeout: c.timeout.max(0.1),
        modes,
        keys,
        only: ALL
            .iter()
            .map(|(n, _)| *n)
            .filter(|n| selected(n))
            .collect(),
        spin: c.sluice_idle == Idling::Spin,
        http_api: match c.sluice_http_api {
            ApiArg::Istio => HttpApi::Istio,
            ApiArg::GatewayApi => HttpApi::GatewayApi,
        },
        client_auth: c.client_auth,
        print_config: c.print_sluice_config,
    }
}

/// The contenders of `o` for certificate `cert`, with the protocol each carries.
fn contenders(o: &Opts, cert: &tls_load::certs::Cert) -> Vec<(Box<dyn Contender>, Protocol)> {
    ALL.iter()
        .filter(|(n, _)| o.only.contains(n))
        .map(|(name, proto)| {
            let c: Box<dyn Contender> = match *name {
                "nginx-stream" | "nginx-http" => Box::new(peers::nginx(cert, *proto)),
                "haproxy-tcp" | "haproxy-http" => Box::new(peers::haproxy(cert, *proto)),
                _ => Box::new(peers::sluice(cert, *proto, o.http_api, o.spin)),
            };
            (c, *proto)
        })
        .collect()
}

/// What one contender did with one key type: its summaries per mode.
struct Results {
    name: String,
    proto: Protocol,
    routing: String,
    cpu_method: String,
    negotiated: Negotiated,
    /// Per mode: rounds and failures.
    modes: Vec<(Mode, Vec<TlsRound>, Vec<String>)>,
    /// Set once it never served: later rounds are not run.
    dead: Option<String>,
}

/// Figures (or their errors) by name.
type Figures = serde_json::Map<String, Value>;

/// A contender's headline figures and, for those it has none of, why.
fn mode_figures(r: &Results) -> (Figures, Figures) {
    let (mut figs, mut errs) = (serde_json::Map::new(), serde_json::Map::new());
    for (mode, rounds, failures) in &r.modes {
        let s = tls_load::summary(*mode, rounds, failures);
        let (key, v) = tls_load::headline(*mode, &s);
        match v {
            Ok(x) => {
                figs.insert(key.into(), json!(x));
                if *mode == Mode::Full {
                    figs.insert("hs_per_s".into(), s["hs_per_s"].clone());
                }
            }
            Err(e) => {
                figs.insert(key.into(), Value::Null);
                if *mode == Mode::Full {
                    figs.insert("hs_per_s".into(), Value::Null);
                }
                errs.insert(key.into(), json!(e));
            }
        }
    }
    (figs, errs)
}

fn results_json(r: &Results) -> Value {
    let (figs, errs) = mode_figures(r);
    let mut modes = serde_json::Map::new();
    for (mode, rounds, failures) in &r.modes {
        modes.insert(
            mode.name().into(),
            tls_load::summary(*mode, rounds, failures),
        );
    }
    json!({
        "protocol": match r.proto { Protocol::Stream => "stream", Protocol::Http => "http" },
        "routing": r.routing,
        "cpu_method": r.cpu_method,
        "negotiated": r.negotiated.lock().ok().and_then(|g| g.clone()),
        "figures": figs,
        "figure_errors": errs,
        "modes": modes,
    })
}

/// `sluice / best peer` for each figure of each sluice variant.
fn ratios(results: &[Results]) -> Value {
    let figures: Vec<(String, Figures, Figures)> = results
        .iter()
        .map(|r| {
            let (f, e) = mode_figures(r);
            (r.name.clone(), f, e)
        })
        .collect();
    let proto_of = |n: &str| results.iter().find(|r| r.name == n).map(|r| r.proto);
    let mut out = serde_json::Map::new();
    for (name, figs, errs) in figures.iter().filter(|(n, ..)| n.starts_with("sluice")) {
        let mut per = serde_json::Map::new();
        for key in figs.keys() {
            let best = |same: bool| -> Value {
                let best = figures
                    .iter()
                    .filter(|(n, ..)| PEERS.contains(&n.as_str()))
                    .filter(|(n, ..)| !same || proto_of(n) == proto_of(name))
                    .filter_map(|(n, f, _)| f.get(key).and_then(Value::as_f64).map(|x| (n, x)))
                    .max_by(|a, b| a.1.total_cmp(&b.1));
                match (figs.get(key).and_then(Value::as_f64), best) {
                    (Some(s), Some((peer, p))) if p > 0.0 => {
                        json!({"sluice": s, "best_peer": peer, "best": p, "ratio": s / p})
                    }
                    (None, _) => json!({
                        "error": errs.get(key).cloned().unwrap_or(json!("no figure"))
                    }),
                    (Some(_), _) => json!({"error": "no peer figure"}),
                }
            };
            per.insert(
                key.clone(),
                json!({"best_same_protocol": best(true), "best_any": best(false)}),
            );
        }
        out.insert(name.clone(), Value::Object(per));
    }
    Value::Object(out)
}

fn main() {
    let o = opts();
    if o.print_config {
        let key = o.keys.first().copied().unwrap_or(KeyType::EcdsaP256);
        let made = Certs::generate(&[key]).and_then(|mut c| {
            if o.client_auth {
                c.with_client_auth()?;
            }
            Ok(c)
        });
        match made {
            Ok(certs) => {
                for (proto, what) in [(Protocol::Stream, "stream"), (Protocol::Http, "http")] {
                    println!("# sluice-{what} ({})", key.describe());
                    print!(
                        "{}",
                        peers::sluice_manifests(&certs.certs[0], proto, o.http_api)
                    );
                }
            }
            Err(e) => {
                eprintln!("bench_tls_peers: certificates: {e}");
                std::process::exit(1);
            }
        }
        return;
    }
    if !sluice_testkit::sys::can_admin_net() {
        eprintln!("bench_tls_peers: needs root with CAP_NET_ADMIN, /dev/net/tun and iproute2");
        std::process::exit(1);
    }
    if !core_affinity::set_for_current(core_affinity::CoreId {
        id: sni_load::LOAD_CORE,
    }) {
        eprintln!("bench_tls_peers: could not pin the control thread to core 0");
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
            eprintln!("bench_tls_peers: {e}");
            std::process::exit(1);
        }
    }
}

/// The benchmark: certificates, topology, backend, every round; the report. What it
/// creates is dropped (deleted, stopped) when it returns, error or not.
fn run(o: &Opts, stop: &AtomicBool) -> Result<Value, String> {
    let mut certs = Certs::generate(&o.keys).map_err(|e| format!("certificates: {e}"))?;
    if o.client_auth {
        certs
            .with_client_auth()
            .map_err(|e| format!("client certificates: {e}"))?;
    }
    let topo = Topology::new().map_err(|e| format!("topology: {e}"))?;
    let (bname, bport) = net::BACKENDS[peers::BACKEND];
    let backend = Backend::start(&topo.backend.name, sni_load::LOAD_CORE, bname, bport)?;
    let mut report_keys = serde_json::Map::new();
    let mut report_ratios = serde_json::Map::new();
    for key in &o.keys {
        let Some(cert) = certs.get(*key) else {
            continue;
        };
        let tls = TlsClient::with_client_auth(cert.der.clone(), cert.client_auth.as_ref())?;
        let mut cs = contenders(o, cert);
        let mut results: Vec<Results> = cs
            .iter()
            .map(|(c, proto)| Results {
                name: c.name().to_string(),
                proto: *proto,
                routing: c.routing().describe(),
                cpu_method: c.cpu_method().to_string(),
                negotiated: Arc::new(Mutex::new(None)),
                modes: Vec::new(),
                dead: None,
            })
            .collect();
        let n = cs.len();
        'modes: for mode in &o.modes {
            let spec = TlsRoundSpec {
                mode: *mode,
                conns: match mode {
                    Mode::Bulk { .. } => o.bulk_conns,
                    _ => o.conns,
                },
                warmup: Duration::from_secs_f64(o.warmup),
                duration: Duration::from_secs_f64(o.duration),
                timeout: Duration::from_secs_f64(o.timeout),
                ready_limit: Duration::from_secs(10),
            };
            for r in results.iter_mut() {
                r.modes.push((*mode, Vec::new(), Vec::new()));
            }
            for round in 0..o.rounds {
                for k in 0..n {
                    let i = (round + k) % n;
                    if stop.load(Ordering::Relaxed) {
                        break 'modes;
                    }
                    let name = results[i].name.clone();
                    let entry = results[i].modes.len() - 1;
                    if let Some(e) = results[i].dead.clone() {
                        results[i].modes[entry].2.push(format!("not run: {e}"));
                        continue;
                    }
                    eprintln!(
                        "bench_tls_peers: {} {} round {}/{} {name}",
                        key.name(),
                        mode.name(),
                        round + 1,
                        o.rounds
                    );
                    let (c, proto) = &mut cs[i];
                    let neg = results[i].negotiated.clone();
                    match tls_load::measure(c.as_mut(), &topo, &spec, &tls, *proto, &neg, stop) {
                        Ok(m) => {
                            eprintln!(
                                "bench_tls_peers:   {name}: {} conns ({} resumed), {:.0}/s, {:.0} per core ({:.2} CPU s), {:.1} MB, {} errors, p99 {:.2} ms",
                                m.load.conns,
                                m.load.handshakes_of("resumed"),
                                m.load.conns as f64 / m.window_s.max(1e-9),
                                m.per_core(m.load.conns as f64),
                                m.cpu.charged_s,
                                m.load.bytes as f64 / 1e6,
                                m.load.total_errors(),
                                m.load.quantile_ms(0.99)
                            );
                            results[i].modes[entry].1.push(m);
                        }
                        Err(RoundError::Interrupted) => break 'modes,
                        Err(e) => {
                            eprintln!("bench_tls_peers:   {name} failed: {e}");
                            if e.never_served() {
                                results[i].dead = Some(e.to_string());
                            }
                            results[i].modes[entry].2.push(e.to_string());
                        }
                    }
                }
            }
        }
        let mut per = serde_json::Map::new();
        for r in &results {
            per.insert(r.name.clone(), results_json(r));
        }
        report_keys.insert(key.name().into(), Value::Object(per));
        report_ratios.insert(key.name().into(), ratios(&results));
    }
    let backend_stats = backend.stop();
    drop(topo);
    drop(certs);

    Ok(json!({
        "what": "TLS termination per core: full handshakes (no resumption), resumed handshakes and bulk throughput of nginx (stream, http), HAProxy (mode tcp, mode http) and sluice (TAP lane) with the same client and backend",
        "bench": "tls_peers",
        "setup": {
            "contender_core": sni_load::PROXY_CORE,
            "load_core": sni_load::LOAD_CORE,
            "conns_in_flight": o.conns,
            "bulk_conns_in_flight": o.bulk_conns,
            "bulk_bytes_per_conn": o.bulk_bytes,
            "warmup_s": o.warmup,
            "duration_s": o.duration,
            "rounds": o.rounds,
            "per_connection_timeout_s": o.timeout,
            "modes": o.modes.iter().map(|m| m.name()).collect::<Vec<_>>(),
            "keys": o.keys.iter().map(|k| k.describe()).collect::<Vec<_>>(),
            "sluice_idle": if o.spin { "spin" } else { "sleep (as sluice run on TAP)" },
            "client_auth": if o.client_auth {
                "required: a client CA and an ECDSA P-256 client certificate (URI SAN spiffe://bench.example/client) made with openssl at start; nginx ssl_verify_client on, HAProxy verify required, sluice Istio MUTUAL (credentialName with ca.crt) / Gateway API frontendValidation (ConfigMap ca.crt)"
            } else {
                "none"
            },
            "sluice_http_api": match o.http_api { HttpApi::Istio => "istio", HttpApi::GatewayApi => "gateway-api" },
            "client": "rustls (ring) in one epoll thread in the client netns: TLS 1.3, TLS13_AES_128_GCM_SHA256, X25519, SNI tls.example.test, the run's certificate pinned; full: no resumption; resumed: a session store per slot, each connection offers its predecessor's ticket; bulk: the body checked byte for byte against the backend's pattern",
            "requests": "stream: `hello\\n` answered `backend=a\\n`, `bulk N\\n` answered with N bytes; http: `GET /hello`, `GET /bulk/N` (Connection: close); the contender closes after the backend",
            "backend": "one epoll thread in the backend netns, port 8001, `Connection: close` after every HTTP answer",
            "certificates": "self-signed, CN/SAN tls.example.test, made with `openssl req -x509` at start",
            "topology": "client netns -veth- proxy netns -veth- backend netns; sluice on a TAP lane between the client and backend netns (as bench_sni_peers)",
            "hs_per_s": "right answers after a full handshake per window second",
            "hs_per_core": "the same per second of the contender's CPU time (cpu_method)",
            "resumed_per_core": "right answers after a resumed handshake per contender CPU second; an error when under 90 % of the handshakes resumed",
            "bulk_mb_per_core": "bulk body bytes (10^6) delivered per contender CPU second",
            "aggregation": "medians over rounds; ratios from the same run",
            "haproxy_version": proxy::version("haproxy", &["-v"]),
            "nginx_version": proxy::version("nginx", &["-v"]),
            "openssl_version": proxy::version("openssl", &["version"]),
        },
        "results": report_keys,
        "ratios": report_ratios,
        "backend": match backend_stats {
            Ok(s) => json!({
                "answered": s.answered, "bulk_done": s.bulk_done, "bulk_bytes": s.bulk_bytes,
                "held": s.held, "bad_requests": s.bad_requests, "incomplete": s.incomplete,
            }),
            Err(e) => json!({"error": e}),
        },
        "interrupted": stop.load(Ordering::Relaxed),
    }))
}
