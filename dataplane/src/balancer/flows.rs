//! The L4 balancer's decisions for one TCP/UDP packet: a flow hit (lazy policy re-check,
//! state, rewrite), a miss (listener, Maglev, policy, SNAT, a new flow; delayed binding
//! handed to the splice engine), routed traffic, and the rejects.

use crate::flow::{Dir, FlowId, FlowTable, SourceRates, Splice, TcpFlags, TcpState, Tuple};
use crate::pipeline::forward::Forwarder;
use crate::pipeline::nat::{
    admit, forget, insert_snat, rewrite, rewrite_raw, rewrite_v4, SnatPorts,
};
use crate::pipeline::parse::{mac_word, parse, Found, Meta};
use crate::pipeline::reply::{admin_prohibited, port_unreachable, tcp_reset, write_seg, Seg};
use crate::pipeline::stage::{Ctx, Verdict};
use crate::port::Pkt;
use crate::splice::engine::{Engine, Shared, Splicer};
use crate::splice::rewrite::splice_rewrite;
use crate::stats::{DropReason, Event};
use crate::tables::maglev::Pick;
use crate::tables::policy::{self, Conn};
use crate::tables::snapshot::Snapshot;
use crate::terminate::{self, Terminator};
use crate::wire::{ethernet, ip_proto};
use std::net::SocketAddr;

/// Whether policy allows `conn`: the verdict `ahead` holds when it was decided for
/// exactly this connection (counted as [`Event::PolicyBurstChecked`]), else one lookup.
#[inline]
fn policy_allows(
    snap: &Snapshot,
    ahead: Option<&Prechecked>,
    conn: Conn,
    ctx: &mut Ctx<'_>,
) -> bool {
    match ahead {
        Some(p) if p.conn == conn => {
            ctx.counters.event(Event::PolicyBurstChecked);
            p.verdict.is_allow()
        }
        _ => snap
            .policy
            .verdict(conn.src, conn.dst, conn.proto, conn.dst_port)
            .is_allow(),
    }
}

/// Where a TCP/UDP packet without a flow goes, before anything is changed (see
/// [`State::target`]).
#[derive(Debug, Clone, Copy)]
pub(super) enum Target {
    /// Not to sluice and no listener bound to its address: routed, policy permitting.
    Routed,
    /// To one of sluice's addresses without a listener: a reply to a SNAT port.
    SnatReply,
    /// A listener that routes by name (SNI or Host) on the first bytes: delayed binding.
    ByName,
    /// A listener whose connections sluice ends itself (TLS termination, HTTP per
    /// request): the terminate engine.
    Terminate,
    /// Dropped for this reason.
    Drop(DropReason),
    /// The route's pick rejects the connection (a reject share, or a backend of the
    /// other family).
    Reject,
    /// A new flow to this backend, policy permitting; `transparent`: the listener keeps
    /// the client's address (no SNAT).
    Backend {
        backend: SocketAddr,
        transparent: bool,
    },
}

/// What the burst's pass ahead found for one packet without a flow: where it goes, and
/// the connection whose policy it checked, with the verdict.
#[derive(Debug, Clone, Copy)]
pub(super) struct Prechecked {
    pub(super) target: Target,
    pub(super) conn: Conn,
    pub(super) verdict: policy::Verdict,
}

/// Everything but the snapshot reader (so a burst can hold the snapshot while the rest is
/// mutated).
pub(super) struct State {
    pub(super) fwd: Forwarder,
    pub(super) flows: FlowTable,
    pub(super) snat: SnatPorts,
    pub(super) worker: u32,
    /// New connections per source and second.
    pub(super) sources: SourceRates,
    pub(super) macs: Box<[[u8; 6]]>,
    pub(super) splice: Splicer,
    /// Terminated connections ([`crate::terminate`]).
    pub(super) terminate: Terminator,
    /// The flow table's early drops already counted as `flow_early_drop`.
    pub(super) early_drops_counted: u64,
}

impl State {
    /// The splice engine over this worker's delayed-binding state and the parts it shares
    /// with the balancer.
    #[inline]
    pub(super) fn engine(&mut self) -> Engine<'_> {
        Engine::new(
            &mut self.splice,
            Shared {
                fwd: &mut self.fwd,
                flows: &mut self.flows,
                snat: &mut self.snat,
                macs: &self.macs,
            },
        )
    }

    /// The terminate engine over this worker's terminated connections and the shared
    /// parts.
    #[inline]
    pub(super) fn terminator(&mut self) -> terminate::Engine<'_> {
        terminate::Engine::new(
            &mut self.terminate,
            terminate::Shared {
                fwd: &mut self.fwd,
                flows: &mut self.flows,
                snat: &mut self.snat,
                macs: &self.macs,
            },
        )
    }

    /// A packet the burst's parse did not find TCP/UDP to the balancer in (as `meta`
    /// says): other IP traffic to elsewhere passes the policy tables first (protocol and
    /// addresses, stateless), fragments are dropped, and the rest is the forwarder's,
    /// which does not parse it again.
    #[inline]
    pub(super) fn other(
        &mut self,
        in_port: usize,
        pkt: &mut Pkt,
        meta: &Meta,
        snap: &Snapshot,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        match meta.found {
            Found::OtherIp => {
                let (src, dst) = (meta.src(), meta.dst());
                let ours = self.fwd.config().is_ours(dst, &snap.addresses);
                if !ours && !snap.policy.verdict(src, dst, meta.proto, 0).is_allow() {
                    return Verdict::Drop(DropReason::PolicyDenied);
                }
                self.fwd.process_parsed(in_port, pkt, meta, ctx)
            }
            Found::Fragment => Verdict::Drop(DropReason::Fragment),
            // (TCP/UDP takes the flow path; the forwarder would decide it all the same.)
            Found::Other | Found::Transport => self.fwd.process_parsed(in_port, pkt, meta, ctx),
        }
    }

    /// A packet of a tracked flow: lazy policy re-check after a swap, state and expiry,
    /// rewrite, route.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(super) fn hit(
        &mut self,
        in_port: usize,
        pkt: &mut Pkt,
        meta: &mut Meta,
        (id, dir): (FlowId, Dir),
        snap: &Snapshot,
        generation: u32,
        now_s: u32,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        let f = self.flows.entry(id);
        if f.splice.phase == Splice::TERMINATED {
            let idx = f.splice.value;
            return self
                .terminator()
                .packet(pkt, meta, (id, dir), idx, snap, generation, ctx);
        }
        if dir == Dir::Orig
            && matches!(f.state, TcpState::TimeWait | TcpState::Close)
            && meta.tcp_flags().is_some_and(TcpFlags::is_syn_only)
        {
            // A new connection reusing a closed one's 5-tuple (as Linux conntrack does on
            // a SYN in TIME_WAIT or CLOSE): forget the old flow, so the new connection
            // gets the current tables' backend and policy (a drained backend stays
            // drained). Its SNAT tuple rests.
            forget(&mut self.flows, &mut self.snat, id, now_s);
            return self.transport(in_port, pkt, meta, snap, generation, now_s, ctx);
        }
        let mut sp = f.splice;
        if sp.phase == Splice::EMBRYO {
            return self.engine().embryo_packet(
                in_port,
                pkt,
                meta,
                (id, dir),
                sp.value,
                snap,
                generation,
                ctx,
            );
        }
        if sp.phase == Splice::REPLAYING {
            match self
                .engine()
                .replaying(in_port, pkt, meta, (id, dir), sp.value, ctx)
            {
                Ok(s) => sp = s,
                Err(v) => return v,
            }
        }
        if self.flows.entry(id).generation != generation {
            // A newer snapshot: the verdict source -> what the flow really reaches.
            ctx.counters.event(Event::PolicyRechecked);
            let f = self.flows.get(id);
            let (orig, to) = (f.orig(), f.reply().source());
            if !snap
                .policy
                .verdict(orig.source().ip(), to.ip(), orig.proto, to.port())
                .is_allow()
            {
                return self.revoke(in_port, pkt, meta, (id, dir, now_s), sp, ctx);
            }
            self.flows.get_mut(id).generation = generation;
        }
        if sp.phase & 0x0f == Splice::SPLICED {
            if dir == Dir::Reply && meta.flags & TcpFlags::SYN != 0 {
                return self.engine().splice_reack(in_port, pkt, meta, id, ctx);
            }
            splice_rewrite(pkt, meta, dir, sp);
        }
        // The packet leaves as the other direction's tuple, reversed.
        let other_dir = match dir {
            Dir::Orig => Dir::Reply,
            Dir::Reply => Dir::Orig,
        };
        match (self.flows.entry(id).tuple4(other_dir), meta.tuple4()) {
            (Some(o), Some(k)) => {
                self.flows.on_packet(id, dir, meta.tcp_flags(), now_s);
                if o.dst != k.src || o.src != k.dst || o.dport != k.sport || o.sport != k.dport {
                    rewrite_v4(pkt, meta, o.dst, o.dport, o.src, o.sport);
                }
            }
            _ => {
                let other = self.flows.get(id).tuple(other_dir);
                self.flows.on_packet(id, dir, meta.tcp_flags(), now_s);
                if other != meta.tuple().reversed() {
                    rewrite_raw(pkt, meta, &other.dst, other.dport, &other.src, other.sport);
                }
            }
        }
        // Validated by the parse, rewritten with checksums and `meta` kept in step.
        self.fwd.forward_parsed(in_port, pkt, meta, ctx)
    }

    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn transport(
        &mut self,
        in_port: usize,
        pkt: &mut Pkt,
        meta: &mut Meta,
        snap: &Snapshot,
        generation: u32,
        now_s: u32,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        let t = meta.tuple();
        if let Some((id, dir)) = self.flows.lookup(&t, now_s) {
            return self.hit(in_port, pkt, meta, (id, dir), snap, generation, now_s, ctx);
        }
        self.miss(in_port, pkt, meta, t, snap, generation, now_s, ctx, None)
    }

    /// Where a TCP/UDP packet without a flow goes ([`State::miss`] acts on it). Reads
    /// only, so a burst can also ask it ahead ([`State::new_conn_check`]).
    #[inline]
    pub(super) fn target(&self, meta: &Meta, snap: &Snapshot) -> Target {
        if meta.tcp_flags().is_some_and(TcpFlags::is_bad_syn) {
            return Target::Drop(DropReason::TcpBadFlags);
        }
        let ours = self.fwd.config().is_ours(meta.dst(), &snap.addresses);
        let listener = if ours {
            snap.listeners.lookup(meta.dst(), meta.dport(), meta.proto)
        } else {
            snap.listeners
                .lookup_bound(meta.dst(), meta.dport(), meta.proto)
        };
        let Some(listener) = listener else {
            return if ours {
                Target::SnatReply
            } else {
                Target::Routed
            };
        };
        if crate::terminate::terminates(listener) {
            return Target::Terminate;
        }
        if listener.kind.routes_by_name() {
            return Target::ByName;
        }
        if meta.tcp_flags().is_some_and(|f| !f.is_syn_only()) {
            return Target::Drop(DropReason::NoFlow);
        }
        let Some(route) = listener.route(b"").and_then(|i| snap.listeners.route(i)) else {
            return Target::Drop(DropReason::NoRouteMatch);
        };
        if !route.applies_to(meta.dst()) {
            return Target::Drop(DropReason::NoRouteMatch);
        }
        let client = SocketAddr::new(meta.src(), meta.sport());
        let vip = SocketAddr::new(meta.dst(), meta.dport());
        match route.pick(client, vip, meta.proto) {
            // Full NAT keeps the family (NAT64 would need header translation): a backend
            // of the other family is as unreachable as an invalid one.
            Pick::Backend(backend) if backend.is_ipv4() == meta.src().is_ipv4() => {
                Target::Backend {
                    backend,
                    transparent: listener.transparent,
                }
            }
            Pick::Backend(_) | Pick::Reject => Target::Reject,
        }
    }

    /// The connection whose policy [`State::miss`] checks for a packet without a flow
    /// that goes to `target`, if it checks one: routed traffic as addressed, a new flow
    /// to its backend.
    #[inline]
    pub(super) fn checks(meta: &Meta, target: Target) -> Option<Conn> {
        let (dst, dst_port) = match target {
            Target::Routed => (meta.dst(), meta.dport()),
            Target::Backend { backend, .. } => (backend.ip(), backend.port()),
            _ => return None,
        };
        Some(Conn {
            src: meta.src(),
            dst,
            proto: meta.proto,
            dst_port,
        })
    }

    /// A TCP/UDP packet that matches no flow: a listener's new flow, a reply for another
    /// worker, or routed traffic. `ahead`: what the burst's pass ahead found for the
    /// packet, if it checked it ([`PolicyAhead`]).
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    pub(super) fn miss(
        &mut self,
        in_port: usize,
        pkt: &mut Pkt,
        meta: &mut Meta,
        t: Tuple,
        snap: &Snapshot,
        generation: u32,
        now_s: u32,
        ctx: &mut Ctx<'_>,
        ahead: Option<Prechecked>,
    ) -> Verdict {
        let target = match ahead {
            Some(p) => p.target,
            None => self.target(meta, snap),
        };
        let (backend, transparent) = match target {
            Target::Backend {
                backend,
                transparent,
            } => (backend, transparent),
            Target::Routed => {
                return self.routed(in_port, pkt, meta, t, snap, generation, now_s, ctx, ahead)
            }
            // A reply to a SNAT port without a flow here: its owner may be another
            // worker (its port range says which).
            Target::SnatReply => {
                return match self.snat.owner(meta.dport()) {
                    Some(w) if w != self.worker => Verdict::Redirect(w),
                    Some(_) => Verdict::Drop(DropReason::NoFlow),
                    None => self.fwd.process_parsed(in_port, pkt, meta, ctx),
                };
            }
            Target::Terminate => {
                if meta.proto != ip_proto::TCP {
                    return Verdict::Drop(DropReason::NoRouteMatch);
                }
                if !meta.tcp_flags().is_some_and(TcpFlags::is_syn_only) {
                    return Verdict::Drop(DropReason::NoFlow);
                }
                if !self.sources.admit(meta.src(), now_s) {
                    return Verdict::Drop(DropReason::SourceRateLimited);
                }
                let ours = self.fwd.config().is_ours(meta.dst(), &snap.addresses);
                return self
                    .terminator()
                    .syn(in_port, pkt, meta, snap, ours, generation, ctx);
            }
            Target::ByName => {
                if meta.proto != ip_proto::TCP {
                    return Verdict::Drop(DropReason::NoRouteMatch);
                }
                return if meta.tcp_flags().is_some_and(TcpFlags::is_syn_only) {
                    self.engine().splice_syn(in_port, pkt, meta, ctx)
                } else {
                    self.engine()
                        .splice_open(in_port, pkt, meta, snap, generation, now_s, ctx)
                };
            }
            Target::Drop(reason) => return Verdict::Drop(reason),
            Target::Reject => {
                ctx.counters.drop(DropReason::BackendRejected);
                let v = self.reject(in_port, pkt, meta);
                if matches!(v, Verdict::Tx(_)) {
                    ctx.counters.event(Event::RejectSent);
                }
                return v;
            }
        };
        let flags = meta.tcp_flags();
        let client = SocketAddr::new(meta.src(), meta.sport());
        let conn = Conn {
            src: meta.src(),
            dst: backend.ip(),
            proto: meta.proto,
            dst_port: backend.port(),
        };
        if !policy_allows(snap, ahead.as_ref(), conn, ctx) {
            return Verdict::Drop(DropReason::PolicyDenied);
        }
        // One source may not take the flow table and the SNAT ports from the others.
        if !self.sources.admit(meta.src(), now_s) {
            return Verdict::Drop(DropReason::SourceRateLimited);
        }
        let Some(nh) = self.fwd.config().fib.lookup(backend.ip()) else {
            return Verdict::Drop(DropReason::NoRoute);
        };
        let state = if flags.is_some() {
            TcpState::SynSent
        } else {
            TcpState::UdpUnreplied
        };
        let created = if transparent {
            let reply = Tuple::new(backend, client, meta.proto);
            let (flows, snat) = (&mut self.flows, &mut self.snat);
            admit(flows, snat, t, reply, state, generation, now_s).map_err(|e| match e {
                crate::flow::InsertError::Full => DropReason::FlowTableFull,
                crate::flow::InsertError::Exists => DropReason::NoFlow,
            })
        } else {
            let Some(snat_ip) = self.fwd.config().addr_on(nh.port, backend.ip()) else {
                return Verdict::Drop(DropReason::NoSnatAddress);
            };
            let (flows, snat) = (&mut self.flows, &mut self.snat);
            insert_snat(flows, snat, t, backend, snat_ip, state, generation, now_s)
        };
        match created {
            Ok(id) => {
                ctx.counters.event(Event::FlowCreated);
                let (src, dst) = self.flows.get(id).rewrite(Dir::Orig);
                rewrite(pkt, meta, src, dst);
                self.fwd.process_parsed(in_port, pkt, meta, ctx)
            }
            Err(DropReason::SnatPortsExhausted) => {
                // Refused at once (RST / ICMP unreachable), not left to retransmit into a
                // tuple the backend may still hold.
                let v = self.reject(in_port, pkt, meta);
                if matches!(v, Verdict::Tx(_)) {
                    ctx.counters.drop(DropReason::SnatPortsExhausted);
                    ctx.counters.event(Event::RejectSent);
                    return v;
                }
                Verdict::Drop(DropReason::SnatPortsExhausted)
            }
            Err(reason) => Verdict::Drop(reason),
        }
    }

    /// Traffic through sluice that matches no listener: policy, then a flow without
    /// rewrite so replies pass.
    #[allow(clippy::too_many_arguments)]
    fn routed(
        &mut self,
        in_port: usize,
        pkt: &mut Pkt,
        meta: &Meta,
        t: Tuple,
        snap: &Snapshot,
        generation: u32,
        now_s: u32,
        ctx: &mut Ctx<'_>,
        ahead: Option<Prechecked>,
    ) -> Verdict {
        let conn = Conn {
            src: meta.src(),
            dst: meta.dst(),
            proto: meta.proto,
            dst_port: meta.dport(),
        };
        if !policy_allows(snap, ahead.as_ref(), conn, ctx) {
            return Verdict::Drop(DropReason::PolicyDenied);
        }
        let state = match meta.tcp_flags() {
            Some(f) if f.is_syn_only() => TcpState::SynSent,
            // Picked up mid-stream (sluice restarted, or the flow expired): conntrack's
            // loose mode.
            Some(_) => TcpState::Established,
            None => TcpState::UdpUnreplied,
        };
        let (flows, snat) = (&mut self.flows, &mut self.snat);
        match admit(flows, snat, t, t.reversed(), state, generation, now_s) {
            Ok(_) => ctx.counters.event(Event::FlowCreated),
            Err(crate::flow::InsertError::Full) => return Verdict::Drop(DropReason::FlowTableFull),
            Err(crate::flow::InsertError::Exists) => {}
        }
        self.fwd.process_parsed(in_port, pkt, meta, ctx)
    }

    /// A flow that a newer policy denies, met by one of its packets: the flow is removed
    /// and both peers are told, so that neither hangs. TCP: the packet becomes a RST back
    /// to its sender (at the sequence number the sender acknowledged, as for any refused
    /// segment), and a second RST, through the flow's NAT (and splice offset), goes on to
    /// the other peer at the packet's own sequence number, which that peer expects next
    /// (the flow keeps no sequence numbers of its own; a RST is never answered, so one
    /// arriving is only dropped). UDP: an ICMP administratively prohibited back to the
    /// sender. Counted as `policy_revoked` (the packet) and `flow_revoked` (the peers
    /// told); without a buffer for the second RST only the sender is told.
    #[cold]
    #[inline(never)]
    fn revoke(
        &mut self,
        in_port: usize,
        pkt: &mut Pkt,
        meta: &Meta,
        (id, dir, now_s): (FlowId, Dir, u32),
        sp: Splice,
        ctx: &mut Ctx<'_>,
    ) -> Verdict {
        // The onward segment, as the flow would have rewritten the packet.
        let other_dir = match dir {
            Dir::Orig => Dir::Reply,
            Dir::Reply => Dir::Orig,
        };
        let other = self.flows.get(id).tuple(other_dir);
        // Through the SNAT allocator, so the tuple rests like every other departure.
        forget(&mut self.flows, &mut self.snat, id, now_s);
        let Some(&port_mac) = self.macs.get(in_port) else {
            return Verdict::Drop(DropReason::PolicyRevoked);
        };
        let src_mac = ethernet::Frame::new_unchecked(pkt.data()).src_addr();
        let unicast = src_mac.is_unicast() && !meta.src().is_multicast();
        if meta.proto != ip_proto::TCP {
            if !unicast {
                return Verdict::Drop(DropReason::PolicyRevoked);
            }
            ctx.counters.drop(DropReason::PolicyRevoked);
            ctx.counters.event(Event::FlowRevoked);
            return admin_prohibited(pkt, meta, src_mac.0, port_mac, in_port);
        }
        if meta.flags & TcpFlags::RST != 0 || !unicast {
            return Verdict::Drop(DropReason::PolicyRevoked);
        }
        let spliced = sp.phase & 0x0f == Splice::SPLICED || sp.phase == Splice::REPLAYING;
        let seq = match dir {
            Dir::Reply if spliced => meta.seq().wrapping_add(sp.value),
            _ => meta.seq(),
        };
        let onward = Seg {
            src: other.destination(),
            dst: other.source(),
            seq,
            ack: 0,
            flags: crate::wire::tcp::flags::RST,
            window: 0,
            options: &[],
            payload: &[],
        };
        if let Some(mut rst) = ctx.io.as_deref().and_then(|io| io.alloc()) {
            // Written as if it had arrived on `in_port` (to its MAC), then routed like
            // any packet of the flow.
            let mut m = Meta::EMPTY;
            if write_seg(&mut rst, port_mac, src_mac.0, &onward)
                && parse(rst.data(), mac_word(&port_mac), &mut m) == Found::Transport
            {
                match self.fwd.forward_parsed(in_port, &mut rst, &m, ctx) {
                    Verdict::Tx(port) => {
                        match ctx.io.as_deref_mut().map(|io| io.send(port as usize, rst)) {
                            Some(Ok(())) => {}
                            _ => ctx.counters.drop(DropReason::TxFull),
                        }
                    }
                    Verdict::Drop(r) => ctx.counters.drop(r),
                    Verdict::Redirect(_) | Verdict::Kept => {}
                }
            }
        }
        ctx.counters.drop(DropReason::PolicyRevoked);
        ctx.counters.event(Event::FlowRevoked);
        tcp_reset(pkt, meta, src_mac.0, port_mac, in_port)
    }

    /// Answers a connection that fell in a reject slot: TCP RST, or ICMP port
    /// unreachable (UDP), back out of `in_port`.
    fn reject(&self, in_port: usize, pkt: &mut Pkt, meta: &Meta) -> Verdict {
        let Some(&port_mac) = self.macs.get(in_port) else {
            return Verdict::Drop(DropReason::BadPort);
        };
        let src_mac = {
            let f = ethernet::Frame::new_unchecked(pkt.data());
            f.src_addr()
        };
        if !src_mac.is_unicast() || meta.src().is_multicast() || meta.src().is_unspecified() {
            return Verdict::Drop(DropReason::BackendRejected);
        }
        if meta.proto == ip_proto::TCP {
            if meta.flags & TcpFlags::RST != 0 {
                return Verdict::Drop(DropReason::BackendRejected);
            }
            tcp_reset(pkt, meta, src_mac.0, port_mac, in_port)
        } else {
            port_unreachable(pkt, meta, src_mac.0, port_mac, in_port)
        }
    }
}
