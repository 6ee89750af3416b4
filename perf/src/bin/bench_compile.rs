//! Control-plane scale benchmark, printed as JSON (never asserted): the time of each
//! phase of a reload (load, validate, IR, listener table, NetworkPolicy, and the whole
//! `compile::build`: all of them plus the snapshot and run plan) for `n` generated
//! listeners and routes in each [`Shape`] of
//! [`sluice_ctrl::synth`], and the growth factor from one size to the next (2.0 when a
//! size doubles and the phase is linear).
//!
//! Usage: `bench_compile [--sizes 1000,2000,4000,8000] [--maglev 1021] [--runs N]`
//! (`--help` explains). Medians over `--runs` runs.

use clap::Parser;
use serde_json::{json, Value};
use sluice_ctrl::compile::{build, build_ir, policy, tables};
use sluice_ctrl::load::{load_str, Loaded};
use sluice_ctrl::synth::{manifests, Shape};
use sluice_ctrl::validate;
use sluice_perf::stats::median;
use std::time::Instant;

/// Control-plane scale: the time of each phase of a reload for generated configurations
/// of N listeners and routes, per shape, with the growth from one size to the next.
/// Prints JSON.
#[derive(Parser, Debug)]
#[command(name = "bench_compile")]
struct Opts {
    /// Configuration sizes (listeners and routes), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000,2000,4000,8000")]
    sizes: Vec<usize>,
    /// Maglev table size of every route (a prime).
    #[arg(long, default_value_t = 1021)]
    maglev: u64,
    /// Runs per size and shape (at least 1); figures are their medians.
    #[arg(long, default_value_t = 1)]
    runs: usize,
}

fn main() {
    let o = Opts::parse();
    let (sizes, maglev, runs) = (o.sizes, o.maglev, o.runs.max(1));
    let mut report = json!({"bench": "compile", "maglev_table_size": maglev});
    for shape in Shape::ALL {
        let mut rows: Vec<Value> = Vec::new();
        for &n in &sizes {
            let text = manifests(shape, n, maglev);
            let phases = [
                "load",
                "validate",
                "build_ir",
                "listener_table",
                "policy",
                "build",
            ];
            let mut t: Vec<Vec<f64>> = vec![Vec::new(); phases.len()];
            let mut errors = Vec::new();
            for _ in 0..runs {
                let s = Instant::now();
                let mut loaded = Loaded::default();
                load_str("synth.yaml", &text, &mut loaded);
                t[0].push(s.elapsed().as_secs_f64());
                let s = Instant::now();
                validate::validate(&mut loaded);
                t[1].push(s.elapsed().as_secs_f64());
                let s = Instant::now();
                let mut diags = Vec::new();
                let ir = build_ir(&loaded.items, &mut diags);
                t[2].push(s.elapsed().as_secs_f64());
                let s = Instant::now();
                let lt = tables::listener_table(&ir);
                t[3].push(s.elapsed().as_secs_f64());
                if let Err(e) = lt {
                    errors.push(e.to_string());
                }
                let s = Instant::now();
                let p = policy::compile(&ir);
                t[4].push(s.elapsed().as_secs_f64());
                if let Err(e) = p {
                    errors.extend(e.iter().map(ToString::to_string));
                }
                let mut fresh = Loaded::default();
                load_str("synth.yaml", &text, &mut fresh);
                let s = Instant::now();
                let built = build(fresh);
                t[5].push(s.elapsed().as_secs_f64());
                if let Err(d) = built {
                    errors.extend(d.error_lines().into_iter().take(3));
                    break;
                }
            }
            let mut row = json!({"n": n});
            for (name, v) in phases.iter().zip(&t) {
                row[format!("{name}_s")] = json!(median(v));
            }
            // load + build: what a reload costs end to end.
            let total = |r: &Value, k: &str| r[k].as_f64().unwrap_or(0.0);
            row["reload_s"] = json!(total(&row, "load_s") + total(&row, "build_s"));
            if !errors.is_empty() {
                row["errors"] = json!(errors);
            }
            eprintln!("bench_compile: {} n={n}: {row}", shape.name());
            rows.push(row);
        }
        let growth: Vec<Value> = rows
            .windows(2)
            .map(|w| {
                let g = |k: &str| {
                    let a = w[0][k].as_f64().unwrap_or(0.0);
                    let b = w[1][k].as_f64().unwrap_or(0.0);
                    if a > 0.0 {
                        b / a
                    } else {
                        0.0
                    }
                };
                json!({
                    "from": w[0]["n"], "to": w[1]["n"],
                    "validate": g("validate_s"), "build_ir": g("build_ir_s"),
                    "listener_table": g("listener_table_s"), "policy": g("policy_s"),
                    "build": g("build_s"),
                    "reload": g("reload_s"),
                })
            })
            .collect();
        report[shape.name()] = json!({"sizes": rows, "growth": growth});
    }
    println!(
        "{}",
        serde_json::to_string_pretty(&report).unwrap_or_default()
    );
}
