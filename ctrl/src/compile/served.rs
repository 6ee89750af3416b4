//! What is left out of the tables: the objects and gateway listeners a
//! [`Severity::NotServed`](crate::diag::Severity::NotServed) diagnostic names.
//!
//! A diagnostic about a field under a gateway's listener (`spec.listeners[i]`, Gateway
//! API) or server (`spec.servers[i]`, Istio) leaves out that listener; any other leaves
//! out the whole object. The IR builder skips what is excluded, so its traffic gets no
//! route (never a wider one), and everything else is served.

use std::collections::{HashMap, HashSet};

use crate::diag::{Diagnostic, FieldPath, Seg};
use crate::load::Item;
use crate::model::Kind;

/// The objects (item indices) and gateway listeners (item index, listener index) that
/// are not served.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exclusions {
    items: HashSet<usize>,
    listeners: HashSet<(usize, usize)>,
}

impl Exclusions {
    /// What the not-served diagnostics among `diags` leave out of `items`.
    pub fn from_diagnostics(items: &[Item], diags: &[Diagnostic]) -> Self {
        let mut by_label: HashMap<(&str, String), usize> = HashMap::new();
        for (i, it) in items.iter().enumerate() {
            by_label
                .entry((&it.origin.file, it.object.label()))
                .or_insert(i);
        }
        let mut out = Exclusions::default();
        for d in diags.iter().filter(|d| d.is_not_served()) {
            let Some(label) = &d.object else { continue };
            let Some(&i) = by_label.get(&(&*d.file, label.clone())) else {
                continue;
            };
            out.exclude_at(items, i, d.path.as_deref().unwrap_or(""));
        }
        out
    }

    /// Leaves out what a not-served diagnostic at `path` of item `i` names.
    pub fn exclude_at(&mut self, items: &[Item], i: usize, path: &str) {
        let it = &items[i];
        let full = FieldPath::parse(path);
        let rel: &[Seg] = full.0.strip_prefix(&it.base.0[..]).unwrap_or(&full.0);
        let list = match it.object.kind() {
            Kind::Gateway => "listeners",
            Kind::IstioGateway => "servers",
            _ => "",
        };
        // A gateway a VirtualService (or one of its matches) names that is not there:
        // only that binding is missing.
        if it.object.kind() == Kind::VirtualService
            && rel
                .windows(2)
                .any(|w| matches!(w, [Seg::Key(k), Seg::Index(_)] if k == "gateways"))
        {
            return;
        }
        match rel {
            // A parentRef that does not attach, or a kind a listener cannot take,
            // leaves out only that attachment (the builder never makes it).
            [Seg::Key(spec), Seg::Key(p), ..]
                if spec == "spec" && (p == "parentRefs" || p == "gateways") => {}
            [Seg::Key(spec), Seg::Key(l), Seg::Index(_), Seg::Key(a), Seg::Key(k), ..]
                if spec == "spec" && l == list && a == "allowedRoutes" && k == "kinds" => {}
            [Seg::Key(spec), Seg::Key(l), Seg::Index(li), ..] if spec == "spec" && l == list => {
                self.listeners.insert((i, *li));
            }
            _ => {
                self.items.insert(i);
            }
        }
    }

    /// Whether object `i` is left out.
    pub fn item(&self, i: usize) -> bool {
        self.items.contains(&i)
    }

    /// Whether listener (or server) `li` of gateway `i` is left out (or the gateway).
    pub fn listener(&self, i: usize, li: usize) -> bool {
        self.item(i) || self.listeners.contains(&(i, li))
    }

    /// Whether nothing is left out.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty() && self.listeners.is_empty()
    }
}
