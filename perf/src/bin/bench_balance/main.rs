//! L4 balancer benchmark, printed as JSON (never asserted).
//!
//! The [`Balancer`] stage (flow table, NAT with incremental checksums, Maglev, policy,
//! forwarder) in sluice's worker on one pinned core (core 1; the control thread is pinned
//! to core 0), with tables compiled from manifests like the integration tests do: a
//! Gateway on 10.77.0.10:7000 with a TCPRoute to a Service of 256 pods (Maglev 65537) and
//! a NetworkPolicy admitting 10.77.0.0/16 on TCP 7000.
//!
//! 1. **Established flows**: Mpps per core and TSC cycles per packet with 1k, 100k and 1M
//!    established flows (each flow's SYN first, then ACK segments of all flows in a
//!    shuffled order, forever; the original direction, client to virtual address), side
//!    by side with `dpdk-testpmd --forward-mode=macswap`. The flow table has the default
//!    capacity (1M flows per worker; at 1M flows it is full). The same run also measures,
//!    at every flow count, both directions (`both_directions`: the client ACKs plus, on
//!    the inside port, an ACK from each flow's backend to its SNAT port, learnt from the
//!    NATed SYNs; half the packets each) and a table only as big as the flows
//!    (`full_table`: capacity N, the index at its fullest).
//!    *Traffic source*: `net_pcap` with `infinite_rx=1` keeps the whole capture in mbufs
//!    of the port's pool (16383 mbufs under `-m 512` without hugepages), so a capture of
//!    100k or 1M distinct flows does not fit. The flow-count series therefore runs on an
//!    in-process replay queue that does what `infinite_rx` does (per packet: take a
//!    buffer from a pool and copy the next 60-byte frame of an in-memory capture) on the
//!    worker's own core, with a sink like `net_null` on the other port. The replay's own
//!    cost is counted in the balancer's figure and grows with the flow count (at 100k
//!    flows the capture is 6 MB, read cold, while testpmd replays 4000 frames that stay
//!    cached), so every flow count is measured from two sources that produce the same
//!    frames (checked when the source is built): `capture`, the next 60-byte frame of an
//!    in-memory capture per packet, and `template`, the way a traffic generator such as
//!    TRex makes many flows: one 60-byte template copied per packet, with the flow's
//!    source address and port written in from a compact tuple list (8 bytes per flow)
//!    and both checksums adjusted incrementally. For each source and flow count the same
//!    run also measures sluice's macswap stage on that replay (the harness alone; the
//!    balancer minus it is printed), and the balancer at 1k flows on the real vdevs
//!    (`net_pcap` infinite_rx -> `net_null`, the capture testpmd replays) ties the
//!    replay to the vdevs. Ratios: balancer / testpmd for every flow count and source
//!    (`goal: >= 0.5 at 100k`; both sources' ratios are printed), of whole runs and of
//!    their quiet windows (`_quiet`: each run's upper-quartile rate over 250 ms windows,
//!    testpmd's from `show port stats all`; see [`sluice_perf::WINDOW`] for why).
//! 2. **New connections per second per core**: SYNs from 2M distinct client 5-tuples
//!    (replayed; a SYN whose earlier flow is still alive would be a flow hit, which is why
//!    the rate is counted from `flow_created`), each creating a flow (listener, Maglev,
//!    policy, SNAT port, flow insert, NAT, forward). SYN_SENT times out after 1 s, so the
//!    table's timer wheel expires and recycles flows as fast as they are made (the cost is
//!    included). Goal: 200k/s per core (DPVS's per-worker figure).
//! 3. **Bytes per flow**: `FlowTable::memory_bytes() / capacity` (goal <= 128).
//! 4. **Swaps**: snapshot build time of a config with 10,000 extra TCP listeners and a
//!    route each to the 256-pod Service (the IR of the compiled manifests with its
//!    listener and route replicated, Maglev tables of `--swap-maglev` slots: 10k tables
//!    of 65537 slots would take 2.6 GB), and the compile time (manifests -> IR) of 1,000,
//!    5,000 and 10,000 generated listeners and TCPRoutes, with the growth of the time per
//!    route (1.0 is linear; `bench_compile` times each phase of a reload). Then, with 100k
//!    established flows at full rate through the worker, the control thread publishes the
//!    10k-route snapshots, then a freshly built base snapshot every `--swap-interval-ms`,
//!    timing `publish`, the wait until the worker has moved to the new generation
//!    (`oldest_in_use`, spinning) and the reclaim (freeing the old snapshot). Packets
//!    lost: received - sent - drops, plus every drop (none is expected: every flow stays
//!    allowed; its policy is re-checked once per swap).
//!
//! Usage: `bench_balance [--duration SECS] [--runs N] [--no-testpmd] [--quick]
//! [--swap-interval-ms MS] [--swap-maglev SLOTS] [--out FILE] [--only-flows N]
//! [--source capture|template] [--both-directions] [--capacity N] [--only-new-connections]`
//! (`--help` explains each; `--quick`: 1k and 100k flows only; `--only-flows N`: only
//! the balancer with N established flows on the replay, for profiling, from
//! `--source`, `capture` by default). Medians over `--runs` runs; each figure is added to
//! `--out` (if given) as soon as it is measured.
//!
//! [`Balancer`]: sluice_dataplane::balancer::Balancer

mod established;
mod frames;
mod harness;
mod new_connections;
mod opts;
mod replay;
mod swap;
mod world;

use crate::established::fig_established;
use crate::harness::{established_capacity, established_run};
use crate::new_connections::fig_new_connections;
use crate::opts::opts;
use crate::swap::fig_swap;
use crate::world::{compile, manifests};
use serde_json::json;
use sluice_dataplane::flow::{FlowTable, Timeouts};
use sluice_perf::report::Report;
use sluice_perf::{dpdk_cleanup, summary};

fn fig_bytes_per_flow(report: &mut Report) {
    let mut m = serde_json::Map::new();
    for cap in [1_000usize, 100_000, 1_000_000, 1 << 20, 1 << 22] {
        let t = FlowTable::new(cap, Timeouts::default(), 0, 1);
        m.insert(
            cap.to_string(),
            json!({
                "memory_bytes": t.memory_bytes(),
                "bytes_per_flow": t.memory_bytes() as f64 / t.capacity() as f64,
            }),
        );
    }
    report.set(
        "bytes_per_flow",
        json!({
            "by_capacity": m,
            "flow_entry_bytes": std::mem::size_of::<sluice_dataplane::flow::Flow>(),
            "goal": "<= 128",
        }),
    );
}

fn main() {
    let o = opts();
    if !core_affinity::set_for_current(core_affinity::CoreId { id: 0 }) {
        eprintln!("bench_balance: could not pin the control thread to core 0");
    }
    let dir = std::env::temp_dir().join(format!("sluice-bench-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let mut report = Report::new(
        "bench_balance",
        json!({"bench": "balance", "tsc_hz": sluice_dataplane::mem::tsc_hz()}),
        o.out.clone(),
    );
    if let Some(n) = o.only_flows {
        let res = compile(&manifests(0, 65537))
            .and_then(|ir| {
                let cap = o.capacity.unwrap_or(established_capacity(n));
                established_run(n, &ir, o.duration, o.source, o.both, cap)
            })
            .map(|(run, drops)| json!({"flows": n, "balancer": summary(&[run]), "drops": drops}));
        match res {
            Ok(v) => report.set("only_flows", v),
            Err(e) => report.set("only_flows_error", json!(e)),
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&report.v).unwrap_or_default()
        );
        return;
    }
    if !o.only_new {
        fig_bytes_per_flow(&mut report);
    }
    match compile(&manifests(0, 65537)) {
        Ok(ir) if o.only_new => fig_new_connections(&o, &ir, &mut report),
        Ok(ir) => {
            fig_established(&o, &ir, &dir, &mut report);
            fig_new_connections(&o, &ir, &mut report);
            fig_swap(&o, &ir, &mut report);
        }
        Err(e) => report.set("config_error", json!(e)),
    }
    let _ = std::fs::remove_dir_all(&dir);
    dpdk_cleanup();
    report.finish();
}
