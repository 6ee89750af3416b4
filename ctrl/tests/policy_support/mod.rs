//! Shared by the policy tests: a reference evaluator of Kubernetes NetworkPolicy written
//! straight from the API documentation, with no code shared with the compiler (it has
//! its own label selector matching too), and small helpers.
//!
//! The API text it follows (networking.k8s.io/v1, NetworkPolicySpec and friends):
//!
//! - "podSelector selects the pods to which this NetworkPolicy object applies ... An
//!   empty podSelector selects all pods in this namespace."
//! - policyTypes: "If this field is not specified, it will default based on the
//!   existence of ingress or egress rules; policies that contain an egress section are
//!   assumed to affect egress, and all policies (whether or not they contain an ingress
//!   section) are assumed to affect ingress." (API defaulting: empty list = unset; an
//!   egress section means `len(egress) > 0`.)
//! - "Traffic is allowed to a pod if there are no NetworkPolicies selecting the pod (and
//!   cluster policy otherwise allows the traffic), OR if the traffic source is the pod's
//!   local node, OR if the traffic matches at least one ingress rule across all of the
//!   NetworkPolicy objects whose podSelector matches the pod." Egress likewise, without
//!   the node clause.
//! - Rules: "traffic matches both ports and from/to"; empty ports = all ports, empty
//!   from/to = all sources/destinations.
//! - Peers: podSelector alone = pods in the policy's namespace; namespaceSelector alone
//!   = all pods in matching namespaces; both = pods matching podSelector in namespaces
//!   matching namespaceSelector; ipBlock = CIDR minus except (matches any address).
//! - Ports: protocol defaults to TCP; a named port is looked up on the destination pod;
//!   endPort makes an inclusive range.
//! - Label selectors: matchLabels AND matchExpressions; In, NotIn (also true when the key
//!   is absent), Exists, DoesNotExist; empty selects everything.
//!
//! Choices where the text is silent (the same as the compiler's, documented there): a
//! named port matches a container port of the same name and protocol; a rule without
//! ports allows every IP protocol, a rule with ports only the protocols it lists; the
//! first pod with an address owns it; an address that is a pod is not a node address.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::IpAddr;

use sluice_ctrl::compile::ir::{Ir, Policy, Workload};
use sluice_ctrl::model::meta::{IntOrString, LabelSelector, Protocol, SelectorOperator};
use sluice_ctrl::model::netpol::{NetworkPolicyPeer, NetworkPolicyPort, PolicyType};

/// Label selector semantics, written again.
pub fn selects(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    for (k, v) in &sel.match_labels {
        if labels.get(k) != Some(v) {
            return false;
        }
    }
    for r in &sel.match_expressions {
        let have = labels.get(&r.key);
        let ok = match r.operator {
            SelectorOperator::In => matches!(have, Some(v) if r.values.contains(v)),
            SelectorOperator::NotIn => match have {
                None => true,
                Some(v) => !r.values.contains(v),
            },
            SelectorOperator::Exists => have.is_some(),
            SelectorOperator::DoesNotExist => have.is_none(),
        };
        if !ok {
            return false;
        }
    }
    true
}

fn types(p: &Policy) -> (bool, bool) {
    match &p.spec.policy_types {
        Some(t) if !t.is_empty() => (
            t.contains(&PolicyType::Ingress),
            t.contains(&PolicyType::Egress),
        ),
        _ => (true, p.spec.egress.as_ref().is_some_and(|e| !e.is_empty())),
    }
}

fn pod_at(ir: &Ir, ip: IpAddr) -> Option<&Workload> {
    ir.workloads.iter().find(|w| w.ip == ip)
}

fn proto_number(p: Protocol) -> u8 {
    match p {
        Protocol::Tcp => 6,
        Protocol::Udp => 17,
        Protocol::Sctp => 132,
    }
}

fn ns_labels(ir: &Ir, ns: &str) -> BTreeMap<String, String> {
    ir.namespaces.get(ns).cloned().unwrap_or_else(|| {
        BTreeMap::from([("kubernetes.io/metadata.name".to_string(), ns.to_string())])
    })
}

fn peer_ok(ir: &Ir, policy_ns: &str, peer: &NetworkPolicyPeer, ip: IpAddr) -> bool {
    if let Some(b) = &peer.ip_block {
        let Ok(cidr) = b.cidr.parse::<ipnet::IpNet>() else {
            return false;
        };
        let excepted = b
            .except
            .iter()
            .filter_map(|e| e.parse::<ipnet::IpNet>().ok())
            .any(|e| e.contains(&ip));
        return cidr.contains(&ip) && !excepted;
    }
    let Some(pod) = pod_at(ir, ip) else {
        return false;
    };
    let ns_ok = match &peer.namespace_selector {
        None => pod.namespace == policy_ns,
        Some(s) => selects(s, &ns_labels(ir, &pod.namespace)),
    };
    let pod_ok = match &peer.pod_selector {
        None => peer.namespace_selector.is_some(),
        Some(s) => selects(s, &pod.labels),
    };
    ns_ok && pod_ok
}

fn port_ok(item: &NetworkPolicyPort, proto: u8, port: u16, dest: Option<&Workload>) -> bool {
    let want = item.protocol.unwrap_or(Protocol::Tcp);
    if proto_number(want) != proto {
        return false;
    }
    match &item.port {
        None => true,
        Some(IntOrString::Int(n)) => match item.end_port {
            None => i64::from(port) == *n,
            Some(e) => *n <= i64::from(port) && i64::from(port) <= e,
        },
        Some(IntOrString::Str(name)) => match dest {
            None => false,
            Some(d) => d
                .named_ports
                .iter()
                .any(|(n, p, num)| n == name && *p == want && *num == port),
        },
    }
}

#[allow(clippy::too_many_arguments)]
fn rule_ok(
    ir: &Ir,
    policy_ns: &str,
    ports: &[NetworkPolicyPort],
    peers: &[NetworkPolicyPeer],
    peer_ip: IpAddr,
    proto: u8,
    port: u16,
    dest: Option<&Workload>,
) -> bool {
    let peers_ok = peers.is_empty() || peers.iter().any(|p| peer_ok(ir, policy_ns, p, peer_ip));
    let ports_ok = ports.is_empty() || ports.iter().any(|i| port_ok(i, proto, port, dest));
    peers_ok && ports_ok
}

/// `(egress allowed at the source, ingress allowed at the destination)`.
pub fn decide(ir: &Ir, src: IpAddr, dst: IpAddr, proto: u8, port: u16) -> (bool, bool) {
    let src_pod = pod_at(ir, src);
    let dst_pod = pod_at(ir, dst);
    let egress = match src_pod {
        None => true,
        Some(me) => {
            let mine: Vec<&Policy> = ir
                .policies
                .iter()
                .filter(|p| {
                    p.namespace == me.namespace && selects(&p.spec.pod_selector, &me.labels)
                })
                .filter(|p| types(p).1)
                .collect();
            mine.is_empty()
                || mine.iter().any(|p| {
                    p.spec.egress.iter().flatten().any(|r| {
                        rule_ok(ir, &p.namespace, &r.ports, &r.to, dst, proto, port, dst_pod)
                    })
                })
        }
    };
    let ingress = match dst_pod {
        None => true,
        Some(me) => {
            let mine: Vec<&Policy> = ir
                .policies
                .iter()
                .filter(|p| {
                    p.namespace == me.namespace && selects(&p.spec.pod_selector, &me.labels)
                })
                .filter(|p| types(p).0)
                .collect();
            let from_own_node = src_pod.is_none()
                && me.node.as_ref().is_some_and(|n| {
                    ir.nodes
                        .iter()
                        .any(|node| &node.name == n && node.addresses.contains(&src))
                });
            mine.is_empty()
                || from_own_node
                || mine.iter().any(|p| {
                    p.spec.ingress.iter().flatten().any(|r| {
                        rule_ok(
                            ir,
                            &p.namespace,
                            &r.ports,
                            &r.from,
                            src,
                            proto,
                            port,
                            Some(me),
                        )
                    })
                })
        }
    };
    (egress, ingress)
}
