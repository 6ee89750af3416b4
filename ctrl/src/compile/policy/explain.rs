//! Explaining a policy verdict: the compiled tables decide, and a straight walk over the
//! policies names the policy and rule that allowed each direction (or the policies that
//! isolate the direction that denied).
//!
//! The walk reads the API text directly (selectors, ipBlocks, ports, named ports on the
//! destination pod); the property tests check that it agrees with the tables on every
//! generated connection, so the names explain prints are the reason the tables allow.

use std::net::IpAddr;

use serde_json::{json, Value};
use sluice_dataplane::tables::policy::{DenyReason, DirOutcome, ProtoClass};

use super::semantics::{has_type, proto_class, rules, term_of};
use crate::compile::ir::{Ir, Node, Policy, Workload};
use crate::model::meta::{IntOrString, LabelSelector};
use crate::model::netpol::{NetworkPolicyPeer, NetworkPolicyPort, PolicyType};
use sluice_dataplane::tables::policy::PolicyTables;

/// What an address is, for policy.
#[derive(Debug, Clone, Copy)]
pub enum Endpoint<'a> {
    /// A pod (the first workload with this address).
    Pod(&'a Workload),
    /// A node's address.
    Node(&'a Node),
    /// Anything else.
    External,
}

impl Endpoint<'_> {
    /// Classifies an address against the IR.
    pub fn of(ir: &Ir, ip: IpAddr) -> Endpoint<'_> {
        if let Some(w) = ir.workloads.iter().find(|w| w.ip == ip) {
            return Endpoint::Pod(w);
        }
        if let Some(n) = ir.nodes.iter().find(|n| n.addresses.contains(&ip)) {
            return Endpoint::Node(n);
        }
        Endpoint::External
    }

    fn pod(&self) -> Option<&Workload> {
        match self {
            Endpoint::Pod(w) => Some(w),
            _ => None,
        }
    }

    fn describe(&self, ip: IpAddr) -> String {
        match self {
            Endpoint::Pod(w) => format!("pod {}/{} ({ip})", w.namespace, w.pod),
            Endpoint::Node(n) => format!("node {} ({ip})", n.name),
            Endpoint::External => format!("{ip} (not a pod)"),
        }
    }
}

fn ns_labels<'a>(ir: &'a Ir, ns: &str) -> Option<&'a std::collections::BTreeMap<String, String>> {
    ir.namespaces.get(ns)
}

fn selector_matches_ns(ir: &Ir, sel: &LabelSelector, ns: &str) -> bool {
    match ns_labels(ir, ns) {
        Some(l) => sel.matches(l),
        None => sel.matches(&std::collections::BTreeMap::from([(
            "kubernetes.io/metadata.name".to_string(),
            ns.to_string(),
        )])),
    }
}

/// Whether one peer of a policy in `policy_ns` names the address `ip` (a pod when
/// `pod` is set).
pub fn peer_matches(
    ir: &Ir,
    policy_ns: &str,
    peer: &NetworkPolicyPeer,
    ip: IpAddr,
    pod: Option<&Workload>,
) -> bool {
    if let Some(b) = &peer.ip_block {
        return term_of(b).is_some_and(|t| t.contains(ip));
    }
    let Some(w) = pod else {
        return false;
    };
    match (&peer.pod_selector, &peer.namespace_selector) {
        (None, None) => false,
        (Some(ps), None) => w.namespace == policy_ns && ps.matches(&w.labels),
        (ps, Some(nss)) => {
            selector_matches_ns(ir, nss, &w.namespace)
                && ps.as_ref().is_none_or(|p| p.matches(&w.labels))
        }
    }
}

/// Whether one port item allows `(proto, port)` towards `dest` (the pod named ports
/// resolve on, if the destination is a pod).
pub fn port_matches(
    item: &NetworkPolicyPort,
    proto: u8,
    port: u16,
    dest: Option<&Workload>,
) -> bool {
    let p = item.protocol.unwrap_or_default();
    if proto_class(p) != ProtoClass::from_ip_proto(proto) {
        return false;
    }
    match &item.port {
        None => true,
        Some(IntOrString::Int(n)) => {
            let end = item.end_port.unwrap_or(*n);
            *n <= i64::from(port) && i64::from(port) <= end
        }
        Some(IntOrString::Str(name)) => dest.is_some_and(|d| {
            d.named_ports
                .iter()
                .any(|(n, pr, num)| n == name && *pr == p && *num == port)
        }),
    }
}

/// Whether a rule allows the connection, read straight from the API text.
#[allow(clippy::too_many_arguments)]
pub fn rule_allows(
    ir: &Ir,
    policy: &Policy,
    dir: PolicyType,
    ports: &[NetworkPolicyPort],
    peers: &[NetworkPolicyPeer],
    local: &Workload,
    peer_ip: IpAddr,
    peer_pod: Option<&Workload>,
    proto: u8,
    port: u16,
) -> bool {
    let dest = match dir {
        PolicyType::Ingress => Some(local),
        PolicyType::Egress => peer_pod,
    };
    (peers.is_empty()
        || peers
            .iter()
            .any(|p| peer_matches(ir, &policy.namespace, p, peer_ip, peer_pod)))
        && (ports.is_empty() || ports.iter().any(|i| port_matches(i, proto, port, dest)))
}

/// The policies isolating `local` in `dir` (indices into `Ir::policies`).
pub fn selecting(ir: &Ir, local: &Workload, dir: PolicyType) -> Vec<usize> {
    ir.policies
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            p.namespace == local.namespace
                && p.spec.pod_selector.matches(&local.labels)
                && has_type(p, dir)
        })
        .map(|(i, _)| i)
        .collect()
}

/// The first `(policy index, rule index)` allowing the connection in `dir` at `local`.
pub fn first_allowing_rule(
    ir: &Ir,
    dir: PolicyType,
    local: &Workload,
    peer_ip: IpAddr,
    peer_pod: Option<&Workload>,
    proto: u8,
    port: u16,
) -> Option<(usize, usize)> {
    for pi in selecting(ir, local, dir) {
        let p = &ir.policies[pi];
        for (ri, (ports, peers)) in rules(p, dir).into_iter().enumerate() {
            if rule_allows(
                ir, p, dir, ports, peers, local, peer_ip, peer_pod, proto, port,
            ) {
                return Some((pi, ri));
            }
        }
    }
    None
}

fn policy_name(p: &Policy) -> String {
    format!("{}/{}", p.namespace, p.name)
}

fn dir_name(dir: PolicyType) -> &'static str {
    match dir {
        PolicyType::Ingress => "ingress",
        PolicyType::Egress => "egress",
    }
}

fn deny_code(r: DenyReason) -> &'static str {
    match r {
        DenyReason::NoRules => "no-rules",
        DenyReason::NoMatchingPeer => "no-rule-for-peer",
        DenyReason::PortNotAllowed => "port-not-allowed",
    }
}

fn proto_name(proto: u8) -> String {
    match proto {
        6 => "TCP".into(),
        17 => "UDP".into(),
        132 => "SCTP".into(),
        p => format!("IP protocol {p}"),
    }
}

/// One direction, as JSON, and a sentence for the reason.
#[allow(clippy::too_many_arguments)]
fn direction(
    ir: &Ir,
    dir: PolicyType,
    outcome: DirOutcome,
    local_ip: IpAddr,
    local: Endpoint<'_>,
    peer_ip: IpAddr,
    peer: Endpoint<'_>,
    proto: u8,
    port: u16,
) -> (Value, String) {
    let d = dir_name(dir);
    let who = local.describe(local_ip);
    let Some(w) = local.pod() else {
        return (
            json!({"endpoint": who, "isolated": false, "allowed": true, "outcome": "not-isolated"}),
            format!("{d}: {who} is never isolated"),
        );
    };
    let by: Vec<String> = selecting(ir, w, dir)
        .into_iter()
        .map(|i| policy_name(&ir.policies[i]))
        .collect();
    match outcome {
        DirOutcome::NotIsolated => (
            json!({"endpoint": who, "isolated": false, "allowed": true, "outcome": "not-isolated",
                   "selected_by": by}),
            format!(
                "{d}: no policy selecting {who} has type {}",
                if dir == PolicyType::Ingress {
                    "Ingress"
                } else {
                    "Egress"
                }
            ),
        ),
        DirOutcome::OwnNode => (
            json!({"endpoint": who, "isolated": true, "allowed": true, "outcome": "own-node",
                   "selected_by": by}),
            format!(
                "{d}: {} is the node {who} runs on (always allowed)",
                peer.describe(peer_ip)
            ),
        ),
        DirOutcome::Allowed => {
            match first_allowing_rule(ir, dir, w, peer_ip, peer.pod(), proto, port) {
                Some((pi, ri)) => {
                    let name = policy_name(&ir.policies[pi]);
                    let rule = format!("{d}[{ri}]");
                    (
                        json!({"endpoint": who, "isolated": true, "allowed": true, "outcome": "allowed",
                               "policy": name, "rule": rule, "selected_by": by}),
                        format!("{d}: allowed by {name} {rule}"),
                    )
                }
                None => (
                    json!({"endpoint": who, "isolated": true, "allowed": true, "outcome": "allowed",
                           "policy": null, "rule": null, "selected_by": by,
                           "note": "the tables allow this but no rule was found by the walk: please report"}),
                    format!("{d}: allowed by the tables (no rule found to name)"),
                ),
            }
        }
        DirOutcome::Denied(r) => (
            json!({"endpoint": who, "isolated": true, "allowed": false, "outcome": "denied",
                   "deny_reason": deny_code(r), "selected_by": by}),
            format!(
                "denied at {d} of {who}: isolated by {} and no rule allows {}/{port} {} {}",
                by.join(", "),
                proto_name(proto),
                if dir == PolicyType::Ingress {
                    "from"
                } else {
                    "to"
                },
                peer.describe(peer_ip)
            ),
        ),
    }
}

/// The `policy` object of `sluice explain` for a connection `src -> dst:port`:
/// `{"verdict": "allow"|"deny", "egress": ..., "ingress": ..., "reason": ...}`.
pub fn explain_connection(
    ir: &Ir,
    tables: &PolicyTables,
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    port: u16,
) -> Value {
    let decision = tables.decide(src, dst, proto, port);
    let (s, d) = (Endpoint::of(ir, src), Endpoint::of(ir, dst));
    let (eg, eg_reason) = direction(
        ir,
        PolicyType::Egress,
        decision.egress,
        src,
        s,
        dst,
        d,
        proto,
        port,
    );
    let (ing, ing_reason) = direction(
        ir,
        PolicyType::Ingress,
        decision.ingress,
        dst,
        d,
        src,
        s,
        proto,
        port,
    );
    let allow = decision.verdict().is_allow();
    let reason = if allow {
        format!("{eg_reason}; {ing_reason}")
    } else if !decision.egress.allows() {
        eg_reason
    } else {
        ing_reason
    };
    json!({
        "verdict": if allow { "allow" } else { "deny" },
        "egress": eg,
        "ingress": ing,
        "reason": reason,
    })
}
