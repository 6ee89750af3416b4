//! NetworkPolicy (and Ligato policy): selectors, peers, ipBlocks and ports.

use crate::diag::Reporter;
use crate::load::Item;
use crate::model::meta::IntOrString;
use crate::model::netpol::{NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec};

use super::fields::{cidr, port_number, selector};

pub(super) fn network_policy(it: &Item, spec: &NetworkPolicySpec, r: &mut Reporter) {
    let prefix = match it.object.format() {
        crate::model::Format::Ligato => "",
        _ => "spec.",
    };
    selector(it, &format!("{prefix}podSelector"), &spec.pod_selector, r);
    let check_peers = |peers: &[NetworkPolicyPeer], at: &str, r: &mut Reporter| {
        for (i, p) in peers.iter().enumerate() {
            let here = format!("{at}[{i}]");
            if let Some(s) = &p.pod_selector {
                selector(it, &format!("{here}.podSelector"), s, r);
            }
            if let Some(s) = &p.namespace_selector {
                selector(it, &format!("{here}.namespaceSelector"), s, r);
            }
            if let Some(b) = &p.ip_block {
                if p.pod_selector.is_some() || p.namespace_selector.is_some() {
                    r.error(
                        &it.path(&format!("{here}.ipBlock")),
                        "ipBlock cannot be combined with podSelector or namespaceSelector in one peer",
                    );
                }
                let outer = cidr(it, &format!("{here}.ipBlock.cidr"), &b.cidr, r);
                for (j, e) in b.except.iter().enumerate() {
                    let eat = format!("{here}.ipBlock.except[{j}]");
                    if let (Some(outer), Some(inner)) = (outer, cidr(it, &eat, e, r)) {
                        if !outer.contains(&inner) {
                            r.error(
                                &it.path(&eat),
                                format!("except `{e}` is not inside cidr `{}`", b.cidr),
                            );
                        } else if inner == outer {
                            // The API server requires a strict subset.
                            r.error(
                                &it.path(&eat),
                                format!(
                                    "except `{e}` equals cidr `{}`: it must be a strict subset",
                                    b.cidr
                                ),
                            );
                        }
                    }
                }
            }
            if p.pod_selector.is_none() && p.namespace_selector.is_none() && p.ip_block.is_none() {
                r.error(
                    &it.path(&here),
                    "a peer needs podSelector, namespaceSelector or ipBlock",
                );
            }
        }
    };
    for (i, rule) in spec.ingress.iter().flatten().enumerate() {
        check_peers(&rule.from, &format!("{prefix}ingress[{i}].from"), r);
        policy_ports(it, &rule.ports, &format!("{prefix}ingress[{i}].ports"), r);
    }
    for (i, rule) in spec.egress.iter().flatten().enumerate() {
        check_peers(&rule.to, &format!("{prefix}egress[{i}].to"), r);
        policy_ports(it, &rule.ports, &format!("{prefix}egress[{i}].ports"), r);
    }
}

fn policy_ports(it: &Item, ports: &[NetworkPolicyPort], at: &str, r: &mut Reporter) {
    for (i, p) in ports.iter().enumerate() {
        let here = format!("{at}[{i}]");
        match (&p.port, p.end_port) {
            (Some(IntOrString::Int(n)), end) => {
                port_number(it, &format!("{here}.port"), *n, r);
                if let Some(e) = end {
                    if e < *n || e > 65535 {
                        r.error(
                            &it.path(&format!("{here}.endPort")),
                            format!("endPort {e} must be >= port {n} and <= 65535"),
                        );
                    }
                }
            }
            (Some(IntOrString::Str(name)), end) => {
                if name.is_empty()
                    || name.len() > 15
                    || !name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    || !name.bytes().any(|b| b.is_ascii_lowercase())
                {
                    r.error(&it.path(&format!("{here}.port")), format!("`{name}` is not a valid port name (IANA_SVC_NAME: 1-15 lower-case letters, digits, `-`)"));
                }
                if end.is_some() {
                    r.error(
                        &it.path(&format!("{here}.endPort")),
                        "endPort needs a numeric port, not a named one",
                    );
                }
            }
            (None, Some(_)) => r.error(
                &it.path(&format!("{here}.endPort")),
                "endPort needs a numeric port",
            ),
            (None, None) => {}
        }
    }
}
