//! The L4 balancer end to end in simulation: smoltcp clients and backends on in-memory
//! wires, sluice's `Balancer` stage in between with tables compiled from real manifests,
//! loss and reordering injected. Checks byte-exact echo through full NAT, the Gateway API
//! weight rules (70/30/0 shares; an invalid backend's share reset), NetworkPolicy on new
//! flows and revocation after a swap, UDP, and IPv6.

use sluice_dataplane::balancer::{Balancer, BalancerConfig};
use sluice_dataplane::rcu::Publisher;
use sluice_dataplane::stats::{DropReason, Event};
use sluice_dataplane::tables::snapshot::Snapshot;
use sluice_testkit::config;
use sluice_tests::fixtures::{cidr, ip, links, SIM_APPLIANCE};
use sluice_tests::sim::{Faults, Rng, Sim};
use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::socket::{tcp, udp};
use smoltcp::wire::{IpAddress, IpEndpoint};
use std::collections::HashMap;
use std::net::IpAddr;

fn backends_yaml() -> String {
    let mut y = String::new();
    for (name, addr) in [
        ("a", "10.78.0.11"),
        ("b", "10.78.0.12"),
        ("c", "10.78.0.13"),
        ("a6", "fd78::11"),
        ("b6", "fd78::12"),
    ] {
        y.push_str(&format!(
            r#"---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: sim}}
spec: {{selector: {{app: {name}}}, ports: [{{name: tcp, port: 7000}}, {{name: udp, port: 5300, protocol: UDP}}]}}
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

/// Listeners: 7000 (70/30/0 over a, b, c), 7100 (ghost 80 / a 20), 5300/udp (a),
/// 7006 (IPv6: a6 1 / b6 1). `policy` is appended (NetworkPolicy documents or nothing).
fn config(policy: &str) -> String {
    format!(
        r#"{SIM_APPLIANCE}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: sim}}
spec:
  gatewayClassName: sluice
  listeners:
  - {{name: echo, port: 7000, protocol: TCP}}
  - {{name: bad, port: 7100, protocol: TCP}}
  - {{name: dns, port: 5300, protocol: UDP}}
  - {{name: six, port: 7006, protocol: TCP}}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {{name: echo, namespace: sim}}
spec:
  parentRefs: [{{name: gw, sectionName: echo}}]
  rules:
  - backendRefs:
    - {{name: a, port: 7000, weight: 70}}
    - {{name: b, port: 7000, weight: 30}}
    - {{name: c, port: 7000, weight: 0}}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {{name: bad, namespace: sim}}
spec:
  parentRefs: [{{name: gw, sectionName: bad}}]
  rules:
  - backendRefs:
    - {{name: ghost, port: 7000, weight: 80}}
    - {{name: a, port: 7000, weight: 20}}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: UDPRoute
metadata: {{name: dns, namespace: sim}}
spec:
  parentRefs: [{{name: gw, sectionName: dns}}]
  rules:
  - backendRefs: [{{name: a, port: 5300}}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {{name: six, namespace: sim}}
spec:
  parentRefs: [{{name: gw, sectionName: six}}]
  rules:
  - backendRefs: [{{name: a6, port: 7000}}, {{name: b6, port: 7000}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: direct
  namespace: sim
  annotations: {{sluice.dev/source-nat: "false"}}
spec:
  gatewayClassName: sluice
  listeners:
  - {{name: direct, port: 7200, protocol: TCP}}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {{name: direct, namespace: sim}}
spec:
  parentRefs: [{{name: direct}}]
  rules:
  - backendRefs: [{{name: a, port: 7000}}]
{}
{policy}
"#,
        backends_yaml()
    )
}

/// Only the client network may reach the backends, on TCP 7000 and UDP 5300.
const ALLOW_CLIENTS: &str = r#"---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: from-clients, namespace: sim}
spec:
  podSelector: {}
  ingress:
  - from: [{ipBlock: {cidr: 10.77.0.0/24}}, {ipBlock: {cidr: "fd77::/64"}}]
    ports: [{port: 7000}, {port: 5300, protocol: UDP}]
"#;

/// Nothing may reach the backends.
const DENY_ALL: &str = r#"---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny, namespace: sim}
spec:
  podSelector: {}
  policyTypes: [Ingress]
"#;

fn compile(text: &str) -> Snapshot {
    config::snapshot("sim.yaml", text)
}

/// The simulation: host 0 is the client (10.77.0.1, fd77::1), host 1 holds every backend
/// address. Returns it with the snapshot publisher (to swap tables).
fn sim(policy: &str, faults: Faults, seed: u64) -> (Sim<Balancer>, Publisher<Snapshot>) {
    let publisher = Publisher::new(compile(&config(policy)), 1);
    let reader = publisher.reader().expect("reader");
    let hosts = vec![
        vec![cidr("10.77.0.1", 24), cidr("fd77::1", 64)],
        vec![
            cidr("10.78.0.11", 24),
            cidr("10.78.0.12", 24),
            cidr("10.78.0.13", 24),
            cidr("fd78::11", 64),
            cidr("fd78::12", 64),
        ],
    ];
    let vips = [ip("10.77.0.10"), ip("fd77::10")];
    let s = Sim::build(&links(faults, faults), &hosts, &[], &vips, seed, |fw| {
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

/// Echo servers on the backend host: `n` listening sockets on `port`; records which local
/// address each connection reached and from where.
struct Backends {
    socks: Vec<(SocketHandle, bool)>,
    port: u16,
    /// Connections per backend address.
    hits: HashMap<IpAddress, usize>,
    /// Remote endpoints seen (the SNAT address and ports).
    peers: Vec<IpEndpoint>,
}

impl Backends {
    fn new(sockets: &mut SocketSet<'static>, port: u16, n: usize) -> Backends {
        let socks = (0..n)
            .map(|_| {
                let mut s = tcp::Socket::new(
                    tcp::SocketBuffer::new(vec![0; 16 * 1024]),
                    tcp::SocketBuffer::new(vec![0; 16 * 1024]),
                );
                s.listen(port).expect("listen");
                (sockets.add(s), false)
            })
            .collect();
        Backends {
            socks,
            port,
            hits: HashMap::new(),
            peers: Vec::new(),
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
                if let (Some(l), Some(r)) = (s.local_endpoint(), s.remote_endpoint()) {
                    *self.hits.entry(l.addr).or_default() += 1;
                    self.peers.push(r);
                    *counted = true;
                }
            }
            let mut buf = [0u8; 2048];
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

/// One client connection: sends `data`, expects it back, then closes.
struct Conn {
    h: SocketHandle,
    data: Vec<u8>,
    sent: usize,
    got: Vec<u8>,
    /// Whether the connection was ever established.
    established: bool,
    finished: bool,
    retry: bool,
    retries: u32,
}

/// What became of a batch of connections.
#[derive(Debug, Default)]
struct Outcome {
    echoed: usize,
    reset: usize,
    other: usize,
    /// Connections the end hosts lost during the handshake, retried.
    retried: usize,
}

/// Runs `total` connections to `vip:port`, `parallel` at a time; each sends 1-3 KiB of
/// random bytes and expects them back byte for byte.
fn run_connections(
    sim: &mut Sim<Balancer>,
    backends: &mut Backends,
    vip: IpAddr,
    port: u16,
    total: usize,
    parallel: usize,
    rng: &mut Rng,
) -> Outcome {
    let mut out = Outcome::default();
    let mut started = 0usize;
    let mut live: Vec<Conn> = Vec::new();
    let mut local_port = 20_000u16;
    let deadline = sim.now_ms + 600_000;
    let mut retry_queue: Vec<(Vec<u8>, u32)> = Vec::new();
    while (started < total || !live.is_empty() || !retry_queue.is_empty()) && sim.now_ms < deadline
    {
        while (started < total || !retry_queue.is_empty()) && live.len() < parallel {
            let (data, retries) = match retry_queue.pop() {
                Some(r) => r,
                None => {
                    started += 1;
                    let len = 1024 + rng.below(2048);
                    ((0..len).map(|_| rng.next_u64() as u8).collect(), 0)
                }
            };
            let mut s = tcp::Socket::new(
                tcp::SocketBuffer::new(vec![0; 8 * 1024]),
                tcp::SocketBuffer::new(vec![0; 8 * 1024]),
            );
            local_port = local_port.wrapping_add(1).max(20_000);
            let host = &mut sim.hosts[0];
            s.connect(host.iface.context(), (Sim::addr(vip), port), local_port)
                .expect("connect");
            let h = host.sockets.add(s);
            live.push(Conn {
                h,
                data,
                sent: 0,
                got: Vec::new(),
                established: false,
                finished: false,
                retry: false,
                retries,
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
            let mut buf = [0u8; 4096];
            while s.can_recv() {
                match s.recv_slice(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => c.got.extend_from_slice(&buf[..n]),
                }
            }
            if c.got.len() >= c.data.len() && s.state() == tcp::State::Established {
                s.close();
            }
            if s.state() == tcp::State::Closed || s.state() == tcp::State::TimeWait {
                if c.got == c.data {
                    out.echoed += 1;
                } else if !c.established {
                    out.reset += 1;
                } else if c.got.is_empty() && c.retries < 3 {
                    // The end hosts lost the handshake between them (smoltcp answers
                    // some retransmitted handshake segments with RST); sluice forwarded
                    // every segment. A real client retries: so does this one.
                    c.retry = true;
                    out.retried += 1;
                } else {
                    eprintln!(
                        "odd connection: state {} got {} of {} established {}",
                        s.state(),
                        c.got.len(),
                        c.data.len(),
                        c.established
                    );
                    out.other += 1;
                }
                c.finished = true;
            }
        }
        let mut again = Vec::new();
        for c in &live {
            if c.retry {
                again.push((c.data.clone(), c.retries + 1));
            }
        }
        live.retain(|c| {
            if c.finished {
                host.sockets.remove(c.h);
            }
            !c.finished
        });
        retry_queue.extend(again);
    }
    out.other += live.len();
    let c = sim.worker.counters();
    for r in DropReason::ALL {
        if c.drops_of(*r) > 0 {
            eprintln!("drop {}: {}", r.name(), c.drops_of(*r));
        }
    }
    for e in Event::ALL {
        eprintln!("event {}: {}", e.name(), c.events_of(*e));
    }
    out
}

#[test]
fn weighted_shares_and_byte_exact_echo_through_nat_under_loss() {
    let faults = Faults {
        drop: 0.01,
        reorder: 0.01,
        ..Faults::NONE
    };
    let (mut sim, _publisher) = sim(ALLOW_CLIENTS, faults, 7);
    let mut backends = Backends::new(&mut sim.hosts[1].sockets, 7000, 80);
    let mut rng = Rng::new(11);
    let out = run_connections(
        &mut sim,
        &mut backends,
        ip("10.77.0.10"),
        7000,
        500,
        25,
        &mut rng,
    );
    let accepted: usize = backends.hits.values().sum();
    assert_eq!(
        out.echoed, 500,
        "every connection echoed byte for byte: {out:?}, backends accepted {accepted}"
    );
    assert!(
        out.retried <= 15,
        "handshakes lost by the end hosts stay rare: {out:?}"
    );
    let share =
        |a: &str| *backends.hits.get(&Sim::addr(ip(a))).unwrap_or(&0) as f64 / accepted as f64;
    let (a, b, c) = (
        share("10.78.0.11"),
        share("10.78.0.12"),
        share("10.78.0.13"),
    );
    assert!((a - 0.7).abs() <= 0.05, "a got {a}");
    assert!((b - 0.3).abs() <= 0.05, "b got {b}");
    assert_eq!(c, 0.0, "weight 0 gets nothing");
    // Full NAT: the backends only ever saw sluice's inside address, from its port range.
    let (lo, hi) = sim.worker.stage().snat_ports();
    for p in &backends.peers {
        assert_eq!(p.addr, Sim::addr(ip("10.78.0.2")));
        assert!((lo..=hi).contains(&p.port), "{p} outside {lo}..={hi}");
    }
    let counters = sim.worker.counters();
    assert!(counters.events_of(Event::FlowCreated) >= 500);
    assert_eq!(counters.drops_of(DropReason::PolicyDenied), 0);
    let stats = sim.hosts[0].dev.fault_stats();
    assert!(
        stats.dropped > 0 && stats.reordered > 0,
        "faults were injected: {stats:?}"
    );
}

#[test]
fn invalid_backend_share_is_reset() {
    let (mut sim, _publisher) = sim(ALLOW_CLIENTS, Faults::NONE, 3);
    let mut backends = Backends::new(&mut sim.hosts[1].sockets, 7000, 20);
    let mut rng = Rng::new(5);
    let n = 300;
    let out = run_connections(
        &mut sim,
        &mut backends,
        ip("10.77.0.10"),
        7100,
        n,
        20,
        &mut rng,
    );
    assert_eq!(out.other, 0, "{out:?}");
    let reset = out.reset as f64 / n as f64;
    assert!((reset - 0.8).abs() <= 0.06, "reset share {reset} ({out:?})");
    assert_eq!(out.echoed + out.reset, n);
    let counters = sim.worker.counters();
    assert_eq!(
        counters.events_of(Event::RejectSent) as usize,
        counters.drops_of(DropReason::BackendRejected) as usize
    );
    assert!(counters.events_of(Event::RejectSent) as usize >= out.reset);
}

#[test]
fn ipv6_connections_are_balanced_and_nated() {
    let (mut sim, _publisher) = sim(ALLOW_CLIENTS, Faults::NONE, 9);
    let mut backends = Backends::new(&mut sim.hosts[1].sockets, 7000, 20);
    let mut rng = Rng::new(13);
    let out = run_connections(
        &mut sim,
        &mut backends,
        ip("fd77::10"),
        7006,
        100,
        10,
        &mut rng,
    );
    assert_eq!(out.echoed, 100, "{out:?}");
    let a = *backends.hits.get(&Sim::addr(ip("fd78::11"))).unwrap_or(&0);
    let b = *backends.hits.get(&Sim::addr(ip("fd78::12"))).unwrap_or(&0);
    assert_eq!(a + b, 100);
    assert!(a > 25 && b > 25, "both IPv6 backends used: {a}/{b}");
    for p in &backends.peers {
        assert_eq!(p.addr, Sim::addr(ip("fd78::2")));
    }
    // Port 7000's backends are IPv4 only: an IPv6 client's connection is refused (full NAT
    // keeps the family), not silently dropped.
    let out = run_connections(
        &mut sim,
        &mut backends,
        ip("fd77::10"),
        7000,
        10,
        5,
        &mut rng,
    );
    assert_eq!((out.reset, out.echoed), (10, 0), "{out:?}");
}

#[test]
fn policy_denies_new_flows_and_a_swap_revokes_established_ones() {
    let (mut sim, mut publisher) = sim(ALLOW_CLIENTS, Faults::NONE, 21);
    let mut backends = Backends::new(&mut sim.hosts[1].sockets, 7000, 4);
    // One long-lived connection, established under the allowing policy.
    let mut s = tcp::Socket::new(
        tcp::SocketBuffer::new(vec![0; 8192]),
        tcp::SocketBuffer::new(vec![0; 8192]),
    );
    s.connect(
        sim.hosts[0].iface.context(),
        (Sim::addr(ip("10.77.0.10")), 7000),
        33_000,
    )
    .expect("connect");
    let h = sim.hosts[0].sockets.add(s);
    let mut echoed = Vec::new();
    let round = |sim: &mut Sim<Balancer>,
                 backends: &mut Backends,
                 echoed: &mut Vec<u8>,
                 msg: &[u8],
                 ms: u64| {
        let mut pending = msg;
        for _ in 0..ms {
            let s = sim.hosts[0].sockets.get_mut::<tcp::Socket>(h);
            if s.may_send() && !pending.is_empty() {
                let n = s.send_slice(pending).unwrap_or(0);
                pending = &pending[n..];
            }
            sim.step();
            backends.step(&mut sim.hosts[1].sockets);
            let s = sim.hosts[0].sockets.get_mut::<tcp::Socket>(h);
            let mut buf = [0u8; 256];
            while let Ok(n @ 1..) = s.recv_slice(&mut buf) {
                echoed.extend_from_slice(&buf[..n]);
            }
        }
    };
    round(&mut sim, &mut backends, &mut echoed, b"hello", 3000);
    assert_eq!(
        echoed, b"hello",
        "established and echoed under the first policy"
    );
    assert_eq!(sim.worker.stage().flows().len(), 1);

    // Swap in a policy that denies everything: the flow is closed on its next packet.
    publisher.publish(compile(&config(DENY_ALL)));
    round(&mut sim, &mut backends, &mut echoed, b"again", 3000);
    assert_eq!(echoed, b"hello", "nothing passes after revocation");
    // The client was told: sluice reset its connection.
    assert_eq!(
        sim.hosts[0].sockets.get::<tcp::Socket>(h).state(),
        tcp::State::Closed,
        "the client's connection was reset"
    );
    assert!(sim.worker.counters().events_of(Event::FlowRevoked) >= 1);
    let c = sim.worker.counters();
    assert!(c.drops_of(DropReason::PolicyRevoked) >= 1);
    assert!(c.events_of(Event::PolicyRechecked) >= 1);
    assert_eq!(sim.worker.stage().flows().len(), 0, "the flow was removed");

    // A new connection is denied outright.
    let mut rng = Rng::new(1);
    let before = sim.worker.counters().drops_of(DropReason::PolicyDenied);
    let out = run_connections(
        &mut sim,
        &mut backends,
        ip("10.77.0.10"),
        7000,
        1,
        1,
        &mut rng,
    );
    assert_eq!(out.echoed, 0);
    assert!(sim.worker.counters().drops_of(DropReason::PolicyDenied) > before);
    assert_eq!(publisher.reclaim(), 0, "old snapshots freed on this thread");
}

#[test]

fn udp_datagrams_are_balanced_and_answered_from_the_virtual_address() {
    let (mut sim, _publisher) = sim(ALLOW_CLIENTS, Faults::NONE, 17);
    let udp_sock = |port: u16, sockets: &mut SocketSet<'static>| {
        let mut s = udp::Socket::new(
            udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; 16], vec![0; 8192]),
            udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; 16], vec![0; 8192]),
        );
        s.bind(port).expect("bind");
        sockets.add(s)
    };
    let server = udp_sock(5300, &mut sim.hosts[1].sockets);
    let client = udp_sock(40_000, &mut sim.hosts[0].sockets);
    let vip = IpEndpoint::new(Sim::addr(ip("10.77.0.10")), 5300);
    let mut answers = Vec::new();
    for i in 0..5u8 {
        sim.hosts[0]
            .sockets
            .get_mut::<udp::Socket>(client)
            .send_slice(&[b'q', i], vip)
            .expect("send");
        for _ in 0..100 {
            sim.step();
            let s = sim.hosts[1].sockets.get_mut::<udp::Socket>(server);
            while let Ok((data, meta)) = s.recv() {
                let reply: Vec<u8> = data.iter().map(|b| b.to_ascii_uppercase()).collect();
                assert_eq!(meta.endpoint.addr, Sim::addr(ip("10.78.0.2")), "SNAT");
                let _ = s.send_slice(&reply, meta.endpoint);
            }
            let c = sim.hosts[0].sockets.get_mut::<udp::Socket>(client);
            while let Ok((data, meta)) = c.recv() {
                answers.push((data.to_vec(), meta.endpoint));
            }
        }
    }
    let c = sim.worker.counters();
    let drops: Vec<_> = DropReason::ALL
        .iter()
        .filter(|r| c.drops_of(**r) > 0)
        .map(|r| (r.name(), c.drops_of(*r)))
        .collect();
    assert_eq!(answers.len(), 5, "every datagram answered; drops {drops:?}");
    for (i, (data, from)) in answers.iter().enumerate() {
        assert_eq!(data, &[b'Q', i as u8]);
        assert_eq!(*from, vip, "the answer comes from the virtual address");
    }
    assert_eq!(
        sim.worker.stage().flows().len(),
        1,
        "one UDP flow for one 5-tuple"
    );
}

#[test]
fn transparent_listeners_keep_the_client_address() {
    let (mut sim, _publisher) = sim(ALLOW_CLIENTS, Faults::NONE, 23);
    let mut backends = Backends::new(&mut sim.hosts[1].sockets, 7000, 10);
    let mut rng = Rng::new(3);
    let out = run_connections(
        &mut sim,
        &mut backends,
        ip("10.77.0.10"),
        7200,
        20,
        5,
        &mut rng,
    );
    assert_eq!(out.echoed, 20, "{out:?}");
    assert_eq!(backends.hits.get(&Sim::addr(ip("10.78.0.11"))), Some(&20));
    for p in &backends.peers {
        assert_eq!(p.addr, Sim::addr(ip("10.77.0.1")), "no source NAT");
    }
}

#[test]
fn routed_traffic_between_hosts_passes_the_same_policy() {
    let (mut sim, _publisher) = sim(ALLOW_CLIENTS, Faults::NONE, 29);
    let mut backends = Backends::new(&mut sim.hosts[1].sockets, 7000, 10);
    let mut rng = Rng::new(4);
    // Straight to a pod on an allowed port: routed (no listener), replies pass.
    let out = run_connections(
        &mut sim,
        &mut backends,
        ip("10.78.0.12"),
        7000,
        10,
        5,
        &mut rng,
    );
    assert_eq!(out.echoed, 10, "{out:?}");
    for p in &backends.peers {
        assert_eq!(p.addr, Sim::addr(ip("10.77.0.1")), "routed, not NATed");
    }
    // A port the policy does not open: the SYN never reaches the pod.
    let mut ssh = Backends::new(&mut sim.hosts[1].sockets, 22, 2);
    let before = sim.worker.counters().drops_of(DropReason::PolicyDenied);
    let mut s = tcp::Socket::new(
        tcp::SocketBuffer::new(vec![0; 1024]),
        tcp::SocketBuffer::new(vec![0; 1024]),
    );
    s.connect(
        sim.hosts[0].iface.context(),
        (Sim::addr(ip("10.78.0.12")), 22),
        45_000,
    )
    .expect("connect");
    sim.hosts[0].sockets.add(s);
    for _ in 0..3000 {
        sim.step();
        ssh.step(&mut sim.hosts[1].sockets);
    }
    assert!(ssh.hits.is_empty(), "nothing reached port 22");
    assert!(sim.worker.counters().drops_of(DropReason::PolicyDenied) > before);
}
