//! Delayed binding end to end in simulation: smoltcp clients and backends on in-memory
//! wires, sluice's `Balancer` in between answering handshakes with SYN cookies, reading
//! ClientHellos and HTTP heads, connecting the backend the name routes to and splicing.
//! Every connection sends its first bytes and more, and must get all of it echoed back
//! byte for byte by the backend its name routes to.

use sluice_dataplane::pipeline::balancer::{Balancer, BalancerConfig};
use sluice_dataplane::pipeline::IfAddr;
use sluice_dataplane::rcu::Publisher;
use sluice_dataplane::stats::{DropReason, Event};
use sluice_dataplane::tables::snapshot::Snapshot;
use sluice_tests::hello;
use sluice_tests::sim::{Faults, LinkSpec, Rng, Sim};
use sluice_tests::tables::snapshot_from_yaml;
use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::socket::tcp;
use smoltcp::wire::{IpAddress, IpCidr};
use std::collections::HashMap;
use std::net::IpAddr;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

/// TLS passthrough on 443 (a.example.test -> a, b.example.test -> b, *.wild.test -> c,
/// no catch-all); HTTP on 80 by Host (www.example.test -> a, else -> b) and an
/// httpsRedirect server on 8080.
const CONFIG: &str = r#"
apiVersion: sluice.dev/v1alpha1
kind: Appliance
metadata: {name: sim}
spec:
  cores: [0]
  ports:
  - {name: outside, tap: {name: simout}, addresses: [10.77.0.2/24, "fd77::2/64"]}
  - {name: inside, tap: {name: simin}, addresses: [10.78.0.2/24, "fd78::2/64"]}
  virtualAddresses: [10.77.0.10, "fd77::10"]
---
apiVersion: v1
kind: Namespace
metadata: {name: sim}
---
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
"#;

fn backends_yaml() -> String {
    let mut y = String::new();
    for (name, addr) in [
        ("a", "10.78.0.11"),
        ("b", "10.78.0.12"),
        ("c", "10.78.0.13"),
    ] {
        y.push_str(&format!(
            r#"---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: sim}}
spec: {{selector: {{app: {name}}}, ports: [{{name: tcp, port: 7000}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}-0, namespace: sim, labels: {{app: {name}}}}}
spec: {{containers: [{{name: s, ports: [{{containerPort: 7000}}]}}]}}
status: {{podIP: "{addr}"}}
"#
        ));
    }
    y
}

fn compile(text: &str) -> Snapshot {
    snapshot_from_yaml("sim.yaml", text)
}

fn links(faults: Faults) -> Vec<LinkSpec> {
    let addrs = |a: &str, b: &str| {
        vec![
            IfAddr {
                addr: ip(a),
                prefix_len: 24,
            },
            IfAddr {
                addr: ip(b),
                prefix_len: 64,
            },
        ]
    };
    vec![
        LinkSpec {
            name: "outside".into(),
            addrs: addrs("10.77.0.2", "fd77::2"),
            host_faults: faults,
            sluice_faults: faults,
        },
        LinkSpec {
            name: "inside".into(),
            addrs: addrs("10.78.0.2", "fd78::2"),
            host_faults: faults,
            sluice_faults: faults,
        },
    ]
}

fn cidr(s: &str, len: u8) -> IpCidr {
    IpCidr::new(Sim::addr(ip(s)), len)
}

fn sim(faults: Faults, seed: u64) -> (Sim<Balancer>, Publisher<Snapshot>) {
    let text = format!("{CONFIG}\n{}", backends_yaml());
    let publisher = Publisher::new(compile(&text), 1);
    let reader = publisher.reader().expect("reader");
    let hosts = vec![
        vec![cidr("10.77.0.1", 24), cidr("fd77::1", 64)],
        vec![
            cidr("10.78.0.11", 24),
            cidr("10.78.0.12", 24),
            cidr("10.78.0.13", 24),
        ],
    ];
    let vips = [ip("10.77.0.10"), ip("fd77::10")];
    let s = Sim::build(&links(faults), &hosts, &[], &vips, seed, |fw| {
        Balancer::new(
            fw,
            reader,
            BalancerConfig {
                flow_capacity: 4096,
                seed,
                ..BalancerConfig::default()
            },
        )
    });
    (s, publisher)
}

/// Echo servers on the backend host, counting connections per local address.
struct Backends {
    socks: Vec<(SocketHandle, bool)>,
    port: u16,
    hits: HashMap<IpAddress, usize>,
}

impl Backends {
    fn new(sockets: &mut SocketSet<'static>, port: u16, n: usize) -> Backends {
        let socks = (0..n)
            .map(|_| {
                let mut s = tcp::Socket::new(
                    tcp::SocketBuffer::new(vec![0; 64 * 1024]),
                    tcp::SocketBuffer::new(vec![0; 64 * 1024]),
                );
                s.listen(port).expect("listen");
                (sockets.add(s), false)
            })
            .collect();
        Backends {
            socks,
            port,
            hits: HashMap::new(),
        }
    }

    fn step(&mut self, sockets: &mut SocketSet<'static>) {
        for (h, counted) in &mut self.socks {
            let s = sockets.get_mut::<tcp::Socket>(*h);
            if !s.is_open() {
                let _ = s.listen(self.port);
                *counted = false;
                continue;
            }
            if !*counted && s.state() == tcp::State::Established {
                if let Some(l) = s.local_endpoint() {
                    *self.hits.entry(l.addr).or_default() += 1;
                    *counted = true;
                }
            }
            let mut buf = [0u8; 4096];
            while s.can_recv() && s.send_capacity() - s.send_queue() >= buf.len() {
                let n = s.recv_slice(&mut buf).unwrap_or(0);
                if n == 0 {
                    break;
                }
                let _ = s.send_slice(&buf[..n]);
            }
            if !s.may_recv() && s.send_queue() == 0 && s.state() == tcp::State::CloseWait {
                s.close();
            }
        }
    }
}

struct Conn {
    h: SocketHandle,
    data: Vec<u8>,
    sent: usize,
    got: Vec<u8>,
    established: bool,
    done: bool,
}

#[derive(Debug, Default)]
struct Outcome {
    echoed: usize,
    reset: usize,
    other: usize,
}

/// Runs one connection per entry of `firsts` (first bytes; random bytes follow, `extra`
/// long), `parallel` at a time, to `vip:port`.
fn run(
    sim: &mut Sim<Balancer>,
    backends: &mut Backends,
    port: u16,
    firsts: &[Vec<u8>],
    extra: usize,
    parallel: usize,
    rng: &mut Rng,
) -> Outcome {
    let vip = ip("10.77.0.10");
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
            let mut s = tcp::Socket::new(
                tcp::SocketBuffer::new(vec![0; 64 * 1024]),
                tcp::SocketBuffer::new(vec![0; 64 * 1024]),
            );
            local_port = local_port.wrapping_add(1).max(30_000);
            let host = &mut sim.hosts[0];
            s.connect(host.iface.context(), (Sim::addr(vip), port), local_port)
                .expect("connect");
            live.push(Conn {
                h: host.sockets.add(s),
                data,
                sent: 0,
                got: Vec::new(),
                established: false,
                done: false,
            });
        }
        sim.step();
        backends.step(&mut sim.hosts[1].sockets);
        let host = &mut sim.hosts[0];
        for c in &mut live {
            let s = host.sockets.get_mut::<tcp::Socket>(c.h);
            if s.state() == tcp::State::Established {
                c.established = true;
            }
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
    out
}

fn hits(b: &Backends, a: &str) -> usize {
    *b.hits.get(&Sim::addr(ip(a))).unwrap_or(&0)
}

#[test]
fn sni_routes_each_connection_to_its_backend_and_splices_byte_exact() {
    let (mut sim, _p) = sim(Faults::NONE, 1);
    let mut backends = Backends::new(&mut sim.hosts[1].sockets, 7000, 30);
    let mut rng = Rng::new(2);
    let names = ["a.example.test", "b.example.test", "x.wild.test"];
    let firsts: Vec<Vec<u8>> = (0..30)
        .map(|i| hello::client_hello(Some(names[i % 3]), 200))
        .collect();
    let out = run(&mut sim, &mut backends, 443, &firsts, 20_000, 10, &mut rng);
    assert_eq!(out.echoed, 30, "{out:?}");
    assert_eq!(hits(&backends, "10.78.0.11"), 10);
    assert_eq!(hits(&backends, "10.78.0.12"), 10);
    assert_eq!(hits(&backends, "10.78.0.13"), 10);
    let c = sim.worker.counters();
    assert_eq!(c.events_of(Event::Spliced), 30);
    // One flow entry a connection: the entry opened for the handshake gets its backend
    // side in place.
    let flows = sim.worker.stage().flows().stats();
    assert_eq!((flows.inserted, flows.removed), (30, 0), "{flows:?}");
}
