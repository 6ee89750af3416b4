//! The kernel-side harness of the SNI routing benchmarks (issue #7): connections per second
//! per core of a proxy that routes TLS connections by SNI, measured the same way for
//! every contender.
//!
//! - [`net`]: three network namespaces (client, proxy, backends) joined by veths, a TAP
//!   lane for contenders that run in this process (sluice), threads that run inside a
//!   namespace. Everything is deleted on drop.
//! - [`backend`]: the backends (`backend=a\n`, then close), one epoll thread.
//! - [`client`]: the load client: `C` connections in flight, a real ClientHello each,
//!   the answer checked against the backend its SNI maps to.
//! - [`hello`]: the ClientHellos (the Firefox capture of `shared/testdata/tls` with the
//!   SNI replaced).
//! - [`proxy`]: HAProxy and nginx configurations, their processes and CPU accounting.
//! - [`sluice`]: sluice's worker on a TAP lane (the in-process contender of every peer
//!   comparison).
//! - here: [`Contender`] (something that can be started, measured and stopped), the two
//!   kinds of contender ([`External`] processes; [`InProcess`] closures over a TAP lane),
//!   [`charge_softirqd`] (a contender also charged its core's `ksoftirqd`), and
//!   [`measure`], which runs one round.
//!
//! Cores: the contender runs on [`PROXY_CORE`]; the load client, the backends and this
//! process's control thread share [`LOAD_CORE`]. A round is: start the contender, wait
//! until a probe connection through it is answered by the right backend, run the load
//! (a warm-up, then the window), read the contender's CPU time at the window's two ends,
//! stop the contender. **cps** = right answers in the window / window seconds;
//! **cps_per_core** = right answers / the contender's CPU seconds in the window (what a
//! core fully busy with it would do).
//!
//! Kernel work on a packet is charged to whoever runs when it happens: the receive side
//! of a veth runs in the sender's context (its core, its system time), so the proxy's
//! CPU time includes part of its peers' TCP receive processing and the other way round —
//! for every external contender alike. A TAP write likewise runs the kernel's receive path
//! in the writer's thread.

pub mod backend;
pub mod client;
pub mod hello;
pub mod net;
pub mod proxy;
pub mod sluice;

use crate::stats::median;
use client::{Hello, LoadReport, LoadSpec};
use net::{TapLane, Topology};
use proxy::{ProxyProcess, WorkDir};
use serde_json::{json, Value};
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The core a contender runs on.
pub const PROXY_CORE: usize = crate::FWD_CORE;
/// The core of the load client, the backends and the control thread.
pub const LOAD_CORE: usize = 0;

/// The routes of the benchmark: `(SNI, backend index in net::BACKENDS)`.
pub const SNI_ROUTES: [(&str, usize); 2] = [("a.example.test", 0), ("b.example.test", 1)];

/// How a contender routes, hence which backend must answer each hello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Routing {
    /// By SNI ([`SNI_ROUTES`]).
    Sni,
    /// Every connection to one backend whatever its SNI (an L4 route): its name.
    AllTo(String),
    /// TLS terminated, the decrypted stream (or each request) sent to one backend: its
    /// name.
    Terminated(String),
    /// Plain HTTP routed request by request on the path: `(path prefix, backend name)`,
    /// the first prefix that matches wins (no ClientHellos: see [`crate::http_load`]).
    ByPath(Vec<(String, String)>),
}

impl Routing {
    /// The hellos the client sends (every SNI of [`SNI_ROUTES`] in turn, whatever the
    /// routing: the same load for everyone) with the answer each must get.
    pub fn hellos(&self, capture_dir: &std::path::Path) -> Result<Vec<Hello>, String> {
        if let Routing::ByPath(_) = self {
            return Err("HTTP routing by path takes HTTP requests, not ClientHellos".into());
        }
        SNI_ROUTES
            .iter()
            .map(|(sni, b)| {
                Ok(Hello {
                    sni: sni.to_string(),
                    bytes: hello::from_testdata(capture_dir, sni)?,
                    expect: match self {
                        Routing::Sni => net::BACKENDS[*b].0.to_string(),
                        Routing::AllTo(name) | Routing::Terminated(name) => name.clone(),
                        Routing::ByPath(_) => String::new(),
                    },
                })
            })
            .collect()
    }

    /// A word for the report.
    pub fn describe(&self) -> String {
        match self {
            Routing::Sni => "sni".into(),
            Routing::AllTo(b) => format!("l4: every connection to backend {b}, SNI ignored"),
            Routing::Terminated(b) => format!("TLS terminated, everything to backend {b}"),
            Routing::ByPath(routes) => {
                let r: Vec<String> = routes
                    .iter()
                    .map(|(prefix, b)| format!("{prefix}* to backend {b}"))
                    .collect();
                format!("HTTP per request by path: {}", r.join(", "))
            }
        }
    }
}

/// CPU time a running contender has used so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuSample {
    /// What the contender is charged, seconds (see [`Contender::cpu_method`]): its
    /// processes' CPU time for a proxy process; its worker thread's CPU time, or the
    /// cycles of its busy poll rounds, for sluice.
    pub charged_s: f64,
    /// The kernel's account of its threads' CPU time, seconds: the `schedstat` run time
    /// of every thread (about the wall time for a thread that busy-polls).
    pub os_s: f64,
    /// Time the contender's own counters say it spent working (sluice: TSC cycles of its
    /// busy poll rounds / TSC Hz; wall-clock, so it includes time it was preempted).
    pub busy_s: Option<f64>,
    /// CPU time of the contender core's `ksoftirqd` thread, seconds, when the contender
    /// is charged it ([`charge_softirqd`]; then included in `charged_s` and `os_s`),
    /// else 0.
    pub softirqd_s: f64,
}

impl CpuSample {
    /// `self - earlier`, field by field.
    pub fn since(&self, earlier: &CpuSample) -> CpuSample {
        CpuSample {
            charged_s: self.charged_s - earlier.charged_s,
            os_s: self.os_s - earlier.os_s,
            busy_s: self.busy_s.zip(earlier.busy_s).map(|(a, b)| a - b),
            softirqd_s: self.softirqd_s - earlier.softirqd_s,
        }
    }
}

/// A started contender.
pub trait Instance {
    /// Where the client connects.
    fn target(&self) -> SocketAddrV4;
    /// CPU time used so far.
    fn cpu(&mut self) -> Result<CpuSample, String>;
    /// Resident memory so far, KiB: the VmRSS of its processes summed (a proxy process
    /// and its children), or of this whole process (an in-process contender).
    fn rss_kib(&self) -> Result<u64, String>;
    /// Stops it; what it wants to add to the round's report (counters, logs).
    fn stop(self: Box<Self>, failed: bool) -> Value;
}

/// Something the benchmark can start in the topology, measure and stop.
pub trait Contender {
    /// Its name in the report (`haproxy`, `nginx`, `sluice_l4_tcp`).
    fn name(&self) -> &str;
    /// How it routes.
    fn routing(&self) -> Routing;
    /// How its CPU time is counted (for the report).
    fn cpu_method(&self) -> &str;
    /// Starts it, serving the benchmark's routes in `topo`.
    fn start(&mut self, topo: &Topology) -> Result<Box<dyn Instance>, String>;
}

/// Writes a contender's configuration given its work directory: `(file name, text)`.
pub type ConfigFn = dyn Fn(&std::path::Path) -> (String, String);
/// The command that starts a contender given its configuration file: `(program, args)`.
pub type CommandFn = dyn Fn(&std::path::Path) -> (String, Vec<String>);
/// Starts an in-process contender on a TAP lane.
pub type StartFn = dyn FnMut(&TapLane) -> Result<InProcessRun, String>;

/// A proxy process (HAProxy, nginx, or anything started from a command) in the proxy
/// namespace, pinned to [`PROXY_CORE`], listening on [`net::PROXY_FRONT`]:443 (or the
/// port of [`External::with_port`]).
pub struct External {
    name: String,
    routing: Routing,
    port: u16,
    /// `(config file name, config text)` from the work directory's path.
    config: Box<ConfigFn>,
    /// The program and its arguments given the config file's path.
    command: Box<CommandFn>,
}

impl External {
    /// A contender started as `command(config path)` with the file `config(dir)` written
    /// first.
    pub fn new(
        name: &str,
        config: impl Fn(&std::path::Path) -> (String, String) + 'static,
        command: impl Fn(&std::path::Path) -> (String, Vec<String>) + 'static,
    ) -> External {
        External {
            name: name.into(),
            routing: Routing::Sni,
            port: net::FRONT_PORT,
            config: Box::new(config),
            command: Box::new(command),
        }
    }

    /// The contender with `routing` as what it does (the default is [`Routing::Sni`]).
    pub fn with_routing(mut self, routing: Routing) -> External {
        self.routing = routing;
        self
    }

    /// The contender listening on `port` of [`net::PROXY_FRONT`] (what its configuration
    /// must say; the default is [`net::FRONT_PORT`]).
    pub fn with_port(mut self, port: u16) -> External {
        self.port = port;
        self
    }

    /// The SNI routes as `(name, backend address)` on the proxy namespace's link.
    pub fn routes() -> Vec<(String, SocketAddrV4)> {
        SNI_ROUTES
            .iter()
            .map(|(sni, b)| (sni.to_string(), net::backend_peer(*b)))
            .collect()
    }

    /// HAProxy (`haproxy -f haproxy.cfg -db`).
    pub fn haproxy() -> External {
        let front = SocketAddrV4::new(net::PROXY_FRONT, net::FRONT_PORT);
        External::new(
            "haproxy",
            move |_| {
                (
                    "haproxy.cfg".into(),
                    proxy::haproxy_config(front, &External::routes()),
                )
            },
            haproxy_command,
        )
    }

    /// nginx (`nginx -p DIR -c nginx.conf`, master and one worker, in the foreground).
    pub fn nginx() -> External {
        let front = SocketAddrV4::new(net::PROXY_FRONT, net::FRONT_PORT);
        External::new(
            "nginx",
            move |dir| {
                (
                    "nginx.conf".into(),
                    proxy::nginx_config(dir, front, &External::routes()),
                )
            },
            nginx_command,
        )
    }
}

/// HAProxy's command line for configuration file `cfg`: `haproxy -f CFG -db` (in the
/// foreground).
pub fn haproxy_command(cfg: &std::path::Path) -> (String, Vec<String>) {
    (
        "haproxy".into(),
        vec!["-f".into(), cfg.display().to_string(), "-db".into()],
    )
}

/// nginx's command line for configuration file `cfg`: `nginx -p DIR -c CFG -e
/// DIR/error.log` with DIR the file's directory (the configuration says `daemon off`).
pub fn nginx_command(cfg: &std::path::Path) -> (String, Vec<String>) {
    let dir = cfg.parent().unwrap_or(cfg).display().to_string();
    (
        "nginx".into(),
        vec![
            "-p".into(),
            dir.clone(),
            "-c".into(),
            cfg.display().to_string(),
            "-e".into(),
            format!("{dir}/error.log"),
        ],
    )
}

/// Whether a failed contender's work directory (configuration, logs) is kept for a
/// look: only when `SLUICE_BENCH_KEEP` is set (the report carries the logs' last lines
/// anyway); else every temporary file goes, failure or not.
pub fn keep_on_failure() -> bool {
    std::env::var_os("SLUICE_BENCH_KEEP").is_some()
}

struct ExternalRun {
    proc: ProxyProcess,
    dir: WorkDir,
    port: u16,
}

impl Instance for ExternalRun {
    fn target(&self) -> SocketAddrV4 {
        SocketAddrV4::new(net::PROXY_FRONT, self.port)
    }

    fn cpu(&mut self) -> Result<CpuSample, String> {
        self.proc.check_alive()?;
        let t = self.proc.cpu();
        Ok(CpuSample {
            charged_s: t.stat_s,
            os_s: t.schedstat_s,
            busy_s: None,
            softirqd_s: 0.0,
        })
    }

    fn rss_kib(&self) -> Result<u64, String> {
        proxy::tree_rss_kib(self.proc.pid)
    }

    fn stop(mut self: Box<Self>, failed: bool) -> Value {
        let clean = self.proc.stop();
        let mut v = json!({"exited_on_sigterm": clean});
        if failed {
            v["log_tail"] = json!(self.proc.log_tail());
            let error_log = std::fs::read_to_string(self.dir.path.join("error.log"));
            if let Ok(text) = error_log {
                v["error_log_tail"] = json!(crate::tail(&text));
            }
            if keep_on_failure() {
                self.dir.keep();
                v["kept_dir"] = json!(self.dir.path.display().to_string());
            }
        }
        v
    }
}

impl Contender for External {
    fn name(&self) -> &str {
        &self.name
    }

    fn routing(&self) -> Routing {
        self.routing.clone()
    }

    fn cpu_method(&self) -> &str {
        "utime+stime of the process tree (/proc/PID/stat)"
    }

    fn start(&mut self, topo: &Topology) -> Result<Box<dyn Instance>, String> {
        let mut dir = WorkDir::new(&self.name)?;
        let (file, text) = (self.config)(&dir.path);
        let cfg = dir.path.join(file);
        std::fs::write(&cfg, text).map_err(|e| format!("{}: {e}", cfg.display()))?;
        let (program, args) = (self.command)(&cfg);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let log = dir.path.join("output.log");
        match ProxyProcess::spawn(
            &topo.proxy.name,
            PROXY_CORE,
            &program,
            &args,
            &dir.path,
            log,
        ) {
            Ok(proc) => Ok(Box::new(ExternalRun {
                proc,
                dir,
                port: self.port,
            })),
            Err(e) => {
                if keep_on_failure() {
                    dir.keep();
                }
                Err(e)
            }
        }
    }
}

/// What an [`InProcess`] start closure returns: how to read its CPU time and how to stop
/// it.
pub struct InProcessRun {
    /// CPU time used so far.
    pub cpu: Box<dyn FnMut() -> Result<CpuSample, String>>,
    /// Stops it (joins its threads, closes its TAP devices); its report.
    pub stop: Box<dyn FnOnce() -> Value>,
}

/// A contender in this process (sluice's workers) on a TAP lane: the closure opens the
/// lane's two TAP devices by name (creating them), starts serving on [`net::LANE_VIP`]:443
/// (or the port of [`InProcess::with_port`])
/// with [`net::LANE_OUTSIDE`] / [`TapLane::inside`] as its addresses and the backends at
/// [`net::backend_tap`], and returns an [`InProcessRun`]. The harness then moves the
/// devices into the client and backend namespaces ([`Topology::attach`]).
pub struct InProcess {
    name: String,
    routing: Routing,
    port: u16,
    cpu_method: String,
    start: Box<StartFn>,
}

impl InProcess {
    /// A contender named `name` routing as `routing`, whose CPU time is counted as
    /// `cpu_method` says, started by `start`.
    pub fn new(
        name: &str,
        routing: Routing,
        cpu_method: &str,
        start: impl FnMut(&TapLane) -> Result<InProcessRun, String> + 'static,
    ) -> InProcess {
        InProcess {
            name: name.into(),
            routing,
            port: net::FRONT_PORT,
            cpu_method: cpu_method.into(),
            start: Box::new(start),
        }
    }

    /// The contender serving on `port` of [`net::LANE_VIP`] (what its configuration must
    /// say; the default is [`net::FRONT_PORT`]).
    pub fn with_port(mut self, port: u16) -> InProcess {
        self.port = port;
        self
    }
}

struct InProcessInstance {
    run: Option<InProcessRun>,
    port: u16,
}

impl Instance for InProcessInstance {
    fn target(&self) -> SocketAddrV4 {
        SocketAddrV4::new(net::LANE_VIP, self.port)
    }

    fn cpu(&mut self) -> Result<CpuSample, String> {
        match self.run.as_mut() {
            Some(r) => (r.cpu)(),
            None => Err("stopped".into()),
        }
    }

    fn rss_kib(&self) -> Result<u64, String> {
        proxy::rss_kib("self")
    }

    fn stop(mut self: Box<Self>, _failed: bool) -> Value {
        self.run.take().map_or(Value::Null, |r| (r.stop)())
    }
}

impl Drop for InProcessInstance {
    fn drop(&mut self) {
        if let Some(r) = self.run.take() {
            let _ = (r.stop)();
        }
    }
}

impl Contender for InProcess {
    fn name(&self) -> &str {
        &self.name
    }

    fn routing(&self) -> Routing {
        self.routing.clone()
    }

    fn cpu_method(&self) -> &str {
        &self.cpu_method
    }

    fn start(&mut self, topo: &Topology) -> Result<Box<dyn Instance>, String> {
        let lane = topo.tap_lane()?;
        let run = (self.start)(&lane)?;
        let inst = Box::new(InProcessInstance {
            run: Some(run),
            port: self.port,
        });
        topo.attach(&lane)?;
        Ok(inst)
    }
}

/// The pid of kernel thread `ksoftirqd/<core>` (from a scan of `/proc`).
pub fn softirqd_pid(core: usize) -> Option<u32> {
    let want = format!("ksoftirqd/{core}");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        (comm.trim() == want).then_some(pid)
    })
}

/// `c`, also charged the CPU time of its core's `ksoftirqd` thread
/// (`ksoftirqd/<PROXY_CORE>`, its `schedstat` run time: bursts too short for ticks),
/// reported apart as [`CpuSample::softirqd_s`].
///
/// The network receive path runs in softirq context. Where it runs in a thread's own
/// context (on leaving a system call that sent, a TAP write) it is in that thread's
/// CPU time already: the test kernel accounts by ticks without IRQ time accounting
/// (`CONFIG_IRQ_TIME_ACCOUNTING` off), so those ticks count as the thread's system
/// time. What the kernel defers to `ksoftirqd` under load is charged to that kernel
/// thread instead; a contender pinned to a core answers for its core's deferred work
/// (other tenants of the core add timers and RCU, not packets).
pub fn charge_softirqd(c: Box<dyn Contender>) -> Box<dyn Contender> {
    let cpu_method = format!(
        "{}; plus ksoftirqd/{PROXY_CORE}'s run time (schedstat), in cpu_s_softirqd",
        c.cpu_method()
    );
    Box::new(SoftirqdCharged {
        inner: c,
        cpu_method,
    })
}

struct SoftirqdCharged {
    inner: Box<dyn Contender>,
    cpu_method: String,
}

impl Contender for SoftirqdCharged {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn routing(&self) -> Routing {
        self.inner.routing()
    }

    fn cpu_method(&self) -> &str {
        &self.cpu_method
    }

    fn start(&mut self, topo: &Topology) -> Result<Box<dyn Instance>, String> {
        let pid = softirqd_pid(PROXY_CORE).ok_or_else(|| {
            format!("no ksoftirqd/{PROXY_CORE} in /proc: its CPU time cannot be charged")
        })?;
        let inner = self.inner.start(topo)?;
        Ok(Box::new(SoftirqdChargedRun { inner, pid }))
    }
}

struct SoftirqdChargedRun {
    inner: Box<dyn Instance>,
    pid: u32,
}

impl Instance for SoftirqdChargedRun {
    fn target(&self) -> SocketAddrV4 {
        self.inner.target()
    }

    fn cpu(&mut self) -> Result<CpuSample, String> {
        let mut c = self.inner.cpu()?;
        let s = proxy::tree_cpu(self.pid);
        if s.processes == 0 {
            return Err(format!("ksoftirqd/{PROXY_CORE} (pid {}) gone", self.pid));
        }
        c.charged_s += s.schedstat_s;
        c.os_s += s.schedstat_s;
        c.softirqd_s += s.schedstat_s;
        Ok(c)
    }

    fn rss_kib(&self) -> Result<u64, String> {
        self.inner.rss_kib()
    }

    fn stop(self: Box<Self>, failed: bool) -> Value {
        self.inner.stop(failed)
    }
}

/// How to run one round.
#[derive(Debug, Clone)]
pub struct RoundSpec {
    /// Connections in flight.
    pub conns: usize,
    /// Warm-up before the window.
    pub warmup: Duration,
    /// The window.
    pub duration: Duration,
    /// Per-connection timeout.
    pub timeout: Duration,
    /// Longest wait for the contender to answer a probe after its start.
    pub ready_limit: Duration,
}

/// One measured window of one started contender, whatever load it ran (`R`: what the
/// load client reports).
#[derive(Debug, Clone, Default)]
pub struct Window<R> {
    /// What the client saw.
    pub load: R,
    /// Window length, seconds.
    pub window_s: f64,
    /// The contender's CPU time in the window.
    pub cpu: CpuSample,
    /// Busy time of the contender's core in the window (everything that ran there,
    /// other tenants of the machine included; `/proc/stat`), seconds.
    pub proxy_core_busy_s: f64,
    /// Busy time of the load core in the window, seconds.
    pub load_core_busy_s: f64,
    /// Seconds from start until the probe was answered.
    pub ready_s: f64,
    /// What the contender reported when stopped.
    pub stopped: Value,
}

impl<R> Window<R> {
    /// Whether the load core was busy (≥ 95 %) for the whole window: the wall-clock rate
    /// is then the load side's limit as much as the contender's (figures per core are not
    /// affected: they divide by the contender's own CPU time).
    pub fn load_bound(&self) -> bool {
        self.load_core_busy_s >= 0.95 * self.window_s
    }

    /// `n` per second of the contender's CPU time (0 when it used none).
    pub fn per_core(&self, n: f64) -> f64 {
        if self.cpu.charged_s > 0.0 {
            n / self.cpu.charged_s
        } else {
            0.0
        }
    }

    /// The fields every window has, as JSON (the load's own figures go beside them).
    pub fn common_json(&self) -> Value {
        json!({
            "cpu_s": self.cpu.charged_s,
            "cpu_s_os": self.cpu.os_s,
            "cpu_s_busy_cycles": self.cpu.busy_s,
            "cpu_s_softirqd": self.cpu.softirqd_s,
            "window_s": self.window_s,
            "proxy_core_busy_s": self.proxy_core_busy_s,
            "load_core_busy_s": self.load_core_busy_s,
            "load_bound": self.load_bound(),
            "ready_s": self.ready_s,
            "stopped": self.stopped,
        })
    }
}

/// One round of one contender in the SNI benchmark.
pub type Round = Window<LoadReport>;

impl Window<LoadReport> {
    /// Right answers per wall-clock second.
    pub fn cps(&self) -> f64 {
        self.load.conns as f64 / self.window_s.max(1e-9)
    }

    /// Right answers per second of the contender's CPU time.
    pub fn cps_per_core(&self) -> f64 {
        self.per_core(self.load.conns as f64)
    }

    /// The round as JSON.
    pub fn json(&self) -> Value {
        json!({
            "cps": self.cps(),
            "cps_per_core": self.cps_per_core(),
            "cpu_s": self.cpu.charged_s,
            "cpu_s_os": self.cpu.os_s,
            "cpu_s_busy_cycles": self.cpu.busy_s,
            "conns": self.load.conns,
            "errors": self.load.errors,
            "mismatches": self.load.mismatches,
            "mismatch_detail": self.load.mismatch_detail,
            "unfinished": self.load.unfinished,
            "warmup_conns": self.load.warmup_ended,
            "p50_ms": self.load.quantile_ms(0.5),
            "p99_ms": self.load.quantile_ms(0.99),
            "window_s": self.window_s,
            "proxy_core_busy_s": self.proxy_core_busy_s,
            "load_core_busy_s": self.load_core_busy_s,
            "load_bound": self.load_bound(),
            "ready_s": self.ready_s,
            "stopped": self.stopped,
        })
    }
}

/// Busy (non-idle, non-iowait) time of each core so far, seconds, from `/proc/stat`.
pub fn core_busy_s() -> Vec<f64> {
    let hz = rustix::param::clock_ticks_per_second().max(1) as f64;
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let mut out = Vec::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let Some(name) = f.next() else { continue };
        if !name.starts_with("cpu") || name == "cpu" {
            continue;
        }
        let v: Vec<u64> = f.filter_map(|x| x.parse().ok()).collect();
        // user nice system idle iowait irq softirq steal ...
        let total: u64 = v.iter().take(8).sum();
        let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
        out.push(total.saturating_sub(idle) as f64 / hz);
    }
    out
}

/// Core `core`'s busy seconds between two [`core_busy_s`] readings.
pub fn busy_delta(a: &[f64], b: &[f64], core: usize) -> f64 {
    match (a.get(core), b.get(core)) {
        (Some(x), Some(y)) => y - x,
        _ => 0.0,
    }
}

/// The error of a round cut short by the `stop` flag.
pub const INTERRUPTED: &str = "interrupted";

/// Sleeps until `t`, in short steps, returning early (false) when `stop` is set.
pub fn sleep_until(t: Instant, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= t {
            return true;
        }
        std::thread::sleep((t - now).min(Duration::from_millis(50)));
    }
}

/// Checks that a contender serves: one connection through it to `target`, blocking
/// (run inside the client's namespace), `Ok` when it was answered as it must be.
pub type ProbeFn = dyn Fn(SocketAddrV4) -> Result<(), String> + Send + Sync;
/// Runs the load against `target` until its window (which opens at the given instant)
/// closes, inside the client's namespace on the load core; what the client saw.
pub type LoadFn<R> = dyn FnOnce(SocketAddrV4, Instant) -> Result<R, String> + Send;

/// The timing of one measured window.
#[derive(Debug, Clone, Copy)]
pub struct WindowSpec {
    /// Load before the window.
    pub warmup: Duration,
    /// The window.
    pub duration: Duration,
    /// Longest wait for the contender to answer a probe after its start.
    pub ready_limit: Duration,
}

/// Probes `target` from the client namespace until `probe` says it was answered
/// (`Ok(seconds waited)`) or `limit` passes.
fn wait_ready(
    topo: &Topology,
    target: SocketAddrV4,
    probe: &Arc<ProbeFn>,
    limit: Duration,
    inst: &mut dyn Instance,
) -> Result<f64, String> {
    let t0 = Instant::now();
    let mut last = String::new();
    while t0.elapsed() < limit {
        // An external process that died will not become ready.
        inst.cpu()?;
        let p = probe.clone();
        let h = net::spawn_in(
            &topo.client.name,
            Some(LOAD_CORE),
            "load-probe",
            move || p(target),
        )?;
        match net::join(h) {
            Ok(()) => return Ok(t0.elapsed().as_secs_f64()),
            Err(e) => last = e,
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("not ready after {limit:?}: {last}"))
}

/// Why a round has no figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoundError {
    /// The contender did not start (its configuration, its process, its devices).
    Start(String),
    /// It started but never answered its probe: it does not serve the benchmark.
    NotReady {
        /// The last probe's error.
        error: String,
        /// What it reported when stopped.
        stopped: Value,
    },
    /// It served, then the round failed (the contender died, the load client failed).
    Failed {
        /// What went wrong.
        error: String,
        /// What it reported when stopped.
        stopped: Value,
    },
    /// Cut short by the stop flag (SIGINT).
    Interrupted,
}

impl RoundError {
    /// Whether the contender never served (did not start, or never answered): later
    /// rounds with the same configuration would fail the same way.
    pub fn never_served(&self) -> bool {
        matches!(self, RoundError::Start(_) | RoundError::NotReady { .. })
    }
}

impl std::fmt::Display for RoundError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RoundError::Start(e) => write!(f, "did not start: {e}"),
            RoundError::NotReady { error, stopped } => write!(f, "{error}; on stop: {stopped}"),
            RoundError::Failed { error, stopped } => write!(f, "{error}; on stop: {stopped}"),
            RoundError::Interrupted => f.write_str(INTERRUPTED),
        }
    }
}

/// Runs one round of `c` (see the module docs) with the SNI load client; `stop` aborts it
/// (SIGINT).
pub fn measure(
    c: &mut dyn Contender,
    topo: &Topology,
    spec: &RoundSpec,
    hellos: &[Hello],
    stop: &AtomicBool,
) -> Result<Round, String> {
    let first = hellos.first().ok_or("no hellos")?.clone();
    let probe: Arc<ProbeFn> =
        Arc::new(move |target| client::probe(target, &first, Duration::from_secs(1)));
    let (hellos, conns, duration, timeout) =
        (hellos.to_vec(), spec.conns, spec.duration, spec.timeout);
    let load: Box<LoadFn<LoadReport>> = Box::new(move |target, window_start| {
        client::run(&LoadSpec {
            target,
            hellos,
            conns,
            window_start,
            duration,
            timeout,
        })
    });
    let timing = WindowSpec {
        warmup: spec.warmup,
        duration: spec.duration,
        ready_limit: spec.ready_limit,
    };
    measure_with(c, topo, &timing, probe, load, stop).map_err(|e| e.to_string())
}

/// Runs one round of `c` with any load: starts it, waits until `probe` passes, runs
/// `load` on the load core in the client namespace (a warm-up, then the window), reads
/// the contender's CPU time at the window's two ends, stops it. `stop` aborts it.
pub fn measure_with<R: Send + 'static>(
    c: &mut dyn Contender,
    topo: &Topology,
    spec: &WindowSpec,
    probe: Arc<ProbeFn>,
    load: Box<LoadFn<R>>,
    stop: &AtomicBool,
) -> Result<Window<R>, RoundError> {
    let mut inst = c.start(topo).map_err(RoundError::Start)?;
    let res = run_started(inst.as_mut(), topo, spec, &probe, load, stop);
    // A failed round keeps the contender's logs; an interrupted one is not a failure.
    let failed = !matches!(&res, Ok(_) | Err(Stage::Interrupted));
    let stopped = inst.stop(failed);
    match res {
        Ok(mut r) => {
            r.stopped = stopped;
            Ok(r)
        }
        Err(Stage::NotReady(error)) => Err(RoundError::NotReady { error, stopped }),
        Err(Stage::Failed(error)) => Err(RoundError::Failed { error, stopped }),
        Err(Stage::Interrupted) => Err(RoundError::Interrupted),
    }
}

/// Where a started round failed.
enum Stage {
    NotReady(String),
    Failed(String),
    Interrupted,
}

fn run_started<R: Send + 'static>(
    inst: &mut dyn Instance,
    topo: &Topology,
    spec: &WindowSpec,
    probe: &Arc<ProbeFn>,
    load: Box<LoadFn<R>>,
    stop: &AtomicBool,
) -> Result<Window<R>, Stage> {
    let target = inst.target();
    let ready_s =
        wait_ready(topo, target, probe, spec.ready_limit, inst).map_err(Stage::NotReady)?;
    let window_start = Instant::now() + spec.warmup;
    let handle = net::spawn_in(&topo.client.name, Some(LOAD_CORE), "load", move || {
        load(target, window_start)
    })
    .map_err(Stage::Failed)?;
    if !sleep_until(window_start, stop) {
        let _ = net::join(handle);
        return Err(Stage::Interrupted);
    }
    let (cpu0, busy0, t0) = (inst.cpu(), core_busy_s(), Instant::now());
    let end = window_start + spec.duration;
    let finished = sleep_until(end, stop);
    let (cpu1, busy1, t1) = (inst.cpu(), core_busy_s(), Instant::now());
    let load = net::join(handle).map_err(Stage::Failed)?;
    if !finished {
        return Err(Stage::Interrupted);
    }
    let (cpu0, cpu1) = (cpu0.map_err(Stage::Failed)?, cpu1.map_err(Stage::Failed)?);
    Ok(Window {
        load,
        window_s: (t1 - t0).as_secs_f64(),
        cpu: cpu1.since(&cpu0),
        proxy_core_busy_s: busy_delta(&busy0, &busy1, PROXY_CORE),
        load_core_busy_s: busy_delta(&busy0, &busy1, LOAD_CORE),
        ready_s,
        stopped: Value::Null,
    })
}

/// A contender's rounds summed up: medians of the per-round rates and latencies, sums of
/// connections, errors and mismatches.
pub fn summary(c: &dyn Contender, rounds: &[Round], failures: &[String]) -> Value {
    let med = |f: &dyn Fn(&Round) -> f64| median(&rounds.iter().map(f).collect::<Vec<_>>());
    let mut errors = std::collections::BTreeMap::<String, u64>::new();
    for r in rounds {
        for (k, v) in &r.load.errors {
            *errors.entry(k.clone()).or_default() += v;
        }
    }
    let conns: u64 = rounds.iter().map(|r| r.load.conns).sum();
    let mismatches: u64 = rounds.iter().map(|r| r.load.mismatches).sum();
    json!({
        "routing": c.routing().describe(),
        "cpu_method": c.cpu_method(),
        "valid": !rounds.is_empty() && mismatches == 0 && conns > 0,
        "cps": med(&|r| r.cps()),
        "cps_per_core": med(&|r| r.cps_per_core()),
        "cpu_s": med(&|r| r.cpu.charged_s),
        "conns": conns,
        "errors": errors,
        "mismatches": mismatches,
        "p50_ms": med(&|r| r.load.quantile_ms(0.5)),
        "p99_ms": med(&|r| r.load.quantile_ms(0.99)),
        "proxy_core_busy_s": med(&|r| r.proxy_core_busy_s),
        "load_core_busy_s": med(&|r| r.load_core_busy_s),
        "load_bound_rounds": rounds.iter().filter(|r| r.load_bound()).count(),
        "rounds": rounds.iter().map(Round::json).collect::<Vec<_>>(),
        "failed_rounds": failures,
    })
}
