//! The command line: what to run, how long and how often, and where to write it.

use clap::Parser;
use std::path::PathBuf;

/// Delayed binding (SNI passthrough) driven in process: new passthrough connections per
/// second per core, spliced against plain forwarding, bytes per embryo and per spliced
/// flow. Prints JSON.
#[derive(Parser, Debug)]
#[command(name = "bench_splice")]
pub(crate) struct Opts {
    /// Seconds per run (at least 0.1).
    #[arg(long, default_value_t = 2.0)]
    pub(crate) duration: f64,
    /// Runs (at least 1); figures are their medians.
    #[arg(long, default_value_t = 3)]
    pub(crate) runs: usize,
    /// Flow counts of the forwarding comparison, comma-separated (`""` skips it).
    #[arg(long = "flows", value_name = "N,...", default_value = "1000,100000")]
    pub(crate) flows_list: String,
    /// Time stage calls on the TSC alone (for a quiet machine).
    #[arg(long)]
    pub(crate) tsc_only: bool,
    /// Keep conntrack's SYN timeouts (shows how many connections the table takes).
    #[arg(long)]
    pub(crate) long_timeouts: bool,
    /// Also write the JSON to FILE, after every figure (then complete).
    #[arg(long, value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
    /// The flow counts of `--flows`.
    #[arg(skip)]
    pub(crate) flows: Vec<usize>,
}

pub(crate) fn opts() -> Opts {
    let mut o = Opts::parse();
    o.duration = o.duration.max(0.1);
    o.runs = o.runs.max(1);
    o.flows = o
        .flows_list
        .split(',')
        .filter_map(|n| n.parse().ok())
        .collect();
    o
}
