//! Istio Gateways: each server becomes a listener, and the VirtualServices that name
//! the gateway bind their http, tls and tcp routes to it (AUTO_PASSTHROUGH servers bind
//! every admitted Service port instead).

use std::collections::HashSet;
use std::net::IpAddr;

use sluice_dataplane::tables::hostname;

use crate::load::Item;
use crate::model::istio;
use crate::model::meta::transparent_by_annotation;
use crate::model::{Kind, Object};
use crate::validate;

use super::ir::*;
use super::{Ctx, CLUSTER_DOMAIN};

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
    pub(super) fn istio_gateway(&mut self, it: &Item, spec: &istio::GatewaySpec, ir: &mut Ir) {
        let gns = it.object.meta().namespace().to_string();
        let gname = it.object.meta().name.clone();
        // A bad value is a validation error, so the IR is never built with one.
        let transparent = transparent_by_annotation(&it.object.meta().annotations).unwrap_or(false);
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
