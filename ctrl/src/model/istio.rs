//! Istio `networking.istio.io` kinds: Gateway (seed 000), VirtualService, DestinationRule.
//!
//! Field names follow the protobuf JSON mapping (lowerCamelCase). Upstream fields that
//! sluice does not implement are not declared here; the loader reports them as warnings
//! (see [`crate::model::unimplemented_fields`]).

use std::collections::BTreeMap;

use serde::Deserialize;

/// `Gateway.spec`: a load balancer at the edge of the mesh.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GatewaySpec {
    /// The servers (listeners) of this gateway.
    #[serde(default)]
    pub servers: Vec<Server>,
    /// Pods this gateway configuration applies to (ignored by an appliance, which is
    /// the gateway itself; kept so cluster manifests load unchanged).
    #[serde(default)]
    pub selector: BTreeMap<String, String>,
}

/// One server: a port, the hosts it exposes and its TLS settings.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Server {
    /// The port the proxy listens on.
    pub port: Port,
    /// Address to bind to (an IP, or `unix://` which sluice rejects).
    #[serde(default)]
    pub bind: Option<String>,
    /// Hosts exposed, as `[namespace/]dnsName`.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// TLS settings; absent means plain text.
    #[serde(default)]
    pub tls: Option<ServerTlsSettings>,
    /// Loopback IP endpoint or unix socket for ingress sidecars (unused on appliances).
    #[serde(default)]
    pub default_endpoint: Option<String>,
    /// Optional server name, unique within the gateway.
    #[serde(default)]
    pub name: Option<String>,
}

/// `Port` of a server.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Port {
    /// A valid non-negative integer port number.
    #[serde(default)]
    pub number: u32,
    /// HTTP|HTTPS|GRPC|GRPC-WEB|HTTP2|MONGO|TCP|TLS.
    #[serde(default)]
    pub protocol: String,
    /// Label assigned to the port.
    #[serde(default)]
    pub name: String,
    /// Port on the endpoint where traffic is received (deprecated upstream).
    #[serde(default)]
    pub target_port: Option<u32>,
}

/// Istio `ServerTLSSettings`, every field of seed 000.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServerTlsSettings {
    /// Answer plain HTTP with a 301 redirect to https.
    #[serde(default)]
    pub https_redirect: bool,
    /// How the connection is secured; default PASSTHROUGH (enum value 0).
    #[serde(default)]
    pub mode: TlsMode,
    /// Path to the PEM server certificate.
    #[serde(default)]
    pub server_certificate: Option<String>,
    /// Path to the PEM private key.
    #[serde(default)]
    pub private_key: Option<String>,
    /// Path to the CA bundle for client certificates.
    #[serde(default)]
    pub ca_certificates: Option<String>,
    /// Path to the certificate revocation list.
    #[serde(default)]
    pub ca_crl: Option<String>,
    /// Name of the Secret holding key, certificate and CA.
    #[serde(default)]
    pub credential_name: Option<String>,
    /// Accepted subject alternative names of client certificates.
    #[serde(default)]
    pub subject_alt_names: Vec<String>,
    /// Accepted base64 SHA-256 SPKI hashes of client certificates.
    #[serde(default)]
    pub verify_certificate_spki: Vec<String>,
    /// Accepted hex SHA-256 certificate hashes of client certificates.
    #[serde(default)]
    pub verify_certificate_hash: Vec<String>,
    /// Minimum TLS version.
    #[serde(default)]
    pub min_protocol_version: TlsProtocol,
    /// Maximum TLS version.
    #[serde(default)]
    pub max_protocol_version: TlsProtocol,
    /// Cipher suites (OpenSSL names).
    #[serde(default)]
    pub cipher_suites: Vec<String>,
}

/// `ServerTLSSettings.TLSmode`.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TlsMode {
    /// Forward the connection as it is, routed by SNI.
    #[default]
    Passthrough,
    /// Terminate with a server certificate.
    Simple,
    /// Terminate and require a client certificate.
    Mutual,
    /// Passthrough where the destination is encoded in the SNI.
    AutoPassthrough,
    /// Terminate with Istio-generated certificates.
    IstioMutual,
    /// Terminate; verify a client certificate when one is offered.
    OptionalMutual,
}

impl TlsMode {
    /// The manifest spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TlsMode::Passthrough => "PASSTHROUGH",
            TlsMode::Simple => "SIMPLE",
            TlsMode::Mutual => "MUTUAL",
            TlsMode::AutoPassthrough => "AUTO_PASSTHROUGH",
            TlsMode::IstioMutual => "ISTIO_MUTUAL",
            TlsMode::OptionalMutual => "OPTIONAL_MUTUAL",
        }
    }
}

/// `ServerTLSSettings.TLSProtocol`.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsProtocol {
    /// Automatically choose.
    #[default]
    #[serde(rename = "TLS_AUTO")]
    Auto,
    /// TLS 1.0.
    #[serde(rename = "TLSV1_0")]
    V1_0,
    /// TLS 1.1.
    #[serde(rename = "TLSV1_1")]
    V1_1,
    /// TLS 1.2.
    #[serde(rename = "TLSV1_2")]
    V1_2,
    /// TLS 1.3.
    #[serde(rename = "TLSV1_3")]
    V1_3,
}

/// `VirtualService.spec`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VirtualServiceSpec {
    /// Destination hosts this service applies to.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Gateways (`[namespace/]name`, or `mesh`) the routes apply to.
    #[serde(default)]
    pub gateways: Vec<String>,
    /// Namespaces this service is visible in (`.` own, `*` all).
    #[serde(default)]
    pub export_to: Vec<String>,
    /// HTTP routes.
    #[serde(default)]
    pub http: Vec<HttpRoute>,
    /// TLS passthrough routes (by SNI).
    #[serde(default)]
    pub tls: Vec<TlsRoute>,
    /// Opaque TCP routes.
    #[serde(default)]
    pub tcp: Vec<TcpRoute>,
}

/// `HTTPRoute` of a VirtualService: rules are tried in order; the first whose matches
/// (ORed; none = every request) hold decides.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRoute {
    /// Route name, for logs and explain.
    #[serde(default)]
    pub name: Option<String>,
    /// Conditions; any one matching selects the route (empty = all).
    #[serde(default, rename = "match")]
    pub matches: Vec<HttpMatchRequest>,
    /// Weighted destinations.
    #[serde(default)]
    pub route: Vec<HttpRouteDestination>,
    /// Redirect instead of forwarding.
    #[serde(default)]
    pub redirect: Option<HttpRedirect>,
    /// Answer directly instead of forwarding.
    #[serde(default)]
    pub direct_response: Option<HttpDirectResponse>,
    /// Rewrite the request before forwarding.
    #[serde(default)]
    pub rewrite: Option<HttpRewrite>,
    /// Whole-request timeout (`10s`, `1.5s`, `500ms`).
    #[serde(default)]
    pub timeout: Option<String>,
    /// Retry policy.
    #[serde(default)]
    pub retries: Option<HttpRetry>,
    /// Mirror to this destination (with `mirrorPercentage`).
    #[serde(default)]
    pub mirror: Option<Destination>,
    /// Share of requests `mirror` gets (default 100).
    #[serde(default)]
    pub mirror_percentage: Option<Percent>,
    /// Several mirrors.
    #[serde(default)]
    pub mirrors: Vec<HttpMirrorPolicy>,
    /// Header changes of the rule.
    #[serde(default)]
    pub headers: Option<Headers>,
}

/// `HTTPMatchRequest`: conditions ANDed. Istio: "All conditions inside a single match
/// block have AND semantics, while the list of match blocks have OR semantics."
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpMatchRequest {
    /// Match name (prefixed to the rule's for explain).
    #[serde(default)]
    pub name: Option<String>,
    /// URI (path) match.
    #[serde(default)]
    pub uri: Option<StringMatch>,
    /// Scheme match.
    #[serde(default)]
    pub scheme: Option<StringMatch>,
    /// Method match.
    #[serde(default)]
    pub method: Option<StringMatch>,
    /// Host/authority match.
    #[serde(default)]
    pub authority: Option<StringMatch>,
    /// Header matches (keys lower case; an empty StringMatch = present).
    #[serde(default)]
    pub headers: BTreeMap<String, StringMatch>,
    /// Headers that must not match.
    #[serde(default)]
    pub without_headers: BTreeMap<String, StringMatch>,
    /// Query parameter matches (exact, prefix or regex; empty = present).
    #[serde(default)]
    pub query_params: BTreeMap<String, StringMatch>,
    /// `uri` exact/prefix compared case-insensitively ("the case will be ignored only in
    /// the case of exact and prefix URI matches").
    #[serde(default)]
    pub ignore_uri_case: bool,
    /// Port of the server the request arrived on.
    #[serde(default)]
    pub port: Option<u32>,
    /// Gateways this match applies to.
    #[serde(default)]
    pub gateways: Vec<String>,
    /// Namespace of the client workload.
    #[serde(default)]
    pub source_namespace: Option<String>,
}

/// `StringMatch`: exactly one of exact / prefix / regex (RE2, whole value).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct StringMatch {
    /// Exact string.
    #[serde(default)]
    pub exact: Option<String>,
    /// Prefix.
    #[serde(default)]
    pub prefix: Option<String>,
    /// RE2 expression.
    #[serde(default)]
    pub regex: Option<String>,
}

/// `HTTPRedirect`: "the port, scheme, authority and uri are replaced as given".
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRedirect {
    /// Replacement path (the whole path, however the request was matched).
    #[serde(default)]
    pub uri: Option<String>,
    /// Replacement authority.
    #[serde(default)]
    pub authority: Option<String>,
    /// Replacement port.
    #[serde(default)]
    pub port: Option<u32>,
    /// `FROM_PROTOCOL_DEFAULT` (80/443) or `FROM_REQUEST_PORT`.
    #[serde(default)]
    pub derive_port: Option<String>,
    /// Replacement scheme.
    #[serde(default)]
    pub scheme: Option<String>,
    /// Status code (default 301).
    #[serde(default)]
    pub redirect_code: Option<u32>,
}

/// `HTTPDirectResponse`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpDirectResponse {
    /// Status code.
    #[serde(default)]
    pub status: u32,
    /// Body.
    #[serde(default)]
    pub body: Option<HttpBody>,
}

/// `HTTPBody`: one of `string` or `bytes` (base64).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpBody {
    /// Text.
    #[serde(default)]
    pub string: Option<String>,
    /// Base64 bytes.
    #[serde(default)]
    pub bytes: Option<String>,
}

/// `HTTPRewrite`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRewrite {
    /// Replaces the matched prefix (prefix match) or the whole path.
    #[serde(default)]
    pub uri: Option<String>,
    /// Replaces the authority.
    #[serde(default)]
    pub authority: Option<String>,
    /// Rewrites the path with an expression.
    #[serde(default)]
    pub uri_regex_rewrite: Option<RegexRewrite>,
}

/// `RegexRewrite`: every match of `match` replaced by `rewrite` (`\1` groups).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RegexRewrite {
    /// RE2 expression.
    #[serde(default, rename = "match")]
    pub pattern: String,
    /// Replacement.
    #[serde(default)]
    pub rewrite: String,
}

/// `HTTPRetry`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRetry {
    /// Attempts (retries after the first).
    #[serde(default)]
    pub attempts: i64,
    /// Per-attempt timeout.
    #[serde(default)]
    pub per_try_timeout: Option<String>,
    /// Comma-separated Envoy retry conditions.
    #[serde(default)]
    pub retry_on: Option<String>,
    /// Retry on other localities (no meaning on an appliance).
    #[serde(default)]
    pub retry_remote_localities: Option<bool>,
}

/// `Percent`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Percent {
    /// 0..=100.
    #[serde(default)]
    pub value: f64,
}

/// `HTTPMirrorPolicy`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpMirrorPolicy {
    /// Destination.
    pub destination: Destination,
    /// Share (default 100).
    #[serde(default)]
    pub percentage: Option<Percent>,
}

/// `Headers`: request and response changes.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Headers {
    /// Request changes.
    #[serde(default)]
    pub request: Option<HeaderOperations>,
    /// Response changes.
    #[serde(default)]
    pub response: Option<HeaderOperations>,
}

/// `HeaderOperations`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HeaderOperations {
    /// Overwrite.
    #[serde(default)]
    pub set: BTreeMap<String, String>,
    /// Append.
    #[serde(default)]
    pub add: BTreeMap<String, String>,
    /// Remove.
    #[serde(default)]
    pub remove: Vec<String>,
}

/// `HTTPRouteDestination`: a destination, its weight, and (not served) its own header
/// changes.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteDestination {
    /// Where to send.
    pub destination: Destination,
    /// Relative weight.
    #[serde(default)]
    pub weight: Option<i64>,
    /// Per-destination header changes (not served: a rule's header changes are one
    /// set of operations, whatever backend the request goes to).
    #[serde(default)]
    pub headers: Option<Headers>,
}

impl HttpRouteDestination {
    /// As a plain destination with weight.
    pub fn plain(&self) -> RouteDestination {
        RouteDestination {
            destination: self.destination.clone(),
            weight: self.weight,
        }
    }
}

/// `TLSRoute` of a VirtualService.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TlsRoute {
    /// Conditions; any one matching selects the route.
    #[serde(default, rename = "match")]
    pub matches: Vec<TlsMatchAttributes>,
    /// Weighted destinations.
    #[serde(default)]
    pub route: Vec<RouteDestination>,
}

/// `TLSMatchAttributes`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TlsMatchAttributes {
    /// SNI values to match (wildcards allowed); required.
    #[serde(default)]
    pub sni_hosts: Vec<String>,
    /// Destination IPv4/IPv6 subnets.
    #[serde(default)]
    pub destination_subnets: Vec<String>,
    /// Server port.
    #[serde(default)]
    pub port: Option<u32>,
    /// Gateways this match applies to.
    #[serde(default)]
    pub gateways: Vec<String>,
}

/// `TCPRoute` of a VirtualService.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TcpRoute {
    /// Conditions; any one matching selects the route (empty = all).
    #[serde(default, rename = "match")]
    pub matches: Vec<L4MatchAttributes>,
    /// Weighted destinations.
    #[serde(default)]
    pub route: Vec<RouteDestination>,
}

/// `L4MatchAttributes`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct L4MatchAttributes {
    /// Destination IPv4/IPv6 subnets.
    #[serde(default)]
    pub destination_subnets: Vec<String>,
    /// Server port.
    #[serde(default)]
    pub port: Option<u32>,
    /// Labels of the source workload (only meaningful for sidecars; warned about).
    #[serde(default)]
    pub source_labels: BTreeMap<String, String>,
    /// Gateways this match applies to.
    #[serde(default)]
    pub gateways: Vec<String>,
}

/// `RouteDestination` / `HTTPRouteDestination`: a destination with a weight.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouteDestination {
    /// Where to send.
    pub destination: Destination,
    /// Relative weight; absent means the whole share of a single destination.
    #[serde(default)]
    pub weight: Option<i64>,
}

/// `Destination`: a service host, optional subset and port.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Destination {
    /// Service name (short, or FQDN `name.ns.svc.cluster.local`).
    #[serde(default)]
    pub host: String,
    /// Subset defined in a DestinationRule.
    #[serde(default)]
    pub subset: Option<String>,
    /// Port on the service.
    #[serde(default)]
    pub port: Option<PortSelector>,
}

/// `PortSelector`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PortSelector {
    /// Port number.
    #[serde(default)]
    pub number: u32,
}

/// `DestinationRule.spec`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DestinationRuleSpec {
    /// The service this rule applies to.
    #[serde(default)]
    pub host: String,
    /// Traffic policy for all subsets.
    #[serde(default)]
    pub traffic_policy: Option<TrafficPolicy>,
    /// Named label subsets of the service's endpoints.
    #[serde(default)]
    pub subsets: Vec<Subset>,
    /// Visibility.
    #[serde(default)]
    pub export_to: Vec<String>,
}

/// `TrafficPolicy`: sluice implements `loadBalancer`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TrafficPolicy {
    /// Load balancing settings.
    #[serde(default)]
    pub load_balancer: Option<LoadBalancerSettings>,
}

/// `LoadBalancerSettings`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerSettings {
    /// Simple policy (sluice always uses Maglev; other values warn in validation).
    #[serde(default)]
    pub simple: Option<String>,
    /// Consistent hashing settings.
    #[serde(default)]
    pub consistent_hash: Option<ConsistentHash>,
}

/// `ConsistentHashLB`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConsistentHash {
    /// Hash on the source IP.
    #[serde(default)]
    pub use_source_ip: Option<bool>,
    /// Maglev settings.
    #[serde(default)]
    pub maglev: Option<MaglevSettings>,
}

/// `ConsistentHashLB.MagLev`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MaglevSettings {
    /// Table size; must be prime.
    #[serde(default)]
    pub table_size: Option<u64>,
}

/// `Subset`: a named label subset of a service's endpoints.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Subset {
    /// Subset name.
    #[serde(default)]
    pub name: String,
    /// Labels endpoints must carry.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Subset-level traffic policy.
    #[serde(default)]
    pub traffic_policy: Option<TrafficPolicy>,
}
