#![no_main]
//! The delayed-binding state machine (SYN cookie, first bytes, backend connect, replay,
//! splice, close) driven deep: up to four connections to the TLS (443), HTTP (80) and
//! redirect (8080) listeners of `appliance.yaml`, each playing a client and its backend
//! with valid segments whose sequence numbers follow what sluice sent (the cookie, the
//! backend SYN, the spliced data), so that the fuzzer spends its time on orders, pieces,
//! losses, retransmissions and timers rather than on guessing 32-bit numbers.
//!
//! The input is a list of steps, `op` then its fields (missing bytes read as 0); `op`'s
//! high bits pick the connection, its low nibble the step:
//!
//! | step | what |
//! |---|---|
//! | 0 | client SYN (`listener`, `first bytes`, `isn: u32`, `opts`) |
//! | 1 | client ACK of the cookie with a piece of its first bytes (`off`, `len`, `bad ack`) |
//! | 2 | backend SYN-ACK to sluice's latest SYN (`isn: u32`, `opts`) |
//! | 3 | backend data (`len`, bytes) |
//! | 4 | client data after the first bytes (`len`, bytes) |
//! | 5 / 6 | client FIN / RST |
//! | 7 / 8 | backend FIN / RST |
//! | 9 | the clock moves (`code`, [`rig::clock_step`]) and the timers run |
//! | 10 | the last frame again (a duplicate) |
//! | other | a backend ACK of everything sluice sent it |
//!
//! The contract is [`rig::Rig`]'s: no panic, every packet sent or dropped under a named
//! reason, counters that add up, checksums kept through the splice rewrite (every frame
//! here is valid), embryos and flows within their capacity, no buffer leaked.

use libfuzzer_sys::fuzz_target;
use sluice_dataplane::wire::{ip_proto, tcp};
use std::net::SocketAddr;

mod rig;
use rig::{Bytes, Rig};

/// Steps per input at most.
const MAX_STEPS: usize = 200;

/// One client connection and its backend side, as far as the segments seen tell.
#[derive(Debug, Clone)]
struct Conn {
    client: SocketAddr,
    vip: SocketAddr,
    isn: u32,
    first: Vec<u8>,
    /// Client bytes sent (after the SYN).
    sent: u32,
    /// Next sequence number from sluice to the client (what the client acknowledges).
    rcv: u32,
    /// sluice's side and the backend of the latest backend SYN.
    backend: Option<(SocketAddr, SocketAddr)>,
    b_isn: u32,
    b_sent: u32,
    /// Next sequence number from sluice to the backend.
    b_rcv: u32,
}

fn listener(b: u8) -> u16 {
    [443, 80, 8080][usize::from(b) % 3]
}

/// Updates the connections from what the stage sent.
fn learn(rig: &Rig, conns: &mut [Option<Conn>]) {
    for s in rig.out_segs() {
        if s.proto != ip_proto::TCP {
            continue;
        }
        for c in conns.iter_mut().flatten() {
            if s.port == 0 && s.dst == c.client && s.src == c.vip {
                c.rcv = s.end();
            } else if s.port == 1 {
                let syn = s.flags & (tcp::flags::SYN | tcp::flags::ACK) == tcp::flags::SYN;
                if syn && s.seq == c.isn {
                    c.backend = Some((s.src, s.dst));
                    c.b_rcv = s.end();
                    c.b_sent = 0;
                } else if c.backend == Some((s.src, s.dst)) {
                    c.b_rcv = s.end();
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes::new(data);
    let mut rig = Rig::new();
    let mut conns: [Option<Conn>; 4] = [None, None, None, None];
    let mut last: Option<(usize, Vec<u8>)> = None;
    use tcp::flags::{ACK, FIN, PSH, RST, SYN};
    for _ in 0..MAX_STEPS {
        if b.is_empty() {
            break;
        }
        let op = b.u8();
        let i = usize::from(op >> 6);
        let mut out: Option<(usize, Vec<u8>)> = None;
        match op & 0x0f {
            0 => {
                let vip = SocketAddr::new(
                    if op & 0x20 != 0 {
                        "fd77::10"
                    } else {
                        "10.77.0.10"
                    }
                    .parse()
                    .expect("ip"),
                    listener(b.u8()),
                );
                let ip = if vip.is_ipv6() {
                    "fd77::1"
                } else {
                    "10.77.0.1"
                };
                let client = SocketAddr::new(ip.parse().expect("ip"), 41_000 + i as u16);
                let first = rig::first_bytes(b.u8());
                let isn = b.u32();
                let opts = rig::syn_options(b.u8());
                out = rig::frame(0, ip_proto::TCP, client, vip, isn, 0, SYN, &opts, &[])
                    .map(|f| (0, f));
                conns[i] = Some(Conn {
                    client,
                    vip,
                    isn,
                    first,
                    sent: 0,
                    rcv: 0,
                    backend: None,
                    b_isn: 0,
                    b_sent: 0,
                    b_rcv: 0,
                });
            }
            9 => rig.advance(rig::clock_step(b.u8())),
            10 => out = last.clone(),
            step => {
                let Some(c) = conns[i].as_mut() else {
                    continue;
                };
                let client_seg = |c: &Conn, sent: u32, flags, data: &[u8]| {
                    let seq = c.isn.wrapping_add(1).wrapping_add(sent);
                    rig::frame(
                        0,
                        ip_proto::TCP,
                        c.client,
                        c.vip,
                        seq,
                        c.rcv,
                        flags,
                        &[],
                        data,
                    )
                    .map(|f| (0, f))
                };
                let backend_seg = |c: &Conn, flags, opts: &[u8], data: &[u8]| {
                    let (ours, theirs) = c.backend?;
                    let seq = c
                        .b_isn
                        .wrapping_add(u32::from(flags & SYN == 0))
                        .wrapping_add(c.b_sent);
                    rig::frame(
                        1,
                        ip_proto::TCP,
                        theirs,
                        ours,
                        seq,
                        c.b_rcv,
                        flags,
                        opts,
                        data,
                    )
                    .map(|f| (1, f))
                };
                match step {
                    1 => {
                        let off = usize::from(b.u8()).min(c.first.len());
                        let len = usize::from(b.u8());
                        let end = if len == 0 {
                            c.first.len()
                        } else {
                            (off + len).min(c.first.len())
                        };
                        let piece = c.first[off..end].to_vec();
                        let bad = b.u8();
                        let mut c2 = c.clone();
                        if bad >= 0xf0 {
                            c2.rcv = c2.rcv.wrapping_add(u32::from(bad & 0x0f));
                        }
                        out = client_seg(&c2, off as u32, ACK | PSH, &piece);
                        c.sent = c.sent.max((off + piece.len()) as u32);
                    }
                    2 => {
                        c.b_isn = b.u32();
                        c.b_sent = 0;
                        let opts = rig::syn_options(b.u8());
                        out = backend_seg(c, SYN | ACK, &opts, &[]);
                    }
                    3 => {
                        let len = usize::from(b.u8());
                        let data = b.take(len).to_vec();
                        out = backend_seg(c, ACK | PSH, &[], &data);
                        c.b_sent = c.b_sent.wrapping_add(data.len() as u32);
                    }
                    4 => {
                        let len = usize::from(b.u8());
                        let data = b.take(len).to_vec();
                        let at = (c.first.len() as u32).max(c.sent);
                        out = client_seg(c, at, ACK | PSH, &data);
                        c.sent = at + data.len() as u32;
                    }
                    5 => {
                        out = client_seg(c, c.sent, ACK | FIN, &[]);
                        c.sent += 1;
                    }
                    6 => out = client_seg(c, c.sent, RST | ACK, &[]),
                    7 => {
                        out = backend_seg(c, ACK | FIN, &[], &[]);
                        c.b_sent = c.b_sent.wrapping_add(1);
                    }
                    8 => out = backend_seg(c, RST | ACK, &[], &[]),
                    _ => out = backend_seg(c, ACK, &[], &[]),
                }
            }
        }
        if let Some((port, f)) = &out {
            rig.send(*port, f, true);
            last = out;
        }
        learn(&rig, &mut conns);
    }
    rig.finish();
});
