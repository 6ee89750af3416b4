//! Namespaces and stages 2 and 3: pods policy cannot tell apart (same namespace, labels,
//! named ports and address class) gathered into workload groups, and the policies that
//! select each group.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use super::classes::Classes;
use super::info::Group;
use super::semantics::has_type;
use crate::compile::ir::Ir;
use crate::model::meta::Protocol;
use crate::model::netpol::PolicyType;

/// Namespaces numbered in name order, with their labels.
pub(super) struct Namespaces {
    /// Names by index.
    pub(super) names: Vec<String>,
    /// Labels by index.
    pub(super) labels: Vec<BTreeMap<String, String>>,
    /// Index by name.
    pub(super) index: HashMap<String, u32>,
}

impl Namespaces {
    /// The IR's namespaces (every namespace a pod or policy lives in is in the IR's map;
    /// be total anyway).
    pub(super) fn of(ir: &Ir) -> Self {
        let mut ns_map = ir.namespaces.clone();
        for w in &ir.workloads {
            ns_map.entry(w.namespace.clone()).or_insert_with(|| {
                BTreeMap::from([(
                    "kubernetes.io/metadata.name".to_string(),
                    w.namespace.clone(),
                )])
            });
        }
        for p in &ir.policies {
            ns_map.entry(p.namespace.clone()).or_insert_with(|| {
                BTreeMap::from([(
                    "kubernetes.io/metadata.name".to_string(),
                    p.namespace.clone(),
                )])
            });
        }
        let names: Vec<String> = ns_map.keys().cloned().collect();
        let labels: Vec<BTreeMap<String, String>> = ns_map.into_values().collect();
        let index: HashMap<String, u32> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i as u32))
            .collect();
        Namespaces {
            names,
            labels,
            index,
        }
    }
}

/// Which pod is in which group.
pub(super) struct Pods {
    /// The pod (index into `Ir::workloads`) holding each address: the first one.
    pub(super) by_ip: BTreeMap<IpAddr, usize>,
    /// `(pod, group)` for every pod in `by_ip`, in address order.
    pub(super) workload_group: Vec<(usize, u32)>,
}

/// The workload groups and their indexes.
pub(super) struct Groups {
    /// Groups by index.
    pub(super) list: Vec<Group>,
    /// Per namespace index: its groups.
    pub(super) by_ns: Vec<Vec<u32>>,
    /// Per address class: its groups.
    pub(super) by_class: BTreeMap<u32, Vec<u32>>,
}

/// The pod holding each address: the first one; later pods with the same address are
/// warned about.
fn first_pod_by_ip(ir: &Ir, warnings: &mut Vec<String>) -> BTreeMap<IpAddr, usize> {
    let mut by_ip: BTreeMap<IpAddr, usize> = BTreeMap::new();
    for (i, w) in ir.workloads.iter().enumerate() {
        if let Some(&first) = by_ip.get(&w.ip) {
            let f = &ir.workloads[first];
            warnings.push(format!(
                "pod {}/{} has address {} of pod {}/{}; policy uses the first",
                w.namespace, w.pod, w.ip, f.namespace, f.pod
            ));
            continue;
        }
        by_ip.insert(w.ip, i);
    }
    by_ip
}

/// Stage 2: workload groups (first pod with an address wins; duplicates are warned
/// about). No group is selected by a policy yet (see [`select`]).
pub(super) fn group_workloads(
    ir: &Ir,
    ns: &Namespaces,
    classes: &Classes,
    warnings: &mut Vec<String>,
) -> (Pods, Groups) {
    let by_ip = first_pod_by_ip(ir, warnings);
    // Keyed by the workload's own labels (borrowed): they are cloned once per group,
    // not per pod.
    type GroupKey<'w> = (
        u32,
        &'w BTreeMap<String, String>,
        Vec<(String, Protocol, u16)>,
        u32,
    );
    let mut group_ids: BTreeMap<GroupKey, u32> = BTreeMap::new();
    let mut groups: Vec<Group> = Vec::new();
    let mut workload_group: Vec<(usize, u32)> = Vec::new();
    for &wi in by_ip.values() {
        let w = &ir.workloads[wi];
        let n = ns.index.get(&w.namespace).copied().unwrap_or(0);
        let mut named = w.named_ports.clone();
        named.sort();
        named.dedup();
        let class = classes.class_of(w.ip);
        let next = groups.len() as u32;
        let g = *group_ids
            .entry((n, &w.labels, named, class))
            .or_insert_with_key(|key| {
                groups.push(Group {
                    namespace: key.0,
                    labels: key.1.clone(),
                    named_ports: key.2.clone(),
                    class: key.3,
                    ingress_by: Vec::new(),
                    egress_by: Vec::new(),
                });
                next
            });
        workload_group.push((wi, g));
    }
    let mut by_ns = vec![Vec::new(); ns.names.len()];
    let mut by_class: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (g, grp) in groups.iter().enumerate() {
        by_ns[grp.namespace as usize].push(g as u32);
        by_class.entry(grp.class).or_default().push(g as u32);
    }
    let pods = Pods {
        by_ip,
        workload_group,
    };
    let groups = Groups {
        list: groups,
        by_ns,
        by_class,
    };
    (pods, groups)
}

/// Stage 3: which policies select which groups (`ingress_by`, `egress_by`).
pub(super) fn select(ir: &Ir, ns: &Namespaces, groups: &mut Groups) {
    for (pi, p) in ir.policies.iter().enumerate() {
        let Some(&n) = ns.index.get(&p.namespace) else {
            continue;
        };
        let ing = has_type(p, PolicyType::Ingress);
        let eg = has_type(p, PolicyType::Egress);
        for &g in &groups.by_ns[n as usize] {
            let grp = &mut groups.list[g as usize];
            if p.spec.pod_selector.matches(&grp.labels) {
                if ing {
                    grp.ingress_by.push(pi);
                }
                if eg {
                    grp.egress_by.push(pi);
                }
            }
        }
    }
}

/// Label sets, numbered for memoised selector matching: per group, the number of its
/// label set; and how many sets there are.
pub(super) fn label_sets(groups: &[Group]) -> (Vec<u32>, usize) {
    let mut label_set_ids: HashMap<&BTreeMap<String, String>, u32> = HashMap::new();
    let group_label_set: Vec<u32> = groups
        .iter()
        .map(|g| {
            let next = label_set_ids.len() as u32;
            *label_set_ids.entry(&g.labels).or_insert(next)
        })
        .collect();
    (group_label_set, label_set_ids.len())
}
