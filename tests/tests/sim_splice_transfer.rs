//! Bulk transfers through the splice: 10 MB each way against backends that announce
//! window scale 0, 7 and 10 (smoltcp derives its shift from its receive buffer), a client
//! without window scaling and a backend that declines it — every segment's sequence
//! numbers and window checked against what the other side sent; SACK blocks under loss;
//! and the checksums of every frame sluice sends during a lossy run.

use sluice_dataplane::balancer::BalancerConfig;
use sluice_dataplane::splice::SpliceConfig;
use sluice_dataplane::stats::Event;
use sluice_tests::hello;
use sluice_tests::raw::{self, flags, sack_option, syn_options, RawClient, Segment};
use sluice_tests::sim::{Faults, Rng, Sim};
use sluice_tests::splice::{
    balancer_config, first_difference, ip, print_counters, sim_links, socket, state, World, CLIENT,
    RAW_PORTS, VIP, VIP6,
};
use smoltcp::socket::tcp;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

const TEN_MB: usize = 10_000_000;
/// Exchanges per simulated millisecond (a smoltcp socket sends one segment per poll).
const ROUNDS: usize = 64;
/// Bytes each application reads per exchange: less than a sender can send in one, so
/// receive buffers fill and the windows (and their scaling) decide how much is in flight.
const READ_PER_ROUND: usize = 1_024;
/// The window scale sluice announces (the default [`SpliceConfig::wscale`]).
const OURS: u8 = 7;

/// A segment's header, as the checks need it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Hdr {
    seq: u32,
    ack: u32,
    flags: u8,
    window: u16,
    len: u32,
    wscale: Option<u8>,
    sack: Vec<(u32, u32)>,
}

impl Hdr {
    fn of(s: &Segment) -> Hdr {
        let o = s.opts();
        Hdr {
            seq: s.seq,
            ack: s.ack,
            flags: s.flags,
            window: s.window,
            len: s.payload.len() as u32,
            wscale: o.wscale,
            sack: o.sack,
        }
    }
    fn syn(&self) -> bool {
        self.flags & flags::SYN != 0
    }
}

/// A window field of scale `from` re-expressed at scale `to`, as a splice must: the same
/// bytes rounded down, never zero from a non-zero window, at most 65535.
fn rescaled(win: u16, from: u8, to: u8) -> u16 {
    let bytes = u64::from(win) << from;
    let v = bytes >> to;
    if v == 0 && bytes > 0 {
        1
    } else {
        v.min(0xffff) as u16
    }
}

struct Setup {
    /// The backend's receive buffer (its window shift follows from it).
    backend_rx: usize,
    /// The client offers window scaling (else the option is stripped from its SYN).
    client_ws: bool,
    /// The backend declines window scaling (the option is stripped from the SYN it gets).
    backend_declines: bool,
    /// Bytes after the hello, each way.
    bytes: usize,
    /// Faults on the client's link.
    outside: Faults,
    seed: u64,
}

#[derive(Debug, Default)]
struct Report {
    virtual_ms: u64,
    backend_ws: Option<u8>,
    announced_ws: Option<u8>,
    syn_to_backend_ws: Option<u8>,
    client_syn_ws: Option<u8>,
    reply_checked: usize,
    orig_checked: usize,
    retransmitted_to_client: u64,
    retransmitted_to_backend: u64,
    sack_blocks: usize,
}

type Log = Arc<Mutex<Vec<Hdr>>>;

fn pattern(i: usize) -> u8 {
    ((i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 57) as u8 ^ (i as u8)
}

/// One connection: the client sends a hello and `bytes` more, the backend echoes all of
/// it, then both close. Checks byte-exactness on the way; returns what the frames say.
fn transfer(s: Setup) -> Report {
    let (mut sim, _p) = sim_links(s.outside, Faults::NONE, balancer_config(s.seed));
    let client_port = 33_000;
    let vip = SocketAddr::new(ip(VIP), 443);
    let backend_log: Log = Arc::default();
    let client_log: Log = Arc::default();
    {
        let log = backend_log.clone();
        sim.hosts[1]
            .dev
            .set_tx_hook(Some(Box::new(move |f: &mut [u8]| {
                if let Some(seg) = raw::parse(f).filter(|x| x.src.port() == 7000) {
                    if let Ok(mut l) = log.lock() {
                        l.push(Hdr::of(&seg));
                    }
                }
                true
            })));
        let declines = s.backend_declines;
        sim.hosts[1]
            .dev
            .set_divert(Some(Box::new(move |f: &mut [u8]| {
                if declines && raw::parse(f).is_some_and(|x| x.flags == flags::SYN) {
                    raw::strip_option(f, 3);
                }
                true
            })));
        let log = client_log.clone();
        let strip = !s.client_ws;
        sim.hosts[0]
            .dev
            .set_tx_hook(Some(Box::new(move |f: &mut [u8]| {
                if strip && raw::parse(f).is_some_and(|x| x.flags == flags::SYN) {
                    raw::strip_option(f, 3);
                }
                if let Some(seg) = raw::parse(f).filter(|x| x.dst == vip) {
                    if let Ok(mut l) = log.lock() {
                        l.push(Hdr::of(&seg));
                    }
                }
                true
            })));
    }
    let mut up = hello::client_hello(Some("a.example.test"), 200);
    up.extend((0..s.bytes).map(pattern));
    let mut srv = socket(s.backend_rx, 1 << 20);
    srv.listen(7000).expect("listen");
    let sh = sim.hosts[1].sockets.add(srv);
    let mut cli = socket(1 << 20, 1 << 20);
    cli.connect(
        sim.hosts[0].iface.context(),
        (Sim::addr(ip(VIP)), 443),
        client_port,
    )
    .expect("connect");
    let ch = sim.hosts[0].sockets.add(cli);

    sim.capture(true);
    let mut to_client: Vec<Hdr> = Vec::new();
    let mut to_backend: Vec<Hdr> = Vec::new();
    let (mut sent, mut got, mut echoed) = (0usize, 0usize, 0usize);
    let mut buf = vec![0u8; 64 * 1024];
    let start = sim.now_ms;
    let (mut c_closed, mut s_closed) = (false, false);
    let limit = start + 300_000;
    let done = loop {
        for _ in 0..ROUNDS {
            sim.round();
            for (link, f) in sim.captured() {
                let Some(seg) = raw::parse(&f) else { continue };
                if link == 0 && seg.src == vip && seg.dst.port() == client_port {
                    to_client.push(Hdr::of(&seg));
                } else if link == 1 && seg.dst.port() == 7000 {
                    to_backend.push(Hdr::of(&seg));
                }
            }
            // The backend echoes.
            let b = sim.hosts[1].sockets.get_mut::<tcp::Socket>(sh);
            let mut budget = READ_PER_ROUND;
            while budget > 0 && b.can_recv() && b.send_capacity() > b.send_queue() {
                let room = (b.send_capacity() - b.send_queue()).min(budget);
                let n = b.recv_slice(&mut buf[..room]).unwrap_or(0);
                if n == 0 {
                    break;
                }
                assert_eq!(b.send_slice(&buf[..n]).unwrap_or(0), n);
                echoed += n;
                budget -= n;
            }
            if b.state() == tcp::State::CloseWait && b.send_queue() == 0 && !s_closed {
                b.close();
                s_closed = true;
            }
            // The client sends and checks what comes back.
            let c = sim.hosts[0].sockets.get_mut::<tcp::Socket>(ch);
            if c.may_send() && sent < up.len() {
                sent += c.send_slice(&up[sent..]).unwrap_or(0);
            }
            let mut budget = READ_PER_ROUND;
            while budget > 0 && c.can_recv() {
                let n = c.recv_slice(&mut buf[..budget]).unwrap_or(0);
                if n == 0 {
                    break;
                }
                budget -= n;
                assert!(got + n <= up.len(), "more bytes back than sent");
                assert!(
                    buf[..n] == up[got..got + n],
                    "bytes {got}..{} came back different",
                    got + n
                );
                got += n;
            }
            if got == up.len() && !c_closed {
                c.close();
                c_closed = true;
            }
        }
        sim.now_ms += 1;
        let c = sim.hosts[0].sockets.get::<tcp::Socket>(ch);
        let b = sim.hosts[1].sockets.get::<tcp::Socket>(sh);
        let closed = |st: tcp::State| matches!(st, tcp::State::Closed | tcp::State::TimeWait);
        if closed(c.state()) && (closed(b.state()) || b.state() == tcp::State::Listen) {
            break true;
        }
        if sim.now_ms > limit {
            break false;
        }
    };
    print_counters(&sim);
    assert!(
        done,
        "stuck: sent {sent} got {got} echoed {echoed} of {}",
        up.len()
    );
    assert_eq!(got, up.len());
    assert_eq!(echoed, up.len());
    let c = sim.worker.counters();
    assert_eq!(c.events_of(Event::Spliced), 1);
    assert_eq!(c.events_of(Event::SpliceResetSent), 0);

    let backend = backend_log.lock().map(|l| l.clone()).unwrap_or_default();
    let client = client_log.lock().map(|l| l.clone()).unwrap_or_default();
    let mut r = Report {
        virtual_ms: sim.now_ms - start,
        ..Report::default()
    };
    let synack_out = to_client
        .iter()
        .find(|h| h.syn())
        .expect("sluice's SYN-ACK");
    let cookie = synack_out.seq;
    r.announced_ws = synack_out.wscale;
    let client_syn = client.iter().find(|h| h.syn()).expect("client SYN");
    r.client_syn_ws = client_syn.wscale;
    let isn = client_syn.seq;
    let syn_in = to_backend
        .iter()
        .find(|h| h.syn())
        .expect("SYN to the backend");
    assert_eq!(syn_in.seq, isn, "the backend SYN carries the client's ISN");
    r.syn_to_backend_ws = syn_in.wscale;
    let backend_synack = backend.iter().find(|h| h.syn()).expect("backend SYN-ACK");
    r.backend_ws = backend_synack.wscale;
    let b_isn = backend_synack.seq;
    let delta = cookie.wrapping_sub(b_isn);
    // The scales in effect: towards the client sluice's own (if the client scales);
    // the backend's when both ends of its connection scale; for a client that scales
    // but a backend that does not, client windows are unscaled on their way.
    let (bws, ows, fix) = match (r.client_syn_ws, r.backend_ws) {
        (None, _) => (0, 0, 0),
        (Some(_), Some(b)) => (b, OURS, 0),
        (Some(c), None) => (0, OURS, c),
    };

    // Backend -> client: every segment, in order, shifted by delta and rescaled.
    if s.outside == Faults::NONE {
        let from_b: Vec<&Hdr> = backend.iter().filter(|h| !h.syn()).collect();
        let out: Vec<&Hdr> = to_client.iter().filter(|h| !h.syn()).collect();
        // sluice's own acknowledgments of the first bytes come first (before the backend
        // answered): pure ACKs in sluice's sequence space.
        let own = out.len().saturating_sub(from_b.len());
        assert!(own <= 8, "{own} segments of sluice's own to the client");
        for o in &out[..own] {
            assert_eq!(
                (o.len, o.seq),
                (0, cookie.wrapping_add(1)),
                "sluice's own ACK"
            );
        }
        let out = &out[own..];
        assert_eq!(from_b.len(), out.len(), "backend segments lost or added");
        for (k, (b, o)) in from_b.iter().zip(out).enumerate() {
            assert_eq!(o.seq, b.seq.wrapping_add(delta), "segment {k}: seq");
            assert_eq!(
                (o.ack, o.flags, o.len),
                (b.ack, b.flags, b.len),
                "segment {k}"
            );
            assert_eq!(
                o.window,
                rescaled(b.window, bws, ows),
                "segment {k}: window {} at scale {bws} -> {ows}",
                b.window
            );
            assert_eq!(o.sack, b.sack, "segment {k}: SACK of the client's space");
        }
        r.reply_checked = out.len();
    }
    // Client -> backend (past the handshake's replay): ack and SACK less delta, window
    // unscaled when the backend does not scale. Matched by content (sluice's replay is
    // its own).
    let mut by_key: HashMap<(u32, u32, u32, u8), VecDeque<&Hdr>> = HashMap::new();
    for h in client.iter().filter(|h| !h.syn()) {
        by_key
            .entry((h.seq, h.ack.wrapping_sub(delta), h.len, h.flags))
            .or_default()
            .push_back(h);
    }
    let acks_data = |ack: u32| {
        let d = ack.wrapping_sub(b_isn.wrapping_add(1));
        d > 0 && d < 1 << 30
    };
    let expect_window = |w: u16| if fix == 0 { w } else { rescaled(w, fix, 0) };
    let mut eligible = 0;
    for o in to_backend.iter().filter(|h| !h.syn() && acks_data(h.ack)) {
        eligible += 1;
        // Several client segments can share a key (duplicate ACKs, retransmissions, some
        // of them lost on the way): the one whose window and SACK this one carries.
        let q = by_key
            .get_mut(&(o.seq, o.ack, o.len, o.flags))
            .unwrap_or_else(|| {
                panic!("a segment to the backend no client segment explains: {o:?}")
            });
        let shifted = |c: &Hdr| -> Vec<(u32, u32)> {
            c.sack
                .iter()
                .map(|&(a, b)| (a.wrapping_sub(delta), b.wrapping_sub(delta)))
                .collect()
        };
        let Some(at) = q
            .iter()
            .position(|c| expect_window(c.window) == o.window && shifted(c) == o.sack)
        else {
            panic!(
                "window {} / SACK {:?} to the backend: the client sent {:?} (window scale {fix}, delta {delta})",
                o.window,
                o.sack,
                q.iter().map(|c| (c.window, c.sack.clone())).collect::<Vec<_>>()
            );
        };
        q.remove(at);
        r.sack_blocks += o.sack.len();
    }
    r.orig_checked = eligible;
    // Retransmissions on each side (bytes sent below the highest sent before).
    let retransmitted = |hs: &[Hdr], base: u32| {
        let mut max_end = 0u32;
        let mut again = 0u64;
        for h in hs.iter().filter(|h| h.len > 0) {
            let off = h.seq.wrapping_sub(base);
            let end = off + h.len;
            if off < max_end {
                again += u64::from(max_end.min(end) - off);
            }
            max_end = max_end.max(end);
        }
        again
    };
    r.retransmitted_to_client = retransmitted(&to_client, cookie.wrapping_add(1));
    r.retransmitted_to_backend = retransmitted(&to_backend, isn.wrapping_add(1));
    // SACK edges towards the backend lie in its own sequence space.
    let b_end = backend
        .iter()
        .map(|h| h.seq.wrapping_sub(b_isn).wrapping_add(h.len))
        .max()
        .unwrap_or(0);
    for o in to_backend.iter().filter(|h| !h.sack.is_empty()) {
        for &(a, b) in &o.sack {
            let (a, b) = (a.wrapping_sub(b_isn), b.wrapping_sub(b_isn));
            let ack = o.ack.wrapping_sub(b_isn);
            assert!(
                ack < a && a < b && b <= b_end,
                "SACK block ({a}, {b}) outside the backend's data (ack {ack}, sent {b_end})"
            );
        }
    }
    eprintln!("{r:?}");
    r
}

fn ten_mb(backend_rx: usize, client_ws: bool, backend_declines: bool, seed: u64) -> Report {
    let t = std::time::Instant::now();
    let r = transfer(Setup {
        backend_rx,
        client_ws,
        backend_declines,
        bytes: TEN_MB,
        outside: Faults::NONE,
        seed,
    });
    eprintln!(
        "10 MB each way in {:?} ({} ms simulated)",
        t.elapsed(),
        r.virtual_ms
    );
    assert!(r.reply_checked > 5_000, "{r:?}");
    assert!(r.orig_checked > 5_000, "{r:?}");
    assert_eq!(r.retransmitted_to_client, 0, "{r:?}");
    assert_eq!(r.retransmitted_to_backend, 0, "{r:?}");
    r
}

#[test]
fn ten_megabytes_each_way_backend_window_scale_0() {
    let r = ten_mb(60_000, true, false, 31);
    assert_eq!(r.backend_ws, Some(0));
    assert_eq!(r.announced_ws, Some(OURS));
    assert_eq!(r.syn_to_backend_ws, r.client_syn_ws);
}

#[test]
fn ten_megabytes_each_way_backend_window_scale_7() {
    let r = ten_mb(4 << 20, true, false, 32);
    assert_eq!(r.backend_ws, Some(7));
    assert_eq!(r.announced_ws, Some(OURS));
}

#[test]
fn ten_megabytes_each_way_backend_window_scale_10() {
    let r = ten_mb(32 << 20, true, false, 33);
    assert_eq!(r.backend_ws, Some(10));
    assert_eq!(r.announced_ws, Some(OURS));
}

/// A client that does not offer window scaling: sluice offers none either, nor does it
/// ask the backend for it; windows pass unchanged both ways.
#[test]
fn ten_megabytes_each_way_client_without_window_scaling() {
    let r = ten_mb(4 << 20, false, false, 34);
    assert_eq!(r.client_syn_ws, None);
    assert_eq!(r.announced_ws, None);
    assert_eq!(r.syn_to_backend_ws, None);
    assert_eq!(r.backend_ws, None);
}

/// A client that scales and a backend that declines: the backend's windows are scaled
/// down to sluice's scale, the client's unscaled for the backend.
#[test]
fn ten_megabytes_each_way_backend_declining_window_scaling() {
    let r = ten_mb(60_000, true, true, 35);
    assert!(r.client_syn_ws.is_some());
    assert_eq!(r.announced_ws, Some(OURS));
    assert_eq!(r.backend_ws, None);
}

/// Loss on the client's link: smoltcp clients acknowledge out-of-order data with SACK
/// blocks, which must reach the backend moved into its sequence space (smoltcp senders
/// do not act on SACK, so recovery itself is by retransmission timeout and fast
/// retransmit; what this checks is sluice's rewrite, under real traffic).
#[test]
fn sack_blocks_reach_the_backend_in_its_sequence_space_under_loss() {
    let r = transfer(Setup {
        backend_rx: 1 << 20,
        client_ws: true,
        backend_declines: false,
        bytes: 2_000_000,
        outside: Faults {
            drop: 0.02,
            ..Faults::NONE
        },
        seed: 36,
    });
    assert!(r.sack_blocks > 10, "hardly any SACK blocks: {r:?}");
    assert!(r.retransmitted_to_client > 0, "{r:?}");
}

/// Hand-written SACK options in every layout — even and odd alignment (the odd one
/// cannot be updated incrementally), one to three blocks, beside other options — reach
/// the backend with every edge and the ack exactly `delta` lower and a valid checksum.
#[test]
fn sack_edges_shift_exactly_in_every_option_layout() {
    let mut w = World::new(balancer_config(37), 2);
    let b_isn: Arc<Mutex<Option<u32>>> = Arc::default();
    {
        let b_isn = b_isn.clone();
        w.sim.hosts[1]
            .dev
            .set_tx_hook(Some(Box::new(move |f: &mut [u8]| {
                if let Some(s) = raw::parse(f).filter(|s| s.has(flags::SYN | flags::ACK)) {
                    if let Ok(mut b) = b_isn.lock() {
                        *b = Some(s.seq);
                    }
                }
                true
            })));
    }
    let hello = hello::client_hello(Some("b.example.test"), 2_000);
    let mut c = RawClient::new(
        0,
        SocketAddr::new(ip(CLIENT), RAW_PORTS),
        SocketAddr::new(ip(VIP), 443),
        0xfff0_0000,
    );
    c.syn(&mut w.sim, syn_options(1460, Some(7), true));
    w.step();
    c.poll(&mut w.sim);
    c.ack(&mut w.sim);
    for (k, piece) in hello.chunks(1_400).enumerate() {
        c.data(&mut w.sim, k * 1_400, piece);
    }
    for _ in 0..500 {
        w.step();
        let before = c.received.len();
        c.poll(&mut w.sim);
        if c.received.len() != before {
            c.ack(&mut w.sim);
        }
        if c.received.len() == hello.len() {
            break;
        }
    }
    assert!(
        c.received == hello,
        "echo: {} of {} bytes",
        c.received.len(),
        hello.len()
    );
    let cookie = c.irs.expect("cookie");
    let b_isn = b_isn.lock().ok().and_then(|b| *b).expect("backend ISN");
    let delta = cookie.wrapping_sub(b_isn);
    let base = cookie.wrapping_add(1);
    let blocks = [
        vec![(base.wrapping_add(100), base.wrapping_add(200))],
        vec![
            (base.wrapping_add(1_000), base.wrapping_add(1_460)),
            (base.wrapping_add(300), base.wrapping_add(500)),
        ],
        vec![
            (base.wrapping_add(10), base.wrapping_add(20)),
            (base.wrapping_add(30), base.wrapping_add(40)),
            (base.wrapping_add(50), base.wrapping_add(60)),
        ],
    ];
    w.sim.capture(true);
    let mut sent = Vec::new();
    for b in &blocks {
        for odd in [false, true] {
            let mut s = c.seg(c.seq_at(hello.len()), base.wrapping_add(5), flags::ACK);
            s.options = sack_option(b, odd);
            if b.len() < 3 {
                // Beside a timestamp-sized unknown option.
                s.options
                    .extend_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
            }
            c.send(&mut w.sim, &s);
            w.step();
            sent.push((s, odd));
        }
    }
    w.steps(5);
    let out: Vec<(Vec<u8>, Segment)> = w
        .sim
        .captured()
        .into_iter()
        .filter(|(l, _)| *l == 1)
        .filter_map(|(_, f)| raw::parse(&f).map(|s| (f, s)))
        .filter(|(_, s)| !s.opts().sack.is_empty())
        .collect();
    assert_eq!(out.len(), sent.len(), "SACK segments lost");
    for ((f, o), (s, odd)) in out.iter().zip(&sent) {
        raw::check_checksums(f).unwrap_or_else(|e| panic!("odd {odd}: {e}"));
        assert_eq!(o.ack, s.ack.wrapping_sub(delta));
        let want: Vec<(u32, u32)> = s
            .opts()
            .sack
            .iter()
            .map(|&(a, b)| (a.wrapping_sub(delta), b.wrapping_sub(delta)))
            .collect();
        assert_eq!(o.opts().sack, want, "odd {odd}");
        assert_eq!(o.opts().sack_at.map(|a| a % 2), Some(usize::from(*odd)));
        assert_eq!(o.options.len(), s.options.len());
    }
}

/// Everything sluice sends during a lossy run with every kind of traffic — SYN-ACK
/// cookies, spliced segments both ways over IPv4 and IPv6, replays, resets, HTTP
/// redirects, SACK rewrites (odd alignment too), ARP/ND — carries valid IPv4 header and
/// TCP/ICMP checksums, verified with smoltcp's code. (Corruption is not injected: sluice
/// does not verify the TCP checksum of what it forwards — the receiver does — so a frame
/// corrupted before sluice leaves it with a checksum that is still wrong, by design.)
#[test]
fn every_frame_sluice_sends_has_valid_checksums() {
    let faults = Faults {
        drop: 0.02,
        duplicate: 0.02,
        reorder: 0.05,
        corrupt: 0.0,
    };
    let cfg = BalancerConfig {
        splice: SpliceConfig {
            syn_rto_ms: 50,
            syn_tries: 2,
            backend_tries: 2,
            ..SpliceConfig::default()
        },
        ..balancer_config(38)
    };
    let mut w = World::with_faults(faults, cfg, 12);
    w.sim.capture(true);
    let mut rng = Rng::new(13);
    let mut frames: Vec<Vec<u8>> = Vec::new();
    let names = ["a.example.test", "b.example.test", "x.wild.test"];
    let firsts: Vec<Vec<u8>> = (0..12)
        .map(|i| hello::client_hello(Some(names[i % 3]), 300))
        .collect();
    let out = w.run(VIP, 443, &firsts, 30_000, 6, &mut rng);
    assert_eq!(out.echoed, 12, "{out:?}");
    frames.extend(w.sim.captured().into_iter().map(|(_, f)| f));
    let v6: Vec<Vec<u8>> = (0..6)
        .map(|_| hello::client_hello(Some("a.example.test"), 300))
        .collect();
    let out = w.run(VIP6, 443, &v6, 30_000, 3, &mut rng);
    assert_eq!(out.echoed, 6, "{out:?}");
    frames.extend(w.sim.captured().into_iter().map(|(_, f)| f));
    let http: Vec<Vec<u8>> = (0..4)
        .map(|i| format!("GET /api/{i} HTTP/1.1\r\nHost: plain.example.test\r\n\r\n").into_bytes())
        .collect();
    let out = w.run(VIP, 81, &http, 2_000, 2, &mut rng);
    assert_eq!(out.echoed, 4, "{out:?}");
    // Redirects and resets: the runner counts them as not echoed; what matters here is
    // what sluice sent.
    let redirects: Vec<Vec<u8>> = (0..3)
        .map(|i| format!("GET /r{i} HTTP/1.1\r\nHost: shop.example.test\r\n\r\n").into_bytes())
        .collect();
    w.run(VIP, 8080, &redirects, 0, 3, &mut rng);
    let silent = vec![hello::client_hello(Some("silent.example.test"), 10); 2];
    let out = w.run(VIP, 443, &silent, 0, 2, &mut rng);
    assert_eq!(out.reset, 2, "{out:?}");
    frames.extend(w.sim.captured().into_iter().map(|(_, f)| f));
    // Odd-aligned SACK from a hand-made client, through the lossy links.
    let mut c = RawClient::new(
        0,
        SocketAddr::new(ip(CLIENT), RAW_PORTS),
        SocketAddr::new(ip(VIP), 443),
        0x7000_0000,
    );
    let hello = hello::client_hello(Some("b.example.test"), 100);
    for _ in 0..50 {
        if c.irs.is_none() {
            c.syn(&mut w.sim, syn_options(1460, Some(7), true));
        } else if c.received.len() < hello.len() {
            c.ack(&mut w.sim);
            c.data(&mut w.sim, 0, &hello);
        } else {
            break;
        }
        w.steps(20);
        c.poll(&mut w.sim);
    }
    assert_eq!(first_difference(&c.received, &hello), None);
    let base = c.irs.unwrap_or(0).wrapping_add(1);
    for k in 0..20u32 {
        let mut s = c.seg(c.seq_at(hello.len()), c.rcv_nxt(), flags::ACK);
        s.options = sack_option(&[(base + 10 * k, base + 10 * k + 5)], k % 2 == 1);
        c.send(&mut w.sim, &s);
        w.step();
    }
    w.steps(100);
    frames.extend(w.sim.captured().into_iter().map(|(_, f)| f));
    print_counters(&w.sim);

    let mut bad = Vec::new();
    let (mut v4, mut v6, mut synacks, mut rsts, mut answers, mut odd_sacks) = (0, 0, 0, 0, 0, 0);
    for f in &frames {
        if let Err(e) = raw::check_checksums(f) {
            bad.push((e, raw::parse(f)));
            continue;
        }
        let Some(s) = raw::parse(f) else { continue };
        if s.src.is_ipv4() {
            v4 += 1;
        } else {
            v6 += 1;
        }
        synacks += usize::from(s.has(flags::SYN | flags::ACK));
        rsts += usize::from(s.has(flags::RST));
        answers += usize::from(s.payload.starts_with(b"HTTP/1.1 301"));
        odd_sacks += usize::from(s.opts().sack_at.is_some_and(|a| a % 2 == 1));
    }
    eprintln!(
        "{} frames: tcp v4 {v4} v6 {v6}, SYN-ACKs {synacks}, RSTs {rsts}, 301s {answers}, odd SACKs {odd_sacks}",
        frames.len()
    );
    assert!(
        bad.is_empty(),
        "{} bad frames, first: {:?}",
        bad.len(),
        bad.first()
    );
    assert!(v4 > 500 && v6 > 200, "v4 {v4} v6 {v6}");
    assert!(synacks >= 25 && rsts >= 2 && answers >= 3 && odd_sacks >= 5);
    let c = w.sim.worker.counters();
    assert!(c.events_of(Event::HttpRedirectSent) >= 3);
    assert_eq!(state(&w.sim).1, 0);
}
