//! Gateway API Gateways: each listener becomes a listener, and the TLSRoutes, TCPRoutes,
//! UDPRoutes and HTTPRoutes whose parentRefs select it (and whose namespace and kind its
//! `allowedRoutes` admit) attach to it, narrowed to the hostnames both allow. HTTPRoutes
//! on one listener are merged per hostname, their matches ordered by the spec's
//! precedence (`http_listener`).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use super::hostname;

use crate::diag::Diagnostic;
use crate::load::Item;
use crate::model::gateway_api as gw;
use crate::model::meta::transparent_by_annotation;
use crate::model::{Kind, Object};
use crate::validate;

use super::ctx::Ctx;
use super::ir::*;
use super::status::{Attach, Refusal};

/// A route that may attach to a listener, as the Gateway API kinds share it.
struct Candidate<'r> {
    item: &'r Item,
    /// `TLSRoute`, `TCPRoute` or `UDPRoute`.
    kind: &'static str,
    parents: &'r [gw::ParentReference],
    hostnames: &'r [String],
    rules: &'r [gw::RouteRule],
}

impl<'r> Candidate<'r> {
    /// The route of `item` when it is of one of the kinds `want` (those a listener
    /// takes).
    fn of(item: &'r Item, want: &[&str]) -> Option<Self> {
        let (parents, hostnames, rules, kind) = match &item.object {
            Object::TcpRoute(r) => (&r.spec.parent_refs, &[][..], &r.spec.rules, "TCPRoute"),
            Object::UdpRoute(r) => (&r.spec.parent_refs, &[][..], &r.spec.rules, "UDPRoute"),
            Object::TlsRoute(r) => (
                &r.spec.parent_refs,
                &r.spec.hostnames[..],
                &r.spec.rules,
                "TLSRoute",
            ),
            _ => return None,
        };
        if !want.contains(&kind) {
            return None;
        }
        Some(Candidate {
            item,
            kind,
            parents,
            hostnames,
            rules,
        })
    }
}

/// The parentRefs (indices) of a candidate that select listener `l` of Gateway
/// `gns/gname`: by name, and by `sectionName` and `port` when they are set.
fn selecting_parents(c: &Candidate, l: &gw::Listener, gns: &str, gname: &str) -> Vec<usize> {
    let rns = c.item.object.meta().namespace();
    c.parents
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            p.kind.as_deref().unwrap_or("Gateway") == "Gateway"
                && p.namespace.as_deref().unwrap_or(rns) == gns
                && p.name == gname
                && p.section_name.as_ref().is_none_or(|s| *s == l.name)
                && p.port.is_none_or(|pp| pp == l.port)
        })
        .map(|(i, _)| i)
        .collect()
}

/// The route kinds a listener takes ([`validate::route_kinds_of`]): a TLS listener in
/// mode Terminate takes TCPRoutes as well as TLSRoutes (older Gateway API releases
/// paired terminating TLS listeners with TCPRoutes); HTTP and HTTPS listeners take
/// HTTPRoutes upstream, which sluice does not read.
fn want_kinds(l: &gw::Listener) -> &'static [&'static str] {
    validate::route_kinds_of(l)
}

/// The precedence key of one HTTPRoute match among all matches on a listener hostname
/// (Gateway API `HTTPRouteRule.matches`: "Exact path match", "Prefix path match with
/// largest number of characters", "Method match", "Largest number of header matches",
/// "Largest number of query param matches"; then the oldest route, then
/// `namespace/name`, then rule and match order). Regular-expression paths, whose order
/// upstream leaves to implementations, come after every prefix.
type MatchKey = (
    u8,
    std::cmp::Reverse<usize>,
    bool,
    std::cmp::Reverse<usize>,
    std::cmp::Reverse<usize>,
    crate::model::meta::Precedence,
    usize,
    usize,
);

fn match_key(
    m: &gw::HttpRouteMatch,
    precedence: &crate::model::meta::Precedence,
    rule: usize,
    at: usize,
) -> MatchKey {
    let (kind, len) = match &m.path {
        Some(p) => {
            let v = p.value.as_deref().unwrap_or("/");
            match p.kind.as_deref().unwrap_or("PathPrefix") {
                "Exact" => (0, v.len()),
                "PathPrefix" => (1, v.len()),
                _ => (2, v.len()),
            }
        }
        None => (1, 1),
    };
    (
        kind,
        std::cmp::Reverse(len),
        m.method.is_none(),
        std::cmp::Reverse(m.headers.len()),
        std::cmp::Reverse(m.query_params.len()),
        precedence.clone(),
        rule,
        at,
    )
}

/// An HTTPRoute match as the IR's (validated): the first header or query entry of a
/// name counts, later ones are ignored (upstream).
fn http_route_match(m: &gw::HttpRouteMatch) -> HttpMatch {
    let value = |kind: Option<&str>, v: &str| match kind.unwrap_or("Exact") {
        "RegularExpression" => StringMatch::Regex(v.to_string()),
        _ => StringMatch::Exact(v.to_string()),
    };
    let path = match &m.path {
        None => StringMatch::PathPrefix(String::new()),
        Some(p) => {
            let v = p.value.as_deref().unwrap_or("/");
            match p.kind.as_deref().unwrap_or("PathPrefix") {
                "Exact" => StringMatch::Exact(v.to_string()),
                "RegularExpression" => StringMatch::Regex(v.to_string()),
                _ => StringMatch::PathPrefix(v.trim_end_matches('/').to_string()),
            }
        }
    };
    let mut headers: Vec<HeaderMatch> = Vec::new();
    for h in &m.headers {
        let name = h.name.to_ascii_lowercase();
        if headers.iter().all(|x| x.name != name) {
            headers.push(HeaderMatch {
                name,
                value: value(h.kind.as_deref(), &h.value),
                invert: false,
            });
        }
    }
    let mut query: Vec<QueryMatch> = Vec::new();
    for q in &m.query_params {
        if query.iter().all(|x| x.name != q.name) {
            query.push(QueryMatch {
                name: q.name.clone(),
                value: value(q.kind.as_deref(), &q.value),
            });
        }
    }
    HttpMatch {
        // `PathPrefix /` holds for every path: no condition (so a route of one such
        // match can be served once per connection).
        path: (path != StringMatch::PathPrefix(String::new())).then_some(path),
        method: m.method.clone(),
        headers,
        query,
        ..HttpMatch::default()
    }
}

fn header_filter(f: Option<&gw::HttpHeaderFilter>) -> HeaderOps {
    f.map(|f| HeaderOps {
        set: f
            .set
            .iter()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect(),
        add: f
            .add
            .iter()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect(),
        remove: f.remove.clone(),
    })
    .unwrap_or_default()
}

fn path_modifier(p: &gw::HttpPathModifier) -> Option<PathRewrite> {
    match p.kind.as_str() {
        "ReplaceFullPath" => p.replace_full_path.clone().map(PathRewrite::Full),
        "ReplacePrefixMatch" => p.replace_prefix_match.clone().map(PathRewrite::Prefix),
        _ => None,
    }
}

impl Ctx<'_> {
    /// An HTTP or HTTPS listener: the HTTPRoutes that attach to it, merged per hostname
    /// pattern (narrowed to the listener's): a request's Host picks the most specific
    /// pattern (the listener's host matcher), whose table holds the rules of every
    /// route with a hostname covering that pattern, sorted by the Gateway API match
    /// precedence (hostname specificity is not a key: upstream conformance
    /// `HTTPRouteMatchingAcrossRoutes` wants `example.com /v2` to reach a `*.com`
    /// route's `/v2` before an `example.com` route's `/`). One IR route per distinct
    /// set of HTTPRoutes. Returns how many routes attached.
    fn http_listener(
        &mut self,
        l: &gw::Listener,
        gns: &str,
        gname: &str,
        listener: &mut Listener,
        ir: &mut Ir,
    ) -> usize {
        let items = self.items;
        // Each attached route with its hostnames narrowed to the listener's.
        let mut attached_hosts: Vec<(usize, Vec<String>)> = Vec::new();
        for item in self.by.routes_for(gns, gname, l) {
            self.stats.candidates += 1;
            let Object::HttpRoute(hr) = &items[item].object else {
                continue;
            };
            let c = Candidate {
                item: &items[item],
                kind: "HTTPRoute",
                parents: &hr.spec.parent_refs,
                hostnames: &hr.spec.hostnames,
                rules: &[],
            };
            let selecting = selecting_parents(&c, l, gns, gname);
            if selecting.is_empty() {
                continue;
            }
            match self.attach_hosts(&c, l, gns) {
                Err(why) => {
                    for pi in selecting {
                        self.attachment.record(item, pi, Attach::Refused(why));
                    }
                }
                Ok(hosts) => {
                    for pi in selecting {
                        self.attachment.record(item, pi, Attach::Attached);
                    }
                    attached_hosts.push((item, hosts));
                }
            }
        }
        // The host matcher picks the most specific pattern for a request's Host; that
        // pattern's table holds every route with a hostname covering it (upstream
        // `HTTPRouteMatchingAcrossRoutes`: `*.com`'s rules apply to `example.com`
        // requests too, merged by match precedence).
        let patterns: std::collections::BTreeSet<&String> =
            attached_hosts.iter().flat_map(|(_, h)| h.iter()).collect();
        let mut by_set: BTreeMap<Vec<usize>, Vec<String>> = BTreeMap::new();
        for h in patterns {
            let set: Vec<usize> = attached_hosts
                .iter()
                .filter(|(_, hosts)| hosts.iter().any(|p| hostname::istio_subset_of(h, p)))
                .map(|(item, _)| *item)
                .collect();
            by_set.entry(set).or_default().push(h.clone());
        }
        for (set, hosts) in by_set {
            let ri = self.http_route_ir(&set, ir);
            for host in hosts {
                listener.bindings.push(Binding { host, route: ri });
            }
        }
        attached_hosts.len()
    }

    /// The IR route of the HTTPRoutes `set` (item indices) on one hostname.
    fn http_route_ir(&self, set: &[usize], ir: &mut Ir) -> usize {
        let mut rules: Vec<HttpRule> = Vec::new();
        let mut keyed: Vec<(MatchKey, HttpMatch, usize)> = Vec::new();
        let mut labels = Vec::new();
        let mut maglev = None;
        for &item in set {
            let Object::HttpRoute(hr) = &self.items[item].object else {
                continue;
            };
            let rns = hr.meta.namespace();
            labels.push(format!("{rns}/{}", hr.meta.name));
            let precedence = hr.meta.precedence();
            // Upstream default: one rule matching `PathPrefix /` with no backend (500).
            let default_rules = [gw::HttpRouteRule::default()];
            let route_rules: &[gw::HttpRouteRule] = if hr.spec.rules.is_empty() {
                &default_rules
            } else {
                &hr.spec.rules
            };
            for (ri, rule) in route_rules.iter().enumerate() {
                let index = rules.len();
                let name = match &rule.name {
                    Some(n) => format!("HTTPRoute {rns}/{} rules[{ri}] ({n})", hr.meta.name),
                    None => format!("HTTPRoute {rns}/{} rules[{ri}]", hr.meta.name),
                };
                if maglev.is_none() {
                    maglev = rule.backend_refs.first().map(|b| {
                        self.maglev_size_for(b.namespace.as_deref().unwrap_or(rns), &b.name)
                    });
                }
                rules.push(self.http_route_rule(name, rule, rns));
                let default = [gw::HttpRouteMatch::default()];
                let matches: &[gw::HttpRouteMatch] = if rule.matches.is_empty() {
                    &default
                } else {
                    &rule.matches
                };
                for (mi, m) in matches.iter().enumerate() {
                    keyed.push((
                        match_key(m, &precedence, ri, mi),
                        http_route_match(m),
                        index,
                    ));
                }
            }
        }
        // Stable: routes come in `set` order, which is precedence order already; the key
        // holds it too.
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        let ri = ir.routes.len();
        ir.routes.push(Route {
            name: if labels.len() == 1 {
                format!("HTTPRoute {}", labels[0])
            } else {
                format!("HTTPRoutes {}", labels.join(", "))
            },
            kind: RouteKind::Http,
            destination_subnets: Vec::new(),
            backends: Vec::new(),
            http: rules,
            http_matches: keyed.into_iter().map(|(_, m, i)| (m, i)).collect(),
            maglev_table_size: maglev.unwrap_or(self.default_maglev),
        });
        ri
    }

    /// The IR rule of one HTTPRoute rule (validated): a RequestRedirect answers; else it
    /// forwards to its backendRefs (none, or all invalid: 500), with the other filters.
    fn http_route_rule(&self, name: String, rule: &gw::HttpRouteRule, rns: &str) -> HttpRule {
        let filter = |kind: &str| rule.filters.iter().find(|f| f.kind == kind);
        let action = match filter("RequestRedirect").and_then(|f| f.request_redirect.as_ref()) {
            Some(x) => HttpAction::Redirect(Redirect {
                code: x
                    .status_code
                    .and_then(|c| u16::try_from(c).ok())
                    .unwrap_or(302),
                scheme: x.scheme.clone(),
                host: x.hostname.clone(),
                // Upstream: no port given -> the scheme's well-known port when a scheme
                // is given, else the Gateway listener's port; omitted when it is the
                // scheme's default.
                port: match (x.port.and_then(|p| u16::try_from(p).ok()), &x.scheme) {
                    (Some(p), _) => RedirectPort::Port(p),
                    (None, Some(_)) => RedirectPort::SchemeDefault,
                    (None, None) => RedirectPort::Listener,
                },
                path: x.path.as_ref().and_then(path_modifier),
            }),
            None => HttpAction::Forward {
                backends: rule
                    .backend_refs
                    .iter()
                    .map(|b| self.backend_ref(&b.plain(), rns, "HTTPRoute"))
                    .collect(),
                invalid_status: 500,
            },
        };
        let rewrite = filter("URLRewrite")
            .and_then(|f| f.url_rewrite.as_ref())
            .map(|x| Rewrite {
                path: x.path.as_ref().and_then(path_modifier),
                authority: x.hostname.clone(),
            })
            .unwrap_or_default();
        let mirrors = rule
            .filters
            .iter()
            .filter_map(|f| {
                f.request_mirror
                    .as_ref()
                    .filter(|_| f.kind == "RequestMirror")
            })
            .map(|m| {
                let mut b = m.backend_ref.clone();
                b.weight = Some(1);
                Mirror {
                    backends: vec![self.backend_ref(&b, rns, "HTTPRoute")],
                    per_million: match (&m.percent, &m.fraction) {
                        (Some(p), _) => (p.clamp(&0, &100) * 10_000) as u32,
                        (None, Some(f)) => {
                            let d = f.denominator.unwrap_or(100).max(1);
                            ((f.numerator.clamp(0, d) as f64 / d as f64) * 1_000_000.0).round()
                                as u32
                        }
                        (None, None) => 1_000_000,
                    },
                }
            })
            .collect();
        let timeouts = rule.timeouts.as_ref();
        HttpRule {
            name,
            action,
            rewrite,
            request_headers: header_filter(
                filter("RequestHeaderModifier").and_then(|f| f.request_header_modifier.as_ref()),
            ),
            response_headers: header_filter(
                filter("ResponseHeaderModifier").and_then(|f| f.response_header_modifier.as_ref()),
            ),
            timeout_ms: timeouts
                .and_then(|t| t.request.as_deref())
                .and_then(super::http::duration_ms)
                .unwrap_or(0),
            retries: Retries {
                // `backendRequest` bounds each request to a backend: the per-try deadline
                // (with no retries configured it is the one attempt's).
                per_try_timeout_ms: timeouts
                    .and_then(|t| t.backend_request.as_deref())
                    .and_then(super::http::duration_ms)
                    .unwrap_or(0),
                ..Retries::default()
            },
            mirrors,
        }
    }

    /// Adds a listener per listener of a Gateway API Gateway, with the routes attached
    /// to it; routes that cannot attach are warned about in `diags`.
    pub(super) fn gateway_api(
        &mut self,
        gi: usize,
        spec: &gw::GatewaySpec,
        ir: &mut Ir,
        diags: &mut Vec<Diagnostic>,
    ) {
        let it = &self.items[gi];
        let gns = it.object.meta().namespace().to_string();
        let gname = it.object.meta().name.clone();
        let transparent = transparent_by_annotation(&it.object.meta().annotations).unwrap_or(false);
        let explicit: Vec<IpAddr> = spec
            .addresses
            .iter()
            .filter_map(|a| a.value.parse().ok())
            .collect();
        for (li, l) in spec.listeners.iter().enumerate() {
            let Ok(port) = u16::try_from(l.port) else {
                continue;
            };
            if self.excluded.listener(gi, li) {
                continue;
            }
            let mut listener = self.gateway_listener(&gns, &gname, li, l, port, &explicit);
            listener.transparent = transparent;
            listener.members = vec![Member {
                name: listener.name.clone(),
                hostnames: match (listener.kind.inspects(), &l.hostname) {
                    (true, Some(h)) => vec![h.to_ascii_lowercase()],
                    _ => Vec::new(),
                },
                source: (gi, li),
                certificates: Vec::new(),
                client_trust: None,
            }];
            let want_kinds = want_kinds(l);
            if want_kinds.contains(&"HTTPRoute") {
                let attached = self.http_listener(l, &gns, &gname, &mut listener, ir);
                self.attachment.listeners.insert((gi, li), attached);
                ir.listeners.push(listener);
                continue;
            }
            // Hosts bound so far, and the route that took each.
            let mut bound: HashMap<String, String> = HashMap::new();
            let items = self.items;
            let mut attached_routes = 0;
            for item in self.by.routes_for(&gns, &gname, l) {
                self.stats.candidates += 1;
                let Some(c) = Candidate::of(&items[item], want_kinds) else {
                    continue;
                };
                let selecting = selecting_parents(&c, l, &gns, &gname);
                if selecting.is_empty() {
                    continue;
                }
                let outcome = self.attach_hosts(&c, l, &gns);
                let hosts = match outcome {
                    Ok(hosts) => hosts,
                    Err(why) => {
                        for pi in selecting {
                            self.attachment.record(item, pi, Attach::Refused(why));
                        }
                        continue;
                    }
                };
                let Some(ri) = self.add_route(&c, ir) else {
                    continue;
                };
                for pi in selecting {
                    self.attachment.record(item, pi, Attach::Attached);
                }
                attached_routes += 1;
                let label = c.item.object.label();
                for h in hosts {
                    if let Some(winner) = bound.get(&h) {
                        c.item.reporter(diags).warn(&c.item.path("spec"), format!("host `{h}` on listener `{}` is already taken by {winner}, which precedes this route (oldest creationTimestamp, then namespace/name); this one is not attached for it", l.name));
                        ir.shadowed.push(Shadowed {
                            host: h,
                            winner: winner.clone(),
                            loser: label.clone(),
                        });
                        continue;
                    }
                    bound.insert(h.clone(), label.clone());
                    listener.bindings.push(Binding { host: h, route: ri });
                }
            }
            self.attachment.listeners.insert((gi, li), attached_routes);
            ir.listeners.push(listener);
        }
    }

    /// The IR listener of Gateway `gns/gname`'s listener `l` (number `li`), without
    /// bindings and not transparent.
    fn gateway_listener(
        &self,
        gns: &str,
        gname: &str,
        li: usize,
        l: &gw::Listener,
        port: u16,
        explicit: &[IpAddr],
    ) -> Listener {
        let (kind, protocol) = match (l.protocol.as_str(), l.tls.as_ref().map(|t| t.mode)) {
            ("TCP", _) => (ListenerKind::Tcp, L4::Tcp),
            ("UDP", _) => (ListenerKind::Udp, L4::Udp),
            ("HTTP", _) => (ListenerKind::Http, L4::Tcp),
            ("TLS", Some(gw::GatewayTlsMode::Passthrough)) => {
                (ListenerKind::TlsPassthrough, L4::Tcp)
            }
            _ => (ListenerKind::TlsTerminate, L4::Tcp),
        };
        Listener {
            name: format!("Gateway {gns}/{gname} listeners[{li}] ({})", l.name),
            addresses: self.addresses(explicit),
            port,
            protocol,
            kind,
            tls: (kind == ListenerKind::TlsTerminate).then(|| TlsTerminate {
                mode: "Terminate".into(),
                certificates: l
                    .tls
                    .iter()
                    .flat_map(|t| t.certificate_refs.iter())
                    .map(|c| format!("{}/{}", c.namespace.as_deref().unwrap_or(gns), c.name))
                    .collect(),
                require_client_cert: l
                    .tls
                    .as_ref()
                    .is_some_and(|t| t.frontend_validation.is_some()),
                http: l.protocol == "HTTPS",
                min_tls13: l
                    .tls
                    .as_ref()
                    .and_then(|t| t.options.get(validate::MIN_TLS_VERSION))
                    .is_some_and(|v| v == "1.3"),
                max_tls12: false,
                cipher_suites: Vec::new(),
                client: l
                    .tls
                    .as_ref()
                    .and_then(|t| t.frontend_validation.as_ref())
                    .map(|v| ClientAuth {
                        optional: false,
                        trust: v
                            .ca_certificate_refs
                            .iter()
                            .map(|r| {
                                format!(
                                    "{} {}/{}",
                                    r.kind,
                                    r.namespace.as_deref().unwrap_or(gns),
                                    r.name
                                )
                            })
                            .collect(),
                        ..ClientAuth::default()
                    }),
            }),
            https_redirect: false,
            transparent: false,
            bindings: Vec::new(),
            members: Vec::new(),
        }
    }

    /// The hosts a candidate route that selects listener `l` (of a Gateway in `gns`)
    /// attaches with, or why it does not: the listener's `allowedRoutes` do not admit
    /// it, or no hostname intersects.
    fn attach_hosts(
        &self,
        c: &Candidate,
        l: &gw::Listener,
        gns: &str,
    ) -> Result<Vec<String>, Refusal> {
        let rns = c.item.object.meta().namespace();
        if !self.allowed(l, gns, rns, c.kind) {
            return Err(Refusal::NotAllowedByListeners);
        }
        // Hostnames: intersection of listener and route hostnames.
        let route_hosts: Vec<&str> = c.hostnames.iter().map(String::as_str).collect();
        let hosts: Vec<String> =
            match hostname::narrow_route_hostnames(l.hostname.as_deref(), &route_hosts) {
                Some(h) if h.is_empty() => vec!["*".into()],
                Some(h) => h.iter().map(|h| h.to_ascii_lowercase()).collect(),
                None => Vec::new(),
            };
        if hosts.is_empty() {
            return Err(Refusal::NoMatchingListenerHostname);
        }
        Ok(hosts)
    }

    /// Adds the IR route of a candidate's (only) rule; returns its index, or `None` when
    /// the route has no rule.
    fn add_route(&self, c: &Candidate, ir: &mut Ir) -> Option<usize> {
        let rule = c.rules.first()?;
        let rns = c.item.object.meta().namespace();
        let backends: Vec<Backend> = rule
            .backend_refs
            .iter()
            .map(|b| self.backend_ref(b, rns, c.kind))
            .collect();
        let maglev = rule
            .backend_refs
            .first()
            .map(|b| self.maglev_size_for(b.namespace.as_deref().unwrap_or(rns), &b.name))
            .unwrap_or(self.default_maglev);
        let ri = ir.routes.len();
        ir.routes.push(Route {
            name: format!("{} {rns}/{}", c.kind, c.item.object.meta().name),
            kind: if c.kind == "TLSRoute" {
                RouteKind::Tls
            } else {
                RouteKind::Tcp
            },
            destination_subnets: Vec::new(),
            backends,
            http: Vec::new(),
            http_matches: Vec::new(),
            maglev_table_size: maglev,
        });
        Some(ri)
    }

    /// The backend of one backendRef of a `route_kind` route in namespace `rns`: invalid
    /// when it is not a Service or no ReferenceGrant permits the reference.
    fn backend_ref(&self, b: &gw::BackendRef, rns: &str, route_kind: &str) -> Backend {
        let bns = b.namespace.as_deref().unwrap_or(rns);
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
            ("gateway.networking.k8s.io", route_kind, rns),
            ("", "Service", bns, &b.name),
        ) {
            return Backend {
                name: format!("{bns}/{}", b.name),
                weight: w,
                target: BackendTarget::Invalid(
                    "cross-namespace reference not permitted by a ReferenceGrant".into(),
                ),
            };
        }
        self.backend(bns, &b.name, b.port, b.port_name.as_deref(), None, w)
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
    use super::super::tables;
    use super::*;

    /// A Gateway with a UDP and a TCP listener on the same port, a UDPRoute and a
    /// TCPRoute naming the Gateway without a sectionName, and one Service.
    const L4_ROUTES: &str = r#"
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: g, namespace: default}
spec:
  gatewayClassName: sluice
  addresses: [{value: 10.77.0.11}]
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
            .lookup("10.77.0.11".parse().expect("ip"), 53, proto::UDP)
            .expect("UDP listener");
        let r = t.route(l.route(b"").expect("route")).expect("route");
        assert_eq!(&*r.name, "UDPRoute default/u");
        let picks: Vec<sluice_dataplane::tables::maglev::Pick> = (40000..40400u16)
            .map(|p| {
                r.pick(
                    format!("198.51.100.1:{p}").parse().expect("src"),
                    "10.77.0.11:53".parse().expect("dst"),
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
