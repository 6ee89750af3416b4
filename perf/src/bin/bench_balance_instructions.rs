//! The balancer stage alone, deterministic, for instruction counts under callgrind (the
//! machines are shared and noisy; instructions are not). Tables as `bench_balance`
//! compiles them (a Gateway on 10.77.0.10:7000, a TCPRoute to 256 pods, a
//! NetworkPolicy); 1024 clients in a fixed shuffled order; bursts of 32 frames copied
//! from templates into pool buffers before each burst. One phase per run:
//!
//! - `established`: the clients' SYNs (not counted), then `ROUNDS` rounds of their ACKs:
//!   flow hit, NAT, forward;
//! - `new`: the clients' SYNs: listener, Maglev, policy, SNAT, flow insert, NAT, forward;
//! - `other`: `ROUNDS` rounds of ICMP echo requests from the clients to hosts on the
//!   inside network: routed traffic the balancer leaves to the forwarder.
//!
//! Usage: `bench_balance_instructions PHASE [ROUNDS]` under callgrind, collecting only
//! inside `Balancer::process_burst` (the command line: perf/NOTES.md, "Benchmark
//! harness"); instructions a packet = collected / `packets` (printed as JSON), minus the
//! SYNs' share for `established` (a `new` run's figure).

use sluice_ctrl::compile::build;
use sluice_ctrl::load::{load_str, Loaded};
use sluice_dataplane::balancer::{Balancer, BalancerConfig};
use sluice_dataplane::flow::Timeouts;
use sluice_dataplane::pipeline::{
    Ctx, Forwarder, ForwarderConfig, IfAddr, NeighbourCache, PortConf, Stage, Verdict,
};
use sluice_dataplane::port::{Pkt, Pool, BURST};
use sluice_dataplane::rcu::Publisher;
use sluice_dataplane::stats::{Counters, DropReason};
use sluice_dataplane::tables::snapshot::Snapshot;
use sluice_dataplane::wire::{ethernet, icmpv4, ip_proto, ipv4, tcp, EtherType, MacAddr};
use sluice_perf::fixtures::tcp_frame;
use sluice_testkit::manifests as docs;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

const SLUICE_MAC: MacAddr = MacAddr([0x02, 0x51, 0, 0, 0, 0x10]);
const INSIDE_MAC: MacAddr = MacAddr([0x02, 0x51, 0, 0, 0, 0x11]);
const CLIENT_MAC: MacAddr = MacAddr([0x02, 0xc1, 0, 0, 0, 1]);
const BACKEND_MAC: MacAddr = MacAddr([0x02, 0xbe, 0, 0, 0, 1]);
const VIP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 10);
const VIP_PORT: u16 = 7000;
const BACKENDS: usize = 256;
const FLOWS: usize = 1024;

fn backend_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 78, 1 + (i / 200) as u8, 10 + (i % 200) as u8)
}

fn manifests() -> String {
    let mut y = [
        docs::bench_appliance(VIP, Some(65537)),
        docs::namespace("b"),
        docs::service("b", "pool", VIP_PORT),
        docs::allow_from("b", "from-clients", "10.77.0.0/16", &[VIP_PORT]),
        docs::tcp_gateway("b", "echo", VIP, VIP_PORT, "pool"),
    ]
    .concat();
    for i in 0..BACKENDS {
        y.push_str(&docs::pod("b", &format!("p{i}"), "pool", backend_ip(i)));
    }
    y
}

fn client(i: usize) -> (Ipv4Addr, u16) {
    let a = 0x0a4d_0101u32 + (i / 50_000) as u32;
    (Ipv4Addr::from(a), 10_000 + (i % 50_000) as u16)
}

/// A 60-byte TCP segment from client `i` to the VIP.
fn segment(i: usize, flags: u16) -> Vec<u8> {
    let mut out = vec![0u8; 60];
    tcp_frame(
        (CLIENT_MAC, SLUICE_MAC),
        client(i),
        (VIP, VIP_PORT),
        flags,
        &mut out,
    );
    out
}

fn eth(out: &mut [u8], src: MacAddr, dst: MacAddr) {
    ethernet::Repr {
        dst_addr: dst,
        src_addr: src,
        ethertype: EtherType::Ipv4,
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut out[..]));
}

/// A 60-byte ICMP echo request from client `i` to a host on the inside network (not a
/// pod: no policy isolates it), routed through sluice.
fn echo(i: usize) -> Vec<u8> {
    let mut out = vec![0u8; 60];
    let (src, _) = client(i);
    eth(&mut out, CLIENT_MAC, SLUICE_MAC);
    let dst = Ipv4Addr::new(10, 78, 200, 1 + (i % 8) as u8);
    let mut ip = ipv4::Packet::new_unchecked(&mut out[14..14 + 20 + 8 + 18]);
    ipv4::Repr {
        src_addr: src,
        dst_addr: dst,
        protocol: ip_proto::ICMP,
        payload_len: 8 + 18,
        ttl: 64,
    }
    .emit(&mut ip);
    icmpv4::Repr::EchoRequest {
        ident: 1,
        seq_no: i as u16,
        data_len: 18,
    }
    .emit(&mut icmpv4::Packet::new_unchecked(ip.payload_mut()));
    out
}

fn balancer(publisher: &Publisher<Snapshot>) -> Balancer {
    let addr = |a: &str| {
        vec![IfAddr {
            addr: a.parse().unwrap(),
            prefix_len: 16,
        }]
    };
    let conf = ForwarderConfig::with_virtual(
        vec![
            PortConf {
                name: "outside".into(),
                mac: SLUICE_MAC,
                addrs: addr("10.77.0.2"),
            },
            PortConf {
                name: "inside".into(),
                mac: INSIDE_MAC,
                addrs: addr("10.78.0.2"),
            },
        ],
        &[],
        vec![IpAddr::V4(VIP)],
    )
    .unwrap();
    let neigh = Arc::new(NeighbourCache::new(16 * BACKENDS));
    for i in 0..BACKENDS {
        neigh.learn(IpAddr::V4(backend_ip(i)), BACKEND_MAC, 0);
    }
    for k in 1..=8 {
        neigh.learn(IpAddr::V4(Ipv4Addr::new(10, 78, 200, k)), BACKEND_MAC, 0);
    }
    neigh.learn(IpAddr::V4(client(0).0), CLIENT_MAC, 0);
    Balancer::new(
        Forwarder::new(Arc::new(conf), neigh),
        publisher.reader().unwrap(),
        BalancerConfig {
            flow_capacity: 1 << 16,
            timeouts: Timeouts::default(),
            // One load generator is one source: no per-source budget.
            new_flows_per_second_per_source: 0,
            ..BalancerConfig::default()
        },
    )
}

struct Run {
    bal: Balancer,
    pool: Pool,
    pkts: Vec<Pkt>,
    verdicts: [Verdict; BURST],
    counters: Counters,
    tx: u64,
}

impl Run {
    /// Plays `frames` in bursts of 32, `rounds` times over.
    #[inline(always)]
    fn play(&mut self, frames: &[Vec<u8>], rounds: usize) {
        for _ in 0..rounds {
            for chunk in frames.chunks(BURST) {
                self.pkts.clear();
                for f in chunk {
                    self.pkts.push(self.pool.alloc_copy(f).unwrap());
                }
                let mut ctx = Ctx::new(0, &mut self.counters);
                let n = self.pkts.len();
                self.bal
                    .process_burst(0, &mut self.pkts, &mut self.verdicts[..n], &mut ctx);
                self.tx += self.verdicts[..n]
                    .iter()
                    .filter(|v| matches!(v, Verdict::Tx(_)))
                    .count() as u64;
                self.pkts.clear();
            }
        }
    }
}

#[inline(never)]
fn phase_established(r: &mut Run, acks: &[Vec<u8>], rounds: usize) {
    r.play(acks, rounds);
}

#[inline(never)]
fn phase_new(r: &mut Run, syns: &[Vec<u8>]) {
    r.play(syns, 1);
}

#[inline(never)]
fn phase_other(r: &mut Run, echos: &[Vec<u8>], rounds: usize) {
    r.play(echos, rounds);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let phase = args.get(1).map(String::as_str).unwrap_or("established");
    let rounds: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(20);
    let mut loaded = Loaded::default();
    load_str("bench.yaml", &manifests(), &mut loaded);
    let snap = build(loaded).expect("the configuration builds").snapshot;
    let publisher = Publisher::new(snap, 1);
    let mut r = Run {
        bal: balancer(&publisher),
        pool: Pool::new(256),
        pkts: Vec::with_capacity(BURST),
        verdicts: [Verdict::Drop(DropReason::BadPort); BURST],
        counters: Counters::new(2),
        tx: 0,
    };
    // A fixed shuffle of the flows (xorshift).
    let mut order: Vec<usize> = (0..FLOWS).collect();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..order.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let syns: Vec<Vec<u8>> = order.iter().map(|&i| segment(i, tcp::flags::SYN)).collect();
    let packets;
    match phase {
        "new" => {
            phase_new(&mut r, &syns);
            packets = syns.len();
        }
        "other" => {
            let echos: Vec<Vec<u8>> = order.iter().map(|&i| echo(i)).collect();
            phase_other(&mut r, &echos, rounds);
            packets = echos.len() * rounds;
        }
        _ => {
            r.play(&syns, 1);
            r.tx = 0;
            let acks: Vec<Vec<u8>> = order.iter().map(|&i| segment(i, tcp::flags::ACK)).collect();
            phase_established(&mut r, &acks, rounds);
            packets = acks.len() * rounds;
        }
    }
    println!(
        "{{\"phase\": \"{phase}\", \"packets\": {packets}, \"tx\": {}, \"drops\": {}}}",
        r.tx,
        r.counters.total_drops()
    );
}
