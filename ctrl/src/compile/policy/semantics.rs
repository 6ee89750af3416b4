//! Kubernetes NetworkPolicy semantics the compiler and `explain` share: policy types
//! with their defaulting, the rules of a direction, protocols and ipBlocks.

use ipnet::IpNet;
use sluice_dataplane::tables::policy::ProtoClass;

use super::classes::Term;
use crate::compile::ir::Policy;
use crate::model::meta::Protocol;
use crate::model::netpol::{NetworkPolicyPeer, NetworkPolicyPort, PolicyType};

/// Whether a policy has a type, with Kubernetes' defaulting: when `policyTypes` is
/// absent or empty, Ingress always and Egress iff `egress` is non-empty.
pub fn has_type(p: &Policy, t: PolicyType) -> bool {
    match &p.spec.policy_types {
        Some(types) if !types.is_empty() => types.contains(&t),
        _ => match t {
            PolicyType::Ingress => true,
            PolicyType::Egress => p.spec.egress.as_ref().is_some_and(|e| !e.is_empty()),
        },
    }
}

/// The rules of a policy in one direction (empty when it lacks the type): `(ports,
/// peers)` pairs.
pub fn rules(p: &Policy, t: PolicyType) -> Vec<(&[NetworkPolicyPort], &[NetworkPolicyPeer])> {
    if !has_type(p, t) {
        return Vec::new();
    }
    match t {
        PolicyType::Ingress => p
            .spec
            .ingress
            .iter()
            .flatten()
            .map(|r| (r.ports.as_slice(), r.from.as_slice()))
            .collect(),
        PolicyType::Egress => p
            .spec
            .egress
            .iter()
            .flatten()
            .map(|r| (r.ports.as_slice(), r.to.as_slice()))
            .collect(),
    }
}

/// The class of an IP protocol number's policy protocol.
pub fn proto_class(p: Protocol) -> ProtoClass {
    match p {
        Protocol::Tcp => ProtoClass::Tcp,
        Protocol::Udp => ProtoClass::Udp,
        Protocol::Sctp => ProtoClass::Sctp,
    }
}

/// Parses and normalises a CIDR (validation already rejected garbage).
pub fn parse_cidr(s: &str) -> Option<IpNet> {
    s.parse::<IpNet>().ok().map(|n| n.trunc())
}

/// The address-class term of an ipBlock (`None` when its CIDR does not parse).
pub(super) fn term_of(b: &crate::model::netpol::IpBlock) -> Option<Term> {
    let cidr = parse_cidr(&b.cidr)?;
    let mut except: Vec<IpNet> = b.except.iter().filter_map(|e| parse_cidr(e)).collect();
    except.sort();
    except.dedup();
    Some(Term { cidr, except })
}
