//! Address classes: the pieces of the address space that ipBlocks and their excepts
//! carve out.
//!
//! Every CIDR that appears in an ipBlock (as `cidr` or in `except`), plus `0.0.0.0/0`
//! and `::/0`, is a *candidate*. An address's membership in every ipBlock term is a
//! function of its longest matching candidate X: the address is in a CIDR C of the set
//! iff C contains X. So a term `cidr C except E...` contains exactly the candidates
//! inside C and inside no E, and two candidates with the same membership vector are one
//! class. Classes are what the ipcache maps non-pod addresses to, and what every pod
//! identity carries (ipBlocks match pod IPs too). The number of classes is at most the
//! number of distinct CIDRs plus two: no blow-up into CIDR x port entries.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use sluice_dataplane::tables::lpm::{Lpm4, Lpm6};

/// One ipBlock: a CIDR minus exceptions (all normalised, host bits cleared).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Term {
    /// The CIDR.
    pub cidr: IpNet,
    /// Exceptions, sorted.
    pub except: Vec<IpNet>,
}

impl Term {
    /// Whether the term contains `ip` (the straight reading of the API text).
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.cidr.contains(&ip) && !self.except.iter().any(|e| e.contains(&ip))
    }
}

/// The classes of a set of terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classes {
    /// The terms, indexed by term id.
    pub terms: Vec<Term>,
    /// Per term: the classes it contains, sorted.
    pub of_term: Vec<Vec<u32>>,
    /// Per class: the terms containing it, sorted.
    pub members: Vec<Vec<u32>>,
    /// Per class: one candidate prefix of it (for naming it in dumps).
    pub example: Vec<IpNet>,
    /// The prefixes to put in the ipcache, with their class: every candidate whose class
    /// differs from its parent's (the roots always).
    pub prefixes: Vec<(IpNet, u32)>,
    v4: Lpm4,
    v6: Lpm6,
}

/// A candidate as a sortable key: (is IPv6, first address, prefix length).
type Cand = (bool, u128, u8);

fn cand(n: &IpNet) -> Cand {
    match n {
        IpNet::V4(n) => (false, u128::from(u32::from(n.network())), n.prefix_len()),
        IpNet::V6(n) => (true, u128::from(n.network()), n.prefix_len()),
    }
}

fn last_addr(c: Cand) -> u128 {
    let width = if c.0 { 128 } else { 32 };
    let host = width - u32::from(c.2);
    if host >= 128 {
        u128::MAX
    } else {
        c.1 | ((1u128 << host) - 1)
    }
}

fn net(c: Cand) -> IpNet {
    if c.0 {
        IpNet::V6(ipnet::Ipv6Net::new(c.1.into(), c.2).unwrap_or_default())
    } else {
        IpNet::V4(ipnet::Ipv4Net::new((c.1 as u32).into(), c.2).unwrap_or_default())
    }
}

/// Indices of the candidates inside `outer` (including itself), in sorted order.
fn inside(cands: &[Cand], outer: Cand) -> std::ops::Range<usize> {
    let lo = cands.partition_point(|c| *c < outer);
    let end = (outer.0, last_addr(outer), u8::MAX);
    let hi = cands.partition_point(|c| *c <= end);
    lo..hi.max(lo)
}

impl Classes {
    /// Computes the classes of `terms`.
    pub fn build(terms: Vec<Term>) -> Self {
        let mut cands: Vec<Cand> = vec![(false, 0, 0), (true, 0, 0)];
        for t in &terms {
            cands.push(cand(&t.cidr));
            cands.extend(t.except.iter().map(cand));
        }
        cands.sort_unstable();
        cands.dedup();
        let mut membership: Vec<Vec<u32>> = vec![Vec::new(); cands.len()];
        let mut excluded = vec![u32::MAX; cands.len()];
        for (ti, t) in terms.iter().enumerate() {
            let ti = ti as u32;
            for e in &t.except {
                for i in inside(&cands, cand(e)) {
                    excluded[i] = ti;
                }
            }
            for i in inside(&cands, cand(&t.cidr)) {
                if excluded[i] != ti {
                    membership[i].push(ti);
                }
            }
        }
        // Intern membership vectors in candidate order (deterministic class numbers).
        let mut ids: BTreeMap<&[u32], u32> = BTreeMap::new();
        let mut class_of = Vec::with_capacity(cands.len());
        let mut members: Vec<Vec<u32>> = Vec::new();
        let mut example = Vec::new();
        for (i, m) in membership.iter().enumerate() {
            let next = ids.len() as u32;
            let id = *ids.entry(m.as_slice()).or_insert_with(|| {
                members.push(m.clone());
                example.push(net(cands[i]));
                next
            });
            class_of.push(id);
        }
        let mut of_term = vec![Vec::new(); terms.len()];
        for (c, m) in members.iter().enumerate() {
            for &t in m {
                of_term[t as usize].push(c as u32);
            }
        }
        // Keep a candidate only where its class differs from its parent's.
        let mut prefixes = Vec::new();
        let mut stack: Vec<usize> = Vec::new();
        for (i, c) in cands.iter().enumerate() {
            while let Some(&top) = stack.last() {
                let t = cands[top];
                if t.0 == c.0 && t.1 <= c.1 && last_addr(*c) <= last_addr(t) {
                    break;
                }
                stack.pop();
            }
            let keep = match stack.last() {
                None => true,
                Some(&p) => class_of[p] != class_of[i],
            };
            if keep {
                prefixes.push((net(*c), class_of[i]));
            }
            stack.push(i);
        }
        let v4 = Lpm4::new(prefixes.iter().filter_map(|(n, c)| match n {
            IpNet::V4(n) => Some((u32::from(n.network()), n.prefix_len(), *c)),
            IpNet::V6(_) => None,
        }))
        .unwrap_or_else(|_| unreachable_lpm());
        let v6 = Lpm6::new(prefixes.iter().filter_map(|(n, c)| match n {
            IpNet::V6(n) => Some((u128::from(n.network()), n.prefix_len(), *c)),
            IpNet::V4(_) => None,
        }))
        .unwrap_or_else(|_| unreachable_lpm6());
        Classes {
            terms,
            of_term,
            members,
            example,
            prefixes,
            v4,
            v6,
        }
    }

    /// Number of classes.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether there are no classes (never: the roots always make one).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The class of an address.
    pub fn class_of(&self, ip: IpAddr) -> u32 {
        match ip {
            IpAddr::V4(a) => self.v4.lookup(u32::from(a)),
            IpAddr::V6(a) => self.v6.lookup(u128::from(a)),
        }
        .unwrap_or(0)
    }
}

// Candidates are distinct, in range and few; the LPM cannot refuse them. These keep the
// signatures total without an `expect` on the way.
fn unreachable_lpm() -> Lpm4 {
    Lpm4::new([(0, 0, 0)]).unwrap_or_else(|_| unreachable!("a lone default route builds"))
}

fn unreachable_lpm6() -> Lpm6 {
    Lpm6::new([(0, 0, 0)]).unwrap_or_else(|_| unreachable!("a lone default route builds"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> IpNet {
        s.parse().expect("net")
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn classes_follow_membership() {
        let terms = vec![
            Term {
                cidr: n("10.0.0.0/8"),
                except: vec![n("10.1.0.0/16")],
            },
            Term {
                cidr: n("10.1.0.0/16"),
                except: vec![],
            },
            Term {
                cidr: n("0.0.0.0/0"),
                except: vec![n("10.0.0.0/8")],
            },
            Term {
                cidr: n("2001:db8::/32"),
                except: vec![n("2001:db8:bad::/48")],
            },
        ];
        let c = Classes::build(terms.clone());
        let probes = [
            "10.2.3.4",
            "10.1.2.3",
            "11.0.0.1",
            "0.0.0.0",
            "2001:db8::1",
            "2001:db8:bad::1",
            "::1",
            "10.255.255.255",
            "10.1.255.255",
            "9.255.255.255",
        ];
        for a in probes {
            let a = ip(a);
            let want: Vec<u32> = terms
                .iter()
                .enumerate()
                .filter(|(_, t)| t.contains(a))
                .map(|(i, _)| i as u32)
                .collect();
            let class = c.class_of(a);
            assert_eq!(c.members[class as usize], want, "{a}");
            for (t, classes) in c.of_term.iter().enumerate() {
                assert_eq!(
                    classes.contains(&class),
                    want.contains(&(t as u32)),
                    "{a} term {t}"
                );
            }
        }
        // 0/0 (minus 10/8) and ::/0 are one class only when their membership agrees:
        // here ::/0 is in no term, 0/0 in term 2.
        assert_ne!(c.class_of(ip("::1")), c.class_of(ip("1.1.1.1")));
        // ::/0 and 2001:db8:bad::/48 are both in no term: one class.
        assert_eq!(c.class_of(ip("::1")), c.class_of(ip("2001:db8:bad::1")));
        assert_eq!(c.len(), 5);
    }

    #[test]
    fn redundant_prefixes_are_pruned() {
        // Every candidate has its own membership: all are kept (both roots included).
        let c = Classes::build(vec![
            Term {
                cidr: n("10.0.0.0/8"),
                except: vec![n("10.0.0.0/16")],
            },
            Term {
                cidr: n("10.0.0.0/16"),
                except: vec![],
            },
        ]);
        assert_eq!(c.prefixes.len(), 4, "{:?}", c.prefixes);
        // 10.1.0.0/16 is excepted from the only term that names it, so it is in exactly
        // the terms its parent 10.0.0.0/8 is in: the same class, not inserted.
        let c = Classes::build(vec![
            Term {
                cidr: n("10.0.0.0/8"),
                except: vec![],
            },
            Term {
                cidr: n("10.1.0.0/16"),
                except: vec![n("10.1.0.0/16")],
            },
        ]);
        assert_eq!(c.prefixes.len(), 3, "{:?}", c.prefixes);
        assert_eq!(c.class_of(ip("10.1.0.1")), c.class_of(ip("10.2.0.1")));
        assert!(c.of_term[1].is_empty());
    }
}
