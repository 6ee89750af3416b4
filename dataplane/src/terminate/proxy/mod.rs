//! HTTP/1.1 per request on a terminated connection (plain HTTP, or HTTPS after the TLS
//! handshake): each request head is parsed, routed on its own (method, path, headers,
//! query, ... through the route's `tables::http` matches), rewritten for the backend and
//! sent with its body; the response comes back rewritten; then the next request.
//!
//! ```text
//!          ┌──────────── keep-alive: the next request ◀──────────────┐
//!          ▼                                                          │
//!   Head ──(parsed, routed)──▶ Forward ──(response done)──────────────┤
//!     │                          │ 101 Switching Protocols            │
//!     │                          └──────▶ Tunnel (bytes both ways)    │
//!     └──(404, redirect, direct, 4xx, invalid backend)──▶ Answer ─────┘
//!                                         (request body discarded)
//! ```
//!
//! - **One request at a time.** A pipelined request waits in the buffer until the
//!   response before it is complete (RFC 9112 §9.3.2: responses in request order), so a
//!   connection never has two exchanges open and each may go to another backend.
//! - **Bodies stream**: [`crate::http::Body`] tells where a message ends (Content-Length
//!   or chunked, passed through unchanged); nothing is buffered beyond the sockets' and
//!   the head buffers.
//! - **The backend connection** is kept while its responses allow it (keep-alive) and
//!   reused by the next request to the same backend; a request for another backend
//!   parks it in the worker's pool (idle; else it is reset — the connection's flow
//!   carries one backend tuple at a time) and takes a pooled connection to the new
//!   backend or connects one ([`legs`](super::legs)). The client's end parks it too.
//! - **Mirrors**: a rule's sampled mirrors get a copy of the head (`-shadow` host,
//!   `Connection: close`) and of the body bytes as they go to the backend, on legs of
//!   their own; their answers are dropped.
//! - **Limits**: heads over [`crate::http::MAX_HEAD_LEN`] or with more than
//!   [`crate::http::MAX_HEADERS`] lines get `431`; a head not complete within
//!   [`TerminateConfig::handshake_ms`](super::TerminateConfig) of its first byte gets
//!   `408`; an idle keep-alive connection closes after
//!   [`TerminateConfig::idle_ms`](super::TerminateConfig).
//! - **Failures**: a backend that cannot be connected is retried (other picks) up to the
//!   rule's retries or the engine's `backend_tries`; a backend that resets or closes
//!   before its response head is retried when the rule's `retryOn` covers it and the
//!   request had no body; a `5xx` covered by `retryOn` likewise; otherwise `502`/`503`,
//!   and `504` when the rule's timeout passes first. A response cut short after its head
//!   resets the client (nothing else can tell it).

use std::net::SocketAddr;
use std::sync::Arc;

mod step;

use super::conn::{fin_received, flush_tls, two_sockets};
use super::{Conn, Engine, Phase};
use crate::http::{self as h1, Body, Framing, Parse, RequestEdits, MAX_HEADERS};
use crate::pipeline::stage::Ctx;
use crate::stats::Event;
use crate::tables::http::{Header, HeaderOps, HttpAction, Request, Retries};
use crate::tables::maglev::Pick;
use crate::tables::snapshot::Snapshot;
use smoltcp::socket::tcp;
use std::io::Read;
use step::{client_room, client_write, forward_step, https_location, local, write_pending};

/// Where a connection's current exchange is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stage {
    /// Reading the next request head.
    Head,
    /// The request goes to the backend; its response comes back.
    Forward,
    /// sluice's own response goes out; the request's body is read and discarded.
    Answer,
    /// After `101 Switching Protocols`: bytes pass both ways unchanged.
    Tunnel,
    /// The client connection is closing after the last response.
    Done,
}

/// The HTTP state of a terminated connection.
pub(super) struct Http {
    pub(super) stage: Stage,
    /// Client bytes read and not yet handled (a request head, body bytes, the next
    /// requests).
    inbuf: Vec<u8>,
    /// The request head rewritten for the backend (kept until the response head, for a
    /// retry).
    to_back: Vec<u8>,
    to_back_sent: usize,
    /// For the client: a rewritten response head, or sluice's own response.
    to_client: Vec<u8>,
    to_client_sent: usize,
    /// Backend bytes: the response head read so far, then body bytes that came with it.
    resp: Vec<u8>,
    /// Whether `resp` holds the head (false) or already body bytes (true).
    resp_started: bool,
    req_body: Body,
    resp_body: Body,
    /// The request's method is HEAD (its response has no body).
    head_request: bool,
    /// The client may send another request after this one.
    keep_alive: bool,
    /// Close the client connection once this exchange's response is out.
    close_after: bool,
    /// The request asked to switch protocols.
    upgrade: bool,
    /// The request had a body (no retry once it is partly sent).
    has_body: bool,
    /// The backend allowed its connection to be reused.
    pub(super) back_reusable: bool,
    /// The request went on a connection an earlier request left open (a backend may
    /// close such a connection just as the request leaves: one retry is always allowed
    /// for a request without a body that got no answer on it).
    reused: bool,
    /// The backend connection is new: counted when it opens.
    fresh: bool,
    /// The rule's response header changes.
    response_ops: Option<Arc<HeaderOps>>,
    /// The route and rule that took the request, under snapshot `generation`.
    rule: Option<(u32, u32, u32)>,
    /// That rule's counter slot, until the response is counted
    /// ([`Http::count_response`]).
    counter: Option<u32>,
    /// Backends tried for this request.
    attempts: u8,
    /// Backends tried for this request when connecting fails.
    max_attempts: u8,
    /// The rule's retries (resets, 5xx).
    retries: Retries,
    /// When the head being read started (0: none yet).
    started_ms: u64,
    /// The head's deadline (408) or the request's (504); `u64::MAX`: none.
    deadline_ms: u64,
    /// The current attempt's deadline (the rule's `perTryTimeout`); `u64::MAX`: none.
    try_deadline_ms: u64,
    /// Status of the current response (counters).
    status: u16,
    /// Legs carrying mirrored copies of the current request, `(slot, serial)`.
    mirrors: Vec<(u32, u32)>,
    /// Body bytes sent to the backend this round, for the mirrors.
    mirror_body: Vec<u8>,
    /// The mirrors have had the whole request.
    mirror_complete: bool,
    /// `X-Forwarded-Client-Cert` of the connection's verified client certificate (set
    /// once, after the handshake).
    pub(in crate::terminate) client_cert: Option<Box<str>>,
}

impl super::Terminator {
    /// The client buffer of an HTTP connection: the configured head limit, within the
    /// codec's.
    fn head_cap(&self) -> usize {
        self.cfg.head_bytes.clamp(1024, h1::MAX_HEAD_LEN)
    }
}

impl Http {
    /// A connection's state, before its first request.
    pub(super) fn new() -> Box<Http> {
        Box::new(Http {
            stage: Stage::Head,
            inbuf: Vec::new(),
            to_back: Vec::new(),
            to_back_sent: 0,
            to_client: Vec::new(),
            to_client_sent: 0,
            resp: Vec::new(),
            resp_started: false,
            req_body: Body::new(Framing::None),
            resp_body: Body::new(Framing::None),
            head_request: false,
            keep_alive: true,
            close_after: false,
            upgrade: false,
            has_body: false,
            back_reusable: false,
            reused: false,
            fresh: false,
            response_ops: None,
            rule: None,
            counter: None,
            attempts: 0,
            max_attempts: 1,
            retries: Retries::default(),
            started_ms: 0,
            deadline_ms: u64::MAX,
            try_deadline_ms: u64::MAX,
            status: 0,
            mirrors: Vec::new(),
            mirror_body: Vec::new(),
            mirror_complete: false,
            client_cert: None,
        })
    }

    /// The mirrors of the current request, `(leg slot, serial)`.
    pub(super) fn mirrors(&self) -> &[(u32, u32)] {
        &self.mirrors
    }
}

/// A random 64-bit number from a worker-local xorshift state (per-request backend picks:
/// weights hold per request, not per connection).
pub(super) fn next_random(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// Why a request's backend did not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// The connection was refused or timed out.
    Connect,
    /// The backend reset or closed before its response head.
    Reset,
    /// The backend answered with this 5xx status, covered by the rule's `retryOn`.
    Status(u16),
    /// The attempt passed the rule's per-try timeout before the response head.
    Timeout,
}

impl Engine<'_> {
    /// Moves connection `idx`'s HTTP exchange as far as its buffers allow.
    pub(super) fn http(&mut self, idx: u32, snap: &Snapshot, ctx: &mut Ctx<'_>) {
        self.http_idle_backend(idx);
        // A few rounds: one step may make room for the next (a response done -> the
        // next pipelined head).
        for _ in 0..8 {
            let before = self.progress_mark(idx);
            self.http_read_client(idx);
            let Some(stage) = self.conn_http(idx).map(|h| h.stage) else {
                return;
            };
            match stage {
                Stage::Head => self.http_head(idx, snap, ctx),
                Stage::Forward => self.http_forward(idx, snap, ctx),
                Stage::Answer => self.http_answer(idx, ctx),
                Stage::Tunnel => self.http_tunnel(idx, ctx),
                Stage::Done => self.http_done(idx, ctx),
            }
            self.http_mirror_feed(idx, ctx);
            if self.progress_mark(idx) == before {
                break;
            }
        }
    }

    /// Between requests, a backend that closed its idle connection (its keep-alive
    /// timeout) gets our FIN too, and the connection is not reused.
    fn http_idle_backend(&mut self, idx: u32) {
        let Some((c, shard)) = self.t.conn_shard(idx) else {
            return;
        };
        let (Some(b), Some(h)) = (c.back, c.http.as_deref_mut()) else {
            return;
        };
        if h.stage != Stage::Head {
            return;
        }
        let s = shard.sockets.get_mut::<tcp::Socket>(b);
        if fin_received(s.state()) && !s.can_recv() && s.state() == tcp::State::CloseWait {
            s.close();
            h.back_reusable = false;
        }
    }

    fn conn_http(&mut self, idx: u32) -> Option<&mut Http> {
        self.t
            .conns
            .get_mut(idx as usize)?
            .as_mut()?
            .http
            .as_deref_mut()
    }

    /// A fingerprint of the exchange's progress (stage and buffer positions).
    fn progress_mark(&mut self, idx: u32) -> [usize; 6] {
        self.conn_http(idx).map_or([0; 6], |h| {
            [
                h.stage as usize,
                h.inbuf.len(),
                h.to_back_sent,
                h.to_client_sent,
                h.to_client.len(),
                h.resp.len() + usize::from(h.resp_started),
            ]
        })
    }

    /// Client plaintext into `inbuf` while it has room; notes the client's end.
    fn http_read_client(&mut self, idx: u32) {
        let cap = self.t.head_cap();
        let Some((c, shard)) = self.t.conn_shard(idx) else {
            return;
        };
        let Conn {
            http,
            tls,
            front,
            client_done,
            ..
        } = &mut **c;
        let Some(h) = http.as_deref_mut() else {
            return;
        };
        let front = shard.sockets.get_mut::<tcp::Socket>(*front);
        // Copied straight from rustls's plaintext or the socket's buffer into `inbuf`'s
        // spare room (no zeroing of the room first: this runs for every packet).
        if h.stage != Stage::Done {
            match tls {
                Some(tls) => {
                    let mut chunk = [0u8; 4096];
                    while h.inbuf.len() < cap {
                        let room = (cap - h.inbuf.len()).min(chunk.len());
                        match tls.reader().read(&mut chunk[..room]) {
                            Ok(k) if k > 0 => h.inbuf.extend_from_slice(&chunk[..k]),
                            _ => break,
                        }
                    }
                }
                None => {
                    while h.inbuf.len() < cap && front.can_recv() {
                        let inbuf = &mut h.inbuf;
                        let took = front.recv(|buf| {
                            let k = buf.len().min(cap - inbuf.len());
                            inbuf.extend_from_slice(&buf[..k]);
                            (k, k)
                        });
                        if !matches!(took, Ok(k) if k > 0) {
                            break;
                        }
                    }
                }
            }
        }
        if tls.is_none() && fin_received(front.state()) && !front.can_recv() {
            *client_done = true;
        }
    }

    /// Head: the next request head parsed, routed, and answered or forwarded.
    fn http_head(&mut self, idx: u32, snap: &Snapshot, ctx: &mut Ctx<'_>) {
        let head_ms = self.t.cfg.handshake_ms;
        let head_cap = self.t.head_cap();
        let tries = self.t.cfg.backend_tries;
        let now_ms = ctx.now_ms;
        let random = next_random(&mut self.t.rng);
        let generation = self.t.generation;
        let Some(Some(c)) = self.t.conns.get_mut(idx as usize) else {
            return;
        };
        let (client, client_done, https) = (c.client, c.client_done, c.tls.is_some());
        let vip = client.destination();
        let ours = self.fwd.config().is_ours(vip.ip(), &snap.addresses);
        let Some(h) = c.http.as_deref_mut() else {
            return;
        };
        if h.inbuf.is_empty() {
            h.started_ms = 0;
            h.deadline_ms = u64::MAX;
            if client_done {
                h.stage = Stage::Done;
            }
            return;
        }
        if h.started_ms == 0 {
            h.started_ms = now_ms;
            h.deadline_ms = now_ms + head_ms;
        }
        let (inbuf, to_back, to_client) = (&mut h.inbuf, &mut h.to_back, &mut h.to_client);
        let client_cert = &h.client_cert;
        let mut headers = [Header {
            name: "",
            value: &[],
        }; MAX_HEADERS];
        let head = match h1::parse_request(inbuf, &mut headers) {
            Parse::Partial if inbuf.len() >= head_cap => {
                // Longer than the configured limit (the codec's own is larger).
                ctx.counters.event(Event::HttpHeadTooLarge);
                local(to_client, 431, &[], b"", false, true);
                inbuf.clear();
                h.req_body = Body::new(Framing::None);
                h.begin_answer(431, true);
                return;
            }
            Parse::Partial => {
                if client_done {
                    // The client ended inside a head: nothing to answer.
                    h.stage = Stage::Done;
                }
                return;
            }
            Parse::Error(e) => {
                ctx.counters.event(match e.status() {
                    431 => Event::HttpHeadTooLarge,
                    _ => Event::HttpBadRequest,
                });
                local(to_client, e.status(), &[], b"", false, true);
                inbuf.clear();
                h.req_body = Body::new(Framing::None);
                h.begin_answer(e.status(), true);
                return;
            }
            Parse::Done(head) => head,
        };
        ctx.counters.event(Event::HttpRequest);
        let req = Request {
            method: head.method,
            scheme: if https { "https" } else { "http" },
            authority: head.authority,
            path: head.path,
            query: head.query,
            headers: head.headers,
            port: vip.port(),
            source: client.source().ip(),
        };
        let is_head = head.method == "HEAD";
        let close = !head.keep_alive;
        let answer = |to_client: &mut Vec<u8>, status: u16, extra: &[(&str, &str)], body: &[u8]| {
            local(to_client, status, extra, body, is_head, close);
            Some(status)
        };
        let mut rule_at = None;
        let mut counter = None;
        let mut backend = None;
        // Mirrored copies to send: their backend and head.
        let mut mirror_plan: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        let redirect_all =
            super::route::listener(snap, vip, ours).is_some_and(|l| l.https_redirect);
        let answered = if redirect_all {
            // Istio `httpsRedirect`: every request is sent to https, then the connection
            // closes (as delayed binding answers it).
            match https_location(head.authority, head.path, head.query) {
                None => {
                    ctx.counters.event(Event::HttpNoRoute);
                    answer(to_client, 404, &[], b"")
                }
                Some((loc, n)) => {
                    ctx.counters.event(Event::HttpRedirectSent);
                    let l = std::str::from_utf8(&loc[..n]).unwrap_or("/");
                    local(to_client, 301, &[("Location", l)], b"", is_head, true);
                    Some(301)
                }
            }
        } else {
            match super::route::http_route(snap, vip, ours, head.authority) {
                None => {
                    ctx.counters.event(Event::HttpNoRoute);
                    answer(to_client, 404, &[], b"")
                }
                Some((route_idx, route)) => match route.http.find_indexed(&req) {
                    None => {
                        ctx.counters.event(Event::HttpNoRoute);
                        answer(to_client, 404, &[], b"")
                    }
                    Some((m, rule_idx, rule)) => {
                        rule_at = Some((route_idx, rule_idx, generation));
                        counter = Some(rule.counter);
                        ctx.rules.request(rule.counter);
                        match &rule.action {
                            HttpAction::Redirect(r) => {
                                let mut loc = [0u8; 2048];
                                let at = r.write_location(&req, m, &mut loc);
                                match at.and_then(|n| std::str::from_utf8(&loc[..n]).ok()) {
                                    Some(l) => {
                                        ctx.counters.event(Event::HttpRedirectSent);
                                        answer(to_client, r.code, &[("location", l)], b"")
                                    }
                                    None => answer(to_client, 500, &[], b""),
                                }
                            }
                            HttpAction::Direct { status, body } => {
                                answer(to_client, *status, &[], body)
                            }
                            HttpAction::Forward {
                                table,
                                table_v6,
                                invalid_status,
                            } => {
                                let t = match (table_v6, vip.is_ipv6()) {
                                    (Some(t6), true) => t6,
                                    _ => table,
                                };
                                match t.pick(random) {
                                    Pick::Reject => {
                                        ctx.counters.event(Event::HttpInvalidBackend);
                                        answer(to_client, *invalid_status, &[], b"")
                                    }
                                    Pick::Backend(b) => {
                                        let mut path = [0u8; 2048];
                                        let new_path = match &rule.rewrite.path {
                                            None => None,
                                            Some(_) => rule
                                                .rewrite
                                                .write_path(&req, m, &mut self.t.scratch, &mut path)
                                                .and_then(|n| std::str::from_utf8(&path[..n]).ok()),
                                        };
                                        let edits = RequestEdits {
                                            path: new_path,
                                            authority: rule.rewrite.authority.as_deref(),
                                            ops: &rule.request_headers,
                                            forwarded_for: client.source().ip(),
                                            forwarded_proto: req.scheme,
                                            upgrade: head.upgrade,
                                            close: false,
                                            client_cert: client_cert.as_deref(),
                                        };
                                        to_back.clear();
                                        let estimate = request_estimate(&head, &edits);
                                        let written = h1::append_head(
                                            to_back,
                                            estimate,
                                            h1::MAX_HEAD_LEN + 4096,
                                            |out| h1::write_request_head(out, &head, &edits),
                                        );
                                        match written {
                                            Some(_) => {
                                                for m in rule.mirrors.iter() {
                                                    let draw = next_random(&mut self.t.rng);
                                                    if draw % 1_000_000 >= u64::from(m.per_million)
                                                    {
                                                        continue;
                                                    }
                                                    let copy = mirror_head(
                                                        &head,
                                                        &edits,
                                                        m,
                                                        next_random(&mut self.t.rng),
                                                    );
                                                    match copy {
                                                        Some(c) => mirror_plan.push(c),
                                                        None => ctx
                                                            .counters
                                                            .event(Event::HttpMirrorDropped),
                                                    }
                                                }
                                                backend = Some(b);
                                                h.response_ops =
                                                    (!rule.response_headers.is_empty())
                                                        .then(|| rule.response_headers.clone());
                                                h.max_attempts = tries
                                                    .max(rule.retries.attempts.saturating_add(1));
                                                h.retries = rule.retries;
                                                h.deadline_ms = match rule.timeout_ms {
                                                    0 => u64::MAX,
                                                    t => now_ms + t,
                                                };
                                                None
                                            }
                                            None => {
                                                to_back.clear();
                                                ctx.counters.event(Event::HttpHeadTooLarge);
                                                answer(to_client, 431, &[], b"")
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                },
            }
        };
        // The exchange, whatever its route.
        h.head_request = is_head;
        h.keep_alive = head.keep_alive;
        h.upgrade = head.upgrade;
        h.has_body = !matches!(head.framing, Framing::None | Framing::Length(0));
        h.rule = rule_at;
        h.counter = counter;
        h.attempts = 0;
        h.started_ms = 0;
        let (framing, consumed) = (head.framing, head.len);
        inbuf.drain(..consumed.min(inbuf.len()));
        h.req_body = Body::new(framing);
        match (answered, backend) {
            (Some(status), _) => h.begin_answer(status, close || redirect_all),
            (None, Some(b)) => {
                h.begin_forward();
                h.mirror_complete = h.req_body.is_done();
                self.http_connect(idx, b, snap, ctx);
                // (Not for a request whose connection went: policy, no route to b.)
                let live = self
                    .conn_http(idx)
                    .is_some_and(|h| h.stage == Stage::Forward);
                for (mb, copy) in mirror_plan.into_iter().filter(|_| live) {
                    let opened = self.open_mirror(client.source().ip(), mb, copy, snap, ctx);
                    if let (Some(id), Some(h)) = (opened, self.conn_http(idx)) {
                        h.mirrors.push(id);
                    }
                }
            }
            (None, None) => h.begin_answer(500, true),
        }
    }

    /// Sends the request to `backend`: on the connection's backend socket when it is
    /// idle, open and to `backend` already; otherwise on a new one.
    fn http_connect(&mut self, idx: u32, backend: SocketAddr, snap: &Snapshot, ctx: &mut Ctx<'_>) {
        let si = self.t.shard_of(idx);
        let reuse = {
            let (Some(Some(c)), Some(Some(shard))) =
                (self.t.conns.get(idx as usize), self.t.shards.get(si))
            else {
                return;
            };
            c.backend == Some(backend)
                && c.http.as_deref().is_some_and(|h| h.back_reusable)
                && c.back.is_some_and(|b| {
                    let s = shard.sockets.get::<tcp::Socket>(b);
                    s.state() == tcp::State::Established && !s.can_recv()
                })
        };
        let now = ctx.now_ms;
        // Another backend (or none yet): an idle connection to the old one goes to the
        // worker's pool (else it is reset); one to the new backend comes from the pool
        // if it has one.
        let pooled = !reuse && {
            if !self.park(idx, ctx) {
                self.drop_backend(idx, ctx);
            }
            self.claim(idx, backend, snap, ctx)
        };
        if let Some(h) = self.conn_http(idx) {
            h.attempts = h.attempts.saturating_add(1);
            h.back_reusable = false;
            h.to_back_sent = 0;
            h.reused = reuse || pooled;
            h.fresh = !(reuse || pooled);
            h.try_deadline_ms = match h.retries.per_try_timeout_ms {
                0 => u64::MAX,
                t => now + t,
            };
        }
        if reuse || pooled {
            ctx.counters.event(Event::HttpBackendReused);
            return;
        }
        // A new connection: the flow re-keyed to it.
        self.connect(idx, backend, snap, ctx);
        if let Some(Some(c)) = self.t.conns.get_mut(idx as usize) {
            // `connect` moves the phase of the TLS-to-TCP path; HTTP keeps its own.
            if c.phase == Phase::Connecting {
                c.phase = Phase::Http;
            }
        }
    }

    /// Resets and forgets connection `idx`'s backend socket, if it has one.
    fn drop_backend(&mut self, idx: u32, ctx: &mut Ctx<'_>) {
        let si = self.t.shard_of(idx);
        let had = match (self.t.conns.get(idx as usize), self.t.shards.get_mut(si)) {
            (Some(Some(c)), Some(Some(shard))) => c.back.map(|b| {
                shard.sockets.get_mut::<tcp::Socket>(b).abort();
            }),
            _ => None,
        };
        if had.is_none() {
            return;
        }
        // The RST goes out while the flow still carries the old tuple.
        self.flush_shard(si, ctx);
        if let (Some(Some(c)), Some(Some(shard))) = (
            self.t.conns.get_mut(idx as usize),
            self.t.shards.get_mut(si),
        ) {
            if let Some(b) = c.back.take() {
                shard.sockets.remove(b);
            }
            c.back_closed = false;
            c.backend_done = false;
        }
    }

    /// Forward: the head and the body to the backend, the response back.
    fn http_forward(&mut self, idx: u32, snap: &Snapshot, ctx: &mut Ctx<'_>) {
        let failure = {
            let Some((c, shard)) = self.t.conn_shard(idx) else {
                return;
            };
            let Some(bh) = c.back else {
                return;
            };
            let Conn {
                http,
                tls,
                front,
                front_closed,
                ..
            } = &mut **c;
            let Some(h) = http.as_deref_mut() else {
                return;
            };
            let Some((front, back)) = two_sockets(&mut shard.sockets, *front, bh) else {
                return;
            };
            forward_step(h, tls.as_mut(), front, back, front_closed, ctx)
        };
        if let Some(f) = failure {
            self.http_failed(idx, f, snap, ctx);
        }
    }

    /// The request's backend failed: another pick when the rule allows it, else an
    /// answer (502, 503) or, for a 5xx, nothing (the response passes).
    fn http_failed(&mut self, idx: u32, f: Failure, snap: &Snapshot, ctx: &mut Ctx<'_>) {
        let random = next_random(&mut self.t.rng);
        let current = self.t.generation;
        let Some(Some(c)) = self.t.conns.get(idx as usize) else {
            return;
        };
        let vip = c.client.destination();
        let failed = c.backend;
        let Some(h) = c.http.as_deref() else {
            return;
        };
        let retries = h.retries;
        let allowed = match f {
            Failure::Connect => h.attempts < h.max_attempts,
            Failure::Reset if h.reused => !h.has_body && h.attempts < h.max_attempts,
            Failure::Reset => {
                (retries.on.reset || retries.on.server_error || retries.on.gateway_error)
                    && !h.has_body
                    && h.attempts <= retries.attempts
            }
            Failure::Status(_) => !h.has_body && h.attempts <= retries.attempts,
            Failure::Timeout => {
                (retries.on.reset || retries.on.server_error || retries.on.gateway_error)
                    && !h.has_body
                    && h.attempts <= retries.attempts
            }
        };
        let next = allowed
            .then(|| {
                let (route, rule, generation) = h.rule?;
                if generation != current {
                    return None;
                }
                let rule = snap.listeners.route(route)?.http.rules.get(rule as usize)?;
                let HttpAction::Forward {
                    table, table_v6, ..
                } = &rule.action
                else {
                    return None;
                };
                let t = match (table_v6, vip.is_ipv6()) {
                    (Some(t6), true) => t6,
                    _ => table,
                };
                // Another backend when the set has one, else the same one anew.
                let pick = |salt: u64| match t.pick(random ^ salt.wrapping_mul(0x9e37_79b9)) {
                    Pick::Backend(b) => Some(b),
                    Pick::Reject => None,
                };
                (0..8u64)
                    .find_map(|salt| pick(salt).filter(|&b| Some(b) != failed))
                    .or_else(|| failed.filter(|_| pick(0).is_some()))
            })
            .flatten();
        match next {
            Some(b) => {
                ctx.counters.event(Event::BackendFailover);
                // A new connection (the failed one is reset); the head is sent again.
                if let Some(h) = self.conn_http(idx) {
                    h.resp.clear();
                    h.resp_started = false;
                    h.back_reusable = false;
                }
                self.http_connect(idx, b, snap, ctx);
            }
            None => {
                let status = match f {
                    Failure::Connect => 503,
                    Failure::Reset => 502,
                    Failure::Status(s) => s,
                    Failure::Timeout => 504,
                };
                ctx.counters.event(Event::TerminateBackendFailed);
                self.drop_backend(idx, ctx);
                if let Some(h) = self.conn_http(idx) {
                    let close = !h.keep_alive;
                    local(&mut h.to_client, status, &[], b"", h.head_request, close);
                    // The rest of the request's body is read and discarded.
                    h.begin_answer(status, close);
                }
            }
        }
    }

    /// Answer: sluice's own response out; the request's body discarded.
    fn http_answer(&mut self, idx: u32, ctx: &mut Ctx<'_>) {
        let Some((c, shard)) = self.t.conn_shard(idx) else {
            return;
        };
        let Conn {
            http, tls, front, ..
        } = &mut **c;
        let Some(h) = http.as_deref_mut() else {
            return;
        };
        let front = shard.sockets.get_mut::<tcp::Socket>(*front);
        write_pending(tls.as_mut(), front, &mut h.to_client, &mut h.to_client_sent);
        let mut broken = false;
        while !h.close_after && !h.req_body.is_done() && !h.inbuf.is_empty() {
            match h.req_body.advance(&h.inbuf) {
                Ok((n, _)) if n > 0 => {
                    h.inbuf.drain(..n);
                }
                Ok(_) => break,
                Err(_) => {
                    broken = true;
                    break;
                }
            }
        }
        if broken {
            h.close_after = true;
        }
        if h.to_client.is_empty() && (h.close_after || h.req_body.is_done()) {
            h.count_response(ctx);
            h.stage = if h.close_after {
                Stage::Done
            } else {
                Stage::Head
            };
        }
    }

    /// Tunnel (after 101): bytes both ways unchanged; ends pass across.
    fn http_tunnel(&mut self, idx: u32, ctx: &mut Ctx<'_>) {
        let Some((c, shard)) = self.t.conn_shard(idx) else {
            return;
        };
        let Some(bh) = c.back else {
            return;
        };
        let Conn {
            http,
            tls,
            front,
            client_done,
            front_closed,
            back_closed,
            ..
        } = &mut **c;
        let Some(h) = http.as_deref_mut() else {
            return;
        };
        let Some((front, back)) = two_sockets(&mut shard.sockets, *front, bh) else {
            return;
        };
        // Client -> backend.
        while !h.inbuf.is_empty() && back.can_send() {
            match back.send_slice(&h.inbuf) {
                Ok(n) if n > 0 => {
                    h.inbuf.drain(..n);
                }
                _ => break,
            }
        }
        // Backend -> client: what came with the 101 first.
        if !h.resp.is_empty() {
            let w = client_write(tls.as_mut(), front, &h.resp);
            h.resp.drain(..w);
        }
        while h.resp.is_empty() && back.can_recv() {
            let room = client_room(tls.as_ref(), front);
            if room == 0 {
                break;
            }
            let took = back.recv(|buf| {
                let k = buf.len().min(room);
                let w = client_write(tls.as_mut(), front, &buf[..k]);
                (w, w)
            });
            if !matches!(took, Ok(n) if n > 0) {
                break;
            }
        }
        if let Some(t) = tls.as_mut() {
            flush_tls(t, front);
        }
        if back.state() == tcp::State::Closed && !*back_closed {
            ctx.counters.event(Event::TerminateReset);
            front.abort();
            *front_closed = true;
            h.stage = Stage::Done;
            return;
        }
        if *client_done && h.inbuf.is_empty() && !*back_closed {
            back.close();
            *back_closed = true;
        }
        if fin_received(back.state()) && !back.can_recv() && h.resp.is_empty() {
            h.stage = Stage::Done;
        }
    }

    /// Done: the last response out, then the client's connection closed (close_notify
    /// and FIN); the backend's goes to the pool when idle, else is closed.
    fn http_done(&mut self, idx: u32, ctx: &mut Ctx<'_>) {
        self.park(idx, ctx);
        let Some((c, shard)) = self.t.conn_shard(idx) else {
            return;
        };
        let Conn {
            http,
            tls,
            front,
            back,
            front_closed,
            back_closed,
            phase,
            ..
        } = &mut **c;
        let Some(h) = http.as_deref_mut() else {
            return;
        };
        let fs = shard.sockets.get_mut::<tcp::Socket>(*front);
        write_pending(tls.as_mut(), fs, &mut h.to_client, &mut h.to_client_sent);
        if !h.to_client.is_empty() {
            return;
        }
        if !*front_closed {
            if let Some(t) = tls.as_mut() {
                t.send_close_notify();
                flush_tls(t, fs);
            }
            fs.close();
            *front_closed = true;
        }
        if let Some(b) = *back {
            if !*back_closed {
                shard.sockets.get_mut::<tcp::Socket>(b).close();
                *back_closed = true;
            }
        }
        *phase = Phase::Closing;
    }
}

impl Engine<'_> {
    /// Hands the body bytes sent this round to the request's mirrors; when the request
    /// is whole they are told so and let go; when it ended otherwise (answered by
    /// sluice, the client gone) they are reset.
    fn http_mirror_feed(&mut self, idx: u32, ctx: &mut Ctx<'_>) {
        let Some(h) = self.conn_http(idx) else {
            return;
        };
        if h.mirrors.is_empty() {
            h.mirror_body.clear();
            return;
        }
        let complete = h.mirror_complete;
        let going = h.stage == Stage::Forward;
        if h.mirror_body.is_empty() && !complete && going {
            return;
        }
        let mut mirrors = std::mem::take(&mut h.mirrors);
        let mut body = std::mem::take(&mut h.mirror_body);
        if complete || going {
            for &id in &mirrors {
                self.feed_mirror(id, &body, complete, ctx);
            }
        } else {
            self.t.cut_mirrors(&mirrors);
        }
        body.clear();
        if complete || !going {
            mirrors.clear();
        }
        if let Some(h) = self.conn_http(idx) {
            h.mirrors = mirrors;
            h.mirror_body = body;
        }
    }
}

/// The mirrored copy of a request for mirror `m` (`draw`: its backend pick): its
/// backend and head — the head sent to the main backend with the authority's host
/// suffixed `-shadow` (as Envoy, Istio's proxy, sends copies) and `Connection: close`.
/// `None` when the set has no backend or the head does not fit.
fn mirror_head(
    head: &h1::RequestHead<'_>,
    edits: &RequestEdits<'_>,
    m: &crate::tables::http::Mirror,
    draw: u64,
) -> Option<(SocketAddr, Vec<u8>)> {
    if head.upgrade {
        // A copy cannot upgrade with its request.
        return None;
    }
    let Pick::Backend(b) = m.table.pick(draw) else {
        return None;
    };
    let authority = edits.authority.unwrap_or(head.authority);
    let mut shadow = [0u8; 512];
    let shadow = shadow_authority(authority, &mut shadow)?;
    let copy = RequestEdits {
        path: edits.path,
        authority: (!shadow.is_empty()).then_some(shadow),
        ops: edits.ops,
        forwarded_for: edits.forwarded_for,
        forwarded_proto: edits.forwarded_proto,
        upgrade: false,
        close: true,
        client_cert: edits.client_cert,
    };
    let mut out = Vec::new();
    h1::append_head(
        &mut out,
        request_estimate(head, &copy),
        h1::MAX_HEAD_LEN + 4096,
        |o| h1::write_request_head(o, head, &copy),
    )?;
    Some((b, out))
}

/// What a request head rewritten with `edits` takes at most in the usual case (the
/// received head, the edits, the forwarding headers), for [`h1::append_head`].
fn request_estimate(head: &h1::RequestHead<'_>, edits: &RequestEdits<'_>) -> usize {
    head.len
        + edits.path.map_or(0, str::len)
        + edits.authority.map_or(0, str::len)
        + edits.client_cert.map_or(0, |v| v.len() + 28)
        + h1::ops_len(edits.ops)
        + 256
}

/// `authority` with `-shadow` after its host (before a port): `a.test:8080` ->
/// `a.test-shadow:8080`, `[::1]` -> `[::1]-shadow`. Empty stays empty.
fn shadow_authority<'b>(authority: &str, buf: &'b mut [u8]) -> Option<&'b str> {
    if authority.is_empty() {
        return Some("");
    }
    let host_end = match authority.rfind(':') {
        Some(i)
            if authority[i + 1..].bytes().all(|b| b.is_ascii_digit())
                && !authority[..i].contains(':')
                || authority[..i].ends_with(']') =>
        {
            i
        }
        _ => authority.len(),
    };
    let (host, port) = authority.split_at(host_end);
    let parts = [host, "-shadow", port];
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let out = buf.get_mut(..len)?;
    let mut at = 0;
    for p in parts {
        out[at..at + p.len()].copy_from_slice(p.as_bytes());
        at += p.len();
    }
    std::str::from_utf8(out).ok()
}

impl Http {
    /// sluice answers the request itself (the answer already in `to_client`); the rest
    /// of its body (`req_body`) is read and discarded unless the connection closes.
    fn begin_answer(&mut self, status: u16, close: bool) {
        self.to_client_sent = 0;
        self.to_back.clear();
        self.response_ops = None;
        self.close_after = close || !self.keep_alive;
        self.status = status;
        self.deadline_ms = u64::MAX;
        self.stage = Stage::Answer;
    }

    /// The request goes to a backend (the head in `to_back`).
    fn begin_forward(&mut self) {
        self.resp.clear();
        self.resp_started = false;
        self.to_client.clear();
        self.to_client_sent = 0;
        self.close_after = !self.keep_alive;
        self.status = 0;
        self.stage = Stage::Forward;
    }
}

impl Engine<'_> {
    /// The scan's deadlines of an HTTP connection: a head not complete in time (408),
    /// a backend not connected in time (the next pick or 503), a request past its
    /// rule's timeout (504, or a reset once the response has begun).
    pub(super) fn http_deadlines(&mut self, idx: u32, snap: &Snapshot, ctx: &mut Ctx<'_>) {
        let now = ctx.now_ms;
        let Some((c, shard)) = self.t.conn_shard(idx) else {
            return;
        };
        let connecting = c
            .back
            .is_some_and(|b| shard.sockets.get::<tcp::Socket>(b).state() == tcp::State::SynSent)
            && now >= c.deadline_ms;
        let Some(h) = c.http.as_deref_mut() else {
            return;
        };
        match h.stage {
            Stage::Head if h.started_ms != 0 && now >= h.deadline_ms => {
                ctx.counters.event(Event::HttpHeadTimeout);
                local(&mut h.to_client, 408, &[], b"", false, true);
                h.inbuf.clear();
                h.req_body = Body::new(Framing::None);
                h.begin_answer(408, true);
            }
            Stage::Forward if connecting => {
                if let Some(b) = c.back {
                    shard.sockets.get_mut::<tcp::Socket>(b).abort();
                }
                self.http_failed(idx, Failure::Connect, snap, ctx);
            }
            Stage::Forward
                if !h.resp_started && now >= h.try_deadline_ms && now < h.deadline_ms =>
            {
                ctx.counters.event(Event::HttpRequestTimeout);
                h.back_reusable = false;
                self.http_failed(idx, Failure::Timeout, snap, ctx);
            }
            Stage::Forward if now >= h.deadline_ms => {
                ctx.counters.event(Event::HttpRequestTimeout);
                if h.resp_started {
                    self.abort(idx, ctx);
                    return;
                }
                local(
                    &mut h.to_client,
                    504,
                    &[],
                    b"",
                    h.head_request,
                    !h.keep_alive,
                );
                let close = !h.keep_alive;
                h.begin_answer(504, close);
                self.drop_backend(idx, ctx);
            }
            _ => return,
        }
        self.http(idx, snap, ctx);
    }
}
