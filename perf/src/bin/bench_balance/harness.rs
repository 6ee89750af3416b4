//! The worker running the balancer (or macswap) with its forwarder, over a replay or the
//! real vdevs, warmed up, and one measured run of it.

use crate::frames::{client, frames};
use crate::replay::{Backends, Replay, Sink, Source, SourceKind};
use crate::world::{
    backend_ip, build, BACKENDS, BACKEND_MAC, CLIENT_MAC, INSIDE_MAC, SLUICE_MAC, VIP,
};
use serde_json::Value;
use sluice_ctrl::compile::ir::Ir;
use sluice_dataplane::balancer::{Balancer, BalancerConfig};
use sluice_dataplane::flow::Timeouts;
use sluice_dataplane::pipeline::{Forwarder, ForwarderConfig, IfAddr, NeighbourCache, PortConf};
use sluice_dataplane::port::{dpdk, Pool, Queue};
use sluice_dataplane::rcu::Publisher;
use sluice_dataplane::stats::{Counters, Event, SharedCounters};
use sluice_dataplane::tables::snapshot::Snapshot;
use sluice_dataplane::wire::{tcp, MacAddr};
use sluice_dataplane::worker::{Idle, Worker, WorkerConfig};
use sluice_perf::report::drops_json;
use sluice_perf::{measure_worker, MacSwap, Run, FWD_CORE};
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) fn forwarder(inside_mac: MacAddr) -> Result<Forwarder, String> {
    let addr = |a: &str, len: u8| {
        vec![IfAddr {
            addr: a.parse().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            prefix_len: len,
        }]
    };
    let conf = ForwarderConfig::with_virtual(
        vec![
            PortConf {
                name: "outside".into(),
                mac: SLUICE_MAC,
                addrs: addr("10.77.0.2", 16),
            },
            PortConf {
                name: "inside".into(),
                mac: inside_mac,
                addrs: addr("10.78.0.2", 16),
            },
        ],
        &[],
        vec![IpAddr::V4(VIP)],
    )
    .map_err(|e| e.to_string())?;
    let neigh = Arc::new(NeighbourCache::new(16 * BACKENDS));
    for i in 0..BACKENDS {
        neigh.learn(IpAddr::V4(backend_ip(i)), BACKEND_MAC, 0);
    }
    // The clients' addresses (50,000 flows each), for replies in both directions.
    for i in (0..=1_000_000).step_by(50_000) {
        neigh.learn(IpAddr::V4(client(i).0), CLIENT_MAC, 0);
    }
    Ok(Forwarder::new(Arc::new(conf), neigh))
}

/// A running worker and what the control thread needs of it.
pub(crate) struct Running {
    pub(crate) shared: Arc<SharedCounters>,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) handle: std::thread::JoinHandle<Counters>,
}

impl Running {
    pub(crate) fn finish(self) -> Result<Counters, String> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .join()
            .map_err(|_| "worker panicked".to_string())
    }
}

pub(crate) fn start<S: sluice_dataplane::pipeline::Stage + 'static>(
    queues: Vec<Box<dyn Queue>>,
    stage: S,
) -> Result<Running, String> {
    let w = Worker::new(
        WorkerConfig {
            id: 0,
            core: Some(FWD_CORE),
            idle: Idle::Spin,
        },
        queues,
        stage,
    );
    let shared = w.shared_counters();
    let stop = Arc::new(AtomicBool::new(false));
    let handle = sluice_dataplane::worker::spawn(w, stop.clone()).map_err(|e| e.to_string())?;
    Ok(Running {
        shared,
        stop,
        handle,
    })
}

pub(crate) fn balancer(
    fwd: Forwarder,
    publisher: &Publisher<Snapshot>,
    capacity: usize,
    timeouts: Timeouts,
) -> Result<Balancer, String> {
    Ok(Balancer::new(
        fwd,
        publisher.reader().ok_or("no reader slot")?,
        BalancerConfig {
            flow_capacity: capacity,
            timeouts,
            // One load generator is one source: no per-source budget.
            new_flows_per_second_per_source: 0,
            ..BalancerConfig::default()
        },
    ))
}

/// Waits until the replay's warm-up has been played and the worker has published
/// `flows` created flows (at most `limit`).
pub(crate) fn wait_warm(
    r: &Running,
    done: &AtomicBool,
    flows: u64,
    limit: Duration,
) -> Result<(), String> {
    let t = Instant::now();
    loop {
        let c = r.shared.snapshot();
        if done.load(Ordering::Acquire) && c.events_of(Event::FlowCreated) >= flows {
            return Ok(());
        }
        if t.elapsed() > limit {
            return Err(format!(
                "warm-up: {} of {flows} flows after {:?} (drops: {})",
                c.events_of(Event::FlowCreated),
                limit,
                drops_json(&c)
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The flow table's capacity with `n` established flows: the default (1M flows per
/// worker, what a deployment runs unless it sets `flowsPerWorker`), or `n` if more.
pub(crate) fn established_capacity(n: usize) -> usize {
    BalancerConfig::default().flow_capacity.max(n)
}

/// A flow table only as big as `n` flows (at least 1024): full.
pub(crate) fn full_capacity(n: usize) -> usize {
    n.max(1024)
}

/// A worker running the balancer over the replay of `n` flows (SYNs first, then shuffled
/// ACKs), warmed up; `snap` is its first snapshot.
pub(crate) fn established(
    n: usize,
    snap: Snapshot,
    kind: SourceKind,
    both: bool,
    capacity: usize,
) -> Result<(Running, Publisher<Snapshot>), String> {
    let warm = Arc::new(frames(0..n, tcp::flags::SYN));
    let acks = Arc::new(Source::acks(n, kind));
    let publisher = Publisher::new(snap, 1);
    let stage = balancer(
        forwarder(INSIDE_MAC)?,
        &publisher,
        capacity,
        Timeouts::default(),
    )?;
    let done = Arc::new(AtomicBool::new(false));
    let pool = Pool::new(4096);
    let replay = Replay {
        pool: pool.clone(),
        warmup: Some(warm),
        frames: acks,
        pos: 0,
        warm_done: done.clone(),
    };
    let backends: Box<dyn Queue> = if both {
        Box::new(Backends::new(n, pool))
    } else {
        Box::new(Sink)
    };
    let r = start(vec![Box::new(replay), backends], stage)?;
    if let Err(e) = wait_warm(&r, &done, n as u64, Duration::from_secs(60)) {
        let _ = r.finish();
        return Err(e);
    }
    Ok((r, publisher))
}

pub(crate) fn established_run(
    n: usize,
    ir: &Ir,
    secs: f64,
    kind: SourceKind,
    both: bool,
    capacity: usize,
) -> Result<(Run, Value), String> {
    let (r, _publisher) = established(n, build(ir)?, kind, both, capacity)?;
    let run = measure_worker(&r.shared, 0, Duration::from_millis(200), secs);
    let c = r.finish()?;
    Ok((run, drops_json(&c)))
}

/// Sluice's macswap stage on the replay of `n` flows' ACKs: the harness's own cost.
pub(crate) fn macswap_replay_run(n: usize, secs: f64, kind: SourceKind) -> Result<Run, String> {
    let acks = Arc::new(Source::acks(n, kind));
    let replay = Replay {
        pool: Pool::new(4096),
        warmup: None,
        frames: acks,
        pos: 0,
        warm_done: Arc::new(AtomicBool::new(true)),
    };
    let r = start(vec![Box::new(replay), Box::new(Sink)], MacSwap)?;
    let run = measure_worker(&r.shared, 0, Duration::from_millis(200), secs);
    r.finish()?;
    Ok(run)
}

pub(crate) fn vdevs(capture: &Path) -> [String; 2] {
    [
        format!("net_pcap0,rx_pcap={},infinite_rx=1", capture.display()),
        "net_null0,no-rx=1".to_string(),
    ]
}

/// The balancer on the real vdevs: the capture's first 1k frames are the SYNs (flows are
/// created on the first pass; later passes are flow hits).
pub(crate) fn vdev_run(capture: &Path, ir: &Ir, secs: f64) -> Result<(Run, Value), String> {
    let [v0, v1] = vdevs(capture);
    let a = dpdk::open("outside", &v0, 1).map_err(|e| e.to_string())?;
    let b = dpdk::open("inside", &v1, 1).map_err(|e| e.to_string())?;
    let publisher = Publisher::new(build(ir)?, 1);
    let stage = balancer(
        forwarder(b.port.mac())?,
        &publisher,
        4096,
        Timeouts::default(),
    )?;
    let mut queues = Vec::new();
    queues.extend(a.queues);
    queues.extend(b.queues);
    let r = start(queues, stage)?;
    let run = measure_worker(&r.shared, 0, Duration::from_millis(300), secs);
    let c = r.finish()?;
    drop((a.port, b.port));
    Ok((run, drops_json(&c)))
}
