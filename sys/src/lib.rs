//! `dpdk-sys`: raw bindings to DPDK.
//!
//! This crate is the only place (with `sluice-dataplane`'s port layer) where `unsafe`
//! code may live. The bindgen-generated surface (EAL, lcores, mempool, mbuf, ethdev with
//! RSS/RETA and rte_flow, ring) is produced by `build.rs` from `pkg-config libdpdk`.
//!
//! `static inline` functions of the DPDK headers (`rte_eth_rx_burst`, `rte_pktmbuf_free`,
//! ...) are reachable through exported C wrappers that bindgen's `wrap_static_fns`
//! generates; they keep their DPDK names here. Macros and thread-locals come from a small
//! shim: [`sluice_rte_errno`], [`sluice_lcore_id`], [`sluice_mbuf_set_len`], ...
//!
//! Everything here is raw FFI: the safe owning types (mbufs, ports, the EAL) live in
//! `sluice-dataplane`'s `port::dpdk`.
#![allow(non_upper_case_globals, non_camel_case_types, non_snake_case)]
#![allow(missing_docs, clippy::all, clippy::pedantic, unsafe_code)]
#![allow(rustdoc::all, improper_ctypes)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

/// The symmetric RSS key: `0x6d5a` repeated (40 bytes), so both directions of a flow hash
/// to the same queue (Woo and Park, "Scalable TCP Session Monitoring with Symmetric RSS").
pub const SYMMETRIC_RSS_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a,
    0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a,
    0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a,
];
