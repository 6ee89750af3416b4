//! The Kubernetes upstream NetworkPolicy e2e cases (kubernetes/kubernetes
//! test/e2e/network/netpol/network_policy.go), restated as full truth tables.
//!
//! The upstream model: namespaces x, y, z, each with pods a, b, c labelled `pod=<name>`,
//! every pod serving ports 80 and 81 over TCP, UDP and SCTP with the named ports
//! `serve-80-tcp`, `serve-81-udp`, ... Each case loads the inventory and the case's
//! policies as manifests (through the same loader, validator and compiler `sluice check`
//! uses), then checks every ordered pair of pods (a pod to itself excluded, as upstream
//! ignores loopback) against the expected reachability, built with upstream's own
//! helpers (`ExpectPeer`, `ExpectAllIngress`, `ExpectAllEgress`, `Expect`). Upstream
//! now creates only the pods a case needs; these tables keep all nine pods, with the
//! expectations for the extra pods written out. Cases that mutate labels or policies
//! upstream are checked in each state. Every case runs on IPv4 and on IPv6 pod
//! addresses, and each answer is also checked against the reference evaluator.

mod policy_support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;

use sluice_ctrl::compile::{build as compile_loaded, diagnostics, Built};
use sluice_ctrl::diag::Diagnostics;
type Compiled = Result<Built, Diagnostics>;
use sluice_ctrl::load::{load_str, Loaded};

const NS: [&str; 3] = ["x", "y", "z"];
const PODS: [&str; 3] = ["a", "b", "c"];
const TCP: u8 = 6;
const UDP: u8 = 17;
const SCTP: u8 = 132;

fn pod_ip(v6: bool, ns: usize, pod: usize) -> String {
    if v6 {
        format!("fd00::{}:{}", ns + 1, pod + 1)
    } else {
        format!("10.0.{}.{}", ns + 1, pod + 1)
    }
}

fn index(s: &str) -> (usize, usize) {
    let (ns, pod) = s.split_once('/').expect("ns/pod");
    (
        NS.iter().position(|n| *n == ns).expect("namespace"),
        PODS.iter().position(|p| *p == pod).expect("pod"),
    )
}

/// The inventory: namespaces (with extra labels), a node, nine pods (with extra labels).
fn inventory(
    v6: bool,
    ns_labels: &[(&str, &str, &str)],
    pod_labels: &[(&str, &str, &str)],
) -> String {
    let mut s = String::new();
    for ns in NS {
        let extra: Vec<String> = ns_labels
            .iter()
            .filter(|(n, _, _)| *n == ns)
            .map(|(_, k, v)| format!(", {k}: {v}"))
            .collect();
        let _ = writeln!(
            s,
            "---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}, labels: {{ns: {ns}{}}}}}",
            extra.join("")
        );
    }
    let node = if v6 { "fd01::1" } else { "192.168.0.1" };
    let _ = writeln!(
        s,
        "---\napiVersion: v1\nkind: Node\nmetadata: {{name: node-1}}\nstatus: {{addresses: [{{type: InternalIP, address: \"{node}\"}}]}}"
    );
    for (ni, ns) in NS.iter().enumerate() {
        for (pi, pod) in PODS.iter().enumerate() {
            let who = format!("{ns}/{pod}");
            let extra: Vec<String> = pod_labels
                .iter()
                .filter(|(p, _, _)| *p == who)
                .map(|(_, k, v)| format!(", {k}: {v}"))
                .collect();
            let mut ports = String::new();
            for port in [80, 81] {
                for proto in ["TCP", "UDP", "SCTP"] {
                    let _ = write!(
                        ports,
                        "{{name: serve-{port}-{}, containerPort: {port}, protocol: {proto}}}, ",
                        proto.to_ascii_lowercase()
                    );
                }
            }
            let _ = writeln!(
                s,
                "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {pod}, namespace: {ns}, labels: {{pod: {pod}{}}}}}\nspec: {{nodeName: node-1, containers: [{{name: cont, ports: [{}]}}]}}\nstatus: {{podIP: \"{}\"}}",
                extra.join(""),
                ports.trim_end_matches(", "),
                pod_ip(v6, ni, pi)
            );
        }
    }
    s
}

/// Replaces `@host(x/b)` with the pod's host CIDR and `@large(x/b)` with a large CIDR
/// around it (upstream's makeLargeCIDRForIP).
fn fill(policies: &str, v6: bool) -> String {
    let mut s = policies.to_string();
    for (ni, ns) in NS.iter().enumerate() {
        for (pi, pod) in PODS.iter().enumerate() {
            let ip = pod_ip(v6, ni, pi);
            let host = if v6 {
                format!("{ip}/128")
            } else {
                format!("{ip}/32")
            };
            s = s.replace(&format!("@host({ns}/{pod})"), &host);
        }
    }
    s.replace("@large(x/b)", if v6 { "fd00::/64" } else { "0.0.0.0/4" })
}

/// Upstream's Peer: empty fields match everything.
#[derive(Clone, Copy, Default)]
struct Peer {
    ns: Option<&'static str>,
    pod: Option<&'static str>,
}

fn any() -> Peer {
    Peer::default()
}

fn ns(n: &'static str) -> Peer {
    Peer {
        ns: Some(n),
        pod: None,
    }
}

fn pod(n: &'static str, p: &'static str) -> Peer {
    Peer {
        ns: Some(n),
        pod: Some(p),
    }
}

impl Peer {
    fn matches(&self, ns: usize, pod: usize) -> bool {
        self.ns.is_none_or(|n| n == NS[ns]) && self.pod.is_none_or(|p| p == PODS[pod])
    }
}

/// A pod as (namespace index, pod index).
type PodIx = (usize, usize);

/// Upstream's Reachability over all nine pods.
#[derive(Clone)]
struct Reach {
    expected: BTreeMap<(PodIx, PodIx), bool>,
}

impl Reach {
    fn new(default: bool) -> Self {
        let mut expected = BTreeMap::new();
        for f in 0..9 {
            for t in 0..9 {
                expected.insert(((f / 3, f % 3), (t / 3, t % 3)), default);
            }
        }
        Reach { expected }
    }

    fn expect_peer(mut self, from: Peer, to: Peer, v: bool) -> Self {
        for ((f, t), e) in self.expected.iter_mut() {
            if from.matches(f.0, f.1) && to.matches(t.0, t.1) {
                *e = v;
            }
        }
        self
    }

    fn expect(self, from: &str, to: &str, v: bool) -> Self {
        let (f, t) = (index(from), index(to));
        self.expect_peer(pod(NS[f.0], PODS[f.1]), pod(NS[t.0], PODS[t.1]), v)
    }

    fn all_ingress(self, to: &str, v: bool) -> Self {
        let t = index(to);
        self.expect_peer(any(), pod(NS[t.0], PODS[t.1]), v)
    }

    fn all_egress(self, from: &str, v: bool) -> Self {
        let f = index(from);
        self.expect_peer(pod(NS[f.0], PODS[f.1]), any(), v)
    }
}

fn all() -> Reach {
    Reach::new(true)
}

/// One state of a case: extra labels, the policies, and the probes.
struct State {
    ns_labels: &'static [(&'static str, &'static str, &'static str)],
    pod_labels: &'static [(&'static str, &'static str, &'static str)],
    policies: &'static str,
    probes: Vec<(u8, u16, Reach)>,
}

fn state(policies: &'static str, probes: Vec<(u8, u16, Reach)>) -> State {
    State {
        ns_labels: &[],
        pod_labels: &[],
        policies,
        probes,
    }
}

fn compile_state(st: &State, v6: bool) -> Compiled {
    let mut loaded = Loaded::default();
    load_str(
        "inventory.yaml",
        &inventory(v6, st.ns_labels, st.pod_labels),
        &mut loaded,
    );
    load_str("policies.yaml", &fill(st.policies, v6), &mut loaded);
    compile_loaded(loaded)
}

fn proto_name(p: u8) -> &'static str {
    match p {
        TCP => "TCP",
        UDP => "UDP",
        _ => "SCTP",
    }
}

/// Checks one case in both families; returns the number of pod pairs checked.
fn check(name: &str, states: Vec<State>) -> usize {
    let mut checked = 0;
    for v6 in [false, true] {
        for (si, st) in states.iter().enumerate() {
            let c = compile_state(st, v6);
            let errors: Vec<String> = diagnostics(&c)
                .iter()
                .filter(|d| d.is_error())
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "{name}: {errors:#?}");
            let ir = &c.as_ref().expect("ir").ir;
            let tables = &c.as_ref().expect("policy").snapshot.policy;
            assert_eq!(
                ir.policies.len(),
                st.policies.matches("kind: NetworkPolicy").count(),
                "{name}"
            );
            for (proto, port, reach) in &st.probes {
                let mut wrong = Vec::new();
                let mut table = String::from("      ");
                for t in 0..9 {
                    let _ = write!(table, " {}/{}", NS[t / 3], PODS[t % 3]);
                }
                for f in 0..9 {
                    let _ = write!(table, "\n  {}/{}", NS[f / 3], PODS[f % 3]);
                    for t in 0..9 {
                        let (fi, ti) = ((f / 3, f % 3), (t / 3, t % 3));
                        if f == t {
                            table.push_str("   -");
                            continue;
                        }
                        let src: IpAddr = pod_ip(v6, fi.0, fi.1).parse().expect("ip");
                        let dst: IpAddr = pod_ip(v6, ti.0, ti.1).parse().expect("ip");
                        let got = tables.verdict(src, dst, *proto, *port).is_allow();
                        let want = reach.expected[&(fi, ti)];
                        let (re, ri) = policy_support::decide(ir, src, dst, *proto, *port);
                        assert_eq!(re && ri, want, "{name}: the reference evaluator disagrees with the restated table at {f}->{t}");
                        table.push_str(match (got, want) {
                            (true, true) => "   .",
                            (false, false) => "   X",
                            _ => "   !",
                        });
                        if got != want {
                            wrong.push(format!(
                                "{}/{} -> {}/{}: got {got}, want {want}",
                                NS[fi.0], PODS[fi.1], NS[ti.0], PODS[ti.1]
                            ));
                        }
                        checked += 1;
                    }
                }
                assert!(
                    wrong.is_empty(),
                    "{name} (state {si}, {}, {} {port}): {} wrong\n{table}\n{}",
                    if v6 { "IPv6" } else { "IPv4" },
                    proto_name(*proto),
                    wrong.len(),
                    wrong.join("\n")
                );
            }
        }
    }
    checked
}

macro_rules! np {
    ($ns:literal, $name:literal, $spec:literal) => {
        concat!(
            "---\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: ",
            $name,
            ", namespace: ",
            $ns,
            "}\nspec:\n",
            $spec,
            "\n"
        )
    };
}

#[test]
#[allow(clippy::vec_init_then_push)] // one push per upstream case reads like the upstream file
fn upstream_network_policy_cases() {
    let mut cases: Vec<(&str, Vec<State>)> = Vec::new();

    cases.push((
        "should support a 'default-deny-ingress' policy",
        vec![state(
            np!("x", "deny-ingress", "  podSelector: {}\n  ingress: []"),
            vec![(TCP, 80, all().expect_peer(any(), ns("x"), false))],
        )],
    ));

    cases.push((
        "should support a 'default-deny-all' policy",
        vec![state(
            np!(
                "x",
                "deny-all",
                "  podSelector: {}\n  policyTypes: [Ingress, Egress]\n  ingress: []\n  egress: []"
            ),
            vec![(
                TCP,
                80,
                all()
                    .expect_peer(any(), ns("x"), false)
                    .expect_peer(ns("x"), any(), false),
            )],
        )],
    ));

    cases.push(("should enforce policy to allow traffic from pods within server namespace based on PodSelector", vec![state(
        np!("x", "x-a-allows-x-b", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - podSelector: {matchLabels: {pod: b}}"),
        vec![(TCP, 80, all().all_ingress("x/a", false).expect("x/b", "x/a", true))],
    )]));

    cases.push(("should enforce policy to allow ingress traffic for a target", vec![state(
        concat!(
            np!("x", "deny-all", "  podSelector: {}\n  ingress: []"),
            np!("x", "allow-all-to-a", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - podSelector: {}\n      namespaceSelector: {}"),
        ),
        vec![(TCP, 80, all().all_ingress("x/a", true).all_ingress("x/b", false).all_ingress("x/c", false))],
    )]));

    cases.push(("should enforce policy to allow ingress traffic from pods in all namespaces", vec![state(
        np!("x", "allow-from-another-ns", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {}}"),
        vec![(TCP, 80, all())],
    )]));

    let only_from_y = || {
        all()
            .expect_peer(ns("x"), pod("x", "a"), false)
            .expect_peer(ns("z"), pod("x", "a"), false)
    };
    cases.push(("should enforce policy to allow traffic only from a different namespace, based on NamespaceSelector", vec![state(
        np!("x", "allow-client-a-via-ns-selector", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: y}}"),
        vec![(TCP, 80, only_from_y())],
    )]));

    cases.push(("should enforce policy based on PodSelector with MatchExpressions", vec![state(
        np!("x", "x-a-allows-x-b", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - podSelector: {matchExpressions: [{key: pod, operator: In, values: [b]}]}"),
        vec![(TCP, 80, all().all_ingress("x/a", false).expect("x/b", "x/a", true))],
    )]));

    cases.push(("should enforce policy based on NamespaceSelector with MatchExpressions", vec![state(
        np!("x", "allow-ns-y-match-selector", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [y]}]}"),
        vec![(TCP, 80, only_from_y())],
    )]));

    cases.push(("should enforce policy based on PodSelector or NamespaceSelector", vec![state(
        np!("x", "allow-ns-y-match-selector", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, operator: NotIn, values: [x]}]}\n    - podSelector: {matchLabels: {pod: b}}"),
        vec![(TCP, 80, all().expect("x/a", "x/a", false).expect("x/c", "x/a", false))],
    )]));

    cases.push(("should enforce policy based on PodSelector and NamespaceSelector", vec![state(
        np!("x", "allow-ns-y-podselector-and-nsselector", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, operator: NotIn, values: [x]}]}\n      podSelector: {matchLabels: {pod: b}}"),
        vec![(TCP, 80, all().all_ingress("x/a", false).expect("y/b", "x/a", true).expect("z/b", "x/a", true))],
    )]));

    cases.push(("should enforce policy based on Multiple PodSelectors and NamespaceSelectors", vec![state(
        np!("x", "allow-ns-y-z-pod-b-c", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, operator: NotIn, values: [x]}]}\n      podSelector: {matchExpressions: [{key: pod, operator: In, values: [b, c]}]}"),
        vec![(TCP, 80, all().expect_peer(ns("x"), pod("x", "a"), false).expect("y/a", "x/a", false).expect("z/a", "x/a", false))],
    )]));

    cases.push(("should enforce policy based on any PodSelectors", vec![state(
        np!("x", "allow-ns-x-pod-b-c", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - podSelector: {matchLabels: {pod: b}}\n    - podSelector: {matchLabels: {pod: c}}"),
        vec![(TCP, 80, all().all_ingress("x/a", false).expect("x/b", "x/a", true).expect("x/c", "x/a", true))],
    )]));

    cases.push(("should enforce policy to allow traffic only from a pod in a different namespace based on PodSelector and NamespaceSelector", vec![state(
        np!("x", "allow-ns-y-pod-a-via-namespace-pod-selector", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: y}}\n      podSelector: {matchLabels: {pod: a}}"),
        vec![(TCP, 80, all().all_ingress("x/a", false).expect("y/a", "x/a", true))],
    )]));

    let port81 = np!("x", "allow-client-a-via-ns-selector", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: y}}\n    ports:\n    - {port: 81, protocol: TCP}");
    let allow_y = || {
        all()
            .expect_peer(ns("x"), pod("x", "a"), false)
            .expect_peer(ns("y"), pod("x", "a"), true)
            .expect_peer(ns("z"), pod("x", "a"), false)
    };
    cases.push((
        "should enforce policy based on Ports",
        vec![state(port81, vec![(TCP, 81, allow_y())])],
    ));

    cases.push(("should enforce multiple, stacked policies with overlapping podSelectors", vec![
        state(port81, vec![(TCP, 81, allow_y()), (TCP, 80, all().all_ingress("x/a", false))]),
        state(
            concat!(
                np!("x", "allow-client-a-via-ns-selector", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: y}}\n    ports:\n    - {port: 81, protocol: TCP}"),
                np!("x", "allow-client-a-via-ns-selector-80", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: y}}\n    ports:\n    - {port: 80, protocol: TCP}"),
            ),
            vec![(TCP, 80, allow_y()), (TCP, 81, allow_y())],
        ),
    ]));

    cases.push((
        "should support allow-all policy",
        vec![state(
            np!("x", "allow-all", "  podSelector: {}\n  ingress:\n  - {}"),
            vec![(TCP, 80, all()), (TCP, 81, all())],
        )],
    ));

    cases.push((
        "should allow ingress access on one named port",
        vec![state(
            np!(
                "x",
                "allow-all",
                "  podSelector: {}\n  ingress:\n  - ports:\n    - port: serve-81-tcp"
            ),
            vec![
                (TCP, 81, all()),
                (TCP, 80, all().expect_peer(any(), ns("x"), false)),
            ],
        )],
    ));

    cases.push(("should allow ingress access from namespace on one named port", vec![state(
        np!("x", "allow-client-a-via-ns-selector-80", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: y}}\n    ports:\n    - {port: serve-80-tcp, protocol: TCP}"),
        vec![(TCP, 80, only_from_y()), (TCP, 81, all().all_ingress("x/a", false))],
    )]));

    cases.push((
        "should allow egress access on one named port",
        vec![state(
            np!(
                "x",
                "allow-egress",
                "  podSelector: {}\n  policyTypes: [Egress]\n  egress:\n  - ports:\n    - port: serve-80-tcp"
            ),
            vec![
                (TCP, 80, all()),
                (TCP, 81, all().expect_peer(ns("x"), any(), false)),
            ],
        )],
    ));

    cases.push((
        "should enforce updated policy",
        vec![
            state(
                np!(
                    "x",
                    "allow-all-mutate-to-deny-all",
                    "  podSelector: {}\n  ingress:\n  - {}"
                ),
                vec![(TCP, 81, all())],
            ),
            state(
                np!(
                    "x",
                    "allow-all-mutate-to-deny-all",
                    "  podSelector: {}\n  ingress: []"
                ),
                vec![(TCP, 81, all().expect_peer(any(), ns("x"), false))],
            ),
        ],
    ));

    let from_ns2 = np!("x", "allow-client-a-via-ns-selector", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {ns2: updated}}");
    cases.push((
        "should allow ingress access from updated namespace",
        vec![
            state(from_ns2, vec![(TCP, 80, all().all_ingress("x/a", false))]),
            State {
                ns_labels: &[("y", "ns2", "updated")],
                pod_labels: &[],
                policies: from_ns2,
                probes: vec![(
                    TCP,
                    80,
                    all()
                        .all_ingress("x/a", false)
                        .expect_peer(ns("y"), any(), true),
                )],
            },
        ],
    ));

    let from_pod2 = np!("x", "allow-client-a-via-pod-selector", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - podSelector: {matchLabels: {pod: b, pod2: updated}}");
    cases.push((
        "should allow ingress access from updated pod",
        vec![
            state(from_pod2, vec![(TCP, 80, all().all_ingress("x/a", false))]),
            State {
                ns_labels: &[],
                pod_labels: &[("x/b", "pod2", "updated")],
                policies: from_pod2,
                probes: vec![(
                    TCP,
                    80,
                    all().all_ingress("x/a", false).expect("x/b", "x/a", true),
                )],
            },
        ],
    ));

    cases.push((
        "should deny ingress from pods on other namespaces",
        vec![state(
            np!(
                "x",
                "deny-empty-policy",
                "  podSelector: {}\n  ingress:\n  - from:\n    - podSelector: {matchLabels: {}}"
            ),
            vec![(
                TCP,
                80,
                all()
                    .expect_peer(ns("y"), ns("x"), false)
                    .expect_peer(ns("z"), ns("x"), false),
            )],
        )],
    ));

    let isolated = np!(
        "x",
        "deny-ingress-via-label-selector",
        "  podSelector: {matchLabels: {target: isolated}}\n  policyTypes: [Ingress]"
    );
    cases.push((
        "should deny ingress access to updated pod",
        vec![
            state(isolated, vec![(TCP, 80, all())]),
            State {
                ns_labels: &[],
                pod_labels: &[("x/a", "target", "isolated")],
                policies: isolated,
                probes: vec![(TCP, 80, all().all_ingress("x/a", false))],
            },
        ],
    ));

    cases.push((
        "should deny egress from pods based on PodSelector",
        vec![state(
            np!(
                "x",
                "deny-egress-pod-a",
                "  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Egress]\n  egress: []"
            ),
            vec![(TCP, 80, all().all_egress("x/a", false))],
        )],
    ));

    cases.push((
        "should deny egress from all pods in a namespace",
        vec![state(
            np!(
                "x",
                "deny-egress-ns-x",
                "  podSelector: {}\n  policyTypes: [Egress]\n  egress: []"
            ),
            vec![(TCP, 80, all().expect_peer(ns("x"), any(), false))],
        )],
    ));

    cases.push(("should work with Ingress, Egress specified together", vec![state(
        np!("x", "allow-client-a-via-pod-selector", "  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Egress, Ingress]\n  ingress:\n  - from:\n    - podSelector: {matchLabels: {pod: b}}\n  egress:\n  - ports:\n    - port: 80"),
        vec![
            (TCP, 80, all().all_ingress("x/a", false).expect("x/b", "x/a", true)),
            (TCP, 81, all().all_ingress("x/a", false).all_egress("x/a", false).expect("x/b", "x/a", true)),
        ],
    )]));

    cases.push(("should support denying of egress traffic on the client side (even if the server explicitly allows this traffic)", vec![state(
        concat!(
            np!("x", "allow-to-ns-y-pod-a", "  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Egress]\n  egress:\n  - to:\n    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: y}}\n      podSelector: {matchLabels: {pod: a}}"),
            np!("y", "allow-from-xa-on-ya-match-selector", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: x}}\n      podSelector: {matchLabels: {pod: a}}"),
            np!("y", "allow-from-xa-on-yb-match-selector", "  podSelector: {matchLabels: {pod: b}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: x}}\n      podSelector: {matchLabels: {pod: a}}"),
        ),
        vec![(TCP, 80, all()
            .expect_peer(pod("x", "a"), any(), false)
            .expect_peer(any(), pod("y", "a"), false)
            .expect_peer(pod("x", "a"), pod("y", "a"), true)
            .expect_peer(any(), pod("y", "b"), false))],
    )]));

    cases.push(("should enforce egress policy allowing traffic to a server in a different namespace based on PodSelector and NamespaceSelector", vec![state(
        np!("x", "allow-to-ns-y-pod-a", "  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Egress]\n  egress:\n  - to:\n    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: y}}\n      podSelector: {matchLabels: {pod: a}}"),
        vec![(TCP, 80, all().all_egress("x/a", false).expect("x/a", "y/a", true))],
    )]));

    cases.push(("should enforce ingress policy allowing any port traffic to a server on a specific protocol", vec![state(
        np!("x", "allow-ingress-by-proto", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - ports:\n    - protocol: TCP"),
        vec![(TCP, 80, all()), (UDP, 80, all().expect_peer(any(), pod("x", "a"), false))],
    )]));

    let port80_only = np!(
        "x",
        "allow-ingress-port-80",
        "  podSelector: {}\n  ingress:\n  - ports:\n    - port: 80"
    );
    cases.push((
        "should enforce multiple ingress policies with ingress allow-all policy taking precedence",
        vec![
            state(
                port80_only,
                vec![(TCP, 81, all().expect_peer(any(), ns("x"), false))],
            ),
            state(
                concat!(
                    np!(
                        "x",
                        "allow-ingress-port-80",
                        "  podSelector: {}\n  ingress:\n  - ports:\n    - port: 80"
                    ),
                    np!(
                        "x",
                        "allow-ingress",
                        "  podSelector: {}\n  ingress:\n  - {}"
                    ),
                ),
                vec![(TCP, 81, all())],
            ),
        ],
    ));

    let egress80_only = np!(
        "x",
        "allow-egress-port-80",
        "  podSelector: {}\n  policyTypes: [Egress]\n  egress:\n  - ports:\n    - port: 80"
    );
    cases.push((
        "should enforce multiple egress policies with egress allow-all policy taking precedence",
        vec![
            state(
                egress80_only,
                vec![(TCP, 81, all().expect_peer(ns("x"), any(), false))],
            ),
            state(
                concat!(
                    np!(
                        "x",
                        "allow-egress-port-80",
                        "  podSelector: {}\n  policyTypes: [Egress]\n  egress:\n  - ports:\n    - port: 80"
                    ),
                    np!("x", "allow-egress", "  podSelector: {}\n  policyTypes: [Egress]\n  egress:\n  - {}"),
                ),
                vec![(TCP, 81, all())],
            ),
        ],
    ));

    cases.push(("should stop enforcing policies after they are deleted", vec![
        state(
            np!("x", "deny-all", "  podSelector: {}\n  policyTypes: [Ingress, Egress]\n  ingress: []\n  egress: []"),
            vec![(TCP, 80, all().expect_peer(ns("x"), any(), false).expect_peer(any(), ns("x"), false))],
        ),
        state("", vec![(TCP, 80, all())]),
    ]));

    cases.push(("should allow egress access to server in CIDR block", vec![state(
        np!("x", "allow-client-a-via-cidr-egress-rule", "  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Egress]\n  egress:\n  - to:\n    - ipBlock: {cidr: \"@host(y/b)\"}"),
        vec![(TCP, 80, all().all_egress("x/a", false).expect("x/a", "y/b", true))],
    )]));

    let except_b = np!("x", "allow-client-a-via-cidr-egress-rule", "  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Egress]\n  egress:\n  - to:\n    - ipBlock: {cidr: \"@large(x/b)\", except: [\"@host(x/b)\"]}");
    cases.push((
        "should enforce except clause while egress access to server in CIDR block",
        vec![state(
            except_b,
            vec![(TCP, 80, all().expect("x/a", "x/b", false))],
        )],
    ));

    cases.push(("should ensure an IP overlapping both IPBlock.CIDR and IPBlock.Except is allowed", vec![
        state(except_b, vec![(TCP, 80, all().expect("x/a", "x/b", false))]),
        // Upstream updates the policy in place (same name): only the /32 rule remains.
        state(
            np!("x", "allow-client-a-via-cidr-egress-rule", "  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Egress]\n  egress:\n  - to:\n    - ipBlock: {cidr: \"@host(x/b)\"}"),
            vec![(TCP, 80, all().all_egress("x/a", false).expect("x/a", "x/b", true))],
        ),
        // The overlap itself: both policies at once add up, and x/b is reachable again.
        state(
            concat!(
                np!("x", "allow-client-a-via-cidr-egress-rule", "  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Egress]\n  egress:\n  - to:\n    - ipBlock: {cidr: \"@large(x/b)\", except: [\"@host(x/b)\"]}"),
                np!("x", "allow-client-a-to-x-b", "  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Egress]\n  egress:\n  - to:\n    - ipBlock: {cidr: \"@host(x/b)\"}"),
            ),
            vec![(TCP, 80, all())],
        ),
    ]));

    cases.push(("should enforce policies to check ingress and egress policies can be controlled independently based on PodSelector", vec![
        state(
            np!("x", "allow-egress-for-target", "  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Egress]\n  egress:\n  - {}"),
            vec![(TCP, 80, all())],
        ),
        state(
            concat!(
                np!("x", "allow-egress-for-target", "  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Egress]\n  egress:\n  - {}"),
                np!("x", "deny-ingress-via-label-selector", "  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Ingress]"),
            ),
            vec![(TCP, 80, all().all_ingress("x/a", false))],
        ),
    ]));

    cases.push(("should not mistakenly treat 'protocol: SCTP' as 'protocol: TCP', even if the plugin doesn't support SCTP", vec![state(
        concat!(
            np!("x", "deny-ingress", "  podSelector: {}\n  policyTypes: [Ingress]"),
            np!("x", "allow-only-sctp-ingress-on-port-81", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - ports:\n    - {port: 81, protocol: SCTP}"),
        ),
        vec![(TCP, 81, all().expect_peer(any(), ns("x"), false)), (SCTP, 81, all().expect_peer(any(), ns("x"), false).all_ingress("x/a", true))],
    )]));

    cases.push(("should properly isolate pods that are selected by a policy allowing SCTP, even if the plugin doesn't support SCTP", vec![state(
        np!("x", "allow-only-sctp-ingress-on-port-80", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - ports:\n    - {port: 80, protocol: SCTP}"),
        vec![(TCP, 81, all().all_ingress("x/a", false)), (SCTP, 80, all())],
    )]));

    cases.push(("should not allow access by TCP when a policy specifies only UDP", vec![state(
        np!("x", "allow-only-udp-ingress-on-port-81", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - ports:\n    - {port: 81, protocol: UDP}"),
        vec![(TCP, 81, all().all_ingress("x/a", false)), (UDP, 81, all())],
    )]));

    cases.push(("should enforce policy to allow traffic based on NamespaceSelector with MatchLabels using default ns label", vec![state(
        np!("x", "allow-client-a-via-ns-selector-for-immutable-ns-label", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: y}}"),
        vec![(TCP, 80, only_from_y())],
    )]));

    cases.push(("should enforce policy based on NamespaceSelector with MatchExpressions using default ns label", vec![state(
        np!("x", "allow-ns-y-match-selector-for-immutable-ns-label", "  podSelector: {matchLabels: {pod: a}}\n  policyTypes: [Egress]\n  egress:\n  - to:\n    - namespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, operator: NotIn, values: [y]}]}"),
        vec![(TCP, 80, all().expect_peer(pod("x", "a"), ns("y"), false))],
    )]));

    // The UDP and SCTP variants upstream runs with the same policies on other protocols.
    for proto in [UDP, SCTP] {
        let (deny, ports, nspod): (&str, &str, &str) = if proto == UDP {
            (
                np!("x", "deny-all", "  podSelector: {}\n  ingress: []"),
                np!("x", "allow-ingress-on-port-81-ns-x", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: y}}\n    ports:\n    - {port: 81, protocol: UDP}"),
                np!("x", "allow-ns-y-pod-a-via-namespace-pod-selector", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: y}}\n      podSelector: {matchLabels: {pod: a}}"),
            )
        } else {
            (
                np!("x", "deny-all", "  podSelector: {}\n  ingress: []"),
                np!("x", "allow-ingress-on-port-81-ns-x", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: y}}\n    ports:\n    - {port: 81, protocol: SCTP}"),
                np!("x", "allow-ns-y-pod-a-via-namespace-pod-selector", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: y}}\n      podSelector: {matchLabels: {pod: a}}"),
            )
        };
        let tag: &'static str = if proto == UDP { "UDP" } else { "SCTP" };
        cases.push((
            if tag == "UDP" {
                "using UDP: should support a 'default-deny-ingress' policy"
            } else {
                "using SCTP: should support a 'default-deny-ingress' policy"
            },
            vec![state(
                deny,
                vec![(proto, 80, all().expect_peer(any(), ns("x"), false))],
            )],
        ));
        cases.push((
            if tag == "UDP" {
                "using UDP: should enforce policy based on Ports"
            } else {
                "using SCTP: should enforce policy based on Ports"
            },
            vec![state(
                ports,
                vec![
                    (proto, 81, only_from_y()),
                    (proto, 80, all().all_ingress("x/a", false)),
                ],
            )],
        ));
        cases.push((
            if tag == "UDP" { "using UDP: should enforce policy to allow traffic only from a pod in a different namespace based on PodSelector and NamespaceSelector" } else { "using SCTP: should enforce policy to allow traffic only from a pod in a different namespace based on PodSelector and NamespaceSelector" },
            vec![state(nspod, vec![(proto, 80, all().all_ingress("x/a", false).expect("y/a", "x/a", true))])],
        ));
    }

    // endPort (upstream covers it in its unit tests of the API; restated the same way).
    cases.push(("should allow ingress on a port range with endPort", vec![state(
        np!("x", "allow-range-from-y", "  podSelector: {matchLabels: {pod: a}}\n  ingress:\n  - from:\n    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: y}}\n    ports:\n    - {port: 79, endPort: 80, protocol: TCP}"),
        vec![(TCP, 80, only_from_y()), (TCP, 81, all().all_ingress("x/a", false))],
    )]));

    let mut pairs = 0;
    let n = cases.len();
    for (name, states) in cases {
        pairs += check(name, states);
    }
    assert!(n >= 40, "{n} cases");
    // Every table is 72 pairs, per probe, per state, per family.
    assert!(pairs > 72 * 2 * n, "{pairs}");
}

/// Ingress from the pod's own node is allowed even under default deny; from anywhere
/// else it is not; egress to the node is policed like any address.
#[test]
fn own_node_ingress_is_always_allowed() {
    for v6 in [false, true] {
        let st = state(
            np!(
                "x",
                "deny-all",
                "  podSelector: {}\n  policyTypes: [Ingress, Egress]\n  ingress: []\n  egress: []"
            ),
            vec![],
        );
        let c = compile_state(&st, v6);
        let t = &c.as_ref().expect("policy").snapshot.policy;
        let node: IpAddr = if v6 { "fd01::1" } else { "192.168.0.1" }
            .parse()
            .expect("ip");
        let other: IpAddr = if v6 { "fd01::2" } else { "192.168.0.2" }
            .parse()
            .expect("ip");
        let xa: IpAddr = pod_ip(v6, 0, 0).parse().expect("ip");
        assert!(t.verdict(node, xa, TCP, 80).is_allow());
        assert!(t.verdict(node, xa, 1, 0).is_allow());
        assert!(!t.verdict(other, xa, TCP, 80).is_allow());
        assert!(!t.verdict(xa, node, TCP, 80).is_allow());
    }
}
