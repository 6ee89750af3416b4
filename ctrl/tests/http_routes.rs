//! HTTP routing per request, end to end through the compiled tables: the Gateway API
//! HTTPRoute conformance cases restated (each names its upstream file in
//! `kubernetes-sigs/gateway-api/conformance/tests/`), with the requests upstream sends
//! and the backend or answer it expects; and a table of Istio VirtualService cases for
//! every `HTTPMatchRequest` field and action.
//!
//! A request is looked up as the proxy looks it up: listener by address and port, route
//! by the Host (port stripped) through the listener's host matcher, then
//! `HttpRoutes::find`; no route or no rule is the proxy's 404.

use sluice_ctrl::compile::{build, Built};
use sluice_ctrl::load::{load_str, Loaded};
use sluice_dataplane::tables::http::{Header, HttpAction, HttpRule, Request};
use sluice_dataplane::tables::listeners::proto;
use sluice_dataplane::tables::maglev::{MaglevTable, Pick};

const NS: &str = "gateway-conformance-infra";
const GW: &str = "10.77.0.80";

/// The conformance infrastructure: namespaces, `infra-backend-v1..v3` (8080), a
/// `web-backend` in `gateway-conformance-web-backend` and `app-backend-v1` in
/// `gateway-conformance-app-backend`; the `same-namespace` Gateway (HTTP 80, routes from
/// its namespace) and `all-namespaces` (routes from every namespace), as upstream's
/// `base/manifests.yaml` has them.
const BASE: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: gateway-conformance-infra}
---
apiVersion: v1
kind: Namespace
metadata: {name: gateway-conformance-web-backend}
---
apiVersion: v1
kind: Namespace
metadata: {name: gateway-conformance-app-backend}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: same-namespace, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: sluice
  addresses: [{value: 10.77.0.80}]
  listeners:
  - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: Same}}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: all-namespaces, namespace: gateway-conformance-infra}
spec:
  gatewayClassName: sluice
  addresses: [{value: 10.77.0.81}]
  listeners:
  - {name: http, port: 80, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}
"#;

fn backend(name: &str, ns: &str, ip: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{selector: {{app: {name}}}, ports: [{{port: 8080}}]}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}-0, namespace: {ns}, labels: {{app: {name}}}}}\nstatus: {{podIP: {ip}}}\n"
    )
}

/// Backend names by pod address.
const BACKENDS: [(&str, &str, &str); 5] = [
    ("infra-backend-v1", NS, "10.90.0.1"),
    ("infra-backend-v2", NS, "10.90.0.2"),
    ("infra-backend-v3", NS, "10.90.0.3"),
    (
        "web-backend",
        "gateway-conformance-web-backend",
        "10.90.0.4",
    ),
    (
        "app-backend-v1",
        "gateway-conformance-app-backend",
        "10.90.0.5",
    ),
];

fn built(text: &str) -> Built {
    let mut all = format!("{BASE}{text}");
    for (n, ns, ip) in BACKENDS {
        all.push_str(&backend(n, ns, ip));
    }
    let mut loaded = Loaded::default();
    load_str("scenario.yaml", &all, &mut loaded);
    build(loaded).unwrap_or_else(|d| panic!("rejected: {:#?}", d.error_lines()))
}

/// What a request gets.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Got {
    /// Forwarded to this backend (by name).
    Backend(String),
    /// Answered with this status (and `Location`).
    Status(u16, Option<String>),
}

fn to(name: &str) -> Got {
    Got::Backend(name.into())
}

fn status(code: u16) -> Got {
    Got::Status(code, None)
}

fn redirect(code: u16, location: &str) -> Got {
    Got::Status(code, Some(location.into()))
}

/// One request: `host` (maybe with a port), `target` (path and query), headers.
struct Req<'a> {
    host: &'a str,
    method: &'a str,
    target: &'a str,
    headers: &'a [(&'a str, &'a str)],
}

fn get<'a>(host: &'a str, target: &'a str) -> Req<'a> {
    Req {
        host,
        method: "GET",
        target,
        headers: &[],
    }
}

fn with<'a>(host: &'a str, target: &'a str, headers: &'a [(&'a str, &'a str)]) -> Req<'a> {
    Req {
        host,
        method: "GET",
        target,
        headers,
    }
}

/// The rule a request on `addr:port` reaches, or `None` (404).
fn rule<'b>(b: &'b Built, addr: &str, port: u16, r: &Req<'_>) -> Option<&'b HttpRule> {
    let l = b
        .snapshot
        .listeners
        .lookup(addr.parse().expect("ip"), port, proto::TCP)?;
    let host = r.host.split(':').next().unwrap_or("").to_ascii_lowercase();
    let route = b.snapshot.listeners.route(l.route(host.as_bytes())?)?;
    let headers: Vec<Header> = r
        .headers
        .iter()
        .map(|(n, v)| Header {
            name: n,
            value: v.as_bytes(),
        })
        .collect();
    let (path, query) = r.target.split_once('?').unwrap_or((r.target, ""));
    let req = Request {
        method: r.method,
        scheme: "http",
        authority: r.host,
        path,
        query,
        headers: &headers,
        port,
        source: "198.51.100.7".parse().expect("ip"),
    };
    route.http.find(&req).map(|(_, rule)| rule)
}

fn name_of(addr: std::net::SocketAddr) -> String {
    BACKENDS
        .iter()
        .find(|(_, _, ip)| addr.ip().to_string() == *ip)
        .map_or_else(|| addr.to_string(), |(n, _, _)| n.to_string())
}

/// What the request gets: the rule's answer, or the pick of its table (a table whose
/// every slot rejects, or that has none, is the rule's invalid-backend status).
fn send(b: &Built, addr: &str, port: u16, r: &Req<'_>) -> Got {
    let Some(rule) = rule(b, addr, port, r) else {
        return status(404);
    };
    match &rule.action {
        HttpAction::Forward {
            table,
            invalid_status,
            ..
        } => match table.pick(0x5eed) {
            Pick::Backend(a) if table.size() > 0 => Got::Backend(name_of(a)),
            _ => status(*invalid_status),
        },
        HttpAction::Direct { status: s, .. } => status(*s),
        HttpAction::Redirect(x) => {
            let headers: Vec<Header> = Vec::new();
            let (path, query) = r.target.split_once('?').unwrap_or((r.target, ""));
            let req = Request {
                method: r.method,
                scheme: "http",
                authority: r.host,
                path,
                query,
                headers: &headers,
                port,
                source: "198.51.100.7".parse().expect("ip"),
            };
            // The match that picked the rule decides prefix replacement.
            let route_http = &b
                .snapshot
                .listeners
                .route(l_route(b, addr, port, r.host).expect("route"))
                .expect("route")
                .http;
            let (m, _) = route_http.find(&req).expect("the same rule");
            let mut out = [0u8; 512];
            let n = x.write_location(&req, m, &mut out).expect("fits");
            Got::Status(
                x.code,
                Some(String::from_utf8_lossy(&out[..n]).into_owned()),
            )
        }
    }
}

fn l_route(b: &Built, addr: &str, port: u16, host: &str) -> Option<u32> {
    let l = b
        .snapshot
        .listeners
        .lookup(addr.parse().expect("ip"), port, proto::TCP)?;
    l.route(
        host.split(':')
            .next()
            .unwrap_or("")
            .to_ascii_lowercase()
            .as_bytes(),
    )
}

/// Runs `cases` against `b` on `addr:80`.
fn expect(b: &Built, addr: &str, cases: &[(Req<'_>, Got)]) {
    let d: Vec<String> = b.not_served().map(ToString::to_string).collect();
    assert!(d.is_empty(), "not served: {d:#?}");
    for (r, want) in cases {
        let got = send(b, addr, 80, r);
        assert_eq!(
            &got, want,
            "{} {}{} {:?}",
            r.method, r.host, r.target, r.headers
        );
    }
}

fn route(name: &str, parent: &str, body: &str) -> String {
    format!(
        "---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: {NS}}}\nspec:\n  parentRefs: [{{name: {parent}}}]\n{body}"
    )
}

const V1: &str = "{name: infra-backend-v1, port: 8080}";
const V2: &str = "{name: infra-backend-v2, port: 8080}";
const V3: &str = "{name: infra-backend-v3, port: 8080}";

/// httproute-simple-same-namespace.yaml
#[test]
fn http_route_simple_same_namespace() {
    let b = built(&route(
        "gateway-conformance-infra-test",
        "same-namespace",
        &format!("  rules: [{{backendRefs: [{V1}]}}]\n"),
    ));
    expect(&b, GW, &[(get("any.example", "/"), to("infra-backend-v1"))]);
    let l = b
        .snapshot
        .listeners
        .lookup(GW.parse().expect("ip"), 80, proto::TCP)
        .expect("listener");
    assert!(
        !l.proxy,
        "one unconditional forward: splice serves it exactly"
    );
}

/// httproute-matching.yaml
#[test]
fn http_route_matching() {
    let b = built(&route(
        "matching",
        "same-namespace",
        &format!(
            "  rules:
  - matches: [{{path: {{type: PathPrefix, value: /}}}}, {{headers: [{{name: version, value: one}}]}}]
    backendRefs: [{V1}]
  - matches: [{{path: {{type: PathPrefix, value: /v2}}}}, {{headers: [{{name: version, value: two}}]}}]
    backendRefs: [{V2}]
"
        ),
    ));
    let one = [("version", "one")];
    let two = [("version", "two")];
    expect(
        &b,
        GW,
        &[
            (get("h", "/"), to("infra-backend-v1")),
            (get("h", "/example"), to("infra-backend-v1")),
            (with("h", "/", &one), to("infra-backend-v1")),
            (get("h", "/v2"), to("infra-backend-v2")),
            (get("h", "/v2/example"), to("infra-backend-v2")),
            (with("h", "/", &two), to("infra-backend-v2")),
            (get("h", "/v2example"), to("infra-backend-v1")),
        ],
    );
    assert!(
        b.snapshot
            .listeners
            .lookup(GW.parse().expect("ip"), 80, proto::TCP)
            .expect("listener")
            .proxy
    );
}

/// httproute-exact-path-matching.yaml
#[test]
fn http_route_exact_path_matching() {
    let b = built(&route(
        "exact-matching",
        "same-namespace",
        &format!(
            "  rules:
  - matches: [{{path: {{type: Exact, value: /one}}}}]
    backendRefs: [{V1}]
  - matches: [{{path: {{type: Exact, value: /two}}}}]
    backendRefs: [{V2}]
"
        ),
    ));
    expect(
        &b,
        GW,
        &[
            (get("h", "/one"), to("infra-backend-v1")),
            (get("h", "/two"), to("infra-backend-v2")),
            (get("h", "/"), status(404)),
            (get("h", "/one/example"), status(404)),
            (get("h", "/two/"), status(404)),
        ],
    );
}

/// httproute-path-match-order.yaml (its rules restated in the upstream order, so the
/// precedence, not the listing, decides).
#[test]
fn http_route_path_match_order() {
    let b = built(&route(
        "path-matching-order",
        "same-namespace",
        &format!(
            "  rules:
  - matches: [{{path: {{type: PathPrefix, value: /match}}}}]
    backendRefs: [{V3}]
  - matches: [{{path: {{type: PathPrefix, value: /match/prefix}}}}]
    backendRefs: [{V1}]
  - matches: [{{path: {{type: PathPrefix, value: /match/prefix/one}}}}]
    backendRefs: [{V2}]
  - matches: [{{path: {{type: Exact, value: /match}}}}]
    backendRefs: [{V1}]
  - matches: [{{path: {{type: Exact, value: /match/exact}}}}]
    backendRefs: [{V2}]
  - matches: [{{path: {{type: Exact, value: /match/exact/one}}}}]
    backendRefs: [{V3}]
"
        ),
    ));
    expect(
        &b,
        GW,
        &[
            (get("h", "/match/exact/one"), to("infra-backend-v3")),
            (get("h", "/match/exact"), to("infra-backend-v2")),
            (get("h", "/match"), to("infra-backend-v1")),
            (get("h", "/match/prefix/one/any"), to("infra-backend-v2")),
            (get("h", "/match/prefix/any"), to("infra-backend-v1")),
            (get("h", "/match/any"), to("infra-backend-v3")),
        ],
    );
}

/// httproute-header-matching.yaml
#[test]
fn http_route_header_matching() {
    let b = built(&route(
        "header-matching",
        "same-namespace",
        &format!(
            "  rules:
  - matches: [{{headers: [{{name: version, value: one}}]}}]
    backendRefs: [{V1}]
  - matches: [{{headers: [{{name: version, value: two}}]}}]
    backendRefs: [{V2}]
  - matches: [{{headers: [{{name: version, value: two}}, {{name: color, value: orange}}]}}]
    backendRefs: [{V1}]
  - matches: [{{headers: [{{name: color, value: blue}}]}}, {{headers: [{{name: color, value: green}}]}}]
    backendRefs: [{V1}]
  - matches: [{{headers: [{{name: color, value: red}}]}}, {{headers: [{{name: color, value: yellow}}]}}]
    backendRefs: [{V2}]
"
        ),
    ));
    expect(
        &b,
        GW,
        &[
            (
                with("h", "/", &[("Version", "one")]),
                to("infra-backend-v1"),
            ),
            (
                with("h", "/", &[("Version", "two")]),
                to("infra-backend-v2"),
            ),
            (
                with("h", "/", &[("Version", "two"), ("Color", "orange")]),
                to("infra-backend-v1"),
            ),
            (with("h", "/", &[("Color", "blue")]), to("infra-backend-v1")),
            (
                with("h", "/", &[("Color", "green")]),
                to("infra-backend-v1"),
            ),
            (with("h", "/", &[("Color", "red")]), to("infra-backend-v2")),
            (
                with("h", "/", &[("Color", "yellow")]),
                to("infra-backend-v2"),
            ),
            (with("h", "/", &[("Version", "ONE")]), status(404)),
            (with("h", "/", &[("Color", "purple")]), status(404)),
            (get("h", "/"), status(404)),
        ],
    );
}

/// httproute-query-param-matching.yaml
#[test]
fn http_route_query_param_matching() {
    let b = built(&route(
        "query-param-matching",
        "same-namespace",
        &format!(
            "  rules:
  - matches: [{{queryParams: [{{name: animal, value: whale}}]}}]
    backendRefs: [{V1}]
  - matches: [{{queryParams: [{{name: animal, value: dolphin}}]}}]
    backendRefs: [{V2}]
  - matches: [{{queryParams: [{{name: animal, value: dolphin}}, {{name: color, value: blue}}]}}, {{queryParams: [{{name: ANIMAL, value: Whale}}]}}]
    backendRefs: [{V3}]
"
        ),
    ));
    expect(
        &b,
        GW,
        &[
            (get("h", "/?animal=whale"), to("infra-backend-v1")),
            (get("h", "/?animal=dolphin"), to("infra-backend-v2")),
            (
                get("h", "/?animal=dolphin&color=blue"),
                to("infra-backend-v3"),
            ),
            (get("h", "/?ANIMAL=Whale"), to("infra-backend-v3")),
            (
                get("h", "/?animal=whale&otherparam=irrelevant"),
                to("infra-backend-v1"),
            ),
            (get("h", "/?fish=salmon"), status(404)),
            (
                get("h", "/?animal=whale&animal=dolphin"),
                to("infra-backend-v1"),
            ),
            (get("h", "/"), status(404)),
        ],
    );
}

/// httproute-method-matching.yaml
#[test]
fn http_route_method_matching() {
    let b = built(&route(
        "method-matching",
        "same-namespace",
        &format!(
            "  rules:
  - matches: [{{method: POST}}]
    backendRefs: [{V1}]
  - matches: [{{method: GET}}]
    backendRefs: [{V2}]
"
        ),
    ));
    let m = |method| Req {
        host: "h",
        method,
        target: "/",
        headers: &[],
    };
    expect(
        &b,
        GW,
        &[
            (m("POST"), to("infra-backend-v1")),
            (m("GET"), to("infra-backend-v2")),
            (m("HEAD"), status(404)),
        ],
    );
}

/// httproute-matching-across-routes.yaml
#[test]
fn http_route_matching_across_routes() {
    let b = built(&format!(
        "{}{}",
        route(
            "matching-part1",
            "same-namespace",
            &format!(
                "  hostnames: [example.com, example.net]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /}}}}, {{headers: [{{name: version, value: one}}]}}]
    backendRefs: [{V1}]
"
            ),
        ),
        route(
            "matching-part2",
            "same-namespace",
            &format!(
                "  hostnames: [\"*.com\"]
  rules:
  - matches: [{{path: {{type: PathPrefix, value: /v2}}}}, {{headers: [{{name: version, value: two}}]}}]
    backendRefs: [{V2}]
"
            ),
        ),
    ));
    expect(
        &b,
        GW,
        &[
            (get("example.com", "/"), to("infra-backend-v1")),
            (get("example.com", "/example"), to("infra-backend-v1")),
            (get("example.net", "/example"), to("infra-backend-v1")),
            (
                with("example.com", "/example", &[("Version", "one")]),
                to("infra-backend-v1"),
            ),
            (get("example.com", "/v2"), to("infra-backend-v2")),
            (get("example.net", "/v2"), to("infra-backend-v1")),
            (get("example.com", "/v2/example"), to("infra-backend-v2")),
            (
                with("example.com", "/", &[("Version", "two")]),
                to("infra-backend-v2"),
            ),
        ],
    );
}

/// httproute-hostname-intersection.yaml
#[test]
fn http_route_hostname_intersection() {
    let gw = "---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: httproute-hostname-intersection, namespace: gateway-conformance-infra}\nspec:\n  gatewayClassName: sluice\n  addresses: [{value: 10.77.0.82}]\n  listeners:\n  - {name: listener-1, port: 80, protocol: HTTP, hostname: very.specific.com}\n  - {name: listener-2, port: 80, protocol: HTTP, hostname: \"*.wildcard.io\"}\n  - {name: listener-3, port: 80, protocol: HTTP, hostname: \"*.anotherwildcard.io\"}\n";
    let r = |name: &str, hosts: &str, prefix: &str, backend: &str| {
        route(
            name,
            "httproute-hostname-intersection",
            &format!(
                "  hostnames: [{hosts}]\n  rules:\n  - matches: [{{path: {{type: PathPrefix, value: {prefix}}}}}]\n    backendRefs: [{backend}]\n"
            ),
        )
    };
    let b = built(&format!(
        "{gw}{}{}{}{}{}",
        r(
            "specific-host-matches-listener-specific-host",
            "non.matching.com, \"*.nonmatchingwildcard.io\", very.specific.com",
            "/s1",
            V1
        ),
        r(
            "specific-host-matches-listener-wildcard-host",
            "non.matching.com, wildcard.io, foo.wildcard.io, bar.wildcard.io, foo.bar.wildcard.io",
            "/s2",
            V2
        ),
        r(
            "wildcard-host-matches-listener-specific-host",
            "non.matching.com, \"*.specific.com\"",
            "/s3",
            V3
        ),
        r(
            "wildcard-host-matches-listener-wildcard-host",
            "\"*.anotherwildcard.io\"",
            "/s4",
            V1
        ),
        r(
            "no-intersecting-hosts",
            "specific.but.wrong.com, wildcard.io",
            "/s5",
            V2
        ),
    ));
    let a = "10.77.0.82";
    let cases = [
        (get("very.specific.com", "/s1"), to("infra-backend-v1")),
        (get("very.specific.com:1234", "/s1"), to("infra-backend-v1")),
        (get("non.matching.com", "/s1"), status(404)),
        (get("foo.nonmatchingwildcard.io", "/s1"), status(404)),
        (get("foo.wildcard.io", "/s1"), status(404)),
        (
            get("very.specific.com", "/non-matching-prefix"),
            status(404),
        ),
        (get("foo.wildcard.io", "/s2"), to("infra-backend-v2")),
        (get("bar.wildcard.io", "/s2"), to("infra-backend-v2")),
        (get("foo.bar.wildcard.io", "/s2"), to("infra-backend-v2")),
        (get("non.matching.com", "/s2"), status(404)),
        (get("wildcard.io", "/s2"), status(404)),
        (get("very.specific.com", "/s2"), status(404)),
        (get("foo.wildcard.io", "/non-matching-prefix"), status(404)),
        (get("very.specific.com", "/s3"), to("infra-backend-v3")),
        (get("non.matching.com", "/s3"), status(404)),
        (get("foo.specific.com", "/s3"), status(404)),
        (get("foo.wildcard.io", "/s3"), status(404)),
        (get("foo.anotherwildcard.io", "/s4"), to("infra-backend-v1")),
        (get("bar.anotherwildcard.io", "/s4"), to("infra-backend-v1")),
        (
            get("foo.bar.anotherwildcard.io", "/s4"),
            to("infra-backend-v1"),
        ),
        (get("anotherwildcard.io", "/s4"), status(404)),
        (get("foo.wildcard.io", "/s4"), status(404)),
        (get("very.specific.com", "/s4"), status(404)),
        (get("specific.but.wrong.com", "/s5"), status(404)),
        (get("wildcard.io", "/s5"), status(404)),
    ];
    // The route without an intersecting hostname is refused (Accepted=False
    // NoMatchingListenerHostname), not "not served": the others are.
    for (r, want) in &cases {
        assert_eq!(&send(&b, a, 80, r), want, "{}{}", r.host, r.target);
    }
    let v = b.status_json();
    let refused = v
        .as_array()
        .expect("list")
        .iter()
        .find(|o| o["metadata"]["name"] == "no-intersecting-hosts")
        .expect("route status");
    let accepted = &refused["status"]["parents"][0]["conditions"][0];
    assert_eq!(accepted["status"], "False", "{refused}");
    assert_eq!(accepted["reason"], "NoMatchingListenerHostname");
}

/// httproute-listener-hostname-matching.yaml
#[test]
fn http_route_listener_hostname_matching() {
    let gw = "---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: httproute-listener-hostname-matching, namespace: gateway-conformance-infra}\nspec:\n  gatewayClassName: sluice\n  addresses: [{value: 10.77.0.83}]\n  listeners:\n  - {name: listener-1, port: 80, protocol: HTTP, hostname: bar.com}\n  - {name: listener-2, port: 80, protocol: HTTP, hostname: foo.bar.com}\n  - {name: listener-3, port: 80, protocol: HTTP, hostname: \"*.bar.com\"}\n";
    let r = |name: &str, section: &str, backend: &str| {
        format!(
            "---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: {NS}}}\nspec:\n  parentRefs: [{{name: httproute-listener-hostname-matching, sectionName: {section}}}]\n  rules: [{{backendRefs: [{backend}]}}]\n"
        )
    };
    let b = built(&format!(
        "{gw}{}{}{}",
        r("backend-v1", "listener-1", V1),
        r("backend-v2", "listener-2", V2),
        r("backend-v3", "listener-3", V3),
    ));
    let a = "10.77.0.83";
    for (host, want) in [
        ("bar.com", to("infra-backend-v1")),
        ("foo.bar.com", to("infra-backend-v2")),
        ("baz.bar.com", to("infra-backend-v3")),
        ("boo.bar.com", to("infra-backend-v3")),
        ("multiple.prefixes.bar.com", to("infra-backend-v3")),
        ("multiple.prefixes.foo.bar.com", to("infra-backend-v3")),
        ("foo.com", status(404)),
        ("no.matching.host", status(404)),
    ] {
        assert_eq!(send(&b, a, 80, &get(host, "/")), want, "{host}");
    }
}

fn cross_ns_route(body_ns: &str) -> String {
    format!(
        "---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: cross-namespace, namespace: gateway-conformance-web-backend}}\nspec:\n  parentRefs: [{{name: all-namespaces, namespace: {NS}}}]\n  rules: [{{backendRefs: [{{name: web-backend, port: 8080{body_ns}}}]}}]\n"
    )
}

/// httproute-cross-namespace.yaml: a route in the backend's namespace attaches to a
/// Gateway that admits all namespaces.
#[test]
fn http_route_cross_namespace() {
    let b = built(&cross_ns_route(""));
    expect(&b, "10.77.0.81", &[(get("h", "/"), to("web-backend"))]);
}

/// httproute-reference-grant.yaml and httproute-invalid-cross-namespace-backend-ref.yaml:
/// a backend in another namespace needs a ReferenceGrant; without one the backend is
/// invalid (ResolvedRefs=False RefNotPermitted) and its requests get 500.
#[test]
fn http_route_reference_grant_and_invalid_cross_namespace_backend_ref() {
    let r = route(
        "reference-grant",
        "same-namespace",
        "  rules: [{backendRefs: [{name: web-backend, namespace: gateway-conformance-web-backend, port: 8080}]}]\n",
    );
    let grant = "---\napiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata: {name: reference-grant, namespace: gateway-conformance-web-backend}\nspec:\n  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: gateway-conformance-infra}]\n  to: [{group: \"\", kind: Service, name: web-backend}]\n";
    let b = built(&format!("{r}{grant}"));
    expect(&b, GW, &[(get("h", "/"), to("web-backend"))]);
    let b = built(&r);
    expect(&b, GW, &[(get("h", "/"), status(500))]);
    let v = b.status_json();
    let st = v
        .as_array()
        .expect("list")
        .iter()
        .find(|o| o["metadata"]["name"] == "reference-grant")
        .expect("status");
    let resolved = &st["status"]["parents"][0]["conditions"][1];
    assert_eq!(resolved["type"], "ResolvedRefs");
    assert_eq!(resolved["status"], "False");
    assert_eq!(resolved["reason"], "RefNotPermitted");
}

/// httproute-invalid-backendref-nonexistent.yaml: 500.
#[test]
fn http_route_invalid_nonexistent_backend_ref() {
    let b = built(&route(
        "invalid-nonexistent-backend-ref",
        "same-namespace",
        "  rules: [{backendRefs: [{name: nonexistent, port: 8080}]}]\n",
    ));
    expect(&b, GW, &[(get("h", "/"), status(500))]);
    // A rule without backendRefs, and a route without rules (upstream's default rule),
    // are answered with 500 too.
    let b = built(&route(
        "no-backends",
        "same-namespace",
        "  rules: [{matches: [{path: {type: Exact, value: /none}}]}]\n",
    ));
    expect(
        &b,
        GW,
        &[
            (get("h", "/none"), status(500)),
            (get("h", "/"), status(404)),
        ],
    );
    let b = built(&route("no-rules", "same-namespace", ""));
    expect(&b, GW, &[(get("h", "/any"), status(500))]);
}

/// httproute-redirect-host-and-status.yaml
#[test]
fn http_route_redirect_host_and_status() {
    let b = built(&route(
        "redirect-host-and-status",
        "same-namespace",
        "  rules:
  - matches: [{path: {type: PathPrefix, value: /hostname-redirect}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org}}]
  - matches: [{path: {type: PathPrefix, value: /host-and-status}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org, statusCode: 301}}]
",
    ));
    expect(
        &b,
        GW,
        &[
            (
                get("h", "/hostname-redirect"),
                redirect(302, "http://example.org/hostname-redirect"),
            ),
            (
                get("h", "/host-and-status"),
                redirect(301, "http://example.org/host-and-status"),
            ),
        ],
    );
}

/// httproute-redirect-path.yaml
#[test]
fn http_route_redirect_path() {
    let b = built(&route(
        "redirect-path",
        "same-namespace",
        "  rules:
  - matches: [{path: {type: PathPrefix, value: /original-prefix}}]
    filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /replacement-prefix}}}]
  - matches: [{path: {type: PathPrefix, value: /full}}]
    filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplaceFullPath, replaceFullPath: /full-path-replacement}}}]
  - matches: [{path: {type: PathPrefix, value: /path-and-host}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org, path: {type: ReplacePrefixMatch, replacePrefixMatch: /replacement-prefix}}}]
  - matches: [{path: {type: PathPrefix, value: /path-and-status}}]
    filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplaceFullPath, replaceFullPath: /replacement-full}, statusCode: 301}}]
  - matches: [{path: {type: PathPrefix, value: /full-path-and-host}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org, path: {type: ReplaceFullPath, replaceFullPath: /replacement-full}}}]
",
    ));
    expect(
        &b,
        GW,
        &[
            (
                get("h", "/original-prefix/lemon"),
                redirect(302, "http://h/replacement-prefix/lemon"),
            ),
            (
                get("h", "/full/path/original"),
                redirect(302, "http://h/full-path-replacement"),
            ),
            (
                get("h", "/path-and-host"),
                redirect(302, "http://example.org/replacement-prefix"),
            ),
            (
                get("h", "/path-and-status"),
                redirect(301, "http://h/replacement-full"),
            ),
            (
                get("h", "/full-path-and-host"),
                redirect(302, "http://example.org/replacement-full"),
            ),
        ],
    );
}

/// httproute-redirect-port.yaml
#[test]
fn http_route_redirect_port() {
    let b = built(&route(
        "redirect-port",
        "same-namespace",
        "  rules:
  - matches: [{path: {type: PathPrefix, value: /port}}]
    filters: [{type: RequestRedirect, requestRedirect: {port: 8083}}]
  - matches: [{path: {type: PathPrefix, value: /port-and-host}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org, port: 8083}}]
  - matches: [{path: {type: PathPrefix, value: /port-and-status}}]
    filters: [{type: RequestRedirect, requestRedirect: {port: 8083, statusCode: 301}}]
  - matches: [{path: {type: PathPrefix, value: /port-and-host-and-status}}]
    filters: [{type: RequestRedirect, requestRedirect: {port: 8083, hostname: example.org, statusCode: 302}}]
",
    ));
    expect(
        &b,
        GW,
        &[
            (get("h", "/port"), redirect(302, "http://h:8083/port")),
            (
                get("h", "/port-and-host"),
                redirect(302, "http://example.org:8083/port-and-host"),
            ),
            (
                get("h", "/port-and-status"),
                redirect(301, "http://h:8083/port-and-status"),
            ),
            (
                get("h", "/port-and-host-and-status"),
                redirect(302, "http://example.org:8083/port-and-host-and-status"),
            ),
        ],
    );
}

/// httproute-redirect-scheme.yaml: a new scheme without a port takes its default port
/// (omitted); with a port, the port.
#[test]
fn http_route_redirect_scheme() {
    let b = built(&route(
        "redirect-scheme",
        "same-namespace",
        "  rules:
  - matches: [{path: {type: PathPrefix, value: /scheme}}]
    filters: [{type: RequestRedirect, requestRedirect: {scheme: https}}]
  - matches: [{path: {type: PathPrefix, value: /scheme-and-host}}]
    filters: [{type: RequestRedirect, requestRedirect: {hostname: example.org, scheme: https}}]
  - matches: [{path: {type: PathPrefix, value: /scheme-and-status}}]
    filters: [{type: RequestRedirect, requestRedirect: {scheme: https, statusCode: 301}}]
  - matches: [{path: {type: PathPrefix, value: /scheme-and-host-and-status}}]
    filters: [{type: RequestRedirect, requestRedirect: {scheme: https, statusCode: 302, hostname: example.org}}]
",
    ));
    expect(
        &b,
        GW,
        &[
            (get("h", "/scheme"), redirect(302, "https://h/scheme")),
            (get("h:80", "/scheme"), redirect(302, "https://h/scheme")),
            (
                get("h", "/scheme-and-host"),
                redirect(302, "https://example.org/scheme-and-host"),
            ),
            (
                get("h", "/scheme-and-status"),
                redirect(301, "https://h/scheme-and-status"),
            ),
            (
                get("h", "/scheme-and-host-and-status"),
                redirect(302, "https://example.org/scheme-and-host-and-status"),
            ),
        ],
    );
}

fn only_rule(b: &Built) -> &HttpRule {
    rule(b, GW, 80, &get("h", "/")).expect("a rule")
}

/// httproute-rewrite-host.yaml and httproute-rewrite-path.yaml: the rewrite compiled
/// (the proxy applies it with `Rewrite::write_path`).
#[test]
fn http_route_rewrite_host_and_path() {
    let b = built(&route(
        "rewrite",
        "same-namespace",
        &format!(
            "  rules:
  - matches: [{{path: {{type: PathPrefix, value: /prefix/one}}}}]
    filters: [{{type: URLRewrite, urlRewrite: {{hostname: one.example.org, path: {{type: ReplacePrefixMatch, replacePrefixMatch: /one}}}}}}]
    backendRefs: [{V1}]
  - matches: [{{path: {{type: PathPrefix, value: /full/one}}}}]
    filters: [{{type: URLRewrite, urlRewrite: {{path: {{type: ReplaceFullPath, replaceFullPath: /one}}}}}}]
    backendRefs: [{V1}]
"
        ),
    ));
    let r = rule(&b, GW, 80, &get("h", "/prefix/one/two")).expect("rule");
    assert_eq!(r.rewrite.authority.as_deref(), Some("one.example.org"));
    let req = Request {
        method: "GET",
        scheme: "http",
        authority: "h",
        path: "/prefix/one/two",
        query: "",
        headers: &[],
        port: 80,
        source: "198.51.100.7".parse().expect("ip"),
    };
    let l = b
        .snapshot
        .listeners
        .route(l_route(&b, GW, 80, "h").expect("route"))
        .expect("route");
    let (m, rule) = l.http.find(&req).expect("rule");
    let mut out = [0u8; 64];
    let mut scratch = sluice_dataplane::tables::http::HttpScratch::new();
    let n = rule
        .rewrite
        .write_path(&req, m, &mut scratch, &mut out)
        .expect("fits");
    assert_eq!(&out[..n], b"/one/two");
    let full = Request {
        path: "/full/one/x",
        ..req
    };
    let (m, rule) = l.http.find(&full).expect("rule");
    let n = rule
        .rewrite
        .write_path(&full, m, &mut scratch, &mut out)
        .expect("fits");
    assert_eq!(&out[..n], b"/one");
}

/// httproute-request-header-modifier.yaml and httproute-response-header-modifier.yaml:
/// the operations compiled.
#[test]
fn http_route_header_modifiers() {
    let b = built(&route(
        "header-modifiers",
        "same-namespace",
        &format!(
            "  rules:
  - filters:
    - type: RequestHeaderModifier
      requestHeaderModifier:
        set: [{{name: X-Header-Set, value: set-overwrites-values}}]
        add: [{{name: X-Header-Add, value: add-appends-values}}]
        remove: [X-Header-Remove]
    - type: ResponseHeaderModifier
      responseHeaderModifier:
        set: [{{name: X-Header-Set, value: set-overwrites-values}}]
        add: [{{name: X-Header-Add-1, value: header-add-1}}]
        remove: [X-Header-Remove-1]
    backendRefs: [{V1}]
"
        ),
    ));
    let r = only_rule(&b);
    assert_eq!(&*r.request_headers.set[0].0, "X-Header-Set");
    assert_eq!(&*r.request_headers.set[0].1, "set-overwrites-values");
    assert_eq!(&*r.request_headers.add[0].0, "X-Header-Add");
    assert_eq!(&*r.request_headers.remove[0], "x-header-remove");
    assert_eq!(&*r.response_headers.add[0].1, "header-add-1");
    assert_eq!(&*r.response_headers.remove[0], "x-header-remove-1");
    assert!(
        b.snapshot
            .listeners
            .lookup(GW.parse().expect("ip"), 80, proto::TCP)
            .expect("listener")
            .proxy,
        "header changes need the proxy"
    );
}

fn shares(t: &MaglevTable) -> Vec<(String, usize)> {
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    for h in 0..t.size() as u64 {
        if let Pick::Backend(a) = t.pick(h) {
            *counts.entry(name_of(a)).or_default() += 1;
        }
    }
    counts.into_iter().collect()
}

/// httproute-weight.yaml: 70/30/0 shares of the table.
#[test]
fn http_route_weight() {
    let b = built(&route(
        "weighted-backends",
        "same-namespace",
        "  rules:
  - backendRefs:
    - {name: infra-backend-v1, port: 8080, weight: 70}
    - {name: infra-backend-v2, port: 8080, weight: 30}
    - {name: infra-backend-v3, port: 8080, weight: 0}
",
    ));
    let HttpAction::Forward { table, .. } = &only_rule(&b).action else {
        panic!("forward");
    };
    let s = shares(table);
    let total = table.size();
    assert_eq!(s.len(), 2, "weight 0 gets nothing: {s:?}");
    let v1 = s[0].1 as f64 / total as f64;
    assert!((v1 - 0.7).abs() < 0.01, "{s:?}");
}

/// httproute-request-mirror.yaml (and the percent/fraction variants): the rule forwards
/// to its backendRefs and carries a mirror to the filter's backendRef with its share of
/// requests (the copies themselves are sent by the proxy: `tests/tests/sim_http.rs`).
#[test]
fn http_route_request_mirror() {
    let b = built(&route(
        "request-mirror",
        "same-namespace",
        &format!(
            "  rules:
  - matches: [{{path: {{type: PathPrefix, value: /mirror}}}}]
    filters: [{{type: RequestMirror, requestMirror: {{backendRef: {V2}}}}}]
    backendRefs: [{V1}]
  - matches: [{{path: {{type: PathPrefix, value: /percent}}}}]
    filters: [{{type: RequestMirror, requestMirror: {{backendRef: {V2}, percent: 35}}}}]
    backendRefs: [{V1}]
  - matches: [{{path: {{type: PathPrefix, value: /fraction}}}}]
    filters:
    - {{type: RequestMirror, requestMirror: {{backendRef: {V2}, fraction: {{numerator: 1, denominator: 3}}}}}}
    - {{type: RequestMirror, requestMirror: {{backendRef: {V3}}}}}
    backendRefs: [{V1}]
"
        ),
    ));
    let d: Vec<String> = b.not_served().map(ToString::to_string).collect();
    assert!(d.is_empty(), "{d:#?}");
    for (path, want) in [
        ("/mirror", vec![("infra-backend-v2", 1_000_000)]),
        ("/percent", vec![("infra-backend-v2", 350_000)]),
        (
            "/fraction",
            vec![
                ("infra-backend-v2", 333_333),
                ("infra-backend-v3", 1_000_000),
            ],
        ),
    ] {
        assert_eq!(send(&b, GW, 80, &get("h", path)), to("infra-backend-v1"));
        let r = rule(&b, GW, 80, &get("h", path)).expect("rule");
        let got: Vec<(String, u32)> = r
            .mirrors
            .iter()
            .map(|m| {
                let s = shares(&m.table);
                assert_eq!(s.len(), 1, "{path}: one backend per mirror: {s:?}");
                (s[0].0.clone(), m.per_million)
            })
            .collect();
        let want: Vec<(String, u32)> = want.iter().map(|(n, p)| (n.to_string(), *p)).collect();
        assert_eq!(got, want, "{path}");
    }
}

/// What cannot be compiled exactly is not served: unsupported filters, backendRef
/// filters.
#[test]
fn http_route_unsupported_filters_are_not_served() {
    for (body, path) in [
        (
            "  rules: [{filters: [{type: ExtensionRef, extensionRef: {group: x, kind: y, name: z}}], backendRefs: [{name: infra-backend-v1, port: 8080}]}]\n",
            "spec.rules[0].filters[0].type",
        ),
        (
            "  rules: [{filters: [{type: CORS, cors: {allowOrigins: ['*']}}], backendRefs: [{name: infra-backend-v1, port: 8080}]}]\n",
            "spec.rules[0].filters[0].type",
        ),
        (
            "  rules: [{backendRefs: [{name: infra-backend-v1, port: 8080, filters: [{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: a, value: b}]}}]}]}]\n",
            "spec.rules[0].backendRefs[0].filters",
        ),
    ] {
        let b = built(&route("unsupported", "same-namespace", body));
        let d: Vec<String> = b
            .not_served()
            .filter_map(|d| d.path.clone())
            .collect();
        assert_eq!(d, vec![path.to_string()], "{body}");
        assert_eq!(send(&b, GW, 80, &get("h", "/")), status(404), "left out: {body}");
    }
}

// ---------------------------------------------------------------------------
// Istio

const ISTIO: &str = r#"
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: igw, namespace: gateway-conformance-infra}
spec:
  servers:
  - port: {number: 8000, name: http, protocol: HTTP}
    bind: 10.77.0.90
    hosts: ["*.example.com"]
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: clients}
status: {podIP: 198.51.100.7}
"#;

fn istio(http: &str) -> Built {
    built(&format!(
        "{ISTIO}---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: vs, namespace: {NS}}}\nspec:\n  hosts: [www.example.com]\n  gateways: [igw]\n  http:\n{http}"
    ))
}

/// Every `HTTPMatchRequest` field and action of an Istio VirtualService, through the
/// tables: (the `http` rules, request, expected).
#[test]
fn istio_http_match_fields_and_actions() {
    let fwd =
        |b: &str| format!("    route: [{{destination: {{host: {b}, port: {{number: 8080}}}}}}]\n");
    let v1 = fwd("infra-backend-v1");
    let v2 = fwd("infra-backend-v2");
    let cases: Vec<(String, Req<'_>, Got)> = vec![
        (
            format!("  - match: [{{uri: {{exact: /a}}}}]\n{v1}"),
            get("www.example.com", "/a"),
            to("infra-backend-v1"),
        ),
        (
            format!("  - match: [{{uri: {{exact: /a}}}}]\n{v1}"),
            get("www.example.com", "/a/"),
            status(404),
        ),
        (
            format!("  - match: [{{uri: {{prefix: /a}}}}]\n{v1}"),
            get("www.example.com", "/abc"),
            to("infra-backend-v1"),
        ),
        (
            format!("  - match: [{{uri: {{regex: '/v[0-9]+/.*'}}}}]\n{v1}"),
            get("www.example.com", "/v2/x"),
            to("infra-backend-v1"),
        ),
        (
            format!("  - match: [{{uri: {{prefix: /A}}, ignoreUriCase: true}}]\n{v1}"),
            get("www.example.com", "/abc"),
            to("infra-backend-v1"),
        ),
        (
            format!("  - match: [{{scheme: {{exact: https}}}}]\n{v1}"),
            get("www.example.com", "/"),
            status(404),
        ),
        (
            format!("  - match: [{{method: {{exact: GET}}}}]\n{v1}"),
            get("www.example.com", "/"),
            to("infra-backend-v1"),
        ),
        (
            format!("  - match: [{{authority: {{prefix: www}}}}]\n{v1}"),
            get("www.example.com:8000", "/"),
            to("infra-backend-v1"),
        ),
        (
            format!(
                "  - match: [{{headers: {{x-env: {{exact: canary}}}}}}]\n{v1}{}\n",
                "  - ".to_string() + &v2[4..]
            ),
            with("www.example.com", "/", &[("X-Env", "canary")]),
            to("infra-backend-v1"),
        ),
        (
            format!("  - match: [{{headers: {{x-env: {{}}}}}}]\n{v1}"),
            with("www.example.com", "/", &[("x-env", "")]),
            to("infra-backend-v1"),
        ),
        (
            format!("  - match: [{{withoutHeaders: {{x-env: {{exact: canary}}}}}}]\n{v1}"),
            with("www.example.com", "/", &[("X-Env", "canary")]),
            status(404),
        ),
        (
            format!("  - match: [{{withoutHeaders: {{x-env: {{exact: canary}}}}}}]\n{v1}"),
            get("www.example.com", "/"),
            to("infra-backend-v1"),
        ),
        (
            format!("  - match: [{{queryParams: {{a: {{exact: b}}}}}}]\n{v1}"),
            get("www.example.com", "/?a=b"),
            to("infra-backend-v1"),
        ),
        (
            format!("  - match: [{{queryParams: {{a: {{regex: 'b+'}}}}}}]\n{v1}"),
            get("www.example.com", "/?a=bbb"),
            to("infra-backend-v1"),
        ),
        (
            format!("  - match: [{{port: 8000}}]\n{v1}"),
            get("www.example.com", "/"),
            to("infra-backend-v1"),
        ),
        (
            format!("  - match: [{{port: 9000}}]\n{v1}"),
            get("www.example.com", "/"),
            status(404),
        ),
        (
            format!("  - match: [{{sourceNamespace: clients}}]\n{v1}"),
            get("www.example.com", "/"),
            to("infra-backend-v1"),
        ),
        (
            format!("  - match: [{{sourceNamespace: {NS}}}]\n{v1}"),
            get("www.example.com", "/"),
            status(404),
        ),
        (
            format!("  - match: [{{gateways: [mesh]}}]\n{v1}"),
            get("www.example.com", "/"),
            status(404),
        ),
        (
            format!(
                "  - name: first\n    match: [{{uri: {{prefix: /x}}}}]\n{v1}  - name: rest\n{v2}"
            ),
            get("www.example.com", "/y"),
            to("infra-backend-v2"),
        ),
        (
            "  - redirect: {uri: /new, authority: other.example.com, redirectCode: 308}\n".into(),
            get("www.example.com", "/old?q=1"),
            redirect(308, "http://other.example.com/new?q=1"),
        ),
        (
            "  - redirect: {scheme: https, derivePort: FROM_PROTOCOL_DEFAULT}\n".into(),
            get("www.example.com:8000", "/p"),
            redirect(301, "https://www.example.com/p"),
        ),
        (
            "  - redirect: {derivePort: FROM_REQUEST_PORT}\n".into(),
            get("www.example.com", "/p"),
            redirect(301, "http://www.example.com:8000/p"),
        ),
        (
            "  - redirect: {port: 9443, scheme: https}\n".into(),
            get("www.example.com", "/p"),
            redirect(301, "https://www.example.com:9443/p"),
        ),
        (
            "  - directResponse: {status: 418, body: {string: teapot}}\n".into(),
            get("www.example.com", "/"),
            status(418),
        ),
        (
            "  - directResponse: {status: 200, body: {bytes: aGk=}}\n".into(),
            get("www.example.com", "/"),
            status(200),
        ),
        (
            "  - route: [{destination: {host: missing, port: {number: 80}}}]\n".into(),
            get("www.example.com", "/"),
            status(503),
        ),
    ];
    for (http, r, want) in &cases {
        let b = istio(http);
        let d: Vec<String> = b.not_served().map(ToString::to_string).collect();
        assert!(d.is_empty(), "{http}: {d:#?}");
        assert_eq!(&send(&b, "10.77.0.90", 8000, r), want, "{http}");
    }
}

/// Istio `mirror` (with `mirrorPercentage`) and `mirrors` (each with its `percentage`;
/// none: all requests) compile to the rule's mirrors.
#[test]
fn istio_mirrors_compile() {
    for (http, want) in [
        (
            "  - mirror: {host: infra-backend-v2, port: {number: 8080}}
    mirrorPercentage: {value: 12.5}
    route: [{destination: {host: infra-backend-v1, port: {number: 8080}}}]
",
            vec![("infra-backend-v2", 125_000)],
        ),
        (
            "  - mirrors:
    - {destination: {host: infra-backend-v2, port: {number: 8080}}, percentage: {value: 50}}
    - destination: {host: infra-backend-v3, port: {number: 8080}}
    route: [{destination: {host: infra-backend-v1, port: {number: 8080}}}]
",
            vec![
                ("infra-backend-v2", 500_000),
                ("infra-backend-v3", 1_000_000),
            ],
        ),
    ] {
        let b = istio(http);
        let d: Vec<String> = b.not_served().map(ToString::to_string).collect();
        assert!(d.is_empty(), "{d:#?}");
        let r = get("www.example.com", "/");
        assert_eq!(send(&b, "10.77.0.90", 8000, &r), to("infra-backend-v1"));
        let rule = rule(&b, "10.77.0.90", 8000, &r).expect("rule");
        let got: Vec<(String, u32)> = rule
            .mirrors
            .iter()
            .map(|m| (shares(&m.table)[0].0.clone(), m.per_million))
            .collect();
        let want: Vec<(String, u32)> = want.iter().map(|(n, p)| (n.to_string(), *p)).collect();
        assert_eq!(got, want, "{http}");
    }
    // Both at once is an error: the configuration is rejected.
    let both = "  - mirror: {host: infra-backend-v2, port: {number: 8080}}
    mirrors: [{destination: {host: infra-backend-v3, port: {number: 8080}}}]
    route: [{destination: {host: infra-backend-v1, port: {number: 8080}}}]
";
    let rejected = std::panic::catch_unwind(|| istio(both)).expect_err("rejected");
    let why = rejected
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(why.contains("set one of mirror and mirrors"), "{why}");
}

/// Istio rule-level headers, rewrite, timeout and retries compiled.
#[test]
fn istio_http_rule_options_compile() {
    let b = istio(
        "  - match: [{uri: {prefix: /api}}]
    rewrite: {uri: /v2, authority: api.internal}
    headers:
      request: {set: {x-a: '1'}, add: {x-b: '2'}, remove: [x-c]}
      response: {set: {x-d: '3'}}
    timeout: 1.5s
    retries: {attempts: 3, perTryTimeout: 500ms, retryOn: 'connect-failure,5xx,reset'}
    route: [{destination: {host: infra-backend-v1, port: {number: 8080}}}]
  - match: [{uri: {prefix: /re}}]
    rewrite: {uriRegexRewrite: {match: '^/re/(.*)$', rewrite: '/x/\\1'}}
    route: [{destination: {host: infra-backend-v1, port: {number: 8080}}}]
",
    );
    let d: Vec<String> = b.not_served().map(ToString::to_string).collect();
    assert!(d.is_empty(), "{d:#?}");
    let r = rule(&b, "10.77.0.90", 8000, &get("www.example.com", "/api/x")).expect("rule");
    assert_eq!(r.rewrite.authority.as_deref(), Some("api.internal"));
    assert_eq!(r.timeout_ms, 1500);
    assert_eq!(r.retries.attempts, 3);
    assert_eq!(r.retries.per_try_timeout_ms, 500);
    assert!(r.retries.on.connect_failure && r.retries.on.server_error && r.retries.on.reset);
    assert!(!r.retries.on.gateway_error);
    assert_eq!(&*r.request_headers.set[0].0, "x-a");
    assert_eq!(&*r.request_headers.remove[0], "x-c");
    assert_eq!(&*r.response_headers.set[0].1, "3");
    let req = Request {
        method: "GET",
        scheme: "http",
        authority: "www.example.com",
        path: "/api/x",
        query: "",
        headers: &[],
        port: 8000,
        source: "198.51.100.7".parse().expect("ip"),
    };
    let route = b
        .snapshot
        .listeners
        .route(l_route(&b, "10.77.0.90", 8000, "www.example.com").expect("route"))
        .expect("route");
    let mut scratch = sluice_dataplane::tables::http::HttpScratch::new();
    let mut out = [0u8; 64];
    let (m, rule) = route.http.find(&req).expect("rule");
    let n = rule
        .rewrite
        .write_path(&req, m, &mut scratch, &mut out)
        .expect("fits");
    assert_eq!(&out[..n], b"/v2/x", "Envoy prefix_rewrite");
    let re = Request {
        path: "/re/a/b",
        ..req
    };
    let (m, rule) = route.http.find(&re).expect("rule");
    let n = rule
        .rewrite
        .write_path(&re, m, &mut scratch, &mut out)
        .expect("fits");
    assert_eq!(&out[..n], b"/x/a/b");
}

/// `sluice explain` on an HTTP route: the rule, and the action (backend, or the answer
/// with its status and location).
#[test]
fn explain_names_the_rule_and_the_answer() {
    use sluice_ctrl::explain::{explain, HttpQuery, Query};
    let b = built(&route(
        "explained",
        "same-namespace",
        &format!(
            "  rules:
  - matches: [{{path: {{type: PathPrefix, value: /api}}, headers: [{{name: x-v, value: '2'}}]}}]
    backendRefs: [{V2}]
  - matches: [{{path: {{type: PathPrefix, value: /old}}}}]
    filters: [{{type: RequestRedirect, requestRedirect: {{scheme: https, path: {{type: ReplacePrefixMatch, replacePrefixMatch: /new}}}}}}]
  - matches: [{{path: {{type: Exact, value: /gone}}}}]
    backendRefs: [{{name: nonexistent, port: 8080}}]
"
        ),
    ));
    let q = |path: &str, headers: Vec<(String, String)>| Query {
        proto: sluice_ctrl::compile::ir::L4::Tcp,
        src: "198.51.100.1:40000".parse().expect("src"),
        dst: format!("{GW}:80").parse().expect("dst"),
        sni: None,
        http_host: Some("shop.example.com".into()),
        payload: None,
        http: HttpQuery {
            method: None,
            path: Some(path.into()),
            headers,
            scheme: None,
        },
    };
    let v = explain(&b, &q("/api/x", vec![("X-V".into(), "2".into())]));
    assert_eq!(
        v["rule"], "HTTPRoute gateway-conformance-infra/explained rules[0]",
        "{v}"
    );
    assert_eq!(v["backend"], "10.90.0.2:8080", "{v}");
    let v = explain(&b, &q("/old/a?b=c", vec![]));
    assert_eq!(
        v["rule"], "HTTPRoute gateway-conformance-infra/explained rules[1]",
        "{v}"
    );
    assert_eq!(v["answer"]["status"], 302, "{v}");
    assert_eq!(
        v["answer"]["location"], "https://shop.example.com/new/a?b=c",
        "{v}"
    );
    let v = explain(&b, &q("/gone", vec![]));
    assert_eq!(v["answer"]["status"], 500, "{v}");
    let v = explain(&b, &q("/api/x", vec![]));
    assert_eq!(v["answer"]["status"], 404, "{v}");
    assert_eq!(v["verdict"], "reject");
}
