//! `sluice run`: ports and pinned workers as the Appliance's [`RunPlan`] says, serving the
//! tables compiled from the whole configuration, reloaded while traffic flows.
//!
//! The configuration is built once ([`crate::compile::build()`]: tables and plan) and its
//! tables are published through RCU to every worker. The control thread (this one) then
//! reloads on a file change (polled once a second), on SIGHUP and on `sluice ctl reload`
//! ([`crate::reload::Reloader`]), frees old generations once every worker has moved past
//! them, prints one line per second (pps and bit rate per port, flows, drops by reason)
//! unless `--quiet`, and stops cleanly on SIGINT/SIGTERM: workers flush their tx buffers,
//! publish their counters and return every buffer. The admin socket (`sluice ctl`) is
//! served on its own thread ([`crate::api::server`]).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_dataplane::balancer::{Balancer, BalancerConfig};
use sluice_dataplane::pipeline::{FibError, Forwarder, ForwarderConfig, NeighbourCache, PortConf};
use sluice_dataplane::port::{self, Opened, Pool, PortError, PortKind};
use sluice_dataplane::rcu::Reader;
use sluice_dataplane::stats::{Counters, RuleCounters, SharedCounters};
use sluice_dataplane::tables::snapshot::Snapshot as Tables;
use sluice_dataplane::terminate::TerminateConfig;
use sluice_dataplane::worker::{self, Idle, Redirects, Worker, WorkerConfig};

use crate::compile::Built;
use crate::instance::{ControlRequest, Running};
use crate::plan::{PortPlan, RunPlan, DEFAULT_PEER_ADDRESSES};
use crate::reload::{self, ReloadOutcome, Reloader};
use crate::sources::{FileWatch, Sighup, Trigger};

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

/// Why `sluice run` stopped before serving, or could not stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The configuration was rejected (every error, one per line).
    #[error("{}\nconfiguration rejected ({} error(s))", .0.join("\n"), .0.len())]
    Config(Vec<String>),
    /// `/dev/urandom` could not be read.
    #[error("reading /dev/urandom for the SYN cookie secret and seed: {0}")]
    Random(std::io::Error),
    /// The EAL did not start.
    #[error("{0}")]
    Eal(PortError),
    /// A DPDK port in a build without DPDK.
    #[error("this build has no DPDK backend (rebuild with the `dpdk` feature)")]
    NoDpdk,
    /// A port did not open.
    #[error("port {name}: {source}")]
    Port {
        /// The port.
        name: String,
        /// Why.
        source: PortError,
    },
    /// The forwarder's configuration (routes over the ports' subnets).
    #[error(transparent)]
    Forwarder(#[from] FibError),
    /// A signal handler could not be installed.
    #[error("{what} handler: {source}")]
    Signal {
        /// Which.
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// More workers than table readers (a defect).
    #[error("worker {0}: no table reader left")]
    NoReader(usize),
    /// A worker thread did not start.
    #[error("worker {id}: {source}")]
    Spawn {
        /// The worker.
        id: usize,
        /// Why.
        source: std::io::Error,
    },
    /// The admin socket could not be served.
    #[error("admin socket {path}: {source}")]
    Admin {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Reads the configuration and returns the plan (the Appliance's, or the default).
pub fn plan(args: &RunArgs) -> Result<RunPlan, RunError> {
    load(args).map(|(plan, _)| plan)
}

/// Loads and builds the whole configuration: the plan (from its Appliance, or the
/// embedded default) with this start's secrets drawn, and the first tables.
pub fn load(args: &RunArgs) -> Result<(RunPlan, Built), RunError> {
    let built = reload::prepare(&args.config).map_err(RunError::Config)?;
    // What the plan asks of this machine (cores, memory, devices), before anything
    // starts: a worker pinned to a core that is not there, or flow tables larger than
    // the memory, would fail half-started.
    crate::compile::check_machine(&built, &crate::machine::Machine::this())
        .map_err(|d| RunError::Config(d.error_lines()))?;
    for d in built.not_served() {
        eprintln!("sluice run: {d}");
    }
    let mut plan = built.plan.clone();
    if let Some(p) = &args.admin_socket {
        plan.admin_socket = p.clone();
    }
    let secret = random_bytes()?;
    plan.splice.cookie_secret = secret[..16].try_into().unwrap_or([0; 16]);
    plan.seed = u64::from_le_bytes(secret[16..].try_into().unwrap_or([0; 8]));
    Ok((plan, built))
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

/// 24 bytes from the OS's random source: the SYN cookie secret (16, shared by the
/// workers so any of them accepts a cookie another made) and the start's seed (8).
fn random_bytes() -> Result<[u8; 24], RunError> {
    use std::io::Read;
    let mut b = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(RunError::Random)?;
    Ok(b)
}

fn open_port(p: &PortPlan, queues: u16, pool: &Pool) -> Result<Opened, RunError> {
    let r = match &p.kind {
        PortKind::Tap { ifname } => port::tap::open(&p.name, ifname, queues, pool),
        PortKind::Pcap { rx, tx } => port::pcap::open(&p.name, rx.as_deref(), tx.as_deref(), pool),
        #[cfg(feature = "dpdk")]
        PortKind::Dpdk { devargs } => port::dpdk::open(&p.name, devargs, queues),
        #[cfg(not(feature = "dpdk"))]
        PortKind::Dpdk { .. } => Err(PortError::NoDpdk(p.name.clone())),
    };
    r.map_err(|source| RunError::Port {
        name: p.name.clone(),
        source,
    })
}

/// Starts the EAL when a DPDK port is planned, then opens every port.
fn open_ports(plan: &RunPlan, pool: &Pool) -> Result<Vec<Opened>, RunError> {
    let has_dpdk = plan
        .ports
        .iter()
        .any(|p| matches!(p.kind, PortKind::Dpdk { .. }));
    if has_dpdk {
        #[cfg(feature = "dpdk")]
        port::dpdk::init(&plan.eal_args()).map_err(RunError::Eal)?;
        #[cfg(not(feature = "dpdk"))]
        return Err(RunError::NoDpdk);
    }
    let queues = plan.cores.len() as u16;
    plan.ports
        .iter()
        .map(|p| open_port(p, queues, pool))
        .collect()
}

/// The stage every worker runs: connection tracking, policy, Maglev and NAT in front of
/// the forwarder, reading the published tables once per burst.
type RunStage = Balancer;

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
            snat_rest_s: plan.snat_rest_s,
            new_flows_per_second_per_source: plan.new_flows_per_second_per_source,
            splice: plan.splice.clone(),
            terminate: TerminateConfig {
                seed: plan.seed.rotate_left(29) ^ worker as u64,
                ..plan.terminate.clone()
            },
            seed: plan.seed ^ (worker as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            ..BalancerConfig::default()
        },
    )
}

/// Workers started, and what the control thread keeps of them.
struct Started {
    handles: Vec<JoinHandle<Counters>>,
    counters: Vec<(usize, usize, Arc<SharedCounters>)>,
    /// Each worker's HTTP rule counters.
    rules: Vec<Arc<RuleCounters>>,
}

/// One pinned worker per core, each polling one queue of every port and reading the
/// tables through its own RCU reader.
fn start_workers(
    plan: &RunPlan,
    opened: Vec<Opened>,
    conf: &Arc<ForwarderConfig>,
    neighbours: &Arc<NeighbourCache>,
    reloader: &Reloader,
    stop: &Arc<AtomicBool>,
) -> Result<Started, RunError> {
    let workers_n = plan.cores.len();
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
    let mut started = Started {
        handles: Vec::new(),
        counters: Vec::new(),
        rules: Vec::new(),
    };
    for (id, queues) in per_worker.into_iter().enumerate() {
        let core = plan.cores[id];
        let tables = reloader.reader().ok_or(RunError::NoReader(id))?;
        let fwd = Forwarder::new(conf.clone(), neighbours.clone());
        let w = Worker::new(
            WorkerConfig {
                id,
                core: Some(core),
                idle,
            },
            queues,
            stage(fwd, tables, id, workers_n, plan),
        )
        .with_redirects(redirects.clone());
        started.counters.push((id, core, w.shared_counters()));
        started.rules.push(w.rule_counters());
        let h = worker::spawn(w, stop.clone()).map_err(|source| RunError::Spawn { id, source })?;
        started.handles.push(h);
    }
    Ok(started)
}

fn run_inner(args: &RunArgs) -> Result<(), RunError> {
    let (plan, built) = load(args)?;
    // The admin socket's path and group are checked before anything starts: a regular
    // file in its place, or an unknown group, stops sluice here.
    let access =
        crate::api::server::Access::resolve(&plan.admin_socket, plan.admin_group.as_deref())
            .map_err(|source| RunError::Admin {
                path: plan.admin_socket.clone(),
                source,
            })?;
    let workers_n = plan.cores.len();
    let pool = Pool::new(plan.pool_buffers());
    let opened = open_ports(&plan, &pool)?;
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
    let conf = Arc::new(
        ForwarderConfig::with_virtual(port_confs, &plan.routes, plan.virtual_addrs.clone())
            .map_err(RunError::Forwarder)?,
    );
    let neighbours = Arc::new(NeighbourCache::new(4096));
    for n in &plan.neighbours {
        if !neighbours.set_static(n.ip, n.mac) {
            return Err(RunError::Config(vec![format!(
                "spec.neighbours: no room for the static neighbour {}",
                n.ip
            )]));
        }
    }
    let ports: Vec<(String, Arc<dyn port::Port>)> = opened
        .iter()
        .map(|o| (o.port.name().to_string(), o.port.clone()))
        .collect();

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).map_err(|source| RunError::Signal {
            what: "signal",
            source,
        })?;
    }
    let sighup = Sighup::install().map_err(|source| RunError::Signal {
        what: "SIGHUP",
        source,
    })?;
    let mut reloader = Reloader::new(args.config.clone(), built, workers_n);
    let started = start_workers(&plan, opened, &conf, &neighbours, &reloader, &stop)?;
    reloader.count_rules_with(started.rules.clone());
    let (requests, control) = mpsc::channel();
    let running = Arc::new(Running {
        ports,
        workers: started.counters,
        rule_counters: started.rules,
        neighbours,
        started: Instant::now(),
        is_default: plan.is_default,
        control: Mutex::new(requests),
        reload: Mutex::new(reloader.status()),
        admin_refused: Default::default(),
    });
    let admin = crate::api::serve(&plan.admin_socket, access, running.clone(), stop.clone())
        .map_err(|source| RunError::Admin {
            path: plan.admin_socket.clone(),
            source,
        })?;
    let mut control = Control {
        args,
        running: &running,
        reloader: &mut reloader,
        watch: FileWatch::new(&args.config),
        sighup,
        requests: control,
    };
    if !args.quiet {
        print_banner(&plan, &control);
    }
    control.serve(&stop);
    let mut total = Counters::new(running.ports.len());
    for h in started.handles {
        match h.join() {
            Ok(c) => total.add(&c),
            Err(_) => eprintln!("sluice: a worker panicked"),
        }
    }
    let _ = admin.join();
    // Every reader went with its worker: all retired generations can be freed now.
    reloader.reclaim();
    if !args.quiet {
        println!("sluice: stopped; {}", running.sample().totals_line());
    }
    Ok(())
}

/// What the control thread works with while the workers run.
struct Control<'a> {
    args: &'a RunArgs,
    running: &'a Running,
    reloader: &'a mut Reloader,
    watch: FileWatch,
    sighup: Sighup,
    requests: mpsc::Receiver<ControlRequest>,
}

impl Control<'_> {
    /// Serves reload requests (admin socket, SIGHUP, file changes), frees old
    /// generations and prints the once-per-second line until `stop` (or `--duration`).
    fn serve(&mut self, stop: &AtomicBool) {
        let deadline = self
            .args
            .duration
            .map(|s| Instant::now() + Duration::from_secs_f64(s.max(0.0)));
        let mut last = self.running.sample();
        let mut last_t = Instant::now();
        let mut last_poll = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            // Waiting for a request is the loop's sleep: a `ctl reload` is served at once.
            let request = self.requests.recv_timeout(Duration::from_millis(100)).ok();
            if deadline.is_some_and(|d| Instant::now() >= d) {
                stop.store(true, Ordering::Relaxed);
                break;
            }
            let outcome = self.reload_if_asked(request, &mut last_poll);
            if let Some(o) = outcome.filter(|o| o.ok && !self.args.quiet) {
                println!("{}", reloaded_line(&o));
            }
            self.reloader.reclaim();
            if let Ok(mut s) = self.running.reload.lock() {
                *s = self.reloader.status();
            }
            if last_t.elapsed() >= Duration::from_secs(1) {
                let now = self.running.sample();
                if !self.args.quiet {
                    println!(
                        "{}",
                        now.summary_line(&last, last_t.elapsed().as_secs_f64())
                    );
                }
                last = now;
                last_t = Instant::now();
            }
        }
    }

    /// One reload if the admin socket, SIGHUP or a changed file asks for it.
    fn reload_if_asked(
        &mut self,
        request: Option<ControlRequest>,
        last_poll: &mut Instant,
    ) -> Option<ReloadOutcome> {
        let mut outcome = None;
        if let Some(ControlRequest::Reload(reply)) = request {
            self.watch.rebase();
            let o = self.reloader.reload(Trigger::Ctl);
            // The client may have given up waiting; the outcome stays in `status`.
            let _ = reply.send(o.clone());
            outcome = Some(o);
        }
        if self.sighup.take() {
            self.watch.rebase();
            outcome = Some(self.reloader.reload(Trigger::Sighup));
        }
        if last_poll.elapsed() >= FILE_POLL {
            *last_poll = Instant::now();
            if let Some(changed) = self.watch.poll() {
                if !self.args.quiet {
                    let names: Vec<String> =
                        changed.iter().map(|p| p.display().to_string()).collect();
                    println!("sluice: changed: {}; reloading", names.join(", "));
                }
                self.watch.rebase();
                outcome = Some(self.reloader.reload(Trigger::File));
            }
        }
        outcome
    }
}

/// The lines printed once the workers run.
fn print_banner(plan: &RunPlan, control: &Control<'_>) {
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
        plan.cores.len(),
        plan.cores,
        addrs.join("; "),
        plan.admin_socket.display()
    );
    let reloader = &control.reloader;
    println!(
        "sluice: tables generation {}: {} listener(s), {} route(s){}",
        reloader.generation(),
        reloader.current().listeners.len(),
        reloader.current().listeners.routes().len(),
        if control.watch.is_empty() {
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
    use crate::plan::{DEFAULT_ADMIN_SOCKET, DEFAULT_FLOWS_PER_WORKER};
    use sluice_dataplane::pipeline::IfAddr;

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
        let (p, built) = load(&args).expect("the demo loads");
        assert!(!p.is_default);
        assert_eq!(p.virtual_addrs.len(), 2);
        assert!(!built.snapshot.listeners.is_empty());
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
        let e = load(&args).unwrap_err().to_string();
        assert!(e.contains(&format!("{}:7:", bad.display())), "{e}");
        assert!(e.contains("configuration rejected"), "{e}");
    }
}
