//! The state the IR builder shares with its Istio, Gateway API and backend resolution
//! parts: the validated objects, their lookups, resolved backends and binding work.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;

use super::ir::*;
use crate::load::Item;
use crate::model::core::{EndpointSliceInfo, PodInfo};
use crate::model::gateway_api as gw;
use crate::model::istio::{DestinationRuleSpec, VirtualServiceSpec};
use crate::model::meta::ObjectMeta;
use crate::model::{Object, Resource};
use crate::validate::{self, Index};

use super::served::Exclusions;

/// The cluster DNS domain of Service host names (`name.ns.svc.<domain>`).
pub const CLUSTER_DOMAIN: &str = "cluster.local";

/// Maglev table size used when neither a DestinationRule nor the Appliance sets one.
pub const DEFAULT_MAGLEV_TABLE_SIZE: u64 = 65537;

/// How much binding work [`super::build_ir_with_stats`] did: a structural measure of its cost
/// that tests can bound without timing anything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BuildStats {
    /// (listener, route) and (server, VirtualService) pairs examined while binding: each
    /// route is examined only for the listeners its parentRefs (or a VirtualService's
    /// gateways and match ports) may select, so `n` routes on `n` listeners cost about
    /// `n`, not `n * n`.
    pub candidates: usize,
}

/// A backend destination, as resolved once per build: (namespace, service, port, port
/// name, subset).
pub(super) type ResolveKey = (String, String, Option<u32>, Option<String>, Option<String>);

pub(super) struct Ctx<'a> {
    pub(super) items: &'a [Item],
    pub(super) index: &'a Index<'a>,
    pub(super) default_maglev: u64,
    pub(super) virtual_addresses: Vec<IpAddr>,
    pub(super) by: Lookups<'a>,
    /// Objects and gateway listeners left out of the tables.
    pub(super) excluded: &'a Exclusions,
    /// What the Gateway API routes attached to.
    pub(super) attachment: super::status::Attachment,
    /// Backends already resolved, by (namespace, Service, port, port name, subset): many
    /// routes to one Service resolve it once.
    pub(super) resolved: RefCell<HashMap<ResolveKey, BackendTarget>>,
    pub(super) stats: BuildStats,
}

/// Indices built once per IR so that binding and resolving `n` routes does not scan every
/// object per route or per listener. Every list keeps the objects' source order, so that
/// "the first object that ..." picks what a scan of all objects would.
#[derive(Default)]
pub(super) struct Lookups<'a> {
    /// Every DestinationRule (duplicates included) by the (namespace, Service) it names.
    pub(super) rules: HashMap<(&'a str, &'a str), Vec<&'a DestinationRuleSpec>>,
    /// EndpointSlices by namespace and `kubernetes.io/service-name` label.
    pub(super) slices: HashMap<(&'a str, &'a str), Vec<&'a Resource<EndpointSliceInfo>>>,
    /// Pods by namespace.
    pub(super) pods: HashMap<&'a str, Vec<&'a Resource<PodInfo>>>,
    /// The labels of the first pod of a namespace with an address.
    pub(super) pod_by_ip: HashMap<(&'a str, IpAddr), &'a BTreeMap<String, String>>,
    /// Gateway API routes (indices into the items) by the Gateway their parentRefs name.
    pub(super) routes: HashMap<(&'a str, &'a str), ParentRefs<'a>>,
    /// VirtualServices (indices into the items) by the Istio Gateway they name.
    pub(super) virtual_services: HashMap<(&'a str, &'a str), PortRefs>,
}

/// Routes naming one Gateway, split by what their parentRef selects: the listener called
/// `sectionName`, the listeners on `port`, or every listener.
#[derive(Default)]
pub(super) struct ParentRefs<'a> {
    pub(super) by_section: HashMap<&'a str, Vec<usize>>,
    pub(super) by_port: HashMap<u32, Vec<usize>>,
    pub(super) any: Vec<usize>,
}

/// VirtualServices naming one Istio Gateway: those whose every match names a port, by
/// port, and the others (which may bind to a server on any port).
#[derive(Default)]
pub(super) struct PortRefs {
    pub(super) by_port: HashMap<u32, Vec<usize>>,
    pub(super) any: Vec<usize>,
}

/// Pushes `i` unless it is already the last entry (an object is listed once per key).
pub(super) fn push_once(v: &mut Vec<usize>, i: usize) {
    if v.last() != Some(&i) {
        v.push(i);
    }
}

/// The ascending union of sorted index lists: precedence order, since
/// [`super::build()`] sorts the objects into it.
pub(super) fn union(lists: &[&[usize]]) -> Vec<usize> {
    let mut all: Vec<usize> = lists.iter().flat_map(|l| l.iter().copied()).collect();
    all.sort_unstable();
    all.dedup();
    all
}

impl<'a> Lookups<'a> {
    pub(super) fn new(items: &'a [Item], excluded: &Exclusions) -> Self {
        let mut by = Lookups::default();
        for (i, it) in items.iter().enumerate() {
            if excluded.item(i) {
                continue;
            }
            match &it.object {
                Object::DestinationRule(dr) => {
                    let key = validate::service_of_host(&dr.spec.host, dr.meta.namespace());
                    by.rules.entry(key).or_default().push(&dr.spec);
                }
                Object::EndpointSlice(es) => {
                    if let Some(svc) = es.meta.labels.get("kubernetes.io/service-name") {
                        let key = (es.meta.namespace(), svc.as_str());
                        by.slices.entry(key).or_default().push(es);
                    }
                }
                Object::Pod(p) => {
                    let ns = p.meta.namespace();
                    by.pods.entry(ns).or_default().push(p);
                    for ip in p.spec.ips() {
                        if let Ok(ip) = ip.parse() {
                            by.pod_by_ip.entry((ns, ip)).or_insert(&p.meta.labels);
                        }
                    }
                }
                Object::TcpRoute(r) => by.add_route(i, &r.meta, &r.spec.parent_refs),
                Object::UdpRoute(r) => by.add_route(i, &r.meta, &r.spec.parent_refs),
                Object::TlsRoute(r) => by.add_route(i, &r.meta, &r.spec.parent_refs),
                Object::HttpRoute(r) => by.add_route(i, &r.meta, &r.spec.parent_refs),
                Object::VirtualService(vs) => by.add_virtual_service(i, &vs.meta, &vs.spec),
                _ => {}
            }
        }
        by
    }

    pub(super) fn add_route(
        &mut self,
        i: usize,
        meta: &'a ObjectMeta,
        parents: &'a [gw::ParentReference],
    ) {
        for p in parents {
            if p.kind.as_deref().unwrap_or("Gateway") != "Gateway" {
                continue;
            }
            let gns = p.namespace.as_deref().unwrap_or(meta.namespace());
            let refs = self.routes.entry((gns, p.name.as_str())).or_default();
            match (&p.section_name, p.port) {
                (Some(s), _) => push_once(refs.by_section.entry(s.as_str()).or_default(), i),
                (None, Some(port)) => push_once(refs.by_port.entry(port).or_default(), i),
                (None, None) => push_once(&mut refs.any, i),
            }
        }
    }

    pub(super) fn add_virtual_service(
        &mut self,
        i: usize,
        meta: &'a ObjectMeta,
        spec: &'a VirtualServiceSpec,
    ) {
        // The ports a server must have for one of the VirtualService's routes to apply
        // to it; `None` when some route applies to a server on any port.
        let mut ports: BTreeMap<u32, ()> = BTreeMap::new();
        let mut any_port = false;
        let mut note = |port: Option<u32>| match port {
            Some(p) => {
                ports.insert(p, ());
            }
            None => any_port = true,
        };
        for h in &spec.http {
            if h.matches.is_empty() {
                note(None);
            }
            h.matches.iter().for_each(|m| note(m.port));
        }
        for t in &spec.tls {
            t.matches.iter().for_each(|m| note(m.port));
        }
        for t in &spec.tcp {
            if t.matches.is_empty() {
                note(None);
            }
            t.matches.iter().for_each(|m| note(m.port));
        }
        let mut named: HashSet<(&str, &str)> = HashSet::new();
        for g in &spec.gateways {
            let key = validate::split_gateway_ref(g, meta.namespace());
            if !named.insert(key) {
                continue;
            }
            let refs = self.virtual_services.entry(key).or_default();
            if any_port {
                refs.any.push(i);
            } else {
                for &p in ports.keys() {
                    refs.by_port.entry(p).or_default().push(i);
                }
            }
        }
    }

    /// The routes (item indices, in precedence order) that may select listener `l` of Gateway
    /// `gns/gname`: those whose parentRef names it, and its name or port or neither.
    pub(super) fn routes_for(&self, gns: &str, gname: &str, l: &gw::Listener) -> Vec<usize> {
        let Some(refs) = self.routes.get(&(gns, gname)) else {
            return Vec::new();
        };
        let none: &[usize] = &[];
        union(&[
            refs.by_section
                .get(l.name.as_str())
                .map_or(none, Vec::as_slice),
            refs.by_port.get(&l.port).map_or(none, Vec::as_slice),
            &refs.any,
        ])
    }

    /// The VirtualServices (item indices, in precedence order) naming Istio Gateway `gns/gname`
    /// that may have a route for a server on `port`.
    pub(super) fn virtual_services_for(&self, gns: &str, gname: &str, port: u32) -> Vec<usize> {
        let Some(refs) = self.virtual_services.get(&(gns, gname)) else {
            return Vec::new();
        };
        let none: &[usize] = &[];
        union(&[
            refs.by_port.get(&port).map_or(none, Vec::as_slice),
            &refs.any,
        ])
    }
}

impl Ctx<'_> {
    /// A listener's addresses: its own, or the Appliance's virtual addresses.
    pub(super) fn addresses(&self, explicit: &[IpAddr]) -> Vec<IpAddr> {
        if explicit.is_empty() {
            self.virtual_addresses.clone()
        } else {
            explicit.to_vec()
        }
    }
}
