//! The admin API: a unix socket served by the running `sluice run`, and `sluice ctl`, its
//! client.
//!
//! Protocol: the client connects, writes one command line, and reads one JSON document
//! followed by a newline; the server then closes the connection. Commands:
//!
//! - `stats`: the same counters as the once-per-second summary: per port (device counters
//!   and what the workers moved), per worker (packets, bytes, flows, events, drops by
//!   reason, empty polls, cycles per packet) and totals.
//! - `neighbours`: the neighbour cache.
//! - `reload`: asks the control thread to reload the configuration and answers after the
//!   attempt: `{ok, generation, errors: [...], trigger, time, unix_time, took_ms}`.
//! - `status`: the tables generation, the configuration paths, the last reload (time,
//!   trigger, ok or its errors), generations waiting to be freed, flows per worker and
//!   uptime.
//!
//! Each connection is served on its own short-lived thread (at most
//! [`MAX_CONNECTIONS`] at once), so a slow reload does not hold `stats` up.

use crate::reload::{ReloadOutcome, ReloadStatus};
use crate::run::Running;
use serde_json::{json, Map, Value};
use sluice_dataplane::port::{LinkState, PortStats};
use sluice_dataplane::stats::{Counters, DropReason, Event, PortCounters};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Connections served at once; more are answered with an error.
pub const MAX_CONNECTIONS: usize = 16;

/// Longest a `reload` request waits for the control thread.
pub const RELOAD_TIMEOUT: Duration = Duration::from_secs(120);

/// A request from the admin thread to the control thread.
#[derive(Debug)]
pub(crate) enum ControlRequest {
    /// Reload now and send the outcome back.
    Reload(mpsc::Sender<ReloadOutcome>),
}

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
    /// The tables generation serving.
    pub generation: u64,
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
            generation: r.reload_status().generation,
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
        let events = |c: &Counters| {
            let mut m = Map::new();
            for e in Event::ALL {
                m.insert(e.name().to_string(), json!(c.events_of(*e)));
            }
            Value::Object(m)
        };
        let moved = |p: &PortCounters| {
            json!({"rx_packets": p.rx_packets, "rx_bytes": p.rx_bytes,
                   "tx_packets": p.tx_packets, "tx_bytes": p.tx_bytes})
        };
        json!({
            "uptime_s": self.uptime_s,
            "generation": self.generation,
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
                "flows": c.flows,
                "events": events(c),
                "drops": drops(c),
                "empty_polls": c.empty_polls,
                "busy_polls": c.busy_polls,
                "packets": c.packets,
                "cycles_per_packet": c.cycles_per_packet(),
            })).collect::<Vec<_>>(),
            "total": {
                "flows": self.total.flows,
                "events": events(&self.total),
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
        let created = self
            .total
            .events_of(Event::FlowCreated)
            .saturating_sub(prev.total.events_of(Event::FlowCreated));
        format!(
            "{} | flows {} (+{:.0}/s) | drops {:.0}/s{}",
            parts.join(" | "),
            self.total.flows,
            created as f64 / dt,
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
            "{} | flows created {} | drops {}{}",
            parts.join(" | "),
            self.total.events_of(Event::FlowCreated),
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

/// The JSON document `sluice ctl status` prints.
pub(crate) fn status_json(r: &Running) -> Value {
    let st: ReloadStatus = r.reload_status();
    let workers: Vec<(usize, usize, Counters)> = r
        .workers
        .iter()
        .map(|(id, core, s)| (*id, *core, s.snapshot()))
        .collect();
    json!({
        "generation": st.generation,
        "config": st.paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        "embedded_default": r.is_default,
        "last_reload": st.last.as_ref().map(ReloadOutcome::to_json),
        "reloads": {"ok": st.succeeded, "failed": st.failed},
        "pending_snapshots": st.pending,
        "workers": workers.iter().map(|(id, core, c)| json!({
            "id": id, "core": core, "flows": c.flows,
        })).collect::<Vec<_>>(),
        "flows": workers.iter().map(|(_, _, c)| c.flows).sum::<u64>(),
        "uptime_s": r.started.elapsed().as_secs_f64(),
    })
}

/// Asks the control thread to reload and waits for the outcome (giving up when sluice
/// stops or after [`RELOAD_TIMEOUT`]).
fn reload(r: &Running, stop: &AtomicBool) -> Value {
    let (tx, rx) = mpsc::channel();
    let sent = r
        .control
        .lock()
        .map_err(|_| ())
        .and_then(|c| c.send(ControlRequest::Reload(tx)).map_err(|_| ()));
    if sent.is_err() {
        return json!({"error": "sluice is stopping; no reload"});
    }
    let t = Instant::now();
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(o) => return o.to_json(),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return json!({"error": "sluice is stopping; no reload"})
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if stop.load(Ordering::Relaxed) {
                    return json!({"error": "sluice is stopping; no reload"});
                }
                if t.elapsed() >= RELOAD_TIMEOUT {
                    return json!({"error": format!(
                        "the reload did not finish within {} s; see `sluice ctl status` for its outcome",
                        RELOAD_TIMEOUT.as_secs()
                    )});
                }
            }
        }
    }
}

fn answer(cmd: &str, r: &Running, stop: &AtomicBool) -> Value {
    match cmd.trim() {
        "stats" => r.snapshot().to_json(),
        "status" => status_json(r),
        "reload" => reload(r, stop),
        "neighbours" => Value::Array(
            r.neighbours
                .entries()
                .into_iter()
                .map(|(ip, mac)| json!({"ip": ip.to_string(), "mac": mac.to_string()}))
                .collect(),
        ),
        other => json!({"error": format!(
            "unknown command {other:?}; try stats, status, reload or neighbours"
        )}),
    }
}

fn handle(mut s: UnixStream, r: &Running, stop: &AtomicBool) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
    let mut line = String::new();
    {
        let mut rd = BufReader::new((&s).take(4096));
        if rd.read_line(&mut line).is_err() {
            return;
        }
    }
    let v = answer(&line, r, stop);
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
    let busy = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new()
        .name("sluice-admin".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((s, _)) => {
                        let _ = s.set_nonblocking(false);
                        serve_one(s, &r, &stop, &busy);
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

/// Answers one connection on its own thread, or says the server is busy.
fn serve_one(mut s: UnixStream, r: &Arc<Running>, stop: &Arc<AtomicBool>, busy: &Arc<AtomicUsize>) {
    if busy.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
        busy.fetch_sub(1, Ordering::AcqRel);
        let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
        let _ = writeln!(
            s,
            "{}",
            json!({"error": "the admin socket is busy; try again"})
        );
        return;
    }
    let (r, stop, done) = (Arc::clone(r), Arc::clone(stop), Arc::clone(busy));
    let spawned = std::thread::Builder::new()
        .name("sluice-admin-conn".into())
        .spawn(move || {
            handle(s, &r, &stop);
            done.fetch_sub(1, Ordering::AcqRel);
        });
    if spawned.is_err() {
        busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Sends one command to a running instance and returns its JSON answer.
pub fn query(socket: &Path, cmd: &str) -> Result<Value, String> {
    let wait = if cmd == "reload" {
        RELOAD_TIMEOUT + Duration::from_secs(5)
    } else {
        Duration::from_secs(5)
    };
    query_with_timeout(socket, cmd, wait)
}

/// [`query`], waiting at most `wait` for the answer.
pub fn query_with_timeout(socket: &Path, cmd: &str, wait: Duration) -> Result<Value, String> {
    let mut s = UnixStream::connect(socket).map_err(|e| {
        format!(
            "cannot reach sluice at {}: {e} (is `sluice run` running?)",
            socket.display()
        )
    })?;
    let _ = s.set_read_timeout(Some(wait));
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
    let paths: Vec<&str> = v["config"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
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
    s
}
