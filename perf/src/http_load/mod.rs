//! The harness of the HTTP/1.1 proxying benchmark (issue #32): requests per second per
//! core of a proxy that routes each request by its path, with connections kept alive
//! or one connection per request, measured the same way for every contender.
//!
//! It is the SNI benchmark's harness ([`crate::sni_load`]) with `wrk` as the client:
//! the same namespaces and TAP lane ([`crate::sni_load::net`]), the same
//! [`crate::sni_load::Contender`]s (nginx and HAProxy processes, sluice in process), the
//! same measured window ([`crate::sni_load::measure_with`]: probe, warm-up, window, CPU
//! time at its two ends). What is new here:
//!
//! - [`wrk`]: the load client: its Lua request script (paths alternate, one `Host`),
//!   its command line, its report.
//! - [`peers`]: the backends (an nginx) and the contenders' configurations.
//! - here: the probe ([`probe`]: both paths on one kept-alive connection, each answer
//!   checked against the backend its path routes to), one round ([`measure`]) and the
//!   figures of a set of rounds ([`summary`]).
//!
//! wrk takes whole seconds. A round runs `wrk -d W` as the warm-up (W ≥ 1, or none),
//! then at the window's start `wrk -d D`, the measured run; the harness reads the
//! contender's CPU time over D seconds from the same instant. **rps** = wrk's complete
//! responses / wrk's own run time; **rps_per_core** = rps × window seconds / the
//! contender's CPU seconds in the window (the rate of a core fully busy with it);
//! **cores** = CPU seconds / window seconds. The measured wrk starts a few milliseconds
//! after the window (its process start and connects: `start_lag_s` in each round) and
//! ends as much after it, so the two spans cover the same steady load.
//!
//! A round with socket errors or error statuses has no figure: the summary reports an
//! `error` instead.

pub mod peers;
pub mod wrk;

use crate::sni_load::net::Topology;
use crate::sni_load::{self, Contender, ProbeFn, RoundError, Routing, Window, WindowSpec};
use crate::stats::median;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddrV4, TcpStream};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wrk::ConnMode;

/// The `Host` of every request.
pub const HOST: &str = "shop.example.test";
/// The paths requests alternate between: one under [`peers::API_PREFIX`] (backend `a`),
/// one not (backend `b`).
pub const PATHS: [&str; 2] = ["/api/items", "/index.html"];
/// The port every contender listens on (plain HTTP).
pub const FRONT_PORT: u16 = 80;

/// The answer `routing` must give for `path`: the backend's body.
pub fn expected_body(routing: &Routing, path: &str) -> Result<String, String> {
    let name = match routing {
        Routing::ByPath(routes) => routes
            .iter()
            .find(|(prefix, _)| path.starts_with(prefix.as_str()))
            .map(|(_, b)| b.clone())
            .ok_or_else(|| format!("no route for {path}"))?,
        Routing::AllTo(b) | Routing::Terminated(b) => b.clone(),
        Routing::Sni => return Err("SNI routing has no HTTP answer".into()),
    };
    Ok(peers::backend_body(&name))
}

/// Reads one HTTP/1.1 response with a `Content-Length` from `s` (`buf` holds what was
/// read past the previous one): its status and body.
fn read_response(s: &mut TcpStream, buf: &mut Vec<u8>) -> Result<(u16, String), String> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let status: u16 = head
                .split_whitespace()
                .nth(1)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("no status line: {head:?}"))?;
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.trim()
                        .eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .ok_or_else(|| format!("no Content-Length (the probe needs one): {head:?}"))?;
            let total = end + 4 + len;
            while buf.len() < total {
                let n = s.read(&mut chunk).map_err(|e| format!("read body: {e}"))?;
                if n == 0 {
                    return Err(format!("closed within the body: {head:?}"));
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = String::from_utf8_lossy(&buf[end + 4..total]).into_owned();
            buf.drain(..total);
            return Ok((status, body));
        }
        let n = s.read(&mut chunk).map_err(|e| format!("read head: {e}"))?;
        if n == 0 {
            return Err(format!(
                "closed before a response head ({} bytes read)",
                buf.len()
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Sends `GET path` requests with `Host:` [`HOST`] on one connection to `to`, one after
/// another (the last with `Connection: close`), each answered `200` with its expected
/// body: `(path, body)` pairs.
fn probe_connection(to: SocketAddrV4, requests: &[(&str, String)]) -> Result<(), String> {
    let t = Duration::from_secs(2);
    let mut s = TcpStream::connect_timeout(&to.into(), t).map_err(|e| format!("{to}: {e}"))?;
    s.set_read_timeout(Some(t)).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(t)).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    for (i, (path, expect)) in requests.iter().enumerate() {
        let close = if i + 1 == requests.len() {
            "Connection: close\r\n"
        } else {
            ""
        };
        let req = format!("GET {path} HTTP/1.1\r\nHost: {HOST}\r\n{close}\r\n");
        s.write_all(req.as_bytes())
            .map_err(|e| format!("{to} GET {path}: {e}"))?;
        let (status, body) =
            read_response(&mut s, &mut buf).map_err(|e| format!("{to} GET {path}: {e}"))?;
        if status != 200 || body != *expect {
            return Err(format!(
                "{to} GET {path} (request {} of the connection): status {status}, body {body:?}; expected 200, {expect:?}",
                i + 1
            ));
        }
    }
    Ok(())
}

/// One request for `path` on its own connection to `to`, answered `200` with `expect`.
pub fn probe_one(to: SocketAddrV4, path: &str, expect: &str) -> Result<(), String> {
    probe_connection(to, &[(path, expect.to_string())])
}

/// Checks a contender routing as `routing`: every path of [`PATHS`] in turn on one
/// kept-alive connection (per-request routing must route the second request anew),
/// then each on its own connection.
pub fn probe(to: SocketAddrV4, routing: &Routing) -> Result<(), String> {
    let reqs = PATHS
        .iter()
        .map(|p| Ok((*p, expected_body(routing, p)?)))
        .collect::<Result<Vec<_>, String>>()?;
    probe_connection(to, &reqs)?;
    for r in &reqs {
        probe_connection(to, std::slice::from_ref(r))?;
    }
    Ok(())
}

/// How to run one round.
#[derive(Debug, Clone)]
pub struct HttpRoundSpec {
    /// Keep-alive or a connection per request.
    pub mode: ConnMode,
    /// Connections wrk keeps open.
    pub conns: usize,
    /// Warm-up seconds (a wrk run of its own; 0: none).
    pub warmup_s: u64,
    /// Window seconds (at least 1).
    pub duration_s: u64,
    /// Longest wait for the contender to answer a probe after its start.
    pub ready_limit: Duration,
}

/// What the load of one round saw: the measured wrk run, and when it began.
#[derive(Debug, Clone, Default)]
pub struct HttpLoad {
    /// The measured run's report.
    pub wrk: wrk::Report,
    /// The warm-up run's errors (not figures; for the report).
    pub warmup_errors: Option<String>,
    /// Seconds from the window's start to the measured run's start.
    pub start_lag_s: f64,
}

/// One round of one contender.
pub type HttpRound = Window<HttpLoad>;

/// The gap between the warm-up run's planned end and the window, for wrk's exit.
const WARMUP_SLACK: Duration = Duration::from_millis(200);

/// Runs one round of `c`: start, probe until it answers, warm-up, window, stop. wrk's
/// script is written to `script` first (once per run is enough; rewriting is cheap).
pub fn measure(
    c: &mut dyn Contender,
    topo: &Topology,
    spec: &HttpRoundSpec,
    script: &std::path::Path,
    stop: &AtomicBool,
) -> Result<HttpRound, RoundError> {
    let routing = c.routing();
    let probe: Arc<ProbeFn> = Arc::new(move |target| probe(target, &routing));
    let (mode, conns, warmup_s, duration_s) =
        (spec.mode, spec.conns, spec.warmup_s, spec.duration_s.max(1));
    let script = script.to_path_buf();
    let load: Box<sni_load::LoadFn<HttpLoad>> = Box::new(move |target, window_start| {
        let core = sni_load::LOAD_CORE;
        let mut warmup_errors = None;
        if warmup_s > 0 {
            let w = wrk::run(&wrk::command(core, target, mode, conns, warmup_s, &script))?;
            warmup_errors = w.error();
        }
        let now = Instant::now();
        if now < window_start {
            std::thread::sleep(window_start - now);
        }
        let start_lag_s = Instant::now()
            .saturating_duration_since(window_start)
            .as_secs_f64();
        let report = wrk::run(&wrk::command(
            core, target, mode, conns, duration_s, &script,
        ))?;
        Ok(HttpLoad {
            wrk: report,
            warmup_errors,
            start_lag_s,
        })
    });
    let timing = WindowSpec {
        warmup: Duration::from_secs(warmup_s) + WARMUP_SLACK,
        duration: Duration::from_secs(duration_s),
        ready_limit: spec.ready_limit,
    };
    sni_load::measure_with(c, topo, &timing, probe, load, stop)
}

/// The figures of one round: `(name, value)`.
pub fn round_figures(r: &HttpRound) -> [(&'static str, f64); 5] {
    let rps = r.load.wrk.rps;
    [
        ("rps", rps),
        ("rps_per_core", r.per_core(rps * r.window_s)),
        ("p50_ms", r.load.wrk.p50_ms),
        ("p99_ms", r.load.wrk.p99_ms),
        ("cores", r.cpu.charged_s / r.window_s.max(1e-9)),
    ]
}

/// A round as JSON.
pub fn round_json(r: &HttpRound) -> Value {
    let mut v = r.common_json();
    for (k, x) in round_figures(r) {
        v[k] = json!(x);
    }
    v["requests"] = json!(r.load.wrk.requests);
    v["wrk_seconds"] = json!(r.load.wrk.seconds);
    v["socket_errors"] = json!(wrk::SOCKET_ERRORS
        .iter()
        .zip(r.load.wrk.socket_errors)
        .map(|(k, n)| (k.to_string(), json!(n)))
        .collect::<serde_json::Map<_, _>>());
    v["responses_ge_400"] = json!(r.load.wrk.non_2xx);
    v["error"] = json!(r.load.wrk.error());
    v["warmup_errors"] = json!(r.load.warmup_errors);
    v["start_lag_s"] = json!(r.load.start_lag_s);
    v
}

/// A contender's rounds in one mode summed up: the medians of each figure, and `error`
/// (no figure) when no round ran or any round had errors.
pub fn summary(rounds: &[HttpRound], failures: &[String]) -> Value {
    let mut v = json!({
        "requests": rounds.iter().map(|r| r.load.wrk.requests).sum::<u64>(),
        "cpu_s": median(&rounds.iter().map(|r| r.cpu.charged_s).collect::<Vec<_>>()),
        "cpu_s_softirqd": median(&rounds.iter().map(|r| r.cpu.softirqd_s).collect::<Vec<_>>()),
        "load_bound_rounds": rounds.iter().filter(|r| r.load_bound()).count(),
        "rounds": rounds.iter().map(round_json).collect::<Vec<_>>(),
        "failed_rounds": failures,
    });
    let errors: Vec<String> = rounds
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.load.wrk.error().map(|e| format!("round {}: {e}", i + 1)))
        .collect();
    let error = if rounds.is_empty() {
        Some(
            failures
                .first()
                .cloned()
                .unwrap_or_else(|| "not run".into()),
        )
    } else if !errors.is_empty() {
        Some(errors.join("; "))
    } else if rounds.iter().any(|r| r.load.wrk.requests == 0) {
        Some("a round had no answered request".into())
    } else {
        None
    };
    for (i, (k, _)) in rounds
        .first()
        .map(round_figures)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let xs: Vec<f64> = rounds.iter().map(|r| round_figures(r)[i].1).collect();
        v[k] = if error.is_some() {
            Value::Null
        } else {
            json!(median(&xs))
        };
    }
    if let Some(e) = error {
        v["error"] = json!(e);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_answers() {
        let r = peers::by_path();
        assert_eq!(
            expected_body(&r, "/api/items").as_deref(),
            Ok("backend a\n")
        );
        assert_eq!(
            expected_body(&r, "/index.html").as_deref(),
            Ok("backend b\n")
        );
        let all = Routing::AllTo("a".into());
        assert_eq!(
            expected_body(&all, "/index.html").as_deref(),
            Ok("backend a\n")
        );
        assert!(expected_body(&Routing::Sni, "/").is_err());
    }

    fn round(wrk: wrk::Report) -> HttpRound {
        let mut r = HttpRound {
            load: HttpLoad {
                wrk,
                ..HttpLoad::default()
            },
            window_s: 2.0,
            ..HttpRound::default()
        };
        r.cpu.charged_s = 0.5;
        r
    }

    #[test]
    fn figures_and_errors() {
        let ok = wrk::Report {
            requests: 20_000,
            seconds: 2.0,
            rps: 10_000.0,
            p50_ms: 1.0,
            p99_ms: 3.0,
            ..wrk::Report::default()
        };
        let s = summary(&[round(ok.clone())], &[]);
        assert_eq!(s["rps"], json!(10_000.0));
        // 10k/s over a 2 s window in 0.5 CPU s: 40k a core-second, 0.25 cores.
        assert_eq!(s["rps_per_core"], json!(40_000.0));
        assert_eq!(s["cores"], json!(0.25));
        assert!(s.get("error").is_none());
        let bad = wrk::Report {
            non_2xx: 1,
            ..ok.clone()
        };
        let s = summary(&[round(ok), round(bad)], &[]);
        assert_eq!(s["rps_per_core"], Value::Null);
        assert!(s["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("round 2: ")));
        let s = summary(&[], &["did not start: x".into()]);
        assert_eq!(s["error"], json!("did not start: x"));
    }
}
