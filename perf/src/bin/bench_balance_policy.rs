//! `bench_balance_policy`: the balancer's new connections under many NetworkPolicies,
//! with their policy checked one connection at a time or a burst at a time.
//!
//! For each scenario (pods x policies of `bench_policy`'s generated cluster, its tables
//! built the way the control thread builds a snapshot), a trace of 65,536 connection
//! attempts per family (`bench_policy`'s mix: pod to pod, outside to pod, pod to
//! outside, node to pod; its SCTP share left out, which the balancer checks outside the
//! TCP/UDP path) becomes SYNs and datagrams routed through the [`Balancer`] stage: no
//! listener, so each is a policy check and, when allowed, a flow (denied ones are
//! dropped). Two balancers run side by side in this thread, fed the same bursts of 32:
//! `single`, which checks each new connection with `PolicyTables::verdict`
//! (`policy_bursts_from: usize::MAX`), and `burst`, which checks a burst's new
//! connections with one `PolicyTables::verdicts` call (`policy_bursts_from: 0`). The
//! default (`policy::BURST_MIN`) picks one of the two by the tables' size; the JSON says
//! which. A third series, `ipv4_vip`, sends the IPv4 trace's TCP sources to a virtual
//! address instead (a Gateway and TCPRoute to 64 backends whose ingress admits the
//! cluster, merged into its IR): each SYN a listener lookup, a Maglev pick and a check
//! of client -> backend, which the burst pass works out once for `miss` to reuse. Flows expire (1 s timeouts on a clock that advances 1 ms a burst) before the
//! trace comes round again, so every packet is a new connection.
//!
//! Timing: per round, one pass over the trace with each balancer (in turn first), wall
//! time of `process_burst` and the buffers' copies, as a worker does them; 21 rounds;
//! ns per packet is the median over rounds, and `single_over_burst` the median of the
//! rounds' ratios (adjacent passes share this shared machine's phase of memory latency).
//! The two balancers must give every packet the same verdict (checked on the first
//! pass), and `burst` must have answered its checks from its burst lookups
//! (`policy_burst_checked`).
//!
//! Usage: `cargo run --release -p sluice-perf --no-default-features --bin
//! bench_balance_policy -- [--scenarios PODSxPOLICIES,...] [--out FILE]` (default
//! `1000x10,10000x1000,50000x10,50000x10000`; `--help` explains). Prints JSON; nothing
//! is asserted.

#[path = "bench_policy/gen.rs"]
#[allow(dead_code)]
mod gen;

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use serde_json::{json, Value};
use sluice_ctrl::compile::ir::Ir;
use sluice_ctrl::compile::snapshot;
use sluice_dataplane::balancer::{Balancer, BalancerConfig};
use sluice_dataplane::flow::Timeouts;
use sluice_dataplane::pipeline::{
    Ctx, Forwarder, ForwarderConfig, IfAddr, NeighbourCache, PortConf, Route, Stage, Verdict,
};
use sluice_dataplane::port::{Pkt, Pool, BURST};
use sluice_dataplane::rcu::Publisher;
use sluice_dataplane::stats::{Counters, DropReason, Event};
use sluice_dataplane::tables::policy::BURST_MIN;
use sluice_dataplane::tables::snapshot::Snapshot;
use sluice_dataplane::wire::{ethernet, ip_proto, ipv4, ipv6, tcp, udp, EtherType, MacAddr};
use sluice_perf::stats::median;
use sluice_testkit::{config, manifests as docs};

const TRACE: usize = 65_536;
const ROUNDS: usize = 21;
const SLUICE_MAC: MacAddr = MacAddr([0x02, 0x51, 0, 0, 0, 0x10]);
const INSIDE_MAC: MacAddr = MacAddr([0x02, 0x51, 0, 0, 0, 0x11]);
const PEER_MAC: MacAddr = MacAddr([0x02, 0xaa, 0, 0, 0, 1]);
/// The virtual address of the `vip` series, and its port.
const VIP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);
const VIP_PORT: u16 = 7000;
/// Backends of the virtual address (pods in namespace `vip`, outside the cluster's
/// addresses).
const VIP_BACKENDS: usize = 64;

/// The manifests of the `vip` series: a Gateway on [`VIP`] (one of the Appliance's
/// virtual addresses, as the forwarder here has it) with a TCPRoute to a Service of
/// [`VIP_BACKENDS`] pods, whose ingress admits the cluster's pods (10.0.0.0/8) on its
/// port; merged into the generated cluster's IR.
fn vip_manifests() -> String {
    let mut y = format!(
        "{appliance}{namespace}{service}{policy}{gateway}",
        appliance = docs::bench_appliance(VIP, None),
        namespace = docs::namespace("vip"),
        policy = docs::allow_from("vip", "from-cluster", "10.0.0.0/8", &[VIP_PORT]),
        gateway = docs::tcp_gateway("vip", "pool", VIP, VIP_PORT, "pool"),
        service = docs::service("vip", "pool", VIP_PORT),
    );
    for i in 0..VIP_BACKENDS {
        let ip = Ipv4Addr::new(203, 0, 113, 10 + i as u8);
        y.push_str(&docs::pod("vip", &format!("p{i}"), "pool", ip));
    }
    y
}

/// The generated cluster's IR with [`vip_manifests`] added.
fn with_vip(cluster: &Ir) -> Result<Ir, String> {
    let mut ir = config::try_ir("vip.yaml", &vip_manifests()).map_err(|e| e.join("; "))?;
    ir.workloads.extend(cluster.workloads.iter().cloned());
    ir.nodes.extend(cluster.nodes.iter().cloned());
    ir.policies.extend(cluster.policies.iter().cloned());
    for (k, v) in &cluster.namespaces {
        ir.namespaces.insert(k.clone(), v.clone());
    }
    Ok(ir)
}

/// NetworkPolicy checks inside the balancer: ns per packet of routed new connections,
/// one check per connection against one burst check, per table size. Prints JSON.
#[derive(Parser, Debug)]
#[command(name = "bench_balance_policy")]
struct Args {
    /// Scenarios, comma-separated PODSxPOLICIES.
    #[arg(
        long,
        value_name = "LIST",
        value_parser = gen::scenarios,
        default_value = "1000x10,10000x1000,50000x10,50000x10000"
    )]
    scenarios: gen::Scenarios,
    /// Also write the JSON to FILE.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

fn args() -> (Vec<(usize, usize)>, Option<PathBuf>) {
    let a = Args::parse();
    (a.scenarios.0, a.out)
}

/// A SYN (TCP) or a datagram (UDP) for a probe, arriving on the outside port; `None` for
/// other protocols.
fn frame(p: &gen::Probe) -> Option<Vec<u8>> {
    let l4 = match p.proto {
        ip_proto::TCP => tcp::HEADER_LEN,
        ip_proto::UDP => udp::HEADER_LEN,
        _ => return None,
    };
    let ip_len = if p.src.is_ipv6() { 40 } else { 20 };
    let mut f = vec![0u8; ethernet::HEADER_LEN + ip_len + l4];
    ethernet::Repr {
        dst_addr: SLUICE_MAC,
        src_addr: PEER_MAC,
        ethertype: if p.src.is_ipv6() {
            EtherType::Ipv6
        } else {
            EtherType::Ipv4
        },
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut f[..]));
    let ip = &mut f[ethernet::HEADER_LEN..];
    match (p.src, p.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => ipv4::Repr {
            src_addr: s,
            dst_addr: d,
            protocol: p.proto,
            payload_len: l4,
            ttl: 64,
        }
        .emit(&mut ipv4::Packet::new_unchecked(&mut ip[..])),
        (IpAddr::V6(s), IpAddr::V6(d)) => ipv6::Repr {
            src_addr: s,
            dst_addr: d,
            next_header: p.proto,
            payload_len: l4,
            hop_limit: 64,
        }
        .emit(&mut ipv6::Packet::new_unchecked(&mut ip[..])),
        _ => return None,
    }
    let seg = &mut ip[ip_len..];
    if p.proto == ip_proto::TCP {
        tcp::Repr {
            src_port: p.sport,
            dst_port: p.dport,
            seq_number: 1,
            ack_number: 0,
            flags: tcp::flags::SYN,
            window_len: 1024,
            payload_len: 0,
        }
        .emit(&mut tcp::Packet::new_unchecked(seg), p.src, p.dst);
    } else {
        udp::Repr {
            src_port: p.sport,
            dst_port: p.dport,
            payload_len: 0,
        }
        .emit(&mut udp::Packet::new_unchecked(seg), p.src, p.dst);
    }
    Some(f)
}

/// Two ports, everything not connected routed out of the inside one through one
/// neighbour per family.
fn forwarder() -> Result<Forwarder, String> {
    let ip = |s: &str| -> IpAddr { s.parse().unwrap_or(IpAddr::from([0, 0, 0, 0])) };
    let addrs = |v4: &str, v6: &str| {
        vec![
            IfAddr {
                addr: ip(v4),
                prefix_len: 24,
            },
            IfAddr {
                addr: ip(v6),
                prefix_len: 64,
            },
        ]
    };
    let ports = vec![
        PortConf {
            name: "outside".into(),
            mac: SLUICE_MAC,
            addrs: addrs("192.0.2.2", "2001:db8:ffff::2"),
        },
        PortConf {
            name: "inside".into(),
            mac: INSIDE_MAC,
            addrs: addrs("198.51.100.2", "2001:db8:fffe::2"),
        },
    ];
    let routes = [
        Route {
            to: ip("0.0.0.0"),
            prefix_len: 0,
            via: ip("198.51.100.1"),
        },
        Route {
            to: ip("::"),
            prefix_len: 0,
            via: ip("2001:db8:fffe::1"),
        },
    ];
    let conf = ForwarderConfig::with_virtual(ports, &routes, vec![IpAddr::V4(VIP)])
        .map_err(|e| e.to_string())?;
    let neigh = Arc::new(NeighbourCache::new(16));
    neigh.learn(ip("198.51.100.1"), PEER_MAC, 0);
    neigh.learn(ip("2001:db8:fffe::1"), PEER_MAC, 0);
    Ok(Forwarder::new(Arc::new(conf), neigh))
}

/// One of the two balancers, with its clock and counters.
struct Lane {
    balancer: Balancer,
    counters: Counters,
    now_ms: u64,
    denied: u64,
}

impl Lane {
    fn new(publisher: &Publisher<Snapshot>, policy_bursts_from: usize) -> Result<Lane, String> {
        let timeouts = Timeouts {
            tcp_syn_sent: 1,
            udp_unreplied: 1,
            ..Timeouts::default()
        };
        let balancer = Balancer::new(
            forwarder()?,
            publisher.reader().ok_or("no reader slot")?,
            BalancerConfig {
                flow_capacity: 1 << 18,
                timeouts,
                policy_bursts_from,
                // One load generator is one source: no per-source budget.
                new_flows_per_second_per_source: 0,
                ..BalancerConfig::default()
            },
        );
        Ok(Lane {
            balancer,
            counters: Counters::new(2),
            now_ms: 0,
            denied: 0,
        })
    }

    /// One pass over `frames` in bursts; the verdicts go to `seen` when given. Returns
    /// the wall time in ns.
    fn pass(
        &mut self,
        pool: &Pool,
        frames: &[Vec<u8>],
        mut seen: Option<&mut Vec<Verdict>>,
    ) -> f64 {
        let mut pkts: Vec<Pkt> = Vec::with_capacity(BURST);
        let mut verdicts = [Verdict::Drop(DropReason::BadPort); BURST];
        let t = Instant::now();
        for chunk in frames.chunks(BURST) {
            pkts.clear();
            pkts.extend(chunk.iter().filter_map(|f| pool.alloc_copy(f)));
            let n = pkts.len();
            let mut ctx = Ctx::new(self.now_ms, &mut self.counters);
            self.balancer
                .process_burst(0, &mut pkts, &mut verdicts[..n], &mut ctx);
            self.balancer.maintain(&mut ctx);
            self.now_ms += 1;
            for v in &verdicts[..n] {
                self.denied += u64::from(*v == Verdict::Drop(DropReason::PolicyDenied));
            }
            if let Some(s) = seen.as_deref_mut() {
                s.extend_from_slice(&verdicts[..n]);
            }
        }
        t.elapsed().as_nanos() as f64
    }
}

/// One family of one scenario: both lanes over the same trace.
fn family(
    snap_of: &dyn Fn() -> Result<Snapshot, String>,
    frames: &[Vec<u8>],
) -> Result<Value, String> {
    let publisher = Publisher::new(snap_of()?, 2);
    let mut single = Lane::new(&publisher, usize::MAX)?;
    let mut burst = Lane::new(&publisher, 0)?;
    let pool = Pool::new(4 * BURST);
    // Warm-up pass, which also checks that both answer alike.
    let (mut vs, mut vb) = (Vec::new(), Vec::new());
    single.pass(&pool, frames, Some(&mut vs));
    burst.pass(&pool, frames, Some(&mut vb));
    let mismatches = vs.iter().zip(&vb).filter(|(a, b)| a != b).count();
    let (mut s_ns, mut b_ns, mut ratios) = (vec![], vec![], vec![]);
    for r in 0..ROUNDS {
        let (s, b) = if r % 2 == 0 {
            let s = single.pass(&pool, frames, None);
            (s, burst.pass(&pool, frames, None))
        } else {
            let b = burst.pass(&pool, frames, None);
            (single.pass(&pool, frames, None), b)
        };
        let per = frames.len() as f64;
        s_ns.push(s / per);
        b_ns.push(b / per);
        ratios.push(s / b);
    }
    let passes = (ROUNDS + 1) as f64 * frames.len() as f64;
    let created = |l: &Lane| l.counters.events_of(Event::FlowCreated) as f64 / passes;
    let denied = |l: &Lane| l.denied as f64 / passes;
    let in_burst = burst.counters.events_of(Event::PolicyBurstChecked) as f64
        / ((created(&burst) + denied(&burst)) * passes).max(1.0);
    Ok(json!({
        "packets": frames.len(),
        "allowed_share": created(&single),
        "denied_share": denied(&single),
        "verdict_mismatches": mismatches,
        "single_ns_per_packet": median(&s_ns),
        "burst_ns_per_packet": median(&b_ns),
        "single_over_burst": median(&ratios),
        "rounds_single_over_burst": ratios,
        "burst_checks_answered_in_burst": in_burst,
    }))
}

fn main() {
    let (scenarios, out) = args();
    let mut results = Vec::new();
    for (pods, policies) in scenarios {
        eprintln!("bench_balance_policy: {pods} pods, {policies} policies");
        let cluster = gen::cluster(pods, policies, 0x5eed_0000 + policies as u64);
        let snap_of = || snapshot::from_ir(&cluster.ir).map_err(|e| e.to_string());
        let tables = match snap_of() {
            Ok(s) => s.policy.memory_bytes(),
            Err(e) => {
                results.push(json!({"pods": pods, "policies": policies, "error": e}));
                continue;
            }
        };
        let mut entry = json!({
            "pods": cluster.pods.len(),
            "policies": policies,
            "policy_tables_mib": tables as f64 / (1024.0 * 1024.0),
            "default_checks": if tables >= BURST_MIN { "burst" } else { "single" },
        });
        for (key, v6) in [("ipv4", false), ("ipv6", true)] {
            let trace = gen::trace(&cluster, TRACE, v6, 0x7ace + policies as u64, None);
            let frames: Vec<Vec<u8>> = trace.iter().filter_map(frame).collect();
            entry[key] = family(&snap_of, &frames).unwrap_or_else(|e| json!({"error": e}));
        }
        // The IPv4 trace's TCP sources as clients of the virtual address: each SYN a
        // listener lookup, a Maglev pick and a check of client -> backend.
        let vip_snap = || {
            with_vip(&cluster.ir).and_then(|ir| snapshot::from_ir(&ir).map_err(|e| e.to_string()))
        };
        let trace = gen::trace(&cluster, TRACE, false, 0x7ace + policies as u64, None);
        let frames: Vec<Vec<u8>> = trace
            .iter()
            .filter(|p| p.proto == ip_proto::TCP)
            .filter_map(|p| {
                frame(&gen::Probe {
                    dst: IpAddr::V4(VIP),
                    dport: VIP_PORT,
                    ..*p
                })
            })
            .collect();
        entry["ipv4_vip"] = family(&vip_snap, &frames).unwrap_or_else(|e| json!({"error": e}));
        results.push(entry);
    }
    let report = json!({
        "bench": "bench_balance_policy",
        "what": "ns per packet of the Balancer stage (process_burst + maintain, buffer copies included) for routed new connections (SYNs and datagrams of bench_policy's trace, SCTP left out; ipv4_vip: the IPv4 TCP sources to a virtual address with 64 backends), each a policy check and, when allowed, a flow; single = one PolicyTables::verdict per connection, burst = one PolicyTables::verdicts per burst of 32; both lanes alternate in one thread, 21 rounds of one trace pass each, medians",
        "burst_min_bytes": BURST_MIN,
        "scenarios": results,
    });
    let text = serde_json::to_string_pretty(&report).unwrap_or_default();
    println!("{text}");
    if let Some(p) = out {
        if let Err(e) = std::fs::write(&p, &text) {
            eprintln!("bench_balance_policy: {}: {e}", p.display());
        }
    }
}
