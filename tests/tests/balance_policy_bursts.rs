//! The balancer's two ways of checking new connections' policy give the same answers:
//! one burst lookup for all of a burst's new connections (big policy tables, forced here
//! with `policy_bursts_from: 0`) and one lookup per connection (small tables, forced with
//! `usize::MAX`). The oracle is the per-connection balancer itself: over random bursts of
//! SYNs, datagrams and follow-up segments, to a virtual address and routed to pods, both
//! families, with policies that allow some clients and deny others, both balancers must
//! give every packet the same verdict and the same bytes, and count the same drops and
//! events; and the burst one must really have answered from its burst lookups.

use proptest::prelude::*;
use sluice_dataplane::balancer::{Balancer, BalancerConfig};
use sluice_dataplane::pipeline::{Ctx, Stage, Verdict};
use sluice_dataplane::port::{Pkt, Pool};
use sluice_dataplane::rcu::Publisher;
use sluice_dataplane::stats::{Counters, DropReason, Event};
use sluice_dataplane::tables::snapshot::Snapshot;
use sluice_dataplane::wire::{ip_proto, tcp};
use sluice_testkit::config;
use sluice_tests::stage::{self, frame};

/// A virtual address with a TCP and a UDP listener to pods `a` (dual-stack), whose
/// ingress admits 10.77.0.0/24 but its upper half, and fd77::/120 but its upper half;
/// routed pods `b`, which admit UDP 53 from anywhere in 10.77.0.0/16 and TCP 22 only
/// from 10.77.0.64/26; and clients in 10.77.0.0/24 whose egress (as pods `c`) allows
/// only port 7000 and UDP 53.
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
  addresses: [{type: IPAddress, value: 10.77.0.10}, {type: IPAddress, value: "fd77::10"}]
  listeners:
  - {name: tcp, port: 7000, protocol: TCP}
  - {name: udp, port: 7001, protocol: UDP}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: tcp, namespace: p}
spec:
  parentRefs: [{name: gw, sectionName: tcp}]
  rules: [{backendRefs: [{name: a, port: 7000}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: UDPRoute
metadata: {name: udp, namespace: p}
spec:
  parentRefs: [{name: gw, sectionName: udp}]
  rules: [{backendRefs: [{name: a, port: 7000}]}]
---
apiVersion: v1
kind: Service
metadata: {name: a, namespace: p}
spec: {selector: {app: a}, ports: [{port: 7000}]}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: a-from-clients, namespace: p}
spec:
  podSelector: {matchLabels: {app: a}}
  ingress:
  - from:
    - ipBlock: {cidr: 10.77.0.0/24, except: [10.77.0.128/25]}
    - ipBlock: {cidr: "fd77::/120", except: ["fd77::80/121"]}
    ports: [{port: 7000}, {port: 7000, protocol: UDP}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: b-dns-and-ssh, namespace: p}
spec:
  podSelector: {matchLabels: {app: b}}
  ingress:
  - from: [{ipBlock: {cidr: 10.77.0.0/16}}]
    ports: [{port: 53, protocol: UDP}]
  - from: [{ipBlock: {cidr: 10.77.0.64/26}}]
    ports: [{port: 22}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: c-egress, namespace: p}
spec:
  podSelector: {matchLabels: {app: c}}
  policyTypes: [Egress]
  egress:
  - ports: [{port: 7000}, {port: 53, protocol: UDP}]
---
apiVersion: v1
kind: Pod
metadata: {name: a-0, namespace: p, labels: {app: a}}
status: {podIPs: [{ip: 10.78.0.11}, {ip: "fd78::11"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: a-1, namespace: p, labels: {app: a}}
status: {podIPs: [{ip: 10.78.0.12}, {ip: "fd78::12"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: a-2, namespace: p, labels: {app: a}}
status: {podIPs: [{ip: 10.78.0.13}, {ip: "fd78::13"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: b-0, namespace: p, labels: {app: b}}
status: {podIP: 10.78.0.50}
---
apiVersion: v1
kind: Pod
metadata: {name: b-1, namespace: p, labels: {app: b}}
status: {podIP: 10.78.0.51}
---
apiVersion: v1
kind: Pod
metadata: {name: c-0, namespace: p, labels: {app: c}}
status: {podIP: 10.77.0.200}
"#;

/// The stage with the backends and pods `b` as neighbours, checking policy a burst at a
/// time from tables of `policy_bursts_from` bytes.
fn balancer(publisher: &mut Publisher<Snapshot>, policy_bursts_from: usize) -> Balancer {
    let neighbours = [
        "10.78.0.11",
        "10.78.0.12",
        "10.78.0.13",
        "10.78.0.50",
        "10.78.0.51",
        "fd78::11",
        "fd78::12",
        "fd78::13",
    ];
    let cfg = BalancerConfig {
        flow_capacity: 1024,
        policy_bursts_from,
        ..BalancerConfig::default()
    };
    stage::balancer(publisher, &neighbours, cfg)
}

/// What a generated packet is: `kind` picks the destination and protocol, `client` the
/// last byte of the client address (10.77.0.x or fd77::x), `sport` its port, `ack` a
/// follow-up segment rather than a SYN.
fn packet(kind: u8, client: u8, sport: u16, ack: bool) -> Vec<u8> {
    let c4 = format!("10.77.0.{client}");
    let c6 = format!("fd77::{client:x}");
    let (flags, payload): (u16, &[u8]) = if ack {
        (tcp::flags::ACK, b"data")
    } else {
        (tcp::flags::SYN, b"")
    };
    let sport = sport.max(1);
    let (tcp, udp) = (ip_proto::TCP, ip_proto::UDP);
    match kind % 6 {
        0 => frame(tcp, (&c4, sport), ("10.77.0.10", 7000), flags, payload),
        1 => frame(udp, (&c4, sport), ("10.77.0.10", 7001), 0, b"data"),
        2 => frame(tcp, (&c6, sport), ("fd77::10", 7000), flags, payload),
        3 => frame(udp, (&c4, sport), ("10.78.0.50", 53), 0, b"data"),
        4 => frame(tcp, (&c4, sport), ("10.78.0.51", 22), flags, payload),
        _ => frame(tcp, (&c4, sport), ("10.78.0.50", 80), flags, payload),
    }
}

/// Runs one burst through a balancer: the verdicts and the packets' bytes after.
fn run(
    b: &mut Balancer,
    pool: &Pool,
    frames: &[Vec<u8>],
    now_ms: u64,
    c: &mut Counters,
) -> Vec<(Verdict, Vec<u8>)> {
    let mut pkts: Vec<Pkt> = frames
        .iter()
        .map(|f| pool.alloc_copy(f).expect("buffer"))
        .collect();
    let mut verdicts = vec![Verdict::Drop(DropReason::BadPort); pkts.len()];
    let mut ctx = Ctx::new(now_ms, c);
    b.process_burst(0, &mut pkts, &mut verdicts, &mut ctx);
    b.maintain(&mut ctx);
    verdicts
        .into_iter()
        .zip(pkts.iter().map(|p| p.data().to_vec()))
        .collect()
}

/// How many of `out`'s packets policy denied (the stage returns those drops as its
/// verdict; the worker counts them).
fn denied(out: &[(Verdict, Vec<u8>)]) -> u64 {
    out.iter()
        .filter(|(v, _)| *v == Verdict::Drop(DropReason::PolicyDenied))
        .count() as u64
}

/// Every drop and event count but the one that says how policy was checked.
fn counts(c: &Counters) -> Vec<u64> {
    let drops = DropReason::ALL.iter().map(|&r| c.drops_of(r));
    let events = Event::ALL
        .iter()
        .filter(|&&e| e != Event::PolicyBurstChecked)
        .map(|&e| c.events_of(e));
    drops.chain(events).collect()
}

/// One burst of distinct new routed connections, half of them denied: the burst balancer
/// answers all of them from its burst lookup, the per-connection one from none, and
/// both admit and deny the same ones. Connections to the virtual address are checked one
/// by one in both.
#[test]
fn one_burst_of_new_connections_is_checked_in_one_lookup() {
    let mut publisher = Publisher::new(config::snapshot("p.yaml", CONFIG), 3);
    let mut burst = balancer(&mut publisher, 0);
    let mut single = balancer(&mut publisher, usize::MAX);
    // By default, tables this small are checked one connection at a time.
    let mut default = balancer(&mut publisher, BalancerConfig::default().policy_bursts_from);
    let pool = Pool::new(128);
    // SYNs routed to pod b-1 port 22: 16 clients allowed (64 <= x < 128), 16 denied.
    let frames: Vec<Vec<u8>> = (0..32u8)
        .map(|i| packet(4, 32 + i * 4, 40_000 + u16::from(i), false))
        .collect();
    let (mut cb, mut cs, mut cd) = (Counters::new(2), Counters::new(2), Counters::new(2));
    let out_b = run(&mut burst, &pool, &frames, 0, &mut cb);
    let out_s = run(&mut single, &pool, &frames, 0, &mut cs);
    let out_d = run(&mut default, &pool, &frames, 0, &mut cd);
    assert_eq!(out_b, out_s);
    assert_eq!(out_d, out_s);
    assert_eq!(cb.events_of(Event::FlowCreated), 16);
    assert_eq!(denied(&out_b), 16);
    assert_eq!(cb.events_of(Event::PolicyBurstChecked), 32);
    assert_eq!(cs.events_of(Event::PolicyBurstChecked), 0);
    assert_eq!(cd.events_of(Event::PolicyBurstChecked), 0);
    assert_eq!(counts(&cb), counts(&cs));
    // The same SYNs again: the admitted ones are flow hits now, checked no more; the
    // denied ones have no flow and are checked (and denied) again.
    let again = run(&mut burst, &pool, &frames, 10, &mut cb);
    assert_eq!(cb.events_of(Event::PolicyBurstChecked), 32 + 16);
    assert_eq!(denied(&again), 16);
    assert_eq!(again.len(), 32);
    // SYNs to the virtual address (16 allowed, 16 denied): checked, not in a burst.
    let vip: Vec<Vec<u8>> = (0..32u8)
        .map(|i| packet(0, 1 + i * 8, 40_000 + u16::from(i), false))
        .collect();
    let out = run(&mut burst, &pool, &vip, 20, &mut cb);
    assert_eq!(denied(&out), 16);
    assert_eq!(cb.events_of(Event::FlowCreated), 16 + 16);
    assert_eq!(cb.events_of(Event::PolicyBurstChecked), 32 + 16);
    drop((burst, single, default));
    assert_eq!(publisher.reclaim(), 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Random bursts (new connections allowed and denied, repeats within a burst,
    /// follow-up segments of earlier ones, both families, the virtual address and
    /// routed pods): the burst-checking balancer and the per-connection one answer every
    /// packet alike, byte for byte, and count alike.
    #[test]
    fn burst_checks_answer_like_one_by_one(
        bursts in proptest::collection::vec(
            proptest::collection::vec((0u8..6, any::<u8>(), 1u16..6, any::<bool>()), 1..32),
            1..6,
        ),
    ) {
        let mut publisher = Publisher::new(config::snapshot("p.yaml", CONFIG), 3);
        let mut burst = balancer(&mut publisher, 0);
        let mut single = balancer(&mut publisher, usize::MAX);
        let pool = Pool::new(128);
        let (mut cb, mut cs) = (Counters::new(2), Counters::new(2));
        // The routed connections with a flow (admitted earlier), to count the checks
        // a routed packet makes: one exactly when its connection has none yet.
        let mut admitted = std::collections::HashSet::new();
        let mut routed_checks = 0u64;
        for (t, packets) in bursts.iter().enumerate() {
            // Few source ports, so bursts repeat connections and follow earlier ones up.
            let frames: Vec<Vec<u8>> = packets
                .iter()
                .map(|&(kind, client, sport, ack)| packet(kind, client, 40_000 + sport, ack))
                .collect();
            let now = t as u64 * 100;
            let out_b = run(&mut burst, &pool, &frames, now, &mut cb);
            let out_s = run(&mut single, &pool, &frames, now, &mut cs);
            for (&(kind, client, sport, _), (v, _)) in packets.iter().zip(&out_s) {
                if kind % 6 >= 3 && !admitted.contains(&(kind % 6, client, sport)) {
                    routed_checks += 1;
                    if matches!(v, Verdict::Tx(_)) {
                        admitted.insert((kind % 6, client, sport));
                    }
                }
            }
            prop_assert_eq!(out_b, out_s);
            prop_assert_eq!(counts(&cb), counts(&cs));
        }
        prop_assert_eq!(cs.events_of(Event::PolicyBurstChecked), 0);
        // Every check of a routed connection the burst balancer answered from its burst
        // lookup.
        prop_assert_eq!(cb.events_of(Event::PolicyBurstChecked), routed_checks);
    }
}
