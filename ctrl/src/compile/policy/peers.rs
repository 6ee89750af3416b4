//! The compilation state shared by the profile and identity stages ([`Builder`]): the
//! namespaces, classes, groups and key numbering of stages 1 to 3, and the peer keys
//! each policy peer and rule names, computed once and cached.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use sluice_dataplane::tables::policy::{PeerKind, NONE};

use super::classes::{Classes, Term};
use super::groups::{label_sets, Groups, Namespaces};
use super::info::{Group, KeySpace, Limits, PolicyCompileError};
use super::semantics::term_of;
use crate::compile::ir::Ir;
use crate::model::meta::LabelSelector;
use crate::model::netpol::{NetworkPolicyPeer, PolicyType};

/// Peer keys shared between rules and profiles.
pub(super) type PeerKeys = std::rc::Rc<Vec<(PeerKind, u32)>>;

/// A compilation in progress.
pub(super) struct Builder<'a> {
    pub(super) ir: &'a Ir,
    pub(super) namespaces: Vec<String>,
    ns_labels: Vec<BTreeMap<String, String>>,
    ns_index: HashMap<String, u32>,
    pub(super) classes: Classes,
    term_ids: HashMap<Term, u32>,
    pub(super) groups: Vec<Group>,
    groups_by_ns: Vec<Vec<u32>>,
    groups_by_class: BTreeMap<u32, Vec<u32>>,
    pub(super) keys: KeySpace,
    /// Per group: the number of its label set. Groups of different namespaces often
    /// carry the same labels, and a selector is matched once per label set.
    group_label_set: Vec<u32>,
    /// Per label set, while [`Self::groups_matching`] runs: 0 not matched yet, 1 no, 2
    /// yes. All 0 between calls.
    label_set_memo: Vec<u8>,
    /// Peer keys by peer and the namespace they depend on: the policy's for a peer with
    /// only a pod selector, [`NONE`] for the others (a namespace selector, an ipBlock or
    /// nothing name the same peers from any namespace).
    peer_cache: HashMap<(u32, &'a NetworkPolicyPeer), PeerKeys>,
    /// Namespaces by namespace selector.
    ns_cache: HashMap<&'a LabelSelector, std::rc::Rc<Vec<u32>>>,
    rule_cache: HashMap<(usize, usize, usize), PeerKeys>,
}

impl<'a> Builder<'a> {
    /// The state after stage 3, with the key numbering; an error when the keys would
    /// not fit in a `u32`.
    pub(super) fn new(
        ir: &'a Ir,
        ns: Namespaces,
        classes: Classes,
        term_ids: HashMap<Term, u32>,
        groups: Groups,
        limits: Limits,
    ) -> Result<Self, Vec<PolicyCompileError>> {
        let (group_label_set, label_sets) = label_sets(&groups.list);
        let keys = KeySpace {
            groups: groups.list.len() as u32,
            namespaces: ns.names.len() as u32,
            classes: classes.len() as u32,
        };
        let key_count = u64::from(keys.any()) + 1;
        if key_count >= u64::from(u32::MAX) {
            return Err(vec![PolicyCompileError::OverCap {
                cap: "identities",
                limit: limits.identities,
                needed: key_count,
            }]);
        }
        Ok(Builder {
            ir,
            namespaces: ns.names,
            ns_labels: ns.labels,
            ns_index: ns.index,
            classes,
            term_ids,
            groups: groups.list,
            groups_by_ns: groups.by_ns,
            groups_by_class: groups.by_class,
            keys,
            group_label_set,
            label_set_memo: vec![0; label_sets],
            peer_cache: HashMap::new(),
            ns_cache: HashMap::new(),
            rule_cache: HashMap::new(),
        })
    }

    /// The index of a namespace.
    pub(super) fn ns_of(&self, name: &str) -> Option<u32> {
        self.ns_index.get(name).copied()
    }

    fn namespaces_matching(&mut self, sel: &'a LabelSelector) -> std::rc::Rc<Vec<u32>> {
        if let Some(v) = self.ns_cache.get(sel) {
            return v.clone();
        }
        let v = std::rc::Rc::new(
            (0..self.namespaces.len() as u32)
                .filter(|&n| sel.matches(&self.ns_labels[n as usize]))
                .collect::<Vec<u32>>(),
        );
        self.ns_cache.insert(sel, v.clone());
        v
    }

    /// The workload keys of the groups of namespaces `nss` that `sel` selects. Each
    /// distinct label set is matched once (see [`Self::label_set_memo`]).
    fn groups_matching(&mut self, nss: &[u32], sel: &LabelSelector) -> Vec<(PeerKind, u32)> {
        let mut out = Vec::new();
        let mut touched = Vec::new();
        for &n in nss {
            for &g in &self.groups_by_ns[n as usize] {
                let set = self.group_label_set[g as usize] as usize;
                let yes = match self.label_set_memo[set] {
                    0 => {
                        let yes = sel.matches(&self.groups[g as usize].labels);
                        self.label_set_memo[set] = 1 + u8::from(yes);
                        touched.push(set);
                        yes
                    }
                    m => m == 2,
                };
                if yes {
                    out.push((PeerKind::Workload, self.keys.group(g)));
                }
            }
        }
        for set in touched {
            self.label_set_memo[set] = 0;
        }
        out
    }

    /// The peer keys one `NetworkPolicyPeer` of a policy in namespace `ns` names.
    fn peer_keys(&mut self, ns: u32, peer: &'a NetworkPolicyPeer) -> PeerKeys {
        let depends_on_ns = peer.ip_block.is_none()
            && peer.namespace_selector.is_none()
            && peer.pod_selector.is_some();
        let cache_key = (if depends_on_ns { ns } else { NONE }, peer);
        if let Some(v) = self.peer_cache.get(&cache_key) {
            return v.clone();
        }
        let keys: Vec<(PeerKind, u32)> = if let Some(b) = &peer.ip_block {
            match term_of(b).and_then(|t| self.term_ids.get(&t).copied()) {
                Some(t) => self.classes.of_term[t as usize]
                    .iter()
                    .map(|&c| (PeerKind::Class, self.keys.class(c)))
                    .collect(),
                None => Vec::new(),
            }
        } else {
            match (&peer.pod_selector, &peer.namespace_selector) {
                (None, None) => Vec::new(),
                (Some(ps), None) => {
                    if ps.is_empty() {
                        vec![(PeerKind::Namespace, self.keys.namespace(ns))]
                    } else {
                        self.groups_matching(&[ns], ps)
                    }
                }
                (ps, Some(nss)) => {
                    let all_pods = ps.as_ref().is_none_or(|p| p.is_empty());
                    if nss.is_empty() && all_pods {
                        vec![(PeerKind::AnyPod, self.keys.any_pod())]
                    } else {
                        let matched = self.namespaces_matching(nss);
                        match ps {
                            Some(ps) if !ps.is_empty() => self.groups_matching(&matched, ps),
                            _ => matched
                                .iter()
                                .map(|&n| (PeerKind::Namespace, self.keys.namespace(n)))
                                .collect(),
                        }
                    }
                }
            }
        };
        let v = std::rc::Rc::new(keys);
        self.peer_cache.insert(cache_key, v.clone());
        v
    }

    /// The groups a peer key covers (for named ports in egress rules).
    pub(super) fn groups_of_key(&self, kind: PeerKind, key: u32, out: &mut BTreeSet<u32>) {
        match kind {
            PeerKind::Workload => {
                out.insert(key);
            }
            PeerKind::Namespace => {
                if let Some(gs) = self
                    .groups_by_ns
                    .get((key - self.keys.namespace(0)) as usize)
                {
                    out.extend(gs.iter().copied());
                }
            }
            PeerKind::Class => {
                if let Some(gs) = self.groups_by_class.get(&(key - self.keys.class(0))) {
                    out.extend(gs.iter().copied());
                }
            }
            PeerKind::AnyPod | PeerKind::Any => out.extend(0..self.groups.len() as u32),
        }
    }

    /// The peer keys of rule `ri` of policy `pi` in `dir` (all its peers, deduplicated;
    /// "anything" when it has none), computed once per rule.
    pub(super) fn rule_keys(
        &mut self,
        pi: usize,
        dir: PolicyType,
        ri: usize,
        ns: u32,
        peers: &'a [NetworkPolicyPeer],
    ) -> PeerKeys {
        let d = usize::from(dir == PolicyType::Ingress);
        if let Some(k) = self.rule_cache.get(&(pi, d, ri)) {
            return k.clone();
        }
        let mut keys: Vec<(PeerKind, u32)> = Vec::new();
        if peers.is_empty() {
            keys.push((PeerKind::Any, self.keys.any()));
        } else {
            for peer in peers {
                keys.extend(self.peer_keys(ns, peer).iter().copied());
            }
            keys.sort_unstable();
            keys.dedup();
        }
        let keys = std::rc::Rc::new(keys);
        self.rule_cache.insert((pi, d, ri), keys.clone());
        keys
    }
}
