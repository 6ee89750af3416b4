//! Connections sluice ends itself, on a TCP endpoint inside the worker (smoltcp's TCP
//! socket): TLS terminated with rustls, HTTP (plain, or HTTPS after the handshake)
//! proxied request by request (`proxy/`), and a second TCP connection from sluice's own
//! address to the backend.
//!
//! ```text
//! client                         sluice (this worker)                        backend
//!   SYN ──────────────▶ flow (client tuple) -> conn; front socket listens, SYN-ACK
//!   ClientHello ──────▶ rustls: certificate by SNI (the listener's resolver) … Finished
//!   request ──────────▶ decrypted; route by SNI (TLS), or each request (HTTP/HTTPS);
//!                       Maglev pick, policy client -> backend, flow re-keyed to a SNAT
//!                       tuple; back socket connects ─────────────────────▶ SYN
//!                                                                   ◀──── SYN-ACK
//!                       plaintext ───────────────────────────────────────▶
//!   ◀──────────────── encrypted records ◀───────── backend bytes ◀────────
//! ```
//!
//! - **Packets**: the flow table hands the engine exactly the packets of its flows
//!   (one flow per connection: the client tuple one way, the backend's SNAT tuple the
//!   other, [`Splice::TERMINATED`] naming the connection's slot). Nothing walks every
//!   connection per packet: connections live in **shards** of
//!   [`TerminateConfig::shard_connections`], each a smoltcp `Interface` (`Medium::Ip`,
//!   AnyIP) with its own socket set, and a packet polls only its connection's shard
//!   (smoltcp walks the sockets of a set on every poll; a shard keeps that walk short).
//!   Shards whose timers are due (retransmission, delayed ACK, keep-alive) are polled at
//!   the worker's quiescent point.
//! - **Out**: smoltcp writes IP packets into fresh buffers of the worker's pool; the
//!   forwarder routes them (FIB, neighbours, MACs) as any packet sluice writes.
//! - **TLS**: rustls 0.23 (the provider is ctrl's choice: aws-lc-rs); the listener's `ServerConfig` is taken from the
//!   snapshot when the SYN arrives and kept by the connection, so a reload changes the
//!   certificate of new handshakes only.
//! - **Client certificates**: verified during the handshake by the listener's verifier
//!   (ctrl builds rustls's WebPki verifier, with [`crate::tables::client_auth`]'s pins
//!   around it); a refused handshake counts `terminate_tls_failed` and its reason
//!   ([`refusal`]); [`identity`] writes a verified client's `X-Forwarded-Client-Cert`.
//! - **Backpressure**: ciphertext is read from the client only while rustls holds no
//!   undelivered plaintext, and plaintext is sent to the backend only as its send buffer
//!   has room; the other way, backend bytes are encrypted only as the client's send
//!   buffer has room. Every buffer is bounded; full buffers close TCP windows.
//! - **Close**: `close_notify` or FIN from the client -> FIN to the backend once every
//!   byte is delivered; FIN from the backend -> `close_notify` and FIN to the client. A
//!   reset on either side resets the other. Handshakes have a deadline
//!   ([`TerminateConfig::handshake_ms`], against slowloris clients), connections an idle
//!   timeout ([`TerminateConfig::idle_ms`]).
//! - **Limits**: at most [`TerminateConfig::capacity`] connections per worker (from the
//!   connection cap and the memory cap); a SYN beyond it is answered with RST and
//!   counted (`terminate_refused`); established connections continue.

mod config;
mod conn;
mod device;
pub mod identity;
mod legs;
mod proxy;
pub mod refusal;
mod route;

pub use config::{TerminateConfig, TLS_STATE_BYTES};
pub(crate) use route::terminates;

use crate::flow::{Dir, FlowId, FlowTable, Splice, TcpState, Tuple};
use crate::pipeline::forward::Forwarder;
use crate::pipeline::nat::{admit, forget, SnatPorts};
use crate::pipeline::parse::Meta;
use crate::pipeline::reply::tcp_reset;
use crate::pipeline::stage::{dispatch, Ctx, Verdict};
use crate::port::Pkt;
use crate::stats::{DropReason, Event};
use crate::tables::snapshot::Snapshot;
use crate::wire::ip_proto;
use conn::{flush_tls, new_socket};
use device::{Wire, L2};
use rustls::server::ServerConnection;
use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::socket::tcp;
use smoltcp::time::Instant;
use smoltcp::wire::{HardwareAddress, IpAddress, IpCidr, IpEndpoint, IpListenEndpoint};
use std::net::SocketAddr;

/// Where a terminated connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// TCP and TLS handshakes.
    Handshake,
    /// Handshake done; reading the first request head (HTTPS).
    Routing,
    /// Connecting the backend.
    Connecting,
    /// Both connections open: bytes flow.
    Open,
    /// HTTP: requests routed one by one (`proxy/`).
    Http,
    /// Closing: waiting for both sockets to finish.
    Closing,
}

/// A terminated connection.
struct Conn {
    flow: FlowId,
    /// The client's tuple as it sent it.
    client: Tuple,
    front: SocketHandle,
    back: Option<SocketHandle>,
    /// The TLS session (`None`: plain HTTP).
    tls: Option<ServerConnection>,
    /// The HTTP exchange (HTTP and HTTPS listeners).
    http: Option<Box<proxy::Http>>,
    phase: Phase,
    backend: Option<SocketAddr>,
    tries: u8,
    /// Handshake or connect deadline.
    deadline_ms: u64,
    last_ms: u64,
    /// The client will send no more (close_notify or FIN).
    client_done: bool,
    /// FIN sent to the backend.
    back_closed: bool,
    /// The backend will send no more (FIN).
    backend_done: bool,
    /// close_notify queued and FIN asked of the client socket.
    front_closed: bool,
    /// The TLS session failed (counted once): what the client still sends is discarded.
    tls_failed: bool,
}

/// One smoltcp interface and its sockets.
struct Shard {
    iface: Interface,
    sockets: SocketSet<'static>,
    /// When smoltcp wants to be polled next (ms; `u64::MAX`: not until a packet).
    next_ms: u64,
    live: u32,
}

/// A worker's terminated connections.
pub struct Terminator {
    cfg: TerminateConfig,
    capacity: usize,
    conns: Vec<Option<Box<Conn>>>,
    free: Vec<u32>,
    shards: Vec<Option<Shard>>,
    /// Packets smoltcp wrote in the current poll.
    out: Vec<Pkt>,
    lost: u64,
    lost_counted: u64,
    next_scan_ms: u64,
    /// The earliest time a shard wants polling (the minimum of the shards' `next_ms`):
    /// the quiescent point looks at the shards only from then.
    next_due_ms: u64,
    /// Per-request backend picks (xorshift).
    rng: u64,
    /// The tables generation of the snapshot the engine was last entered with (a
    /// request's retry re-picks from its rule only under the same generation).
    generation: u32,
    /// Scratch space of regular-expression rewrites.
    scratch: crate::tables::http::HttpScratch,
    /// Backend connections without a client connection (`legs`): pooled, mirrors.
    legs: Vec<Option<legs::Leg>>,
    leg_free: Vec<u32>,
    /// Pooled legs, oldest first.
    pool: Vec<u32>,
    /// Mirror legs open.
    mirrors_open: usize,
    /// Bytes the mirror legs hold waiting for their backends.
    mirror_bytes: usize,
    /// Shards of the connections (the legs' follow).
    conn_shards: usize,
    /// The last leg serial handed out.
    serial: u32,
}

impl std::fmt::Debug for Terminator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminator")
            .field("capacity", &self.capacity)
            .field("open", &self.open())
            .finish_non_exhaustive()
    }
}

/// Slots probed for a half-open connection to evict when every slot is taken.
const EVICT_PROBES: u64 = 8;
/// A half-open connection this silent (ms) may be evicted for a new SYN.
pub const HALF_OPEN_EVICT_MS: u64 = 1_000;
/// How often connection deadlines are checked.
const SCAN_MS: u64 = 50;
/// An address of every shard interface, never a peer's: AnyIP accepts a destination only
/// if a route to it points at one of the interface's own addresses.
const SELF_V4: [u8; 4] = [169, 254, 0, 1];
const SELF_V6: [u16; 8] = [0xfe80, 0, 0, 0, 0, 0, 0, 1];

impl Terminator {
    /// The state for `cfg`: the connection slots (not their buffers) allocated here.
    pub fn new(cfg: TerminateConfig) -> Terminator {
        let capacity = cfg.capacity();
        let shard = cfg.shard_connections.max(1);
        let conn_shards = capacity.div_ceil(shard);
        let legs = cfg.legs();
        let shards = conn_shards + legs.div_ceil(shard);
        Terminator {
            conns: (0..capacity).map(|_| None).collect(),
            free: (0..capacity as u32).rev().collect(),
            shards: (0..shards).map(|_| None).collect(),
            legs: (0..legs).map(|_| None).collect(),
            leg_free: (0..legs as u32).rev().collect(),
            pool: Vec::with_capacity(cfg.pool_connections),
            mirrors_open: 0,
            mirror_bytes: 0,
            conn_shards,
            serial: 0,
            out: Vec::with_capacity(crate::pipeline::stage::EXTRA_TX),
            lost: 0,
            lost_counted: 0,
            next_scan_ms: 0,
            next_due_ms: u64::MAX,
            rng: cfg.seed | 1,
            generation: 0,
            scratch: crate::tables::http::HttpScratch::default(),
            capacity,
            cfg,
        }
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.capacity - self.free.len()
    }

    /// The connection cap in force.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn shard_of(&self, idx: u32) -> usize {
        idx as usize / self.cfg.shard_connections.max(1)
    }

    /// Connection `idx` and its shard, both mutably (`None` if the slot is free).
    fn conn_shard(&mut self, idx: u32) -> Option<(&mut Box<Conn>, &mut Shard)> {
        let si = self.shard_of(idx);
        let c = self.conns.get_mut(idx as usize)?.as_mut()?;
        let shard = self.shards.get_mut(si)?.as_mut()?;
        Some((c, shard))
    }

    /// The flow of connection `idx` expired in the flow table (`orig`: its client tuple):
    /// the connection goes without a word (its peers have been silent for the flow's
    /// whole timeout).
    pub fn flow_expired(&mut self, idx: u32, orig: Tuple) {
        if idx as usize >= self.capacity {
            return self.leg_flow_expired(idx - self.capacity as u32, orig);
        }
        let mine = self
            .conns
            .get(idx as usize)
            .and_then(Option::as_ref)
            .is_some_and(|c| c.client == orig);
        if mine {
            self.release(idx);
        }
    }

    /// Frees connection `idx`'s sockets and slot (its flow is the caller's).
    fn release(&mut self, idx: u32) {
        let si = self.shard_of(idx);
        let Some(c) = self.conns.get_mut(idx as usize).and_then(Option::take) else {
            return;
        };
        if let Some(h) = c.http.as_deref() {
            // Mirrors of an unfinished request are reset.
            self.cut_mirrors(h.mirrors());
        }
        if let Some(Some(shard)) = self.shards.get_mut(si) {
            shard.sockets.remove(c.front);
            if let Some(b) = c.back {
                shard.sockets.remove(b);
            }
            shard.live = shard.live.saturating_sub(1);
        }
        self.free.push(idx);
    }
}

/// The parts of a worker's L4 state the engine shares with the balancer, for one call.
pub struct Shared<'a> {
    /// Routes the packets sluice writes.
    pub fwd: &'a mut Forwarder,
    /// The worker's flow table.
    pub flows: &'a mut FlowTable,
    /// The worker's SNAT ports.
    pub snat: &'a mut SnatPorts,
    /// sluice's MAC per port.
    pub macs: &'a [[u8; 6]],
}

/// The engine at work for one packet or one timer round.
pub struct Engine<'a> {
    t: &'a mut Terminator,
    fwd: &'a mut Forwarder,
    flows: &'a mut FlowTable,
    snat: &'a mut SnatPorts,
    macs: &'a [[u8; 6]],
}

impl<'a> Engine<'a> {
    /// The engine over `t` and the shared parts.
    pub fn new(t: &'a mut Terminator, shared: Shared<'a>) -> Engine<'a> {
        Engine {
            t,
            fwd: shared.fwd,
            flows: shared.flows,
            snat: shared.snat,
            macs: shared.macs,
        }
    }
}

fn now(ms: u64) -> Instant {
    Instant::from_millis(ms as i64)
}

fn endpoint(a: SocketAddr) -> IpEndpoint {
    IpEndpoint::new(IpAddress::from(a.ip()), a.port())
}

/// The IP packet of a parsed frame (after the Ethernet header, through the TCP payload).
fn ip_bytes<'p>(pkt: &'p Pkt, meta: &Meta) -> &'p [u8] {
    let d = pkt.data();
    let hl = d.get(meta.l4 + 12).map_or(0, |b| usize::from(b >> 4) * 4);
    let end = (meta.l4 + hl + meta.payload as usize).min(d.len());
    d.get(L2..end).unwrap_or(&[])
}
impl Engine<'_> {
    /// A SYN to a terminating listener (`meta` parsed; the listener's TLS settings
    /// looked up from `snap`): a connection slot, a flow, a listening socket that
    /// answers it. Refused with RST when the worker is at its cap.
    #[allow(clippy::too_many_arguments)]
    pub fn syn(
        &mut self,
        in_port: usize,
        pkt: &mut Pkt,
        meta: &Meta,
        snap: &Snapshot,
        ours: bool,
        generation: u32,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        self.t.generation = generation;
        let vip = SocketAddr::new(meta.dst(), meta.dport());
        let Some(l) = route::listener(snap, vip, ours) else {
            return Verdict::Drop(DropReason::NoRouteMatch);
        };
        let tls = l.tls.clone();
        let http = l.kind == crate::tables::listeners::ListenerKind::Http
            || tls.as_ref().is_some_and(|t| t.http);
        let Some(&port_mac) = self.macs.get(in_port) else {
            return Verdict::Drop(DropReason::BadPort);
        };
        let src_mac: [u8; 6] = pkt.data()[6..12].try_into().unwrap_or([0; 6]);
        if src_mac[0] & 1 != 0 || meta.src().is_multicast() || meta.src().is_unspecified() {
            return Verdict::Drop(DropReason::NoFlow);
        }
        if self.t.free.is_empty() && self.evict_half_open(meta, ctx) {
            ctx.counters.event(Event::TerminateEvicted);
        }
        let Some(idx) = self.t.free.pop() else {
            ctx.counters.event(Event::TerminateRefused);
            ctx.counters.drop(DropReason::TerminateFull);
            return tcp_reset(pkt, meta, src_mac, port_mac, in_port);
        };
        let now_s = (ctx.now_ms / 1000) as u32;
        let t = meta.tuple();
        let flow = match admit(
            self.flows,
            self.snat,
            t,
            t.reversed(),
            TcpState::Established,
            generation,
            now_s,
        ) {
            Ok(id) => id,
            Err(e) => {
                self.t.free.push(idx);
                return Verdict::Drop(match e {
                    crate::flow::InsertError::Full => DropReason::FlowTableFull,
                    crate::flow::InsertError::Exists => DropReason::NoFlow,
                });
            }
        };
        let tls = match tls.map(|t| ServerConnection::new(t.config.clone())) {
            None => None,
            Some(Ok(c)) => Some(c),
            Some(Err(_)) => {
                self.flows.remove(flow);
                self.t.free.push(idx);
                return Verdict::Drop(DropReason::TerminateFull);
            }
        };
        self.flows.get_mut(flow).splice = Splice {
            phase: Splice::TERMINATED,
            scales: 0,
            value: idx,
        };
        let front = {
            let cfg = &self.t.cfg;
            let mut s = new_socket(cfg.client_buffer, cfg.keep_alive_ms);
            let ep = IpListenEndpoint {
                addr: Some(IpAddress::from(vip.ip())),
                port: vip.port(),
            };
            if s.listen(ep).is_err() {
                self.flows.remove(flow);
                self.t.free.push(idx);
                return Verdict::Drop(DropReason::NoFlow);
            }
            let si = self.t.shard_of(idx);
            let shard = self.shard(si, ctx.now_ms);
            shard.live += 1;
            shard.sockets.add(s)
        };
        self.t.conns[idx as usize] = Some(Box::new(Conn {
            flow,
            client: t,
            front,
            back: None,
            tls,
            http: http.then(proxy::Http::new),
            phase: Phase::Handshake,
            backend: None,
            tries: 0,
            deadline_ms: ctx.now_ms + self.t.cfg.handshake_ms,
            last_ms: ctx.now_ms,
            client_done: false,
            back_closed: false,
            backend_done: false,
            front_closed: false,
            tls_failed: false,
        }));
        ctx.counters.event(Event::TerminateAccepted);
        self.ingest(idx, ip_bytes(pkt, meta), snap, ctx);
        // A SYN smoltcp did not take (a bad checksum): nothing stays.
        let listening = self
            .conn_socket(idx, |c| Some(c.front))
            .is_some_and(|s| s.state() == tcp::State::Listen);
        if listening {
            self.finish(idx, ctx, false);
            return Verdict::Drop(DropReason::TcpChecksum);
        }
        Verdict::Drop(DropReason::TerminateConsumed)
    }

    /// Every slot is taken: a connection whose client never completed the TCP handshake
    /// (SYN-RECEIVED, as a SYN flood leaves them) and has been silent for
    /// [`HALF_OPEN_EVICT_MS`] gives way, found among [`EVICT_PROBES`] slots spread from
    /// the new SYN's tuple (as the flow table's early drop probes). Whether one went.
    fn evict_half_open(&mut self, meta: &Meta, ctx: &mut Ctx<'_>) -> bool {
        let n = self.t.conns.len() as u64;
        if n == 0 {
            return false;
        }
        let h = crate::tables::maglev::flow_hash(
            SocketAddr::new(meta.src(), meta.sport()),
            SocketAddr::new(meta.dst(), meta.dport()),
            ip_proto::TCP,
        );
        for i in 0..EVICT_PROBES {
            let idx = (h.wrapping_add(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)) % n) as u32;
            let half_open = self.t.conns[idx as usize].as_ref().is_some_and(|c| {
                c.phase == Phase::Handshake
                    && ctx.now_ms.saturating_sub(c.last_ms) >= HALF_OPEN_EVICT_MS
            }) && self
                .conn_socket(idx, |c| Some(c.front))
                .is_some_and(|s| s.state() == tcp::State::SynReceived);
            if half_open {
                self.abort(idx, ctx);
                return true;
            }
        }
        false
    }

    /// A packet of a terminated connection's flow (either direction).
    #[allow(clippy::too_many_arguments)]
    pub fn packet(
        &mut self,
        pkt: &Pkt,
        meta: &Meta,
        (id, _dir): (FlowId, Dir),
        idx: u32,
        snap: &Snapshot,
        generation: u32,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        if idx as usize >= self.t.capacity {
            let l = idx - self.t.capacity as u32;
            self.t.generation = generation;
            return self.leg_packet(ip_bytes(pkt, meta), (id, _dir), l, ctx);
        }
        let Some(c) = self.t.conns.get(idx as usize).and_then(Option::as_ref) else {
            return Verdict::Drop(DropReason::NoFlow);
        };
        if c.flow != id {
            return Verdict::Drop(DropReason::NoFlow);
        }
        self.t.generation = generation;
        let now_s = (ctx.now_ms / 1000) as u32;
        if self.flows.entry(id).generation != generation {
            ctx.counters.event(Event::PolicyRechecked);
            if let Some(b) = c.backend {
                let src = c.client.source().ip();
                if !snap
                    .policy
                    .verdict(src, b.ip(), ip_proto::TCP, b.port())
                    .is_allow()
                {
                    // Revoked: both connections reset.
                    ctx.counters.event(Event::FlowRevoked);
                    self.abort(idx, ctx);
                    return Verdict::Drop(DropReason::PolicyRevoked);
                }
            }
            self.flows.get_mut(id).generation = generation;
        }
        self.flows.touch(id, now_s);
        self.ingest(idx, ip_bytes(pkt, meta), snap, ctx);
        Verdict::Drop(DropReason::TerminateConsumed)
    }

    /// The quiescent point's work: shards whose timers are due are polled, deadlines
    /// checked.
    pub fn timers(&mut self, snap: &Snapshot, generation: u32, ctx: &mut Ctx<'_>) {
        self.t.generation = generation;
        let now_ms = ctx.now_ms;
        if now_ms >= self.t.next_due_ms {
            let mut next = u64::MAX;
            for si in 0..self.t.shards.len() {
                let due =
                    matches!(&self.t.shards[si], Some(s) if s.live > 0 && s.next_ms <= now_ms);
                if due {
                    self.poll_shard(si, snap, ctx);
                }
                if let Some(s) = &self.t.shards[si] {
                    if s.live > 0 {
                        next = next.min(s.next_ms);
                    }
                }
            }
            self.t.next_due_ms = next;
        }
        if now_ms >= self.t.next_scan_ms {
            self.t.next_scan_ms = now_ms + SCAN_MS;
            self.scan_legs(ctx);
            for idx in 0..self.t.conns.len() as u32 {
                let Some(c) = self.t.conns[idx as usize].as_ref() else {
                    continue;
                };
                let waiting = matches!(c.phase, Phase::Handshake | Phase::Routing);
                if c.phase == Phase::Http {
                    self.http_deadlines(idx, snap, ctx);
                    self.flush_shard(self.t.shard_of(idx), ctx);
                    if let Some(Some(c)) = self.t.conns.get(idx as usize) {
                        if now_ms.saturating_sub(c.last_ms) >= self.t.cfg.idle_ms {
                            ctx.counters.event(Event::TerminateIdleClosed);
                            self.close_both(idx);
                            self.flush_shard(self.t.shard_of(idx), ctx);
                        }
                    }
                } else if waiting && now_ms >= c.deadline_ms {
                    ctx.counters.event(Event::TerminateHandshakeTimeout);
                    self.abort(idx, ctx);
                } else if c.phase == Phase::Connecting && now_ms >= c.deadline_ms {
                    self.backend_failed(idx, snap, ctx);
                    self.flush_shard(self.t.shard_of(idx), ctx);
                } else if now_ms.saturating_sub(c.last_ms) >= self.t.cfg.idle_ms
                    && c.phase != Phase::Closing
                {
                    ctx.counters.event(Event::TerminateIdleClosed);
                    self.close_both(idx);
                    self.flush_shard(self.t.shard_of(idx), ctx);
                }
            }
        }
        let lost = self.t.lost - self.t.lost_counted;
        if lost > 0 {
            ctx.counters.drop_n(DropReason::NoRoom, lost);
            self.t.lost_counted = self.t.lost;
        }
    }

    fn shard(&mut self, si: usize, now_ms: u64) -> &mut Shard {
        let cfg = &self.t.cfg;
        let slot = &mut self.t.shards[si];
        slot.get_or_insert_with(|| {
            let mut cfg_i = Config::new(HardwareAddress::Ip);
            cfg_i.random_seed = cfg.seed ^ (si as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ now_ms;
            let mut out = Vec::new();
            let mut lost = 0;
            let mut wire = Wire {
                rx: None,
                io: None,
                out: &mut out,
                room: 0,
                lost: &mut lost,
                mtu: cfg.mtu,
            };
            let mut iface = Interface::new(cfg_i, &mut wire, now(now_ms));
            iface.set_any_ip(true);
            let v4 = smoltcp::wire::Ipv4Address::from(SELF_V4);
            let [a, b, c, d, e, f, g, h] = SELF_V6;
            let v6 = smoltcp::wire::Ipv6Address::new(a, b, c, d, e, f, g, h);
            iface.update_ip_addrs(|addrs| {
                let _ = addrs.push(IpCidr::new(IpAddress::Ipv4(v4), 32));
                let _ = addrs.push(IpCidr::new(IpAddress::Ipv6(v6), 128));
            });
            let _ = iface.routes_mut().add_default_ipv4_route(v4);
            let _ = iface.routes_mut().add_default_ipv6_route(v6);
            Shard {
                iface,
                sockets: SocketSet::new(Vec::new()),
                next_ms: u64::MAX,
                live: 0,
            }
        })
    }

    fn conn_socket(
        &mut self,
        idx: u32,
        which: impl FnOnce(&Conn) -> Option<SocketHandle>,
    ) -> Option<&mut tcp::Socket<'static>> {
        let si = self.t.shard_of(idx);
        let c = self.t.conns.get(idx as usize)?.as_ref()?;
        let h = which(c)?;
        let shard = self.t.shards.get_mut(si)?.as_mut()?;
        Some(shard.sockets.get_mut::<tcp::Socket>(h))
    }

    /// Delivers one IP packet to connection `idx`'s shard, moves its bytes, sends what
    /// smoltcp writes.
    fn ingest(&mut self, idx: u32, bytes: &[u8], snap: &Snapshot, ctx: &mut Ctx<'_>) {
        let si = self.t.shard_of(idx);
        if let Some(c) = self.t.conns[idx as usize].as_mut() {
            c.last_ms = ctx.now_ms;
        }
        if !self.ingress(si, bytes, ctx) {
            return;
        }
        self.pump(idx, snap, ctx);
        self.flush_shard(si, ctx);
    }

    /// Hands one IP packet to shard `si`'s interface (whether the shard exists).
    fn ingress(&mut self, si: usize, bytes: &[u8], ctx: &mut Ctx<'_>) -> bool {
        let Some(shard) = self.t.shards.get_mut(si).and_then(Option::as_mut) else {
            return false;
        };
        let room = ctx.io.as_ref().map_or(0, |io| io.room());
        let mut wire = Wire {
            rx: Some(bytes),
            io: ctx.io.as_deref(),
            out: &mut self.t.out,
            room,
            lost: &mut self.t.lost,
            mtu: self.t.cfg.mtu,
        };
        shard
            .iface
            .poll_ingress_single(now(ctx.now_ms), &mut wire, &mut shard.sockets);
        true
    }

    /// Polls shard `si` for its timers and moves every one of its connections' bytes.
    fn poll_shard(&mut self, si: usize, snap: &Snapshot, ctx: &mut Ctx<'_>) {
        if si >= self.t.conn_shards {
            self.flush_shard(si, ctx);
            self.pump_legs_of(si, ctx);
            self.flush_shard(si, ctx);
            return;
        }
        let per = self.t.cfg.shard_connections.max(1);
        let first = (si * per) as u32;
        let last = ((si + 1) * per).min(self.t.conns.len()) as u32;
        self.flush_shard(si, ctx);
        for idx in first..last {
            if self.t.conns[idx as usize].is_some() {
                self.pump(idx, snap, ctx);
            }
        }
        self.flush_shard(si, ctx);
    }

    /// smoltcp's egress for shard `si`, then the packets routed out.
    fn flush_shard(&mut self, si: usize, ctx: &mut Ctx<'_>) {
        {
            let Some(shard) = self.t.shards[si].as_mut() else {
                return;
            };
            let room = ctx.io.as_ref().map_or(0, |io| io.room());
            let mut wire = Wire {
                rx: None,
                io: ctx.io.as_deref(),
                out: &mut self.t.out,
                room,
                lost: &mut self.t.lost,
                mtu: self.t.cfg.mtu,
            };
            let at = now(ctx.now_ms);
            shard.iface.poll_egress(at, &mut wire, &mut shard.sockets);
            shard.next_ms = match shard.iface.poll_at(at, &shard.sockets) {
                Some(t) => t.total_millis().max(0) as u64,
                None => u64::MAX,
            };
            // Out of buffers or tx room: try again at the next quiescent point.
            if self.t.out.len() >= room {
                shard.next_ms = ctx.now_ms;
            }
            self.t.next_due_ms = self.t.next_due_ms.min(shard.next_ms);
        }
        self.route_out(ctx);
    }

    /// Routes the packets smoltcp wrote (as if received on the first port: the forwarder
    /// picks the way out by destination).
    fn route_out(&mut self, ctx: &mut Ctx<'_>) {
        let mut out = std::mem::take(&mut self.t.out);
        for mut p in out.drain(..) {
            let Some(&mac) = self.macs.first() else {
                ctx.counters.drop(DropReason::BadPort);
                continue;
            };
            let v6 = p.data().get(L2).is_some_and(|b| b >> 4 == 6);
            {
                let d = p.data_mut();
                d[0..6].copy_from_slice(&mac);
                d[6..12].copy_from_slice(&mac);
                d[12..14].copy_from_slice(if v6 { &[0x86, 0xdd] } else { &[0x08, 0x00] });
            }
            let v = self.fwd.process(0, &mut p, ctx);
            dispatch(v, p, ctx);
        }
        self.t.out = out;
    }

    /// Releases connection `idx` once both its sockets are closed.
    fn reap_if_done(&mut self, idx: u32, ctx: &mut Ctx<'_>) {
        let si = self.t.shard_of(idx);
        let (Some(Some(c)), Some(Some(shard))) =
            (self.t.conns.get(idx as usize), self.t.shards.get(si))
        else {
            return;
        };
        // TIME_WAIT is the flow table's to keep (the flow's TCP state), not a socket's.
        let closed = |h: SocketHandle| {
            matches!(
                shard.sockets.get::<tcp::Socket>(h).state(),
                tcp::State::Closed | tcp::State::TimeWait
            )
        };
        let front_closed = closed(c.front);
        let back_closed = c.back.is_none_or(closed);
        if front_closed && back_closed {
            self.finish(idx, ctx, true);
        }
    }

    /// Both sides closed gracefully (close_notify, FIN).
    fn close_both(&mut self, idx: u32) {
        let Some((c, shard)) = self.t.conn_shard(idx) else {
            return;
        };
        let front = shard.sockets.get_mut::<tcp::Socket>(c.front);
        if let Some(tls) = c.tls.as_mut() {
            tls.send_close_notify();
            flush_tls(tls, front);
        }
        front.close();
        c.front_closed = true;
        if let Some(b) = c.back {
            shard.sockets.get_mut::<tcp::Socket>(b).close();
        }
        c.back_closed = true;
        c.phase = Phase::Closing;
    }

    /// Both sides reset; the connection is released once the resets are out.
    fn abort(&mut self, idx: u32, ctx: &mut Ctx<'_>) {
        let si = self.t.shard_of(idx);
        if let (Some(Some(c)), Some(Some(shard))) = (
            self.t.conns.get_mut(idx as usize),
            self.t.shards.get_mut(si),
        ) {
            shard.sockets.get_mut::<tcp::Socket>(c.front).abort();
            if let Some(b) = c.back {
                shard.sockets.get_mut::<tcp::Socket>(b).abort();
            }
            c.front_closed = true;
            c.back_closed = true;
            c.phase = Phase::Closing;
        }
        self.finish(idx, ctx, true);
    }

    /// Releases connection `idx`: its sockets, its flow (the SNAT tuple rests), its slot.
    fn finish(&mut self, idx: u32, ctx: &mut Ctx<'_>, counted: bool) {
        // What the sockets still have to say (a FIN's ACK, RSTs) goes out first.
        self.flush_shard(self.t.shard_of(idx), ctx);
        let now_s = (ctx.now_ms / 1000) as u32;
        let Some(Some(c)) = self.t.conns.get(idx as usize) else {
            return;
        };
        let (flow, client) = (c.flow, c.client);
        let f = self.flows.entry(flow);
        let mine = f.splice.phase == Splice::TERMINATED
            && f.splice.value == idx
            && self.flows.get(flow).orig() == client;
        if mine {
            forget(self.flows, self.snat, flow, now_s);
        }
        if counted {
            ctx.counters.event(Event::TerminateClosed);
        }
        self.t.release(idx);
    }
}
