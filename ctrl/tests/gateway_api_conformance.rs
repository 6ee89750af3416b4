//! The Gateway API conformance scenarios for TLSRoute and TCPRoute, and those about
//! attachment, route kinds and listener conflicts, restated in sluice's own manifests
//! with the outcome each upstream test expects (or, where sluice does not serve a feature
//! yet, the outcome "fail loud, never wide" requires: left out and reported, never
//! served wider). Each test names the upstream test it restates.
//!
//! Every scenario's objects carry their own addresses in the embedded default port's
//! network (10.77.0.0/24), as a conformance run gives each Gateway its own address.

use serde_json::Value;
use sluice_ctrl::compile::{build, Built};
use sluice_ctrl::load::{load_str, Loaded};
use sluice_dataplane::tables::listeners::proto;
use sluice_dataplane::tables::maglev::Pick;

const NS: &str = "conformance";

/// Services and pods every scenario may use: `tls-backend` (443), `tcp-backend` (8443)
/// in the infra namespace, `app-backend` (443) in another namespace.
const BACKENDS: &str = r#"
---
apiVersion: v1
kind: Namespace
metadata: {name: conformance}
---
apiVersion: v1
kind: Namespace
metadata: {name: app-backend}
---
apiVersion: v1
kind: Service
metadata: {name: tls-backend, namespace: conformance}
spec: {selector: {app: tls}, ports: [{port: 443}]}
---
apiVersion: v1
kind: Pod
metadata: {name: tls-0, namespace: conformance, labels: {app: tls}}
status: {podIP: 10.80.0.1}
---
apiVersion: v1
kind: Service
metadata: {name: tcp-backend, namespace: conformance}
spec: {selector: {app: tcp}, ports: [{port: 8443}]}
---
apiVersion: v1
kind: Pod
metadata: {name: tcp-0, namespace: conformance, labels: {app: tcp}}
status: {podIP: 10.80.0.2}
---
apiVersion: v1
kind: Service
metadata: {name: app-backend, namespace: app-backend}
spec: {selector: {app: app}, ports: [{port: 443}]}
---
apiVersion: v1
kind: Pod
metadata: {name: app-0, namespace: app-backend, labels: {app: app}}
status: {podIP: 10.80.0.3}
"#;

fn built(text: &str) -> Built {
    let mut loaded = Loaded::default();
    load_str("scenario.yaml", &format!("{text}{BACKENDS}"), &mut loaded);
    build(loaded).unwrap_or_else(|d| panic!("rejected: {:#?}", d.error_lines()))
}

/// A Gateway with one listener per `(name, port, protocol, hostname, extra)`.
fn gateway(
    name: &str,
    address: &str,
    listeners: &[(&str, u16, &str, Option<&str>, &str)],
) -> String {
    let mut s = format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {name}, namespace: {NS}}}\nspec:\n  gatewayClassName: sluice\n  addresses: [{{value: {address}}}]\n  listeners:\n"
    );
    for (n, port, protocol, hostname, extra) in listeners {
        s.push_str(&format!(
            "  - name: {n}\n    port: {port}\n    protocol: {protocol}\n"
        ));
        if let Some(h) = hostname {
            s.push_str(&format!("    hostname: \"{h}\"\n"));
        }
        s.push_str(extra);
    }
    s.push_str("---\n");
    s
}

const PASSTHROUGH: &str = "    tls: {mode: Passthrough}\n    allowedRoutes: {namespaces: {from: Same}, kinds: [{kind: TLSRoute}]}\n";

/// A TLSRoute in the infra namespace.
fn tls_route(
    name: &str,
    parent: &str,
    section: Option<&str>,
    hostnames: &[&str],
    backend: &str,
) -> String {
    let section = section
        .map(|s| format!(", sectionName: {s}"))
        .unwrap_or_default();
    let hosts = hostnames
        .iter()
        .map(|h| format!("\"{h}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "apiVersion: gateway.networking.k8s.io/v1alpha2\nkind: TLSRoute\nmetadata: {{name: {name}, namespace: {NS}}}\nspec:\n  parentRefs: [{{name: {parent}{section}}}]\n  hostnames: [{hosts}]\n  rules: [{{backendRefs: [{backend}]}}]\n---\n"
    )
}

/// The status stanza of `kind ns/name`.
fn status<'v>(v: &'v Value, kind: &str, name: &str) -> &'v Value {
    v.as_array()
        .expect("list")
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .map(|o| &o["status"])
        .unwrap_or_else(|| panic!("no {kind} {name} in {v:#}"))
}

/// `(status, reason)` of condition `ty` in a condition list.
fn cond(conds: &Value, ty: &str) -> (String, String) {
    let c = conds
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == ty)
        .unwrap_or_else(|| panic!("no {ty} in {conds:#}"));
    (
        c["status"].as_str().unwrap_or("").to_string(),
        c["reason"].as_str().unwrap_or("").to_string(),
    )
}

fn pair(s: &str, r: &str) -> (String, String) {
    (s.to_string(), r.to_string())
}

/// The backend a connection to `dst` naming `sni` is given (from 100 source ports:
/// every pick, deduplicated), or `None` without a route.
fn picks(b: &Built, dst: &str, sni: &str) -> Option<Vec<Pick>> {
    let dst: std::net::SocketAddr = dst.parse().expect("dst");
    let l = b
        .snapshot
        .listeners
        .lookup(dst.ip(), dst.port(), proto::TCP)?;
    let r = b.snapshot.listeners.route(l.route(sni.as_bytes())?)?;
    let mut v: Vec<Pick> = (40000..40100u16)
        .map(|p| r.pick(format!("198.51.100.7:{p}").parse().expect("src"), dst, 6))
        .collect();
    v.dedup();
    v.sort_by_key(|p| format!("{p:?}"));
    v.dedup();
    Some(v)
}

fn backend(a: &str) -> Pick {
    Pick::Backend(a.parse().expect("addr"))
}

/// Upstream `TLSRouteSimpleSameNamespace`: a TLSRoute for abc.example.com on a
/// `*.example.com` Passthrough listener is accepted, resolves its backend and carries
/// abc.example.com to it.
#[test]
fn tlsroute_simple_same_namespace() {
    let b = built(&format!(
        "{}{}",
        gateway(
            "gateway-tlsroute",
            "10.77.0.21",
            &[("https", 443, "TLS", Some("*.example.com"), PASSTHROUGH)]
        ),
        tls_route(
            "simple",
            "gateway-tlsroute",
            None,
            &["abc.example.com"],
            "{name: tcp-backend, port: 8443}"
        ),
    ));
    assert_eq!(b.not_served().count(), 0);
    let v = b.status_json();
    let route = &status(&v, "TLSRoute", "simple")["parents"][0]["conditions"];
    assert_eq!(cond(route, "Accepted"), pair("True", "Accepted"));
    assert_eq!(cond(route, "ResolvedRefs"), pair("True", "ResolvedRefs"));
    let gw = status(&v, "Gateway", "gateway-tlsroute");
    assert_eq!(gw["listeners"][0]["attachedRoutes"], 1);
    assert_eq!(gw["listeners"][0]["supportedKinds"][0]["kind"], "TLSRoute");
    assert_eq!(
        picks(&b, "10.77.0.21:443", "abc.example.com"),
        Some(vec![backend("10.80.0.2:8443")])
    );
    assert_eq!(picks(&b, "10.77.0.21:443", "xyz.example.com"), None);
}

/// Upstream `TLSRouteInvalidReferenceGrant`: grants that do not match (wrong namespace,
/// from group, from kind, from namespace, to group, to kind, to name) do not permit the
/// cross-namespace backend: the route is accepted with `ResolvedRefs=False
/// RefNotPermitted`, and its connections are refused, never sent to the backend.
#[test]
fn tlsroute_invalid_reference_grant() {
    let grant = |name: &str, ns: &str, from: (&str, &str, &str), to: (&str, &str, &str)| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  from: [{{group: \"{}\", kind: {}, namespace: {}}}]\n  to: [{{group: \"{}\", kind: {}, name: {}}}]\n---\n",
            from.0, from.1, from.2, to.0, to.1, to.2
        )
    };
    let g = "gateway.networking.k8s.io";
    let grants = [
        grant(
            "wrong-namespace",
            NS,
            (g, "TLSRoute", NS),
            ("", "Service", "app-backend"),
        ),
        grant(
            "wrong-from-group",
            "app-backend",
            ("other.io", "TLSRoute", NS),
            ("", "Service", "app-backend"),
        ),
        grant(
            "wrong-from-kind",
            "app-backend",
            (g, "Gateway", NS),
            ("", "Service", "app-backend"),
        ),
        grant(
            "wrong-from-namespace",
            "app-backend",
            (g, "TLSRoute", "elsewhere"),
            ("", "Service", "app-backend"),
        ),
        grant(
            "wrong-to-group",
            "app-backend",
            (g, "TLSRoute", NS),
            ("other.io", "Service", "app-backend"),
        ),
        grant(
            "wrong-to-kind",
            "app-backend",
            (g, "TLSRoute", NS),
            ("", "Secret", "app-backend"),
        ),
        grant(
            "wrong-to-name",
            "app-backend",
            (g, "TLSRoute", NS),
            ("", "Service", "someone-else"),
        ),
    ]
    .concat();
    let b = built(&format!(
        "{grants}{}{}",
        gateway(
            "gateway-tlsroute",
            "10.77.0.22",
            &[("https", 443, "TLS", Some("*.example.com"), PASSTHROUGH)]
        ),
        tls_route(
            "cross",
            "gateway-tlsroute",
            None,
            &["abc.example.com"],
            "{name: app-backend, namespace: app-backend, port: 443}"
        ),
    ));
    let v = b.status_json();
    let route = &status(&v, "TLSRoute", "cross")["parents"][0]["conditions"];
    assert_eq!(cond(route, "Accepted"), pair("True", "Accepted"));
    assert_eq!(
        cond(route, "ResolvedRefs"),
        pair("False", "RefNotPermitted")
    );
    assert_eq!(
        picks(&b, "10.77.0.22:443", "abc.example.com"),
        Some(vec![Pick::Reject])
    );
}

/// Upstream `TLSRouteHostnameIntersection`: a route's hostnames are narrowed to what its
/// listener admits — an exact route on a wildcard listener, a wildcard route on an exact
/// listener (abc.example.com only), a `*.com` route on a listener without hostname.
#[test]
fn tlsroute_hostname_intersection() {
    let b = built(&format!(
        "{}{}{}{}{}{}",
        gateway(
            "exact-gw",
            "10.77.0.31",
            &[("l", 443, "TLS", Some("abc.example.com"), PASSTHROUGH)]
        ),
        gateway(
            "wildcard-gw",
            "10.77.0.32",
            &[("l", 443, "TLS", Some("*.example.com"), PASSTHROUGH)]
        ),
        gateway(
            "empty-gw",
            "10.77.0.33",
            &[("l", 443, "TLS", None, PASSTHROUGH)]
        ),
        tls_route(
            "exact-route",
            "wildcard-gw",
            None,
            &["abc.example.com"],
            "{name: tls-backend, port: 443}"
        ),
        tls_route(
            "wildcard-route",
            "exact-gw",
            None,
            &["*.example.com"],
            "{name: tls-backend, port: 443}"
        ),
        tls_route(
            "less-specific-route",
            "empty-gw",
            None,
            &["*.com"],
            "{name: tcp-backend, port: 8443}"
        ),
    ));
    assert_eq!(b.not_served().count(), 0);
    let v = b.status_json();
    for r in ["exact-route", "wildcard-route", "less-specific-route"] {
        let c = &status(&v, "TLSRoute", r)["parents"][0]["conditions"];
        assert_eq!(cond(c, "Accepted"), pair("True", "Accepted"), "{r}");
    }
    let tls = Some(vec![backend("10.80.0.1:443")]);
    assert_eq!(picks(&b, "10.77.0.32:443", "abc.example.com"), tls);
    assert_eq!(picks(&b, "10.77.0.32:443", "xyz.example.com"), None);
    assert_eq!(picks(&b, "10.77.0.31:443", "abc.example.com"), tls);
    assert_eq!(
        picks(&b, "10.77.0.33:443", "abc.com"),
        Some(vec![backend("10.80.0.2:8443")])
    );
    assert_eq!(picks(&b, "10.77.0.33:443", "abc.org"), None);
}

/// Upstream `TLSRouteInvalidNoMatchingListenerHostname` (and the hostname part of
/// attachment): a route none of whose hostnames intersects the listener's is not
/// accepted (`NoMatchingListenerHostname`), reported, and the rest is served.
#[test]
fn tlsroute_no_matching_listener_hostname() {
    let b = built(&format!(
        "{}{}{}",
        gateway(
            "gw",
            "10.77.0.41",
            &[("l", 443, "TLS", Some("*.example.com"), PASSTHROUGH)]
        ),
        tls_route(
            "ok",
            "gw",
            None,
            &["abc.example.com"],
            "{name: tls-backend, port: 443}"
        ),
        tls_route(
            "elsewhere",
            "gw",
            None,
            &["abc.example.net"],
            "{name: tls-backend, port: 443}"
        ),
    ));
    let v = b.status_json();
    let c = &status(&v, "TLSRoute", "elsewhere")["parents"][0]["conditions"];
    assert_eq!(
        cond(c, "Accepted"),
        pair("False", "NoMatchingListenerHostname")
    );
    let d: Vec<String> = b.not_served().map(|d| d.to_string()).collect();
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(
        d[0].contains("TLSRoute conformance/elsewhere: spec.parentRefs[0]"),
        "{d:?}"
    );
    assert!(picks(&b, "10.77.0.41:443", "abc.example.com").is_some());
}

/// Upstream `TCPRouteSimple` shape (experimental channel): TCPRoutes on two TCP listeners
/// by sectionName, each carrying every connection of its port to its backend.
#[test]
fn tcproute_by_section_name() {
    let route = |name: &str, section: &str, svc: &str, port: u16| {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1alpha2\nkind: TCPRoute\nmetadata: {{name: {name}, namespace: {NS}}}\nspec:\n  parentRefs: [{{name: tcp-gw, sectionName: {section}}}]\n  rules: [{{backendRefs: [{{name: {svc}, port: {port}}}]}}]\n---\n"
        )
    };
    let b = built(&format!(
        "{}{}{}",
        gateway(
            "tcp-gw",
            "10.77.0.51",
            &[
                ("foo", 8080, "TCP", None, ""),
                ("bar", 8090, "TCP", None, "")
            ]
        ),
        route("tcp-foo", "foo", "tls-backend", 443),
        route("tcp-bar", "bar", "tcp-backend", 8443),
    ));
    assert_eq!(b.not_served().count(), 0);
    assert_eq!(
        picks(&b, "10.77.0.51:8080", ""),
        Some(vec![backend("10.80.0.1:443")])
    );
    assert_eq!(
        picks(&b, "10.77.0.51:8090", ""),
        Some(vec![backend("10.80.0.2:8443")])
    );
    let v = b.status_json();
    for l in status(&v, "Gateway", "tcp-gw")["listeners"]
        .as_array()
        .expect("listeners")
    {
        assert_eq!(l["attachedRoutes"], 1);
        assert_eq!(l["supportedKinds"][0]["kind"], "TCPRoute");
    }
}

/// Upstream `GatewayInvalidRouteKind`: a listener whose allowedRoutes names only an
/// unknown kind has `ResolvedRefs=False InvalidRouteKinds` and no supported kind; one
/// that also names a kind sluice serves keeps serving it. The Gateways are not rejected.
#[test]
fn gateway_invalid_route_kind() {
    let b = built(&format!(
        "{}{}{}",
        gateway("only-invalid", "10.77.0.61", &[("tls", 443, "TLS", None, "    tls: {mode: Passthrough}\n    allowedRoutes: {namespaces: {from: All}, kinds: [{kind: InvalidRoute}]}\n")]),
        gateway("supported-and-invalid", "10.77.0.62", &[("tls", 443, "TLS", None, "    tls: {mode: Passthrough}\n    allowedRoutes: {namespaces: {from: All}, kinds: [{kind: InvalidRoute}, {kind: TLSRoute}]}\n")]),
        tls_route("control", "supported-and-invalid", Some("tls"), &["supported-route-kind.example.com"], "{name: tls-backend, port: 443}"),
    ));
    let v = b.status_json();
    let only = &status(&v, "Gateway", "only-invalid")["listeners"][0];
    assert_eq!(
        cond(&only["conditions"], "ResolvedRefs"),
        pair("False", "InvalidRouteKinds")
    );
    assert_eq!(only["supportedKinds"], serde_json::json!([]));
    let both = &status(&v, "Gateway", "supported-and-invalid")["listeners"][0];
    assert_eq!(
        cond(&both["conditions"], "ResolvedRefs"),
        pair("False", "InvalidRouteKinds")
    );
    assert_eq!(both["supportedKinds"][0]["kind"], "TLSRoute");
    assert_eq!(both["attachedRoutes"], 1);
    assert!(picks(&b, "10.77.0.62:443", "supported-route-kind.example.com").is_some());
}

/// Upstream `GatewayListenerProtocolAndRouteKindConflicts` (restated for TLS): an
/// HTTPRoute aimed at a TLS listener is not served; of two listeners on one port without
/// hostname, the later is `Conflicted`; the TLSRoute on the first listener is served.
#[test]
fn listener_protocol_and_route_kind_conflicts() {
    let b = built(&format!(
        "{}{}apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: disallowed-kind, namespace: {NS}}}\nspec:\n  parentRefs: [{{name: tlsroutes-only, sectionName: tls}}]\n  rules: [{{backendRefs: [{{name: tls-backend, port: 443}}]}}]\n---\n",
        gateway("tlsroutes-only", "10.77.0.71", &[
            ("tls", 443, "TLS", Some("abc.example.com"), PASSTHROUGH),
            ("first", 8443, "TLS", None, PASSTHROUGH),
            ("conflicted", 8443, "TLS", None, PASSTHROUGH),
        ]),
        tls_route("control", "tlsroutes-only", Some("tls"), &["abc.example.com"], "{name: tcp-backend, port: 8443}"),
    ));
    let d: Vec<String> = b.not_served().map(|d| d.to_string()).collect();
    assert!(
        d.iter()
            .any(|x| x.contains("HTTPRoute conformance/disallowed-kind")),
        "{d:?}"
    );
    let v = b.status_json();
    let ls = &status(&v, "Gateway", "tlsroutes-only")["listeners"];
    assert_eq!(
        cond(&ls[2]["conditions"], "Conflicted"),
        pair("True", "HostnameConflict")
    );
    assert_eq!(
        cond(&ls[1]["conditions"], "Conflicted"),
        pair("False", "NoConflicts")
    );
    assert_eq!(
        picks(&b, "10.77.0.71:443", "abc.example.com"),
        Some(vec![backend("10.80.0.2:8443")])
    );
}

/// Upstream `GatewayHTTPSAndTLSPassthroughSamePort`: an HTTPS (Terminate) listener for
/// `*.example.com` and a TLS Passthrough listener for abc.example.com on one port.
/// Upstream serves both; a sluice dataplane listener either terminates or passes through
/// (one kind per address and port), so the later listener in precedence order is left
/// out (`ProtocolConflict`) and its names get no route — never a wider one. With a
/// certificate that does not load, the HTTPS listener is left out instead and
/// abc.example.com passes through.
#[test]
fn https_and_tls_passthrough_on_one_port() {
    let pem = |f: &str| {
        std::fs::read_to_string(format!("{}/tests/data/tls/{f}", env!("CARGO_MANIFEST_DIR")))
            .expect("fixture")
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    };
    let scenario = |secret: &str| {
        format!(
            "{}{}{secret}",
            gateway(
                "same-port",
                "10.77.0.81",
                &[
                    (
                        "https-terminate",
                        8884,
                        "HTTPS",
                        Some("*.example.com"),
                        "    tls: {mode: Terminate, certificateRefs: [{name: cert}]}\n"
                    ),
                    (
                        "tls-passthrough",
                        8884,
                        "TLS",
                        Some("abc.example.com"),
                        PASSTHROUGH
                    ),
                ]
            ),
            tls_route(
                "passthrough",
                "same-port",
                Some("tls-passthrough"),
                &["abc.example.com"],
                "{name: tcp-backend, port: 8443}"
            ),
        )
    };
    let good = format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: cert, namespace: {NS}}}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}---\n",
        pem("wildcard.crt"),
        pem("wildcard.key")
    );
    let b = built(&scenario(&good));
    let d: Vec<String> = b.not_served().map(|d| d.to_string()).collect();
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(d[0].starts_with("not served (ProtocolConflict)"), "{d:?}");
    assert!(d[0].contains("spec.listeners[1].port"), "{d:?}");
    let l = b
        .snapshot
        .listeners
        .lookup("10.77.0.81".parse().expect("ip"), 8884, proto::TCP)
        .expect("the HTTPS listener");
    assert!(l.tls.is_some(), "terminates");
    // HTTPRoutes are not read: the terminated names have no route, abc.example.com
    // is not passed through by a listener that terminates.
    assert_eq!(picks(&b, "10.77.0.81:8884", "abc.example.com"), None);

    let bad = format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: cert, namespace: {NS}}}\ntype: kubernetes.io/tls\nstringData: {{tls.crt: x, tls.key: y}}\n---\n");
    let b = built(&scenario(&bad));
    let d: Vec<String> = b.not_served().map(|d| d.to_string()).collect();
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(
        d[0].starts_with("not served (InvalidCertificateRef)"),
        "{d:?}"
    );
    assert!(
        d[0].contains("spec.listeners[0].tls.certificateRefs[0].name"),
        "{d:?}"
    );
    assert_eq!(
        picks(&b, "10.77.0.81:8884", "abc.example.com"),
        Some(vec![backend("10.80.0.2:8443")])
    );
    assert_eq!(
        picks(&b, "10.77.0.81:8884", "other.example.com"),
        None,
        "never wider"
    );
}

/// A cluster dump with one stray route (a sectionName no listener has) loads: the
/// stray route is reported, and the tables are those of the dump without it.
#[test]
fn a_stray_route_leaves_everything_else_served() {
    let base = format!(
        "{}{}",
        gateway(
            "gw",
            "10.77.0.91",
            &[("l", 443, "TLS", Some("*.example.com"), PASSTHROUGH)]
        ),
        tls_route(
            "ok",
            "gw",
            None,
            &["abc.example.com"],
            "{name: tls-backend, port: 443}"
        ),
    );
    let clean = built(&base);
    let stray = built(&format!(
        "{base}{}",
        tls_route(
            "stray",
            "gw",
            Some("no-such-listener"),
            &["abc.example.com"],
            "{name: tcp-backend, port: 8443}"
        )
    ));
    let d: Vec<String> = stray.not_served().map(|d| d.to_string()).collect();
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(d[0].contains("not served (NoMatchingParent)"), "{d:?}");
    assert_eq!(clean.tables_json(None), stray.tables_json(None));
}
