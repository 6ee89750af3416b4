//! Ligato/Contiv `policy.Policy` (seed 002) in its proto3 JSON form, mapped onto the
//! Kubernetes NetworkPolicy model. proto3 JSON accepts both lowerCamelCase and the
//! original snake_case field names, and enum values by name or number; so does this.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::meta::{
    IntOrString, LabelSelector, LabelSelectorRequirement, ObjectMeta, Protocol, SelectorOperator,
};
use super::netpol::{
    EgressRule, IngressRule, IpBlock, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
    PolicyType,
};

/// `policy.Policy`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Policy {
    /// Optional type URL (`type.googleapis.com/policy.Policy` or `policy.Policy`).
    #[serde(default, rename = "@type")]
    pub type_url: Option<String>,
    /// Policy name.
    #[serde(default)]
    pub name: String,
    /// Namespace.
    #[serde(default)]
    pub namespace: String,
    /// Labels of the policy itself.
    #[serde(default)]
    pub label: Vec<Label>,
    /// Pods the policy applies to.
    #[serde(default)]
    pub pods: Option<Selector>,
    /// Policy type.
    #[serde(default, alias = "policy_type")]
    pub policy_type: Option<EnumValue>,
    /// Ingress rules.
    #[serde(default, alias = "ingress_rule")]
    pub ingress_rule: Vec<Rule>,
    /// Egress rules.
    #[serde(default, alias = "egress_rule")]
    pub egress_rule: Vec<EgressRuleL>,
}

/// A proto3 JSON enum value: its name or its number.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum EnumValue {
    /// By name.
    Name(String),
    /// By number.
    Number(i64),
}

/// A proto3 enum value that names no member.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnumError {
    /// By name.
    #[error("unknown enum value `{name}` (expected one of {expected:?})")]
    Name {
        /// As written.
        name: String,
        /// The members.
        expected: &'static [&'static str],
    },
    /// By number.
    #[error("unknown enum number {number} (expected 0..{members})")]
    Number {
        /// As written.
        number: i64,
        /// How many members there are.
        members: usize,
    },
}

impl EnumValue {
    /// Resolves against the enum's names (index = number); unknown values are an error.
    fn resolve(&self, names: &'static [&'static str]) -> Result<usize, EnumError> {
        match self {
            EnumValue::Name(n) => {
                names
                    .iter()
                    .position(|v| v == n)
                    .ok_or_else(|| EnumError::Name {
                        name: n.clone(),
                        expected: names,
                    })
            }
            EnumValue::Number(i) => {
                usize::try_from(*i)
                    .ok()
                    .filter(|i| *i < names.len())
                    .ok_or(EnumError::Number {
                        number: *i,
                        members: names.len(),
                    })
            }
        }
    }
}

/// `Policy.Label`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct Label {
    /// Key.
    #[serde(default)]
    pub key: String,
    /// Value.
    #[serde(default)]
    pub value: String,
}

/// `Policy.LabelSelector`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Selector {
    /// Exact labels.
    #[serde(default, alias = "match_label")]
    pub match_label: Vec<Label>,
    /// Expressions.
    #[serde(default, alias = "match_expression")]
    pub match_expression: Vec<Expression>,
}

/// `LabelSelector.LabelExpression`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Expression {
    /// Key.
    #[serde(default)]
    pub key: String,
    /// IN (0), NOT_IN, EXISTS, DOES_NOT_EXIST.
    #[serde(default)]
    pub operator: Option<EnumValue>,
    /// Values.
    #[serde(default)]
    pub value: Vec<String>,
}

/// `Policy.Port`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct PortL {
    /// TCP (0) or UDP.
    #[serde(default)]
    pub protocol: Option<EnumValue>,
    /// The port; absent = all ports.
    #[serde(default)]
    pub port: Option<PortNameOrNumber>,
}

/// `Port.PortNameOrNumber`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct PortNameOrNumber {
    /// NUMBER (0) or NAME.
    #[serde(default, rename = "type")]
    pub kind: Option<EnumValue>,
    /// Port number (0 = every port).
    #[serde(default)]
    pub number: i64,
    /// Named port.
    #[serde(default)]
    pub name: String,
}

/// `Policy.Peer`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Peer {
    /// Pods (of the policy's namespace unless `namespaces` is set).
    #[serde(default)]
    pub pods: Option<Selector>,
    /// Namespaces.
    #[serde(default)]
    pub namespaces: Option<Selector>,
    /// IP block.
    #[serde(default, alias = "ip_block")]
    pub ip_block: Option<IpBlockL>,
}

/// `Peer.IPBlock`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct IpBlockL {
    /// CIDR.
    #[serde(default)]
    pub cidr: String,
    /// Exceptions.
    #[serde(default)]
    pub except: Vec<String>,
}

/// `Policy.IngressRule`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct Rule {
    /// Ports.
    #[serde(default)]
    pub port: Vec<PortL>,
    /// Sources.
    #[serde(default)]
    pub from: Vec<Peer>,
}

/// `Policy.EgressRule`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct EgressRuleL {
    /// Ports.
    #[serde(default)]
    pub port: Vec<PortL>,
    /// Destinations.
    #[serde(default)]
    pub to: Vec<Peer>,
}

/// Keys that identify a document as a Ligato policy (it has no apiVersion/kind).
pub const DETECT_KEYS: &[&str] = &[
    "pods",
    "policyType",
    "policy_type",
    "ingressRule",
    "ingress_rule",
    "egressRule",
    "egress_rule",
];

impl Policy {
    /// Maps the Ligato policy onto Kubernetes metadata and a NetworkPolicy spec.
    /// Errors name the offending field path.
    pub fn into_k8s(self) -> Result<(ObjectMeta, NetworkPolicySpec), (String, String)> {
        let meta = ObjectMeta {
            name: self.name,
            namespace: Some(self.namespace).filter(|n| !n.is_empty()),
            labels: labels(&self.label),
            annotations: BTreeMap::new(),
            creation_timestamp: None,
        };
        let policy_types = match &self.policy_type {
            None => None,
            Some(v) => match v
                .resolve(&["DEFAULT", "INGRESS", "EGRESS", "INGRESS_AND_EGRESS"])
                .map_err(|e| ("policyType".to_string(), e.to_string()))?
            {
                0 => None,
                1 => Some(vec![PolicyType::Ingress]),
                2 => Some(vec![PolicyType::Egress]),
                _ => Some(vec![PolicyType::Ingress, PolicyType::Egress]),
            },
        };
        let pod_selector = match &self.pods {
            Some(s) => selector(s, "pods")?,
            None => LabelSelector::default(),
        };
        let mut ingress = Vec::new();
        for (i, r) in self.ingress_rule.iter().enumerate() {
            let at = format!("ingressRule[{i}]");
            ingress.push(IngressRule {
                ports: ports(&r.port, &at)?,
                from: peers(&r.from, &format!("{at}.from"))?,
            });
        }
        let mut egress = Vec::new();
        for (i, r) in self.egress_rule.iter().enumerate() {
            let at = format!("egressRule[{i}]");
            egress.push(EgressRule {
                ports: ports(&r.port, &at)?,
                to: peers(&r.to, &format!("{at}.to"))?,
            });
        }
        Ok((
            meta,
            NetworkPolicySpec {
                pod_selector,
                policy_types,
                // proto3 cannot tell an absent list from an empty one: absent it is.
                ingress: Some(ingress),
                egress: (!egress.is_empty()).then_some(egress),
            },
        ))
    }
}

fn labels(list: &[Label]) -> BTreeMap<String, String> {
    list.iter()
        .map(|l| (l.key.clone(), l.value.clone()))
        .collect()
}

fn selector(s: &Selector, at: &str) -> Result<LabelSelector, (String, String)> {
    let mut match_expressions = Vec::new();
    for (i, e) in s.match_expression.iter().enumerate() {
        let op = match &e.operator {
            None => 0,
            Some(v) => v
                .resolve(&["IN", "NOT_IN", "EXISTS", "DOES_NOT_EXIST"])
                .map_err(|m| (format!("{at}.matchExpression[{i}].operator"), m.to_string()))?,
        };
        let operator = [
            SelectorOperator::In,
            SelectorOperator::NotIn,
            SelectorOperator::Exists,
            SelectorOperator::DoesNotExist,
        ][op];
        match_expressions.push(LabelSelectorRequirement {
            key: e.key.clone(),
            operator,
            values: e.value.clone(),
        });
    }
    Ok(LabelSelector {
        match_labels: labels(&s.match_label),
        match_expressions,
    })
}

fn ports(list: &[PortL], at: &str) -> Result<Vec<NetworkPolicyPort>, (String, String)> {
    let mut out = Vec::new();
    for (i, p) in list.iter().enumerate() {
        let here = format!("{at}.port[{i}]");
        let protocol = match &p.protocol {
            None => Protocol::Tcp,
            Some(v) => match v
                .resolve(&["TCP", "UDP"])
                .map_err(|m| (format!("{here}.protocol"), m.to_string()))?
            {
                0 => Protocol::Tcp,
                _ => Protocol::Udp,
            },
        };
        let port = match &p.port {
            None => None,
            Some(pn) => {
                let kind = match &pn.kind {
                    None => 0,
                    Some(v) => v
                        .resolve(&["NUMBER", "NAME"])
                        .map_err(|m| (format!("{here}.port.type"), m.to_string()))?,
                };
                match kind {
                    0 if pn.number == 0 => None,
                    0 => Some(IntOrString::Int(pn.number)),
                    _ => Some(IntOrString::Str(pn.name.clone())),
                }
            }
        };
        out.push(NetworkPolicyPort {
            protocol: Some(protocol),
            port,
            end_port: None,
        });
    }
    Ok(out)
}

fn peers(list: &[Peer], at: &str) -> Result<Vec<NetworkPolicyPeer>, (String, String)> {
    let mut out = Vec::new();
    for (i, p) in list.iter().enumerate() {
        let here = format!("{at}[{i}]");
        out.push(NetworkPolicyPeer {
            pod_selector: p
                .pods
                .as_ref()
                .map(|s| selector(s, &format!("{here}.pods")))
                .transpose()?,
            namespace_selector: p
                .namespaces
                .as_ref()
                .map(|s| selector(s, &format!("{here}.namespaces")))
                .transpose()?,
            ip_block: p.ip_block.as_ref().map(|b| IpBlock {
                cidr: b.cidr.clone(),
                except: b.except.clone(),
            }),
        });
    }
    Ok(out)
}
