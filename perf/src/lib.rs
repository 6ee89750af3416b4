//! `sluice-perf`: benchmarks that print their figures as JSON.
//!
//! Every hot-path component has a binary under `src/bin/` that measures it and, where a
//! peer exists on the machine (DPDK's `dpdk-testpmd`, `dpdk-test-acl`; HAProxy; nginx),
//! reports a side-by-side ratio from the same run. Numbers are printed, never asserted.
