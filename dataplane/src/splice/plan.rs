//! The engine's decision for an embryo, as a value: wait, reset, answer, or connect a
//! backend; and the pieces it is made of (the route's pick for an attempt, a redirect's
//! `Location`).

use super::{inspect, redirect_answer, Embryo, Embryos};
use crate::stats::{Counters, Event};
use crate::tables::http::{HttpAction, Request};
use crate::tables::listeners::{ListenerEntry, ListenerKind, RouteEntry};
use crate::tables::maglev::{flow_hash, MaglevTable, Pick};
use crate::tables::snapshot::Snapshot;
use crate::wire::ip_proto;
use std::net::SocketAddr;

/// The largest answer sluice writes (one segment).
pub(super) const ANSWER_MAX: usize = 1200;

/// The decision for embryo `e`'s bytes (slot `idx` of `embryos`), as a plan; an answer
/// sluice writes itself is left at the start of the embryo's buffer. `ours`: the embryo's
/// virtual address is one of sluice's own; `end`: why no more bytes will come, if so.
pub(super) fn decide(
    embryos: &mut Embryos,
    e: &Embryo,
    idx: u32,
    ours: bool,
    end: Option<Event>,
    snap: &Snapshot,
    counters: &mut Counters,
) -> Plan {
    let client = e.client.source();
    let vip = e.client.destination();
    let Some(listener) = splice_listener(snap, vip, ours) else {
        counters.event(Event::FirstBytesNoRoute);
        return Plan::Reset;
    };
    let have = e.pieces.contiguous();
    let mut answer = [0u8; ANSWER_MAX];
    let (plan, answer_len) = {
        let bytes = &embryos.buf(idx)[..have];
        match inspect(listener.kind, listener.https_redirect, bytes, end) {
            super::Verdict::NeedMore(n) => (Plan::Wait(n), 0),
            super::Verdict::HttpsRedirect { host, target } => {
                match redirect_answer(&mut answer, 301, &["https://", host.as_str(), target]) {
                    Some(n) => (Plan::Answer(n), n),
                    None => (Plan::Reset, 0),
                }
            }
            super::Verdict::Route { name, path, why } => {
                if let Some(w) = why {
                    counters.event(w);
                }
                let route = listener
                    .route(name.as_ref().map_or(&b""[..], |n| n.as_bytes()))
                    .and_then(|i| snap.listeners.route(i))
                    .filter(|r| r.applies_to(vip.ip()));
                let Some(route) = route else {
                    if why.is_none() {
                        counters.event(Event::FirstBytesNoRoute);
                    }
                    return Plan::Reset;
                };
                let host = name.as_ref().map_or("", |n| n.as_str());
                let pick = |table: &crate::tables::maglev::MaglevTable| {
                    pick_backend(table, client, vip, e.tries, e.backend)
                };
                if listener.kind == ListenerKind::Http && !route.http.is_empty() {
                    let (method, query) = request_line(bytes);
                    let req = Request {
                        method,
                        scheme: "http",
                        authority: host,
                        path,
                        query,
                        headers: &[],
                        port: vip.port(),
                        source: client.ip(),
                    };
                    match first_request(route, &req, vip.is_ipv6(), &mut answer) {
                        FirstRequest::NoRule => (Plan::Reset, 0),
                        FirstRequest::Answer(n) => (Plan::Answer(n), n),
                        FirstRequest::Table(t) => (pick(t), 0),
                    }
                } else {
                    let table = route.table_for(vip.is_ipv6());
                    (pick(table), 0)
                }
            }
        }
    };
    let plan = match plan {
        Plan::Connect { backend, .. } => Plan::Connect {
            backend,
            transparent: listener.transparent,
        },
        p => p,
    };
    if answer_len > 0 {
        let (_, buf) = embryos.with_buf(idx);
        let n = answer_len.min(buf.len());
        buf[..n].copy_from_slice(&answer[..n]);
    }
    plan
}

/// The delayed-binding listener for a virtual address (re-read from the current
/// snapshot: a reload may have changed it); `ours`: the address is one of sluice's own.
fn splice_listener(snap: &Snapshot, vip: SocketAddr, ours: bool) -> Option<&ListenerEntry> {
    let l = if ours {
        snap.listeners.lookup(vip.ip(), vip.port(), ip_proto::TCP)
    } else {
        snap.listeners
            .lookup_bound(vip.ip(), vip.port(), ip_proto::TCP)
    }?;
    (l.kind.routes_by_name() && l.kind != ListenerKind::TlsTerminate).then_some(l)
}

/// What to do with an embryo.
pub(crate) enum Plan {
    /// Wait for this many bytes.
    Wait(usize),
    /// Reset the client.
    Reset,
    /// Send sluice's answer (this long, at the start of the buffer).
    Answer(usize),
    /// Connect this backend (`None`: the pick was a reject slot).
    Connect {
        backend: Option<SocketAddr>,
        transparent: bool,
    },
}

/// The route's pick for attempt `tries` (0: the flow's own hash, as an L4 flow would get;
/// later attempts perturb it and skip the backend that just failed).
pub(crate) fn pick_backend(
    table: &MaglevTable,
    client: SocketAddr,
    vip: SocketAddr,
    tries: u8,
    failed: Option<SocketAddr>,
) -> Plan {
    let h = flow_hash(client, vip, ip_proto::TCP);
    for salt in 0..8u64 {
        let attempt = u64::from(tries) + salt;
        let h = if attempt == 0 {
            h
        } else {
            h ^ attempt.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        };
        match table.pick(h) {
            Pick::Backend(b) if Some(b) != failed => {
                return Plan::Connect {
                    backend: Some(b),
                    transparent: false,
                }
            }
            Pick::Backend(_) => continue,
            Pick::Reject => {
                return Plan::Connect {
                    backend: None,
                    transparent: false,
                }
            }
        }
    }
    Plan::Connect {
        backend: None,
        transparent: false,
    }
}

/// What the first request of a connection gets from an HTTP route.
pub(crate) enum FirstRequest<'r> {
    /// No rule matches.
    NoRule,
    /// sluice answers (this long, at the start of the answer buffer), then closes.
    Answer(usize),
    /// A backend of this table.
    Table(&'r MaglevTable),
}

/// The decision of `route`'s HTTP rules for `req` (the first request of a connection to
/// a virtual address of family `v6`); an answer is written into `answer`.
pub(crate) fn first_request<'r>(
    route: &'r RouteEntry,
    req: &Request<'_>,
    v6: bool,
    answer: &mut [u8],
) -> FirstRequest<'r> {
    let Some((m, rule)) = route.http.find(req) else {
        return FirstRequest::NoRule;
    };
    match &rule.action {
        HttpAction::Forward {
            table, table_v6, ..
        } => FirstRequest::Table(match (table_v6, v6) {
            (Some(t), true) => t,
            _ => table,
        }),
        HttpAction::Redirect(r) => {
            let mut loc = [0u8; ANSWER_MAX];
            let n = r
                .write_location(req, m, &mut loc)
                .and_then(|n| std::str::from_utf8(loc.get(..n)?).ok())
                .and_then(|l| super::redirect_answer(answer, r.code, &[l]));
            n.map_or(FirstRequest::NoRule, FirstRequest::Answer)
        }
        HttpAction::Direct { status, body } => {
            direct_answer(answer, *status, body).map_or(FirstRequest::NoRule, FirstRequest::Answer)
        }
    }
}

/// Writes a direct answer: `status` with its reason phrase, `Content-Length`,
/// `Connection: close`, `body` (the proxy's writer: one format for sluice's answers).
pub(crate) fn direct_answer(out: &mut [u8], status: u16, body: &[u8]) -> Option<usize> {
    crate::http::write_local_response(out, status, &[], body, false, true)
}

/// The method and the query (after `?`, empty if none) of the request line in `bytes`.
pub(crate) fn request_line(bytes: &[u8]) -> (&str, &str) {
    let line = bytes.split(|&b| b == b'\n').next().unwrap_or(&[]);
    let mut parts = line.split(|&b| b == b' ');
    let method = std::str::from_utf8(parts.next().unwrap_or(b"")).unwrap_or("");
    let target = std::str::from_utf8(parts.next().unwrap_or(b"")).unwrap_or("");
    (method, target.split_once('?').map_or("", |(_, q)| q))
}
