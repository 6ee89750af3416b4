//! The command line: what to run, how long and how often, and where to write it.

use crate::replay::SourceKind;
use clap::Parser;
use std::path::PathBuf;

/// The L4 balancer: Mpps and cycles per packet with 1k/100k/1M established flows beside
/// `dpdk-testpmd` macswap, new connections per second per core, bytes per flow, and
/// snapshot build/publish latency with 10k routes under traffic. Prints JSON.
#[derive(Parser, Debug)]
#[command(name = "bench_balance")]
pub(crate) struct Opts {
    /// Seconds per run (at least 0.1; the swap test runs twice as long).
    #[arg(long, default_value_t = 2.0)]
    pub(crate) duration: f64,
    /// Runs per figure (at least 1); figures are their medians.
    #[arg(long, default_value_t = 3)]
    pub(crate) runs: usize,
    /// Leave out the dpdk-testpmd comparison.
    #[arg(long = "no-testpmd", action = clap::ArgAction::SetFalse)]
    pub(crate) testpmd: bool,
    /// 1k and 100k established flows only (not 1M).
    #[arg(long)]
    pub(crate) quick: bool,
    /// Milliseconds between snapshot swaps under traffic.
    #[arg(long, default_value_t = 50)]
    pub(crate) swap_interval_ms: u64,
    /// Maglev table size (slots) of the swap test's 10k routes.
    #[arg(long, default_value_t = 1021)]
    pub(crate) swap_maglev: u64,
    /// Also write the JSON to FILE, after every figure (then complete).
    #[arg(long, value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
    /// Only the balancer on the replay with N established flows (for profiling).
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "1000")]
    pub(crate) only_flows: Option<usize>,
    /// With `--only-flows`: the replay's source.
    #[arg(long, value_enum, default_value_t = SourceKind::Capture)]
    pub(crate) source: SourceKind,
    /// With `--only-flows`: the backends' replies too.
    #[arg(long = "both-directions")]
    pub(crate) both: bool,
    /// Only the new-connections figure (for profiling).
    #[arg(long = "only-new-connections")]
    pub(crate) only_new: bool,
    /// With `--only-flows`: the flow table's capacity (at least 1; default: the default
    /// capacity, or N flows if more).
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "1024")]
    pub(crate) capacity: Option<usize>,
}

pub(crate) fn opts() -> Opts {
    let mut o = Opts::parse();
    o.duration = o.duration.max(0.1);
    o.runs = o.runs.max(1);
    o.capacity = o.capacity.map(|c| c.max(1));
    o
}
