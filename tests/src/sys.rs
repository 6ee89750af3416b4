//! Guards for kernel resources the tests create (from [`sluice_testkit::sys`], shared with
//! the benchmarks), and the runner of one DPDK case in its own process.

pub use sluice_testkit::sys::*;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs one DPDK case in its own process (DPDK allows one EAL per process): `bin` is the
/// `dpdk-case` executable (`env!("CARGO_BIN_EXE_dpdk-case")` in an integration test).
/// Panics unless it exits 0 and prints `PASS` within `limit`; prints its `PASS` line.
pub fn dpdk_case(bin: &str, name: &str, limit: Duration) {
    let dir = TempDir::new(&format!("sluice-dpdk-{name}"));
    let mut child = ChildGuard(
        Command::new(bin)
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
        if let Some(s) = child.0.try_wait().expect("wait for dpdk-case") {
            break s;
        }
        assert!(t.elapsed() < limit, "case {name} timed out");
        std::thread::sleep(Duration::from_millis(20));
    };
    let (mut out, mut err) = (String::new(), String::new());
    if let Some(mut o) = child.0.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    if let Some(mut e) = child.0.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    assert!(
        status.success() && out.contains("PASS"),
        "case {name}: {status}\n{out}\n{err}"
    );
    eprintln!("{}", out.trim());
}
