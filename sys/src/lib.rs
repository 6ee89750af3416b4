//! `dpdk-sys`: raw bindings to DPDK.
//!
//! This crate is one of the few places where `unsafe` code may live (the others are
//! `sluice-dataplane`'s `port` and `mem` modules and its `rcu.rs`). The bindgen-generated surface (EAL, lcores, mempool, mbuf, ethdev with
//! RSS/RETA and rte_flow, ring) is produced by `build.rs` from `pkg-config libdpdk`.
//!
//! `static inline` functions of the DPDK headers (`rte_eth_rx_burst`, `rte_pktmbuf_free`,
//! ...) are reachable through exported C wrappers that bindgen's `wrap_static_fns`
//! generates; they keep their DPDK names here. Macros and thread-locals come from a small
//! shim: [`sluice_rte_errno`], [`sluice_lcore_id`], [`sluice_mbuf_set_len`], ...
//!
//! Everything here is raw FFI: the safe owning types (mbufs, ports, the EAL) live in
//! `sluice-dataplane`'s `port::dpdk`.

/// The generated bindings. Generated code (bitfield accessors) holds unsafe blocks without
/// SAFETY comments; the lint is allowed for this module only.
#[allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    missing_docs
)]
#[allow(clippy::all, clippy::pedantic, clippy::undocumented_unsafe_blocks)]
#[allow(rustdoc::all, improper_ctypes, unsafe_op_in_unsafe_fn)]
mod ffi {
    include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
}
pub use ffi::*;

/// The symmetric RSS key: `0x6d5a` repeated (40 bytes), so both directions of a flow hash
/// to the same queue (Woo and Park, "Scalable TCP Session Monitoring with Symmetric RSS").
pub const SYMMETRIC_RSS_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a,
    0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a,
    0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a,
];
