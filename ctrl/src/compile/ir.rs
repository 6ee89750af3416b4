//! The resolved intermediate representation: namespaces and references are gone; what
//! is left is listeners (address, port, protocol, kind, TLS), routes with host patterns
//! and weighted backends resolved to endpoint `ip:port` (or *invalid*, with the reason),
//! workloads and policies. The table builders of the dataplane read only this.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use serde::Serialize;

use crate::model::appliance::ApplianceSpec;
use crate::model::netpol::NetworkPolicySpec;

/// Transport protocol of a listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum L4 {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

/// What a listener does with a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ListenerKind {
    /// Opaque TCP, routed by port (and destination subnet).
    Tcp,
    /// UDP, routed by port.
    Udp,
    /// TLS passed through, routed by SNI.
    TlsPassthrough,
    /// TLS passed through; the destination is encoded in the SNI
    /// (`outbound_.<port>_.<subset>_.<host>`).
    TlsAutoPassthrough,
    /// TLS terminated, then routed as TCP (Istio TLS+SIMPLE) or HTTP (HTTPS).
    TlsTerminate,
    /// Plain HTTP/1, routed by Host and path.
    Http,
}

impl ListenerKind {
    /// Whether the listener routes by the first bytes of the connection.
    pub fn inspects(self) -> bool {
        !matches!(self, ListenerKind::Tcp | ListenerKind::Udp)
    }
}

/// TLS termination settings of a listener.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TlsTerminate {
    /// Istio mode (`SIMPLE`, `MUTUAL`, `OPTIONAL_MUTUAL`, `ISTIO_MUTUAL`) or `Terminate`.
    pub mode: String,
    /// Where certificates come from: Secret names (`ns/name`) or file paths.
    pub certificates: Vec<String>,
    /// Whether client certificates are required.
    pub require_client_cert: bool,
    /// Whether the terminated stream is HTTP (routed by Host) or opaque TCP.
    pub http: bool,
    /// TLS 1.3 only (Istio `minProtocolVersion: TLSV1_3`).
    pub min_tls13: bool,
    /// TLS 1.2 only (Istio `maxProtocolVersion: TLSV1_2`).
    pub max_tls12: bool,
    /// The TLS 1.2 cipher suites allowed (Istio `cipherSuites`, OpenSSL names); empty =
    /// every suite of the provider.
    pub cipher_suites: Vec<String>,
}

impl TlsTerminate {
    /// Whether two listeners with these settings can share a port: the same handshake
    /// settings and the same kind of stream after it (certificates may differ: they are
    /// chosen per member by SNI).
    pub fn shares_with(&self, other: &TlsTerminate) -> bool {
        self.http == other.http
            && self.require_client_cert == other.require_client_cert
            && self.min_tls13 == other.min_tls13
            && self.max_tls12 == other.max_tls12
            && self.cipher_suites == other.cipher_suites
    }
}

/// A [`Binding::route`] that means "no route": the names of a more specific listener
/// sharing the port, for which it has no route (see `compile/merge.rs`).
pub const NO_ROUTE: usize = usize::MAX;

/// A host pattern bound to a route on a listener: exact, `*.suffix`, or `*`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Binding {
    /// Pattern, lower case.
    pub host: String,
    /// Index into [`Ir::routes`], or [`NO_ROUTE`].
    pub route: usize,
}

/// One gateway listener (Gateway API) or server (Istio) of a [`Listener`]: several share
/// a listener when they share its address and port, told apart by hostname.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Member {
    /// `Kind ns/name listeners[i] (name)` or `... servers[i]`.
    pub name: String,
    /// Its hostnames (exact or `*.suffix`); empty = every name.
    pub hostnames: Vec<String>,
    /// (gateway object index, listener or server index) in the build's objects.
    #[serde(skip)]
    pub source: (usize, usize),
    /// Its certificates (terminating listeners), the default first; the SNI picks one
    /// (`sluice_dataplane::tables::tls::SniResolver`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub certificates: Vec<std::sync::Arc<super::certs::Certificate>>,
}

impl Member {
    /// The most specific of its hostnames that covers `pattern` (`*` when it has none),
    /// or `None` when none does.
    pub fn cover(&self, pattern: &str) -> Option<&str> {
        if self.hostnames.is_empty() {
            return Some("*");
        }
        self.hostnames
            .iter()
            .filter(|h| super::hostname::istio_subset_of(pattern, h))
            .min_by_key(|h| specificity(h))
            .map(String::as_str)
    }
}

/// Orders host patterns from most to least specific: exact names first, then wildcards
/// by longer suffix, `*` last.
pub fn specificity(pattern: &str) -> (u8, std::cmp::Reverse<usize>) {
    match pattern {
        "*" => (2, std::cmp::Reverse(0)),
        p if p.starts_with('*') => (1, std::cmp::Reverse(p.len())),
        p => (0, std::cmp::Reverse(p.len())),
    }
}

/// A listener: where connections arrive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Listener {
    /// `Kind ns/name` of the gateway and the server/listener within it.
    pub name: String,
    /// Addresses it binds; empty = every local and virtual address.
    pub addresses: Vec<IpAddr>,
    /// Port.
    pub port: u16,
    /// Transport.
    pub protocol: L4,
    /// What it does.
    pub kind: ListenerKind,
    /// Termination settings (TlsTerminate only).
    pub tls: Option<TlsTerminate>,
    /// Plain HTTP answered with a 301 to https.
    pub https_redirect: bool,
    /// Transparent: connections keep the client's source address towards the backend (no
    /// source NAT). Set for every listener of a gateway annotated
    /// `sluice.dev/source-nat: "false"` ([`SOURCE_NAT_ANNOTATION`](crate::model::meta::SOURCE_NAT_ANNOTATION)).
    pub transparent: bool,
    /// Host patterns -> routes (for TCP/UDP one `*` binding at most).
    pub bindings: Vec<Binding>,
    /// The gateway listeners or servers it serves (one, or several told apart by
    /// hostname), in precedence order.
    pub members: Vec<Member>,
}

/// Kinds of route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RouteKind {
    /// Opaque TCP/UDP.
    Tcp,
    /// TLS by SNI.
    Tls,
    /// HTTP by Host and path.
    Http,
}

/// A string match on an HTTP request field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StringMatch {
    /// Equal.
    Exact(String),
    /// Starts with.
    Prefix(String),
}

impl StringMatch {
    /// Whether `s` matches.
    pub fn matches(&self, s: &str) -> bool {
        match self {
            StringMatch::Exact(e) => s == e,
            StringMatch::Prefix(p) => s.starts_with(p.as_str()),
        }
    }
}

/// One HTTP rule: matches (any), then backends or a redirect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HttpRule {
    /// URI matches; empty = every request.
    pub uri: Vec<StringMatch>,
    /// Weighted backends.
    pub backends: Vec<Backend>,
    /// Redirect `(status, scheme, authority, path)` instead of forwarding.
    pub redirect: Option<Redirect>,
}

/// An HTTP redirect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Redirect {
    /// Status code (301 by default).
    pub code: u16,
    /// New scheme, if any.
    pub scheme: Option<String>,
    /// New authority, if any.
    pub authority: Option<String>,
    /// New path, if any.
    pub path: Option<String>,
}

/// A route: where connections that reach it go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Route {
    /// `Kind ns/name` and the rule within it (`tcp[0]`, `tls[1]`, ...).
    pub name: String,
    /// Kind.
    pub kind: RouteKind,
    /// Destination subnets the route is limited to (Istio `destinationSubnets`).
    pub destination_subnets: Vec<ipnet::IpNet>,
    /// Weighted backends (TCP/TLS).
    pub backends: Vec<Backend>,
    /// HTTP rules (HTTP routes).
    pub http: Vec<HttpRule>,
    /// Maglev table size for this route (prime).
    pub maglev_table_size: u64,
}

/// A weighted backend: a Service port (optionally a subset) resolved to endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Backend {
    /// `ns/service:port` (with `/subset` when one is named).
    pub name: String,
    /// Relative weight (0 gets nothing).
    pub weight: u32,
    /// The endpoints, or why the backend is invalid (its share is rejected).
    pub target: BackendTarget,
}

/// Endpoints of a backend, or the reason it is invalid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendTarget {
    /// Ready endpoints, sorted.
    Endpoints(Vec<SocketAddr>),
    /// Invalid: connections given to it are actively rejected.
    Invalid(String),
}

/// A workload (a pod address) for NetworkPolicy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Workload {
    /// Pod IP.
    pub ip: IpAddr,
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// Pod labels.
    pub labels: BTreeMap<String, String>,
    /// Named container ports: (name, protocol, number).
    pub named_ports: Vec<(String, crate::model::meta::Protocol, u16)>,
    /// Node the pod runs on.
    pub node: Option<String>,
}

/// A NetworkPolicy in its namespace (CIDRs normalised).
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The spec.
    pub spec: NetworkPolicySpec,
}

/// A node and its addresses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Node {
    /// Name.
    pub name: String,
    /// Addresses (InternalIP, ExternalIP).
    pub addresses: Vec<IpAddr>,
}

/// The whole resolved configuration.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ir {
    /// Listeners.
    pub listeners: Vec<Listener>,
    /// Routes (referred to by index from listener bindings).
    pub routes: Vec<Route>,
    /// Workloads.
    pub workloads: Vec<Workload>,
    /// Nodes.
    pub nodes: Vec<Node>,
    /// Namespace labels (with `kubernetes.io/metadata.name` added, as upstream).
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// NetworkPolicies.
    pub policies: Vec<Policy>,
    /// The Appliance, if one was given.
    pub appliance: Option<ApplianceSpec>,
    /// What the Gateway API routes attached to (for their status).
    pub attachment: super::status::Attachment,
    /// Hosts an object did not get because an object that precedes it holds them.
    pub shadowed: Vec<Shadowed>,
}

/// A host on a listener that one object wanted and another, preceding it, holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shadowed {
    /// The host pattern.
    pub host: String,
    /// `Kind ns/name` of the object that holds it.
    pub winner: String,
    /// `Kind ns/name` of the object that does not get it.
    pub loser: String,
}
