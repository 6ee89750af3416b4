//! DPDK vdev tests. DPDK allows one EAL per process, so each case runs in its own process
//! (`dpdk-case <case>`), with a time limit; the case itself asserts and prints `PASS`.
#![cfg(feature = "dpdk")]

use sluice_tests::sys::{ChildGuard, TempDir};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn case(name: &str) {
    let dir = TempDir::new(&format!("sluice-dpdk-{name}"));
    let mut child = ChildGuard(
        Command::new(env!("CARGO_BIN_EXE_dpdk-case"))
            .arg(name)
            .arg(&dir.0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start dpdk-case"),
    );
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "case {name} timed out"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let (mut out, mut err) = (String::new(), String::new());
    let _ = child.0.stdout.take().unwrap().read_to_string(&mut out);
    let _ = child.0.stderr.take().unwrap().read_to_string(&mut err);
    assert!(
        status.success() && out.contains("PASS"),
        "case {name}: {status}\n{out}\n{err}"
    );
    eprintln!("{}", out.trim());
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
