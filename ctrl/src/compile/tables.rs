//! IR -> the dataplane's listener and route tables ([`ListenerTable`]), the part of the
//! snapshot a new flow is routed with.

use sluice_dataplane::tables::http::HttpRoutes;
use sluice_dataplane::tables::listeners::{
    proto, ListenerKind as DpKind, ListenerSpec, ListenerTable, RouteEntry,
};

use super::backends::{maglev_table, mixes_families, table_for};
use super::ir::{Ir, Listener, ListenerKind, RouteKind, L4};

fn kind(k: ListenerKind) -> DpKind {
    match k {
        ListenerKind::Tcp => DpKind::Tcp,
        ListenerKind::Udp => DpKind::Udp,
        ListenerKind::TlsPassthrough => DpKind::TlsPassthrough,
        ListenerKind::TlsAutoPassthrough => DpKind::TlsAutoPassthrough,
        ListenerKind::TlsTerminate => DpKind::TlsTerminate,
        ListenerKind::Http => DpKind::Http,
    }
}

/// Why the listener and route tables could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// A route's Maglev table (size not prime, over its cap, ...).
    #[error("{route}: {source}")]
    Maglev {
        /// The route's name.
        route: String,
        /// Why.
        source: sluice_dataplane::tables::maglev::BuildError,
    },
    /// A route's HTTP rules.
    #[error("{route}: {source}")]
    Http {
        /// The route's name.
        route: String,
        /// Why.
        source: super::http::HttpTableError,
    },
    /// The listener table (host patterns, caps).
    #[error(transparent)]
    Listeners(#[from] sluice_dataplane::tables::listeners::BuildError),
    /// A terminating listener's TLS configuration.
    #[error("{listener}: TLS: {source}")]
    Tls {
        /// The listener's name.
        listener: String,
        /// Why.
        source: super::tls::TlsError,
    },
}

/// Builds the listener table. Route `i` of the table is route `i` of the IR.
pub fn listener_table(ir: &Ir) -> Result<ListenerTable, TableError> {
    let mut routes = Vec::with_capacity(ir.routes.len());
    for r in &ir.routes {
        let size = r.maglev_table_size;
        let err = |source| TableError::Maglev {
            route: r.name.clone(),
            source,
        };
        let (table, table_v6) = if mixes_families(&r.backends) {
            (
                table_for(&r.backends, size, false).map_err(err)?,
                Some(table_for(&r.backends, size, true).map_err(err)?),
            )
        } else {
            (maglev_table(&r.backends, size).map_err(err)?, None)
        };
        let http = if r.kind == RouteKind::Http {
            super::http::routes(r).map_err(|source| TableError::Http {
                route: r.name.clone(),
                source,
            })?
        } else {
            HttpRoutes::default()
        };
        routes.push(RouteEntry {
            name: r.name.as_str().into(),
            subnets: r
                .destination_subnets
                .iter()
                .map(|n| (n.network(), n.prefix_len()))
                .collect(),
            table,
            table_v6,
            http,
        });
    }
    let mut specs = Vec::with_capacity(ir.listeners.len());
    for l in &ir.listeners {
        let tls =
            match l.kind {
                ListenerKind::TlsTerminate => Some(super::tls::listener_tls(l).map_err(
                    |source| TableError::Tls {
                        listener: l.name.clone(),
                        source,
                    },
                )?),
                _ => None,
            };
        specs.push(ListenerSpec {
            name: l.name.clone(),
            addresses: l.addresses.clone(),
            port: l.port,
            proto: match l.protocol {
                L4::Tcp => proto::TCP,
                L4::Udp => proto::UDP,
            },
            kind: kind(l.kind),
            bindings: l
                .bindings
                .iter()
                .map(|b| {
                    let route = match b.route {
                        super::ir::NO_ROUTE => sluice_dataplane::tables::listeners::NO_ROUTE,
                        r => r as u32,
                    };
                    (b.host.clone(), route)
                })
                .collect(),
            https_redirect: l.https_redirect,
            transparent: l.transparent,
            tls,
            proxy: proxies(ir, l),
        });
    }
    Ok(ListenerTable::build(specs, routes)?)
}

/// Whether a listener's HTTP requests are routed one by one by the proxy (see
/// `ListenerEntry::proxy`): a terminating HTTPS listener with any HTTP route; a plain
/// HTTP listener with a route that cannot decide once per connection exactly.
pub fn proxies(ir: &Ir, l: &Listener) -> bool {
    let mut http_routes = l
        .bindings
        .iter()
        .filter_map(|b| ir.routes.get(b.route))
        .filter(|r| r.kind == RouteKind::Http);
    match l.kind {
        ListenerKind::TlsTerminate if l.tls.as_ref().is_some_and(|t| t.http) => {
            http_routes.next().is_some()
        }
        ListenerKind::Http => http_routes.any(|r| !super::http::once_per_connection(r)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::build_paths as compile_paths;
    use sluice_dataplane::tables::maglev::Pick;
    use std::path::Path;

    #[test]
    fn every_example_builds_its_listener_table() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
        let ir = compile_paths(&[dir]).expect("configs compile").ir;
        let t = listener_table(&ir).expect("table");
        assert_eq!(t.len(), ir.listeners.len());
        assert_eq!(t.routes().len(), ir.routes.len());
        // The demo's TLS listener routes beta.* to tls-beta.
        let l = t
            .lookup("10.77.0.10".parse().expect("ip"), 8443, proto::TCP)
            .expect("listener");
        let r = t
            .route(l.route(b"beta.demo.sluice.dev").expect("route"))
            .expect("route");
        assert_eq!(&*r.name, "TLSRoute demo/beta");
        assert_eq!(
            r.pick(
                "10.77.0.1:1".parse().expect("a"),
                "10.77.0.10:8443".parse().expect("a"),
                6
            ),
            Pick::Backend("10.78.0.22:8443".parse().expect("a"))
        );
        // HTTP: /api/ goes to echo-a, the rest to web.
        let l = t
            .lookup("10.77.0.10".parse().expect("ip"), 8080, proto::TCP)
            .expect("listener");
        let r = t
            .route(l.route(b"www.demo.sluice.dev").expect("route"))
            .expect("route");
        let backends = |path: &str| {
            let req = sluice_dataplane::tables::http::Request {
                method: "GET",
                scheme: "http",
                authority: "www.demo.sluice.dev",
                path,
                query: "",
                headers: &[],
                port: 8080,
                source: "10.77.0.1".parse().expect("ip"),
            };
            match r.http.find(&req).map(|(_, rule)| &rule.action) {
                Some(sluice_dataplane::tables::http::HttpAction::Forward { table, .. }) => {
                    table.backends()
                }
                other => panic!("{path}: {other:?}"),
            }
        };
        assert_eq!(
            backends("/api/orders"),
            ["10.78.0.11:7000".parse().expect("a")]
        );
        assert_eq!(
            backends("/index.html"),
            ["10.78.0.31:8080".parse().expect("a")]
        );
        assert!(l.proxy, "path rules need the proxy");
    }

    fn compile_text(text: &str) -> Result<crate::compile::Built, crate::diag::Diagnostics> {
        let mut loaded = crate::load::Loaded::default();
        crate::load::load_str("gw.yaml", text, &mut loaded);
        crate::compile::build(loaded)
    }

    const GATEWAYS: &str = r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata:
  name: igw
  namespace: default
  annotations: {sluice.dev/source-nat: "ISTIO"}
spec:
  servers:
  - port: {number: 6000, name: tcp, protocol: TCP}
    hosts: ["*"]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: gw
  namespace: default
  annotations:
    sluice.dev/source-nat: "GATEWAY"
spec:
  gatewayClassName: sluice
  listeners:
  - {name: tcp, port: 5000, protocol: TCP}
  - {name: udp, port: 5353, protocol: UDP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: plain, namespace: default}
spec:
  gatewayClassName: sluice
  listeners:
  - {name: tcp, port: 5001, protocol: TCP}
"#;

    /// `sluice.dev/source-nat: "false"` on either kind of gateway makes every one of its
    /// listeners transparent, in the IR and in the dataplane's table; `"true"` and no
    /// annotation keep source NAT.
    #[test]
    fn source_nat_annotation_makes_listeners_transparent() {
        for (istio, gateway) in [("false", "false"), ("true", "false"), ("false", "true")] {
            let text = GATEWAYS.replace("ISTIO", istio).replace("GATEWAY", gateway);
            let c = compile_text(&text);
            let errors: Vec<String> = crate::compile::diagnostics(&c)
                .iter()
                .filter(|d| d.is_error())
                .map(ToString::to_string)
                .collect();
            assert!(errors.is_empty(), "{errors:?}");
            let ir = c.expect("ir").ir;
            let want = |name: &str| {
                if name.contains("istio.io") {
                    istio == "false"
                } else if name.contains("default/gw ") {
                    gateway == "false"
                } else {
                    false
                }
            };
            assert_eq!(ir.listeners.len(), 4);
            for l in &ir.listeners {
                assert_eq!(l.transparent, want(&l.name), "{}", l.name);
            }
            let t = listener_table(&ir).expect("table");
            let any: std::net::IpAddr = "192.0.2.1".parse().expect("ip");
            for (port, p) in [
                (6000, proto::TCP),
                (5000, proto::TCP),
                (5353, proto::UDP),
                (5001, proto::TCP),
            ] {
                let entry = t.lookup(any, port, p).expect("listener");
                let l = ir
                    .listeners
                    .iter()
                    .find(|l| l.port == port)
                    .expect("ir listener");
                assert_eq!(entry.transparent, l.transparent, "port {port}");
            }
        }
    }

    /// Any other value is an error at the annotation's line.
    #[test]
    fn source_nat_annotation_values_are_checked() {
        let c = compile_text(&GATEWAYS.replace("ISTIO", "no").replace("GATEWAY", "False"));
        assert!(c.is_err(), "rejected");
        let errors: Vec<String> = crate::compile::diagnostics(&c)
            .iter()
            .filter(|d| d.is_error())
            .map(ToString::to_string)
            .collect();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0].starts_with("gw.yaml:6:")
                && errors[0].contains("metadata.annotations.sluice.dev/source-nat")
                && errors[0].contains(r#"must be "true" or "false", not "no""#),
            "{}",
            errors[0]
        );
        assert!(errors[1].starts_with("gw.yaml:18:"), "{}", errors[1]);
    }
}
