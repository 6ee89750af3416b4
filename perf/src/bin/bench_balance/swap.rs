//! Figure 4: compile and build times of 10k routes, and snapshot swaps under traffic.

use crate::harness::{established, established_capacity};
use crate::opts::Opts;
use crate::replay::SourceKind;
use crate::world::{build, compile, manifests};
use serde_json::json;
use sluice_ctrl::compile::ir::Ir;
use sluice_dataplane::rcu::Publisher;
use sluice_dataplane::stats::Event;
use sluice_dataplane::tables::snapshot::Snapshot;
use sluice_perf::report::{drops_json, Report};
use sluice_perf::stats::{median, Latencies};
use sluice_perf::FWD_CORE;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

/// The base IR with `extra` more TCP listeners (ports 20000 on, on 10.77.0.11) and a
/// route each, copies of the benchmark's own listener and route.
pub(crate) fn replicate(base: &Ir, extra: usize) -> Ir {
    let mut ir = base.clone();
    let (Some(l0), Some(r0)) = (base.listeners.first(), base.routes.first()) else {
        return ir;
    };
    for i in 0..extra {
        let mut r = r0.clone();
        r.name = format!("TCPRoute b/r{i}");
        let idx = ir.routes.len();
        ir.routes.push(r);
        let mut l = l0.clone();
        l.name = format!("Gateway b/many/l{i}");
        l.addresses = vec![IpAddr::V4(Ipv4Addr::new(10, 77, 0, 11))];
        l.port = 20_000 + i as u16;
        for b in &mut l.bindings {
            b.route = idx;
        }
        ir.listeners.push(l);
    }
    ir
}

/// Publishes `snap` under traffic and times it: (publish µs, until the worker moved µs,
/// reclaim µs, whether the worker moved within 1 s).
pub(crate) fn swap_once(
    publisher: &mut Publisher<Snapshot>,
    snap: Snapshot,
) -> (f64, f64, f64, bool) {
    let t = Instant::now();
    let generation = publisher.publish(snap);
    let publish = t.elapsed().as_secs_f64() * 1e6;
    let t = Instant::now();
    let mut moved = true;
    while publisher.oldest_in_use() < generation {
        if t.elapsed() > Duration::from_secs(1) {
            moved = false;
            break;
        }
        std::hint::spin_loop();
    }
    let wait = t.elapsed().as_secs_f64() * 1e6;
    let t = Instant::now();
    publisher.reclaim();
    (publish, wait, t.elapsed().as_secs_f64() * 1e6, moved)
}

pub(crate) fn fig_swap(o: &Opts, base: &Ir, report: &mut Report) {
    const ROUTES: usize = 10_000;
    const COMPILE_ROUTES: [usize; 3] = [1_000, 5_000, 10_000];
    let mut errors = vec![];
    // Manifests -> IR at 1k, 5k and 10k extra routes, and how the time grows per route
    // (1.0: linear).
    let mut compile_s = vec![];
    for n in COMPILE_ROUTES {
        let text = manifests(n, o.swap_maglev);
        let t = Instant::now();
        match compile(&text) {
            Ok(_) => compile_s.push(t.elapsed().as_secs_f64()),
            Err(e) => {
                errors.push(format!("compile {n}: {e}"));
                compile_s.push(0.0);
            }
        }
    }
    let per_route = |i: usize| compile_s[i] / COMPILE_ROUTES[i] as f64;
    let growth = |i: usize| {
        if per_route(0) > 0.0 {
            per_route(i) / per_route(0)
        } else {
            0.0
        }
    };
    let mut big_base = base.clone();
    if let Some(a) = big_base.appliance.as_mut() {
        a.maglev_table_size = Some(o.swap_maglev);
    }
    for r in &mut big_base.routes {
        r.maglev_table_size = o.swap_maglev;
    }
    let big = replicate(&big_base, ROUTES);
    // Snapshots of the 10k-route config, built before the traffic starts.
    let (mut build_s, mut big_snaps) = (vec![], vec![]);
    for _ in 0..o.runs.min(3) {
        let t = Instant::now();
        match build(&big) {
            Ok(s) => {
                build_s.push(t.elapsed().as_secs_f64());
                big_snaps.push(s);
            }
            Err(e) => {
                errors.push(format!("build: {e}"));
                break;
            }
        }
    }
    let flows = 100_000;
    let (mut big_swaps, mut base_build_ms) = (vec![], vec![]);
    // Swap timings in ns.
    let (mut publish, mut until_moved, mut reclaim) =
        (Latencies::new(), Latencies::new(), Latencies::new());
    let mut traffic = json!({});
    let res = (|| -> Result<(), String> {
        let cap = established_capacity(flows);
        let (r, mut publisher) = established(flows, build(base)?, SourceKind::Capture, false, cap)?;
        std::thread::sleep(Duration::from_millis(200));
        let mut stuck = 0;
        // The 10k-route snapshots, one at a time.
        for s in big_snaps.drain(..) {
            let (p, w, c, moved) = swap_once(&mut publisher, s);
            stuck += u32::from(!moved);
            big_swaps.push(json!({"publish_us": p, "until_worker_moved_us": w, "reclaim_us": c}));
            std::thread::sleep(Duration::from_millis(100));
        }
        // Then a freshly built snapshot every interval at full rate.
        let c0 = r.shared.snapshot();
        let t0 = Instant::now();
        while t0.elapsed().as_secs_f64() < o.duration * 2.0 {
            let next = Instant::now() + Duration::from_millis(o.swap_interval_ms);
            let t = Instant::now();
            let snap = build(base)?;
            base_build_ms.push(t.elapsed().as_secs_f64() * 1e3);
            let (p, w, c, moved) = swap_once(&mut publisher, snap);
            stuck += u32::from(!moved);
            publish.record((p * 1e3) as u64);
            until_moved.record((w * 1e3) as u64);
            reclaim.record((c * 1e3) as u64);
            if let Some(d) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(d);
            }
        }
        let wall = t0.elapsed().as_secs_f64();
        let c1 = r.shared.snapshot();
        let c = r.finish()?;
        let rx: u64 = c.ports.iter().map(|p| p.rx_packets).sum();
        let tx: u64 = c.ports.iter().map(|p| p.tx_packets).sum();
        let dropped = c.total_drops();
        let window_tx = c1.ports[1].tx_packets - c0.ports[1].tx_packets;
        traffic = json!({
            "swaps": publish.len() as usize + big_swaps.len(),
            "worker_did_not_move_within_1s": stuck,
            "rx": rx,
            "tx": tx,
            "drops": drops_json(&c),
            "unaccounted": rx.saturating_sub(tx + dropped),
            "lost": rx.saturating_sub(tx + dropped) + dropped,
            "policy_rechecks": c.events_of(Event::PolicyRechecked),
            "mpps_while_swapping": window_tx as f64 / wall / 1e6,
        });
        Ok(())
    })();
    if let Err(e) = res {
        errors.push(e);
    }
    let us = |l: &Latencies, q: f64| l.quantile(q) as f64 / 1e3;
    report.set(
        "swap",
        json!({
            "setup": {
                "config_10k": format!("{ROUTES} extra TCP listeners with a route each to the 256-pod Service (IR replicated from the compiled manifests), Maglev tables of {} slots", o.swap_maglev),
                "compile": format!("manifests -> IR with {COMPILE_ROUTES:?} extra listeners and TCPRoutes (one Gateway, a sectionName per route); growth: time per route relative to 1k (1.0 = linear)"),
                "traffic": format!("{flows} established flows replayed at full rate on core {FWD_CORE}; first the 10k-route snapshots are published, then a freshly built base snapshot every {} ms for {} s, on core 0", o.swap_interval_ms, o.duration * 2.0),
                "lost": "rx - tx - drops, plus every drop (none is expected)",
            },
            "compile_1k_routes_s": compile_s[0],
            "compile_5k_routes_s": compile_s[1],
            "compile_10k_routes_s": compile_s[2],
            "compile_growth_per_route": {"5k_vs_1k": growth(1), "10k_vs_1k": growth(2)},
            "build_10k_routes_s": median(&build_s),
            "runs_build_10k_routes_s": build_s,
            "swaps_10k": big_swaps,
            "base_build_ms": median(&base_build_ms),
            "publish_us": {"median": us(&publish, 0.5), "max": us(&publish, 1.0)},
            "until_worker_moved_us": {"median": us(&until_moved, 0.5), "p99": us(&until_moved, 0.99), "max": us(&until_moved, 1.0)},
            "reclaim_us": {"median": us(&reclaim, 0.5), "max": us(&reclaim, 1.0)},
            "traffic": traffic,
            "goal": "0 packets lost",
            "errors": errors,
        }),
    );
}
