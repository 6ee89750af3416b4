//! sluice as an in-process contender: `Worker<Balancer>` on a TAP lane, serving a
//! compiled configuration, the way `sluice run` runs it on TAP ports. Shared by the
//! benchmarks that put sluice beside HAProxy and nginx (`bench_sni_peers`,
//! `bench_tls_peers`, `bench_tls_memory`): each compiles its own manifests, this starts
//! the worker.

use super::net::{self, TapLane};
use super::{CpuSample, InProcessRun};
use serde_json::json;
use sluice_dataplane::balancer::{Balancer, BalancerConfig};
use sluice_dataplane::pipeline::{Forwarder, ForwarderConfig, IfAddr, NeighbourCache, PortConf};
use sluice_dataplane::port::{tap, Pool};
use sluice_dataplane::rcu::Publisher;
use sluice_dataplane::splice::SpliceConfig;
use sluice_dataplane::stats::Event;
use sluice_dataplane::tables::snapshot::Snapshot;
use sluice_dataplane::terminate::TerminateConfig;
use sluice_dataplane::worker::{self, Idle, Worker, WorkerConfig};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How [`start`]'s worker is charged for CPU time (for the report).
pub fn cpu_method(spin: bool) -> &'static str {
    if spin {
        "worker busy-polls (Idle::Spin): TSC cycles of its busy poll rounds (counter busy_cycles) / TSC Hz, wall-clock (includes preemption); its thread CPU time (cpu_s_os) is about the wall time"
    } else {
        "worker thread CPU time (schedstat), idle policy of `sluice run` on TAP ports (Idle::Sleep after 256 empty rounds, up to 500 us); busy-cycle seconds in cpu_s_busy_cycles"
    }
}

/// Starts sluice's balancer serving `snapshot` on the lane: TAP port `outside`
/// ([`net::LANE_OUTSIDE`], virtual address [`net::LANE_VIP`]) and `inside` (the lane's
/// source NAT address), one worker (thread `sluice-w0`) pinned to the proxy core polling
/// both (`spin`: without ever sleeping, else sleeping when idle as `sluice run` does on
/// TAP ports).
pub fn start(lane: &TapLane, snapshot: Snapshot, spin: bool) -> Result<InProcessRun, String> {
    let pool = Pool::new(16 * 1024);
    let outside = tap::open("outside", &lane.outside_if, 1, &pool)
        .map_err(|e| format!("TAP {}: {e}", lane.outside_if))?;
    let inside = tap::open("inside", &lane.inside_if, 1, &pool)
        .map_err(|e| format!("TAP {}: {e}", lane.inside_if))?;
    let port = |name: &str, mac, addr| PortConf {
        name: name.into(),
        mac,
        addrs: vec![IfAddr {
            addr: IpAddr::V4(addr),
            prefix_len: net::PREFIX,
        }],
    };
    let conf = ForwarderConfig::with_virtual(
        vec![
            port("outside", outside.port.mac(), net::LANE_OUTSIDE),
            port("inside", inside.port.mac(), lane.inside),
        ],
        &[],
        vec![IpAddr::V4(net::LANE_VIP)],
    )
    .map_err(|e| e.to_string())?;
    let publisher = Publisher::new(snapshot, 1);
    let stage = Balancer::new(
        Forwarder::new(Arc::new(conf), Arc::new(NeighbourCache::new(256))),
        publisher.reader().ok_or("no reader slot")?,
        BalancerConfig {
            flow_capacity: 1 << 20,
            // One load generator is one source: no per-source budgets.
            new_flows_per_second_per_source: 0,
            splice: SpliceConfig {
                embryos_per_source: 0,
                ..SpliceConfig::default()
            },
            // Room for bench_tls_memory's 20k idle connections (the default caps are
            // 16384 connections and 512 MiB per worker); buffers stay the defaults.
            terminate: TerminateConfig {
                max_connections: 32 * 1024,
                memory_bytes: 2 << 30,
                ..TerminateConfig::default()
            },
            ..BalancerConfig::default()
        },
    );
    let ports = vec![outside.port.clone(), inside.port.clone()];
    let mut queues = outside.queues;
    queues.extend(inside.queues);
    let w = Worker::new(
        WorkerConfig {
            id: 0,
            core: Some(super::PROXY_CORE),
            idle: if spin {
                Idle::Spin
            } else {
                // What `sluice run` uses when any port is not DPDK.
                Idle::Sleep {
                    after: 256,
                    max: Duration::from_micros(500),
                }
            },
        },
        queues,
        stage,
    );
    let shared = w.shared_counters();
    let stop = Arc::new(AtomicBool::new(false));
    let handle = worker::spawn(w, stop.clone()).map_err(|e| format!("worker: {e}"))?;
    let tsc_hz = sluice_dataplane::mem::tsc_hz().max(1) as f64;
    let cpu = Box::new(move || {
        let c = shared.snapshot();
        let os = crate::thread_cpu_ns("self", "sluice-w0")
            .ok_or("no thread sluice-w0 (worker gone?)")? as f64
            / 1e9;
        let busy = c.busy_cycles as f64 / tsc_hz;
        Ok(CpuSample {
            charged_s: if spin { busy } else { os },
            os_s: os,
            busy_s: Some(busy),
            softirqd_s: 0.0,
        })
    });
    let stop_fn = Box::new(move || {
        stop.store(true, Ordering::Relaxed);
        let c = handle.join();
        drop(publisher);
        drop(ports);
        let in_use = pool.in_use();
        match c {
            Ok(c) => {
                let drops = crate::report::drops_json(&c);
                json!({
                    "flows_created": c.events_of(Event::FlowCreated),
                    "packets": c.packets,
                    "cycles_per_packet": c.cycles_per_packet(),
                    "busy_polls": c.busy_polls,
                    "empty_polls": c.empty_polls,
                    "drops": drops,
                    "buffers_not_returned": in_use,
                })
            }
            Err(_) => json!({"error": "worker panicked"}),
        }
    });
    Ok(InProcessRun { cpu, stop: stop_fn })
}
