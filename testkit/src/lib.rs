//! `sluice-testkit`: what sluice's integration tests (`sluice-tests`) and benchmarks
//! (`sluice-perf`) both need, so that neither depends on the other.
//!
//! - [`sys`]: guards for kernel resources (network namespaces, network devices, child
//!   processes, temporary directories) that clean up on drop, also when a test panics or
//!   a benchmark returns early, and unique interface names.
//! - [`config`]: manifest text loaded, validated and compiled into the IR or a
//!   [`Snapshot`](sluice_dataplane::tables::snapshot::Snapshot), the way a reload does.
//! - [`manifests`]: the manifest documents (Namespaces, Services, Pods) that fixtures
//!   write again and again.
//!
//! Nothing here needs DPDK.

pub mod config;
pub mod manifests;
pub mod sys;
