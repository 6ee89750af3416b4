//! Real kernel clients and servers around sluice's L4 balancer, with sluice in the test
//! process: shared by `tests/kernel_balance.rs` (TAP ports) and `dpdk-case balance`
//! (DPDK `net_tap` ports).
//!
//! ```text
//!  client netns                      sluice (worker threads)                backend netns
//!  10.77.0.1/24 ── TAP ── 10.77.0.2, VIP 10.77.0.10 │ 10.78.0.2 ── TAP ── 10.78.0.11/24
//!  (default via 10.77.0.2)                                                   10.78.0.12/24
//!                                                                   (default via 10.78.0.2)
//! ```
//!
//! - [`manifests`]: the configuration (Gateway API Gateway + TCPRoute with weights over
//!   two Services/Pods, a NetworkPolicy allowing one CIDR to the backends), compiled by
//!   [`sluice_testkit::config`].
//! - [`Balance`]: the dataplane: `Worker<Balancer>` threads over two ports' queues, with
//!   redirect rings, a snapshot publisher and summed counters; stopped and joined on drop.
//! - [`Topology`]: the two namespaces around sluice's devices (kernel addresses, routes).
//! - [`Py`]: a python3 process in a namespace, talked to in lines: the
//!   [`IDENTIFY_SERVER`] and the [`CLIENT_AGENT`] (see their docstrings for the protocol),
//!   and the [`ARP_SPOOF`]er.
//!
//! Every guard cleans up on drop, also when a test panics.

use crate::sys::{ChildGuard, Netns};
use sluice_dataplane::balancer::{Balancer, BalancerConfig};
use sluice_dataplane::pipeline::{Forwarder, ForwarderConfig, IfAddr, NeighbourCache, PortConf};
use sluice_dataplane::port::{Opened, Port};
use sluice_dataplane::rcu::Publisher;
use sluice_dataplane::stats::{Counters, SharedCounters};
use sluice_dataplane::tables::snapshot::Snapshot;
use sluice_dataplane::worker::{self, Idle, Redirects, Worker, WorkerConfig};
use sluice_testkit::config;
use std::io::{BufRead, BufReader, Write};
use std::net::IpAddr;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The client's address (kernel side of the outside port).
pub const CLIENT: &str = "10.77.0.1";
/// sluice's address on the outside port (the client's default gateway).
pub const OUTSIDE: &str = "10.77.0.2";
/// The virtual address of the listener.
pub const VIP: &str = "10.77.0.10";
/// sluice's address on the inside port: the SNAT address backends see.
pub const INSIDE: &str = "10.78.0.2";
/// Backend addresses (Pods `a-0` and `b-0`), both in the backend namespace.
pub const BACKENDS: [&str; 2] = ["10.78.0.11", "10.78.0.12"];
/// The listener's and the backends' TCP port.
pub const PORT: u16 = 7000;

/// The TCP identify/echo server (python3; protocol in its docstring).
pub const IDENTIFY_SERVER: &str = include_str!("py/identify_server.py");
/// The client agent (python3; commands in its docstring).
pub const CLIENT_AGENT: &str = include_str!("py/client_agent.py");
/// The ARP spoofer (python3; arguments in its docstring).
pub const ARP_SPOOF: &str = include_str!("py/arp_spoof.py");

fn ip(s: &str) -> IpAddr {
    s.parse().expect("literal address")
}

/// The manifests: Gateway on [`VIP`]:[`PORT`], a TCPRoute splitting `weights` over
/// Services `a` (10.78.0.11) and `b` (10.78.0.12), and a NetworkPolicy that lets only
/// `allow_from` (a CIDR) reach the backends on TCP [`PORT`].
pub fn manifests(weights: (u32, u32), allow_from: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{name: kb}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: kb}}
spec:
  gatewayClassName: sluice
  addresses: [{{type: IPAddress, value: {VIP}}}]
  listeners: [{{name: echo, port: {PORT}, protocol: TCP}}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {{name: echo, namespace: kb}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - backendRefs:
    - {{name: a, port: {PORT}, weight: {wa}}}
    - {{name: b, port: {PORT}, weight: {wb}}}
---
apiVersion: v1
kind: Service
metadata: {{name: a, namespace: kb}}
spec: {{selector: {{app: a}}, ports: [{{port: {PORT}}}]}}
---
apiVersion: v1
kind: Service
metadata: {{name: b, namespace: kb}}
spec: {{selector: {{app: b}}, ports: [{{port: {PORT}}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: a-0, namespace: kb, labels: {{app: a}}}}
status: {{podIP: {a}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: b-0, namespace: kb, labels: {{app: b}}}}
status: {{podIP: {b}}}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {{name: clients-only, namespace: kb}}
spec:
  podSelector: {{}}
  policyTypes: [Ingress]
  ingress:
  - from: [{{ipBlock: {{cidr: "{allow_from}"}}}}]
    ports: [{{port: {PORT}}}]
"#,
        wa = weights.0,
        wb = weights.1,
        a = BACKENDS[0],
        b = BACKENDS[1],
    )
}

/// Polls `f` every 20 ms until it holds; panics with `what` after `limit`.
pub fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// sluice's balancer on worker threads over an outside (client) and an inside (backend)
/// port, each with one queue per worker. Stops and joins the workers on drop.
pub struct Balance {
    /// Publishes new snapshots to the workers.
    pub publisher: Publisher<Snapshot>,
    /// The neighbour cache the workers share.
    pub neighbours: Arc<NeighbourCache>,
    stop: Arc<AtomicBool>,
    handles: Vec<JoinHandle<Counters>>,
    shared: Vec<Arc<SharedCounters>>,
    ports: Vec<Arc<dyn Port>>,
}

impl Balance {
    /// Starts `workers` balancer workers over `outside` (sluice is [`OUTSIDE`] there and
    /// answers for [`VIP`]) and `inside` (sluice is [`INSIDE`]), serving `snapshot`.
    /// Both ports need exactly `workers` queues.
    pub fn start(outside: Opened, inside: Opened, workers: usize, snapshot: Snapshot) -> Balance {
        let cfg = BalancerConfig {
            flow_capacity: 16 * 1024,
            ..BalancerConfig::default()
        };
        Balance::start_with(outside, inside, workers, snapshot, cfg)
    }

    /// [`Balance::start`] with the balancer settings `cfg` (its `worker` and `workers`
    /// are set per worker).
    pub fn start_with(
        outside: Opened,
        inside: Opened,
        workers: usize,
        snapshot: Snapshot,
        cfg: BalancerConfig,
    ) -> Balance {
        assert_eq!(outside.queues.len(), workers, "outside queues");
        assert_eq!(inside.queues.len(), workers, "inside queues");
        let port = |name: &str, p: &Opened, addr: &str| PortConf {
            name: name.into(),
            mac: p.port.mac(),
            addrs: vec![IfAddr {
                addr: ip(addr),
                prefix_len: 24,
            }],
        };
        let conf = Arc::new(
            ForwarderConfig::with_virtual(
                vec![
                    port("outside", &outside, OUTSIDE),
                    port("inside", &inside, INSIDE),
                ],
                &[],
                vec![ip(VIP)],
            )
            .expect("forwarder config"),
        );
        let neigh = Arc::new(NeighbourCache::new(256));
        let publisher = Publisher::new(snapshot, workers);
        let redirects = Redirects::new(workers, 1024);
        let stop = Arc::new(AtomicBool::new(false));
        let ports = vec![outside.port.clone(), inside.port.clone()];
        let (mut out_q, mut in_q) = (outside.queues.into_iter(), inside.queues.into_iter());
        let mut handles = Vec::new();
        let mut shared = Vec::new();
        for w in 0..workers {
            let stage = Balancer::new(
                Forwarder::new(conf.clone(), neigh.clone()),
                publisher.reader().expect("a reader per worker"),
                BalancerConfig {
                    worker: w,
                    workers,
                    ..cfg.clone()
                },
            );
            let queues = vec![
                out_q.next().expect("outside queue"),
                in_q.next().expect("inside queue"),
            ];
            let worker = Worker::new(
                WorkerConfig {
                    id: w,
                    core: None,
                    idle: Idle::Sleep {
                        after: 100,
                        max: Duration::from_micros(200),
                    },
                },
                queues,
                stage,
            )
            .with_redirects(redirects.clone());
            shared.push(worker.shared_counters());
            handles.push(worker::spawn(worker, stop.clone()).expect("spawn worker"));
        }
        Balance {
            publisher,
            neighbours: neigh,
            stop,
            handles,
            shared,
            ports,
        }
    }

    /// The counters the workers published last, summed.
    pub fn counters(&self) -> Counters {
        let mut c = Counters::new(2);
        for s in &self.shared {
            c.add(&s.snapshot());
        }
        c
    }

    /// Waits until the summed published counters satisfy `f` (counters are published
    /// every few hundred poll rounds); returns them.
    pub fn wait_counters(&self, what: &str, f: impl Fn(&Counters) -> bool) -> Counters {
        let mut c = self.counters();
        wait_for(what, Duration::from_secs(5), || {
            c = self.counters();
            f(&c)
        });
        c
    }

    /// Each worker's published counters.
    pub fn worker_counters(&self) -> Vec<Counters> {
        self.shared.iter().map(|s| s.snapshot()).collect()
    }

    /// What a control plane does on reload: compiles `text` and publishes it, or rejects
    /// it whole (returning the errors) and leaves the running tables alone.
    pub fn reload(&mut self, text: &str) -> Result<u64, Vec<String>> {
        let snap = config::try_snapshot("kernel.yaml", text)?;
        Ok(self.publish(snap))
    }

    /// Publishes `snapshot` and frees what no worker can still hold; returns the new
    /// generation.
    pub fn publish(&mut self, snapshot: Snapshot) -> u64 {
        let g = self.publisher.publish(snapshot);
        self.publisher.reclaim();
        g
    }

    /// Stops and joins the workers (their queues and buffers are dropped), then closes
    /// the ports; returns the workers' final counters, summed. Every retired snapshot is
    /// freed by then.
    pub fn finish(mut self) -> Counters {
        let c = self.join();
        self.ports.clear();
        assert_eq!(
            self.publisher.reclaim(),
            0,
            "every retired snapshot freed once the workers are gone"
        );
        c
    }

    fn join(&mut self) -> Counters {
        self.stop.store(true, Ordering::Relaxed);
        let mut total = Counters::new(2);
        for h in self.handles.drain(..) {
            match h.join() {
                Ok(c) => total.add(&c),
                Err(_) if std::thread::panicking() => {}
                Err(e) => std::panic::resume_unwind(e),
            }
        }
        total
    }
}

impl Drop for Balance {
    fn drop(&mut self) {
        let _ = self.join();
    }
}

/// The client and backend namespaces around sluice's two devices. Deletes the
/// namespaces on drop.
#[derive(Debug)]
pub struct Topology {
    /// Holds the client ([`CLIENT`]).
    pub client: Netns,
    /// Holds the backends ([`BACKENDS`]).
    pub backend: Netns,
    client_if: String,
    backend_if: String,
}

impl Topology {
    /// Moves sluice's devices (kernel side of its TAP ports, already open) into fresh
    /// namespaces and configures them: `client_if` gets [`CLIENT`]/24 and a default route
    /// via [`OUTSIDE`], `backend_if` the [`BACKENDS`]/24 and a default route via
    /// [`INSIDE`]. Then checks that sluice answers each of them (ping), which also makes
    /// it learn their MACs.
    pub fn new(client_if: &str, backend_if: &str) -> Topology {
        let t = Topology {
            client: Netns::new("kbc"),
            backend: Netns::new("kbb"),
            client_if: client_if.into(),
            backend_if: backend_if.into(),
        };
        for (ns, dev, addrs, gw) in [
            (&t.client, client_if, &[CLIENT][..], OUTSIDE),
            (&t.backend, backend_if, &BACKENDS[..], INSIDE),
        ] {
            crate::sys::must("ip", &["link", "set", dev, "netns", &ns.name]);
            for a in addrs {
                ns.exec(&["ip", "addr", "add", &format!("{a}/24"), "dev", dev]);
            }
            ns.exec(&["ip", "link", "set", dev, "up"]);
            ns.exec(&["ip", "route", "add", "default", "via", gw]);
            for a in addrs {
                let out = ns.try_exec(&["ping", "-c", "1", "-W", "2", "-I", a, gw]);
                assert!(
                    out.status.success(),
                    "ping {gw} from {a}: {}",
                    String::from_utf8_lossy(&out.stdout)
                );
            }
        }
        t
    }

    /// Moves the devices back to the initial namespace (a DPDK `net_tap` port deletes
    /// its interface by name when it closes).
    pub fn give_back(&self) {
        let _ = self
            .client
            .try_exec(&["ip", "link", "set", &self.client_if, "netns", "1"]);
        let _ = self
            .backend
            .try_exec(&["ip", "link", "set", &self.backend_if, "netns", "1"]);
    }

    /// Starts the [`IDENTIFY_SERVER`] on every backend address, port [`PORT`].
    pub fn start_servers(&self) -> Py {
        let port = PORT.to_string();
        let mut args = vec![port.as_str()];
        args.extend_from_slice(&BACKENDS);
        let mut py = Py::start(&self.backend, IDENTIFY_SERVER, &args);
        let line = py.line(Duration::from_secs(10));
        assert_eq!(line, "ready", "server start");
        py
    }

    /// Starts the [`CLIENT_AGENT`] in the client namespace, aimed at [`VIP`]:[`PORT`].
    pub fn start_client(&self) -> Py {
        Py::start(
            &self.client,
            CLIENT_AGENT,
            &[CLIENT, VIP, &PORT.to_string()],
        )
    }
}

/// A python3 script running in a namespace, driven by lines on stdin and answering in
/// lines on stdout (read on a thread, so every wait has a deadline). Killed on drop.
pub struct Py {
    child: ChildGuard,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Py {
    /// Runs `python3 -u -c script args...` in `ns`.
    pub fn start(ns: &Netns, script: &str, args: &[&str]) -> Py {
        let mut child = ChildGuard(
            Command::new("ip")
                .args(["netns", "exec", &ns.name, "python3", "-u", "-c", script])
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("start python3"),
        );
        let stdin = child.0.stdin.take();
        let stdout = child.0.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Py {
            child,
            stdin,
            lines,
        }
    }

    /// The next line of output; panics after `limit` or if the script exited.
    pub fn line(&mut self, limit: Duration) -> String {
        match self.lines.recv_timeout(limit) {
            Ok(l) => l,
            Err(e) => {
                let status = self.child.0.try_wait().ok().flatten();
                panic!("no answer from python3 within {limit:?} ({e}); exit status {status:?}")
            }
        }
    }

    /// Sends one command and parses the JSON line that answers it.
    pub fn cmd(&mut self, cmd: &str, limit: Duration) -> serde_json::Value {
        self.send(cmd);
        self.answer(cmd, limit)
    }

    /// Sends one command without waiting for its answer ([`Py::answer`] reads it).
    pub fn send(&mut self, cmd: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{cmd}").expect("write to python3");
        stdin.flush().expect("flush to python3");
    }

    /// The JSON answer to `cmd`, sent before with [`Py::send`].
    pub fn answer(&mut self, cmd: &str, limit: Duration) -> serde_json::Value {
        let l = self.line(limit);
        serde_json::from_str(&l).unwrap_or_else(|e| panic!("{cmd}: bad answer {l:?}: {e}"))
    }
}

impl Drop for Py {
    fn drop(&mut self) {
        // Closing stdin ends both scripts; the guard kills whatever is left.
        self.stdin.take();
    }
}

/// A count from an agent answer (`v[key]`, or `v[key][sub]`), 0 when absent.
pub fn count(v: &serde_json::Value, key: &str, sub: Option<&str>) -> u64 {
    let x = &v[key];
    match sub {
        Some(s) => x[s].as_u64().unwrap_or(0),
        None => x.as_u64().unwrap_or(0),
    }
}

/// Runs `n` one-shot connections through the agent (8 at a time, `timeout_s` per
/// socket operation) and checks that every one was answered, that the backends saw only
/// the SNAT address [`INSIDE`], and that backend `a`'s share is `share_a` ± `tolerance`.
/// Returns the agent's answer.
pub fn check_burst(agent: &mut Py, n: u64, share_a: f64, tolerance: f64) -> serde_json::Value {
    let v = agent.cmd(&format!("burst {n} 8 2"), Duration::from_secs(120));
    assert_eq!(count(&v, "ok", None), n, "every connection answered: {v}");
    assert_eq!(
        count(&v, "peers", Some(INSIDE)),
        n,
        "backends saw the SNAT address only: {v}"
    );
    let a = count(&v, "backends", Some(BACKENDS[0])) as f64 / n as f64;
    assert!(
        (a - share_a).abs() <= tolerance,
        "share of a {a:.3} not within {share_a} ± {tolerance}: {v}"
    );
    v
}

/// Everything around one balancer: the dataplane, the namespaces, the servers and the
/// client agent. Dropping it cleans everything up; [`Rig::finish`] does so in order and
/// returns the final counters.
pub struct Rig {
    /// The client agent ([`CLIENT_AGENT`]).
    pub agent: Py,
    /// The backend servers ([`IDENTIFY_SERVER`]).
    pub servers: Py,
    /// The namespaces.
    pub topo: Topology,
    /// The dataplane.
    pub balance: Balance,
}

impl Rig {
    /// Starts the balancer over `outside` and `inside` (one worker per queue) serving
    /// `config`, moves their kernel devices `ifnames` (outside, inside) into the
    /// namespaces, and starts the servers and the client agent.
    pub fn start(outside: Opened, inside: Opened, ifnames: (&str, &str), config: &str) -> Rig {
        let workers = outside.queues.len();
        let balance = Balance::start(
            outside,
            inside,
            workers,
            sluice_testkit::config::snapshot("kernel.yaml", config),
        );
        let topo = Topology::new(ifnames.0, ifnames.1);
        let servers = topo.start_servers();
        let agent = topo.start_client();
        Rig {
            agent,
            servers,
            topo,
            balance,
        }
    }

    /// Ends the scripts, gives the devices back to the initial namespace, stops the
    /// workers and closes the ports; returns the workers' final counters.
    pub fn finish(self) -> Counters {
        let Rig {
            agent,
            servers,
            topo,
            balance,
        } = self;
        drop(agent);
        drop(servers);
        topo.give_back();
        let c = balance.finish();
        drop(topo);
        c
    }
}
