//! `sluice run`: ports and pinned workers from the Appliance manifest, serving the tables
//! compiled from the whole configuration, reloaded while traffic flows.
//!
//! The Appliance (`sluice.dev/v1alpha1`) is translated into the dataplane's plain
//! configuration ([`RunPlan`]): ports ([`PortKind`]) with their addresses, one worker per
//! core, static routes, virtual addresses, the flow-table size, EAL arguments and the admin
//! socket. Without an Appliance sluice runs the embedded default ([`DEFAULT_APPLIANCE`]):
//! one TAP port `sl0` where sluice is `10.77.0.2/24` and `fd77::2/64`; the kernel's side of
//! the TAP device gets `10.77.0.1/24` and `fd77::1/64`, so `ping 10.77.0.2` works right
//! away.
//!
//! The rest of the configuration (gateways, routes, policies, inventory) is compiled into
//! the tables ([`crate::reload::prepare`]) and published through RCU to every worker. The
//! control thread (this one) then reloads on a file change (polled once a second), on
//! SIGHUP and on `sluice ctl reload` ([`crate::reload::Reloader`]), frees old generations
//! once every worker has moved past them, prints one line per second (pps and bit rate per
//! port, flows, drops by reason) unless `--quiet`, and stops cleanly on SIGINT/SIGTERM:
//! workers flush their tx buffers, publish their counters and return every buffer. The
//! admin socket (`sluice ctl`) is served on its own thread.

use crate::api::{self, ControlRequest, Snapshot};
use crate::config;
use crate::model::appliance::{ApplianceSpec, Conntrack, DelayedBinding};
use crate::model::Object;
use crate::reload::{self, Prepared, ReloadOutcome, ReloadStatus, Reloader};
use crate::sources::{FileWatch, Sighup, Trigger};
use sluice_dataplane::balancer::{Balancer, BalancerConfig};
use sluice_dataplane::flow::Timeouts;
use sluice_dataplane::pipeline::{
    Forwarder, ForwarderConfig, IfAddr, NeighbourCache, PortConf, Route,
};
use sluice_dataplane::port::{self, Opened, Pool, PortKind};
use sluice_dataplane::rcu::Reader;
use sluice_dataplane::splice::SpliceConfig;
use sluice_dataplane::stats::{Counters, SharedCounters};
use sluice_dataplane::tables::snapshot::Snapshot as Tables;
use sluice_dataplane::worker::{self, Idle, Redirects, Worker, WorkerConfig};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// The admin socket when the Appliance names none.
pub const DEFAULT_ADMIN_SOCKET: &str = "/run/sluice/admin.sock";

/// The embedded default, used when no Appliance is given: one TAP port.
pub const DEFAULT_APPLIANCE: &str = r#"
apiVersion: sluice.dev/v1alpha1
kind: Appliance
metadata: {name: default}
spec:
  cores: [0]
  ports:
  - name: sl0
    tap: {name: sl0}
    addresses: [10.77.0.2/24, "fd77::2/64"]
"#;

/// Addresses the embedded default gives the kernel's side of `sl0`.
pub const DEFAULT_PEER_ADDRESSES: [&str; 2] = ["10.77.0.1/24", "fd77::1/64"];

/// Flow-table entries per worker when the Appliance's `limits.flowsPerWorker` is absent.
pub const DEFAULT_FLOWS_PER_WORKER: usize = 1 << 20;

/// Packets each worker's redirect ring holds (packets of flows another worker owns).
pub const REDIRECT_DEPTH: usize = 1024;

/// How often the configuration files are looked at.
pub const FILE_POLL: Duration = Duration::from_secs(1);

/// `sluice run` arguments.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RunArgs {
    /// Manifest files or directories (`-` for stdin). Without an Appliance among them,
    /// the embedded default is used (TAP port `sl0`, sluice at 10.77.0.2/24, fd77::2/64).
    #[arg(short = 'c', long = "config", num_args = 1..)]
    pub config: Vec<PathBuf>,
    /// Do not print the once-per-second summary.
    #[arg(short, long)]
    pub quiet: bool,
    /// Admin socket path (overrides the Appliance's `admin.socket`).
    #[arg(long)]
    pub admin_socket: Option<PathBuf>,
    /// Stop by itself after this many seconds (default: run until SIGINT/SIGTERM).
    #[arg(long)]
    pub duration: Option<f64>,
}

/// One port of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortPlan {
    /// Name.
    pub name: String,
    /// Backend.
    pub kind: PortKind,
    /// sluice's addresses on it.
    pub addrs: Vec<IfAddr>,
}

/// What `sluice run` starts, translated from the Appliance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPlan {
    /// Ports in order.
    pub ports: Vec<PortPlan>,
    /// One worker per core.
    pub cores: Vec<usize>,
    /// Static routes.
    pub routes: Vec<Route>,
    /// Virtual addresses (listener addresses answered on every port).
    pub virtual_addrs: Vec<IpAddr>,
    /// Flow-table entries per worker.
    pub flow_capacity: usize,
    /// Connection-tracking timeouts.
    pub timeouts: Timeouts,
    /// Source NAT ports, inclusive, split among the workers.
    pub snat_ports: (u16, u16),
    /// Delayed binding (SNI/Host listeners); its cookie secret is drawn at start.
    pub splice: SpliceConfig,
    /// Seeds each start's flow hashing and where the SNAT port cursor begins (drawn at
    /// start: a restarted sluice must not reuse its last run's SNAT tuples in the same
    /// order, which backends may still hold in TIME_WAIT).
    pub seed: u64,
    /// EAL arguments (only used when a DPDK port exists).
    pub eal: Vec<String>,
    /// Admin socket.
    pub admin_socket: PathBuf,
    /// Whether this is the embedded default (its TAP peer gets addresses).
    pub is_default: bool,
}

fn parse_cidr(s: &str) -> Result<IfAddr, String> {
    let (a, l) = s
        .split_once('/')
        .ok_or_else(|| format!("address {s:?} needs a prefix length (10.77.0.2/24)"))?;
    let addr: IpAddr = a.parse().map_err(|_| format!("address {s:?}: bad IP"))?;
    let prefix_len: u8 = l
        .parse()
        .map_err(|_| format!("address {s:?}: bad prefix length"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if prefix_len > max {
        return Err(format!("address {s:?}: prefix length over {max}"));
    }
    Ok(IfAddr { addr, prefix_len })
}

impl RunPlan {
    /// Translates an Appliance spec.
    pub fn from_appliance(spec: &ApplianceSpec, is_default: bool) -> Result<RunPlan, String> {
        if spec.ports.is_empty() {
            return Err("the Appliance has no ports".into());
        }
        let cores: Vec<usize> = if spec.cores.is_empty() {
            vec![0]
        } else {
            spec.cores.iter().map(|&c| c as usize).collect()
        };
        let workers = cores.len() as u16;
        let mut ports = Vec::new();
        for p in &spec.ports {
            let kinds = [p.tap.is_some(), p.dpdk.is_some(), p.pcap.is_some()];
            if kinds.iter().filter(|&&k| k).count() != 1 {
                return Err(format!(
                    "port {}: give exactly one of tap, dpdk, pcap",
                    p.name
                ));
            }
            if let Some(q) = p.queues {
                if q != workers {
                    return Err(format!(
                        "port {}: queues {q} must equal the number of cores ({workers}): each worker polls one queue of every port",
                        p.name
                    ));
                }
            }
            let kind = if let Some(t) = &p.tap {
                PortKind::Tap {
                    ifname: t.name.clone(),
                }
            } else if let Some(d) = &p.dpdk {
                PortKind::Dpdk {
                    devargs: d.devargs.clone(),
                }
            } else if let Some(c) = &p.pcap {
                if workers > 1 {
                    return Err(format!(
                        "port {}: a pcap port has one queue; use one core",
                        p.name
                    ));
                }
                PortKind::Pcap {
                    rx: c.rx.as_ref().map(PathBuf::from),
                    tx: c.tx.as_ref().map(PathBuf::from),
                }
            } else {
                unreachable!("checked above")
            };
            let addrs = p
                .addresses
                .iter()
                .map(|a| parse_cidr(a).map_err(|e| format!("port {}: {e}", p.name)))
                .collect::<Result<Vec<_>, _>>()?;
            ports.push(PortPlan {
                name: p.name.clone(),
                kind,
                addrs,
            });
        }
        let mut routes = Vec::new();
        for r in &spec.routes {
            let to = parse_cidr(&r.to).map_err(|e| format!("route: {e}"))?;
            let via: IpAddr = r
                .via
                .parse()
                .map_err(|_| format!("route to {}: bad next hop {:?}", r.to, r.via))?;
            routes.push(Route {
                to: to.addr,
                prefix_len: to.prefix_len,
                via,
            });
        }
        let virtual_addrs = spec
            .virtual_addresses
            .iter()
            .map(|v| {
                v.parse::<IpAddr>()
                    .map_err(|_| format!("virtual address {v:?}: bad IP"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let flow_capacity = match spec.limits.flows_per_worker {
            None => DEFAULT_FLOWS_PER_WORKER,
            Some(0) => return Err("limits.flowsPerWorker must be at least 1".into()),
            Some(n) => {
                usize::try_from(n).map_err(|_| format!("limits.flowsPerWorker {n} is too large"))?
            }
        };
        let (timeouts, snat_ports) = conntrack(
            spec.conntrack.as_deref().unwrap_or(&Conntrack::default()),
            cores.len(),
        )?;
        let splice = delayed_binding(
            spec.delayed_binding
                .as_deref()
                .unwrap_or(&DelayedBinding::default()),
        )?;
        Ok(RunPlan {
            ports,
            cores,
            routes,
            virtual_addrs,
            flow_capacity,
            timeouts,
            snat_ports,
            splice,
            seed: BalancerConfig::default().seed,
            eal: spec.eal.clone(),
            admin_socket: spec
                .admin
                .as_ref()
                .and_then(|a| a.socket.as_ref())
                .map_or_else(|| PathBuf::from(DEFAULT_ADMIN_SOCKET), PathBuf::from),
            is_default,
        })
    }

    /// The EAL arguments: the Appliance's, plus `--vdev` for each DPDK port given by vdev
    /// devargs (`net_...`), so the EAL creates them.
    pub fn eal_args(&self) -> Vec<String> {
        let mut a = self.eal.clone();
        for p in &self.ports {
            if let PortKind::Dpdk { devargs } = &p.kind {
                if devargs.starts_with("net_") && !a.iter().any(|x| x == devargs) {
                    a.push("--vdev".into());
                    a.push(devargs.clone());
                }
            }
        }
        a
    }
}

/// Reads the configuration and returns the plan (the Appliance's, or the default).
pub fn plan(args: &RunArgs) -> Result<RunPlan, String> {
    load(args).map(|(plan, _)| plan)
}

/// Loads, validates and compiles the whole configuration: the plan (from its Appliance,
/// or the embedded default) and the first tables. Errors are printable lines.
pub fn load(args: &RunArgs) -> Result<(RunPlan, Prepared), String> {
    let prepared = reload::prepare(&args.config).map_err(|errors| {
        format!(
            "{}\nconfiguration rejected ({} error(s))",
            errors.join("\n"),
            errors.len()
        )
    })?;
    let mut plan = match &prepared.appliance {
        Some(s) => RunPlan::from_appliance(s, false)?,
        None => RunPlan::from_appliance(&default_spec()?, true)?,
    };
    if let Some(p) = &args.admin_socket {
        plan.admin_socket = p.clone();
    }
    let secret = random_bytes()?;
    plan.splice.cookie_secret = secret[..16].try_into().unwrap_or([0; 16]);
    plan.seed = u64::from_le_bytes(secret[16..].try_into().unwrap_or([0; 8]));
    Ok((plan, prepared))
}

fn default_spec() -> Result<ApplianceSpec, String> {
    let mut loaded = crate::load::Loaded::default();
    crate::load::load_str("<embedded default>", DEFAULT_APPLIANCE, &mut loaded);
    let c = config::compile_loaded(loaded);
    c.items
        .iter()
        .find_map(|it| match &it.object {
            Object::Appliance(a) => Some(a.spec.clone()),
            _ => None,
        })
        .ok_or_else(|| "the embedded default Appliance does not decode".into())
}

/// Runs the dataplane until SIGINT/SIGTERM (or `--duration`). Prints errors itself.
pub fn run(args: &RunArgs) -> ExitCode {
    match run_inner(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice run: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What the admin API and the summary read.
pub(crate) struct Running {
    pub(crate) ports: Vec<(String, Arc<dyn port::Port>)>,
    pub(crate) workers: Vec<(usize, usize, Arc<SharedCounters>)>,
    pub(crate) neighbours: Arc<NeighbourCache>,
    pub(crate) started: Instant,
    /// Whether the embedded default Appliance runs.
    pub(crate) is_default: bool,
    /// Requests to the control thread (`sluice ctl reload`).
    pub(crate) control: Mutex<mpsc::Sender<ControlRequest>>,
    /// Reload state, refreshed by the control thread.
    pub(crate) reload: Mutex<ReloadStatus>,
}

impl Running {
    pub(crate) fn snapshot(&self) -> Snapshot {
        Snapshot::take(self)
    }

    /// A copy of the reload state (empty if the lock was poisoned by a panic elsewhere).
    pub(crate) fn reload_status(&self) -> ReloadStatus {
        self.reload.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

fn open_port(p: &PortPlan, queues: u16, pool: &Pool) -> Result<Opened, String> {
    let r = match &p.kind {
        PortKind::Tap { ifname } => port::tap::open(&p.name, ifname, queues, pool),
        PortKind::Pcap { rx, tx } => port::pcap::open(&p.name, rx.as_deref(), tx.as_deref(), pool),
        #[cfg(feature = "dpdk")]
        PortKind::Dpdk { devargs } => port::dpdk::open(&p.name, devargs, queues),
        #[cfg(not(feature = "dpdk"))]
        PortKind::Dpdk { .. } => Err(port::PortError::NoDpdk(p.name.clone())),
    };
    r.map_err(|e| format!("port {}: {e}", p.name))
}

/// The stage every worker runs: connection tracking, policy, Maglev and NAT in front of
/// the forwarder, reading the published tables once per burst.
type RunStage = Balancer;

/// The Appliance's connection-tracking settings: timeouts (defaults for what it leaves
/// out) and the SNAT port range, which must leave every worker at least one port.
pub fn conntrack(c: &Conntrack, workers: usize) -> Result<(Timeouts, (u16, u16)), String> {
    let d = Timeouts::default();
    let t = Timeouts {
        tcp_syn_sent: c.tcp_syn_sent.unwrap_or(d.tcp_syn_sent),
        tcp_syn_recv: c.tcp_syn_recv.unwrap_or(d.tcp_syn_recv),
        tcp_established: c.tcp_established.unwrap_or(d.tcp_established),
        tcp_fin_wait: c.tcp_fin_wait.unwrap_or(d.tcp_fin_wait),
        tcp_close_wait: c.tcp_close_wait.unwrap_or(d.tcp_close_wait),
        tcp_last_ack: c.tcp_last_ack.unwrap_or(d.tcp_last_ack),
        tcp_time_wait: c.tcp_time_wait.unwrap_or(d.tcp_time_wait),
        tcp_close: c.tcp_close.unwrap_or(d.tcp_close),
        udp_unreplied: c.udp_unreplied.unwrap_or(d.udp_unreplied),
        udp_replied: c.udp_replied.unwrap_or(d.udp_replied),
    };
    let ports = match &c.snat_ports {
        None => BalancerConfig::default().snat_ports,
        Some(r) => {
            let bad =
                || format!("conntrack.snatPorts {r:?}: expected FIRST-LAST, e.g. \"1024-65535\"");
            let (a, b) = r.split_once('-').ok_or_else(bad)?;
            let a: u16 = a.trim().parse().map_err(|_| bad())?;
            let b: u16 = b.trim().parse().map_err(|_| bad())?;
            if a == 0 || a > b {
                return Err(format!(
                    "conntrack.snatPorts {r:?}: the first port must be 1 or more and not above the last"
                ));
            }
            if usize::from(b - a) + 1 < workers {
                return Err(format!(
                    "conntrack.snatPorts {r:?}: fewer ports than workers ({workers})"
                ));
            }
            (a, b)
        }
    };
    Ok((t, ports))
}

/// The Appliance's delayed-binding settings, checked against their ranges (the cookie
/// secret is left at its default: [`run`] draws it from the OS).
pub fn delayed_binding(d: &DelayedBinding) -> Result<SpliceConfig, String> {
    let def = SpliceConfig::default();
    let within =
        |v: Option<u32>, name: &str, lo: u32, hi: u32, default: u64| -> Result<u64, String> {
            match v {
                None => Ok(default),
                Some(v) if (lo..=hi).contains(&v) => Ok(u64::from(v)),
                Some(v) => Err(format!("delayedBinding.{name} {v}: expected {lo} to {hi}")),
            }
        };
    Ok(SpliceConfig {
        embryos: within(
            d.embryos_per_worker,
            "embryosPerWorker",
            1,
            1 << 20,
            def.embryos as u64,
        )? as usize,
        buffer_bytes: within(
            d.buffer_bytes,
            "bufferBytes",
            512,
            65535,
            def.buffer_bytes as u64,
        )? as usize,
        max_pieces: within(d.max_segments, "maxSegments", 1, 8, def.max_pieces as u64)? as usize,
        first_bytes_ms: within(
            d.first_bytes_timeout_ms,
            "firstBytesTimeoutMs",
            1,
            600_000,
            def.first_bytes_ms,
        )?,
        syn_rto_ms: within(
            d.backend_syn_timeout_ms,
            "backendSynTimeoutMs",
            1,
            60_000,
            def.syn_rto_ms,
        )?,
        syn_tries: within(
            d.backend_syn_tries,
            "backendSynTries",
            1,
            10,
            u64::from(def.syn_tries),
        )? as u8,
        backend_tries: within(
            d.backend_tries,
            "backendTries",
            1,
            10,
            u64::from(def.backend_tries),
        )? as u8,
        ..def
    })
}

/// 24 bytes from the OS's random source: the SYN cookie secret (16, shared by the
/// workers so any of them accepts a cookie another made) and the start's seed (8).
fn random_bytes() -> Result<[u8; 24], String> {
    use std::io::Read;
    let mut b = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| format!("reading /dev/urandom for the SYN cookie secret and seed: {e}"))?;
    Ok(b)
}

/// Builds worker `worker`'s stage (of `workers`) as the plan says.
fn stage(
    fwd: Forwarder,
    tables: Reader<Tables>,
    worker: usize,
    workers: usize,
    plan: &RunPlan,
) -> RunStage {
    Balancer::new(
        fwd,
        tables,
        BalancerConfig {
            worker,
            workers,
            flow_capacity: plan.flow_capacity,
            timeouts: plan.timeouts,
            snat_ports: plan.snat_ports,
            splice: plan.splice.clone(),
            seed: plan.seed ^ (worker as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            ..BalancerConfig::default()
        },
    )
}

fn run_inner(args: &RunArgs) -> Result<(), String> {
    let (plan, prepared) = load(args)?;
    let workers_n = plan.cores.len();
    let has_dpdk = plan
        .ports
        .iter()
        .any(|p| matches!(p.kind, PortKind::Dpdk { .. }));
    if has_dpdk {
        #[cfg(feature = "dpdk")]
        port::dpdk::init(&plan.eal_args()).map_err(|e| e.to_string())?;
        #[cfg(not(feature = "dpdk"))]
        return Err("this build has no DPDK backend (rebuild with the `dpdk` feature)".into());
    }
    let pool = Pool::new((plan.ports.len() * workers_n * 1024).max(4096));
    let mut opened = Vec::new();
    for p in &plan.ports {
        opened.push(open_port(p, workers_n as u16, &pool)?);
    }
    if plan.is_default {
        configure_default_peer(&plan);
    }
    let port_confs: Vec<PortConf> = plan
        .ports
        .iter()
        .zip(&opened)
        .map(|(p, o)| PortConf {
            name: p.name.clone(),
            mac: o.port.mac(),
            addrs: p.addrs.clone(),
        })
        .collect();
    let conf = Arc::new(ForwarderConfig::with_virtual(
        port_confs,
        &plan.routes,
        plan.virtual_addrs.clone(),
    )?);
    let neighbours = Arc::new(NeighbourCache::new(4096));
    let ports: Vec<(String, Arc<dyn port::Port>)> = opened
        .iter()
        .map(|o| (o.port.name().to_string(), o.port.clone()))
        .collect();

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .map_err(|e| format!("signal handler: {e}"))?;
    }
    let sighup = Sighup::install().map_err(|e| format!("SIGHUP handler: {e}"))?;
    let mut watch = FileWatch::new(&args.config);
    let mut reloader = Reloader::new(args.config.clone(), prepared, workers_n);

    let mut per_worker: Vec<Vec<Box<dyn port::Queue>>> =
        (0..workers_n).map(|_| Vec::new()).collect();
    for o in opened {
        for (w, q) in o.queues.into_iter().enumerate() {
            if let Some(v) = per_worker.get_mut(w) {
                v.push(q);
            }
        }
    }
    let idle = if plan
        .ports
        .iter()
        .all(|p| matches!(p.kind, PortKind::Dpdk { .. }))
    {
        Idle::Spin
    } else {
        Idle::Sleep {
            after: 256,
            max: Duration::from_micros(500),
        }
    };
    let redirects = Redirects::new(workers_n, REDIRECT_DEPTH);
    let mut handles = Vec::new();
    let mut shared = Vec::new();
    for (id, queues) in per_worker.into_iter().enumerate() {
        let core = plan.cores[id];
        let tables = reloader
            .reader()
            .ok_or_else(|| format!("worker {id}: no table reader left"))?;
        let w = Worker::new(
            WorkerConfig {
                id,
                core: Some(core),
                idle,
            },
            queues,
            stage(
                Forwarder::new(conf.clone(), neighbours.clone()),
                tables,
                id,
                workers_n,
                &plan,
            ),
        )
        .with_redirects(redirects.clone());
        shared.push((id, core, w.shared_counters()));
        handles.push(worker::spawn(w, stop.clone()).map_err(|e| format!("worker {id}: {e}"))?);
    }
    let (requests, control) = mpsc::channel();
    let running = Arc::new(Running {
        ports,
        workers: shared,
        neighbours,
        started: Instant::now(),
        is_default: plan.is_default,
        control: Mutex::new(requests),
        reload: Mutex::new(reloader.status()),
    });
    let admin = api::serve(&plan.admin_socket, running.clone(), stop.clone())
        .map_err(|e| format!("admin socket {}: {e}", plan.admin_socket.display()))?;

    if !args.quiet {
        let addrs: Vec<String> = plan
            .ports
            .iter()
            .map(|p| {
                let a: Vec<String> = p
                    .addrs
                    .iter()
                    .map(|a| format!("{}/{}", a.addr, a.prefix_len))
                    .collect();
                format!("{} ({})", p.name, a.join(", "))
            })
            .collect();
        println!(
            "sluice: {} worker(s) on core(s) {:?}; ports: {}; admin socket {}",
            workers_n,
            plan.cores,
            addrs.join("; "),
            plan.admin_socket.display()
        );
        println!(
            "sluice: tables generation {}: {} listener(s), {} route(s){}",
            reloader.generation(),
            reloader.current().listeners.len(),
            reloader.current().listeners.routes().len(),
            if watch.is_empty() {
                String::new()
            } else {
                "; reloads on file change, SIGHUP or `sluice ctl reload`".to_string()
            }
        );
        if plan.is_default {
            println!(
                "sluice: embedded default; the kernel side of sl0 is {} — try `ping 10.77.0.2`",
                DEFAULT_PEER_ADDRESSES.join(", ")
            );
        }
    }
    let deadline = args
        .duration
        .map(|s| Instant::now() + Duration::from_secs_f64(s.max(0.0)));
    let mut last = running.snapshot();
    let mut last_t = Instant::now();
    let mut last_poll = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        // Waiting for a request is the loop's sleep: a `ctl reload` is served at once.
        let request = control.recv_timeout(Duration::from_millis(100)).ok();
        if deadline.is_some_and(|d| Instant::now() >= d) {
            stop.store(true, Ordering::Relaxed);
            break;
        }
        let mut outcome = None;
        if let Some(ControlRequest::Reload(reply)) = request {
            watch.rebase();
            let o = reloader.reload(Trigger::Ctl);
            // The client may have given up waiting; the outcome stays in `status`.
            let _ = reply.send(o.clone());
            outcome = Some(o);
        }
        if sighup.take() {
            watch.rebase();
            outcome = Some(reloader.reload(Trigger::Sighup));
        }
        if last_poll.elapsed() >= FILE_POLL {
            last_poll = Instant::now();
            if let Some(changed) = watch.poll() {
                if !args.quiet {
                    let names: Vec<String> =
                        changed.iter().map(|p| p.display().to_string()).collect();
                    println!("sluice: changed: {}; reloading", names.join(", "));
                }
                watch.rebase();
                outcome = Some(reloader.reload(Trigger::File));
            }
        }
        if let Some(o) = outcome.filter(|o| o.ok && !args.quiet) {
            println!("{}", reloaded_line(&o));
        }
        reloader.reclaim();
        if let Ok(mut s) = running.reload.lock() {
            *s = reloader.status();
        }
        if last_t.elapsed() >= Duration::from_secs(1) {
            let now = running.snapshot();
            if !args.quiet {
                println!(
                    "{}",
                    now.summary_line(&last, last_t.elapsed().as_secs_f64())
                );
            }
            last = now;
            last_t = Instant::now();
        }
    }
    let mut total = Counters::new(running.ports.len());
    for h in handles {
        match h.join() {
            Ok(c) => total.add(&c),
            Err(_) => eprintln!("sluice: a worker panicked"),
        }
    }
    let _ = admin.join();
    // Every reader went with its worker: all retired generations can be freed now.
    reloader.reclaim();
    if !args.quiet {
        let fin = running.snapshot();
        println!("sluice: stopped; {}", fin.totals_line());
    }
    Ok(())
}

/// The line printed after a reload that published new tables.
fn reloaded_line(o: &ReloadOutcome) -> String {
    format!(
        "sluice: reload ({}) ok: tables generation {} in {:.1} ms",
        o.trigger,
        o.generation,
        o.took.as_secs_f64() * 1e3
    )
}

/// Gives the kernel's side of the default TAP port its documented addresses (best effort:
/// the user may have configured it already).
fn configure_default_peer(plan: &RunPlan) {
    let Some(PortPlan {
        kind: PortKind::Tap { ifname },
        ..
    }) = plan.ports.first()
    else {
        return;
    };
    for a in DEFAULT_PEER_ADDRESSES {
        let fam = if a.contains(':') { "-6" } else { "-4" };
        let _ = std::process::Command::new("ip")
            .args([fam, "addr", "replace", a, "dev", ifname])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_plan_is_one_tap_port() {
        let p = plan(&RunArgs::default()).unwrap();
        assert!(p.is_default);
        assert_eq!(p.cores, vec![0]);
        assert_eq!(p.ports.len(), 1);
        assert_eq!(
            p.ports[0].kind,
            PortKind::Tap {
                ifname: "sl0".into()
            }
        );
        assert_eq!(
            p.ports[0].addrs,
            vec![
                IfAddr {
                    addr: "10.77.0.2".parse().unwrap(),
                    prefix_len: 24
                },
                IfAddr {
                    addr: "fd77::2".parse().unwrap(),
                    prefix_len: 64
                },
            ]
        );
        assert_eq!(p.admin_socket, PathBuf::from(DEFAULT_ADMIN_SOCKET));
        assert_eq!(p.flow_capacity, DEFAULT_FLOWS_PER_WORKER);
        assert!(p.virtual_addrs.is_empty());
    }

    /// The whole configuration is compiled at start: a broken manifest next to the
    /// Appliance stops `sluice run` before any port opens, with every error.
    #[test]
    fn load_rejects_a_broken_configuration() {
        let d = crate::sources::testing::Scratch::new("run-load");
        let demo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/demo");
        let args = RunArgs {
            config: vec![demo.clone()],
            ..RunArgs::default()
        };
        let (p, tables) = load(&args).expect("the demo loads");
        assert!(!p.is_default);
        assert_eq!(p.virtual_addrs.len(), 2);
        assert!(!tables.tables.listeners.is_empty());
        let bad = d.0.join("bad.yaml");
        std::fs::write(
            &bad,
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: g}\nspec:\n  gatewayClassName: x\n  listeners:\n  - {name: t, port: 0, protocol: TCP}\n",
        )
        .unwrap();
        let args = RunArgs {
            config: vec![demo, bad.clone()],
            ..RunArgs::default()
        };
        let e = load(&args).unwrap_err();
        assert!(e.contains(&format!("{}:7:", bad.display())), "{e}");
        assert!(e.contains("configuration rejected"), "{e}");
    }

    #[test]
    fn appliance_translation() {
        let y = r#"
apiVersion: sluice.dev/v1alpha1
kind: Appliance
metadata: {name: edge}
spec:
  cores: [0, 1]
  ports:
  - name: outside
    dpdk: {devargs: "net_tap0,iface=x"}
    addresses: [10.77.0.2/24]
  - name: inside
    dpdk: {devargs: "0000:3b:00.0"}
    addresses: [10.78.0.2/24, "fd78::2/64"]
  routes: [{to: 0.0.0.0/0, via: 10.77.0.1}]
  eal: ["--no-huge", "-m", "512"]
  admin: {socket: /tmp/x.sock}
  virtualAddresses: [10.77.0.10, "fd77::10"]
  limits: {flowsPerWorker: 4096}
"#;
        let mut loaded = crate::load::Loaded::default();
        crate::load::load_str("t.yaml", y, &mut loaded);
        let c = config::compile_loaded(loaded);
        let spec = c
            .items
            .iter()
            .find_map(|it| match &it.object {
                Object::Appliance(a) => Some(a.spec.clone()),
                _ => None,
            })
            .unwrap();
        let p = RunPlan::from_appliance(&spec, false).unwrap();
        assert_eq!(p.cores, vec![0, 1]);
        assert_eq!(
            p.routes,
            vec![Route {
                to: "0.0.0.0".parse().unwrap(),
                prefix_len: 0,
                via: "10.77.0.1".parse().unwrap()
            }]
        );
        assert_eq!(p.admin_socket, PathBuf::from("/tmp/x.sock"));
        assert_eq!(
            p.virtual_addrs,
            vec![
                "10.77.0.10".parse::<IpAddr>().unwrap(),
                "fd77::10".parse().unwrap()
            ]
        );
        assert_eq!(p.flow_capacity, 4096);
        assert_eq!(
            p.eal_args(),
            ["--no-huge", "-m", "512", "--vdev", "net_tap0,iface=x"]
                .map(String::from)
                .to_vec()
        );
        let mut bad = spec.clone();
        bad.ports[0].queues = Some(3);
        assert!(RunPlan::from_appliance(&bad, false)
            .unwrap_err()
            .contains("queues 3"));
        let mut bad = spec.clone();
        bad.ports[0].addresses = vec!["10.0.0.1".into()];
        assert!(RunPlan::from_appliance(&bad, false)
            .unwrap_err()
            .contains("prefix length"));
        let mut bad = spec;
        bad.ports[0].tap = Some(crate::model::appliance::TapPort { name: "t".into() });
        assert!(RunPlan::from_appliance(&bad, false)
            .unwrap_err()
            .contains("exactly one"));
    }

    #[test]
    fn delayed_binding_settings_and_their_ranges() {
        assert_eq!(
            delayed_binding(&DelayedBinding::default()).unwrap(),
            SpliceConfig::default()
        );
        let d = DelayedBinding {
            embryos_per_worker: Some(64),
            buffer_bytes: Some(4096),
            max_segments: Some(3),
            first_bytes_timeout_ms: Some(250),
            backend_syn_timeout_ms: Some(200),
            backend_syn_tries: Some(1),
            backend_tries: Some(5),
        };
        let c = delayed_binding(&d).unwrap();
        assert_eq!(
            (c.embryos, c.buffer_bytes, c.max_pieces, c.first_bytes_ms),
            (64, 4096, 3, 250)
        );
        assert_eq!((c.syn_rto_ms, c.syn_tries, c.backend_tries), (200, 1, 5));
        for (bad, what) in [
            (
                DelayedBinding {
                    buffer_bytes: Some(100),
                    ..DelayedBinding::default()
                },
                "delayedBinding.bufferBytes 100: expected 512 to 65535",
            ),
            (
                DelayedBinding {
                    max_segments: Some(9),
                    ..DelayedBinding::default()
                },
                "delayedBinding.maxSegments 9",
            ),
            (
                DelayedBinding {
                    embryos_per_worker: Some(0),
                    ..DelayedBinding::default()
                },
                "delayedBinding.embryosPerWorker 0",
            ),
        ] {
            let e = delayed_binding(&bad).unwrap_err();
            assert!(e.contains(what), "{e}");
        }
    }

    #[test]
    fn conntrack_timeouts_and_snat_ports() {
        let (t, p) = conntrack(&Conntrack::default(), 2).unwrap();
        assert_eq!(t, Timeouts::default());
        assert_eq!(p, (1024, 65535));
        let c = Conntrack {
            tcp_established: Some(3600),
            udp_replied: Some(30),
            snat_ports: Some("20000-29999".into()),
            ..Conntrack::default()
        };
        let (t, p) = conntrack(&c, 2).unwrap();
        assert_eq!((t.tcp_established, t.udp_replied), (3600, 30));
        assert_eq!(t.tcp_syn_sent, Timeouts::default().tcp_syn_sent);
        assert_eq!(p, (20000, 29999));
        for (bad, why) in [
            ("2000", "FIRST-LAST"),
            ("0-10", "1 or more"),
            ("9-8", "not above"),
            ("5000-5000", "fewer ports than workers"),
            ("a-b", "FIRST-LAST"),
        ] {
            let c = Conntrack {
                snat_ports: Some(bad.into()),
                ..Conntrack::default()
            };
            let e = conntrack(&c, 2).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
