//! Gateway API Gateway, TLSRoute, TCPRoute and UDPRoute (and Consul's TCPRoute).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::diag::Reporter;
use crate::load::Item;
use crate::model::gateway_api::{self as gw, GatewayTlsMode};
use crate::model::{Kind, Object};

use super::fields::{selector, weight, MAX_BACKEND_REFS};
use super::hostnames::hostname;
use super::index::Index;

/// The Gateway API `tls.options` key sluice reads on a terminating listener: the lowest
/// TLS version served, `"1.2"` (the default) or `"1.3"`.
pub const MIN_TLS_VERSION: &str = "sluice.dev/min-tls-version";

/// Gateway API core/extended listener protocols.
pub const GATEWAY_PROTOCOLS: &[&str] = &["HTTP", "HTTPS", "TLS", "TCP", "UDP"];

/// A Gateway: its addresses, and each listener alone and against the others.
pub(super) fn gateway(it: &Item, spec: &gw::GatewaySpec, r: &mut Reporter) {
    if spec.listeners.is_empty() {
        r.error(
            &it.path("spec.listeners"),
            "a Gateway needs at least one listener",
        );
    }
    gateway_addresses(it, &spec.addresses, r);
    let mut names = BTreeSet::new();
    let mut seen = PortUse::new();
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
        listener(it, &at, l, r);
        listener_conflicts(it, &at, l, &mut seen, r);
    }
}

/// A Gateway's addresses: IP addresses only.
fn gateway_addresses(it: &Item, addresses: &[gw::GatewayAddress], r: &mut Reporter) {
    for (i, a) in addresses.iter().enumerate() {
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
}

/// One listener on its own (at `at`): port, protocol, hostname, tls, allowedRoutes.
fn listener(it: &Item, at: &str, l: &gw::Listener, r: &mut Reporter) {
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
    listener_tls(it, at, l, r);
    if let Some(ar) = &l.allowed_routes {
        allowed_routes(it, at, ar, r);
    }
}

/// A listener's `tls` against its protocol, with its certificate references.
fn listener_tls(it: &Item, at: &str, l: &gw::Listener, r: &mut Reporter) {
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
            // What each certificateRef names (kind, ReferenceGrant, the Secret and its
            // certificate) is checked when certificates are loaded
            // (`compile::certs`): a bad one leaves this listener out, not the whole
            // configuration.
            if tls.mode == GatewayTlsMode::Passthrough && tls.frontend_validation.is_some() {
                r.warn(
                    &it.path(&format!("{at}.tls.frontendValidation")),
                    "frontendValidation verifies client certificates of terminated TLS; a \
                     Passthrough listener never sees them: ignored",
                );
            }
            // Each caCertificateRef (kind, ReferenceGrant, the ConfigMap's `ca.crt`) is
            // checked when certificates are loaded (`compile::certs`).
            for (k, v) in &tls.options {
                let here = it.path(&format!("{at}.tls")).key("options").key(k);
                if !k.contains('/') {
                    r.error(&here, "implementation-specific options must use domain-prefixed names (example.com/my-option)");
                } else if tls.mode == GatewayTlsMode::Passthrough {
                    // Options tune termination; a passthrough listener has none.
                    continue;
                } else if k == MIN_TLS_VERSION {
                    if !matches!(v.as_str(), "1.2" | "1.3") {
                        r.not_served_because(
                            &here,
                            "UnsupportedValue",
                            format!("{MIN_TLS_VERSION} `{v}`: sluice terminates TLS 1.2 and 1.3 (\"1.2\" or \"1.3\"): this listener is not served"),
                        );
                    }
                } else if k.starts_with("sluice.dev/") {
                    r.not_served_because(
                        &here,
                        "UnsupportedValue",
                        format!("unknown sluice option `{k}` (sluice reads {MIN_TLS_VERSION}): this listener is not served"),
                    );
                } else {
                    r.warn(
                        &here,
                        format!("option `{k}` is another implementation's: ignored"),
                    );
                }
            }
        }
        _ => {}
    }
}

/// A listener's `allowedRoutes`: a namespace selector when asked for, known kinds.
fn allowed_routes(it: &Item, at: &str, ar: &gw::AllowedRoutes, r: &mut Reporter) {
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
            r.not_served_because(
                &it.path(&format!("{at}.allowedRoutes.kinds[{j}].kind")),
                "InvalidRouteKinds",
                format!("unknown route kind `{}`: it admits nothing", k.kind),
            );
        }
    }
}

/// What the listeners checked so far use on a (port, transport): the protocol class and
/// the hostnames.
type PortUse = BTreeMap<(u32, &'static str), (String, BTreeSet<String>)>;

/// A listener against the earlier ones of its Gateway (`seen`).
fn listener_conflicts(it: &Item, at: &str, l: &gw::Listener, seen: &mut PortUse, r: &mut Reporter) {
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
        r.not_served_because(
            &it.path(&format!("{at}.protocol")),
            "ProtocolConflict",
            format!(
                "conflicting listeners on port {}: {} and {}",
                l.port, entry.0, l.protocol
            ),
        );
    } else if !entry.1.insert(host.clone()) {
        r.not_served_because(
            &it.path(&format!("{at}.hostname")),
            "HostnameConflict",
            format!(
                "conflicting listeners on port {}: hostname `{}` is used twice",
                l.port,
                if host.is_empty() { "<any>" } else { &host }
            ),
        );
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
        r.not_served(
            &it.path(prefix),
            format!("a {route_kind} needs at least one parentRef: attached nowhere"),
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
            r.not_served_because(
                &it.path(&format!("{at}.kind")),
                "InvalidKind",
                format!("parent kind `{kind}` is not supported (only Gateway): not attached"),
            );
            continue;
        }
        let gns = p.namespace.clone().unwrap_or_else(|| ns.clone());
        let Some(g) = index.get(Kind::Gateway, &gns, &p.name) else {
            r.not_served_because(
                &it.path(&format!("{at}.name")),
                "NoMatchingParent",
                format!("Gateway {gns}/{} not found: not attached", p.name),
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
                r.not_served_because(
                    &it.path(&format!("{at}.sectionName")),
                    "NoMatchingParent",
                    format!(
                        "Gateway {gns}/{} has no listener named `{s}`: not attached",
                        p.name
                    ),
                );
                continue;
            }
        }
        if let Some(port) = p.port {
            if matching.is_empty() {
                r.not_served_because(
                    &it.path(&format!("{at}.port")),
                    "NoMatchingParent",
                    format!(
                        "Gateway {gns}/{} has no listener on port {port}{}: not attached",
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
        if !matching.iter().any(|l| takes(l, route_kind)) {
            // Name what the parentRef did select, and the route kinds each listener takes.
            let selected: Vec<String> = matching
                .iter()
                .map(|l| match route_kinds_of(l) {
                    [] => format!("`{}` is {}", l.name, l.protocol),
                    kinds => format!(
                        "`{}` is {} and takes {}",
                        l.name,
                        l.protocol,
                        kinds
                            .iter()
                            .map(|k| format!("{k}s"))
                            .collect::<Vec<_>>()
                            .join(" and ")
                    ),
                })
                .collect();
            r.not_served_because(
                &it.path(&at),
                "NotAllowedByListeners",
                format!(
                    "Gateway {gns}/{} has no {want} listener this {route_kind} can attach to{}: not attached",
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
/// listeners, a UDPRoute to UDP listeners, a TCPRoute (and Consul's) to TCP listeners
/// (and to terminating TLS listeners: [`route_kinds_of`]).
fn listener_protocol_of(route_kind: &str) -> &'static str {
    match route_kind {
        "TLSRoute" => "TLS",
        "UDPRoute" => "UDP",
        _ => "TCP",
    }
}

/// The route kinds sluice attaches to a Gateway API listener (HTTP and HTTPS listeners
/// take HTTPRoutes). A TLS listener in mode
/// Terminate takes TCPRoutes besides TLSRoutes: older Gateway API releases paired
/// terminating TLS listeners with TCPRoutes (the decrypted stream routed as TCP).
pub fn route_kinds_of(l: &gw::Listener) -> &'static [&'static str] {
    match l.protocol.as_str() {
        "HTTP" | "HTTPS" => &["HTTPRoute"],
        "TLS" if crate::compile::certs::gateway_terminates(l) => &["TLSRoute", "TCPRoute"],
        "TLS" => &["TLSRoute"],
        "TCP" => &["TCPRoute"],
        "UDP" => &["UDPRoute"],
        _ => &[],
    }
}

/// Whether listener `l` takes routes of `route_kind`.
fn takes(l: &gw::Listener, route_kind: &str) -> bool {
    // Consul's TCPRoute is a TCPRoute.
    let kind = if route_kind.ends_with("TCPRoute") {
        "TCPRoute"
    } else {
        route_kind
    };
    route_kinds_of(l).contains(&kind)
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
        backend_refs(it, &at, &rule.backend_refs, &ns, route_kind, index, r);
    }
}

/// The checks of a rule's backendRefs at `at` (of a `route_kind` route in `ns`): weights,
/// kind, port, ReferenceGrant, Service and port existence.
fn backend_refs(
    it: &Item,
    at: &str,
    refs: &[gw::BackendRef],
    ns: &str,
    route_kind: &str,
    index: &Index,
    r: &mut Reporter,
) {
    for (j, b) in refs.iter().enumerate() {
        let here = format!("{at}[{j}]");
        weight(it, &format!("{here}.weight"), b.weight, r);
        let kind = b.kind.as_deref().unwrap_or("Service");
        let group = b.group.as_deref().unwrap_or("");
        if kind != "Service" || !group.is_empty() {
            r.warn(&it.path(&format!("{here}.kind")), format!("backend kind {group}/{kind} is not supported: invalid backend, its share will be rejected"));
            continue;
        }
        let bns = b.namespace.clone().unwrap_or_else(|| ns.to_string());
        if b.port.is_none() && b.port_name.is_none() {
            r.error(
                &it.path(&format!("{here}.port")),
                "port is required for a Service backend",
            );
        }
        if !index.grant_allows(
            ("gateway.networking.k8s.io", route_kind, ns),
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

/// A TLSRoute: its parents, hostnames and rule.
pub(super) fn tls_route(it: &Item, spec: &gw::TlsRouteSpec, index: &Index, r: &mut Reporter) {
    route_parents(it, &spec.parent_refs, "TLSRoute", index, r);
    for (i, h) in spec.hostnames.iter().enumerate() {
        hostname(it, &format!("spec.hostnames[{i}]"), h, r);
    }
    route_rules(it, &spec.rules, "TLSRoute", index, r);
}

/// A TCPRoute (Gateway API's or Consul's) or a UDPRoute (`route_kind`): its parents and
/// rule.
pub(super) fn tcp_route(
    it: &Item,
    spec: &gw::TcpRouteSpec,
    route_kind: &str,
    index: &Index,
    r: &mut Reporter,
) {
    route_parents(it, &spec.parent_refs, route_kind, index, r);
    route_rules(it, &spec.rules, route_kind, index, r);
}

/// An HTTPRoute: parents, hostnames, and each rule's matches, filters and backends.
/// What sluice cannot compile exactly is not served (the route is left out): filters
/// `ExtensionRef`, `CORS`, `ExternalAuth`, backendRef-level filters, expressions that do
/// not compile; malformed values are errors.
pub(super) fn http_route(it: &Item, spec: &gw::HttpRouteSpec, index: &Index, r: &mut Reporter) {
    route_parents(it, &spec.parent_refs, "HTTPRoute", index, r);
    for (i, h) in spec.hostnames.iter().enumerate() {
        hostname(it, &format!("spec.hostnames[{i}]"), h, r);
    }
    let ns = it.object.meta().namespace().to_string();
    let regex = |at: String, re: &str, r: &mut Reporter| {
        if let Err(e) = sluice_dataplane::tables::http::Regex::new(re) {
            r.not_served_because(&it.path(&at), "UnsupportedValue", e.to_string());
        }
    };
    for (i, rule) in spec.rules.iter().enumerate() {
        let at = format!("spec.rules[{i}]");
        let mut prefix_only = true;
        for (j, m) in rule.matches.iter().enumerate() {
            let mat = format!("{at}.matches[{j}]");
            if let Some(p) = &m.path {
                let value = p.value.as_deref().unwrap_or("/");
                match p.kind.as_deref().unwrap_or("PathPrefix") {
                    "Exact" | "PathPrefix" => {
                        if !value.starts_with('/') {
                            r.error(&it.path(&format!("{mat}.path.value")), "a path starts with `/`");
                        }
                        if p.kind.as_deref() == Some("Exact") {
                            prefix_only = false;
                        }
                    }
                    "RegularExpression" => {
                        prefix_only = false;
                        regex(format!("{mat}.path.value"), value, r);
                    }
                    other => r.error(
                        &it.path(&format!("{mat}.path.type")),
                        format!("unknown path match type `{other}` (Exact, PathPrefix, RegularExpression)"),
                    ),
                }
            }
            for (what, list) in [("headers", &m.headers), ("queryParams", &m.query_params)] {
                let mut names = BTreeSet::new();
                for (k, h) in list.iter().enumerate() {
                    let here = format!("{mat}.{what}[{k}]");
                    let name = if what == "headers" {
                        h.name.to_ascii_lowercase()
                    } else {
                        h.name.clone()
                    };
                    if !names.insert(name) {
                        // Upstream: "the first entry with an equivalent name MUST be
                        // considered for a match. Subsequent entries ... MUST be ignored."
                        r.warn(
                            &it.path(&format!("{here}.name")),
                            "a repeated name: ignored (the first entry counts)",
                        );
                    }
                    match h.kind.as_deref().unwrap_or("Exact") {
                        "Exact" => {}
                        "RegularExpression" => regex(format!("{here}.value"), &h.value, r),
                        other => r.error(
                            &it.path(&format!("{here}.type")),
                            format!("unknown match type `{other}` (Exact, RegularExpression)"),
                        ),
                    }
                }
            }
            if let Some(meth) = &m.method {
                if !matches!(
                    meth.as_str(),
                    "GET"
                        | "HEAD"
                        | "POST"
                        | "PUT"
                        | "DELETE"
                        | "CONNECT"
                        | "OPTIONS"
                        | "TRACE"
                        | "PATCH"
                ) {
                    r.error(
                        &it.path(&format!("{mat}.method")),
                        format!("unknown method `{meth}`"),
                    );
                }
            }
        }
        let mut kinds = BTreeSet::new();
        for (k, f) in rule.filters.iter().enumerate() {
            let here = format!("{at}.filters[{k}]");
            let present = match f.kind.as_str() {
                "RequestHeaderModifier" => f.request_header_modifier.is_some(),
                "ResponseHeaderModifier" => f.response_header_modifier.is_some(),
                "RequestMirror" => f.request_mirror.is_some(),
                "RequestRedirect" => f.request_redirect.is_some(),
                "URLRewrite" => f.url_rewrite.is_some(),
                "ExtensionRef" | "CORS" | "ExternalAuth" => {
                    r.not_served_because(
                        &it.path(&format!("{here}.type")),
                        "UnsupportedValue",
                        format!("filter {} is not implemented: ignoring it would serve these requests unfiltered", f.kind),
                    );
                    continue;
                }
                other => {
                    r.error(
                        &it.path(&format!("{here}.type")),
                        format!("unknown filter type `{other}`"),
                    );
                    continue;
                }
            };
            if !present {
                r.error(
                    &it.path(&here),
                    format!("filter {} needs its field", f.kind),
                );
            }
            if f.kind != "RequestMirror" && !kinds.insert(f.kind.clone()) {
                r.error(
                    &it.path(&format!("{here}.type")),
                    format!("filter {} is given twice", f.kind),
                );
            }
            let path_mod = f
                .request_redirect
                .as_ref()
                .and_then(|x| x.path.as_ref())
                .or(f.url_rewrite.as_ref().and_then(|x| x.path.as_ref()));
            if let Some(pm) = path_mod {
                match pm.kind.as_str() {
                    "ReplaceFullPath" if pm.replace_full_path.is_some() => {}
                    "ReplacePrefixMatch" if pm.replace_prefix_match.is_some() => {
                        if !prefix_only {
                            // Upstream: "ReplacePrefixMatch is only compatible with a
                            // PathPrefix HTTPRouteMatch".
                            r.not_served_because(
                                &it.path(&here),
                                "UnsupportedValue",
                                "ReplacePrefixMatch needs every match of the rule to be a PathPrefix match",
                            );
                        }
                    }
                    _ => r.error(
                        &it.path(&here),
                        "path: type ReplaceFullPath with replaceFullPath, or ReplacePrefixMatch with replacePrefixMatch",
                    ),
                }
            }
            if let Some(x) = &f.request_redirect {
                if let Some(s) = &x.scheme {
                    if !matches!(s.as_str(), "http" | "https") {
                        r.error(
                            &it.path(&format!("{here}.requestRedirect.scheme")),
                            "http or https",
                        );
                    }
                }
                if x.status_code.is_some_and(|c| c != 301 && c != 302) {
                    r.error(
                        &it.path(&format!("{here}.requestRedirect.statusCode")),
                        "301 or 302",
                    );
                }
                if x.port.is_some_and(|p| p == 0 || p > 65535) {
                    r.error(
                        &it.path(&format!("{here}.requestRedirect.port")),
                        "not a port number",
                    );
                }
            }
            if let Some(m) = &f.request_mirror {
                if m.percent.is_some_and(|p| !(0..=100).contains(&p)) {
                    r.error(
                        &it.path(&format!("{here}.requestMirror.percent")),
                        "0..=100",
                    );
                }
                if let Some(fr) = &m.fraction {
                    let d = fr.denominator.unwrap_or(100);
                    if d <= 0 || fr.numerator < 0 || fr.numerator > d {
                        r.error(
                            &it.path(&format!("{here}.requestMirror.fraction")),
                            "0 <= numerator <= denominator, denominator > 0",
                        );
                    }
                }
                if m.percent.is_some() && m.fraction.is_some() {
                    r.error(
                        &it.path(&format!("{here}.requestMirror")),
                        "set one of percent and fraction",
                    );
                }
                backend_refs(
                    it,
                    &format!("{here}.requestMirror.backendRef"),
                    std::slice::from_ref(&m.backend_ref),
                    &ns,
                    "HTTPRoute",
                    index,
                    r,
                );
            }
        }
        if kinds.contains("RequestRedirect") && kinds.contains("URLRewrite") {
            r.error(
                &it.path(&format!("{at}.filters")),
                "RequestRedirect and URLRewrite cannot both be set",
            );
        }
        for (j, b) in rule.backend_refs.iter().enumerate() {
            if !b.filters.is_empty() {
                r.not_served_because(
                    &it.path(&format!("{at}.backendRefs[{j}].filters")),
                    "UnsupportedValue",
                    "backendRef-level filters are not implemented: they would change only the requests given to this backend",
                );
            }
        }
        let plain: Vec<gw::BackendRef> = rule
            .backend_refs
            .iter()
            .map(gw::HttpBackendRef::plain)
            .collect();
        backend_refs(
            it,
            &format!("{at}.backendRefs"),
            &plain,
            &ns,
            "HTTPRoute",
            index,
            r,
        );
        if let Some(t) = &rule.timeouts {
            for (what, v) in [
                ("request", &t.request),
                ("backendRequest", &t.backend_request),
            ] {
                if let Some(v) = v {
                    if crate::compile::http::duration_ms(v).is_none() {
                        r.error(
                            &it.path(&format!("{at}.timeouts.{what}")),
                            format!("`{v}` is not a duration"),
                        );
                    }
                }
            }
        }
    }
}
