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

pub mod acl;
pub mod classes;
pub mod explain;

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use ipnet::IpNet;
use serde::Serialize;
use sluice_dataplane::tables::ipcache::IpCache;
use sluice_dataplane::tables::policy::{
    DirRange, DirTable, IdentityEntry, PeerKind, PolicyTables, PortRange, ProtoClass, NONE,
};

use crate::compile::ir::{Ir, Policy};
use crate::model::meta::{IntOrString, LabelSelector, Protocol};
use crate::model::netpol::{NetworkPolicyPeer, NetworkPolicyPort, PolicyType};
use classes::{Classes, Term};

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

/// Whether a policy has a type, with Kubernetes' defaulting: when `policyTypes` is
/// absent or empty, Ingress always and Egress iff `egress` is non-empty.
pub fn has_type(p: &Policy, t: PolicyType) -> bool {
    match &p.spec.policy_types {
        Some(types) if !types.is_empty() => types.contains(&t),
        _ => match t {
            PolicyType::Ingress => true,
            PolicyType::Egress => p.spec.egress.as_ref().is_some_and(|e| !e.is_empty()),
        },
    }
}

/// The rules of a policy in one direction (empty when it lacks the type): `(ports,
/// peers)` pairs.
pub fn rules(p: &Policy, t: PolicyType) -> Vec<(&[NetworkPolicyPort], &[NetworkPolicyPeer])> {
    if !has_type(p, t) {
        return Vec::new();
    }
    match t {
        PolicyType::Ingress => p
            .spec
            .ingress
            .iter()
            .flatten()
            .map(|r| (r.ports.as_slice(), r.from.as_slice()))
            .collect(),
        PolicyType::Egress => p
            .spec
            .egress
            .iter()
            .flatten()
            .map(|r| (r.ports.as_slice(), r.to.as_slice()))
            .collect(),
    }
}

/// The class of an IP protocol number's policy protocol.
pub fn proto_class(p: Protocol) -> ProtoClass {
    match p {
        Protocol::Tcp => ProtoClass::Tcp,
        Protocol::Udp => ProtoClass::Udp,
        Protocol::Sctp => ProtoClass::Sctp,
    }
}

/// Parses and normalises a CIDR (validation already rejected garbage).
pub fn parse_cidr(s: &str) -> Option<IpNet> {
    s.parse::<IpNet>().ok().map(|n| n.trunc())
}

fn term_of(b: &crate::model::netpol::IpBlock) -> Option<Term> {
    let cidr = parse_cidr(&b.cidr)?;
    let mut except: Vec<IpNet> = b.except.iter().filter_map(|e| parse_cidr(e)).collect();
    except.sort();
    except.dedup();
    Some(Term { cidr, except })
}

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

/// Peer keys shared between rules and profiles.
type PeerKeys = std::rc::Rc<Vec<(PeerKind, u32)>>;

/// One range of a profile's merged entries: `(peer kind, peer key, protocol, ports)`,
/// sorted, adjacent and overlapping ranges of a key merged.
type ProfileRange = (PeerKind, u32, ProtoClass, PortRange);

/// What makes two groups share a profile before its entries are known (equal entries
/// share it too): the selecting policies, and (for ingress rules with named ports) the
/// group's named ports.
type ProfileKey = (Vec<usize>, Vec<(String, Protocol, u16)>);

/// A compilation in progress.
struct Builder<'a> {
    ir: &'a Ir,
    namespaces: Vec<String>,
    ns_labels: Vec<BTreeMap<String, String>>,
    ns_index: HashMap<String, u32>,
    classes: Classes,
    term_ids: HashMap<Term, u32>,
    groups: Vec<Group>,
    groups_by_ns: Vec<Vec<u32>>,
    groups_by_class: BTreeMap<u32, Vec<u32>>,
    keys: KeySpace,
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
    fn ns_of(&self, name: &str) -> Option<u32> {
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
    fn groups_of_key(&self, kind: PeerKind, key: u32, out: &mut BTreeSet<u32>) {
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

    /// The peer keys of rule `ri` of policy `pi` in `dir` (all its peers, deduplicated;
    /// "anything" when it has none), computed once per rule.
    fn rule_keys(
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

fn uses_named_ports(p: &Policy, dir: PolicyType) -> bool {
    rules(p, dir).iter().any(|(ports, _)| {
        ports
            .iter()
            .any(|x| matches!(x.port, Some(IntOrString::Str(_))))
    })
}

fn host_net(ip: IpAddr) -> IpNet {
    IpNet::from(ip)
}

/// Compiles the IR's policies with the caps of its Appliance.
pub fn compile(ir: &Ir) -> Result<CompiledPolicy, Vec<PolicyCompileError>> {
    compile_with(ir, Limits::of(ir))
}

/// Compiles the IR's policies with explicit caps.
pub fn compile_with(ir: &Ir, limits: Limits) -> Result<CompiledPolicy, Vec<PolicyCompileError>> {
    let mut warnings = Vec::new();
    // Namespaces (every namespace a pod or policy lives in is in the IR's map; be total
    // anyway).
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
    let namespaces: Vec<String> = ns_map.keys().cloned().collect();
    let ns_labels: Vec<BTreeMap<String, String>> = ns_map.into_values().collect();
    let ns_index: HashMap<String, u32> = namespaces
        .iter()
        .enumerate()
        .map(|(i, n)| (n.clone(), i as u32))
        .collect();

    // 1. ipBlock terms and address classes.
    let mut terms: BTreeSet<Term> = BTreeSet::new();
    for p in &ir.policies {
        for t in [PolicyType::Ingress, PolicyType::Egress] {
            for (_, peers) in rules(p, t) {
                for peer in peers {
                    if let Some(term) = peer.ip_block.as_ref().and_then(term_of) {
                        terms.insert(term);
                    }
                }
            }
        }
    }
    let terms: Vec<Term> = terms.into_iter().collect();
    let term_ids: HashMap<Term, u32> = terms
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let classes = Classes::build(terms);

    // 2. Workload groups (first pod with an address wins; duplicates are warned about).
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
        let ns = ns_index.get(&w.namespace).copied().unwrap_or(0);
        let mut named = w.named_ports.clone();
        named.sort();
        named.dedup();
        let class = classes.class_of(w.ip);
        let next = groups.len() as u32;
        let g = *group_ids
            .entry((ns, &w.labels, named, class))
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
    let mut groups_by_ns = vec![Vec::new(); namespaces.len()];
    let mut groups_by_class: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (g, grp) in groups.iter().enumerate() {
        groups_by_ns[grp.namespace as usize].push(g as u32);
        groups_by_class.entry(grp.class).or_default().push(g as u32);
    }

    // 3. Which policies select which groups.
    for (pi, p) in ir.policies.iter().enumerate() {
        let Some(&ns) = ns_index.get(&p.namespace) else {
            continue;
        };
        let ing = has_type(p, PolicyType::Ingress);
        let eg = has_type(p, PolicyType::Egress);
        for &g in &groups_by_ns[ns as usize] {
            let grp = &mut groups[g as usize];
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

    // Label sets, numbered for memoised selector matching.
    let mut label_set_ids: HashMap<&BTreeMap<String, String>, u32> = HashMap::new();
    let group_label_set: Vec<u32> = groups
        .iter()
        .map(|g| {
            let next = label_set_ids.len() as u32;
            *label_set_ids.entry(&g.labels).or_insert(next)
        })
        .collect();
    let label_sets = label_set_ids.len();
    drop(label_set_ids);

    let keys = KeySpace {
        groups: groups.len() as u32,
        namespaces: namespaces.len() as u32,
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

    let mut b = Builder {
        ir,
        namespaces,
        ns_labels,
        ns_index,
        classes,
        term_ids,
        groups,
        groups_by_ns,
        groups_by_class,
        keys,
        group_label_set,
        label_set_memo: vec![0; label_sets],
        peer_cache: HashMap::new(),
        ns_cache: HashMap::new(),
        rule_cache: HashMap::new(),
    };

    // 4. Profiles.
    let named_in: Vec<bool> = ir
        .policies
        .iter()
        .map(|p| uses_named_ports(p, PolicyType::Ingress))
        .collect();
    let mut profile_ids: [HashMap<ProfileKey, u32>; 2] = [HashMap::new(), HashMap::new()];
    let mut profile_policies: [Vec<Vec<Vec<usize>>>; 2] = [Vec::new(), Vec::new()];
    let mut by_content: [HashMap<Vec<ProfileRange>, u32>; 2] = [HashMap::new(), HashMap::new()];
    let mut dir_ranges: [Vec<DirRange>; 2] = [Vec::new(), Vec::new()];
    let mut group_profile: Vec<[u32; 2]> = vec![[NONE, NONE]; b.groups.len()];
    let mut counts = [0u64; 2];
    #[allow(clippy::needless_range_loop)] // `b` is borrowed mutably inside
    for g in 0..b.groups.len() {
        for (d, dir) in [PolicyType::Egress, PolicyType::Ingress]
            .into_iter()
            .enumerate()
        {
            let grp = &b.groups[g];
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
            if let Some(&id) = profile_ids[d].get(&key) {
                group_profile[g][d] = id;
                continue;
            }
            let local = b.groups[g].clone();
            let ranges = b.profile_entries(&key.0, dir, &local);
            // Another policy set may compile to the same entries (its extra policies'
            // rules already covered, or equal to another's): one profile for both.
            let next = profile_policies[d].len() as u32;
            let id = match by_content[d].entry(ranges) {
                Entry::Occupied(seen) => *seen.get(),
                Entry::Vacant(new) => {
                    counts[d] += new.key().len() as u64;
                    dir_ranges[d].extend(new.key().iter().map(|&(kind, peer, proto, range)| {
                        DirRange {
                            profile: next,
                            kind,
                            key: peer,
                            proto,
                            range,
                        }
                    }));
                    profile_policies[d].push(Vec::new());
                    *new.insert(next)
                }
            };
            if let Some(sets) = profile_policies[d].get_mut(id as usize) {
                sets.push(key.0.clone());
            }
            profile_ids[d].insert(key, id);
            group_profile[g][d] = id;
        }
    }

    // 5. Identities: classes first (class c is identity c), then pods, then nodes.
    let mut identities: Vec<IdentityEntry> = Vec::new();
    let mut kinds: Vec<IdentityKind> = Vec::new();
    let mut intern: HashMap<IdentityEntry, u32> = HashMap::new();
    let mut add = |e: IdentityEntry, k: IdentityKind, ids: &mut Vec<IdentityEntry>| -> u32 {
        *intern.entry(e).or_insert_with(|| {
            ids.push(e);
            kinds.push(k);
            (ids.len() - 1) as u32
        })
    };
    for c in 0..b.classes.len() as u32 {
        let e = IdentityEntry {
            peer: [NONE, NONE, keys.class(c), NONE, keys.any()],
            ..IdentityEntry::world(keys.any())
        };
        add(e, IdentityKind::Class(c), &mut identities);
    }
    let node_index: HashMap<&str, u32> = ir
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i as u32))
        .collect();
    let mut hosts: BTreeMap<IpAddr, u32> = BTreeMap::new();
    for &(wi, g) in &workload_group {
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
        let id = add(
            e,
            IdentityKind::Workload { group: g, node },
            &mut identities,
        );
        hosts.insert(w.ip, id);
    }
    for (ni, n) in ir.nodes.iter().enumerate() {
        for &a in &n.addresses {
            if let Some(&wi) = by_ip.get(&a) {
                let w = &ir.workloads[wi];
                warnings.push(format!(
                    "node {} address {a} is also pod {}/{}'s address; the pod wins",
                    n.name, w.namespace, w.pod
                ));
                continue;
            }
            if hosts.contains_key(&a) {
                continue;
            }
            let class = b.classes.class_of(a);
            let e = IdentityEntry {
                peer: [NONE, NONE, keys.class(class), NONE, keys.any()],
                node_of: ni as u32,
                ..IdentityEntry::world(keys.any())
            };
            let id = add(
                e,
                IdentityKind::Node {
                    node: ni as u32,
                    class,
                },
                &mut identities,
            );
            hosts.insert(a, id);
        }
    }

    // 6. ipcache prefixes: class prefixes (minus exact hosts), then hosts.
    let mut prefixes: Vec<(IpNet, u32)> = b
        .classes
        .prefixes
        .iter()
        .filter(|(n, _)| !(n.prefix_len() == n.max_prefix_len() && hosts.contains_key(&n.addr())))
        .copied()
        .collect();
    prefixes.extend(hosts.iter().map(|(&a, &id)| (host_net(a), id)));

    // 7. Caps.
    let mut errors = Vec::new();
    let entries_total = counts[0] + counts[1];
    for (cap, limit, needed) in [
        ("identities", limits.identities, identities.len() as u64),
        ("prefixes", limits.prefixes, prefixes.len() as u64),
        ("policyEntries", limits.policy_entries, entries_total),
    ] {
        if needed > limit {
            errors.push(PolicyCompileError::OverCap { cap, limit, needed });
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }

    // 8. The tables.
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
    let [eg_ranges, in_ranges] = dir_ranges;
    let egress = DirTable::from_ranges(profile_policies[0].len() as u32, eg_ranges)
        .map_err(|e| internal(&e))?;
    let ingress = DirTable::from_ranges(profile_policies[1].len() as u32, in_ranges)
        .map_err(|e| internal(&e))?;
    let default_identity = b
        .classes
        .class_of(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
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
    let [eg_policies, in_policies] = profile_policies;
    Ok(CompiledPolicy {
        tables,
        stats,
        info: PolicyInfo {
            namespaces: b.namespaces,
            nodes: ir.nodes.iter().map(|n| n.name.clone()).collect(),
            groups: b.groups,
            classes: b.classes,
            identities: kinds,
            keys,
            prefixes,
            ingress_profiles: in_policies,
            egress_profiles: eg_policies,
        },
        warnings,
    })
}

#[cfg(test)]
mod tests;
