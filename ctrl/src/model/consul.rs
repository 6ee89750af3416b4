//! Consul `hashicorp.consul.mesh.v1alpha1.TCPRoute` (seed 004) in its resource JSON form
//! (`{"id": {...}, "data": {"@type": ..., "parentRefs": [...], "rules": [...]}}`), mapped
//! onto the Gateway API TCPRoute model. Consul ports are strings: a number is taken as the
//! port, a name as the target port name (resolved on the Service).

use serde::Deserialize;

use super::gateway_api::{BackendRef, ParentReference, RouteRule, TcpRouteSpec};
use super::meta::ObjectMeta;

/// The resource envelope.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Resource {
    /// Resource identity.
    pub id: ResourceId,
    /// The TCPRoute itself.
    pub data: TcpRoute,
    /// Owner (ignored).
    #[serde(default)]
    pub owner: Option<serde_json::Value>,
    /// Version (ignored).
    #[serde(default)]
    pub version: Option<String>,
    /// Generation (ignored).
    #[serde(default)]
    pub generation: Option<String>,
    /// Metadata map (ignored).
    #[serde(default)]
    pub metadata: Option<serde_json::Value>,
    /// Status (ignored).
    #[serde(default)]
    pub status: Option<serde_json::Value>,
}

/// `pbresource.ID`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceId {
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Type.
    #[serde(default, rename = "type")]
    pub kind: Option<ResourceType>,
    /// Tenancy.
    #[serde(default)]
    pub tenancy: Option<Tenancy>,
    /// Unique id (ignored).
    #[serde(default)]
    pub uid: Option<String>,
}

/// `pbresource.Type`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceType {
    /// Group (`mesh`).
    #[serde(default)]
    pub group: String,
    /// Group version (`v1alpha1`).
    #[serde(default, alias = "group_version")]
    pub group_version: String,
    /// Kind (`TCPRoute`, `Service`...).
    #[serde(default)]
    pub kind: String,
}

/// `pbresource.Tenancy`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Tenancy {
    /// Admin partition.
    #[serde(default)]
    pub partition: Option<String>,
    /// Namespace.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Peer name.
    #[serde(default, alias = "peer_name")]
    pub peer_name: Option<String>,
}

/// `TCPRoute` data.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TcpRoute {
    /// Type URL.
    #[serde(default, rename = "@type")]
    pub type_url: Option<String>,
    /// Parents.
    #[serde(default, alias = "parent_refs")]
    pub parent_refs: Vec<ParentRef>,
    /// Rules.
    #[serde(default)]
    pub rules: Vec<Rule>,
}

/// `pbresource.Reference`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Reference {
    /// Type of the referenced resource.
    #[serde(default, rename = "type")]
    pub kind: Option<ResourceType>,
    /// Tenancy.
    #[serde(default)]
    pub tenancy: Option<Tenancy>,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Section.
    #[serde(default)]
    pub section: Option<String>,
}

/// `ParentReference`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct ParentRef {
    /// The parent.
    #[serde(default, rename = "ref")]
    pub reference: Reference,
    /// Port (name or number).
    #[serde(default)]
    pub port: Option<String>,
}

/// `TCPRouteRule`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    /// Weighted backends.
    #[serde(default, alias = "backend_refs")]
    pub backend_refs: Vec<TcpBackendRef>,
}

/// `TCPBackendRef`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TcpBackendRef {
    /// The backend.
    #[serde(default, alias = "backend_ref")]
    pub backend_ref: BackendReference,
    /// Weight; proto3 cannot tell 0 from absent, so absent means the default 1.
    #[serde(default)]
    pub weight: Option<i64>,
}

/// `BackendReference`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct BackendReference {
    /// The backend service.
    #[serde(default, rename = "ref")]
    pub reference: Reference,
    /// Port (name or number).
    #[serde(default)]
    pub port: Option<String>,
    /// Datacenter (must be empty on an appliance).
    #[serde(default)]
    pub datacenter: Option<String>,
}

/// Whether a document looks like a Consul TCPRoute resource.
pub fn detect(doc: &serde_json::Value) -> bool {
    let kind = doc.pointer("/id/type/kind").and_then(|k| k.as_str());
    let type_url = doc.pointer("/data/@type").and_then(|k| k.as_str());
    kind == Some("TCPRoute") || type_url.is_some_and(|t| t.ends_with("mesh.v1alpha1.TCPRoute"))
}

fn split_port(port: &Option<String>) -> (Option<u32>, Option<String>) {
    match port.as_deref() {
        None | Some("") => (None, None),
        Some(p) => match p.parse::<u32>() {
            Ok(n) => (Some(n), None),
            Err(_) => (None, Some(p.to_string())),
        },
    }
}

impl Resource {
    /// Maps onto Kubernetes metadata and a Gateway API TCPRoute spec.
    pub fn into_k8s(self) -> (ObjectMeta, TcpRouteSpec) {
        let ns = |t: &Option<Tenancy>| t.as_ref().and_then(|t| t.namespace.clone());
        let meta = ObjectMeta {
            name: self.id.name.clone(),
            namespace: ns(&self.id.tenancy),
            ..ObjectMeta::default()
        };
        let parent_refs = self
            .data
            .parent_refs
            .iter()
            .map(|p| {
                let (port, name) = split_port(&p.port);
                ParentReference {
                    group: p.reference.kind.as_ref().map(|t| t.group.clone()),
                    kind: p.reference.kind.as_ref().map(|t| t.kind.clone()),
                    namespace: ns(&p.reference.tenancy),
                    name: p.reference.name.clone(),
                    section_name: p
                        .reference
                        .section
                        .clone()
                        .filter(|s| !s.is_empty())
                        .or(name),
                    port,
                }
            })
            .collect();
        let rules = self
            .data
            .rules
            .iter()
            .map(|r| RouteRule {
                name: None,
                backend_refs: r
                    .backend_refs
                    .iter()
                    .map(|b| {
                        let (port, port_name) = split_port(&b.backend_ref.port);
                        BackendRef {
                            group: Some(String::new()),
                            kind: Some("Service".to_string()),
                            name: b.backend_ref.reference.name.clone(),
                            namespace: ns(&b.backend_ref.reference.tenancy),
                            port,
                            weight: b.weight,
                            port_name,
                        }
                    })
                    .collect(),
            })
            .collect();
        (meta, TcpRouteSpec { parent_refs, rules })
    }
}
