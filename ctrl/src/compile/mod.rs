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

pub mod backends;
pub mod build;
pub mod hostname;
pub mod ir;
pub mod policy;
pub mod report;
pub mod snapshot;
pub mod tables;

pub use build::{build, build_paths, diagnostics, Built, PolicyReport};

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};

use crate::diag::Diagnostic;
use crate::load::Item;
use crate::model::core::{EndpointSliceInfo, PodInfo};
use crate::model::gateway_api as gw;
use crate::model::istio;
use crate::model::meta::ObjectMeta;
use crate::model::meta::{IntOrString, LabelSelector};
use crate::model::{Kind, Object, Resource};
use crate::validate::{self, Index};
use ir::*;

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

/// What [`Ctx::resolve`] is a function of.
type ResolveKey = (String, String, Option<u32>, Option<String>, Option<String>);

/// Indices built once per IR so that binding and resolving `n` routes does not scan every
/// object per route or per listener. Every list keeps the objects' source order, so that
/// "the first object that ..." picks what a scan of all objects would.
#[derive(Default)]
struct Lookups<'a> {
    /// Every DestinationRule (duplicates included) by the (namespace, Service) it names.
    rules: HashMap<(&'a str, &'a str), Vec<&'a istio::DestinationRuleSpec>>,
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
        spec: &'a istio::VirtualServiceSpec,
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

/// Istio's binding of a VirtualService host to a Gateway server host: they bind when
/// they overlap (`host.Name.Matches`), and the route serves the more specific of the two.
pub fn istio_bound_host(server_host: &str, vs_host: &str) -> Option<String> {
    if !hostname::istio_matches(server_host, vs_host) {
        return None;
    }
    let narrowed = if hostname::istio_subset_of(vs_host, server_host) {
        vs_host
    } else {
        server_host
    };
    Some(narrowed.to_ascii_lowercase())
}

/// Destination subnets as networks (validation already rejected unparsable ones and
/// warned about host bits, which are cleared here).
fn subnets<'a>(cidrs: impl Iterator<Item = &'a String>) -> Vec<ipnet::IpNet> {
    cidrs
        .filter_map(|c| c.parse::<ipnet::IpNet>().ok().map(|n| n.trunc()))
        .collect()
}

impl Ctx<'_> {
    fn addresses(&self, explicit: &[IpAddr]) -> Vec<IpAddr> {
        if explicit.is_empty() {
            self.virtual_addresses.clone()
        } else {
            explicit.to_vec()
        }
    }

    fn maglev_size_for(&self, ns: &str, svc: &str) -> u64 {
        self.by
            .rules
            .get(&(ns, svc))
            .into_iter()
            .flatten()
            .find_map(|dr| {
                dr.traffic_policy
                    .as_ref()
                    .and_then(|t| t.load_balancer.as_ref())
                    .and_then(|l| l.consistent_hash.as_ref())
                    .and_then(|c| c.maglev.as_ref())
                    .and_then(|m| m.table_size)
            })
            .unwrap_or(self.default_maglev)
    }

    fn subset_labels(&self, ns: &str, svc: &str, subset: &str) -> Option<BTreeMap<String, String>> {
        self.by
            .rules
            .get(&(ns, svc))?
            .iter()
            .find_map(|dr| dr.subsets.iter().find(|s| s.name == subset))
            .map(|s| s.labels.clone())
    }

    fn pod_labels_by_ip(&self, ns: &str, ip: IpAddr) -> Option<&BTreeMap<String, String>> {
        self.by.pod_by_ip.get(&(ns, ip)).copied()
    }

    /// Resolves a Service port (by number, or by target port name for Consul) to ready
    /// endpoints, optionally restricted to a subset's labels.
    fn backend(
        &self,
        ns: &str,
        svc: &str,
        port: Option<u32>,
        port_name: Option<&str>,
        subset: Option<&str>,
        weight: u32,
    ) -> Backend {
        let mut name = format!(
            "{ns}/{svc}:{}",
            port.map(|p| p.to_string())
                .or(port_name.map(str::to_string))
                .unwrap_or_else(|| "*".into())
        );
        if let Some(s) = subset {
            name.push('/');
            name.push_str(s);
        }
        let target = self.resolve(ns, svc, port, port_name, subset);
        Backend {
            name,
            weight,
            target,
        }
    }

    /// [`Ctx::resolve_once`], remembered: routes to one Service port share the work.
    fn resolve(
        &self,
        ns: &str,
        svc: &str,
        port: Option<u32>,
        port_name: Option<&str>,
        subset: Option<&str>,
    ) -> BackendTarget {
        let key: ResolveKey = (
            ns.to_string(),
            svc.to_string(),
            port,
            port_name.map(str::to_string),
            subset.map(str::to_string),
        );
        if let Some(t) = self.resolved.borrow().get(&key) {
            return t.clone();
        }
        let t = self.resolve_once(ns, svc, port, port_name, subset);
        self.resolved.borrow_mut().insert(key, t.clone());
        t
    }

    fn resolve_once(
        &self,
        ns: &str,
        svc: &str,
        port: Option<u32>,
        port_name: Option<&str>,
        subset: Option<&str>,
    ) -> BackendTarget {
        let Some(item) = self.index.get(Kind::Service, ns, svc) else {
            return BackendTarget::Invalid(format!("Service {ns}/{svc} not found"));
        };
        let Object::Service(s) = &item.object else {
            return BackendTarget::Invalid("not a Service".into());
        };
        let sp = s.spec.ports.iter().find(|p| match (port, port_name) {
            (Some(n), _) => p.port == i64::from(n),
            (None, Some(name)) => {
                p.name.as_deref() == Some(name)
                    || matches!(&p.target_port, Some(IntOrString::Str(t)) if t == name)
            }
            (None, None) => s.spec.ports.len() == 1,
        });
        let Some(sp) = sp else {
            return BackendTarget::Invalid(match (port, port_name) {
                (Some(n), _) => format!("Service {ns}/{svc} has no port {n}"),
                (None, Some(n)) => format!("Service {ns}/{svc} has no port named {n}"),
                (None, None) => {
                    format!("Service {ns}/{svc} has several ports and the destination names none")
                }
            });
        };
        let subset_labels = match subset {
            None => None,
            Some(sub) => match self.subset_labels(ns, svc, sub) {
                Some(l) => Some(l),
                None => {
                    return BackendTarget::Invalid(format!(
                        "no DestinationRule defines subset `{sub}` of {ns}/{svc}"
                    ))
                }
            },
        };
        let in_subset = |ip: IpAddr| match &subset_labels {
            None => true,
            Some(want) => self
                .pod_labels_by_ip(ns, ip)
                .is_some_and(|l| want.iter().all(|(k, v)| l.get(k) == Some(v))),
        };
        let mut eps: Vec<SocketAddr> = Vec::new();
        let sp_name = sp.name.clone().unwrap_or_default();
        // 1. EndpointSlices labelled with the service name.
        let mut have_source = false;
        for es in self.by.slices.get(&(ns, svc)).into_iter().flatten() {
            have_source = true;
            let Some(p) = es
                .spec
                .ports
                .iter()
                .find(|p| p.name.clone().unwrap_or_default() == sp_name)
                .and_then(|p| p.port)
                .and_then(|p| u16::try_from(p).ok())
            else {
                continue;
            };
            for e in &es.spec.endpoints {
                if e.conditions.ready == Some(false) {
                    continue;
                }
                for a in &e.addresses {
                    if let Ok(ip) = a.parse::<IpAddr>() {
                        if in_subset(ip) {
                            eps.push(SocketAddr::new(ip, p));
                        }
                    }
                }
            }
        }
        // 2. The Endpoints object.
        if !have_source {
            if let Some(Object::Endpoints(e)) =
                self.index.get(Kind::Endpoints, ns, svc).map(|i| &i.object)
            {
                have_source = true;
                for sub in &e.spec {
                    let Some(p) = sub
                        .ports
                        .iter()
                        .find(|p| {
                            p.name.clone().unwrap_or_default() == sp_name || sub.ports.len() == 1
                        })
                        .and_then(|p| p.port)
                        .and_then(|p| u16::try_from(p).ok())
                    else {
                        continue;
                    };
                    for a in &sub.addresses {
                        if let Ok(ip) = a.ip.parse::<IpAddr>() {
                            if in_subset(ip) {
                                eps.push(SocketAddr::new(ip, p));
                            }
                        }
                    }
                }
            }
        }
        // 3. Pods selected by the Service.
        if !have_source {
            if let Some(sel) = &s.spec.selector {
                let sel = LabelSelector {
                    match_labels: sel.clone(),
                    match_expressions: Vec::new(),
                };
                for p in self.by.pods.get(ns).into_iter().flatten() {
                    if sel.is_empty() || !sel.matches(&p.meta.labels) {
                        continue;
                    }
                    let target = match &sp.target_port {
                        None => u16::try_from(sp.port).ok(),
                        Some(IntOrString::Int(n)) => u16::try_from(*n).ok(),
                        Some(IntOrString::Str(name)) => p
                            .spec
                            .spec
                            .containers
                            .iter()
                            .flat_map(|c| c.ports.iter())
                            .find(|cp| cp.name.as_deref() == Some(name.as_str()))
                            .and_then(|cp| u16::try_from(cp.container_port).ok()),
                    };
                    let Some(target) = target else { continue };
                    for ip in p.spec.ips() {
                        if let Ok(ip) = ip.parse::<IpAddr>() {
                            if in_subset(ip) {
                                eps.push(SocketAddr::new(ip, target));
                            }
                        }
                    }
                }
            }
        }
        eps.sort();
        eps.dedup();
        if eps.is_empty() {
            BackendTarget::Invalid(format!(
                "Service {ns}/{svc}{} has no ready endpoints",
                subset.map(|s| format!(" subset {s}")).unwrap_or_default()
            ))
        } else {
            BackendTarget::Endpoints(eps)
        }
    }

    fn istio_destinations(&self, route: &[istio::RouteDestination], own_ns: &str) -> Vec<Backend> {
        route
            .iter()
            .map(|d| {
                let (ns, svc) = validate::service_of_host(&d.destination.host, own_ns);
                let w = d.weight.unwrap_or(1).clamp(0, validate::MAX_WEIGHT) as u32;
                self.backend(
                    ns,
                    svc,
                    d.destination.port.as_ref().map(|p| p.number),
                    None,
                    d.destination.subset.as_deref(),
                    w,
                )
            })
            .collect()
    }

    fn istio_gateway(&mut self, it: &Item, spec: &istio::GatewaySpec, ir: &mut Ir) {
        let gns = it.object.meta().namespace().to_string();
        let gname = it.object.meta().name.clone();
        // A bad value is a validation error, so the IR is never built with one.
        let transparent =
            ir::transparent_by_annotation(&it.object.meta().annotations).unwrap_or(false);
        for (si, server) in spec.servers.iter().enumerate() {
            let proto = server.port.protocol.to_ascii_uppercase();
            let Ok(port) = u16::try_from(server.port.number) else {
                continue;
            };
            let tls = server.tls.as_ref();
            let mode = tls.map(|t| t.mode);
            let kind = match (proto.as_str(), mode) {
                ("HTTP" | "HTTP2" | "GRPC" | "GRPC-WEB", _) => ListenerKind::Http,
                ("TLS", Some(istio::TlsMode::AutoPassthrough)) => ListenerKind::TlsAutoPassthrough,
                ("TLS", Some(istio::TlsMode::Passthrough) | None) => ListenerKind::TlsPassthrough,
                ("TLS" | "HTTPS", Some(_)) => ListenerKind::TlsTerminate,
                _ => ListenerKind::Tcp,
            };
            let terminate = (kind == ListenerKind::TlsTerminate).then(|| {
                let t = tls.cloned().unwrap_or_default();
                TlsTerminate {
                    mode: t.mode.as_str().to_string(),
                    certificates: match &t.credential_name {
                        Some(c) => vec![format!("{gns}/{c}")],
                        None => t.server_certificate.iter().cloned().collect(),
                    },
                    require_client_cert: t.mode == istio::TlsMode::Mutual,
                    http: proto == "HTTPS",
                }
            });
            let bind: Vec<IpAddr> = server.bind.iter().filter_map(|b| b.parse().ok()).collect();
            let mut listener = Listener {
                name: format!(
                    "{} {gns}/{gname} servers[{si}]{}",
                    Kind::IstioGateway.as_str(),
                    server
                        .name
                        .as_ref()
                        .map(|n| format!(" ({n})"))
                        .unwrap_or_default()
                ),
                addresses: self.addresses(&bind),
                port,
                protocol: L4::Tcp,
                kind,
                tls: terminate,
                https_redirect: tls.is_some_and(|t| t.https_redirect),
                transparent,
                bindings: Vec::new(),
            };
            // Server host entries: (namespace constraint, host pattern).
            let server_hosts: Vec<(String, String)> = server
                .hosts
                .iter()
                .map(|h| match h.split_once('/') {
                    Some((".", host)) => (gns.clone(), host.to_ascii_lowercase()),
                    Some((ns, host)) => (ns.to_string(), host.to_ascii_lowercase()),
                    None => ("*".to_string(), h.to_ascii_lowercase()),
                })
                .collect();
            if kind == ListenerKind::TlsAutoPassthrough {
                self.auto_passthrough(&server_hosts, u32::from(port), &mut listener, ir);
                ir.listeners.push(listener);
                continue;
            }
            // Hosts bound so far (the same as `listener.bindings`, for lookups).
            let mut bound: HashSet<String> = HashSet::new();
            let tcp_like = matches!(
                kind,
                ListenerKind::Tcp | ListenerKind::Udp | ListenerKind::TlsTerminate
            ) && !listener.tls.as_ref().is_some_and(|t| t.http);
            for vi in self
                .by
                .virtual_services_for(&gns, &gname, server.port.number)
            {
                self.stats.candidates += 1;
                let Object::VirtualService(vs) = &self.items[vi].object else {
                    continue;
                };
                if tcp_like && !listener.bindings.is_empty() {
                    // A TCP listener takes one catch-all route: the first one binds and
                    // no later VirtualService can add anything.
                    break;
                }
                let vns = vs.meta.namespace().to_string();
                let names_gateway = vs.spec.gateways.iter().any(|g| {
                    let (ns, n) = validate::split_gateway_ref(g, &vns);
                    ns == gns && n == gname
                });
                let exported = vs.spec.export_to.is_empty()
                    || vs
                        .spec
                        .export_to
                        .iter()
                        .any(|e| e == "*" || (e == "." && vns == gns) || *e == gns);
                if !names_gateway || !exported {
                    continue;
                }
                // VirtualService hosts narrowed to the server hosts its namespace may use.
                let mut hosts: Vec<String> = Vec::new();
                for (nsc, sh) in &server_hosts {
                    if nsc != "*" && *nsc != vns {
                        continue;
                    }
                    for vh in &vs.spec.hosts {
                        if let Some(h) = istio_bound_host(sh, vh) {
                            if !hosts.contains(&h) {
                                hosts.push(h);
                            }
                        }
                    }
                }
                if hosts.is_empty() {
                    continue;
                }
                let gw_ok = |gws: &[String]| {
                    gws.is_empty()
                        || gws.iter().any(|g| {
                            let (ns, n) = validate::split_gateway_ref(g, &vns);
                            ns == gns && n == gname
                        })
                };
                let label = |what: &str| format!("VirtualService {vns}/{} {what}", vs.meta.name);
                let maglev = |backends: &[istio::RouteDestination]| {
                    backends
                        .first()
                        .map(|d| {
                            let (ns, svc) = validate::service_of_host(&d.destination.host, &vns);
                            self.maglev_size_for(ns, svc)
                        })
                        .unwrap_or(self.default_maglev)
                };
                match kind {
                    ListenerKind::TlsPassthrough => {
                        for (ti, t) in vs.spec.tls.iter().enumerate() {
                            let mut snis = Vec::new();
                            for m in &t.matches {
                                if m.port.is_some_and(|p| p != server.port.number)
                                    || !gw_ok(&m.gateways)
                                {
                                    continue;
                                }
                                for sni in &m.sni_hosts {
                                    for h in &hosts {
                                        if let Some(x) = istio_bound_host(h, sni) {
                                            snis.push((x, m.destination_subnets.clone()));
                                        }
                                    }
                                }
                            }
                            if snis.is_empty() {
                                continue;
                            }
                            let ri = ir.routes.len();
                            ir.routes.push(Route {
                                name: label(&format!("tls[{ti}]")),
                                kind: RouteKind::Tls,
                                destination_subnets: subnets(
                                    snis.iter().flat_map(|(_, s)| s.iter()),
                                ),
                                backends: self.istio_destinations(&t.route, &vns),
                                http: Vec::new(),
                                maglev_table_size: maglev(&t.route),
                            });
                            for (sni, _) in snis {
                                if bound.insert(sni.clone()) {
                                    listener.bindings.push(Binding {
                                        host: sni,
                                        route: ri,
                                    });
                                }
                            }
                        }
                    }
                    ListenerKind::Tcp | ListenerKind::Udp | ListenerKind::TlsTerminate
                        if !listener.tls.as_ref().is_some_and(|t| t.http) =>
                    {
                        for (ti, t) in vs.spec.tcp.iter().enumerate() {
                            let applies = t.matches.is_empty()
                                || t.matches.iter().any(|m| {
                                    m.port.is_none_or(|p| p == server.port.number)
                                        && gw_ok(&m.gateways)
                                });
                            if !applies || bound.contains("*") {
                                continue;
                            }
                            let ri = ir.routes.len();
                            ir.routes.push(Route {
                                name: label(&format!("tcp[{ti}]")),
                                kind: RouteKind::Tcp,
                                destination_subnets: subnets(
                                    t.matches.iter().flat_map(|m| m.destination_subnets.iter()),
                                ),
                                backends: self.istio_destinations(&t.route, &vns),
                                http: Vec::new(),
                                maglev_table_size: maglev(&t.route),
                            });
                            bound.insert("*".into());
                            listener.bindings.push(Binding {
                                host: "*".into(),
                                route: ri,
                            });
                        }
                    }
                    ListenerKind::Http | ListenerKind::TlsTerminate => {
                        let rules: Vec<HttpRule> = vs
                            .spec
                            .http
                            .iter()
                            .filter(|h| {
                                h.matches.is_empty()
                                    || h.matches.iter().any(|m| {
                                        m.port.is_none_or(|p| p == server.port.number)
                                            && gw_ok(&m.gateways)
                                    })
                            })
                            .map(|h| HttpRule {
                                uri: h
                                    .matches
                                    .iter()
                                    .filter_map(|m| m.uri.as_ref())
                                    .filter_map(|u| match (&u.exact, &u.prefix) {
                                        (Some(e), _) => Some(StringMatch::Exact(e.clone())),
                                        (None, Some(p)) => Some(StringMatch::Prefix(p.clone())),
                                        _ => None,
                                    })
                                    .collect(),
                                backends: self.istio_destinations(&h.route, &vns),
                                redirect: h.redirect.as_ref().map(|r| Redirect {
                                    code: r
                                        .redirect_code
                                        .and_then(|c| u16::try_from(c).ok())
                                        .unwrap_or(301),
                                    scheme: r.scheme.clone(),
                                    authority: r.authority.clone(),
                                    path: r.uri.clone(),
                                }),
                            })
                            .collect();
                        if rules.is_empty() {
                            continue;
                        }
                        let ri = ir.routes.len();
                        let first = vs
                            .spec
                            .http
                            .iter()
                            .flat_map(|h| h.route.iter())
                            .cloned()
                            .collect::<Vec<_>>();
                        ir.routes.push(Route {
                            name: label("http"),
                            kind: RouteKind::Http,
                            destination_subnets: Vec::new(),
                            backends: Vec::new(),
                            http: rules,
                            maglev_table_size: maglev(&first),
                        });
                        for h in &hosts {
                            if bound.insert(h.clone()) {
                                listener.bindings.push(Binding {
                                    host: h.clone(),
                                    route: ri,
                                });
                            }
                        }
                    }
                    _ => {}
                }
            }
            ir.listeners.push(listener);
        }
    }

    /// AUTO_PASSTHROUGH: the destination is in the SNI, `outbound_.<port>_.<subset>_.<host>`
    /// (Istio's cluster naming). Every Service port (and DestinationRule subset) whose
    /// host `name.ns.svc.cluster.local` the server's hosts admit becomes an exact SNI
    /// binding to a route of its own, so the dataplane routes these like any SNI.
    fn auto_passthrough(
        &self,
        server_hosts: &[(String, String)],
        server_port: u32,
        listener: &mut Listener,
        ir: &mut Ir,
    ) {
        // Hosts bound so far (the same as `listener.bindings`, for lookups).
        let mut bound: HashSet<String> = listener.bindings.iter().map(|b| b.host.clone()).collect();
        for it in self.items {
            let Object::Service(svc) = &it.object else {
                continue;
            };
            let ns = svc.meta.namespace();
            let fqdn = format!("{}.{ns}.svc.{CLUSTER_DOMAIN}", svc.meta.name);
            let admitted = server_hosts
                .iter()
                .any(|(nsc, h)| (nsc == "*" || nsc == ns) && hostname::istio_matches(h, &fqdn));
            if !admitted {
                continue;
            }
            let mut subsets: Vec<String> = vec![String::new()];
            for dr in self
                .by
                .rules
                .get(&(ns, svc.meta.name.as_str()))
                .into_iter()
                .flatten()
            {
                subsets.extend(dr.subsets.iter().map(|s| s.name.clone()));
            }
            for sp in &svc.spec.ports {
                let Ok(port) = u32::try_from(sp.port) else {
                    continue;
                };
                for subset in &subsets {
                    let sni = format!("outbound_.{port}_.{subset}_.{fqdn}");
                    if !bound.insert(sni.clone()) {
                        continue;
                    }
                    let backend = self.backend(
                        ns,
                        &svc.meta.name,
                        Some(port),
                        None,
                        (!subset.is_empty()).then_some(subset.as_str()),
                        1,
                    );
                    let ri = ir.routes.len();
                    ir.routes.push(Route {
                        name: format!("AUTO_PASSTHROUGH {sni} (server port {server_port})"),
                        kind: RouteKind::Tls,
                        destination_subnets: Vec::new(),
                        backends: vec![backend],
                        http: Vec::new(),
                        maglev_table_size: self.maglev_size_for(ns, &svc.meta.name),
                    });
                    listener.bindings.push(Binding {
                        host: sni,
                        route: ri,
                    });
                }
            }
        }
    }

    fn gateway_api(
        &mut self,
        it: &Item,
        spec: &gw::GatewaySpec,
        ir: &mut Ir,
        diags: &mut Vec<Diagnostic>,
    ) {
        let gns = it.object.meta().namespace().to_string();
        let gname = it.object.meta().name.clone();
        let transparent =
            ir::transparent_by_annotation(&it.object.meta().annotations).unwrap_or(false);
        let explicit: Vec<IpAddr> = spec
            .addresses
            .iter()
            .filter_map(|a| a.value.parse().ok())
            .collect();
        for (li, l) in spec.listeners.iter().enumerate() {
            let Ok(port) = u16::try_from(l.port) else {
                continue;
            };
            let (kind, protocol) = match (l.protocol.as_str(), l.tls.as_ref().map(|t| t.mode)) {
                ("TCP", _) => (ListenerKind::Tcp, L4::Tcp),
                ("UDP", _) => (ListenerKind::Udp, L4::Udp),
                ("HTTP", _) => (ListenerKind::Http, L4::Tcp),
                ("TLS", Some(gw::GatewayTlsMode::Passthrough)) => {
                    (ListenerKind::TlsPassthrough, L4::Tcp)
                }
                _ => (ListenerKind::TlsTerminate, L4::Tcp),
            };
            let mut listener = Listener {
                name: format!("Gateway {gns}/{gname} listeners[{li}] ({})", l.name),
                addresses: self.addresses(&explicit),
                port,
                protocol,
                kind,
                tls: (kind == ListenerKind::TlsTerminate).then(|| TlsTerminate {
                    mode: "Terminate".into(),
                    certificates: l
                        .tls
                        .iter()
                        .flat_map(|t| t.certificate_refs.iter())
                        .map(|c| {
                            format!(
                                "{}/{}",
                                c.namespace.clone().unwrap_or_else(|| gns.clone()),
                                c.name
                            )
                        })
                        .collect(),
                    require_client_cert: false,
                    http: l.protocol == "HTTPS",
                }),
                https_redirect: false,
                transparent,
                bindings: Vec::new(),
            };
            let want_kind = match kind {
                ListenerKind::Tcp => "TCPRoute",
                ListenerKind::Udp => "UDPRoute",
                ListenerKind::TlsPassthrough | ListenerKind::TlsTerminate
                    if l.protocol == "TLS" =>
                {
                    "TLSRoute"
                }
                _ => "",
            };
            // Hosts bound so far (the same as `listener.bindings`, for lookups).
            let mut bound: HashSet<String> = HashSet::new();
            for ri in self.by.routes_for(&gns, &gname, l) {
                self.stats.candidates += 1;
                let rit = &self.items[ri];
                let (parents, hostnames, rules, route_kind) = match &rit.object {
                    Object::TcpRoute(r) if want_kind == "TCPRoute" => {
                        (&r.spec.parent_refs, &[][..], &r.spec.rules, "TCPRoute")
                    }
                    Object::UdpRoute(r) if want_kind == "UDPRoute" => {
                        (&r.spec.parent_refs, &[][..], &r.spec.rules, "UDPRoute")
                    }
                    Object::TlsRoute(r) if want_kind == "TLSRoute" => (
                        &r.spec.parent_refs,
                        &r.spec.hostnames[..],
                        &r.spec.rules,
                        "TLSRoute",
                    ),
                    _ => continue,
                };
                let rns = rit.object.meta().namespace().to_string();
                let selects = parents.iter().any(|p| {
                    p.kind.as_deref().unwrap_or("Gateway") == "Gateway"
                        && p.namespace.clone().unwrap_or_else(|| rns.clone()) == gns
                        && p.name == gname
                        && p.section_name.as_ref().is_none_or(|s| *s == l.name)
                        && p.port.is_none_or(|pp| pp == l.port)
                });
                if !selects {
                    continue;
                }
                if !self.allowed(l, &gns, &rns, route_kind) {
                    rit.reporter(diags).warn(
                        &rit.path("spec.parentRefs"),
                        format!("not attached to listener `{}` of Gateway {gns}/{gname}: allowedRoutes does not admit this route", l.name),
                    );
                    continue;
                }
                // Hostnames: intersection of listener and route hostnames.
                let route_hosts: Vec<&str> = hostnames.iter().map(String::as_str).collect();
                let hosts: Vec<String> =
                    match hostname::narrow_route_hostnames(l.hostname.as_deref(), &route_hosts) {
                        Some(h) if h.is_empty() => vec!["*".into()],
                        Some(h) => h.iter().map(|h| h.to_ascii_lowercase()).collect(),
                        None => Vec::new(),
                    };
                if hosts.is_empty() {
                    rit.reporter(diags).warn(
                        &rit.path("spec.hostnames"),
                        format!("no hostname intersects listener `{}` ({}) of Gateway {gns}/{gname}: not attached", l.name, l.hostname.as_deref().unwrap_or("*")),
                    );
                    continue;
                }
                let Some(rule) = rules.first() else { continue };
                let backends: Vec<Backend> = rule
                    .backend_refs
                    .iter()
                    .map(|b| {
                        let bns = b.namespace.clone().unwrap_or_else(|| rns.clone());
                        let w = b.weight.unwrap_or(1).clamp(0, validate::MAX_WEIGHT) as u32;
                        let kind_ok = b.kind.as_deref().unwrap_or("Service") == "Service"
                            && b.group.as_deref().unwrap_or("").is_empty();
                        if !kind_ok {
                            return Backend {
                                name: format!("{bns}/{}", b.name),
                                weight: w,
                                target: BackendTarget::Invalid("unsupported backend kind".into()),
                            };
                        }
                        if !self.index.grant_allows(
                            ("gateway.networking.k8s.io", route_kind, &rns),
                            ("", "Service", &bns, &b.name),
                        ) {
                            return Backend {
                                name: format!("{bns}/{}", b.name),
                                weight: w,
                                target: BackendTarget::Invalid(
                                    "cross-namespace reference not permitted by a ReferenceGrant"
                                        .into(),
                                ),
                            };
                        }
                        self.backend(&bns, &b.name, b.port, b.port_name.as_deref(), None, w)
                    })
                    .collect();
                let maglev = rule
                    .backend_refs
                    .first()
                    .map(|b| {
                        self.maglev_size_for(
                            &b.namespace.clone().unwrap_or_else(|| rns.clone()),
                            &b.name,
                        )
                    })
                    .unwrap_or(self.default_maglev);
                let ri = ir.routes.len();
                ir.routes.push(Route {
                    name: format!("{route_kind} {rns}/{}", rit.object.meta().name),
                    kind: if route_kind == "TLSRoute" {
                        RouteKind::Tls
                    } else {
                        RouteKind::Tcp
                    },
                    destination_subnets: Vec::new(),
                    backends,
                    http: Vec::new(),
                    maglev_table_size: maglev,
                });
                for h in hosts {
                    if !bound.insert(h.clone()) {
                        rit.reporter(diags).warn(&rit.path("spec"), format!("host `{h}` on listener `{}` is already taken by an earlier route; this one is not attached for it", l.name));
                        continue;
                    }
                    listener.bindings.push(Binding { host: h, route: ri });
                }
            }
            ir.listeners.push(listener);
        }
    }

    fn allowed(&self, l: &gw::Listener, gns: &str, rns: &str, route_kind: &str) -> bool {
        let ar = l.allowed_routes.clone().unwrap_or_default();
        if !ar.kinds.is_empty() && !ar.kinds.iter().any(|k| k.kind == route_kind) {
            return false;
        }
        let ns = ar.namespaces.unwrap_or_default();
        match ns.from {
            gw::FromNamespaces::All => true,
            gw::FromNamespaces::Same => gns == rns,
            gw::FromNamespaces::Selector => {
                let labels = self
                    .index
                    .get(Kind::Namespace, "", rns)
                    .map(|i| {
                        let mut l = i.object.meta().labels.clone();
                        l.insert("kubernetes.io/metadata.name".into(), rns.to_string());
                        l
                    })
                    .unwrap_or_else(|| {
                        BTreeMap::from([("kubernetes.io/metadata.name".into(), rns.to_string())])
                    });
                ns.selector.is_some_and(|s| s.matches(&labels))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn istio_binding_narrows_to_the_more_specific_host() {
        assert_eq!(istio_bound_host("*", "a.com").as_deref(), Some("a.com"));
        assert_eq!(
            istio_bound_host("*.a.com", "x.a.com").as_deref(),
            Some("x.a.com")
        );
        assert_eq!(
            istio_bound_host("x.a.com", "*.a.com").as_deref(),
            Some("x.a.com")
        );
        assert_eq!(
            istio_bound_host("*.a.com", "*.x.a.com").as_deref(),
            Some("*.x.a.com")
        );
        assert_eq!(istio_bound_host("b.com", "a.com"), None);
        assert_eq!(istio_bound_host("*.b.com", "*.a.com"), None);
    }

    /// A Gateway with a UDP and a TCP listener on the same port, a UDPRoute and a
    /// TCPRoute naming the Gateway without a sectionName, and one Service.
    const L4_ROUTES: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: g, namespace: default}
spec:
  gatewayClassName: sluice
  addresses: [{value: 192.0.2.1}]
  listeners:
  - {name: dns-udp, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: UDPRoute
metadata: {name: u, namespace: default}
spec:
  parentRefs: [{name: g}]
  rules:
  - backendRefs:
    - {name: dns, port: 53, weight: 3}
    - {name: ghost, port: 53, weight: 1}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: t, namespace: default}
spec:
  parentRefs: [{name: g}]
  rules:
  - backendRefs: [{name: dns, port: 53}]
---
apiVersion: v1
kind: Service
metadata: {name: dns, namespace: default}
spec: {selector: {app: dns}, ports: [{port: 53, protocol: UDP}]}
---
apiVersion: v1
kind: Pod
metadata: {name: dns-0, namespace: default, labels: {app: dns}}
status: {podIP: 10.0.0.53}
"#;

    #[test]
    fn udp_listeners_bind_udproutes_and_tcp_listeners_tcproutes() {
        let mut loaded = crate::load::Loaded::default();
        crate::load::load_str("l4.yaml", L4_ROUTES, &mut loaded);
        let c = crate::compile::build(loaded);
        let errors: Vec<String> = crate::compile::diagnostics(&c)
            .iter()
            .filter(|d| d.is_error())
            .map(|d| d.to_string())
            .collect();
        assert!(errors.is_empty(), "{errors:?}");
        let ir = c.expect("compiles").ir;
        let route_of = |proto: L4| {
            let l = ir
                .listeners
                .iter()
                .find(|l| l.port == 53 && l.protocol == proto)
                .expect("listener");
            assert_eq!(l.bindings.len(), 1, "{l:?}");
            assert_eq!(l.bindings[0].host, "*");
            &ir.routes[l.bindings[0].route]
        };
        let udp = route_of(L4::Udp);
        assert_eq!(udp.name, "UDPRoute default/u");
        assert_eq!(udp.kind, RouteKind::Tcp, "opaque L4");
        let w: Vec<u32> = udp.backends.iter().map(|b| b.weight).collect();
        assert_eq!(w, [3, 1]);
        assert_eq!(
            udp.backends[0].target,
            BackendTarget::Endpoints(vec!["10.0.0.53:53".parse().expect("addr")])
        );
        // The missing Service keeps its weight: its quarter of the flows is rejected.
        assert!(matches!(udp.backends[1].target, BackendTarget::Invalid(_)));
        assert_eq!(route_of(L4::Tcp).name, "TCPRoute default/t");

        // The dataplane table: UDP port 53 reaches the UDPRoute, ~1/4 reject slots.
        let t = tables::listener_table(&ir).expect("table");
        use sluice_dataplane::tables::listeners::proto;
        let l = t
            .lookup("192.0.2.1".parse().expect("ip"), 53, proto::UDP)
            .expect("UDP listener");
        let r = t.route(l.route(b"").expect("route")).expect("route");
        assert_eq!(&*r.name, "UDPRoute default/u");
        let picks: Vec<sluice_dataplane::tables::maglev::Pick> = (40000..40400u16)
            .map(|p| {
                r.pick(
                    format!("198.51.100.1:{p}").parse().expect("src"),
                    "192.0.2.1:53".parse().expect("dst"),
                    17,
                )
            })
            .collect();
        let rejected = picks
            .iter()
            .filter(|p| **p == sluice_dataplane::tables::maglev::Pick::Reject)
            .count();
        assert!((60..140).contains(&rejected), "{rejected} of 400 rejected");
    }
}
