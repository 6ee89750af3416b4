//! `bench_policy`: NetworkPolicy verdicts per second per core, compile time and table
//! memory, and the same decisions made by DPDK's `rte_acl` in the same run.
//!
//! For each scenario (pods x policies of a generated cluster, see `gen.rs`):
//!
//! 1. **Compile** the policies into identity tables (best of three; the IR is built
//!    directly, so manifest parsing is not included) and report the table sizes and
//!    lookup memory.
//! 2. **sluice**: a trace of 65,536 connection attempts per family (IPv4, IPv6) on one
//!    core, two ways: `burst`, one `PolicyTables::verdicts_v4` / `verdicts_v6` call per
//!    32 packets (staged lookups with prefetching, for a caller that holds a burst of
//!    new connections; rte_acl classifies in bursts too), and `single`, one
//!    `verdict_v4` / `verdict_v6` call per packet (the balancer calls `verdict`, the
//!    same lookups, for each new connection when the tables are under
//!    `policy::BURST_MIN`, and `verdicts` for a burst's new connections from there;
//!    `bench_balance_policy` times both inside the balancer). Each is the median of 7
//!    timed rounds of at least 200 ms.
//! 3. **rte_acl**: the compiled policy exported as two ClassBench rule files (egress and
//!    ingress: a connection needs both, and one first-match list cannot express the
//!    conjunction without a cross product) plus the trace, run through `dpdk-test-acl`
//!    (EAL `--no-huge --no-pci -l 0`, one lcore): first once with per-packet results to
//!    check that rte_acl agrees with sluice on every trace line, per direction, then
//!    timed with `--alg` scalar, sse and avx2. rte_acl's decision rate is
//!    `1 / (1/egress_rate + 1/ingress_rate)`; the ratios are sluice (burst, and single)
//!    / the best algorithm.
//!
//! At the end, `lookup_cost_growth_fewest_to_most_policies`: ns per lookup at the most
//! policies over ns per lookup at the fewest (same pods), for burst and single, per
//! family, on the mixed trace and on the trace whose destinations are all isolated; and
//! `burst_interleaved`, the burst growth on the mixed trace with the two scenarios'
//! tables timed in alternation (15 rounds of a ~100 ms pass each, median of the rounds'
//! ratios), which is what the goal is read from: the per-scenario timings are minutes
//! apart, and on a shared machine whose memory latency moves in phases their ratio
//! moved between 1.0 and 2.1 from run to run.
//!
//! Usage: `cargo run --release -p sluice-perf --no-default-features --bin bench_policy
//! -- [--quick] [--no-acl] [--scenarios PODSxPOLICIES,...] [--out FILE]` (`--help`
//! explains). Prints JSON; numbers are printed, never asserted. `dpdk-test-acl` comes
//! with Debian's `dpdk-dev` package; without it the rte_acl part says so and the rest
//! runs.

mod gen;

use std::fmt::Write as _;
use std::hint::black_box;
use std::io::Read as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use rustix::time::{clock_gettime, ClockId};
use serde_json::{json, Value};
use sluice_ctrl::compile::policy::acl::{self, Family};
use sluice_ctrl::compile::policy::{compile, CompiledPolicy};
use sluice_dataplane::tables::policy::{
    Conn4, Conn6, DirOutcome, PolicyTables, Verdict, BATCH, NONE,
};
use sluice_perf::stats;

const TRACE: usize = 65_536;
const ROUNDS: usize = 7;
const ROUND: Duration = Duration::from_millis(200);
const ACL_TIMEOUT: Duration = Duration::from_secs(900);

/// NetworkPolicy verdicts per second per core, compile time and table size per scenario,
/// beside DPDK's rte_acl on the same decisions. Prints JSON.
///
/// Growth is reported from the scenario with the fewest policies to the one with the most
/// (ties: the one with the most pods).
#[derive(Parser, Debug)]
#[command(name = "bench_policy")]
struct Cli {
    /// Two small scenarios (1000 pods x 10, 10000 pods x 1000 policies); the later of
    /// `--quick` and `--scenarios` wins.
    #[arg(long, overrides_with = "scenarios")]
    quick: bool,
    /// Skip the dpdk-test-acl comparison.
    #[arg(long = "no-acl")]
    no_acl: bool,
    /// Export the rte_acl rule sets and count them, run nothing.
    #[arg(long)]
    rules_only: bool,
    /// Comma-separated PODSxPOLICIES, e.g. 50000x10,50000x10000 (default:
    /// 1000x10,50000x10,50000x1000,50000x10000).
    #[arg(long, value_name = "LIST", value_parser = gen::scenarios, overrides_with = "quick")]
    scenarios: Option<gen::Scenarios>,
    /// Also write the JSON to FILE (after every scenario, then complete).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

struct Args {
    scenarios: Vec<(usize, usize)>,
    acl: bool,
    rules_only: bool,
    out: Option<PathBuf>,
}

fn args() -> Args {
    let c = Cli::parse();
    let scenarios = match (c.scenarios, c.quick) {
        (Some(s), _) => s.0,
        (None, true) => vec![(1_000, 10), (10_000, 1_000)],
        (None, false) => vec![(1_000, 10), (50_000, 10), (50_000, 1_000), (50_000, 10_000)],
    };
    Args {
        scenarios,
        acl: !c.no_acl,
        rules_only: c.rules_only,
        out: c.out,
    }
}

/// Median and best ns per lookup of `f` over the trace (`f` runs the whole trace once
/// and returns a checksum).
/// One timing: the median and the best of [`ROUNDS`] rounds in wall-clock ns per lookup,
/// and the median in the thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), which leaves
/// out the time the thread waited while other work ran on its core (this machine is
/// shared, so the wall-clock figures carry that noise; the CPU ones much less).
#[derive(Clone, Copy)]
struct Timing {
    median: f64,
    best: f64,
    cpu_median: f64,
}

fn thread_cpu_ns() -> u128 {
    let t = clock_gettime(ClockId::ThreadCPUTime);
    t.tv_sec as u128 * 1_000_000_000 + t.tv_nsec as u128
}

fn time_trace(n: usize, mut f: impl FnMut() -> u64) -> Timing {
    let mut reps = 1usize;
    loop {
        let t = Instant::now();
        for _ in 0..reps {
            black_box(f());
        }
        if t.elapsed() >= ROUND / 4 {
            break;
        }
        reps *= 2;
    }
    reps *= 4;
    let mut samples = Vec::with_capacity(ROUNDS);
    let mut cpu = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let (t, c) = (Instant::now(), thread_cpu_ns());
        for _ in 0..reps {
            black_box(f());
        }
        samples.push(t.elapsed().as_nanos() as f64 / (reps * n) as f64);
        cpu.push(thread_cpu_ns().saturating_sub(c) as f64 / (reps * n) as f64);
    }
    Timing {
        median: stats::median(&samples),
        best: stats::min(&samples),
        cpu_median: stats::median(&cpu),
    }
}

/// A trace's connections as a burst API takes them: `conn` makes one from a probe, or
/// `None` for a probe of the other family (which becomes `C::default()`).
fn conns<C: Default>(trace: &[gen::Probe], conn: impl Fn(&gen::Probe) -> Option<C>) -> Vec<C> {
    trace.iter().map(|p| conn(p).unwrap_or_default()).collect()
}

/// A trace's IPv4 connections.
fn conns4(trace: &[gen::Probe]) -> Vec<Conn4> {
    conns(trace, |p| match (p.src, p.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => Some(Conn4 {
            src: u32::from(s),
            dst: u32::from(d),
            proto: p.proto,
            dst_port: p.dport,
        }),
        _ => None,
    })
}

/// A trace's IPv6 connections.
fn conns6(trace: &[gen::Probe]) -> Vec<Conn6> {
    conns(trace, |p| match (p.src, p.dst) {
        (IpAddr::V6(s), IpAddr::V6(d)) => Some(Conn6 {
            src: u128::from(s),
            dst: u128::from(d),
            proto: p.proto,
            dst_port: p.dport,
        }),
        _ => None,
    })
}

/// One scenario's tables and traces, kept for [`interleaved_growth`].
struct Kept {
    name: String,
    tables: PolicyTables,
    v4: Vec<Conn4>,
    v6: Vec<Conn6>,
}

/// ns per lookup of one burst pass (`verdicts_v4`/`_v6`, 32 a call) over `k`'s trace of
/// the family, `reps` times.
fn burst_pass_ns(k: &Kept, v6: bool, reps: usize) -> f64 {
    let mut out = vec![Verdict::Allow; TRACE];
    let t = Instant::now();
    for _ in 0..reps {
        if v6 {
            for (c, o) in k.v6.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
                k.tables.verdicts_v6(c, o);
            }
        } else {
            for (c, o) in k.v4.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
                k.tables.verdicts_v4(c, o);
            }
        }
        black_box(&out);
    }
    t.elapsed().as_nanos() as f64 / (reps * TRACE) as f64
}

/// Rounds of the interleaved growth measurement.
const GROWTH_ROUNDS: usize = 15;

/// The burst lookup's growth from `lo` to `hi` (fewest to most policies), timed in
/// alternation: each round times one pass of about 100 ms over each table (in turn
/// first), and the growth is the median of the rounds' `hi / lo`. The scenarios' own
/// figures are measured minutes apart, and this machine's memory latency moves in
/// phases of seconds (see `sluice_perf::WINDOW`), which moved their ratio between 1.0 and
/// 2.1 across runs; adjacent passes share a phase.
fn interleaved_growth(lo: &Kept, hi: &Kept) -> Value {
    let mut g = serde_json::Map::new();
    for (key, v6) in [("ipv4", false), ("ipv6", true)] {
        // Passes of about 100 ms on the bigger table.
        let once = burst_pass_ns(hi, v6, 1).max(1.0);
        let reps = ((100e6 / (once * TRACE as f64)) as usize).max(1);
        burst_pass_ns(lo, v6, reps);
        let (mut ratios, mut lo_ns, mut hi_ns) = (vec![], vec![], vec![]);
        for r in 0..GROWTH_ROUNDS {
            let (l, h) = if r % 2 == 0 {
                let l = burst_pass_ns(lo, v6, reps);
                (l, burst_pass_ns(hi, v6, reps))
            } else {
                let h = burst_pass_ns(hi, v6, reps);
                (burst_pass_ns(lo, v6, reps), h)
            };
            ratios.push(h / l);
            lo_ns.push(l);
            hi_ns.push(h);
        }
        g.insert(
            key.into(),
            json!({
                "growth": stats::median(&ratios),
                "from_ns_per_lookup": stats::median(&lo_ns),
                "to_ns_per_lookup": stats::median(&hi_ns),
                "rounds_growth": ratios,
            }),
        );
    }
    json!({
        "from": lo.name,
        "to": hi.name,
        "measured_as": format!("burst lookups (verdicts_v4/_v6, 32 a call) over each scenario's mixed trace, the two tables timed in alternation: {GROWTH_ROUNDS} rounds of one ~100 ms pass each, growth = median of the rounds' to/from; the figure the <= 1.5 goal is read from"),
        "by_family": g,
    })
}

fn sluice_rate(t: &PolicyTables, trace: &[gen::Probe], v6: bool) -> Value {
    let n = trace.len();
    let mut out = vec![Verdict::Allow; n];
    let (single, burst) = if v6 {
        let tr = conns6(trace);
        let single = time_trace(n, || {
            tr.iter()
                .map(|c| u64::from(t.verdict_v6(c.src, c.dst, c.proto, c.dst_port).is_allow()))
                .sum()
        });
        let burst = time_trace(n, || {
            for (c, o) in tr.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
                t.verdicts_v6(c, o);
            }
            out.iter().filter(|v| v.is_allow()).count() as u64
        });
        (single, burst)
    } else {
        let tr = conns4(trace);
        let single = time_trace(n, || {
            tr.iter()
                .map(|c| u64::from(t.verdict_v4(c.src, c.dst, c.proto, c.dst_port).is_allow()))
                .sum()
        });
        let burst = time_trace(n, || {
            for (c, o) in tr.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
                t.verdicts_v4(c, o);
            }
            out.iter().filter(|v| v.is_allow()).count() as u64
        });
        (single, burst)
    };
    let allowed = trace
        .iter()
        .filter(|p| t.verdict(p.src, p.dst, p.proto, p.dport).is_allow())
        .count();
    let mut isolated = [0usize; 2];
    for p in trace {
        let d = t.decide(p.src, p.dst, p.proto, p.dport);
        isolated[0] += usize::from(d.egress != DirOutcome::NotIsolated);
        isolated[1] += usize::from(d.ingress != DirOutcome::NotIsolated);
    }
    // The burst path must answer like the single one (the tests prove it; this keeps
    // the benchmark honest about what it timed).
    let mismatches = trace
        .iter()
        .zip(&out)
        .filter(|(p, v)| t.verdict(p.src, p.dst, p.proto, p.dport) != **v)
        .count();
    json!({
        "burst": {
            "burst_size": BATCH,
            "api": "PolicyTables::verdicts_v4/verdicts_v6, one call per 32 connections",
            "ns_per_lookup": burst.median,
            "ns_per_lookup_best": burst.best,
            "cpu_ns_per_lookup": burst.cpu_median,
            "lookups_per_sec": 1e9 / burst.median,
            "mismatches_vs_single": mismatches,
        },
        "single": {
            "api": "PolicyTables::verdict_v4/verdict_v6, one call per connection",
            "ns_per_lookup": single.median,
            "ns_per_lookup_best": single.best,
            "cpu_ns_per_lookup": single.cpu_median,
            "lookups_per_sec": 1e9 / single.median,
        },
        "burst_speedup": single.median / burst.median,
        "allowed_fraction": allowed as f64 / n as f64,
        "egress_isolated_fraction": isolated[0] as f64 / n as f64,
        "ingress_isolated_fraction": isolated[1] as f64 / n as f64,
    })
}

fn trace_file(trace: &[gen::Probe], v6: bool) -> String {
    let mut s = String::with_capacity(trace.len() * 48);
    for p in trace {
        let _ = match (p.src, p.dst) {
            (IpAddr::V4(a), IpAddr::V4(b)) if !v6 => writeln!(
                s,
                "{} {} {} {} {}",
                u32::from(a),
                u32::from(b),
                p.sport,
                p.dport,
                p.proto
            ),
            (a, b) => writeln!(s, "{a} {b} {} {} {}", p.sport, p.dport, p.proto),
        };
    }
    s
}

/// Runs `dpdk-test-acl`; returns its stdout.
#[allow(clippy::too_many_arguments)]
fn run_acl(
    dir: &Path,
    rules: &Path,
    n_rules: usize,
    trace: &Path,
    v6: bool,
    alg: &str,
    verbose: u32,
    iters: u32,
) -> Result<String, String> {
    let mut cmd = Command::new("dpdk-test-acl");
    cmd.args([
        "--no-huge",
        "--no-pci",
        "-m",
        "6144",
        "-l",
        "0",
        &format!("--file-prefix=sluice-bench-policy-{}", std::process::id()),
        "--",
    ])
    .arg(format!("--rulesf={}", rules.display()))
    .arg(format!("--tracef={}", trace.display()))
    .arg(format!("--rulenum={}", n_rules + 1))
    .arg(format!("--tracenum={TRACE}"))
    .arg(format!("--alg={alg}"))
    .arg(format!("--verbose={verbose}"))
    .arg(format!("--iter={iters}"));
    if v6 {
        cmd.arg("--ipv6");
    }
    let out_path = dir.join("acl.out");
    let out_file = std::fs::File::create(&out_path).map_err(|e| e.to_string())?;
    let mut child = cmd
        .stdout(out_file)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!("cannot run dpdk-test-acl ({e}); it is in Debian's dpdk-dev package")
        })?;
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
            break s;
        }
        if start.elapsed() > ACL_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "dpdk-test-acl ({alg}) timed out after {ACL_TIMEOUT:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let out = std::fs::read_to_string(&out_path).map_err(|e| e.to_string())?;
    if !status.success() {
        let tail: Vec<&str> = err.lines().chain(out.lines()).rev().take(6).collect();
        return Err(format!(
            "dpdk-test-acl ({alg}) failed: {status}: {:?}",
            tail
        ));
    }
    Ok(out)
}

/// Per-packet results of a `--verbose=2` run: rule index or None (no match).
fn parse_results(out: &str) -> Vec<Option<usize>> {
    let mut r = Vec::new();
    for line in out.lines() {
        if !(line.starts_with("ipv4_5tuple:") || line.starts_with("ipv6_5tuple:")) {
            continue;
        }
        let Some(v) = line
            .rsplit("result: ")
            .next()
            .and_then(|x| x.trim().parse::<u64>().ok())
        else {
            continue;
        };
        r.push(if v == u64::from(u32::MAX) {
            None
        } else {
            Some(v as usize)
        });
    }
    r
}

/// `(pkt/sec, cycles/pkt)` of a timing run.
fn parse_rate(out: &str) -> Option<(f64, f64)> {
    let line = out
        .lines()
        .find(|l| l.contains("search_ip5tuples") && l.contains("pkt/sec"))?;
    let mut fields = line.split(", ");
    let cycles = fields
        .clone()
        .find(|f| f.ends_with("cycles/pkt"))?
        .trim_end_matches(" cycles/pkt")
        .parse()
        .ok()?;
    let pps = fields
        .find(|f| f.trim_end().ends_with("pkt/sec"))?
        .trim()
        .trim_end_matches(" pkt/sec")
        .parse()
        .ok()?;
    Some((pps, cycles))
}

fn acl_side(
    dir: &Path,
    c: &CompiledPolicy,
    trace: &[gen::Probe],
    v6: bool,
    sluice_lps: (f64, f64),
    rules_only: bool,
) -> Value {
    let family = if v6 { Family::V6 } else { Family::V4 };
    let t0 = Instant::now();
    let (eg, ing) = acl::export(c, family);
    let export_s = t0.elapsed().as_secs_f64();
    if rules_only {
        return json!({"rules": {"egress": eg.rules.len(), "ingress": ing.rules.len()}, "export_seconds": export_s});
    }
    let tag = if v6 { "v6" } else { "v4" };
    let trace_path = dir.join(format!("trace.{tag}"));
    if let Err(e) = std::fs::write(&trace_path, trace_file(trace, v6)) {
        return json!({"error": e.to_string()});
    }
    let mut per_dir = Vec::new();
    for (name, rules) in [("egress", &eg), ("ingress", &ing)] {
        let path = dir.join(format!("rules.{name}.{tag}"));
        if let Err(e) = std::fs::write(&path, rules.classbench()) {
            return json!({"error": e.to_string()});
        }
        per_dir.push((name, rules, path));
    }
    // Agreement: per-packet results, per direction.
    let decisions: Vec<_> = trace
        .iter()
        .map(|p| c.tables.decide(p.src, p.dst, p.proto, p.dport))
        .collect();
    let mut agreement = serde_json::Map::new();
    let mut acl_allow = vec![[true; 2]; trace.len()];
    for (d, (name, rules, path)) in per_dir.iter().enumerate() {
        let out = match run_acl(
            dir,
            path,
            rules.rules.len(),
            &trace_path,
            v6,
            "scalar",
            2,
            1,
        ) {
            Ok(o) => o,
            Err(e) => {
                return json!({"error": e, "rules": {"egress": eg.rules.len(), "ingress": ing.rules.len()}})
            }
        };
        let results = parse_results(&out);
        let mut mismatch = 0usize;
        for (i, p) in trace.iter().enumerate() {
            let acl_ok = results
                .get(i)
                .copied()
                .flatten()
                .map(|r| rules.rules.get(r).is_none_or(|x| x.allow))
                .unwrap_or(true);
            acl_allow[i][d] = acl_ok;
            let ours = if d == 0 {
                decisions[i].egress.allows()
            } else {
                decisions[i].ingress.allows()
            };
            if acl_ok != ours || results.len() != trace.len() {
                mismatch += 1;
                if mismatch <= 3 {
                    eprintln!("bench_policy: {name} disagreement on {p:?}: rte_acl {acl_ok}, sluice {ours}");
                }
            }
        }
        agreement.insert(
            (*name).to_string(),
            json!({"lines": results.len(), "mismatches": mismatch}),
        );
    }
    let verdict_mismatch = trace
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            (acl_allow[*i][0] && acl_allow[*i][1]) != decisions[*i].verdict().is_allow()
        })
        .count();
    agreement.insert("verdict_mismatches".into(), json!(verdict_mismatch));
    // Timing, per algorithm.
    let mut algs = serde_json::Map::new();
    let mut best: Option<(String, f64)> = None;
    for alg in ["scalar", "sse", "avx2"] {
        let mut rates = Vec::new();
        let mut err = None;
        for (_, rules, path) in &per_dir {
            // About a second of classification at ~10-50 Mpps.
            match run_acl(dir, path, rules.rules.len(), &trace_path, v6, alg, 0, 400)
                .map(|o| parse_rate(&o))
            {
                Ok(Some(r)) => rates.push(r),
                Ok(None) => err = Some("no rate line in dpdk-test-acl output".to_string()),
                Err(e) => err = Some(e),
            }
        }
        if let (None, [(e_pps, e_cyc), (i_pps, i_cyc)]) = (&err, rates.as_slice()) {
            let decisions = 1.0 / (1.0 / e_pps + 1.0 / i_pps);
            algs.insert(
                alg.into(),
                json!({"egress_pkt_per_sec": e_pps, "ingress_pkt_per_sec": i_pps,
                       "egress_cycles_per_pkt": e_cyc, "ingress_cycles_per_pkt": i_cyc,
                       "decisions_per_sec": decisions}),
            );
            if best.as_ref().is_none_or(|b| decisions > b.1) {
                best = Some((alg.to_string(), decisions));
            }
        } else {
            algs.insert(alg.into(), json!({"error": err}));
        }
    }
    json!({
        "rules": {"egress": eg.rules.len(), "ingress": ing.rules.len()},
        "export_seconds": export_s,
        "agreement": agreement,
        "algs": algs,
        "best_alg": best.as_ref().map(|b| b.0.clone()),
        "ratio_sluice_over_best_acl": best.as_ref().map(|b| json!({
            "burst": sluice_lps.0 / b.1,
            "single": sluice_lps.1 / b.1,
        })),
    })
}

/// What every scenario runs with: the options, the scratch directory, and whether
/// `dpdk-test-acl` is there (or only its rule sets are wanted).
struct Bench<'a> {
    args: &'a Args,
    dir: &'a Path,
    acl_present: bool,
}

fn main() {
    let a = args();
    let scenarios = &a.scenarios;
    let dir = std::env::temp_dir().join(format!("sluice-bench-policy-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let acl_present = a.rules_only
        || a.acl
            && std::env::var_os("PATH").is_some_and(|p| {
                std::env::split_paths(&p).any(|d| d.join("dpdk-test-acl").is_file())
            });
    let bench = Bench {
        args: &a,
        dir: &dir,
        acl_present,
    };
    let mut results = Vec::new();
    let mut kept: Vec<Kept> = Vec::new();
    for &(pods, policies) in scenarios {
        let (entry, k) = match scenario(&bench, pods, policies) {
            Some(Ok(measured)) => measured,
            Some(Err(failed)) => {
                results.push(failed);
                continue;
            }
            None => continue,
        };
        results.push(entry);
        kept.push(k);
        // Keep what is measured so far, in case a long rte_acl build is interrupted.
        if let Some(p) = &a.out {
            let partial =
                json!({"benchmark": "bench_policy", "partial": true, "scenarios": results});
            let _ = std::fs::write(
                p,
                serde_json::to_string_pretty(&partial).unwrap_or_default(),
            );
        }
    }
    let growth = growth(&results, &kept);
    let _ = std::fs::remove_dir_all(&dir);
    let out = json!({
        "benchmark": "bench_policy",
        "trace_per_family": TRACE,
        "scenarios": results,
        "lookup_cost_growth_fewest_to_most_policies": growth,
        "goals": {
            "ratio_vs_rte_acl_at_10k_policies": ">= 2",
            "cost_growth_10_to_10k": "<= 1.5",
            "compile_10k_policies_seconds": "< 1",
            "tables_mib": "< 256",
        },
    });
    let text = serde_json::to_string_pretty(&out).unwrap_or_default();
    println!("{text}");
    if let Some(p) = a.out {
        if let Err(e) = std::fs::write(&p, &text) {
            eprintln!("bench_policy: cannot write {}: {e}", p.display());
        }
    }
}

/// One scenario: a generated cluster of `pods` pods and `policies` policies, compiled
/// (best of three), then both families' lookups beside rte_acl. Its entry and what the
/// interleaved growth needs, or the entry of a compile error.
fn scenario(b: &Bench, pods: usize, policies: usize) -> Option<Result<(Value, Kept), Value>> {
    eprintln!("bench_policy: {pods} pods, {policies} policies");
    let cluster = gen::cluster(pods, policies, 0x5eed_0000 + policies as u64);
    let mut best = f64::MAX;
    let mut compiled = None;
    for _ in 0..3 {
        let t = Instant::now();
        let c = compile(&cluster.ir);
        best = best.min(t.elapsed().as_secs_f64());
        compiled = Some(c);
    }
    let c = match compiled {
        Some(Ok(c)) => c,
        Some(Err(e)) => {
            return Some(Err(
                json!({"requested_pods": pods, "pods": pods, "policies": policies, "error": format!("{e:?}")}),
            ));
        }
        None => return None,
    };
    let mut entry = json!({
        "requested_pods": pods,
        "pods": cluster.pods.len(),
        "policies": policies,
        "compile": {
            "seconds": best,
            "memory_bytes": c.stats.memory_bytes,
            "memory_mib": c.stats.memory_bytes as f64 / (1024.0 * 1024.0),
            "stats": c.stats,
        },
    });
    let (mut v4, mut v6s) = (vec![], vec![]);
    for (key, v6) in [("ipv4", false), ("ipv6", true)] {
        let trace = gen::trace(&cluster, TRACE, v6, 0x7ace + policies as u64, None);
        if v6 {
            v6s = conns6(&trace);
        } else {
            v4 = conns4(&trace);
        }
        entry[key] = family(b, &cluster, &c, &trace, (key, v6), policies);
    }
    let kept = Kept {
        name: format!("{pods}x{policies}"),
        tables: c.tables,
        v4,
        v6: v6s,
    };
    Some(Ok((entry, kept)))
}

/// One family's figures of a scenario: sluice's lookups over `trace` (and over a trace
/// whose destinations are all ingress-isolated pods), beside rte_acl's.
fn family(
    b: &Bench,
    cluster: &gen::Cluster,
    c: &CompiledPolicy,
    trace: &[gen::Probe],
    (key, v6): (&str, bool),
    policies: usize,
) -> Value {
    let mut s = sluice_rate(&c.tables, trace, v6);
    // The same mix with every destination an ingress-isolated pod: the cost of
    // evaluating policy, apart from how much of the cluster policy covers.
    let isolated: Vec<usize> = cluster
        .pods
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            let ip = if v6 { IpAddr::V6(p.1) } else { IpAddr::V4(p.0) };
            c.tables
                .identity_entry(c.tables.identity(ip))
                .is_some_and(|e| e.ingress != NONE)
        })
        .map(|(i, _)| i)
        .collect();
    if !isolated.is_empty() {
        let t2 = gen::trace(cluster, TRACE, v6, 0x150 + policies as u64, Some(&isolated));
        let s2 = sluice_rate(&c.tables, &t2, v6);
        s["isolated_destinations"] = s2;
    }
    let lps = (
        s["burst"]["lookups_per_sec"].as_f64().unwrap_or(0.0),
        s["single"]["lookups_per_sec"].as_f64().unwrap_or(0.0),
    );
    let acl = if b.acl_present {
        eprintln!("bench_policy:   {key}: rte_acl");
        acl_side(b.dir, c, trace, v6, lps, b.args.rules_only)
    } else {
        json!({"skipped": if b.args.acl { "dpdk-test-acl not found (Debian package dpdk-dev)" } else { "--no-acl" }})
    };
    json!({"trace": TRACE, "sluice": s, "rte_acl": acl})
}

/// Growth of the lookup cost from the fewest to the most policies (ties: most pods).
fn growth(results: &[Value], kept: &[Kept]) -> serde_json::Map<String, Value> {
    let pick = |most: bool| {
        results
            .iter()
            .filter(|r| r["error"].is_null())
            .max_by_key(|r| {
                let pol = r["policies"].as_u64().unwrap_or(0);
                let pods = r["requested_pods"].as_u64().unwrap_or(0);
                (if most { pol } else { u64::MAX - pol }, pods)
            })
    };
    let mut growth = serde_json::Map::new();
    let (Some(lo), Some(hi)) = (pick(false), pick(true)) else {
        return growth;
    };
    let name = |r: &Value| format!("{}x{}", r["requested_pods"], r["policies"]);
    growth.insert("from".into(), json!(name(lo)));
    growth.insert("to".into(), json!(name(hi)));
    growth.insert(
        "measured_as".into(),
        json!(
            "ns per lookup at `to` over ns per lookup at `from`, from each scenario's \
             own timings (taken minutes apart). `burst` is the staged lookup for a \
             burst (PolicyTables::verdicts_v4/verdicts_v6 over 32 connections, with \
             prefetching across the burst); the <= 1.5 goal is read from \
             `burst_interleaved`, the same lookups with both tables timed in \
             alternation. `single` is one verdict_v4/verdict_v6 call per \
             connection (how the balancer checks new connections when its tables \
             are under policy::BURST_MIN). Plain \
             keys: median wall-clock rounds; `_cpu` keys: median thread CPU time \
             (leaves out time lost to other work on a shared core)."
        ),
    );
    for path in ["burst", "single"] {
        for (field, suffix_t) in [("ns_per_lookup", ""), ("cpu_ns_per_lookup", "_cpu")] {
            let mut g = serde_json::Map::new();
            for key in ["ipv4", "ipv6"] {
                for (suffix, iso) in [("", false), ("_isolated_destinations", true)] {
                    let ns = |r: &Value| {
                        let s = &r[key]["sluice"];
                        let s = if iso { &s["isolated_destinations"] } else { s };
                        s[path][field].as_f64()
                    };
                    if let (Some(l), Some(h)) = (ns(lo), ns(hi)) {
                        g.insert(format!("{key}{suffix}"), json!(h / l));
                    }
                }
            }
            growth.insert(format!("{path}{suffix_t}"), Value::Object(g));
        }
    }
    let find = |r: &Value| kept.iter().find(|k| k.name == name(r));
    if let (Some(l), Some(h)) = (find(lo), find(hi)) {
        eprintln!("bench_policy: interleaved growth {} -> {}", l.name, h.name);
        growth.insert("burst_interleaved".into(), interleaved_growth(l, h));
    }
    growth
}
