//! Unit tests of the policy compiler: the example configurations, table compactness
//! (peers named as coarsely as their selector allows, shared profiles) and the
//! Ligato mapping's semantics.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use sluice_dataplane::tables::policy::{DenyReason, DirOutcome, Direction, Verdict};

use super::*;
use crate::compile::ir::{Node, Policy, Workload};
use crate::model::meta::{IntOrString, LabelSelector};
use crate::model::netpol::{IngressRule, IpBlock, NetworkPolicyPeer, NetworkPolicySpec};

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

fn example(dir: &str) -> (Ir, CompiledPolicy) {
    let c = crate::compile::build_paths(&[Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../configs")
        .join(dir)]);
    let errors: Vec<String> = crate::compile::diagnostics(&c)
        .iter()
        .filter(|d| d.is_error())
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    let ir = c.expect("ir").ir;
    let policy = compile(&ir).expect("policy");
    (ir, policy)
}

#[test]
fn netpol_examples_decide_as_written() {
    let (_, c) = example("netpol");
    let t = &c.tables;
    let v = |s: &str, d: &str, proto: u8, port: u16| t.verdict(ip(s), ip(d), proto, port);
    let (redis, frontend, web, ui, dns) = (
        "10.244.0.10",
        "10.244.0.11",
        "10.244.0.20",
        "10.244.0.30",
        "10.244.0.2",
    );
    // test-network-policy: redis takes TCP 6379 from role=frontend in default.
    assert_eq!(v(frontend, redis, 6, 6379), Verdict::Allow);
    assert_eq!(
        v(frontend, redis, 6, 6380),
        Verdict::Deny {
            direction: Direction::Ingress,
            reason: DenyReason::PortNotAllowed
        }
    );
    // ... from 172.17.0.0/16 except 172.17.1.0/24.
    assert!(v("172.17.0.9", redis, 6, 6379).is_allow());
    assert!(!v("172.17.1.9", redis, 6, 6379).is_allow());
    // redis's egress allows only 10.0.0.0/24 on TCP 5978.
    assert!(v(redis, "10.0.0.7", 6, 5978).is_allow());
    assert_eq!(
        v(redis, frontend, 6, 5978),
        Verdict::Deny {
            direction: Direction::Egress,
            reason: DenyReason::NoMatchingPeer
        }
    );
    // web-from-frontends: the named port `http` resolves to web-0's 8080; the range
    // 8000-8100 and SCTP 9000 too; only from namespace frontend.
    assert!(v(ui, web, 6, 8080).is_allow());
    assert!(v(ui, web, 6, 8100).is_allow());
    assert!(v(ui, web, 132, 9000).is_allow());
    assert!(!v(ui, web, 6, 9000).is_allow());
    assert!(!v(frontend, web, 6, 8080).is_allow());
    // The Ligato policy: metrics (9090) from the frontend namespace, 8080 from
    // 192.0.2.0/24 except 192.0.2.128/25.
    assert!(v(ui, web, 6, 9090).is_allow());
    assert!(v("192.0.2.5", web, 6, 8080).is_allow());
    assert!(!v("192.0.2.200", web, 6, 8080).is_allow());
    // web-0's egress: DNS to kube-dns in any namespace, and 2001:db8::/32 minus /48.
    assert!(v(web, dns, 17, 53).is_allow());
    assert!(v(web, dns, 6, 53).is_allow());
    assert!(!v(web, "8.8.8.8", 17, 53).is_allow());
    assert!(v("fd00:244::20", "2001:db8::1", 6, 443).is_allow());
    assert!(!v("fd00:244::20", "2001:db8:bad::1", 6, 443).is_allow());
    // Node traffic into an isolated pod.
    assert_eq!(
        t.decide(ip("192.168.50.10"), ip(web), 6, 1).ingress,
        DirOutcome::OwnNode
    );
    // coredns is not isolated at all.
    assert!(v("203.0.113.1", dns, 17, 53).is_allow());
}

fn pod(ns: &str, name: &str, ip_: &str, labels: &[(&str, &str)]) -> Workload {
    Workload {
        ip: ip(ip_),
        namespace: ns.into(),
        pod: name.into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        named_ports: Vec::new(),
        node: None,
    }
}

fn ns_map(names: &[&str]) -> BTreeMap<String, BTreeMap<String, String>> {
    names
        .iter()
        .map(|n| {
            (
                n.to_string(),
                BTreeMap::from([("kubernetes.io/metadata.name".to_string(), n.to_string())]),
            )
        })
        .collect()
}

fn ingress_policy(ns: &str, peers: Vec<NetworkPolicyPeer>) -> Policy {
    Policy {
        namespace: ns.into(),
        name: "p".into(),
        spec: NetworkPolicySpec {
            ingress: Some(vec![IngressRule {
                ports: vec![crate::model::netpol::NetworkPolicyPort {
                    protocol: None,
                    port: Some(IntOrString::Int(80)),
                    end_port: None,
                }],
                from: peers,
            }]),
            ..Default::default()
        },
    }
}

/// 20 namespaces x 10 pods, every pod with its own labels.
fn spread() -> Ir {
    let names: Vec<String> = (0..20).map(|i| format!("ns{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut ir = Ir {
        namespaces: ns_map(&refs),
        ..Ir::default()
    };
    for (n, ns) in names.iter().enumerate() {
        for p in 0..10 {
            let id = format!("p{n}-{p}");
            ir.workloads.push(pod(
                ns,
                &id,
                &format!("10.1.{n}.{}", p + 1),
                &[("id", &id), ("app", "x")],
            ));
        }
    }
    ir.nodes.push(Node {
        name: "n".into(),
        addresses: vec![ip("192.168.0.1")],
    });
    ir
}

#[test]
fn coarse_peers_do_not_expand_into_pods() {
    let cases: Vec<(Vec<NetworkPolicyPeer>, usize)> = vec![
        // namespaceSelector: {} = any pod: one entry, not 200.
        (
            vec![NetworkPolicyPeer {
                namespace_selector: Some(LabelSelector::default()),
                ..Default::default()
            }],
            1,
        ),
        // podSelector: {} = the policy's namespace: one entry.
        (
            vec![NetworkPolicyPeer {
                pod_selector: Some(LabelSelector::default()),
                ..Default::default()
            }],
            1,
        ),
        // A namespace selector matching 20 namespaces: 20 entries, not 200.
        (
            vec![NetworkPolicyPeer {
                namespace_selector: Some(LabelSelector {
                    match_labels: BTreeMap::new(),
                    match_expressions: vec![crate::model::meta::LabelSelectorRequirement {
                        key: "kubernetes.io/metadata.name".into(),
                        operator: crate::model::meta::SelectorOperator::Exists,
                        values: vec![],
                    }],
                }),
                ..Default::default()
            }],
            20,
        ),
        // A real pod selector names groups: all 200 pods (distinct labels).
        (
            vec![NetworkPolicyPeer {
                namespace_selector: Some(LabelSelector::default()),
                pod_selector: Some(LabelSelector {
                    match_labels: BTreeMap::from([("app".into(), "x".into())]),
                    match_expressions: vec![],
                }),
                ..Default::default()
            }],
            200,
        ),
        // No peers at all: one "anything" entry.
        (vec![], 1),
        // An ipBlock with an except: one entry per class inside (the block minus the
        // except, and the except's pieces that are still in it: none here).
        (
            vec![NetworkPolicyPeer {
                ip_block: Some(IpBlock {
                    cidr: "10.1.0.0/16".into(),
                    except: vec!["10.1.5.0/24".into()],
                }),
                ..Default::default()
            }],
            1,
        ),
    ];
    for (peers, want) in cases {
        let mut ir = spread();
        ir.policies.push(ingress_policy("ns0", peers.clone()));
        let c = compile(&ir).expect("compile");
        assert_eq!(c.stats.ingress_entries, want, "{peers:?}");
        // All ten pods of ns0 (distinct labels) share one ingress profile.
        assert_eq!(c.stats.ingress_profiles, 1);
        assert_eq!(c.stats.egress_entries, 0);
    }
}

#[test]
fn policy_sets_with_equal_entries_share_one_profile() {
    let any_pod = || {
        vec![NetworkPolicyPeer {
            namespace_selector: Some(LabelSelector::default()),
            ..Default::default()
        }]
    };
    let mut ir = spread();
    // ns0, ns1 and ns2 are selected by different policy sets ({0}, {1}, {2, 3}) whose
    // unions are the same single entry: "any pod", TCP 80.
    for ns in ["ns0", "ns1", "ns2", "ns2"] {
        ir.policies.push(ingress_policy(ns, any_pod()));
    }
    let c = compile(&ir).expect("compile");
    assert_eq!(c.stats.ingress_profiles, 1);
    assert_eq!(c.stats.ingress_entries, 1);
    assert_eq!(
        c.info.ingress_profiles,
        vec![vec![vec![0], vec![1], vec![2, 3]]]
    );
    // A fifth set with other entries gets a profile of its own.
    let mut more = ingress_policy("ns3", any_pod());
    if let Some(rules) = &mut more.spec.ingress {
        rules[0].ports[0].port = Some(IntOrString::Int(81));
    }
    ir.policies.push(more);
    let c = compile(&ir).expect("compile");
    assert_eq!(c.stats.ingress_profiles, 2);
    let t = &c.tables;
    for (dst, port80, port81) in [
        ("10.1.0.1", true, false),
        ("10.1.1.1", true, false),
        ("10.1.2.1", true, false),
        ("10.1.3.1", false, true),
        ("10.1.4.1", true, true),
    ] {
        assert_eq!(
            t.verdict(ip("10.1.9.1"), ip(dst), 6, 80).is_allow(),
            port80,
            "{dst}"
        );
        assert_eq!(
            t.verdict(ip("10.1.9.1"), ip(dst), 6, 81).is_allow(),
            port81,
            "{dst}"
        );
    }
}

#[test]
fn ipblock_classes_carve_and_match_pods() {
    let mut ir = spread();
    ir.policies.push(ingress_policy(
        "ns1",
        vec![NetworkPolicyPeer {
            ip_block: Some(IpBlock {
                cidr: "10.1.0.0/16".into(),
                except: vec!["10.1.5.0/24".into(), "10.1.5.7/32".into()],
            }),
            ..Default::default()
        }],
    ));
    let c = compile(&ir).expect("compile");
    let t = &c.tables;
    let into = ip("10.1.1.1");
    assert!(t.verdict(ip("10.1.0.1"), into, 6, 80).is_allow());
    assert!(!t.verdict(ip("10.1.5.1"), into, 6, 80).is_allow());
    assert!(!t.verdict(ip("10.1.5.7"), into, 6, 80).is_allow());
    assert!(t.verdict(ip("10.1.200.1"), into, 6, 80).is_allow());
    assert!(!t.verdict(ip("10.2.0.1"), into, 6, 80).is_allow());
    // The node is outside the block: refused... unless it is the pod's own node (the
    // pods here have none).
    assert!(!t.verdict(ip("192.168.0.1"), into, 6, 80).is_allow());
    // Classes: outside, the block, the /24 and the /32 (the last two are both "not in
    // the term" and merge into one class).
    assert_eq!(c.stats.address_classes, 2);
}

#[test]
fn ligato_absent_rules_isolate_ingress() {
    // proto3 cannot tell an absent list from an empty one: a Ligato policy without
    // ingress rules isolates its pods for ingress (policyType DEFAULT = Ingress).
    let text = r#"{"name": "p", "namespace": "ns0", "pods": {"matchLabel": [{"key": "id", "value": "p0-0"}]}}"#;
    let mut loaded = crate::load::Loaded::default();
    crate::load::load_str("p.json", text, &mut loaded);
    let c = crate::compile::build(loaded);
    let errors: Vec<String> = crate::compile::diagnostics(&c)
        .iter()
        .filter(|d| d.is_error())
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    let mut ir = spread();
    ir.policies = c.expect("ir").ir.policies;
    let t = compile(&ir).expect("compile").tables;
    assert_eq!(
        t.verdict(ip("10.1.1.1"), ip("10.1.0.1"), 6, 80),
        Verdict::Deny {
            direction: Direction::Ingress,
            reason: DenyReason::NoRules
        }
    );
    assert!(t.verdict(ip("10.1.1.1"), ip("10.1.0.2"), 6, 80).is_allow());
    assert!(t.verdict(ip("10.1.0.1"), ip("10.1.1.1"), 6, 80).is_allow());
}

#[test]
fn over_caps_is_an_error_naming_the_cap() {
    let text = r#"
apiVersion: sluice.dev/v1alpha1
kind: Appliance
metadata: {name: a}
spec:
  limits: {policyEntries: 3, identities: 100000}
---
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: x, labels: {app: a}}
status: {podIP: 10.0.0.1}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: p, namespace: x}
spec:
  podSelector: {}
  ingress:
  - ports: [{port: 1}, {port: 3}, {port: 5}, {port: 7}, {port: 9}]
"#;
    let mut loaded = crate::load::Loaded::default();
    crate::load::load_str("caps.yaml", text, &mut loaded);
    let c = crate::compile::build(loaded);
    let errors: Vec<String> = crate::compile::diagnostics(&c)
        .iter()
        .filter(|d| d.is_error())
        .map(|e| e.to_string())
        .collect();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(
        errors[0].contains("caps.yaml:6:")
            && errors[0].contains("spec.limits.policyEntries")
            && errors[0].contains("need 5 policy entries")
            && errors[0].contains("over the cap by 2"),
        "{}",
        errors[0]
    );
    assert!(c.is_err());
}
