//! `networking.k8s.io/v1` NetworkPolicy (seed 002's data model), complete.

use serde::Deserialize;

use super::meta::{IntOrString, LabelSelector, Protocol};

/// `NetworkPolicy.spec`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPolicySpec {
    /// Pods (in the policy's namespace) the policy applies to; empty = all.
    #[serde(default)]
    pub pod_selector: LabelSelector,
    /// Directions the policy isolates. `None` means the Kubernetes default: Ingress, plus
    /// Egress when the policy has an `egress` section.
    #[serde(default)]
    pub policy_types: Option<Vec<PolicyType>>,
    /// Ingress rules; `None` (absent) differs from `Some([])` (deny all) only through
    /// the policyTypes default.
    #[serde(default)]
    pub ingress: Option<Vec<IngressRule>>,
    /// Egress rules.
    #[serde(default)]
    pub egress: Option<Vec<EgressRule>>,
}

/// A policy direction.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyType {
    /// Traffic into the selected pods.
    Ingress,
    /// Traffic out of the selected pods.
    Egress,
}

/// `NetworkPolicyIngressRule`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct IngressRule {
    /// Allowed ports; empty or absent = all ports.
    #[serde(default)]
    pub ports: Vec<NetworkPolicyPort>,
    /// Allowed sources; empty or absent = all sources.
    #[serde(default)]
    pub from: Vec<NetworkPolicyPeer>,
}

/// `NetworkPolicyEgressRule`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EgressRule {
    /// Allowed ports; empty or absent = all ports.
    #[serde(default)]
    pub ports: Vec<NetworkPolicyPort>,
    /// Allowed destinations; empty or absent = all destinations.
    #[serde(default)]
    pub to: Vec<NetworkPolicyPeer>,
}

/// `NetworkPolicyPeer`: pod and namespace selectors (ANDed when both) or an ipBlock.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPolicyPeer {
    /// Pods (in the policy's namespace unless `namespaceSelector` is set).
    #[serde(default)]
    pub pod_selector: Option<LabelSelector>,
    /// Namespaces.
    #[serde(default)]
    pub namespace_selector: Option<LabelSelector>,
    /// A CIDR minus exceptions.
    #[serde(default)]
    pub ip_block: Option<IpBlock>,
}

/// `IPBlock`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct IpBlock {
    /// The CIDR.
    #[serde(default)]
    pub cidr: String,
    /// CIDRs inside `cidr` that are excluded.
    #[serde(default)]
    pub except: Vec<String>,
}

/// `NetworkPolicyPort`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPolicyPort {
    /// TCP (default), UDP or SCTP.
    #[serde(default)]
    pub protocol: Option<Protocol>,
    /// Number or named port (resolved on the destination pod); absent = all ports.
    #[serde(default)]
    pub port: Option<IntOrString>,
    /// Inclusive end of a numeric range starting at `port`.
    #[serde(default)]
    pub end_port: Option<i64>,
}
