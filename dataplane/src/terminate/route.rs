//! Where a terminated connection goes once its handshake is done: the listener's route
//! for the SNI (TLS) or for the first request head's Host and path (HTTPS), then the
//! route's Maglev pick, as delayed binding decides for its first bytes.

use crate::flow::Tuple;
use crate::inspect::http;
use crate::splice::plan::{first_request, pick_backend, request_line, FirstRequest, Plan};
use crate::splice::{inspect, Verdict};
use crate::stats::{Counters, Event};
use crate::tables::http::Request;
use crate::tables::listeners::{ListenerEntry, ListenerKind};
use crate::tables::snapshot::Snapshot;
use crate::wire::ip_proto;
use std::net::SocketAddr;

/// The largest answer sluice writes itself (a redirect).
pub(super) const ANSWER_MAX: usize = 1200;

/// The decision for a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decision {
    /// The request head is not complete yet.
    NeedMore,
    /// No route for the name (or the listener went away): the client is reset.
    NoRoute,
    /// sluice answers itself (this many bytes of the answer buffer), then closes.
    Answer(usize),
    /// Connect this backend (`None`: the pick was a reject slot).
    Connect(Option<SocketAddr>),
}

/// The terminating listener for a virtual address in `snap` (`ours`: the address is one
/// of sluice's own, so any-address listeners apply).
pub(super) fn listener(snap: &Snapshot, vip: SocketAddr, ours: bool) -> Option<&ListenerEntry> {
    let l = if ours {
        snap.listeners.lookup(vip.ip(), vip.port(), ip_proto::TCP)
    } else {
        snap.listeners
            .lookup_bound(vip.ip(), vip.port(), ip_proto::TCP)
    }?;
    (l.kind == ListenerKind::TlsTerminate).then_some(l)
}

/// Whether `head` holds a whole request head (or is not one at all).
pub(super) fn head_complete(head: &[u8]) -> bool {
    !matches!(http::parse(head), http::Outcome::NeedMore { .. })
}

/// The decision for the connection `client` (its tuple as the client sent it): `sni`
/// as the handshake gave it, `head` the request head read so far (HTTPS listeners;
/// `None` for TLS ones), `end` when no more of it will come; `tries` backends tried,
/// the last `failed`.
#[allow(clippy::too_many_arguments)]
pub(super) fn decide(
    snap: &Snapshot,
    client: Tuple,
    ours: bool,
    sni: Option<&str>,
    head: Option<&[u8]>,
    end: bool,
    tries: u8,
    failed: Option<SocketAddr>,
    answer: &mut [u8],
    counters: &mut Counters,
) -> Decision {
    let vip = client.destination();
    let src = client.source();
    let Some(l) = listener(snap, vip, ours) else {
        return Decision::NoRoute;
    };
    let connect = |p: Plan| match p {
        Plan::Connect { backend, .. } => Decision::Connect(backend),
        _ => Decision::Connect(None),
    };
    let Some(bytes) = head else {
        // TLS: the SNI (none: the catch-all) picks the route.
        let name = sni.map(str::as_bytes).unwrap_or(b"");
        let Some(route) = l
            .route(name)
            .and_then(|i| snap.listeners.route(i))
            .filter(|r| r.applies_to(vip.ip()))
        else {
            return Decision::NoRoute;
        };
        let table = route.table_for(vip.is_ipv6());
        return connect(pick_backend(table, src, vip, tries, failed));
    };
    let end_why = end.then_some(Event::FirstBytesOverflow);
    match inspect(ListenerKind::Http, false, bytes, end_why) {
        Verdict::NeedMore(_) => Decision::NeedMore,
        Verdict::HttpsRedirect { .. } => Decision::NoRoute,
        Verdict::Route { name, path, why } => {
            if let Some(w) = why {
                counters.event(w);
            }
            let host = name.as_ref().map_or("", |n| n.as_str());
            let Some(route) = l
                .route(host.as_bytes())
                .and_then(|i| snap.listeners.route(i))
                .filter(|r| r.applies_to(vip.ip()))
            else {
                return Decision::NoRoute;
            };
            if route.http.is_empty() {
                let table = route.table_for(vip.is_ipv6());
                return connect(pick_backend(table, src, vip, tries, failed));
            }
            let (method, query) = request_line(bytes);
            let req = Request {
                method,
                scheme: "https",
                authority: host,
                path,
                query,
                headers: &[],
                port: vip.port(),
                source: src.ip(),
            };
            match first_request(route, &req, vip.is_ipv6(), answer) {
                FirstRequest::NoRule => Decision::NoRoute,
                FirstRequest::Answer(n) => Decision::Answer(n),
                FirstRequest::Table(t) => connect(pick_backend(t, src, vip, tries, failed)),
            }
        }
    }
}
