//! Part 2, established connections: spliced and plain flows forwarded in bursts at
//! each flow count and traffic shape.

use crate::harness::{cpu_ns, verdict_name, Conn, Cycles, Failures, Harness, Payloads};
use crate::new_connections::splice_step;
use crate::opts::Opts;
use crate::packets::{frame, read_out, sack_options, syn_options, Seg};
use crate::world::{
    service_of, BACKEND_MAC, CLIENT_MAC, INSIDE_MAC, PLAIN_SERVICE, SLICE, SLUICE_MAC, SNI_PORT,
    SNI_SERVICES, TCP_PORT, WINDOW,
};
use serde_json::{json, Value};
use sluice_dataplane::flow::Timeouts;
use sluice_dataplane::mem::tsc_hz;
use sluice_dataplane::pipeline::Verdict;
use sluice_dataplane::port::BURST;
use sluice_dataplane::wire::tcp;
use sluice_perf::report::{drops_json, events_json, Report};
use sluice_perf::stats::median;
use std::net::SocketAddrV4;
use std::time::Instant;

/// Frames of a fixed stride in one buffer.
pub(crate) struct Frames {
    pub(crate) data: Vec<u8>,
    pub(crate) lens: Vec<u16>,
    pub(crate) stride: usize,
}

impl Frames {
    pub(crate) fn new(stride: usize) -> Frames {
        Frames {
            data: Vec::new(),
            lens: Vec::new(),
            stride,
        }
    }
    pub(crate) fn push(&mut self, f: &[u8]) {
        let at = self.data.len();
        self.data.resize(at + self.stride, 0);
        self.data[at..at + f.len()].copy_from_slice(f);
        self.lens.push(f.len() as u16);
    }
    pub(crate) fn len(&self) -> usize {
        self.lens.len()
    }
    pub(crate) fn get(&self, i: usize) -> &[u8] {
        &self.data[i * self.stride..i * self.stride + usize::from(self.lens[i])]
    }
}

/// One contender's traffic: per flow, a client ACK, a backend ACK and a client SACK.
pub(crate) struct Traffic {
    pub(crate) c2b: Frames,
    pub(crate) b2c: Frames,
    pub(crate) sack: Frames,
    pub(crate) pos: [usize; 3],
}

/// 0..n in a fixed pseudo-random order.
pub(crate) fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ seed;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

/// Sets up `n` plain connections (k from `k0`): SYN -> backend SYN-ACK -> ACK.
pub(crate) fn establish_plain(
    h: &mut Harness,
    n: usize,
    k0: u64,
    fail: &mut Failures,
) -> Vec<Conn> {
    let mut all = Vec::with_capacity(n);
    let mut scratch = Vec::with_capacity(256);
    let (syn_opts, syn_n) = syn_options();
    for chunk in 0..n.div_ceil(BURST) {
        let m = BURST.min(n - chunk * BURST);
        let mut conns: Vec<Conn> = (0..m)
            .map(|i| Conn::new(k0 + (chunk * BURST + i) as u64, PLAIN_SERVICE))
            .collect();
        for step in 0..3 {
            let mut idx = [0usize; BURST];
            let mut cnt = 0;
            for (i, c) in conns.iter().enumerate().filter(|(_, c)| c.ok) {
                let vip = c.vip(TCP_PORT);
                let seg = match step {
                    0 => Seg {
                        src: c.client,
                        dst: vip,
                        seq: c.isn,
                        ack: 0,
                        flags: tcp::flags::SYN,
                        options: &syn_opts[..syn_n],
                        payload: &[],
                    },
                    1 => Seg {
                        src: c.backend,
                        dst: c.snat,
                        seq: c.backend_isn,
                        ack: c.isn.wrapping_add(1),
                        flags: tcp::flags::SYN | tcp::flags::ACK,
                        options: &syn_opts[..syn_n],
                        payload: &[],
                    },
                    _ => Seg {
                        src: c.client,
                        dst: vip,
                        seq: c.isn.wrapping_add(1),
                        ack: c.backend_isn.wrapping_add(1),
                        flags: tcp::flags::ACK,
                        options: &[],
                        payload: &[],
                    },
                };
                let (to, from) = if step == 1 {
                    (INSIDE_MAC, BACKEND_MAC)
                } else {
                    (SLUICE_MAC, CLIENT_MAC)
                };
                frame(&mut scratch, to, from, &seg);
                h.pkts[cnt].copy_from(&scratch);
                idx[cnt] = i;
                cnt += 1;
            }
            let port = usize::from(step == 1);
            h.burst(port, cnt);
            for (j, &i) in idx[..cnt].iter().enumerate() {
                let v = h.verdicts[j];
                let c = &mut conns[i];
                let want = if step == 1 { 0 } else { 1 };
                let out = read_out(h.pkts[j].data());
                match (v, out) {
                    (Verdict::Tx(p), Some(o)) if p == want && o.checksums_ok => {
                        if step == 0 {
                            if service_of(*o.dst.ip()) != Some(PLAIN_SERVICE) {
                                fail.add("plain_syn", "backend not in the plain Service");
                                c.ok = false;
                            }
                            c.backend = o.dst;
                            c.snat = o.src;
                        }
                    }
                    (v, _) => {
                        fail.add(&format!("plain_step_{step}"), &verdict_name(v));
                        c.ok = false;
                    }
                }
            }
        }
        all.extend(conns);
    }
    all
}

/// Sets up `n` spliced connections (k from `k0`): steps 0-3 of part 1.
pub(crate) fn establish_spliced(
    h: &mut Harness,
    n: usize,
    k0: u64,
    pl: &Payloads,
    fail: &mut Failures,
) -> Vec<Conn> {
    let mut all = Vec::with_capacity(n);
    let mut scratch = Vec::with_capacity(2048);
    for chunk in 0..n.div_ceil(BURST) {
        let m = BURST.min(n - chunk * BURST);
        let mut conns: Vec<Conn> = (0..m)
            .map(|i| {
                let k = chunk * BURST + i;
                Conn::new(k0 + k as u64, k % SNI_SERVICES.len())
            })
            .collect();
        // Up to the backend's first data, whose acknowledgment of the replayed hello
        // returns the embryo (sluice holds it until then: it acknowledged the hello).
        for s in 0..5 {
            splice_step(h, s, &mut conns, pl, &mut scratch, fail);
        }
        h.maintain();
        all.extend(conns);
    }
    all
}

/// The established-traffic frames of `conns` (`spliced`: through the SNI listener).
pub(crate) fn traffic(conns: &[Conn], spliced: bool, pl: &Payloads, seed: u64) -> Traffic {
    let mut t = Traffic {
        c2b: Frames::new(64),
        b2c: Frames::new(64),
        sack: Frames::new(80),
        pos: [0; 3],
    };
    let mut scratch = Vec::with_capacity(128);
    let live: Vec<&Conn> = conns.iter().filter(|c| c.ok).collect();
    for (f, order) in [(0, seed), (1, seed + 1), (2, seed + 2)] {
        for &i in &shuffled(live.len(), order) {
            let c = live[i];
            let (port, hl) = if spliced {
                (SNI_PORT, pl.hellos[c.sni].len() as u32)
            } else {
                (TCP_PORT, 0)
            };
            // What the client acknowledges is in sluice's sequence space (the cookie) for
            // spliced flows, the backend's for plain ones.
            let their = if spliced { c.cookie } else { c.backend_isn };
            let cseq = c.isn.wrapping_add(1 + hl);
            match f {
                0 => frame(
                    &mut scratch,
                    SLUICE_MAC,
                    CLIENT_MAC,
                    &Seg {
                        src: c.client,
                        dst: c.vip(port),
                        seq: cseq,
                        ack: their.wrapping_add(1),
                        flags: tcp::flags::ACK,
                        options: &[],
                        payload: &[],
                    },
                ),
                1 => frame(
                    &mut scratch,
                    INSIDE_MAC,
                    BACKEND_MAC,
                    &Seg {
                        src: c.backend,
                        dst: c.snat,
                        seq: c.backend_isn.wrapping_add(1),
                        ack: cseq,
                        flags: tcp::flags::ACK,
                        options: &[],
                        payload: &[],
                    },
                ),
                _ => {
                    let e = their.wrapping_add(1);
                    let o = sack_options(
                        e.wrapping_add(2920),
                        e.wrapping_add(4380),
                        e.wrapping_add(5840),
                        e.wrapping_add(8760),
                    );
                    frame(
                        &mut scratch,
                        SLUICE_MAC,
                        CLIENT_MAC,
                        &Seg {
                            src: c.client,
                            dst: c.vip(port),
                            seq: cseq,
                            ack: e,
                            flags: tcp::flags::ACK,
                            options: &o,
                            payload: &[],
                        },
                    )
                }
            }
            match f {
                0 => t.c2b.push(&scratch),
                1 => t.b2c.push(&scratch),
                _ => t.sack.push(&scratch),
            }
        }
    }
    t
}

/// Checks one forwarded packet of `c` against the exact rewrite.
pub(crate) fn check_forwarded(
    c: &Conn,
    spliced: bool,
    kind: usize,
    d: &[u8],
) -> Result<(), String> {
    let o = read_out(d).ok_or("unparsable")?;
    if !o.checksums_ok {
        return Err("bad checksum".into());
    }
    match kind {
        1 => {
            let port = if spliced { SNI_PORT } else { TCP_PORT };
            if o.dst != c.client || o.src != c.vip(port) {
                return Err("backend->client addresses".into());
            }
            let want = if spliced {
                c.cookie.wrapping_add(1)
            } else {
                c.backend_isn.wrapping_add(1)
            };
            if o.seq != want || o.window != WINDOW {
                return Err("backend->client seq/window".into());
            }
        }
        _ => {
            if o.dst != c.backend || o.src != c.snat {
                return Err("client->backend addresses".into());
            }
            let b = c.backend_isn.wrapping_add(1);
            if o.ack != b || o.window != WINDOW {
                return Err(format!("client->backend ack {} != {b}", o.ack));
            }
            if kind == 2 {
                let want = sack_options(
                    b.wrapping_add(2920),
                    b.wrapping_add(4380),
                    b.wrapping_add(5840),
                    b.wrapping_add(8760),
                );
                if o.options != want.as_slice() {
                    return Err("SACK edges".into());
                }
            }
        }
    }
    Ok(())
}

/// Sends `count` packets of traffic kind `kind` (0: client ACKs, 1: backend ACKs, 2: client
/// SACKs; `kinds` alternates bursts between them) through the stage. Returns the stage
/// cycles and the packets that did not leave where expected.
pub(crate) fn pump(
    h: &mut Harness,
    t: &mut Traffic,
    kinds: &[usize],
    count: usize,
) -> (Cycles, u64) {
    let mut cyc = Cycles::default();
    let mut wrong = 0u64;
    let mut sent = 0;
    let mut b = 0usize;
    while sent < count {
        let kind = kinds[b % kinds.len()];
        b += 1;
        let f = match kind {
            0 => &t.c2b,
            1 => &t.b2c,
            _ => &t.sack,
        };
        let n = BURST.min(count - sent).min(f.len());
        if n == 0 {
            break;
        }
        let mut pos = t.pos[kind];
        for p in h.pkts[..n].iter_mut() {
            if pos >= f.len() {
                pos = 0;
            }
            p.copy_from(f.get(pos));
            pos += 1;
        }
        t.pos[kind] = pos;
        let port = usize::from(kind == 1);
        cyc.add(&h.burst(port, n));
        let want = Verdict::tx(1 - port);
        let verdicts = h.verdicts;
        for &v in &verdicts[..n] {
            if v != want {
                wrong += 1;
                h.count_drop(v);
            }
        }
        sent += n;
        if b.is_multiple_of(2) {
            cyc.add(&h.maintain());
        }
    }
    (cyc, wrong)
}

/// Sends every frame of `t` once and checks each output against the exact rewrite.
pub(crate) fn verify_traffic(
    h: &mut Harness,
    t: &Traffic,
    conns: &[Conn],
    spliced: bool,
    fail: &mut Failures,
) {
    // Frames were built in shuffled order; find each frame's connection by its client
    // or backend tuple.
    let by_client: std::collections::HashMap<SocketAddrV4, &Conn> = conns
        .iter()
        .filter(|c| c.ok)
        .map(|c| (c.client, c))
        .collect();
    let by_snat: std::collections::HashMap<(SocketAddrV4, SocketAddrV4), &Conn> = conns
        .iter()
        .filter(|c| c.ok)
        .map(|c| ((c.backend, c.snat), c))
        .collect();
    let what = if spliced { "spliced" } else { "plain" };
    for (kind, f) in [(0usize, &t.c2b), (1, &t.b2c), (2, &t.sack)] {
        let port = usize::from(kind == 1);
        let mut i = 0;
        while i < f.len() {
            let n = BURST.min(f.len() - i);
            let mut who = Vec::with_capacity(n);
            for j in 0..n {
                let d = f.get(i + j);
                who.push(read_out(d).and_then(|o| {
                    if kind == 1 {
                        by_snat.get(&(o.src, o.dst)).copied()
                    } else {
                        by_client.get(&o.src).copied()
                    }
                }));
                h.pkts[j].copy_from(d);
            }
            h.burst(port, n);
            for (j, c) in who.iter().enumerate() {
                let v = h.verdicts[j];
                let res = match (v, c) {
                    (Verdict::Tx(p), Some(c)) if p as usize == 1 - port => {
                        check_forwarded(c, spliced, kind, h.pkts[j].data())
                    }
                    (v, _) => Err(verdict_name(v)),
                };
                if let Err(e) = res {
                    fail.add(&format!("{what} traffic kind {kind}"), &e);
                }
            }
            i += n;
        }
    }
}

pub(crate) fn fig_forwarding(o: &Opts, report: &mut Report) {
    let pl = Payloads::new();
    let hz = tsc_hz() as f64;
    let mut by_n = serde_json::Map::new();
    let mut errors = vec![];
    for &n in &o.flows {
        let res = (|| -> Result<Value, String> {
            let mut h = Harness::new((4 * n).max(4096), Timeouts::default())?;
            let mut fail = Failures::default();
            let t0 = Instant::now();
            let spliced = establish_spliced(&mut h, n, 0, &pl, &mut fail);
            let plain = establish_plain(&mut h, n, 0, &mut fail);
            let setup_s = t0.elapsed().as_secs_f64();
            let ok_s = spliced.iter().filter(|c| c.ok).count();
            let ok_p = plain.iter().filter(|c| c.ok).count();
            if ok_s == 0 || ok_p == 0 {
                return Err(format!(
                    "no flows established (spliced {ok_s}, plain {ok_p}): {}",
                    fail.json()
                ));
            }
            let mut ts = traffic(&spliced, true, &pl, 11);
            let mut tp = traffic(&plain, false, &pl, 11);
            verify_traffic(&mut h, &ts, &spliced, true, &mut fail);
            verify_traffic(&mut h, &tp, &plain, false, &mut fail);
            let mut shapes = serde_json::Map::new();
            for (shape, kinds) in [("ack60", &[0usize, 1][..]), ("sack", &[2usize][..])] {
                let (mut cs, mut cp, mut ratios) = (vec![], vec![], vec![]);
                let (mut loop_s, mut loop_p) = (vec![], vec![]);
                let (mut wrong_s, mut wrong_p, mut pre) = (0u64, 0u64, 0u64);
                // Warm up both (caches, branch predictors).
                pump(&mut h, &mut ts, kinds, SLICE);
                pump(&mut h, &mut tp, kinds, SLICE);
                let mut round = 0usize;
                for _ in 0..o.runs {
                    let t = Instant::now();
                    while t.elapsed().as_secs_f64() < o.duration {
                        let one = |h: &mut Harness, tr: &mut Traffic| {
                            let w = cpu_ns();
                            let (c, wrong) = pump(h, tr, kinds, SLICE);
                            let cpu = cpu_ns().saturating_sub(w) as f64 / 1e9;
                            (c, wrong, cpu.max(1e-9))
                        };
                        let (a, b) = if round.is_multiple_of(2) {
                            let a = one(&mut h, &mut ts);
                            (a, one(&mut h, &mut tp))
                        } else {
                            let b = one(&mut h, &mut tp);
                            (one(&mut h, &mut ts), b)
                        };
                        let cpp_s = a.0.cycles as f64 / SLICE as f64;
                        let cpp_p = b.0.cycles as f64 / SLICE as f64;
                        cs.push(cpp_s);
                        cp.push(cpp_p);
                        ratios.push(cpp_p / cpp_s.max(1e-9));
                        loop_s.push(SLICE as f64 / a.2 / 1e6);
                        loop_p.push(SLICE as f64 / b.2 / 1e6);
                        wrong_s += a.1;
                        wrong_p += b.1;
                        pre += a.0.preempted + b.0.preempted;
                        round += 1;
                    }
                }
                let ms = median(&cs);
                let mp = median(&cp);
                shapes.insert(
                    shape.to_string(),
                    json!({
                        "spliced": {
                            "cycles_per_packet": ms,
                            "mpps_per_core": hz / ms.max(1e-9) / 1e6,
                            "whole_loop_mpps_per_cpu_second": median(&loop_s),
                            "not_forwarded": wrong_s,
                        },
                        "plain": {
                            "cycles_per_packet": mp,
                            "mpps_per_core": hz / mp.max(1e-9) / 1e6,
                            "whole_loop_mpps_per_cpu_second": median(&loop_p),
                            "not_forwarded": wrong_p,
                        },
                        "ratio_spliced_to_plain": median(&ratios),
                        "ratio_of_medians": mp / ms.max(1e-9),
                        "rounds": round,
                        "preempted_calls": pre,
                    }),
                );
            }
            let f = h.bal.flows();
            Ok(json!({
                "flows_per_set": n,
                "established": {"spliced": ok_s, "plain": ok_p},
                "setup_s": setup_s,
                "flow_table": {"capacity": f.capacity(), "live": f.len()},
                "shapes": shapes,
                "failures": fail.json(),
                "extra_packets_via_stage_io": h.extra,
                "drops": drops_json(&h.counters),
                "events": events_json(&h.counters),
            }))
        })();
        match res {
            Ok(v) => {
                by_n.insert(n.to_string(), v);
            }
            Err(e) => errors.push(format!("{n} flows: {e}")),
        }
    }
    let ratio_at = |n: &str, shape: &str| {
        by_n.get(n).map_or(0.0, |v| {
            v["shapes"][shape]["ratio_spliced_to_plain"]
                .as_f64()
                .unwrap_or(0.0)
        })
    };
    let ratios: serde_json::Map<String, Value> = o
        .flows
        .iter()
        .map(|n| {
            let k = n.to_string();
            (
                k.clone(),
                json!({"ack60": ratio_at(&k, "ack60"), "sack": ratio_at(&k, "sack")}),
            )
        })
        .collect();
    report.set(
        "spliced_vs_plain",
        json!({
            "setup": {
                "spliced": "N connections through the TLS Passthrough listener (SNI), set up as in new_connections (no close)",
                "plain": "N connections through the TCP listener (TCPRoute, full NAT): SYN, backend SYN-ACK, ACK",
                "table": "both sets in one flow table (capacity 4N), default timeouts",
                "shapes": {
                    "ack60": "60-byte ACKs in shuffled flow order, alternating a burst from the clients and a burst from the backends",
                    "sack": "client ACKs with two SACK blocks (NOP, NOP, SACK: 74-byte frames)",
                },
                "rounds": format!("slices of {SLICE} packets, contenders alternating (order swapped every round), for --runs x --duration s per shape; medians"),
                "counted": "TSC in process_burst and maintain (once per two bursts), preempted calls at their CPU time",
                "verified": "every flow's three packets once, against the exact rewrite (addresses, seq/ack, SACK edges, window, checksums)",
            },
            "by_flows": by_n,
            "ratios_spliced_to_plain": ratios,
            "goal": "spliced >= 0.8x plain",
            "errors": errors,
        }),
    );
}

// ---------------------------------------------------------------------------------------
// 3. Bytes.
