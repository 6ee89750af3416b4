//! Figure 2: new connections per second per core.

use crate::frames::{frames, shuffled};
use crate::harness::{balancer, forwarder, start};
use crate::opts::Opts;
use crate::replay::{Replay, Sink, Source};
use crate::world::{build, INSIDE_MAC, NEW_CONN_FRAMES};
use serde_json::json;
use sluice_ctrl::compile::ir::Ir;
use sluice_dataplane::flow::Timeouts;
use sluice_dataplane::port::Pool;
use sluice_dataplane::rcu::Publisher;
use sluice_dataplane::stats::Event;
use sluice_dataplane::wire::tcp;
use sluice_perf::report::{drops_json, Report};
use sluice_perf::stats::median;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) fn fig_new_connections(o: &Opts, ir: &Ir, report: &mut Report) {
    let syns = Arc::new(Source::Capture(frames(
        shuffled(NEW_CONN_FRAMES).into_iter(),
        tcp::flags::SYN,
    )));
    let (mut rates, mut cpu_rates, mut cycles, mut errors) = (vec![], vec![], vec![], vec![]);
    let mut last = json!({});
    for _ in 0..o.runs {
        let res = (|| -> Result<(), String> {
            let publisher = Publisher::new(build(ir)?, 1);
            let timeouts = Timeouts {
                tcp_syn_sent: 1,
                ..Timeouts::default()
            };
            let stage = balancer(forwarder(INSIDE_MAC)?, &publisher, 1 << 22, timeouts)?;
            let replay = Replay {
                pool: Pool::new(4096),
                warmup: None,
                frames: syns.clone(),
                pos: 0,
                warm_done: Arc::new(AtomicBool::new(true)),
            };
            let r = start(vec![Box::new(replay), Box::new(Sink)], stage)?;
            std::thread::sleep(Duration::from_millis(300));
            let (c0, cpu0, t0) = (
                r.shared.snapshot(),
                sluice_perf::thread_cpu_ns("self", "sluice-w0"),
                Instant::now(),
            );
            std::thread::sleep(Duration::from_secs_f64(o.duration));
            let (c1, cpu1, wall) = (
                r.shared.snapshot(),
                sluice_perf::thread_cpu_ns("self", "sluice-w0"),
                t0.elapsed().as_secs_f64(),
            );
            let created =
                (c1.events_of(Event::FlowCreated) - c0.events_of(Event::FlowCreated)) as f64;
            let cpu_s = cpu0
                .zip(cpu1)
                .map_or(wall, |(a, b)| b.saturating_sub(a) as f64 / 1e9)
                .max(1e-9);
            rates.push(created / wall);
            cpu_rates.push(created / cpu_s);
            cycles.push(cpu_s * sluice_dataplane::mem::tsc_hz() as f64 / created.max(1.0));
            let c = r.finish()?;
            last = json!({
                "flows_created": c.events_of(Event::FlowCreated),
                "flows_expired": c.events_of(Event::FlowExpired),
                "flows_live_at_end": c.flows,
                "rx": c.ports[0].rx_packets,
                "tx": c.ports[1].tx_packets,
                "drops": drops_json(&c),
            });
            Ok(())
        })();
        if let Err(e) = res {
            errors.push(e);
        }
    }
    let rate = median(&rates);
    report.set(
        "new_connections",
        json!({
            "setup": {
                "traffic": "SYNs (60 bytes) from 2M distinct client 5-tuples, shuffled, replayed; SYN_SENT timeout 1 s so the timer wheel recycles flows; 256 backends (SNAT ports per backend), flow capacity 4M",
                "counted": "flow_created events in the window",
                "duration_s": o.duration,
                "runs": o.runs,
            },
            "per_second_per_core": rate,
            "per_cpu_second": median(&cpu_rates),
            "cycles_per_connection": median(&cycles),
            "runs_per_second": rates,
            "goal_per_second": 200_000,
            "ratio_to_goal": rate / 200_000.0,
            "last_run": last,
            "errors": errors,
        }),
    );
}
