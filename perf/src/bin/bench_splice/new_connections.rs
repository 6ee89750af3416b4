//! Part 1, new connections: one delayed-binding handshake step by step, timed per
//! step.

use crate::harness::{cpu_ns, verdict_name, Conn, Cycles, Failures, Harness, Payloads};
use crate::opts::Opts;
use crate::packets::{frame, read_out, syn_options, Out, Seg};
use crate::world::{
    service_of, BACKEND_MAC, CLIENT_MAC, INSIDE_MAC, PODS, SERVER_BYTES, SLUICE_MAC, SNAT_IP,
    SNI_PORT, SNI_SERVICES, STEPS, STEP_NAMES, TLS_BACKEND_PORT,
};
use serde_json::{json, Value};
use sluice_dataplane::flow::Timeouts;
use sluice_dataplane::mem::tsc_hz;
use sluice_dataplane::pipeline::Verdict;
use sluice_dataplane::port::BURST;
use sluice_dataplane::splice::SpliceConfig;
use sluice_dataplane::stats::{DropReason, Event};
use sluice_dataplane::wire::tcp;
use sluice_dataplane::wire::MacAddr;
use sluice_perf::report::{drops_json, events_json, Report};
use sluice_perf::stats::median;
use std::net::SocketAddrV4;
use std::time::Instant;

/// Runs step `s` of the passthrough connection for `conns` (those still ok): builds one
/// burst, runs the stage, checks and reads the outputs. Returns the stage's cycles.
pub(crate) fn splice_step(
    h: &mut Harness,
    s: usize,
    conns: &mut [Conn],
    pl: &Payloads,
    scratch: &mut Vec<u8>,
    fail: &mut Failures,
) -> Cycles {
    let name = STEP_NAMES[s];
    let (syn_opts, syn_n) = syn_options();
    let mut idx = [0usize; BURST];
    let mut n = 0;
    let srv = pl.server.len() as u32;
    for (i, c) in conns.iter().enumerate() {
        if !c.ok {
            continue;
        }
        let (to, from, seg) = step_segment(s, c, pl, &syn_opts[..syn_n]);
        frame(scratch, to, from, &seg);
        if !h.pkts[n].copy_from(scratch) {
            fail.add(name, "driver: frame does not fit");
            continue;
        }
        idx[n] = i;
        n += 1;
    }
    if n == 0 {
        return Cycles::default();
    }
    let port = if matches!(s, 3 | 4 | 6) { 1 } else { 0 };
    let cycles = h.burst(port, n);
    for (j, &i) in idx[..n].iter().enumerate() {
        let v = h.verdicts[j];
        let c = &mut conns[i];
        let hl = pl.hellos[c.sni].len() as u32;
        let vip = c.vip(SNI_PORT);
        let expect_port = match s {
            1 => None,
            0 | 4 | 6 => Some(0),
            _ => Some(1),
        };
        let ok = match (expect_port, v) {
            (None, Verdict::Drop(DropReason::SpliceConsumed)) => true,
            (Some(p), Verdict::Tx(q)) if p == q => {
                match check_splice_out(s, c, h.pkts[j].data(), pl, hl, vip, srv) {
                    Ok(()) => true,
                    Err(e) => {
                        fail.add(name, &e);
                        false
                    }
                }
            }
            _ => {
                fail.add(name, &verdict_name(v));
                false
            }
        };
        h.count_drop(v);
        c.ok &= ok;
    }
    cycles
}

/// Step `s`'s segment of `c` with the Ethernet addresses it travels with (to sluice's
/// port, from the sender): the backend's steps (3, 4, 6) on the inside port, the
/// client's on the outside one. `syn_opts`: the SYNs' options.
fn step_segment<'a>(
    s: usize,
    c: &Conn,
    pl: &'a Payloads,
    syn_opts: &'a [u8],
) -> (MacAddr, MacAddr, Seg<'a>) {
    match s {
        3 | 4 | 6 => (INSIDE_MAC, BACKEND_MAC, backend_segment(s, c, pl, syn_opts)),
        _ => (SLUICE_MAC, CLIENT_MAC, client_segment(s, c, pl, syn_opts)),
    }
}

/// The client's segment of step `s` (0 SYN, 1 ACK, 2 ClientHello, 5 FIN/ACK, 7 last ACK).
fn client_segment<'a>(s: usize, c: &Conn, pl: &'a Payloads, syn_opts: &'a [u8]) -> Seg<'a> {
    let hl = pl.hellos[c.sni].len() as u32;
    let srv = pl.server.len() as u32;
    let vip = c.vip(SNI_PORT);
    match s {
        0 => Seg {
            src: c.client,
            dst: vip,
            seq: c.isn,
            ack: 0,
            flags: tcp::flags::SYN,
            options: syn_opts,
            payload: &[],
        },
        1 => Seg {
            src: c.client,
            dst: vip,
            seq: c.isn.wrapping_add(1),
            ack: c.cookie.wrapping_add(1),
            flags: tcp::flags::ACK,
            options: &[],
            payload: &[],
        },
        2 => Seg {
            src: c.client,
            dst: vip,
            seq: c.isn.wrapping_add(1),
            ack: c.cookie.wrapping_add(1),
            flags: tcp::flags::ACK | tcp::flags::PSH,
            options: &[],
            payload: &pl.hellos[c.sni],
        },
        5 => Seg {
            src: c.client,
            dst: vip,
            seq: c.isn.wrapping_add(1 + hl),
            ack: c.cookie.wrapping_add(1 + srv),
            flags: tcp::flags::FIN | tcp::flags::ACK,
            options: &[],
            payload: &[],
        },
        _ => Seg {
            src: c.client,
            dst: vip,
            seq: c.isn.wrapping_add(2 + hl),
            ack: c.cookie.wrapping_add(2 + srv),
            flags: tcp::flags::ACK,
            options: &[],
            payload: &[],
        },
    }
}

/// The backend's segment of step `s` (3 SYN-ACK, 4 data, 6 FIN/ACK).
fn backend_segment<'a>(s: usize, c: &Conn, pl: &'a Payloads, syn_opts: &'a [u8]) -> Seg<'a> {
    let hl = pl.hellos[c.sni].len() as u32;
    let srv = pl.server.len() as u32;
    match s {
        3 => Seg {
            src: c.backend,
            dst: c.snat,
            seq: c.backend_isn,
            ack: c.isn.wrapping_add(1),
            flags: tcp::flags::SYN | tcp::flags::ACK,
            options: syn_opts,
            payload: &[],
        },
        4 => Seg {
            src: c.backend,
            dst: c.snat,
            seq: c.backend_isn.wrapping_add(1),
            ack: c.isn.wrapping_add(1 + hl),
            flags: tcp::flags::ACK | tcp::flags::PSH,
            options: &[],
            payload: &pl.server,
        },
        _ => Seg {
            src: c.backend,
            dst: c.snat,
            seq: c.backend_isn.wrapping_add(1 + srv),
            ack: c.isn.wrapping_add(2 + hl),
            flags: tcp::flags::FIN | tcp::flags::ACK,
            options: &[],
            payload: &[],
        },
    }
}

/// Checks what sluice sent for step `s` of `c` and records what the driver needs next.
pub(crate) fn check_splice_out(
    s: usize,
    c: &mut Conn,
    d: &[u8],
    pl: &Payloads,
    hl: u32,
    vip: SocketAddrV4,
    srv: u32,
) -> Result<(), String> {
    let o = read_out(d).ok_or("unparsable output")?;
    if !o.checksums_ok {
        return Err("bad checksum".into());
    }
    let to_client = |o: &Out<'_>| o.dst == c.client && o.src == vip && o.dst_mac == CLIENT_MAC.0;
    let to_backend =
        |o: &Out<'_>, c: &Conn| o.dst == c.backend && o.src == c.snat && o.dst_mac == BACKEND_MAC.0;
    let want = |what: &str, got: u32, want: u32| {
        if got == want {
            Ok(())
        } else {
            Err(format!("{what} {got} != {want}"))
        }
    };
    match s {
        0 => {
            if o.flags != tcp::flags::SYN | tcp::flags::ACK || !o.payload.is_empty() {
                return Err(format!("not a SYN-ACK (flags {:#x})", o.flags));
            }
            if o.dst != c.client || o.src != vip {
                return Err("SYN-ACK addresses".into());
            }
            want("SYN-ACK ack", o.ack, c.isn.wrapping_add(1))?;
            c.cookie = o.seq;
        }
        2 => {
            if o.flags != tcp::flags::SYN {
                return Err(format!("not a SYN (flags {:#x})", o.flags));
            }
            let b = *o.dst.ip();
            if service_of(b) != Some(c.sni) || o.dst.port() != TLS_BACKEND_PORT {
                return Err(format!("backend {} is not in {}'s Service", o.dst, c.sni));
            }
            if *o.src.ip() != SNAT_IP || o.dst_mac != BACKEND_MAC.0 {
                return Err("backend SYN addresses".into());
            }
            want("backend SYN seq", o.seq, c.isn)?;
            c.backend = o.dst;
            c.snat = o.src;
        }
        3 => {
            if !to_backend(&o, c) || o.flags & (tcp::flags::SYN | tcp::flags::FIN) != 0 {
                return Err("replay addresses or flags".into());
            }
            want("replay seq", o.seq, c.isn.wrapping_add(1))?;
            want("replay ack", o.ack, c.backend_isn.wrapping_add(1))?;
            if o.payload != pl.hellos[c.sni].as_slice() {
                return Err(format!("replayed {} bytes, not the hello", o.payload.len()));
            }
        }
        4 => {
            if !to_client(&o) {
                return Err("backend data addresses".into());
            }
            want("backend data seq", o.seq, c.cookie.wrapping_add(1))?;
            want("backend data ack", o.ack, c.isn.wrapping_add(1 + hl))?;
            if o.payload != pl.server.as_slice() {
                return Err("backend data payload".into());
            }
        }
        5 => {
            if !to_backend(&o, c) {
                return Err("client FIN addresses".into());
            }
            want("client FIN ack", o.ack, c.backend_isn.wrapping_add(1 + srv))?;
        }
        6 => {
            if !to_client(&o) {
                return Err("backend FIN addresses".into());
            }
            want("backend FIN seq", o.seq, c.cookie.wrapping_add(1 + srv))?;
        }
        7 => {
            if !to_backend(&o, c) {
                return Err("last ACK addresses".into());
            }
            want("last ACK ack", o.ack, c.backend_isn.wrapping_add(2 + srv))?;
        }
        _ => {}
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// 1. New connections.

pub(crate) fn fig_new_connections(o: &Opts, report: &mut Report) {
    let pl = Payloads::new();
    let hz = tsc_hz() as f64;
    let (mut per_core, mut cycles_conn, mut setup_conn, mut wall_rates, mut cpu_rates) =
        (vec![], vec![], vec![], vec![], vec![]);
    let mut runs = vec![];
    let mut errors = vec![];
    let mut next_k = 0u64;
    for run in 0..o.runs {
        match new_connections_run(o, run, &pl, &mut next_k) {
            Ok((v, r)) => {
                per_core.push(hz / r.per_conn.max(1.0));
                cycles_conn.push(r.per_conn);
                setup_conn.push(r.setup_per_conn);
                wall_rates.push(r.wall_rate);
                cpu_rates.push(r.cpu_rate);
                runs.push(v)
            }
            Err(e) => errors.push(e),
        }
    }
    let rate = median(&per_core);
    let failed: u64 = runs.iter().map(|r| r["failed"].as_u64().unwrap_or(0)).sum();
    report.set(
        "new_connections",
        json!({
            "setup": {
                "driver": "Balancer::process_burst called directly on core 1, bursts of 32, 8 groups of 32 connections pipelined (one burst per step and group each tick); maintain after every other burst",
                "connection": STEP_NAMES,
                "client_hello_bytes": pl.hellos.iter().map(Vec::len).collect::<Vec<_>>(),
                "names": SNI_SERVICES.iter().map(|s| s.2).collect::<Vec<_>>(),
                "backends": format!("{} Services x {PODS} pods (TLS), NetworkPolicy on", SNI_SERVICES.len()),
                "backend_data_bytes": SERVER_BYTES,
                "timeouts": if o.long_timeouts {
                    "defaults, except TIME_WAIT 1 s (--long-timeouts)"
                } else {
                    "defaults, except SYN_SENT and SYN_RECV 2 s, TIME_WAIT 1 s: a TCP flow's entry is first filed on the timer wheel at its SYN state's timeout (at most 64 s), so these decide how soon the wheel recycles it (2 s: the wheel ticks once a second, so a 1 s timeout may end within milliseconds)"
                },
                "flow_capacity": 1 << 20,
                "embryos": SpliceConfig::default().embryos,
                "counted": "TSC in process_burst and maintain (preempted calls at their CPU time); connections that completed every step",
                "duration_s": o.duration,
                "runs": o.runs,
            },
            "per_second_per_core": rate,
            "cycles_per_connection": median(&cycles_conn),
            "setup_cycles_per_connection": median(&setup_conn),
            "setup_only_per_second_per_core": hz / median(&setup_conn).max(1.0),
            "whole_loop_per_second": median(&wall_rates),
            "whole_loop_per_cpu_second": median(&cpu_rates),
            "runs_per_second_per_core": per_core,
            "goal_per_second": 200_000,
            "ratio_to_goal": rate / 200_000.0,
            "failed_connections": failed,
            "runs": runs,
            "errors": errors,
        }),
    );
}

/// The rates of one run that the figure takes medians of.
struct RunRates {
    /// Stage cycles per completed connection (`maintain` included).
    per_conn: f64,
    /// Cycles of the setup steps (0-3) per started connection.
    setup_per_conn: f64,
    /// Completed connections per wall-clock second of the whole loop.
    wall_rate: f64,
    /// Completed connections per CPU second of the whole loop.
    cpu_rate: f64,
}

/// The flow timeouts of part 1: conntrack's with TIME_WAIT 1 s under `--long-timeouts`,
/// else SYN_SENT and SYN_RECV 2 s too.
fn new_connections_timeouts(long: bool) -> Timeouts {
    if long {
        Timeouts {
            tcp_time_wait: 1,
            ..Timeouts::default()
        }
    } else {
        Timeouts {
            tcp_syn_sent: 2,
            tcp_syn_recv: 2,
            tcp_time_wait: 1,
            ..Timeouts::default()
        }
    }
}

/// One run of part 1 on a fresh harness: its JSON and its rates.
fn new_connections_run(
    o: &Opts,
    run: usize,
    pl: &Payloads,
    next_k: &mut u64,
) -> Result<(Value, RunRates), String> {
    let mut h = Harness::new(1 << 20, new_connections_timeouts(o.long_timeouts))?;
    let spliced0 = h.counters.events_of(Event::Spliced);
    let (wall0, cpu0) = (Instant::now(), cpu_ns());
    let d = drive(&mut h, pl, wall0, o.duration, next_k);
    let (by_step, maint, started, completed) = (d.by_step, d.maint, d.started, d.completed);
    let wall = wall0.elapsed().as_secs_f64();
    let cpu_s = cpu_ns().saturating_sub(cpu0) as f64 / 1e9;
    let spliced = h.counters.events_of(Event::Spliced) - spliced0;
    let mut total = maint;
    let mut setup = Cycles::default();
    for (s, c) in by_step.iter().enumerate() {
        total.add(c);
        if s < 4 {
            setup.add(c);
        }
    }
    let per_conn = total.cycles as f64 / completed.max(1) as f64;
    let setup_per_conn = setup.cycles as f64 / started.max(1) as f64;
    let rates = RunRates {
        per_conn,
        setup_per_conn,
        wall_rate: completed as f64 / wall,
        cpu_rate: completed as f64 / cpu_s.max(1e-9),
    };
    let steps: serde_json::Map<String, Value> = STEP_NAMES
        .iter()
        .zip(by_step.iter())
        .map(|(n, c)| {
            (
                n.to_string(),
                json!({
                    "cycles_per_packet": c.cycles as f64 / started.max(1) as f64,
                    "preempted_calls": c.preempted,
                }),
            )
        })
        .collect();
    let f = h.bal.flows();
    let fail = &d.fail;
    let v = json!({
        "run": run,
        "connections_started": started,
        "connections_completed": completed,
        "spliced_events": spliced,
        "failed": fail.total(),
        "failures": fail.json(),
        "stage_cycles_per_connection": per_conn,
        "setup_cycles_per_connection": setup_per_conn,
        "maintain_cycles_per_connection": maint.cycles as f64 / completed.max(1) as f64,
        "tsc_cycles_per_connection_uncorrected": total.raw as f64 / completed.max(1) as f64,
        "stage_calls": total.calls,
        "preempted_calls": total.preempted,
        "by_step": steps,
        "wall_s": wall,
        "thread_cpu_s": cpu_s,
        "flows_live_at_end": f.len(),
        "flow_stats": format!("{:?}", f.stats()),
        "extra_packets_via_stage_io": h.extra,
        "drops": drops_json(&h.counters),
        "events": events_json(&h.counters),
    });
    Ok((v, rates))
}

/// What one run's pipelined loop measured.
struct Driven {
    by_step: [Cycles; STEPS],
    maint: Cycles,
    started: u64,
    completed: u64,
    fail: Failures,
}

/// Drives connections through the steps, pipelined, from `wall0` for `end` seconds
/// (connection numbers from `next_k` on).
fn drive(h: &mut Harness, pl: &Payloads, wall0: Instant, end: f64, next_k: &mut u64) -> Driven {
    let mut scratch = Vec::with_capacity(2048);
    let mut fail = Failures::default();
    const GROUPS: usize = STEPS;
    let mut groups: Vec<Vec<Conn>> = vec![Vec::new(); GROUPS];
    let mut by_step = [Cycles::default(); STEPS];
    let mut maint = Cycles::default();
    let (mut started, mut completed) = (0u64, 0u64);
    let mut sni = 0usize;
    let mut bursts = 0u64;
    let mut tick = 0usize;
    // Group g does step (tick + g) % STEPS at each tick; a group at step 0 starts
    // 32 new connections. The loop ends once the time is up and every group has
    // finished its connections.
    loop {
        let elapsed = wall0.elapsed().as_secs_f64();
        for (g, conns) in groups.iter_mut().enumerate() {
            let s = (tick + g) % STEPS;
            if s == 0 {
                completed += conns.iter().filter(|c| c.ok).count() as u64;
                conns.clear();
                if elapsed >= end {
                    continue;
                }
                for _ in 0..BURST {
                    conns.push(Conn::new(*next_k, sni));
                    *next_k += 1;
                    sni = (sni + 1) % SNI_SERVICES.len();
                }
                started += BURST as u64;
            }
            if conns.is_empty() {
                continue;
            }
            let c = splice_step(h, s, conns, pl, &mut scratch, &mut fail);
            by_step[s].add(&c);
            bursts += 1;
            if bursts.is_multiple_of(2) {
                maint.add(&h.maintain());
            }
        }
        tick += 1;
        if elapsed >= end && groups.iter().all(|c| c.is_empty()) {
            break;
        }
    }
    Driven {
        by_step,
        maint,
        started,
        completed,
        fail,
    }
}

// ---------------------------------------------------------------------------------------
// 2. Spliced versus plain forwarding.
