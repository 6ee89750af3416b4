//! DPDK vdev tests. DPDK allows one EAL per process, so each case runs in its own process
//! (`dpdk-case <case>`), with a time limit; the case itself asserts and prints `PASS`.
#![cfg(feature = "dpdk")]

use sluice_tests::sys::dpdk_case;
use std::time::Duration;

fn case(name: &str) {
    dpdk_case(
        env!("CARGO_BIN_EXE_dpdk-case"),
        name,
        Duration::from_secs(120),
    );
}

#[test]
fn net_ring_burst_io_and_loopback() {
    case("ring");
}

#[test]
fn net_null_bursts_through_the_worker() {
    case("null");
}

#[test]
fn net_pcap_replay_and_capture() {
    case("pcap");
}

#[test]
fn net_tap_with_the_kernel_on_the_other_side() {
    case("tap");
}
