//! `sluice run` / `sluice ctl` for the integration tests: the same library entry points as
//! the `sluice` binary (`sluice_ctrl::run::run`, `sluice_ctrl::api::ctl`), built inside
//! this package so every test run has it (`CARGO_BIN_EXE_sluice-run`).

use clap::Parser;
use std::process::ExitCode;

/// Test front-end of `sluice run` and `sluice ctl`.
#[derive(Parser, Debug)]
#[command(name = "sluice-run")]
enum Cli {
    /// Run the dataplane.
    Run(sluice_ctrl::run::RunArgs),
    /// Talk to a running instance.
    Ctl(sluice_ctrl::api::CtlArgs),
}

fn main() -> ExitCode {
    match Cli::parse() {
        Cli::Run(a) => sluice_ctrl::run::run(&a),
        Cli::Ctl(a) => sluice_ctrl::api::ctl(&a),
    }
}
