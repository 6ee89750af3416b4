//! The balancer stage as the stage fuzz targets drive it: the tables of `appliance.yaml`
//! (built once per process with `sluice_ctrl::compile::build`, as a reload builds them),
//! a fresh [`Balancer`] per input on the two ports `outside` (0) and `inside` (1), a
//! virtual clock, and builders of valid frames.
//!
//! The contract checked on every packet ([`Rig::send`]): no panic; a verdict for every
//! packet (the stage overwrote the sentinel), `Tx` only to a configured port, no
//! `Redirect` (one worker owns every SNAT port), a drop always under a named
//! [`DropReason`] (counted here as the worker counts it); a packet built with valid
//! checksums that is sent leaves with valid IPv4/TCP/UDP checksums (NAT and splice
//! rewrites are incremental: a full recomputation is the oracle); the flow and embryo
//! tables stay within their capacity. At the end of an input ([`Rig::finish`]) the
//! counters add up (every packet sent, kept or dropped) and every packet buffer is back
//! in the pool (nothing leaked, nothing freed twice).

#![allow(dead_code)]

use sluice_ctrl::compile::build;
use sluice_ctrl::load::{load_str, Loaded};
use sluice_dataplane::balancer::{Balancer, BalancerConfig};
use sluice_dataplane::pipeline::{
    Ctx, Forwarder, ForwarderConfig, NeighbourCache, PortConf, Stage, StageIo, Verdict,
};
use sluice_dataplane::port::{Pool, DATA_ROOM};
use sluice_dataplane::rcu::Publisher;
use sluice_dataplane::stats::Counters;
use sluice_dataplane::tables::snapshot::Snapshot;
use sluice_dataplane::wire::{ethernet, ip_proto, ipv4, ipv6, tcp, udp, EtherType, MacAddr};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// The configuration (see the file's header).
pub const APPLIANCE: &str = include_str!("../appliance.yaml");

/// The outside port's MAC.
pub const OUT_MAC: MacAddr = MacAddr([0x02, 0x51, 0, 0, 0, 1]);
/// The inside port's MAC.
pub const IN_MAC: MacAddr = MacAddr([0x02, 0x51, 0, 0, 0, 2]);
/// Every neighbour's MAC and the source of built frames.
pub const PEER: MacAddr = MacAddr([0x02, 0xaa, 0, 0, 0, 1]);

/// Neighbours resolved from the start; others (10.77.0.5) are solicited and their
/// packets parked.
const NEIGHBOURS: [&str; 10] = [
    "10.77.0.1",
    "10.77.0.99",
    "fd77::1",
    "10.78.0.11",
    "10.78.0.12",
    "10.78.0.13",
    "10.78.0.98",
    "10.78.0.99",
    "fd78::11",
    "fd78::12",
];

/// Packet buffers: a burst of one, what the stage keeps (parked packets) and makes.
const POOL: usize = 256;

struct Fixed {
    publisher: Publisher<Snapshot>,
    cfg: BalancerConfig,
    conf: Arc<ForwarderConfig>,
    pool: Pool,
}

impl Fixed {
    fn new() -> Fixed {
        let mut loaded = Loaded::default();
        load_str("appliance.yaml", APPLIANCE, &mut loaded);
        let built = build(loaded).unwrap_or_else(|d| panic!("appliance.yaml: {d:?}"));
        let plan = &built.plan;
        let cfg = BalancerConfig {
            flow_capacity: plan.flow_capacity,
            timeouts: plan.timeouts,
            snat_ports: plan.snat_ports,
            splice: plan.splice.clone(),
            ..BalancerConfig::default()
        };
        let ports = plan
            .ports
            .iter()
            .zip([OUT_MAC, IN_MAC])
            .map(|(p, mac)| PortConf {
                name: p.name.clone(),
                mac,
                addrs: p.addrs.clone(),
            })
            .collect();
        let conf = ForwarderConfig::with_virtual(ports, &plan.routes, plan.virtual_addrs.clone())
            .expect("forwarder config");
        Fixed {
            publisher: Publisher::new(built.snapshot, 1),
            cfg,
            conf: Arc::new(conf),
            pool: Pool::new(POOL),
        }
    }
}

thread_local! {
    static FIXED: Fixed = Fixed::new();
}

/// A TCP segment or UDP datagram as seen on a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seg {
    /// Port it was sent on.
    pub port: usize,
    /// `ip_proto::TCP` or `ip_proto::UDP`.
    pub proto: u8,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub seq: u32,
    pub ack: u32,
    pub flags: u16,
    pub len: u32,
}

impl Seg {
    /// The sequence number after this segment (SYN and FIN count one each).
    pub fn end(&self) -> u32 {
        let mut n = self.seq.wrapping_add(self.len);
        if self.flags & tcp::flags::SYN != 0 {
            n = n.wrapping_add(1);
        }
        if self.flags & tcp::flags::FIN != 0 {
            n = n.wrapping_add(1);
        }
        n
    }
}

/// The IP payload of an Ethernet frame carrying IPv4/IPv6 and its addresses and protocol.
fn ip_parts(f: &[u8]) -> Option<(IpAddr, IpAddr, u8, &[u8], Option<bool>)> {
    let e = ethernet::Frame::new_checked(f).ok()?;
    match e.ethertype() {
        EtherType::Ipv4 => {
            let ip = ipv4::Packet::new_checked(&f[14..]).ok()?;
            let (s, d, p) = (ip.src_addr(), ip.dst_addr(), ip.protocol());
            let ok = ip.verify_checksum();
            let payload = ip.payload();
            let start = 14 + usize::from(f[14] & 0x0f) * 4;
            let end = start + payload.len();
            Some((s.into(), d.into(), p, &f[start..end], Some(ok)))
        }
        EtherType::Ipv6 => {
            let ip = ipv6::Packet::new_checked(&f[14..]).ok()?;
            let (s, d, p) = (ip.src_addr(), ip.dst_addr(), ip.next_header());
            let end = 54 + ip.payload().len();
            Some((s.into(), d.into(), p, &f[54..end], None))
        }
        _ => None,
    }
}

/// Whether a frame's IPv4 header and TCP/UDP checksums are valid (full recomputation);
/// `None` when it is not TCP/UDP over IPv4/IPv6.
pub fn checksums_ok(f: &[u8]) -> Option<bool> {
    let (s, d, p, l4, ip_ok) = ip_parts(f)?;
    let l4_ok = match p {
        ip_proto::TCP => tcp::Packet::new_checked(l4).ok()?.verify_checksum(s, d),
        ip_proto::UDP => {
            let u = udp::Packet::new_checked(l4).ok()?;
            (s.is_ipv4() && u.checksum() == 0) || u.verify_checksum(s, d)
        }
        _ => return None,
    };
    Some(ip_ok.unwrap_or(true) && l4_ok)
}

/// The TCP/UDP header of a frame sent on `port`.
pub fn parse_seg(port: usize, f: &[u8]) -> Option<Seg> {
    let (s, d, p, l4, _) = ip_parts(f)?;
    match p {
        ip_proto::TCP => {
            let t = tcp::Packet::new_checked(l4).ok()?;
            Some(Seg {
                port,
                proto: p,
                src: SocketAddr::new(s, t.src_port()),
                dst: SocketAddr::new(d, t.dst_port()),
                seq: t.seq_number(),
                ack: t.ack_number(),
                flags: t.flags(),
                len: t.payload().len() as u32,
            })
        }
        ip_proto::UDP => {
            let u = udp::Packet::new_checked(l4).ok()?;
            Some(Seg {
                port,
                proto: p,
                src: SocketAddr::new(s, u.src_port()),
                dst: SocketAddr::new(d, u.dst_port()),
                seq: 0,
                ack: 0,
                flags: 0,
                len: u.payload().len() as u32,
            })
        }
        _ => None,
    }
}

/// TCP options of a SYN from one byte: MSS (bit 0, value from bits 4-7), window scale
/// (bit 1, shift from bits 4-7, up to 15: above RFC 7323's 14 too), SACK-permitted (bit 2),
/// a stray NOP run (bit 3). Padded to 32 bits with EOL.
pub fn syn_options(b: u8) -> Vec<u8> {
    let mut o = Vec::new();
    if b & 8 != 0 {
        o.extend_from_slice(&[1, 1]);
    }
    if b & 1 != 0 {
        let mss = 536u16 + u16::from(b >> 4) * 64;
        o.extend_from_slice(&[2, 4]);
        o.extend_from_slice(&mss.to_be_bytes());
    }
    if b & 2 != 0 {
        o.extend_from_slice(&[3, 3, b >> 4]);
    }
    if b & 4 != 0 {
        o.extend_from_slice(&[4, 2]);
    }
    while o.len() % 4 != 0 {
        o.push(0);
    }
    o
}

/// A frame from [`PEER`] to the MAC of `port`: TCP (`flags`, `seq`, `ack`, `opts`: whole
/// 32-bit words) or UDP from `src` to `dst` (one family) carrying `payload`, checksums
/// valid. `None` for mixed families.
#[allow(clippy::too_many_arguments)]
pub fn frame(
    port: usize,
    proto: u8,
    src: SocketAddr,
    dst: SocketAddr,
    seq: u32,
    ack: u32,
    flags: u16,
    opts: &[u8],
    payload: &[u8],
) -> Option<Vec<u8>> {
    let v6 = src.is_ipv6();
    if v6 != dst.is_ipv6() {
        return None;
    }
    let ip_len = if v6 { 40 } else { 20 };
    let hl = if proto == ip_proto::TCP {
        tcp::HEADER_LEN + opts.len()
    } else {
        udp::HEADER_LEN
    };
    let l4 = hl + payload.len();
    let mut f = vec![0u8; 14 + ip_len + l4];
    ethernet::Repr {
        dst_addr: if port == 0 { OUT_MAC } else { IN_MAC },
        src_addr: PEER,
        ethertype: if v6 { EtherType::Ipv6 } else { EtherType::Ipv4 },
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut f[..]));
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => ipv4::Repr {
            src_addr: s,
            dst_addr: d,
            protocol: proto,
            payload_len: l4,
            ttl: 64,
        }
        .emit(&mut ipv4::Packet::new_unchecked(&mut f[14..])),
        (IpAddr::V6(s), IpAddr::V6(d)) => ipv6::Repr {
            src_addr: s,
            dst_addr: d,
            next_header: proto,
            payload_len: l4,
            hop_limit: 64,
        }
        .emit(&mut ipv6::Packet::new_unchecked(&mut f[14..])),
        _ => return None,
    }
    let seg = &mut f[14 + ip_len..];
    seg[hl..].copy_from_slice(payload);
    if proto == ip_proto::TCP {
        seg[tcp::HEADER_LEN..hl].copy_from_slice(opts);
        let mut t = tcp::Packet::new_unchecked(&mut seg[..]);
        tcp::Repr {
            src_port: src.port(),
            dst_port: dst.port(),
            seq_number: seq,
            ack_number: ack,
            flags,
            window_len: 0xffff,
            payload_len: l4 - tcp::HEADER_LEN,
        }
        .emit(&mut t, src.ip(), dst.ip());
        t.set_header_len_and_flags(hl as u8, flags);
        t.fill_checksum(src.ip(), dst.ip());
    } else {
        udp::Repr {
            src_port: src.port(),
            dst_port: dst.port(),
            payload_len: payload.len(),
        }
        .emit(
            &mut udp::Packet::new_unchecked(&mut seg[..]),
            src.ip(),
            dst.ip(),
        );
    }
    Some(f)
}

/// A minimal TLS 1.2 ClientHello naming `sni` (as the splice unit tests build it).
pub fn client_hello(sni: &str) -> Vec<u8> {
    let n = sni.as_bytes();
    let mut ext = vec![0, 0];
    ext.extend_from_slice(&((n.len() + 5) as u16).to_be_bytes());
    ext.extend_from_slice(&((n.len() + 3) as u16).to_be_bytes());
    ext.push(0);
    ext.extend_from_slice(&(n.len() as u16).to_be_bytes());
    ext.extend_from_slice(n);
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7; 32]);
    body.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0]);
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&ext);
    let mut msg = vec![1, 0];
    msg.extend_from_slice(&(body.len() as u16).to_be_bytes());
    msg.extend_from_slice(&body);
    let mut rec = vec![0x16, 3, 1];
    rec.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    rec.extend_from_slice(&msg);
    rec
}

/// First bytes a client may send, by index (modulo their number).
pub fn first_bytes(i: u8) -> Vec<u8> {
    match i % 10 {
        0 => client_hello("a.example.test"),
        1 => client_hello("x.Wild.test"),
        2 => client_hello("failover.example.test"),
        3 => client_hello("silent.example.test"),
        4 => client_hello("nomatch.test"),
        5 => b"GET /api/x HTTP/1.1\r\nHost: www.example.test\r\n\r\n".to_vec(),
        6 => b"GET / HTTP/1.1\r\nHost: WWW.example.test:80\r\nUser-Agent: f\r\n\r\n".to_vec(),
        7 => b"GET /r?q=1 HTTP/1.1\r\nHost: a.example.test\r\n\r\n".to_vec(),
        8 => b"GET / HTTP/1.0\r\n\r\n".to_vec(),
        _ => b"SSH-2.0-OpenSSH_9.6\r\n".to_vec(),
    }
}

/// Milliseconds the clock moves for a 5-bit code: 0, then 50 ms steps up to 750 ms, then
/// 1 s doubling up to about 9 hours (timers of embryos, backend SYNs and flows).
pub fn clock_step(code: u8) -> u64 {
    let c = u64::from(code & 31);
    if c < 16 {
        c * 50
    } else {
        1000 << (c - 16)
    }
}

/// A reader of fuzz bytes that yields zeros when they run out.
pub struct Bytes<'a> {
    data: &'a [u8],
}

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8]) -> Bytes<'a> {
        Bytes { data }
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }
    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    /// Up to `n` bytes.
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let (a, b) = self.data.split_at(n.min(self.data.len()));
        self.data = b;
        a
    }
}

/// One input's stage and clock.
pub struct Rig {
    b: Option<Balancer>,
    pool: Pool,
    io: StageIo,
    pub counters: Counters,
    pub now_ms: u64,
    flow_capacity: usize,
    embryo_capacity: usize,
    /// Packets handed to the stage.
    pub packets: u64,
    /// Their verdicts: sent, kept (parked), dropped.
    pub sent: u64,
    pub kept: u64,
    pub dropped: u64,
    /// What left during the last step: (port, frame).
    pub out: Vec<(usize, Vec<u8>)>,
}

impl Rig {
    /// A fresh balancer on the shared tables.
    pub fn new() -> Rig {
        FIXED.with(|fx| {
            let neigh = Arc::new(NeighbourCache::new(64));
            for ip in NEIGHBOURS {
                neigh.learn(ip.parse().expect("ip"), PEER, 0);
            }
            let fwd = Forwarder::new(Arc::clone(&fx.conf), neigh);
            let reader = fx.publisher.reader().expect("one reader at a time");
            assert_eq!(
                fx.pool.in_use(),
                0,
                "buffers left over from an earlier input"
            );
            Rig {
                b: Some(Balancer::new(fwd, reader, fx.cfg.clone())),
                pool: fx.pool.clone(),
                io: StageIo::new(Some(fx.pool.clone().into())),
                counters: Counters::new(2),
                now_ms: 1_000,
                flow_capacity: fx.cfg.flow_capacity,
                embryo_capacity: fx.cfg.splice.embryos,
                packets: 0,
                sent: 0,
                kept: 0,
                dropped: 0,
                out: Vec::new(),
            }
        })
    }

    fn balancer(&mut self) -> &mut Balancer {
        self.b.as_mut().expect("balancer")
    }

    /// Moves the clock on by `ms` and runs the stage's timers (the quiescent point).
    pub fn advance(&mut self, ms: u64) {
        self.out.clear();
        self.now_ms += ms;
        let mut ctx = Ctx::with_io(self.now_ms, &mut self.counters, &mut self.io);
        if let Some(b) = self.b.as_mut() {
            b.maintain(&mut ctx);
        }
        self.drain_io();
        self.check_tables();
    }

    fn drain_io(&mut self) {
        for (port, p) in self.io.drain() {
            assert!(port < 2, "stage sent on port {port}");
            self.out.push((port as usize, p.data().to_vec()));
        }
    }

    fn check_tables(&self) {
        if let Some(b) = &self.b {
            assert!(
                b.flows().len() <= self.flow_capacity,
                "flow table over capacity"
            );
            assert!(b.embryos() <= self.embryo_capacity, "embryos over capacity");
        }
    }

    /// Hands `frame` to the stage as received on `port` (0 outside, 1 inside) and checks
    /// the verdict (see the module docs). `valid`: the frame was built with valid
    /// checksums, so a sent packet must leave with valid ones. `None` if the frame does not
    /// fit a buffer.
    pub fn send(&mut self, port: usize, frame: &[u8], valid: bool) -> Option<Verdict> {
        self.out.clear();
        if frame.len() > DATA_ROOM {
            return None;
        }
        let mut pkts = vec![self.pool.alloc_copy(frame)?];
        let sentinel = Verdict::Redirect(u32::MAX);
        let mut v = [sentinel];
        let now = self.now_ms;
        {
            let b = self.b.as_mut().expect("balancer");
            let mut ctx = Ctx::with_io(now, &mut self.counters, &mut self.io);
            b.process_burst(port, &mut pkts, &mut v, &mut ctx);
        }
        self.packets += 1;
        match v[0] {
            Verdict::Tx(p) => {
                assert!(p < 2, "sent on port {p}");
                self.sent += 1;
                let data = pkts[0].data().to_vec();
                if valid {
                    assert_ne!(
                        checksums_ok(&data),
                        Some(false),
                        "a valid packet left with a bad checksum: in {frame:02x?}, out {data:02x?}"
                    );
                }
                self.out.push((p as usize, data));
            }
            Verdict::Drop(r) => {
                // As the worker counts it.
                self.counters.drop(r);
                self.dropped += 1;
            }
            Verdict::Kept => self.kept += 1,
            Verdict::Redirect(w) => panic!("no verdict, or a redirect to worker {w} of one"),
        }
        drop(pkts);
        self.drain_io();
        self.check_tables();
        Some(v[0])
    }

    /// The TCP/UDP segments that left during the last step.
    pub fn out_segs(&self) -> Vec<Seg> {
        self.out
            .iter()
            .filter_map(|(port, f)| parse_seg(*port, f))
            .collect()
    }

    /// Checks the counters and gives every buffer back: drops the balancer (and what it
    /// kept), then every buffer must be free.
    pub fn finish(mut self) {
        assert_eq!(self.sent + self.kept + self.dropped, self.packets);
        assert!(self.counters.total_drops() >= self.dropped);
        self.b = None;
        self.drain_io();
        self.out.clear();
        assert_eq!(self.pool.in_use(), 0, "packet buffers leaked");
    }
}
