//! Manifest text built the way `sluice run` builds a reload ([`sluice_ctrl::compile::build()`]):
//! load, validate, compile, then the dataplane's [`Snapshot`].

use sluice_ctrl::compile::ir::Ir;
use sluice_ctrl::compile::{build, Built};
use sluice_ctrl::load::{load_str, Loaded};
use sluice_dataplane::tables::snapshot::Snapshot;

/// Loads and builds `text` (multi-document YAML or JSON, reported as file `name`), or
/// returns every error.
pub fn try_build(name: &str, text: &str) -> Result<Built, Vec<String>> {
    let mut loaded = Loaded::default();
    load_str(name, text, &mut loaded);
    build(loaded).map_err(|d| d.error_lines())
}

/// The IR of [`try_build`].
pub fn try_ir(name: &str, text: &str) -> Result<Ir, Vec<String>> {
    try_build(name, text).map(|b| b.ir)
}

/// The snapshot of [`try_build`]: what a reload checks before it publishes anything.
pub fn try_snapshot(name: &str, text: &str) -> Result<Snapshot, Vec<String>> {
    try_build(name, text).map(|b| b.snapshot)
}

/// [`try_snapshot`], panicking with every error.
pub fn snapshot(name: &str, text: &str) -> Snapshot {
    try_snapshot(name, text).unwrap_or_else(|e| panic!("config errors: {e:#?}"))
}

/// The first five of `errors` joined by `; ` (one line for a benchmark's JSON).
pub fn brief(errors: &[String]) -> String {
    errors[..errors.len().min(5)].join("; ")
}
