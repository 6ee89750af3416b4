//! The accepted manifests (DESIGN.md §5) as serde types, and the decoder that turns one
//! parsed document into a typed [`Object`].
//!
//! Strictness: inside a spec that sluice interprets, a field that does not exist upstream
//! (a typo) is an error; an upstream field that sluice does not implement is reported
//! naming it ([`unimplemented_fields`]): a warning when it only tunes behaviour
//! (timeouts, retries, outlier detection), and the object is not served when ignoring
//! it would widen or redirect traffic (a match condition, a filter, TLS settings); `metadata` beyond name/namespace/labels and
//! `status` are ignored so that `kubectl get -o yaml` output loads unchanged. Inventory
//! kinds (Pod, Node, Service, ...) are read leniently except for their port lists.

pub mod appliance;
pub mod consul;
pub mod core;
pub mod gateway_api;
pub mod istio;
pub mod ligato;
pub mod meta;
pub mod netpol;

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use crate::diag::{FieldPath, Seg};
pub use meta::ObjectMeta;

/// Every kind sluice reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `networking.istio.io` Gateway.
    IstioGateway,
    /// `networking.istio.io` VirtualService.
    VirtualService,
    /// `networking.istio.io` DestinationRule.
    DestinationRule,
    /// `gateway.networking.k8s.io` Gateway.
    Gateway,
    /// `gateway.networking.k8s.io` TLSRoute.
    TlsRoute,
    /// `gateway.networking.k8s.io` TCPRoute (also Consul's TCPRoute).
    TcpRoute,
    /// `gateway.networking.k8s.io` UDPRoute.
    UdpRoute,
    /// `gateway.networking.k8s.io` HTTPRoute.
    HttpRoute,
    /// `gateway.networking.k8s.io` ReferenceGrant.
    ReferenceGrant,
    /// `networking.k8s.io/v1` NetworkPolicy (also Ligato's policy.Policy).
    NetworkPolicy,
    /// `v1` Namespace.
    Namespace,
    /// `v1` Node.
    Node,
    /// `v1` Pod.
    Pod,
    /// `v1` Service.
    Service,
    /// `v1` Endpoints.
    Endpoints,
    /// `discovery.k8s.io/v1` EndpointSlice.
    EndpointSlice,
    /// `v1` Secret.
    Secret,
    /// `v1` ConfigMap (CA certificates of Gateway API `frontendValidation`).
    ConfigMap,
    /// `sluice.dev/v1alpha1` Appliance.
    Appliance,
}

/// A known kind in an `apiVersion` sluice does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} apiVersion `{api_version}` is not supported (supported: {})", supported.join(", "))]
pub struct VersionError {
    /// The kind.
    pub kind: String,
    /// The version given.
    pub api_version: String,
    /// The versions sluice reads, `group/version`.
    pub supported: Vec<String>,
}

impl Kind {
    /// Every kind, in summary order.
    pub const ALL: [Kind; 19] = [
        Kind::Appliance,
        Kind::IstioGateway,
        Kind::VirtualService,
        Kind::DestinationRule,
        Kind::Gateway,
        Kind::TlsRoute,
        Kind::TcpRoute,
        Kind::UdpRoute,
        Kind::HttpRoute,
        Kind::ReferenceGrant,
        Kind::NetworkPolicy,
        Kind::Namespace,
        Kind::Node,
        Kind::Pod,
        Kind::Service,
        Kind::Endpoints,
        Kind::EndpointSlice,
        Kind::Secret,
        Kind::ConfigMap,
    ];

    /// A short, unambiguous name (Istio's Gateway is `Gateway.networking.istio.io`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::IstioGateway => "Gateway.networking.istio.io",
            Kind::VirtualService => "VirtualService",
            Kind::DestinationRule => "DestinationRule",
            Kind::Gateway => "Gateway",
            Kind::TlsRoute => "TLSRoute",
            Kind::TcpRoute => "TCPRoute",
            Kind::UdpRoute => "UDPRoute",
            Kind::HttpRoute => "HTTPRoute",
            Kind::ReferenceGrant => "ReferenceGrant",
            Kind::NetworkPolicy => "NetworkPolicy",
            Kind::Namespace => "Namespace",
            Kind::Node => "Node",
            Kind::Pod => "Pod",
            Kind::Service => "Service",
            Kind::Endpoints => "Endpoints",
            Kind::EndpointSlice => "EndpointSlice",
            Kind::Secret => "Secret",
            Kind::ConfigMap => "ConfigMap",
            Kind::Appliance => "Appliance",
        }
    }

    /// Whether objects of this kind live in a namespace.
    pub fn namespaced(self) -> bool {
        !matches!(self, Kind::Namespace | Kind::Node | Kind::Appliance)
    }

    /// Inventory kinds are read leniently (cluster dumps carry many unused fields).
    fn lenient(self) -> bool {
        matches!(
            self,
            Kind::Namespace
                | Kind::Node
                | Kind::Pod
                | Kind::Service
                | Kind::Endpoints
                | Kind::EndpointSlice
                | Kind::Secret
                | Kind::ConfigMap
        )
    }

    /// Resolves `apiVersion` + `kind`. `Err` for a known kind with an unsupported
    /// version; `Ok(None)` means a kind sluice does not read.
    pub fn resolve(api_version: &str, kind: &str) -> Result<Option<Kind>, VersionError> {
        let (group, version) = match api_version.rsplit_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let (k, versions): (Kind, &[&str]) = match (group, kind) {
            ("networking.istio.io", "Gateway") => (Kind::IstioGateway, ISTIO_VERSIONS),
            ("networking.istio.io", "VirtualService") => (Kind::VirtualService, ISTIO_VERSIONS),
            ("networking.istio.io", "DestinationRule") => (Kind::DestinationRule, ISTIO_VERSIONS),
            ("gateway.networking.k8s.io", "Gateway") => (Kind::Gateway, GATEWAY_VERSIONS),
            ("gateway.networking.k8s.io", "TLSRoute") => (Kind::TlsRoute, GATEWAY_VERSIONS),
            ("gateway.networking.k8s.io", "TCPRoute") => (Kind::TcpRoute, GATEWAY_VERSIONS),
            ("gateway.networking.k8s.io", "UDPRoute") => (Kind::UdpRoute, GATEWAY_VERSIONS),
            ("gateway.networking.k8s.io", "HTTPRoute") => (Kind::HttpRoute, GATEWAY_VERSIONS),
            ("gateway.networking.k8s.io", "ReferenceGrant") => {
                (Kind::ReferenceGrant, GATEWAY_VERSIONS)
            }
            ("networking.k8s.io", "NetworkPolicy") => (Kind::NetworkPolicy, &["v1"]),
            ("", "Namespace") => (Kind::Namespace, &["v1"]),
            ("", "Node") => (Kind::Node, &["v1"]),
            ("", "Pod") => (Kind::Pod, &["v1"]),
            ("", "Service") => (Kind::Service, &["v1"]),
            ("", "Endpoints") => (Kind::Endpoints, &["v1"]),
            ("", "Secret") => (Kind::Secret, &["v1"]),
            ("", "ConfigMap") => (Kind::ConfigMap, &["v1"]),
            ("discovery.k8s.io", "EndpointSlice") => (Kind::EndpointSlice, &["v1", "v1beta1"]),
            ("sluice.dev", "Appliance") => (Kind::Appliance, &["v1alpha1"]),
            _ => return Ok(None),
        };
        if versions.contains(&version) {
            Ok(Some(k))
        } else {
            Err(VersionError {
                kind: kind.to_string(),
                api_version: api_version.to_string(),
                supported: versions
                    .iter()
                    .map(|v| {
                        if group.is_empty() {
                            v.to_string()
                        } else {
                            format!("{group}/{v}")
                        }
                    })
                    .collect(),
            })
        }
    }
}

const ISTIO_VERSIONS: &[&str] = &["v1", "v1beta1", "v1alpha3"];
const GATEWAY_VERSIONS: &[&str] = &["v1", "v1beta1", "v1alpha2", "v1alpha3"];

/// The wire format a document came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// A Kubernetes-style manifest.
    #[default]
    Kubernetes,
    /// Ligato `policy.Policy` proto3 JSON (seed 002).
    Ligato,
    /// Consul `TCPRoute` resource JSON (seed 004).
    Consul,
}

/// One object: its metadata and its kind-specific body.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource<S> {
    /// `apiVersion` as written (synthesised for Ligato and Consul documents).
    pub api_version: String,
    /// Metadata.
    pub meta: ObjectMeta,
    /// The kind-specific body.
    pub spec: S,
    /// The wire format it came in.
    pub format: Format,
}

/// A decoded object of any kind.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)] // each variant is its kind; see [`Kind`].
pub enum Object {
    IstioGateway(Resource<istio::GatewaySpec>),
    VirtualService(Resource<istio::VirtualServiceSpec>),
    DestinationRule(Resource<istio::DestinationRuleSpec>),
    Gateway(Resource<gateway_api::GatewaySpec>),
    TlsRoute(Resource<gateway_api::TlsRouteSpec>),
    TcpRoute(Resource<gateway_api::TcpRouteSpec>),
    UdpRoute(Resource<gateway_api::UdpRouteSpec>),
    HttpRoute(Resource<gateway_api::HttpRouteSpec>),
    ReferenceGrant(Resource<gateway_api::ReferenceGrantSpec>),
    NetworkPolicy(Resource<netpol::NetworkPolicySpec>),
    Namespace(Resource<()>),
    Node(Resource<core::NodeInfo>),
    Pod(Resource<core::PodInfo>),
    Service(Resource<core::ServiceSpec>),
    Endpoints(Resource<Vec<core::EndpointSubset>>),
    EndpointSlice(Resource<core::EndpointSliceInfo>),
    Secret(Resource<core::SecretData>),
    /// `v1` ConfigMap: its entries (`data` and `binaryData`).
    ConfigMap(Resource<core::SecretData>),
    Appliance(Resource<appliance::ApplianceSpec>),
}

macro_rules! each_object {
    ($obj:expr, $r:ident => $body:expr) => {
        match $obj {
            Object::IstioGateway($r) => $body,
            Object::VirtualService($r) => $body,
            Object::DestinationRule($r) => $body,
            Object::Gateway($r) => $body,
            Object::TlsRoute($r) => $body,
            Object::TcpRoute($r) => $body,
            Object::UdpRoute($r) => $body,
            Object::HttpRoute($r) => $body,
            Object::ReferenceGrant($r) => $body,
            Object::NetworkPolicy($r) => $body,
            Object::Namespace($r) => $body,
            Object::Node($r) => $body,
            Object::Pod($r) => $body,
            Object::Service($r) => $body,
            Object::Endpoints($r) => $body,
            Object::EndpointSlice($r) => $body,
            Object::Secret($r) => $body,
            Object::ConfigMap($r) => $body,
            Object::Appliance($r) => $body,
        }
    };
}

impl Object {
    /// The object's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Object::IstioGateway(_) => Kind::IstioGateway,
            Object::VirtualService(_) => Kind::VirtualService,
            Object::DestinationRule(_) => Kind::DestinationRule,
            Object::Gateway(_) => Kind::Gateway,
            Object::TlsRoute(_) => Kind::TlsRoute,
            Object::TcpRoute(_) => Kind::TcpRoute,
            Object::UdpRoute(_) => Kind::UdpRoute,
            Object::HttpRoute(_) => Kind::HttpRoute,
            Object::ReferenceGrant(_) => Kind::ReferenceGrant,
            Object::NetworkPolicy(_) => Kind::NetworkPolicy,
            Object::Namespace(_) => Kind::Namespace,
            Object::Node(_) => Kind::Node,
            Object::Pod(_) => Kind::Pod,
            Object::Service(_) => Kind::Service,
            Object::Endpoints(_) => Kind::Endpoints,
            Object::EndpointSlice(_) => Kind::EndpointSlice,
            Object::Secret(_) => Kind::Secret,
            Object::ConfigMap(_) => Kind::ConfigMap,
            Object::Appliance(_) => Kind::Appliance,
        }
    }

    /// The object's metadata.
    pub fn meta(&self) -> &ObjectMeta {
        each_object!(self, r => &r.meta)
    }

    /// The format the object came in.
    pub fn format(&self) -> Format {
        each_object!(self, r => r.format)
    }

    /// The `apiVersion` the object was given in.
    pub fn api_version(&self) -> &str {
        each_object!(self, r => &r.api_version)
    }

    /// `Kind ns/name` (or `Kind name` for cluster-scoped kinds), for messages.
    pub fn label(&self) -> String {
        object_label(self.kind(), self.meta())
    }
}

/// `Kind ns/name` for messages.
pub fn object_label(kind: Kind, meta: &ObjectMeta) -> String {
    if kind.namespaced() {
        format!("{} {}/{}", kind.as_str(), meta.namespace(), meta.name)
    } else {
        format!("{} {}", kind.as_str(), meta.name)
    }
}

/// What became of one document.
#[derive(Debug)]
pub enum Decoded {
    /// A typed object, and the upstream fields it carried that sluice ignores.
    Object {
        /// The object.
        object: Box<Object>,
        /// Upstream fields present but not implemented, with what ignoring each would do.
        unimplemented: Vec<(FieldPath, Effect)>,
        /// Fields that exist nowhere upstream (errors: typos).
        unknown: Vec<FieldPath>,
    },
    /// A `List`: its items, to decode one by one (paths `items[i]`).
    List(Vec<Value>),
    /// Not a kind sluice reads: skipped with this warning.
    Skipped(String),
    /// An upstream kind that would change where traffic goes (an HTTPRoute, an
    /// AuthorizationPolicy) which sluice does not implement: not served, with this
    /// message.
    NotServed(String),
    /// Could not be decoded: the field path and the message.
    Error(FieldPath, String),
}

/// Decodes one document (already parsed into a JSON value).
pub fn decode(doc: &Value) -> Decoded {
    let Some(map) = doc.as_object() else {
        return match doc {
            Value::Null => Decoded::Skipped("empty document".into()),
            _ => Decoded::Error(FieldPath::root(), "a manifest must be a mapping".into()),
        };
    };
    let api_version = map.get("apiVersion").and_then(Value::as_str);
    let kind = map.get("kind").and_then(Value::as_str);
    match (api_version, kind) {
        (_, Some(k)) if k.ends_with("List") && map.contains_key("items") => {
            match map.get("items") {
                Some(Value::Array(items)) => Decoded::List(items.clone()),
                Some(Value::Null) => Decoded::List(Vec::new()),
                _ => Decoded::Error(
                    FieldPath::root().key("items"),
                    "`items` must be a list".into(),
                ),
            }
        }
        (Some(av), Some(k)) => match Kind::resolve(av, k) {
            Ok(Some(kind)) => {
                // The API server takes an explicit `null` for an optional field as its
                // absence (`matchLabels: null`, `tls: null`): so does sluice.
                let mut doc = doc.clone();
                strip_nulls(&mut doc);
                decode_kind(kind, &doc)
            }
            Ok(None) => match unserved_kind(av, k) {
                Some(why) => Decoded::NotServed(why.to_string()),
                None => Decoded::Skipped(format!("kind {k} ({av}) is not read by sluice")),
            },
            Err(e) => Decoded::Error(FieldPath::root().key("apiVersion"), e.to_string()),
        },
        (None, Some(_)) => Decoded::Error(
            FieldPath::root().key("apiVersion"),
            "missing field `apiVersion`".into(),
        ),
        (Some(_), None) => {
            Decoded::Error(FieldPath::root().key("kind"), "missing field `kind`".into())
        }
        (None, None) if consul::detect(doc) => decode_consul(doc),
        (None, None) if ligato::DETECT_KEYS.iter().any(|k| map.contains_key(*k)) => {
            decode_ligato(doc)
        }
        (None, None) => Decoded::Error(
            FieldPath::root(),
            "not a manifest: no `apiVersion`/`kind`, and neither a Ligato policy.Policy nor a \
             Consul TCPRoute"
                .into(),
        ),
    }
}

/// Deserializes with field paths on error and every ignored key recorded.
fn de<T: DeserializeOwned>(v: &Value) -> Result<(T, Vec<FieldPath>), (FieldPath, String)> {
    let mut ignored = Vec::new();
    let mut record = |p: serde_ignored::Path| ignored.push(ignored_path(&p));
    let de = serde_ignored::Deserializer::new(v, &mut record);
    match serde_path_to_error::deserialize(de) {
        Ok(t) => Ok((t, ignored)),
        Err(e) => {
            let path = FieldPath(
                e.path()
                    .iter()
                    .filter_map(|s| match s {
                        serde_path_to_error::Segment::Seq { index } => Some(Seg::Index(*index)),
                        serde_path_to_error::Segment::Map { key } => Some(Seg::Key(key.clone())),
                        serde_path_to_error::Segment::Enum { .. }
                        | serde_path_to_error::Segment::Unknown => None,
                    })
                    .collect(),
            );
            Err((path, e.into_inner().to_string()))
        }
    }
}

fn ignored_path(p: &serde_ignored::Path) -> FieldPath {
    use serde_ignored::Path as P;
    match p {
        P::Root => FieldPath::root(),
        P::Seq { parent, index } => ignored_path(parent).index(*index),
        P::Map { parent, key } => ignored_path(parent).key(key),
        P::Some { parent } | P::NewtypeStruct { parent } | P::NewtypeVariant { parent } => {
            ignored_path(parent)
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecDoc<S> {
    api_version: String,
    #[allow(dead_code)]
    kind: String,
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: S,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodDoc {
    api_version: String,
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: core::PodSpec,
    #[serde(default)]
    status: core::PodStatus,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeDoc {
    api_version: String,
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: core::NodeSpec,
    #[serde(default)]
    status: core::NodeStatus,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NamespaceDoc {
    api_version: String,
    #[serde(default)]
    metadata: ObjectMeta,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EndpointsDoc {
    api_version: String,
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    subsets: Vec<core::EndpointSubset>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EndpointSliceDoc {
    api_version: String,
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(flatten)]
    body: core::EndpointSliceInfo,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SecretDoc {
    api_version: String,
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    data: BTreeMap<String, String>,
    #[serde(default)]
    string_data: BTreeMap<String, String>,
    #[serde(default)]
    #[allow(dead_code)]
    immutable: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConfigMapDoc {
    api_version: String,
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    data: BTreeMap<String, String>,
    #[serde(default)]
    binary_data: BTreeMap<String, String>,
    #[serde(default)]
    #[allow(dead_code)]
    immutable: Option<bool>,
}

fn resource<S>(api_version: String, meta: ObjectMeta, spec: S) -> Resource<S> {
    Resource {
        api_version,
        meta,
        spec,
        format: Format::Kubernetes,
    }
}

fn decode_kind(kind: Kind, doc: &Value) -> Decoded {
    let result: Result<(Object, Vec<FieldPath>), (FieldPath, String)> = (|| {
        macro_rules! spec_doc {
            ($variant:ident) => {{
                let (d, ig): (SpecDoc<_>, _) = de(doc)?;
                (
                    Object::$variant(resource(d.api_version, d.metadata, d.spec)),
                    ig,
                )
            }};
        }
        Ok(match kind {
            Kind::IstioGateway => spec_doc!(IstioGateway),
            Kind::VirtualService => spec_doc!(VirtualService),
            Kind::DestinationRule => spec_doc!(DestinationRule),
            Kind::Gateway => spec_doc!(Gateway),
            Kind::TlsRoute => spec_doc!(TlsRoute),
            Kind::TcpRoute => spec_doc!(TcpRoute),
            Kind::UdpRoute => spec_doc!(UdpRoute),
            Kind::HttpRoute => spec_doc!(HttpRoute),
            Kind::ReferenceGrant => spec_doc!(ReferenceGrant),
            Kind::NetworkPolicy => spec_doc!(NetworkPolicy),
            Kind::Appliance => spec_doc!(Appliance),
            Kind::Service => spec_doc!(Service),
            Kind::Namespace => {
                let (d, ig): (NamespaceDoc, _) = de(doc)?;
                (
                    Object::Namespace(resource(d.api_version, d.metadata, ())),
                    ig,
                )
            }
            Kind::Pod => {
                let (d, ig): (PodDoc, _) = de(doc)?;
                let info = core::PodInfo {
                    spec: d.spec,
                    status: d.status,
                };
                (Object::Pod(resource(d.api_version, d.metadata, info)), ig)
            }
            Kind::Node => {
                let (d, ig): (NodeDoc, _) = de(doc)?;
                let mut pod_cidrs = d.spec.pod_cidrs;
                if let Some(c) = d.spec.pod_cidr {
                    if !pod_cidrs.contains(&c) {
                        pod_cidrs.insert(0, c);
                    }
                }
                let info = core::NodeInfo {
                    pod_cidrs,
                    addresses: d.status.addresses,
                };
                (Object::Node(resource(d.api_version, d.metadata, info)), ig)
            }
            Kind::Endpoints => {
                let (d, ig): (EndpointsDoc, _) = de(doc)?;
                (
                    Object::Endpoints(resource(d.api_version, d.metadata, d.subsets)),
                    ig,
                )
            }
            Kind::EndpointSlice => {
                let (d, ig): (EndpointSliceDoc, _) = de(doc)?;
                (
                    Object::EndpointSlice(resource(d.api_version, d.metadata, d.body)),
                    ig,
                )
            }
            Kind::Secret => {
                let (d, ig): (SecretDoc, _) = de(doc)?;
                let mut entries = BTreeMap::new();
                for (k, v) in &d.data {
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(v.trim())
                        .map_err(|e| {
                            (
                                FieldPath::root().key("data").key(k),
                                format!("not valid base64: {e}"),
                            )
                        })?;
                    entries.insert(k.clone(), bytes);
                }
                for (k, v) in d.string_data {
                    entries.insert(k, v.into_bytes());
                }
                let data = core::SecretData {
                    kind: d.kind.unwrap_or_else(|| "Opaque".into()),
                    entries,
                };
                (
                    Object::Secret(resource(d.api_version, d.metadata, data)),
                    ig,
                )
            }
            Kind::ConfigMap => {
                let (d, ig): (ConfigMapDoc, _) = de(doc)?;
                let mut entries = BTreeMap::new();
                for (k, v) in &d.binary_data {
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(v.trim())
                        .map_err(|e| {
                            (
                                FieldPath::root().key("binaryData").key(k),
                                format!("not valid base64: {e}"),
                            )
                        })?;
                    entries.insert(k.clone(), bytes);
                }
                for (k, v) in d.data {
                    entries.insert(k, v.into_bytes());
                }
                let data = core::SecretData {
                    kind: "ConfigMap".into(),
                    entries,
                };
                (
                    Object::ConfigMap(resource(d.api_version, d.metadata, data)),
                    ig,
                )
            }
        })
    })();
    match result {
        Err((path, msg)) => Decoded::Error(path, msg),
        Ok((object, ignored)) => {
            let (unimplemented, unknown) = classify_ignored(kind, ignored);
            Decoded::Object {
                object: Box::new(object),
                unimplemented,
                unknown,
            }
        }
    }
}

/// Removes every mapping member whose value is `null`, at any depth.
fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(strip_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// Upstream kinds that sluice does not implement and whose absence would widen or
/// redirect traffic: the message reported for them (the object is not served).
fn unserved_kind(api_version: &str, kind: &str) -> Option<&'static str> {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    Some(match (group, kind) {
        ("gateway.networking.k8s.io", "GRPCRoute") => {
            "GRPCRoute is not served by sluice (gRPC routing is not implemented): its \
             requests get no route"
        }
        ("gateway.networking.k8s.io", "BackendTLSPolicy") => {
            "BackendTLSPolicy is not implemented: sluice does not originate TLS to backends"
        }
        ("gateway.networking.k8s.io", "ListenerSet" | "XListenerSet") => {
            "ListenerSet is not implemented: its listeners are not served"
        }
        ("security.istio.io", "AuthorizationPolicy") => {
            "AuthorizationPolicy is not implemented: what it denies would be allowed; use \
             NetworkPolicy for L3/L4 access control"
        }
        ("security.istio.io", "RequestAuthentication" | "PeerAuthentication") => {
            "Istio authentication policies are not implemented"
        }
        ("networking.istio.io", "EnvoyFilter") => "EnvoyFilter is not implemented",
        _ => return None,
    })
}

/// What ignoring an unimplemented upstream field would do to traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// It only tunes behaviour (timeouts, retries, outlier detection, pool sizes):
    /// ignored with a warning.
    Tunes,
    /// It selects, filters or rewrites traffic: ignoring it would serve wider or
    /// elsewhere, so the object (or the gateway listener holding it) is not served.
    Redirects,
}

/// Splits ignored fields into upstream-but-unimplemented (with their [`Effect`]) and
/// unknown (errors), after dropping the ones every manifest may carry.
fn classify_ignored(
    kind: Kind,
    ignored: Vec<FieldPath>,
) -> (Vec<(FieldPath, Effect)>, Vec<FieldPath>) {
    let mut unimplemented = Vec::new();
    let mut unknown = Vec::new();
    for p in ignored {
        if matches!(p.first_key(), Some("metadata" | "status")) {
            continue;
        }
        if kind.lenient() {
            continue;
        }
        let pattern = p.pattern();
        match unimplemented_fields(kind)
            .iter()
            .find(|(f, _)| *f == pattern.as_str())
        {
            Some(&(_, effect)) => unimplemented.push((p, effect)),
            None => unknown.push(p),
        }
    }
    (unimplemented, unknown)
}

/// Upstream fields of a kind that sluice accepts but does not implement (as patterns,
/// indices written `[]`), with what ignoring each would do. Anything else unknown inside
/// a spec is a typo and an error.
pub fn unimplemented_fields(kind: Kind) -> &'static [(&'static str, Effect)] {
    use Effect::{Redirects as R, Tunes as T};
    match kind {
        Kind::IstioGateway => &[
            ("spec.servers[].tls.credentialNames", R),
            ("spec.servers[].tls.tlsCertificates", R),
            ("spec.servers[].tls.caCertificatesFile", R),
        ],
        Kind::VirtualService => &[
            ("spec.http[].fault", R),
            ("spec.http[].mirrorPercent", R),
            ("spec.http[].mirror_percent", R),
            ("spec.http[].corsPolicy", R),
            ("spec.http[].delegate", R),
            ("spec.http[].match[].sourceLabels", R),
            ("spec.http[].match[].statPrefix", T),
            ("spec.tls[].match[].sourceLabels", R),
            ("spec.tls[].match[].sourceNamespace", R),
            ("spec.tcp[].match[].sourceNamespace", R),
        ],
        Kind::DestinationRule => &[
            ("spec.workloadSelector", R),
            ("spec.trafficPolicy.connectionPool", T),
            ("spec.trafficPolicy.outlierDetection", T),
            ("spec.trafficPolicy.tls", R),
            ("spec.trafficPolicy.portLevelSettings", R),
            ("spec.trafficPolicy.tunnel", R),
            ("spec.trafficPolicy.proxyProtocol", R),
            ("spec.trafficPolicy.loadBalancer.localityLbSetting", R),
            ("spec.trafficPolicy.loadBalancer.warmupDurationSecs", T),
            ("spec.trafficPolicy.loadBalancer.warmup", T),
            (
                "spec.trafficPolicy.loadBalancer.consistentHash.httpHeaderName",
                T,
            ),
            (
                "spec.trafficPolicy.loadBalancer.consistentHash.httpCookie",
                T,
            ),
            (
                "spec.trafficPolicy.loadBalancer.consistentHash.httpQueryParameterName",
                T,
            ),
            ("spec.trafficPolicy.loadBalancer.consistentHash.ringHash", T),
            (
                "spec.trafficPolicy.loadBalancer.consistentHash.minimumRingSize",
                T,
            ),
            ("spec.subsets[].trafficPolicy.connectionPool", T),
            ("spec.subsets[].trafficPolicy.outlierDetection", T),
            ("spec.subsets[].trafficPolicy.tls", R),
            ("spec.subsets[].trafficPolicy.portLevelSettings", R),
            ("spec.subsets[].trafficPolicy.tunnel", R),
            ("spec.subsets[].trafficPolicy.proxyProtocol", R),
        ],
        Kind::Gateway => &[
            ("spec.infrastructure", T),
            ("spec.backendTLS", R),
            ("spec.allowedListeners", T),
            ("spec.tls", R),
        ],
        Kind::TlsRoute | Kind::TcpRoute => &[("spec.rules[].backendRefs[].filters", R)],
        // Upstream `UDPRoute` (v1alpha2): `parentRefs` and `rules[]` of `name` and plain
        // `BackendRef`s (no `filters`); sluice reads every one of them.
        Kind::UdpRoute => &[],
        // Experimental fields: retries and session persistence only tune behaviour.
        Kind::HttpRoute => &[
            ("spec.rules[].retry", T),
            ("spec.rules[].sessionPersistence", T),
        ],
        _ => &[],
    }
}

fn decode_ligato(doc: &Value) -> Decoded {
    match de::<ligato::Policy>(doc) {
        Err((p, m)) => Decoded::Error(p, m),
        Ok((policy, ignored)) => match policy.into_k8s() {
            Err((p, m)) => Decoded::Error(FieldPath::parse(&p), m),
            Ok((meta, spec)) => Decoded::Object {
                object: Box::new(Object::NetworkPolicy(Resource {
                    api_version: "policy.Policy (ligato)".into(),
                    meta,
                    spec,
                    format: Format::Ligato,
                })),
                unimplemented: Vec::new(),
                unknown: ignored,
            },
        },
    }
}

fn decode_consul(doc: &Value) -> Decoded {
    match de::<consul::Resource>(doc) {
        Err((p, m)) => Decoded::Error(p, m),
        Ok((res, ignored)) => {
            let (meta, spec) = res.into_k8s();
            Decoded::Object {
                object: Box::new(Object::TcpRoute(Resource {
                    api_version: "mesh.v1alpha1 (consul)".into(),
                    meta,
                    spec,
                    format: Format::Consul,
                })),
                unimplemented: Vec::new(),
                unknown: ignored
                    .into_iter()
                    .filter(|p| !matches!(p.first_key(), Some("metadata" | "status")))
                    .collect(),
            }
        }
    }
}
