//! # sluice-dataplane
//!
//! Everything that touches a packet. The control plane (`sluice-ctrl`) builds immutable
//! tables off the hot path; this crate only looks them up. The folders name the layers:
//!
//! - [`wire`]: zero-copy views and representations of ethernet, vlan, arp, ipv4, ipv6,
//!   icmp, tcp and udp headers.
//! - [`inspect`]: first-payload parsers (TLS ClientHello, HTTP/1 request head) used to
//!   route a connection by SNI or Host.
//! - [`flow`]: the per-worker flow table: both directions' 5-tuples to one entry, TCP/UDP
//!   state, timing wheel, fixed capacity.
//! - [`tables`]: compiled, immutable lookup tables (ipcache, policy, listeners, host
//!   matcher, backend sets) bundled in one snapshot.
//! - [`port`]: the `Port`/`Queue` abstraction over owned packet buffers and its backends:
//!   DPDK ethdev (feature `dpdk`), TAP, pcap, in-memory wire. The only module with
//!   `unsafe` code.
//!
//! - [`pipeline`]: the per-burst packet stages the worker calls and their verdicts: one
//!   parse step, the forwarder (ARP/ND, echo, neighbour learning, routed forwarding) and
//!   the L4 balancer in front of it (flows, Maglev, policy, full NAT).
//! - [`splice`]: delayed binding for SNI/Host routing: SYN cookies, first bytes, and the
//!   engine that binds a backend and splices the two connections.
//! - [`worker`]: pinned run-to-completion loops: burst rx, the pipeline, per-port tx
//!   buffers, counters, clean stop.
//! - [`stats`]: named drop reasons and per-worker counters.
//! - [`rcu`]: snapshot publication with quiescent-state reclamation: one pointer, a
//!   load and a store per burst on the worker, frees only on the control thread. Holds
//!   `unsafe` blocks (each allowed and justified locally).
//!
//! The dataplane never sees manifests, namespaces or selectors: only addresses,
//! prefixes, ports, identities, host patterns and backends.

pub mod flow;
pub mod inspect;
pub mod pipeline;
#[allow(unsafe_code)]
pub mod port;
pub mod rcu;
pub mod splice;
pub mod stats;
pub mod tables;
pub mod wire;
pub mod worker;
