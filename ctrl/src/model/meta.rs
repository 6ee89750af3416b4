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
    /// When the object was created (RFC 3339): the first key of route precedence
    /// ([`ObjectMeta::precedence`]).
    #[serde(default)]
    pub creation_timestamp: Option<String>,
}

/// Where an object stands when objects compete for the same hostname, listener or port
/// (Gateway API and Istio): oldest `creationTimestamp` first, then `namespace/name`
/// alphabetically; objects without a timestamp sort after those with one. Compare with
/// `Ord` (smaller wins).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Precedence {
    /// `false` when a timestamp is given (those sort first).
    no_timestamp: bool,
    /// Seconds since the Unix epoch, and nanoseconds.
    created: (i64, u32),
    namespace: String,
    name: String,
}

impl ObjectMeta {
    /// This object's [`Precedence`] (an unparsable timestamp counts as none; validation
    /// reports it).
    pub fn precedence(&self) -> Precedence {
        let created = self.creation_timestamp.as_deref().and_then(parse_rfc3339);
        Precedence {
            no_timestamp: created.is_none(),
            created: created.unwrap_or((0, 0)),
            namespace: self.namespace().to_string(),
            name: self.name.clone(),
        }
    }

    /// The namespace, with Kubernetes' default applied.
    pub fn namespace(&self) -> &str {
        match self.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => ns,
            _ => "default",
        }
    }
}

/// Parses an RFC 3339 timestamp (`2024-01-02T03:04:05Z`, with optional fraction and a
/// `Z` or `±hh:mm` offset) into seconds since the Unix epoch and nanoseconds.
pub fn parse_rfc3339(s: &str) -> Option<(i64, u32)> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())
            .flatten()
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut nanos: u32 = 0;
    if b[i] == b'.' {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
        let digits = &s[start..i.min(start + 9)];
        nanos = digits.parse::<u32>().ok()? * 10u32.pow(9 - digits.len() as u32);
    }
    let offset = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        b'+' | b'-' if i + 6 == b.len() && b[i + 3] == b':' => {
            let o = num(i + 1..i + 3)? * 3600 + num(i + 4..i + 6)? * 60;
            if b[i] == b'+' {
                o
            } else {
                -o
            }
        }
        _ => return None,
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, m) = if mo <= 2 {
        (y - 1, mo + 9)
    } else {
        (y, mo - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + h * 3600 + mi * 60 + sec - offset, nanos))
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
    fn rfc3339_timestamps_parse_to_epoch_seconds() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some((0, 0)));
        assert_eq!(
            parse_rfc3339("2024-02-29T23:59:59Z"),
            Some((1_709_251_199, 0))
        );
        assert_eq!(
            parse_rfc3339("2024-02-29T23:59:59.25Z"),
            Some((1_709_251_199, 250_000_000))
        );
        assert_eq!(
            parse_rfc3339("2024-03-01T01:59:59+02:00"),
            Some((1_709_251_199, 0))
        );
        assert_eq!(parse_rfc3339("1969-12-31T23:59:59Z"), Some((-1, 0)));
        for bad in [
            "",
            "2024-02-29",
            "2024-13-01T00:00:00Z",
            "2024-02-29T23:59:59",
            "x024-02-29T23:59:59Z",
            "2024-02-29T23:59:59Zjunk",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn precedence_is_oldest_first_then_namespace_and_name_then_no_timestamp() {
        let m = |ts: Option<&str>, ns: &str, name: &str| ObjectMeta {
            name: name.into(),
            namespace: Some(ns.into()),
            creation_timestamp: ts.map(Into::into),
            ..ObjectMeta::default()
        };
        let mut v = [
            m(None, "a", "a"),
            m(Some("2024-01-02T00:00:00Z"), "a", "a"),
            m(Some("2024-01-01T00:00:00Z"), "z", "z"),
            m(Some("2024-01-02T00:00:00Z"), "a", "0"),
            m(None, "0", "b"),
        ];
        v.sort_by_key(ObjectMeta::precedence);
        let order: Vec<String> = v
            .iter()
            .map(|x| format!("{}/{}", x.namespace(), x.name))
            .collect();
        assert_eq!(order, ["z/z", "a/0", "a/a", "0/b", "a/a"]);
    }

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
