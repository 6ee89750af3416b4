//! Istio Gateways: each server becomes a listener, and the VirtualServices that name
//! the gateway bind their http, tls and tcp routes to it (AUTO_PASSTHROUGH servers bind
//! every admitted Service port instead).

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use super::hostname;
use crate::diag::Diagnostic;

use crate::model::istio;
use crate::model::meta::transparent_by_annotation;
use crate::model::{Kind, Object, Resource};
use crate::validate;

use super::ctx::{Ctx, CLUSTER_DOMAIN};
use super::ir::*;

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

/// A server's host entries as (namespace constraint, host pattern): `*` for any
/// namespace, `.` resolved to the gateway's.
fn server_hosts(server: &istio::Server, gns: &str) -> Vec<(String, String)> {
    server
        .hosts
        .iter()
        .map(|h| match h.split_once('/') {
            Some((".", host)) => (gns.to_string(), host.to_ascii_lowercase()),
            Some((ns, host)) => (ns.to_string(), host.to_ascii_lowercase()),
            None => ("*".to_string(), h.to_ascii_lowercase()),
        })
        .collect()
}

/// A VirtualService that names an Istio Gateway, is exported to its namespace and has
/// hosts a server of it admits: what binding its routes to that server needs.
struct VsBinding<'v> {
    vs: &'v Resource<istio::VirtualServiceSpec>,
    /// The VirtualService's namespace.
    vns: String,
    gns: &'v str,
    gname: &'v str,
    /// The server's port number.
    port: u32,
    /// The VirtualService's hosts narrowed to the server hosts its namespace may use.
    hosts: Vec<String>,
}

impl<'v> VsBinding<'v> {
    /// `None` when `vs` does not bind to the server (port `port`, hosts
    /// `server_hosts`) of Gateway `gns/gname`.
    fn new(
        vs: &'v Resource<istio::VirtualServiceSpec>,
        gns: &'v str,
        gname: &'v str,
        port: u32,
        server_hosts: &[(String, String)],
    ) -> Option<Self> {
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
            return None;
        }
        let mut hosts: Vec<String> = Vec::new();
        for (nsc, sh) in server_hosts {
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
            return None;
        }
        Some(VsBinding {
            vs,
            vns,
            gns,
            gname,
            port,
            hosts,
        })
    }

    /// Whether a match's `gateways` (empty: the VirtualService's) include this gateway.
    fn gw_ok(&self, gws: &[String]) -> bool {
        gws.is_empty()
            || gws.iter().any(|g| {
                let (ns, n) = validate::split_gateway_ref(g, &self.vns);
                ns == self.gns && n == self.gname
            })
    }

    /// The name of a route made of the VirtualService's `what`.
    fn label(&self, what: &str) -> String {
        format!("VirtualService {}/{} {what}", self.vns, self.vs.meta.name)
    }
}

/// Where one server's bindings go: its listener, the hosts it has bound, the IR routes.
struct Bind<'b> {
    listener: &'b mut Listener,
    /// Hosts bound so far, and the VirtualService that took each.
    bound: &'b mut HashMap<String, String>,
    ir: &'b mut Ir,
    /// `Kind ns/name` of the VirtualService binding now.
    by: String,
    /// Hosts it could not take, with the VirtualService that holds each.
    lost: Vec<(String, String)>,
}

impl Bind<'_> {
    /// Binds `host` to route `ri` unless an earlier VirtualService holds it (then noted
    /// as lost to it).
    fn take(&mut self, host: String, ri: usize) {
        match self.bound.get(&host) {
            Some(w) if *w != self.by => self.lost.push((host, w.clone())),
            Some(_) => {}
            None => {
                self.bound.insert(host.clone(), self.by.clone());
                self.listener.bindings.push(Binding { host, route: ri });
            }
        }
    }
}

/// The IR match of an Istio `HTTPMatchRequest` (validated), or `None` when it can hold
/// for no request (a `sourceNamespace` without pods).
fn istio_match(m: &istio::HttpMatchRequest, workloads: &[Workload]) -> Option<HttpMatch> {
    use super::http::istio_string_match as sm;
    let sources: Vec<ipnet::IpNet> = match &m.source_namespace {
        None => Vec::new(),
        Some(ns) => {
            let ips: Vec<ipnet::IpNet> = workloads
                .iter()
                .filter(|w| w.namespace == *ns)
                .map(|w| ipnet::IpNet::from(w.ip))
                .collect();
            if ips.is_empty() {
                return None;
            }
            ips
        }
    };
    let header = |invert: bool| {
        move |(name, v): (&String, &istio::StringMatch)| HeaderMatch {
            name: name.to_ascii_lowercase(),
            value: sm(v),
            invert,
        }
    };
    Some(HttpMatch {
        path: m.uri.as_ref().map(sm),
        ignore_case: m.ignore_uri_case,
        method: m.method.as_ref().and_then(|x| x.exact.clone()),
        scheme: m.scheme.as_ref().map(sm),
        authority: m.authority.as_ref().map(sm),
        headers: m
            .headers
            .iter()
            .map(header(false))
            .chain(m.without_headers.iter().map(header(true)))
            .collect(),
        query: m
            .query_params
            .iter()
            .map(|(name, v)| QueryMatch {
                name: name.clone(),
                value: sm(v),
            })
            .collect(),
        port: m.port.and_then(|p| u16::try_from(p).ok()),
        sources,
    })
}

/// A `directResponse` body's bytes (validation checked the base64).
fn istio_body(b: &istio::HttpBody) -> Vec<u8> {
    use base64::Engine as _;
    match (&b.string, &b.bytes) {
        (Some(s), _) => s.clone().into_bytes(),
        (None, Some(x)) => base64::engine::general_purpose::STANDARD
            .decode(x.trim())
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// Envoy's `retryOn` names sluice retries on (others are warned about in validation).
pub const RETRY_ON: &[&str] = &[
    "connect-failure",
    "refused-stream",
    "reset",
    "5xx",
    "gateway-error",
];

/// An Istio `HTTPRetry`.
fn istio_retries(r: &istio::HttpRetry) -> Retries {
    let on: Vec<&str> = r
        .retry_on
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .collect();
    Retries {
        attempts: u8::try_from(r.attempts.clamp(0, i64::from(u8::MAX))).unwrap_or(u8::MAX),
        per_try_timeout_ms: r
            .per_try_timeout
            .as_deref()
            .and_then(super::http::duration_ms)
            .unwrap_or(0),
        connect_failure: on.contains(&"connect-failure"),
        reset: on.contains(&"refused-stream") || on.contains(&"reset"),
        server_error: on.contains(&"5xx"),
        gateway_error: on.contains(&"gateway-error"),
    }
}

impl Ctx<'_> {
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

    /// Adds a listener per server of an Istio Gateway, with the routes of the
    /// VirtualServices bound to it.
    pub(super) fn istio_gateway(
        &mut self,
        gi: usize,
        spec: &istio::GatewaySpec,
        ir: &mut Ir,
        diags: &mut Vec<Diagnostic>,
    ) {
        let it = &self.items[gi];
        let gns = it.object.meta().namespace().to_string();
        let gname = it.object.meta().name.clone();
        // A bad value is a validation error, so the IR is never built with one.
        let transparent = transparent_by_annotation(&it.object.meta().annotations).unwrap_or(false);
        for (si, server) in spec.servers.iter().enumerate() {
            let Ok(port) = u16::try_from(server.port.number) else {
                continue;
            };
            if self.excluded.listener(gi, si) {
                continue;
            }
            let mut listener = self.istio_listener(&gns, &gname, si, server, port);
            listener.transparent = transparent;
            let server_hosts = server_hosts(server, &gns);
            let dns: Vec<String> = server_hosts.iter().map(|(_, h)| h.clone()).collect();
            listener.members = vec![Member {
                name: listener.name.clone(),
                hostnames: if !listener.kind.inspects() || dns.iter().any(|h| h == "*") {
                    Vec::new()
                } else {
                    dns
                },
                source: (gi, si),
                certificates: Vec::new(),
                client_trust: None,
            }];
            if listener.kind == ListenerKind::TlsAutoPassthrough {
                self.auto_passthrough(&server_hosts, u32::from(port), &mut listener, ir);
                ir.listeners.push(listener);
                continue;
            }
            // Hosts bound so far, and which VirtualService took each.
            let mut bound: HashMap<String, String> = HashMap::new();
            let http = listener.tls.as_ref().is_some_and(|t| t.http);
            let tcp_like = matches!(
                listener.kind,
                ListenerKind::Tcp | ListenerKind::Udp | ListenerKind::TlsTerminate
            ) && !http;
            let items = self.items;
            for vi in self
                .by
                .virtual_services_for(&gns, &gname, server.port.number)
            {
                self.stats.candidates += 1;
                let Object::VirtualService(vs) = &items[vi].object else {
                    continue;
                };
                if tcp_like && !listener.bindings.is_empty() {
                    // A TCP listener takes one catch-all route: the first one binds and
                    // no later VirtualService can add anything.
                    break;
                }
                let Some(b) = VsBinding::new(vs, &gns, &gname, server.port.number, &server_hosts)
                else {
                    continue;
                };
                let mut to = Bind {
                    listener: &mut listener,
                    bound: &mut bound,
                    ir: &mut *ir,
                    by: items[vi].object.label(),
                    lost: Vec::new(),
                };
                match to.listener.kind {
                    ListenerKind::TlsPassthrough => self.bind_tls(&b, &mut to),
                    ListenerKind::Tcp | ListenerKind::Udp | ListenerKind::TlsTerminate if !http => {
                        self.bind_tcp(&b, &mut to)
                    }
                    ListenerKind::Http | ListenerKind::TlsTerminate => self.bind_http(&b, &mut to),
                    _ => {}
                }
                let server_name = to.listener.name.clone();
                let loser = to.by;
                for (host, winner) in to.lost {
                    let it = &items[vi];
                    it.reporter(diags).warn(
                        &it.path("spec.hosts"),
                        format!("host `{host}` on {server_name} is already bound by {winner}, which precedes this VirtualService (oldest creationTimestamp, then namespace/name); this one is not bound for it"),
                    );
                    ir.shadowed.push(Shadowed {
                        host,
                        winner,
                        loser: loser.clone(),
                    });
                }
            }
            ir.listeners.push(listener);
        }
    }

    /// The IR listener of server `si` of Istio Gateway `gns/gname`, without bindings
    /// and not transparent.
    fn istio_listener(
        &self,
        gns: &str,
        gname: &str,
        si: usize,
        server: &istio::Server,
        port: u16,
    ) -> Listener {
        let proto = server.port.protocol.to_ascii_uppercase();
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
                require_client_cert: matches!(
                    t.mode,
                    istio::TlsMode::Mutual | istio::TlsMode::IstioMutual
                ),
                http: proto == "HTTPS",
                min_tls13: t.min_protocol_version == istio::TlsProtocol::V1_3,
                max_tls12: t.max_protocol_version == istio::TlsProtocol::V1_2,
                cipher_suites: t.cipher_suites.clone(),
                client: istio_client_auth(gns, &t),
            }
        });
        let bind: Vec<IpAddr> = server.bind.iter().filter_map(|b| b.parse().ok()).collect();
        Listener {
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
            transparent: false,
            bindings: Vec::new(),
            members: Vec::new(),
        }
    }

    /// The Maglev table size of a route: that of its first destination's Service.
    fn maglev_of(&self, backends: &[istio::RouteDestination], vns: &str) -> u64 {
        backends
            .first()
            .map(|d| {
                let (ns, svc) = validate::service_of_host(&d.destination.host, vns);
                self.maglev_size_for(ns, svc)
            })
            .unwrap_or(self.default_maglev)
    }

    /// A TLS passthrough server: a route per `tls` entry, bound to the SNI hosts of its
    /// matches that the server hosts admit.
    fn bind_tls(&self, b: &VsBinding, to: &mut Bind) {
        let vs = b.vs;
        for (ti, t) in vs.spec.tls.iter().enumerate() {
            let mut snis = Vec::new();
            for m in &t.matches {
                if m.port.is_some_and(|p| p != b.port) || !b.gw_ok(&m.gateways) {
                    continue;
                }
                for sni in &m.sni_hosts {
                    for h in &b.hosts {
                        if let Some(x) = istio_bound_host(h, sni) {
                            snis.push((x, m.destination_subnets.clone()));
                        }
                    }
                }
            }
            if snis.is_empty() {
                continue;
            }
            let ri = to.ir.routes.len();
            to.ir.routes.push(Route {
                name: b.label(&format!("tls[{ti}]")),
                kind: RouteKind::Tls,
                destination_subnets: subnets(snis.iter().flat_map(|(_, s)| s.iter())),
                backends: self.istio_destinations(&t.route, &b.vns),
                http: Vec::new(),
                http_matches: Vec::new(),
                maglev_table_size: self.maglev_of(&t.route, &b.vns),
            });
            for (sni, _) in snis {
                to.take(sni, ri);
            }
        }
    }

    /// A TCP (or TLS-terminating, not HTTPS) server: the first applicable `tcp` entry
    /// becomes its catch-all route.
    fn bind_tcp(&self, b: &VsBinding, to: &mut Bind) {
        let vs = b.vs;
        for (ti, t) in vs.spec.tcp.iter().enumerate() {
            let applies = t.matches.is_empty()
                || t.matches
                    .iter()
                    .any(|m| m.port.is_none_or(|p| p == b.port) && b.gw_ok(&m.gateways));
            if !applies || to.bound.contains_key("*") {
                continue;
            }
            let ri = to.ir.routes.len();
            to.ir.routes.push(Route {
                name: b.label(&format!("tcp[{ti}]")),
                kind: RouteKind::Tcp,
                destination_subnets: subnets(
                    t.matches.iter().flat_map(|m| m.destination_subnets.iter()),
                ),
                backends: self.istio_destinations(&t.route, &b.vns),
                http: Vec::new(),
                http_matches: Vec::new(),
                maglev_table_size: self.maglev_of(&t.route, &b.vns),
            });
            to.take("*".into(), ri);
        }
    }

    /// An HTTP (or HTTPS-terminating) server: the `http` entries become the rules of
    /// one route, bound to every host of the binding, in order (Istio: "the first rule
    /// matching an incoming request is used"); each entry's matches that apply to this
    /// server (port, gateways) become its matches, ORed; an entry without matches
    /// matches every request, one whose matches all apply elsewhere is left out.
    fn bind_http(&self, b: &VsBinding, to: &mut Bind) {
        let vs = b.vs;
        let mut rules: Vec<HttpRule> = Vec::new();
        let mut matches: Vec<(HttpMatch, usize)> = Vec::new();
        for (hi, h) in vs.spec.http.iter().enumerate() {
            let applicable: Vec<&istio::HttpMatchRequest> = h
                .matches
                .iter()
                .filter(|m| m.port.is_none_or(|p| p == b.port) && b.gw_ok(&m.gateways))
                .collect();
            if !h.matches.is_empty() && applicable.is_empty() {
                continue;
            }
            let ri = rules.len();
            rules.push(self.istio_http_rule(b, hi, h));
            if h.matches.is_empty() {
                matches.push((HttpMatch::default(), ri));
            }
            for m in applicable {
                // A sourceNamespace without pods matches no request: no match at all.
                if let Some(hm) = istio_match(m, &to.ir.workloads) {
                    matches.push((hm, ri));
                }
            }
        }
        if rules.is_empty() {
            return;
        }
        let ri = to.ir.routes.len();
        let first = vs
            .spec
            .http
            .iter()
            .flat_map(|h| h.route.iter().map(istio::HttpRouteDestination::plain))
            .collect::<Vec<_>>();
        to.ir.routes.push(Route {
            name: b.label("http"),
            kind: RouteKind::Http,
            destination_subnets: Vec::new(),
            backends: Vec::new(),
            http: rules,
            http_matches: matches,
            maglev_table_size: self.maglev_of(&first, &b.vns),
        });
        for h in &b.hosts {
            to.take(h.clone(), ri);
        }
    }

    /// The IR rule of `http[hi]` (validation has checked every field).
    fn istio_http_rule(&self, b: &VsBinding, hi: usize, h: &istio::HttpRoute) -> HttpRule {
        let name = match &h.name {
            Some(n) => b.label(&format!("http[{hi}] ({n})")),
            None => b.label(&format!("http[{hi}]")),
        };
        let action = if let Some(r) = &h.redirect {
            HttpAction::Redirect(Redirect {
                code: r
                    .redirect_code
                    .and_then(|c| u16::try_from(c).ok())
                    .unwrap_or(301),
                scheme: r.scheme.clone(),
                host: r.authority.clone(),
                port: match (
                    r.port.and_then(|p| u16::try_from(p).ok()),
                    r.derive_port.as_deref(),
                ) {
                    (Some(p), _) => RedirectPort::Port(p),
                    (None, Some("FROM_PROTOCOL_DEFAULT")) => RedirectPort::SchemeDefault,
                    (None, Some("FROM_REQUEST_PORT")) => RedirectPort::Listener,
                    _ => RedirectPort::Keep,
                },
                path: r.uri.clone().map(PathRewrite::Full),
            })
        } else if let Some(d) = &h.direct_response {
            HttpAction::Direct {
                status: u16::try_from(d.status).unwrap_or(500),
                body: d.body.as_ref().map(istio_body).unwrap_or_default(),
            }
        } else {
            let plain: Vec<istio::RouteDestination> = h
                .route
                .iter()
                .map(istio::HttpRouteDestination::plain)
                .collect();
            HttpAction::Forward {
                backends: self.istio_destinations(&plain, &b.vns),
                invalid_status: 503,
            }
        };
        let ops = |o: Option<&istio::HeaderOperations>| {
            o.map(|o| HeaderOps {
                set: o.set.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                add: o.add.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                remove: o.remove.clone(),
            })
            .unwrap_or_default()
        };
        let headers = h.headers.as_ref();
        let mut mirrors = Vec::new();
        let pct = |p: Option<&istio::Percent>| {
            p.map_or(1_000_000, |p| {
                (p.value.clamp(0.0, 100.0) * 10_000.0).round() as u32
            })
        };
        let mirror_backend = |d: &istio::Destination| {
            let (ns, svc) = validate::service_of_host(&d.host, &b.vns);
            self.backend(
                ns,
                svc,
                d.port.as_ref().map(|p| p.number),
                None,
                d.subset.as_deref(),
                1,
            )
        };
        if let Some(m) = &h.mirror {
            mirrors.push(Mirror {
                backends: vec![mirror_backend(m)],
                per_million: pct(h.mirror_percentage.as_ref()),
            });
        }
        for m in &h.mirrors {
            mirrors.push(Mirror {
                backends: vec![mirror_backend(&m.destination)],
                per_million: pct(m.percentage.as_ref()),
            });
        }
        HttpRule {
            name,
            action,
            rewrite: h
                .rewrite
                .as_ref()
                .map(|r| Rewrite {
                    path: match (&r.uri, &r.uri_regex_rewrite) {
                        (Some(u), _) => Some(PathRewrite::Prefix(u.clone())),
                        (None, Some(x)) => Some(PathRewrite::Regex {
                            regex: x.pattern.clone(),
                            replacement: x.rewrite.clone(),
                        }),
                        _ => None,
                    },
                    authority: r.authority.clone(),
                })
                .unwrap_or_default(),
            request_headers: ops(headers.and_then(|h| h.request.as_ref())),
            response_headers: ops(headers.and_then(|h| h.response.as_ref())),
            timeout_ms: h
                .timeout
                .as_deref()
                .and_then(super::http::duration_ms)
                .unwrap_or(0),
            retries: h.retries.as_ref().map(istio_retries).unwrap_or_default(),
            mirrors,
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
                        http_matches: Vec::new(),
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
}

/// The client certificate verification of an Istio server's TLS settings (`MUTUAL`,
/// `OPTIONAL_MUTUAL`, `ISTIO_MUTUAL`), or `None` (other modes request no certificate).
/// The trust sources: `credentialName`'s Secret (its CA entries, or its `-cacert`
/// twin), else `caCertificates` (and `caCrl`); `ISTIO_MUTUAL`: the Appliance's
/// `spec.termination.istioMutual`.
pub fn istio_client_auth(gns: &str, t: &istio::ServerTlsSettings) -> Option<ClientAuth> {
    let trust = match t.mode {
        istio::TlsMode::Mutual | istio::TlsMode::OptionalMutual => match &t.credential_name {
            Some(c) => vec![format!("Secret {gns}/{c}")],
            None => t
                .ca_certificates
                .iter()
                .map(|f| format!("caCertificates {f}"))
                .chain(t.ca_crl.iter().map(|f| format!("caCrl {f}")))
                .collect(),
        },
        istio::TlsMode::IstioMutual => vec!["Appliance spec.termination.istioMutual".into()],
        _ => return None,
    };
    Some(ClientAuth {
        optional: t.mode == istio::TlsMode::OptionalMutual,
        trust,
        subject_alt_names: t.subject_alt_names.clone(),
        spki: t.verify_certificate_spki.clone(),
        hash: t.verify_certificate_hash.clone(),
    })
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
}
