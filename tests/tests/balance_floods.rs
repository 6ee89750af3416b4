//! Hostile load and reuse at the balancer stage, on a fake clock (no timed assertions):
//!
//! - **SNAT tuples rest** after their connection closes: a tiny SNAT range driven
//!   through many more connect/close cycles than it has ports, clients reusing their own
//!   ports (so each new SYN replaces a closed flow, as at ~1000 connections a second):
//!   no tuple is handed out again within the rest (60 s by default), every connection
//!   that finds no rested port is refused at once with a RST and counted
//!   (`snat_ports_exhausted`), none is left to retransmit, and connections succeed again
//!   once ports have rested.
//!   A flow that expired but that the wheel has not reached yet (a TIME_WAIT shorter
//!   than the rest) rests its tuple too when a new connection reaps it.
//! - **One source cannot take the SNAT ports**: a single allowed source floods SYNs that
//!   never complete while three clients keep connecting; the flood is held to its
//!   per-source budget (`source_rate_limited`), the half-open flows it leaves are dropped
//!   early when the cursor comes round to their ports (`half_open_evicted`), and every
//!   other client's connection goes through.
//! - **A full flow table gives way to new connections**: a flood of unanswered SYNs fills
//!   a small flow table; each new SYN then drops a half-open flow early
//!   (`flow_early_drop`), never an established one, so a real client still gets a flow and
//!   completes, and under pressure the flood's flows expire after 5 s of silence instead
//!   of 120 s. Only a table of established flows refuses (`flow_table_full`).

use sluice_dataplane::balancer::{Balancer, BalancerConfig};
use sluice_dataplane::pipeline::{Ctx, Stage, Verdict};
use sluice_dataplane::port::{Pkt, Pool};
use sluice_dataplane::rcu::Publisher;
use sluice_dataplane::stats::{Counters, DropReason};
use sluice_dataplane::tables::snapshot::Snapshot;
use sluice_dataplane::wire::{ip_proto, tcp};
use sluice_testkit::config;
use sluice_tests::stage::{self, frame, IN_MAC};
use std::collections::HashMap;

/// A TCP listener on 10.77.0.10:7000 to one pod, 10.78.0.11:7000.
const CONFIG: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: p}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: p}
spec:
  gatewayClassName: sluice
  addresses: [{type: IPAddress, value: 10.77.0.10}]
  listeners:
  - {name: tcp, port: 7000, protocol: TCP}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: tcp, namespace: p}
spec:
  parentRefs: [{name: gw, sectionName: tcp}]
  rules: [{backendRefs: [{name: a, port: 7000}]}]
---
apiVersion: v1
kind: Service
metadata: {name: a, namespace: p}
spec: {selector: {app: a}, ports: [{port: 7000}]}
---
apiVersion: v1
kind: Pod
metadata: {name: a-0, namespace: p, labels: {app: a}}
status: {podIP: 10.78.0.11}
"#;

const BACKEND: &str = "10.78.0.11";
const VIP: &str = "10.77.0.10";
/// sluice's address towards the backend (the SNAT address).
const SNAT_IP: &str = "10.78.0.2";

/// The stage and its world: one burst per call, on a fake clock.
struct World {
    b: Balancer,
    _publisher: Publisher<Snapshot>,
    pool: Pool,
    counters: Counters,
    now_ms: u64,
}

impl World {
    fn new(cfg: BalancerConfig) -> World {
        let mut publisher = Publisher::new(config::snapshot("p.yaml", CONFIG), 3);
        let b = stage::balancer(
            &mut publisher,
            &[BACKEND, "10.77.0.101", "10.77.0.102", "10.77.0.103"],
            cfg,
        );
        World {
            b,
            _publisher: publisher,
            pool: Pool::new(64),
            counters: Counters::new(2),
            now_ms: 1000,
        }
    }

    /// One packet into port `in_port` (frames for port 1 get its MAC): its verdict and
    /// bytes after; then the stage's timers. Drops are counted, as the worker does.
    fn send(&mut self, in_port: usize, mut f: Vec<u8>) -> (Verdict, Vec<u8>) {
        if in_port == 1 {
            f[..6].copy_from_slice(&IN_MAC.0);
        }
        let mut pkts: Vec<Pkt> = vec![self.pool.alloc_copy(&f).expect("buffer")];
        let mut verdicts = [Verdict::Drop(DropReason::BadPort)];
        let mut ctx = Ctx::new(self.now_ms, &mut self.counters);
        self.b
            .process_burst(in_port, &mut pkts, &mut verdicts, &mut ctx);
        self.b.maintain(&mut ctx);
        // (The worker counts the drops its stage returns.)
        if let Verdict::Drop(r) = verdicts[0] {
            self.counters.drop(r);
        }
        (verdicts[0], pkts[0].data().to_vec())
    }

    fn drops(&self, r: DropReason) -> u64 {
        self.counters.drops_of(r)
    }
}

/// The TCP source port and flags of an Ethernet/IPv4 frame.
fn tcp_of(f: &[u8]) -> (u16, u16) {
    let l4 = 14 + usize::from(f[14] & 0x0f) * 4;
    (
        u16::from_be_bytes([f[l4], f[l4 + 1]]),
        u16::from(f[l4 + 13]),
    )
}

/// One client connection from `client:sport` through the VIP: SYN, and if sluice passes
/// it on, the backend's SYN-ACK, the client's ACK, then the backend closes first (it
/// will hold TIME_WAIT), FIN-ACK from the client, ACK. Returns the SNAT port the backend
/// saw, or `None` if the client got a RST at once.
fn connection(w: &mut World, client: &str, sport: u16) -> Option<u16> {
    let t = ip_proto::TCP;
    let (v, out) = w.send(
        0,
        frame(t, (client, sport), (VIP, 7000), tcp::flags::SYN, b""),
    );
    match v {
        Verdict::Tx(1) => {}
        Verdict::Tx(0) => {
            let (_, flags) = tcp_of(&out);
            assert_ne!(flags & tcp::flags::RST, 0, "a refusal is a RST");
            return None;
        }
        other => panic!("SYN from {client}:{sport}: {other:?}, neither passed nor refused"),
    }
    let (port, _) = tcp_of(&out);
    let back = |w: &mut World, flags| {
        let (v, _) = w.send(1, frame(t, (BACKEND, 7000), (SNAT_IP, port), flags, b""));
        assert_eq!(
            v,
            Verdict::Tx(0),
            "backend segment {flags:#x} reaches the client"
        );
    };
    let front = |w: &mut World, flags| {
        let (v, _) = w.send(0, frame(t, (client, sport), (VIP, 7000), flags, b""));
        assert_eq!(
            v,
            Verdict::Tx(1),
            "client segment {flags:#x} reaches the backend"
        );
    };
    let (syn, ack, fin) = (tcp::flags::SYN, tcp::flags::ACK, tcp::flags::FIN);
    back(w, syn | ack);
    front(w, ack);
    back(w, fin | ack);
    front(w, fin | ack);
    back(w, ack);
    Some(port)
}

#[test]
fn snat_tuples_rest_after_close_and_exhaustion_is_refused_at_once() {
    let mut w = World::new(BalancerConfig {
        flow_capacity: 1024,
        snat_ports: (40000, 40007),
        ..BalancerConfig::default()
    });
    let rest_ms = 60_000;
    // When each SNAT port's connection closed (the backend's TIME_WAIT began).
    let mut closed: HashMap<u16, u64> = HashMap::new();
    let (mut passed, mut refused) = (0u64, 0u64);
    // 300 connections, one every 1.5 s: four times the port range wraps in the rest
    // alone. Clients reuse 5 ports each, so most SYNs replace a flow in TIME_WAIT.
    for k in 0..300u64 {
        w.now_ms += 1500;
        let client = format!("10.77.0.{}", 101 + k % 3);
        let sport = 1000 + (k / 3 % 5) as u16;
        match connection(&mut w, &client, sport) {
            Some(port) => {
                if let Some(&at) = closed.get(&port) {
                    assert!(
                        w.now_ms >= at + rest_ms,
                        "SNAT port {port} handed out {} ms after its connection closed",
                        w.now_ms - at
                    );
                }
                closed.insert(port, w.now_ms);
                passed += 1;
            }
            None => refused += 1,
        }
    }
    assert_eq!(
        w.drops(DropReason::SnatPortsExhausted),
        refused,
        "each refusal counted"
    );
    // 8 ports resting 60 s serve at most 8 connections a minute: 300 connections over
    // 450 s find a rested port some 60 times, and are refused the rest.
    assert!(refused > 200, "refused {refused}");
    assert!(passed >= 48, "passed {passed}");
}

#[test]
fn a_tuple_rests_even_when_its_flow_expired_before_the_wheel_came_round() {
    // TIME_WAIT (1 s) shorter than the rest (60 s): the closed connection's flow has
    // expired but is still in the table (the wheel files it up to a minute ahead) when the
    // next SYN asks for its port; reaping it there must rest the tuple as the wheel would.
    let mut w = World::new(BalancerConfig {
        flow_capacity: 1024,
        snat_ports: (40000, 40000),
        timeouts: sluice_dataplane::flow::Timeouts {
            tcp_time_wait: 1,
            ..Default::default()
        },
        ..BalancerConfig::default()
    });
    let closed_at = w.now_ms;
    assert_eq!(connection(&mut w, "10.77.0.101", 1000), Some(40000));
    w.now_ms += 3000;
    assert_eq!(
        connection(&mut w, "10.77.0.102", 1000),
        None,
        "port 40000 handed out {} ms after its connection closed",
        w.now_ms - closed_at
    );
    assert_eq!(w.drops(DropReason::SnatPortsExhausted), 1);
    w.now_ms = closed_at + 60_000;
    assert_eq!(connection(&mut w, "10.77.0.102", 1001), Some(40000));
}

#[test]
fn a_single_source_syn_flood_leaves_room_for_other_clients() {
    let mut w = World::new(BalancerConfig {
        flow_capacity: 16 * 1024,
        snat_ports: (40000, 40999),
        new_flows_per_second_per_source: 100,
        ..BalancerConfig::default()
    });
    let (mut flood_sent, mut real_passed) = (0u64, 0u64);
    let mut flood_port = 1u16;
    // 200 simulated seconds: each second 500 SYNs from the flooder (never answered, never
    // completed) and three real connections, spread over the second.
    for second in 0..200u64 {
        for slice in 0..10u64 {
            w.now_ms = 1000 * (second + 1) + 100 * slice;
            for _ in 0..50 {
                flood_port = flood_port.wrapping_add(1).max(1);
                let f = frame(
                    ip_proto::TCP,
                    ("10.77.0.200", flood_port),
                    (VIP, 7000),
                    tcp::flags::SYN,
                    b"",
                );
                let (v, _) = w.send(0, f);
                assert!(
                    matches!(
                        v,
                        Verdict::Tx(1) | Verdict::Drop(DropReason::SourceRateLimited)
                    ),
                    "flood SYN: {v:?}"
                );
                flood_sent += 1;
            }
            if slice % 3 == 0 && slice < 9 {
                let k = second * 3 + slice / 3;
                let client = format!("10.77.0.{}", 101 + k % 3);
                let sport = 2000 + (k % 20000) as u16;
                assert!(
                    connection(&mut w, &client, sport).is_some(),
                    "real client {client}:{sport} refused at {} s",
                    second
                );
                real_passed += 1;
            }
        }
    }
    let limited = w.drops(DropReason::SourceRateLimited);
    // The flooder gets 100 a second (its bucket's window is the second).
    assert_eq!(limited, flood_sent - 200 * 100, "flood over budget dropped");
    assert_eq!(real_passed, 600);
    assert_eq!(w.drops(DropReason::SnatPortsExhausted), 0);
    let evicted = w
        .counters
        .events_of(sluice_dataplane::stats::Event::HalfOpenEvicted);
    // 100 half-open flows a second live 120 s unless dropped early: 1,000 ports are
    // enough only because the flood's old ones give way.
    assert!(evicted > 10_000, "half-open flows dropped early: {evicted}");
}

/// SYN, SYN-ACK, ACK from `client:sport`: an established connection left open. Returns
/// its SNAT port.
fn open(w: &mut World, client: &str, sport: u16) -> u16 {
    let t = ip_proto::TCP;
    let (v, out) = w.send(
        0,
        frame(t, (client, sport), (VIP, 7000), tcp::flags::SYN, b""),
    );
    assert_eq!(v, Verdict::Tx(1), "SYN from {client}:{sport}");
    let (port, _) = tcp_of(&out);
    let (syn, ack) = (tcp::flags::SYN, tcp::flags::ACK);
    let (v, _) = w.send(
        1,
        frame(t, (BACKEND, 7000), (SNAT_IP, port), syn | ack, b""),
    );
    assert_eq!(v, Verdict::Tx(0), "SYN-ACK to {client}:{sport}");
    let (v, _) = w.send(0, frame(t, (client, sport), (VIP, 7000), ack, b""));
    assert_eq!(v, Verdict::Tx(1), "ACK from {client}:{sport}");
    port
}

/// Data both ways on an open connection.
fn exchange(w: &mut World, client: &str, sport: u16, port: u16) -> bool {
    let t = ip_proto::TCP;
    let f = tcp::flags::ACK | tcp::flags::PSH;
    let (up, _) = w.send(0, frame(t, (client, sport), (VIP, 7000), f, b"ping"));
    let (down, _) = w.send(1, frame(t, (BACKEND, 7000), (SNAT_IP, port), f, b"pong"));
    up == Verdict::Tx(1) && down == Verdict::Tx(0)
}

/// `n` SYNs from the flooder (never answered), from consecutive ports after `*port`.
fn flood(w: &mut World, n: u32, port: &mut u16) {
    for _ in 0..n {
        *port = port.wrapping_add(1).max(1);
        let f = frame(
            ip_proto::TCP,
            ("10.77.0.200", *port),
            (VIP, 7000),
            tcp::flags::SYN,
            b"",
        );
        let (v, _) = w.send(0, f);
        assert_eq!(v, Verdict::Tx(1), "flood SYN {port} passes (a flow for it)");
    }
}

#[test]
fn a_full_flow_table_drops_half_open_flows_early_for_new_connections() {
    let mut w = World::new(BalancerConfig {
        flow_capacity: 64,
        snat_ports: (40000, 40999),
        // The flood is one source: no per-source limit here, the table itself must hold.
        new_flows_per_second_per_source: 0,
        ..BalancerConfig::default()
    });
    let clients: Vec<(u16, u16)> = (0..8)
        .map(|k| (3000 + k, open(&mut w, "10.77.0.101", 3000 + k)))
        .collect();
    // A flood of 2,000 unanswered SYNs over a second: the table fills with them.
    let mut port = 1u16;
    flood(&mut w, 2000, &mut port);
    assert_eq!(w.b.flows().len(), 64, "the table is full");
    let early = |w: &World| {
        w.counters
            .events_of(sluice_dataplane::stats::Event::FlowEarlyDrop)
    };
    assert!(
        early(&w) >= 2000 - 56,
        "each SYN over the top dropped a half-open flow"
    );
    // A real client a second later: its SYN gets a flow, the flood goes on between its
    // handshake's segments, and it completes.
    w.now_ms += 1000;
    let t = ip_proto::TCP;
    let (v, out) = w.send(
        0,
        frame(t, ("10.77.0.102", 5000), (VIP, 7000), tcp::flags::SYN, b""),
    );
    assert_eq!(v, Verdict::Tx(1), "the real client's SYN gets a flow");
    let (snat, _) = tcp_of(&out);
    flood(&mut w, 20, &mut port);
    let (syn, ack) = (tcp::flags::SYN, tcp::flags::ACK);
    let (v, _) = w.send(
        1,
        frame(t, (BACKEND, 7000), (SNAT_IP, snat), syn | ack, b""),
    );
    assert_eq!(v, Verdict::Tx(0), "its SYN-ACK finds the flow");
    flood(&mut w, 20, &mut port);
    let (v, _) = w.send(0, frame(t, ("10.77.0.102", 5000), (VIP, 7000), ack, b""));
    assert_eq!(v, Verdict::Tx(1));
    assert!(
        exchange(&mut w, "10.77.0.102", 5000, snat),
        "the new connection carries data"
    );
    // Established flows are never dropped.
    for &(sport, snat) in &clients {
        assert!(
            exchange(&mut w, "10.77.0.101", sport, snat),
            "established {sport}"
        );
    }
    assert_eq!(w.drops(DropReason::FlowTableFull), 0);
    // Under pressure (90 % full) the flood's flows go after 5 s of silence, not after the
    // half-open lifetime (120 s), until the table is below the mark; the rest live their
    // configured timeout.
    assert!(w.b.flows().under_pressure());
    for _ in 0..7 {
        w.now_ms += 1000;
        w.send(0, frame(t, ("10.77.0.101", 3000), (VIP, 7000), ack, b""));
    }
    assert!(!w.b.flows().under_pressure());
    let left = w.b.flows().len();
    assert!((10..58).contains(&left), "{left}: below 58 of 64 (90 %)");
    for _ in 0..120 {
        w.now_ms += 1000;
        w.send(0, frame(t, ("10.77.0.101", 3000), (VIP, 7000), ack, b""));
    }
    assert_eq!(w.b.flows().len(), 9, "8 + 1 established flows left");
    // Only a table of established flows refuses a new connection.
    let mut extra = Vec::new();
    for k in 0..55u16 {
        extra.push(open(&mut w, "10.77.0.103", 6000 + k));
    }
    assert_eq!(w.b.flows().len(), 64);
    let before = early(&w);
    let (v, _) = w.send(
        0,
        frame(t, ("10.77.0.102", 5001), (VIP, 7000), tcp::flags::SYN, b""),
    );
    assert_eq!(v, Verdict::Drop(DropReason::FlowTableFull));
    assert_eq!(early(&w), before);
    for (k, &snat) in extra.iter().enumerate() {
        assert!(exchange(&mut w, "10.77.0.103", 6000 + k as u16, snat));
    }
}
