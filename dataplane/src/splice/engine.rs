//! The packet side of delayed binding (see the [module docs](super) for the handshake):
//! SYN cookies, embryos reading first bytes, the backend handshake, failover, sluice's own
//! answers, the replay, and the embryo timers.
//!
//! The engine keeps its own state ([`Splicer`]: cookies, embryos, the timer scan) and
//! borrows, for each call, the parts of the worker's L4 state it shares with the balancer
//! ([`Shared`]: forwarder, flow table, SNAT ports, port MACs): an [`Engine`] is the two
//! together. It writes packets with [`crate::pipeline::reply`] and allocates SNAT ports
//! with [`crate::pipeline::nat`]; it does not know the balancer, which calls it.
//!
//! Packets sluice makes itself leave through the [`Forwarder`] (FIB, neighbours, MACs),
//! written as if received on the port they concern, except the SYN-ACK, which goes
//! straight back to the sender's MAC like a RST. A reply is written into the packet that
//! caused it where there is one; timers draw fresh buffers from
//! [`StageIo`](crate::pipeline::StageIo).

use super::cookie::{self, Cookies, SynOptions};
use super::first_bytes::{Overflow, Pieces};
use super::plan::{decide, Plan, ANSWER_MAX};
use super::rewrite::rescale;
use super::{options, Embryo, Embryos, Phase, Refused, SpliceConfig, REPLAY_TRIES};
use crate::flow::{Dir, FlowId, FlowTable, InsertError, Splice, TcpFlags, TcpState, Tuple};
use crate::pipeline::forward::Forwarder;
use crate::pipeline::nat::{admit, forget, rekey_snat, SnatPorts};
use crate::pipeline::parse::Meta;
use crate::pipeline::reply::{write_seg, Seg};
use crate::pipeline::stage::{dispatch, Ctx, Verdict};
use crate::port::Pkt;
use crate::stats::{DropReason, Event};
use crate::tables::snapshot::Snapshot;
use crate::wire::{ip_proto, tcp};
use std::net::SocketAddr;

const SYN: u8 = TcpFlags::SYN;
const ACK: u8 = TcpFlags::ACK;
const RST: u8 = TcpFlags::RST;
const FIN: u8 = TcpFlags::FIN;
/// How often embryo timers are scanned.
const SCAN_MS: u64 = 10;
/// Times sluice sends its own answer (redirect) before giving up on an acknowledgment.
const ANSWER_TRIES: u8 = 3;

/// A worker's delayed-binding state.
pub struct Splicer {
    cfg: SpliceConfig,
    cookies: Cookies,
    embryos: Embryos,
    next_scan_ms: u64,
}

impl Splicer {
    /// The state for `cfg`: every embryo slot and buffer allocated here.
    pub fn new(cfg: SpliceConfig) -> Splicer {
        Splicer {
            cookies: Cookies::new(cfg.cookie_secret),
            embryos: Embryos::new(
                cfg.embryos,
                cfg.buffer_bytes,
                cfg.embryos_per_source,
                u64::from_le_bytes([
                    cfg.cookie_secret[0],
                    cfg.cookie_secret[1],
                    cfg.cookie_secret[2],
                    cfg.cookie_secret[3],
                    cfg.cookie_secret[4],
                    cfg.cookie_secret[5],
                    cfg.cookie_secret[6],
                    cfg.cookie_secret[7],
                ]),
            ),
            next_scan_ms: 0,
            cfg,
        }
    }

    /// The embryos (connections between the cookie's return and the splice or sluice's
    /// own answer).
    pub fn embryos(&self) -> &Embryos {
        &self.embryos
    }

    /// The embryos, to return one whose flow expired.
    pub fn embryos_mut(&mut self) -> &mut Embryos {
        &mut self.embryos
    }
}

/// The parts of a worker's L4 state that the engine shares with the balancer, borrowed
/// for one call.
pub struct Shared<'a> {
    /// Routes the packets sluice writes.
    pub fwd: &'a mut Forwarder,
    /// The worker's flow table (an embryo's flow, re-keyed to its backend).
    pub flows: &'a mut FlowTable,
    /// The worker's SNAT ports.
    pub snat: &'a mut SnatPorts,
    /// sluice's MAC per port.
    pub macs: &'a [[u8; 6]],
}

/// The engine at work: the worker's [`Splicer`] and the [`Shared`] parts, for one packet
/// or one timer scan.
pub struct Engine<'a> {
    splice: &'a mut Splicer,
    fwd: &'a mut Forwarder,
    flows: &'a mut FlowTable,
    snat: &'a mut SnatPorts,
    macs: &'a [[u8; 6]],
}

impl<'a> Engine<'a> {
    /// The engine over `splice` and the shared parts.
    #[inline]
    pub fn new(splice: &'a mut Splicer, shared: Shared<'a>) -> Engine<'a> {
        Engine {
            splice,
            fwd: shared.fwd,
            flows: shared.flows,
            snat: shared.snat,
            macs: shared.macs,
        }
    }
}

/// The TCP header length, options, window and payload of a parsed segment.
fn tcp_parts<'p>(pkt: &'p Pkt, meta: &Meta) -> (&'p [u8], u16, &'p [u8]) {
    let seg = &pkt.data()[meta.l4..];
    let hl = usize::from(seg[12] >> 4) * 4;
    let win = u16::from_be_bytes([seg[14], seg[15]]);
    let end = (hl + meta.payload as usize).min(seg.len());
    (&seg[tcp::HEADER_LEN..hl], win, &seg[hl..end])
}

impl Engine<'_> {
    fn our_mss(&self, v6: bool) -> u16 {
        let m = self.splice.cfg.mss_v4;
        if v6 {
            m.saturating_sub(20)
        } else {
            m
        }
    }

    /// A SYN to a delayed-binding listener: answered in place with a SYN-ACK whose
    /// sequence number is the cookie. No state.
    pub fn splice_syn(
        &mut self,
        in_port: usize,
        pkt: &mut Pkt,
        meta: &Meta,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        let Some(&port_mac) = self.macs.get(in_port) else {
            return Verdict::Drop(DropReason::BadPort);
        };
        let src_mac: [u8; 6] = pkt.data()[6..12].try_into().unwrap_or([0; 6]);
        if src_mac[0] & 1 != 0 || meta.src().is_multicast() || meta.src().is_unspecified() {
            return Verdict::Drop(DropReason::NoFlow);
        }
        // Answered by sluice itself, so checked first (the NAT path leaves checksums to
        // the peers): a corrupt or forged SYN gets no cookie.
        let seg = &pkt.data()[meta.l4..];
        let hl = seg.get(12).map_or(0, |b| usize::from(b >> 4) * 4);
        let end = (hl + meta.payload as usize).min(seg.len());
        if !tcp::Packet::new_unchecked(&seg[..end]).verify_checksum(meta.src(), meta.dst()) {
            return Verdict::Drop(DropReason::TcpChecksum);
        }
        let (opts, _, _) = tcp_parts(pkt, meta);
        let o = options::parse_syn(opts);
        let syn = SynOptions {
            mss: o.mss.unwrap_or(536),
            wscale: o.wscale,
            sack: o.sack,
        };
        let t = meta.tuple();
        let tb = cookie::tuple_bytes(&t.src, &t.dst, t.sport, t.dport);
        let isn = self
            .splice
            .cookies
            .make(&tb, meta.seq(), syn, ctx.now_ms / 1000);
        let mut ob = [0u8; 20];
        let n = options::emit_syn(
            &mut ob,
            self.our_mss(meta.v6),
            o.wscale.map(|_| self.splice.cfg.wscale),
            o.sack,
        );
        let window = self.splice.cfg.buffer_bytes.min(0xffff) as u16;
        let seg = Seg {
            src: SocketAddr::new(meta.dst(), meta.dport()),
            dst: SocketAddr::new(meta.src(), meta.sport()),
            seq: isn,
            ack: meta.seq().wrapping_add(1),
            flags: tcp::flags::SYN | tcp::flags::ACK,
            window,
            options: &ob[..n],
            payload: &[],
        };
        if !write_seg(pkt, src_mac, port_mac, &seg) {
            return Verdict::Drop(DropReason::NoRoom);
        }
        ctx.counters.event(Event::SynCookieSent);
        Verdict::tx(in_port)
    }

    /// A segment without a flow to a delayed-binding listener: the handshake's third
    /// segment (or the first data) if its cookie checks out, which opens an embryo.
    #[allow(clippy::too_many_arguments)]
    pub fn splice_open(
        &mut self,
        in_port: usize,
        pkt: &mut Pkt,
        meta: &Meta,
        snap: &Snapshot,
        generation: u32,
        now_s: u32,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        if meta.flags & (SYN | RST) != 0 || meta.flags & ACK == 0 {
            return Verdict::Drop(DropReason::NoFlow);
        }
        let t = meta.tuple();
        let tb = cookie::tuple_bytes(&t.src, &t.dst, t.sport, t.dport);
        let client_isn = meta.seq().wrapping_sub(1);
        let our_isn = meta.ack().wrapping_sub(1);
        let Some(syn) = self
            .splice
            .cookies
            .check(&tb, client_isn, our_isn, ctx.now_ms / 1000)
        else {
            return Verdict::Drop(DropReason::BadCookie);
        };
        let (_, win, _) = tcp_parts(pkt, meta);
        let mut e = Embryo::new(t, syn, client_isn, our_isn);
        e.in_port = in_port as u8;
        e.client_win = win;
        e.pieces = Pieces::new(self.splice.cfg.max_pieces);
        e.deadline_ms = ctx.now_ms + self.splice.cfg.first_bytes_ms;
        let idx = match self.splice.embryos.open(e) {
            Ok(idx) => idx,
            Err(Refused::SourceCap) => return Verdict::Drop(DropReason::SourceEmbryoLimit),
            Err(Refused::Full) => match self.evict_oldest_embryo(e, now_s, ctx) {
                Some(idx) => idx,
                None => return Verdict::Drop(DropReason::EmbryoTableFull),
            },
        };
        let (flows, snat) = (&mut *self.flows, &mut *self.snat);
        let id = match admit(
            flows,
            snat,
            t,
            t.reversed(),
            TcpState::SynRecv,
            generation,
            now_s,
        ) {
            Ok(id) => id,
            Err(e) => {
                self.splice.embryos.close(idx);
                return Verdict::Drop(match e {
                    InsertError::Full => DropReason::FlowTableFull,
                    InsertError::Exists => DropReason::NoFlow,
                });
            }
        };
        self.flows.get_mut(id).splice = Splice {
            phase: Splice::EMBRYO,
            scales: 0,
            value: idx,
        };
        ctx.counters.event(Event::EmbryoOpened);
        self.embryo_client(pkt, meta, id, idx, snap, generation, ctx)
    }

    /// Every embryo slot is in use: the oldest embryo (idle connections hold slots
    /// longest) is closed, its flow forgotten, and `e` takes the slot. Its client is told
    /// with a RST, as when sluice resets a connection it accepted
    /// ([`Engine::reset_client`], counted `splice_reset_sent`), in a buffer drawn from the
    /// worker's pool (the packet at hand opens the new connection); without a free buffer
    /// the embryo is closed silently.
    #[cold]
    fn evict_oldest_embryo(&mut self, e: Embryo, now_s: u32, ctx: &mut Ctx<'_>) -> Option<u32> {
        let old = self.splice.embryos.oldest()?;
        let client = self.splice.embryos.get(old).client;
        let id = self.flows.lookup(&client, now_s).map(|(id, _)| id);
        match ctx.io.as_ref().and_then(|io| io.alloc()) {
            Some(mut rst) => {
                let v = self.reset_client(&mut rst, old, id, ctx);
                dispatch(v, rst, ctx);
            }
            None => self.embryo_close(old, id, ctx.now_ms),
        }
        ctx.counters.event(Event::EmbryoEvicted);
        self.splice.embryos.open(e).ok()
    }

    /// Whether flow `id`'s embryo `idx` is gone (or its slot serves another connection by
    /// now); if so the flow is removed.
    fn embryo_gone(&mut self, id: FlowId, idx: u32, now_ms: u64) -> bool {
        let gone = !self.splice.embryos.is_open(idx)
            || self.splice.embryos.get(idx).client != self.flows.get(id).orig();
        if gone {
            forget(self.flows, self.snat, id, (now_ms / 1000) as u32);
        }
        gone
    }

    /// A packet of a flow whose embryo is open.
    #[allow(clippy::too_many_arguments)]
    pub fn embryo_packet(
        &mut self,
        in_port: usize,
        pkt: &mut Pkt,
        meta: &Meta,
        (id, dir): (FlowId, Dir),
        idx: u32,
        snap: &Snapshot,
        generation: u32,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        if self.embryo_gone(id, idx, ctx.now_ms) {
            return Verdict::Drop(DropReason::NoFlow);
        }
        match dir {
            Dir::Orig => self.embryo_client(pkt, meta, id, idx, snap, generation, ctx),
            Dir::Reply => self.embryo_backend(in_port, pkt, meta, id, idx, snap, generation, ctx),
        }
    }

    /// A client segment while sluice holds the connection.
    #[allow(clippy::too_many_arguments)]
    fn embryo_client(
        &mut self,
        pkt: &mut Pkt,
        meta: &Meta,
        id: FlowId,
        idx: u32,
        snap: &Snapshot,
        generation: u32,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        if meta.flags & RST != 0 {
            // Only a RST inside the window sluice announced ends the connection (RFC 9293
            // §3.10.7.4; sluice acknowledges no first bytes, so the window starts at the
            // client's first byte): anyone who merely knows the four-tuple cannot reset
            // it blind.
            let e = self.splice.embryos.get(idx);
            let off = meta.seq().wrapping_sub(e.client_isn.wrapping_add(1));
            if off <= self.splice.cfg.buffer_bytes.min(0xffff) as u32 {
                self.embryo_close(idx, Some(id), ctx.now_ms);
            }
            return Verdict::Drop(DropReason::SpliceConsumed);
        }
        if meta.flags & SYN != 0 {
            return Verdict::Drop(DropReason::SpliceConsumed); // a late retransmitted SYN
        }
        let (_, win, payload) = tcp_parts(pkt, meta);
        let payload_empty = payload.is_empty();
        let phase = self.splice.embryos.get(idx).phase;
        if phase == Phase::Responding {
            return self.responding_client(pkt, meta, id, idx, payload.len(), ctx);
        }
        let mut end = None;
        {
            let (e, buf) = self.splice.embryos.with_buf(idx);
            e.client_win = win;
            let base = e.client_isn.wrapping_add(1);
            let off = meta.seq().wrapping_sub(base) as i32;
            // Bytes before the stream's start (cannot happen after a valid cookie, but a
            // wrapped sequence number must not index the buffer).
            let skip = if off < 0 {
                off.unsigned_abs() as usize
            } else {
                0
            };
            if skip < payload.len() {
                let at = off.max(0) as u32;
                match e.pieces.insert(buf, at, &payload[skip..]) {
                    Ok(()) => {}
                    Err(Overflow::TooLong | Overflow::TooManyPieces) => {
                        end = Some(Event::FirstBytesOverflow)
                    }
                }
            }
            if meta.flags & FIN != 0 {
                e.client_fin = true;
            }
            if e.client_fin && end.is_none() && e.pieces.pieces() <= 1 {
                end = Some(Event::FirstBytesClientFin);
            }
        }
        if phase != Phase::Reading {
            return self.ack_client(pkt, idx, !payload_empty, ctx);
        }
        match self.embryo_decide(pkt, id, idx, end, snap, generation, ctx) {
            Verdict::Drop(DropReason::SpliceConsumed) => {
                self.ack_client(pkt, idx, !payload_empty, ctx)
            }
            v => v,
        }
    }

    /// Acknowledges the bytes an embryo holds (if the client's segment carried data),
    /// offering the buffer's free room as the window; written into `pkt`.
    fn ack_client(&mut self, pkt: &mut Pkt, idx: u32, data: bool, ctx: &mut Ctx<'_>) -> Verdict {
        if !data {
            return Verdict::Drop(DropReason::SpliceConsumed);
        }
        let e = *self.splice.embryos.get(idx);
        let shift = if e.syn.wscale.is_some() {
            self.splice.cfg.wscale
        } else {
            0
        };
        let room = self.splice.cfg.buffer_bytes.saturating_sub(e.pieces.end());
        let seg = Seg {
            src: e.client.destination(),
            dst: e.client.source(),
            seq: e.our_isn.wrapping_add(1),
            // A FIN right behind every byte held is taken too (the replay carries it).
            ack: e.client_isn.wrapping_add(
                1 + e.pieces.contiguous() as u32
                    + u32::from(e.client_fin && e.pieces.contiguous() == e.pieces.end()),
            ),
            flags: tcp::flags::ACK,
            window: (room >> shift).min(0xffff) as u16,
            options: &[],
            payload: &[],
        };
        self.route_out(pkt, usize::from(e.in_port), &seg, ctx)
    }

    /// Parses what the embryo holds and acts: wait, answer, connect a backend or reset.
    /// `pkt` is written with whatever goes out.
    #[allow(clippy::too_many_arguments)]
    fn embryo_decide(
        &mut self,
        pkt: &mut Pkt,
        id: FlowId,
        idx: u32,
        end: Option<Event>,
        snap: &Snapshot,
        generation: u32,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        let e = *self.splice.embryos.get(idx);
        let have = e.pieces.contiguous();
        if end.is_none() && have < e.need as usize {
            return Verdict::Drop(DropReason::SpliceConsumed);
        }
        let ours = self
            .fwd
            .config()
            .is_ours(e.client.destination().ip(), &snap.addresses);
        let plan = decide(
            &mut self.splice.embryos,
            &e,
            idx,
            ours,
            end,
            snap,
            ctx.counters,
        );
        match plan {
            Plan::Wait(need) => {
                self.splice.embryos.get_mut(idx).need = need as u32;
                Verdict::Drop(DropReason::SpliceConsumed)
            }
            Plan::Reset => self.reset_client(pkt, idx, Some(id), ctx),
            Plan::Answer(len) => self.answer(pkt, idx, len, ctx),
            Plan::Connect {
                backend,
                transparent,
            } => self.connect(pkt, id, idx, backend, transparent, snap, generation, ctx),
        }
    }

    /// Policy, SNAT and the flow for `backend`, then a SYN to it written into `pkt`.
    #[allow(clippy::too_many_arguments)]
    fn connect(
        &mut self,
        pkt: &mut Pkt,
        id: FlowId,
        idx: u32,
        backend: Option<SocketAddr>,
        transparent: bool,
        snap: &Snapshot,
        generation: u32,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        let e = *self.splice.embryos.get(idx);
        let client = e.client.source();
        let Some(backend) = backend.filter(|b| b.is_ipv4() == client.is_ipv4()) else {
            ctx.counters.drop(DropReason::BackendRejected);
            return self.reset_client(pkt, idx, Some(id), ctx);
        };
        if !snap
            .policy
            .verdict(client.ip(), backend.ip(), ip_proto::TCP, backend.port())
            .is_allow()
        {
            ctx.counters.drop(DropReason::PolicyDenied);
            return self.reset_client(pkt, idx, Some(id), ctx);
        }
        let Some(nh) = self.fwd.config().fib.lookup(backend.ip()) else {
            ctx.counters.drop(DropReason::NoRoute);
            return self.reset_client(pkt, idx, Some(id), ctx);
        };
        let now_s = (ctx.now_ms / 1000) as u32;
        // The flow gets its backend side in place: client tuple <-> backend -> SNAT (or
        // client). Its entry stays (removing it and inserting another would hold one more
        // entry per connection until the timer wheel reaches the old one); its keys
        // change (the burst looks each packet up just before deciding it, so later packets
        // of the burst see the new keys).
        let rekeyed = if transparent {
            let (flows, snat) = (&mut *self.flows, &mut *self.snat);
            let timeouts = *flows.timeouts();
            flows
                .rekey_reply(
                    id,
                    Tuple::new(backend, client, ip_proto::TCP),
                    TcpState::SynSent,
                    now_s,
                    |f| {
                        snat.rest_dropped(f, &timeouts, now_s);
                        true
                    },
                )
                .map_err(|_| DropReason::NoFlow)
        } else {
            match self.fwd.config().addr_on(nh.port, backend.ip()) {
                Some(ip) => rekey_snat(self.flows, self.snat, id, backend, ip, now_s),
                None => Err(DropReason::NoSnatAddress),
            }
        };
        if let Err(r) = rekeyed {
            ctx.counters.drop(r);
            return self.reset_client(pkt, idx, Some(id), ctx);
        }
        // Admitted under this generation's policy; the splice state still names the
        // embryo.
        self.flows.get_mut(id).generation = generation;
        {
            let m = self.splice.embryos.get_mut(idx);
            m.phase = Phase::Connecting;
            m.backend = Some(backend);
            m.syns = 0;
            m.tries = m.tries.saturating_add(1);
        }
        self.backend_syn(pkt, id, idx, ctx)
    }

    /// Writes the SYN to the embryo's backend into `pkt` and routes it.
    fn backend_syn(&mut self, pkt: &mut Pkt, id: FlowId, idx: u32, ctx: &mut Ctx<'_>) -> Verdict {
        let rto = self.splice.cfg.syn_rto_ms;
        let e = {
            let m = self.splice.embryos.get_mut(idx);
            m.syns = m.syns.saturating_add(1);
            m.deadline_ms = ctx.now_ms + super::syn_timeout_ms(rto, m.syns);
            *m
        };
        let (src, dst) = self.flows.get(id).rewrite(Dir::Orig);
        let mut ob = [0u8; 20];
        let n = options::emit_syn(&mut ob, e.syn.mss, e.syn.wscale, e.syn.sack);
        let window = rescale(e.client_win, e.syn.wscale.unwrap_or(0), 0);
        let seg = Seg {
            src,
            dst,
            seq: e.client_isn,
            ack: 0,
            flags: tcp::flags::SYN,
            window,
            options: &ob[..n],
            payload: &[],
        };
        ctx.counters.event(Event::BackendSynSent);
        self.route_out(pkt, usize::from(e.in_port), &seg, ctx)
    }

    /// Writes `seg` into `pkt` as if received on `port` and lets the forwarder route it.
    fn route_out(
        &mut self,
        pkt: &mut Pkt,
        port: usize,
        seg: &Seg<'_>,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        let Some(&mac) = self.macs.get(port) else {
            return Verdict::Drop(DropReason::BadPort);
        };
        if !write_seg(pkt, mac, mac, seg) {
            return Verdict::Drop(DropReason::NoRoom);
        }
        self.fwd.process(port, pkt, ctx)
    }

    /// A backend segment while the embryo connects: its SYN-ACK splices; its RST fails
    /// over.
    #[allow(clippy::too_many_arguments)]
    fn embryo_backend(
        &mut self,
        in_port: usize,
        pkt: &mut Pkt,
        meta: &Meta,
        id: FlowId,
        idx: u32,
        snap: &Snapshot,
        generation: u32,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        let e = *self.splice.embryos.get(idx);
        if e.phase != Phase::Connecting {
            return Verdict::Drop(DropReason::SpliceConsumed);
        }
        let expected_ack = e.client_isn.wrapping_add(1);
        if meta.flags & RST != 0 {
            if meta.flags & ACK != 0 && meta.ack() != expected_ack {
                return Verdict::Drop(DropReason::SpliceConsumed); // not for our SYN
            }
            return self.failover(pkt, id, idx, snap, generation, ctx);
        }
        if meta.flags & (SYN | ACK) != SYN | ACK || meta.ack() != expected_ack {
            return Verdict::Drop(DropReason::SpliceConsumed);
        }
        let (opts, _, _) = tcp_parts(pkt, meta);
        let b = options::parse_syn(opts);
        let ours = self.splice.cfg.wscale;
        let (bws, ows, fix) = match (e.syn.wscale, b.wscale) {
            (None, _) => (0, 0, 0),
            (Some(_), Some(bw)) => (bw, ours, 0),
            (Some(cw), None) => (0, ours, cw),
        };
        let backend_isn = meta.seq();
        let now_s = (ctx.now_ms / 1000) as u32;
        let spliced = Splice {
            phase: Splice::SPLICED | (fix << 4),
            scales: (bws << 4) | ows,
            value: e.our_isn.wrapping_sub(backend_isn),
        };
        let have = e.pieces.contiguous();
        {
            let f = self.flows.get_mut(id);
            f.state = TcpState::Established;
            f.splice = if have == 0 && !(e.client_fin && e.pieces.end() == 0) {
                spliced
            } else {
                Splice {
                    phase: Splice::REPLAYING,
                    scales: 0,
                    value: idx,
                }
            };
        }
        // A FIN the client sent behind its first bytes goes with them (it ends the bytes
        // held, none missing): held back, the backend would learn of the half-close only
        // from the client's retransmission, if ever.
        let fin = e.client_fin && have == e.pieces.end();
        self.flows.on_packet(
            id,
            Dir::Orig,
            Some(TcpFlags(if fin { ACK | FIN } else { ACK })),
            now_s,
        );
        ctx.counters.event(Event::Spliced);
        let rto = self.splice.cfg.syn_rto_ms;
        {
            let m = self.splice.embryos.get_mut(idx);
            m.phase = Phase::Replaying;
            m.spliced = spliced;
            m.backend_isn = backend_isn;
            m.replay = have as u32;
            m.client_fin = fin;
            m.syns = 1;
            m.deadline_ms = ctx.now_ms + rto;
            // The backend's MSS bounds the replay's segments.
            m.syn.mss = b.mss.unwrap_or(536).min(e.syn.mss);
        }
        let v = self.replay(in_port, idx, id, Some(pkt), ctx);
        if have == 0 && !fin {
            self.splice.embryos.close(idx);
        }
        v
    }

    /// Sends the bytes an embryo holds to its backend, after the handshake ACK (with the
    /// last chunk in `last`, if given, else every chunk in a fresh buffer), and the
    /// client's FIN behind them if it came. The embryo keeps them until the backend
    /// acknowledges them ([`Splice::REPLAYING`]).
    fn replay(
        &mut self,
        port: usize,
        idx: u32,
        id: FlowId,
        last: Option<&mut Pkt>,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        let e = *self.splice.embryos.get(idx);
        let (src, dst) = self.flows.get(id).rewrite(Dir::Orig);
        let have = e.replay as usize;
        let fin = e.client_fin;
        let mss = usize::from(e.syn.mss).max(64);
        let fix = e.spliced.phase >> 4;
        let window = rescale(e.client_win, fix, 0);
        let chunks = have.div_ceil(mss).max(1);
        let Some(&mac) = self.macs.get(port) else {
            return Verdict::Drop(DropReason::BadPort);
        };
        let seg_at = |k: usize, buf: &[u8]| -> (u32, usize, usize) {
            let from = (k * mss).min(have);
            let to = ((k + 1) * mss).min(have).min(buf.len());
            (e.client_isn.wrapping_add(1 + from as u32), from, to)
        };
        let flags = |k: usize, from: usize, to: usize| -> u16 {
            let mut f = tcp::flags::ACK;
            if to > from {
                f |= tcp::flags::PSH;
            }
            if fin && k == chunks - 1 {
                f |= tcp::flags::FIN;
            }
            f
        };
        let in_place = usize::from(last.is_some());
        // Earlier chunks in fresh buffers (they leave before this burst's packets).
        for k in 0..chunks - in_place {
            let Some(mut p) = ctx.io.as_ref().and_then(|io| io.alloc()) else {
                break;
            };
            let buf = self.splice.embryos.buf(idx);
            let (seq, from, to) = seg_at(k, buf);
            let seg = Seg {
                src,
                dst,
                seq,
                ack: e.backend_isn.wrapping_add(1),
                flags: flags(k, from, to),
                window,
                options: &[],
                payload: &buf[from..to],
            };
            if !write_seg(&mut p, mac, mac, &seg) {
                break;
            }
            let v = self.fwd.process(port, &mut p, ctx);
            dispatch(v, p, ctx);
        }
        let Some(pkt) = last else {
            return Verdict::Drop(DropReason::SpliceConsumed);
        };
        let buf = self.splice.embryos.buf(idx);
        let (seq, from, to) = seg_at(chunks - 1, buf);
        let seg = Seg {
            src,
            dst,
            seq,
            ack: e.backend_isn.wrapping_add(1),
            flags: flags(chunks - 1, from, to),
            window,
            options: &[],
            payload: &buf[from..to],
        };
        if !write_seg(pkt, mac, mac, &seg) {
            return Verdict::Drop(DropReason::NoRoom);
        }
        self.fwd.process(port, pkt, ctx)
    }

    /// A packet of a flow whose replay the backend has not fully acknowledged: an
    /// acknowledgment that covers it installs the final splice state and returns the
    /// embryo. Returns the splice state to rewrite the packet with, or the packet's fate.
    pub fn replaying(
        &mut self,
        in_port: usize,
        pkt: &mut Pkt,
        meta: &Meta,
        (id, dir): (FlowId, Dir),
        idx: u32,
        ctx: &mut Ctx<'_>,
    ) -> Result<Splice, Verdict> {
        if self.embryo_gone(id, idx, ctx.now_ms) {
            return Err(Verdict::Drop(DropReason::NoFlow));
        }
        let e = *self.splice.embryos.get(idx);
        if dir == Dir::Reply {
            if meta.flags & SYN != 0 {
                return Err(self.splice_reack(in_port, pkt, meta, id, ctx));
            }
            let owned = e.replay + u32::from(e.client_fin);
            let acked = meta.flags & ACK != 0
                && meta.ack().wrapping_sub(e.client_isn.wrapping_add(1)) as i32 >= owned as i32;
            if acked || meta.flags & RST != 0 {
                self.flows.get_mut(id).splice = e.spliced;
                self.splice.embryos.close(idx);
            }
        } else if meta.flags & RST != 0 {
            self.flows.get_mut(id).splice = e.spliced;
            self.splice.embryos.close(idx);
        }
        Ok(e.spliced)
    }

    /// The backend reset or stayed silent: the route's next pick, or RST to the client.
    fn failover(
        &mut self,
        pkt: &mut Pkt,
        id: FlowId,
        idx: u32,
        snap: &Snapshot,
        generation: u32,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        ctx.counters.event(Event::BackendFailover);
        let e = *self.splice.embryos.get(idx);
        if e.tries >= self.splice.cfg.backend_tries {
            return self.reset_client(pkt, idx, Some(id), ctx);
        }
        let ours = self
            .fwd
            .config()
            .is_ours(e.client.destination().ip(), &snap.addresses);
        let end = Some(Event::FirstBytesTimeout);
        match decide(
            &mut self.splice.embryos,
            &e,
            idx,
            ours,
            end,
            snap,
            ctx.counters,
        ) {
            Plan::Connect {
                backend,
                transparent,
            } => self.connect(pkt, id, idx, backend, transparent, snap, generation, ctx),
            _ => self.reset_client(pkt, idx, Some(id), ctx),
        }
    }

    /// Resets the client's connection (RST written into `pkt`, routed) and forgets it.
    fn reset_client(
        &mut self,
        pkt: &mut Pkt,
        idx: u32,
        id: Option<FlowId>,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        let e = *self.splice.embryos.get(idx);
        self.embryo_close(idx, id, ctx.now_ms);
        let seg = Seg {
            src: e.client.destination(),
            dst: e.client.source(),
            seq: e.our_isn.wrapping_add(1),
            ack: e
                .client_isn
                .wrapping_add(1 + e.pieces.end() as u32 + u32::from(e.client_fin)),
            flags: tcp::flags::RST | tcp::flags::ACK,
            window: 0,
            options: &[],
            payload: &[],
        };
        ctx.counters.event(Event::SpliceResetSent);
        self.route_out(pkt, usize::from(e.in_port), &seg, ctx)
    }

    /// Sends sluice's own answer (held at the start of the buffer, `len` bytes) with FIN.
    fn answer(&mut self, pkt: &mut Pkt, idx: u32, len: usize, ctx: &mut Ctx<'_>) -> Verdict {
        let rto = self.splice.cfg.syn_rto_ms;
        let e = {
            let m = self.splice.embryos.get_mut(idx);
            if m.phase != Phase::Responding {
                m.phase = Phase::Responding;
                m.answer = len as u16;
                // Acknowledge what the request occupied (and a FIN that came with it).
                m.replay = m.pieces.contiguous() as u32 + u32::from(m.client_fin);
                m.syns = 0;
                ctx.counters.event(Event::HttpRedirectSent);
            }
            m.syns = m.syns.saturating_add(1);
            m.deadline_ms = ctx.now_ms + rto;
            *m
        };
        let payload = &self.splice.embryos.buf(idx)[..usize::from(e.answer)];
        let mut copy = [0u8; ANSWER_MAX];
        let n = payload.len().min(ANSWER_MAX);
        copy[..n].copy_from_slice(&payload[..n]);
        let seg = Seg {
            src: e.client.destination(),
            dst: e.client.source(),
            seq: e.our_isn.wrapping_add(1),
            ack: e.client_isn.wrapping_add(1 + e.replay),
            flags: tcp::flags::ACK | tcp::flags::PSH | tcp::flags::FIN,
            window: self.splice.cfg.buffer_bytes.min(0xffff) as u16,
            options: &[],
            payload: &copy[..n],
        };
        self.route_out(pkt, usize::from(e.in_port), &seg, ctx)
    }

    /// A client segment after sluice answered: the client's FIN is acknowledged and the
    /// connection forgotten; a retransmitted request gets the answer again.
    fn responding_client(
        &mut self,
        pkt: &mut Pkt,
        meta: &Meta,
        id: FlowId,
        idx: u32,
        payload: usize,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        let e = *self.splice.embryos.get(idx);
        let our_fin_acked =
            meta.flags & ACK != 0 && meta.ack() == e.our_isn.wrapping_add(2 + u32::from(e.answer));
        if meta.flags & FIN != 0 {
            let seg = Seg {
                src: e.client.destination(),
                dst: e.client.source(),
                seq: e.our_isn.wrapping_add(2 + u32::from(e.answer)),
                ack: meta.seq().wrapping_add(payload as u32 + 1),
                flags: tcp::flags::ACK,
                window: 0,
                options: &[],
                payload: &[],
            };
            self.embryo_close(idx, Some(id), ctx.now_ms);
            return self.route_out(pkt, usize::from(e.in_port), &seg, ctx);
        }
        if our_fin_acked && e.client_fin {
            // The client's FIN came with (or before the end of) its request and the answer
            // acknowledged it: both directions are closed.
            self.embryo_close(idx, Some(id), ctx.now_ms);
            return Verdict::Drop(DropReason::SpliceConsumed);
        }
        if our_fin_acked {
            // Wait for the client's FIN a while; no more retransmissions.
            let wait = self.splice.cfg.first_bytes_ms;
            let m = self.splice.embryos.get_mut(idx);
            m.syns = u8::MAX;
            m.deadline_ms = ctx.now_ms + wait;
            return Verdict::Drop(DropReason::SpliceConsumed);
        }
        if payload > 0 {
            return self.answer(pkt, idx, usize::from(e.answer), ctx);
        }
        Verdict::Drop(DropReason::SpliceConsumed)
    }

    /// Returns an embryo and removes its flow (if `id` still is it; a SNAT tuple it holds
    /// rests from `now_ms`).
    fn embryo_close(&mut self, idx: u32, id: Option<FlowId>, now_ms: u64) {
        if let Some(id) = id {
            let f = self.flows.get(id);
            if matches!(f.splice.phase, Splice::EMBRYO | Splice::REPLAYING) && f.splice.value == idx
            {
                forget(self.flows, self.snat, id, (now_ms / 1000) as u32);
            }
        }
        self.splice.embryos.close(idx);
    }

    /// A retransmitted SYN-ACK from the backend of a spliced flow (sluice's ACK was lost):
    /// acknowledged again, in place.
    pub fn splice_reack(
        &mut self,
        in_port: usize,
        pkt: &mut Pkt,
        meta: &Meta,
        id: FlowId,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        let (src, dst) = self.flows.get(id).rewrite(Dir::Orig);
        let seg = Seg {
            src,
            dst,
            seq: meta.ack(),
            ack: meta.seq().wrapping_add(1),
            flags: tcp::flags::ACK,
            window: 0xffff,
            options: &[],
            payload: &[],
        };
        self.route_out(pkt, in_port, &seg, ctx)
    }

    /// Embryo timers (every `SCAN_MS`): first-bytes deadlines, SYN retransmissions and
    /// failover, answer retransmissions.
    pub fn splice_timers(&mut self, snap: &Snapshot, generation: u32, ctx: &mut Ctx<'_>) {
        let now = ctx.now_ms;
        if now < self.splice.next_scan_ms || self.splice.embryos.is_empty() {
            return;
        }
        self.splice.next_scan_ms = now + SCAN_MS;
        let mut k = 0;
        while let Some(idx) = self.splice.embryos.active(k) {
            let e = *self.splice.embryos.get(idx);
            if now < e.deadline_ms {
                k += 1;
                continue;
            }
            let before = self.splice.embryos.len();
            self.embryo_timeout(idx, e, snap, generation, ctx);
            if self.splice.embryos.len() == before && self.splice.embryos.active(k) == Some(idx) {
                k += 1;
            }
        }
    }

    fn embryo_timeout(
        &mut self,
        idx: u32,
        e: Embryo,
        snap: &Snapshot,
        generation: u32,
        ctx: &mut Ctx<'_>,
    ) {
        let now_s = (ctx.now_ms / 1000) as u32;
        let Some((id, _)) = self.flows.lookup(&e.client, now_s) else {
            self.splice.embryos.close(idx);
            return;
        };
        if e.phase == Phase::Responding && (e.syns == u8::MAX || e.syns >= ANSWER_TRIES) {
            self.embryo_close(idx, Some(id), ctx.now_ms);
            return;
        }
        if e.phase == Phase::Replaying && e.syns < REPLAY_TRIES {
            // The backend has not acknowledged the replay: send it again.
            let rto = self.splice.cfg.syn_rto_ms;
            {
                let m = self.splice.embryos.get_mut(idx);
                m.syns += 1;
                m.deadline_ms = ctx.now_ms + rto;
            }
            let _ = self.replay(usize::from(e.in_port), idx, id, None, ctx);
            return;
        }
        let Some(mut p) = ctx.io.as_ref().and_then(|io| io.alloc()) else {
            // No buffer to say anything with: give up quietly (the client times out).
            if e.phase != Phase::Connecting {
                self.embryo_close(idx, Some(id), ctx.now_ms);
            }
            return;
        };
        let v = match e.phase {
            Phase::Reading => self.embryo_decide(
                &mut p,
                id,
                idx,
                Some(Event::FirstBytesTimeout),
                snap,
                generation,
                ctx,
            ),
            Phase::Connecting if e.syns < self.splice.cfg.syn_tries => {
                self.backend_syn(&mut p, id, idx, ctx)
            }
            Phase::Connecting => self.failover(&mut p, id, idx, snap, generation, ctx),
            Phase::Responding => self.answer(&mut p, idx, usize::from(e.answer), ctx),
            // The replay was never acknowledged: the connection is lost.
            Phase::Replaying => self.reset_client(&mut p, idx, Some(id), ctx),
        };
        if self.splice.embryos.is_open(idx)
            && self.splice.embryos.get(idx).deadline_ms <= ctx.now_ms
        {
            // A decision that left the embryo waiting (it cannot on a final verdict, but
            // never spin): push the deadline.
            self.splice.embryos.get_mut(idx).deadline_ms = ctx.now_ms + SCAN_MS;
        }
        dispatch(v, p, ctx);
    }
}
