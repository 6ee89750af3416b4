//! Listeners and routes, as the dataplane looks them up for a new flow:
//! `(destination address, port, protocol) -> listener -> (host name) -> route ->
//! Maglev table -> backend or reject`.
//!
//! A listener bound to no address (a Gateway without addresses on an appliance without
//! virtual addresses) matches every destination address on its port; one bound to
//! addresses is tried first. Host routing uses the compiled [`HostMatcher`] (exact, then
//! the longest wildcard suffix, then the catch-all). Built once by the control plane
//! ([`ListenerTable::build`]); lookups take no lock and allocate nothing.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::hosts::{BuildError as HostBuildError, HostMatcher};
use super::http::HttpRoutes;
use super::maglev::{flow_hash, MaglevTable, Pick};
use super::tls::TlsListener;

/// What a listener does with a new connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListenerKind {
    /// Opaque TCP: route by port.
    Tcp,
    /// UDP: route by port.
    Udp,
    /// TLS passthrough: route by SNI (delayed binding).
    TlsPassthrough,
    /// TLS passthrough with the destination encoded in the SNI.
    TlsAutoPassthrough,
    /// TLS terminated by sluice.
    TlsTerminate,
    /// Plain HTTP: route by Host.
    Http,
}

impl ListenerKind {
    /// Whether the route depends on the connection's first bytes (SNI or Host), so the
    /// flow needs delayed binding rather than an immediate backend pick.
    pub fn routes_by_name(self) -> bool {
        !matches!(self, ListenerKind::Tcp | ListenerKind::Udp)
    }
}

/// A route: its name (for counters and `explain`), the subnets it is limited to, and its
/// Maglev table (TCP/TLS) or HTTP rules.
#[derive(Debug)]
pub struct RouteEntry {
    /// `Kind ns/name rule`, as the control plane names it.
    pub name: Box<str>,
    /// Destination subnets the route applies to (empty = all), as (network, prefix).
    pub subnets: Box<[(IpAddr, u8)]>,
    /// Where its connections go (TCP/TLS routes); for a dual-stack route, the IPv4
    /// endpoints' table.
    pub table: MaglevTable,
    /// For a dual-stack route, the IPv6 endpoints' table (full NAT keeps the family).
    pub table_v6: Option<MaglevTable>,
    /// HTTP rules and their matches in precedence order (HTTP routes; empty otherwise).
    pub http: HttpRoutes,
}

impl RouteEntry {
    /// The table for a connection to a virtual address of this family (TCP/TLS routes).
    #[inline]
    pub fn table_for(&self, dst_v6: bool) -> &MaglevTable {
        match (&self.table_v6, dst_v6) {
            (Some(t), true) => t,
            _ => &self.table,
        }
    }

    /// Whether the route applies to this destination address.
    pub fn applies_to(&self, dst: IpAddr) -> bool {
        self.subnets.is_empty()
            || self
                .subnets
                .iter()
                .any(|&(net, len)| in_prefix(dst, net, len))
    }

    /// The backend (or reject) for a flow.
    #[inline]
    pub fn pick(&self, src: SocketAddr, dst: SocketAddr, proto: u8) -> Pick {
        self.table_for(dst.is_ipv6())
            .pick(flow_hash(src, dst, proto))
    }
}

fn in_prefix(a: IpAddr, net: IpAddr, len: u8) -> bool {
    let (a, n, bits) = match (a, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => (u128::from(u32::from(a)), u128::from(u32::from(n)), 32),
        (IpAddr::V6(a), IpAddr::V6(n)) => (u128::from(a), u128::from(n), 128),
        _ => return false,
    };
    let len = u32::from(len).min(bits);
    if len == 0 {
        return true;
    }
    let shift = bits - len;
    (a >> shift) == (n >> shift)
}

/// A listener: its kind and how it picks a route.
#[derive(Debug)]
pub struct ListenerEntry {
    /// `Kind ns/name listener`, as the control plane names it.
    pub name: Box<str>,
    /// What it does.
    pub kind: ListenerKind,
    /// Host pattern -> route index (for TCP/UDP, only a catch-all).
    pub hosts: HostMatcher,
    /// Plain HTTP answered with a redirect to https.
    pub https_redirect: bool,
    /// Transparent: forward without source NAT (sluice is the backends' gateway), so the
    /// backend sees the client's address.
    pub transparent: bool,
    /// TLS termination settings ([`ListenerKind::TlsTerminate`] only).
    pub tls: Option<Arc<TlsListener>>,
    /// This listener's HTTP requests are routed one by one by the proxy (each request
    /// of a connection looked up in its route's [`HttpRoutes`]). False only for a plain
    /// HTTP listener on which every route can decide exactly once per connection: each
    /// route has exactly one match, without conditions, and its rule either forwards
    /// with no header changes, no rewrite, no timeout, no retries and no mirrors, or
    /// answers (redirect, direct response) once and closes. Then delayed binding
    /// (splice) serves it. Always true for a terminating (HTTPS) listener with HTTP
    /// routes; false for listeners that carry no HTTP.
    pub proxy: bool,
}

/// A binding's route index that means "no route": the name belongs to a listener with no
/// route for it (listeners sharing a port are told apart by hostname first, so a name a
/// more specific listener claims must not fall through to another listener's routes).
/// (`u32::MAX` itself is the host matcher's own "no value".)
pub const NO_ROUTE: u32 = u32::MAX - 1;

impl ListenerEntry {
    /// The route for a connection naming `host` (or none: empty slice), if any.
    #[inline]
    pub fn route(&self, host: &[u8]) -> Option<u32> {
        self.hosts.lookup(host).filter(|&r| r != NO_ROUTE)
    }
}

/// Transport protocol numbers used as keys.
pub mod proto {
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
}

/// The build input of one listener.
#[derive(Debug, Clone)]
pub struct ListenerSpec {
    /// Name.
    pub name: String,
    /// Addresses (empty = any local address).
    pub addresses: Vec<IpAddr>,
    /// Port.
    pub port: u16,
    /// IP protocol number.
    pub proto: u8,
    /// Kind.
    pub kind: ListenerKind,
    /// `(host pattern, route index)`; `*` is the catch-all.
    pub bindings: Vec<(String, u32)>,
    /// httpsRedirect.
    pub https_redirect: bool,
    /// No source NAT (see [`ListenerEntry::transparent`]).
    pub transparent: bool,
    /// TLS termination settings (see [`ListenerEntry::tls`]).
    pub tls: Option<Arc<TlsListener>>,
    /// Routed per request by the proxy (see [`ListenerEntry::proxy`]).
    pub proxy: bool,
}

/// Why the listener table could not be built.
#[derive(Debug)]
#[non_exhaustive]
pub enum BuildError {
    /// A listener's host patterns do not compile.
    Hosts {
        /// The listener.
        listener: String,
        /// Why.
        error: HostBuildError,
    },
    /// Two listeners claim the same address, port and protocol.
    Conflict {
        /// The key, printed.
        key: String,
    },
    /// A binding names a route that does not exist.
    NoSuchRoute {
        /// The listener.
        listener: String,
        /// The index.
        route: u32,
    },
}

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BuildError::Hosts { listener, error } => write!(f, "{listener}: {error}"),
            BuildError::Conflict { key } => write!(f, "two listeners on {key}"),
            BuildError::NoSuchRoute { listener, route } => {
                write!(f, "{listener}: route {route} does not exist")
            }
        }
    }
}

impl std::error::Error for BuildError {}

/// Listeners by (address, port, protocol), and the routes they lead to.
#[derive(Debug, Default)]
pub struct ListenerTable {
    bound: HashMap<(IpAddr, u16, u8), u32>,
    any: HashMap<(u16, u8), u32>,
    listeners: Vec<ListenerEntry>,
    routes: Vec<RouteEntry>,
}

impl ListenerTable {
    /// Compiles listeners and routes (route indices in bindings refer to `routes`).
    pub fn build(
        specs: Vec<ListenerSpec>,
        routes: Vec<RouteEntry>,
    ) -> Result<ListenerTable, BuildError> {
        let mut t = ListenerTable {
            routes,
            ..ListenerTable::default()
        };
        for spec in specs {
            if let Some(&(_, route)) = spec
                .bindings
                .iter()
                .find(|(_, r)| *r != NO_ROUTE && *r as usize >= t.routes.len())
            {
                return Err(BuildError::NoSuchRoute {
                    listener: spec.name,
                    route,
                });
            }
            let hosts = HostMatcher::from_strs(spec.bindings.iter().map(|(h, r)| (h.as_str(), *r)))
                .map_err(|error| BuildError::Hosts {
                    listener: spec.name.clone(),
                    error,
                })?;
            let index = t.listeners.len() as u32;
            if spec.addresses.is_empty() {
                if t.any.insert((spec.port, spec.proto), index).is_some() {
                    return Err(BuildError::Conflict {
                        key: format!("*:{}/{}", spec.port, spec.proto),
                    });
                }
            } else {
                for a in &spec.addresses {
                    if t.bound.insert((*a, spec.port, spec.proto), index).is_some() {
                        return Err(BuildError::Conflict {
                            key: format!("{}/{}", SocketAddr::new(*a, spec.port), spec.proto),
                        });
                    }
                }
            }
            t.listeners.push(ListenerEntry {
                name: spec.name.into_boxed_str(),
                kind: spec.kind,
                hosts,
                https_redirect: spec.https_redirect,
                transparent: spec.transparent,
                tls: spec.tls,
                proxy: spec.proxy,
            });
        }
        Ok(t)
    }

    /// The listener bound to exactly this address, port and protocol (not the any-address
    /// ones: those only apply to traffic addressed to sluice itself).
    #[inline]
    pub fn lookup_bound(&self, dst: IpAddr, port: u16, proto: u8) -> Option<&ListenerEntry> {
        let i = *self.bound.get(&(dst, port, proto))?;
        self.listeners.get(i as usize)
    }

    /// The listener for a destination, if any: one bound to the address first, then one
    /// bound to any address.
    #[inline]
    pub fn lookup(&self, dst: IpAddr, port: u16, proto: u8) -> Option<&ListenerEntry> {
        let i = match self.bound.get(&(dst, port, proto)) {
            Some(i) => *i,
            None => *self.any.get(&(port, proto))?,
        };
        self.listeners.get(i as usize)
    }

    /// A route by index.
    #[inline]
    pub fn route(&self, index: u32) -> Option<&RouteEntry> {
        self.routes.get(index as usize)
    }

    /// Number of listeners.
    pub fn len(&self) -> usize {
        self.listeners.len()
    }

    /// Whether there is no listener.
    pub fn is_empty(&self) -> bool {
        self.listeners.is_empty()
    }

    /// Every route.
    pub fn routes(&self) -> &[RouteEntry] {
        &self.routes
    }

    /// Gives every HTTP rule its counter slot, `slot(name)` (the control plane's
    /// registry does, before it publishes the tables; nothing changes afterwards).
    pub fn set_rule_counters(&mut self, mut slot: impl FnMut(&str) -> u32) {
        for rule in self.routes.iter_mut().flat_map(|r| r.http.rules.iter_mut()) {
            rule.counter = slot(&rule.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::maglev::{Entry, EntryTarget};
    use super::*;

    fn route(name: &str, backend: &str) -> RouteEntry {
        RouteEntry {
            name: name.into(),
            subnets: Box::new([]),
            table: MaglevTable::build(
                &[Entry {
                    target: EntryTarget::Backend(backend.parse().expect("addr")),
                    weight: 1,
                }],
                7,
            )
            .expect("table"),
            table_v6: None,
            http: HttpRoutes::default(),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn bound_listeners_win_over_any_address() {
        let t = ListenerTable::build(
            vec![
                ListenerSpec {
                    name: "any".into(),
                    addresses: vec![],
                    port: 443,
                    proto: proto::TCP,
                    kind: ListenerKind::TlsPassthrough,
                    bindings: vec![("*.example.com".into(), 0), ("a.example.com".into(), 1)],
                    https_redirect: false,
                    transparent: false,
                    tls: None,
                    proxy: false,
                },
                ListenerSpec {
                    name: "vip".into(),
                    addresses: vec![ip("192.0.2.10")],
                    port: 443,
                    proto: proto::TCP,
                    kind: ListenerKind::Tcp,
                    bindings: vec![("*".into(), 2)],
                    https_redirect: false,
                    transparent: false,
                    tls: None,
                    proxy: false,
                },
            ],
            vec![
                route("wild", "10.0.0.1:1"),
                route("exact", "10.0.0.2:1"),
                route("tcp", "10.0.0.3:1"),
            ],
        )
        .expect("build");
        let l = t
            .lookup(ip("192.0.2.10"), 443, proto::TCP)
            .expect("listener");
        assert_eq!(&*l.name, "vip");
        assert_eq!(l.route(b""), Some(2));
        let l = t
            .lookup(ip("192.0.2.99"), 443, proto::TCP)
            .expect("listener");
        assert_eq!(&*l.name, "any");
        assert_eq!(l.route(b"A.Example.com"), Some(1));
        assert_eq!(l.route(b"b.example.com"), Some(0));
        assert_eq!(l.route(b"example.com"), None);
        assert_eq!(l.route(b""), None);
        assert!(t.lookup(ip("192.0.2.10"), 443, proto::UDP).is_none());
        let r = t.route(1).expect("route");
        assert_eq!(
            r.pick(
                "1.1.1.1:1".parse().expect("a"),
                "192.0.2.99:443".parse().expect("a"),
                6
            ),
            Pick::Backend("10.0.0.2:1".parse().expect("a"))
        );
    }

    #[test]
    fn conflicts_and_bad_routes_are_errors() {
        let spec = |port| ListenerSpec {
            name: "l".into(),
            addresses: vec![ip("192.0.2.1")],
            port,
            proto: proto::TCP,
            kind: ListenerKind::Tcp,
            bindings: vec![("*".into(), 0)],
            https_redirect: false,
            transparent: false,
            tls: None,
            proxy: false,
        };
        assert!(matches!(
            ListenerTable::build(vec![spec(1), spec(1)], vec![route("r", "10.0.0.1:1")]),
            Err(BuildError::Conflict { .. })
        ));
        assert!(matches!(
            ListenerTable::build(vec![spec(1)], vec![]),
            Err(BuildError::NoSuchRoute { .. })
        ));
    }

    #[test]
    fn subnets_limit_a_route() {
        let mut r = route("r", "10.0.0.1:1");
        r.subnets = Box::new([(ip("192.0.2.0"), 24), (ip("fd00::"), 8)]);
        assert!(r.applies_to(ip("192.0.2.77")));
        assert!(!r.applies_to(ip("192.0.3.1")));
        assert!(r.applies_to(ip("fdff::1")));
        assert!(!r.applies_to(ip("fe80::1")));
    }
}
