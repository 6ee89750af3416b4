//! Memory and CPU helpers for the tables and the hot path: [`HugeSlice`] (big lookup
//! arrays in whole, 2 MiB-aligned transparent huge pages), software prefetches, the
//! time-stamp counter and a SIMD fingerprint compare.
//!
//! Nothing here knows about packets or ports. With `port/`, `rcu.rs` and `dpdk-sys`, this
//! is one of the places sluice's `unsafe` lives; every block carries a `// SAFETY:`
//! comment.

mod cpu;
mod huge;

pub use cpu::{eq_lanes_u16x32, prefetch_l2, prefetch_line, prefetch_read, tsc, tsc_hz};
pub use huge::HugeSlice;
