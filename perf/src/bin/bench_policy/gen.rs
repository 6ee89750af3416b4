//! A generated cluster: namespaces with team/env labels, deployments of 5-16 pods with
//! app/tier/version labels and tier-typical named ports, nodes, dual-stack pod addresses,
//! and NetworkPolicies drawn from ten templates seen in real clusters (default deny,
//! same-namespace, app-to-app with numeric or named ports, cross-namespace by team,
//! monitoring scrapes on a named port, egress to databases and DNS, egress to the
//! internet as `0.0.0.0/0` minus private ranges, ingress from external CIDRs with
//! excepts and port ranges, set-based selectors, egress to other namespaces).
//!
//! Addressing: each namespace owns an aligned IPv4 /23 (a /119 of one IPv6 /64), each
//! deployment an aligned /28 inside it, filled from its first address (per-namespace IPAM blocks), and each node hosts a
//! contiguous run of 50 addresses. Identity tables do not care; the ClassBench export
//! does (an ACL has no identity indirection, so scattered pods would make its rule set a
//! cross product of /32s).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use sluice_ctrl::compile::ir::{Ir, Node, Policy, Workload};
use sluice_ctrl::model::meta::{
    IntOrString, LabelSelector, LabelSelectorRequirement, Protocol, SelectorOperator,
};
use sluice_ctrl::model::netpol::{
    EgressRule, IngressRule, IpBlock, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
    PolicyType,
};

/// Scenarios written `PODSxPOLICIES[,...]` (`--scenarios`): `None` if any is not.
pub fn parse_scenarios(list: &str) -> Option<Vec<(usize, usize)>> {
    list.split(',')
        .map(|s| {
            let (p, n) = s.trim().split_once('x')?;
            Some((p.parse().ok()?, n.parse().ok()?))
        })
        .collect()
}

/// The scenarios of a `--scenarios` option: (pods, policies) each.
#[derive(Clone, Debug)]
pub struct Scenarios(pub Vec<(usize, usize)>);

/// `--scenarios`' value parser: at least one `PODSxPOLICIES`, comma-separated.
pub fn scenarios(list: &str) -> Result<Scenarios, String> {
    match parse_scenarios(list) {
        Some(s) if !s.is_empty() => Ok(Scenarios(s)),
        _ => Err("wants PODSxPOLICIES[,...]".into()),
    }
}

/// A small deterministic PRNG (xorshift64*).
pub struct Rng(u64);

impl Rng {
    /// Seeded.
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    /// Next 64 bits.
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// True with probability `p` percent.
    pub fn pct(&mut self, p: u64) -> bool {
        self.next() % 100 < p
    }
}

const TIERS: [&str; 5] = ["web", "api", "db", "cache", "worker"];

fn tier_ports(tier: &str) -> Vec<(String, Protocol, u16)> {
    let p = |n: &str, port: u16| (n.to_string(), Protocol::Tcp, port);
    match tier {
        "web" => vec![p("http", 8080), p("metrics", 9090)],
        "api" => vec![p("grpc", 9000), p("http", 8080), p("metrics", 9090)],
        "db" => vec![p("postgres", 5432), p("metrics", 9187)],
        "cache" => vec![p("redis", 6379)],
        _ => vec![p("metrics", 9090)],
    }
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn sel(pairs: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: labels(pairs),
        match_expressions: Vec::new(),
    }
}

fn req(key: &str, op: SelectorOperator, values: &[&str]) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.into(),
        operator: op,
        values: values.iter().map(|v| v.to_string()).collect(),
    }
}

fn pods(s: LabelSelector) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        pod_selector: Some(s),
        ..Default::default()
    }
}

fn nss(n: LabelSelector, p: Option<LabelSelector>) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        namespace_selector: Some(n),
        pod_selector: p,
        ..Default::default()
    }
}

fn block(cidr: &str, except: &[String]) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        ip_block: Some(IpBlock {
            cidr: cidr.into(),
            except: except.to_vec(),
        }),
        ..Default::default()
    }
}

fn port(proto: Protocol, p: u16) -> NetworkPolicyPort {
    NetworkPolicyPort {
        protocol: Some(proto),
        port: Some(IntOrString::Int(i64::from(p))),
        end_port: None,
    }
}

fn named(name: &str) -> NetworkPolicyPort {
    NetworkPolicyPort {
        protocol: None,
        port: Some(IntOrString::Str(name.into())),
        end_port: None,
    }
}

fn range(lo: u16, hi: u16) -> NetworkPolicyPort {
    NetworkPolicyPort {
        protocol: Some(Protocol::Tcp),
        port: Some(IntOrString::Int(i64::from(lo))),
        end_port: Some(i64::from(hi)),
    }
}

/// One deployment of a namespace.
struct App {
    name: String,
    tier: &'static str,
}

/// The generated cluster and what the trace generator needs.
pub struct Cluster {
    /// The IR handed to the policy compiler.
    pub ir: Ir,
    /// Pod addresses (IPv4, IPv6) with their named ports' numbers.
    pub pods: Vec<(Ipv4Addr, Ipv6Addr, Vec<u16>)>,
    /// Node addresses (IPv4, IPv6).
    pub nodes: Vec<(Ipv4Addr, Ipv6Addr)>,
}

fn v4(offset: u32) -> Ipv4Addr {
    Ipv4Addr::from(0x0a00_0000 + offset)
}

fn v6(offset: u32) -> Ipv6Addr {
    Ipv6Addr::from((0xfd00_0010_u128 << 96) + u128::from(offset))
}

/// Generates a cluster of about `n_pods` pods and exactly `n_policies` policies.
pub fn cluster(n_pods: usize, n_policies: usize, seed: u64) -> Cluster {
    let mut rng = Rng::new(seed);
    let n_ns = (n_pods / 100).max(10);
    let n_nodes = n_pods.div_ceil(50).max(1);
    let mut b = Builder {
        ir: Ir::default(),
        pods: Vec::new(),
        pod_count: 0,
        n_nodes,
    };
    let nodes = b.nodes();
    // Namespaces 0..n_ns are workloads; then monitoring and kube-system.
    let ns_names: Vec<String> = (0..n_ns).map(|i| format!("ns-{i}")).collect();
    let apps = b.workload_namespaces(&ns_names, &mut rng);
    b.system_namespaces(n_ns);
    let mut ir = b.ir;
    policies(&mut ir, &ns_names, &apps, n_policies, &mut rng);
    Cluster {
        ir,
        pods: b.pods,
        nodes,
    }
}

/// The cluster as it is filled: the IR, the pods added so far and how many nodes host
/// them.
struct Builder {
    ir: Ir,
    pods: Vec<(Ipv4Addr, Ipv6Addr, Vec<u16>)>,
    pod_count: usize,
    n_nodes: usize,
}

impl Builder {
    /// The nodes, with their addresses (IPv4, IPv6).
    fn nodes(&mut self) -> Vec<(Ipv4Addr, Ipv6Addr)> {
        let mut nodes = Vec::new();
        for i in 0..self.n_nodes as u32 {
            let a4 = Ipv4Addr::from(0xac10_0000 + i + 1);
            let a6 = Ipv6Addr::from((0xfd00_0020_u128 << 96) + u128::from(i) + 1);
            self.ir.nodes.push(Node {
                name: format!("node-{i}"),
                addresses: vec![IpAddr::V4(a4), IpAddr::V6(a6)],
            });
            nodes.push((a4, a6));
        }
        nodes
    }

    /// A dual-stack pod at `offset` of the address space, on the node whose run of 50
    /// addresses it falls in.
    fn add_pod(
        &mut self,
        ns: &str,
        name: String,
        l: BTreeMap<String, String>,
        ports: Vec<(String, Protocol, u16)>,
        offset: u32,
    ) {
        let node = format!("node-{}", (self.pod_count / 50) % self.n_nodes);
        self.pod_count += 1;
        let (a4, a6) = (v4(offset), v6(offset));
        for ip in [IpAddr::V4(a4), IpAddr::V6(a6)] {
            self.ir.workloads.push(Workload {
                ip,
                namespace: ns.to_string(),
                pod: name.clone(),
                labels: l.clone(),
                named_ports: ports.clone(),
                node: Some(node.clone()),
            });
        }
        self.pods
            .push((a4, a6, ports.iter().map(|p| p.2).collect::<Vec<u16>>()));
    }

    /// The workload namespaces `ns_names` with their deployments (about 100 pods each);
    /// returns each namespace's deployments.
    fn workload_namespaces(&mut self, ns_names: &[String], rng: &mut Rng) -> Vec<Vec<App>> {
        let mut apps: Vec<Vec<App>> = Vec::new();
        for (i, ns) in ns_names.iter().enumerate() {
            let env = ["prod", "staging", "dev"][i % 3];
            let team = format!("t{}", i % 20);
            let mut l = labels(&[("team", &team), ("env", env)]);
            l.insert("kubernetes.io/metadata.name".into(), ns.clone());
            self.ir.namespaces.insert(ns.clone(), l);
            let base = (i as u32) << 9; // a /23 per namespace
            let mut ns_apps = Vec::new();
            let mut in_ns = 0usize;
            let mut k = 0u32;
            while in_ns < 100 && k < 32 {
                let tier = TIERS[(k as usize) % TIERS.len()];
                let name = format!("a{k}");
                let size = 5 + rng.below(12);
                for p in 0..size {
                    let version = if k % 2 == 1 && p >= size / 2 {
                        "v2"
                    } else {
                        "v1"
                    };
                    let l = labels(&[("app", &name), ("tier", tier), ("version", version)]);
                    let offset = base + (k << 4) + p as u32;
                    self.add_pod(ns, format!("{name}-{p}"), l, tier_ports(tier), offset);
                }
                in_ns += size;
                ns_apps.push(App { name, tier });
                k += 1;
            }
            apps.push(ns_apps);
        }
        apps
    }

    /// Monitoring (prometheus) and kube-system (kube-dns), four pods each, after the
    /// `n_ns` workload namespaces.
    fn system_namespaces(&mut self, n_ns: usize) {
        for (i, (ns, app, ports)) in [
            (
                "monitoring",
                "prometheus",
                vec![("web".to_string(), Protocol::Tcp, 9090)],
            ),
            (
                "kube-system",
                "kube-dns",
                vec![
                    ("dns".to_string(), Protocol::Udp, 53),
                    ("dns-tcp".to_string(), Protocol::Tcp, 53),
                ],
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let mut l = labels(&[("team", "platform")]);
            l.insert("kubernetes.io/metadata.name".into(), ns.into());
            self.ir.namespaces.insert(ns.into(), l);
            let base = ((n_ns + i) as u32) << 9;
            for p in 0..4u32 {
                let key = if app == "kube-dns" { "k8s-app" } else { "app" };
                let l = labels(&[(key, app)]);
                self.add_pod(ns, format!("{app}-{p}"), l, ports.clone(), base + p + 1);
            }
        }
    }
}

/// `n_policies` policies, round-robin over the workload namespaces, templates cycling
/// per namespace.
fn policies(ir: &mut Ir, ns_names: &[String], apps: &[Vec<App>], n_policies: usize, rng: &mut Rng) {
    let n_ns = ns_names.len();
    let mut per_ns = vec![0usize; n_ns];
    for n in 0..n_policies {
        let nsi = n % n_ns;
        // The k-th policy of namespace i uses template (i + k) mod 10: every template is
        // used evenly at any policy count.
        let t = per_ns[nsi] + nsi;
        per_ns[nsi] += 1;
        let ns = &ns_names[nsi];
        let my = &apps[nsi];
        let pick = |rng: &mut Rng| &my[rng.below(my.len())];
        let other_team = format!("t{}", rng.below(20));
        let x = pick(rng);
        let y = pick(rng);
        let drawn = Drawn { x, y, other_team };
        let spec = match t % 10 {
            t @ 0..=4 => ingress_template(t, &drawn, rng),
            t => egress_template(t, &drawn, rng),
        };
        ir.policies.push(Policy {
            namespace: ns.clone(),
            name: format!("pol-{n}"),
            spec,
        });
    }
}

/// What a policy's template draws on: two deployments of its namespace and another
/// team.
struct Drawn<'a> {
    x: &'a App,
    y: &'a App,
    other_team: String,
}

/// Templates 0-4: default deny, same-namespace, app-to-app with numeric or named ports,
/// cross-namespace by team, monitoring scrapes on a named port.
fn ingress_template(t: usize, d: &Drawn, rng: &mut Rng) -> NetworkPolicySpec {
    let (x, y, other_team) = (d.x, d.y, &d.other_team);
    match t {
        0 => NetworkPolicySpec {
            policy_types: Some(vec![PolicyType::Ingress]),
            ..Default::default()
        },
        1 => NetworkPolicySpec {
            ingress: Some(vec![IngressRule {
                ports: vec![],
                from: vec![pods(LabelSelector::default())],
            }]),
            ..Default::default()
        },
        2 => NetworkPolicySpec {
            pod_selector: sel(&[("app", &x.name)]),
            ingress: Some(vec![IngressRule {
                ports: if rng.pct(50) {
                    vec![port(Protocol::Tcp, 8080)]
                } else {
                    vec![named("http"), named("grpc")]
                },
                from: vec![pods(sel(&[("app", &y.name)]))],
            }]),
            ..Default::default()
        },
        3 => NetworkPolicySpec {
            pod_selector: sel(&[("tier", "api")]),
            ingress: Some(vec![IngressRule {
                ports: vec![port(Protocol::Tcp, 8080), port(Protocol::Tcp, 9000)],
                from: vec![nss(
                    sel(&[("team", other_team)]),
                    Some(sel(&[("tier", "web")])),
                )],
            }]),
            ..Default::default()
        },
        _ => NetworkPolicySpec {
            ingress: Some(vec![IngressRule {
                ports: vec![named("metrics")],
                from: vec![nss(
                    sel(&[("kubernetes.io/metadata.name", "monitoring")]),
                    Some(sel(&[("app", "prometheus")])),
                )],
            }]),
            ..Default::default()
        },
    }
}

/// Templates 5-9: egress to databases and DNS, egress to the internet minus private
/// ranges, ingress from external CIDRs with excepts and port ranges, set-based
/// selectors, egress to other namespaces.
fn egress_template(t: usize, d: &Drawn, rng: &mut Rng) -> NetworkPolicySpec {
    let (x, y, other_team) = (d.x, d.y, &d.other_team);
    match t {
        5 => NetworkPolicySpec {
            pod_selector: sel(&[("app", &x.name)]),
            policy_types: Some(vec![PolicyType::Egress]),
            egress: Some(vec![
                EgressRule {
                    ports: vec![port(Protocol::Tcp, 5432), named("redis")],
                    to: vec![pods(LabelSelector {
                        match_labels: BTreeMap::new(),
                        match_expressions: vec![req(
                            "tier",
                            SelectorOperator::In,
                            &["db", "cache"],
                        )],
                    })],
                },
                EgressRule {
                    ports: vec![port(Protocol::Udp, 53), port(Protocol::Tcp, 53)],
                    to: vec![nss(
                        LabelSelector::default(),
                        Some(sel(&[("k8s-app", "kube-dns")])),
                    )],
                },
                EgressRule {
                    ports: vec![],
                    to: vec![pods(LabelSelector::default())],
                },
            ]),
            ..Default::default()
        },
        6 => NetworkPolicySpec {
            pod_selector: sel(&[("tier", "web")]),
            policy_types: Some(vec![PolicyType::Egress]),
            egress: Some(vec![EgressRule {
                ports: vec![port(Protocol::Tcp, 443)],
                to: vec![
                    block(
                        "0.0.0.0/0",
                        &[
                            "10.0.0.0/8".into(),
                            "172.16.0.0/12".into(),
                            "192.168.0.0/16".into(),
                        ],
                    ),
                    block("::/0", &["fd00::/8".into()]),
                ],
            }]),
            ..Default::default()
        },
        7 => {
            let a = rng.below(256);
            let b = rng.below(256);
            NetworkPolicySpec {
                pod_selector: sel(&[("tier", x.tier)]),
                ingress: Some(vec![IngressRule {
                    ports: vec![port(Protocol::Tcp, 443), range(8443, 8450)],
                    from: vec![
                        block(&format!("198.18.{a}.0/24"), &[format!("198.18.{a}.128/28")]),
                        block(
                            &format!("2001:db8:{b:x}::/48"),
                            &[format!("2001:db8:{b:x}:1::/64")],
                        ),
                    ],
                }]),
                ..Default::default()
            }
        }
        8 => NetworkPolicySpec {
            pod_selector: LabelSelector {
                match_labels: BTreeMap::new(),
                match_expressions: vec![
                    req("app", SelectorOperator::In, &[&x.name, &y.name]),
                    req("version", SelectorOperator::NotIn, &["v2"]),
                ],
            },
            ingress: Some(vec![IngressRule {
                ports: vec![port(Protocol::Tcp, 8080), port(Protocol::Udp, 8125)],
                from: vec![pods(LabelSelector {
                    match_labels: BTreeMap::new(),
                    match_expressions: vec![
                        req("tier", SelectorOperator::Exists, &[]),
                        req("canary", SelectorOperator::DoesNotExist, &[]),
                    ],
                })],
            }]),
            ..Default::default()
        },
        _ => NetworkPolicySpec {
            pod_selector: sel(&[("tier", "worker")]),
            policy_types: Some(vec![PolicyType::Egress]),
            egress: Some(vec![EgressRule {
                ports: vec![port(Protocol::Tcp, 8080), port(Protocol::Sctp, 3868)],
                to: vec![nss(
                    sel(&[("env", "prod"), ("team", other_team)]),
                    Some(sel(&[("tier", "api")])),
                )],
            }]),
            ..Default::default()
        },
    }
}

/// One connection of a trace.
#[derive(Debug, Clone, Copy)]
pub struct Probe {
    /// Source.
    pub src: IpAddr,
    /// Destination.
    pub dst: IpAddr,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// IP protocol.
    pub proto: u8,
}

/// A trace of `n` connection attempts: 70 % pod to pod (half within the namespace
/// block), 12 % outside to pod, 12 % pod to outside, 6 % node to pod; destination ports
/// mostly the destination's named ports or common ones; TCP 85 %, UDP 12 %, SCTP 3 %.
/// With `dsts`, destinations (of the pod-bound shares) are drawn from those pod indices.
pub fn trace(c: &Cluster, n: usize, v6: bool, seed: u64, dsts: Option<&[usize]>) -> Vec<Probe> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(n);
    let addr = |p: &(Ipv4Addr, Ipv6Addr, Vec<u16>)| -> IpAddr {
        if v6 {
            IpAddr::V6(p.1)
        } else {
            IpAddr::V4(p.0)
        }
    };
    let external = |rng: &mut Rng| -> IpAddr {
        if v6 {
            let b = rng.below(256) as u128;
            IpAddr::V6(Ipv6Addr::from(
                (0x2001_0db8_u128 << 96) | (b << 80) | rng.next() as u128 & 0xffff_ffff,
            ))
        } else if rng.pct(50) {
            IpAddr::V4(Ipv4Addr::from(0xc612_0000 | (rng.next() as u32 & 0xffff)))
        } else {
            IpAddr::V4(Ipv4Addr::from(rng.next() as u32))
        }
    };
    for _ in 0..n {
        let roll = rng.below(100);
        let di = match dsts {
            Some(list) if !list.is_empty() => list[rng.below(list.len())],
            _ => rng.below(c.pods.len()),
        };
        let d = &c.pods[di];
        let (src, dst, dport_pool): (IpAddr, IpAddr, &[u16]) = if roll < 70 {
            let s = if rng.pct(50) {
                // Near the destination: same namespace block most of the time.
                let j = (di + rng.below(64))
                    .saturating_sub(32)
                    .min(c.pods.len() - 1);
                &c.pods[j]
            } else {
                &c.pods[rng.below(c.pods.len())]
            };
            (addr(s), addr(d), &d.2)
        } else if roll < 82 {
            (external(&mut rng), addr(d), &d.2)
        } else if roll < 94 {
            (addr(d), external(&mut rng), &[443, 80, 53])
        } else {
            let node = c.nodes[rng.below(c.nodes.len())];
            let s = if v6 {
                IpAddr::V6(node.1)
            } else {
                IpAddr::V4(node.0)
            };
            (s, addr(d), &d.2)
        };
        let proto = match rng.below(100) {
            0..=84 => 6,
            85..=96 => 17,
            _ => 132,
        };
        let dport = match rng.below(10) {
            0..=5 if !dport_pool.is_empty() => dport_pool[rng.below(dport_pool.len())],
            6 | 7 => [80, 443, 8080, 53, 9000, 5432, 8443, 8125][rng.below(8)],
            _ => 1024 + rng.below(64000) as u16,
        };
        out.push(Probe {
            src,
            dst,
            sport: 1024 + rng.below(60000) as u16,
            dport,
            proto,
        });
    }
    out
}
