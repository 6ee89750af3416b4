//! The compiled policy as ordered 5-tuple ACLs (DPDK `rte_acl`, ClassBench format), to
//! compare sluice's lookups with `dpdk-test-acl` on the same decisions.
//!
//! An ACL has no identity indirection: every rule is `(source prefix, destination
//! prefix, protocol, destination port range) -> action`, first match wins. The export
//! produces one rule list per direction, because a connection needs egress allowed at
//! its source *and* ingress allowed at its destination, and a single first-match list
//! cannot express that conjunction without a cross product:
//!
//! - egress: for every egress entry `(profile P, peer key K, protocol, ranges)` an allow
//!   rule per (prefix of the addresses whose identity has egress profile P) x (prefix of
//!   the addresses whose identity carries key K) x range; then, per isolated source
//!   prefix, a deny-all rule; no match means not isolated: allow.
//! - ingress: first, allow from each node's addresses to the isolated pods on that node;
//!   then the entries (source = key K, destination = profile P); then deny-all per
//!   isolated destination prefix; no match: allow.
//!
//! Address sets are exact: the ipcache is flattened into disjoint intervals, the
//! intervals of a set are merged and cut into the fewest prefixes. A configuration whose
//! pods of one workload group have scattered addresses exports one rule per address pair
//! (the cross product identity tables avoid); the benchmark allocates pod addresses per
//! namespace so that the ACL stays comparable in size.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use sluice_dataplane::tables::policy::{
    merge_ranges, DirTable, Direction, IdentityEntry, PeerKind, PortRange, ProtoClass, NONE,
};

use super::CompiledPolicy;

/// Address family of an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

/// One ACL rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclRule {
    /// Source prefix.
    pub src: IpNet,
    /// Destination prefix.
    pub dst: IpNet,
    /// IP protocol, or `None` for any.
    pub proto: Option<u8>,
    /// Destination ports.
    pub dport: PortRange,
    /// Allow (true) or deny.
    pub allow: bool,
}

/// An ordered rule list for one direction; no match means allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclRules {
    /// The direction this list decides.
    pub direction: Direction,
    /// Rules, first match wins.
    pub rules: Vec<AclRule>,
}

impl AclRules {
    /// The index of the first rule matching, as `rte_acl` returns it.
    pub fn classify(&self, src: IpAddr, dst: IpAddr, proto: u8, dport: u16) -> Option<usize> {
        self.rules.iter().position(|r| {
            r.src.contains(&src)
                && r.dst.contains(&dst)
                && r.proto.is_none_or(|p| p == proto)
                && r.dport.contains(dport)
        })
    }

    /// Whether the list allows the tuple.
    pub fn allows(&self, src: IpAddr, dst: IpAddr, proto: u8, dport: u16) -> bool {
        self.classify(src, dst, proto, dport)
            .is_none_or(|i| self.rules[i].allow)
    }

    /// The ClassBench rule file `dpdk-test-acl --rulesf` reads:
    /// `@src/len dst/len 0 : 65535 lo : hi proto/mask`, one rule per line.
    pub fn classbench(&self) -> String {
        let mut s = String::with_capacity(self.rules.len() * 64);
        for r in &self.rules {
            let (p, m) = match r.proto {
                Some(p) => (p, 0xff),
                None => (0, 0),
            };
            let _ = writeln!(
                s,
                "@{} {} 0 : 65535 {} : {} {}/0x{:02x}",
                r.src, r.dst, r.dport.lo, r.dport.hi, p, m
            );
        }
        s
    }
}

/// The whole address space of a family as `[lo, hi]`.
fn space(f: Family) -> (u128, u128) {
    match f {
        Family::V4 => (0, u128::from(u32::MAX)),
        Family::V6 => (0, u128::MAX),
    }
}

fn range_of(n: &IpNet) -> (u128, u128) {
    match n {
        IpNet::V4(n) => (
            u128::from(u32::from(n.network())),
            u128::from(u32::from(n.broadcast())),
        ),
        IpNet::V6(n) => (u128::from(n.network()), u128::from(n.broadcast())),
    }
}

/// The ipcache of one family as disjoint, sorted `(lo, hi, identity)` intervals.
fn flatten(prefixes: &[(IpNet, u32)], f: Family) -> Vec<(u128, u128, u32)> {
    let mut list: Vec<(u128, u128, u32)> = prefixes
        .iter()
        .filter(|(n, _)| {
            matches!(
                (n, f),
                (IpNet::V4(_), Family::V4) | (IpNet::V6(_), Family::V6)
            )
        })
        .map(|(n, id)| {
            let (lo, hi) = range_of(n);
            (lo, hi, *id)
        })
        .collect();
    // Outer prefixes first at equal start.
    list.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    let mut out: Vec<(u128, u128, u32)> = Vec::new();
    let emit = |lo: u128, hi: u128, id: u32, out: &mut Vec<(u128, u128, u32)>| {
        if lo > hi {
            return;
        }
        match out.last_mut() {
            Some(last) if last.2 == id && last.1.checked_add(1) == Some(lo) => last.1 = hi,
            _ => out.push((lo, hi, id)),
        }
    };
    // Stack of (hi, id); `cursor` is the first address not yet emitted (None: done).
    let mut stack: Vec<(u128, u32)> = Vec::new();
    let mut cursor: Option<u128> = Some(space(f).0);
    for (lo, hi, id) in list {
        while let Some(&(thi, tid)) = stack.last() {
            if thi >= lo {
                break;
            }
            if let Some(c) = cursor {
                emit(c, thi, tid, &mut out);
            }
            cursor = thi.checked_add(1);
            stack.pop();
        }
        if let (Some(&(_, tid)), Some(c)) = (stack.last(), cursor) {
            if c < lo {
                emit(c, lo - 1, tid, &mut out);
            }
        }
        cursor = Some(lo);
        stack.push((hi, id));
    }
    while let Some((thi, tid)) = stack.pop() {
        if let Some(c) = cursor {
            if c <= thi {
                emit(c, thi, tid, &mut out);
                cursor = thi.checked_add(1);
            }
        }
    }
    out
}

/// Cuts `[lo, hi]` into the fewest prefixes.
fn to_prefixes(mut lo: u128, hi: u128, f: Family, out: &mut Vec<IpNet>) {
    let width: u32 = match f {
        Family::V4 => 32,
        Family::V6 => 128,
    };
    loop {
        // Largest block aligned at `lo` that fits in [lo, hi].
        let mut bits = if lo == 0 {
            width
        } else {
            lo.trailing_zeros().min(width)
        };
        while bits > 0 {
            let size_minus_1 = if bits >= 128 {
                u128::MAX
            } else {
                (1u128 << bits) - 1
            };
            if lo.checked_add(size_minus_1).is_some_and(|e| e <= hi) {
                break;
            }
            bits -= 1;
        }
        let len = (width - bits) as u8;
        let n = match f {
            Family::V4 => {
                IpNet::V4(ipnet::Ipv4Net::new(Ipv4Addr::from(lo as u32), len).unwrap_or_default())
            }
            Family::V6 => {
                IpNet::V6(ipnet::Ipv6Net::new(Ipv6Addr::from(lo), len).unwrap_or_default())
            }
        };
        out.push(n);
        let size_minus_1 = if bits >= 128 {
            u128::MAX
        } else {
            (1u128 << bits) - 1
        };
        match lo.checked_add(size_minus_1).and_then(|e| e.checked_add(1)) {
            Some(next) if next <= hi => lo = next,
            _ => break,
        }
    }
}

/// Exact prefix covers of identity-defined address sets.
struct Sets {
    intervals: Vec<(u128, u128, u32)>,
    family: Family,
}

impl Sets {
    fn cover(&self, pred: impl Fn(u32) -> bool) -> Vec<IpNet> {
        let mut merged: Vec<(u128, u128)> = Vec::new();
        for &(lo, hi, id) in &self.intervals {
            if !pred(id) {
                continue;
            }
            match merged.last_mut() {
                Some(last) if last.1.checked_add(1) == Some(lo) => last.1 = hi,
                _ => merged.push((lo, hi)),
            }
        }
        let mut out = Vec::new();
        for (lo, hi) in merged {
            to_prefixes(lo, hi, self.family, &mut out);
        }
        out
    }
}

fn any_net(f: Family) -> IpNet {
    match f {
        Family::V4 => IpNet::V4(ipnet::Ipv4Net::default()),
        Family::V6 => IpNet::V6(ipnet::Ipv6Net::default()),
    }
}

/// One entry of a profile: `(peer kind, peer key, protocol, ranges)`.
type ProfileEntry = (PeerKind, u32, ProtoClass, Vec<PortRange>);

/// Allowed `(protocol class -> merged ranges)`; `Other` present means all protocols.
type ProtoSet = BTreeMap<ProtoClass, Vec<PortRange>>;

fn add_to(set: &mut ProtoSet, proto: ProtoClass, ranges: &[PortRange]) {
    let r = set.entry(proto).or_default();
    r.extend_from_slice(ranges);
    merge_ranges(r);
}

/// The rule items of an allowed set: `(protocol or any, port range)`.
fn items(set: &ProtoSet) -> Vec<(Option<u8>, PortRange)> {
    if set.contains_key(&ProtoClass::Other) {
        // Only rules without ports produce class Other, and they allow everything.
        return vec![(None, PortRange::ALL)];
    }
    set.iter()
        .flat_map(|(p, rs)| rs.iter().map(move |r| (p.ip_proto(), *r)))
        .collect()
}

/// The class prefixes of one family, longest first, each with the index of its nearest
/// enclosing class prefix.
fn class_tree(c: &CompiledPolicy, family: Family) -> Vec<(IpNet, u32, Option<usize>)> {
    let mut list: Vec<(IpNet, u32)> = c
        .info
        .classes
        .prefixes
        .iter()
        .filter(|(n, _)| {
            matches!(
                (n, family),
                (IpNet::V4(_), Family::V4) | (IpNet::V6(_), Family::V6)
            )
        })
        .copied()
        .collect();
    list.sort_by_key(|(n, _)| (range_of(n).0, n.prefix_len()));
    let mut parent = vec![None; list.len()];
    let mut stack: Vec<usize> = Vec::new();
    for i in 0..list.len() {
        while let Some(&top) = stack.last() {
            if list[top].0.contains(&list[i].0) {
                break;
            }
            stack.pop();
        }
        parent[i] = stack.last().copied();
        stack.push(i);
    }
    let mut order: Vec<usize> = (0..list.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(list[i].0.prefix_len()));
    // Re-index parents into the emission order.
    let mut pos = vec![0usize; list.len()];
    for (p, &i) in order.iter().enumerate() {
        pos[i] = p;
    }
    order
        .iter()
        .map(|&i| (list[i].0, list[i].1, parent[i].map(|q| pos[q])))
        .collect()
}

/// Exports one family's policy as two ordered rule lists: `(egress, ingress)`.
///
/// Per direction and profile (the endpoints it protects are the *local* side):
/// entries naming pods (workload groups, namespaces, any pod) become allow rules over
/// exact covers of those pods' addresses; entries naming address classes (and "any")
/// become rules over the class prefixes, longest first, each followed by a deny for the
/// same prefix where its allowed set differs from its enclosing prefix's: first match
/// then emulates the longest-prefix match that defines a class, without cutting the
/// class's region into pieces. Rules of different profiles never overlap (an address has
/// one profile per direction). Then a deny-all per isolated local prefix, and last an
/// explicit allow-all (not isolated).
pub fn export(c: &CompiledPolicy, family: Family) -> (AclRules, AclRules) {
    let x = Export::new(c, family);
    let egress = x.direction(Direction::Egress, c.tables.egress());
    let ingress = x.direction(Direction::Ingress, c.tables.ingress());
    (egress, ingress)
}

/// What the export of one family needs in both directions.
struct Export<'c> {
    c: &'c CompiledPolicy,
    ids: Vec<IdentityEntry>,
    sets: Sets,
    any: IpNet,
    /// The class prefixes, see [`class_tree`].
    tree: Vec<(IpNet, u32, Option<usize>)>,
    /// Per (peer kind, key): the ipcache intervals whose identity carries it.
    key_intervals: HashMap<(usize, u32), Vec<usize>>,
}

/// A rule of `direction` between a local (protected) prefix and a peer prefix.
fn rule(
    direction: Direction,
    local: IpNet,
    peer: IpNet,
    proto: Option<u8>,
    dport: PortRange,
    allow: bool,
) -> AclRule {
    let (src, dst) = match direction {
        Direction::Egress => (local, peer),
        Direction::Ingress => (peer, local),
    };
    AclRule {
        src,
        dst,
        proto,
        dport,
        allow,
    }
}

/// An identity's profile in `direction`.
fn profile_of(direction: Direction, e: &IdentityEntry) -> u32 {
    match direction {
        Direction::Egress => e.egress,
        Direction::Ingress => e.ingress,
    }
}

impl<'c> Export<'c> {
    fn new(c: &'c CompiledPolicy, family: Family) -> Self {
        let ids: Vec<IdentityEntry> = c.tables.identities().copied().collect();
        let sets = Sets {
            intervals: flatten(&c.info.prefixes, family),
            family,
        };
        let mut key_intervals: HashMap<(usize, u32), Vec<usize>> = HashMap::new();
        for (i, &(_, _, id)) in sets.intervals.iter().enumerate() {
            if let Some(e) = ids.get(id as usize) {
                for (k, &key) in e.peer.iter().enumerate() {
                    if key != NONE {
                        key_intervals.entry((k, key)).or_default().push(i);
                    }
                }
            }
        }
        Export {
            c,
            ids,
            sets,
            any: any_net(family),
            tree: class_tree(c, family),
            key_intervals,
        }
    }

    /// The rule list of one direction.
    fn direction(&self, direction: Direction, table: &DirTable) -> AclRules {
        let mut rules = Vec::new();
        if direction == Direction::Ingress {
            self.node_rules(&mut rules);
        }
        let mut by_profile: BTreeMap<u32, Vec<ProfileEntry>> = BTreeMap::new();
        for (profile, kind, key, proto, ranges) in table.entries() {
            by_profile
                .entry(profile)
                .or_default()
                .push((kind, key, proto, ranges));
        }
        for (profile, entries) in by_profile {
            self.profile_rules(direction, profile, &entries, &mut rules);
        }
        let ids = &self.ids;
        let isolated = self.sets.cover(|id| {
            ids.get(id as usize)
                .is_some_and(|e| profile_of(direction, e) != NONE)
        });
        let any = self.any;
        for l in isolated {
            rules.push(rule(direction, l, any, None, PortRange::ALL, false));
        }
        rules.push(rule(direction, any, any, None, PortRange::ALL, true));
        AclRules { direction, rules }
    }

    /// Ingress from a node's addresses to the isolated pods on that node: allowed.
    fn node_rules(&self, rules: &mut Vec<AclRule>) {
        let ids = &self.ids;
        for n in 0..self.c.info.nodes.len() as u32 {
            let srcs = self
                .sets
                .cover(|id| ids.get(id as usize).is_some_and(|e| e.node_of == n));
            let dsts = self.sets.cover(|id| {
                ids.get(id as usize)
                    .is_some_and(|e| e.runs_on == n && e.ingress != NONE)
            });
            for s in &srcs {
                for d in &dsts {
                    rules.push(rule(Direction::Ingress, *d, *s, None, PortRange::ALL, true));
                }
            }
        }
    }

    /// The rules of one profile's entries, over the local addresses having it.
    fn profile_rules(
        &self,
        direction: Direction,
        profile: u32,
        entries: &[ProfileEntry],
        rules: &mut Vec<AclRule>,
    ) {
        let ids = &self.ids;
        let locals = self.sets.cover(|id| {
            ids.get(id as usize)
                .is_some_and(|e| profile_of(direction, e) == profile)
        });
        if locals.is_empty() {
            return;
        }
        let class_key0 = self.c.info.keys.class(0);
        let mut pod_sets: BTreeMap<(PeerKind, u32), ProtoSet> = BTreeMap::new();
        let mut class_sets: BTreeMap<u32, ProtoSet> = BTreeMap::new();
        let mut any_set = ProtoSet::new();
        for (kind, key, proto, ranges) in entries {
            match kind {
                PeerKind::Class => add_to(
                    class_sets.entry(key - class_key0).or_default(),
                    *proto,
                    ranges,
                ),
                PeerKind::Any => add_to(&mut any_set, *proto, ranges),
                _ => add_to(pod_sets.entry((*kind, *key)).or_default(), *proto, ranges),
            }
        }
        self.pod_rules(direction, &locals, &pod_sets, rules);
        if class_sets.is_empty() && any_set.is_empty() {
            return;
        }
        self.class_rules(direction, &locals, &class_sets, &any_set, rules);
    }

    /// Pod-named entries: allow rules over exact covers. Each peer address interval gets
    /// the union of what its keys allow; intervals with the same allowed set merge
    /// before they are cut into prefixes.
    fn pod_rules(
        &self,
        direction: Direction,
        locals: &[IpNet],
        pod_sets: &BTreeMap<(PeerKind, u32), ProtoSet>,
        rules: &mut Vec<AclRule>,
    ) {
        let mut tagged: Vec<(usize, &ProtoSet)> = Vec::new();
        for ((kind, key), set) in pod_sets {
            if let Some(list) = self.key_intervals.get(&(*kind as usize, *key)) {
                tagged.extend(list.iter().map(|&i| (i, set)));
            }
        }
        tagged.sort_by_key(|t| t.0);
        let mut by_set: BTreeMap<ProtoSet, Vec<(u128, u128)>> = BTreeMap::new();
        let mut i = 0;
        while i < tagged.len() {
            let at = tagged[i].0;
            let mut set = tagged[i].1.clone();
            i += 1;
            while i < tagged.len() && tagged[i].0 == at {
                for (p, rs) in tagged[i].1 {
                    add_to(&mut set, *p, rs);
                }
                i += 1;
            }
            let (lo, hi, _) = self.sets.intervals[at];
            let list = by_set.entry(set).or_default();
            match list.last_mut() {
                Some(last) if last.1.checked_add(1) == Some(lo) => last.1 = hi,
                _ => list.push((lo, hi)),
            }
        }
        for (set, ranges) in &by_set {
            let mut peers = Vec::new();
            for &(lo, hi) in ranges {
                to_prefixes(lo, hi, self.sets.family, &mut peers);
            }
            let its = items(set);
            for l in locals {
                for p in &peers {
                    for &(proto, dport) in &its {
                        rules.push(rule(direction, *l, *p, proto, dport, true));
                    }
                }
            }
        }
    }

    /// Class-named entries (and "any"): longest-prefix emulation over the class
    /// prefixes.
    fn class_rules(
        &self,
        direction: Direction,
        locals: &[IpNet],
        class_sets: &BTreeMap<u32, ProtoSet>,
        any_set: &ProtoSet,
        rules: &mut Vec<AclRule>,
    ) {
        let allowed: Vec<ProtoSet> = self
            .tree
            .iter()
            .map(|(_, class, _)| {
                let mut set = any_set.clone();
                if let Some(cs) = class_sets.get(class) {
                    for (p, rs) in cs {
                        add_to(&mut set, *p, rs);
                    }
                }
                set
            })
            .collect();
        for (i, (net, _, parent)) in self.tree.iter().enumerate() {
            let a = &allowed[i];
            let needs_deny = match parent {
                None => false,
                Some(p) => {
                    if allowed[*p] == *a {
                        continue;
                    }
                    true
                }
            };
            let its = items(a);
            for l in locals {
                for &(proto, dport) in &its {
                    rules.push(rule(direction, *l, *net, proto, dport, true));
                }
                let all = its == [(None, PortRange::ALL)];
                if needs_deny && !all {
                    rules.push(rule(direction, *l, *net, None, PortRange::ALL, false));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> IpNet {
        s.parse().expect("net")
    }

    #[test]
    fn flatten_gives_disjoint_cover() {
        let p = vec![
            (n("0.0.0.0/0"), 0),
            (n("10.0.0.0/8"), 1),
            (n("10.0.0.5/32"), 2),
            (n("10.0.0.6/32"), 2),
            (n("10.255.255.255/32"), 3),
            (n("255.255.255.255/32"), 4),
        ];
        let f = flatten(&p, Family::V4);
        assert_eq!(
            f,
            vec![
                (0, 0x09ff_ffff, 0),
                (0x0a00_0000, 0x0a00_0004, 1),
                (0x0a00_0005, 0x0a00_0006, 2),
                (0x0a00_0007, 0x0aff_fffe, 1),
                (0x0aff_ffff, 0x0aff_ffff, 3),
                (0x0b00_0000, 0xffff_fffe, 0),
                (0xffff_ffff, 0xffff_ffff, 4),
            ]
        );
        let f6 = flatten(&[(n("::/0"), 7), (n("ffff::/16"), 8)], Family::V6);
        assert_eq!(f6.len(), 2);
        assert_eq!(f6[1], (0xffff_u128 << 112, u128::MAX, 8));
    }

    #[test]
    fn ranges_cut_into_fewest_prefixes() {
        let mut out = Vec::new();
        to_prefixes(0x0a00_0005, 0x0a00_0010, Family::V4, &mut out);
        let s: Vec<String> = out.iter().map(|n| n.to_string()).collect();
        assert_eq!(
            s,
            ["10.0.0.5/32", "10.0.0.6/31", "10.0.0.8/29", "10.0.0.16/32"]
        );
        let mut out = Vec::new();
        to_prefixes(0, u128::from(u32::MAX), Family::V4, &mut out);
        assert_eq!(out, vec![n("0.0.0.0/0")]);
        let mut out = Vec::new();
        to_prefixes(0, u128::MAX, Family::V6, &mut out);
        assert_eq!(out, vec![n("::/0")]);
    }
}
