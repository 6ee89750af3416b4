//! `sluice ctl`: the admin socket's client, and the human forms of its answers.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;

use super::server::RELOAD_TIMEOUT;

/// Why `sluice ctl` got no answer.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// Nothing listens on the socket.
    #[error("cannot reach sluice at {path}: {source} (is `sluice run` running?)")]
    Unreachable {
        /// The socket.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Sending the command or reading the answer failed.
    #[error("talking to sluice: {0}")]
    Io(#[from] std::io::Error),
    /// The answer is not JSON.
    #[error("bad answer from sluice: {0}")]
    BadAnswer(#[from] serde_json::Error),
}

/// `sluice ctl` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct CtlArgs {
    /// Admin socket of the running instance.
    #[arg(long, default_value = crate::plan::DEFAULT_ADMIN_SOCKET)]
    pub socket: PathBuf,
    /// What to ask.
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// `sluice ctl` commands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum CtlCommand {
    /// Counters: per port, per worker, drops by reason, per HTTP rule.
    Stats {
        /// Print the raw JSON document.
        #[arg(long)]
        json: bool,
    },
    /// The neighbour cache (IP -> MAC, and whether each entry is `static`, `resolved` or
    /// `learned`), as JSON.
    Neighbours,
    /// Reload the configuration now; prints the outcome, exits 1 when it was rejected
    /// (the running tables keep serving).
    Reload {
        /// Print the raw JSON document.
        #[arg(long)]
        json: bool,
    },
    /// Tables generation, configuration paths, last reload, flows per worker, uptime.
    Status {
        /// Print the raw JSON document.
        #[arg(long)]
        json: bool,
    },
}

/// Sends one command to a running instance and returns its JSON answer.
pub fn query(socket: &Path, cmd: &str) -> Result<Value, CtlError> {
    let wait = if cmd == "reload" {
        RELOAD_TIMEOUT + Duration::from_secs(5)
    } else {
        Duration::from_secs(5)
    };
    query_with_timeout(socket, cmd, wait)
}

/// [`query`], waiting at most `wait` for the answer.
pub fn query_with_timeout(socket: &Path, cmd: &str, wait: Duration) -> Result<Value, CtlError> {
    let mut s = UnixStream::connect(socket).map_err(|source| CtlError::Unreachable {
        path: socket.to_path_buf(),
        source,
    })?;
    let _ = s.set_read_timeout(Some(wait));
    writeln!(s, "{cmd}")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(serde_json::from_str(out.trim())?)
}

/// `sluice ctl`: prints the answer of the running instance. Prints errors itself.
pub fn ctl(args: &CtlArgs) -> ExitCode {
    let cmd = match &args.command {
        CtlCommand::Stats { .. } => "stats",
        CtlCommand::Neighbours => "neighbours",
        CtlCommand::Reload { .. } => "reload",
        CtlCommand::Status { .. } => "status",
    };
    let v = match query(&args.socket, cmd) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("sluice ctl: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(e) = v.get("error") {
        eprintln!("sluice ctl: {e}");
        return ExitCode::FAILURE;
    }
    match &args.command {
        CtlCommand::Stats { json: false } => crate::stdout::write(&human_stats(&v)),
        CtlCommand::Status { json: false } => crate::stdout::write(&human_status(&v)),
        CtlCommand::Reload { json: false } => crate::stdout::write(&human_reload(&v)),
        _ => crate::stdout::line(&serde_json::to_string_pretty(&v).unwrap_or_default()),
    }
    if matches!(args.command, CtlCommand::Reload { .. }) && v["ok"] != Value::Bool(true) {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// The human form of a `reload` answer.
pub fn human_reload(v: &Value) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    if v["ok"].as_bool() == Some(true) {
        let _ = writeln!(s, "reload ok: tables generation {}", v["generation"]);
    } else {
        let _ = writeln!(
            s,
            "reload rejected; tables generation {} keeps serving:",
            v["generation"]
        );
        for e in v["errors"].as_array().into_iter().flatten() {
            let _ = writeln!(s, "  {}", e.as_str().unwrap_or_default());
        }
    }
    s
}

/// The human form of a `status` document.
pub fn human_status(v: &Value) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "tables generation {} ({} older waiting to be freed), uptime {:.1} s",
        v["generation"],
        v["pending_snapshots"],
        v["uptime_s"].as_f64().unwrap_or(0.0)
    );
    let paths = strings(&v["config"]);
    let _ = writeln!(
        s,
        "config: {}{}",
        if paths.is_empty() {
            "(none)".to_string()
        } else {
            paths.join(", ")
        },
        if v["embedded_default"].as_bool() == Some(true) {
            " (embedded default Appliance)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        s,
        "reloads: {} ok, {} rejected",
        v["reloads"]["ok"], v["reloads"]["failed"]
    );
    let l = &v["last_reload"];
    if l.is_null() {
        let _ = writeln!(s, "last reload: none");
    } else {
        let _ = writeln!(
            s,
            "last reload: {} ({}) {}",
            l["time"].as_str().unwrap_or("?"),
            l["trigger"].as_str().unwrap_or("?"),
            if l["ok"].as_bool() == Some(true) {
                format!("ok, generation {}", l["generation"])
            } else {
                "rejected:".to_string()
            }
        );
        for e in l["errors"].as_array().into_iter().flatten() {
            let _ = writeln!(s, "  {}", e.as_str().unwrap_or_default());
        }
    }
    let served = v["addresses"].as_array().map_or(&[][..], Vec::as_slice);
    if !served.is_empty() {
        let _ = writeln!(s, "served addresses: {}", served.len());
        for a in served {
            let owners = strings(&a["owners"]);
            let _ = writeln!(
                s,
                "  {} on {} ({})",
                a["address"].as_str().unwrap_or("?"),
                a["port"].as_str().unwrap_or("?"),
                owners.join(", ")
            );
        }
    }
    let not_served = strings(&v["not_served"]);
    if !not_served.is_empty() {
        let _ = writeln!(s, "not served: {}", not_served.len());
        for n in not_served {
            let _ = writeln!(s, "  {n}");
        }
    }
    let _ = writeln!(s, "flows: {}", v["flows"]);
    for w in v["workers"].as_array().into_iter().flatten() {
        let _ = writeln!(
            s,
            "  worker {} (core {}): {} flows",
            w["id"], w["core"], w["flows"]
        );
    }
    s
}

/// The strings of a JSON array (nothing for anything else).
fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// The human form of a `stats` document.
pub fn human_stats(v: &Value) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "uptime {:.1} s, tables generation {}",
        v["uptime_s"].as_f64().unwrap_or(0.0),
        v["generation"]
    );
    for p in v["ports"].as_array().into_iter().flatten() {
        let w = &p["workers"];
        let _ = writeln!(
            s,
            "port {} ({}, link {}): rx {} pkts {} bytes, tx {} pkts {} bytes",
            p["name"].as_str().unwrap_or("?"),
            p["mac"].as_str().unwrap_or("?"),
            if p["link"]["up"].as_bool() == Some(true) {
                "up"
            } else {
                "down"
            },
            w["rx_packets"],
            w["rx_bytes"],
            w["tx_packets"],
            w["tx_bytes"]
        );
    }
    for w in v["workers"].as_array().into_iter().flatten() {
        let _ = writeln!(
            s,
            "worker {} (core {}): {} packets, {} flows, {:.1} cycles/packet, {} empty polls",
            w["id"],
            w["core"],
            w["packets"],
            w["flows"],
            w["cycles_per_packet"].as_f64().unwrap_or(0.0),
            w["empty_polls"]
        );
    }
    let _ = writeln!(s, "flows: {}", v["total"]["flows"]);
    if let Some(m) = v["total"]["events"].as_object() {
        let nonzero: Vec<String> = m
            .iter()
            .filter(|(_, n)| n.as_u64().unwrap_or(0) > 0)
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        if !nonzero.is_empty() {
            let _ = writeln!(s, "events: {}", nonzero.join(", "));
        }
    }
    let _ = writeln!(s, "drops: {}", v["total"]["drops_total"]);
    if let Some(m) = v["total"]["drops"].as_object() {
        for (k, n) in m {
            let _ = writeln!(s, "  {k}: {n}");
        }
    }
    // Per HTTP rule: the ones that had requests (the JSON has every rule).
    let rules = v["http_rules"].as_array().map_or(&[][..], Vec::as_slice);
    let counted: Vec<&Value> = rules
        .iter()
        .filter(|r| r["requests"].as_u64().unwrap_or(0) > 0)
        .collect();
    if !rules.is_empty() {
        let _ = writeln!(
            s,
            "http rules: {} ({} with requests)",
            rules.len(),
            counted.len()
        );
    }
    for r in counted {
        let _ = writeln!(
            s,
            "  {}: requests {}, responses 1xx {} 2xx {} 3xx {} 4xx {} 5xx {}",
            r["rule"].as_str().unwrap_or("?"),
            r["requests"],
            r["responses_1xx"],
            r["responses_2xx"],
            r["responses_3xx"],
            r["responses_4xx"],
            r["responses_5xx"]
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_list_the_rules_that_had_requests() {
        let v = serde_json::json!({
            "uptime_s": 1.0, "generation": 2, "ports": [], "workers": [],
            "total": {"flows": 0, "events": {}, "drops": {}, "drops_total": 0},
            "http_rules": [
                {"rule": "HTTPRoute t/a rules[0]", "requests": 3, "responses_1xx": 0,
                 "responses_2xx": 2, "responses_3xx": 0, "responses_4xx": 0,
                 "responses_5xx": 1},
                {"rule": "HTTPRoute t/b rules[0]", "requests": 0, "responses_1xx": 0,
                 "responses_2xx": 0, "responses_3xx": 0, "responses_4xx": 0,
                 "responses_5xx": 0},
            ],
        });
        let s = human_stats(&v);
        assert!(
            s.contains(
                "http rules: 2 (1 with requests)\n  HTTPRoute t/a rules[0]: requests 3, \
                 responses 1xx 0 2xx 2 3xx 0 4xx 0 5xx 1\n"
            ),
            "{s}"
        );
        assert!(!s.contains("t/b"), "{s}");
    }

    #[test]
    fn status_lists_what_is_not_served() {
        let v = serde_json::json!({
            "generation": 3, "pending_snapshots": 0, "uptime_s": 1.0,
            "config": ["a.yaml"], "flows": 0, "workers": [],
            "not_served": ["not served (NoMatchingParent): a.yaml:3:1: TLSRoute x/y: spec.parentRefs[0]: ..."],
        });
        let s = human_status(&v);
        assert!(s.contains("config: a.yaml"), "{s}");
        assert!(
            s.contains("not served: 1\n  not served (NoMatchingParent): a.yaml:3:1: TLSRoute x/y"),
            "{s}"
        );
    }
}
