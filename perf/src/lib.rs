//! `sluice-perf`: benchmarks that print their figures as JSON.
//!
//! Every hot-path component has a binary under `src/bin/` that measures it and, where a
//! peer exists on the machine (DPDK's `dpdk-testpmd`, `dpdk-test-acl`; HAProxy; nginx),
//! reports a side-by-side ratio from the same run. Numbers are printed, never asserted.
//!
//! This library holds what several benchmarks share: [`stats`] (medians of run figures,
//! latency percentiles), per-thread CPU time, the forwarding-rate summary ([`Run`]), the
//! measurement window over a running worker ([`measure_worker`]) and the `dpdk-testpmd`
//! runner ([`testpmd_run`]), the JSON [`report::Report`] written as figures come in,
//! [`fixtures`] (the frames and manifests several benchmarks build), [`sni_load`], the
//! kernel-side harness of the SNI routing comparison (namespaces, backends, load client,
//! HAProxy/nginx processes and the slot for sluice), [`tls_load`], the same harness
//! with a TLS client for the TLS termination comparison, and [`http_load`], the same
//! harness with `wrk` for the HTTP/1.1 per-request proxying comparison.

pub mod fixtures;
pub mod http_load;
pub mod report;
pub mod sni_load;
pub mod stats;
pub mod tls_load;

use stats::median;

use serde_json::{json, Value};
use sluice_dataplane::pipeline::{Ctx, Stage, Verdict};
use sluice_dataplane::port::Pkt;
use sluice_dataplane::stats::SharedCounters;
use std::io::{BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The core the forwarding thread (sluice's worker or testpmd's lcore) is pinned to; the
/// control thread and traffic bookkeeping stay on core 0.
pub const FWD_CORE: usize = 1;

/// CPU time (ns) a thread named `comm` of process `pid` (`"self"` for this one) has run,
/// from `/proc/<pid>/task/<tid>/schedstat`: immune to time the thread spent preempted by
/// other work on a shared machine.
pub fn thread_cpu_ns(pid: &str, comm: &str) -> Option<u64> {
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let c = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if c.trim() == comm {
            let st = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
            return st.split_whitespace().next()?.parse().ok();
        }
    }
    None
}

/// One contender's forwarding run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Run {
    /// Packets forwarded per wall-clock second (millions).
    pub mpps: f64,
    /// Packets forwarded per second of the forwarding thread's CPU time (millions).
    pub mpps_cpu: f64,
    /// TSC cycles of forwarding-thread CPU time per packet.
    pub cycles_per_packet: f64,
    /// The rate of the run's quiet windows (millions of packets a wall-clock second): the
    /// upper quartile of its [`WINDOW`]-long windows ([`quiet_rate`]); `mpps` when the
    /// run was not windowed.
    pub mpps_quiet: f64,
}

/// The length of the windows a run is cut into for its quiet rate ([`Run::mpps_quiet`]).
///
/// The benchmark machines are shared, and their memory system is disturbed from outside
/// in phases of a quarter of a second to a few seconds: a whole-run figure measures how
/// much of the run was disturbed, the quiet windows the code (`bench_balance`'s `_quiet`
/// figures; the measurements are in perf/NOTES.md, "Benchmark harness").
pub const WINDOW: Duration = Duration::from_millis(250);

/// The quiet rate of a run's per-window rates: their upper quartile (the rate that a
/// quarter of the windows beat). Robust both to disturbed windows (up to three quarters
/// of them) and to a single lucky one. 0 when empty.
pub fn quiet_rate(windows: &[f64]) -> f64 {
    stats::quantile(windows, 0.75)
}

impl Run {
    /// From a packet count over `wall_s` seconds, of which the forwarding thread ran
    /// `cpu_ns` (wall time when unknown).
    pub fn new(packets: f64, wall_s: f64, cpu_ns: Option<u64>) -> Run {
        let cpu_s = cpu_ns
            .filter(|&n| n > 0)
            .map_or(wall_s, |n| n as f64 / 1e9)
            .max(1e-9);
        let mpps = packets / wall_s.max(1e-9) / 1e6;
        Run {
            mpps,
            mpps_cpu: packets / cpu_s / 1e6,
            cycles_per_packet: cpu_s * sluice_dataplane::mem::tsc_hz() as f64 / packets.max(1.0),
            mpps_quiet: mpps,
        }
    }

    /// The run with its quiet rate taken from its windows' rates (Mpps each).
    pub fn with_windows(self, windows: &[f64]) -> Run {
        let q = quiet_rate(windows);
        Run {
            mpps_quiet: if q > 0.0 { q } else { self.mpps },
            ..self
        }
    }
}

/// TSC cycles a packet at `mpps` million packets a second on one core.
pub fn cycles_at(mpps: f64) -> f64 {
    if mpps > 0.0 {
        sluice_dataplane::mem::tsc_hz() as f64 / (mpps * 1e6)
    } else {
        0.0
    }
}

/// Medians and per-run figures of a set of runs, as JSON (`_quiet`: the median of the
/// runs' quiet rates, [`Run::mpps_quiet`]).
pub fn summary(v: &[Run]) -> Value {
    let pick = |f: fn(&Run) -> f64| median(&v.iter().map(f).collect::<Vec<_>>());
    json!({
        "mpps_per_core": pick(|r| r.mpps),
        "mpps_per_cpu_second": pick(|r| r.mpps_cpu),
        "cycles_per_packet": pick(|r| r.cycles_per_packet),
        "mpps_per_core_quiet": pick(|r| r.mpps_quiet),
        "cycles_per_packet_quiet": cycles_at(pick(|r| r.mpps_quiet)),
        "runs_mpps": v.iter().map(|r| r.mpps).collect::<Vec<_>>(),
        "runs_mpps_per_cpu_second": v.iter().map(|r| r.mpps_cpu).collect::<Vec<_>>(),
        "runs_mpps_quiet": v.iter().map(|r| r.mpps_quiet).collect::<Vec<_>>(),
    })
}

/// `a[key] / b[key]` of two [`summary`] objects (0 when `b` has none).
pub fn ratio(a: &Value, b: &Value, key: &str) -> f64 {
    let (x, y) = (
        a[key].as_f64().unwrap_or(0.0),
        b[key].as_f64().unwrap_or(0.0),
    );
    if y > 0.0 {
        x / y
    } else {
        0.0
    }
}

/// Measures a running worker (thread `sluice-w<id>`, publishing to `shared`): waits
/// `warmup`, then counts the packets it sent over `secs` seconds, on every port (traffic
/// in both directions leaves by both ports), with the worker thread's CPU time over the
/// same window, and the rate of each [`WINDOW`] of it (for [`Run::mpps_quiet`]).
pub fn measure_worker(
    shared: &SharedCounters,
    worker_id: usize,
    warmup: Duration,
    secs: f64,
) -> Run {
    let comm = format!("sluice-w{worker_id}");
    std::thread::sleep(warmup);
    let tx = |s: &SharedCounters| -> u64 { s.snapshot().ports.iter().map(|p| p.tx_packets).sum() };
    let (p0, c0, t0) = (tx(shared), thread_cpu_ns("self", &comm), Instant::now());
    let end = t0 + Duration::from_secs_f64(secs);
    let mut windows = Vec::new();
    let mut last = (p0, t0);
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        std::thread::sleep(WINDOW.min(end - now));
        let at = (tx(shared), Instant::now());
        let dt = at.1.duration_since(last.1).as_secs_f64();
        // A short tail window (the run's length not a multiple of WINDOW) is left out.
        if dt >= WINDOW.as_secs_f64() * 0.9 {
            windows.push(at.0.saturating_sub(last.0) as f64 / dt / 1e6);
        }
        last = at;
    }
    let (p1, c1, wall) = (last.0, thread_cpu_ns("self", &comm), last.1 - t0);
    let cpu = c0.zip(c1).map(|(a, b)| b.saturating_sub(a));
    Run::new(p1.saturating_sub(p0) as f64, wall.as_secs_f64(), cpu).with_windows(&windows)
}

/// EAL arguments for a benchmark process: no hugepages, no PCI, 512 MiB, lcore 0, and a
/// file prefix of its own (`sl-bench-<pid>`, removed by [`dpdk_cleanup`]).
pub fn eal_args() -> Vec<String> {
    let mut args: Vec<String> = [
        "--no-huge",
        "--no-pci",
        "-m",
        "512",
        "-l",
        "0",
        "--log-level",
        "lib.eal:error",
    ]
    .map(String::from)
    .to_vec();
    args.extend([
        "--file-prefix".to_string(),
        format!("sl-bench-{}", std::process::id()),
    ]);
    args
}

/// Removes the runtime directory of [`eal_args`]'s file prefix.
pub fn dpdk_cleanup() {
    let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/sl-bench-{}", std::process::id()));
}

/// One `dpdk-testpmd --forward-mode=macswap` run on the two vdevs `vdevs` (port 0 rx,
/// port 1 its peer), one forwarding core ([`FWD_CORE`]), the same mbuf pool size as
/// sluice's (16383 mbufs; testpmd's default does not fit in `-m 512`), for `secs`
/// seconds between `start` and `stop`.
pub fn testpmd_run(vdevs: &[String; 2], secs: f64) -> Result<Run, String> {
    let prefix = format!("sl-bench-tp-{}", std::process::id());
    let mut child = Command::new("dpdk-testpmd")
        .args([
            "-l",
            &format!("0,{FWD_CORE}"),
            "--no-huge",
            "--no-pci",
            "-m",
            "512",
        ])
        .args(["--file-prefix", &prefix, "--log-level", "lib.eal:error"])
        .args([
            "--vdev",
            &vdevs[0],
            "--vdev",
            &vdevs[1],
            "--",
            "-i",
            "--forward-mode=macswap",
        ])
        .args(["--nb-cores=1", "--rxq=1", "--txq=1"])
        .arg("--total-num-mbufs=16384")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("dpdk-testpmd: {e} (package dpdk)"))?;
    let mut stdin = child.stdin.take().ok_or("stdin")?;
    let (stdout, stderr) = (
        child.stdout.take().ok_or("stdout")?,
        child.stderr.take().ok_or("stderr")?,
    );
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = BufReader::new(stdout).read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = BufReader::new(stderr).read_to_string(&mut s);
        s
    });
    std::thread::sleep(Duration::from_millis(1500));
    let pid = child.id().to_string();
    let worker = format!("rte-worker-{FWD_CORE}");
    let mut result = writeln!(stdin, "start").map_err(|e| e.to_string());
    let t0 = Instant::now();
    let cpu0 = thread_cpu_ns(&pid, &worker);
    // `show port stats all` at the start and after every whole WINDOW: testpmd prints
    // each port's rate since the previous show (the first show's rates are 0: no
    // previous one); the rest of the run after the last whole window is not shown.
    let end = t0 + Duration::from_secs_f64(secs);
    let whole = (secs / WINDOW.as_secs_f64()) as u32;
    for k in 0..=whole {
        if k > 0 {
            std::thread::sleep((t0 + WINDOW * k).saturating_duration_since(Instant::now()));
        }
        if result.is_ok() {
            result = writeln!(stdin, "show port stats all").map_err(|e| e.to_string());
        }
    }
    std::thread::sleep(end.saturating_duration_since(Instant::now()));
    let cpu1 = thread_cpu_ns(&pid, &worker);
    if result.is_ok() {
        result = writeln!(stdin, "stop").map_err(|e| e.to_string());
    }
    let wall = t0.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(300));
    let _ = writeln!(stdin, "quit");
    drop(stdin);
    let t = Instant::now();
    while child.try_wait().ok().flatten().is_none() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let out = reader.join().unwrap_or_default();
    let err = err_reader.join().unwrap_or_default();
    let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/{prefix}"));
    result.map_err(|e| format!("{e}: {}\n{}", tail(&out), tail(&err)))?;
    let acc = out
        .split("Accumulated forward statistics for all ports")
        .nth(1)
        .ok_or_else(|| {
            format!(
                "no forward statistics in testpmd output:\n{}\n{}",
                tail(&out),
                tail(&err)
            )
        })?;
    let tx = number_after(acc, "TX-packets:").ok_or("no TX-packets")?;
    let cpu = cpu0.zip(cpu1).map(|(a, b)| b.saturating_sub(a));
    // testpmd counts from `start` to `stop`; the CPU window is the same span.
    Ok(Run::new(tx, wall, cpu).with_windows(&testpmd_windows(&out)))
}

/// The per-window forwarding rates (Mpps, both ports' `Tx-pps` summed) of testpmd's
/// `show port stats all` outputs in `out`, without the first show's (no rate yet).
fn testpmd_windows(out: &str) -> Vec<f64> {
    let shows: Vec<f64> = out
        .split("NIC statistics for port")
        .skip(1)
        .map(|block| number_after(block, "Tx-pps:").unwrap_or(0.0))
        .collect();
    // Two ports per show.
    shows
        .chunks_exact(2)
        .skip(1)
        .map(|p| (p[0] + p[1]) / 1e6)
        .collect()
}

/// The last 20 lines of `s`.
pub fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

fn number_after(s: &str, key: &str) -> Option<f64> {
    let i = s.find(key)?;
    s[i + key.len()..].split_whitespace().next()?.parse().ok()
}

/// testpmd's macswap as a sluice stage: swaps the MACs and sends to the other port. Run
/// in sluice's worker it isolates the worker's and port layer's own cost.
#[derive(Debug, Clone, Copy, Default)]
pub struct MacSwap;

impl Stage for MacSwap {
    fn process_burst(
        &mut self,
        in_port: usize,
        pkts: &mut [Pkt],
        v: &mut [Verdict],
        _: &mut Ctx<'_>,
    ) {
        for (p, v) in pkts.iter_mut().zip(v.iter_mut()) {
            let d = p.data_mut();
            if d.len() >= 12 {
                let mut a = [0u8; 6];
                a.copy_from_slice(&d[..6]);
                d.copy_within(6..12, 0);
                d[6..12].copy_from_slice(&a);
            }
            *v = Verdict::tx(1 - in_port.min(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One `show port stats all` as testpmd 22.11 prints it, with the two ports' Tx-pps.
    fn show(tx0: u64, tx1: u64) -> String {
        [(0, tx0), (1, tx1)]
            .iter()
            .map(|(p, tx)| {
                format!(
                    "\n  ######################## NIC statistics for port {p}  ########################\n  \
                     RX-packets: 5          RX-missed: 0          RX-bytes:  300\n  \
                     TX-packets: 7          TX-errors: 0          TX-bytes:  420\n\n  \
                     Throughput (since last show)\n  \
                     Rx-pps:     {tx}          Rx-bps:   0\n  \
                     Tx-pps:     {tx}          Tx-bps:   0\n  \
                     ############################################################################\n"
                )
            })
            .collect()
    }

    #[test]
    fn testpmd_windows_sum_ports_and_drop_the_first_show() {
        let out = [show(0, 0), show(0, 20_000_000), show(1_000_000, 23_000_000)].concat();
        assert_eq!(testpmd_windows(&out), vec![20.0, 24.0]);
        assert!(testpmd_windows("no stats here").is_empty());
    }

    #[test]
    fn quiet_rate_is_the_upper_quartile() {
        // Three disturbed windows of eight do not move it; one lucky window does not
        // either.
        let w = [10.0, 12.9, 13.0, 13.1, 13.0, 9.0, 9.5, 30.0];
        assert_eq!(quiet_rate(&w), 13.1);
        assert_eq!(quiet_rate(&[7.0]), 7.0);
        assert_eq!(quiet_rate(&[]), 0.0);
        let r = Run::new(1e6, 1.0, None);
        assert_eq!(r.mpps_quiet, 1.0);
        assert_eq!(r.with_windows(&[]).mpps_quiet, 1.0);
        assert_eq!(r.with_windows(&[2.0, 3.0]).mpps_quiet, 3.0);
    }
}
