//! One terminated connection's bytes and phases: ciphertext into rustls, the route once
//! the handshake (and, for HTTPS, the first request head) is done, the backend connected,
//! plaintext to it and its bytes back encrypted, closes and resets passed across.

use super::route::{self, Decision};
use super::{endpoint, Engine, Phase};
use crate::flow::TcpState;
use crate::pipeline::nat::rekey_snat;
use crate::pipeline::stage::Ctx;
use crate::stats::{DropReason, Event};
use crate::tables::snapshot::Snapshot;
use crate::wire::ip_proto;
use rustls::server::ServerConnection;
use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::socket::{tcp, AnySocket};
use smoltcp::time::Duration;
use std::io::{self, Read, Write};
use std::net::SocketAddr;

impl Engine<'_> {
    /// Moves connection `idx`'s bytes as far as its buffers allow and advances its
    /// phase.
    pub(super) fn pump(&mut self, idx: u32, snap: &Snapshot, ctx: &mut Ctx<'_>) {
        let Some((c, shard)) = self.t.conn_shard(idx) else {
            return;
        };
        // Ciphertext in, while rustls has room (no undelivered plaintext).
        let front = shard.sockets.get_mut::<tcp::Socket>(c.front);
        let mut tls_failed = None;
        if c.tls_failed {
            // rustls repeats its error on every later call: the failure was counted
            // once; the client's last bytes (and its FIN) are taken and dropped.
            while front.can_recv() {
                if front.recv(|b| (b.len(), b.len())).unwrap_or(0) == 0 {
                    break;
                }
            }
        } else if let Some(tls) = c.tls.as_mut() {
            while tls.wants_read() && front.can_recv() {
                let read = front.recv(|buf| match tls.read_tls(&mut &buf[..]) {
                    Ok(n) => (n, n),
                    Err(_) => (0, 0),
                });
                if !matches!(read, Ok(n) if n > 0) {
                    break;
                }
                match tls.process_new_packets() {
                    Ok(st) => {
                        if st.peer_has_closed() {
                            c.client_done = true;
                        }
                    }
                    Err(e) => {
                        tls_failed = Some(super::refusal::refusal(&e));
                        break;
                    }
                }
            }
            // Handshake messages (and alerts) out.
            flush_tls(tls, front);
        }
        // A FIN without close_notify also ends the client's side.
        if fin_received(front.state()) && !front.can_recv() {
            c.client_done = true;
        }
        let front_state = front.state();
        if let Some(reason) = tls_failed {
            c.tls_failed = true;
            ctx.counters.event(Event::TerminateTlsFailed);
            if let Some(r) = reason {
                ctx.counters.event(r);
            }
            // rustls queued the alert: send it, then FIN; the backend side goes.
            if let Some(tls) = c.tls.as_mut() {
                flush_tls(tls, front);
            }
            front.close();
            c.front_closed = true;
            c.phase = Phase::Closing;
            if let Some(b) = c.back {
                shard.sockets.get_mut::<tcp::Socket>(b).abort();
            }
            self.reap_if_done(idx, ctx);
            return;
        }
        if front_state == tcp::State::Closed && c.phase != Phase::Handshake {
            // Reset by the client (or gone): the backend is reset.
            if !c.front_closed {
                ctx.counters.event(Event::TerminateReset);
                if let Some(b) = c.back {
                    shard.sockets.get_mut::<tcp::Socket>(b).abort();
                }
                c.phase = Phase::Closing;
            }
        }
        let handshaken = match &c.tls {
            Some(tls) => !tls.is_handshaking(),
            None => matches!(front_state, tcp::State::Established | tcp::State::CloseWait),
        };
        if c.phase == Phase::Handshake && handshaken {
            if let Some(tls) = &c.tls {
                ctx.counters.event(Event::TerminateHandshake);
                if tls.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
                    ctx.counters.event(Event::TerminateResumed);
                }
            }
            c.phase = if c.http.is_some() {
                Phase::Http
            } else {
                Phase::Routing
            };
            // HTTPS: the verified client's identity, for `X-Forwarded-Client-Cert`.
            if let (Some(tls), Some(h)) = (&c.tls, c.http.as_deref_mut()) {
                let mut buf = [0u8; 8192];
                let value = super::identity::from_connection(tls, &mut buf)
                    .map(|n| std::str::from_utf8(&buf[..n]).map(Box::from));
                match value {
                    Ok(Ok(v)) => h.client_cert = Some(v),
                    Err(super::identity::XfccError::NoCertificate) => {}
                    Ok(Err(_)) | Err(_) => {
                        // Verified but not expressible (too long, unreadable): never
                        // forwarded without the identity its backend would be told.
                        ctx.counters.event(Event::TerminateTlsFailed);
                        return self.abort(idx, ctx);
                    }
                }
            }
        }
        if c.phase == Phase::Handshake && front_state == tcp::State::Closed {
            c.phase = Phase::Closing;
        }
        if c.http.is_some() {
            // HTTP and HTTPS: requests one by one (`proxy/`), never the byte stream.
            if c.phase == Phase::Http {
                self.http(idx, snap, ctx);
            }
            self.reap_if_done(idx, ctx);
            return;
        }
        if c.phase == Phase::Routing {
            self.route(idx, snap, ctx);
        }
        self.connecting(idx, snap, ctx);
        self.stream(idx, ctx);
        self.reap_if_done(idx, ctx);
    }

    /// Routing (TLS listeners whose stream is opaque TCP): the SNI picks a route and a
    /// backend; the backend socket connects. (HTTPS goes per request: `proxy/`.)
    pub(super) fn route(&mut self, idx: u32, snap: &Snapshot, ctx: &mut Ctx<'_>) {
        let Some(Some(c)) = self.t.conns.get(idx as usize) else {
            return;
        };
        let vip = c.client.destination();
        let ours = self.fwd.config().is_ours(vip.ip(), &snap.addresses);
        // The SNI, copied to the stack (no allocation per packet).
        let mut sni_buf = [0u8; 256];
        let sni_len = c.tls.as_ref().and_then(|t| t.server_name()).map(|n| {
            let b = n.as_bytes();
            let l = b.len().min(sni_buf.len());
            sni_buf[..l].copy_from_slice(&b[..l]);
            l
        });
        let sni = sni_len.and_then(|l| std::str::from_utf8(&sni_buf[..l]).ok());
        match route::decide(snap, c.client, ours, sni, c.tries, c.backend) {
            Decision::NoRoute => {
                ctx.counters.event(Event::TerminateNoRoute);
                self.abort(idx, ctx);
            }
            Decision::Connect(None) => {
                ctx.counters.event(Event::TerminateBackendFailed);
                ctx.counters.drop(DropReason::BackendRejected);
                self.abort(idx, ctx);
            }
            Decision::Connect(Some(b)) => self.connect(idx, b, snap, ctx),
        }
    }

    /// Opens the backend connection of `idx` to `backend`: policy, SNAT tuple, socket.
    pub(super) fn connect(
        &mut self,
        idx: u32,
        backend: SocketAddr,
        snap: &Snapshot,
        ctx: &mut Ctx<'_>,
    ) {
        let now_s = (ctx.now_ms / 1000) as u32;
        let Some(Some(c)) = self.t.conns.get(idx as usize) else {
            return;
        };
        let client = c.client.source();
        let flow = c.flow;
        if backend.is_ipv4() != client.is_ipv4() {
            ctx.counters.event(Event::TerminateBackendFailed);
            ctx.counters.drop(DropReason::BackendRejected);
            return self.abort(idx, ctx);
        }
        if !snap
            .policy
            .verdict(client.ip(), backend.ip(), ip_proto::TCP, backend.port())
            .is_allow()
        {
            ctx.counters.drop(DropReason::PolicyDenied);
            return self.abort(idx, ctx);
        }
        let Some(nh) = self.fwd.config().fib.lookup(backend.ip()) else {
            ctx.counters.drop(DropReason::NoRoute);
            return self.abort(idx, ctx);
        };
        let Some(snat_ip) = self.fwd.config().addr_on(nh.port, backend.ip()) else {
            ctx.counters.drop(DropReason::NoSnatAddress);
            return self.abort(idx, ctx);
        };
        if let Err(r) = rekey_snat(self.flows, self.snat, flow, backend, snat_ip, now_s) {
            ctx.counters.drop(r);
            return self.abort(idx, ctx);
        }
        // Tracked as established: the engine, not the flow's TCP state, ends it.
        self.flows.get_mut(flow).state = TcpState::Established;
        self.flows.touch(flow, now_s);
        let local = self.flows.get(flow).reply().destination();
        let (buf, ka, connect_ms) = (
            self.t.cfg.backend_buffer,
            self.t.cfg.keep_alive_ms,
            self.t.cfg.connect_ms,
        );
        let Some((c, shard)) = self.t.conn_shard(idx) else {
            return;
        };
        let mut s = new_socket(buf, ka);
        if s.connect(shard.iface.context(), endpoint(backend), endpoint(local))
            .is_err()
        {
            ctx.counters.drop(DropReason::NoFlow);
            return self.abort(idx, ctx);
        }
        if let Some(old) = c.back.take() {
            shard.sockets.remove(old);
        }
        c.back = Some(shard.sockets.add(s));
        c.backend = Some(backend);
        c.tries += 1;
        c.phase = Phase::Connecting;
        c.deadline_ms = ctx.now_ms + connect_ms;
    }

    /// Connecting: established -> open; reset or refused -> the next backend.
    fn connecting(&mut self, idx: u32, snap: &Snapshot, ctx: &mut Ctx<'_>) {
        let Some(s) = self.conn_socket(idx, |c| {
            (c.phase == Phase::Connecting).then_some(c.back).flatten()
        }) else {
            return;
        };
        match s.state() {
            tcp::State::Established | tcp::State::CloseWait => {
                ctx.counters.event(Event::TerminateBackendConnected);
                if let Some(Some(c)) = self.t.conns.get_mut(idx as usize) {
                    c.phase = Phase::Open;
                }
            }
            tcp::State::Closed => self.backend_failed(idx, snap, ctx),
            _ => {}
        }
    }

    /// The backend of `idx` refused or stayed silent: the next pick, or the client reset.
    pub(super) fn backend_failed(&mut self, idx: u32, snap: &Snapshot, ctx: &mut Ctx<'_>) {
        let tries = self.t.cfg.backend_tries;
        let Some(Some(c)) = self.t.conns.get_mut(idx as usize) else {
            return;
        };
        if c.tries >= tries {
            ctx.counters.event(Event::TerminateBackendFailed);
            return self.abort(idx, ctx);
        }
        ctx.counters.event(Event::BackendFailover);
        c.phase = Phase::Routing;
        self.route(idx, snap, ctx);
    }

    /// Open: plaintext to the backend, backend bytes encrypted to the client, closes
    /// passed on.
    fn stream(&mut self, idx: u32, ctx: &mut Ctx<'_>) {
        let Some((c, shard)) = self.t.conn_shard(idx) else {
            return;
        };
        if !matches!(c.phase, Phase::Open | Phase::Closing) {
            return;
        }
        let Some(bh) = c.back else {
            return;
        };
        let Some(tls) = c.tls.as_mut() else {
            return;
        };
        // Client -> backend: rustls's plaintext.
        {
            let back = shard.sockets.get_mut::<tcp::Socket>(bh);
            while back.can_send() {
                let r = back.send(|buf| match tls.reader().read(buf) {
                    Ok(n) => (n, Some(n)),
                    Err(_) => (0, None),
                });
                match r {
                    Ok(Some(n)) if n > 0 => {}
                    _ => break,
                }
            }
        }
        // Backend -> client: encrypt what the client's send buffer has room for.
        {
            let Some((front, back)) = two_sockets(&mut shard.sockets, c.front, bh) else {
                return;
            };
            flush_tls(tls, front);
            while back.can_recv() && !tls.wants_write() {
                let room = front.send_capacity().saturating_sub(front.send_queue());
                if room <= 64 {
                    break;
                }
                let took = back.recv(|buf| {
                    let n = buf.len().min(room - 64);
                    let w = tls.writer().write(&buf[..n]).unwrap_or(0);
                    (w, w)
                });
                flush_tls(tls, front);
                if !matches!(took, Ok(n) if n > 0) {
                    break;
                }
            }
            // The backend's FIN, once its bytes are all encrypted: close_notify and FIN.
            if fin_received(back.state()) && !back.can_recv() {
                c.backend_done = true;
            }
            let reset = back.state() == tcp::State::Closed && !c.backend_done && !c.back_closed;
            if reset {
                ctx.counters.event(Event::TerminateReset);
                front.abort();
                c.front_closed = true;
                c.phase = Phase::Closing;
            } else if c.backend_done && !c.front_closed {
                tls.send_close_notify();
                flush_tls(tls, front);
                if !tls.wants_write() {
                    front.close();
                    c.front_closed = true;
                }
            }
            // The client's end, once every plaintext byte reached the backend: FIN.
            let delivered = tls
                .process_new_packets()
                .is_ok_and(|st| st.plaintext_bytes_to_read() == 0);
            if c.client_done && delivered && !c.back_closed {
                back.close();
                c.back_closed = true;
            }
            if c.front_closed && c.back_closed {
                c.phase = Phase::Closing;
            }
        }
    }
}

/// `io::Write` into a TCP socket's send buffer (`WouldBlock` when full).
struct SendTo<'a, 'b>(&'a mut tcp::Socket<'b>);

impl Write for SendTo<'_, '_> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self.0.send_slice(b) {
            Ok(0) => Err(io::ErrorKind::WouldBlock.into()),
            Ok(n) => Ok(n),
            Err(_) => Err(io::ErrorKind::BrokenPipe.into()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Two distinct sockets of a set, mutably.
pub(super) fn two_sockets<'s>(
    set: &'s mut SocketSet<'static>,
    a: SocketHandle,
    b: SocketHandle,
) -> Option<(&'s mut tcp::Socket<'static>, &'s mut tcp::Socket<'static>)> {
    let mut first = None;
    let mut second = None;
    for item in set.iter_mut() {
        let (h, s) = item;
        if h == a {
            first = tcp::Socket::downcast_mut(s);
        } else if h == b {
            second = tcp::Socket::downcast_mut(s);
        }
    }
    first.zip(second)
}

/// Whether a socket in `state` has its peer's FIN (every byte before it received).
pub(super) fn fin_received(state: tcp::State) -> bool {
    matches!(
        state,
        tcp::State::CloseWait | tcp::State::LastAck | tcp::State::Closing | tcp::State::TimeWait
    )
}

/// Writes rustls's pending records into the client's send buffer, as far as it takes.
pub(super) fn flush_tls(tls: &mut ServerConnection, front: &mut tcp::Socket<'static>) {
    while tls.wants_write() {
        match tls.write_tls(&mut SendTo(front)) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
}

/// A TCP socket with `buf` bytes each way, Cubic, no Nagle, keep-alive every `ka_ms`.
pub(super) fn new_socket(buf: usize, ka_ms: u64) -> tcp::Socket<'static> {
    let mut s = tcp::Socket::new(
        tcp::SocketBuffer::new(vec![0u8; buf]),
        tcp::SocketBuffer::new(vec![0u8; buf]),
    );
    s.set_nagle_enabled(false);
    s.set_congestion_control(tcp::CongestionControl::Cubic);
    if ka_ms > 0 {
        s.set_keep_alive(Some(Duration::from_millis(ka_ms)));
    }
    s
}
