//! Where a terminated connection goes: for TLS listeners whose stream is opaque TCP, the
//! listener's route for the SNI and its Maglev pick, once per connection; for HTTP
//! (plain, or HTTPS after the handshake), the route for each request's host, whose rules
//! `proxy/` matches request by request.

use crate::flow::Tuple;
use crate::splice::plan::{pick_backend, Plan};
use crate::tables::listeners::{ListenerEntry, ListenerKind, RouteEntry};
use crate::tables::snapshot::Snapshot;
use crate::wire::ip_proto;
use std::net::SocketAddr;

/// The decision for a TLS connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decision {
    /// No route for the name (or the listener went away): the client is reset.
    NoRoute,
    /// Connect this backend (`None`: the pick was a reject slot).
    Connect(Option<SocketAddr>),
}

/// The listener sluice ends connections for at a virtual address in `snap` (`ours`: the
/// address is one of sluice's own, so any-address listeners apply): a TLS-terminating
/// one, or a plain HTTP one served per request.
pub(super) fn listener(snap: &Snapshot, vip: SocketAddr, ours: bool) -> Option<&ListenerEntry> {
    let l = if ours {
        snap.listeners.lookup(vip.ip(), vip.port(), ip_proto::TCP)
    } else {
        snap.listeners
            .lookup_bound(vip.ip(), vip.port(), ip_proto::TCP)
    }?;
    terminates(l).then_some(l)
}

/// Whether sluice ends a listener's connections itself (this engine): TLS termination,
/// or plain HTTP whose routes decide per request ([`ListenerEntry::proxy`]).
pub(crate) fn terminates(l: &ListenerEntry) -> bool {
    l.kind == ListenerKind::TlsTerminate || (l.kind == ListenerKind::Http && l.proxy)
}

/// The decision for the TLS connection `client` (its tuple as the client sent it), by
/// the `sni` the handshake gave; `tries` backends tried, the last `failed`.
pub(super) fn decide(
    snap: &Snapshot,
    client: Tuple,
    ours: bool,
    sni: Option<&str>,
    tries: u8,
    failed: Option<SocketAddr>,
) -> Decision {
    let vip = client.destination();
    let Some(l) = listener(snap, vip, ours) else {
        return Decision::NoRoute;
    };
    // The SNI (none: the catch-all) picks the route.
    let name = sni.map(str::as_bytes).unwrap_or(b"");
    let Some(route) = l
        .route(name)
        .and_then(|i| snap.listeners.route(i))
        .filter(|r| r.applies_to(vip.ip()))
    else {
        return Decision::NoRoute;
    };
    match pick_backend(
        route.table_for(vip.is_ipv6()),
        client.source(),
        vip,
        tries,
        failed,
    ) {
        Plan::Connect { backend, .. } => Decision::Connect(backend),
        _ => Decision::Connect(None),
    }
}

/// The route (and its index) for an HTTP request with this `authority` (Host) on the
/// listener at `vip`: the host without its port, lower case, without a trailing dot,
/// through the listener's host matcher.
pub(super) fn http_route<'s>(
    snap: &'s Snapshot,
    vip: SocketAddr,
    ours: bool,
    authority: &str,
) -> Option<(u32, &'s RouteEntry)> {
    let l = listener(snap, vip, ours)?;
    let mut buf = [0u8; 256];
    let host = host_of(authority, &mut buf)?;
    let i = l.route(host)?;
    let r = snap.listeners.route(i)?;
    r.applies_to(vip.ip()).then_some((i, r))
}

/// The host of an authority (`host[:port]`, `[v6]:port`), lower case and without a
/// trailing dot, in `buf`; `None` when it does not fit or is malformed.
pub(super) fn host_of<'b>(authority: &str, buf: &'b mut [u8; 256]) -> Option<&'b [u8]> {
    let a = authority.as_bytes();
    let host = if a.first() == Some(&b'[') {
        let end = a.iter().position(|&b| b == b']')?;
        a.get(..=end)?
    } else {
        match a.iter().rposition(|&b| b == b':') {
            Some(at) => a.get(..at)?,
            None => a,
        }
    };
    let host = host.strip_suffix(b".").unwrap_or(host);
    let out = buf.get_mut(..host.len())?;
    for (o, b) in out.iter_mut().zip(host) {
        *o = b.to_ascii_lowercase();
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn host_of_strips_port_case_and_dot() {
        let mut b = [0u8; 256];
        assert_eq!(
            host_of("Shop.Example.COM:8080", &mut b),
            Some(&b"shop.example.com"[..])
        );
        assert_eq!(host_of("a.example.", &mut b), Some(&b"a.example"[..]));
        assert_eq!(host_of("[::1]:80", &mut b), Some(&b"[::1]"[..]));
        assert_eq!(host_of("", &mut b), Some(&b""[..]));
        assert_eq!(host_of(&"a".repeat(300), &mut b), None);
        assert_eq!(host_of("[::1", &mut b), None);
    }
}
