//! Manifest text compiled the way `sluice run` compiles a reload: load, validate,
//! compile to the IR, then build the dataplane's [`Snapshot`].

use sluice_ctrl::compile::ir::Ir;
use sluice_ctrl::compile::snapshot;
use sluice_ctrl::config::compile_loaded;
use sluice_ctrl::load::{load_str, Loaded};
use sluice_dataplane::tables::snapshot::Snapshot;

/// Loads, validates and compiles `text` (multi-document YAML or JSON, reported as file
/// `name`) into the IR, or returns every error.
pub fn try_ir(name: &str, text: &str) -> Result<Ir, Vec<String>> {
    let mut loaded = Loaded::default();
    load_str(name, text, &mut loaded);
    let c = compile_loaded(loaded);
    let errors: Vec<String> = c.errors().map(|d| d.to_string()).collect();
    if !errors.is_empty() {
        return Err(errors);
    }
    c.ir.ok_or_else(|| vec!["no IR".to_string()])
}

/// [`try_ir`], then the snapshot built from it: what a reload checks before it publishes
/// anything. Every error, of either step.
pub fn try_snapshot(name: &str, text: &str) -> Result<Snapshot, Vec<String>> {
    snapshot::build(&try_ir(name, text)?)
}

/// [`try_snapshot`], panicking with every error.
pub fn snapshot(name: &str, text: &str) -> Snapshot {
    try_snapshot(name, text).unwrap_or_else(|e| panic!("config errors: {e:#?}"))
}

/// The first five of `errors` joined by `; ` (one line for a benchmark's JSON).
pub fn brief(errors: &[String]) -> String {
    errors[..errors.len().min(5)].join("; ")
}
