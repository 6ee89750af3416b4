//! Compiled policy tables against the reference evaluator (tests/policy_support), on
//! random clusters: namespaces with labels, pods with labels, named ports, nodes and
//! IPv4/IPv6 addresses, and policies using every selector operator, AND/OR peers,
//! ipBlocks with excepts in both families, numeric/named/ranged ports, TCP/UDP/SCTP,
//! every policyTypes combination and empty vs missing lists. Every connection between
//! every pair of interesting addresses, on several protocols and ports, must get the same
//! answer per direction from the tables, the reference, the explain walk (which names the
//! allowing rule) and the ClassBench export (what rte_acl is given in the benchmark).
//! The burst verdicts answer like the single ones.

mod policy_support;

use std::collections::BTreeMap;
use std::net::IpAddr;

use proptest::prelude::*;
use sluice_ctrl::compile::ir::{Ir, Node, Policy, Workload};
use sluice_ctrl::compile::policy::acl::{self, Family};
use sluice_ctrl::compile::policy::explain::first_allowing_rule;
use sluice_ctrl::compile::policy::{compile, compile_with, Limits, PolicyCompileError};
use sluice_ctrl::model::meta::{
    IntOrString, LabelSelector, LabelSelectorRequirement, Protocol, SelectorOperator,
};
use sluice_ctrl::model::netpol::{
    EgressRule, IngressRule, IpBlock, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
    PolicyType,
};
use sluice_dataplane::tables::policy::{Conn, Conn4, Conn6, DirOutcome, Verdict, BATCH};

const KEYS: [&str; 3] = ["app", "tier", "team"];
const VALUES: [&str; 3] = ["x", "y", "z"];
const NAMESPACES: [&str; 3] = ["ns0", "ns1", "ns2"];
const NODES: [(&str, &str, &str); 2] = [
    ("n0", "192.168.0.1", "fd01::1"),
    ("n1", "192.168.0.2", "fd01::2"),
];
/// Addresses pods take (a small pool, so that ipBlocks hit them).
const POD_V4: [&str; 8] = [
    "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6", "10.0.0.9", "10.0.1.1",
];
const POD_V6: [&str; 4] = ["fd00::1", "fd00::2", "fd00::5", "fd00::1:1"];
/// Addresses that are never pods or nodes.
const EXTERNAL: [&str; 5] = [
    "10.0.0.7",
    "203.0.113.1",
    "0.0.0.1",
    "fd00::7",
    "2001:db8::1",
];
/// ipBlock CIDRs (excepts are generated inside them).
const CIDRS: [&str; 11] = [
    "10.0.0.0/29",
    "10.0.0.0/28",
    "10.0.0.4/30",
    "10.0.0.0/8",
    "0.0.0.0/0",
    "10.0.0.5/32",
    "192.168.0.0/30",
    "fd00::/120",
    "fd00::/64",
    "::/0",
    "fd00::4/126",
];
const PORT_NAMES: [&str; 3] = ["http", "dns", "metrics"];
const PORTS: [u16; 5] = [53, 80, 81, 82, 8080];

fn label_map() -> impl Strategy<Value = BTreeMap<String, String>> {
    proptest::collection::btree_map(
        (0..KEYS.len()).prop_map(|i| KEYS[i].to_string()),
        (0..VALUES.len()).prop_map(|i| VALUES[i].to_string()),
        0..3,
    )
}

fn requirement() -> impl Strategy<Value = LabelSelectorRequirement> {
    (
        0..KEYS.len() + 1,
        0..4usize,
        proptest::collection::btree_set(0..VALUES.len(), 1..3),
    )
        .prop_map(|(k, op, vals)| {
            // Key index KEYS.len() is the namespace name label.
            let key = KEYS
                .get(k)
                .map(|s| s.to_string())
                .unwrap_or_else(|| "kubernetes.io/metadata.name".into());
            let operator = [
                SelectorOperator::In,
                SelectorOperator::NotIn,
                SelectorOperator::Exists,
                SelectorOperator::DoesNotExist,
            ][op];
            let values = match operator {
                SelectorOperator::In | SelectorOperator::NotIn => vals
                    .into_iter()
                    .map(|v| {
                        if k == KEYS.len() {
                            NAMESPACES[v].to_string()
                        } else {
                            VALUES[v].to_string()
                        }
                    })
                    .collect(),
                _ => Vec::new(),
            };
            LabelSelectorRequirement {
                key,
                operator,
                values,
            }
        })
}

fn selector() -> impl Strategy<Value = LabelSelector> {
    prop_oneof![
        2 => Just(LabelSelector::default()),
        3 => (label_map(), proptest::collection::vec(requirement(), 0..2)).prop_map(|(m, e)| {
            // Keep matchLabels to one entry so that selectors match often.
            LabelSelector {
                match_labels: m.into_iter().take(1).collect(),
                match_expressions: e,
            }
        }),
    ]
}

fn ip_block() -> impl Strategy<Value = IpBlock> {
    (
        0..CIDRS.len(),
        proptest::collection::vec((1u8..6, any::<u128>()), 0..3),
    )
        .prop_map(|(c, excepts)| {
            let cidr: ipnet::IpNet = CIDRS[c].parse().expect("cidr");
            let except = excepts
                .into_iter()
                .filter_map(|(extra, bits)| {
                    let len = (cidr.prefix_len() + extra).min(cidr.max_prefix_len());
                    let host = u32::from(cidr.max_prefix_len() - cidr.prefix_len());
                    let mask = if host >= 128 {
                        u128::MAX
                    } else {
                        (1u128 << host) - 1
                    };
                    match cidr {
                        ipnet::IpNet::V4(n) => {
                            let a = u32::from(n.network()) | (bits as u32 & mask as u32);
                            ipnet::Ipv4Net::new(a.into(), len)
                                .ok()
                                .map(|n| n.trunc().to_string())
                        }
                        ipnet::IpNet::V6(n) => {
                            let a = u128::from(n.network()) | (bits & mask);
                            ipnet::Ipv6Net::new(a.into(), len)
                                .ok()
                                .map(|n| n.trunc().to_string())
                        }
                    }
                })
                .collect();
            IpBlock {
                cidr: CIDRS[c].to_string(),
                except,
            }
        })
}

fn peer() -> impl Strategy<Value = NetworkPolicyPeer> {
    prop_oneof![
        (selector()).prop_map(|p| NetworkPolicyPeer {
            pod_selector: Some(p),
            ..Default::default()
        }),
        (selector()).prop_map(|n| NetworkPolicyPeer {
            namespace_selector: Some(n),
            ..Default::default()
        }),
        (selector(), selector()).prop_map(|(p, n)| NetworkPolicyPeer {
            pod_selector: Some(p),
            namespace_selector: Some(n),
            ..Default::default()
        }),
        ip_block().prop_map(|b| NetworkPolicyPeer {
            ip_block: Some(b),
            ..Default::default()
        }),
    ]
}

fn protocol() -> impl Strategy<Value = Option<Protocol>> {
    prop_oneof![
        Just(None),
        Just(Some(Protocol::Tcp)),
        Just(Some(Protocol::Udp)),
        Just(Some(Protocol::Sctp)),
    ]
}

fn port_item() -> impl Strategy<Value = NetworkPolicyPort> {
    (
        protocol(),
        0..4usize,
        0..PORTS.len(),
        0..3u16,
        0..PORT_NAMES.len(),
    )
        .prop_map(|(protocol, kind, p, span, name)| match kind {
            0 => NetworkPolicyPort {
                protocol,
                port: None,
                end_port: None,
            },
            1 => NetworkPolicyPort {
                protocol,
                port: Some(IntOrString::Int(i64::from(PORTS[p]))),
                end_port: None,
            },
            2 => NetworkPolicyPort {
                protocol,
                port: Some(IntOrString::Int(i64::from(PORTS[p]))),
                end_port: Some(i64::from(PORTS[p] + span)),
            },
            _ => NetworkPolicyPort {
                protocol,
                port: Some(IntOrString::Str(PORT_NAMES[name].to_string())),
                end_port: None,
            },
        })
}

fn rule_parts() -> impl Strategy<Value = (Vec<NetworkPolicyPort>, Vec<NetworkPolicyPeer>)> {
    (
        proptest::collection::vec(port_item(), 0..3),
        proptest::collection::vec(peer(), 0..3),
    )
}

fn policy() -> impl Strategy<Value = Policy> {
    let types = prop_oneof![
        3 => Just(None),
        1 => Just(Some(vec![])),
        1 => Just(Some(vec![PolicyType::Ingress])),
        1 => Just(Some(vec![PolicyType::Egress])),
        1 => Just(Some(vec![PolicyType::Ingress, PolicyType::Egress])),
    ];
    let rules = || {
        prop_oneof![
            1 => Just(None),
            1 => Just(Some(vec![])),
            3 => proptest::collection::vec(rule_parts(), 1..3).prop_map(Some),
        ]
    };
    (
        0..NAMESPACES.len(),
        selector(),
        types,
        rules(),
        rules(),
        0..1000u32,
    )
        .prop_map(
            |(ns, pod_selector, policy_types, ingress, egress, n)| Policy {
                namespace: NAMESPACES[ns].to_string(),
                name: format!("p{n}"),
                spec: NetworkPolicySpec {
                    pod_selector,
                    policy_types,
                    ingress: ingress.map(|v| {
                        v.into_iter()
                            .map(|(ports, from)| IngressRule { ports, from })
                            .collect()
                    }),
                    egress: egress.map(|v| {
                        v.into_iter()
                            .map(|(ports, to)| EgressRule { ports, to })
                            .collect()
                    }),
                },
            },
        )
}

fn named_ports() -> impl Strategy<Value = Vec<(String, Protocol, u16)>> {
    proptest::collection::vec(
        (
            0..PORT_NAMES.len(),
            prop_oneof![
                Just(Protocol::Tcp),
                Just(Protocol::Udp),
                Just(Protocol::Sctp)
            ],
            0..PORTS.len(),
        )
            .prop_map(|(n, p, port)| (PORT_NAMES[n].to_string(), p, PORTS[port])),
        0..3,
    )
}

/// A generated pod: namespace index, labels, named ports, node index.
type GenPod = (
    usize,
    BTreeMap<String, String>,
    Vec<(String, Protocol, u16)>,
    Option<usize>,
);

/// A pod: namespace, labels, named ports, node.
fn pod() -> impl Strategy<Value = GenPod> {
    (
        0..NAMESPACES.len(),
        label_map(),
        named_ports(),
        prop_oneof![Just(None), (0..NODES.len()).prop_map(Some)],
    )
}

fn cluster() -> impl Strategy<Value = Ir> {
    (
        proptest::collection::vec(label_map(), NAMESPACES.len()),
        proptest::collection::vec(pod(), 1..7),
        proptest::collection::vec(policy(), 0..5),
        proptest::collection::vec(any::<bool>(), POD_V4.len() + POD_V6.len()),
    )
        .prop_map(|(ns_labels, pods, policies, dual)| {
            let mut ir = Ir::default();
            for (i, mut l) in ns_labels.into_iter().enumerate() {
                l.insert("kubernetes.io/metadata.name".into(), NAMESPACES[i].into());
                ir.namespaces.insert(NAMESPACES[i].into(), l);
            }
            for (i, (ns, labels, named, node)) in pods.into_iter().enumerate() {
                let mut ips: Vec<IpAddr> = vec![POD_V4[i % POD_V4.len()].parse().expect("ip")];
                if dual[i] {
                    ips.push(POD_V6[i % POD_V6.len()].parse().expect("ip"));
                }
                for ip in ips {
                    ir.workloads.push(Workload {
                        ip,
                        namespace: NAMESPACES[ns].into(),
                        pod: format!("pod{i}"),
                        labels: labels.clone(),
                        named_ports: named.clone(),
                        node: node.map(|n| NODES[n].0.to_string()),
                    });
                }
            }
            for (name, v4, v6) in NODES {
                ir.nodes.push(Node {
                    name: name.into(),
                    addresses: vec![v4.parse().expect("ip"), v6.parse().expect("ip")],
                });
            }
            ir.policies = policies;
            ir
        })
}

fn addresses(ir: &Ir) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = ir.workloads.iter().map(|w| w.ip).collect();
    for (_, v4, v6) in NODES {
        out.push(v4.parse().expect("ip"));
        out.push(v6.parse().expect("ip"));
    }
    out.extend(EXTERNAL.iter().map(|a| a.parse::<IpAddr>().expect("ip")));
    out.sort();
    out.dedup();
    out
}

const PROBES: [(u8, u16); 9] = [
    (6, 80),
    (6, 81),
    (6, 8080),
    (6, 53),
    (17, 53),
    (17, 80),
    (132, 80),
    (132, 82),
    (1, 0),
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    /// Tables == reference, per direction, for every pair of addresses and every probe;
    /// the explain walk finds a rule exactly when the tables say "allowed by a rule";
    /// the ClassBench export decides the same.
    #[test]
    fn compiled_matches_reference(ir in cluster()) {
        let c = compile(&ir).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        let (acl4_eg, acl4_in) = acl::export(&c, Family::V4);
        let (acl6_eg, acl6_in) = acl::export(&c, Family::V6);
        let addrs = addresses(&ir);
        for &src in &addrs {
            for &dst in &addrs {
                for (proto, port) in PROBES {
                    let d = c.tables.decide(src, dst, proto, port);
                    let (want_eg, want_in) = policy_support::decide(&ir, src, dst, proto, port);
                    prop_assert_eq!(d.egress.allows(), want_eg, "egress {} -> {} proto {} port {}: {:?}", src, dst, proto, port, d);
                    prop_assert_eq!(d.ingress.allows(), want_in, "ingress {} -> {} proto {} port {}: {:?}", src, dst, proto, port, d);
                    prop_assert_eq!(c.tables.verdict(src, dst, proto, port).is_allow(), want_eg && want_in);
                    // The explain walk names a rule exactly when a rule allowed.
                    let src_pod = ir.workloads.iter().find(|w| w.ip == src);
                    let dst_pod = ir.workloads.iter().find(|w| w.ip == dst);
                    if let Some(s) = src_pod {
                        let walk = first_allowing_rule(&ir, PolicyType::Egress, s, dst, dst_pod, proto, port);
                        prop_assert_eq!(walk.is_some(), d.egress == DirOutcome::Allowed, "egress walk {} -> {}", src, dst);
                    }
                    if let Some(t) = dst_pod {
                        let walk = first_allowing_rule(&ir, PolicyType::Ingress, t, src, src_pod, proto, port);
                        if d.ingress != DirOutcome::OwnNode {
                            prop_assert_eq!(walk.is_some(), d.ingress == DirOutcome::Allowed, "ingress walk {} -> {}", src, dst);
                        }
                    }
                    // The ACL export, same family only.
                    let (eg, ing) = match (src, dst) {
                        (IpAddr::V4(_), IpAddr::V4(_)) => (&acl4_eg, &acl4_in),
                        (IpAddr::V6(_), IpAddr::V6(_)) => (&acl6_eg, &acl6_in),
                        _ => continue,
                    };
                    prop_assert_eq!(eg.allows(src, dst, proto, port), want_eg, "acl egress {} -> {}", src, dst);
                    prop_assert_eq!(ing.allows(src, dst, proto, port), want_in, "acl ingress {} -> {}", src, dst);
                }
            }
        }
    }

    /// The burst verdicts (`verdicts_v4`, `verdicts_v6`, and `verdicts` over mixed
    /// families) answer exactly like `verdict` on compiled tables (and so like the
    /// reference evaluator, checked here too), for every pair of
    /// interesting addresses and every probe, in bursts that start anywhere in a round.
    #[test]
    fn bursts_match_single_verdicts(ir in cluster(), skip in 0usize..BATCH) {
        let c = compile(&ir).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        let t = &c.tables;
        let addrs = addresses(&ir);
        let mut mixed = Vec::new();
        for &src in &addrs {
            for &dst in &addrs {
                for (proto, dst_port) in PROBES {
                    mixed.push(Conn { src, dst, proto, dst_port });
                }
            }
        }
        let mixed = &mixed[skip.min(mixed.len())..];
        let mut out = vec![Verdict::Allow; mixed.len()];
        t.verdicts(mixed, &mut out);
        for (x, v) in mixed.iter().zip(&out) {
            prop_assert_eq!(*v, t.verdict(x.src, x.dst, x.proto, x.dst_port), "{:?}", x);
            // And the reference evaluator, straight from the Kubernetes text.
            let (eg, ing) = policy_support::decide(&ir, x.src, x.dst, x.proto, x.dst_port);
            prop_assert_eq!(v.is_allow(), eg && ing, "reference {:?}", x);
        }
        let c4: Vec<Conn4> = mixed.iter().filter_map(|x| match (x.src, x.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => Some(Conn4 { src: s.into(), dst: d.into(), proto: x.proto, dst_port: x.dst_port }),
            _ => None,
        }).collect();
        let mut out = vec![Verdict::Allow; c4.len()];
        t.verdicts_v4(&c4, &mut out);
        for (x, v) in c4.iter().zip(&out) {
            prop_assert_eq!(*v, t.verdict_v4(x.src, x.dst, x.proto, x.dst_port), "{:?}", x);
        }
        let c6: Vec<Conn6> = mixed.iter().filter_map(|x| match (x.src, x.dst) {
            (IpAddr::V6(s), IpAddr::V6(d)) => Some(Conn6 { src: s.into(), dst: d.into(), proto: x.proto, dst_port: x.dst_port }),
            _ => None,
        }).collect();
        let mut out = vec![Verdict::Allow; c6.len()];
        t.verdicts_v6(&c6, &mut out);
        for (x, v) in c6.iter().zip(&out) {
            prop_assert_eq!(*v, t.verdict_v6(x.src, x.dst, x.proto, x.dst_port), "{:?}", x);
        }
    }

    /// Compiling is a function of the configuration: compiling another configuration in
    /// between changes nothing, and a recompile is identical (no state leaks between
    /// generations).
    #[test]
    fn generations_do_not_leak(a in cluster(), b in cluster()) {
        let first = compile(&a).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        let other = compile(&b).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        let again = compile(&a).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        prop_assert_eq!(&first.tables, &again.tables);
        prop_assert_eq!(&first.stats, &again.stats);
        prop_assert_eq!(&first.info.prefixes, &again.info.prefixes);
        let other_again = compile(&b).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        prop_assert_eq!(&other.tables, &other_again.tables);
        // And each generation answers with its own policies.
        for &src in &addresses(&b) {
            for &dst in &addresses(&b) {
                let d = other.tables.decide(src, dst, 6, 80);
                let (eg, ing) = policy_support::decide(&b, src, dst, 6, 80);
                prop_assert_eq!((d.egress.allows(), d.ingress.allows()), (eg, ing));
            }
        }
    }

    /// Caps: a cap one below what the configuration needs is refused, naming the cap and
    /// the overshoot; the exact need passes.
    #[test]
    fn caps_are_exact(ir in cluster()) {
        let c = compile(&ir).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        let need = Limits {
            identities: c.stats.identities as u64,
            prefixes: c.stats.prefixes as u64,
            policy_entries: (c.stats.ingress_entries + c.stats.egress_entries) as u64,
        };
        prop_assert!(compile_with(&ir, need).is_ok());
        let tight = Limits { prefixes: need.prefixes - 1, ..need };
        let errors = compile_with(&ir, tight).err().unwrap_or_default();
        prop_assert_eq!(errors, vec![PolicyCompileError::OverCap { cap: "prefixes", limit: need.prefixes - 1, needed: need.prefixes }]);
        if need.policy_entries > 0 {
            let tight = Limits { policy_entries: need.policy_entries - 1, identities: need.identities - 1, ..need };
            let errors = compile_with(&ir, tight).err().unwrap_or_default();
            prop_assert_eq!(errors.len(), 2);
            let text = errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n");
            prop_assert!(text.contains("spec.limits.policyEntries") && text.contains("over the cap by 1"), "{}", text);
            prop_assert!(text.contains("spec.limits.identities"), "{}", text);
        }
    }
}
