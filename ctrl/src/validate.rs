//! Semantic checks across objects: references, TLS mode requirements, protocol values,
//! hostname and CIDR syntax, selectors, ports, weights, duplicates and conflicting
//! listeners. Every problem is reported (not only the first), each with file, line,
//! object and field path.
//!
//! What is an error and what a warning: anything that makes the intent unclear or a
//! listener unusable is an error (the whole config is rejected). A backend that does not
//! resolve (missing Service, no endpoints, unknown subset, cross-namespace reference
//! without a ReferenceGrant) is a warning: per seed 004 such a backend keeps its weight
//! and its share of connections is actively rejected.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use ipnet::IpNet;

use crate::diag::{Diagnostic, Reporter};
use crate::load::{Item, Loaded};
use crate::model::gateway_api::{self as gw, GatewayTlsMode};
use crate::model::istio::{self, TlsMode};
use crate::model::meta::{IntOrString, LabelSelector, SelectorOperator};
use crate::model::{Kind, Object};

/// Largest weight accepted on a route destination or backendRef.
pub const MAX_WEIGHT: i64 = 1_000_000;
/// Most backendRefs in one TCPRoute/UDPRoute/TLSRoute rule.
pub const MAX_BACKEND_REFS: usize = 16;

/// Istio `Port.protocol` values (seed 000).
pub const ISTIO_PROTOCOLS: &[&str] = &[
    "HTTP", "HTTPS", "GRPC", "GRPC-WEB", "HTTP2", "MONGO", "TCP", "TLS",
];
/// Gateway API core/extended listener protocols.
pub const GATEWAY_PROTOCOLS: &[&str] = &["HTTP", "HTTPS", "TLS", "TCP", "UDP"];

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
    listeners: HashMap<(&'a str, &'a str), GatewayListeners<'a>>,
}

/// A Gateway's listeners (indices into `spec.listeners`, in order) by name and by port.
#[derive(Debug, Default)]
struct GatewayListeners<'a> {
    by_name: HashMap<&'a str, Vec<usize>>,
    by_port: HashMap<u32, Vec<usize>>,
}

impl<'a> Index<'a> {
    /// Indexes the loaded items (the first of duplicates wins; duplicates are reported
    /// by [`validate`]).
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
    fn defines_subset(&self, ns: &str, svc: &str, subset: &str) -> bool {
        self.rules.get(&(ns, svc)).is_some_and(|rs| {
            rs.iter()
                .any(|dr| dr.subsets.iter().any(|s| s.name == subset))
        })
    }
}

/// Runs every check; appends diagnostics to `loaded.diagnostics`.
pub fn validate(loaded: &mut Loaded) {
    let mut out = Vec::new();
    {
        let items = &loaded.items;
        let index = Index::new(items);
        check_duplicates(items, &mut out);
        let appliances: Vec<&Item> = items
            .iter()
            .filter(|i| i.object.kind() == Kind::Appliance)
            .collect();
        for extra in appliances.iter().skip(1) {
            extra.reporter(&mut out).error(
                &extra.path("metadata.name"),
                "only one Appliance may be given",
            );
        }
        for it in items {
            let mut r = it.reporter(&mut out);
            if it.object.meta().name.is_empty() {
                let field = match it.object.format() {
                    crate::model::Format::Kubernetes => "metadata.name",
                    crate::model::Format::Ligato => "name",
                    crate::model::Format::Consul => "id.name",
                };
                r.error(&it.path(field), "missing name");
            }
            match &it.object {
                Object::IstioGateway(g) => istio_gateway(it, &g.spec, &index, &mut r),
                Object::VirtualService(v) => virtual_service(it, &v.spec, &index, &mut r),
                Object::DestinationRule(d) => destination_rule(it, &d.spec, &mut r),
                Object::Gateway(g) => gateway(it, &g.spec, &index, &mut r),
                Object::TlsRoute(t) => {
                    route_parents(it, &t.spec.parent_refs, "TLSRoute", &index, &mut r);
                    for (i, h) in t.spec.hostnames.iter().enumerate() {
                        hostname(it, &format!("spec.hostnames[{i}]"), h, &mut r);
                    }
                    route_rules(it, &t.spec.rules, "TLSRoute", &index, &mut r);
                }
                Object::TcpRoute(t) => {
                    route_parents(it, &t.spec.parent_refs, "TCPRoute", &index, &mut r);
                    route_rules(it, &t.spec.rules, "TCPRoute", &index, &mut r);
                }
                Object::UdpRoute(u) => {
                    route_parents(it, &u.spec.parent_refs, "UDPRoute", &index, &mut r);
                    route_rules(it, &u.spec.rules, "UDPRoute", &index, &mut r);
                }
                Object::NetworkPolicy(p) => network_policy(it, &p.spec, &mut r),
                Object::Appliance(a) => appliance(it, &a.spec, &mut r),
                Object::Pod(p) => {
                    for (i, ip) in p.spec.ips().iter().enumerate() {
                        if ip.parse::<IpAddr>().is_err() {
                            r.error(
                                &it.path(&format!("status.podIPs[{i}]")),
                                format!("`{ip}` is not an IP address"),
                            );
                        }
                    }
                    let mut names = BTreeSet::new();
                    for (c, ct) in p.spec.spec.containers.iter().enumerate() {
                        for (j, port) in ct.ports.iter().enumerate() {
                            let at = format!("spec.containers[{c}].ports[{j}]");
                            port_number(
                                it,
                                &format!("{at}.containerPort"),
                                port.container_port,
                                &mut r,
                            );
                            if let Some(n) = &port.name {
                                if !names.insert(n.clone()) {
                                    r.error(
                                        &it.path(&format!("{at}.name")),
                                        format!("duplicate port name `{n}` in the pod"),
                                    );
                                }
                            }
                        }
                    }
                }
                Object::Service(s) => {
                    let mut names = BTreeSet::new();
                    for (i, p) in s.spec.ports.iter().enumerate() {
                        port_number(it, &format!("spec.ports[{i}].port"), p.port, &mut r);
                        if let Some(IntOrString::Int(n)) = &p.target_port {
                            port_number(it, &format!("spec.ports[{i}].targetPort"), *n, &mut r);
                        }
                        let name = p.name.clone().unwrap_or_default();
                        if !names.insert(name.clone()) {
                            r.error(
                                &it.path(&format!("spec.ports[{i}].name")),
                                format!("duplicate service port name `{name}`"),
                            );
                        }
                    }
                }
                Object::Secret(s) if s.spec.kind == "kubernetes.io/tls" => {
                    for key in ["tls.crt", "tls.key"] {
                        if !s.spec.entries.contains_key(key) {
                            r.error(
                                &it.path("data"),
                                format!("a kubernetes.io/tls Secret needs `{key}`"),
                            );
                        }
                    }
                }
                _ => {}
            }
            if matches!(it.object.kind(), Kind::Gateway | Kind::IstioGateway) {
                let meta = it.object.meta();
                if let Err(e) = crate::compile::ir::transparent_by_annotation(&meta.annotations) {
                    r.error(
                        &it.path("metadata.annotations")
                            .key(crate::compile::ir::SOURCE_NAT_ANNOTATION),
                        e,
                    );
                }
            }
        }
    }
    loaded.diagnostics.extend(out);
}

fn check_duplicates(items: &[Item], out: &mut Vec<Diagnostic>) {
    let mut seen: HashMap<(Kind, String, String), &Item> = HashMap::new();
    for it in items {
        let m = it.object.meta();
        if m.name.is_empty() {
            continue;
        }
        let ns = if it.object.kind().namespaced() {
            m.namespace().to_string()
        } else {
            String::new()
        };
        let key = (it.object.kind(), ns, m.name.clone());
        match seen.get(&key) {
            Some(first) => {
                let p = first.origin.locate(&first.base);
                it.reporter(out).error(
                    &it.path("metadata.name"),
                    format!(
                        "duplicate object: {} is already defined at {}:{}:{}",
                        it.object.label(),
                        first.origin.file,
                        p.line,
                        p.col
                    ),
                );
            }
            None => {
                seen.insert(key, it);
            }
        }
    }
}

fn port_number(it: &Item, at: &str, n: i64, r: &mut Reporter) {
    if !(1..=65535).contains(&n) {
        r.error(&it.path(at), format!("port {n} is out of range 1..65535"));
    }
}

/// Checks a Gateway API `Hostname`: a DNS subdomain, optionally prefixed with `*.`; no
/// IP address, no port, lower case.
pub fn gateway_hostname_error(h: &str) -> Option<String> {
    let bare = h.strip_prefix("*.").unwrap_or(h);
    if h.parse::<IpAddr>().is_ok() {
        return Some(format!("`{h}` is an IP address; a hostname is required"));
    }
    dns_subdomain_error(bare).map(|e| format!("`{h}` is not a valid hostname: {e}"))
}

fn dns_subdomain_error(s: &str) -> Option<String> {
    if s.is_empty() {
        return Some("empty".into());
    }
    if s.len() > 253 {
        return Some("longer than 253 characters".into());
    }
    for label in s.split('.') {
        if label.is_empty() {
            return Some("empty label".into());
        }
        if label.len() > 63 {
            return Some(format!("label `{label}` is longer than 63 characters"));
        }
        if label.contains('*') {
            return Some("a wildcard is only allowed as the whole leftmost label `*.`".into());
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Some(format!(
                "label `{label}` may hold only lower-case letters, digits and `-`"
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Some(format!("label `{label}` starts or ends with `-`"));
        }
    }
    None
}

fn hostname(it: &Item, at: &str, h: &str, r: &mut Reporter) {
    if let Some(e) = gateway_hostname_error(h) {
        r.error(&it.path(at), e);
    }
}

/// Checks an Istio `Server.hosts` / VirtualService host entry: `[namespace/]host` where
/// namespace is `*`, `.`, `~` or a DNS label, and host is `*`, `*.suffix` or a name.
pub fn istio_host_error(entry: &str, allow_namespace: bool) -> Option<String> {
    let (ns, host) = match entry.split_once('/') {
        Some((ns, host)) if allow_namespace => (Some(ns), host),
        Some(_) => return Some(format!("`{entry}`: a namespace prefix is not allowed here")),
        None => (None, entry),
    };
    if let Some(ns) = ns {
        let ok = matches!(ns, "*" | "." | "~")
            || (!ns.is_empty()
                && ns.len() <= 63
                && dns_subdomain_error(ns).is_none()
                && !ns.contains('.'));
        if !ok {
            return Some(format!(
                "`{entry}`: namespace `{ns}` must be `*`, `.`, `~` or a namespace name"
            ));
        }
    }
    if host == "*" {
        return None;
    }
    let bare = host.strip_prefix("*.").unwrap_or(host);
    let lowered = bare.to_ascii_lowercase();
    if host.parse::<IpAddr>().is_ok() {
        return None; // Istio accepts IPs in VirtualService hosts.
    }
    dns_subdomain_error(&lowered).map(|e| format!("`{entry}`: host `{host}` is invalid: {e}"))
}

fn selector(it: &Item, at: &str, s: &LabelSelector, r: &mut Reporter) {
    for (i, e) in s.match_expressions.iter().enumerate() {
        let here = format!("{at}.matchExpressions[{i}]");
        match e.operator {
            SelectorOperator::In | SelectorOperator::NotIn if e.values.is_empty() => r.error(
                &it.path(&format!("{here}.values")),
                format!("operator {:?} needs at least one value", e.operator),
            ),
            SelectorOperator::Exists | SelectorOperator::DoesNotExist if !e.values.is_empty() => r
                .error(
                    &it.path(&format!("{here}.values")),
                    format!("operator {:?} takes no values", e.operator),
                ),
            _ => {}
        }
        if e.key.is_empty() {
            r.error(&it.path(&format!("{here}.key")), "empty label key");
        }
    }
}

/// Parses a CIDR; a prefix with host bits set is normalised (warning), garbage is an
/// error. Returns the normalised network.
pub fn cidr(it: &Item, at: &str, s: &str, r: &mut Reporter) -> Option<IpNet> {
    match s.parse::<IpNet>() {
        Ok(n) => {
            if n.trunc() != n {
                r.warn(
                    &it.path(at),
                    format!("`{s}` has host bits set; normalised to `{}`", n.trunc()),
                );
            }
            Some(n.trunc())
        }
        Err(_) => {
            r.error(
                &it.path(at),
                format!("`{s}` is not a CIDR (like 10.0.0.0/8 or fd00::/8)"),
            );
            None
        }
    }
}

fn network_policy(it: &Item, spec: &crate::model::netpol::NetworkPolicySpec, r: &mut Reporter) {
    let prefix = match it.object.format() {
        crate::model::Format::Ligato => "",
        _ => "spec.",
    };
    selector(it, &format!("{prefix}podSelector"), &spec.pod_selector, r);
    let check_peers = |peers: &[crate::model::netpol::NetworkPolicyPeer],
                       at: &str,
                       r: &mut Reporter| {
        for (i, p) in peers.iter().enumerate() {
            let here = format!("{at}[{i}]");
            if let Some(s) = &p.pod_selector {
                selector(it, &format!("{here}.podSelector"), s, r);
            }
            if let Some(s) = &p.namespace_selector {
                selector(it, &format!("{here}.namespaceSelector"), s, r);
            }
            if let Some(b) = &p.ip_block {
                if p.pod_selector.is_some() || p.namespace_selector.is_some() {
                    r.error(
                        &it.path(&format!("{here}.ipBlock")),
                        "ipBlock cannot be combined with podSelector or namespaceSelector in one peer",
                    );
                }
                let outer = cidr(it, &format!("{here}.ipBlock.cidr"), &b.cidr, r);
                for (j, e) in b.except.iter().enumerate() {
                    let eat = format!("{here}.ipBlock.except[{j}]");
                    if let (Some(outer), Some(inner)) = (outer, cidr(it, &eat, e, r)) {
                        if !outer.contains(&inner) {
                            r.error(
                                &it.path(&eat),
                                format!("except `{e}` is not inside cidr `{}`", b.cidr),
                            );
                        }
                    }
                }
            }
            if p.pod_selector.is_none() && p.namespace_selector.is_none() && p.ip_block.is_none() {
                r.error(
                    &it.path(&here),
                    "a peer needs podSelector, namespaceSelector or ipBlock",
                );
            }
        }
    };
    for (i, rule) in spec.ingress.iter().flatten().enumerate() {
        check_peers(&rule.from, &format!("{prefix}ingress[{i}].from"), r);
        policy_ports(it, &rule.ports, &format!("{prefix}ingress[{i}].ports"), r);
    }
    for (i, rule) in spec.egress.iter().flatten().enumerate() {
        check_peers(&rule.to, &format!("{prefix}egress[{i}].to"), r);
        policy_ports(it, &rule.ports, &format!("{prefix}egress[{i}].ports"), r);
    }
}

fn policy_ports(
    it: &Item,
    ports: &[crate::model::netpol::NetworkPolicyPort],
    at: &str,
    r: &mut Reporter,
) {
    for (i, p) in ports.iter().enumerate() {
        let here = format!("{at}[{i}]");
        match (&p.port, p.end_port) {
            (Some(IntOrString::Int(n)), end) => {
                port_number(it, &format!("{here}.port"), *n, r);
                if let Some(e) = end {
                    if e < *n || e > 65535 {
                        r.error(
                            &it.path(&format!("{here}.endPort")),
                            format!("endPort {e} must be >= port {n} and <= 65535"),
                        );
                    }
                }
            }
            (Some(IntOrString::Str(name)), end) => {
                if name.is_empty()
                    || name.len() > 15
                    || !name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    || !name.bytes().any(|b| b.is_ascii_lowercase())
                {
                    r.error(&it.path(&format!("{here}.port")), format!("`{name}` is not a valid port name (IANA_SVC_NAME: 1-15 lower-case letters, digits, `-`)"));
                }
                if end.is_some() {
                    r.error(
                        &it.path(&format!("{here}.endPort")),
                        "endPort needs a numeric port, not a named one",
                    );
                }
            }
            (None, Some(_)) => r.error(
                &it.path(&format!("{here}.endPort")),
                "endPort needs a numeric port",
            ),
            (None, None) => {}
        }
    }
}

fn weight(it: &Item, at: &str, w: Option<i64>, r: &mut Reporter) {
    if let Some(w) = w {
        if !(0..=MAX_WEIGHT).contains(&w) {
            r.error(
                &it.path(at),
                format!("weight {w} is out of range 0..{MAX_WEIGHT}"),
            );
        }
    }
}

/// What the servers of one Istio Gateway bound so far on a (bind, port): the protocol
/// class, and each host with how it is handled (plain, passthrough, terminate).
type PortUse = (String, BTreeMap<String, &'static str>);

fn istio_gateway(it: &Item, spec: &istio::GatewaySpec, index: &Index, r: &mut Reporter) {
    if spec.servers.is_empty() {
        r.error(
            &it.path("spec.servers"),
            "a Gateway needs at least one server",
        );
    }
    let ns = it.object.meta().namespace().to_string();
    let mut names = BTreeSet::new();
    // (bind, port) -> (protocol class, hosts seen)
    let mut ports: BTreeMap<(String, u32), PortUse> = BTreeMap::new();
    for (i, s) in spec.servers.iter().enumerate() {
        let at = format!("spec.servers[{i}]");
        if !(1..=65535).contains(&s.port.number) {
            r.error(
                &it.path(&format!("{at}.port.number")),
                format!("port {} is out of range 1..65535", s.port.number),
            );
        }
        let proto = s.port.protocol.to_ascii_uppercase();
        if !ISTIO_PROTOCOLS.contains(&proto.as_str()) {
            r.error(
                &it.path(&format!("{at}.port.protocol")),
                format!(
                    "unknown protocol `{}` (expected one of {})",
                    s.port.protocol,
                    ISTIO_PROTOCOLS.join(", ")
                ),
            );
        }
        if s.port.name.is_empty() {
            r.error(
                &it.path(&format!("{at}.port.name")),
                "port name is required",
            );
        }
        if let Some(n) = &s.name {
            if !names.insert(n.clone()) {
                r.error(
                    &it.path(&format!("{at}.name")),
                    format!("duplicate server name `{n}`"),
                );
            }
        }
        if let Some(b) = &s.bind {
            if b.parse::<IpAddr>().is_err() {
                r.error(
                    &it.path(&format!("{at}.bind")),
                    format!("bind `{b}` must be an IP address on an appliance"),
                );
            }
        }
        if s.hosts.is_empty() {
            r.error(
                &it.path(&format!("{at}.hosts")),
                "a server needs at least one host",
            );
        }
        for (j, h) in s.hosts.iter().enumerate() {
            if let Some(e) = istio_host_error(h, true) {
                r.error(&it.path(&format!("{at}.hosts[{j}]")), e);
            }
        }
        if let Some(tls) = &s.tls {
            server_tls(it, &format!("{at}.tls"), tls, &proto, &ns, index, r);
        } else if matches!(proto.as_str(), "HTTPS" | "TLS") {
            r.error(
                &it.path(&format!("{at}.tls")),
                format!("a {proto} server needs tls settings"),
            );
        }
        let class = match proto.as_str() {
            "HTTP" | "HTTP2" | "GRPC" | "GRPC-WEB" => "HTTP",
            "HTTPS" | "TLS" => "TLS",
            _ => "TCP",
        };
        let key = (s.bind.clone().unwrap_or_default(), s.port.number);
        let entry = ports
            .entry(key)
            .or_insert_with(|| (class.to_string(), BTreeMap::new()));
        if entry.0 != class {
            r.error(&it.path(&format!("{at}.port")), format!("port {} is already used by a {} server of this gateway; {class} cannot share it", s.port.number, entry.0));
        } else if class == "TCP" && !entry.1.is_empty() {
            r.error(
                &it.path(&format!("{at}.port")),
                format!(
                    "two TCP servers on port {}: TCP cannot be told apart by host",
                    s.port.number
                ),
            );
        }
        let handling = match s.tls.as_ref().map(|t| t.mode) {
            _ if class != "TLS" => "plain",
            Some(TlsMode::Passthrough | TlsMode::AutoPassthrough) | None => "passthrough",
            Some(_) => "terminate",
        };
        for h in &s.hosts {
            if class == "TCP" {
                break;
            }
            match entry.1.insert(h.clone(), handling) {
                Some(prev) if prev != handling => r.error(
                    &it.path(&format!("{at}.hosts")),
                    format!(
                        "host `{h}` is both {prev} and {handling} on port {}: one TLS port cannot pass a name through and terminate it",
                        s.port.number
                    ),
                ),
                Some(_) => r.error(
                    &it.path(&format!("{at}.hosts")),
                    format!("host `{h}` appears twice on port {}", s.port.number),
                ),
                None => {}
            }
        }
        if class == "TCP" {
            entry.1.insert("*".into(), handling);
        }
    }
}

fn server_tls(
    it: &Item,
    at: &str,
    tls: &istio::ServerTlsSettings,
    proto: &str,
    ns: &str,
    index: &Index,
    r: &mut Reporter,
) {
    let p = |f: &str| it.path(&format!("{at}.{f}"));
    let has_files = tls.server_certificate.is_some()
        || tls.private_key.is_some()
        || tls.ca_certificates.is_some();
    if tls.https_redirect && proto != "HTTP" {
        r.error(
            &p("httpsRedirect"),
            "httpsRedirect applies to HTTP servers only",
        );
    }
    if tls.https_redirect && proto == "HTTP" {
        return; // An HTTP server with httpsRedirect needs nothing else.
    }
    if let Some(cred) = &tls.credential_name {
        if has_files {
            r.error(
                &p("credentialName"),
                "credentialName excludes serverCertificate, privateKey and caCertificates",
            );
        }
        if index.get(Kind::Secret, ns, cred).is_none() {
            r.error(&p("credentialName"), format!("Secret {ns}/{cred} not found (credentialName refers to a Secret in the gateway's namespace)"));
        }
    }
    match tls.mode {
        TlsMode::Simple | TlsMode::Mutual | TlsMode::OptionalMutual => {
            if tls.credential_name.is_none() {
                if tls.server_certificate.is_none() {
                    r.error(
                        &p("serverCertificate"),
                        format!(
                            "mode {} needs serverCertificate (or credentialName)",
                            tls.mode.as_str()
                        ),
                    );
                }
                if tls.private_key.is_none() {
                    r.error(
                        &p("privateKey"),
                        format!(
                            "mode {} needs privateKey (or credentialName)",
                            tls.mode.as_str()
                        ),
                    );
                }
                if matches!(tls.mode, TlsMode::Mutual | TlsMode::OptionalMutual)
                    && tls.ca_certificates.is_none()
                {
                    r.error(
                        &p("caCertificates"),
                        format!(
                            "mode {} needs caCertificates (or credentialName with a CA)",
                            tls.mode.as_str()
                        ),
                    );
                }
            } else if let (Some(cred), TlsMode::Mutual | TlsMode::OptionalMutual) =
                (&tls.credential_name, tls.mode)
            {
                let has_ca = |it: &Item| match &it.object {
                    Object::Secret(s) => ["ca.crt", "cacert"]
                        .iter()
                        .any(|k| s.spec.entries.contains_key(*k)),
                    _ => false,
                };
                let ca_secret = index.get(Kind::Secret, ns, &format!("{cred}-cacert"));
                let main = index.get(Kind::Secret, ns, cred);
                if main.is_some() && !main.is_some_and(has_ca) && !ca_secret.is_some_and(has_ca) {
                    r.error(&p("credentialName"), format!("mode {} needs a CA: Secret {ns}/{cred} has no `ca.crt`/`cacert` and there is no {cred}-cacert Secret", tls.mode.as_str()));
                }
            }
        }
        TlsMode::IstioMutual => {
            if has_files || tls.credential_name.is_some() {
                r.error(&p("mode"), "ISTIO_MUTUAL uses Istio's certificates: serverCertificate, privateKey, caCertificates and credentialName must be empty");
            }
        }
        TlsMode::Passthrough | TlsMode::AutoPassthrough => {
            if proto == "HTTPS" {
                r.error(
                    &p("mode"),
                    format!(
                        "mode {} on an HTTPS server; use protocol TLS for passthrough",
                        tls.mode.as_str()
                    ),
                );
            }
        }
    }
    if tls.min_protocol_version != istio::TlsProtocol::Auto
        && tls.max_protocol_version != istio::TlsProtocol::Auto
        && tls.min_protocol_version > tls.max_protocol_version
    {
        r.error(
            &p("minProtocolVersion"),
            "minProtocolVersion is above maxProtocolVersion",
        );
    }
}

/// Splits an Istio gateway reference `[ns/]name` (default namespace: the VirtualService's).
pub fn split_gateway_ref<'a>(r: &'a str, own_ns: &'a str) -> (&'a str, &'a str) {
    match r.split_once('/') {
        Some((ns, name)) => (ns, name),
        None => (own_ns, r),
    }
}

/// Resolves an Istio destination host to (namespace, service name): short names are in
/// `own_ns`; `name.ns`, `name.ns.svc` and `name.ns.svc.<domain>` are fully qualified.
pub fn service_of_host<'a>(host: &'a str, own_ns: &'a str) -> (&'a str, &'a str) {
    let parts: Vec<&str> = host.split('.').collect();
    match parts.as_slice() {
        [name] => (own_ns, name),
        [name, ns] | [name, ns, "svc", ..] => (ns, name),
        _ => (own_ns, host),
    }
}

fn virtual_service(it: &Item, spec: &istio::VirtualServiceSpec, index: &Index, r: &mut Reporter) {
    let ns = it.object.meta().namespace().to_string();
    if spec.hosts.is_empty() {
        r.error(
            &it.path("spec.hosts"),
            "a VirtualService needs at least one host",
        );
    }
    for (i, h) in spec.hosts.iter().enumerate() {
        if let Some(e) = istio_host_error(h, false) {
            r.error(&it.path(&format!("spec.hosts[{i}]")), e);
        }
    }
    let gateway_refs = |list: &[String], at: &str, r: &mut Reporter| {
        for (i, g) in list.iter().enumerate() {
            if g == "mesh" {
                continue;
            }
            let (gns, name) = split_gateway_ref(g, &ns);
            if index.get(Kind::IstioGateway, gns, name).is_none() {
                r.error(
                    &it.path(&format!("{at}[{i}]")),
                    format!("Gateway {gns}/{name} not found"),
                );
            }
        }
    };
    gateway_refs(&spec.gateways, "spec.gateways", r);
    let dests = |route: &[istio::RouteDestination], at: &str, r: &mut Reporter| {
        for (i, d) in route.iter().enumerate() {
            let here = format!("{at}[{i}]");
            weight(it, &format!("{here}.weight"), d.weight, r);
            destination(
                it,
                &format!("{here}.destination"),
                &d.destination,
                &ns,
                index,
                r,
            );
        }
        if route.len() > 1 && route.iter().all(|d| d.weight.is_none()) {
            r.warn(
                &it.path(at),
                "several destinations without weights: each gets weight 1 (an equal share)",
            );
        }
    };
    for (i, h) in spec.http.iter().enumerate() {
        let at = format!("spec.http[{i}]");
        for (j, m) in h.matches.iter().enumerate() {
            gateway_refs(&m.gateways, &format!("{at}.match[{j}].gateways"), r);
            for (field, sm) in [("uri", &m.uri), ("authority", &m.authority)] {
                if let Some(sm) = sm {
                    if sm.exact.is_some() && sm.prefix.is_some() {
                        r.error(
                            &it.path(&format!("{at}.match[{j}].{field}")),
                            "set exactly one of exact and prefix",
                        );
                    }
                }
            }
        }
        if h.route.is_empty() && h.redirect.is_none() {
            r.error(&it.path(&at), "an http route needs `route` or `redirect`");
        }
        if !h.route.is_empty() && h.redirect.is_some() {
            r.error(
                &it.path(&format!("{at}.redirect")),
                "`redirect` and `route` are mutually exclusive",
            );
        }
        dests(&h.route, &format!("{at}.route"), r);
    }
    for (i, t) in spec.tls.iter().enumerate() {
        let at = format!("spec.tls[{i}]");
        if t.matches.is_empty() {
            r.error(
                &it.path(&format!("{at}.match")),
                "a tls route needs at least one match with sniHosts",
            );
        }
        for (j, m) in t.matches.iter().enumerate() {
            let mat = format!("{at}.match[{j}]");
            if m.sni_hosts.is_empty() {
                r.error(&it.path(&format!("{mat}.sniHosts")), "sniHosts is required");
            }
            for (k, h) in m.sni_hosts.iter().enumerate() {
                if let Some(e) = istio_host_error(h, false) {
                    r.error(&it.path(&format!("{mat}.sniHosts[{k}]")), e);
                }
            }
            for (k, c) in m.destination_subnets.iter().enumerate() {
                cidr(it, &format!("{mat}.destinationSubnets[{k}]"), c, r);
            }
            gateway_refs(&m.gateways, &format!("{mat}.gateways"), r);
        }
        if t.route.is_empty() {
            r.error(
                &it.path(&format!("{at}.route")),
                "a tls route needs at least one destination",
            );
        }
        dests(&t.route, &format!("{at}.route"), r);
    }
    for (i, t) in spec.tcp.iter().enumerate() {
        let at = format!("spec.tcp[{i}]");
        for (j, m) in t.matches.iter().enumerate() {
            let mat = format!("{at}.match[{j}]");
            for (k, c) in m.destination_subnets.iter().enumerate() {
                cidr(it, &format!("{mat}.destinationSubnets[{k}]"), c, r);
            }
            if !m.source_labels.is_empty() {
                r.warn(
                    &it.path(&format!("{mat}.sourceLabels")),
                    "sourceLabels selects sidecar workloads; ignored on an appliance",
                );
            }
            gateway_refs(&m.gateways, &format!("{mat}.gateways"), r);
        }
        if t.route.is_empty() {
            r.error(
                &it.path(&format!("{at}.route")),
                "a tcp route needs at least one destination",
            );
        }
        dests(&t.route, &format!("{at}.route"), r);
    }
}

fn destination(
    it: &Item,
    at: &str,
    d: &istio::Destination,
    ns: &str,
    index: &Index,
    r: &mut Reporter,
) {
    if d.host.is_empty() {
        r.error(
            &it.path(&format!("{at}.host")),
            "destination host is required",
        );
        return;
    }
    let (sns, name) = service_of_host(&d.host, ns);
    let Some(svc) = index.get(Kind::Service, sns, name) else {
        r.warn(&it.path(&format!("{at}.host")), format!("Service {sns}/{name} not found: this destination is invalid and its share of connections will be rejected"));
        return;
    };
    if let (Some(port), Object::Service(s)) = (&d.port, &svc.object) {
        if !s
            .spec
            .ports
            .iter()
            .any(|p| p.port == i64::from(port.number))
        {
            r.error(
                &it.path(&format!("{at}.port.number")),
                format!("Service {sns}/{name} has no port {}", port.number),
            );
        }
    } else if let Object::Service(s) = &svc.object {
        if s.spec.ports.len() > 1 {
            r.warn(
                &it.path(&format!("{at}.port")),
                format!("Service {sns}/{name} has several ports and destination.port.number is not set: this destination is invalid and its share of connections will be rejected"),
            );
        }
    }
    if let Some(subset) = &d.subset {
        if !index.defines_subset(sns, name, subset) {
            r.warn(&it.path(&format!("{at}.subset")), format!("no DestinationRule defines subset `{subset}` of {sns}/{name}: this destination is invalid and its share of connections will be rejected"));
        }
    }
}

/// Whether `n` is prime (Maglev table sizes must be).
pub fn is_prime(n: u64) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2u64;
    while d.saturating_mul(d) <= n {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 1;
    }
    true
}

fn maglev_size(it: &Item, at: &str, size: Option<u64>, r: &mut Reporter) {
    if let Some(s) = size {
        if !is_prime(s) || s > 5_000_011 {
            r.error(
                &it.path(at),
                format!("Maglev table size {s} must be a prime no larger than 5000011"),
            );
        }
    }
}

fn destination_rule(it: &Item, spec: &istio::DestinationRuleSpec, r: &mut Reporter) {
    if spec.host.is_empty() {
        r.error(&it.path("spec.host"), "host is required");
    }
    let lb = |tp: &Option<istio::TrafficPolicy>, at: &str, r: &mut Reporter| {
        if let Some(lb) = tp.as_ref().and_then(|t| t.load_balancer.as_ref()) {
            if let Some(s) = &lb.simple {
                r.warn(&it.path(&format!("{at}.loadBalancer.simple")), format!("loadBalancer.simple {s} is not implemented: sluice always balances with Maglev"));
            }
            if let Some(m) = lb.consistent_hash.as_ref().and_then(|c| c.maglev.as_ref()) {
                maglev_size(
                    it,
                    &format!("{at}.loadBalancer.consistentHash.maglev.tableSize"),
                    m.table_size,
                    r,
                );
            }
        }
    };
    lb(&spec.traffic_policy, "spec.trafficPolicy", r);
    let mut names = BTreeSet::new();
    for (i, s) in spec.subsets.iter().enumerate() {
        if s.name.is_empty() {
            r.error(
                &it.path(&format!("spec.subsets[{i}].name")),
                "subset name is required",
            );
        } else if !names.insert(s.name.clone()) {
            r.error(
                &it.path(&format!("spec.subsets[{i}].name")),
                format!("duplicate subset `{}`", s.name),
            );
        }
        lb(
            &s.traffic_policy,
            &format!("spec.subsets[{i}].trafficPolicy"),
            r,
        );
    }
}

fn gateway(it: &Item, spec: &gw::GatewaySpec, index: &Index, r: &mut Reporter) {
    let ns = it.object.meta().namespace().to_string();
    if spec.listeners.is_empty() {
        r.error(
            &it.path("spec.listeners"),
            "a Gateway needs at least one listener",
        );
    }
    for (i, a) in spec.addresses.iter().enumerate() {
        let kind = a.kind.as_deref().unwrap_or("IPAddress");
        if kind == "IPAddress" && a.value.parse::<IpAddr>().is_err() {
            r.error(
                &it.path(&format!("spec.addresses[{i}].value")),
                format!("`{}` is not an IP address", a.value),
            );
        } else if kind != "IPAddress" {
            r.error(
                &it.path(&format!("spec.addresses[{i}].type")),
                format!("address type `{kind}` is not supported on an appliance (use IPAddress)"),
            );
        }
    }
    let mut names = BTreeSet::new();
    // (port, transport) -> (protocol class, hostnames).
    let mut seen: BTreeMap<(u32, &str), (String, BTreeSet<String>)> = BTreeMap::new();
    for (i, l) in spec.listeners.iter().enumerate() {
        let at = format!("spec.listeners[{i}]");
        if l.name.is_empty() {
            r.error(&it.path(&format!("{at}.name")), "listener name is required");
        } else if !names.insert(l.name.clone()) {
            r.error(
                &it.path(&format!("{at}.name")),
                format!("duplicate listener name `{}`", l.name),
            );
        }
        if !(1..=65535).contains(&l.port) {
            r.error(
                &it.path(&format!("{at}.port")),
                format!("port {} is out of range 1..65535", l.port),
            );
        }
        if !GATEWAY_PROTOCOLS.contains(&l.protocol.as_str()) {
            r.error(
                &it.path(&format!("{at}.protocol")),
                format!(
                    "unknown protocol `{}` (expected one of {})",
                    l.protocol,
                    GATEWAY_PROTOCOLS.join(", ")
                ),
            );
        }
        if let Some(h) = &l.hostname {
            hostname(it, &format!("{at}.hostname"), h, r);
            if matches!(l.protocol.as_str(), "TCP" | "UDP") {
                r.warn(
                    &it.path(&format!("{at}.hostname")),
                    format!("hostname is ignored on a {} listener", l.protocol),
                );
            }
        }
        match (&l.tls, l.protocol.as_str()) {
            (None, "HTTPS" | "TLS") => r.error(
                &it.path(&format!("{at}.tls")),
                format!("a {} listener needs tls", l.protocol),
            ),
            (Some(_), "HTTP" | "TCP" | "UDP") => r.error(
                &it.path(&format!("{at}.tls")),
                format!("tls is invalid on a {} listener", l.protocol),
            ),
            (Some(tls), proto) => {
                if proto == "HTTPS" && tls.mode == GatewayTlsMode::Passthrough {
                    r.error(
                        &it.path(&format!("{at}.tls.mode")),
                        "Passthrough needs protocol TLS, not HTTPS",
                    );
                }
                if tls.mode == GatewayTlsMode::Terminate && tls.certificate_refs.is_empty() {
                    r.error(
                        &it.path(&format!("{at}.tls.certificateRefs")),
                        "mode Terminate needs at least one certificateRef",
                    );
                }
                for (j, c) in tls.certificate_refs.iter().enumerate() {
                    let cat = format!("{at}.tls.certificateRefs[{j}]");
                    let kind = c.kind.as_deref().unwrap_or("Secret");
                    let group = c.group.as_deref().unwrap_or("");
                    if kind != "Secret" || !group.is_empty() {
                        r.error(&it.path(&format!("{cat}.kind")), format!("certificateRef {group}/{kind} is not supported (only core Secrets)"));
                        continue;
                    }
                    let cns = c.namespace.clone().unwrap_or_else(|| ns.clone());
                    match index.get(Kind::Secret, &cns, &c.name) {
                        None => r.error(
                            &it.path(&format!("{cat}.name")),
                            format!("Secret {cns}/{} not found", c.name),
                        ),
                        Some(sec) => {
                            if let Object::Secret(s) = &sec.object {
                                if s.spec.kind != "kubernetes.io/tls" {
                                    r.error(&it.path(&format!("{cat}.name")), format!("Secret {cns}/{} has type `{}`; kubernetes.io/tls is required", c.name, s.spec.kind));
                                }
                            }
                        }
                    }
                    if !index.grant_allows(
                        ("gateway.networking.k8s.io", "Gateway", &ns),
                        ("", "Secret", &cns, &c.name),
                    ) {
                        r.error(&it.path(&format!("{cat}.namespace")), format!("reference to Secret {cns}/{} from namespace {ns} is not allowed: no ReferenceGrant in {cns} permits it (RefNotPermitted)", c.name));
                    }
                }
                for k in tls.options.keys() {
                    if !k.contains('/') {
                        r.error(&it.path(&format!("{at}.tls.options.{k}")), "implementation-specific options must use domain-prefixed names (example.com/my-option)");
                    }
                }
            }
            _ => {}
        }
        if let Some(ar) = &l.allowed_routes {
            if let Some(nsel) = &ar.namespaces {
                match (nsel.from, &nsel.selector) {
                    (gw::FromNamespaces::Selector, None) => r.error(
                        &it.path(&format!("{at}.allowedRoutes.namespaces.selector")),
                        "from: Selector needs a selector",
                    ),
                    (gw::FromNamespaces::Selector, Some(s)) => {
                        selector(it, &format!("{at}.allowedRoutes.namespaces.selector"), s, r)
                    }
                    _ => {}
                }
            }
            for (j, k) in ar.kinds.iter().enumerate() {
                if !matches!(
                    k.kind.as_str(),
                    "TLSRoute" | "TCPRoute" | "HTTPRoute" | "UDPRoute" | "GRPCRoute"
                ) {
                    r.error(
                        &it.path(&format!("{at}.allowedRoutes.kinds[{j}].kind")),
                        format!("unknown route kind `{}`", k.kind),
                    );
                }
            }
        }
        // Listeners on one port must be distinct by hostname and compatible by protocol;
        // a UDP listener and a TCP-based one on the same port are distinct (Gateway API:
        // "a mixture of TCP and UDP Protocol Listeners" is allowed), like DNS on 53.
        let transport = if l.protocol == "UDP" { "UDP" } else { "TCP" };
        let class = match l.protocol.as_str() {
            "HTTP" => "HTTP",
            "HTTPS" | "TLS" => "TLS",
            other => other,
        }
        .to_string();
        let entry = seen
            .entry((l.port, transport))
            .or_insert_with(|| (class.clone(), BTreeSet::new()));
        let host = l.hostname.clone().unwrap_or_default();
        if entry.0 != class {
            r.error(
                &it.path(&format!("{at}.protocol")),
                format!(
                    "conflicting listeners on port {}: {} and {}",
                    l.port, entry.0, l.protocol
                ),
            );
        } else if !entry.1.insert(host.clone()) {
            r.error(
                &it.path(&format!("{at}.hostname")),
                format!(
                    "conflicting listeners on port {}: hostname `{}` is used twice",
                    l.port,
                    if host.is_empty() { "<any>" } else { &host }
                ),
            );
        }
    }
}

fn route_parents(
    it: &Item,
    parents: &[gw::ParentReference],
    route_kind: &str,
    index: &Index,
    r: &mut Reporter,
) {
    let ns = it.object.meta().namespace().to_string();
    let prefix = if it.object.format() == crate::model::Format::Consul {
        "data.parentRefs"
    } else {
        "spec.parentRefs"
    };
    if parents.is_empty() {
        r.error(
            &it.path(prefix),
            format!("a {route_kind} needs at least one parentRef"),
        );
    }
    let mut seen = BTreeSet::new();
    for (i, p) in parents.iter().enumerate() {
        let at = format!("{prefix}[{i}]");
        if !seen.insert(p.clone()) {
            r.error(&it.path(&at), "the same parent is referenced twice");
        }
        let kind = p.kind.as_deref().unwrap_or("Gateway");
        if kind != "Gateway" {
            r.error(
                &it.path(&format!("{at}.kind")),
                format!("parent kind `{kind}` is not supported (only Gateway)"),
            );
            continue;
        }
        let gns = p.namespace.clone().unwrap_or_else(|| ns.clone());
        let Some(g) = index.get(Kind::Gateway, &gns, &p.name) else {
            r.error(
                &it.path(&format!("{at}.name")),
                format!("Gateway {gns}/{} not found", p.name),
            );
            continue;
        };
        let Object::Gateway(g) = &g.object else {
            continue;
        };
        // The listeners the parentRef selects, in order, through the Gateway's index (a
        // scan of every listener per route would make n routes on n listeners quadratic).
        let by_index = index.listeners.get(&(gns.as_str(), p.name.as_str()));
        let listeners = &g.spec.listeners;
        let picked = |ids: Option<&Vec<usize>>| -> Vec<&gw::Listener> {
            ids.into_iter()
                .flatten()
                .map(|&i| &listeners[i])
                .filter(|l| p.port.is_none_or(|port| l.port == port))
                .collect()
        };
        let matching: Vec<&gw::Listener> = match (&p.section_name, p.port, by_index) {
            (Some(s), _, Some(ix)) => picked(ix.by_name.get(s.as_str())),
            (None, Some(port), Some(ix)) => picked(ix.by_port.get(&port)),
            _ => listeners
                .iter()
                .filter(|l| p.section_name.as_ref().is_none_or(|s| &l.name == s))
                .filter(|l| p.port.is_none_or(|port| l.port == port))
                .collect(),
        };
        if let Some(s) = &p.section_name {
            let named = match by_index {
                Some(ix) => ix.by_name.contains_key(s.as_str()),
                None => listeners.iter().any(|l| &l.name == s),
            };
            if !named {
                r.error(
                    &it.path(&format!("{at}.sectionName")),
                    format!("Gateway {gns}/{} has no listener named `{s}`", p.name),
                );
                continue;
            }
        }
        if let Some(port) = p.port {
            if matching.is_empty() {
                r.error(
                    &it.path(&format!("{at}.port")),
                    format!(
                        "Gateway {gns}/{} has no listener on port {port}{}",
                        p.name,
                        p.section_name
                            .as_ref()
                            .map(|s| format!(" named `{s}`"))
                            .unwrap_or_default()
                    ),
                );
                continue;
            }
        }
        let want = listener_protocol_of(route_kind);
        if !matching.iter().any(|l| l.protocol == want) {
            // Name what the parentRef did select, and the route kind each listener takes.
            let selected: Vec<String> = matching
                .iter()
                .map(|l| match route_kind_of(&l.protocol) {
                    Some(k) => format!("`{}` is {} and takes {k}s", l.name, l.protocol),
                    None => format!("`{}` is {}", l.name, l.protocol),
                })
                .collect();
            r.error(
                &it.path(&at),
                format!(
                    "Gateway {gns}/{} has no {want} listener this {route_kind} can attach to{}",
                    p.name,
                    if selected.is_empty() {
                        String::new()
                    } else {
                        let noun = if selected.len() == 1 {
                            "listener"
                        } else {
                            "listeners"
                        };
                        format!(" ({noun} {})", selected.join(", "))
                    }
                ),
            );
        }
    }
}

/// The Gateway API listener protocol a route kind attaches to: a TLSRoute to TLS
/// listeners, a UDPRoute to UDP listeners, a TCPRoute (and Consul's) to TCP listeners.
fn listener_protocol_of(route_kind: &str) -> &'static str {
    match route_kind {
        "TLSRoute" => "TLS",
        "UDPRoute" => "UDP",
        _ => "TCP",
    }
}

/// The route kind sluice attaches to a listener of this protocol (HTTP listeners take
/// HTTPRoutes upstream, which sluice does not read).
fn route_kind_of(protocol: &str) -> Option<&'static str> {
    match protocol {
        "TLS" => Some("TLSRoute"),
        "TCP" => Some("TCPRoute"),
        "UDP" => Some("UDPRoute"),
        _ => None,
    }
}

fn route_rules(
    it: &Item,
    rules: &[gw::RouteRule],
    route_kind: &str,
    index: &Index,
    r: &mut Reporter,
) {
    let ns = it.object.meta().namespace().to_string();
    let prefix = if it.object.format() == crate::model::Format::Consul {
        "data.rules"
    } else {
        "spec.rules"
    };
    if rules.len() != 1 {
        r.error(&it.path(prefix), format!("a {route_kind} has exactly one rule (it has no matchers to choose between rules); found {}", rules.len()));
    }
    for (i, rule) in rules.iter().enumerate() {
        let at = format!("{prefix}[{i}].backendRefs");
        if rule.backend_refs.is_empty() || rule.backend_refs.len() > MAX_BACKEND_REFS {
            r.error(
                &it.path(&at),
                format!(
                    "a rule needs 1..{MAX_BACKEND_REFS} backendRefs; found {}",
                    rule.backend_refs.len()
                ),
            );
        }
        for (j, b) in rule.backend_refs.iter().enumerate() {
            let here = format!("{at}[{j}]");
            weight(it, &format!("{here}.weight"), b.weight, r);
            let kind = b.kind.as_deref().unwrap_or("Service");
            let group = b.group.as_deref().unwrap_or("");
            if kind != "Service" || !group.is_empty() {
                r.warn(&it.path(&format!("{here}.kind")), format!("backend kind {group}/{kind} is not supported: invalid backend, its share will be rejected"));
                continue;
            }
            let bns = b.namespace.clone().unwrap_or_else(|| ns.clone());
            if b.port.is_none() && b.port_name.is_none() {
                r.error(
                    &it.path(&format!("{here}.port")),
                    "port is required for a Service backend",
                );
            }
            if !index.grant_allows(
                ("gateway.networking.k8s.io", route_kind, &ns),
                ("", "Service", &bns, &b.name),
            ) {
                r.warn(&it.path(&format!("{here}.namespace")), format!("reference to Service {bns}/{} is not permitted by any ReferenceGrant: invalid backend, its share will be rejected", b.name));
                continue;
            }
            match index.get(Kind::Service, &bns, &b.name) {
                None => r.warn(
                    &it.path(&format!("{here}.name")),
                    format!(
                        "Service {bns}/{} not found: invalid backend, its share will be rejected",
                        b.name
                    ),
                ),
                Some(svc) => {
                    if let (Some(port), Object::Service(s)) = (b.port, &svc.object) {
                        if !s.spec.ports.iter().any(|p| p.port == i64::from(port)) {
                            r.error(
                                &it.path(&format!("{here}.port")),
                                format!("Service {bns}/{} has no port {port}", b.name),
                            );
                        }
                    }
                }
            }
        }
    }
}

fn appliance(it: &Item, spec: &crate::model::appliance::ApplianceSpec, r: &mut Reporter) {
    let mut cores = BTreeSet::new();
    for (i, c) in spec.cores.iter().enumerate() {
        if !cores.insert(*c) {
            r.error(
                &it.path(&format!("spec.cores[{i}]")),
                format!("core {c} is listed twice"),
            );
        }
    }
    let mut names = BTreeSet::new();
    let mut has_dpdk = false;
    for (i, p) in spec.ports.iter().enumerate() {
        let at = format!("spec.ports[{i}]");
        if p.name.is_empty() {
            r.error(&it.path(&format!("{at}.name")), "port name is required");
        } else if !names.insert(p.name.clone()) {
            r.error(
                &it.path(&format!("{at}.name")),
                format!("duplicate port name `{}`", p.name),
            );
        }
        let kinds = usize::from(p.tap.is_some())
            + usize::from(p.dpdk.is_some())
            + usize::from(p.pcap.is_some());
        if kinds != 1 {
            r.error(&it.path(&at), "a port needs exactly one of tap, dpdk, pcap");
        }
        has_dpdk |= p.dpdk.is_some();
        if let Some(t) = &p.tap {
            if t.name.is_empty() || t.name.len() > 15 {
                r.error(
                    &it.path(&format!("{at}.tap.name")),
                    format!("TAP name `{}` must be 1..15 bytes", t.name),
                );
            }
        }
        if let Some(pc) = &p.pcap {
            if pc.rx.is_none() && pc.tx.is_none() {
                r.error(
                    &it.path(&format!("{at}.pcap")),
                    "a pcap port needs rx, tx or both",
                );
            }
        }
        for (j, a) in p.addresses.iter().enumerate() {
            if a.parse::<IpNet>().is_err() {
                r.error(
                    &it.path(&format!("{at}.addresses[{j}]")),
                    format!("`{a}` must be an address with prefix length, like 10.77.0.2/24"),
                );
            }
        }
        if p.queues == Some(0) {
            r.error(
                &it.path(&format!("{at}.queues")),
                "queues must be at least 1",
            );
        }
        if let Some(m) = p.mtu {
            if !(576..=9216).contains(&m) {
                r.error(
                    &it.path(&format!("{at}.mtu")),
                    format!("mtu {m} is out of range 576..9216"),
                );
            }
        }
    }
    for (i, rt) in spec.routes.iter().enumerate() {
        let at = format!("spec.routes[{i}]");
        let to = cidr(it, &format!("{at}.to"), &rt.to, r);
        match rt.via.parse::<IpAddr>() {
            Err(_) => r.error(
                &it.path(&format!("{at}.via")),
                format!("`{}` is not an IP address", rt.via),
            ),
            Ok(via) => {
                if to.is_some_and(|t| t.addr().is_ipv4() != via.is_ipv4()) {
                    r.error(
                        &it.path(&format!("{at}.via")),
                        "next hop and destination are of different address families",
                    );
                }
            }
        }
    }
    for (i, v) in spec.virtual_addresses.iter().enumerate() {
        if v.parse::<IpAddr>().is_err() {
            r.error(
                &it.path(&format!("spec.virtualAddresses[{i}]")),
                format!("`{v}` is not an IP address"),
            );
        }
    }
    if !spec.eal.is_empty() && !has_dpdk {
        r.warn(
            &it.path("spec.eal"),
            "eal arguments are used only when a dpdk port is present",
        );
    }
    maglev_size(it, "spec.maglevTableSize", spec.maglev_table_size, r);
    let l = &spec.limits;
    for (name, v) in [
        ("flowsPerWorker", l.flows_per_worker),
        ("identities", l.identities),
        ("prefixes", l.prefixes),
        ("policyEntries", l.policy_entries),
        ("listeners", l.listeners),
        ("backendsPerRoute", l.backends_per_route),
    ] {
        if v == Some(0) {
            r.error(
                &it.path(&format!("spec.limits.{name}")),
                "a limit must be at least 1",
            );
        }
    }
}
