//! Dataplane tables compiled from manifest text, the way `sluice run` builds them.

use sluice_ctrl::compile::snapshot;
use sluice_ctrl::config::compile_loaded;
use sluice_ctrl::load::{load_str, Loaded};
use sluice_dataplane::tables::snapshot::Snapshot;

/// Loads, validates and compiles `text` (multi-document YAML) into a [`Snapshot`];
/// panics with every diagnostic if the configuration has errors.
pub fn snapshot_from_yaml(name: &str, text: &str) -> Snapshot {
    let mut loaded = Loaded::default();
    load_str(name, text, &mut loaded);
    let c = compile_loaded(loaded);
    let errors: Vec<String> = c.errors().map(|d| d.to_string()).collect();
    assert!(errors.is_empty(), "config errors: {errors:#?}");
    snapshot::build(c.ir.as_ref().expect("ir")).expect("snapshot")
}
