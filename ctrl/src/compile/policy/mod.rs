//! NetworkPolicy -> identity tables (DESIGN.md §4 ipcache and policy, §6 semantics).
//!
//! The compiler reads the IR's namespaces, workloads (pod IPs), nodes and policies
//! (Kubernetes NetworkPolicy and Ligato policies mapped onto it) and builds the
//! dataplane's [`PolicyTables`]:
//!
//! 1. **Address classes** ([`classes`]): the pieces of the address space that every
//!    ipBlock and except carve out, one class per distinct membership.
//! 2. **Workload groups**: pods with the same namespace, labels, named ports and address
//!    class are indistinguishable to policy and share one group (one peer key).
//! 3. **Identities**: what the ipcache maps an address to. A class, a workload group on
//!    one node (the node matters for the "traffic from a pod's own node" rule), or a
//!    node's address. Each identity carries its peer keys: its group, its namespace, its
//!    class, "any pod" and "anything".
//! 4. **Profiles**: per direction, the union of the rules of the policies selecting a
//!    group. Groups selected by the same policies share a profile (ingress profiles also
//!    key on the group's named ports when a rule names ports, since those resolve on the
//!    destination), and so do groups whose policy sets compile to the same entries (one
//!    set's extra policies already covered by the others, or two sets alike): at 10k
//!    policies of `bench_policy` that halves the egress profiles and cuts their entries
//!    from 426k to 143k. A profile's entries are `(peer kind, peer key, protocol) ->
//!    ranges`.
//!    Peers are named as coarsely as their selector allows: an empty pod selector is its
//!    namespace, an empty namespace selector is "any pod", a missing peer list is
//!    "anything", an ipBlock is the classes inside it; only real pod selectors expand to
//!    groups. Named ports in egress rules resolve on each destination group.
//!
//! Compile cost: a namespace selector is matched once, a pod selector once per distinct
//! label set (groups of different namespaces mostly share labels), and a peer's keys are
//! computed once per peer, or per peer and namespace when only a pod selector names
//! them; profiles reach the tables as flat port ranges ([`DirTable::from_ranges`]).
//!
//! Semantics (Kubernetes API text, DESIGN.md §6): `policyTypes` defaults to Ingress, plus
//! Egress when `egress` is non-empty; rules of a type the policy does not have are
//! ignored; a pod is isolated in a direction iff a selecting policy has that type; rules
//! add up; an empty `ports` or peer list means all; `ingress: []` allows nothing; peers
//! AND their selectors and OR with each other; ipBlocks match pod IPs too; protocol
//! defaults to TCP; a named port resolves on the destination pod by name and protocol; a
//! destination that is not a pod never matches a named port; `endPort` is inclusive;
//! ingress from the pod's own node is always allowed; non-pods are never isolated. A rule
//! without ports allows every protocol (ICMP too); a rule with ports allows only the
//! protocols it lists.
//!
//! Table sizes are capped ([`Limits`], configurable in the Appliance's `spec.limits`);
//! a configuration over a cap is rejected with the cap's name and the overshoot.
//!
//! The stages live in their own files: `terms.rs` (1), `groups.rs` (2, 3), `peers.rs`
//! (the peer keys rules name), `profiles.rs` (4), `identities.rs` (5, 6); caps (7) and
//! the tables (8) are checked and built here. `info.rs` holds what compilation produces,
//! `semantics.rs` the NetworkPolicy rules the compiler and [`explain`] share. `acl`
//! (cargo feature `bench`) exports the compiled policy as DPDK ACL rules for
//! `bench_policy`; it is not part of the product.

#[cfg(feature = "bench")]
pub mod acl;
pub mod classes;
pub mod explain;
mod groups;
mod identities;
mod info;
mod peers;
mod profiles;
mod semantics;
mod terms;

use std::net::IpAddr;

use ipnet::IpNet;
use sluice_dataplane::tables::ipcache::IpCache;
use sluice_dataplane::tables::policy::{DirTable, PolicyTables};

use groups::Namespaces;
use identities::Identities;
pub use info::{
    CompiledPolicy, Group, IdentityKind, KeySpace, Limits, PolicyCompileError, PolicyInfo,
    PolicyStats, DEFAULT_MAX_IDENTITIES, DEFAULT_MAX_POLICY_ENTRIES, DEFAULT_MAX_PREFIXES,
};
use peers::Builder;
use profiles::Profiles;
pub use semantics::{has_type, parse_cidr, proto_class, rules};

use crate::compile::ir::Ir;

/// Compiles the IR's policies with the caps of its Appliance.
pub fn compile(ir: &Ir) -> Result<CompiledPolicy, Vec<PolicyCompileError>> {
    compile_with(ir, Limits::of(ir))
}

/// Compiles the IR's policies with explicit caps.
pub fn compile_with(ir: &Ir, limits: Limits) -> Result<CompiledPolicy, Vec<PolicyCompileError>> {
    let mut warnings = Vec::new();
    let ns = Namespaces::of(ir);
    let (classes, term_ids) = terms::address_classes(ir);
    let (pods, mut groups) = groups::group_workloads(ir, &ns, &classes, &mut warnings);
    groups::select(ir, &ns, &mut groups);
    let mut b = Builder::new(ir, ns, classes, term_ids, groups, limits)?;
    let profiles = b.profiles();
    let ids = Identities::assign(&b, &pods, &profiles.of_group, &mut warnings);
    let prefixes = identities::ipcache_prefixes(&b.classes, &ids.hosts);
    check_caps(limits, &ids, &prefixes, &profiles)?;
    tables(b, ids, prefixes, profiles, warnings)
}

/// Stage 7: every table within its cap.
fn check_caps(
    limits: Limits,
    ids: &Identities,
    prefixes: &[(IpNet, u32)],
    profiles: &Profiles,
) -> Result<(), Vec<PolicyCompileError>> {
    let mut errors = Vec::new();
    let entries_total = profiles.dirs[0].entries + profiles.dirs[1].entries;
    for (cap, limit, needed) in [
        ("identities", limits.identities, ids.entries.len() as u64),
        ("prefixes", limits.prefixes, prefixes.len() as u64),
        ("policyEntries", limits.policy_entries, entries_total),
    ] {
        if needed > limit {
            errors.push(PolicyCompileError::OverCap { cap, limit, needed });
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Stage 8: the dataplane tables, their sizes and what the compiler knows.
fn tables(
    b: Builder<'_>,
    ids: Identities,
    prefixes: Vec<(IpNet, u32)>,
    profiles: Profiles,
    warnings: Vec<String>,
) -> Result<CompiledPolicy, Vec<PolicyCompileError>> {
    let ir = b.ir;
    let keys = b.keys;
    let internal = |e: &dyn std::fmt::Display| vec![PolicyCompileError::Internal(e.to_string())];
    let v4 = prefixes.iter().filter_map(|(n, id)| match n {
        IpNet::V4(n) => Some((u32::from(n.network()), n.prefix_len(), *id)),
        IpNet::V6(_) => None,
    });
    let v6 = prefixes.iter().filter_map(|(n, id)| match n {
        IpNet::V6(n) => Some((u128::from(n.network()), n.prefix_len(), *id)),
        IpNet::V4(_) => None,
    });
    let ipcache = IpCache::new(v4, v6).map_err(|e| internal(&e))?;
    let [eg, ing] = profiles.dirs;
    let egress =
        DirTable::from_ranges(eg.policies.len() as u32, eg.ranges).map_err(|e| internal(&e))?;
    let ingress =
        DirTable::from_ranges(ing.policies.len() as u32, ing.ranges).map_err(|e| internal(&e))?;
    let default_identity = b
        .classes
        .class_of(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
    let identities = ids.entries;
    let stats_base = PolicyStats {
        policies: ir.policies.len(),
        address_classes: b.classes.len(),
        workload_groups: b.groups.len(),
        identities: identities.len(),
        prefixes: prefixes.len(),
        ingress_profiles: ingress.profiles(),
        egress_profiles: egress.profiles(),
        ingress_entries: ingress.ranges(),
        egress_entries: egress.ranges(),
        memory_bytes: 0,
    };
    let tables = PolicyTables::new(ipcache, identities, default_identity, egress, ingress)
        .map_err(|e| internal(&e))?;
    let stats = PolicyStats {
        memory_bytes: tables.memory_bytes(),
        ..stats_base
    };
    Ok(CompiledPolicy {
        tables,
        stats,
        info: PolicyInfo {
            namespaces: b.namespaces,
            nodes: ir.nodes.iter().map(|n| n.name.clone()).collect(),
            groups: b.groups,
            classes: b.classes,
            identities: ids.kinds,
            keys,
            prefixes,
            ingress_profiles: ing.policies,
            egress_profiles: eg.policies,
        },
        warnings,
    })
}

#[cfg(test)]
mod tests;
