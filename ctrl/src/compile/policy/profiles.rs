//! Stage 4: profiles. Per direction, the union of the rules of the policies selecting a
//! group, as merged `(peer kind, peer key, protocol) -> ranges` entries; groups with the
//! same selecting policies (and, for ingress rules with named ports, the same named
//! ports) share a profile, and so do policy sets that compile to the same entries.

use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap};

use sluice_dataplane::tables::policy::{DirRange, PeerKind, PortRange, ProtoClass, NONE};

use super::info::Group;
use super::peers::Builder;
use super::semantics::{proto_class, rules};
use crate::compile::ir::Policy;
use crate::model::meta::{IntOrString, Protocol};
use crate::model::netpol::{NetworkPolicyPort, PolicyType};

/// A port item resolved for one profile.
#[derive(Debug, Clone)]
enum PortSpec {
    /// Every protocol, every port (a rule without ports).
    All,
    /// A protocol and a range.
    Range(ProtoClass, PortRange),
    /// A named port resolved later on each destination group (egress).
    Named(String, Protocol),
}

/// One range of a profile's merged entries: `(peer kind, peer key, protocol, ports)`,
/// sorted, adjacent and overlapping ranges of a key merged.
type ProfileRange = (PeerKind, u32, ProtoClass, PortRange);

/// What makes two groups share a profile before its entries are known (equal entries
/// share it too): the selecting policies, and (for ingress rules with named ports) the
/// group's named ports.
type ProfileKey = (Vec<usize>, Vec<(String, Protocol, u16)>);

/// The profiles of one direction, as they are found.
#[derive(Default)]
pub(super) struct DirProfiles {
    /// Profile by what makes groups share it before its entries are known.
    by_key: HashMap<ProfileKey, u32>,
    /// Profile by its entries.
    by_content: HashMap<Vec<ProfileRange>, u32>,
    /// Per profile: the sets of policies whose union it is.
    pub(super) policies: Vec<Vec<Vec<usize>>>,
    /// Every profile's entries, for [`sluice_dataplane::tables::policy::DirTable`].
    pub(super) ranges: Vec<DirRange>,
    /// The number of entries (port ranges).
    pub(super) entries: u64,
}

impl DirProfiles {
    /// Records the profile of `key`, whose entries are `ranges`: a new one, or the one
    /// with the same entries.
    fn insert(&mut self, key: ProfileKey, ranges: Vec<ProfileRange>) -> u32 {
        // Another policy set may compile to the same entries (its extra policies'
        // rules already covered, or equal to another's): one profile for both.
        let next = self.policies.len() as u32;
        let id = match self.by_content.entry(ranges) {
            Entry::Occupied(seen) => *seen.get(),
            Entry::Vacant(new) => {
                self.entries += new.key().len() as u64;
                self.ranges.extend(
                    new.key()
                        .iter()
                        .map(|&(kind, peer, proto, range)| DirRange {
                            profile: next,
                            kind,
                            key: peer,
                            proto,
                            range,
                        }),
                );
                self.policies.push(Vec::new());
                *new.insert(next)
            }
        };
        if let Some(sets) = self.policies.get_mut(id as usize) {
            sets.push(key.0.clone());
        }
        self.by_key.insert(key, id);
        id
    }
}

/// The profiles of both directions.
pub(super) struct Profiles {
    /// `[egress, ingress]`.
    pub(super) dirs: [DirProfiles; 2],
    /// Per group: its `[egress, ingress]` profile, [`NONE`] where it is not isolated.
    pub(super) of_group: Vec<[u32; 2]>,
}

fn uses_named_ports(p: &Policy, dir: PolicyType) -> bool {
    rules(p, dir).iter().any(|(ports, _)| {
        ports
            .iter()
            .any(|x| matches!(x.port, Some(IntOrString::Str(_))))
    })
}

impl Builder<'_> {
    /// Stage 4: the profiles of every group in both directions.
    pub(super) fn profiles(&mut self) -> Profiles {
        let named_in: Vec<bool> = self
            .ir
            .policies
            .iter()
            .map(|p| uses_named_ports(p, PolicyType::Ingress))
            .collect();
        let mut dirs: [DirProfiles; 2] = Default::default();
        let mut of_group: Vec<[u32; 2]> = vec![[NONE, NONE]; self.groups.len()];
        for (g, group_profile) in of_group.iter_mut().enumerate() {
            for (d, dir) in [PolicyType::Egress, PolicyType::Ingress]
                .into_iter()
                .enumerate()
            {
                let grp = &self.groups[g];
                let by = match dir {
                    PolicyType::Ingress => &grp.ingress_by,
                    PolicyType::Egress => &grp.egress_by,
                };
                if by.is_empty() {
                    continue;
                }
                let named = if dir == PolicyType::Ingress && by.iter().any(|&p| named_in[p]) {
                    grp.named_ports.clone()
                } else {
                    Vec::new()
                };
                let key = (by.clone(), named);
                if let Some(&id) = dirs[d].by_key.get(&key) {
                    group_profile[d] = id;
                    continue;
                }
                let local = self.groups[g].clone();
                let ranges = self.profile_entries(&key.0, dir, &local);
                group_profile[d] = dirs[d].insert(key, ranges);
            }
        }
        Profiles { dirs, of_group }
    }

    /// Resolves the ports of a rule for profile building. Ingress named ports resolve on
    /// `local` (the destination); egress named ports stay named.
    fn port_specs(
        &self,
        ports: &[NetworkPolicyPort],
        dir: PolicyType,
        local: &Group,
    ) -> Vec<PortSpec> {
        if ports.is_empty() {
            return vec![PortSpec::All];
        }
        let mut out = Vec::new();
        for p in ports {
            let proto = p.protocol.unwrap_or_default();
            let pc = proto_class(proto);
            match &p.port {
                None => out.push(PortSpec::Range(pc, PortRange::ALL)),
                Some(IntOrString::Int(n)) => {
                    let lo = u16::try_from(*n).unwrap_or(0);
                    let hi = p
                        .end_port
                        .and_then(|e| u16::try_from(e).ok())
                        .unwrap_or(lo)
                        .max(lo);
                    if u16::try_from(*n).is_ok() {
                        out.push(PortSpec::Range(pc, PortRange { lo, hi }));
                    }
                }
                Some(IntOrString::Str(name)) => match dir {
                    PolicyType::Ingress => {
                        for (n, pr, num) in &local.named_ports {
                            if n == name && *pr == proto {
                                out.push(PortSpec::Range(pc, PortRange::one(*num)));
                            }
                        }
                    }
                    PolicyType::Egress => out.push(PortSpec::Named(name.clone(), proto)),
                },
            }
        }
        out
    }

    /// Builds one profile: the union of the rules of `policies` in `dir`, for `local`.
    fn profile_entries(
        &mut self,
        policies: &[usize],
        dir: PolicyType,
        local: &Group,
    ) -> Vec<ProfileRange> {
        let mut entries: Vec<(PeerKind, u32, ProtoClass, PortRange)> = Vec::new();
        let ir = self.ir;
        for &pi in policies {
            let p = &ir.policies[pi];
            let Some(ns) = self.ns_of(&p.namespace) else {
                continue;
            };
            for (ri, (ports, peers)) in rules(p, dir).into_iter().enumerate() {
                let specs = self.port_specs(ports, dir, local);
                if specs.is_empty() {
                    continue;
                }
                let keys = self.rule_keys(pi, dir, ri, ns, peers);
                let mut named_groups: Option<BTreeSet<u32>> = None;
                for spec in &specs {
                    match spec {
                        PortSpec::All => {
                            for &(kind, key) in keys.iter() {
                                for pc in ProtoClass::ALL {
                                    entries.push((kind, key, pc, PortRange::ALL));
                                }
                            }
                        }
                        PortSpec::Range(pc, r) => {
                            for &(kind, key) in keys.iter() {
                                entries.push((kind, key, *pc, *r));
                            }
                        }
                        PortSpec::Named(name, proto) => {
                            let gs = named_groups.get_or_insert_with(|| {
                                let mut s = BTreeSet::new();
                                for &(kind, key) in keys.iter() {
                                    self.groups_of_key(kind, key, &mut s);
                                }
                                s
                            });
                            for &g in gs.iter() {
                                for (n, pr, num) in &self.groups[g as usize].named_ports {
                                    if n == name && pr == proto {
                                        entries.push((
                                            PeerKind::Workload,
                                            self.keys.group(g),
                                            proto_class(*proto),
                                            PortRange::one(*num),
                                        ));
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        entries.sort_unstable();
        let mut out: Vec<ProfileRange> = Vec::with_capacity(entries.len());
        for (kind, key, pc, r) in entries {
            match out.last_mut() {
                Some((k, y, p, last))
                    if (*k, *y, *p) == (kind, key, pc)
                        && u32::from(r.lo) <= u32::from(last.hi) + 1 =>
                {
                    last.hi = last.hi.max(r.hi);
                }
                _ => out.push((kind, key, pc, r)),
            }
        }
        out
    }
}
