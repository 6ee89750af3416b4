//! The [`Index`] of loaded objects that every reference check looks things up in.

use std::collections::HashMap;

use crate::load::Item;
use crate::model::gateway_api as gw;
use crate::model::istio;
use crate::model::{Kind, Object};

use super::hostnames::service_of_host;

/// Objects by kind, namespace and name, for reference checks, with the lookups that
/// would otherwise scan every object (ReferenceGrants of a namespace, DestinationRules of
/// a Service, a Gateway's listeners by name and port) indexed once, so that checking or
/// compiling `n` routes stays linear in `n`.
#[derive(Debug, Default)]
pub struct Index<'a> {
    by_key: HashMap<(Kind, String, String), &'a Item>,
    /// ReferenceGrants (of `by_key`) by their namespace.
    grants: HashMap<&'a str, Vec<&'a gw::ReferenceGrantSpec>>,
    /// DestinationRules (of `by_key`) by the (namespace, Service) their host names.
    rules: HashMap<(&'a str, &'a str), Vec<&'a istio::DestinationRuleSpec>>,
    /// Listeners of each Gateway API Gateway (of `by_key`) by (namespace, name).
    pub(super) listeners: HashMap<(&'a str, &'a str), GatewayListeners<'a>>,
}

/// A Gateway's listeners (indices into `spec.listeners`, in order) by name and by port.
#[derive(Debug, Default)]
pub(super) struct GatewayListeners<'a> {
    pub(super) by_name: HashMap<&'a str, Vec<usize>>,
    pub(super) by_port: HashMap<u32, Vec<usize>>,
}

impl<'a> Index<'a> {
    /// Indexes the loaded items (the first of duplicates wins; duplicates are reported
    /// by [`validate`](super::validate)).
    pub fn new(items: &'a [Item]) -> Self {
        let mut ix = Index::default();
        for it in items {
            let m = it.object.meta();
            let ns = if it.object.kind().namespaced() {
                m.namespace().to_string()
            } else {
                String::new()
            };
            let std::collections::hash_map::Entry::Vacant(e) =
                ix.by_key.entry((it.object.kind(), ns, m.name.clone()))
            else {
                continue;
            };
            e.insert(it);
            match &it.object {
                Object::ReferenceGrant(g) => {
                    ix.grants
                        .entry(g.meta.namespace())
                        .or_default()
                        .push(&g.spec);
                }
                Object::DestinationRule(dr) => {
                    let key = service_of_host(&dr.spec.host, dr.meta.namespace());
                    ix.rules.entry(key).or_default().push(&dr.spec);
                }
                Object::Gateway(g) => {
                    let mut l = GatewayListeners::default();
                    for (i, x) in g.spec.listeners.iter().enumerate() {
                        l.by_name.entry(x.name.as_str()).or_default().push(i);
                        l.by_port.entry(x.port).or_default().push(i);
                    }
                    ix.listeners
                        .insert((g.meta.namespace(), g.meta.name.as_str()), l);
                }
                _ => {}
            }
        }
        ix
    }

    /// Looks an object up (`ns` is ignored for cluster-scoped kinds).
    pub fn get(&self, kind: Kind, ns: &str, name: &str) -> Option<&'a Item> {
        let ns = if kind.namespaced() { ns } else { "" };
        self.by_key
            .get(&(kind, ns.to_string(), name.to_string()))
            .copied()
    }

    /// Whether a ReferenceGrant in the target's namespace lets `from` (group, kind,
    /// namespace) refer to `to` (group, kind, namespace, name). Same-namespace
    /// references need no grant.
    pub fn grant_allows(&self, from: (&str, &str, &str), to: (&str, &str, &str, &str)) -> bool {
        let (from_group, from_kind, from_ns) = from;
        let (to_group, to_kind, to_ns, to_name) = to;
        if from_ns == to_ns {
            return true;
        }
        self.grants.get(to_ns).is_some_and(|gs| {
            gs.iter().any(|g| {
                g.from
                    .iter()
                    .any(|f| f.group == from_group && f.kind == from_kind && f.namespace == from_ns)
                    && g.to.iter().any(|t| {
                        t.group == to_group
                            && t.kind == to_kind
                            && t.name.as_deref().is_none_or(|n| n == to_name)
                    })
            })
        })
    }

    /// Whether a DestinationRule for Service `ns/svc` defines `subset`.
    pub(super) fn defines_subset(&self, ns: &str, svc: &str, subset: &str) -> bool {
        self.rules.get(&(ns, svc)).is_some_and(|rs| {
            rs.iter()
                .any(|dr| dr.subsets.iter().any(|s| s.name == subset))
        })
    }
}
