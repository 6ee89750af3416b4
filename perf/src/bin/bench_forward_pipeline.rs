//! Micro-benchmark of the forwarding stage alone (no device): bursts of 32 routed IPv4
//! frames through `Forwarder::process_burst`, frames restored from a template before each
//! burst (a 60-byte copy, like a PMD's receive). Prints JSON: TSC cycles and nanoseconds
//! per packet (of this thread's CPU time, so preemption on a shared machine does not count;
//! the wall-clock TSC figure too). Usage: `bench_forward_pipeline [PACKETS]` (`--help`).

use clap::Parser;
use serde_json::json;
use sluice_dataplane::mem::{tsc, tsc_hz};
use sluice_dataplane::pipeline::{
    Ctx, Forwarder, ForwarderConfig, IfAddr, NeighbourCache, PortConf, Route, Stage, Verdict,
};
use sluice_dataplane::port::{Pool, BURST};
use sluice_dataplane::stats::{Counters, DropReason};
use sluice_dataplane::wire::MacAddr;
use sluice_perf::fixtures::udp_frame;
use std::sync::Arc;
use std::time::Instant;

const US: MacAddr = MacAddr([0x02, 0x51, 0, 0, 0, 0x10]);

/// The frames of flow `i`, from a client MAC to sluice's.
fn frame(i: u16) -> Vec<u8> {
    udp_frame(US, MacAddr([2, 0, 0, 0, 0, 1]), i)
}

/// CPU time this thread has run (ns), from schedstat: preemption by other work does not
/// count.
fn cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The forwarding stage alone: bursts of 32 routed IPv4 frames through
/// `Forwarder::process_burst`. Prints JSON (cycles and ns per packet).
#[derive(Parser, Debug)]
#[command(name = "bench_forward_pipeline")]
struct Opts {
    /// Packets to forward (rounded down to whole bursts of 32).
    #[arg(default_value_t = 20_000_000)]
    packets: u64,
}

fn main() {
    let n = Opts::parse().packets;
    let conf = ForwarderConfig::new(
        vec![
            PortConf {
                name: "in".into(),
                mac: US,
                addrs: vec![IfAddr {
                    addr: "10.1.0.2".parse().unwrap(),
                    prefix_len: 24,
                }],
            },
            PortConf {
                name: "out".into(),
                mac: MacAddr([2, 0x51, 0, 0, 0, 0x11]),
                addrs: vec![IfAddr {
                    addr: "10.2.0.2".parse().unwrap(),
                    prefix_len: 24,
                }],
            },
        ],
        &[Route {
            to: "0.0.0.0".parse().unwrap(),
            prefix_len: 0,
            via: "10.2.0.1".parse().unwrap(),
        }],
    )
    .expect("config");
    let neigh = Arc::new(NeighbourCache::new(4096));
    neigh.learn(
        "10.2.0.1".parse().unwrap(),
        MacAddr([2, 0x51, 0, 0, 0, 0x21]),
        0,
    );
    let mut fw = Forwarder::new(Arc::new(conf), neigh);
    let templates: Vec<Vec<u8>> = (0..BURST as u16).map(frame).collect();
    let pool = Pool::new(64);
    let mut pkts: Vec<_> = templates
        .iter()
        .map(|t| pool.alloc_copy(t).expect("pool"))
        .collect();
    let mut verdicts = [Verdict::Drop(DropReason::BadPort); BURST];
    let mut counters = Counters::new(2);
    let bursts = n / BURST as u64;
    let (t0, c0, cpu0) = (Instant::now(), tsc(), cpu_ns());
    let mut forwarded = 0u64;
    for _ in 0..bursts {
        for (p, t) in pkts.iter_mut().zip(&templates) {
            p.copy_from(t);
        }
        let mut ctx = Ctx::new(0, &mut counters);
        fw.process_burst(0, &mut pkts, &mut verdicts, &mut ctx);
        forwarded += verdicts.iter().filter(|v| **v == Verdict::Tx(1)).count() as u64;
    }
    let (cycles, secs, cpu1) = (tsc() - c0, t0.elapsed().as_secs_f64(), cpu_ns());
    let cpu_s = cpu0
        .zip(cpu1)
        .map_or(secs, |(a, b)| b.saturating_sub(a) as f64 / 1e9);
    let total = bursts * BURST as u64;
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({
            "bench": "forward_pipeline",
            "packets": total,
            "forwarded": forwarded,
            "cycles_per_packet": cpu_s * tsc_hz() as f64 / total as f64,
            "wall_tsc_cycles_per_packet": cycles as f64 / total as f64,
            "ns_per_packet": secs * 1e9 / total as f64,
            "mpps": total as f64 / secs / 1e6,
            "tsc_hz": tsc_hz(),
        }))
        .unwrap_or_default()
    );
}
