//! Delayed-binding (SNI passthrough) benchmark, printed as JSON (never asserted): issue
//! #7's in-process figures.
//!
//! The [`Balancer`](sluice_dataplane::balancer::Balancer) stage is driven directly (no ports, no worker) on one pinned core
//! (core 1, like the other benchmarks; nothing else of the benchmark runs meanwhile), in
//! bursts of 32, by a driver that plays both the clients and the backends: every burst is
//! built from what the stage sent out in the bursts before (its SYN cookies, its SNAT
//! tuples, its backend SYNs' sequence numbers). Tables are compiled from manifests as
//! `bench_balance` does: a Gateway on 10.77.0.10 with a TLS `Passthrough` listener on 443
//! (four TLSRoutes: three exact names and a wildcard, each to a Service of 8 pods) and a
//! TCP listener on 7000 (a TCPRoute to another Service of 8 pods), a NetworkPolicy
//! admitting the clients; 64 client addresses and 40 backends, all neighbours known.
//!
//! *Cycles*: TSC around each `process_burst` (and `maintain`) call only; the driver's
//! own work (building frames, copying them into buffers, checking every output) is
//! outside. The machine is shared, so a call during which the thread was preempted would
//! count the other tasks' time: each call is also timed on the thread's CPU clock
//! (`CLOCK_THREAD_CPUTIME_ID`), and a call whose TSC time exceeds its CPU time by more
//! than 20 µs is counted at its CPU time (`preempted_calls` says how many).
//!
//! 1. **New passthrough connections per second per core** (goal 200k): eight groups of
//!    32 connections in a pipeline, one burst per step and group each tick: client SYN
//!    (-> SYN-ACK with the cookie), client ACK (consumed), client data with a 517-byte
//!    Chrome-like ClientHello naming one of the four routes' names (-> SYN to a backend
//!    of that route's Service, the client's ISN), backend SYN-ACK (-> ACK with the
//!    replayed ClientHello, spliced), a 1200-byte backend data segment (-> to the client,
//!    `seq + delta`), client FIN/ACK, backend FIN/ACK and the client's last ACK
//!    (TIME_WAIT). Every output is checked (verdict, port, addresses, sequence numbers,
//!    payload, checksums); a connection that fails a step stops there and is reported.
//!    SYN_SENT and SYN_RECV last 2 s and TIME_WAIT 1 s (as `bench_balance` shortens
//!    SYN_SENT): a TCP flow's entry is first filed on the timer wheel at its SYN state's
//!    timeout (at most 64 s ahead) and only recycled when the wheel gets there, so these
//!    decide how soon entries come back (2 s, not 1: the wheel ticks once a second, so a
//!    1 s timeout may end within milliseconds, before the handshake has finished); `--long-timeouts` keeps conntrack's SYN timeouts and shows
//!    how many connections the table takes before it is full. The other timeouts are the
//!    defaults, the flow table has the default 1,048,576 entries and the default 1024
//!    embryos.
//!    Reported: connections per second per core from the stage's cycles (the figure;
//!    `maintain`, i.e. embryo timers and flow expiry, included), cycles per connection
//!    and per step, and the whole loop's rate (driver included).
//! 2. **Spliced versus plain forwarding**: N spliced connections (SNI listener, set up as
//!    above, no close) and N plain full-NAT connections (TCP listener: SYN, backend
//!    SYN-ACK, ACK) in one flow table, for N = 1k and 100k; then established segments of
//!    each set in shuffled flow order, in bursts of 32: `ack60` (60-byte ACKs, one burst
//!    from the clients then one from the backends) and `sack` (client ACKs with two SACK
//!    blocks, 74 bytes). The contenders alternate in slices of 16,384 packets (order
//!    swapped every round); cycles per packet per slice, medians over the slices, and the
//!    ratio spliced/plain (packet rate) as the median of each round's pair (goal >= 0.8).
//!    Every flow's first packets are checked for the exact rewrite.
//! 3. **Bytes**: per embryo (`size_of::<Embryo>()` + its buffer, plus the flow entry it
//!    holds) and per spliced flow (`FlowTable::memory_bytes() / capacity`: the splice
//!    state lives in the flow entry; goal <= 128).
//!
//! `clock` reports TSC cycles per core cycle at the start, between and at the end (a
//! dependent chain of one-cycle operations): cycle figures are TSC cycles, and on a
//! shared or virtual machine they move with the core's clock and with its neighbours.
//!
//! Usage: `bench_splice [--duration SECS] [--runs N] [--flows 1000,100000] [--out FILE]
//! [--long-timeouts] [--tsc-only]`. Part 1 runs `--runs` times for `--duration` seconds
//! each (medians); part 2 runs `--runs` × `--duration` seconds per flow count and traffic
//! shape (`--flows ""` skips it). `--tsc-only` times calls on the TSC alone (a quiet
//! machine). `--help` explains each option.

mod forwarding;
mod harness;
mod new_connections;
mod opts;
mod packets;
mod world;

use crate::forwarding::fig_forwarding;
use crate::harness::TSC_ONLY;
use crate::new_connections::fig_new_connections;
use crate::opts::opts;
use crate::packets::client_hello;
use crate::world::SNI_SERVICES;
use serde_json::json;
use sluice_dataplane::flow::{Flow, FlowTable, Timeouts};
use sluice_dataplane::inspect::tls;
use sluice_dataplane::mem::{tsc, tsc_hz};
use sluice_dataplane::splice::{Embryo, Embryos, SpliceConfig};
use sluice_perf::report::Report;
use sluice_perf::FWD_CORE;
use std::sync::atomic::Ordering;

// ---------------------------------------------------------------------------------------
// Configuration.

fn fig_bytes(report: &mut Report) {
    let cfg = SpliceConfig::default();
    let embryos = Embryos::new(cfg.embryos, cfg.buffer_bytes, cfg.embryos_per_source, 0);
    let mut by_cap = serde_json::Map::new();
    for cap in [1_000usize, 100_000, 1 << 20] {
        let t = FlowTable::new(cap, Timeouts::default(), 0, 1);
        by_cap.insert(
            cap.to_string(),
            json!(t.memory_bytes() as f64 / t.capacity() as f64),
        );
    }
    let t = FlowTable::new(1 << 20, Timeouts::default(), 0, 1);
    let per_flow = t.memory_bytes() as f64 / t.capacity() as f64;
    let embryo = std::mem::size_of::<Embryo>() + cfg.buffer_bytes;
    report.set(
        "bytes",
        json!({
            "embryo_slot_bytes": std::mem::size_of::<Embryo>(),
            "embryo_buffer_bytes": cfg.buffer_bytes,
            "per_embryo": embryo,
            "per_embryo_with_flow_entry": embryo as f64 + per_flow,
            "embryos_memory_bytes_default": embryos.memory_bytes(),
            "embryos_default": cfg.embryos,
            "flow_entry_bytes": std::mem::size_of::<Flow>(),
            "per_spliced_flow": per_flow,
            "per_flow_by_capacity": by_cap,
            "goal_per_spliced_flow": "<= 128",
            "note": "a spliced flow is an ordinary flow entry (the splice state is inside it); the embryo slot and buffer are returned at the splice",
        }),
    );
}

// ---------------------------------------------------------------------------------------

/// TSC cycles per core cycle right now: a chain of dependent one-cycle operations
/// (shift, xor) timed on the TSC, the best of five. The core's clock moves under the
/// constant-rate TSC (turbo, power limits, the host), and every cycle figure moves with
/// it: below 1.0 the core runs faster than the TSC. It does not see what slows the
/// stage without slowing a dependent chain: a busy sibling hyperthread, another tenant
/// in the shared cache or memory.
fn clock_factor() -> f64 {
    const ITERS: u64 = 2_000_000;
    let mut best = u64::MAX;
    for _ in 0..5 {
        let mut x = std::hint::black_box(0x9e37_79b9_7f4a_7c15u64);
        let t0 = tsc();
        for _ in 0..ITERS {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        let t = tsc().wrapping_sub(t0);
        std::hint::black_box(x);
        best = best.min(t);
    }
    best as f64 / (6 * ITERS) as f64
}

fn main() {
    let o = opts();
    TSC_ONLY.store(o.tsc_only, Ordering::Relaxed);
    // The whole benchmark runs on the forwarding core: driver and stage alternate.
    if !core_affinity::set_for_current(core_affinity::CoreId { id: FWD_CORE }) {
        eprintln!("bench_splice: could not pin to core {FWD_CORE}");
    }
    let mut report = Report::new(
        "bench_splice",
        json!({"bench": "splice", "tsc_hz": tsc_hz(), "core": FWD_CORE}),
        o.out.clone(),
    );
    // Sanity: the hellos parse with their names.
    for (_, _, sni) in SNI_SERVICES {
        let h = client_hello(sni, 0);
        let ok = matches!(tls::parse(&h), tls::Outcome::Hello(x)
            if x.routing_name().map(|n| n.as_str().to_string()).as_deref() == Some(sni));
        if !ok {
            report.set(
                "config_error",
                json!(format!("ClientHello for {sni} does not parse")),
            );
        }
    }
    let clock_start = clock_factor();
    fig_bytes(&mut report);
    fig_new_connections(&o, &mut report);
    let clock_middle = clock_factor();
    fig_forwarding(&o, &mut report);
    let clock_end = clock_factor();
    report.set(
        "clock",
        json!({
            "tsc_cycles_per_core_cycle": {
                "start": clock_start,
                "after_new_connections": clock_middle,
                "end": clock_end,
            },
            "note": "a chain of dependent one-cycle operations timed on the TSC (best of five): the core clock against the TSC's rate (below 1.0: faster); cycle figures are TSC cycles and move with it. Blind to a busy sibling hyperthread or another tenant in the shared cache, which move the figures too; the spliced/plain ratios are measured side by side and are not affected",
        }),
    );
    report.finish();
}
