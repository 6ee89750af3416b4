//! `sluice ctl` against a running `sluice run`, as the tests that start one call it.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

/// `BIN ctl --socket SOCKET ARGS...` (`bin`: the sluice binary under test).
pub fn ctl(bin: &str, socket: &Path, args: &[&str]) -> Output {
    Command::new(bin)
        .args(["ctl", "--socket"])
        .arg(socket)
        .args(args)
        .output()
        .expect("run sluice ctl")
}

/// [`ctl`] whose output must be JSON (`--json` among `args`).
pub fn ctl_json(bin: &str, socket: &Path, args: &[&str]) -> Value {
    let o = ctl(bin, socket, args);
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "ctl {args:?} prints JSON ({e}): {} {}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}
