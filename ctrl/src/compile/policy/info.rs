//! What policy compilation produces and knows: table caps, errors, sizes, workload
//! groups, identities, the key numbering and the compiled result.

use std::collections::BTreeMap;

use ipnet::IpNet;
use serde::Serialize;
use sluice_dataplane::tables::policy::PolicyTables;

use super::classes::Classes;
use crate::compile::ir::Ir;
use crate::model::meta::Protocol;

/// Default cap on identities.
pub const DEFAULT_MAX_IDENTITIES: u64 = 1 << 20;
/// Default cap on ipcache prefixes.
pub const DEFAULT_MAX_PREFIXES: u64 = 1 << 21;
/// Default cap on policy entries (port ranges over both directions).
pub const DEFAULT_MAX_POLICY_ENTRIES: u64 = 1 << 23;

/// Table caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// Identities (classes, workload groups per node, node addresses).
    pub identities: u64,
    /// ipcache prefixes (IPv4 + IPv6).
    pub prefixes: u64,
    /// Policy entries: port ranges of `(profile, peer, protocol)` keys, both directions.
    pub policy_entries: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            identities: DEFAULT_MAX_IDENTITIES,
            prefixes: DEFAULT_MAX_PREFIXES,
            policy_entries: DEFAULT_MAX_POLICY_ENTRIES,
        }
    }
}

impl Limits {
    /// The caps of the IR's Appliance, defaults where it sets none.
    pub fn of(ir: &Ir) -> Self {
        let d = Limits::default();
        match &ir.appliance {
            None => d,
            Some(a) => Limits {
                identities: a.limits.identities.unwrap_or(d.identities),
                prefixes: a.limits.prefixes.unwrap_or(d.prefixes),
                policy_entries: a.limits.policy_entries.unwrap_or(d.policy_entries),
            },
        }
    }
}

/// Why policy compilation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyCompileError {
    /// A table would exceed its cap.
    OverCap {
        /// The cap's name in the Appliance (`spec.limits.<name>`).
        cap: &'static str,
        /// The cap.
        limit: u64,
        /// What the configuration needs.
        needed: u64,
    },
    /// The dataplane refused the tables (a bug; the message says which check).
    Internal(String),
}

impl std::fmt::Display for PolicyCompileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PolicyCompileError::OverCap { cap, limit, needed } => write!(
                f,
                "policy tables need {needed} {} but spec.limits.{cap} is {limit}: over the cap by {} (raise the limit in the Appliance or simplify the policies)",
                cap_unit(cap),
                needed - limit
            ),
            PolicyCompileError::Internal(m) => write!(f, "policy tables could not be built: {m}"),
        }
    }
}

fn cap_unit(cap: &str) -> &'static str {
    match cap {
        "identities" => "identities",
        "prefixes" => "ipcache prefixes",
        _ => "policy entries",
    }
}

/// Sizes of the compiled tables.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PolicyStats {
    /// NetworkPolicies compiled.
    pub policies: usize,
    /// Address classes.
    pub address_classes: usize,
    /// Workload groups.
    pub workload_groups: usize,
    /// Identities (ipcache values).
    pub identities: usize,
    /// ipcache prefixes.
    pub prefixes: usize,
    /// Ingress profiles.
    pub ingress_profiles: usize,
    /// Egress profiles.
    pub egress_profiles: usize,
    /// Ingress entries (port ranges).
    pub ingress_entries: usize,
    /// Egress entries (port ranges).
    pub egress_entries: usize,
    /// Bytes of lookup memory.
    pub memory_bytes: usize,
}

/// A workload group: pods policy cannot tell apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Namespace index (into [`PolicyInfo::namespaces`]).
    pub namespace: u32,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Named ports `(name, protocol, number)`, sorted.
    pub named_ports: Vec<(String, Protocol, u16)>,
    /// Address class of the pods' IPs.
    pub class: u32,
    /// Policies (indices into `Ir::policies`) isolating it for ingress.
    pub ingress_by: Vec<usize>,
    /// Policies isolating it for egress.
    pub egress_by: Vec<usize>,
}

/// What an identity stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdentityKind {
    /// An address class (addresses that are neither pods nor node addresses).
    Class(u32),
    /// A workload group on a node (or on no known node).
    Workload {
        /// The group.
        group: u32,
        /// The node index, if the pod's node is known.
        node: Option<u32>,
    },
    /// A node's address, in a class.
    Node {
        /// The node index.
        node: u32,
        /// The address's class.
        class: u32,
    },
}

/// The key numbering of one compilation: where each peer kind's keys start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySpace {
    /// Workload groups.
    pub groups: u32,
    /// Namespaces.
    pub namespaces: u32,
    /// Classes.
    pub classes: u32,
}

impl KeySpace {
    /// The key of a workload group.
    pub fn group(&self, g: u32) -> u32 {
        g
    }
    /// The key of a namespace.
    pub fn namespace(&self, n: u32) -> u32 {
        self.groups + n
    }
    /// The key of a class.
    pub fn class(&self, c: u32) -> u32 {
        self.groups + self.namespaces + c
    }
    /// The "any pod" key.
    pub fn any_pod(&self) -> u32 {
        self.groups + self.namespaces + self.classes
    }
    /// The "anything" key.
    pub fn any(&self) -> u32 {
        self.any_pod() + 1
    }
}

/// What the compiler knows beyond the tables (for explain, dumps and exports).
#[derive(Debug, Clone)]
pub struct PolicyInfo {
    /// Namespace names by index.
    pub namespaces: Vec<String>,
    /// Node names by index.
    pub nodes: Vec<String>,
    /// Workload groups by index.
    pub groups: Vec<Group>,
    /// Address classes.
    pub classes: Classes,
    /// What each identity stands for.
    pub identities: Vec<IdentityKind>,
    /// Key numbering.
    pub keys: KeySpace,
    /// The ipcache's contents: prefix -> identity.
    pub prefixes: Vec<(IpNet, u32)>,
    /// Per ingress profile: the sets of policies whose union it is (several sets when
    /// their unions have the same entries).
    pub ingress_profiles: Vec<Vec<Vec<usize>>>,
    /// Per egress profile: the same.
    pub egress_profiles: Vec<Vec<Vec<usize>>>,
}

/// The result of compiling the IR's policies.
#[derive(Debug, Clone)]
pub struct CompiledPolicy {
    /// The dataplane tables.
    pub tables: PolicyTables,
    /// Their sizes.
    pub stats: PolicyStats,
    /// Compiler knowledge for explain and exports.
    pub info: PolicyInfo,
    /// Things that were ignored (duplicate addresses, ...).
    pub warnings: Vec<String>,
}
