//! Delayed binding in simulation, shared by the `sim_splice*` tests: the manifests, the
//! simulated appliance (a client host on `outside`, a backend host on `inside`, sluice's
//! `Balancer` in between), echo backends, and a runner of smoltcp clients.
//!
//! Addresses: clients 10.77.0.1 / fd77::1; virtual addresses 10.77.0.10 / fd77::10;
//! backends 10.78.0.11 (`a`, dual-stack with fd78::11), .12 (`b`), .13 (`c`); nobody
//! answers for .98 and .99.
//!
//! Listeners ([`CONFIG`]):
//!
//! | port | kind | names -> backends |
//! |---|---|---|
//! | 443 | TLS passthrough (Gateway API) | `a.example.test` -> a:7000, `b.example.test` -> b:7000, `*.wild.test` -> c:7000, `failover.example.test` -> a:7001 + b:7001, `silent.example.test` -> .98/.99:7000, `sink.example.test` -> b:7002 + c:7002 |
//! | 80 | HTTP (Istio), per request (the proxy: path rules) | `www.example.test`: `/api/` -> a 3 : b 1, else -> c |
//! | 81 | HTTP (Istio), Host only (delayed binding) | `plain.example.test` -> a 3 : b 1 |
//! | 8080 | HTTP, `httpsRedirect` (Istio) | any host -> 301 |

use crate::fixtures::{cidr, links, SIM_APPLIANCE};
use crate::sim::{Faults, Rng, Sim};
use sluice_dataplane::balancer::{Balancer, BalancerConfig};
use sluice_dataplane::rcu::Publisher;
use sluice_dataplane::stats::{DropReason, Event};
use sluice_dataplane::tables::snapshot::Snapshot;
use sluice_testkit::config;
use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::socket::tcp;
use smoltcp::wire::{IpAddress, IpListenEndpoint};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

pub use crate::fixtures::ip;

/// A socket address from text.
pub fn sa(s: &str) -> SocketAddr {
    s.parse().expect("socket address")
}

/// The listeners and routes (see the module docs), after [`SIM_APPLIANCE`];
/// [`INVENTORY`] holds the workloads.
pub const CONFIG: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: sim}
spec:
  gatewayClassName: sluice
  listeners:
  - {name: tls, port: 443, protocol: TLS, tls: {mode: Passthrough}}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {name: a, namespace: sim}
spec:
  parentRefs: [{name: gw, sectionName: tls}]
  hostnames: [a.example.test]
  rules: [{backendRefs: [{name: a, port: 7000}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {name: b, namespace: sim}
spec:
  parentRefs: [{name: gw, sectionName: tls}]
  hostnames: [b.example.test]
  rules: [{backendRefs: [{name: b, port: 7000}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {name: c, namespace: sim}
spec:
  parentRefs: [{name: gw, sectionName: tls}]
  hostnames: ["*.wild.test"]
  rules: [{backendRefs: [{name: c, port: 7000}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {name: failover, namespace: sim}
spec:
  parentRefs: [{name: gw, sectionName: tls}]
  hostnames: [failover.example.test]
  rules: [{backendRefs: [{name: pair, port: 7001}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {name: silent, namespace: sim}
spec:
  parentRefs: [{name: gw, sectionName: tls}]
  hostnames: [silent.example.test]
  rules: [{backendRefs: [{name: ghost, port: 7000}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {name: sink, namespace: sim}
spec:
  parentRefs: [{name: gw, sectionName: tls}]
  hostnames: [sink.example.test]
  rules: [{backendRefs: [{name: sink, port: 7002}]}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: web, namespace: sim}
spec:
  servers:
  - port: {number: 80, name: http, protocol: HTTP}
    hosts: ["*.example.test"]
  - port: {number: 8080, name: http-redirect, protocol: HTTP}
    hosts: ["*"]
    tls: {httpsRedirect: true}
  - port: {number: 81, name: http-host, protocol: HTTP}
    hosts: [plain.example.test]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: plain, namespace: sim}
spec:
  hosts: [plain.example.test]
  gateways: [web]
  http:
  - route:
    - destination: {host: a, port: {number: 7000}}
      weight: 75
    - destination: {host: b, port: {number: 7000}}
      weight: 25
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: www, namespace: sim}
spec:
  hosts: [www.example.test]
  gateways: [web]
  http:
  - match: [{uri: {prefix: /api/}}]
    route:
    - destination: {host: a, port: {number: 7000}}
      weight: 75
    - destination: {host: b, port: {number: 7000}}
      weight: 25
  - route:
    - destination: {host: c, port: {number: 7000}}
"#;

/// Services and pods: a (10.78.0.11 and fd78::11), b (.12), c (.13) on 7000; `pair` (a
/// and b on 7001); `sink` (b and c on 7002); `ghost` (.98 and .99, nobody there).
pub const INVENTORY: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: a, namespace: sim}
spec: {selector: {app: a}, ports: [{name: tcp, port: 7000}]}
---
apiVersion: v1
kind: Service
metadata: {name: b, namespace: sim}
spec: {selector: {app: b}, ports: [{name: tcp, port: 7000}]}
---
apiVersion: v1
kind: Service
metadata: {name: c, namespace: sim}
spec: {selector: {app: c}, ports: [{name: tcp, port: 7000}]}
---
apiVersion: v1
kind: Service
metadata: {name: pair, namespace: sim}
spec: {selector: {pair: "yes"}, ports: [{name: tcp, port: 7001}]}
---
apiVersion: v1
kind: Service
metadata: {name: sink, namespace: sim}
spec: {selector: {sink: "yes"}, ports: [{name: tcp, port: 7002}]}
---
apiVersion: v1
kind: Service
metadata: {name: ghost, namespace: sim}
spec: {selector: {app: ghost}, ports: [{name: tcp, port: 7000}]}
---
apiVersion: v1
kind: Pod
metadata: {name: a-0, namespace: sim, labels: {app: a, pair: "yes"}}
spec: {containers: [{name: s, ports: [{containerPort: 7000}, {containerPort: 7001}]}]}
status: {podIP: 10.78.0.11, podIPs: [{ip: 10.78.0.11}, {ip: "fd78::11"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: b-0, namespace: sim, labels: {app: b, pair: "yes", sink: "yes"}}
spec: {containers: [{name: s, ports: [{containerPort: 7000}, {containerPort: 7001}, {containerPort: 7002}]}]}
status: {podIP: 10.78.0.12}
---
apiVersion: v1
kind: Pod
metadata: {name: c-0, namespace: sim, labels: {app: c, sink: "yes"}}
spec: {containers: [{name: s, ports: [{containerPort: 7000}, {containerPort: 7002}]}]}
status: {podIP: 10.78.0.13}
---
apiVersion: v1
kind: Pod
metadata: {name: ghost-0, namespace: sim, labels: {app: ghost}}
spec: {containers: [{name: s, ports: [{containerPort: 7000}]}]}
status: {podIP: 10.78.0.98}
---
apiVersion: v1
kind: Pod
metadata: {name: ghost-1, namespace: sim, labels: {app: ghost}}
spec: {containers: [{name: s, ports: [{containerPort: 7000}]}]}
status: {podIP: 10.78.0.99}
"#;

/// The virtual address the tests connect to.
pub const VIP: &str = "10.77.0.10";
/// The IPv6 virtual address.
pub const VIP6: &str = "fd77::10";
/// The client host's address.
pub const CLIENT: &str = "10.77.0.1";

/// The compiled tables of [`SIM_APPLIANCE`], [`CONFIG`] and [`INVENTORY`].
pub fn snapshot() -> Snapshot {
    config::snapshot(
        "sim.yaml",
        &format!("{SIM_APPLIANCE}\n---\n{CONFIG}\n---\n{INVENTORY}"),
    )
}

/// The balancer settings the tests start from (small flow table, `seed`).
pub fn balancer_config(seed: u64) -> BalancerConfig {
    BalancerConfig {
        flow_capacity: 4096,
        seed,
        ..BalancerConfig::default()
    }
}

/// The simulated appliance: host 0 is the client (`outside`), host 1 the backends
/// (`inside`); `faults` on both links, in both directions.
pub fn sim(faults: Faults, cfg: BalancerConfig) -> (Sim<Balancer>, Publisher<Snapshot>) {
    sim_links(faults, faults, cfg)
}

/// [`sim`] with faults on the `outside` link (client side) and on the `inside` one
/// (backend side), each in both directions.
pub fn sim_links(
    outside: Faults,
    inside: Faults,
    cfg: BalancerConfig,
) -> (Sim<Balancer>, Publisher<Snapshot>) {
    sim_snapshot(snapshot(), outside, inside, cfg)
}

/// [`sim_links`] over the tables `snap` (in [`SIM_APPLIANCE`]'s addressing).
pub fn sim_snapshot(
    snap: Snapshot,
    outside: Faults,
    inside: Faults,
    cfg: BalancerConfig,
) -> (Sim<Balancer>, Publisher<Snapshot>) {
    let publisher = Publisher::new(snap, 1);
    let reader = publisher.reader().expect("reader");
    let hosts = vec![
        vec![cidr(CLIENT, 24), cidr("fd77::1", 64)],
        vec![
            cidr("10.78.0.11", 24),
            cidr("10.78.0.12", 24),
            cidr("10.78.0.13", 24),
            cidr("fd78::11", 64),
        ],
    ];
    let vips = [ip(VIP), ip(VIP6)];
    let seed = cfg.seed;
    let s = Sim::build(&links(outside, inside), &hosts, &[], &vips, seed, |fw| {
        Balancer::new(fw, reader, cfg)
    });
    (s, publisher)
}

/// A TCP socket with `rx` and `tx` bytes of buffer.
pub fn socket(rx: usize, tx: usize) -> tcp::Socket<'static> {
    tcp::Socket::new(
        tcp::SocketBuffer::new(vec![0; rx]),
        tcp::SocketBuffer::new(vec![0; tx]),
    )
}

/// Echo servers on the backend host, counting connections per local address.
pub struct EchoBackends {
    socks: Vec<(SocketHandle, IpListenEndpoint, bool)>,
    /// Connections seen established, per local address.
    pub hits: HashMap<IpAddress, usize>,
    /// Bytes echoed.
    pub echoed: usize,
}

impl EchoBackends {
    /// No servers yet.
    pub fn new() -> EchoBackends {
        EchoBackends {
            socks: Vec::new(),
            hits: HashMap::new(),
            echoed: 0,
        }
    }

    /// `n` echo servers listening on `ep` (port, and address if given), each with
    /// `buf` bytes of receive and send buffer.
    pub fn listen(
        mut self,
        sockets: &mut SocketSet<'static>,
        ep: impl Into<IpListenEndpoint>,
        n: usize,
        buf: usize,
    ) -> EchoBackends {
        let ep = ep.into();
        for _ in 0..n {
            let mut s = socket(buf, buf);
            s.listen(ep).expect("listen");
            self.socks.push((sockets.add(s), ep, false));
        }
        self
    }

    /// Echoes what arrived; listens again on closed sockets.
    pub fn step(&mut self, sockets: &mut SocketSet<'static>) {
        let mut buf = [0u8; 16 * 1024];
        for (h, ep, counted) in &mut self.socks {
            let s = sockets.get_mut::<tcp::Socket>(*h);
            if !s.is_open() {
                let _ = s.listen(*ep);
                *counted = false;
                continue;
            }
            if !*counted && s.state() == tcp::State::Established {
                if let Some(l) = s.local_endpoint() {
                    *self.hits.entry(l.addr).or_default() += 1;
                    *counted = true;
                }
            }
            while s.can_recv() && s.send_capacity() - s.send_queue() > 0 {
                let room = (s.send_capacity() - s.send_queue()).min(buf.len());
                let n = s.recv_slice(&mut buf[..room]).unwrap_or(0);
                if n == 0 {
                    break;
                }
                let sent = s.send_slice(&buf[..n]).unwrap_or(0);
                debug_assert_eq!(sent, n);
                self.echoed += n;
            }
            if !s.may_recv() && s.send_queue() == 0 && s.state() == tcp::State::CloseWait {
                s.close();
            }
        }
    }

    /// Servers whose connection is established now.
    pub fn established(&self, sockets: &SocketSet<'static>) -> usize {
        self.socks
            .iter()
            .filter(|(h, _, _)| sockets.get::<tcp::Socket>(*h).state() == tcp::State::Established)
            .count()
    }

    /// Connections seen at address `a`.
    pub fn hits(&self, a: &str) -> usize {
        *self.hits.get(&Sim::addr(ip(a))).unwrap_or(&0)
    }
}

impl Default for EchoBackends {
    fn default() -> Self {
        EchoBackends::new()
    }
}

/// How the connections of a [`run`] ended.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Everything sent came back byte for byte, then a clean close.
    pub echoed: usize,
    /// Closed (reset) without any byte back.
    pub reset: usize,
    /// Anything else (partial, wrong bytes, still open at the deadline).
    pub other: usize,
}

struct Conn {
    h: SocketHandle,
    data: Vec<u8>,
    sent: usize,
    got: Vec<u8>,
    done: bool,
}

/// Runs one smoltcp connection per entry of `firsts` (its first bytes, followed by
/// `extra` random bytes) to `vip:port`, `parallel` at a time, from local ports 30001 on;
/// each sends everything, waits for all of it to come back, and closes. Gives up after a
/// simulated ten minutes.
#[allow(clippy::too_many_arguments)]
pub fn run(
    sim: &mut Sim<Balancer>,
    backends: &mut EchoBackends,
    vip: IpAddr,
    port: u16,
    firsts: &[Vec<u8>],
    extra: usize,
    parallel: usize,
    rng: &mut Rng,
) -> Outcome {
    run_with(
        sim,
        backends,
        (vip, port),
        firsts,
        extra,
        parallel,
        rng,
        &mut |_| {},
    )
}

/// [`run`], calling `each_ms` after every simulated millisecond.
#[allow(clippy::too_many_arguments)]
pub fn run_with(
    sim: &mut Sim<Balancer>,
    backends: &mut EchoBackends,
    (vip, port): (IpAddr, u16),
    firsts: &[Vec<u8>],
    extra: usize,
    parallel: usize,
    rng: &mut Rng,
    each_ms: &mut dyn FnMut(&mut Sim<Balancer>),
) -> Outcome {
    let mut out = Outcome::default();
    let mut next = 0;
    let mut live: Vec<Conn> = Vec::new();
    let mut local_port = 30_000u16;
    let deadline = sim.now_ms + 600_000;
    while (next < firsts.len() || !live.is_empty()) && sim.now_ms < deadline {
        while next < firsts.len() && live.len() < parallel {
            let mut data = firsts[next].clone();
            data.extend((0..extra).map(|_| rng.next_u64() as u8));
            next += 1;
            let mut s = socket(64 * 1024, 64 * 1024);
            local_port = local_port.wrapping_add(1).max(30_000);
            let host = &mut sim.hosts[0];
            s.connect(host.iface.context(), (Sim::addr(vip), port), local_port)
                .expect("connect");
            live.push(Conn {
                h: host.sockets.add(s),
                data,
                sent: 0,
                got: Vec::new(),
                done: false,
            });
        }
        sim.step();
        backends.step(&mut sim.hosts[1].sockets);
        each_ms(sim);
        let host = &mut sim.hosts[0];
        for c in &mut live {
            let s = host.sockets.get_mut::<tcp::Socket>(c.h);
            if s.may_send() && c.sent < c.data.len() {
                c.sent += s.send_slice(&c.data[c.sent..]).unwrap_or(0);
            }
            let mut buf = [0u8; 8192];
            while s.can_recv() {
                match s.recv_slice(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => c.got.extend_from_slice(&buf[..n]),
                }
            }
            if c.got.len() >= c.data.len() && s.state() == tcp::State::Established {
                s.close();
            }
            if matches!(s.state(), tcp::State::Closed | tcp::State::TimeWait) {
                if c.got == c.data {
                    out.echoed += 1;
                } else if c.got.is_empty() {
                    out.reset += 1;
                } else {
                    eprintln!("odd: got {} of {}", c.got.len(), c.data.len());
                    out.other += 1;
                }
                c.done = true;
            }
        }
        live.retain(|c| {
            if c.done {
                host.sockets.remove(c.h);
            }
            !c.done
        });
    }
    out.other += live.len();
    out
}

/// Prints every non-zero counter of the worker (to stderr; shown when a test fails).
pub fn print_counters(sim: &Sim<Balancer>) {
    let c = sim.worker.counters();
    for r in DropReason::ALL {
        if c.drops_of(*r) > 0 {
            eprintln!("drop {}: {}", r.name(), c.drops_of(*r));
        }
    }
    for e in Event::ALL {
        if c.events_of(*e) > 0 {
            eprintln!("event {}: {}", e.name(), c.events_of(*e));
        }
    }
}

/// Flows in sluice's table and embryos open.
pub fn state(sim: &Sim<Balancer>) -> (usize, usize) {
    let b = sim.worker.stage();
    (b.flows().len(), b.embryos())
}

/// First local port of [`RawClient`](crate::raw::RawClient)s on the client host: TCP to
/// ports from here to [`RAW_PORTS_END`] is diverted from the host's stack.
pub const RAW_PORTS: u16 = 40_000;
/// End (exclusive) of the raw clients' ports.
pub const RAW_PORTS_END: u16 = 41_000;

/// A simulation with its tables' publisher and echo backends, stepped together; frames to
/// the raw clients' ports are diverted on the client host.
pub struct World {
    /// The simulation.
    pub sim: Sim<Balancer>,
    /// Keeps the tables published.
    pub publisher: Publisher<Snapshot>,
    /// Echo servers on the backend host.
    pub backends: EchoBackends,
}

impl World {
    /// A world without faults whose backends echo on port 7000 (any address), `n`
    /// servers with 64 KiB buffers.
    pub fn new(cfg: BalancerConfig, n: usize) -> World {
        World::with_faults(Faults::NONE, cfg, n)
    }

    /// As [`World::new`] with `faults` on every link.
    pub fn with_faults(faults: Faults, cfg: BalancerConfig, n: usize) -> World {
        let (mut sim, publisher) = sim(faults, cfg);
        let backends = EchoBackends::new().listen(&mut sim.hosts[1].sockets, 7000, n, 64 * 1024);
        sim.hosts[0].dev.set_divert(Some(Box::new(|f: &mut [u8]| {
            !crate::raw::parse(f)
                .is_some_and(|s| (RAW_PORTS..RAW_PORTS_END).contains(&s.dst.port()))
        })));
        World {
            sim,
            publisher,
            backends,
        }
    }

    /// One millisecond: the simulation, then the backends.
    pub fn step(&mut self) {
        self.sim.step();
        self.backends.step(&mut self.sim.hosts[1].sockets);
    }

    /// `n` milliseconds.
    pub fn steps(&mut self, n: u64) {
        for _ in 0..n {
            self.step();
        }
    }

    /// [`run`] in this world: connections from the client host to `vip` (an address
    /// literal) and `port`, each sending its first bytes of `firsts` and `extra` more.
    pub fn run(
        &mut self,
        vip: &str,
        port: u16,
        firsts: &[Vec<u8>],
        extra: usize,
        parallel: usize,
        rng: &mut Rng,
    ) -> Outcome {
        run(
            &mut self.sim,
            &mut self.backends,
            ip(vip),
            port,
            firsts,
            extra,
            parallel,
            rng,
        )
    }
}

/// Where `got` first differs from `want` (for assertions that must not print megabytes):
/// `None` when they are equal.
pub fn first_difference(got: &[u8], want: &[u8]) -> Option<String> {
    if got == want {
        return None;
    }
    let at = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    Some(format!(
        "{} bytes where {} were expected; first difference at {at}",
        got.len(),
        want.len()
    ))
}
