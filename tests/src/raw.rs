//! Hand-made TCP: segments written byte by byte onto a simulated wire and read back, for
//! tests that need exact control of what a peer sends (segment boundaries, order, a lost
//! handshake ACK, retransmissions, resets, option layouts) — things a real stack decides
//! for itself. Also an independent checksum check of any frame (smoltcp's code, not
//! sluice's).
//!
//! A [`RawClient`] borrows a simulated host's address and MAC: the host's device diverts
//! the frames addressed to the client's port ([`divert_ports`]) so the host's own stack
//! never sees (or resets) them, and ARP/ND keep working through that stack.

use crate::sim::{FrameHook, Sim};
use sluice_dataplane::pipeline::Stage;
use smoltcp::wire::{
    EthernetFrame, EthernetProtocol, Icmpv4Packet, Icmpv6Packet, IpAddress, IpProtocol, Ipv4Packet,
    Ipv6Packet, TcpPacket, UdpPacket,
};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

/// TCP flag bits (low byte of the flags field).
pub mod flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// PSH.
    pub const PSH: u8 = 0x08;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

/// The options a test cares about, read from a segment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Options {
    /// MSS.
    pub mss: Option<u16>,
    /// Window scale.
    pub wscale: Option<u8>,
    /// SACK permitted.
    pub sack_permitted: bool,
    /// SACK blocks (left, right).
    pub sack: Vec<(u32, u32)>,
    /// Where the first SACK option starts (offset into the options).
    pub sack_at: Option<usize>,
}

/// Reads TCP options (stops at END or at a malformed option).
pub fn parse_options(o: &[u8]) -> Options {
    let mut r = Options::default();
    let mut i = 0;
    while i < o.len() {
        match o[i] {
            0 => break,
            1 => i += 1,
            kind => {
                let Some(&len) = o.get(i + 1) else { break };
                let len = usize::from(len);
                if len < 2 || i + len > o.len() {
                    break;
                }
                let body = &o[i + 2..i + len];
                match (kind, body.len()) {
                    (2, 2) => r.mss = Some(u16::from_be_bytes([body[0], body[1]])),
                    (3, 1) => r.wscale = Some(body[0]),
                    (4, 0) => r.sack_permitted = true,
                    (5, n) if n % 8 == 0 => {
                        r.sack_at.get_or_insert(i);
                        for b in body.chunks_exact(8) {
                            r.sack.push((
                                u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
                                u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
                            ));
                        }
                    }
                    _ => {}
                }
                i += len;
            }
        }
    }
    r
}

/// SYN options: MSS, then SACK-permitted and window scale if asked for (NOP padded).
pub fn syn_options(mss: u16, wscale: Option<u8>, sack: bool) -> Vec<u8> {
    let mut o = vec![2, 4];
    o.extend_from_slice(&mss.to_be_bytes());
    if sack {
        o.extend_from_slice(&[1, 1, 4, 2]);
    }
    if let Some(ws) = wscale {
        o.extend_from_slice(&[1, 3, 3, ws]);
    }
    o
}

/// A SACK option with `blocks`, padded to a multiple of 4. `odd`: one NOP before it and
/// one after (its edges then start at odd offsets of the segment), else two NOPs before.
pub fn sack_option(blocks: &[(u32, u32)], odd: bool) -> Vec<u8> {
    let mut o = if odd { vec![1] } else { vec![1, 1] };
    o.push(5);
    o.push((2 + 8 * blocks.len()) as u8);
    for (l, r) in blocks {
        o.extend_from_slice(&l.to_be_bytes());
        o.extend_from_slice(&r.to_be_bytes());
    }
    if odd {
        o.push(1);
    }
    o
}

/// A TCP segment with its addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Source address and port.
    pub src: SocketAddr,
    /// Destination address and port.
    pub dst: SocketAddr,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// Flags ([`flags`]).
    pub flags: u8,
    /// Window field.
    pub window: u16,
    /// Option bytes (a multiple of 4 long).
    pub options: Vec<u8>,
    /// Payload.
    pub payload: Vec<u8>,
}

impl Segment {
    /// Whether every flag in `f` is set.
    pub fn has(&self, f: u8) -> bool {
        self.flags & f == f
    }

    /// The options, read.
    pub fn opts(&self) -> Options {
        parse_options(&self.options)
    }

    /// Sequence space the segment occupies (payload, SYN and FIN).
    pub fn seq_len(&self) -> u32 {
        self.payload.len() as u32
            + u32::from(self.flags & flags::SYN != 0)
            + u32::from(self.flags & flags::FIN != 0)
    }
}

fn sum16(b: &[u8]) -> u32 {
    let mut s = 0u32;
    for c in b.chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    s
}

fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

fn pseudo_sum(src: IpAddr, dst: IpAddr, proto: u8, len: usize) -> u32 {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            sum16(&s.octets()) + sum16(&d.octets()) + u32::from(proto) + len as u32
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            sum16(&s.octets())
                + sum16(&d.octets())
                + u32::from(proto)
                + (len as u32 >> 16)
                + (len as u32 & 0xffff)
        }
        _ => 0,
    }
}

/// The Ethernet frame carrying `seg` from `src_mac` to `dst_mac` (IPv4 or IPv6 by the
/// addresses; TTL 64; checksums filled).
pub fn frame(dst_mac: [u8; 6], src_mac: [u8; 6], seg: &Segment) -> Vec<u8> {
    assert!(seg.options.len().is_multiple_of(4) && seg.options.len() <= 40);
    let hl = 20 + seg.options.len();
    let mut t = Vec::with_capacity(hl + seg.payload.len());
    t.extend_from_slice(&seg.src.port().to_be_bytes());
    t.extend_from_slice(&seg.dst.port().to_be_bytes());
    t.extend_from_slice(&seg.seq.to_be_bytes());
    t.extend_from_slice(&seg.ack.to_be_bytes());
    t.push(((hl / 4) as u8) << 4);
    t.push(seg.flags);
    t.extend_from_slice(&seg.window.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 0]);
    t.extend_from_slice(&seg.options);
    t.extend_from_slice(&seg.payload);
    let c = !fold(sum16(&t) + pseudo_sum(seg.src.ip(), seg.dst.ip(), 6, t.len()));
    t[16..18].copy_from_slice(&c.to_be_bytes());
    let mut f = Vec::with_capacity(14 + 40 + t.len());
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    match (seg.src.ip(), seg.dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            f.extend_from_slice(&[0x08, 0x00]);
            let mut ip = vec![0x45, 0];
            ip.extend_from_slice(&((20 + t.len()) as u16).to_be_bytes());
            ip.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0]);
            ip.extend_from_slice(&s.octets());
            ip.extend_from_slice(&d.octets());
            let c = !fold(sum16(&ip));
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&ip);
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            f.extend_from_slice(&[0x86, 0xdd]);
            f.extend_from_slice(&[0x60, 0, 0, 0]);
            f.extend_from_slice(&(t.len() as u16).to_be_bytes());
            f.extend_from_slice(&[6, 64]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
        }
        _ => panic!("mixed address families"),
    }
    f.extend_from_slice(&t);
    f
}

/// The IP addresses, protocol and transport bytes of an IPv4/IPv6 frame.
fn ip_parts(frame: &[u8]) -> Option<(IpAddr, IpAddr, u8, &[u8])> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    match eth.ethertype() {
        EthernetProtocol::Ipv4 => {
            let ip = Ipv4Packet::new_checked(&frame[14..]).ok()?;
            let hl = usize::from(ip.header_len());
            let total = usize::from(ip.total_len());
            let l4 = frame.get(14 + hl..14 + total)?;
            Some((
                IpAddr::V4(ip.src_addr()),
                IpAddr::V4(ip.dst_addr()),
                u8::from(ip.next_header()),
                l4,
            ))
        }
        EthernetProtocol::Ipv6 => {
            let ip = Ipv6Packet::new_checked(&frame[14..]).ok()?;
            let len = usize::from(ip.payload_len());
            let l4 = frame.get(54..54 + len)?;
            Some((
                IpAddr::V6(ip.src_addr()),
                IpAddr::V6(ip.dst_addr()),
                u8::from(ip.next_header()),
                l4,
            ))
        }
        _ => None,
    }
}

/// The TCP segment in an Ethernet frame, if it holds one (checksums are not checked
/// here: see [`check_checksums`]).
pub fn parse(frame: &[u8]) -> Option<Segment> {
    let (src, dst, proto, t) = ip_parts(frame)?;
    if proto != 6 || t.len() < 20 {
        return None;
    }
    let hl = usize::from(t[12] >> 4) * 4;
    if hl < 20 || hl > t.len() {
        return None;
    }
    let u16at = |i: usize| u16::from_be_bytes([t[i], t[i + 1]]);
    let u32at = |i: usize| u32::from_be_bytes([t[i], t[i + 1], t[i + 2], t[i + 3]]);
    Some(Segment {
        src: SocketAddr::new(src, u16at(0)),
        dst: SocketAddr::new(dst, u16at(2)),
        seq: u32at(4),
        ack: u32at(8),
        flags: t[13],
        window: u16at(14),
        options: t[20..hl].to_vec(),
        payload: t[hl..].to_vec(),
    })
}

fn smol(ip: IpAddr) -> IpAddress {
    match ip {
        IpAddr::V4(v) => IpAddress::Ipv4(v),
        IpAddr::V6(v) => IpAddress::Ipv6(v),
    }
}

/// Checks every checksum of an Ethernet frame with smoltcp's implementation: the IPv4
/// header's, and the TCP, UDP, ICMP or ICMPv6 one over its pseudo-header. Frames that are
/// not IP (ARP) pass. The error names what is wrong.
pub fn check_checksums(frame: &[u8]) -> Result<(), String> {
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        return Err("truncated Ethernet header".into());
    };
    match eth.ethertype() {
        EthernetProtocol::Ipv4 => {
            let ip = Ipv4Packet::new_checked(&frame[14..]).map_err(|e| format!("IPv4: {e}"))?;
            if !ip.verify_checksum() {
                return Err("IPv4 header checksum".into());
            }
        }
        EthernetProtocol::Ipv6 => {
            Ipv6Packet::new_checked(&frame[14..]).map_err(|e| format!("IPv6: {e}"))?;
        }
        _ => return Ok(()),
    }
    let (src, dst, proto, l4) = ip_parts(frame).ok_or("IP lengths")?;
    let (s, d) = (smol(src), smol(dst));
    let ok = match IpProtocol::from(proto) {
        IpProtocol::Tcp => TcpPacket::new_checked(l4)
            .map_err(|e| format!("TCP: {e}"))?
            .verify_checksum(&s, &d),
        IpProtocol::Udp => UdpPacket::new_checked(l4)
            .map_err(|e| format!("UDP: {e}"))?
            .verify_checksum(&s, &d),
        IpProtocol::Icmp => Icmpv4Packet::new_checked(l4)
            .map_err(|e| format!("ICMP: {e}"))?
            .verify_checksum(),
        IpProtocol::Icmpv6 => match (src, dst) {
            (IpAddr::V6(s6), IpAddr::V6(d6)) => Icmpv6Packet::new_checked(l4)
                .map_err(|e| format!("ICMPv6: {e}"))?
                .verify_checksum(&s6, &d6),
            _ => false,
        },
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{:?} checksum", IpProtocol::from(proto)))
    }
}

/// Whether `frame` is TCP to one of `ports` (on any address).
pub fn is_tcp_to_port(frame: &[u8], ports: &[u16]) -> bool {
    parse(frame).is_some_and(|s| ports.contains(&s.dst.port()))
}

/// A divert hook taking the TCP frames to `ports` away from a host's stack (see
/// [`crate::sim::WireDevice::set_divert`]).
pub fn divert_ports(ports: Vec<u16>) -> FrameHook {
    Box::new(move |f: &mut [u8]| !is_tcp_to_port(f, &ports))
}

/// A client connection written by hand, from host `host` of a simulation. The stream's
/// bytes are numbered from 0 (sequence number `isn + 1`); what sluice sends back is
/// assembled in order into [`RawClient::received`].
#[derive(Debug)]
pub struct RawClient {
    /// Index of the simulated host whose address and MAC it uses.
    pub host: usize,
    /// The client's address and port.
    pub local: SocketAddr,
    /// Where it connects (sluice's listener).
    pub remote: SocketAddr,
    /// The client's initial sequence number.
    pub isn: u32,
    /// The window field of what it sends.
    pub window: u16,
    /// The peer's initial sequence number (sluice's cookie), once its SYN-ACK came.
    pub irs: Option<u32>,
    /// Every segment received for this connection, with the virtual time it was read.
    pub inbox: Vec<(u64, Segment)>,
    /// The peer's bytes, in order.
    pub received: Vec<u8>,
    /// The peer's FIN was received in order.
    pub fin: bool,
    /// A RST arrived.
    pub reset: bool,
    /// The end of the furthest stream byte sent (what a pure ACK's sequence number says).
    pub snd_max: usize,
    ooo: BTreeMap<u32, Vec<u8>>,
    fin_at: Option<u32>,
}

impl RawClient {
    /// A client at `local` (an address of host `host`, a port diverted from its stack)
    /// towards `remote`.
    pub fn new(host: usize, local: SocketAddr, remote: SocketAddr, isn: u32) -> RawClient {
        RawClient {
            host,
            local,
            remote,
            isn,
            window: 65535,
            irs: None,
            inbox: Vec::new(),
            received: Vec::new(),
            fin: false,
            reset: false,
            snd_max: 0,
            ooo: BTreeMap::new(),
            fin_at: None,
        }
    }

    /// Sequence number of stream byte `off`.
    pub fn seq_at(&self, off: usize) -> u32 {
        self.isn.wrapping_add(1).wrapping_add(off as u32)
    }

    /// What this client acknowledges: the peer's bytes received in order (and its FIN).
    pub fn rcv_nxt(&self) -> u32 {
        self.irs
            .unwrap_or(0)
            .wrapping_add(1)
            .wrapping_add(self.received.len() as u32)
            .wrapping_add(u32::from(self.fin))
    }

    /// A segment from this client, nothing filled but addresses and window.
    pub fn seg(&self, seq: u32, ack: u32, flags: u8) -> Segment {
        Segment {
            src: self.local,
            dst: self.remote,
            seq,
            ack,
            flags,
            window: self.window,
            options: Vec::new(),
            payload: Vec::new(),
        }
    }

    /// Puts `seg` on the wire from the client's host.
    pub fn send<S: Stage>(&mut self, sim: &mut Sim<S>, seg: &Segment) {
        let off = seg.seq.wrapping_sub(self.isn.wrapping_add(1)) as usize;
        if !seg.payload.is_empty() && off < 1 << 30 {
            self.snd_max = self.snd_max.max(off + seg.payload.len());
        }
        let gw = sim.sluice_macs[self.host];
        let h = &mut sim.hosts[self.host];
        let f = frame(gw, h.mac.0, seg);
        assert!(
            f.len() <= 1514,
            "a {}-byte frame does not fit the wire",
            f.len()
        );
        h.dev.inject(&f);
    }

    /// Sends the SYN, with `options` (see [`syn_options`]).
    pub fn syn<S: Stage>(&mut self, sim: &mut Sim<S>, options: Vec<u8>) {
        let mut s = self.seg(self.isn, 0, flags::SYN);
        s.options = options;
        self.send(sim, &s);
    }

    /// Sends a pure ACK of what was received so far (at the end of what was sent).
    pub fn ack<S: Stage>(&mut self, sim: &mut Sim<S>) {
        let s = self.seg(self.seq_at(self.snd_max), self.rcv_nxt(), flags::ACK);
        self.send(sim, &s);
    }

    /// Sends stream bytes `data` starting at stream offset `off` (ACK and PSH set).
    pub fn data<S: Stage>(&mut self, sim: &mut Sim<S>, off: usize, data: &[u8]) {
        let mut s = self.seg(self.seq_at(off), self.rcv_nxt(), flags::ACK | flags::PSH);
        s.payload = data.to_vec();
        self.send(sim, &s);
    }

    /// Sends FIN after `len` stream bytes.
    pub fn fin_after<S: Stage>(&mut self, sim: &mut Sim<S>, len: usize) {
        let s = self.seg(self.seq_at(len), self.rcv_nxt(), flags::ACK | flags::FIN);
        self.send(sim, &s);
    }

    /// Sends RST at stream offset `off` (with ACK of what was received).
    pub fn rst<S: Stage>(&mut self, sim: &mut Sim<S>, off: usize) {
        let s = self.seg(self.seq_at(off), self.rcv_nxt(), flags::RST | flags::ACK);
        self.send(sim, &s);
    }

    /// Reads what arrived for this connection (segments diverted from its host), notes
    /// the SYN-ACK, assembles data in order. Returns how many segments were read.
    pub fn poll<S: Stage>(&mut self, sim: &mut Sim<S>) -> usize {
        let (local, remote) = (self.local, self.remote);
        let now = sim.now_ms;
        let frames = sim.hosts[self.host]
            .dev
            .take_diverted(|f| parse(f).is_some_and(|s| s.dst == local && s.src == remote));
        let n = frames.len();
        for f in frames {
            let Some(s) = parse(&f) else { continue };
            self.take(&s);
            self.inbox.push((now, s));
        }
        n
    }

    fn take(&mut self, s: &Segment) {
        if s.has(flags::RST) {
            self.reset = true;
            return;
        }
        if s.has(flags::SYN | flags::ACK) {
            if self.irs.is_none() {
                self.irs = Some(s.seq);
            }
            return;
        }
        let Some(irs) = self.irs else { return };
        let off = s.seq.wrapping_sub(irs.wrapping_add(1));
        if !s.payload.is_empty() {
            self.ooo.entry(off).or_insert_with(|| s.payload.clone());
        }
        if s.has(flags::FIN) {
            self.fin_at = Some(off.wrapping_add(s.payload.len() as u32));
        }
        // Move what is now in order.
        loop {
            let have = self.received.len() as u32;
            let Some((&o, _)) = self.ooo.iter().find(|(&o, d)| {
                o <= have && o.wrapping_add(d.len() as u32) > have && (have - o) < (1 << 30)
            }) else {
                break;
            };
            let d = self.ooo.remove(&o).unwrap_or_default();
            self.received.extend_from_slice(&d[(have - o) as usize..]);
        }
        self.ooo
            .retain(|&o, d| o.wrapping_add(d.len() as u32) > self.received.len() as u32);
        if self.fin_at == Some(self.received.len() as u32) {
            self.fin = true;
        }
    }

    /// The segments received so far that carry `f`.
    pub fn with_flags(&self, f: u8) -> impl Iterator<Item = &Segment> {
        self.inbox.iter().map(|(_, s)| s).filter(move |s| s.has(f))
    }
}

/// Where the TCP segment of an IPv4/IPv6 frame lies (start, end) and its addresses.
fn tcp_span(frame: &[u8]) -> Option<(usize, usize, IpAddr, IpAddr)> {
    let (src, dst, proto, l4) = ip_parts(frame)?;
    if proto != 6 {
        return None;
    }
    let start = l4.as_ptr() as usize - frame.as_ptr() as usize;
    Some((start, start + l4.len(), src, dst))
}

/// Recomputes the TCP checksum of the segment in `frame`.
pub fn fill_tcp_checksum(frame: &mut [u8]) {
    let Some((a, b, src, dst)) = tcp_span(frame) else {
        return;
    };
    let t = &mut frame[a..b];
    t[16] = 0;
    t[17] = 0;
    let c = !fold(sum16(t) + pseudo_sum(src, dst, 6, t.len()));
    t[16..18].copy_from_slice(&c.to_be_bytes());
}

/// Overwrites every TCP option of `kind` in `frame` with NOPs (fixing the checksum), as
/// a middlebox that strips it would. Returns whether there was one.
pub fn strip_option(frame: &mut [u8], kind: u8) -> bool {
    let Some((a, b, _, _)) = tcp_span(frame) else {
        return false;
    };
    let hl = usize::from(frame[a + 12] >> 4) * 4;
    if hl < 20 || a + hl > b {
        return false;
    }
    let o = &mut frame[a + 20..a + hl];
    let mut i = 0;
    let mut found = false;
    while i < o.len() {
        match o[i] {
            0 => break,
            1 => i += 1,
            k => {
                let len = usize::from(*o.get(i + 1).unwrap_or(&0));
                if len < 2 || i + len > o.len() {
                    break;
                }
                if k == kind {
                    o[i..i + len].fill(1);
                    found = true;
                }
                i += len;
            }
        }
    }
    if found {
        fill_tcp_checksum(frame);
    }
    found
}
