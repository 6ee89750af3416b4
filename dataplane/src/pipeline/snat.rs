//! A worker's source NAT ports: the tuples it hands to new connections, and the rest a
//! closed connection's tuple takes before it is handed out again.
//!
//! **Why the rest.** The backend keeps a connection that it closed first in TIME_WAIT for
//! 2×MSL (60 s on Linux) and ignores, or answers with a bare ACK, a new SYN on the same
//! four-tuple meanwhile: a tuple handed out again too soon stalls the client on SYN
//! retransmissions and then fails it. So a TCP connection's SNAT tuple (backend address
//! and port, sluice's address, port) rests for [`SnatPorts::rest_s`] seconds (Linux's 60
//! by default, `conntrack.snatRestSeconds`) from its connection's last packet (UDP, and a
//! SYN the backend never answered, leave nothing at the backend: their tuples do not
//! rest), on every path that
//! source-NATs (L4 full NAT, delayed binding; TLS termination to come): a flow that
//! leaves the table by expiry rests from its last packet ([`SnatPorts::rest_expired`]:
//! an L4 flow that lingered in TIME_WAIT has rested already), whether the wheel expires
//! it or a new flow finds it expired first and reaps it (the wheel files flows up to a
//! minute ahead: [`admit`]; then a SNAT tuple is not handed out before its rest is
//! over), one removed early (closed by
//! the splice engine, revoked, replaced by a new SYN, rebound to another backend on
//! failover) from now ([`forget`], [`rekey_snat`]). While a tuple is live the flow table
//! itself keeps it unique.
//!
//! **The structure.** One 8-byte record per port of the worker's slice, allocated at
//! start (at most 512 KiB for the whole 64k range): until when the port rests, and for
//! which peer (a 32-bit tag of backend address, backend port, sluice's address and the
//! protocol: [`peer_tag`]). A port resting for one peer can still serve another peer (its
//! tuple differs), as Linux's NAT does; a port that comes to rest for a second peer while
//! resting for a first rests for every peer until the later end (one record, never
//! wider: a tag that collides only rests a port longer). The cursor walks the slice round
//! robin, so the next port is the one handed out longest ago, and checks at most
//! [`SNAT_SCAN`] records for one connection; a new connection that finds none free is
//! refused at once (`snat_ports_exhausted`; the caller resets the client) rather than
//! given a tuple the backend may still hold. No allocation after [`SnatPorts::new`].

use crate::flow::{FlowId, FlowRef, FlowTable, InsertError, TcpState, Timeouts, Tuple};
use crate::stats::DropReason;
use crate::wire::ip_proto;
use std::net::{IpAddr, SocketAddr};

/// Flow-table inserts tried for one new flow (ports whose tuple a live flow holds are
/// skipped) before giving up.
pub const SNAT_ATTEMPTS: u32 = 256;
/// Port records checked for one new flow before it is refused: bounds the work a
/// connection costs when the range is resting (8 KiB of records, read in order).
pub const SNAT_SCAN: u32 = 1024;
/// The rest of a closed connection's tuple by default: Linux's TIME_WAIT (2×MSL).
pub const SNAT_REST_S: u32 = 60;
/// The tag of a port resting for every peer.
const ANY_PEER: u32 = 0;

/// One port's rest: until when (table seconds), and for which peer ([`peer_tag`]).
#[derive(Debug, Clone, Copy, Default)]
struct Rest {
    until: u32,
    peer: u32,
}

/// This worker's slice of the SNAT port range and its ports' rests (see the
/// [module docs](self)).
#[derive(Debug, Clone)]
pub struct SnatPorts {
    /// First port of the whole range.
    base: u16,
    /// Ports per worker.
    per_worker: u32,
    workers: u32,
    /// This worker's first and last port.
    lo: u16,
    hi: u16,
    next: u16,
    /// Seconds a closed connection's tuple rests.
    rest_s: u32,
    /// Per port of `lo..=hi`.
    rests: Box<[Rest]>,
    /// Half-open flows dropped early for new connections, not yet reported.
    evicted: u64,
}

/// The peer of a SNAT tuple, as a nonzero tag: a hash of the backend's address and port,
/// sluice's address and the protocol (everything of the reply tuple but sluice's port).
pub fn peer_tag(backend: SocketAddr, snat_ip: IpAddr, proto: u8) -> u32 {
    let t = Tuple::new(backend, SocketAddr::new(snat_ip, 0), proto);
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
    let mut h = u64::from(t.sport) << 8 | u64::from(proto);
    for w in [&t.src[..8], &t.src[8..], &t.dst[..8], &t.dst[8..]] {
        h = (h ^ word(w))
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29);
    }
    ((h >> 32) as u32 ^ h as u32) | 1
}

impl SnatPorts {
    /// Worker `worker`'s slice of the inclusive range `ports`, split evenly among
    /// `workers`, its cursor starting at a place `seed` picks; a closed connection's
    /// tuple rests `rest_s` seconds.
    pub fn new(
        ports: (u16, u16),
        worker: usize,
        workers: usize,
        seed: u64,
        rest_s: u32,
    ) -> SnatPorts {
        let (a, b) = (ports.0.min(ports.1), ports.0.max(ports.1));
        let workers = workers.max(1) as u32;
        let per_worker = ((u32::from(b) - u32::from(a) + 1) / workers).max(1);
        let w = (worker as u32).min(workers - 1);
        let lo = (u32::from(a) + w * per_worker).min(65535) as u16;
        let hi = (u32::from(lo) + per_worker - 1).min(65535) as u16;
        let span = usize::from(hi - lo) + 1;
        SnatPorts {
            base: a,
            per_worker,
            workers,
            lo,
            hi,
            next: lo + (seed % span as u64) as u16,
            rest_s,
            rests: vec![Rest::default(); span].into_boxed_slice(),
            evicted: 0,
        }
    }

    /// The worker whose range holds `port`, if any.
    pub fn owner(&self, port: u16) -> Option<u32> {
        let off = u32::from(port.checked_sub(self.base)?);
        let w = off / self.per_worker;
        (w < self.workers).then_some(w)
    }

    /// This worker's first and last port.
    pub fn range(&self) -> (u16, u16) {
        (self.lo, self.hi)
    }

    /// Seconds a closed connection's tuple rests.
    pub fn rest_s(&self) -> u32 {
        self.rest_s
    }

    /// The next port of the range (round robin) that does not rest for `peer` at `now`,
    /// checking at most [`SNAT_SCAN`] ports; `None`: every port checked rests.
    pub fn take(&mut self, peer: u32, now: u32) -> Option<u16> {
        let span = u32::from(self.hi - self.lo) + 1;
        for _ in 0..span.min(SNAT_SCAN) {
            let p = self.next;
            self.next = if p >= self.hi { self.lo } else { p + 1 };
            let r = self.rests.get(usize::from(p - self.lo))?;
            if r.until <= now || (r.peer != ANY_PEER && r.peer != peer) {
                return Some(p);
            }
        }
        None
    }

    /// Rests `port`'s tuple with `peer` until `until` (seconds; nothing if that is not
    /// after `now`, or the port is not this worker's).
    pub fn rest(&mut self, port: u16, peer: u32, until: u32, now: u32) {
        if until <= now || port < self.lo || port > self.hi {
            return;
        }
        let Some(r) = self.rests.get_mut(usize::from(port - self.lo)) else {
            return;
        };
        if r.until > now && r.peer != peer {
            // Resting for another peer already: one record holds one peer, so the port
            // now rests for all until the later end.
            r.peer = ANY_PEER;
        } else {
            r.peer = peer;
        }
        r.until = r.until.max(until);
    }

    /// Half-open flows dropped early since the last call (for the worker's counters).
    pub fn take_evicted(&mut self) -> u64 {
        std::mem::take(&mut self.evicted)
    }

    /// Whether `port` may be handed out to `peer` at `now` (for tests and `ctl`).
    pub fn is_free(&self, port: u16, peer: u32, now: u32) -> bool {
        port >= self.lo
            && port <= self.hi
            && self
                .rests
                .get(usize::from(port - self.lo))
                .is_some_and(|r| r.until <= now || (r.peer != ANY_PEER && r.peer != peer))
    }

    /// Rests flow `f`'s SNAT tuple, if it has one, for [`SnatPorts::rest_s`] from
    /// `since` (its connection's last packet, or now).
    fn rest_flow(&mut self, f: FlowRef<'_>, since: u32, now: u32) {
        // A SYN the backend never answered (SYN_SENT) left nothing there (checked first,
        // before the flow's tuples are built).
        if f.state == TcpState::SynSent {
            return;
        }
        let (orig, reply) = (f.orig(), f.reply());
        // Routed, transparent and embryonic flows answer the client itself: no SNAT. Only
        // TCP leaves a TIME_WAIT behind: a UDP tuple is free when its flow is gone.
        if reply.destination() == orig.source() || reply.proto != ip_proto::TCP {
            return;
        }
        let peer = peer_tag(reply.source(), reply.destination().ip(), reply.proto);
        self.rest(reply.dport, peer, since.saturating_add(self.rest_s), now);
    }

    /// Rests the SNAT tuple of `f`, a flow the table's wheel is expiring at `now`, from
    /// its last packet (which its expiry and `timeouts` tell; under pressure a half-open
    /// flow goes before its expiry, its last packet is the same).
    pub fn rest_expired(&mut self, f: FlowRef<'_>, timeouts: &Timeouts, now: u32) {
        let last = f.expires().saturating_sub(timeouts.for_state(f.state));
        self.rest_flow(f, last, now);
    }

    /// Rests the SNAT tuple of `f`, a flow the table drops early at `now` for a new one
    /// ([`admit`]): from its last packet if it had expired, else from now.
    pub fn rest_dropped(&mut self, f: FlowRef<'_>, timeouts: &Timeouts, now: u32) {
        if f.expires() <= now {
            self.rest_expired(f, timeouts, now);
        } else {
            self.rest_flow(f, now, now);
        }
    }
}

/// Removes flow `id` now and rests its SNAT tuple (if it has one): from its last packet
/// if the connection had closed (TIME_WAIT, or reset), else from now. Every path that
/// ends a flow before its timer does goes through here.
pub fn forget(flows: &mut FlowTable, snat: &mut SnatPorts, id: FlowId, now: u32) {
    let f = flows.get(id);
    let since = if matches!(f.state, TcpState::TimeWait | TcpState::Close) {
        f.expires()
            .saturating_sub(flows.timeouts().for_state(f.state))
    } else {
        now
    };
    snat.rest_flow(f, since, now);
    flows.remove(id);
}

/// Admits flow `orig` <-> `reply` ([`FlowTable::insert_evicting`]): when the table is
/// full, a flow that never became a connection gives way (early drop); that one, and an
/// expired flow that the wheel has not reached yet still holding one of the tuples, rest
/// their SNAT tuples ([`SnatPorts::rest_dropped`]) as if the wheel had expired them.
/// Every new flow of the pipeline comes in here (with a SNAT tuple through
/// [`insert_snat`]).
pub fn admit(
    flows: &mut FlowTable,
    snat: &mut SnatPorts,
    orig: Tuple,
    reply: Tuple,
    state: TcpState,
    generation: u32,
    now: u32,
) -> Result<FlowId, InsertError> {
    let timeouts = *flows.timeouts();
    flows.insert_evicting(orig, reply, state, generation, now, |f| {
        snat.rest_dropped(f, &timeouts, now);
        true
    })
}

/// [`admit`] of a flow whose `reply` is a SNAT tuple of `peer`: an expired flow found
/// holding it rests it first, and the insert then fails ([`InsertError::Exists`]) unless
/// that rest is over. (Without this, a connection whose flow outlived its timeout by less
/// than the wheel's lag would hand its tuple out again unrested.)
#[allow(clippy::too_many_arguments)]
fn admit_snat(
    flows: &mut FlowTable,
    snat: &mut SnatPorts,
    orig: Tuple,
    reply: Tuple,
    peer: u32,
    state: TcpState,
    generation: u32,
    now: u32,
) -> Result<FlowId, InsertError> {
    let timeouts = *flows.timeouts();
    flows.insert_evicting(orig, reply, state, generation, now, |f| {
        snat.rest_dropped(f, &timeouts, now);
        snat.is_free(reply.dport, peer, now)
    })
}

/// A half-open flow this old (seconds since its last packet) may be dropped early.
pub const HALF_OPEN_EVICT_AGE_S: u32 = 3;

/// Early drop (as Linux conntrack's `early_drop`): the port the cursor offers is held by
/// a live flow with the same tuple `reply`; if that flow never completed its handshake
/// and has been silent [`HALF_OPEN_EVICT_AGE_S`] seconds, it is dropped. One the backend
/// never answered (SYN_SENT) leaves nothing behind at the backend: its tuple is free at
/// once and `true` is returned; one the backend answered (SYN_RECV) may still have a
/// half-open connection there, so its tuple rests like any other. Only reached when the
/// cursor has come round to a port still in use, that is when the range is short: SYNs
/// that never complete cannot hold the ports for the half-open lifetime (120 s).
fn early_drop(flows: &mut FlowTable, snat: &mut SnatPorts, reply: &Tuple, now: u32) -> bool {
    let Some((id, _)) = flows.lookup(reply, now) else {
        return false;
    };
    let f = flows.get(id);
    if !matches!(f.state, TcpState::SynSent | TcpState::SynRecv) {
        return false;
    }
    let last = f
        .expires()
        .saturating_sub(flows.timeouts().for_state(f.state));
    if now.saturating_sub(last) < HALF_OPEN_EVICT_AGE_S {
        return false;
    }
    snat.evicted += 1;
    if f.state == TcpState::SynSent {
        flows.remove(id);
        return true;
    }
    forget(flows, snat, id, now);
    false
}

/// Creates a NAT flow `orig` <-> `backend` -> (`snat_ip`, a port of this worker's range
/// that neither rests for this peer nor is held by a live flow).
#[allow(clippy::too_many_arguments)]
pub fn insert_snat(
    flows: &mut FlowTable,
    snat: &mut SnatPorts,
    orig: Tuple,
    backend: SocketAddr,
    snat_ip: IpAddr,
    state: TcpState,
    generation: u32,
    now_s: u32,
) -> Result<FlowId, DropReason> {
    let to = (backend, snat_ip, orig.proto);
    insert_snat_with(flows, snat, |_| orig, to, state, generation, now_s)
}

/// Creates the flow of a connection sluice opens itself to `backend` (no client
/// connection behind it): the backend side `backend` -> (`snat_ip`, a free port of this
/// worker's range), the other side keyed `(self_ip, that port) -> backend` — a tuple no
/// peer sends from (`self_ip` is one of sluice's own link-local addresses), unique with
/// the port.
pub fn insert_own(
    flows: &mut FlowTable,
    snat: &mut SnatPorts,
    backend: SocketAddr,
    snat_ip: IpAddr,
    self_ip: IpAddr,
    generation: u32,
    now_s: u32,
) -> Result<FlowId, DropReason> {
    let orig = |port| Tuple::new(SocketAddr::new(self_ip, port), backend, ip_proto::TCP);
    let to = (backend, snat_ip, ip_proto::TCP);
    insert_snat_with(flows, snat, orig, to, TcpState::SynSent, generation, now_s)
}

/// Rests tuple `reply` (a backend -> a SNAT address and port of this worker) from now,
/// for a flow that ends without [`forget`].
pub fn rest_tuple(snat: &mut SnatPorts, reply: &Tuple, now: u32) {
    let peer = peer_tag(reply.source(), reply.destination().ip(), reply.proto);
    snat.rest(reply.dport, peer, now.saturating_add(snat.rest_s), now);
}

/// [`insert_snat`] with the client side made from the port taken (`orig_of`).
fn insert_snat_with(
    flows: &mut FlowTable,
    snat: &mut SnatPorts,
    orig_of: impl Fn(u16) -> Tuple,
    (backend, snat_ip, proto): (SocketAddr, IpAddr, u8),
    state: TcpState,
    generation: u32,
    now_s: u32,
) -> Result<FlowId, DropReason> {
    let peer = peer_tag(backend, snat_ip, proto);
    for _ in 0..SNAT_ATTEMPTS {
        let port = snat
            .take(peer, now_s)
            .ok_or(DropReason::SnatPortsExhausted)?;
        let orig = orig_of(port);
        let reply = Tuple::new(backend, SocketAddr::new(snat_ip, port), proto);
        match admit_snat(flows, snat, orig, reply, peer, state, generation, now_s) {
            Ok(id) => return Ok(id),
            Err(InsertError::Full) => return Err(DropReason::FlowTableFull),
            Err(InsertError::Exists) => {
                if flows.lookup(&orig, now_s).is_some() {
                    // The client tuple itself is tracked (cannot happen after a
                    // missed lookup, but never loop on it).
                    return Err(DropReason::NoFlow);
                }
                // The port's tuple is held: by a dead handshake, it is dropped.
                if early_drop(flows, snat, &reply, now_s) {
                    return match admit_snat(
                        flows, snat, orig, reply, peer, state, generation, now_s,
                    ) {
                        Ok(id) => Ok(id),
                        Err(InsertError::Full) => Err(DropReason::FlowTableFull),
                        Err(InsertError::Exists) => Err(DropReason::NoFlow),
                    };
                }
            }
        }
    }
    Err(DropReason::SnatPortsExhausted)
}

/// Gives flow `id` the backend side `backend` -> (`snat_ip`, a free port of this
/// worker's range), in SYN_SENT. A backend side it had (failover to the next backend)
/// rests from now.
pub fn rekey_snat(
    flows: &mut FlowTable,
    snat: &mut SnatPorts,
    id: FlowId,
    backend: SocketAddr,
    snat_ip: IpAddr,
    now_s: u32,
) -> Result<(), DropReason> {
    let peer = peer_tag(backend, snat_ip, ip_proto::TCP);
    let before = flows.get(id).reply();
    // (A backend that never answered, the usual reason to move on, holds nothing.)
    let had_snat = before.destination() != flows.get(id).orig().source()
        && flows.get(id).state != TcpState::SynSent;
    for _ in 0..SNAT_ATTEMPTS {
        let port = snat
            .take(peer, now_s)
            .ok_or(DropReason::SnatPortsExhausted)?;
        let reply = Tuple::new(backend, SocketAddr::new(snat_ip, port), ip_proto::TCP);
        let timeouts = *flows.timeouts();
        let rekey = |flows: &mut FlowTable, snat: &mut SnatPorts| {
            flows
                .rekey_reply(id, reply, TcpState::SynSent, now_s, |f| {
                    // An expired flow still holding the tuple rests it first.
                    snat.rest_dropped(f, &timeouts, now_s);
                    snat.is_free(reply.dport, peer, now_s)
                })
                .is_ok()
        };
        let mut done = rekey(flows, snat);
        if !done && early_drop(flows, snat, &reply, now_s) {
            done = rekey(flows, snat);
        }
        if done {
            if had_snat && before != reply {
                let old = peer_tag(before.source(), before.destination().ip(), before.proto);
                snat.rest(before.dport, old, now_s.saturating_add(snat.rest_s), now_s);
            }
            return Ok(());
        }
    }
    Err(DropReason::SnatPortsExhausted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_port_rests_for_its_peer_and_serves_others() {
        let mut s = SnatPorts::new((100, 103), 0, 1, 0, 60);
        let a = peer_tag("10.0.0.1:80".parse().unwrap(), ip("10.1.0.1"), 6);
        let b = peer_tag("10.0.0.2:80".parse().unwrap(), ip("10.1.0.1"), 6);
        assert_ne!(a, b);
        s.rest(100, a, 70, 10);
        assert!(!s.is_free(100, a, 10));
        assert!(s.is_free(100, b, 10));
        assert!(s.is_free(100, a, 70));
        // A second peer while the first rests: the port rests for all, until the later end.
        s.rest(100, b, 80, 20);
        let c = peer_tag("10.0.0.3:80".parse().unwrap(), ip("10.1.0.1"), 6);
        for p in [a, b, c] {
            assert!(!s.is_free(100, p, 75));
            assert!(s.is_free(100, p, 80));
        }
        // Out of range and past ends change nothing.
        s.rest(99, a, 100, 10);
        s.rest(101, a, 10, 10);
        assert!(s.is_free(101, a, 10));
    }

    #[test]
    fn take_skips_resting_ports_and_refuses_when_all_rest() {
        let mut s = SnatPorts::new((100, 103), 0, 1, 0, 60);
        let a = peer_tag("10.0.0.1:80".parse().unwrap(), ip("10.1.0.1"), 6);
        for p in [100, 101, 103] {
            s.rest(p, a, 60, 0);
        }
        assert_eq!(s.take(a, 0), Some(102));
        assert_eq!(s.take(a, 0), Some(102));
        s.rest(102, a, 60, 0);
        assert_eq!(s.take(a, 0), None);
        assert_eq!(s.take(a, 60), Some(103));
    }
}
