//! Stages 5 and 6: identities (what the ipcache maps an address to: an address class, a
//! workload group on a node, or a node's address; each with its peer keys and profiles)
//! and the ipcache prefixes that map addresses to them.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use ipnet::IpNet;
use sluice_dataplane::tables::policy::{IdentityEntry, NONE};

use super::classes::Classes;
use super::groups::Pods;
use super::info::IdentityKind;
use super::peers::Builder;

/// The identities of a compilation and the addresses that are hosts (pods and nodes).
pub(super) struct Identities {
    /// Table entries by identity.
    pub(super) entries: Vec<IdentityEntry>,
    /// What each identity stands for.
    pub(super) kinds: Vec<IdentityKind>,
    /// Identical entries share an identity.
    intern: HashMap<IdentityEntry, u32>,
    /// Pod and node addresses and their identities.
    pub(super) hosts: BTreeMap<IpAddr, u32>,
}

impl Identities {
    fn add(&mut self, e: IdentityEntry, k: IdentityKind) -> u32 {
        *self.intern.entry(e).or_insert_with(|| {
            self.entries.push(e);
            self.kinds.push(k);
            (self.entries.len() - 1) as u32
        })
    }

    /// Stage 5: classes first (class c is identity c), then pods, then nodes. A node
    /// address that is also a pod's is warned about (the pod wins).
    pub(super) fn assign(
        b: &Builder<'_>,
        pods: &Pods,
        group_profile: &[[u32; 2]],
        warnings: &mut Vec<String>,
    ) -> Self {
        let mut ids = Identities {
            entries: Vec::new(),
            kinds: Vec::new(),
            intern: HashMap::new(),
            hosts: BTreeMap::new(),
        };
        let keys = b.keys;
        for c in 0..b.classes.len() as u32 {
            let e = IdentityEntry {
                peer: [NONE, NONE, keys.class(c), NONE, keys.any()],
                ..IdentityEntry::world(keys.any())
            };
            ids.add(e, IdentityKind::Class(c));
        }
        ids.add_pods(b, pods, group_profile);
        ids.add_nodes(b, pods, warnings);
        ids
    }

    fn add_pods(&mut self, b: &Builder<'_>, pods: &Pods, group_profile: &[[u32; 2]]) {
        let ir = b.ir;
        let keys = b.keys;
        let node_index: HashMap<&str, u32> = ir
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i as u32))
            .collect();
        for &(wi, g) in &pods.workload_group {
            let w = &ir.workloads[wi];
            let grp = &b.groups[g as usize];
            let node = w.node.as_deref().and_then(|n| node_index.get(n).copied());
            let e = IdentityEntry {
                peer: [
                    keys.group(g),
                    keys.namespace(grp.namespace),
                    keys.class(grp.class),
                    keys.any_pod(),
                    keys.any(),
                ],
                egress: group_profile[g as usize][0],
                ingress: group_profile[g as usize][1],
                runs_on: node.unwrap_or(NONE),
                node_of: NONE,
            };
            let id = self.add(e, IdentityKind::Workload { group: g, node });
            self.hosts.insert(w.ip, id);
        }
    }

    fn add_nodes(&mut self, b: &Builder<'_>, pods: &Pods, warnings: &mut Vec<String>) {
        let ir = b.ir;
        let keys = b.keys;
        for (ni, n) in ir.nodes.iter().enumerate() {
            for &a in &n.addresses {
                if let Some(&wi) = pods.by_ip.get(&a) {
                    let w = &ir.workloads[wi];
                    warnings.push(format!(
                        "node {} address {a} is also pod {}/{}'s address; the pod wins",
                        n.name, w.namespace, w.pod
                    ));
                    continue;
                }
                if self.hosts.contains_key(&a) {
                    continue;
                }
                let class = b.classes.class_of(a);
                let e = IdentityEntry {
                    peer: [NONE, NONE, keys.class(class), NONE, keys.any()],
                    node_of: ni as u32,
                    ..IdentityEntry::world(keys.any())
                };
                let kind = IdentityKind::Node {
                    node: ni as u32,
                    class,
                };
                let id = self.add(e, kind);
                self.hosts.insert(a, id);
            }
        }
    }
}

/// Stage 6: ipcache prefixes: class prefixes (minus exact hosts), then hosts.
pub(super) fn ipcache_prefixes(
    classes: &Classes,
    hosts: &BTreeMap<IpAddr, u32>,
) -> Vec<(IpNet, u32)> {
    let mut prefixes: Vec<(IpNet, u32)> = classes
        .prefixes
        .iter()
        .filter(|(n, _)| !(n.prefix_len() == n.max_prefix_len() && hosts.contains_key(&n.addr())))
        .copied()
        .collect();
    prefixes.extend(hosts.iter().map(|(&a, &id)| (IpNet::from(a), id)));
    prefixes
}
