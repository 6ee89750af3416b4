//! Listeners that share an address and port: Gateway API listeners of one port and
//! protocol told apart by `hostname` (and Istio servers of one port told apart by
//! `hosts`, and listeners of different gateways on a shared address) become one
//! dataplane listener that selects the listener by name first (exact hostname, then the
//! longest wildcard suffix, then the one without hostname) and then its routes.
//!
//! The dataplane matches a name against one table of host patterns (exact, then longest
//! wildcard suffix, then `*`). The merged table gives the same answer as the two steps:
//! - a route pattern of listener `L` is dropped when it lies inside the hostname of a
//!   more specific listener (those names select that listener, whatever `L` binds);
//! - each listener hostname that the listener does not bind itself gets a
//!   [`NO_ROUTE`] entry, so its names never fall through to a less specific listener's
//!   wider patterns.
//!
//! What cannot share (different kinds, two listeners that take every connection, the
//! same hostname twice, a different `httpsRedirect` or source NAT setting) is not
//! served for the later listener in precedence order (`ProtocolConflict`,
//! `HostnameConflict`, `PortUnavailable`).

use crate::diag::Diagnostic;
use crate::load::Item;
use crate::model::Kind;

use super::hostname::istio_subset_of;
use super::ir::{Binding, Ir, Listener, Member, NO_ROUTE};
use super::served::Exclusions;

/// Merges the listeners of `ir` that share an address set, port and protocol; reports
/// (and leaves out) the ones that cannot share.
pub(super) fn merge_listeners(
    ir: &mut Ir,
    items: &[Item],
    excluded: &mut Exclusions,
    out: &mut Vec<Diagnostic>,
) {
    // Each group: its first listener, and the ones that joined it.
    let mut groups: Vec<Group> = Vec::new();
    for l in std::mem::take(&mut ir.listeners) {
        let mut addrs = l.addresses.clone();
        addrs.sort();
        let same = groups.iter().position(|g| {
            let mut a = g.head.addresses.clone();
            a.sort();
            g.head.port == l.port && g.head.protocol == l.protocol && a == addrs
        });
        let overlapping = groups.iter().find(|g| {
            let h = &g.head;
            h.port == l.port
                && h.protocol == l.protocol
                && (h.addresses.is_empty()
                    || l.addresses.is_empty()
                    || h.addresses.iter().any(|x| l.addresses.contains(x)))
        });
        match (same, overlapping) {
            (Some(i), _) => match refusal(&groups[i], &l) {
                None => groups[i].tail.push(l),
                Some((reason, why)) => report(&l, items, excluded, out, reason, why),
            },
            (None, Some(g)) => {
                let why = format!(
                    "shares port {} with {} on some but not all of its addresses",
                    l.port, g.head.name
                );
                report(&l, items, excluded, out, "PortUnavailable", why);
            }
            (None, None) => groups.push(Group {
                head: l,
                tail: Vec::new(),
            }),
        }
    }
    ir.listeners = groups.into_iter().map(merge).collect();
}

/// Listeners sharing an address set, port and protocol.
struct Group {
    head: Listener,
    tail: Vec<Listener>,
}

impl Group {
    fn all(&self) -> impl Iterator<Item = &Listener> {
        std::iter::once(&self.head).chain(self.tail.iter())
    }
}

/// Whether two terminating listeners verify client certificates against the same CA
/// certificates and CRLs (wherever they were read from: two Istio servers with their
/// own `credentialName` Secrets may carry the same CA). One rustls configuration serves
/// a port, with one client verifier.
fn same_client_trust(a: &Listener, b: &Listener) -> bool {
    let trust = |l: &Listener| l.members.first().and_then(|m| m.client_trust.clone());
    match (trust(a), trust(b)) {
        (None, None) => true,
        (Some(x), Some(y)) => x.roots.roots == y.roots.roots && x.crls == y.crls,
        _ => false,
    }
}

/// Why `l` cannot join `group`, as a condition reason and a message.
fn refusal(group: &Group, l: &Listener) -> Option<(&'static str, String)> {
    let first = &group.head;
    if first.kind != l.kind {
        return Some((
            "ProtocolConflict",
            format!(
                "port {} is taken by {} ({:?}); a {:?} listener cannot share it",
                l.port, first.name, first.kind, l.kind
            ),
        ));
    }
    if !l.kind.inspects() {
        return Some((
            "PortUnavailable",
            format!(
                "port {} is taken by {}, which takes every connection",
                l.port, first.name
            ),
        ));
    }
    if let (Some(a), Some(b)) = (&first.tls, &l.tls) {
        if !a.shares_with(b) || !same_client_trust(first, l) {
            return Some((
                "ProtocolConflict",
                format!(
                    "port {} is shared with {}, which terminates TLS with other settings \
                     (HTTPS and TLS, protocol versions, cipher suites or client certificate \
                     verification: mode, CA certificates and CRLs, pins): one port has one \
                     handshake configuration",
                    l.port, first.name
                ),
            ));
        }
    }
    if first.https_redirect != l.https_redirect || first.transparent != l.transparent {
        return Some((
            "ProtocolConflict",
            format!(
                "port {} is shared with {}, which differs in httpsRedirect or source NAT",
                l.port, first.name
            ),
        ));
    }
    let mine = member_hosts(l);
    for other in group.all() {
        let theirs = member_hosts(other);
        if let Some(h) = mine
            .iter()
            .find(|h| theirs.iter().any(|t| t.eq_ignore_ascii_case(h)))
        {
            return Some((
                "HostnameConflict",
                format!(
                    "hostname `{h}` on port {} is already {}'s (it precedes: oldest \
                     creationTimestamp, then namespace/name)",
                    l.port, other.name
                ),
            ));
        }
    }
    None
}

/// A listener's hostnames, `*` for none.
fn member_hosts(l: &Listener) -> Vec<String> {
    let mut v: Vec<String> = l
        .members
        .iter()
        .flat_map(|m| {
            if m.hostnames.is_empty() {
                vec!["*".to_string()]
            } else {
                m.hostnames.clone()
            }
        })
        .collect();
    if v.is_empty() {
        v.push("*".into());
    }
    v
}

/// Leaves listener `l` out, at its gateway's listener (or server) field.
fn report(
    l: &Listener,
    items: &[Item],
    excluded: &mut Exclusions,
    out: &mut Vec<Diagnostic>,
    reason: &'static str,
    why: String,
) {
    for m in &l.members {
        let (gi, li) = m.source;
        let Some(it) = items.get(gi) else { continue };
        let field = match (it.object.kind(), reason) {
            (Kind::IstioGateway, "HostnameConflict") => format!("spec.servers[{li}].hosts"),
            (Kind::IstioGateway, _) => format!("spec.servers[{li}].port"),
            (_, "HostnameConflict") => format!("spec.listeners[{li}].hostname"),
            _ => format!("spec.listeners[{li}].port"),
        };
        let path = it.path(&field);
        it.reporter(out)
            .not_served_because(&path, reason, format!("{}: {why}", m.name));
        excluded.exclude_at(items, gi, &path.to_string());
    }
}

/// One listener for a group that may share: the members' bindings as the two-step
/// selection would answer them.
fn merge(group: Group) -> Listener {
    if group.tail.is_empty() {
        return group.head;
    }
    let all: Vec<&Listener> = group.all().collect();
    let members: Vec<Member> = all.iter().flat_map(|l| l.members.clone()).collect();
    let mut bindings: Vec<Binding> = Vec::new();
    for (i, l) in all.iter().enumerate() {
        for b in &l.bindings {
            let Some(own) = l.members.iter().find_map(|m| m.cover(&b.host)) else {
                continue;
            };
            // Names of `b.host` select a more specific listener when one's hostname
            // contains them and is narrower than the one that admitted the binding.
            let claimed = all
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .any(|(_, o)| {
                    o.members.iter().flat_map(|m| m.hostnames.iter()).any(|h| {
                        istio_subset_of(&b.host, h)
                            && istio_subset_of(h, own)
                            && !h.eq_ignore_ascii_case(own)
                    })
                });
            if !claimed && !bindings.iter().any(|x| x.host == b.host) {
                bindings.push(b.clone());
            }
        }
    }
    // Each listener hostname that nothing binds: no route (not a wider pattern of a
    // less specific listener).
    for h in members.iter().flat_map(|m| m.hostnames.iter()) {
        if !bindings.iter().any(|x| x.host.eq_ignore_ascii_case(h)) {
            bindings.push(Binding {
                host: h.to_ascii_lowercase(),
                route: NO_ROUTE,
            });
        }
    }
    Listener {
        name: members
            .iter()
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>()
            .join(" + "),
        bindings,
        members,
        ..group.head
    }
}
