//! Manifests -> IR -> dataplane tables. This module resolves the validated objects into
//! the [`ir::Ir`]: Istio servers and Gateway API listeners become listeners bound to
//! addresses; VirtualService / TLSRoute / TCPRoute / UDPRoute / Consul TCPRoute rules
//! become routes whose backends are resolved to endpoints through Services,
//! EndpointSlices, Endpoints or selected Pods; pods become workloads.
//!
//! Binding rules implemented here:
//! - Istio: a VirtualService binds to a Gateway server when it names the gateway in
//!   `gateways` (`[ns/]name`; `mesh` is ignored on an appliance), it is exported to the
//!   gateway's namespace (`exportTo`: empty or `*` = everywhere, `.` = its own namespace),
//!   its namespace is allowed by the server host's `ns/` part (`*` any, `.` the
//!   gateway's), and one of its hosts matches a server host (wildcards either way).
//! - Gateway API: a route attaches to the listeners its parentRef selects (sectionName,
//!   port), of the right protocol (TLSRoute: TLS, TCPRoute: TCP, UDPRoute: UDP), whose
//!   `allowedRoutes` admit its namespace and kind; TLSRoute hostnames are narrowed to
//!   their intersection with the listener hostname, and a route without any
//!   intersection is not attached (warning).
//!
//! Files: this one holds the entry points and the per-build context with its lookups;
//! `resolve` turns a Service reference into endpoints, `istio` binds VirtualServices to
//! Istio Gateway servers, `gateway_api` attaches routes to Gateway API listeners.

pub mod backends;
pub mod build;
mod gateway_api;
pub mod hostname;
pub mod ir;
mod istio;
pub mod policy;
pub mod report;
mod resolve;
pub mod snapshot;
pub mod tables;

pub use build::{build, build_paths, check_machine, diagnostics, Built, PolicyReport};

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;

use crate::diag::Diagnostic;
use crate::load::Item;
use crate::model::core::{EndpointSliceInfo, PodInfo};
use crate::model::gateway_api as gw;
use crate::model::istio::{DestinationRuleSpec, VirtualServiceSpec};
use crate::model::meta::ObjectMeta;
use crate::model::{Object, Resource};
use crate::validate::{self, Index};
use ir::*;
use resolve::ResolveKey;

pub use istio::istio_bound_host;

/// The cluster DNS domain of Service host names (`name.ns.svc.<domain>`).
pub const CLUSTER_DOMAIN: &str = "cluster.local";

/// Maglev table size used when neither a DestinationRule nor the Appliance sets one.
pub const DEFAULT_MAGLEV_TABLE_SIZE: u64 = 65537;

/// Builds the IR from validated items. Warnings (routes not attached, ...) are appended
/// to `diags`.
pub fn build_ir(items: &[Item], diags: &mut Vec<Diagnostic>) -> Ir {
    build_ir_with_stats(items, diags).0
}

/// How much binding work [`build_ir_with_stats`] did: a structural measure of its cost
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

/// [`build_ir`], also returning how much binding work it did.
pub fn build_ir_with_stats(items: &[Item], diags: &mut Vec<Diagnostic>) -> (Ir, BuildStats) {
    let index = Index::new(items);
    let mut ir = Ir::default();
    let mut ctx = Ctx {
        items,
        index: &index,
        default_maglev: DEFAULT_MAGLEV_TABLE_SIZE,
        virtual_addresses: Vec::new(),
        by: Lookups::new(items),
        resolved: RefCell::new(HashMap::new()),
        stats: BuildStats::default(),
    };
    for it in items {
        if let Object::Appliance(a) = &it.object {
            ir.appliance = Some(a.spec.clone());
            if let Some(s) = a.spec.maglev_table_size {
                ctx.default_maglev = s;
            }
            ctx.virtual_addresses = a
                .spec
                .virtual_addresses
                .iter()
                .filter_map(|v| v.parse().ok())
                .collect();
            break;
        }
    }
    for it in items {
        match &it.object {
            Object::Namespace(n) => {
                let mut labels = n.meta.labels.clone();
                labels.insert("kubernetes.io/metadata.name".into(), n.meta.name.clone());
                ir.namespaces.insert(n.meta.name.clone(), labels);
            }
            Object::Node(n) => ir.nodes.push(Node {
                name: n.meta.name.clone(),
                addresses: n
                    .spec
                    .addresses
                    .iter()
                    .filter(|a| a.kind != "Hostname")
                    .filter_map(|a| a.address.parse().ok())
                    .collect(),
            }),
            Object::Pod(p) if !p.spec.spec.host_network => {
                for ip in p.spec.ips() {
                    let Ok(ip) = ip.parse() else { continue };
                    ir.workloads.push(Workload {
                        ip,
                        namespace: p.meta.namespace().to_string(),
                        pod: p.meta.name.clone(),
                        labels: p.meta.labels.clone(),
                        named_ports: p
                            .spec
                            .spec
                            .containers
                            .iter()
                            .flat_map(|c| c.ports.iter())
                            .filter_map(|cp| {
                                Some((
                                    cp.name.clone()?,
                                    cp.protocol,
                                    u16::try_from(cp.container_port).ok()?,
                                ))
                            })
                            .collect(),
                        node: p.spec.spec.node_name.clone(),
                    });
                }
            }
            Object::NetworkPolicy(p) => ir.policies.push(Policy {
                namespace: p.meta.namespace().to_string(),
                name: p.meta.name.clone(),
                spec: p.spec.clone(),
            }),
            _ => {}
        }
    }
    // Namespaces referenced by objects but not declared still exist for selectors.
    for it in items {
        if it.object.kind().namespaced() {
            let ns = it.object.meta().namespace().to_string();
            ir.namespaces.entry(ns.clone()).or_insert_with(|| {
                BTreeMap::from([("kubernetes.io/metadata.name".to_string(), ns)])
            });
        }
    }
    for it in items {
        match &it.object {
            Object::IstioGateway(g) => ctx.istio_gateway(it, &g.spec, &mut ir),
            Object::Gateway(g) => ctx.gateway_api(it, &g.spec, &mut ir, diags),
            _ => {}
        }
    }
    (ir, ctx.stats)
}

struct Ctx<'a> {
    items: &'a [Item],
    index: &'a Index<'a>,
    default_maglev: u64,
    virtual_addresses: Vec<IpAddr>,
    by: Lookups<'a>,
    /// Backends already resolved, by (namespace, Service, port, port name, subset): many
    /// routes to one Service resolve it once.
    resolved: RefCell<HashMap<ResolveKey, BackendTarget>>,
    stats: BuildStats,
}

/// Indices built once per IR so that binding and resolving `n` routes does not scan every
/// object per route or per listener. Every list keeps the objects' source order, so that
/// "the first object that ..." picks what a scan of all objects would.
#[derive(Default)]
struct Lookups<'a> {
    /// Every DestinationRule (duplicates included) by the (namespace, Service) it names.
    rules: HashMap<(&'a str, &'a str), Vec<&'a DestinationRuleSpec>>,
    /// EndpointSlices by namespace and `kubernetes.io/service-name` label.
    slices: HashMap<(&'a str, &'a str), Vec<&'a Resource<EndpointSliceInfo>>>,
    /// Pods by namespace.
    pods: HashMap<&'a str, Vec<&'a Resource<PodInfo>>>,
    /// The labels of the first pod of a namespace with an address.
    pod_by_ip: HashMap<(&'a str, IpAddr), &'a BTreeMap<String, String>>,
    /// Gateway API routes (indices into the items) by the Gateway their parentRefs name.
    routes: HashMap<(&'a str, &'a str), ParentRefs<'a>>,
    /// VirtualServices (indices into the items) by the Istio Gateway they name.
    virtual_services: HashMap<(&'a str, &'a str), PortRefs>,
}

/// Routes naming one Gateway, split by what their parentRef selects: the listener called
/// `sectionName`, the listeners on `port`, or every listener.
#[derive(Default)]
struct ParentRefs<'a> {
    by_section: HashMap<&'a str, Vec<usize>>,
    by_port: HashMap<u32, Vec<usize>>,
    any: Vec<usize>,
}

/// VirtualServices naming one Istio Gateway: those whose every match names a port, by
/// port, and the others (which may bind to a server on any port).
#[derive(Default)]
struct PortRefs {
    by_port: HashMap<u32, Vec<usize>>,
    any: Vec<usize>,
}

/// Pushes `i` unless it is already the last entry (an object is listed once per key).
fn push_once(v: &mut Vec<usize>, i: usize) {
    if v.last() != Some(&i) {
        v.push(i);
    }
}

/// The ascending union of sorted index lists.
fn union(lists: &[&[usize]]) -> Vec<usize> {
    let mut all: Vec<usize> = lists.iter().flat_map(|l| l.iter().copied()).collect();
    all.sort_unstable();
    all.dedup();
    all
}

impl<'a> Lookups<'a> {
    fn new(items: &'a [Item]) -> Self {
        let mut by = Lookups::default();
        for (i, it) in items.iter().enumerate() {
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
                Object::VirtualService(vs) => by.add_virtual_service(i, &vs.meta, &vs.spec),
                _ => {}
            }
        }
        by
    }

    fn add_route(&mut self, i: usize, meta: &'a ObjectMeta, parents: &'a [gw::ParentReference]) {
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

    fn add_virtual_service(
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

    /// The routes (item indices, ascending) that may select listener `l` of Gateway
    /// `gns/gname`: those whose parentRef names it, and its name or port or neither.
    fn routes_for(&self, gns: &str, gname: &str, l: &gw::Listener) -> Vec<usize> {
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

    /// The VirtualServices (item indices, ascending) naming Istio Gateway `gns/gname`
    /// that may have a route for a server on `port`.
    fn virtual_services_for(&self, gns: &str, gname: &str, port: u32) -> Vec<usize> {
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
    fn addresses(&self, explicit: &[IpAddr]) -> Vec<IpAddr> {
        if explicit.is_empty() {
            self.virtual_addresses.clone()
        } else {
            explicit.to_vec()
        }
    }
}
