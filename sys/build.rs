//! Build script for `dpdk-sys`.
fn main() {}
