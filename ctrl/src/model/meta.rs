//! Types shared by every kind: object metadata, label selectors, int-or-string.

use std::collections::BTreeMap;

use serde::Deserialize;

/// Kubernetes `ObjectMeta`, reduced to what sluice reads. Every other metadata field
/// (`uid`, `managedFields`, `resourceVersion`, ...) is accepted and ignored, so that
/// `kubectl get -o yaml` output loads unchanged.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// Object name; required by validation for every kind.
    #[serde(default)]
    pub name: String,
    /// Namespace; empty means `default` for namespaced kinds.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Labels, used by selectors.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations (`sluice.dev/source-nat` on gateways is read; see
    /// [`SOURCE_NAT_ANNOTATION`]).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

impl ObjectMeta {
    /// The namespace, with Kubernetes' default applied.
    pub fn namespace(&self) -> &str {
        match self.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => ns,
            _ => "default",
        }
    }
}

/// The gateway annotation that turns source NAT off for all its listeners: `"false"`
/// makes them transparent, `"true"` (the default) keeps source NAT.
pub const SOURCE_NAT_ANNOTATION: &str = "sluice.dev/source-nat";

/// A [`SOURCE_NAT_ANNOTATION`] value that is neither `"true"` nor `"false"`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AnnotationError {
    /// The annotation holds another value (kept here).
    #[error("`{SOURCE_NAT_ANNOTATION}` must be \"true\" or \"false\", not {0:?}")]
    SourceNat(String),
}

/// Whether a gateway's annotations make its listeners transparent; an error (for
/// validation to report) when [`SOURCE_NAT_ANNOTATION`] is neither `"true"` nor `"false"`.
pub fn transparent_by_annotation(
    annotations: &BTreeMap<String, String>,
) -> Result<bool, AnnotationError> {
    match annotations.get(SOURCE_NAT_ANNOTATION).map(String::as_str) {
        None | Some("true") => Ok(false),
        Some("false") => Ok(true),
        Some(other) => Err(AnnotationError::SourceNat(other.to_string())),
    }
}

/// A Kubernetes `LabelSelector`: `matchLabels` AND every `matchExpressions` entry.
/// An empty selector selects everything.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Exact label matches.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements.
    #[serde(default)]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One set-based requirement of a [`LabelSelector`].
#[derive(Debug, Clone, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelectorRequirement {
    /// The label key.
    pub key: String,
    /// How the key's value is compared with `values`.
    pub operator: SelectorOperator,
    /// Values for `In` / `NotIn`; must be empty for `Exists` / `DoesNotExist`.
    #[serde(default)]
    pub values: Vec<String>,
}

/// The four selector operators of Kubernetes.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Hash)]
pub enum SelectorOperator {
    /// The label exists and its value is in the set.
    In,
    /// The label is absent, or its value is not in the set.
    NotIn,
    /// The label exists.
    Exists,
    /// The label does not exist.
    DoesNotExist,
}

impl LabelSelector {
    /// Whether the selector selects an object with these labels.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }

    /// Whether the selector is empty (selects everything).
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }
}

impl LabelSelectorRequirement {
    /// Whether one object's labels satisfy this requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            SelectorOperator::In => value.is_some_and(|v| self.values.contains(v)),
            SelectorOperator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            SelectorOperator::Exists => value.is_some(),
            SelectorOperator::DoesNotExist => value.is_none(),
        }
    }
}

/// Kubernetes `IntOrString` (ports, target ports).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(untagged)]
pub enum IntOrString {
    /// A number.
    Int(i64),
    /// A name (or a number written as a string).
    Str(String),
}

impl std::fmt::Display for IntOrString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IntOrString::Int(n) => write!(f, "{n}"),
            IntOrString::Str(s) => f.write_str(s),
        }
    }
}

/// Transport protocols of Kubernetes ports (`TCP` is the default everywhere).
#[derive(
    Debug, Clone, Copy, Default, Deserialize, serde::Serialize, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
pub enum Protocol {
    /// TCP.
    #[default]
    #[serde(rename = "TCP")]
    Tcp,
    /// UDP.
    #[serde(rename = "UDP")]
    Udp,
    /// SCTP.
    #[serde(rename = "SCTP")]
    Sctp,
}

impl Protocol {
    /// The upper-case name used in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_nat_annotation_is_true_false_or_absent() {
        let with = |v: &str| BTreeMap::from([(SOURCE_NAT_ANNOTATION.to_string(), v.to_string())]);
        assert_eq!(transparent_by_annotation(&BTreeMap::new()), Ok(false));
        assert_eq!(transparent_by_annotation(&with("true")), Ok(false));
        assert_eq!(transparent_by_annotation(&with("false")), Ok(true));
        let e = transparent_by_annotation(&with("no")).expect_err("not a boolean");
        assert_eq!(
            e.to_string(),
            "`sluice.dev/source-nat` must be \"true\" or \"false\", not \"no\""
        );
    }
}
