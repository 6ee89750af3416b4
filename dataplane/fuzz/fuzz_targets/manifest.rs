#![no_main]
//! The manifest loader and compiler (`sluice_ctrl::load::load_str`, then
//! `sluice_ctrl::compile::build`, as `sluice check` and every reload run them) on
//! arbitrary text: multi-document YAML or JSON.
//!
//! Contract: no panic, no unbounded time or memory (the smoke and the campaign run with
//! `-timeout=10 -rss_limit_mb=2048`); a rejected configuration says why (at least one
//! error line); an accepted one has tables and a run plan.

use libfuzzer_sys::fuzz_target;
use sluice_ctrl::compile::build;
use sluice_ctrl::load::{load_str, Loaded};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut loaded = Loaded::default();
    load_str("fuzz.yaml", &text, &mut loaded);
    match build(loaded) {
        Ok(built) => {
            assert!(built.warnings().all(|d| !d.is_error()));
            assert!(!built.plan.cores.is_empty());
            let _ = format!("{:?}", built.ir);
        }
        Err(d) => {
            let lines = d.error_lines();
            assert!(!lines.is_empty(), "rejected without an error");
            for l in &lines {
                assert!(!l.is_empty());
            }
        }
    }
});
