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
    /// Client certificate verification (Istio `MUTUAL`, `OPTIONAL_MUTUAL`,
    /// `ISTIO_MUTUAL`; Gateway API `frontendValidation`); `None` = no client
    /// certificate is requested.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<ClientAuth>,
}

impl ClientAuth {
    /// What a handshake checks, the trust's source aside (listeners sharing a port
    /// compare the CA certificates themselves: `compile/merge.rs`).
    pub fn policy(&self) -> (bool, &[String], &[String], &[String]) {
        (
            self.optional,
            &self.subject_alt_names,
            &self.spki,
            &self.hash,
        )
    }
}

/// How a terminating listener verifies client certificates: what the manifest says
/// (the CA certificates and CRLs themselves are loaded with the server certificates,
/// `compile/certs`, and attached to the members).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ClientAuth {
    /// A client without a certificate is let in (`OPTIONAL_MUTUAL`); one that presents
    /// a certificate is verified all the same.
    pub optional: bool,
    /// Where the CA certificates come from (files, `Secret ns/name`, `ConfigMap
    /// ns/name`, the Appliance's `istioMutual`).
    pub trust: Vec<String>,
    /// `subjectAltNames`: one SAN of the client certificate must be one of these.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub subject_alt_names: Vec<String>,
    /// `verifyCertificateSpki` (base64 SHA-256 of the SubjectPublicKeyInfo).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub spki: Vec<String>,
    /// `verifyCertificateHash` (hex SHA-256 of the certificate).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hash: Vec<String>,
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
            && self.client.as_ref().map(ClientAuth::policy)
                == other.client.as_ref().map(ClientAuth::policy)
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
    /// The CA certificates and CRLs its client certificates are verified with
    /// (terminating listeners with [`ClientAuth`]).
    #[serde(skip)]
    pub client_trust: Option<std::sync::Arc<super::certs::ClientTrust>>,
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

/// A condition on a string field of an HTTP request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StringMatch {
    /// Equal.
    Exact(String),
    /// Starts with (Istio `prefix`).
    Prefix(String),
    /// Gateway API `PathPrefix`: path-segment-wise, stored without a trailing `/`.
    PathPrefix(String),
    /// The whole value matches this RE2 expression (validated when compiled).
    Regex(String),
    /// Present, any value.
    Present,
}

/// A header condition (name lower case; `invert`: Istio `withoutHeaders`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeaderMatch {
    /// Lower-case name.
    pub name: String,
    /// Condition on the first line's value.
    pub value: StringMatch,
    /// The condition must not hold.
    pub invert: bool,
}

/// A query-parameter condition (name compared exactly, first occurrence).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueryMatch {
    /// Name.
    pub name: String,
    /// Condition on the value.
    pub value: StringMatch,
}

/// The conditions of one match (ANDed); see `sluice_dataplane::tables::http::RequestMatch`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HttpMatch {
    /// On the path.
    pub path: Option<StringMatch>,
    /// Exact and prefix path conditions compare ASCII case-insensitively.
    pub ignore_case: bool,
    /// Method.
    pub method: Option<String>,
    /// On the scheme.
    pub scheme: Option<StringMatch>,
    /// On the authority.
    pub authority: Option<StringMatch>,
    /// Header conditions.
    pub headers: Vec<HeaderMatch>,
    /// Query conditions.
    pub query: Vec<QueryMatch>,
    /// The listener port.
    pub port: Option<u16>,
    /// Client address prefixes (empty = any).
    pub sources: Vec<ipnet::IpNet>,
}

impl HttpMatch {
    /// Whether it has no condition.
    pub fn is_unconditional(&self) -> bool {
        *self == HttpMatch::default()
    }
}

/// Header changes: set, add, remove (names as given; remove lower case).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HeaderOps {
    /// Replace.
    pub set: Vec<(String, String)>,
    /// Append.
    pub add: Vec<(String, String)>,
    /// Remove.
    pub remove: Vec<String>,
}

impl HeaderOps {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.add.is_empty() && self.remove.is_empty()
    }
}

/// A path rewrite (see `sluice_dataplane::tables::http::PathRewrite`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PathRewrite {
    /// The whole path.
    Full(String),
    /// The matched prefix.
    Prefix(String),
    /// Every match of the expression, with `\1` references.
    Regex {
        /// RE2 expression.
        regex: String,
        /// Replacement.
        replacement: String,
    },
}

/// A change of the request before forwarding.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Rewrite {
    /// Path.
    pub path: Option<PathRewrite>,
    /// Authority.
    pub authority: Option<String>,
}

/// How a redirect's port is chosen (see `sluice_dataplane::tables::http::RedirectPort`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RedirectPort {
    /// The request's.
    Keep,
    /// This one.
    Port(u16),
    /// The scheme's default (none written).
    SchemeDefault,
    /// The listener's.
    Listener,
}

/// An HTTP redirect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Redirect {
    /// Status code.
    pub code: u16,
    /// New scheme.
    pub scheme: Option<String>,
    /// New host (no port).
    pub host: Option<String>,
    /// Port.
    pub port: RedirectPort,
    /// New path: `Full` or `Prefix` (never `Regex`).
    pub path: Option<PathRewrite>,
}

/// What a rule does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HttpAction {
    /// Forward to weighted backends; a request given to an invalid one is answered with
    /// `invalid_status` (Gateway API 500, Istio 503), as is a rule with no backend.
    Forward {
        /// Backends.
        backends: Vec<Backend>,
        /// The answer for invalid backends.
        invalid_status: u16,
    },
    /// Redirect.
    Redirect(Redirect),
    /// Direct answer.
    Direct {
        /// Status.
        status: u16,
        /// Body.
        body: Vec<u8>,
    },
}

/// Retries (see `sluice_dataplane::tables::http::Retries`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Retries {
    /// Further attempts.
    pub attempts: u8,
    /// Per-attempt deadline, ms (0 = the route's).
    pub per_try_timeout_ms: u64,
    /// `connect-failure`.
    pub connect_failure: bool,
    /// `refused-stream` / `reset`.
    pub reset: bool,
    /// `5xx`.
    pub server_error: bool,
    /// `gateway-error`.
    pub gateway_error: bool,
}

/// A mirror: a share of requests copied to other backends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mirror {
    /// Backends (one).
    pub backends: Vec<Backend>,
    /// Millionths of requests.
    pub per_million: u32,
}

/// One HTTP rule: what matching requests get.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HttpRule {
    /// `VirtualService ns/name http[i]` or `HTTPRoute ns/name rules[i]` (with its name).
    pub name: String,
    /// The action.
    pub action: HttpAction,
    /// Request rewrite.
    pub rewrite: Rewrite,
    /// Request header changes.
    pub request_headers: HeaderOps,
    /// Response header changes.
    pub response_headers: HeaderOps,
    /// Whole-request deadline, ms (0 = none).
    pub timeout_ms: u64,
    /// Retries.
    pub retries: Retries,
    /// Mirrors.
    pub mirrors: Vec<Mirror>,
}

impl HttpRule {
    /// A rule that forwards to `backends` and changes nothing.
    pub fn forward(name: String, backends: Vec<Backend>, invalid_status: u16) -> HttpRule {
        HttpRule {
            name,
            action: HttpAction::Forward {
                backends,
                invalid_status,
            },
            rewrite: Rewrite::default(),
            request_headers: HeaderOps::default(),
            response_headers: HeaderOps::default(),
            timeout_ms: 0,
            retries: Retries::default(),
            mirrors: Vec::new(),
        }
    }

    /// Whether a connection's first request decides for the whole connection: a plain
    /// forward (no header changes, rewrite, timeout, retries, mirrors) or an answer.
    pub fn once_per_connection(&self) -> bool {
        match self.action {
            HttpAction::Forward { .. } => {
                self.rewrite == Rewrite::default()
                    && self.request_headers.is_empty()
                    && self.response_headers.is_empty()
                    && self.timeout_ms == 0
                    && self.retries == Retries::default()
                    && self.mirrors.is_empty()
            }
            HttpAction::Redirect(_) | HttpAction::Direct { .. } => true,
        }
    }

    /// Every backend the rule names (its action's and its mirrors').
    pub fn backends(&self) -> impl Iterator<Item = &Backend> {
        let own: &[Backend] = match &self.action {
            HttpAction::Forward { backends, .. } => backends,
            _ => &[],
        };
        own.iter()
            .chain(self.mirrors.iter().flat_map(|m| m.backends.iter()))
    }
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
    /// HTTP matches in precedence order, each naming a rule of `http` (first that holds
    /// wins; none: the proxy answers 404).
    pub http_matches: Vec<(HttpMatch, usize)>,
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
