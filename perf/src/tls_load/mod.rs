//! The harness of the TLS termination benchmarks (issue #31): handshakes per second per
//! core (full and resumed), bulk throughput per core and memory per idle connection of a
//! proxy that terminates TLS, measured the same way for every contender.
//!
//! It is the SNI benchmark's harness ([`crate::sni_load`]) with a TLS client: the same
//! namespaces and TAP lane ([`crate::sni_load::net`]), the same [`crate::sni_load::Contender`]s
//! (HAProxy and nginx processes, sluice in process), the same measured window
//! ([`crate::sni_load::measure_with`]: probe, warm-up, window, CPU time of the contender
//! at its two ends). What is new here:
//!
//! - [`certs`]: the server certificates (ECDSA P-256, RSA 2048), made with `openssl`.
//! - [`backend`]: one backend speaking a line protocol (stream contenders) and HTTP/1.1
//!   (HTTP contenders): small answers, bulk answers, held connections.
//! - [`client`]: the load client, rustls on ring: full handshakes, resumed handshakes,
//!   bulk transfers, idle connections held open; every answer checked.
//! - [`memory`]: the memory of idle connections (process and kernel) and the helper
//!   process that runs the client and backend of the memory benchmark.
//! - [`peers`]: the contenders' configurations (nginx `stream`/`http`, HAProxy `mode
//!   tcp`/`mode http`, sluice's Gateway manifests).
//! - here: one round ([`measure`]) and the figures of a set of rounds ([`summary`]).
//!
//! Figures: `hs_per_s` = right answers after a full handshake per window second;
//! `hs_per_core` = the same per second of the contender's CPU time; `resumed_per_core` =
//! right answers after a *resumed* handshake per CPU second (a figure only when at
//! least [`MIN_RESUMED`] of the handshakes resumed: anything else is an error, not a rate);
//! `bulk_mb_per_core` = bulk body bytes (10^6) delivered per CPU second.

pub mod backend;
pub mod certs;
pub mod client;
pub mod memory;
pub mod peers;

use crate::sni_load::net::Topology;
use crate::sni_load::{self, Contender, ProbeFn, RoundError, Window, WindowSpec};
use crate::stats::median;
use client::{Mode, Protocol, TlsClient, TlsLoadReport, TlsLoadSpec};
use serde_json::{json, Value};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The name every contender's certificate is for, and the client's SNI.
pub const SERVER_NAME: &str = "tls.example.test";

/// The share of resumed handshakes below which a contender counts as not resuming.
pub const MIN_RESUMED: f64 = 0.9;

/// How to run one round.
#[derive(Debug, Clone)]
pub struct TlsRoundSpec {
    /// What each connection does.
    pub mode: Mode,
    /// Connections in flight.
    pub conns: usize,
    /// Warm-up before the window (resumed: long enough for every slot's first, full,
    /// handshake).
    pub warmup: Duration,
    /// The window.
    pub duration: Duration,
    /// Per-connection timeout.
    pub timeout: Duration,
    /// Longest wait for the contender to answer a probe after its start.
    pub ready_limit: Duration,
}

/// One round of one contender.
pub type TlsRound = Window<TlsLoadReport>;

/// What a probe learnt: the negotiated protocol, suite and group.
pub type Negotiated = Arc<Mutex<Option<String>>>;

/// Runs one round of contender `c` (which carries `proto`) with `tls`'s client: start,
/// probe until it answers, warm-up, window, stop. The probe's negotiated parameters go
/// to `negotiated`.
pub fn measure(
    c: &mut dyn Contender,
    topo: &Topology,
    spec: &TlsRoundSpec,
    tls: &TlsClient,
    proto: Protocol,
    negotiated: &Negotiated,
    stop: &AtomicBool,
) -> Result<TlsRound, RoundError> {
    let expect = peers::backend_name().to_string();
    let (ptls, pexpect, seen) = (tls.clone(), expect.clone(), negotiated.clone());
    let probe: Arc<ProbeFn> = Arc::new(move |target| {
        let n = client::probe(target, &ptls, proto, &pexpect, Duration::from_secs(2))?;
        if let Ok(mut g) = seen.lock() {
            *g = Some(n);
        }
        Ok(())
    });
    let (mode, conns, duration, timeout, tls) = (
        spec.mode,
        spec.conns,
        spec.duration,
        spec.timeout,
        tls.clone(),
    );
    let load: Box<sni_load::LoadFn<TlsLoadReport>> = Box::new(move |target, window_start| {
        client::run(&TlsLoadSpec {
            target,
            mode,
            proto,
            tls,
            expect,
            conns,
            window_start,
            duration,
            timeout,
        })
    });
    let timing = WindowSpec {
        warmup: spec.warmup,
        duration: spec.duration,
        ready_limit: spec.ready_limit,
    };
    sni_load::measure_with(c, topo, &timing, probe, load, stop)
}

/// The figures of one round in `mode`: `(name, value)`.
fn round_figures(r: &TlsRound, mode: Mode) -> Vec<(&'static str, f64)> {
    let w = r.window_s.max(1e-9);
    match mode {
        Mode::Full => {
            let n = r.load.conns as f64;
            vec![("hs_per_s", n / w), ("hs_per_core", r.per_core(n))]
        }
        Mode::Resumed => {
            let n = r.load.handshakes_of("resumed") as f64;
            vec![
                ("resumed_per_s", n / w),
                ("resumed_per_core", r.per_core(n)),
                ("resumed_fraction", resumed_fraction(&r.load)),
            ]
        }
        Mode::Bulk { .. } => {
            let mb = r.load.bytes as f64 / 1e6;
            vec![
                ("bulk_mb_per_s", mb / w),
                ("bulk_mb_per_core", r.per_core(mb)),
            ]
        }
    }
}

fn resumed_fraction(l: &TlsLoadReport) -> f64 {
    if l.conns == 0 {
        0.0
    } else {
        l.handshakes_of("resumed") as f64 / l.conns as f64
    }
}

/// A round as JSON.
pub fn round_json(r: &TlsRound, mode: Mode) -> Value {
    let mut v = r.common_json();
    for (k, x) in round_figures(r, mode) {
        v[k] = json!(x);
    }
    v["conns"] = json!(r.load.conns);
    v["handshakes"] = json!(r.load.handshakes);
    v["bytes"] = json!(r.load.bytes);
    v["errors"] = json!(r.load.errors);
    v["unclean_closes"] = json!(r.load.unclean_closes);
    v["unfinished"] = json!(r.load.unfinished);
    v["warmup_conns"] = json!(r.load.warmup_ended);
    v["p50_ms"] = json!(r.load.quantile_ms(0.5));
    v["p99_ms"] = json!(r.load.quantile_ms(0.99));
    v
}

/// A contender's rounds in `mode` summed up: the medians of each figure, sums of
/// connections and errors, and `error` (the figure is not a rate) when no round
/// succeeded, when more connections failed than succeeded, or when a `resumed` run did
/// not resume.
pub fn summary(mode: Mode, rounds: &[TlsRound], failures: &[String]) -> Value {
    let mut errors = std::collections::BTreeMap::<String, u64>::new();
    let mut handshakes = std::collections::BTreeMap::<String, u64>::new();
    for r in rounds {
        for (k, v) in &r.load.errors {
            *errors.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &r.load.handshakes {
            *handshakes.entry(k.clone()).or_default() += v;
        }
    }
    let conns: u64 = rounds.iter().map(|r| r.load.conns).sum();
    let failed: u64 = errors.values().sum();
    let mut v = json!({
        "mode": mode.name(),
        "conns": conns,
        "handshakes": handshakes,
        "errors": errors,
        "p50_ms": median(&rounds.iter().map(|r| r.load.quantile_ms(0.5)).collect::<Vec<_>>()),
        "p99_ms": median(&rounds.iter().map(|r| r.load.quantile_ms(0.99)).collect::<Vec<_>>()),
        "cpu_s": median(&rounds.iter().map(|r| r.cpu.charged_s).collect::<Vec<_>>()),
        "load_bound_rounds": rounds.iter().filter(|r| r.load_bound()).count(),
        "rounds": rounds.iter().map(|r| round_json(r, mode)).collect::<Vec<_>>(),
        "failed_rounds": failures,
    });
    if let Some(first) = rounds.first() {
        for (k, _) in round_figures(first, mode) {
            let xs: Vec<f64> = rounds
                .iter()
                .filter_map(|r| round_figures(r, mode).into_iter().find(|(n, _)| *n == k))
                .map(|(_, x)| x)
                .collect();
            v[k] = json!(median(&xs));
        }
    }
    let error = if rounds.is_empty() {
        Some(
            failures
                .first()
                .cloned()
                .unwrap_or_else(|| "not run".into()),
        )
    } else if conns == 0 {
        Some("no connection was answered".to_string())
    } else if failed > conns {
        Some(format!(
            "{failed} connections failed, {conns} were answered"
        ))
    } else if mode == Mode::Resumed {
        let resumed = handshakes.get("resumed").copied().unwrap_or(0);
        let f = resumed as f64 / conns as f64;
        (f < MIN_RESUMED).then(|| {
            format!(
                "did not resume: {resumed} of {conns} handshakes resumed ({:.0} %, under {:.0} %)",
                f * 100.0,
                MIN_RESUMED * 100.0
            )
        })
    } else {
        None
    };
    if let Some(e) = error {
        v["error"] = json!(e);
    }
    v
}

/// The headline figure of a [`summary`] in `mode` (`hs_per_core`, `resumed_per_core`,
/// `bulk_mb_per_core`) and its value, or why there is none.
pub fn headline(mode: Mode, s: &Value) -> (&'static str, Result<f64, String>) {
    let key = match mode {
        Mode::Full => "hs_per_core",
        Mode::Resumed => "resumed_per_core",
        Mode::Bulk { .. } => "bulk_mb_per_core",
    };
    let v = match (s["error"].as_str(), s[key].as_f64()) {
        (Some(e), _) => Err(e.to_string()),
        (None, Some(x)) => Ok(x),
        (None, None) => Err("no figure".to_string()),
    };
    (key, v)
}
