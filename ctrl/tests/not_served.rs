//! Fail loud, never wide: every upstream field sluice does not implement and whose
//! absence would widen or redirect traffic leaves its object (or gateway listener) out of
//! the tables and is reported with its path; everything else is served. One test per
//! Istio `HTTPMatchRequest` / `StringMatch` field and per redirecting field of the other
//! kinds; the implemented match fields route as upstream says.

use sluice_ctrl::compile::{build, Built};
use sluice_ctrl::diag::{Diagnostic, Severity};
use sluice_ctrl::load::{load_str, Loaded};

/// An Istio HTTP server on 8080 for `*.example.com`, and a Service.
const BASE: &str = r#"
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: igw, namespace: default}
spec:
  servers:
  - port: {number: 8080, name: http, protocol: HTTP}
    hosts: ["*.example.com"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: served, namespace: default}
spec:
  hosts: [ok.example.com]
  gateways: [igw]
  http:
  - route: [{destination: {host: svc}}]
---
apiVersion: v1
kind: Service
metadata: {name: svc, namespace: default}
spec: {selector: {app: a}, ports: [{port: 80}]}
---
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: default, labels: {app: a}}
status: {podIP: 10.0.0.1}
---
"#;

fn built(case: &str) -> Built {
    let mut loaded = Loaded::default();
    load_str("case.yaml", &format!("{BASE}{case}"), &mut loaded);
    match build(loaded) {
        Ok(b) => b,
        Err(d) => panic!("rejected: {:#?}", d.error_lines()),
    }
}

fn route_names(b: &Built) -> Vec<String> {
    b.ir.routes.iter().map(|r| r.name.clone()).collect()
}

/// `case` (a VirtualService `vs` using `field`) is not served: reported at `path`, left
/// out of the tables, and the other VirtualService still served.
fn vs_not_served(case: &str, path: &str) -> Diagnostic {
    let b = built(case);
    let d = b
        .not_served()
        .find(|d| d.path.as_deref() == Some(path))
        .unwrap_or_else(|| {
            panic!(
                "no not-served diagnostic at {path}: {:#?}",
                b.diagnostics
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
            )
        })
        .clone();
    assert_eq!(d.severity, Severity::NotServed);
    assert_eq!(d.object.as_deref(), Some("VirtualService default/vs"));
    let names = route_names(&b);
    assert!(
        !names.iter().any(|n| n.contains("default/vs")),
        "left out of the tables: {names:?}"
    );
    assert!(
        names.iter().any(|n| n.contains("default/served")),
        "the rest is served: {names:?}"
    );
    // `check` fails: the text form names the file, line and field.
    assert!(d.to_string().contains("case.yaml:"), "{d}");
    d
}

fn vs_with_match(m: &str) -> String {
    format!(
        r#"apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: default}}
spec:
  hosts: [vs.example.com]
  gateways: [igw]
  http:
  - match:
    - {m}
    route: [{{destination: {{host: svc}}}}]
"#
    )
}

macro_rules! match_field_not_served {
    ($($name:ident: $m:expr => $path:expr;)*) => {$(
        #[test]
        fn $name() {
            vs_not_served(&vs_with_match($m), $path);
        }
    )*};
}

match_field_not_served! {
    http_match_source_labels: "sourceLabels: {app: x}" => "spec.http[0].match[0].sourceLabels";
    http_match_method_prefix: "method: {prefix: G}" => "spec.http[0].match[0].method";
    http_match_authority_bad_regex: "authority: {regex: '(h'}" => "spec.http[0].match[0].authority.regex";
}

/// `case` (a VirtualService `vs` using a match field) is served: no not-served
/// diagnostic, and its route's first match carries the condition.
fn vs_served(case: &str) -> sluice_ctrl::compile::ir::HttpMatch {
    let b = built(case);
    let d: Vec<String> = b.not_served().map(ToString::to_string).collect();
    assert!(d.is_empty(), "{d:#?}");
    let r =
        b.ir.routes
            .iter()
            .find(|r| r.name.contains("default/vs"))
            .expect("served");
    r.http_matches.first().expect("a match").0.clone()
}

macro_rules! match_field_served {
    ($($name:ident: $m:expr => $check:expr;)*) => {$(
        #[test]
        fn $name() {
            let m = vs_served(&vs_with_match($m));
            let check: fn(&sluice_ctrl::compile::ir::HttpMatch) -> bool = $check;
            assert!(check(&m), "{m:?}");
        }
    )*};
}

match_field_served! {
    http_match_headers: "headers: {cookie: {exact: user=dev-123}}" => |m| m.headers.len() == 1 && !m.headers[0].invert;
    http_match_without_headers: "withoutHeaders: {x: {exact: y}}" => |m| m.headers.len() == 1 && m.headers[0].invert;
    http_match_scheme: "scheme: {exact: https}" => |m| m.scheme.is_some();
    http_match_method: "method: {exact: GET}" => |m| m.method.as_deref() == Some("GET");
    http_match_query_params: "queryParams: {a: {exact: b}}" => |m| m.query.len() == 1;
    http_match_ignore_uri_case: "{uri: {prefix: /a}, ignoreUriCase: true}" => |m| m.ignore_case;
    http_match_source_namespace: "sourceNamespace: default" => |m| m.sources.len() == 1;
    http_match_uri_regex: "uri: {regex: '/a.*'}" => |m| m.path.is_some();
    http_match_authority_exact: "authority: {exact: h1.example.com}" => |m| m.authority.is_some();
    http_match_authority_prefix: "authority: {prefix: h1}" => |m| m.authority.is_some();
    http_match_authority_regex: "authority: {regex: 'h.*'}" => |m| m.authority.is_some();
}

fn vs_with_http(extra: &str) -> String {
    format!(
        r#"apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: default}}
spec:
  hosts: [vs.example.com]
  gateways: [igw]
  http:
  - route: [{{destination: {{host: svc}}, headers: {{request: {{set: {{a: b}}}}}}}}]
    {extra}
"#
    )
}

#[test]
fn http_route_destination_headers() {
    vs_not_served(&vs_with_http(""), "spec.http[0].route[0].headers");
}

macro_rules! http_field_not_served {
    ($($name:ident: $f:expr => $path:expr;)*) => {$(
        #[test]
        fn $name() {
            let case = format!(
                r#"apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: vs, namespace: default}}
spec:
  hosts: [vs.example.com]
  gateways: [igw]
  http:
  - route: [{{destination: {{host: svc}}}}]
    {}
"#,
                $f
            );
            vs_not_served(&case, $path);
        }
    )*};
}

http_field_not_served! {
    http_fault: "fault: {abort: {httpStatus: 500}}" => "spec.http[0].fault";
    http_delegate: "delegate: {name: other}" => "spec.http[0].delegate";
    http_method_regex: "match: [{method: {regex: 'GE.'}}]" => "spec.http[0].match[0].method";
    http_query_prefix: "match: [{queryParams: {a: {prefix: x}}}]" => "spec.http[0].match[0].queryParams.a";
    http_bad_regex: "match: [{uri: {regex: '(a'}}]" => "spec.http[0].match[0].uri.regex";
    http_cors_policy: "corsPolicy: {allowOrigins: [{exact: a}]}" => "spec.http[0].corsPolicy";
}

/// Timeouts and retries are compiled now: no warning; an unknown `retryOn` name is.
#[test]
fn timeouts_and_retries_are_compiled() {
    let b = built(
        r#"apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs, namespace: default}
spec:
  hosts: [vs.example.com]
  gateways: [igw]
  http:
  - route: [{destination: {host: svc}}]
    timeout: 5s
    retries: {attempts: 3, retryOn: "5xx,retriable-4xx"}
"#,
    );
    assert_eq!(b.not_served().count(), 0);
    let w: Vec<String> = b.warnings().filter_map(|d| d.path.clone()).collect();
    assert!(!w.contains(&"spec.http[0].timeout".to_string()), "{w:?}");
    assert!(
        w.contains(&"spec.http[0].retries.retryOn".to_string()),
        "{w:?}"
    );
    let r =
        b.ir.routes
            .iter()
            .find(|r| r.name.contains("default/vs"))
            .expect("route");
    assert_eq!(r.http[0].timeout_ms, 5000);
    assert_eq!(r.http[0].retries.attempts, 3);
    assert!(r.http[0].retries.server_error);
    assert!(route_names(&b).iter().any(|n| n.contains("default/vs")));
}

/// `port` and `gateways` pick the matches that apply to the server; a match without
/// `uri` admits every path.
#[test]
fn implemented_match_fields_route_as_upstream_says() {
    let b = built(
        r#"apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs, namespace: default}
spec:
  hosts: [vs.example.com]
  gateways: [igw]
  http:
  - match:
    - {uri: {prefix: /a}, port: 8080}
    - {uri: {prefix: /b}, port: 9999}
    route: [{destination: {host: svc}}]
  - match:
    - {uri: {exact: /c}}
    - {port: 8080}
    route: [{destination: {host: svc}}]
"#,
    );
    assert_eq!(b.not_served().count(), 0);
    let r =
        b.ir.routes
            .iter()
            .find(|r| r.name.contains("default/vs"))
            .expect("route");
    use sluice_ctrl::compile::ir::StringMatch;
    // /b is for port 9999: not on this server.
    let m: Vec<(Option<StringMatch>, Option<u16>, usize)> = r
        .http_matches
        .iter()
        .map(|(m, i)| (m.path.clone(), m.port, *i))
        .collect();
    assert_eq!(
        m,
        vec![
            (Some(StringMatch::Prefix("/a".into())), Some(8080), 0),
            (Some(StringMatch::Exact("/c".into())), None, 1),
            // The second rule's `port` match has no uri: every path.
            (None, Some(8080), 1),
        ]
    );
}

#[test]
fn tls_and_tcp_source_matches_are_not_served() {
    let b = built(
        r#"apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs, namespace: default}
spec:
  hosts: [vs.example.com]
  gateways: [igw]
  tcp:
  - match: [{sourceNamespace: other}]
    route: [{destination: {host: svc}}]
"#,
    );
    let d: Vec<String> = b.not_served().filter_map(|d| d.path.clone()).collect();
    assert_eq!(d, ["spec.tcp[0].match[0].sourceNamespace"]);
}

#[test]
fn grpc_route_kind_is_not_served_and_the_rest_is() {
    let b = built(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: web, namespace: default}
spec:
  parentRefs: [{name: g}]
  rules: [{backendRefs: [{name: svc, port: 80}]}]
"#,
    );
    let d: Vec<String> = b.not_served().map(ToString::to_string).collect();
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(
        d[0].contains("GRPCRoute default/web: kind: GRPCRoute is not served by sluice"),
        "{d:?}"
    );
    assert!(route_names(&b).iter().any(|n| n.contains("default/served")));
}

/// A Gateway with a Passthrough and a Terminate TLS listener, one route each, where the
/// Terminate listener's Secret holds no certificate: that listener is left out
/// (`InvalidCertificateRef`, the Secret named; its route does not attach), the
/// Passthrough one is served.
#[test]
fn tls_terminate_listeners_with_a_bad_certificate_are_not_served_and_their_siblings_are() {
    let b = built(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: g, namespace: default}
spec:
  gatewayClassName: sluice
  addresses: [{value: 10.77.0.11}]
  listeners:
  - {name: pass, port: 443, protocol: TLS, tls: {mode: Passthrough}}
  - {name: term, port: 8443, protocol: TLS, tls: {mode: Terminate, certificateRefs: [{name: cert}]}}
---
apiVersion: v1
kind: Secret
metadata: {name: cert, namespace: default}
type: kubernetes.io/tls
stringData: {tls.crt: x, tls.key: y}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {name: r, namespace: default}
spec:
  parentRefs: [{name: g}]
  hostnames: [a.example.com]
  rules: [{backendRefs: [{name: svc, port: 80}]}]
"#,
    );
    let d: Vec<&Diagnostic> = b.not_served().collect();
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(
        d[0].path.as_deref(),
        Some("spec.listeners[1].tls.certificateRefs[0].name")
    );
    assert_eq!(d[0].reason, Some("InvalidCertificateRef"));
    assert!(
        d[0].message.starts_with("Secret default/cert (case.yaml:")
            && d[0].message.contains("): no PEM certificate"),
        "{}",
        d[0].message
    );
    let ports: Vec<u16> = b.ir.listeners.iter().map(|l| l.port).collect();
    assert!(ports.contains(&443) && !ports.contains(&8443), "{ports:?}");
    let status = b.status_json();
    let gw = status
        .as_array()
        .expect("list")
        .iter()
        .find(|o| o["kind"] == "Gateway")
        .expect("gateway");
    let term = &gw["status"]["listeners"][1];
    assert_eq!(term["name"], "term");
    let cond = |t: &str| {
        term["conditions"]
            .as_array()
            .expect("conditions")
            .iter()
            .find(|c| c["type"] == t)
            .map(|c| (c["status"].clone(), c["reason"].clone()))
            .expect("condition")
    };
    assert_eq!(cond("Accepted"), ("True".into(), "Accepted".into()));
    assert_eq!(cond("Programmed"), ("False".into(), "Invalid".into()));
    assert_eq!(
        cond("ResolvedRefs"),
        ("False".into(), "InvalidCertificateRef".into())
    );
    assert_eq!(gw["status"]["listeners"][0]["attachedRoutes"], 1);
}

/// `sluice explain` says what the dataplane does with traffic for what is not served:
/// no listener on a TLS-terminating server's port, no route for a VirtualService left
/// out, each with the reason.
#[test]
fn explain_says_why_traffic_for_what_is_not_served_gets_nowhere() {
    let bookinfo = concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/istio-bookinfo");
    let explain = |args: &[&str]| -> serde_json::Value {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["explain", "-c", bookinfo, "--src", "198.51.100.1:4000"])
            .args(args)
            .output()
            .expect("sluice");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let v = explain(&["--dst", "10.77.0.110:443", "--sni", "uk.bookinfo.com"]);
    assert_eq!(v["verdict"], "drop");
    let reason = v["reason"].as_str().expect("reason");
    assert!(
        reason.contains("spec.servers[1].tls.serverCertificate is not served: cannot read /etc/certs/servercert.pem"),
        "{reason}"
    );
    // bookinfo-rule is served now: the cookie picks QA, /reviews/ the 80/20 split, any
    // other path gets 404 from the proxy.
    let rule = |extra: &[&str]| {
        let mut args = vec![
            "--dst",
            "10.77.0.110:9080",
            "--http-host",
            "uk.bookinfo.com",
        ];
        args.extend_from_slice(extra);
        explain(&args)
    };
    let v = rule(&["--http-header", "Cookie: user=dev-123"]);
    assert_eq!(
        v["rule"], "VirtualService bookinfo-namespace/bookinfo-rule http[0]",
        "{v}"
    );
    let v = rule(&["--http-path", "/reviews/1?x=y"]);
    assert_eq!(
        v["rule"], "VirtualService bookinfo-namespace/bookinfo-rule http[1]",
        "{v}"
    );
    let v = rule(&["--http-path", "/other"]);
    assert_eq!(v["verdict"], "reject");
    assert_eq!(v["answer"]["status"], 404, "{v}");
}
