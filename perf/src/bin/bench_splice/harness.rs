//! The balancer under test with its clocks ([`Cycles`]), connections ([`Conn`]),
//! failure counts and payloads.

use crate::packets::client_hello;
use crate::world::{
    client, forwarder, isn, snapshot, PREEMPT_SLACK_US, SERVER_BYTES, SNI_SERVICES, VIP,
};
use rustix::time::{clock_gettime, ClockId};
use serde_json::{json, Value};
use sluice_dataplane::balancer::{Balancer, BalancerConfig};
use sluice_dataplane::flow::Timeouts;
use sluice_dataplane::mem::{tsc, tsc_hz};
use sluice_dataplane::pipeline::{Ctx, Stage, StageIo, Verdict};
use sluice_dataplane::port::{Pkt, Pool, BURST};
use sluice_dataplane::rcu::Publisher;
use sluice_dataplane::splice::SpliceConfig;
use sluice_dataplane::stats::{Counters, DropReason};
use sluice_dataplane::tables::snapshot::Snapshot;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};

/// `--tsc-only`: stage calls are timed on the TSC alone (for a quiet machine; the CPU
/// clock's system calls around each call then go away).
pub(crate) static TSC_ONLY: AtomicBool = AtomicBool::new(false);

/// The thread's CPU time around a stage call (0 under `--tsc-only`).
pub(crate) fn call_clock() -> u64 {
    if TSC_ONLY.load(Ordering::Relaxed) {
        0
    } else {
        cpu_ns()
    }
}

/// The thread's CPU time (ns).
pub(crate) fn cpu_ns() -> u64 {
    let t = clock_gettime(ClockId::ThreadCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Cycles spent in stage calls.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Cycles {
    /// Corrected: TSC, or CPU time for preempted calls.
    pub(crate) cycles: u64,
    /// TSC only.
    pub(crate) raw: u64,
    pub(crate) calls: u64,
    pub(crate) preempted: u64,
}

impl Cycles {
    pub(crate) fn add(&mut self, o: &Cycles) {
        self.cycles += o.cycles;
        self.raw += o.raw;
        self.calls += o.calls;
        self.preempted += o.preempted;
    }
}

pub(crate) struct Harness {
    pub(crate) bal: Balancer,
    pub(crate) _publisher: Publisher<Snapshot>,
    pub(crate) counters: Counters,
    pub(crate) io: StageIo,
    pub(crate) pkts: Vec<Pkt>,
    pub(crate) verdicts: [Verdict; BURST],
    /// Packets the stage sent through [`StageIo`] (none expected).
    pub(crate) extra: u64,
    pub(crate) hz: u64,
    pub(crate) t0: u64,
    pub(crate) per_ms: u64,
    pub(crate) slack: u64,
}

impl Harness {
    pub(crate) fn new(capacity: usize, timeouts: Timeouts) -> Result<Harness, String> {
        let publisher = Publisher::new(snapshot()?, 1);
        let bal = Balancer::new(
            forwarder()?,
            publisher.reader().ok_or("no reader slot")?,
            BalancerConfig {
                flow_capacity: capacity,
                timeouts,
                // One load generator is one source: no per-source budgets.
                new_flows_per_second_per_source: 0,
                splice: SpliceConfig {
                    embryos_per_source: 0,
                    ..SpliceConfig::default()
                },
                ..BalancerConfig::default()
            },
        );
        let pool = Pool::new(4 * BURST + 256);
        let pkts = (0..BURST)
            .map(|_| pool.alloc().ok_or("pool"))
            .collect::<Result<Vec<_>, _>>()?;
        let hz = tsc_hz();
        Ok(Harness {
            bal,
            _publisher: publisher,
            counters: Counters::new(2),
            io: StageIo::new(Some(pool.into())),
            pkts,
            verdicts: [Verdict::Drop(DropReason::NoFlow); BURST],
            extra: 0,
            hz,
            t0: tsc(),
            per_ms: (hz / 1000).max(1),
            slack: hz / 1_000_000 * PREEMPT_SLACK_US,
        })
    }

    pub(crate) fn now_ms(&self) -> u64 {
        tsc().wrapping_sub(self.t0) / self.per_ms
    }

    /// Runs the stage over `pkts[..n]` (received on `port`); the verdicts land in
    /// `verdicts[..n]`.
    pub(crate) fn burst(&mut self, port: usize, n: usize) -> Cycles {
        let now = self.now_ms();
        let Harness {
            bal,
            counters,
            io,
            pkts,
            verdicts,
            ..
        } = self;
        let c = {
            let mut run = || {
                let mut ctx = Ctx::with_io(now, counters, io);
                bal.process_burst(port, &mut pkts[..n], &mut verdicts[..n], &mut ctx);
            };
            let c0 = call_clock();
            let t0 = tsc();
            run();
            let t1 = tsc();
            let c1 = call_clock();
            (t0, t1, c0, c1)
        };
        self.drain_extra();
        self.cycles_of(c)
    }

    pub(crate) fn cycles_of(&self, (t0, t1, c0, c1): (u64, u64, u64, u64)) -> Cycles {
        let raw = t1.wrapping_sub(t0);
        let cpu = (c1.saturating_sub(c0) as u128 * u128::from(self.hz) / 1_000_000_000) as u64;
        let preempted = c1 > 0 && raw > cpu + self.slack;
        Cycles {
            cycles: if preempted { cpu } else { raw },
            raw,
            calls: 1,
            preempted: u64::from(preempted),
        }
    }

    /// The stage's housekeeping (embryo timers, flow expiry), as a worker calls it after
    /// each poll round.
    pub(crate) fn maintain(&mut self) -> Cycles {
        let now = self.now_ms();
        let Harness {
            bal, counters, io, ..
        } = self;
        let c0 = call_clock();
        let t0 = tsc();
        {
            let mut ctx = Ctx::with_io(now, counters, io);
            bal.maintain(&mut ctx);
        }
        let t1 = tsc();
        let c1 = call_clock();
        self.drain_extra();
        self.cycles_of((t0, t1, c0, c1))
    }

    pub(crate) fn drain_extra(&mut self) {
        if !self.io.is_empty() {
            self.extra += self.io.drain().count() as u64;
        }
    }

    /// Counts the verdict's drop (the worker would).
    pub(crate) fn count_drop(&mut self, v: Verdict) {
        if let Verdict::Drop(r) = v {
            self.counters.drop(r);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Connections.

/// A connection as the driver knows it.
#[derive(Clone, Copy)]
pub(crate) struct Conn {
    pub(crate) client: SocketAddrV4,
    /// The client's ISN and sluice's (the cookie, or the backend's for plain flows).
    pub(crate) isn: u32,
    pub(crate) cookie: u32,
    /// Which name / Service.
    pub(crate) sni: usize,
    pub(crate) snat: SocketAddrV4,
    pub(crate) backend: SocketAddrV4,
    pub(crate) backend_isn: u32,
    pub(crate) ok: bool,
}

impl Conn {
    pub(crate) fn new(k: u64, sni: usize) -> Conn {
        Conn {
            client: client(k),
            isn: isn(k, 1),
            cookie: 0,
            sni,
            snat: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
            backend: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
            backend_isn: isn(k, 2),
            ok: true,
        }
    }

    pub(crate) fn vip(&self, port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(VIP, port)
    }
}

/// What the driver saw go wrong, by step and what came out.
#[derive(Default)]
pub(crate) struct Failures {
    pub(crate) by: BTreeMap<String, u64>,
}

impl Failures {
    pub(crate) fn add(&mut self, step: &str, what: &str) {
        *self.by.entry(format!("{step}: {what}")).or_default() += 1;
    }
    pub(crate) fn total(&self) -> u64 {
        self.by.values().sum()
    }
    pub(crate) fn json(&self) -> Value {
        json!(self.by)
    }
}

pub(crate) fn verdict_name(v: Verdict) -> String {
    match v {
        Verdict::Tx(p) => format!("tx({p})"),
        Verdict::Drop(r) => format!("drop {}", r.name()),
        Verdict::Redirect(w) => format!("redirect({w})"),
        Verdict::Kept => "kept".into(),
    }
}

/// The client's and backend's views of the passthrough connection's payload lengths.
pub(crate) struct Payloads {
    pub(crate) hellos: Vec<Vec<u8>>,
    pub(crate) server: Vec<u8>,
}

impl Payloads {
    pub(crate) fn new() -> Payloads {
        Payloads {
            hellos: SNI_SERVICES
                .iter()
                .enumerate()
                .map(|(i, (_, _, sni))| client_hello(sni, i as u8))
                .collect(),
            server: (0..SERVER_BYTES).map(|i| (i * 7 + 3) as u8).collect(),
        }
    }
}
