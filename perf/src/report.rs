//! The JSON report of a long benchmark: figures are added as they are measured, and with
//! `--out FILE` the report so far is written to the file after each one (marked
//! `"partial": true`), so that an interrupted run still leaves its figures behind. Also
//! the dataplane's counters as JSON ([`drops_json`], [`events_json`]).

use serde_json::{json, Value};
use sluice_dataplane::stats::{Counters, DropReason, Event};
use std::path::PathBuf;

/// A benchmark's JSON report, written to `out` (if any) after every figure.
#[derive(Debug)]
pub struct Report {
    /// The report so far.
    pub v: Value,
    /// Where to write it (`--out`).
    pub out: Option<PathBuf>,
    /// The benchmark's name, for progress lines on stderr.
    bench: &'static str,
}

impl Report {
    /// A report that starts as `v`, of benchmark `bench` (`bench_balance`, ...).
    pub fn new(bench: &'static str, v: Value, out: Option<PathBuf>) -> Report {
        Report { v, out, bench }
    }

    /// Sets figure `k` to `v`, says so on stderr and writes the partial report to `out`.
    pub fn set(&mut self, k: &str, v: Value) {
        self.v[k] = v;
        eprintln!("{}: {k} done", self.bench);
        if let Some(p) = &self.out {
            let mut partial = self.v.clone();
            partial["partial"] = json!(true);
            let _ = std::fs::write(
                p,
                serde_json::to_string_pretty(&partial).unwrap_or_default(),
            );
        }
    }

    /// Prints the complete report on stdout and writes it to `out`.
    pub fn finish(self) {
        let text = serde_json::to_string_pretty(&self.v).unwrap_or_default();
        println!("{text}");
        if let Some(p) = &self.out {
            let _ = std::fs::write(p, &text);
        }
    }
}

/// The drop counters of `c` that are not zero, by their stable names.
pub fn drops_json(c: &Counters) -> Value {
    let mut m = serde_json::Map::new();
    for r in DropReason::ALL {
        let n = c.drops_of(*r);
        if n > 0 {
            m.insert(r.name().to_string(), json!(n));
        }
    }
    Value::Object(m)
}

/// The event counters of `c` that are not zero, by their stable names.
pub fn events_json(c: &Counters) -> Value {
    let mut m = serde_json::Map::new();
    for e in Event::ALL {
        let n = c.events_of(*e);
        if n > 0 {
            m.insert(e.name().to_string(), json!(n));
        }
    }
    Value::Object(m)
}
