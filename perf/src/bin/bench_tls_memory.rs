//! Memory per idle established TLS-terminated connection, and the full-handshake rate
//! with many connections open (issue #31), for nginx, HAProxy and sluice. Prints JSON on
//! stdout (figures are never asserted), progress on stderr.
//!
//! For each contender (the six of `bench_tls_peers`, same configurations): start it;
//! start the helper (this program again, `--helper`: the load client and the backend in
//! a process of their own, so that sluice's figure, read from this process, holds only
//! sluice); probe it; open and close 100 connections (warm-up); read the baseline; then
//! open idle connections up to each of `--levels` (default 1000, 10000, 20000) and, once
//! settled, read the contender's memory. An idle connection: TLS 1.3 full handshake
//! (ECDSA P-256 by default), one request answered (stream: `hold\n`, the backend keeps
//! its connection; HTTP: `GET /hello` with keep-alive, the backend closes after
//! answering), then nothing. Then, from the highest level down, with that many
//! connections still open, the full-handshake rate (as `bench_tls_peers --mode full`) per
//! contender CPU second.
//!
//! Figures per level: `rss_kib_per_conn` (process VmRSS growth over the baseline / open
//! connections), `kernel_kib_per_conn` (external contenders: slab objects of their TCP
//! sockets plus the buffer memory charged to them, `sluice_perf::tls_load::memory`),
//! `total_kib_per_conn`, and the marginal cost between levels. `per_conn_kib_at_10k` is
//! the total at the level closest to 10k; `rate_ratio_low_over_high` the handshake rate
//! per core at the lowest level over that at the highest (goal: within 1.3).
//!
//! Usage: `bench_tls_memory [--levels 1000,10000,20000] [--keys ecdsa] [--only ...]
//! [--duration S] [--warmup S] [--conns C] [--open-conns C] [--settle S]
//! [--sluice-idle sleep|spin] [--sluice-http-api istio|gateway-api]` (`--help`).

use clap::{Parser, ValueEnum};
use serde_json::{json, Value};
use sluice_perf::sni_load::net::{self, Topology};
use sluice_perf::sni_load::{self, core_busy_s, proxy, Contender, Instance};
use sluice_perf::stats::median;
use sluice_perf::tls_load::backend::Backend;
use sluice_perf::tls_load::certs::{Cert, Certs, KeyType};
use sluice_perf::tls_load::client::{self, Mode, Protocol, TlsClient, TlsLoadSpec};
use sluice_perf::tls_load::memory::{self, Helper, NsSockets};
use sluice_perf::tls_load::peers::{self, HttpApi};
use std::net::{SocketAddrV4, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Memory per idle TLS-terminated connection and the handshake rate with many open:
/// nginx, HAProxy and sluice, in network namespaces this creates and deletes (needs
/// root). Prints JSON.
#[derive(Parser, Debug)]
#[command(name = "bench_tls_memory")]
struct Cli {
    /// Open connections at which memory and the handshake rate are read, ascending.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,20000")]
    levels: Vec<usize>,
    /// The server key types, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "ecdsa")]
    keys: Vec<KeyArg>,
    /// The contenders, comma-separated (`nginx`, `haproxy`, `sluice`: both variants).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "nginx,haproxy,sluice"
    )]
    only: Vec<Peer>,
    /// Seconds of each handshake-rate window.
    #[arg(long, value_name = "S", default_value_t = 3.0)]
    duration: f64,
    /// Seconds of load before each window.
    #[arg(long, value_name = "S", default_value_t = 0.5)]
    warmup: f64,
    /// Rate windows per level (the median is reported).
    #[arg(long, value_name = "N", default_value_t = 1)]
    rounds: usize,
    /// Connections in flight while measuring the handshake rate.
    #[arg(long, value_name = "C", default_value_t = 64)]
    conns: usize,
    /// Connections in flight while opening the idle ones.
    #[arg(long, value_name = "C", default_value_t = 64)]
    open_conns: usize,
    /// Seconds to wait after opening before reading memory.
    #[arg(long, value_name = "S", default_value_t = 1.0)]
    settle: f64,
    /// sluice's worker when idle (as in bench_tls_peers).
    #[arg(long, value_enum, default_value_t = Idling::Sleep)]
    sluice_idle: Idling,
    /// How sluice-http is configured (as in bench_tls_peers).
    #[arg(long, value_enum, default_value_t = ApiArg::Istio)]
    sluice_http_api: ApiArg,
    /// Run as a helper process (internal): the load client or a backend.
    #[arg(long, hide = true, value_enum)]
    helper: Option<Role>,
    /// Helper: the client namespace.
    #[arg(long, hide = true, default_value = "")]
    client_ns: String,
    /// Helper: the backend namespace.
    #[arg(long, hide = true, default_value = "")]
    backend_ns: String,
    /// Helper: where to connect.
    #[arg(long, hide = true)]
    target: Option<SocketAddrV4>,
    /// Helper: the certificate to pin (PEM).
    #[arg(long, hide = true)]
    cert: Option<std::path::PathBuf>,
    /// Helper: HTTP instead of the stream protocol.
    #[arg(long, hide = true)]
    http: bool,
}

/// `--helper`.
#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
enum Role {
    Client,
    Backend,
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

/// Every contender: name and protocol.
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

/// Connections opened and closed before the baseline is read.
const WARM_CONNS: usize = 100;

fn main() {
    let cli = Cli::parse();
    if let Some(role) = cli.helper {
        let res = match role {
            Role::Client => client_main(&cli),
            Role::Backend => backend_main(&cli),
        };
        if let Err(e) = res {
            println!("{}", json!({"error": e}));
            std::process::exit(1);
        }
        return;
    }
    match bench(cli) {
        Ok(report) => println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        ),
        Err(e) => {
            // Everything `bench` made (namespaces, processes, files) is gone by now.
            eprintln!("bench_tls_memory: {e}");
            std::process::exit(1);
        }
    }
}

/// Raises this process's open-file limit to `n` (root may raise the hard limit).
fn raise_nofile(n: u64) -> Result<(), String> {
    rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: Some(n),
            maximum: Some(n),
        },
    )
    .map_err(|e| format!("RLIMIT_NOFILE {n}: {e}"))
}

// ---------------------------------------------------------------------------------------
// The helper: client and backend.

/// A load spec for the helper's client.
fn spec(
    target: SocketAddrV4,
    tls: &TlsClient,
    proto: Protocol,
    conns: usize,
    window_start: Instant,
    duration: Duration,
) -> TlsLoadSpec {
    TlsLoadSpec {
        target,
        mode: Mode::Full,
        proto,
        tls: tls.clone(),
        expect: peers::backend_name().into(),
        conns,
        window_start,
        duration,
        timeout: Duration::from_secs(5),
    }
}

/// The client helper: commands on stdin (`probe`, `hold`, `release`, `rate`, `quit`),
/// one JSON answer a line on stdout.
fn client_main(cli: &Cli) -> Result<(), String> {
    use rustls::pki_types::pem::PemObject;
    // Up to the hard limit (raising that takes CAP_SYS_RESOURCE).
    let _ = raise_nofile(nofile());
    let target = cli.target.ok_or("--target")?;
    let cert_path = cli.cert.as_ref().ok_or("--cert")?;
    let der = rustls::pki_types::CertificateDer::from_pem_file(cert_path)
        .map_err(|e| format!("{}: {e:?}", cert_path.display()))?;
    let tls = TlsClient::new(der)?;
    let proto = if cli.http {
        Protocol::Http
    } else {
        Protocol::Stream
    };
    println!("{}", json!({"ready": true}));
    let client_ns = cli.client_ns.clone();
    let in_client = |name: &str, f: Box<dyn FnOnce() -> Result<Value, String> + Send>| {
        net::join(net::spawn_in(
            &client_ns,
            Some(sni_load::LOAD_CORE),
            name,
            f,
        )?)
    };
    let mut held: Vec<TcpStream> = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        if std::io::stdin().read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        let cmd: Value = serde_json::from_str(&line).map_err(|e| format!("{line:?}: {e}"))?;
        let num = |k: &str| cmd[k].as_f64().unwrap_or(0.0);
        let answer = match cmd["cmd"].as_str().unwrap_or("") {
            "probe" => {
                let tls = tls.clone();
                let limit = Duration::from_secs_f64(num("limit_s").max(1.0));
                in_client(
                    "tls-probe",
                    Box::new(move || {
                        let t0 = Instant::now();
                        let mut last = String::new();
                        while t0.elapsed() < limit {
                            let expect = peers::backend_name();
                            match client::probe(target, &tls, proto, expect, Duration::from_secs(2))
                            {
                                Ok(n) => {
                                    return Ok(
                                        json!({"negotiated": n, "ready_s": t0.elapsed().as_secs_f64()}),
                                    )
                                }
                                Err(e) => last = e,
                            }
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        Err(format!("not ready after {limit:?}: {last}"))
                    }),
                )
            }
            "hold" => {
                let n = num("n") as usize;
                let need = n.saturating_sub(held.len());
                let s = spec(
                    target,
                    &tls,
                    proto,
                    (num("conns") as usize).clamp(1, 10_000),
                    Instant::now(),
                    Duration::ZERO,
                );
                let limit = Duration::from_secs_f64(num("limit_s").max(1.0));
                let t0 = Instant::now();
                let h = net::spawn_in(
                    &client_ns,
                    Some(sni_load::LOAD_CORE),
                    "tls-hold",
                    move || client::hold(&s, need, limit),
                )?;
                match net::join(h) {
                    Ok((report, streams)) => {
                        held.extend(streams);
                        Ok(json!({
                            "held": held.len(),
                            "opened": report.conns,
                            "errors": report.errors,
                            "secs": t0.elapsed().as_secs_f64(),
                        }))
                    }
                    Err(e) => Err(e),
                }
            }
            "release" => {
                held.truncate(num("n") as usize);
                Ok(json!({"held": held.len()}))
            }
            "rate" => {
                let window_start =
                    Instant::now() + Duration::from_secs_f64(num("warmup_s").max(0.0));
                let s = spec(
                    target,
                    &tls,
                    proto,
                    (num("conns") as usize).clamp(1, 10_000),
                    window_start,
                    Duration::from_secs_f64(num("duration_s").max(0.1)),
                );
                in_client(
                    "tls-rate",
                    Box::new(move || {
                        let r = client::run(&s)?;
                        Ok(json!({
                            "conns": r.conns,
                            "handshakes": r.handshakes,
                            "errors": r.errors,
                            "p99_ms": r.quantile_ms(0.99),
                        }))
                    }),
                )
            }
            "quit" => break,
            other => Err(format!("unknown command {other:?}")),
        };
        let out = answer.unwrap_or_else(|e| json!({"error": e}));
        println!("{out}");
    }
    held.clear();
    println!("{}", json!({"quit": true}));
    Ok(())
}

/// A backend helper (`SO_REUSEPORT`: several may serve the port): until stdin ends or
/// says `quit`, then its counters on stdout.
fn backend_main(cli: &Cli) -> Result<(), String> {
    let _ = raise_nofile(nofile());
    let (bname, bport) = net::BACKENDS[peers::BACKEND];
    let backend = Backend::start_with(&cli.backend_ns, sni_load::LOAD_CORE, bname, bport, true)?;
    println!("{}", json!({"ready": true}));
    let mut line = String::new();
    while std::io::stdin().read_line(&mut line).unwrap_or(0) > 0 && !line.contains("quit") {
        line.clear();
    }
    let st = backend.stop()?;
    println!(
        "{}",
        json!({"answered": st.answered, "held": st.held, "bad_requests": st.bad_requests, "incomplete": st.incomplete})
    );
    Ok(())
}

/// This process's hard limit on open files, which every helper and contender inherits.
fn nofile() -> u64 {
    peers::nofile_limit()
}

// ---------------------------------------------------------------------------------------
// The benchmark.

/// One reading of a contender's memory.
#[derive(Debug, Clone, Copy, Default)]
struct Reading {
    open: usize,
    rss_kib: u64,
    kernel: NsSockets,
}

fn read_memory(
    inst: &dyn Instance,
    topo: &Topology,
    external: bool,
    open: usize,
) -> Result<Reading, String> {
    Ok(Reading {
        open,
        rss_kib: inst.rss_kib()?,
        kernel: if external {
            memory::ns_sockets(&topo.proxy.name)?
        } else {
            NsSockets::default()
        },
    })
}

/// Total bytes of a reading: RSS plus the kernel's share.
fn kernel_bytes(r: &Reading, struct_bytes: u64) -> u64 {
    r.kernel.sockets * struct_bytes + r.kernel.buffer_bytes
}

struct Settings<'a> {
    cli: &'a Cli,
    topo: &'a Topology,
    stop: &'a AtomicBool,
    struct_bytes: u64,
}

/// The load side of one contender's measurement: client helpers (each holding a share
/// of the idle connections, so that none needs more descriptors than the hard limit
/// allows) and backend helpers (sharing the backend port). Killed on drop.
struct Load {
    clients: Vec<Helper>,
    backends: Vec<Helper>,
}

impl Load {
    /// Helpers enough for `max_open` connections (`per_backend`: backend connections
    /// each idle connection keeps).
    fn spawn(
        s: &Settings<'_>,
        target: SocketAddrV4,
        proto: Protocol,
        cert: &Cert,
        max_open: usize,
    ) -> Result<Load, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        // Room per process: the limit less descriptors in flight and a margin.
        let room = (nofile() as usize)
            .saturating_sub(s.cli.open_conns.max(s.cli.conns) + 500)
            .max(1000);
        let per_backend = match proto {
            Protocol::Stream => 1,
            Protocol::Http => 0,
        };
        // The kernel spreads connections over SO_REUSEPORT listeners by hash: leave a
        // tenth of slack.
        let n_backends = (max_open * per_backend * 11 / 10).div_ceil(room).max(1);
        let n_clients = max_open.div_ceil(room).max(1);
        let common = [
            "--client-ns".to_string(),
            s.topo.client.name.clone(),
            "--backend-ns".into(),
            s.topo.backend.name.clone(),
        ];
        let mut backends = Vec::new();
        for _ in 0..n_backends {
            let mut a = vec!["--helper".to_string(), "backend".into()];
            a.extend(common.iter().cloned());
            backends.push(Helper::spawn(&exe, &a)?);
        }
        let mut clients = Vec::new();
        for _ in 0..n_clients {
            let mut a = vec!["--helper".to_string(), "client".into()];
            a.extend(common.iter().cloned());
            a.extend([
                "--target".into(),
                target.to_string(),
                "--cert".into(),
                cert.cert_file.display().to_string(),
            ]);
            if proto == Protocol::Http {
                a.push("--http".into());
            }
            clients.push(Helper::spawn(&exe, &a)?);
        }
        Ok(Load { clients, backends })
    }

    /// Opens idle connections until `n` are open in all, shared evenly by the clients.
    fn hold(&mut self, n: usize, open_conns: usize) -> Result<Value, String> {
        let k = self.clients.len();
        let mut answers = Vec::new();
        for (i, c) in self.clients.iter_mut().enumerate() {
            let share = n / k + usize::from(i < n % k);
            let v =
                c.call(&json!({"cmd": "hold", "n": share, "conns": open_conns, "limit_s": 300}))?;
            if v["held"].as_u64() != Some(share as u64) {
                return Err(format!("could not open {n} idle connections: {v}"));
            }
            answers.push(v);
        }
        Ok(json!(answers))
    }

    /// Closes idle connections until `n` are left.
    fn release(&mut self, n: usize) -> Result<(), String> {
        let k = self.clients.len();
        for (i, c) in self.clients.iter_mut().enumerate() {
            let share = n / k + usize::from(i < n % k);
            c.call(&json!({"cmd": "release", "n": share}))?;
        }
        Ok(())
    }

    /// The client that probes and runs the handshake load.
    fn first(&mut self) -> Result<&mut Helper, String> {
        self.clients
            .first_mut()
            .ok_or_else(|| "no client".to_string())
    }

    /// Stops every helper; the backends' counters.
    fn quit(self) -> Value {
        for c in self.clients {
            c.quit();
        }
        json!(self
            .backends
            .into_iter()
            .map(Helper::quit)
            .collect::<Vec<_>>())
    }
}

/// One contender with one certificate: memory at each level, then handshake rates.
fn run_contender(
    s: &Settings<'_>,
    c: &mut dyn Contender,
    proto: Protocol,
    cert: &Cert,
) -> Result<Value, String> {
    let external = !c.name().starts_with("sluice");
    // Levels beyond what the contender's descriptors allow are capped at that, less
    // room for the handshake load's connections and a margin.
    let room = s.cli.conns + 100;
    let cap = match c.name() {
        n if n.starts_with("haproxy") => {
            (peers::haproxy_maxconn(nofile()) as usize).saturating_sub(room)
        }
        n if n.starts_with("nginx") => {
            (peers::nginx_max_open(proto, nofile()) as usize).saturating_sub(room)
        }
        _ => usize::MAX,
    };
    let mut levels: Vec<(usize, Option<usize>)> = Vec::new();
    for &l in &s.cli.levels {
        if l <= cap {
            levels.push((l, None));
        } else {
            if levels.last().is_none_or(|(x, _)| *x < cap) {
                levels.push((cap, Some(l)));
            }
            break;
        }
    }
    let mut inst = c.start(s.topo).map_err(|e| format!("did not start: {e}"))?;
    let res = measure_started(s, inst.as_mut(), proto, cert, external, &levels);
    let failed = res.is_err();
    let stopped = inst.stop(failed);
    match res {
        Ok(mut v) => {
            v["stopped"] = stopped;
            if cap < usize::MAX {
                v["max_open"] = json!(cap);
                v["max_open_why"] = json!(format!(
                    "what its descriptors allow under this machine's hard limit of {} open files (raising it takes CAP_SYS_RESOURCE): nginx needs two per stream connection and one per idle HTTP connection, HAProxy reserves two per connection",
                    nofile()
                ));
            }
            Ok(v)
        }
        Err(e) => Err(format!("{e}; on stop: {stopped}")),
    }
}

fn measure_started(
    s: &Settings<'_>,
    inst: &mut dyn Instance,
    proto: Protocol,
    cert: &Cert,
    external: bool,
    levels: &[(usize, Option<usize>)],
) -> Result<Value, String> {
    let max = levels.iter().map(|l| l.0).max().unwrap_or(0);
    let mut load = Load::spawn(s, inst.target(), proto, cert, max)?;
    let probe = load
        .first()?
        .call(&json!({"cmd": "probe", "limit_s": 10}))?;
    let settle = Duration::from_secs_f64(s.cli.settle.max(0.0));
    load.hold(WARM_CONNS, s.cli.open_conns)?;
    load.release(0)?;
    std::thread::sleep(settle);
    let base = read_memory(inst, s.topo, external, 0)?;
    let mut readings = vec![base];
    let mut opening = Vec::new();
    for &(level, capped) in levels {
        if s.stop.load(Ordering::Relaxed) {
            return Err("interrupted".into());
        }
        eprintln!("bench_tls_memory:   opening {level}");
        let mut v = json!({"helpers": load.hold(level, s.cli.open_conns)?});
        if let Some(asked) = capped {
            v["capped_from"] = json!(asked);
        }
        opening.push(v);
        std::thread::sleep(settle);
        readings.push(read_memory(inst, s.topo, external, level)?);
    }
    let mut rates = Vec::new();
    for &(level, _) in levels.iter().rev() {
        if s.stop.load(Ordering::Relaxed) {
            return Err("interrupted".into());
        }
        load.release(level)?;
        std::thread::sleep(settle);
        let mut windows = Vec::new();
        for _ in 0..s.cli.rounds.max(1) {
            eprintln!("bench_tls_memory:   rate with {level} open");
            windows.push(rate_window(s, inst, load.first()?)?);
        }
        let per_core = median(&windows.iter().map(|w| w.1).collect::<Vec<_>>());
        let per_s = median(&windows.iter().map(|w| w.0).collect::<Vec<_>>());
        let mut rate = json!({
            "open": level,
            "hs_per_s": per_s,
            "hs_per_core": per_core,
            "windows": windows.iter().map(|w| w.2.clone()).collect::<Vec<_>>(),
        });
        if per_s <= 0.0 {
            rate["error"] = json!("no handshake answered");
            rate["hs_per_core"] = Value::Null;
        }
        rates.push(rate);
    }
    rates.reverse();
    let backends = load.quit();
    Ok(summarise(s, &readings, &opening, rates, probe, backends))
}

/// One handshake-rate window with the open connections held: `(hs/s, hs per core,
/// details)`.
fn rate_window(
    s: &Settings<'_>,
    inst: &mut dyn Instance,
    helper: &mut Helper,
) -> Result<(f64, f64, Value), String> {
    let warmup = Duration::from_secs_f64(s.cli.warmup.max(0.0));
    let duration = Duration::from_secs_f64(s.cli.duration.max(0.2));
    let sent = Instant::now();
    helper.send(&json!({
        "cmd": "rate",
        "warmup_s": warmup.as_secs_f64(),
        "duration_s": duration.as_secs_f64(),
        "conns": s.cli.conns,
    }))?;
    let window_start = sent + warmup;
    if !sni_load::sleep_until(window_start, s.stop) {
        let _ = helper.recv();
        return Err("interrupted".into());
    }
    let (cpu0, busy0, t0) = (inst.cpu()?, core_busy_s(), Instant::now());
    let finished = sni_load::sleep_until(window_start + duration, s.stop);
    let (cpu1, busy1, t1) = (inst.cpu()?, core_busy_s(), Instant::now());
    let answer = helper.recv()?;
    if !finished {
        return Err("interrupted".into());
    }
    let cpu = cpu1.since(&cpu0).charged_s;
    let window = (t1 - t0).as_secs_f64().max(1e-9);
    let n = answer["conns"].as_f64().unwrap_or(0.0);
    let per_core = if cpu > 0.0 { n / cpu } else { 0.0 };
    let mut details = answer;
    details["cpu_s"] = json!(cpu);
    details["window_s"] = json!(window);
    details["proxy_core_busy_s"] =
        json!(sni_load::busy_delta(&busy0, &busy1, sni_load::PROXY_CORE));
    details["load_core_busy_s"] = json!(sni_load::busy_delta(&busy0, &busy1, sni_load::LOAD_CORE));
    Ok((n / window, per_core, details))
}

fn summarise(
    s: &Settings<'_>,
    readings: &[Reading],
    opening: &[Value],
    rates: Vec<Value>,
    probe: Value,
    backends: Value,
) -> Value {
    let base = readings[0];
    let kib = |b: f64| b / 1024.0;
    let mut levels = Vec::new();
    for (i, r) in readings.iter().enumerate().skip(1) {
        let prev = readings[i - 1];
        let n = r.open.max(1) as f64;
        let rss = (r.rss_kib as f64 - base.rss_kib as f64) / n;
        let kernel = kib(
            kernel_bytes(r, s.struct_bytes) as f64 - kernel_bytes(&base, s.struct_bytes) as f64
        ) / n;
        let dn = (r.open - prev.open).max(1) as f64;
        let marginal = ((r.rss_kib as f64 - prev.rss_kib as f64)
            + kib(
                kernel_bytes(r, s.struct_bytes) as f64 - kernel_bytes(&prev, s.struct_bytes) as f64
            ))
            / dn;
        levels.push(json!({
            "open": r.open,
            "rss_kib": r.rss_kib,
            "rss_kib_per_conn": rss,
            "kernel_sockets": r.kernel.sockets,
            "kernel_buffer_bytes": r.kernel.buffer_bytes,
            "kernel_kib_per_conn": kernel,
            "total_kib_per_conn": rss + kernel,
            "marginal_kib_per_conn": marginal,
            "opening": opening.get(i - 1),
        }));
    }
    let at_10k = levels
        .iter()
        .min_by_key(|l| l["open"].as_u64().unwrap_or(0).abs_diff(10_000))
        .and_then(|l| l["total_kib_per_conn"].as_f64());
    let per_core = |v: Option<&Value>| v.and_then(|x| x["hs_per_core"].as_f64());
    let ratio = match (per_core(rates.first()), per_core(rates.last())) {
        (Some(lo), Some(hi)) if hi > 0.0 => Some(lo / hi),
        _ => None,
    };
    json!({
        "baseline_rss_kib": base.rss_kib,
        "baseline_kernel_sockets": base.kernel.sockets,
        "levels": levels,
        "per_conn_kib_at_10k": at_10k,
        "rates": rates,
        "rate_ratio_low_over_high": ratio,
        "probe": probe,
        "backends": backends,
    })
}

/// The benchmark; what it creates is dropped (deleted, stopped) when it returns, error
/// or not.
fn bench(mut cli: Cli) -> Result<Value, String> {
    if !sluice_testkit::sys::can_admin_net() {
        eprintln!("bench_tls_memory: needs root with CAP_NET_ADMIN, /dev/net/tun and iproute2");
        std::process::exit(1);
    }
    let _ = core_affinity::set_for_current(core_affinity::CoreId {
        id: sni_load::LOAD_CORE,
    });
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(sig, stop.clone());
    }
    cli.levels.retain(|l| *l > 0);
    cli.levels.sort_unstable();
    cli.levels.dedup();
    let selected = |name: &str| {
        cli.only.iter().any(|p| {
            let v = p.to_possible_value().map(|v| v.get_name().to_string());
            v.is_some_and(|v| name == v || name.starts_with(&format!("{v}-")))
        })
    };
    let keys: Vec<KeyType> = [
        (KeyArg::Ecdsa, KeyType::EcdsaP256),
        (KeyArg::Rsa, KeyType::Rsa2048),
    ]
    .into_iter()
    .filter(|(a, _)| cli.keys.contains(a))
    .map(|(_, k)| k)
    .collect();
    let (struct_bytes, slabs) = memory::socket_struct_bytes().map_err(|e| format!("slabs: {e}"))?;
    let certs = Certs::generate(&keys).map_err(|e| format!("certificates: {e}"))?;
    let topo = Topology::new().map_err(|e| format!("topology: {e}"))?;
    let settings = Settings {
        cli: &cli,
        topo: &topo,
        stop: &stop,
        struct_bytes,
    };
    let api = match cli.sluice_http_api {
        ApiArg::Istio => HttpApi::Istio,
        ApiArg::GatewayApi => HttpApi::GatewayApi,
    };
    let spin = cli.sluice_idle == Idling::Spin;
    let mut results = serde_json::Map::new();
    let mut ratios = serde_json::Map::new();
    for cert in &certs.certs {
        let mut per = serde_json::Map::new();
        for (name, proto) in ALL.iter().filter(|(n, _)| selected(n)) {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            eprintln!("bench_tls_memory: {} {name}", cert.key_type.name());
            let mut c: Box<dyn Contender> = match *name {
                "nginx-stream" | "nginx-http" => Box::new(peers::nginx(cert, *proto)),
                "haproxy-tcp" | "haproxy-http" => Box::new(peers::haproxy(cert, *proto)),
                _ => Box::new(peers::sluice(cert, *proto, api, spin)),
            };
            let v = match run_contender(&settings, c.as_mut(), *proto, cert) {
                Ok(v) => v,
                Err(e) => {
                    eprintln!("bench_tls_memory:   {name} failed: {e}");
                    json!({"error": e})
                }
            };
            per.insert(name.to_string(), v);
        }
        ratios.insert(cert.key_type.name().into(), memory_ratios(&per));
        results.insert(cert.key_type.name().into(), Value::Object(per));
    }
    drop(topo);
    Ok(json!({
        "what": "memory per idle established TLS-terminated connection (process RSS growth plus the kernel's socket memory) and the full-handshake rate per core with many connections open: nginx (stream, http), HAProxy (mode tcp, mode http), sluice",
        "bench": "tls_memory",
        "setup": {
            "levels": cli.levels,
            "contender_core": sni_load::PROXY_CORE,
            "load_core": sni_load::LOAD_CORE,
            "rate_conns_in_flight": cli.conns,
            "open_conns_in_flight": cli.open_conns,
            "duration_s": cli.duration,
            "warmup_s": cli.warmup,
            "rounds": cli.rounds,
            "settle_s": cli.settle,
            "warm_conns": WARM_CONNS,
            "idle_connection": "TLS 1.3 full handshake (the client of bench_tls_peers), one request answered (stream: `hold\\n`, the backend keeps its connection open; http: `GET /hello` keep-alive, the backend closes after answering), then idle",
            "rss": "VmRSS of the contender's process tree; sluice runs in the benchmark process, whose client and backend run in a helper process, so its RSS holds sluice (worker, tables, packet pool, smoltcp sockets and buffers) and the benchmark's bookkeeping, which does not grow with connections",
            "kernel": "external contenders: TCP sockets in the proxy netns x slab bytes per socket + buffer memory charged to them (ss -m: r+w+f+o+bl); sluice: 0 (its TCP is smoltcp in its own memory, counted in the RSS)",
            "slab_bytes_per_socket": struct_bytes,
            "slabs": slabs,
            "per_conn": "(reading - baseline) / open connections; marginal: (reading - previous reading) / (connections opened since); KiB = 1024 bytes",
            "haproxy_version": proxy::version("haproxy", &["-v"]),
            "nginx_version": proxy::version("nginx", &["-v"]),
            "sluice_idle": if spin { "spin" } else { "sleep (as sluice run on TAP)" },
        },
        "results": results,
        "ratios": ratios,
        "interrupted": stop.load(Ordering::Relaxed),
    }))
}

/// sluice against the best peer: memory at 10k (lower is better: `sluice / lowest
/// peer`), handshake rate per core at the highest level (`sluice / highest peer`).
fn memory_ratios(per: &serde_json::Map<String, Value>) -> Value {
    let mut out = serde_json::Map::new();
    for (name, v) in per.iter().filter(|(n, _)| n.starts_with("sluice")) {
        let peer = |key: &dyn Fn(&Value) -> Option<f64>, lowest: bool| {
            PEERS
                .iter()
                .filter_map(|p| per.get(*p).and_then(key).map(|x| (*p, x)))
                .reduce(|a, b| if (b.1 < a.1) == lowest { b } else { a })
        };
        let mem = |x: &Value| x["per_conn_kib_at_10k"].as_f64();
        let rate = |x: &Value| {
            x["rates"]
                .as_array()
                .and_then(|r| r.last())
                .and_then(|r| r["hs_per_core"].as_f64())
        };
        let entry = |s: Option<f64>, p: Option<(&str, f64)>| match (s, p, v["error"].as_str()) {
            (_, _, Some(e)) => json!({"error": e}),
            (Some(s), Some((peer, p)), None) if p > 0.0 => {
                json!({"sluice": s, "best_peer": peer, "best": p, "ratio": s / p})
            }
            _ => json!({"error": "no figure"}),
        };
        out.insert(
            name.clone(),
            json!({
                "per_conn_kib_at_10k": entry(mem(v), peer(&mem, true)),
                "hs_per_core_at_highest_level": entry(rate(v), peer(&rate, false)),
                "rate_ratio_low_over_high": v["rate_ratio_low_over_high"],
            }),
        );
    }
    Value::Object(out)
}
