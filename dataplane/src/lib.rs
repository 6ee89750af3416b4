//! # sluice-dataplane
//!
//! Everything that touches a packet. The control plane (`sluice-ctrl`) builds immutable
//! tables off the hot path; this crate only looks them up. The folders name the layers:
//!
//! - [`wire`]: zero-copy views and representations of ethernet, vlan, arp, ipv4, ipv6,
//!   icmp, tcp and udp headers.
//! - [`inspect`]: first-payload parsers (TLS ClientHello, HTTP/1 request head) used to
//!   route a connection by SNI or Host.
//! - [`tables`]: compiled, immutable lookup tables (ipcache, policy, listeners, host
//!   matcher, backend sets) bundled in one snapshot.
//! - [`flow`]: the per-worker flow table: both directions' 5-tuples to one entry, TCP/UDP
//!   state, timing wheel, fixed capacity.
//! - [`pipeline`]: the per-burst stage interface and its verdicts, the one parse step, the
//!   forwarder (ARP/ND, echo, neighbour learning, routed forwarding) and the packet
//!   rewrites (full NAT, replies) the stages above it share.
//! - [`splice`]: delayed binding for SNI/Host routing: SYN cookies, first bytes, and the
//!   engine that binds a backend and splices the two connections.
//! - [`terminate`]: connections sluice ends itself: a TCP endpoint per worker (smoltcp
//!   sockets in shards), rustls for TLS, the HTTP/1.1 proxy that routes each request
//!   (plain HTTP and HTTPS), and backend connections from sluice's own address.
//! - [`http`]: the HTTP/1.1 message codec of the reverse proxy: request and response
//!   heads, body framing, and the heads it writes (no I/O).
//! - [`balancer`]: the L4 load-balancing stage in front of the forwarder (flows, Maglev,
//!   policy, full NAT); it hands SNI/Host listeners to the splice engine.
//! - [`worker`]: pinned run-to-completion loops: burst rx, the pipeline, per-port tx
//!   buffers, counters, clean stop.
//! - [`stats`]: named drop reasons and per-worker counters (per HTTP rule too).
//! - [`rcu`]: snapshot publication with quiescent-state reclamation: one pointer, a
//!   load and a store per burst on the worker, frees only on the control thread.
//! - [`port`]: the `Port`/`Queue` abstraction over owned packet buffers and its backends:
//!   DPDK ethdev (feature `dpdk`), TAP, pcap, in-memory wire.
//! - [`mem`]: memory and CPU helpers: huge-page tables ([`mem::HugeSlice`]), prefetches,
//!   the time-stamp counter.
//!
//! `unsafe` code is denied crate-wide and lives in three places only, each allowed
//! explicitly and every block justified by a `// SAFETY:` comment: [`port`] and [`mem`]
//! (`#[allow(unsafe_code)]` on the module) and [`rcu`] (allowed block by block).
//!
//! The dataplane never sees manifests, namespaces or selectors: only addresses,
//! prefixes, ports, identities, host patterns and backends.

pub mod balancer;
pub mod flow;
pub mod http;
pub mod inspect;
#[allow(unsafe_code)]
pub mod mem;
pub mod pipeline;
#[allow(unsafe_code)]
pub mod port;
pub mod rcu;
pub mod splice;
pub mod stats;
pub mod tables;
pub mod terminate;
pub mod wire;
pub mod worker;
