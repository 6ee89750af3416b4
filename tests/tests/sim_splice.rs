//! Delayed binding end to end in simulation: smoltcp clients and backends on in-memory
//! wires, sluice's `Balancer` in between answering handshakes with SYN cookies, reading
//! ClientHellos and HTTP heads, connecting the backend the name routes to and splicing.
//! Hand-made clients ([`RawClient`]) control every segment where a real stack would not:
//! how the first bytes are cut and ordered, a lost handshake ACK, retransmissions, resets.
//! Bulk transfers, window scaling, SACK and checksums are in `sim_splice_transfer.rs`.

use sluice_dataplane::balancer::BalancerConfig;
use sluice_dataplane::flow::TcpState;
use sluice_dataplane::splice::SpliceConfig;
use sluice_dataplane::stats::{DropReason, Event};
use sluice_tests::hello;
use sluice_tests::raw::{self, flags, syn_options, RawClient, Segment};
use sluice_tests::sim::{Faults, Rng, Sim};
use sluice_tests::splice::{
    balancer_config, first_difference, ip, print_counters, run, run_with, sa, socket, state,
    EchoBackends, World, CLIENT, RAW_PORTS, VIP, VIP6,
};
use smoltcp::socket::tcp;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

fn tls_vip() -> SocketAddr {
    SocketAddr::new(ip(VIP), 443)
}

/// A raw client on port `RAW_PORTS + k` towards `to`.
fn raw_client(k: u16, to: SocketAddr) -> RawClient {
    let isn = 0x1357_9bdf_u32.wrapping_mul(u32::from(k) + 1) ^ 0x0f0f_0000;
    RawClient::new(0, SocketAddr::new(ip(CLIENT), RAW_PORTS + k), to, isn)
}

/// SYN, SYN-ACK and (if `ack`) the third segment; returns sluice's SYN-ACK.
fn handshake(w: &mut World, c: &mut RawClient, ack: bool) -> Segment {
    c.syn(&mut w.sim, syn_options(1460, Some(7), true));
    w.step();
    c.poll(&mut w.sim);
    let synack = c
        .with_flags(flags::SYN | flags::ACK)
        .next()
        .cloned()
        .expect("SYN-ACK from sluice");
    assert_eq!(synack.ack, c.isn.wrapping_add(1));
    if ack {
        c.ack(&mut w.sim);
        w.step();
    }
    synack
}

/// Steps until the client holds `want` bytes from the other side (acknowledging what
/// comes), at most `limit_ms`.
fn pump(w: &mut World, c: &mut RawClient, want: usize, limit_ms: u64) -> bool {
    for _ in 0..limit_ms {
        w.step();
        let before = c.received.len();
        c.poll(&mut w.sim);
        if c.received.len() != before {
            c.ack(&mut w.sim);
        }
        if c.received.len() >= want {
            return true;
        }
    }
    false
}

/// Pieces of `b` cut at `cuts`: (offset, bytes).
fn cut(b: &[u8], cuts: &[usize]) -> Vec<(usize, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 0;
    for &c in cuts.iter().chain(std::iter::once(&b.len())) {
        out.push((at, b[at..c].to_vec()));
        at = c;
    }
    out
}

fn events(w: &World, e: Event) -> u64 {
    w.sim.worker.counters().events_of(e)
}

fn drops(w: &World, r: DropReason) -> u64 {
    w.sim.worker.counters().drops_of(r)
}

const FIRST_BYTES_EVENTS: [Event; 6] = [
    Event::FirstBytesUnrecognised,
    Event::FirstBytesNoName,
    Event::FirstBytesNoRoute,
    Event::FirstBytesTimeout,
    Event::FirstBytesOverflow,
    Event::FirstBytesClientFin,
];

fn no_first_bytes_fallbacks(w: &World) {
    for e in FIRST_BYTES_EVENTS {
        assert_eq!(events(w, e), 0, "{}", e.name());
    }
}

#[test]
fn sni_routes_each_connection_to_its_backend_and_splices_byte_exact() {
    let mut w = World::new(balancer_config(1), 30);
    let mut rng = Rng::new(2);
    let names = ["a.example.test", "b.example.test", "x.wild.test"];
    let firsts: Vec<Vec<u8>> = (0..30)
        .map(|i| hello::client_hello(Some(names[i % 3]), 200))
        .collect();
    let out = w.run(VIP, 443, &firsts, 20_000, 10, &mut rng);
    print_counters(&w.sim);
    assert_eq!(out.echoed, 30, "{out:?}");
    assert_eq!(w.backends.hits("10.78.0.11"), 10);
    assert_eq!(w.backends.hits("10.78.0.12"), 10);
    assert_eq!(w.backends.hits("10.78.0.13"), 10);
    assert_eq!(events(&w, Event::Spliced), 30);
    assert_eq!(events(&w, Event::EmbryoOpened), 30);
    assert_eq!(w.sim.worker.stage().embryos(), 0);
    // One flow entry a connection: the entry opened for the handshake gets its backend
    // side in place.
    let flows = w.sim.worker.stage().flows().stats();
    assert_eq!((flows.inserted, flows.removed), (30, 0), "{flows:?}");
}

/// The ClientHello in one, two and three segments, cut anywhere (inside the record
/// header, inside the SNI), sent in order and out of order: sluice acknowledges only the
/// contiguous bytes it holds, connects the backend only once the hello is complete, and
/// the backend gets it byte for byte.
#[test]
fn hello_in_one_two_and_three_segments_in_any_order() {
    let mut w = World::new(balancer_config(11), 4);
    let hello = hello::client_hello(Some("b.example.test"), 300);
    let n = hello.len();
    let sni_at = hello
        .windows(14)
        .position(|x| x == b"b.example.test")
        .expect("sni in hello");
    let cases: &[(Vec<usize>, Vec<usize>)] = &[
        (vec![], vec![0]),
        (vec![3], vec![0, 1]),
        (vec![sni_at + 5], vec![0, 1]),
        (vec![sni_at + 5], vec![1, 0]),
        (vec![5, 60], vec![0, 1, 2]),
        (vec![40, sni_at + 3], vec![2, 0, 1]),
        (vec![40, 200], vec![1, 2, 0]),
        (vec![40, 200], vec![2, 1, 0]),
        (vec![1, n - 1], vec![0, 2, 1]),
    ];
    for (i, (cuts, order)) in cases.iter().enumerate() {
        let mut c = raw_client(i as u16, tls_vip());
        handshake(&mut w, &mut c, true);
        let pieces = cut(&hello, cuts);
        for (k, &p) in order.iter().enumerate() {
            let (off, bytes) = &pieces[p];
            c.data(&mut w.sim, *off, bytes);
            w.step();
            c.poll(&mut w.sim);
            if k + 1 < order.len() {
                assert_eq!(
                    events(&w, Event::BackendSynSent),
                    i as u64,
                    "case {i}: connected before the hello was complete"
                );
                // sluice acknowledges what it holds contiguously, and nothing more: only
                // pure ACKs after its SYN-ACK, never beyond the bytes sent so far.
                let held: usize = order[..=k]
                    .iter()
                    .map(|&q| pieces[q].0 + pieces[q].1.len())
                    .max()
                    .unwrap_or(0);
                for (_, seg) in &c.inbox[1..] {
                    assert!(
                        seg.payload.is_empty() && seg.flags == flags::ACK,
                        "case {i}: sluice sent more than an ACK: {seg:?}"
                    );
                    let acked = seg.ack.wrapping_sub(c.seq_at(0)) as usize;
                    assert!(acked <= held, "case {i}: acknowledged {acked} of {held}");
                }
            }
        }
        assert!(pump(&mut w, &mut c, n, 2_000), "case {i}: no echo");
        assert_eq!(first_difference(&c.received, &hello), None, "case {i}");
        c.rst(&mut w.sim, n);
        w.step();
    }
    print_counters(&w.sim);
    let k = cases.len() as u64;
    assert_eq!(events(&w, Event::EmbryoOpened), k);
    assert_eq!(events(&w, Event::BackendSynSent), k);
    assert_eq!(events(&w, Event::Spliced), k);
    assert_eq!(events(&w, Event::SpliceResetSent), 0);
    assert_eq!(drops(&w, DropReason::BadCookie), 0);
    no_first_bytes_fallbacks(&w);
    assert_eq!(w.backends.hits("10.78.0.12"), cases.len());
}

/// The hello cut across TLS records in many ways (a record per byte of the header, the
/// SNI extension across records, many small records), and hellos longer than a segment:
/// each routes by its name and is echoed byte for byte.
/// A hello written in 20 small segments, each one only after sluice acknowledged the
/// previous one and 200 ms apart (a client that waits for acknowledgments, as Nagle's
/// algorithm and a full congestion window make real clients do): sluice acknowledges each
/// as it arrives, the hello completes long before the deadline and reaches the backend
/// byte for byte; and the bytes sluice acknowledged reach the backend even when the
/// first replay to it is lost (sluice sends it again).
#[test]
fn paced_small_writes_are_acknowledged_and_a_lost_replay_is_sent_again() {
    let mut w = World::new(balancer_config(31), 2);
    // The backend host loses the first data segment sluice replays to it.
    let lost = Arc::new(AtomicUsize::new(0));
    {
        let lost = lost.clone();
        w.sim.hosts[1]
            .dev
            .set_divert(Some(Box::new(move |f: &mut [u8]| {
                let replay =
                    raw::parse(f).is_some_and(|s| s.dst.port() == 7000 && !s.payload.is_empty());
                !(replay && lost.fetch_add(1, Ordering::Relaxed) == 0)
            })));
    }
    let hello = hello::client_hello(Some("a.example.test"), 300);
    let n = hello.len();
    let mut c = raw_client(7, tls_vip());
    handshake(&mut w, &mut c, true);
    let step = n.div_ceil(20);
    let mut off = 0;
    while off < n {
        let end = (off + step).min(n);
        c.data(&mut w.sim, off, &hello[off..end]);
        w.steps(5); // (the first ACK waits for ARP: sluice's answers are routed)
        c.poll(&mut w.sim);
        if end < n {
            // Acknowledged before the client goes on.
            let last = c.inbox.last().map(|(_, s)| s.clone()).expect("an answer");
            assert_eq!(last.flags, flags::ACK, "at {end}: {last:?}");
            assert_eq!(
                last.ack,
                c.seq_at(end),
                "sluice acknowledges the {end} bytes it holds"
            );
            assert_eq!(events(&w, Event::BackendSynSent), 0, "connected early");
            w.steps(200);
            c.poll(&mut w.sim);
        }
        off = end;
    }
    assert!(pump(&mut w, &mut c, n, 5_000), "no echo");
    assert_eq!(first_difference(&c.received, &hello), None);
    assert!(
        lost.load(Ordering::Relaxed) >= 2,
        "the replay was sent again"
    );
    assert_eq!(events(&w, Event::Spliced), 1);
    assert_eq!(events(&w, Event::SpliceResetSent), 0);
    no_first_bytes_fallbacks(&w);
    assert_eq!(w.backends.hits("10.78.0.11"), 1);
}

#[test]
fn hello_split_across_tls_records() {
    let mut w = World::new(balancer_config(12), 12);
    let names = ["a.example.test", "b.example.test", "deep.x.wild.test"];
    let mut firsts = Vec::new();
    let mut want = [0usize; 3];
    for (i, name) in names.iter().enumerate() {
        let msg = hello::message(Some(name), 150);
        let sni = msg
            .windows(name.len())
            .position(|x| x == name.as_bytes())
            .expect("sni");
        let every_ten: Vec<usize> = (1..msg.len() / 10).map(|k| k * 10).collect();
        for cuts in [
            vec![1],
            vec![1, 2, 3, 4],
            vec![sni + 2],
            vec![sni - 9, sni + 1],
            every_ten,
        ] {
            firsts.push(hello::records(&msg, &cuts));
            want[i] += 1;
        }
        // One record longer than a segment, and one such hello in records.
        let big = hello::message(Some(name), 3_500);
        firsts.push(hello::records(&big, &[]));
        firsts.push(hello::records(&big, &[700, 2_900]));
        want[i] += 2;
    }
    let out = w.run(VIP, 443, &firsts, 5_000, 6, &mut Rng::new(3));
    print_counters(&w.sim);
    assert_eq!(out.echoed, firsts.len(), "{out:?}");
    assert_eq!(w.backends.hits("10.78.0.11"), want[0]);
    assert_eq!(w.backends.hits("10.78.0.12"), want[1]);
    assert_eq!(w.backends.hits("10.78.0.13"), want[2]);
    assert_eq!(events(&w, Event::Spliced), firsts.len() as u64);
    no_first_bytes_fallbacks(&w);
}

/// The client's third segment is lost: its first data segment carries the cookie's proof
/// and opens the embryo. A data segment that is not the stream's first cannot prove the
/// cookie (the cookie covers the client's initial sequence number, which only the
/// first byte's position gives): it is dropped as a bad cookie, and the client's
/// retransmission completes the hello.
#[test]
fn third_ack_lost_first_data_proves_the_cookie() {
    let mut w = World::new(balancer_config(13), 8);
    let hello = hello::client_hello(Some("a.example.test"), 200);
    let n = hello.len();

    // The hello in one segment, no ACK before it.
    let mut c = raw_client(0, tls_vip());
    handshake(&mut w, &mut c, false);
    assert_eq!(events(&w, Event::EmbryoOpened), 0);
    c.data(&mut w.sim, 0, &hello);
    assert!(pump(&mut w, &mut c, n, 1_000));
    assert_eq!(first_difference(&c.received, &hello), None);
    assert_eq!(events(&w, Event::EmbryoOpened), 1);

    // Two segments, no ACK, the second one first.
    let mut c = raw_client(1, tls_vip());
    handshake(&mut w, &mut c, false);
    let p = cut(&hello, &[100]);
    c.data(&mut w.sim, p[1].0, &p[1].1);
    w.step();
    assert_eq!(drops(&w, DropReason::BadCookie), 1);
    assert_eq!(state(&w.sim).1, 0, "an embryo without a proven cookie");
    c.data(&mut w.sim, p[0].0, &p[0].1);
    w.step();
    assert_eq!(events(&w, Event::EmbryoOpened), 2);
    assert_eq!(events(&w, Event::BackendSynSent), 1);
    c.data(&mut w.sim, p[1].0, &p[1].1); // the retransmission
    assert!(pump(&mut w, &mut c, n, 1_000));
    assert_eq!(first_difference(&c.received, &hello), None);
    assert_eq!(events(&w, Event::Spliced), 2);

    // smoltcp clients whose third segment is lost on the wire.
    let lost = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(std::collections::HashSet::new()));
    {
        let (lost, seen) = (lost.clone(), seen.clone());
        w.sim.hosts[0]
            .dev
            .set_tx_hook(Some(Box::new(move |f: &mut [u8]| {
                let Some(s) = raw::parse(f) else { return true };
                let pure_ack = s.flags == flags::ACK && s.payload.is_empty();
                if s.dst.port() == 443 && pure_ack {
                    if let Ok(mut seen) = seen.lock() {
                        if seen.insert(s.src.port()) {
                            lost.fetch_add(1, Ordering::Relaxed);
                            return false;
                        }
                    }
                }
                true
            })));
    }
    let firsts: Vec<Vec<u8>> = (0..10)
        .map(|_| hello::client_hello(Some("a.example.test"), 200))
        .collect();
    let out = w.run(VIP, 443, &firsts, 3_000, 5, &mut Rng::new(4));
    print_counters(&w.sim);
    assert_eq!(out.echoed, 10, "{out:?}");
    assert_eq!(lost.load(Ordering::Relaxed), 10);
    assert_eq!(events(&w, Event::EmbryoOpened), 12);
    assert_eq!(events(&w, Event::Spliced), 12);
    assert_eq!(drops(&w, DropReason::BadCookie), 1);
}

/// The backend is slow to answer (its first SYN lost) while the client retransmits its
/// hello, sends more bytes and retransmits those too: sluice holds everything, replays it
/// to the backend exactly once when the backend answers, and the echo is byte-exact.
#[test]
fn client_retransmissions_while_connecting_reach_the_backend_once() {
    let cfg = BalancerConfig {
        splice: SpliceConfig {
            syn_rto_ms: 300,
            ..SpliceConfig::default()
        },
        ..balancer_config(14)
    };
    let mut w = World::new(cfg, 2);
    // The backend host loses the first SYN to port 7000.
    let syns = Arc::new(AtomicUsize::new(0));
    {
        let syns = syns.clone();
        w.sim.hosts[1]
            .dev
            .set_divert(Some(Box::new(move |f: &mut [u8]| {
                let first_syn = raw::parse(f).is_some_and(|s| {
                    s.dst.port() == 7000 && s.flags & flags::SYN != 0 && s.flags & flags::ACK == 0
                }) && syns.fetch_add(1, Ordering::Relaxed) == 0;
                !first_syn
            })));
    }
    let hello = hello::client_hello(Some("b.example.test"), 400);
    let n = hello.len();
    let more: Vec<u8> = (0..3_000u32).map(|i| (i * 7 + 3) as u8).collect();
    let mut stream = hello.clone();
    stream.extend_from_slice(&more);

    let mut c = raw_client(0, tls_vip());
    handshake(&mut w, &mut c, true);
    w.sim.capture(true);
    let p = cut(&hello, &[200]);
    c.data(&mut w.sim, 0, &p[0].1);
    c.data(&mut w.sim, p[1].0, &p[1].1);
    w.step();
    assert_eq!(events(&w, Event::BackendSynSent), 1);
    // While sluice waits for the backend: retransmissions, new bytes, overlaps.
    let mut sent_dups = 0;
    for t in 0..250 {
        if t % 50 == 10 {
            c.data(&mut w.sim, 0, &hello);
            c.data(&mut w.sim, p[1].0, &p[1].1);
            sent_dups += 2;
        }
        if t == 20 {
            c.data(&mut w.sim, n, &more[..1_000]);
        }
        if t == 30 {
            c.data(&mut w.sim, n + 2_000, &more[2_000..]);
        }
        if t == 40 {
            c.data(&mut w.sim, n + 1_000, &more[1_000..2_000]);
        }
        if t == 120 {
            c.data(&mut w.sim, n - 50, &stream[n - 50..n + 1_400]);
            sent_dups += 1;
        }
        w.step();
        c.poll(&mut w.sim);
    }
    assert_eq!(events(&w, Event::Spliced), 0, "the backend answered early");
    // Before the backend answers, sluice only acknowledges the bytes it holds.
    assert!(
        c.inbox[1..]
            .iter()
            .all(|(_, seg)| seg.payload.is_empty() && seg.flags == flags::ACK),
        "sluice sent more than ACKs before the splice: {:?}",
        c.inbox
    );
    // Every duplicate was answered with an ACK of what sluice holds (as a TCP receiver
    // answers a retransmission).
    let acks_before_splice = c.inbox.len() - 1;
    let echoed = pump(&mut w, &mut c, stream.len(), 2_000);
    print_counters(&w.sim);

    assert!(
        echoed,
        "no echo: {} of {} bytes, {} segments",
        c.received.len(),
        stream.len(),
        c.inbox.len()
    );
    assert_eq!(first_difference(&c.received, &stream), None);
    print_counters(&w.sim);
    assert_eq!(syns.load(Ordering::Relaxed), 2);
    assert_eq!(events(&w, Event::BackendSynSent), 2);
    assert_eq!(events(&w, Event::Spliced), 1);
    assert!(
        acks_before_splice >= sent_dups,
        "{acks_before_splice} < {sent_dups}"
    );
    // What went to the backend: every byte of the stream exactly once.
    let mut to_backend = vec![0u32; stream.len()];
    for (link, f) in w.sim.captured() {
        let Some(s) = raw::parse(&f) else { continue };
        if link != 1 || s.dst.port() != 7000 || s.payload.is_empty() {
            continue;
        }
        let off = s.seq.wrapping_sub(c.isn.wrapping_add(1)) as usize;
        assert_eq!(&stream[off..off + s.payload.len()], &s.payload[..]);
        for k in &mut to_backend[off..off + s.payload.len()] {
            *k += 1;
        }
    }
    assert!(
        to_backend.iter().all(|&k| k == 1),
        "bytes sent to the backend other than once: {:?}",
        to_backend
            .iter()
            .enumerate()
            .filter(|(_, &k)| k != 1)
            .take(5)
            .collect::<Vec<_>>()
    );
}

/// sluice's acknowledgment of the backend's SYN-ACK, with the replayed hello, is lost:
/// the backend repeats its SYN-ACK, sluice acknowledges it again on the spliced flow, and
/// the hello reaches the backend all the same (sluice owns the bytes it acknowledged and
/// replays them until the backend acknowledges them).
#[test]
fn lost_replay_is_recovered_through_the_splice() {
    let mut w = World::new(balancer_config(23), 6);
    let lost = Arc::new(Mutex::new(std::collections::HashSet::new()));
    {
        let lost = lost.clone();
        w.sim.hosts[1]
            .dev
            .set_divert(Some(Box::new(move |f: &mut [u8]| {
                let Some(s) = raw::parse(f) else { return true };
                if s.dst.port() != 7000 || s.flags & flags::SYN != 0 {
                    return true;
                }
                // The first segment after the SYN, per connection.
                lost.lock().map_or(true, |mut l| !l.insert(s.src.port()))
            })));
    }
    // The backends' SYN-ACKs (sequence numbers, repeats included).
    let synacks = Arc::new(Mutex::new(Vec::new()));
    {
        let synacks = synacks.clone();
        w.sim.hosts[1]
            .dev
            .set_tx_hook(Some(Box::new(move |f: &mut [u8]| {
                if let Some(s) = raw::parse(f).filter(|s| s.has(flags::SYN | flags::ACK)) {
                    if let Ok(mut v) = synacks.lock() {
                        v.push(s.seq);
                    }
                }
                true
            })));
    }
    w.sim.capture(true);
    let firsts: Vec<Vec<u8>> = (0..5)
        .map(|_| hello::client_hello(Some("a.example.test"), 200))
        .collect();
    let out = w.run(VIP, 443, &firsts, 2_000, 5, &mut Rng::new(24));
    print_counters(&w.sim);
    assert_eq!(out.echoed, 5, "{out:?}");
    assert_eq!(lost.lock().map(|l| l.len()).unwrap_or(0), 5);
    let synacks = synacks.lock().map(|v| v.clone()).unwrap_or_default();
    assert!(
        synacks.len() >= 10,
        "the backends did not repeat their SYN-ACKs"
    );
    // sluice answered each repeated SYN-ACK with a bare ACK of it (the client had
    // nothing to acknowledge yet).
    let reacks = w
        .sim
        .captured()
        .into_iter()
        .filter(|(l, _)| *l == 1)
        .filter_map(|(_, f)| raw::parse(&f))
        .filter(|s| s.flags == flags::ACK && s.payload.is_empty())
        .filter(|s| synacks.contains(&s.ack.wrapping_sub(1)))
        .count();
    assert!(reacks >= 5, "{reacks} repeated SYN-ACKs acknowledged");
    let dropped = w.sim.hosts[1].dev.take_diverted(|_| true);
    assert!(dropped
        .iter()
        .filter_map(|f| raw::parse(f))
        .all(|s| s.has(flags::ACK) && !s.payload.is_empty()));
    assert_eq!(events(&w, Event::Spliced), 5);
    assert_eq!(events(&w, Event::BackendSynSent), 5);
}

/// A route with two backends, one of which resets (nothing listens on its port): the
/// connections that pick it first fail over to the other one and are all echoed.
#[test]
fn backend_reset_fails_over_to_the_next_backend() {
    let (mut sim, _p) = sluice_tests::splice::sim(Faults::NONE, balancer_config(15));
    // Only 10.78.0.11 listens on 7001; 10.78.0.12:7001 answers RST.
    let mut backends = EchoBackends::new().listen(
        &mut sim.hosts[1].sockets,
        (ip("10.78.0.11"), 7001),
        8,
        65535,
    );
    let firsts: Vec<Vec<u8>> = (0..24)
        .map(|_| hello::client_hello(Some("failover.example.test"), 100))
        .collect();
    let out = run(
        &mut sim,
        &mut backends,
        ip(VIP),
        443,
        &firsts,
        4_000,
        6,
        &mut Rng::new(5),
    );
    print_counters(&sim);
    assert_eq!(out.echoed, 24, "{out:?}");
    assert_eq!(backends.hits("10.78.0.11"), 24);
    let c = sim.worker.counters();
    let failovers = c.events_of(Event::BackendFailover);
    assert!(
        failovers > 0,
        "no connection picked the resetting backend first"
    );
    assert!(
        failovers < 24,
        "every connection picked the resetting backend first"
    );
    assert_eq!(c.events_of(Event::BackendSynSent), 24 + failovers);
    assert_eq!(c.events_of(Event::Spliced), 24);
    assert_eq!(c.events_of(Event::SpliceResetSent), 0);
    assert_eq!(sim.worker.stage().embryos(), 0);
}

/// Every backend silent — addresses nobody answers (ARP unanswered), or a host that
/// swallows the SYNs: `syn_tries` SYNs to each of `backend_tries` backends, `syn_rto_ms`
/// then twice and four times that apart (exponential backoff), then the client gets RST (sequence and acknowledgment exact) and sluice holds
/// nothing.
#[test]
fn silent_backends_reset_the_client_after_the_configured_tries() {
    let cfg = BalancerConfig {
        splice: SpliceConfig {
            syn_rto_ms: 100,
            syn_tries: 3,
            backend_tries: 2,
            ..SpliceConfig::default()
        },
        ..balancer_config(16)
    };
    let mut w = World::new(cfg, 2);
    // The backend host swallows everything to port 7002 (the `sink` service).
    w.sim.hosts[1]
        .dev
        .set_divert(Some(raw::divert_ports(vec![7002])));
    let hello_for = |name: &str| hello::client_hello(Some(name), 100);
    for (k, name) in ["silent.example.test", "sink.example.test"]
        .into_iter()
        .enumerate()
    {
        let before = (
            events(&w, Event::BackendSynSent),
            events(&w, Event::BackendFailover),
            events(&w, Event::SpliceResetSent),
        );
        let hello = hello_for(name);
        let mut c = raw_client(k as u16, tls_vip());
        let synack = handshake(&mut w, &mut c, true);
        c.data(&mut w.sim, 0, &hello);
        let t0 = w.sim.now_ms;
        for _ in 0..2_000 {
            w.step();
            c.poll(&mut w.sim);
            if c.reset {
                break;
            }
        }
        print_counters(&w.sim);
        let (t, rst) = c
            .inbox
            .iter()
            .find(|(_, s)| s.has(flags::RST))
            .cloned()
            .unwrap_or_else(|| panic!("{name}: no RST"));
        let waited = t - t0;
        assert!(
            (1400..=1430).contains(&waited),
            "{name}: RST after {waited} ms, expected 2 backends x (100 + 200 + 400) ms"
        );
        assert_eq!(rst.seq, synack.seq.wrapping_add(1), "{name}");
        assert_eq!(rst.ack, c.seq_at(hello.len()), "{name}");
        assert_eq!(events(&w, Event::BackendSynSent) - before.0, 6, "{name}");
        assert_eq!(events(&w, Event::BackendFailover) - before.1, 2, "{name}");
        assert_eq!(events(&w, Event::SpliceResetSent) - before.2, 1, "{name}");
        assert_eq!(state(&w.sim), (0, 0), "{name}: state left behind");
    }
    // The sink host saw three SYNs for each of its two addresses.
    let swallowed = w.sim.hosts[1].dev.take_diverted(|_| true);
    let syns_to = |a: &str| {
        swallowed
            .iter()
            .filter_map(|f| raw::parse(f))
            .filter(|s| s.flags == flags::SYN && s.dst == sa(a))
            .count()
    };
    assert_eq!(syns_to("10.78.0.12:7002"), 3);
    assert_eq!(syns_to("10.78.0.13:7002"), 3);
    assert_eq!(events(&w, Event::Spliced), 0);
}

/// The client resets in each state: after the handshake before any data, while sluice
/// reads the first bytes, while it connects the backend (which then gets no more SYNs),
/// and once spliced (the backend gets the RST). Nothing is left behind: embryos at once,
/// the spliced flow after its close timeout. A RST outside the window sluice announced
/// (a blind reset) is ignored.
#[test]
fn client_reset_in_every_state_leaves_nothing_behind() {
    let cfg = BalancerConfig {
        splice: SpliceConfig {
            syn_rto_ms: 100,
            syn_tries: 50,
            ..SpliceConfig::default()
        },
        ..balancer_config(17)
    };
    let mut w = World::new(cfg, 2);
    w.sim.hosts[1]
        .dev
        .set_divert(Some(raw::divert_ports(vec![7002])));
    let hello = hello::client_hello(Some("b.example.test"), 100);
    let sink = hello::client_hello(Some("sink.example.test"), 100);
    assert_eq!(state(&w.sim), (0, 0));

    // After the handshake, before data.
    let mut c = raw_client(0, tls_vip());
    handshake(&mut w, &mut c, true);
    assert_eq!(state(&w.sim), (1, 1));
    c.rst(&mut w.sim, 0);
    w.step();
    assert_eq!(state(&w.sim), (0, 0), "after the handshake");

    // While reading the first bytes; a blind RST first.
    let mut c = raw_client(1, tls_vip());
    handshake(&mut w, &mut c, true);
    c.data(&mut w.sim, 0, &hello[..50]);
    w.step();
    assert_eq!(state(&w.sim), (1, 1));
    let mut blind = c.seg(c.seq_at(1 << 20), 0, flags::RST);
    blind.ack = 0;
    c.send(&mut w.sim, &blind);
    w.step();
    assert_eq!(
        state(&w.sim),
        (1, 1),
        "a RST outside the window closed the embryo"
    );
    c.rst(&mut w.sim, 50);
    w.step();
    assert_eq!(state(&w.sim), (0, 0), "while reading");

    // While connecting (the backend swallows the SYNs).
    let mut c = raw_client(2, tls_vip());
    handshake(&mut w, &mut c, true);
    c.data(&mut w.sim, 0, &sink);
    w.steps(250);
    let syns = events(&w, Event::BackendSynSent);
    assert!(syns >= 2);
    assert_eq!(state(&w.sim), (1, 1));
    c.rst(&mut w.sim, sink.len());
    w.step();
    assert_eq!(state(&w.sim), (0, 0), "while connecting");
    w.steps(1_000);
    assert_eq!(
        events(&w, Event::BackendSynSent),
        syns,
        "SYNs after the reset"
    );

    // Spliced.
    let mut c = raw_client(3, tls_vip());
    handshake(&mut w, &mut c, true);
    c.data(&mut w.sim, 0, &hello);
    assert!(pump(&mut w, &mut c, hello.len(), 1_000));
    assert_eq!(state(&w.sim), (1, 0));
    assert_eq!(w.backends.established(&w.sim.hosts[1].sockets), 1);
    w.sim.capture(true);
    c.rst(&mut w.sim, hello.len());
    w.steps(5);
    let to_backend: Vec<Segment> = w
        .sim
        .captured()
        .into_iter()
        .filter(|(l, _)| *l == 1)
        .filter_map(|(_, f)| raw::parse(&f))
        .collect();
    assert!(
        to_backend
            .iter()
            .any(|s| s.has(flags::RST) && s.seq == c.seq_at(hello.len())),
        "no RST to the backend: {to_backend:?}"
    );
    assert_eq!(w.backends.established(&w.sim.hosts[1].sockets), 0);
    let flows: Vec<TcpState> = w
        .sim
        .worker
        .stage()
        .flows()
        .iter()
        .map(|(_, f)| f.state)
        .collect();
    assert_eq!(flows, vec![TcpState::Close]);
    // Reclaimed within a minute of its expiry (10 s after the RST).
    assert!(
        w.sim.run_until(75_000, |sim| state(sim) == (0, 0)),
        "the reset flow did not expire"
    );
    print_counters(&w.sim);
    assert_eq!(events(&w, Event::EmbryoOpened), 4);
    assert_eq!(events(&w, Event::Spliced), 1);
    assert_eq!(events(&w, Event::SpliceResetSent), 0);
}

/// Moves bytes between a smoltcp socket and a buffer.
fn pump_socket(s: &mut tcp::Socket<'_>, out: &[u8], sent: &mut usize, got: &mut Vec<u8>) {
    if s.may_send() && *sent < out.len() {
        *sent += s.send_slice(&out[*sent..]).unwrap_or(0);
    }
    let mut buf = [0u8; 8192];
    while s.can_recv() {
        match s.recv_slice(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Closer {
    Client,
    Backend,
    Both,
    /// The client half-closes right after its hello, before sluice splices.
    ClientEarly,
}

/// FIN from the client, from the backend, from both at once, and right after the hello:
/// every byte arrives, both ends close cleanly, and sluice's flow goes to TIME_WAIT and
/// expires.
#[test]
fn fin_from_either_side_and_simultaneous_close() {
    let mut cfg = balancer_config(18);
    cfg.timeouts.tcp_time_wait = 2;
    for (k, closer) in [
        Closer::Client,
        Closer::Backend,
        Closer::Both,
        Closer::ClientEarly,
    ]
    .into_iter()
    .enumerate()
    {
        let (mut sim, _p) = sluice_tests::splice::sim(Faults::NONE, cfg.clone());
        let mut rng = Rng::new(40 + k as u64);
        let mut up = hello::client_hello(Some("a.example.test"), 100);
        if closer != Closer::ClientEarly {
            up.extend((0..20_000).map(|_| rng.next_u64() as u8));
        }
        let down: Vec<u8> = (0..30_000).map(|_| rng.next_u64() as u8).collect();
        let mut srv = socket(64 * 1024, 64 * 1024);
        srv.listen(7000).expect("listen");
        let sh = sim.hosts[1].sockets.add(srv);
        let mut cli = socket(64 * 1024, 64 * 1024);
        cli.connect(
            sim.hosts[0].iface.context(),
            (Sim::addr(ip(VIP)), 443),
            31_000,
        )
        .expect("connect");
        let ch = sim.hosts[0].sockets.add(cli);
        let (mut c_sent, mut c_got, mut s_sent, mut s_got) = (0, Vec::new(), 0, Vec::new());
        let (mut c_closed, mut s_closed) = (false, false);
        let ok = sim.run_until(60_000, |sim| {
            let cs = sim.hosts[0].sockets.get_mut::<tcp::Socket>(ch);
            pump_socket(cs, &up, &mut c_sent, &mut c_got);
            let c_done = c_sent == up.len() && cs.send_queue() == 0;
            let c_fin_seen = !cs.may_recv() && cs.state() != tcp::State::SynSent;
            let ss = sim.hosts[1].sockets.get_mut::<tcp::Socket>(sh);
            pump_socket(ss, &down, &mut s_sent, &mut s_got);
            let s_done = s_sent == down.len() && ss.send_queue() == 0;
            let s_fin_seen = !ss.may_recv() && ss.state() != tcp::State::Listen;
            let exchanged = c_got.len() == down.len() && s_got.len() == up.len();
            let (close_c, close_s) = match closer {
                Closer::Client => (exchanged && c_done, s_fin_seen && s_done),
                Closer::Backend => (c_fin_seen, exchanged && s_done),
                Closer::Both => {
                    let both = exchanged && c_done && s_done;
                    (both, both)
                }
                // Queued right behind the hello: FIN reaches sluice before the splice.
                Closer::ClientEarly => (c_sent == up.len(), exchanged && s_done),
            };
            if close_s && !s_closed {
                ss.close();
                s_closed = true;
            }
            let cs = sim.hosts[0].sockets.get_mut::<tcp::Socket>(ch);
            if close_c && !c_closed {
                cs.close();
                c_closed = true;
            }
            let done = |st: tcp::State| matches!(st, tcp::State::Closed | tcp::State::TimeWait);
            done(cs.state()) && done(sim.hosts[1].sockets.get::<tcp::Socket>(sh).state())
        });
        print_counters(&sim);
        let c = sim.hosts[0].sockets.get::<tcp::Socket>(ch);
        let s = sim.hosts[1].sockets.get::<tcp::Socket>(sh);
        assert!(ok, "{closer:?}: client {} backend {}", c.state(), s.state());
        assert_eq!(
            first_difference(&c_got, &down),
            None,
            "{closer:?}: backend -> client bytes"
        );
        assert_eq!(
            first_difference(&s_got, &up),
            None,
            "{closer:?}: client -> backend bytes"
        );
        let counters = sim.worker.counters();
        assert_eq!(counters.events_of(Event::Spliced), 1, "{closer:?}");
        assert_eq!(counters.events_of(Event::SpliceResetSent), 0, "{closer:?}");
        let flows: Vec<TcpState> = sim
            .worker
            .stage()
            .flows()
            .iter()
            .map(|(_, f)| f.state)
            .collect();
        assert_eq!(flows, vec![TcpState::TimeWait], "{closer:?}");
        // The flow table reclaims a flow within a minute of its expiry (its timer wheel
        // re-files lazily).
        assert!(
            sim.run_until(70_000, |sim| sim.worker.stage().flows().is_empty()),
            "{closer:?}: the closed flow never expired"
        );
        assert_eq!(sim.worker.stage().embryos(), 0);
    }
}

/// HTTP by Host only (Istio Gateway + a VirtualService without path rules, port 81):
/// delayed binding splices each connection to a 3:1 weighted pick over a and b; the Host
/// header's case and port do not matter, an absolute-form target's host counts; an
/// unknown Host is reset. (Routes with path rules go per request: `sim_http`.)
#[test]
fn http_routes_by_host_with_weights() {
    let mut w = World::new(balancer_config(19), 12);
    let req = |path: &str, host: &str| {
        format!("POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 3000\r\n\r\n").into_bytes()
    };
    let conns: Vec<Vec<u8>> = (0..48)
        .map(|i| match i % 3 {
            0 => req(&format!("/items/{i}?x=1"), "plain.example.test"),
            1 => req("/api", "PLAIN.Example.Test:81"),
            _ => req(
                &format!("http://plain.example.test/static/{i}"),
                "plain.example.test",
            ),
        })
        .collect();
    let out = w.run(VIP, 81, &conns, 3_000, 8, &mut Rng::new(6));
    print_counters(&w.sim);
    assert_eq!(out.echoed, 48, "{out:?}");
    let (a, b) = (w.backends.hits("10.78.0.11"), w.backends.hits("10.78.0.12"));
    assert_eq!(a + b, 48);
    assert!(
        a > 2 * b && b > 0,
        "split a {a} : b {b}, expected about 3:1"
    );
    assert_eq!(w.backends.hits("10.78.0.13"), 0);

    let unknown = vec![req("/x", "nope.example.test")];
    let out = w.run(VIP, 81, &unknown, 100, 1, &mut Rng::new(8));
    print_counters(&w.sim);
    assert_eq!(out.reset, 1, "{out:?}");
    assert_eq!(events(&w, Event::FirstBytesNoRoute), 1);
    assert_eq!(events(&w, Event::SpliceResetSent), 1);
    assert_eq!(events(&w, Event::Spliced), 48);
    assert_eq!(state(&w.sim).1, 0);
}

/// `httpsRedirect`: sluice answers the request itself with `301` and
/// `Location: https://<host><path>`, then FIN; the client sees the whole answer and the
/// FIN, closes, sluice acknowledges its FIN (the client reaches CLOSED) and holds
/// nothing. No backend is contacted.
#[test]
fn https_redirect_answers_301_and_closes_cleanly() {
    let mut w = World::new(balancer_config(20), 2);
    // (request, Location, the client half-closes right after its request)
    let cases = [
        (
            "GET /cart?item=3 HTTP/1.1\r\nHost: Shop.Example.Test:8080\r\nUser-Agent: sim\r\n\r\n",
            "https://shop.example.test/cart?item=3",
            false,
        ),
        (
            "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n",
            "https://other.test/",
            false,
        ),
        (
            "GET /a/b?c HTTP/1.0\r\nHost: www.example.test\r\n\r\n",
            "https://www.example.test/a/b?c",
            true,
        ),
    ];
    for (k, (request, location, half_close)) in cases.iter().enumerate() {
        let mut cli = socket(8 * 1024, 8 * 1024);
        cli.connect(
            w.sim.hosts[0].iface.context(),
            (Sim::addr(ip(VIP)), 8080),
            32_000 + k as u16,
        )
        .expect("connect");
        let ch = w.sim.hosts[0].sockets.add(cli);
        let (mut sent, mut got) = (0, Vec::new());
        let (mut fin_seen, mut closed) = (false, false);
        let ok = w.sim.run_until(5_000, |sim| {
            let c = sim.hosts[0].sockets.get_mut::<tcp::Socket>(ch);
            pump_socket(c, request.as_bytes(), &mut sent, &mut got);
            if *half_close && sent == request.len() && !closed {
                c.close();
                closed = true;
            }
            if !c.may_recv() && c.state() != tcp::State::SynSent {
                fin_seen = true;
                if !closed {
                    c.close();
                    closed = true;
                }
            }
            matches!(c.state(), tcp::State::Closed | tcp::State::TimeWait)
        });
        let c = w.sim.hosts[0].sockets.get::<tcp::Socket>(ch);
        assert!(ok, "case {k}: client in {}", c.state());
        assert!(fin_seen, "case {k}: no FIN after the answer");
        let want = format!(
            "HTTP/1.1 301 Moved Permanently\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(String::from_utf8_lossy(&got), want, "case {k}");
        // Both FINs are through and acknowledged: nothing more to wait for.
        assert!(
            w.sim.run_until(20, |sim| state(sim) == (0, 0)),
            "case {k}: state left behind: {:?}",
            state(&w.sim)
        );
    }
    print_counters(&w.sim);
    assert_eq!(events(&w, Event::HttpRedirectSent), 3);
    assert_eq!(events(&w, Event::BackendSynSent), 0);
    assert_eq!(events(&w, Event::Spliced), 0);
    assert_eq!(events(&w, Event::SpliceResetSent), 0);
}

/// IPv6 clients through the SNI listener: a dual-stack backend is reached over IPv6 and
/// echoes byte for byte; a name whose backends are IPv4 only is reset (full NAT keeps the
/// family).
#[test]
fn ipv6_client_through_the_sni_listener() {
    let mut w = World::new(balancer_config(21), 10);
    let firsts: Vec<Vec<u8>> = (0..10)
        .map(|_| hello::client_hello(Some("a.example.test"), 200))
        .collect();
    let out = w.run(VIP6, 443, &firsts, 20_000, 5, &mut Rng::new(9));
    assert_eq!(out.echoed, 10, "{out:?}");
    assert_eq!(w.backends.hits("fd78::11"), 10);
    let v4_only = vec![hello::client_hello(Some("b.example.test"), 200)];
    let out = w.run(VIP6, 443, &v4_only, 100, 1, &mut Rng::new(10));
    print_counters(&w.sim);
    assert_eq!(out.reset, 1, "{out:?}");
    assert_eq!(drops(&w, DropReason::BackendRejected), 1);
    assert_eq!(events(&w, Event::Spliced), 10);
    assert_eq!(events(&w, Event::SpliceResetSent), 1);
    assert_eq!(state(&w.sim).1, 0);
}

/// A SYN flood — thousands of SYNs from many sources and ports, never acknowledged —
/// creates no state: each is answered with a cookie and forgotten. Forged ACKs are bad
/// cookies. Legitimate connections in the middle of it all complete.
#[test]
fn syn_flood_creates_no_state_and_forged_acks_are_bad_cookies() {
    let mut w = World::new(balancer_config(22), 10);
    let mut rng = Rng::new(11);
    let mac = w.sim.hosts[0].mac.0;
    let gw = w.sim.sluice_macs[0];
    let random_src = |rng: &mut Rng| {
        let a = if rng.chance(0.5) {
            std::net::Ipv4Addr::new(10, 77, 0, 100 + rng.below(150) as u8)
        } else {
            std::net::Ipv4Addr::new(198, 51, rng.below(256) as u8, rng.below(256) as u8)
        };
        SocketAddr::new(a.into(), 1024 + rng.below(60_000) as u16)
    };
    let syn = |rng: &mut Rng| {
        let s = Segment {
            src: random_src(rng),
            dst: tls_vip(),
            seq: rng.next_u64() as u32,
            ack: 0,
            flags: flags::SYN,
            window: 64_240,
            options: syn_options(1460, Some(7), true),
            payload: Vec::new(),
        };
        raw::frame(gw, mac, &s)
    };
    let forged = |rng: &mut Rng| {
        let s = Segment {
            src: random_src(rng),
            dst: tls_vip(),
            seq: rng.next_u64() as u32,
            ack: rng.next_u64() as u32,
            flags: flags::ACK | if rng.chance(0.5) { flags::PSH } else { 0 },
            window: 502,
            options: Vec::new(),
            payload: if rng.chance(0.5) {
                hello::client_hello(Some("a.example.test"), 10)
            } else {
                Vec::new()
            },
        };
        raw::frame(gw, mac, &s)
    };
    // The flood alone.
    for _ in 0..25 {
        for _ in 0..200 {
            let f = syn(&mut rng);
            w.sim.hosts[0].dev.inject(&f);
        }
        w.step();
        assert_eq!(state(&w.sim), (0, 0));
    }
    assert_eq!(events(&w, Event::SynCookieSent), 5_000);
    for _ in 0..10 {
        for _ in 0..200 {
            let f = forged(&mut rng);
            w.sim.hosts[0].dev.inject(&f);
        }
        w.step();
    }
    assert_eq!(drops(&w, DropReason::BadCookie), 2_000);
    assert_eq!(state(&w.sim), (0, 0));
    assert_eq!(events(&w, Event::EmbryoOpened), 0);

    // Legitimate connections inside the flood.
    let (mut flood, mut fakes) = (0u64, 0u64);
    let firsts: Vec<Vec<u8>> = (0..10)
        .map(|_| hello::client_hello(Some("b.example.test"), 200))
        .collect();
    let out = run_with(
        &mut w.sim,
        &mut w.backends,
        (ip(VIP), 443),
        &firsts,
        5_000,
        5,
        &mut Rng::new(12),
        &mut |sim| {
            if flood < 10_000 {
                for _ in 0..100 {
                    let f = syn(&mut rng);
                    sim.hosts[0].dev.inject(&f);
                }
                for _ in 0..20 {
                    let f = forged(&mut rng);
                    sim.hosts[0].dev.inject(&f);
                }
                flood += 100;
                fakes += 20;
            }
        },
    );
    w.steps(2); // the last injected batch
    print_counters(&w.sim);
    assert_eq!(out.echoed, 10, "{out:?}");
    assert_eq!(events(&w, Event::SynCookieSent), 5_000 + flood + 10);
    assert_eq!(drops(&w, DropReason::BadCookie), 2_000 + fakes);
    assert_eq!(events(&w, Event::EmbryoOpened), 10);
    assert_eq!(events(&w, Event::Spliced), 10);
    assert_eq!(w.sim.worker.stage().embryos(), 0);
    // Only the ten legitimate connections left flows (closing).
    assert_eq!(w.sim.worker.stage().flows().len(), 10);
}
