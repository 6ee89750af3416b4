//! Revocation says so: a flow that a reloaded policy denies is closed on its next packet
//! with a TCP RST to both peers (sequence numbers they accept: the packet's own
//! acknowledgment towards its sender, its sequence number towards the other peer, both
//! through the flow's NAT) or, for UDP, an ICMP administratively prohibited to the
//! sender; counted as `policy_revoked` and `flow_revoked`. The balancer stage alone, fed
//! literal segments (the kernel test in `kernel_balance.rs` shows a real client getting
//! ECONNRESET).

use sluice_dataplane::balancer::{Balancer, BalancerConfig};
use sluice_dataplane::pipeline::{Ctx, Stage, StageIo, Verdict};
use sluice_dataplane::port::{Pkt, Pool};
use sluice_dataplane::rcu::Publisher;
use sluice_dataplane::stats::{Counters, DropReason, Event};
use sluice_dataplane::tables::snapshot::Snapshot;
use sluice_dataplane::wire::{ethernet, icmpv4, ip_proto, ipv4, tcp, udp, EtherType, MacAddr};
use sluice_testkit::config;
use sluice_tests::stage::{self, IN_MAC, OUT_MAC, PEER};
use std::net::IpAddr;

/// A TCP and a UDP listener on 10.77.0.10 to pod a-0 (10.78.0.11), whose ingress admits
/// `CLIENTS`.
fn manifests(clients: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: p}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: p}}
spec:
  gatewayClassName: sluice
  addresses: [{{type: IPAddress, value: 10.77.0.10}}]
  listeners:
  - {{name: tcp, port: 7000, protocol: TCP}}
  - {{name: udp, port: 7001, protocol: UDP}}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {{name: tcp, namespace: p}}
spec:
  parentRefs: [{{name: gw, sectionName: tcp}}]
  rules: [{{backendRefs: [{{name: a, port: 7000}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: UDPRoute
metadata: {{name: udp, namespace: p}}
spec:
  parentRefs: [{{name: gw, sectionName: udp}}]
  rules: [{{backendRefs: [{{name: a, port: 7000}}]}}]
---
apiVersion: v1
kind: Service
metadata: {{name: a, namespace: p}}
spec: {{selector: {{app: a}}, ports: [{{port: 7000}}]}}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {{name: a-from-clients, namespace: p}}
spec:
  podSelector: {{matchLabels: {{app: a}}}}
  ingress:
  - from: [{{ipBlock: {{cidr: {clients}}}}}]
    ports: [{{port: 7000}}, {{port: 7000, protocol: UDP}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: a-0, namespace: p, labels: {{app: a}}}}
status: {{podIP: 10.78.0.11}}
"#
    )
}

/// One IPv4 segment or datagram to `to_mac`, from [`PEER`].
#[allow(clippy::too_many_arguments)]
fn seg(
    to_mac: MacAddr,
    proto: u8,
    (src, sport): (&str, u16),
    (dst, dport): (&str, u16),
    flags: u16,
    seq: u32,
    ack: u32,
    payload: &[u8],
) -> Vec<u8> {
    let (s, d): (IpAddr, IpAddr) = (src.parse().unwrap(), dst.parse().unwrap());
    let l4 = if proto == ip_proto::TCP { 20 } else { 8 } + payload.len();
    let mut f = vec![0u8; 14 + 20 + l4];
    ethernet::Repr {
        dst_addr: to_mac,
        src_addr: PEER,
        ethertype: EtherType::Ipv4,
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut f[..]));
    let (IpAddr::V4(s4), IpAddr::V4(d4)) = (s, d) else {
        panic!("IPv4 only")
    };
    ipv4::Repr {
        src_addr: s4,
        dst_addr: d4,
        protocol: proto,
        payload_len: l4,
        ttl: 64,
    }
    .emit(&mut ipv4::Packet::new_unchecked(&mut f[14..]));
    f[34 + l4 - payload.len()..].copy_from_slice(payload);
    if proto == ip_proto::TCP {
        tcp::Repr {
            src_port: sport,
            dst_port: dport,
            seq_number: seq,
            ack_number: ack,
            flags,
            window_len: 1000,
            payload_len: payload.len(),
        }
        .emit(&mut tcp::Packet::new_unchecked(&mut f[34..]), s, d);
    } else {
        udp::Repr {
            src_port: sport,
            dst_port: dport,
            payload_len: payload.len(),
        }
        .emit(&mut udp::Packet::new_unchecked(&mut f[34..]), s, d);
    }
    f
}

/// Frames a stage sent through StageIo, with their ports.
type Sent = Vec<(u32, Vec<u8>)>;

struct Rig {
    publisher: Publisher<Snapshot>,
    b: Balancer,
    pool: Pool,
    io: StageIo,
    c: Counters,
}

impl Rig {
    fn new() -> Rig {
        let mut publisher =
            Publisher::new(config::snapshot("p.yaml", &manifests("10.77.0.0/24")), 3);
        let cfg = BalancerConfig {
            flow_capacity: 64,
            snat_ports: (30_000, 30_999),
            ..BalancerConfig::default()
        };
        let b = stage::balancer(&mut publisher, &["10.78.0.11", "10.77.0.1"], cfg);
        let pool = Pool::new(64);
        Rig {
            publisher,
            b,
            io: StageIo::new(Some(pool.clone().into())),
            pool,
            c: Counters::new(2),
        }
    }

    /// One packet through the stage on `port`: its verdict and bytes, and what the stage
    /// sent besides through StageIo.
    fn rx(&mut self, port: usize, frame: &[u8], now_ms: u64) -> (Verdict, Vec<u8>, Sent) {
        let mut pkts: Vec<Pkt> = vec![self.pool.alloc_copy(frame).expect("buffer")];
        let mut v = [Verdict::Drop(DropReason::BadPort)];
        let mut ctx = Ctx::with_io(now_ms, &mut self.c, &mut self.io);
        self.b.process_burst(port, &mut pkts, &mut v, &mut ctx);
        let out = self
            .io
            .drain()
            .map(|(p, pkt)| (p, pkt.data().to_vec()))
            .collect();
        (v[0], pkts[0].data().to_vec(), out)
    }

    fn deny(&mut self) {
        self.publisher
            .publish(config::snapshot("p.yaml", &manifests("10.99.0.0/24")));
    }
}

/// A TCP segment's (source, source port, destination, destination port, seq, ack, flags,
/// payload length).
type Fields = (String, u16, String, u16, u32, u32, u16, usize);

/// The TCP header fields of a frame: (src, sport, dst, dport, seq, ack, flags, payload
/// length), checksums verified.
fn tcp_of(f: &[u8]) -> Fields {
    let ip = ipv4::Packet::new_checked(&f[14..]).expect("ipv4");
    assert!(ip.verify_checksum());
    assert_eq!(ip.protocol(), ip_proto::TCP);
    let t = tcp::Packet::new_checked(ip.payload()).expect("tcp");
    assert!(t.verify_checksum(ip.src_addr().into(), ip.dst_addr().into()));
    (
        ip.src_addr().to_string(),
        t.src_port(),
        ip.dst_addr().to_string(),
        t.dst_port(),
        t.seq_number(),
        t.ack_number(),
        t.flags() & 0x3f,
        t.payload().len(),
    )
}

use tcp::flags::{ACK, PSH, RST, SYN};

/// Opens a NATed connection from 10.77.0.1:`sport` (client ISN 1000, backend ISN 5000):
/// the SNAT port the backend sees.
fn open(r: &mut Rig, sport: u16) -> u16 {
    let c = ("10.77.0.1", sport);
    let vip = ("10.77.0.10", 7000);
    let (v, out, _) = r.rx(
        0,
        &seg(OUT_MAC, ip_proto::TCP, c, vip, SYN, 1000, 0, b""),
        0,
    );
    assert_eq!(v, Verdict::Tx(1));
    let (_, snat_port, ..) = tcp_of(&out);
    let be = ("10.78.0.11", 7000);
    let snat = ("10.78.0.2", snat_port);
    let syn_ack = seg(IN_MAC, ip_proto::TCP, be, snat, SYN | ACK, 5000, 1001, b"");
    assert_eq!(r.rx(1, &syn_ack, 1).0, Verdict::Tx(0));
    let ack = seg(OUT_MAC, ip_proto::TCP, c, vip, ACK, 1001, 5001, b"");
    assert_eq!(r.rx(0, &ack, 2).0, Verdict::Tx(1));
    let data = seg(
        OUT_MAC,
        ip_proto::TCP,
        c,
        vip,
        ACK | PSH,
        1001,
        5001,
        b"hello",
    );
    assert_eq!(r.rx(0, &data, 3).0, Verdict::Tx(1));
    let echo = seg(
        IN_MAC,
        ip_proto::TCP,
        be,
        snat,
        ACK | PSH,
        5001,
        1006,
        b"hello",
    );
    assert_eq!(r.rx(1, &echo, 4).0, Verdict::Tx(0));
    snat_port
}

#[test]
fn a_revoked_tcp_flow_is_reset_both_ways_from_the_client_side() {
    let mut r = Rig::new();
    let snat_port = open(&mut r, 40_000);
    r.deny();
    // The client's next segment: it goes no further; the client gets a RST at the
    // sequence number it acknowledged, the backend one at the client's sequence number,
    // each from the address it talks to.
    let more = seg(
        OUT_MAC,
        ip_proto::TCP,
        ("10.77.0.1", 40_000),
        ("10.77.0.10", 7000),
        ACK | PSH,
        1006,
        5006,
        b"more",
    );
    let (v, back, onward) = r.rx(0, &more, 10);
    assert_eq!(v, Verdict::Tx(0));
    assert_eq!(&back[..12], &[PEER.0, OUT_MAC.0].concat()[..]);
    assert_eq!(
        tcp_of(&back),
        (
            "10.77.0.10".into(),
            7000,
            "10.77.0.1".into(),
            40_000,
            5006,
            0,
            RST,
            0
        )
    );
    assert_eq!(onward.len(), 1, "one RST towards the backend");
    let (port, f) = &onward[0];
    assert_eq!(*port, 1);
    assert_eq!(&f[..12], &[PEER.0, IN_MAC.0].concat()[..]);
    assert_eq!(
        tcp_of(f),
        (
            "10.78.0.2".into(),
            snat_port,
            "10.78.0.11".into(),
            7000,
            1006,
            0,
            RST,
            0
        )
    );
    assert_eq!(r.c.drops_of(DropReason::PolicyRevoked), 1);
    assert_eq!(r.c.events_of(Event::FlowRevoked), 1);
    assert_eq!(r.b.flows().len(), 0, "the flow is gone");
    // Whatever comes later of it meets no flow.
    let (v, _, out) = r.rx(0, &more, 11);
    assert_eq!((v, out.len()), (Verdict::Drop(DropReason::NoFlow), 0));
    assert_eq!(r.pool.in_use(), 0);
}

#[test]
fn a_revoked_tcp_flow_is_reset_both_ways_from_the_backend_side() {
    let mut r = Rig::new();
    let snat_port = open(&mut r, 40_001);
    r.deny();
    let push = seg(
        IN_MAC,
        ip_proto::TCP,
        ("10.78.0.11", 7000),
        ("10.78.0.2", snat_port),
        ACK | PSH,
        5006,
        1006,
        b"late",
    );
    let (v, back, onward) = r.rx(1, &push, 10);
    assert_eq!(v, Verdict::Tx(1));
    assert_eq!(
        tcp_of(&back),
        (
            "10.78.0.2".into(),
            snat_port,
            "10.78.0.11".into(),
            7000,
            1006,
            0,
            RST,
            0
        )
    );
    assert_eq!(onward.len(), 1);
    assert_eq!(onward[0].0, 0);
    assert_eq!(
        tcp_of(&onward[0].1),
        (
            "10.77.0.10".into(),
            7000,
            "10.77.0.1".into(),
            40_001,
            5006,
            0,
            RST,
            0
        )
    );
    assert_eq!(r.c.events_of(Event::FlowRevoked), 1);
    assert_eq!(r.pool.in_use(), 0);
}

#[test]
fn a_revoked_udp_flow_is_answered_administratively_prohibited() {
    let mut r = Rig::new();
    let c = ("10.77.0.1", 5353);
    let vip = ("10.77.0.10", 7001);
    let q = seg(OUT_MAC, ip_proto::UDP, c, vip, 0, 0, 0, b"query");
    assert_eq!(r.rx(0, &q, 0).0, Verdict::Tx(1));
    r.deny();
    let (v, back, out) = r.rx(0, &q, 10);
    assert_eq!((v, out.len()), (Verdict::Tx(0), 0));
    let ip = ipv4::Packet::new_checked(&back[14..]).unwrap();
    assert_eq!(ip.src_addr().to_string(), "10.77.0.10");
    assert_eq!(ip.dst_addr().to_string(), "10.77.0.1");
    let icmp = icmpv4::Packet::new_checked(ip.payload()).unwrap();
    assert!(icmp.verify_checksum());
    // Destination unreachable, communication administratively prohibited (RFC 1812).
    assert_eq!((icmp.msg_type(), icmp.msg_code()), (3, 13));
    assert_eq!(r.c.drops_of(DropReason::PolicyRevoked), 1);
    assert_eq!(r.c.events_of(Event::FlowRevoked), 1);
    assert_eq!(r.pool.in_use(), 0);
}
