//! Properties of the balancer stage on arbitrary input: it never panics, decides every
//! packet (send or a named drop), and its NAT rewrite keeps checksums right: a packet whose
//! IPv4 header and TCP/UDP checksums were valid leaves with valid ones (checked against a
//! full recomputation, the oracle), over random clients, ports, payloads and mutations.

use proptest::prelude::*;
use sluice_dataplane::balancer::{Balancer, BalancerConfig};
use sluice_dataplane::pipeline::{Ctx, Stage, Verdict};
use sluice_dataplane::port::{Pkt, Pool};
use sluice_dataplane::rcu::Publisher;
use sluice_dataplane::stats::Counters;
use sluice_dataplane::tables::snapshot::Snapshot;
use sluice_dataplane::wire::{ethernet, ip_proto, ipv4, ipv6, tcp, udp, EtherType};
use sluice_testkit::config;
use sluice_tests::stage::{self, frame};
use std::net::IpAddr;

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
  - {name: bad, port: 7100, protocol: TCP}
  - {name: badudp, port: 7101, protocol: UDP}
  - {name: udp, port: 7001, protocol: UDP}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: UDPRoute
metadata: {name: udp, namespace: p}
spec:
  parentRefs: [{name: gw, sectionName: udp}]
  rules: [{backendRefs: [{name: a, port: 7000}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: UDPRoute
metadata: {name: badudp, namespace: p}
spec:
  parentRefs: [{name: gw, sectionName: badudp}]
  rules: [{backendRefs: [{name: ghost, port: 53}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: tcp, namespace: p}
spec:
  parentRefs: [{name: gw, sectionName: tcp}]
  rules: [{backendRefs: [{name: a, port: 7000}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: bad, namespace: p}
spec:
  parentRefs: [{name: gw, sectionName: bad}]
  rules: [{backendRefs: [{name: ghost, port: 7000}]}]
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

/// The stage with the neighbours these tests address and a small flow table.
fn balancer(publisher: &mut Publisher<Snapshot>) -> Balancer {
    let neighbours = [
        "10.77.0.1",
        "10.77.0.99",
        "10.78.0.11",
        "fd77::1",
        "fd78::11",
    ];
    let cfg = BalancerConfig {
        flow_capacity: 256,
        ..BalancerConfig::default()
    };
    stage::balancer(publisher, &neighbours, cfg)
}

/// Whether a frame's IP header and TCP/UDP checksums are valid (full recomputation).
/// `None` when it is not a TCP/UDP packet over IPv4/IPv6.
fn checksums_ok(f: &[u8]) -> Option<bool> {
    let e = ethernet::Frame::new_checked(f).ok()?;
    match e.ethertype() {
        EtherType::Ipv4 => {
            let ip = ipv4::Packet::new_checked(&f[14..]).ok()?;
            let (s, d) = (IpAddr::V4(ip.src_addr()), IpAddr::V4(ip.dst_addr()));
            let l4 = match ip.protocol() {
                ip_proto::TCP => tcp::Packet::new_checked(ip.payload())
                    .ok()
                    .map(|t| t.verify_checksum(s, d))?,
                ip_proto::UDP => udp::Packet::new_checked(ip.payload())
                    .ok()
                    .map(|u| u.checksum() == 0 || u.verify_checksum(s, d))?,
                _ => return None,
            };
            Some(ip.verify_checksum() && l4)
        }
        EtherType::Ipv6 => {
            let ip = ipv6::Packet::new_checked(&f[14..]).ok()?;
            let (s, d) = (IpAddr::V6(ip.src_addr()), IpAddr::V6(ip.dst_addr()));
            match ip.next_header() {
                ip_proto::TCP => tcp::Packet::new_checked(ip.payload())
                    .ok()
                    .map(|t| t.verify_checksum(s, d)),
                ip_proto::UDP => udp::Packet::new_checked(ip.payload())
                    .ok()
                    .map(|u| u.verify_checksum(s, d)),
                _ => None,
            }
        }
        _ => None,
    }
}

fn base_frames() -> Vec<Vec<u8>> {
    let syn = tcp::flags::SYN;
    let ack = tcp::flags::ACK;
    vec![
        frame(
            ip_proto::TCP,
            ("10.77.0.1", 40000),
            ("10.77.0.10", 7000),
            syn,
            b"",
        ),
        frame(
            ip_proto::TCP,
            ("10.77.0.1", 40000),
            ("10.77.0.10", 7000),
            ack,
            b"hello",
        ),
        frame(
            ip_proto::TCP,
            ("10.77.0.1", 40001),
            ("10.77.0.10", 7100),
            syn,
            b"",
        ),
        frame(
            ip_proto::TCP,
            ("10.78.0.11", 7000),
            ("10.78.0.2", 2000),
            syn | ack,
            b"",
        ),
        frame(
            ip_proto::UDP,
            ("10.77.0.1", 5000),
            ("10.77.0.10", 7000),
            0,
            b"datagram",
        ),
        frame(
            ip_proto::UDP,
            ("10.77.0.1", 5000),
            ("10.78.0.11", 53),
            0,
            b"routed",
        ),
        frame(
            ip_proto::TCP,
            ("10.77.0.99", 40002),
            ("10.78.0.11", 22),
            syn,
            b"",
        ),
        frame(
            ip_proto::TCP,
            ("fd77::1", 40003),
            ("fd77::10", 7000),
            syn,
            b"",
        ),
        frame(
            ip_proto::UDP,
            ("fd77::1", 40004),
            ("fd78::11", 9),
            0,
            b"six",
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Sequences of real and mutated frames: every packet gets a verdict, nothing panics,
    /// and unmutated TCP/UDP frames that are sent leave with valid checksums.
    #[test]
    fn never_panics_and_keeps_checksums(
        steps in proptest::collection::vec(
            (0usize..9, any::<u16>(), proptest::option::of((any::<u16>(), any::<u8>())), 0usize..3),
            1..24,
        ),
    ) {
        let mut publisher = Publisher::new(config::snapshot("p.yaml", CONFIG), 1);
        let mut b = balancer(&mut publisher);
        let pool = Pool::new(64);
        let bases = base_frames();
        let mut counters = Counters::new(2);
        for (i, (which, port, mutation, in_port)) in steps.into_iter().enumerate() {
            let mut f = bases[which].clone();
            // Vary the client port so flows differ; keep checksums valid via rebuilding.
            if which == 0 || which == 7 {
                let ip_len = if which == 7 { 40 } else { 20 };
                let s = 14 + ip_len;
                let old = u16::from_be_bytes([f[s], f[s + 1]]);
                f[s..s + 2].copy_from_slice(&port.max(1).to_be_bytes());
                let c = u16::from_be_bytes([f[s + 16], f[s + 17]]);
                let c = sluice_dataplane::wire::checksum::update16(c, old, port.max(1));
                f[s + 16..s + 18].copy_from_slice(&c.to_be_bytes());
            }
            let mutated = mutation.is_some() || in_port != 0;
            if let Some((at, byte)) = mutation {
                let at = usize::from(at) % (f.len() + 8);
                if at < f.len() {
                    f[at] ^= byte | 1;
                } else {
                    f.truncate(at - f.len());
                }
            }
            let valid_in = checksums_ok(&f) == Some(true);
            let mut pkts: Vec<Pkt> = vec![pool.alloc_copy(&f).expect("buffer")];
            let mut verdicts = [Verdict::Drop(sluice_dataplane::stats::DropReason::BadPort)];
            let mut ctx = Ctx::new(i as u64 * 10, &mut counters);
            b.process_burst(in_port, &mut pkts, &mut verdicts, &mut ctx);
            b.maintain(&mut ctx);
            if let Verdict::Tx(_) = verdicts[0] {
                if valid_in && !mutated {
                    prop_assert_eq!(checksums_ok(pkts[0].data()), Some(true));
                }
            }
        }
        drop(b);
        prop_assert_eq!(publisher.reclaim(), 0);
    }
}

/// A reject slot answers a SYN with a RST (acknowledging the SYN) and a datagram with an
/// ICMP / ICMPv6 port unreachable quoting it, out of the port it came in on, checksums
/// valid.
#[test]
fn reject_slots_answer_with_rst_and_port_unreachable() {
    use sluice_dataplane::wire::icmpv4;
    let mut publisher = Publisher::new(config::snapshot("p.yaml", CONFIG), 1);
    let mut b = balancer(&mut publisher);
    let pool = Pool::new(8);
    let mut counters = Counters::new(2);
    let mut run = |f: Vec<u8>| {
        let mut pkts = vec![pool.alloc_copy(&f).expect("buffer")];
        let mut v = [Verdict::Drop(sluice_dataplane::stats::DropReason::BadPort)];
        b.process_burst(0, &mut pkts, &mut v, &mut Ctx::new(0, &mut counters));
        assert_eq!(
            v[0],
            Verdict::Tx(0),
            "answered out of the port it came in on"
        );
        pkts.remove(0).data().to_vec()
    };
    // TCP: RST|ACK acknowledging the SYN, from the virtual address.
    let rst = run(frame(
        ip_proto::TCP,
        ("10.77.0.1", 40001),
        ("10.77.0.10", 7100),
        tcp::flags::SYN,
        b"",
    ));
    let ip = ipv4::Packet::new_checked(&rst[14..]).expect("ipv4");
    assert!(ip.verify_checksum());
    assert_eq!(
        (ip.src_addr(), ip.dst_addr()),
        (
            "10.77.0.10".parse().expect("ip"),
            "10.77.0.1".parse().expect("ip")
        )
    );
    let t = tcp::Packet::new_checked(ip.payload()).expect("tcp");
    let r = tcp::Repr::parse(
        &t,
        "10.77.0.10".parse().expect("ip"),
        "10.77.0.1".parse().expect("ip"),
    )
    .expect("checksum");
    assert_eq!((r.src_port, r.dst_port), (7100, 40001));
    assert_eq!(r.flags, tcp::flags::RST | tcp::flags::ACK);
    assert_eq!(r.ack_number, 2, "acknowledges the SYN (seq 1 + 1)");
    // UDP over IPv4: ICMP port unreachable quoting the IP header and 8 bytes.
    let sent = frame(
        ip_proto::UDP,
        ("10.77.0.1", 5000),
        ("10.77.0.10", 7101),
        0,
        b"query",
    );
    let icmp = run(sent.clone());
    let ip = ipv4::Packet::new_checked(&icmp[14..]).expect("ipv4");
    assert!(ip.verify_checksum());
    assert_eq!(ip.protocol(), ip_proto::ICMP);
    let m = icmpv4::Packet::new_checked(ip.payload()).expect("icmp");
    assert!(m.verify_checksum());
    assert_eq!(
        (m.msg_type(), m.msg_code()),
        (icmpv4::msg_type::DST_UNREACHABLE, 3)
    );
    assert_eq!(
        &ip.payload()[8..],
        &sent[14..14 + 28],
        "quotes the datagram's start"
    );
    assert!(counters.events_of(sluice_dataplane::stats::Event::RejectSent) >= 2);
}

/// One burst holding several packets of a flow that does not exist yet: the first creates
/// it, the others find it (lookups made ahead of the burst are made again), so every
/// datagram goes to the same backend through one flow; a burst after a revocation finds
/// the flow gone.
#[test]
fn packets_of_a_new_flow_in_one_burst_share_it() {
    let mut publisher = Publisher::new(config::snapshot("p.yaml", CONFIG), 1);
    let mut b = balancer(&mut publisher);
    let pool = Pool::new(16);
    let mut counters = Counters::new(2);
    let f = frame(
        ip_proto::UDP,
        ("10.77.0.1", 5000),
        ("10.77.0.10", 7001),
        0,
        b"x",
    );
    let mut pkts: Vec<Pkt> = (0..4)
        .map(|_| pool.alloc_copy(&f).expect("buffer"))
        .collect();
    let mut v = [Verdict::Drop(sluice_dataplane::stats::DropReason::BadPort); 4];
    b.process_burst(0, &mut pkts, &mut v, &mut Ctx::new(0, &mut counters));
    assert!(v.iter().all(|v| *v == Verdict::Tx(1)), "{v:?}");
    assert_eq!(b.flows().len(), 1);
    let first = pkts[0].data().to_vec();
    assert!(
        pkts.iter().all(|p| p.data() == &first[..]),
        "same rewrite for all"
    );
}

/// A SYN reusing the 5-tuple of a connection that was reset (or is in TIME_WAIT) opens a
/// new flow with the current tables instead of riding the old one (Linux conntrack does
/// the same), so a drained backend stays drained for reused client ports.
#[test]
fn a_syn_on_a_closed_flow_opens_a_new_one() {
    let mut publisher = Publisher::new(config::snapshot("p.yaml", CONFIG), 1);
    let mut b = balancer(&mut publisher);
    let pool = Pool::new(8);
    let mut counters = Counters::new(2);
    let send = |b: &mut Balancer, flags: u16, counters: &mut Counters| {
        let f = frame(
            ip_proto::TCP,
            ("10.77.0.1", 40000),
            ("10.77.0.10", 7000),
            flags,
            b"",
        );
        let mut pkts = vec![pool.alloc_copy(&f).expect("buffer")];
        let mut v = [Verdict::Drop(sluice_dataplane::stats::DropReason::BadPort)];
        b.process_burst(0, &mut pkts, &mut v, &mut Ctx::new(0, counters));
        v[0]
    };
    use sluice_dataplane::stats::Event;
    assert_eq!(send(&mut b, tcp::flags::SYN, &mut counters), Verdict::Tx(1));
    // A retransmitted SYN of the same connection rides the existing flow.
    assert_eq!(send(&mut b, tcp::flags::SYN, &mut counters), Verdict::Tx(1));
    assert_eq!(counters.events_of(Event::FlowCreated), 1);
    assert_eq!(send(&mut b, tcp::flags::RST, &mut counters), Verdict::Tx(1));
    // After the reset, a SYN opens a fresh flow.
    assert_eq!(send(&mut b, tcp::flags::SYN, &mut counters), Verdict::Tx(1));
    assert_eq!(counters.events_of(Event::FlowCreated), 2);
    assert_eq!(b.flows().len(), 1);
}
