//! Figure 1: established flows, beside `dpdk-testpmd` macswap.

use crate::frames::{frames, shuffled, Frames};
use crate::harness::{
    established_capacity, established_run, full_capacity, macswap_replay_run, vdev_run, vdevs,
};
use crate::opts::Opts;
use crate::replay::SourceKind;
use serde_json::{json, Value};
use sluice_ctrl::compile::ir::Ir;
use sluice_dataplane::port::{dpdk, pcap};
use sluice_dataplane::wire::tcp;
use sluice_perf::report::Report;
use sluice_perf::{eal_args, ratio, summary, testpmd_run, Run, FWD_CORE};
use std::path::Path;

/// A [`summary`]'s median cycles per packet.
pub(crate) fn cycles(v: &Value) -> f64 {
    v["cycles_per_packet"].as_f64().unwrap_or(0.0)
}

/// Each series: the runs and the last run's drops, per flow count.
type Series = Vec<(Vec<Run>, Value)>;

const KINDS: [SourceKind; 2] = [SourceKind::Capture, SourceKind::Template];

/// Everything figure 1 measured over its runs.
struct Measured {
    /// The balancer on the replay: [source][flow count].
    series: Vec<Series>,
    /// Sluice's macswap stage on the replay: [source][flow count].
    ms: Vec<Vec<Vec<Run>>>,
    /// Both directions (capture source): [flow count].
    both: Series,
    /// A table only as big as the flows (capture source): [flow count].
    full: Series,
    /// `dpdk-testpmd` macswap on the vdevs.
    tp: Vec<Run>,
    /// The balancer on the vdevs, and its last run's drops.
    vd: Vec<Run>,
    vd_drops: Value,
    errors: Vec<String>,
}

pub(crate) fn fig_established(o: &Opts, ir: &Ir, dir: &Path, report: &mut Report) {
    let capture = dir.join("balance-1k.pcap");
    let mut errors = vec![];
    let dpdk_ok = vdev_setup(&capture, &mut errors);
    let counts: &[usize] = if o.quick {
        &[1_000, 100_000]
    } else {
        &[1_000, 100_000, 1_000_000]
    };
    let m = measure(o, ir, &capture, counts, dpdk_ok, errors);
    let t_sum = summary(&m.tp);
    let (by_source, at_100k) = by_source(counts, &m, &t_sum);
    let both_json = series_json(counts, &m.both, &t_sum);
    let full_json = series_json(counts, &m.full, &t_sum);
    let vd_sum = summary(&m.vd);
    report.set(
        "established_flows",
        json!({
            "setup": {
                "balancer_source": {
                    "capture": "in-process replay queue (pool buffer + copy of the next 60-byte frame of an in-memory capture per packet, like net_pcap infinite_rx; 60 bytes per flow, read cold at 100k and 1M flows) -> sink (like net_null)",
                    "template": "in-process replay queue (pool buffer + copy of one 60-byte template, then the flow's source address and port from an 8-byte-per-flow tuple list written in with incrementally adjusted checksums, like a TRex field engine; the same frames) -> sink (like net_null)",
                },
                "testpmd": "dpdk-testpmd --forward-mode=macswap, net_pcap infinite_rx (1k-flow capture, 4000 frames) -> net_null, one forwarding core",
                "forwarding_core": FWD_CORE,
                "duration_s": o.duration,
                "runs": o.runs,
                "traffic": "TCP ACK segments (60 bytes) of N established flows in a shuffled order, after each flow's SYN; NAT to 256 backends, NetworkPolicy on",
                "direction": "original (client -> virtual address) only; both_directions adds the replies",
                "flow_capacity": counts.iter().map(|&n| (n.to_string(), json!(established_capacity(n)))).collect::<serde_json::Map<_, _>>(),
            },
            "flows": by_source,
            "both_directions": {
                "traffic": "the capture source's client ACKs on the outside port and, on the inside port, an ACK from each flow's backend to its SNAT address and port (learnt from the NATed SYNs), the flows in a shuffled order: half the packets are replies, looked up through the index; packets are counted as they leave, by either port",
                "flows": both_json,
            },
            "full_table": {
                "traffic": "the capture source with a flow table only as big as the flows (capacity N, at least 1024): the index at its fullest (2/3), longer probe runs",
                "flow_capacity": counts.iter().map(|&n| (n.to_string(), json!(full_capacity(n)))).collect::<serde_json::Map<_, _>>(),
                "flows": full_json,
            },
            "testpmd_macswap": t_sum,
            "balancer_on_vdevs_1k_flows": {
                "run": vd_sum,
                "ratio_to_testpmd": ratio(&vd_sum, &t_sum, "mpps_per_core"),
                "drops_last_run": m.vd_drops,
            },
            "goal": "balancer >= 0.5x testpmd macswap at 100k flows",
            "ratio_to_testpmd_at_100k": {"capture": at_100k[0][0], "template": at_100k[1][0]},
            "ratio_to_testpmd_at_100k_quiet": {"capture": at_100k[0][1], "template": at_100k[1][1]},
            "quiet": "`_quiet` figures: per run, the upper quartile of the rates of its 250 ms windows (testpmd's from `show port stats all` every 250 ms), then the median over runs. This machine's memory system is disturbed from outside in phases (the same balancer process flips between about 205 and 285 cycles a packet at 100k flows; testpmd's cache-resident macswap stays within 103-111): whole-run figures measure how much of a run was disturbed, quiet ones the code",
            "errors": m.errors,
        }),
    );
}

/// Writes the 1k-flow capture the vdevs replay (each flow's SYN, then three shuffled
/// rounds of ACKs) and initialises the EAL; false (with the error in `errors`) if
/// either fails.
fn vdev_setup(capture: &Path, errors: &mut Vec<String>) -> bool {
    let n = 1000;
    let mut cap = frames(0..n, tcp::flags::SYN).data;
    for _ in 0..3 {
        cap.extend(frames(shuffled(n).into_iter(), tcp::flags::ACK).data);
    }
    let cap = Frames { data: cap };
    let mut dpdk_ok = true;
    if let Err(e) = pcap::write_file(capture, (0..cap.len()).map(|i| cap.get(i))) {
        errors.push(format!("capture: {e}"));
        dpdk_ok = false;
    }
    if dpdk_ok {
        if let Err(e) = dpdk::init(&eal_args()) {
            errors.push(format!("EAL: {e}"));
            dpdk_ok = false;
        }
    }
    dpdk_ok
}

/// `o.runs` rounds of every contender at every flow count (and, if `dpdk_ok`, on the
/// vdevs), errors added to `errors`.
fn measure(
    o: &Opts,
    ir: &Ir,
    capture: &Path,
    counts: &[usize],
    dpdk_ok: bool,
    mut errors: Vec<String>,
) -> Measured {
    // [source][flow count]
    let series_of = || -> Series { vec![(vec![], json!({})); counts.len()] };
    let mut series: Vec<Series> = vec![series_of(); 2];
    let mut ms: Vec<Vec<Vec<Run>>> = vec![vec![vec![]; counts.len()]; 2];
    // Both directions (capture source): [flow count]
    let mut both = series_of();
    // A table only as big as the flows (capture source): [flow count]
    let mut full = series_of();
    let (mut tp, mut vd) = (vec![], vec![]);
    let mut vd_drops = json!({});
    for _ in 0..o.runs {
        for (k, &n) in counts.iter().enumerate() {
            // One balancer run into its series (the run and the last drops), or an error.
            let run =
                |what: &str, kind, both, cap, into: &mut (Vec<Run>, Value)| match established_run(
                    n, ir, o.duration, kind, both, cap,
                ) {
                    Ok((r, d)) => {
                        into.0.push(r);
                        into.1 = d;
                        None
                    }
                    Err(e) => Some(format!("balancer {n} flows, {what}: {e}")),
                };
            let cap = established_capacity(n);
            for (s, &kind) in KINDS.iter().enumerate() {
                errors.extend(run(kind.name(), kind, false, cap, &mut series[s][k]));
                match macswap_replay_run(n, o.duration, kind) {
                    Ok(r) => ms[s][k].push(r),
                    Err(e) => errors.push(format!("macswap replay {n} flows, {kind:?}: {e}")),
                }
            }
            let src = SourceKind::Capture;
            errors.extend(run("both directions", src, true, cap, &mut both[k]));
            let full_cap = full_capacity(n);
            errors.extend(run("full table", src, false, full_cap, &mut full[k]));
        }
        if dpdk_ok {
            match vdev_run(capture, ir, o.duration) {
                Ok((r, d)) => {
                    vd.push(r);
                    vd_drops = d;
                }
                Err(e) => errors.push(format!("balancer on vdevs: {e}")),
            }
            if o.testpmd {
                match testpmd_run(&vdevs(capture), o.duration) {
                    Ok(r) => tp.push(r),
                    Err(e) => errors.push(format!("testpmd: {e}")),
                }
            }
        }
    }
    Measured {
        series,
        ms,
        both,
        full,
        tp,
        vd,
        vd_drops,
        errors,
    }
}

/// The replay series by source and flow count, beside testpmd (`t_sum`), and each
/// source's ratios at 100k flows: [source][whole runs, quiet windows].
fn by_source(
    counts: &[usize],
    m: &Measured,
    t_sum: &Value,
) -> (serde_json::Map<String, Value>, [[f64; 2]; 2]) {
    let mut by_source = serde_json::Map::new();
    // [source][whole runs, quiet windows]
    let mut at_100k = [[0.0; 2]; 2];
    for (s, kind) in KINDS.iter().enumerate() {
        let mut flows = serde_json::Map::new();
        for (k, &n) in counts.iter().enumerate() {
            let b = summary(&m.series[s][k].0);
            let ms = summary(&m.ms[s][k]);
            flows.insert(
                n.to_string(),
                json!({
                    "balancer": b,
                    "ratio_to_testpmd": ratio(&b, t_sum, "mpps_per_core"),
                    "ratio_to_testpmd_cpu_normalized": ratio(&b, t_sum, "mpps_per_cpu_second"),
                    "ratio_to_testpmd_quiet": ratio(&b, t_sum, "mpps_per_core_quiet"),
                    "sluice_macswap_stage_on_replay": ms,
                    "balancer_minus_macswap_cycles_per_packet": cycles(&b) - cycles(&ms),
                    "drops_last_run": m.series[s][k].1,
                }),
            );
        }
        let at = |key: &str| {
            flows
                .get("100000")
                .map_or(0.0, |v| v[key].as_f64().unwrap_or(0.0))
        };
        at_100k[s] = [at("ratio_to_testpmd"), at("ratio_to_testpmd_quiet")];
        by_source.insert(kind.name().to_string(), Value::Object(flows));
    }
    (by_source, at_100k)
}

/// One capture-source series by flow count, beside testpmd (`t_sum`).
fn series_json(counts: &[usize], runs: &Series, t_sum: &Value) -> Value {
    let mut m = serde_json::Map::new();
    for (k, &n) in counts.iter().enumerate() {
        let b = summary(&runs[k].0);
        m.insert(
            n.to_string(),
            json!({
                "balancer": b,
                "ratio_to_testpmd": ratio(&b, t_sum, "mpps_per_core"),
                "ratio_to_testpmd_quiet": ratio(&b, t_sum, "mpps_per_core_quiet"),
                "drops_last_run": runs[k].1,
            }),
        );
    }
    Value::Object(m)
}
