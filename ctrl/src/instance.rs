//! What a running instance is, as the admin thread and the control thread share it:
//! its ports, its workers' counters, the neighbour cache, the reload state, and the
//! channel to ask the control thread for a reload. [`CounterSample`] is its counters at
//! one moment (what `sluice ctl stats` and the once-per-second line show), per-rule HTTP
//! counters included ([`Running::rule_rows`]).

use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;

use serde_json::{json, Map, Value};
use sluice_dataplane::pipeline::NeighbourCache;
use sluice_dataplane::port::{self, LinkState, PortStats};
use sluice_dataplane::stats::{
    Counters, DropReason, Event, PortCounters, RuleCounters, SharedCounters,
};

use crate::reload::{ReloadOutcome, ReloadStatus};
use crate::rule_counters::RuleRow;

/// A request from the admin thread to the control thread.
#[derive(Debug)]
pub enum ControlRequest {
    /// Reload now and send the outcome back.
    Reload(mpsc::Sender<ReloadOutcome>),
}

/// What the admin API and the summary read.
pub struct Running {
    /// Ports by name.
    pub ports: Vec<(String, Arc<dyn port::Port>)>,
    /// Workers: (id, core, counters they publish).
    pub workers: Vec<(usize, usize, Arc<SharedCounters>)>,
    /// Every worker's HTTP rule counters (in the order of `workers`).
    pub rule_counters: Vec<Arc<RuleCounters>>,
    /// The neighbour cache every worker shares.
    pub neighbours: Arc<NeighbourCache>,
    /// When the workers started.
    pub started: Instant,
    /// Whether the embedded default Appliance runs.
    pub is_default: bool,
    /// Requests to the control thread (`sluice ctl reload`).
    pub control: Mutex<mpsc::Sender<ControlRequest>>,
    /// Reload state, refreshed by the control thread.
    pub reload: Mutex<ReloadStatus>,
    /// Admin connections refused (peer not root, the owner, or in the admin group).
    pub admin_refused: std::sync::atomic::AtomicU64,
}

impl Running {
    /// The counters now.
    pub fn sample(&self) -> CounterSample {
        CounterSample::take(self)
    }

    /// Every HTTP rule of the serving generation with its requests and responses by
    /// status class, summed over the workers (by rule name; then the overflow row, if
    /// anything counted there): what `sluice ctl stats` shows under `http_rules`.
    pub fn rule_rows(&self) -> Vec<RuleRow> {
        let slots = self
            .reload
            .lock()
            .map(|s| s.rules.clone())
            .unwrap_or_default();
        slots.rows(&self.rule_counters)
    }

    /// A copy of the reload state (empty if the lock was poisoned by a panic elsewhere).
    pub fn reload_status(&self) -> ReloadStatus {
        self.reload.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

/// One port in a [`CounterSample`].
#[derive(Debug, Clone)]
pub struct PortSample {
    /// Name.
    pub name: String,
    /// sluice's MAC.
    pub mac: String,
    /// Link state.
    pub link: LinkState,
    /// Device counters.
    pub device: PortStats,
    /// What the workers moved through it (sum over workers).
    pub moved: PortCounters,
}

/// Counters of a running instance at one moment.
#[derive(Debug, Clone)]
pub struct CounterSample {
    /// Seconds since start.
    pub uptime_s: f64,
    /// The tables generation serving.
    pub generation: u64,
    /// Ports.
    pub ports: Vec<PortSample>,
    /// Workers: (id, core, counters).
    pub workers: Vec<(usize, usize, Counters)>,
    /// Sum over workers.
    pub total: Counters,
    /// Per HTTP rule, summed over workers ([`Running::rule_rows`]).
    pub rules: Vec<RuleRow>,
}

impl CounterSample {
    /// Reads every worker's counters and every port's device counters now.
    pub fn take(r: &Running) -> CounterSample {
        let workers: Vec<(usize, usize, Counters)> = r
            .workers
            .iter()
            .map(|(id, core, s)| (*id, *core, s.snapshot()))
            .collect();
        let mut total = Counters::new(r.ports.len());
        for (_, _, c) in &workers {
            total.add(c);
        }
        let ports = r
            .ports
            .iter()
            .enumerate()
            .map(|(i, (name, p))| PortSample {
                name: name.clone(),
                mac: p.mac().to_string(),
                link: p.link(),
                device: p.stats(),
                moved: total.ports.get(i).copied().unwrap_or_default(),
            })
            .collect();
        CounterSample {
            uptime_s: r.started.elapsed().as_secs_f64(),
            generation: r.reload_status().generation,
            ports,
            workers,
            total,
            rules: r.rule_rows(),
        }
    }

    /// The JSON document `sluice ctl stats` prints.
    pub fn to_json(&self) -> Value {
        let drops = |c: &Counters| {
            let mut m = Map::new();
            for r in DropReason::ALL {
                let n = c.drops_of(*r);
                if n > 0 {
                    m.insert(r.name().to_string(), json!(n));
                }
            }
            Value::Object(m)
        };
        let events = |c: &Counters| {
            let mut m = Map::new();
            for e in Event::ALL {
                m.insert(e.name().to_string(), json!(c.events_of(*e)));
            }
            Value::Object(m)
        };
        let moved = |p: &PortCounters| {
            json!({"rx_packets": p.rx_packets, "rx_bytes": p.rx_bytes,
                   "tx_packets": p.tx_packets, "tx_bytes": p.tx_bytes})
        };
        json!({
            "uptime_s": self.uptime_s,
            "generation": self.generation,
            "ports": self.ports.iter().map(|p| json!({
                "name": p.name,
                "mac": p.mac,
                "link": match p.link { LinkState::Up { speed_mbps } => json!({"up": true, "speed_mbps": speed_mbps}), LinkState::Down => json!({"up": false}) },
                "device": {
                    "rx_packets": p.device.rx_packets, "rx_bytes": p.device.rx_bytes,
                    "tx_packets": p.device.tx_packets, "tx_bytes": p.device.tx_bytes,
                    "rx_missed": p.device.rx_missed, "rx_errors": p.device.rx_errors,
                    "tx_errors": p.device.tx_errors,
                },
                "workers": moved(&p.moved),
            })).collect::<Vec<_>>(),
            "workers": self.workers.iter().map(|(id, core, c)| json!({
                "id": id,
                "core": core,
                "ports": c.ports.iter().map(moved).collect::<Vec<_>>(),
                "flows": c.flows,
                "terminated": c.terminated,
                "events": events(c),
                "drops": drops(c),
                "empty_polls": c.empty_polls,
                "busy_polls": c.busy_polls,
                "packets": c.packets,
                "cycles_per_packet": c.cycles_per_packet(),
            })).collect::<Vec<_>>(),
            "total": {
                "flows": self.total.flows,
                "terminated": self.total.terminated,
                "events": events(&self.total),
                "drops": drops(&self.total),
                "drops_total": self.total.total_drops(),
                "packets": self.total.packets,
                "cycles_per_packet": self.total.cycles_per_packet(),
            },
            "http_rules": self.rules.iter().map(RuleRow::to_json).collect::<Vec<_>>(),
        })
    }

    /// The once-per-second line: per port rx/tx pps and bit rate since `prev`, and drops.
    pub fn summary_line(&self, prev: &CounterSample, dt: f64) -> String {
        let dt = dt.max(1e-3);
        let mut parts = Vec::new();
        for (i, p) in self.ports.iter().enumerate() {
            let q = prev.ports.get(i).map(|q| q.moved).unwrap_or_default();
            let rate = |a: u64, b: u64| a.saturating_sub(b) as f64 / dt;
            parts.push(format!(
                "{}: rx {:.0} pps {} tx {:.0} pps {}",
                p.name,
                rate(p.moved.rx_packets, q.rx_packets),
                bits(rate(p.moved.rx_bytes, q.rx_bytes) * 8.0),
                rate(p.moved.tx_packets, q.tx_packets),
                bits(rate(p.moved.tx_bytes, q.tx_bytes) * 8.0),
            ));
        }
        let d = self
            .total
            .total_drops()
            .saturating_sub(prev.total.total_drops());
        let created = self
            .total
            .events_of(Event::FlowCreated)
            .saturating_sub(prev.total.events_of(Event::FlowCreated));
        format!(
            "{} | flows {} (+{:.0}/s) | drops {:.0}/s{}",
            parts.join(" | "),
            self.total.flows,
            created as f64 / dt,
            d as f64 / dt,
            top_drops(&self.total)
        )
    }

    /// Totals since start, for the last line.
    pub fn totals_line(&self) -> String {
        let parts: Vec<String> = self
            .ports
            .iter()
            .map(|p| {
                format!(
                    "{}: rx {} tx {}",
                    p.name, p.moved.rx_packets, p.moved.tx_packets
                )
            })
            .collect();
        format!(
            "{} | flows created {} | drops {}{}",
            parts.join(" | "),
            self.total.events_of(Event::FlowCreated),
            self.total.total_drops(),
            top_drops(&self.total)
        )
    }
}

fn top_drops(c: &Counters) -> String {
    let mut v: Vec<(u64, &str)> = DropReason::ALL
        .iter()
        .map(|r| (c.drops_of(*r), r.name()))
        .filter(|(n, _)| *n > 0)
        .collect();
    if v.is_empty() {
        return String::new();
    }
    v.sort_by_key(|e| std::cmp::Reverse(e.0));
    let s: Vec<String> = v.iter().take(4).map(|(n, r)| format!("{r} {n}")).collect();
    format!(" (total: {})", s.join(", "))
}

fn bits(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.2} Gbit/s", bps / 1e9)
    } else if bps >= 1e6 {
        format!("{:.2} Mbit/s", bps / 1e6)
    } else if bps >= 1e3 {
        format!("{:.1} kbit/s", bps / 1e3)
    } else {
        format!("{bps:.0} bit/s")
    }
}

/// The JSON document `sluice ctl status` prints.
pub fn status_json(r: &Running) -> Value {
    let st: ReloadStatus = r.reload_status();
    let workers: Vec<(usize, usize, Counters)> = r
        .workers
        .iter()
        .map(|(id, core, s)| (*id, *core, s.snapshot()))
        .collect();
    json!({
        "generation": st.generation,
        "config": st.paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        "embedded_default": r.is_default,
        "last_reload": st.last.as_ref().map(ReloadOutcome::to_json),
        "reloads": {"ok": st.succeeded, "failed": st.failed},
        "not_served": st.not_served,
        "objects": st.objects,
        "pending_snapshots": st.pending,
        "workers": workers.iter().map(|(id, core, c)| json!({
            "id": id, "core": core, "flows": c.flows,
        })).collect::<Vec<_>>(),
        "flows": workers.iter().map(|(_, _, c)| c.flows).sum::<u64>(),
        "uptime_s": r.started.elapsed().as_secs_f64(),
        "admin": {"refused": r.admin_refused.load(std::sync::atomic::Ordering::Relaxed)},
        "addresses": st.addresses,
    })
}
