//! The `sluice` command line: `check`, `explain`, `tables`, `run` and `ctl`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use sluice_ctrl::compile::ir::L4;
use sluice_ctrl::compile::{build_paths, check_machine, Built};
use sluice_ctrl::explain;
use sluice_ctrl::machine::Machine;

/// sluice: a userspace dataplane that enforces NetworkPolicy and routes TCP/TLS by port,
/// SNI or Host, configured with Kubernetes-style manifests.
#[derive(Parser, Debug)]
#[command(name = "sluice", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Load, validate and compile manifests, and check the Appliance against this
    /// machine (cores, memory, devices); print a summary, or every error as
    /// `file:line:col: Kind ns/name: field.path: message`. Exits 1 when the
    /// configuration is rejected or anything in it is not served.
    Check {
        /// Manifest files or directories (`-` for stdin).
        #[arg(short = 'c', long = "config", required = true, num_args = 1..)]
        config: Vec<PathBuf>,
        /// Print warnings and the Gateway API status of every object too (warnings are
        /// always printed when there are errors).
        #[arg(short, long)]
        verbose: bool,
        /// Treat warnings as errors (exit 1 when there is any), for CI pipelines.
        #[arg(long)]
        strict: bool,
        /// `text` (default) or `json`: every diagnostic with file, line, column,
        /// object, field, severity and message on stdout.
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Trace one hypothetical connection through the compiled configuration (JSON).
    Explain {
        /// Manifest files or directories (`-` for stdin).
        #[arg(short = 'c', long = "config", required = true, num_args = 1..)]
        config: Vec<PathBuf>,
        /// Transport protocol.
        #[arg(long, value_enum, default_value = "tcp")]
        proto: Proto,
        /// Client address, `IP:PORT` (`[v6]:PORT` for IPv6).
        #[arg(long)]
        src: SocketAddr,
        /// Destination address, `IP:PORT`.
        #[arg(long)]
        dst: SocketAddr,
        /// SNI the client sends.
        #[arg(long)]
        sni: Option<String>,
        /// HTTP Host the client sends.
        #[arg(long = "http-host")]
        http_host: Option<String>,
        /// HTTP method (default GET).
        #[arg(long = "http-method")]
        http_method: Option<String>,
        /// HTTP path, with an optional `?query` (default `/`).
        #[arg(long = "http-path")]
        http_path: Option<String>,
        /// An HTTP header, `Name: value` (repeatable).
        #[arg(long = "http-header", value_parser = explain::parse_header)]
        http_header: Vec<(String, String)>,
        /// `http` or `https` (default: `https` on a terminating listener).
        #[arg(long = "http-scheme")]
        http_scheme: Option<String>,
        /// File with the connection's first bytes (a ClientHello or an HTTP request),
        /// parsed the way the dataplane parses them.
        #[arg(long = "payload-file")]
        payload_file: Option<PathBuf>,
    },
    /// Run the dataplane: ports and pinned workers from the Appliance manifest (or the
    /// embedded default: TAP port `sl0` at 10.77.0.2/24, fd77::2/64).
    Run(sluice_ctrl::run::RunArgs),
    /// Talk to a running instance through its admin socket (stats, status, reload,
    /// neighbours).
    Ctl(sluice_ctrl::api::CtlArgs),
    /// The Gateway API status (`Accepted`, `ResolvedRefs`, `Programmed`, `Conflicted`)
    /// of every Gateway, listener and route of a configuration, and what is not served.
    Status {
        /// Manifest files or directories (`-` for stdin).
        #[arg(short = 'c', long = "config", required = true, num_args = 1..)]
        config: Vec<PathBuf>,
        /// `text` (default) or `json` (the upstream `status` stanza of each object).
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Dump the resolved configuration (listeners, routes, backends, workloads) as JSON.
    Tables {
        /// Manifest files or directories (`-` for stdin).
        #[arg(short = 'c', long = "config", required = true, num_args = 1..)]
        config: Vec<PathBuf>,
        /// Only this route (by name as printed in `routes[].name`).
        #[arg(long)]
        route: Option<String>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Output {
    Text,
    Json,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Proto {
    Tcp,
    Udp,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => sluice_ctrl::run::run(&args),
        Command::Ctl(args) => sluice_ctrl::api::ctl(&args),
        Command::Check {
            config,
            verbose,
            strict,
            output,
        } => check(&config, verbose, strict, output),
        Command::Explain {
            config,
            proto,
            src,
            dst,
            sni,
            http_host,
            http_method,
            http_path,
            http_header,
            http_scheme,
            payload_file,
        } => {
            let payload = match payload_file.map(std::fs::read).transpose() {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("sluice explain: cannot read the payload file: {e}");
                    return ExitCode::from(1);
                }
            };
            let Some(built) = built_or_errors(&config) else {
                return ExitCode::from(1);
            };
            let q = explain::Query {
                proto: match proto {
                    Proto::Tcp => L4::Tcp,
                    Proto::Udp => L4::Udp,
                },
                src,
                dst,
                sni,
                http_host,
                payload,
                http: explain::HttpQuery {
                    method: http_method,
                    path: http_path,
                    headers: http_header,
                    scheme: http_scheme,
                },
            };
            let v = explain::explain(&built, &q);
            sluice_ctrl::stdout::line(&serde_json::to_string_pretty(&v).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Command::Status { config, output } => {
            let Some(built) = built_or_errors(&config) else {
                return ExitCode::from(1);
            };
            for d in built.not_served() {
                eprintln!("{d}");
            }
            match output {
                Output::Json => sluice_ctrl::stdout::line(
                    &serde_json::to_string_pretty(&built.status_json()).unwrap_or_default(),
                ),
                Output::Text => sluice_ctrl::stdout::write(&built.status_text()),
            }
            ExitCode::SUCCESS
        }
        Command::Tables { config, route } => {
            let Some(built) = built_or_errors(&config) else {
                return ExitCode::from(1);
            };
            let v = built.tables_json(route.as_deref());
            match v {
                Some(v) => {
                    sluice_ctrl::stdout::line(
                        &serde_json::to_string_pretty(&v).unwrap_or_default(),
                    );
                    ExitCode::SUCCESS
                }
                None => {
                    eprintln!(
                        "sluice tables: no route named {:?}",
                        route.unwrap_or_default()
                    );
                    ExitCode::from(1)
                }
            }
        }
    }
}

/// `sluice check`: exit 1 when rejected, when anything is not served, or (`strict`)
/// when there is a warning.
fn check(config: &[PathBuf], verbose: bool, strict: bool, output: Output) -> ExitCode {
    let result = build_paths(config).and_then(|b| {
        check_machine(&b, &Machine::this())?;
        Ok(b)
    });
    let list = match &result {
        Ok(b) => &b.diagnostics,
        Err(d) => &d.list,
    };
    let errors = list.iter().filter(|d| d.is_error()).count();
    let not_served = list.iter().filter(|d| d.is_not_served()).count();
    let warnings = list.len() - errors - not_served;
    let failed = errors > 0 || not_served > 0 || (strict && warnings > 0);
    if output == Output::Json {
        let v = serde_json::json!({
            "ok": !failed,
            "rejected": result.is_err(),
            "errors": errors,
            "not_served": not_served,
            "warnings": warnings,
            "diagnostics": list.iter().map(|d| d.to_json()).collect::<Vec<_>>(),
            "status": result.as_ref().ok().map(|b| b.status_json()),
        });
        sluice_ctrl::stdout::line(&serde_json::to_string_pretty(&v).unwrap_or_default());
        return if failed {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        };
    }
    match &result {
        Err(d) => {
            for line in &d.list {
                eprintln!("{line}");
            }
            eprintln!(
                "sluice check: {errors} error(s), {not_served} not served, {warnings} warning(s); configuration rejected"
            );
        }
        Ok(built) => {
            for d in built.not_served() {
                eprintln!("{d}");
            }
            if verbose || strict {
                for d in built.warnings() {
                    eprintln!("{d}");
                }
            }
            sluice_ctrl::stdout::write(&built.summary());
            if verbose {
                sluice_ctrl::stdout::write(&built.status_text());
            }
            if failed {
                eprintln!(
                    "sluice check: {not_served} not served, {warnings} warning(s){}",
                    if strict { " (--strict)" } else { "" }
                );
            }
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Builds the configuration, or prints the errors and returns `None`.
fn built_or_errors(paths: &[PathBuf]) -> Option<Built> {
    match build_paths(paths) {
        Ok(b) => Some(b),
        Err(d) => {
            for e in d.errors() {
                eprintln!("{e}");
            }
            eprintln!("sluice: configuration rejected");
            None
        }
    }
}
