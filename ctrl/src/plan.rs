//! The Appliance (`sluice.dev/v1alpha1`) translated into what `sluice run` starts
//! ([`RunPlan`]): ports ([`PortKind`]) with their addresses, one worker per core, static
//! routes, virtual addresses, static neighbours, the flow-table size, connection tracking, delayed binding,
//! EAL arguments and the admin socket.
//!
//! Without an Appliance sluice runs the embedded default ([`DEFAULT_APPLIANCE`]): one TAP
//! port `sl0` where sluice is `10.77.0.2/24` and `fd77::2/64`; the kernel's side of the
//! TAP device gets [`DEFAULT_PEER_ADDRESSES`], so `ping 10.77.0.2` works right away.
//!
//! Every error ([`PlanError`]) names the Appliance field it is about
//! ([`PlanError::field`]), so `sluice check` reports it at its line like any other.

use std::net::IpAddr;
use std::path::PathBuf;

use sluice_dataplane::balancer::BalancerConfig;
use sluice_dataplane::flow::Timeouts;
use sluice_dataplane::pipeline::{Fib, FibError, IfAddr, Route};
use sluice_dataplane::port::PortKind;
use sluice_dataplane::splice::SpliceConfig;
use sluice_dataplane::wire::MacAddr;

use crate::model::appliance::{ApplianceSpec, Conntrack, DelayedBinding, Termination};
use crate::model::Object;
use sluice_dataplane::terminate::TerminateConfig;

/// The admin socket when the Appliance names none.
pub const DEFAULT_ADMIN_SOCKET: &str = "/run/sluice/admin.sock";

/// The embedded default, used when no Appliance is given: one TAP port.
pub const DEFAULT_APPLIANCE: &str = r#"
apiVersion: sluice.dev/v1alpha1
kind: Appliance
metadata: {name: default}
spec:
  cores: [0]
  ports:
  - name: sl0
    tap: {name: sl0}
    addresses: [10.77.0.2/24, "fd77::2/64"]
"#;

/// Addresses the embedded default gives the kernel's side of `sl0`.
pub const DEFAULT_PEER_ADDRESSES: [&str; 2] = ["10.77.0.1/24", "fd77::1/64"];

/// Flow-table entries per worker when the Appliance's `limits.flowsPerWorker` is absent.
pub const DEFAULT_FLOWS_PER_WORKER: usize = 1 << 20;

/// Most flow-table entries per worker (`limits.flowsPerWorker`): 2^26, 8 GiB a worker
/// at 128 bytes a flow. Below the dataplane's own index limit, so a table is never
/// silently made smaller than asked; whether the machine has the memory is checked
/// apart ([`crate::machine`]).
pub const MAX_FLOWS_PER_WORKER: u64 = 1 << 26;

/// Highest CPU number plus one that a core may name: the size of the kernel's CPU set
/// type (`CPU_SETSIZE`). Whether the core exists and may be used is checked apart
/// ([`crate::machine`]).
pub const MAX_CORE: u32 = 1024;

/// One port of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortPlan {
    /// Name.
    pub name: String,
    /// Backend.
    pub kind: PortKind,
    /// sluice's addresses on it.
    pub addrs: Vec<IfAddr>,
}

/// What `sluice run` starts, translated from the Appliance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPlan {
    /// Ports in order.
    pub ports: Vec<PortPlan>,
    /// One worker per core.
    pub cores: Vec<usize>,
    /// Static routes.
    pub routes: Vec<Route>,
    /// Virtual addresses (listener addresses answered on every port).
    pub virtual_addrs: Vec<IpAddr>,
    /// Static neighbours, set in the neighbour cache at start and never overwritten.
    pub neighbours: Vec<NeighbourPlan>,
    /// Flow-table entries per worker.
    pub flow_capacity: usize,
    /// Connection-tracking timeouts.
    pub timeouts: Timeouts,
    /// Source NAT ports, inclusive, split among the workers.
    pub snat_ports: (u16, u16),
    /// Seconds a closed connection's source NAT tuple rests (`conntrack.snatRestSeconds`).
    pub snat_rest_s: u32,
    /// New connections per source and second on each worker
    /// (`limits.newConnectionsPerSecondPerSource`).
    pub new_flows_per_second_per_source: u32,
    /// Delayed binding (SNI/Host listeners); its cookie secret is drawn at start.
    pub splice: SpliceConfig,
    /// TLS termination (`spec.termination`); its seed is drawn at start.
    pub terminate: TerminateConfig,
    /// Seeds each start's flow hashing and where the SNAT port cursor begins (drawn at
    /// start: a restarted sluice must not reuse its last run's SNAT tuples in the same
    /// order, which backends may still hold in TIME_WAIT).
    pub seed: u64,
    /// EAL arguments (only used when a DPDK port exists).
    pub eal: Vec<String>,
    /// Admin socket.
    pub admin_socket: PathBuf,
    /// The group that may use the admin socket besides root and sluice's user.
    pub admin_group: Option<String>,
    /// Whether this is the embedded default (its TAP peer gets addresses).
    pub is_default: bool,
}

/// A static neighbour as the forwarder takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighbourPlan {
    /// Its address.
    pub ip: IpAddr,
    /// Its MAC.
    pub mac: MacAddr,
    /// The port (index in [`RunPlan::ports`]) whose network holds it.
    pub port: usize,
}

/// Why a static neighbour (`spec.neighbours[i]`) cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NeighbourError {
    /// `ip` is not an IP address.
    #[error("bad IP {0:?}")]
    BadIp(String),
    /// `mac` is not `aa:bb:cc:dd:ee:ff`, or not unicast.
    #[error("bad MAC {0:?}: expected a unicast aa:bb:cc:dd:ee:ff")]
    BadMac(String),
    /// `port` names no port.
    #[error("no port named {0:?}")]
    UnknownPort(String),
    /// `ip` is in no connected network of the port.
    #[error("{ip} is in no network of port {port}")]
    NotOnPort {
        /// The address.
        ip: IpAddr,
        /// The port's name.
        port: String,
    },
    /// `ip` is in no port's network (no `port` given).
    #[error("{0} is in no port's network")]
    NoPort(IpAddr),
    /// `ip` is one of sluice's own addresses.
    #[error("{0} is one of sluice's own addresses")]
    Own(IpAddr),
    /// Listed twice.
    #[error("{0} is listed twice")]
    Duplicate(IpAddr),
}

/// An address with a prefix length that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrError {
    /// No `/len`.
    #[error("address {0:?} needs a prefix length (10.77.0.2/24)")]
    NoPrefix(String),
    /// The address part is not an IP.
    #[error("address {0:?}: bad IP")]
    BadIp(String),
    /// The length is not a number.
    #[error("address {0:?}: bad prefix length")]
    BadLength(String),
    /// The length is over 32 (IPv4) or 128 (IPv6).
    #[error("address {0:?}: prefix length over {1}")]
    TooLong(String, u8),
}

/// Why an Appliance cannot be run as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// `spec.ports` is empty.
    #[error("the Appliance has no ports")]
    NoPorts,
    /// A port names no backend, or more than one.
    #[error("port {name}: give exactly one of tap, dpdk, pcap")]
    PortKind {
        /// Position in `spec.ports`.
        port: usize,
        /// Its name.
        name: String,
    },
    /// A port's queue count differs from the number of workers.
    #[error("port {name}: queues {queues} must equal the number of cores ({workers}): each worker polls one queue of every port")]
    Queues {
        /// Position in `spec.ports`.
        port: usize,
        /// Its name.
        name: String,
        /// Queues asked for.
        queues: u16,
        /// Workers (cores).
        workers: u16,
    },
    /// A pcap port with more than one worker.
    #[error("port {name}: a pcap port has one queue; use one core")]
    PcapCores {
        /// Position in `spec.ports`.
        port: usize,
        /// Its name.
        name: String,
    },
    /// A port address that does not parse.
    #[error("port {name}: {error}")]
    PortAddress {
        /// Position in `spec.ports`.
        port: usize,
        /// Position in its `addresses`.
        address: usize,
        /// Its name.
        name: String,
        /// What is wrong.
        error: CidrError,
    },
    /// A static route's destination that does not parse.
    #[error("route: {error}")]
    RouteTo {
        /// Position in `spec.routes`.
        route: usize,
        /// What is wrong.
        error: CidrError,
    },
    /// A static route's next hop that is not an IP.
    #[error("route to {to}: bad next hop {via:?}")]
    RouteVia {
        /// Position in `spec.routes`.
        route: usize,
        /// Its destination.
        to: String,
        /// The next hop as written.
        via: String,
    },
    /// The static routes do not make a forwarding table (a next hop no port reaches).
    #[error("routes: {0}")]
    Routes(#[from] FibError),
    /// A virtual address that is not an IP.
    #[error("virtual address {value:?}: bad IP")]
    VirtualAddress {
        /// Position in `spec.virtualAddresses`.
        index: usize,
        /// As written.
        value: String,
    },
    /// `cores: []`.
    #[error("cores is empty: give at least one core (leave `cores` out for core 0)")]
    NoCores,
    /// A core number over [`MAX_CORE`].
    #[error("core {core} is beyond the highest CPU number this build supports ({})", MAX_CORE - 1)]
    CoreRange {
        /// Position in `spec.cores`.
        index: usize,
        /// As written.
        core: u32,
    },
    /// A static neighbour that cannot be used.
    #[error("neighbour {index}: {error}")]
    Neighbour {
        /// Position in `spec.neighbours`.
        index: usize,
        /// The field at fault (`ip`, `mac` or `port`).
        field: &'static str,
        /// What is wrong.
        error: NeighbourError,
    },
    /// `limits.flowsPerWorker: 0`.
    #[error("limits.flowsPerWorker must be at least 1")]
    NoFlows,
    /// `limits.flowsPerWorker` over [`MAX_FLOWS_PER_WORKER`].
    #[error("limits.flowsPerWorker {0} is over the most a worker's flow table holds ({MAX_FLOWS_PER_WORKER})")]
    TooManyFlows(u64),
    /// `conntrack.snatPorts` is not `FIRST-LAST`.
    #[error("conntrack.snatPorts {0:?}: expected FIRST-LAST, e.g. \"1024-65535\"")]
    SnatSyntax(String),
    /// `conntrack.snatPorts` starts at 0 or runs backwards.
    #[error("conntrack.snatPorts {0:?}: the first port must be 1 or more and not above the last")]
    SnatOrder(String),
    /// `conntrack.snatPorts` leaves a worker without a port.
    #[error("conntrack.snatPorts {range:?}: fewer ports than workers ({workers})")]
    SnatTooFew {
        /// As written.
        range: String,
        /// Workers.
        workers: usize,
    },
    /// A `delayedBinding` setting out of its range.
    #[error("delayedBinding.{name} {value}: expected {lo} to {hi}")]
    DelayedBinding {
        /// The field (camelCase, as written).
        name: &'static str,
        /// As written.
        value: u32,
        /// Lowest accepted.
        lo: u32,
        /// Highest accepted.
        hi: u32,
    },
    /// A `termination` setting out of its range.
    #[error("termination.{name} {value}: expected {lo} to {hi}")]
    Termination {
        /// The field (camelCase, as written).
        name: &'static str,
        /// As written.
        value: u32,
        /// Lowest accepted.
        lo: u32,
        /// Highest accepted.
        hi: u32,
    },
    /// The embedded default does not decode (a build defect, never a user's).
    #[error("the embedded default Appliance does not decode")]
    EmbeddedDefault,
}

impl PlanError {
    /// The Appliance field the error is about, as a path under the object
    /// (`spec.ports[0].queues`), for locating it in the manifest.
    pub fn field(&self) -> String {
        match self {
            PlanError::NoPorts => "spec.ports".into(),
            PlanError::NoCores => "spec.cores".into(),
            PlanError::CoreRange { index, .. } => format!("spec.cores[{index}]"),
            PlanError::PortKind { port, .. } => format!("spec.ports[{port}]"),
            PlanError::Queues { port, .. } => format!("spec.ports[{port}].queues"),
            PlanError::PcapCores { port, .. } => format!("spec.ports[{port}].pcap"),
            PlanError::PortAddress { port, address, .. } => {
                format!("spec.ports[{port}].addresses[{address}]")
            }
            PlanError::RouteTo { route, .. } => format!("spec.routes[{route}].to"),
            PlanError::RouteVia { route, .. } => format!("spec.routes[{route}].via"),
            PlanError::Routes(_) => "spec.routes".into(),
            PlanError::VirtualAddress { index, .. } => format!("spec.virtualAddresses[{index}]"),
            PlanError::Neighbour { index, field, .. } => {
                format!("spec.neighbours[{index}].{field}")
            }
            PlanError::NoFlows | PlanError::TooManyFlows(_) => "spec.limits.flowsPerWorker".into(),
            PlanError::SnatSyntax(_) | PlanError::SnatOrder(_) | PlanError::SnatTooFew { .. } => {
                "spec.conntrack.snatPorts".into()
            }
            PlanError::DelayedBinding { name, .. } => format!("spec.delayedBinding.{name}"),
            PlanError::Termination { name, .. } => format!("spec.termination.{name}"),
            PlanError::EmbeddedDefault => "spec".into(),
        }
    }
}

/// Parses `10.77.0.2/24` or `fd77::2/64`.
pub fn parse_cidr(s: &str) -> Result<IfAddr, CidrError> {
    let (a, l) = s
        .split_once('/')
        .ok_or_else(|| CidrError::NoPrefix(s.into()))?;
    let addr: IpAddr = a.parse().map_err(|_| CidrError::BadIp(s.into()))?;
    let prefix_len: u8 = l.parse().map_err(|_| CidrError::BadLength(s.into()))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if prefix_len > max {
        return Err(CidrError::TooLong(s.into(), max));
    }
    Ok(IfAddr { addr, prefix_len })
}

impl RunPlan {
    /// Translates an Appliance spec.
    pub fn from_appliance(spec: &ApplianceSpec, is_default: bool) -> Result<RunPlan, PlanError> {
        let cores: Vec<usize> = match &spec.cores {
            None => vec![0],
            Some(c) if c.is_empty() => return Err(PlanError::NoCores),
            Some(c) => c
                .iter()
                .enumerate()
                .map(|(index, &core)| match core {
                    core if core >= MAX_CORE => Err(PlanError::CoreRange { index, core }),
                    core => Ok(core as usize),
                })
                .collect::<Result<_, _>>()?,
        };
        let ports = ports(spec, cores.len() as u16)?;
        let routes = routes(spec)?;
        // The routes must make a forwarding table over the ports' subnets, as `run`
        // will build it: a next hop no port reaches fails here, not at start.
        let port_addrs: Vec<Vec<IfAddr>> = ports.iter().map(|p| p.addrs.clone()).collect();
        Fib::new(&port_addrs, &routes)?;
        let virtual_addrs = spec
            .virtual_addresses
            .iter()
            .enumerate()
            .map(|(index, v)| {
                v.parse::<IpAddr>().map_err(|_| PlanError::VirtualAddress {
                    index,
                    value: v.clone(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let neighbours = neighbours(spec, &ports, &virtual_addrs)?;
        let flow_capacity = match spec.limits.flows_per_worker {
            None => DEFAULT_FLOWS_PER_WORKER,
            Some(0) => return Err(PlanError::NoFlows),
            Some(n) if n > MAX_FLOWS_PER_WORKER => return Err(PlanError::TooManyFlows(n)),
            Some(n) => n as usize,
        };
        let (timeouts, snat_ports) = conntrack(
            spec.conntrack.as_deref().unwrap_or(&Conntrack::default()),
            cores.len(),
        )?;
        let snat_rest_s = spec
            .conntrack
            .as_deref()
            .and_then(|c| c.snat_rest_seconds)
            .unwrap_or(BalancerConfig::default().snat_rest_s);
        let mut splice = delayed_binding(
            spec.delayed_binding
                .as_deref()
                .unwrap_or(&DelayedBinding::default()),
        )?;
        // (Validation keeps both within their types; saturate all the same.)
        if let Some(n) = spec.limits.embryos_per_source {
            splice.embryos_per_source = u16::try_from(n).unwrap_or(u16::MAX);
        }
        let terminate = termination(
            spec.termination
                .as_deref()
                .unwrap_or(&Termination::default()),
        )?;
        let new_flows_per_second_per_source =
            spec.limits.new_connections_per_second_per_source.map_or(
                BalancerConfig::default().new_flows_per_second_per_source,
                |n| u32::try_from(n).unwrap_or(u32::MAX),
            );
        Ok(RunPlan {
            ports,
            cores,
            routes,
            virtual_addrs,
            neighbours,
            flow_capacity,
            timeouts,
            snat_ports,
            snat_rest_s,
            new_flows_per_second_per_source,
            terminate,
            splice,
            seed: BalancerConfig::default().seed,
            eal: spec.eal.clone(),
            admin_socket: spec
                .admin
                .as_ref()
                .and_then(|a| a.socket.as_ref())
                .map_or_else(|| PathBuf::from(DEFAULT_ADMIN_SOCKET), PathBuf::from),
            admin_group: spec.admin.as_ref().and_then(|a| a.group.clone()),
            is_default,
        })
    }

    /// The plan of the embedded default Appliance.
    pub fn embedded_default() -> Result<RunPlan, PlanError> {
        RunPlan::from_appliance(&default_spec()?, true)
    }

    /// Packet buffers in the pool `sluice run` allocates: 1024 per port and worker, at
    /// least 4096.
    pub fn pool_buffers(&self) -> usize {
        (self.ports.len() * self.cores.len() * 1024).max(4096)
    }

    /// The EAL arguments: the Appliance's, plus `--vdev` for each DPDK port given by vdev
    /// devargs (`net_...`), so the EAL creates them.
    pub fn eal_args(&self) -> Vec<String> {
        let mut a = self.eal.clone();
        for p in &self.ports {
            if let PortKind::Dpdk { devargs } = &p.kind {
                if devargs.starts_with("net_") && !a.iter().any(|x| x == devargs) {
                    a.push("--vdev".into());
                    a.push(devargs.clone());
                }
            }
        }
        a
    }
}

/// The Appliance's ports: exactly one backend each, one queue per worker, addresses.
fn ports(spec: &ApplianceSpec, workers: u16) -> Result<Vec<PortPlan>, PlanError> {
    if spec.ports.is_empty() {
        return Err(PlanError::NoPorts);
    }
    let mut ports = Vec::new();
    for (i, p) in spec.ports.iter().enumerate() {
        let name = || p.name.clone();
        let kinds = [p.tap.is_some(), p.dpdk.is_some(), p.pcap.is_some()];
        if kinds.iter().filter(|&&k| k).count() != 1 {
            return Err(PlanError::PortKind {
                port: i,
                name: name(),
            });
        }
        if let Some(queues) = p.queues.filter(|&q| q != workers) {
            return Err(PlanError::Queues {
                port: i,
                name: name(),
                queues,
                workers,
            });
        }
        let kind = match (&p.tap, &p.dpdk, &p.pcap) {
            (Some(t), _, _) => PortKind::Tap {
                ifname: t.name.clone(),
            },
            (_, Some(d), _) => PortKind::Dpdk {
                devargs: d.devargs.clone(),
            },
            (_, _, Some(_)) if workers > 1 => {
                return Err(PlanError::PcapCores {
                    port: i,
                    name: name(),
                })
            }
            (_, _, Some(c)) => PortKind::Pcap {
                rx: c.rx.as_ref().map(PathBuf::from),
                tx: c.tx.as_ref().map(PathBuf::from),
            },
            (None, None, None) => {
                return Err(PlanError::PortKind {
                    port: i,
                    name: name(),
                })
            }
        };
        let addrs = p
            .addresses
            .iter()
            .enumerate()
            .map(|(address, a)| {
                parse_cidr(a).map_err(|error| PlanError::PortAddress {
                    port: i,
                    address,
                    name: name(),
                    error,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        ports.push(PortPlan {
            name: name(),
            kind,
            addrs,
        });
    }
    Ok(ports)
}

/// The Appliance's static neighbours, each on the port whose network holds it.
fn neighbours(
    spec: &ApplianceSpec,
    ports: &[PortPlan],
    virtual_addrs: &[IpAddr],
) -> Result<Vec<NeighbourPlan>, PlanError> {
    let mut out: Vec<NeighbourPlan> = Vec::new();
    for (index, n) in spec.neighbours.iter().enumerate() {
        let err = |field, error| PlanError::Neighbour {
            index,
            field,
            error,
        };
        let ip: IpAddr =
            n.ip.parse()
                .map_err(|_| err("ip", NeighbourError::BadIp(n.ip.clone())))?;
        let mac = n
            .mac
            .parse::<MacAddr>()
            .ok()
            .filter(|m| m.is_unicast())
            .ok_or_else(|| err("mac", NeighbourError::BadMac(n.mac.clone())))?;
        let own = virtual_addrs.contains(&ip)
            || ports.iter().any(|p| p.addrs.iter().any(|a| a.addr == ip));
        if own {
            return Err(err("ip", NeighbourError::Own(ip)));
        }
        let holds = |p: &PortPlan| p.addrs.iter().any(|a| a.holds(ip));
        let port = match &n.port {
            Some(name) => {
                let i = ports
                    .iter()
                    .position(|p| &p.name == name)
                    .ok_or_else(|| err("port", NeighbourError::UnknownPort(name.clone())))?;
                if !holds(&ports[i]) {
                    return Err(err(
                        "port",
                        NeighbourError::NotOnPort {
                            ip,
                            port: name.clone(),
                        },
                    ));
                }
                i
            }
            None => ports
                .iter()
                .position(holds)
                .ok_or_else(|| err("ip", NeighbourError::NoPort(ip)))?,
        };
        if out.iter().any(|o| o.ip == ip) {
            return Err(err("ip", NeighbourError::Duplicate(ip)));
        }
        out.push(NeighbourPlan { ip, mac, port });
    }
    Ok(out)
}

/// The Appliance's static routes.
fn routes(spec: &ApplianceSpec) -> Result<Vec<Route>, PlanError> {
    let mut routes = Vec::new();
    for (route, r) in spec.routes.iter().enumerate() {
        let to = parse_cidr(&r.to).map_err(|error| PlanError::RouteTo { route, error })?;
        let via: IpAddr = r.via.parse().map_err(|_| PlanError::RouteVia {
            route,
            to: r.to.clone(),
            via: r.via.clone(),
        })?;
        routes.push(Route {
            to: to.addr,
            prefix_len: to.prefix_len,
            via,
        });
    }
    Ok(routes)
}

/// The embedded default's spec ([`DEFAULT_APPLIANCE`]).
pub fn default_spec() -> Result<ApplianceSpec, PlanError> {
    let mut loaded = crate::load::Loaded::default();
    crate::load::load_str("<embedded default>", DEFAULT_APPLIANCE, &mut loaded);
    loaded
        .items
        .iter()
        .find_map(|it| match &it.object {
            Object::Appliance(a) => Some(a.spec.clone()),
            _ => None,
        })
        .ok_or(PlanError::EmbeddedDefault)
}

/// The Appliance's connection-tracking settings: timeouts (defaults for what it leaves
/// out) and the SNAT port range, which must leave every worker at least one port.
pub fn conntrack(c: &Conntrack, workers: usize) -> Result<(Timeouts, (u16, u16)), PlanError> {
    let d = Timeouts::default();
    let t = Timeouts {
        tcp_syn_sent: c.tcp_syn_sent.unwrap_or(d.tcp_syn_sent),
        tcp_syn_recv: c.tcp_syn_recv.unwrap_or(d.tcp_syn_recv),
        tcp_established: c.tcp_established.unwrap_or(d.tcp_established),
        tcp_fin_wait: c.tcp_fin_wait.unwrap_or(d.tcp_fin_wait),
        tcp_close_wait: c.tcp_close_wait.unwrap_or(d.tcp_close_wait),
        tcp_last_ack: c.tcp_last_ack.unwrap_or(d.tcp_last_ack),
        tcp_time_wait: c.tcp_time_wait.unwrap_or(d.tcp_time_wait),
        tcp_close: c.tcp_close.unwrap_or(d.tcp_close),
        udp_unreplied: c.udp_unreplied.unwrap_or(d.udp_unreplied),
        udp_replied: c.udp_replied.unwrap_or(d.udp_replied),
    };
    let ports = match &c.snat_ports {
        None => BalancerConfig::default().snat_ports,
        Some(r) => {
            let bad = || PlanError::SnatSyntax(r.clone());
            let (a, b) = r.split_once('-').ok_or_else(bad)?;
            let a: u16 = a.trim().parse().map_err(|_| bad())?;
            let b: u16 = b.trim().parse().map_err(|_| bad())?;
            if a == 0 || a > b {
                return Err(PlanError::SnatOrder(r.clone()));
            }
            if usize::from(b - a) + 1 < workers {
                return Err(PlanError::SnatTooFew {
                    range: r.clone(),
                    workers,
                });
            }
            (a, b)
        }
    };
    Ok((t, ports))
}

/// One delayed-binding setting: its default when absent, else checked against
/// `lo..=hi`.
fn within(
    value: Option<u32>,
    name: &'static str,
    (lo, hi): (u32, u32),
    default: u64,
) -> Result<u64, PlanError> {
    match value {
        None => Ok(default),
        Some(v) if (lo..=hi).contains(&v) => Ok(u64::from(v)),
        Some(value) => Err(PlanError::DelayedBinding {
            name,
            value,
            lo,
            hi,
        }),
    }
}

/// The Appliance's termination settings, checked against their ranges (the seed is left
/// at its default: `sluice run` draws it from the OS).
pub fn termination(t: &Termination) -> Result<TerminateConfig, PlanError> {
    let def = TerminateConfig::default();
    let get =
        |value: Option<u32>, name: &'static str, (lo, hi): (u32, u32), default: u64| match value {
            None => Ok(default),
            Some(v) if (lo..=hi).contains(&v) => Ok(u64::from(v)),
            Some(value) => Err(PlanError::Termination {
                name,
                value,
                lo,
                hi,
            }),
        };
    let keep_alive_ms = match t.keep_alive_ms {
        Some(0) => 0,
        v => get(v, "keepAliveMs", (1000, 7_200_000), def.keep_alive_ms)?,
    };
    Ok(TerminateConfig {
        max_connections: get(
            t.connections_per_worker,
            "connectionsPerWorker",
            (1, 1 << 20),
            def.max_connections as u64,
        )? as usize,
        memory_bytes: (get(
            t.memory_mib_per_worker,
            "memoryMibPerWorker",
            (1, 1 << 20),
            (def.memory_bytes >> 20) as u64,
        )? as usize)
            << 20,
        client_buffer: get(
            t.client_buffer_bytes,
            "clientBufferBytes",
            (2048, 1 << 20),
            def.client_buffer as u64,
        )? as usize,
        backend_buffer: get(
            t.backend_buffer_bytes,
            "backendBufferBytes",
            (2048, 1 << 20),
            def.backend_buffer as u64,
        )? as usize,
        handshake_ms: get(
            t.handshake_timeout_ms,
            "handshakeTimeoutMs",
            (100, 600_000),
            def.handshake_ms,
        )?,
        idle_ms: get(
            t.idle_timeout_ms,
            "idleTimeoutMs",
            (1000, 86_400_000),
            def.idle_ms,
        )?,
        connect_ms: get(
            t.backend_connect_timeout_ms,
            "backendConnectTimeoutMs",
            (100, 60_000),
            def.connect_ms,
        )?,
        backend_tries: get(
            t.backend_tries,
            "backendTries",
            (1, 10),
            u64::from(def.backend_tries),
        )? as u8,
        keep_alive_ms,
        head_bytes: get(
            t.request_head_bytes,
            "requestHeadBytes",
            (1024, 16384),
            def.head_bytes as u64,
        )? as usize,
        pool_connections: get(
            t.backend_pool_connections,
            "backendPoolConnections",
            (0, 65_536),
            def.pool_connections as u64,
        )? as usize,
        pool_idle_ms: get(
            t.backend_pool_idle_ms,
            "backendPoolIdleMs",
            (100, 3_600_000),
            def.pool_idle_ms,
        )?,
        mirror_connections: get(
            t.mirror_connections,
            "mirrorConnections",
            (0, 65_536),
            def.mirror_connections as u64,
        )? as usize,
        ..def
    })
}

/// The Appliance's delayed-binding settings, checked against their ranges (the cookie
/// secret is left at its default: `sluice run` draws it from the OS).
pub fn delayed_binding(d: &DelayedBinding) -> Result<SpliceConfig, PlanError> {
    let def = SpliceConfig::default();
    let embryos = within(
        d.embryos_per_worker,
        "embryosPerWorker",
        (1, 1 << 20),
        def.embryos as u64,
    )?;
    let buffer_bytes = within(
        d.buffer_bytes,
        "bufferBytes",
        (512, 65535),
        def.buffer_bytes as u64,
    )?;
    let max_pieces = within(d.max_segments, "maxSegments", (1, 8), def.max_pieces as u64)?;
    Ok(SpliceConfig {
        embryos: embryos as usize,
        buffer_bytes: buffer_bytes as usize,
        max_pieces: max_pieces as usize,
        first_bytes_ms: within(
            d.first_bytes_timeout_ms,
            "firstBytesTimeoutMs",
            (1, 600_000),
            def.first_bytes_ms,
        )?,
        syn_rto_ms: within(
            d.backend_syn_timeout_ms,
            "backendSynTimeoutMs",
            (1, 60_000),
            def.syn_rto_ms,
        )?,
        syn_tries: within(
            d.backend_syn_tries,
            "backendSynTries",
            (1, 10),
            u64::from(def.syn_tries),
        )? as u8,
        backend_tries: within(
            d.backend_tries,
            "backendTries",
            (1, 10),
            u64::from(def.backend_tries),
        )? as u8,
        ..def
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::appliance::TapPort;
    use sluice_dataplane::flow::Timeouts;

    #[test]
    fn appliance_translation() {
        let y = r#"
apiVersion: sluice.dev/v1alpha1
kind: Appliance
metadata: {name: edge}
spec:
  cores: [0, 1]
  ports:
  - name: outside
    dpdk: {devargs: "net_tap0,iface=x"}
    addresses: [10.77.0.2/24]
  - name: inside
    dpdk: {devargs: "0000:3b:00.0"}
    addresses: [10.78.0.2/24, "fd78::2/64"]
  routes: [{to: 0.0.0.0/0, via: 10.77.0.1}]
  eal: ["--no-huge", "-m", "512"]
  admin: {socket: /tmp/x.sock}
  virtualAddresses: [10.77.0.10, "fd77::10"]
  limits: {flowsPerWorker: 4096}
"#;
        let mut loaded = crate::load::Loaded::default();
        crate::load::load_str("t.yaml", y, &mut loaded);
        let spec = loaded
            .items
            .iter()
            .find_map(|it| match &it.object {
                Object::Appliance(a) => Some(a.spec.clone()),
                _ => None,
            })
            .unwrap();
        let p = RunPlan::from_appliance(&spec, false).unwrap();
        assert_eq!(p.cores, vec![0, 1]);
        assert_eq!(
            p.routes,
            vec![Route {
                to: "0.0.0.0".parse().unwrap(),
                prefix_len: 0,
                via: "10.77.0.1".parse().unwrap()
            }]
        );
        assert_eq!(p.admin_socket, PathBuf::from("/tmp/x.sock"));
        assert_eq!(
            p.virtual_addrs,
            vec![
                "10.77.0.10".parse::<IpAddr>().unwrap(),
                "fd77::10".parse().unwrap()
            ]
        );
        assert_eq!(p.flow_capacity, 4096);
        assert_eq!(
            p.eal_args(),
            ["--no-huge", "-m", "512", "--vdev", "net_tap0,iface=x"]
                .map(String::from)
                .to_vec()
        );
        let mut bad = spec.clone();
        bad.ports[0].queues = Some(3);
        assert!(RunPlan::from_appliance(&bad, false)
            .unwrap_err()
            .to_string()
            .contains("queues 3"));
        let mut bad = spec.clone();
        bad.ports[0].addresses = vec!["10.0.0.1".into()];
        assert!(RunPlan::from_appliance(&bad, false)
            .unwrap_err()
            .to_string()
            .contains("prefix length"));
        let mut bad = spec;
        bad.ports[0].tap = Some(TapPort { name: "t".into() });
        assert!(RunPlan::from_appliance(&bad, false)
            .unwrap_err()
            .to_string()
            .contains("exactly one"));
    }

    #[test]
    fn static_neighbours_are_checked_against_the_ports() {
        let y = r#"
apiVersion: sluice.dev/v1alpha1
kind: Appliance
metadata: {name: edge}
spec:
  ports:
  - {name: outside, tap: {name: a}, addresses: [10.77.0.2/24]}
  - {name: inside, tap: {name: b}, addresses: [10.78.0.2/24, "fd78::2/64"]}
  virtualAddresses: [10.77.0.10]
  neighbours:
  - {ip: 10.78.0.11, mac: "02:00:00:00:00:0b"}
  - {ip: "fd78::11", mac: "02:00:00:00:00:0c", port: inside}
"#;
        let mut loaded = crate::load::Loaded::default();
        crate::load::load_str("t.yaml", y, &mut loaded);
        let spec = loaded
            .items
            .iter()
            .find_map(|it| match &it.object {
                Object::Appliance(a) => Some(a.spec.clone()),
                _ => None,
            })
            .unwrap();
        let p = RunPlan::from_appliance(&spec, false).unwrap();
        assert_eq!(
            p.neighbours,
            vec![
                NeighbourPlan {
                    ip: "10.78.0.11".parse().unwrap(),
                    mac: MacAddr([2, 0, 0, 0, 0, 0x0b]),
                    port: 1
                },
                NeighbourPlan {
                    ip: "fd78::11".parse().unwrap(),
                    mac: MacAddr([2, 0, 0, 0, 0, 0x0c]),
                    port: 1
                }
            ]
        );
        let cases: [(&str, &str, Option<&str>, &str); 8] = [
            (
                "10.78.0.x",
                "02:00:00:00:00:01",
                None,
                "spec.neighbours[0].ip",
            ),
            (
                "10.78.0.9",
                "02:00:00:00:00",
                None,
                "spec.neighbours[0].mac",
            ),
            (
                "10.78.0.9",
                "ff:ff:ff:ff:ff:ff",
                None,
                "spec.neighbours[0].mac",
            ),
            (
                "10.78.0.9",
                "02:00:00:00:00:01",
                Some("nowhere"),
                "spec.neighbours[0].port",
            ),
            (
                "10.78.0.9",
                "02:00:00:00:00:01",
                Some("outside"),
                "spec.neighbours[0].port",
            ),
            (
                "10.99.0.9",
                "02:00:00:00:00:01",
                None,
                "spec.neighbours[0].ip",
            ),
            (
                "10.78.0.2",
                "02:00:00:00:00:01",
                None,
                "spec.neighbours[0].ip",
            ),
            (
                "10.77.0.10",
                "02:00:00:00:00:01",
                None,
                "spec.neighbours[0].ip",
            ),
        ];
        for (ip, mac, port, field) in cases {
            let mut bad = spec.clone();
            bad.neighbours = vec![crate::model::appliance::StaticNeighbour {
                ip: ip.into(),
                mac: mac.into(),
                port: port.map(String::from),
            }];
            let e = RunPlan::from_appliance(&bad, false).unwrap_err();
            assert_eq!(e.field(), field, "{ip} {mac} {port:?}: {e}");
        }
        let mut twice = spec.clone();
        twice.neighbours.push(twice.neighbours[0].clone());
        let e = RunPlan::from_appliance(&twice, false).unwrap_err();
        assert_eq!(e.field(), "spec.neighbours[2].ip");
        assert!(e.to_string().contains("twice"), "{e}");
    }

    #[test]
    fn termination_settings_and_their_ranges() {
        assert_eq!(
            termination(&Termination::default()).unwrap(),
            TerminateConfig::default()
        );
        let t = Termination {
            connections_per_worker: Some(100),
            memory_mib_per_worker: Some(64),
            client_buffer_bytes: Some(16384),
            backend_buffer_bytes: Some(4096),
            handshake_timeout_ms: Some(500),
            idle_timeout_ms: Some(60_000),
            backend_connect_timeout_ms: Some(250),
            backend_tries: Some(1),
            keep_alive_ms: Some(0),
            request_head_bytes: Some(2048),
            backend_pool_connections: Some(8),
            backend_pool_idle_ms: Some(4000),
            mirror_connections: Some(0),
            istio_mutual: None,
        };
        let c = termination(&t).unwrap();
        assert_eq!(
            (c.pool_connections, c.pool_idle_ms, c.mirror_connections),
            (8, 4000, 0)
        );
        assert_eq!(
            (
                c.max_connections,
                c.memory_bytes,
                c.client_buffer,
                c.backend_buffer
            ),
            (100, 64 << 20, 16384, 4096)
        );
        assert_eq!(
            (c.handshake_ms, c.idle_ms, c.connect_ms, c.backend_tries),
            (500, 60_000, 250, 1)
        );
        assert_eq!((c.keep_alive_ms, c.head_bytes), (0, 2048));
        // The lower cap applies: 64 MiB of 16 + 16 + 4 + 4 KiB + TLS state.
        assert_eq!(c.capacity(), 100);
        let small = TerminateConfig {
            max_connections: 1 << 20,
            ..c.clone()
        };
        // What the pool's connections (two 4 KiB buffers each) leave.
        assert_eq!(
            small.capacity(),
            ((64 << 20) - 8 * 2 * 4096) / small.connection_bytes()
        );
        for (bad, what) in [
            (
                Termination {
                    client_buffer_bytes: Some(100),
                    ..Termination::default()
                },
                "termination.clientBufferBytes 100: expected 2048 to 1048576",
            ),
            (
                Termination {
                    keep_alive_ms: Some(10),
                    ..Termination::default()
                },
                "termination.keepAliveMs 10",
            ),
            (
                Termination {
                    connections_per_worker: Some(0),
                    ..Termination::default()
                },
                "termination.connectionsPerWorker 0",
            ),
        ] {
            let e = termination(&bad).unwrap_err().to_string();
            assert!(e.contains(what), "{e}");
        }
    }

    #[test]
    fn delayed_binding_settings_and_their_ranges() {
        assert_eq!(
            delayed_binding(&DelayedBinding::default()).unwrap(),
            SpliceConfig::default()
        );
        // Linux-like: three SYNs per backend, the waits doubling.
        assert_eq!(SpliceConfig::default().syn_tries, 3);
        let d = DelayedBinding {
            embryos_per_worker: Some(64),
            buffer_bytes: Some(4096),
            max_segments: Some(3),
            first_bytes_timeout_ms: Some(250),
            backend_syn_timeout_ms: Some(200),
            backend_syn_tries: Some(1),
            backend_tries: Some(5),
        };
        let c = delayed_binding(&d).unwrap();
        assert_eq!(
            (c.embryos, c.buffer_bytes, c.max_pieces, c.first_bytes_ms),
            (64, 4096, 3, 250)
        );
        assert_eq!((c.syn_rto_ms, c.syn_tries, c.backend_tries), (200, 1, 5));
        for (bad, what) in [
            (
                DelayedBinding {
                    buffer_bytes: Some(100),
                    ..DelayedBinding::default()
                },
                "delayedBinding.bufferBytes 100: expected 512 to 65535",
            ),
            (
                DelayedBinding {
                    max_segments: Some(9),
                    ..DelayedBinding::default()
                },
                "delayedBinding.maxSegments 9",
            ),
            (
                DelayedBinding {
                    embryos_per_worker: Some(0),
                    ..DelayedBinding::default()
                },
                "delayedBinding.embryosPerWorker 0",
            ),
        ] {
            let e = delayed_binding(&bad).unwrap_err().to_string();
            assert!(e.contains(what), "{e}");
        }
    }

    #[test]
    fn conntrack_timeouts_and_snat_ports() {
        let (t, p) = conntrack(&Conntrack::default(), 2).unwrap();
        assert_eq!(t, Timeouts::default());
        assert_eq!(p, (1024, 65535));
        let c = Conntrack {
            tcp_established: Some(3600),
            udp_replied: Some(30),
            snat_ports: Some("20000-29999".into()),
            ..Conntrack::default()
        };
        let (t, p) = conntrack(&c, 2).unwrap();
        assert_eq!((t.tcp_established, t.udp_replied), (3600, 30));
        assert_eq!(t.tcp_syn_sent, Timeouts::default().tcp_syn_sent);
        assert_eq!(p, (20000, 29999));
        for (bad, why) in [
            ("2000", "FIRST-LAST"),
            ("0-10", "1 or more"),
            ("9-8", "not above"),
            ("5000-5000", "fewer ports than workers"),
            ("a-b", "FIRST-LAST"),
        ] {
            let c = Conntrack {
                snat_ports: Some(bad.into()),
                ..Conntrack::default()
            };
            let e = conntrack(&c, 2).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
