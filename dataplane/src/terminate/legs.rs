//! Backend connections without a client connection behind them ("legs"): idle HTTP
//! backend connections kept in the worker's **pool** for any client's next request to
//! the same backend, and **mirrored copies** of requests whose responses are read and
//! dropped.
//!
//! ```text
//!  client conn (its flow: client tuple + backend tuple) ──park──▶ pooled leg (own flow)
//!  client conn ◀──claim── pooled leg: the backend tuple and socket move back
//!  request with a mirror ──▶ mirror leg: copy of head (+ body as it streams) ──▶ backend
//! ```
//!
//! - **Flows**: a leg has its own flow: the backend side is the connection's SNAT tuple,
//!   the other side `(sluice's link-local address, the SNAT port) -> backend`, a tuple no
//!   peer sends from. Parking moves the backend tuple from the client's flow to a new
//!   leg flow; claiming moves it back; the socket moves between the shards' socket sets
//!   (smoltcp keeps a TCP connection's whole state in its socket).
//! - **Slots**: legs are numbered after the connections in the flows' [`Splice`] value
//!   (`capacity + leg`), live in shards of their own, and are bounded by
//!   [`TerminateConfig::pool_connections`](super::TerminateConfig) plus
//!   [`TerminateConfig::mirror_connections`](super::TerminateConfig). A full pool makes
//!   its oldest connection give way.
//! - **Pool**: a connection is parked only idle (its last response whole, nothing
//!   unread or unsent) and claimed only if still so; a backend's FIN or stray bytes
//!   close it; one unused for
//!   [`TerminateConfig::pool_idle_ms`](super::TerminateConfig) is closed. Policy is
//!   checked for each client that claims one.
//! - **Mirrors**: the copy asks the backend to close after its answer
//!   (`Connection: close`); bytes wait in the leg (at most [`MIRROR_PENDING`] each, and
//!   [`MIRROR_BYTES`] for all of a worker's) while the connection opens or the backend
//!   reads slowly — a mirror never slows its request: one that falls behind is reset and
//!   counted.

use super::conn::{fin_received, new_socket};
use super::{endpoint, Engine, Terminator, SELF_V4, SELF_V6};
use crate::flow::{Dir, FlowId, Splice, TcpState, Tuple};
use crate::pipeline::nat::{admit, forget, insert_own, rest_tuple};
use crate::pipeline::stage::Ctx;
use crate::stats::{DropReason, Event};
use crate::tables::snapshot::Snapshot;
use crate::wire::ip_proto;
use smoltcp::iface::SocketHandle;
use smoltcp::socket::{tcp, Socket};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Bytes of a mirrored copy that may wait for its backend (Envoy's default buffer limit
/// per connection); beyond, the copy is reset.
pub const MIRROR_PENDING: usize = 1 << 20;
/// Bytes all of a worker's mirrored copies may hold waiting; beyond, the copy that would
/// pass it is reset.
pub const MIRROR_BYTES: usize = 32 << 20;
/// A leg closing gracefully that has not finished in this long (ms) is reset.
const CLOSE_MS: u64 = 5_000;

/// What a leg is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Idle in the pool.
    Pooled,
    /// Carrying a mirrored copy.
    Mirror,
    /// Closing (FIN or RST sent); released once its socket is closed.
    Closing,
}

/// A backend connection without a client connection.
pub(super) struct Leg {
    /// Tells a slot's successive legs apart (a request holds `(slot, serial)`).
    serial: u32,
    flow: FlowId,
    /// The flow's client-side key (sluice's own address), to tell it is still this
    /// leg's.
    orig: Tuple,
    socket: SocketHandle,
    backend: SocketAddr,
    role: Role,
    /// Last activity (ms).
    last_ms: u64,
    /// Mirror: reset at this time (connecting, or silent).
    deadline_ms: u64,
    /// Mirror: bytes of the copy not yet in the socket.
    pending: Vec<u8>,
    /// Mirror: the request ended (no more bytes will be fed).
    complete: bool,
    /// Mirror: the connection opened.
    opened: bool,
    /// Mirror: the copy was cut short (counted once).
    cut: bool,
}

impl Leg {
    /// Mirror: the whole copy is in the socket (or sent).
    fn whole(&self) -> bool {
        self.complete && self.pending.is_empty()
    }
}

/// The address a leg's flow names as its client side: sluice's own, of the backend's
/// family.
fn self_ip(backend: SocketAddr) -> IpAddr {
    match backend {
        SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(SELF_V4)),
        SocketAddr::V6(_) => {
            let [a, b, c, d, e, f, g, h] = SELF_V6;
            IpAddr::V6(Ipv6Addr::new(a, b, c, d, e, f, g, h))
        }
    }
}

impl Terminator {
    /// The shard of leg `l` (after the connections' shards).
    pub(super) fn leg_shard(&self, l: u32) -> usize {
        self.conn_shards + l as usize / self.cfg.shard_connections.max(1)
    }

    /// Leg `l`'s slot number in its flow's [`Splice`] value.
    fn leg_value(&self, l: u32) -> u32 {
        self.capacity as u32 + l
    }

    /// Legs open now (pooled, mirrors, closing).
    pub fn legs_open(&self) -> usize {
        self.legs.len() - self.leg_free.len()
    }

    /// Idle connections in the pool now.
    pub fn pooled(&self) -> usize {
        self.pool.len()
    }

    /// Takes leg `l` out of the pool list.
    fn unpool(&mut self, l: u32) {
        if let Some(i) = self.pool.iter().position(|&p| p == l) {
            self.pool.remove(i);
        }
    }

    /// Frees leg `l`'s socket and slot (its flow is the caller's).
    fn release_leg(&mut self, l: u32) {
        let si = self.leg_shard(l);
        let Some(leg) = self.legs.get_mut(l as usize).and_then(Option::take) else {
            return;
        };
        if let Some(Some(shard)) = self.shards.get_mut(si) {
            shard.sockets.remove(leg.socket);
            shard.live = shard.live.saturating_sub(1);
        }
        if leg.role == Role::Pooled {
            self.unpool(l);
        }
        if leg.serial & MIRROR_BIT != 0 {
            self.mirrors_open = self.mirrors_open.saturating_sub(1);
            self.mirror_bytes = self.mirror_bytes.saturating_sub(leg.pending.len());
        }
        self.leg_free.push(l);
    }

    /// The flow of leg `value - capacity` expired (`orig`: its client-side key).
    pub(super) fn leg_flow_expired(&mut self, l: u32, orig: Tuple) {
        let mine = self
            .legs
            .get(l as usize)
            .and_then(Option::as_ref)
            .is_some_and(|g| g.orig == orig);
        if mine {
            // The flow is gone already (the table's wheel): only the socket and slot.
            self.release_leg(l);
        }
    }

    /// Marks mirrors `ids` cut (their request went away unfinished): reset at the next
    /// scan.
    pub(super) fn cut_mirrors(&mut self, ids: &[(u32, u32)]) {
        for &(l, serial) in ids {
            if let Some(Some(leg)) = self.legs.get_mut(l as usize) {
                if leg.serial == serial && leg.role == Role::Mirror {
                    leg.deadline_ms = 0;
                }
            }
        }
    }
}

impl Engine<'_> {
    /// A packet of leg `l`'s flow.
    pub(super) fn leg_packet(
        &mut self,
        bytes: &[u8],
        (id, dir): (FlowId, Dir),
        l: u32,
        ctx: &mut Ctx<'_>,
    ) -> crate::pipeline::stage::Verdict {
        use crate::pipeline::stage::Verdict;
        let mine = self
            .t
            .legs
            .get(l as usize)
            .and_then(Option::as_ref)
            .is_some_and(|g| g.flow == id);
        // Nobody sends from sluice's own link-local address.
        if !mine || dir != Dir::Reply {
            return Verdict::Drop(DropReason::NoFlow);
        }
        self.flows.touch(id, (ctx.now_ms / 1000) as u32);
        let si = self.t.leg_shard(l);
        if let Some(Some(leg)) = self.t.legs.get_mut(l as usize) {
            leg.last_ms = ctx.now_ms;
        }
        self.ingress(si, bytes, ctx);
        self.pump_leg(l, ctx);
        self.flush_shard(si, ctx);
        Verdict::Drop(DropReason::TerminateConsumed)
    }

    /// Moves leg `l` on: a pooled one checked, a mirror's bytes out and its answer
    /// read and dropped, a closed one released.
    pub(super) fn pump_leg(&mut self, l: u32, ctx: &mut Ctx<'_>) {
        let si = self.t.leg_shard(l);
        let idle_ms = self.t.cfg.idle_ms;
        let (Some(Some(leg)), Some(Some(shard))) =
            (self.t.legs.get_mut(l as usize), self.t.shards.get_mut(si))
        else {
            return;
        };
        let s = shard.sockets.get_mut::<tcp::Socket>(leg.socket);
        let state = s.state();
        if matches!(state, tcp::State::Closed | tcp::State::TimeWait) {
            if leg.role == Role::Pooled {
                ctx.counters.event(Event::HttpPoolClosed);
            }
            return self.end_leg(l, ctx);
        }
        match leg.role {
            Role::Pooled => {
                if s.can_recv() {
                    // Bytes nobody asked for: the connection cannot be trusted again.
                    s.abort();
                } else if fin_received(state) {
                    s.close();
                } else {
                    return;
                }
                leg.role = Role::Closing;
                ctx.counters.event(Event::HttpPoolClosed);
                self.t.unpool(l);
            }
            Role::Mirror => {
                if !matches!(state, tcp::State::SynSent | tcp::State::SynReceived) {
                    if !leg.opened {
                        leg.opened = true;
                        ctx.counters.event(Event::TerminateBackendConnected);
                    }
                    leg.deadline_ms = ctx.now_ms + idle_ms;
                }
                while !leg.pending.is_empty() && s.can_send() {
                    match s.send_slice(&leg.pending) {
                        Ok(n) if n > 0 => {
                            leg.pending.drain(..n);
                            self.t.mirror_bytes = self.t.mirror_bytes.saturating_sub(n);
                        }
                        _ => break,
                    }
                }
                // The answer is read and dropped.
                while s.can_recv() {
                    if !matches!(s.recv(|b| (b.len(), b.len())), Ok(n) if n > 0) {
                        break;
                    }
                }
                if fin_received(state) && !s.can_recv() {
                    if !leg.whole() && !leg.cut {
                        // Answered (and closed) before the copy was whole.
                        leg.cut = true;
                        ctx.counters.event(Event::HttpMirrorDropped);
                    }
                    s.close();
                    leg.role = Role::Closing;
                }
            }
            Role::Closing => {
                while s.can_recv() {
                    if !matches!(s.recv(|b| (b.len(), b.len())), Ok(n) if n > 0) {
                        break;
                    }
                }
            }
        }
    }

    /// Ends leg `l`: what its socket has to say goes out, its flow is forgotten (the
    /// tuple rests), its socket and slot are freed.
    fn end_leg(&mut self, l: u32, ctx: &mut Ctx<'_>) {
        self.flush_shard(self.t.leg_shard(l), ctx);
        let now_s = (ctx.now_ms / 1000) as u32;
        let value = self.t.leg_value(l);
        let Some(Some(leg)) = self.t.legs.get(l as usize) else {
            return;
        };
        if leg.role == Role::Mirror && !leg.cut && !leg.whole() {
            ctx.counters.event(Event::HttpMirrorDropped);
        }
        let f = self.flows.entry(leg.flow);
        let still = f.splice.phase == Splice::TERMINATED
            && f.splice.value == value
            && self.flows.get(leg.flow).orig() == leg.orig;
        if still {
            forget(self.flows, self.snat, leg.flow, now_s);
        }
        self.t.release_leg(l);
    }

    /// A free leg slot: a free one, else the oldest pooled connection gives way (reset:
    /// it was idle).
    fn leg_slot(&mut self, ctx: &mut Ctx<'_>) -> Option<u32> {
        if self.t.leg_free.is_empty() {
            let &oldest = self.t.pool.first()?;
            self.reset_leg(oldest, ctx);
            ctx.counters.event(Event::HttpPoolClosed);
        }
        self.t.leg_free.pop()
    }

    /// Resets leg `l` and ends it.
    fn reset_leg(&mut self, l: u32, ctx: &mut Ctx<'_>) {
        let si = self.t.leg_shard(l);
        if let (Some(Some(leg)), Some(Some(shard))) =
            (self.t.legs.get(l as usize), self.t.shards.get_mut(si))
        {
            shard.sockets.get_mut::<tcp::Socket>(leg.socket).abort();
        }
        self.end_leg(l, ctx);
    }

    /// Moves socket `h` from shard `from` to shard `to`; its new handle.
    fn move_socket(
        &mut self,
        h: SocketHandle,
        from: usize,
        to: usize,
        now_ms: u64,
    ) -> Option<SocketHandle> {
        let s = self.t.shards.get_mut(from)?.as_mut()?.sockets.remove(h);
        let Socket::Tcp(s) = s else {
            return None;
        };
        let shard = self.shard(to, now_ms);
        Some(shard.sockets.add(s))
    }

    /// Parks connection `idx`'s backend connection in the pool if it is idle and
    /// reusable (whether it went). The connection keeps its client side only.
    pub(super) fn park(&mut self, idx: u32, ctx: &mut Ctx<'_>) -> bool {
        if self.t.cfg.pool_connections == 0 {
            return false;
        }
        let si = self.t.shard_of(idx);
        let (flow, client, bh, backend) = {
            let (Some(Some(c)), Some(Some(shard))) =
                (self.t.conns.get(idx as usize), self.t.shards.get(si))
            else {
                return false;
            };
            let (Some(bh), Some(backend)) = (c.back, c.backend) else {
                return false;
            };
            let s = shard.sockets.get::<tcp::Socket>(bh);
            let idle = c.http.as_deref().is_some_and(|h| h.back_reusable)
                && !c.back_closed
                && s.state() == tcp::State::Established
                && !s.can_recv()
                && s.send_queue() == 0;
            if !idle {
                return false;
            }
            (c.flow, c.client, bh, backend)
        };
        if self.t.pool.len() >= self.t.cfg.pool_connections {
            if let Some(&oldest) = self.t.pool.first() {
                self.reset_leg(oldest, ctx);
                ctx.counters.event(Event::HttpPoolClosed);
            }
        }
        let Some(l) = self.leg_slot(ctx) else {
            return false;
        };
        let now_s = (ctx.now_ms / 1000) as u32;
        let reply = self.flows.get(flow).reply();
        // The client's flow gives its backend tuple up (back to its form before any
        // backend) ...
        let released = self
            .flows
            .rekey_reply(
                flow,
                client.reversed(),
                TcpState::Established,
                now_s,
                |_| false,
            )
            .is_ok();
        if !released {
            self.t.leg_free.push(l);
            return false;
        }
        // ... to the leg's own flow.
        let orig = Tuple::new(
            SocketAddr::new(self_ip(backend), reply.dport),
            backend,
            ip_proto::TCP,
        );
        let generation = self.t.generation;
        let leg_flow = admit(
            self.flows,
            self.snat,
            orig,
            reply,
            TcpState::Established,
            generation,
            now_s,
        );
        let lsi = self.t.leg_shard(l);
        let moved = match leg_flow {
            Ok(_) => self.move_socket(bh, si, lsi, ctx.now_ms),
            Err(_) => None,
        };
        if let Some(Some(c)) = self.t.conns.get_mut(idx as usize) {
            c.back = None;
            c.backend = None;
            c.back_closed = false;
            c.backend_done = false;
            if let Some(h) = c.http.as_deref_mut() {
                h.back_reusable = false;
            }
        }
        let (Ok(leg_flow), Some(socket)) = (leg_flow, moved) else {
            // Nothing can track the connection: it is reset, its tuple rests.
            if let Ok(id) = leg_flow {
                self.flows.remove(id);
            }
            if let Some(Some(shard)) = self.t.shards.get_mut(si) {
                if shard.sockets.iter().any(|(h, _)| h == bh) {
                    shard.sockets.get_mut::<tcp::Socket>(bh).abort();
                }
            }
            self.flush_shard(si, ctx);
            if let Some(Some(shard)) = self.t.shards.get_mut(si) {
                if shard.sockets.iter().any(|(h, _)| h == bh) {
                    shard.sockets.remove(bh);
                }
            }
            rest_tuple(self.snat, &reply, now_s);
            self.t.leg_free.push(l);
            return false;
        };
        let value = self.t.leg_value(l);
        self.flows.get_mut(leg_flow).splice = Splice {
            phase: Splice::TERMINATED,
            scales: 0,
            value,
        };
        self.t.serial = self.t.serial.wrapping_add(1);
        let serial = self.t.serial & !MIRROR_BIT;
        if let Some(shard) = self.t.shards.get_mut(lsi).and_then(Option::as_mut) {
            shard.live += 1;
        }
        self.t.legs[l as usize] = Some(Leg {
            serial,
            flow: leg_flow,
            orig,
            socket,
            backend,
            role: Role::Pooled,
            last_ms: ctx.now_ms,
            deadline_ms: u64::MAX,
            pending: Vec::new(),
            complete: true,
            opened: true,
            cut: false,
        });
        self.t.pool.push(l);
        ctx.counters.event(Event::HttpBackendPooled);
        true
    }

    /// Gives connection `idx` (which has no backend connection) a pooled connection to
    /// `backend` if one is idle and policy lets its client reach the backend (whether
    /// it did).
    pub(super) fn claim(
        &mut self,
        idx: u32,
        backend: SocketAddr,
        snap: &Snapshot,
        ctx: &mut Ctx<'_>,
    ) -> bool {
        let Some(Some(c)) = self.t.conns.get(idx as usize) else {
            return false;
        };
        if c.back.is_some() {
            return false;
        }
        let (flow, client) = (c.flow, c.client.source());
        let found = self.t.pool.iter().rposition(|&l| {
            let si = self.t.leg_shard(l);
            match (self.t.legs.get(l as usize), self.t.shards.get(si)) {
                (Some(Some(leg)), Some(Some(shard))) => {
                    let s = shard.sockets.get::<tcp::Socket>(leg.socket);
                    leg.backend == backend
                        && s.state() == tcp::State::Established
                        && !s.can_recv()
                        && s.may_send()
                }
                _ => false,
            }
        });
        let Some(pos) = found else {
            return false;
        };
        if !snap
            .policy
            .verdict(client.ip(), backend.ip(), ip_proto::TCP, backend.port())
            .is_allow()
        {
            return false;
        }
        let l = self.t.pool.remove(pos);
        let now_s = (ctx.now_ms / 1000) as u32;
        let (leg_flow, socket) = match self.t.legs.get(l as usize) {
            Some(Some(leg)) => (leg.flow, leg.socket),
            _ => return false,
        };
        let reply = self.flows.get(leg_flow).reply();
        // The tuple moves to the client's flow.
        self.flows.remove(leg_flow);
        if self
            .flows
            .rekey_reply(flow, reply, TcpState::Established, now_s, |_| false)
            .is_err()
        {
            // (Cannot happen: the tuple was just freed.) The connection goes.
            if let Some(Some(leg)) = self.t.legs.get_mut(l as usize) {
                leg.role = Role::Closing;
            }
            let si = self.t.leg_shard(l);
            if let Some(Some(shard)) = self.t.shards.get_mut(si) {
                shard.sockets.get_mut::<tcp::Socket>(socket).abort();
            }
            self.flush_shard(si, ctx);
            rest_tuple(self.snat, &reply, now_s);
            self.t.release_leg(l);
            return false;
        }
        let (lsi, si) = (self.t.leg_shard(l), self.t.shard_of(idx));
        let moved = self.move_socket(socket, lsi, si, ctx.now_ms);
        // The slot is free; the socket (if it moved) is the connection's now.
        if let Some(leg) = self.t.legs.get_mut(l as usize).and_then(Option::take) {
            drop(leg);
            if let Some(Some(shard)) = self.t.shards.get_mut(lsi) {
                shard.live = shard.live.saturating_sub(1);
            }
            self.t.leg_free.push(l);
        }
        let Some(h) = moved else {
            return false;
        };
        if let Some(Some(c)) = self.t.conns.get_mut(idx as usize) {
            c.back = Some(h);
            c.backend = Some(backend);
            c.back_closed = false;
            c.backend_done = false;
        }
        ctx.counters.event(Event::HttpPoolReused);
        true
    }

    /// Opens a leg to `backend` carrying a mirrored copy for client `client` (`head`:
    /// the copy's head; body bytes follow with [`Engine::feed_mirror`]). `(slot,
    /// serial)`, or `None` (counted) when it cannot be sent.
    pub(super) fn open_mirror(
        &mut self,
        client: IpAddr,
        backend: SocketAddr,
        head: Vec<u8>,
        snap: &Snapshot,
        ctx: &mut Ctx<'_>,
    ) -> Option<(u32, u32)> {
        let opened = self.try_open_mirror(client, backend, head, snap, ctx);
        ctx.counters.event(if opened.is_some() {
            Event::HttpMirrorSent
        } else {
            Event::HttpMirrorDropped
        });
        opened
    }

    fn try_open_mirror(
        &mut self,
        client: IpAddr,
        backend: SocketAddr,
        head: Vec<u8>,
        snap: &Snapshot,
        ctx: &mut Ctx<'_>,
    ) -> Option<(u32, u32)> {
        if self.t.mirrors_open >= self.t.cfg.mirror_connections
            || backend.is_ipv4() != client.is_ipv4()
            || !snap
                .policy
                .verdict(client, backend.ip(), ip_proto::TCP, backend.port())
                .is_allow()
        {
            return None;
        }
        let nh = self.fwd.config().fib.lookup(backend.ip())?;
        let snat_ip = self.fwd.config().addr_on(nh.port, backend.ip())?;
        let l = self.leg_slot(ctx)?;
        let now_s = (ctx.now_ms / 1000) as u32;
        let generation = self.t.generation;
        let flow = match insert_own(
            self.flows,
            self.snat,
            backend,
            snat_ip,
            self_ip(backend),
            generation,
            now_s,
        ) {
            Ok(f) => f,
            Err(r) => {
                ctx.counters.drop(r);
                self.t.leg_free.push(l);
                return None;
            }
        };
        let value = self.t.leg_value(l);
        {
            let f = self.flows.get_mut(flow);
            f.splice = Splice {
                phase: Splice::TERMINATED,
                scales: 0,
                value,
            };
            // Tracked as established: the engine, not the flow's TCP state, ends it.
            f.state = TcpState::Established;
        }
        self.flows.touch(flow, now_s);
        let (orig, local) = {
            let f = self.flows.get(flow);
            (f.orig(), f.reply().destination())
        };
        let (buf, ka) = (self.t.cfg.backend_buffer, self.t.cfg.keep_alive_ms);
        let lsi = self.t.leg_shard(l);
        let shard = self.shard(lsi, ctx.now_ms);
        let mut s = new_socket(buf, ka);
        if s.connect(shard.iface.context(), endpoint(backend), endpoint(local))
            .is_err()
        {
            self.flows.remove(flow);
            self.t.leg_free.push(l);
            return None;
        }
        let socket = shard.sockets.add(s);
        shard.live += 1;
        self.t.serial = self.t.serial.wrapping_add(1);
        let serial = self.t.serial | MIRROR_BIT;
        self.t.legs[l as usize] = Some(Leg {
            serial,
            flow,
            orig,
            socket,
            backend,
            role: Role::Mirror,
            last_ms: ctx.now_ms,
            deadline_ms: ctx.now_ms + self.t.cfg.connect_ms,
            pending: head,
            complete: false,
            opened: false,
            cut: false,
        });
        self.t.mirrors_open += 1;
        self.t.mirror_bytes += self.t.legs[l as usize]
            .as_ref()
            .map_or(0, |g| g.pending.len());
        self.flush_shard(lsi, ctx);
        Some((l, serial))
    }

    /// Body bytes for mirror `(l, serial)`; `complete`: the request ended with them.
    /// A mirror that would hold more than [`MIRROR_PENDING`] bytes (or pass the worker's
    /// [`MIRROR_BYTES`]) is reset.
    pub(super) fn feed_mirror(
        &mut self,
        (l, serial): (u32, u32),
        bytes: &[u8],
        complete: bool,
        ctx: &mut Ctx<'_>,
    ) {
        let Some(Some(leg)) = self.t.legs.get_mut(l as usize) else {
            return;
        };
        if leg.serial != serial || leg.role != Role::Mirror || leg.complete {
            return;
        }
        if leg.pending.len() + bytes.len() > MIRROR_PENDING
            || self.t.mirror_bytes + bytes.len() > MIRROR_BYTES
        {
            leg.cut = true;
            ctx.counters.event(Event::HttpMirrorDropped);
            return self.reset_leg(l, ctx);
        }
        leg.pending.extend_from_slice(bytes);
        self.t.mirror_bytes += bytes.len();
        leg.complete = complete;
        self.pump_leg(l, ctx);
        self.flush_shard(self.t.leg_shard(l), ctx);
    }

    /// The scan of the legs: pooled connections idle too long closed, mirrors past
    /// their deadline reset, closings that hang reset.
    pub(super) fn scan_legs(&mut self, ctx: &mut Ctx<'_>) {
        let now_ms = ctx.now_ms;
        let pool_idle = self.t.cfg.pool_idle_ms;
        for l in 0..self.t.legs.len() as u32 {
            let Some(Some(leg)) = self.t.legs.get_mut(l as usize) else {
                continue;
            };
            match leg.role {
                Role::Pooled if now_ms.saturating_sub(leg.last_ms) >= pool_idle => {
                    leg.role = Role::Closing;
                    leg.last_ms = now_ms;
                    let si = self.t.leg_shard(l);
                    if let (Some(Some(leg)), Some(Some(shard))) =
                        (self.t.legs.get(l as usize), self.t.shards.get_mut(si))
                    {
                        shard.sockets.get_mut::<tcp::Socket>(leg.socket).close();
                    }
                    ctx.counters.event(Event::HttpPoolClosed);
                    self.t.unpool(l);
                    self.flush_shard(si, ctx);
                }
                Role::Mirror if now_ms >= leg.deadline_ms => self.reset_leg(l, ctx),
                Role::Closing if now_ms.saturating_sub(leg.last_ms) >= CLOSE_MS => {
                    self.reset_leg(l, ctx)
                }
                _ => {}
            }
        }
    }

    /// Polls leg shard `si`'s legs.
    pub(super) fn pump_legs_of(&mut self, si: usize, ctx: &mut Ctx<'_>) {
        let per = self.t.cfg.shard_connections.max(1);
        let first = ((si - self.t.conn_shards) * per) as u32;
        let last = (first as usize + per).min(self.t.legs.len()) as u32;
        for l in first..last {
            if self.t.legs[l as usize].is_some() {
                self.pump_leg(l, ctx);
            }
        }
    }
}

/// Set in the serial of a mirror's leg (its count of open mirrors is given back when
/// it goes, whatever its role by then).
const MIRROR_BIT: u32 = 1 << 31;
