//! Core (`v1`) and `discovery.k8s.io/v1` inventory kinds: Namespace, Node, Pod, Service,
//! Endpoints, EndpointSlice, Secret.
//!
//! These come from cluster dumps with dozens of fields sluice has no use for (images,
//! volumes, conditions...): their specs are read leniently, except for the sub-objects
//! sluice interprets (ports, addresses), where a misspelt field is an error.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::meta::{IntOrString, Protocol};

/// `Node.status` (addresses) and `Node.spec` (pod CIDRs).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// Node addresses (InternalIP, ExternalIP, Hostname...).
    #[serde(default)]
    pub addresses: Vec<NodeAddress>,
}

/// `NodeAddress`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct NodeAddress {
    /// Address type.
    #[serde(default, rename = "type")]
    pub kind: String,
    /// The address.
    #[serde(default)]
    pub address: String,
}

/// `Pod.spec`, the parts sluice reads.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    /// The node the pod runs on.
    #[serde(default)]
    pub node_name: Option<String>,
    /// Whether the pod uses the node's network namespace.
    #[serde(default)]
    pub host_network: bool,
    /// Containers (for named ports).
    #[serde(default)]
    pub containers: Vec<Container>,
}

/// A container, the parts sluice reads.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    /// Container name.
    #[serde(default)]
    pub name: String,
    /// Declared ports (named ports for NetworkPolicy and Services).
    #[serde(default)]
    pub ports: Vec<ContainerPort>,
}

/// `ContainerPort`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContainerPort {
    /// IANA_SVC_NAME, unique within the pod.
    #[serde(default)]
    pub name: Option<String>,
    /// Port number.
    #[serde(default)]
    pub container_port: i64,
    /// TCP (default), UDP, SCTP.
    #[serde(default)]
    pub protocol: Protocol,
    /// Host port (unused).
    #[serde(default)]
    pub host_port: Option<i64>,
    /// Host IP (unused).
    #[serde(default, rename = "hostIP")]
    pub host_ip: Option<String>,
}

/// `Pod.status`: its addresses.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    /// Primary pod IP.
    #[serde(default, rename = "podIP")]
    pub pod_ip: Option<String>,
    /// All pod IPs (dual stack).
    #[serde(default, rename = "podIPs")]
    pub pod_ips: Vec<PodIp>,
    /// The node's IP.
    #[serde(default, rename = "hostIP")]
    pub host_ip: Option<String>,
}

/// `PodIP`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PodIp {
    /// The address.
    #[serde(default)]
    pub ip: String,
}

/// `Service.spec`, the parts sluice reads.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    /// Pods backing the service; absent = endpoints managed by hand.
    #[serde(default)]
    pub selector: Option<std::collections::BTreeMap<String, String>>,
    /// Service ports.
    #[serde(default)]
    pub ports: Vec<ServicePort>,
    /// Cluster IP.
    #[serde(default, rename = "clusterIP")]
    pub cluster_ip: Option<String>,
    /// Cluster IPs (dual stack).
    #[serde(default, rename = "clusterIPs")]
    pub cluster_ips: Vec<String>,
    /// ClusterIP, NodePort, LoadBalancer, ExternalName.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
}

/// `ServicePort`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServicePort {
    /// Port name (required when several ports).
    #[serde(default)]
    pub name: Option<String>,
    /// Service port.
    #[serde(default)]
    pub port: i64,
    /// Pod port number or named container port; default = `port`.
    #[serde(default)]
    pub target_port: Option<IntOrString>,
    /// TCP (default), UDP, SCTP.
    #[serde(default)]
    pub protocol: Protocol,
    /// Node port (unused).
    #[serde(default)]
    pub node_port: Option<i64>,
    /// Application protocol hint (unused).
    #[serde(default)]
    pub app_protocol: Option<String>,
}

/// `EndpointSubset` of an `Endpoints` object.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EndpointSubset {
    /// Ready addresses.
    #[serde(default)]
    pub addresses: Vec<EndpointAddress>,
    /// Addresses that are not ready (not used as backends).
    #[serde(default)]
    pub not_ready_addresses: Vec<EndpointAddress>,
    /// Ports.
    #[serde(default)]
    pub ports: Vec<EndpointPort>,
}

/// `EndpointAddress`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EndpointAddress {
    /// The IP.
    #[serde(default)]
    pub ip: String,
    /// Node hosting the endpoint.
    #[serde(default)]
    pub node_name: Option<String>,
    /// Hostname.
    #[serde(default)]
    pub hostname: Option<String>,
    /// The object (usually a Pod) behind the address.
    #[serde(default)]
    pub target_ref: Option<ObjectReference>,
}

/// `ObjectReference` (only kind/name/namespace are read).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    /// Kind.
    #[serde(default)]
    pub kind: Option<String>,
    /// Name.
    #[serde(default)]
    pub name: Option<String>,
    /// Namespace.
    #[serde(default)]
    pub namespace: Option<String>,
}

/// `EndpointPort` (core and discovery).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EndpointPort {
    /// Name, matching the ServicePort's.
    #[serde(default)]
    pub name: Option<String>,
    /// Port number.
    #[serde(default)]
    pub port: Option<i64>,
    /// Protocol.
    #[serde(default)]
    pub protocol: Protocol,
    /// Application protocol hint.
    #[serde(default)]
    pub app_protocol: Option<String>,
}

/// An endpoint of an `EndpointSlice`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SliceEndpoint {
    /// Addresses (one in practice).
    #[serde(default)]
    pub addresses: Vec<String>,
    /// Readiness.
    #[serde(default)]
    pub conditions: EndpointConditions,
    /// Node hosting the endpoint.
    #[serde(default)]
    pub node_name: Option<String>,
    /// The object behind the endpoint.
    #[serde(default)]
    pub target_ref: Option<ObjectReference>,
}

/// `EndpointConditions`; an absent `ready` means ready.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EndpointConditions {
    /// Ready to receive traffic.
    #[serde(default)]
    pub ready: Option<bool>,
    /// Serving.
    #[serde(default)]
    pub serving: Option<bool>,
    /// Terminating.
    #[serde(default)]
    pub terminating: Option<bool>,
}

/// A `Secret`'s payload: `data` is base64, `stringData` plain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecretData {
    /// `type` (e.g. `kubernetes.io/tls`, `Opaque`).
    pub kind: String,
    /// Decoded entries, `data` and `stringData` merged (stringData wins, as upstream).
    pub entries: BTreeMap<String, Vec<u8>>,
}

/// A Node, the parts sluice reads: its addresses (traffic from a pod's own node is
/// always allowed by NetworkPolicy).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeInfo {
    /// `spec.podCIDRs` (or `spec.podCIDR`).
    pub pod_cidrs: Vec<String>,
    /// `status.addresses`.
    pub addresses: Vec<NodeAddress>,
}

/// `Node.spec`, the parts sluice reads.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeSpec {
    /// Single-stack pod CIDR.
    #[serde(default, rename = "podCIDR")]
    pub pod_cidr: Option<String>,
    /// Pod CIDRs.
    #[serde(default, rename = "podCIDRs")]
    pub pod_cidrs: Vec<String>,
}

/// A Pod: spec and status.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodInfo {
    /// Spec.
    pub spec: PodSpec,
    /// Status (addresses).
    pub status: PodStatus,
}

impl PodInfo {
    /// Every IP of the pod (`status.podIPs`, else `status.podIP`), deduplicated.
    pub fn ips(&self) -> Vec<String> {
        let mut ips: Vec<String> = self.status.pod_ips.iter().map(|p| p.ip.clone()).collect();
        if let Some(ip) = &self.status.pod_ip {
            if !ips.contains(ip) {
                ips.insert(0, ip.clone());
            }
        }
        ips
    }
}

/// An EndpointSlice: address type, endpoints and ports.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EndpointSliceInfo {
    /// IPv4 | IPv6 | FQDN.
    #[serde(default)]
    pub address_type: String,
    /// Endpoints.
    #[serde(default)]
    pub endpoints: Vec<SliceEndpoint>,
    /// Ports.
    #[serde(default)]
    pub ports: Vec<EndpointPort>,
}
