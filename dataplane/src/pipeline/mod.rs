//! The per-packet stages the worker calls once per burst.
//!
//! [`Stage`] is the interface ([`stage`]): a burst of received packets in, one [`Verdict`]
//! per packet out (send on a port, or drop with a named reason). The worker does the I/O
//! and the counting of verdicts; a stage only looks at and rewrites packets, so the same
//! code runs on DPDK, TAP, pcap and in-memory ports.
//!
//! The rooms, each with one job:
//!
//! - [`stage`]: the interface ([`Stage`], [`Verdict`], [`Ctx`], [`StageIo`]).
//! - [`parse`]: the one parse step; its [`Meta`](parse::Meta) is what every later step
//!   reads of a packet's headers.
//! - [`forward`]: the [`Forwarder`], a small router (ARP/ND, echo, neighbour learning,
//!   routed forwarding), configured by [`ForwarderConfig`]; its answers to packets for
//!   sluice itself live in `local`, next-hop resolution and parking in `resolve`, the
//!   routes in [`fib`] and the shared neighbour cache in [`neigh`].
//! - [`nat`] and [`reply`]: what the balancer ([`crate::balancer`]) and the splice engine
//!   ([`crate::splice::engine`]) both write into packets (full NAT with incremental
//!   checksums; RSTs, ICMP errors, TCP segments).
//! - [`announce`]: gratuitous ARP / unsolicited neighbour advertisements for the listener
//!   addresses a new tables generation serves ([`Ctx::served`]), sent by the first worker.
//! - [`snat`]: a worker's source NAT ports: which tuple a new connection gets, and the
//!   rest a closed connection's tuple takes before it is handed out again (every path
//!   that source-NATs allocates and returns its tuples here).
//!
//! A packet is parsed once: the balancer's burst pass fills its `Meta`, and the forwarder
//! routes from it (a packet the balancer leaves alone, or one it rewrote with `Meta` kept
//! in step); the forwarder as a stage of its own parses the IP layer the same way. Only
//! the rare cases (ARP, ICMP, neighbour discovery, IPv4 options) go back to the bytes,
//! through the [`wire`](crate::wire) views. No allocation per packet, no lock, no panic on
//! any input; every drop has a [`DropReason`](crate::stats::DropReason).
//!
//! The L4 balancer stage that runs in front of the forwarder is a room of its own,
//! [`crate::balancer`]: it uses these stages, and nothing here uses it.
//!
//! Measured with `bench_forward` and `bench_forward_pipeline` (the forwarder),
//! `bench_balance` and `bench_balance_policy` (the balancer) and `bench_splice` (delayed
//! binding); history in `perf/NOTES.md`.
//!
//! Nothing here imports this file: it only names the rooms and re-exports what the rest of
//! the workspace uses, so the modules below form a graph without cycles.

pub mod announce;
mod config;
pub mod fib;
pub mod forward;
mod local;
pub mod nat;
pub mod neigh;
pub mod parse;
pub mod reply;
mod resolve;
pub mod snat;
pub mod stage;

pub use config::{ForwarderConfig, PortConf};
pub use fib::{Fib, FibError, IfAddr, NextHop, Route};
pub use forward::Forwarder;
pub use neigh::{NeighConfig, Neighbour, NeighbourCache, NeighbourEntry, NeighbourSource};
pub use stage::{Ctx, Stage, StageIo, Verdict, EXTRA_TX};
