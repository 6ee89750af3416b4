#![no_main]
//! The packet path: a sequence of frames through the whole balancer stage (parse, local,
//! flow table, policy, Maglev, NAT, delayed binding, forwarder) with its state kept from
//! frame to frame, on the tables of `appliance.yaml`.
//!
//! The input is a list of records, each `op` then its fields (missing bytes read as 0):
//! `op` bit 0 is the port the frame arrives on (0 outside, 1 inside), bits 1-2 its kind,
//! bits 3-7 a clock step ([`rig::clock_step`], then the stage's timers run):
//!
//! - kind 0, **raw**: `len: u16`, then `len` bytes sent as they are;
//! - kind 1, **fresh**: a valid TCP segment or UDP datagram from a client to a listener
//!   or a routed destination (`who`, `where`, `sport`, `flags`, `seq: u32`, `ack: u32`,
//!   `opts`, payload spec);
//! - kinds 2 and 3, **answer**: a valid reply to one of the last segments the stage sent
//!   (`which`, `flags`, `dseq`, `dack`, `isn: u32`, `opts`, payload spec): addresses and
//!   ports swapped, sequence numbers acknowledging it (give or take the deltas), on the
//!   port it left by. This is how a cookie gets its ACK, a backend SYN its SYN-ACK, a NAT
//!   flow its reply, so that flows, embryos and splices are reached.
//!
//! A payload spec is `which` (one of [`rig::first_bytes`], or raw bytes), `off`, `len`.
//! The contract is [`rig::Rig`]'s: no panic, every packet sent or dropped under a named
//! reason, counters that add up, checksums kept, no buffer leaked.

use libfuzzer_sys::fuzz_target;
use sluice_dataplane::wire::{ip_proto, tcp};
use std::net::SocketAddr;

mod rig;
use rig::{Bytes, Rig, Seg};

/// Records per input at most.
const MAX_RECORDS: usize = 200;
/// Segments the stage sent that an answer may pick from (the newest).
const RECENT: usize = 16;

const CLIENTS: [&str; 4] = ["10.77.0.1", "10.77.0.99", "10.77.0.5", "fd77::1"];

/// Destinations: (IPv4, IPv6, port, protocol).
const DESTS: [(&str, &str, u16, u8); 11] = [
    ("10.77.0.10", "fd77::10", 7000, ip_proto::TCP),
    ("10.77.0.10", "fd77::10", 7001, ip_proto::UDP),
    ("10.77.0.10", "fd77::10", 7100, ip_proto::TCP),
    ("10.77.0.10", "fd77::10", 7101, ip_proto::UDP),
    ("10.77.0.10", "fd77::10", 443, ip_proto::TCP),
    ("10.77.0.10", "fd77::10", 80, ip_proto::TCP),
    ("10.77.0.10", "fd77::10", 8080, ip_proto::TCP),
    ("10.78.0.11", "fd78::11", 22, ip_proto::TCP),
    ("10.78.0.13", "fd78::12", 7000, ip_proto::TCP),
    ("10.78.0.12", "fd78::11", 53, ip_proto::UDP),
    ("10.77.0.2", "fd77::2", 9, ip_proto::TCP),
];

fn flags(b: u8) -> u16 {
    use tcp::flags::*;
    const T: [u16; 12] = [
        SYN,
        ACK,
        ACK | PSH,
        ACK,
        FIN | ACK,
        RST,
        RST | ACK,
        SYN | ACK,
        ACK | PSH,
        SYN | FIN,
        0,
        ACK | PSH | FIN,
    ];
    match b {
        0xf0..=0xff => u16::from(b & 0x0f) << 4 | u16::from(b & 0x0f),
        _ => T[usize::from(b) % T.len()],
    }
}

fn payload(b: &mut Bytes<'_>) -> Vec<u8> {
    let which = b.u8();
    let off = usize::from(b.u8());
    let len = usize::from(b.u8());
    if which >= 0xf0 {
        return b.take(len).to_vec();
    }
    let t = rig::first_bytes(which);
    let off = off.min(t.len());
    let end = if len == 0 {
        t.len()
    } else {
        (off + len).min(t.len())
    };
    t[off..end].to_vec()
}

/// A small signed delta: mostly 0.
fn delta(b: u8) -> u32 {
    if b < 0xc0 {
        0
    } else {
        (i32::from(b as i8) + 48) as u32
    }
}

fn fresh(b: &mut Bytes<'_>, port: usize) -> Option<(usize, Vec<u8>)> {
    let client: std::net::IpAddr = CLIENTS[usize::from(b.u8()) % CLIENTS.len()].parse().ok()?;
    let (d4, d6, dport, proto) = DESTS[usize::from(b.u8()) % DESTS.len()];
    let dst = if client.is_ipv6() { d6 } else { d4 };
    let src = SocketAddr::new(client, 40_000 + u16::from(b.u8() % 16));
    let dst = SocketAddr::new(dst.parse().ok()?, dport);
    let fl = flags(b.u8());
    let (seq, ack) = (b.u32(), b.u32());
    let o = b.u8();
    let opts = if fl & tcp::flags::SYN != 0 {
        rig::syn_options(o)
    } else {
        Vec::new()
    };
    let data = payload(b);
    Some((
        port,
        rig::frame(port, proto, src, dst, seq, ack, fl, &opts, &data)?,
    ))
}

fn answer(b: &mut Bytes<'_>, recent: &[Seg]) -> Option<(usize, Vec<u8>)> {
    let k = usize::from(b.u8());
    let fl = flags(b.u8());
    let (ds, da) = (delta(b.u8()), delta(b.u8()));
    let isn = b.u32();
    let o = b.u8();
    let data = payload(b);
    let s = recent.get(recent.len().checked_sub(1 + k % recent.len().max(1))?)?;
    let syn = fl & tcp::flags::SYN != 0;
    // A SYN answering a SYN starts its own sequence space.
    let seq = if syn { isn } else { s.ack.wrapping_add(ds) };
    let opts = if syn { rig::syn_options(o) } else { Vec::new() };
    let f = rig::frame(
        s.port,
        s.proto,
        s.dst,
        s.src,
        seq,
        s.end().wrapping_add(da),
        fl,
        &opts,
        &data,
    )?;
    Some((s.port, f))
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes::new(data);
    let mut rig = Rig::new();
    let mut recent: Vec<Seg> = Vec::new();
    for _ in 0..MAX_RECORDS {
        if b.is_empty() {
            break;
        }
        let op = b.u8();
        let port = usize::from(op & 1);
        let step = rig::clock_step(op >> 3);
        if step > 0 {
            rig.advance(step);
            recent.extend(rig.out_segs());
        }
        let (port, frame, valid) = match (op >> 1) & 3 {
            0 => {
                let len = usize::from(b.u16() % 1600);
                (port, b.take(len).to_vec(), false)
            }
            1 => match fresh(&mut b, port) {
                Some((p, f)) => (p, f, true),
                None => continue,
            },
            _ => match answer(&mut b, &recent) {
                Some((p, f)) => (p, f, true),
                None => continue,
            },
        };
        rig.send(port, &frame, valid);
        recent.extend(rig.out_segs());
        if recent.len() > RECENT {
            recent.drain(..recent.len() - RECENT);
        }
    }
    rig.finish();
});
