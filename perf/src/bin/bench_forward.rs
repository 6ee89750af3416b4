//! Forwarding benchmark, printed as JSON (never asserted).
//!
//! **DPDK**: the worker loop with the forwarding pipeline on DPDK vdevs, side by side with
//! `dpdk-testpmd --forward-mode=macswap` on the same vdevs, in the same run, alternating:
//!
//! - port 0: `net_pcap` replaying a capture of 64 UDP flows forever (`infinite_rx=1`;
//!   every rx allocates an mbuf and copies the frame, for both contenders),
//! - port 1: `net_null` with `no-rx=1` (tx frees).
//!
//! sluice routes each frame (Ethernet and IPv4 checks incl. header checksum, FIB lookup,
//! neighbour lookup, MAC rewrite, TTL decrement with incremental checksum) from port 0 to
//! port 1; testpmd swaps MACs and sends to its peer port. Both forward on one pinned core
//! (core 1). Reported: Mpps per core, TSC cycles per packet (busy rounds), and the ratio.
//!
//! **TAP**: sluice's TAP port (`Queue::rx_burst`/`tx_burst` over pooled buffers) against a
//! plain read/write loop on a TAP fd. Both send ICMP echo requests to the kernel on the
//! other side (in a network namespace) with a window of requests in flight and count the
//! replies per second.
//!
//! Usage: `bench_forward [--duration SECS] [--runs N] [--no-tap] [--no-dpdk]` (`--help`).

use clap::Parser;
use serde_json::{json, Value};
use sluice_dataplane::pipeline::{
    Forwarder, ForwarderConfig, IfAddr, NeighbourCache, PortConf, Route,
};
use sluice_dataplane::port::{dpdk, pcap, tap, Burst, Pool};
use sluice_dataplane::wire::{ethernet, icmpv4, ip_proto, ipv4, EtherType, MacAddr};
use sluice_dataplane::worker::{Idle, Worker, WorkerConfig};
use sluice_perf::fixtures::udp_frame;
use sluice_perf::stats::median;
use sluice_perf::{
    dpdk_cleanup, eal_args, measure_worker, ratio, summary, testpmd_run, MacSwap, Run, FWD_CORE,
};
use std::io::{Read, Write};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SLUICE_MAC: MacAddr = MacAddr([0x02, 0x51, 0, 0, 0, 0x10]);
const PEER_MAC: MacAddr = MacAddr([0x02, 0x51, 0, 0, 0, 0x01]);
const NEXT_HOP_MAC: MacAddr = MacAddr([0x02, 0x51, 0, 0, 0, 0x21]);

/// Forwarding: sluice's worker on DPDK vdevs beside `dpdk-testpmd` macswap, and its TAP
/// port beside a plain read/write loop. Prints JSON.
#[derive(Parser, Debug)]
#[command(name = "bench_forward")]
struct Opts {
    /// Seconds per run.
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    /// Runs per contender (at least 1); figures are their medians.
    #[arg(long, default_value_t = 2)]
    runs: usize,
    /// Leave out the TAP comparison.
    #[arg(long = "no-tap", action = clap::ArgAction::SetFalse)]
    tap: bool,
    /// Leave out the DPDK comparison.
    #[arg(long = "no-dpdk", action = clap::ArgAction::SetFalse)]
    dpdk: bool,
}

fn opts() -> Opts {
    let mut o = Opts::parse();
    o.runs = o.runs.max(1);
    o
}

/// 64-byte UDP frames of 64 flows, 10.1.0.1 -> 192.168.0.x, to sluice's MAC.
fn frames() -> Vec<Vec<u8>> {
    (0..64u16)
        .map(|i| udp_frame(SLUICE_MAC, PEER_MAC, i))
        .collect()
}

fn vdevs(capture: &Path) -> [String; 2] {
    [
        format!("net_pcap0,rx_pcap={},infinite_rx=1", capture.display()),
        "net_null0,no-rx=1".to_string(),
    ]
}

/// One sluice run: the worker with the forwarder (or the macswap stage), port 0 -> port 1,
/// on `FWD_CORE`.
fn sluice_run(capture: &Path, secs: f64, macswap: bool) -> Result<Run, String> {
    let [v0, v1] = vdevs(capture);
    let a = dpdk::open("in", &v0, 1).map_err(|e| e.to_string())?;
    let b = dpdk::open("out", &v1, 1).map_err(|e| e.to_string())?;
    let addr = |a: &str| {
        vec![IfAddr {
            addr: a.parse().unwrap(),
            prefix_len: 24,
        }]
    };
    let conf = ForwarderConfig::new(
        vec![
            PortConf {
                name: "in".into(),
                mac: SLUICE_MAC,
                addrs: addr("10.1.0.2"),
            },
            PortConf {
                name: "out".into(),
                mac: b.port.mac(),
                addrs: addr("10.2.0.2"),
            },
        ],
        &[Route {
            to: "0.0.0.0".parse().unwrap(),
            prefix_len: 0,
            via: "10.2.0.1".parse().unwrap(),
        }],
    )
    .map_err(|e| e.to_string())?;
    let neigh = Arc::new(NeighbourCache::new(64));
    neigh.learn("10.2.0.1".parse().unwrap(), NEXT_HOP_MAC, 0);
    let mut queues = Vec::new();
    queues.extend(a.queues);
    queues.extend(b.queues);
    let cfg = WorkerConfig {
        id: 0,
        core: Some(FWD_CORE),
        idle: Idle::Spin,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let (shared, h) = if macswap {
        let w = Worker::new(cfg, queues, MacSwap);
        (
            w.shared_counters(),
            sluice_dataplane::worker::spawn(w, stop.clone()),
        )
    } else {
        let w = Worker::new(cfg, queues, Forwarder::new(Arc::new(conf), neigh));
        (
            w.shared_counters(),
            sluice_dataplane::worker::spawn(w, stop.clone()),
        )
    };
    let h = h.map_err(|e| e.to_string())?;
    let run = measure_worker(&shared, 0, Duration::from_millis(300), secs);
    stop.store(true, Ordering::Relaxed);
    let c = h.join().map_err(|_| "worker panicked".to_string())?;
    if c.total_drops() > 0 {
        eprintln!("bench_forward: sluice dropped {} packets", c.total_drops());
    }
    drop((a.port, b.port));
    Ok(run)
}

fn dpdk_bench(o: &Opts, dir: &Path) -> Value {
    let capture = dir.join("fwd.pcap");
    let fr = frames();
    if let Err(e) = pcap::write_file(&capture, fr.iter().map(|f| &f[..])) {
        return json!({"error": e.to_string()});
    }
    let args = eal_args();
    if let Err(e) = dpdk::init(&args) {
        return json!({"error": e.to_string()});
    }
    let (mut sl, mut tp, mut ms, mut errors) = (
        Vec::<Run>::new(),
        Vec::<Run>::new(),
        Vec::<Run>::new(),
        vec![],
    );
    for _ in 0..o.runs {
        match sluice_run(&capture, o.duration, false) {
            Ok(r) => sl.push(r),
            Err(e) => errors.push(format!("sluice: {e}")),
        }
        match sluice_run(&capture, o.duration, true) {
            Ok(r) => ms.push(r),
            Err(e) => errors.push(format!("sluice macswap: {e}")),
        }
        match testpmd_run(&vdevs(&capture), o.duration) {
            Ok(r) => tp.push(r),
            Err(e) => errors.push(format!("testpmd: {e}")),
        }
    }
    let (s_sum, t_sum) = (summary(&sl), summary(&tp));
    json!({
        "setup": {
            "port0": "net_pcap infinite_rx (64 UDP flows, 60-byte frames)",
            "port1": "net_null no-rx=1",
            "forwarding_core": FWD_CORE,
            "duration_s": o.duration,
            "runs": o.runs,
            "alternating": true,
            "note": "mpps_per_cpu_second divides by the forwarding thread's own CPU time (schedstat), so time taken by other processes on a shared machine does not count; cycles_per_packet is that CPU time in TSC cycles per packet",
        },
        "sluice_worker_forwarder": s_sum,
        "sluice_worker_macswap_stage": summary(&ms),
        "testpmd_macswap": t_sum,
        "ratio_sluice_to_testpmd": ratio(&s_sum, &t_sum, "mpps_per_core"),
        "ratio_sluice_to_testpmd_cpu_normalized": ratio(&s_sum, &t_sum, "mpps_per_cpu_second"),
        "errors": errors,
    })
}

/// ICMP echo request frames from 10.88.0.2 (sluice side) to 10.88.0.1 (kernel).
fn echo_frames(kernel_mac: MacAddr, our_mac: MacAddr) -> Vec<Vec<u8>> {
    (0..64u16)
        .map(|seq| {
            let mut f = vec![0u8; 14 + 20 + 8 + 32];
            ethernet::Repr {
                dst_addr: kernel_mac,
                src_addr: our_mac,
                ethertype: EtherType::Ipv4,
            }
            .emit(&mut ethernet::Frame::new_unchecked(&mut f[..]));
            let mut ip = ipv4::Packet::new_unchecked(&mut f[14..]);
            ipv4::Repr {
                src_addr: Ipv4Addr::new(10, 88, 0, 2),
                dst_addr: Ipv4Addr::new(10, 88, 0, 1),
                protocol: ip_proto::ICMP,
                payload_len: 40,
                ttl: 64,
            }
            .emit(&mut ip);
            icmpv4::Repr::EchoRequest {
                ident: 0x5b,
                seq_no: seq,
                data_len: 32,
            }
            .emit(&mut icmpv4::Packet::new_unchecked(ip.payload_mut()));
            f
        })
        .collect()
}

fn sh(args: &[&str]) -> Result<String, String> {
    let o = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args[0]))?;
    if !o.status.success() {
        return Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

struct NsGuard(String);
impl Drop for NsGuard {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// Puts `ifname` in a fresh namespace as 10.88.0.1/24 with a permanent neighbour entry for
/// 10.88.0.2 at `our_mac`; returns the guard and the kernel side's MAC.
fn kernel_side(ifname: &str, our_mac: MacAddr) -> Result<(NsGuard, MacAddr), String> {
    let ns = format!("slbn{}", std::process::id() % 100_000);
    sh(&["ip", "netns", "add", &ns])?;
    let g = NsGuard(ns.clone());
    sh(&["ip", "link", "set", ifname, "netns", &ns])?;
    sh(&[
        "ip",
        "-n",
        &ns,
        "addr",
        "add",
        "10.88.0.1/24",
        "dev",
        ifname,
    ])?;
    sh(&["ip", "-n", &ns, "link", "set", ifname, "up"])?;
    sh(&[
        "ip",
        "-n",
        &ns,
        "neigh",
        "replace",
        "10.88.0.2",
        "lladdr",
        &our_mac.to_string(),
        "dev",
        ifname,
        "nud",
        "permanent",
    ])?;
    let addr = std::fs::read_to_string(format!("/sys/class/net/{ifname}/address")).ok();
    let mac = match addr {
        Some(a) => a.trim().parse().map_err(|_| "kernel MAC".to_string())?,
        None => {
            let out = sh(&["ip", "-n", &ns, "-o", "link", "show", ifname])?;
            let i = out.find("link/ether ").ok_or("no link/ether")?;
            out[i + 11..i + 28]
                .parse()
                .map_err(|_| "kernel MAC".to_string())?
        }
    };
    Ok((g, mac))
}

const WINDOW: usize = 64;

fn tap_sluice(secs: f64) -> Result<f64, String> {
    let ifname = format!("slbt{}", std::process::id() % 100_000);
    let pool = Pool::new(1024);
    let mut o = tap::open("bench", &ifname, 1, &pool).map_err(|e| e.to_string())?;
    let our = o.port.mac();
    let (_ns, kmac) = kernel_side(&ifname, our)?;
    let frames = echo_frames(kmac, our);
    let q = &mut o.queues[0];
    let (mut inflight, mut replies, mut next) = (0usize, 0u64, 0usize);
    let mut rx = Burst::new();
    let mut tx = Burst::new();
    let t0 = Instant::now();
    let mut last_progress = Instant::now();
    while t0.elapsed().as_secs_f64() < secs {
        while inflight < WINDOW && !tx.is_full() {
            let Some(p) = pool.alloc_copy(&frames[next % frames.len()]) else {
                break;
            };
            next += 1;
            let _ = tx.push(p);
            inflight += 1;
        }
        q.tx_burst(&mut tx);
        inflight -= tx.clear();
        let n = q.rx_burst(&mut rx);
        for p in rx.drain() {
            // Echo replies (type 0) from the kernel.
            if p.data().get(34) == Some(&0) {
                replies += 1;
                inflight = inflight.saturating_sub(1);
                last_progress = Instant::now();
            }
        }
        if n == 0 && last_progress.elapsed() > Duration::from_millis(200) {
            inflight = 0; // replies lost: refill the window
            last_progress = Instant::now();
        }
    }
    Ok(replies as f64 / t0.elapsed().as_secs_f64())
}

fn tap_plain(secs: f64) -> Result<f64, String> {
    let ifname = format!("slbp{}", std::process::id() % 100_000);
    let fd = tap::open_raw(&ifname).map_err(|e| e.to_string())?;
    let mut file = std::fs::File::from(fd);
    let our = MacAddr([0x02, 0x51, 0, 0, 0, 0x77]);
    let (_ns, kmac) = kernel_side(&ifname, our)?;
    let frames = echo_frames(kmac, our);
    let (mut inflight, mut replies, mut next) = (0usize, 0u64, 0usize);
    let mut buf = vec![0u8; 2048];
    let t0 = Instant::now();
    let mut last_progress = Instant::now();
    while t0.elapsed().as_secs_f64() < secs {
        while inflight < WINDOW {
            let frame = &frames[next % frames.len()];
            match file.write(frame) {
                // A TAP write takes the whole frame or fails.
                Ok(n) if n == frame.len() => {
                    next += 1;
                    inflight += 1;
                }
                Ok(_) | Err(_) => break,
            }
        }
        let mut got = false;
        for _ in 0..32 {
            match file.read(&mut buf) {
                Ok(n) if n > 34 => {
                    if buf[34] == 0 {
                        replies += 1;
                        inflight = inflight.saturating_sub(1);
                        got = true;
                    }
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        if got {
            last_progress = Instant::now();
        } else if last_progress.elapsed() > Duration::from_millis(200) {
            inflight = 0;
            last_progress = Instant::now();
        }
    }
    Ok(replies as f64 / t0.elapsed().as_secs_f64())
}

fn tap_bench(o: &Opts) -> Value {
    let (mut s, mut p, mut errors) = (vec![], vec![], vec![]);
    for _ in 0..o.runs {
        match tap_sluice(o.duration) {
            Ok(x) => s.push(x),
            Err(e) => errors.push(format!("sluice tap: {e}")),
        }
        match tap_plain(o.duration) {
            Ok(x) => p.push(x),
            Err(e) => errors.push(format!("plain tap: {e}")),
        }
    }
    let (sm, pm) = (median(&s), median(&p));
    json!({
        "setup": {"traffic": "ICMP echo to the kernel in a netns, 64 in flight, 74-byte frames", "duration_s": o.duration, "runs": o.runs},
        "sluice_tap_port": {"kpps": sm / 1e3, "runs_kpps": s.iter().map(|x| x / 1e3).collect::<Vec<_>>()},
        "plain_read_write_loop": {"kpps": pm / 1e3, "runs_kpps": p.iter().map(|x| x / 1e3).collect::<Vec<_>>()},
        "ratio_sluice_to_plain": if pm > 0.0 { sm / pm } else { 0.0 },
        "errors": errors,
    })
}

fn main() {
    let o = opts();
    let dir: PathBuf = std::env::temp_dir().join(format!("sluice-bench-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let mut out = json!({"bench": "forward", "tsc_hz": sluice_dataplane::mem::tsc_hz()});
    if o.dpdk {
        out["dpdk"] = dpdk_bench(&o, &dir);
    }
    if o.tap {
        out["tap"] = tap_bench(&o);
    }
    let _ = std::fs::remove_dir_all(&dir);
    dpdk_cleanup();
    println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
}
