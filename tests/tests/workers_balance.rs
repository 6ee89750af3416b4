//! Two balancer workers, each polling its own queue of both ports (the in-memory port
//! steers by a symmetric hash, like RSS): every flow's reply reaches the worker that owns
//! the flow, through the redirect ring when the hash sends it elsewhere, and comes back to
//! the client un-NATed with valid checksums.

use sluice_dataplane::balancer::{Balancer, BalancerConfig};
use sluice_dataplane::pipeline::{Forwarder, ForwarderConfig, IfAddr, NeighbourCache, PortConf};
use sluice_dataplane::port::{mem, Burst, Pool, Queue};
use sluice_dataplane::rcu::Publisher;
use sluice_dataplane::stats::Event;
use sluice_dataplane::wire::{ethernet, ip_proto, ipv4, tcp, EtherType, MacAddr};
use sluice_dataplane::worker::{Idle, Redirects, Worker, WorkerConfig};
use sluice_testkit::config;
use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

const CONFIG: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: w}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: w}
spec:
  gatewayClassName: sluice
  addresses: [{type: IPAddress, value: 10.77.0.10}]
  listeners: [{name: echo, port: 7000, protocol: TCP}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: echo, namespace: w}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: a, port: 7000}, {name: b, port: 7000}]}]
---
apiVersion: v1
kind: Service
metadata: {name: a, namespace: w}
spec: {selector: {app: a}, ports: [{port: 7000}]}
---
apiVersion: v1
kind: Service
metadata: {name: b, namespace: w}
spec: {selector: {app: b}, ports: [{port: 7000}]}
---
apiVersion: v1
kind: Pod
metadata: {name: a-0, namespace: w, labels: {app: a}}
status: {podIP: 10.78.0.11}
---
apiVersion: v1
kind: Pod
metadata: {name: b-0, namespace: w, labels: {app: b}}
status: {podIP: 10.78.0.12}
"#;

const CLIENT_MAC: MacAddr = MacAddr([0x02, 0xc1, 0, 0, 0, 1]);
const BACKEND_MAC: MacAddr = MacAddr([0x02, 0xbe, 0, 0, 0, 1]);

fn v4(s: &str) -> Ipv4Addr {
    s.parse().expect("ip")
}

#[allow(clippy::too_many_arguments)]
fn segment(
    dst_mac: MacAddr,
    src_mac: MacAddr,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    flags: u16,
    seq: u32,
    ack: u32,
) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 20 + 20];
    ethernet::Repr {
        dst_addr: dst_mac,
        src_addr: src_mac,
        ethertype: EtherType::Ipv4,
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut f[..]));
    let mut ip = ipv4::Packet::new_unchecked(&mut f[14..]);
    ipv4::Repr {
        src_addr: src,
        dst_addr: dst,
        protocol: ip_proto::TCP,
        payload_len: 20,
        ttl: 64,
    }
    .emit(&mut ip);
    tcp::Repr {
        src_port: sport,
        dst_port: dport,
        seq_number: seq,
        ack_number: ack,
        flags,
        window_len: 1000,
        payload_len: 0,
    }
    .emit(
        &mut tcp::Packet::new_unchecked(ip.payload_mut()),
        IpAddr::V4(src),
        IpAddr::V4(dst),
    );
    f
}

/// (src, dst, sport, dport, flags, seq, ack) of a frame, checksums verified.
fn read(frame: &[u8]) -> (Ipv4Addr, Ipv4Addr, u16, u16, u16, u32, u32) {
    let ip = ipv4::Packet::new_checked(&frame[14..]).expect("ipv4");
    assert!(ip.verify_checksum(), "IPv4 header checksum");
    let (s, d) = (ip.src_addr(), ip.dst_addr());
    let t = tcp::Packet::new_checked(ip.payload()).expect("tcp");
    let r = tcp::Repr::parse(&t, IpAddr::V4(s), IpAddr::V4(d)).expect("TCP checksum");
    (
        s,
        d,
        r.src_port,
        r.dst_port,
        r.flags,
        r.seq_number,
        r.ack_number,
    )
}

fn drain(queues: &mut [Box<dyn Queue>]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for q in queues {
        let mut b = Burst::new();
        while q.rx_burst(&mut b) > 0 {
            out.extend(b.as_slice().iter().map(|p| p.data().to_vec()));
            b.clear();
        }
    }
    out
}

#[test]
fn replies_reach_the_flow_owner_through_the_redirect_ring() {
    let pool = Pool::new(8192);
    let (mut client, outside) = mem::pair("client", "outside", 2, 2048);
    let (inside, mut backend) = mem::pair("inside", "backend", 2, 2048);
    let ports = vec![
        PortConf {
            name: "outside".into(),
            mac: outside.port.mac(),
            addrs: vec![IfAddr {
                addr: "10.77.0.2".parse().expect("ip"),
                prefix_len: 24,
            }],
        },
        PortConf {
            name: "inside".into(),
            mac: inside.port.mac(),
            addrs: vec![IfAddr {
                addr: "10.78.0.2".parse().expect("ip"),
                prefix_len: 24,
            }],
        },
    ];
    let (out_mac, in_mac) = (ports[0].mac, ports[1].mac);
    let conf = Arc::new(
        ForwarderConfig::with_virtual(ports, &[], vec!["10.77.0.10".parse().expect("vip")])
            .expect("config"),
    );
    let neigh = Arc::new(NeighbourCache::new(64));
    neigh.learn("10.77.0.1".parse().expect("ip"), CLIENT_MAC, 0);
    neigh.learn("10.78.0.11".parse().expect("ip"), BACKEND_MAC, 0);
    neigh.learn("10.78.0.12".parse().expect("ip"), BACKEND_MAC, 0);

    let snap = config::snapshot("w.yaml", CONFIG);
    let mut publisher = Publisher::new(snap, 2);
    let redirects = Redirects::new(2, 1024);
    let mut outside_q = outside.queues.into_iter();
    let mut inside_q = inside.queues.into_iter();
    let mut workers: Vec<Worker<Balancer>> = (0..2)
        .map(|w| {
            let stage = Balancer::new(
                Forwarder::new(conf.clone(), neigh.clone()),
                publisher.reader().expect("reader"),
                BalancerConfig {
                    worker: w,
                    workers: 2,
                    flow_capacity: 4096,
                    ..BalancerConfig::default()
                },
            );
            Worker::new(
                WorkerConfig {
                    id: w,
                    core: None,
                    idle: Idle::Spin,
                },
                vec![
                    outside_q.next().expect("queue"),
                    inside_q.next().expect("queue"),
                ],
                stage,
            )
            .with_redirects(redirects.clone())
        })
        .collect();
    let poll = |workers: &mut Vec<Worker<Balancer>>| {
        for _ in 0..8 {
            for w in workers.iter_mut() {
                while w.poll_once(0) > 0 {}
                w.flush();
            }
        }
    };

    // 300 SYNs from distinct client ports.
    const N: u16 = 300;
    for i in 0..N {
        let f = segment(
            out_mac,
            CLIENT_MAC,
            v4("10.77.0.1"),
            v4("10.77.0.10"),
            30_000 + i,
            7000,
            tcp::flags::SYN,
            1000 + u32::from(i),
            0,
        );
        let mut b = Burst::new();
        let _ = b.push(pool.alloc_copy(&f).expect("buffer"));
        client.queues[0].tx_burst(&mut b);
    }
    poll(&mut workers);
    let syns = drain(&mut backend.queues);
    assert_eq!(syns.len(), usize::from(N), "every SYN reached a backend");
    let ranges: Vec<(u16, u16)> = workers.iter().map(|w| w.stage().snat_ports()).collect();
    let mut snat_ports = HashSet::new();
    for f in &syns {
        let (s, d, sp, dp, flags, seq, _) = read(f);
        assert_eq!(s, v4("10.78.0.2"), "SNAT address");
        assert!(d == v4("10.78.0.11") || d == v4("10.78.0.12"));
        assert_eq!(dp, 7000);
        assert_eq!(flags, tcp::flags::SYN);
        assert!(snat_ports.insert(sp), "SNAT ports are unique");
        // The backend answers from where it was reached.
        let reply = segment(
            in_mac,
            BACKEND_MAC,
            d,
            s,
            dp,
            sp,
            tcp::flags::SYN | tcp::flags::ACK,
            777,
            seq.wrapping_add(1),
        );
        let mut b = Burst::new();
        let _ = b.push(pool.alloc_copy(&reply).expect("buffer"));
        backend.queues[0].tx_burst(&mut b);
    }
    // Each worker created flows only in its own SNAT range.
    let per_worker: Vec<usize> = ranges
        .iter()
        .map(|(lo, hi)| snat_ports.iter().filter(|p| (lo..=hi).contains(p)).count())
        .collect();
    assert_eq!(per_worker.iter().sum::<usize>(), usize::from(N));
    assert!(
        per_worker.iter().all(|&n| n > 0),
        "both workers own flows: {per_worker:?}"
    );

    poll(&mut workers);
    let answers = drain(&mut client.queues);
    assert_eq!(
        answers.len(),
        usize::from(N),
        "every SYN-ACK reached the client"
    );
    let mut clients = HashSet::new();
    for f in &answers {
        let (s, d, sp, dp, flags, seq, ack) = read(f);
        assert_eq!(
            (s, sp),
            (v4("10.77.0.10"), 7000),
            "from the virtual address"
        );
        assert_eq!(d, v4("10.77.0.1"));
        assert_eq!(flags, tcp::flags::SYN | tcp::flags::ACK);
        assert_eq!(seq, 777);
        assert_eq!(ack, 1000 + u32::from(dp - 30_000) + 1, "seq/ack untouched");
        assert!(clients.insert(dp));
    }
    let redirected: u64 = workers
        .iter()
        .map(|w| w.counters().events_of(Event::RedirectedOut))
        .sum();
    let arrived: u64 = workers
        .iter()
        .map(|w| w.counters().events_of(Event::RedirectedIn))
        .sum();
    assert!(
        redirected > 0,
        "the hash sent some replies to the other worker"
    );
    assert_eq!(redirected, arrived);
    assert_eq!(publisher.reclaim(), 0);
    drop(workers);
    assert_eq!(pool.in_use(), 0, "every buffer returned");
}
