//! Kubernetes Gateway API kinds (`gateway.networking.k8s.io`): Gateway (seed 003),
//! TLSRoute, TCPRoute (seed 004), UDPRoute and ReferenceGrant.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::meta::LabelSelector;

/// `Gateway.spec`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GatewaySpec {
    /// The GatewayClass this gateway belongs to.
    #[serde(default)]
    pub gateway_class_name: String,
    /// Listeners: logical endpoints bound to addresses.
    #[serde(default)]
    pub listeners: Vec<Listener>,
    /// Requested addresses.
    #[serde(default)]
    pub addresses: Vec<GatewayAddress>,
}

/// A listener of a Gateway.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Listener {
    /// Unique name within the gateway.
    #[serde(default)]
    pub name: String,
    /// Hostname (exact or `*.` wildcard) the listener is for; absent = all.
    #[serde(default)]
    pub hostname: Option<String>,
    /// Port number.
    #[serde(default)]
    pub port: u32,
    /// HTTP | HTTPS | TLS | TCP | UDP.
    #[serde(default)]
    pub protocol: String,
    /// TLS settings (required for HTTPS and TLS).
    #[serde(default)]
    pub tls: Option<GatewayTlsConfig>,
    /// Which routes may attach.
    #[serde(default)]
    pub allowed_routes: Option<AllowedRoutes>,
}

/// `GatewayTLSConfig` (seed 003).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GatewayTlsConfig {
    /// Terminate (default) or Passthrough.
    #[serde(default)]
    pub mode: GatewayTlsMode,
    /// Secrets holding certificate and key.
    #[serde(default)]
    pub certificate_refs: Vec<SecretObjectReference>,
    /// Implementation-specific options (domain-prefixed keys).
    #[serde(default)]
    pub options: BTreeMap<String, String>,
    /// Client certificate validation (`FrontendTLSValidation`, experimental in Gateway
    /// API v1.1-v1.2): clients must present a certificate that chains to one of these
    /// CA certificates.
    #[serde(default)]
    pub frontend_validation: Option<FrontendTlsValidation>,
}

/// `FrontendTLSValidation`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FrontendTlsValidation {
    /// ConfigMaps (key `ca.crt`) holding the CA certificates clients are verified with.
    #[serde(default)]
    pub ca_certificate_refs: Vec<ObjectReference>,
}

/// `ObjectReference` (group, kind, name, namespace).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ObjectReference {
    /// API group (`""` for core).
    #[serde(default)]
    pub group: String,
    /// Kind (`ConfigMap`).
    pub kind: String,
    /// Name.
    pub name: String,
    /// Namespace (the Gateway's when unset).
    #[serde(default)]
    pub namespace: Option<String>,
}

/// `TLSModeType`.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
pub enum GatewayTlsMode {
    /// The gateway terminates TLS.
    #[default]
    Terminate,
    /// The gateway forwards TLS as it is.
    Passthrough,
}

/// `SecretObjectReference`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SecretObjectReference {
    /// API group ("" = core).
    #[serde(default)]
    pub group: Option<String>,
    /// Kind (default Secret).
    #[serde(default)]
    pub kind: Option<String>,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Namespace (default: the referring object's).
    #[serde(default)]
    pub namespace: Option<String>,
}

/// `AllowedRoutes`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AllowedRoutes {
    /// Namespaces routes may come from.
    #[serde(default)]
    pub namespaces: Option<RouteNamespaces>,
    /// Route kinds allowed.
    #[serde(default)]
    pub kinds: Vec<RouteGroupKind>,
}

/// `RouteNamespaces`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouteNamespaces {
    /// All | Same (default) | Selector.
    #[serde(default)]
    pub from: FromNamespaces,
    /// Namespace selector when `from: Selector`.
    #[serde(default)]
    pub selector: Option<LabelSelector>,
}

/// `FromNamespaces`.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
pub enum FromNamespaces {
    /// Routes from every namespace.
    All,
    /// Routes from the gateway's namespace.
    #[default]
    Same,
    /// Routes from namespaces matching the selector.
    Selector,
}

/// `RouteGroupKind`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RouteGroupKind {
    /// API group (default gateway.networking.k8s.io).
    #[serde(default)]
    pub group: Option<String>,
    /// Route kind.
    #[serde(default)]
    pub kind: String,
}

/// `GatewayAddress`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GatewayAddress {
    /// IPAddress (default) | Hostname | implementation-specific.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// The address.
    #[serde(default)]
    pub value: String,
}

/// `TLSRoute.spec`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TlsRouteSpec {
    /// Gateways (and listeners) this route attaches to.
    #[serde(default)]
    pub parent_refs: Vec<ParentReference>,
    /// SNI hostnames the route matches.
    #[serde(default)]
    pub hostnames: Vec<String>,
    /// Rules with backends.
    #[serde(default)]
    pub rules: Vec<RouteRule>,
}

/// `TCPRoute.spec`; also `UDPRoute.spec` ([`UdpRouteSpec`]), whose fields upstream are
/// the same (`parentRefs`, and `rules` of `name` and `backendRefs`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TcpRouteSpec {
    /// Gateways (and listeners) this route attaches to.
    #[serde(default)]
    pub parent_refs: Vec<ParentReference>,
    /// Rules with backends.
    #[serde(default)]
    pub rules: Vec<RouteRule>,
}

/// `UDPRoute.spec`: the same fields as `TCPRoute.spec` (upstream `UDPRouteSpec` and
/// `UDPRouteRule` mirror `TCPRouteSpec` and `TCPRouteRule`).
pub type UdpRouteSpec = TcpRouteSpec;

/// `ParentReference`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct ParentReference {
    /// API group (default gateway.networking.k8s.io).
    #[serde(default)]
    pub group: Option<String>,
    /// Kind (default Gateway).
    #[serde(default)]
    pub kind: Option<String>,
    /// Namespace (default: the route's).
    #[serde(default)]
    pub namespace: Option<String>,
    /// Gateway name.
    #[serde(default)]
    pub name: String,
    /// Listener name.
    #[serde(default)]
    pub section_name: Option<String>,
    /// Listener port.
    #[serde(default)]
    pub port: Option<u32>,
}

/// A TLSRoute/TCPRoute/UDPRoute rule.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouteRule {
    /// Rule name.
    #[serde(default)]
    pub name: Option<String>,
    /// Weighted backends.
    #[serde(default)]
    pub backend_refs: Vec<BackendRef>,
}

/// `BackendRef`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BackendRef {
    /// API group ("" = core).
    #[serde(default)]
    pub group: Option<String>,
    /// Kind (default Service).
    #[serde(default)]
    pub kind: Option<String>,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Namespace (default: the route's).
    #[serde(default)]
    pub namespace: Option<String>,
    /// Service port.
    #[serde(default)]
    pub port: Option<u32>,
    /// Relative weight, default 1.
    #[serde(default)]
    pub weight: Option<i64>,
    /// A target port by name (Consul's string ports); never read from Gateway API YAML.
    #[serde(skip)]
    pub port_name: Option<String>,
}

/// `ReferenceGrant.spec`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ReferenceGrantSpec {
    /// Who may refer.
    #[serde(default)]
    pub from: Vec<ReferenceGrantFrom>,
    /// What may be referred to (in the grant's namespace).
    #[serde(default)]
    pub to: Vec<ReferenceGrantTo>,
}

/// `ReferenceGrantFrom`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ReferenceGrantFrom {
    /// API group.
    #[serde(default)]
    pub group: String,
    /// Kind.
    #[serde(default)]
    pub kind: String,
    /// Namespace.
    #[serde(default)]
    pub namespace: String,
}

/// `ReferenceGrantTo`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ReferenceGrantTo {
    /// API group.
    #[serde(default)]
    pub group: String,
    /// Kind.
    #[serde(default)]
    pub kind: String,
    /// Name (absent = every object of the kind).
    #[serde(default)]
    pub name: Option<String>,
}

/// `HTTPRoute.spec`: HTTP requests by hostname, path, headers, query and method.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteSpec {
    /// Gateways (and listeners) this route attaches to.
    #[serde(default)]
    pub parent_refs: Vec<ParentReference>,
    /// Hostnames (exact or `*.` wildcard) the route matches; empty = the listener's.
    #[serde(default)]
    pub hostnames: Vec<String>,
    /// Rules (upstream default: one rule matching `PathPrefix /` with no backend).
    #[serde(default)]
    pub rules: Vec<HttpRouteRule>,
}

/// `HTTPRouteRule`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteRule {
    /// Rule name.
    #[serde(default)]
    pub name: Option<String>,
    /// Conditions, ORed (empty = `PathPrefix /`).
    #[serde(default)]
    pub matches: Vec<HttpRouteMatch>,
    /// Filters applied to matching requests.
    #[serde(default)]
    pub filters: Vec<HttpRouteFilter>,
    /// Weighted backends.
    #[serde(default)]
    pub backend_refs: Vec<HttpBackendRef>,
    /// Timeouts.
    #[serde(default)]
    pub timeouts: Option<HttpRouteTimeouts>,
}

/// `HTTPRouteMatch`: conditions ANDed.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteMatch {
    /// Path condition (default `PathPrefix /`).
    #[serde(default)]
    pub path: Option<HttpPathMatch>,
    /// Header conditions.
    #[serde(default)]
    pub headers: Vec<HttpNameValueMatch>,
    /// Query parameter conditions.
    #[serde(default)]
    pub query_params: Vec<HttpNameValueMatch>,
    /// Method.
    #[serde(default)]
    pub method: Option<String>,
}

/// `HTTPPathMatch`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpPathMatch {
    /// `Exact`, `PathPrefix` (default) or `RegularExpression`.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// Value (default `/`).
    #[serde(default)]
    pub value: Option<String>,
}

/// `HTTPHeaderMatch` / `HTTPQueryParamMatch`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpNameValueMatch {
    /// `Exact` (default) or `RegularExpression`.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Value.
    #[serde(default)]
    pub value: String,
}

/// `HTTPRouteFilter`: `type` names the one field set.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteFilter {
    /// `RequestHeaderModifier`, `ResponseHeaderModifier`, `RequestMirror`,
    /// `RequestRedirect`, `URLRewrite`, `ExtensionRef`, `CORS`, `ExternalAuth`.
    #[serde(default, rename = "type")]
    pub kind: String,
    /// Request header changes.
    #[serde(default)]
    pub request_header_modifier: Option<HttpHeaderFilter>,
    /// Response header changes.
    #[serde(default)]
    pub response_header_modifier: Option<HttpHeaderFilter>,
    /// Mirror.
    #[serde(default)]
    pub request_mirror: Option<HttpRequestMirrorFilter>,
    /// Redirect.
    #[serde(default)]
    pub request_redirect: Option<HttpRequestRedirectFilter>,
    /// Rewrite.
    #[serde(default)]
    pub url_rewrite: Option<HttpUrlRewriteFilter>,
    /// Not served (an extension sluice does not know).
    #[serde(default)]
    pub extension_ref: Option<serde_json::Value>,
    /// Not served.
    #[serde(default)]
    pub cors: Option<serde_json::Value>,
    /// Not served.
    #[serde(default)]
    pub external_auth: Option<serde_json::Value>,
}

/// `HTTPHeaderFilter`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpHeaderFilter {
    /// Overwrite.
    #[serde(default)]
    pub set: Vec<HttpHeader>,
    /// Append.
    #[serde(default)]
    pub add: Vec<HttpHeader>,
    /// Remove (names).
    #[serde(default)]
    pub remove: Vec<String>,
}

/// `HTTPHeader`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpHeader {
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Value.
    #[serde(default)]
    pub value: String,
}

/// `HTTPRequestMirrorFilter`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRequestMirrorFilter {
    /// Where copies go.
    #[serde(default)]
    pub backend_ref: BackendRef,
    /// Percent of requests (0..=100).
    #[serde(default)]
    pub percent: Option<i64>,
    /// Fraction of requests.
    #[serde(default)]
    pub fraction: Option<Fraction>,
}

/// `Fraction`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Fraction {
    /// Numerator.
    #[serde(default)]
    pub numerator: i64,
    /// Denominator (default 100).
    #[serde(default)]
    pub denominator: Option<i64>,
}

/// `HTTPRequestRedirectFilter`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRequestRedirectFilter {
    /// `http` or `https`.
    #[serde(default)]
    pub scheme: Option<String>,
    /// New host.
    #[serde(default)]
    pub hostname: Option<String>,
    /// New path.
    #[serde(default)]
    pub path: Option<HttpPathModifier>,
    /// New port.
    #[serde(default)]
    pub port: Option<u32>,
    /// 301 or 302 (default 302).
    #[serde(default)]
    pub status_code: Option<u32>,
}

/// `HTTPURLRewriteFilter`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpUrlRewriteFilter {
    /// New Host.
    #[serde(default)]
    pub hostname: Option<String>,
    /// New path.
    #[serde(default)]
    pub path: Option<HttpPathModifier>,
}

/// `HTTPPathModifier`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpPathModifier {
    /// `ReplaceFullPath` or `ReplacePrefixMatch`.
    #[serde(default, rename = "type")]
    pub kind: String,
    /// The path (ReplaceFullPath).
    #[serde(default)]
    pub replace_full_path: Option<String>,
    /// The prefix (ReplacePrefixMatch).
    #[serde(default)]
    pub replace_prefix_match: Option<String>,
}

/// `HTTPBackendRef`: a [`BackendRef`] with filters (not served).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpBackendRef {
    /// API group ("" = core).
    #[serde(default)]
    pub group: Option<String>,
    /// Kind (default Service).
    #[serde(default)]
    pub kind: Option<String>,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Namespace (default: the route's).
    #[serde(default)]
    pub namespace: Option<String>,
    /// Service port.
    #[serde(default)]
    pub port: Option<u32>,
    /// Relative weight, default 1.
    #[serde(default)]
    pub weight: Option<i64>,
    /// Filters for requests sent to this backend (not served).
    #[serde(default)]
    pub filters: Vec<serde_json::Value>,
}

impl HttpBackendRef {
    /// As a plain [`BackendRef`].
    pub fn plain(&self) -> BackendRef {
        BackendRef {
            group: self.group.clone(),
            kind: self.kind.clone(),
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            port: self.port,
            weight: self.weight,
            port_name: None,
        }
    }
}

/// `HTTPRouteTimeouts`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteTimeouts {
    /// The whole request.
    #[serde(default)]
    pub request: Option<String>,
    /// Each request to a backend.
    #[serde(default)]
    pub backend_request: Option<String>,
}
