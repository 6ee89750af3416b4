//! The run plan against this machine: what `sluice check` and `sluice run` (before it
//! starts anything) check beyond the manifest itself. A plan that is fine on paper can
//! still name a core this process may not use, or ask for flow tables larger than the
//! memory available; each is an error at the Appliance field it is about
//! ([`MachineError::field`]), never a panic or an abort at start.
//!
//! - cores: each must be in this process's CPU affinity set (`sched_getaffinity`: it
//!   exists, is online and allowed, e.g. by `taskset` or a cgroup cpuset);
//! - memory: the per-worker tables (flow table, delayed-binding embryos) and the packet
//!   pool, sized as the dataplane sizes them, against `MemAvailable` in `/proc/meminfo`;
//! - ports: a TAP port needs `/dev/net/tun` and at most [`MAX_TAP_QUEUES`] workers; a
//!   pcap port's `rx` must be a readable file.
//!
//! Reloads do not run these checks: what they cover is fixed at start (a reload that
//! changes it is refused), and the running instance already holds its memory.

use std::collections::BTreeSet;
use std::path::PathBuf;

use sluice_dataplane::flow::{FlowTable, Timeouts};
use sluice_dataplane::port::{PortKind, DATA_ROOM, HEADROOM};
use sluice_dataplane::splice::Embryos;

use crate::plan::RunPlan;

/// Queues a Linux TAP device has at most (`MAX_TAP_QUEUES` in the kernel): one per
/// worker.
pub const MAX_TAP_QUEUES: usize = 256;

/// Bytes a pool buffer takes besides `HEADROOM + DATA_ROOM`: its header
/// (`sluice_dataplane::port::Pool::new`).
const POOL_HEADER_BYTES: u64 = 64;

/// What the checks need to know about this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// CPUs this process may run on, or why they could not be read.
    pub cpus: Result<BTreeSet<usize>, String>,
    /// `MemAvailable`, bytes (`None`: unknown, not checked).
    pub mem_available: Option<u64>,
    /// Whether `/dev/net/tun` exists.
    pub tun: bool,
}

impl Machine {
    /// This machine, as seen by this process now.
    pub fn this() -> Machine {
        let cpus = rustix::thread::sched_getaffinity(None)
            .map(|set| {
                (0..rustix::thread::CpuSet::MAX_CPU)
                    .filter(|&c| set.is_set(c))
                    .collect()
            })
            .map_err(|e| format!("sched_getaffinity: {e}"));
        let mem_available = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| mem_available(&m));
        Machine {
            cpus,
            mem_available,
            tun: std::path::Path::new("/dev/net/tun").exists(),
        }
    }
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// What the plan's tables and buffers take, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    /// Workers.
    pub workers: u64,
    /// One worker's flow table.
    pub flows: u64,
    /// One worker's delayed-binding embryos (slots and first-bytes buffers).
    pub embryos: u64,
    /// The packet pool (shared).
    pub pool: u64,
}

impl Footprint {
    /// The plan's footprint, with the per-entry sizes the dataplane reports
    /// (`FlowTable::memory_bytes`, `Embryos::memory_bytes` of small tables).
    pub fn of(plan: &RunPlan) -> Footprint {
        const SAMPLE: usize = 4096;
        let per_flow = FlowTable::new(SAMPLE, Timeouts::default(), 0, 0)
            .memory_bytes()
            .div_ceil(SAMPLE) as u64;
        let per_embryo = Embryos::new(1, plan.splice.buffer_bytes, 1, 0).memory_bytes() as u64;
        let per_buffer = POOL_HEADER_BYTES + (HEADROOM + DATA_ROOM) as u64;
        Footprint {
            workers: plan.cores.len() as u64,
            flows: per_flow.saturating_mul(plan.flow_capacity as u64),
            embryos: per_embryo.saturating_mul(plan.splice.embryos as u64),
            pool: per_buffer.saturating_mul(plan.pool_buffers() as u64),
        }
    }

    /// Everything together.
    pub fn total(&self) -> u64 {
        self.workers
            .saturating_mul(self.flows.saturating_add(self.embryos))
            .saturating_add(self.pool)
    }
}

/// Why a plan cannot run on this machine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MachineError {
    /// A core this process may not run on.
    #[error("core {core} does not exist or is not allowed for this process (allowed: {allowed})")]
    Core {
        /// Position in `spec.cores`.
        index: usize,
        /// The core.
        core: usize,
        /// The allowed CPUs, as a list (`0-3,8`).
        allowed: String,
    },
    /// The affinity set could not be read.
    #[error("cannot check the cores: {0}")]
    Affinity(String),
    /// The tables need more memory than is available.
    #[error(
        "the flow tables and buffers need {} MiB ({} worker(s) x ({} MiB flow table + {} MiB delayed-binding buffers) + {} MiB packet pool), more than the {} MiB available (MemAvailable); lower limits.flowsPerWorker, delayedBinding.embryosPerWorker or the number of cores",
        mib(.need.total()), .need.workers, mib(.need.flows), mib(.need.embryos), mib(.need.pool), mib(*.available)
    )]
    Memory {
        /// What the plan needs.
        need: Footprint,
        /// What is available, bytes.
        available: u64,
    },
    /// A TAP port without `/dev/net/tun`.
    #[error("port {name}: TAP devices need /dev/net/tun, which this machine does not have")]
    NoTun {
        /// Position in `spec.ports`.
        port: usize,
        /// Its name.
        name: String,
    },
    /// More workers than a TAP device has queues.
    #[error("port {name}: a TAP device has at most {MAX_TAP_QUEUES} queues, one per worker; {workers} cores given")]
    TapQueues {
        /// Position in `spec.ports`.
        port: usize,
        /// Its name.
        name: String,
        /// Workers.
        workers: usize,
    },
    /// A pcap port's capture that cannot be read.
    #[error("port {name}: pcap rx {}: {error}", .path.display())]
    PcapRx {
        /// Position in `spec.ports`.
        port: usize,
        /// Its name.
        name: String,
        /// The capture.
        path: PathBuf,
        /// Why.
        error: String,
    },
}

fn mib(b: u64) -> u64 {
    b.div_ceil(1 << 20)
}

impl MachineError {
    /// The Appliance field the error is about (`spec.cores[1]`).
    pub fn field(&self) -> String {
        match self {
            MachineError::Core { index, .. } => format!("spec.cores[{index}]"),
            MachineError::Affinity(_) => "spec.cores".into(),
            MachineError::Memory { .. } => "spec.limits.flowsPerWorker".into(),
            MachineError::NoTun { port, .. } => format!("spec.ports[{port}].tap"),
            MachineError::TapQueues { .. } => "spec.cores".into(),
            MachineError::PcapRx { port, .. } => format!("spec.ports[{port}].pcap.rx"),
        }
    }
}

/// `0-3,8` for {0, 1, 2, 3, 8}.
fn ranges(cpus: &BTreeSet<usize>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut it = cpus.iter().copied().peekable();
    while let Some(first) = it.next() {
        let mut last = first;
        while it.peek() == Some(&(last + 1)) {
            last += 1;
            it.next();
        }
        out.push(if first == last {
            first.to_string()
        } else {
            format!("{first}-{last}")
        });
    }
    if out.is_empty() {
        "none".into()
    } else {
        out.join(",")
    }
}

/// Every reason `plan` cannot run on `m` (empty: it can).
pub fn check(plan: &RunPlan, m: &Machine) -> Vec<MachineError> {
    let mut errors = Vec::new();
    match &m.cpus {
        Ok(cpus) => {
            for (index, &core) in plan.cores.iter().enumerate() {
                if !cpus.contains(&core) {
                    errors.push(MachineError::Core {
                        index,
                        core,
                        allowed: ranges(cpus),
                    });
                }
            }
        }
        Err(e) => errors.push(MachineError::Affinity(e.clone())),
    }
    for (port, p) in plan.ports.iter().enumerate() {
        let name = p.name.clone();
        match &p.kind {
            PortKind::Tap { .. } if !m.tun => errors.push(MachineError::NoTun { port, name }),
            PortKind::Tap { .. } if plan.cores.len() > MAX_TAP_QUEUES => {
                errors.push(MachineError::TapQueues {
                    port,
                    name,
                    workers: plan.cores.len(),
                })
            }
            PortKind::Pcap { rx: Some(rx), .. } => {
                let readable = std::fs::metadata(rx)
                    .map_err(|e| e.to_string())
                    .and_then(|md| match md.is_file() {
                        true => std::fs::File::open(rx).map(drop).map_err(|e| e.to_string()),
                        false => Err("not a regular file".into()),
                    });
                if let Err(error) = readable {
                    errors.push(MachineError::PcapRx {
                        port,
                        name,
                        path: rx.clone(),
                        error,
                    });
                }
            }
            _ => {}
        }
    }
    if let Some(available) = m.mem_available {
        let need = Footprint::of(plan);
        if need.total() > available {
            errors.push(MachineError::Memory { need, available });
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(cpus: &[usize], mem_gib: u64) -> Machine {
        Machine {
            cpus: Ok(cpus.iter().copied().collect()),
            mem_available: Some(mem_gib << 30),
            tun: true,
        }
    }

    fn plan(cores: &str, flows: u64) -> RunPlan {
        let y = format!(
            "apiVersion: sluice.dev/v1alpha1\nkind: Appliance\nmetadata: {{name: m}}\nspec:\n  cores: {cores}\n  ports:\n  - name: p\n    tap: {{name: t0}}\n  limits: {{flowsPerWorker: {flows}}}\n"
        );
        let mut loaded = crate::load::Loaded::default();
        crate::load::load_str("m.yaml", &y, &mut loaded);
        let spec = loaded
            .items
            .iter()
            .find_map(|it| match &it.object {
                crate::model::Object::Appliance(a) => Some(a.spec.clone()),
                _ => None,
            })
            .expect("an Appliance");
        RunPlan::from_appliance(&spec, false).expect("a plan")
    }

    #[test]
    fn cores_must_be_allowed() {
        let m = machine(&[0, 1, 2, 3, 8], 16);
        assert!(check(&plan("[0, 8]", 1024), &m).is_empty());
        let e = check(&plan("[0, 9, 1023]", 1024), &m);
        assert_eq!(e.len(), 2, "{e:?}");
        assert_eq!(e[0].field(), "spec.cores[1]");
        assert_eq!(
            e[0].to_string(),
            "core 9 does not exist or is not allowed for this process (allowed: 0-3,8)"
        );
        assert_eq!(e[1].field(), "spec.cores[2]");
        // This process's own set has at least the CPU it runs on.
        let here = Machine::this();
        assert!(here.cpus.as_ref().is_ok_and(|c| !c.is_empty()), "{here:?}");
    }

    #[test]
    fn tables_must_fit_in_available_memory() {
        let p = plan("[0, 1]", 1 << 24);
        let need = Footprint::of(&p);
        // 128 bytes a flow or less (FlowTable::memory_bytes documents the bound).
        assert!(
            need.flows <= 128 << 24 && need.flows >= 64 << 24,
            "{need:?}"
        );
        assert!(check(&p, &machine(&[0, 1], 16)).is_empty());
        let e = check(&p, &machine(&[0, 1], 2));
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].field(), "spec.limits.flowsPerWorker");
        let msg = e[0].to_string();
        assert!(msg.contains("more than the 2048 MiB available"), "{msg}");
        assert!(msg.contains("2 worker(s)"), "{msg}");
        assert_eq!(
            mem_available("MemTotal: 9 kB\nMemAvailable:    2048 kB\n"),
            Some(2 << 20)
        );
    }

    #[test]
    fn ports_need_their_devices() {
        let p = plan("[0]", 1024);
        let mut m = machine(&[0], 16);
        m.tun = false;
        let e = check(&p, &m);
        assert_eq!(e[0].field(), "spec.ports[0].tap");
    }
}
