//! The admin API: a unix socket served by the running `sluice run`, and `sluice ctl`, its
//! client.
//!
//! Protocol: the client connects, writes one command line (`stats` or `neighbours`), and
//! reads one JSON document followed by a newline; the server then closes the connection.
//! `stats` returns the same counters as the once-per-second summary: per port (device
//! counters and what the workers moved), per worker (packets, bytes, drops by reason,
//! empty polls, cycles per packet) and totals.

use crate::run::Running;
use serde_json::{json, Map, Value};
use sluice_dataplane::port::{LinkState, PortStats};
use sluice_dataplane::stats::{Counters, DropReason, PortCounters};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// `sluice ctl` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct CtlArgs {
    /// Admin socket of the running instance.
    #[arg(long, default_value = crate::run::DEFAULT_ADMIN_SOCKET)]
    pub socket: PathBuf,
    /// What to ask.
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// `sluice ctl` commands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum CtlCommand {
    /// Counters: per port, per worker, drops by reason.
    Stats {
        /// Print the raw JSON document.
        #[arg(long)]
        json: bool,
    },
    /// The neighbour cache (IP -> MAC), as JSON.
    Neighbours,
}

/// One port in a [`Snapshot`].
#[derive(Debug, Clone)]
pub struct PortSnap {
    /// Name.
    pub name: String,
    /// sluice's MAC.
    pub mac: String,
    /// Link state.
    pub link: LinkState,
    /// Device counters.
    pub device: PortStats,
    /// What the workers moved through it (sum over workers).
    pub moved: PortCounters,
}

/// Counters of a running instance at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Seconds since start.
    pub uptime_s: f64,
    /// Ports.
    pub ports: Vec<PortSnap>,
    /// Workers: (id, core, counters).
    pub workers: Vec<(usize, usize, Counters)>,
    /// Sum over workers.
    pub total: Counters,
}

impl Snapshot {
    pub(crate) fn take(r: &Running) -> Snapshot {
        let workers: Vec<(usize, usize, Counters)> = r
            .workers
            .iter()
            .map(|(id, core, s)| (*id, *core, s.snapshot()))
            .collect();
        let mut total = Counters::new(r.ports.len());
        for (_, _, c) in &workers {
            total.add(c);
        }
        let ports = r
            .ports
            .iter()
            .enumerate()
            .map(|(i, (name, p))| PortSnap {
                name: name.clone(),
                mac: p.mac().to_string(),
                link: p.link(),
                device: p.stats(),
                moved: total.ports.get(i).copied().unwrap_or_default(),
            })
            .collect();
        Snapshot {
            uptime_s: r.started.elapsed().as_secs_f64(),
            ports,
            workers,
            total,
        }
    }

    /// The JSON document `sluice ctl stats` prints.
    pub fn to_json(&self) -> Value {
        let drops = |c: &Counters| {
            let mut m = Map::new();
            for r in DropReason::ALL {
                let n = c.drops_of(*r);
                if n > 0 {
                    m.insert(r.name().to_string(), json!(n));
                }
            }
            Value::Object(m)
        };
        let moved = |p: &PortCounters| {
            json!({"rx_packets": p.rx_packets, "rx_bytes": p.rx_bytes,
                   "tx_packets": p.tx_packets, "tx_bytes": p.tx_bytes})
        };
        json!({
            "uptime_s": self.uptime_s,
            "ports": self.ports.iter().map(|p| json!({
                "name": p.name,
                "mac": p.mac,
                "link": match p.link { LinkState::Up { speed_mbps } => json!({"up": true, "speed_mbps": speed_mbps}), LinkState::Down => json!({"up": false}) },
                "device": {
                    "rx_packets": p.device.rx_packets, "rx_bytes": p.device.rx_bytes,
                    "tx_packets": p.device.tx_packets, "tx_bytes": p.device.tx_bytes,
                    "rx_missed": p.device.rx_missed, "rx_errors": p.device.rx_errors,
                    "tx_errors": p.device.tx_errors,
                },
                "workers": moved(&p.moved),
            })).collect::<Vec<_>>(),
            "workers": self.workers.iter().map(|(id, core, c)| json!({
                "id": id,
                "core": core,
                "ports": c.ports.iter().map(moved).collect::<Vec<_>>(),
                "drops": drops(c),
                "empty_polls": c.empty_polls,
                "busy_polls": c.busy_polls,
                "packets": c.packets,
                "cycles_per_packet": c.cycles_per_packet(),
            })).collect::<Vec<_>>(),
            "total": {
                "drops": drops(&self.total),
                "drops_total": self.total.total_drops(),
                "packets": self.total.packets,
                "cycles_per_packet": self.total.cycles_per_packet(),
            },
        })
    }

    /// The once-per-second line: per port rx/tx pps and bit rate since `prev`, and drops.
    pub fn summary_line(&self, prev: &Snapshot, dt: f64) -> String {
        let dt = dt.max(1e-3);
        let mut parts = Vec::new();
        for (i, p) in self.ports.iter().enumerate() {
            let q = prev.ports.get(i).map(|q| q.moved).unwrap_or_default();
            let rate = |a: u64, b: u64| a.saturating_sub(b) as f64 / dt;
            parts.push(format!(
                "{}: rx {:.0} pps {} tx {:.0} pps {}",
                p.name,
                rate(p.moved.rx_packets, q.rx_packets),
                bits(rate(p.moved.rx_bytes, q.rx_bytes) * 8.0),
                rate(p.moved.tx_packets, q.tx_packets),
                bits(rate(p.moved.tx_bytes, q.tx_bytes) * 8.0),
            ));
        }
        let d = self
            .total
            .total_drops()
            .saturating_sub(prev.total.total_drops());
        format!(
            "{} | drops {:.0}/s{}",
            parts.join(" | "),
            d as f64 / dt,
            top_drops(&self.total)
        )
    }

    /// Totals since start, for the last line.
    pub fn totals_line(&self) -> String {
        let parts: Vec<String> = self
            .ports
            .iter()
            .map(|p| {
                format!(
                    "{}: rx {} tx {}",
                    p.name, p.moved.rx_packets, p.moved.tx_packets
                )
            })
            .collect();
        format!(
            "{} | drops {}{}",
            parts.join(" | "),
            self.total.total_drops(),
            top_drops(&self.total)
        )
    }
}

fn top_drops(c: &Counters) -> String {
    let mut v: Vec<(u64, &str)> = DropReason::ALL
        .iter()
        .map(|r| (c.drops_of(*r), r.name()))
        .filter(|(n, _)| *n > 0)
        .collect();
    if v.is_empty() {
        return String::new();
    }
    v.sort_by_key(|e| std::cmp::Reverse(e.0));
    let s: Vec<String> = v.iter().take(4).map(|(n, r)| format!("{r} {n}")).collect();
    format!(" (total: {})", s.join(", "))
}

fn bits(bps: f64) -> String {
    if bps >= 1e9 {
        format!("{:.2} Gbit/s", bps / 1e9)
    } else if bps >= 1e6 {
        format!("{:.2} Mbit/s", bps / 1e6)
    } else if bps >= 1e3 {
        format!("{:.1} kbit/s", bps / 1e3)
    } else {
        format!("{bps:.0} bit/s")
    }
}

fn answer(cmd: &str, r: &Running) -> Value {
    match cmd.trim() {
        "stats" => r.snapshot().to_json(),
        "neighbours" => Value::Array(
            r.neighbours
                .entries()
                .into_iter()
                .map(|(ip, mac)| json!({"ip": ip.to_string(), "mac": mac.to_string()}))
                .collect(),
        ),
        other => json!({"error": format!("unknown command {other:?}; try stats or neighbours")}),
    }
}

fn handle(mut s: UnixStream, r: &Running) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
    let mut line = String::new();
    {
        let mut rd = BufReader::new((&s).take(4096));
        if rd.read_line(&mut line).is_err() {
            return;
        }
    }
    let v = answer(&line, r);
    let _ = writeln!(s, "{v}");
}

/// Serves the admin socket on a thread until `stop` is set; removes the socket file on
/// exit. A stale socket file from an earlier run is replaced.
pub(crate) fn serve(
    path: &Path,
    r: Arc<Running>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)?;
        }
    }
    if path.exists() && UnixStream::connect(path).is_err() {
        std::fs::remove_file(path)?;
    }
    let l = UnixListener::bind(path)?;
    l.set_nonblocking(true)?;
    let path = path.to_path_buf();
    std::thread::Builder::new()
        .name("sluice-admin".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((s, _)) => {
                        let _ = s.set_nonblocking(false);
                        handle(s, &r);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
            let _ = std::fs::remove_file(&path);
        })
}

/// Sends one command to a running instance and returns its JSON answer.
pub fn query(socket: &Path, cmd: &str) -> Result<Value, String> {
    let mut s = UnixStream::connect(socket).map_err(|e| {
        format!(
            "cannot reach sluice at {}: {e} (is `sluice run` running?)",
            socket.display()
        )
    })?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    writeln!(s, "{cmd}").map_err(|e| e.to_string())?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| e.to_string())?;
    serde_json::from_str(out.trim()).map_err(|e| format!("bad answer from sluice: {e}"))
}

/// `sluice ctl`: prints the answer of the running instance. Prints errors itself.
pub fn ctl(args: &CtlArgs) -> ExitCode {
    let cmd = match &args.command {
        CtlCommand::Stats { .. } => "stats",
        CtlCommand::Neighbours => "neighbours",
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
        _ => crate::stdout::line(&serde_json::to_string_pretty(&v).unwrap_or_default()),
    }
    ExitCode::SUCCESS
}

/// The human form of a `stats` document.
pub fn human_stats(v: &Value) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "uptime {:.1} s", v["uptime_s"].as_f64().unwrap_or(0.0));
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
            "worker {} (core {}): {} packets, {:.1} cycles/packet, {} empty polls",
            w["id"],
            w["core"],
            w["packets"],
            w["cycles_per_packet"].as_f64().unwrap_or(0.0),
            w["empty_polls"]
        );
    }
    let _ = writeln!(s, "drops: {}", v["total"]["drops_total"]);
    if let Some(m) = v["total"]["drops"].as_object() {
        for (k, n) in m {
            let _ = writeln!(s, "  {k}: {n}");
        }
    }
    s
}
