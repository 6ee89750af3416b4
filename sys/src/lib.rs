//! `dpdk-sys`: raw bindings to DPDK.
//!
//! This crate is the only place (with `sluice-dataplane`'s port layer) where `unsafe`
//! code may live. The bindgen-generated surface (EAL, mempool, mbuf, ethdev, ring,
//! rte_flow) is produced by `build.rs` from `pkg-config libdpdk`.
