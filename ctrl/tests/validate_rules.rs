//! One negative test per loading/validation rule: each case is a small manifest set with
//! the offending line marked `#<-`; the test asserts that a diagnostic of the expected
//! severity names the file, that line, the object and the field path, and says why.

use sluice_ctrl::compile::{build as compile_loaded, diagnostics, Built};
use sluice_ctrl::diag::Diagnostics;
type Compiled = Result<Built, Diagnostics>;
use sluice_ctrl::diag::{Diagnostic, Severity};
use sluice_ctrl::load::{load_str, Loaded};

/// Objects the cases refer to; appended after each case so that case lines count from 1.
const BASE: &str = r#"
---
apiVersion: v1
kind: Namespace
metadata: {name: default}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: sluice
  listeners:
  - {name: tcp, port: 5000, protocol: TCP}
  - {name: dns, port: 5353, protocol: UDP}
  - name: tls
    port: 443
    protocol: TLS
    hostname: "*.example.com"
    tls: {mode: Passthrough}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: igw, namespace: default}
spec:
  servers:
  - port: {number: 6000, name: tcp, protocol: TCP}
    hosts: ["*"]
---
apiVersion: v1
kind: Service
metadata: {name: svc, namespace: default}
spec:
  selector: {app: svc}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: svc-0, namespace: default, labels: {app: svc}}
status: {podIP: 10.1.0.1}
---
apiVersion: v1
kind: Secret
type: kubernetes.io/tls
metadata: {name: cert, namespace: default}
stringData: {tls.crt: "x", tls.key: "y"}
---
apiVersion: v1
kind: Secret
type: kubernetes.io/tls
metadata: {name: cert, namespace: other}
stringData: {tls.crt: "x", tls.key: "y"}
"#;

fn run(case: &str) -> Compiled {
    let text = format!("{case}{BASE}");
    let mut loaded = Loaded::default();
    load_str("case.yaml", &text, &mut loaded);
    compile_loaded(loaded)
}

fn marked_line(case: &str) -> usize {
    case.lines()
        .position(|l| l.contains("#<-"))
        .map(|i| i + 1)
        .expect("case has a #<- marker")
}

/// Asserts a diagnostic with this severity, at the marked line, whose path and message
/// contain the given fragments. Returns it for further checks.
fn expect(case: &str, severity: Severity, path: &str, message: &str) -> Diagnostic {
    let c = run(case);
    let line = marked_line(case);
    let found = diagnostics(&c).iter().find(|d| {
        d.severity == severity
            && d.pos.line == line
            && d.path.as_deref().unwrap_or("").contains(path)
            && d.message.contains(message)
    });
    match found {
        Some(d) => {
            assert_eq!(&*d.file, "case.yaml");
            let text = d.to_string();
            let prefix = match (severity, d.reason) {
                (Severity::Warning, _) => "warning: ".to_string(),
                (Severity::NotServed, Some(r)) => format!("not served ({r}): "),
                (Severity::NotServed, None) => "not served: ".to_string(),
                (Severity::Error, _) => String::new(),
            };
            assert!(
                text.starts_with(&format!("{prefix}case.yaml:{line}:")),
                "{text}"
            );
            match severity {
                Severity::Error => assert!(c.is_err(), "an error must reject the configuration"),
                // Left out alone: the rest of the configuration is served.
                Severity::NotServed => assert!(c.is_ok(), "only errors reject a configuration"),
                Severity::Warning => {}
            }
            d.clone()
        }
        None => panic!(
            "expected {severity:?} at line {line} path ~{path:?} message ~{message:?}; got:\n{}",
            diagnostics(&c)
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
}

fn error(case: &str, path: &str, message: &str) -> Diagnostic {
    expect(case, Severity::Error, path, message)
}

fn warning(case: &str, path: &str, message: &str) -> Diagnostic {
    expect(case, Severity::Warning, path, message)
}

/// The object (or listener) at the marked line is left out, the rest is served.
fn not_served(case: &str, path: &str, message: &str) -> Diagnostic {
    expect(case, Severity::NotServed, path, message)
}

#[test]
fn base_is_clean() {
    let c = run("");
    let errors: Vec<String> = diagnostics(&c)
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
    assert!(c.is_ok());
}

#[test]
fn malformed_yaml() {
    let c = run("a: [1, 2\nb: {\n#<-\n");
    let d = diagnostics(&c)
        .iter()
        .find(|d| d.is_error())
        .expect("an error");
    assert_eq!(&*d.file, "case.yaml");
    assert!(d.message.contains("YAML syntax error"), "{d}");
    assert!(d.pos.line >= 2, "{d}");
}

#[test]
fn duplicate_yaml_key() {
    error(
        "apiVersion: v1\nkind: Namespace\nkind: Namespace #<-\nmetadata: {name: x}\n",
        "",
        "duplicate key `kind`",
    );
}

#[test]
fn wrong_type() {
    let d = error(
        r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: g, namespace: default}
spec:
  servers:
  - port:
      number: eighty #<-
      name: http
      protocol: HTTP
    hosts: ["*"]
"#,
        "spec.servers[0].port.number",
        "invalid type",
    );
    assert_eq!(d.object.as_deref(), Some("Gateway default/g"));
}

#[test]
fn unknown_enum_value() {
    error(
        r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: g, namespace: default}
spec:
  servers:
  - port: {number: 443, name: https, protocol: HTTPS}
    hosts: ["*"]
    tls:
      mode: SIMPEL #<-
"#,
        "spec.servers[0].tls.mode",
        "unknown variant `SIMPEL`",
    );
}

#[test]
fn typo_field_is_an_error() {
    let d = error(
        r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: g, namespace: default}
spec:
  servers:
  - port: {number: 7001, name: tcp, protocol: TCP}
    hostz: ["*"] #<-
"#,
        "spec.servers[0].hostz",
        "unknown field `hostz`",
    );
    assert_eq!(
        d.object.as_deref(),
        Some("Gateway.networking.istio.io default/g")
    );
}

#[test]
fn unimplemented_upstream_field_is_a_warning() {
    warning(
        r#"apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: v, namespace: default}
spec:
  hosts: [a.example.com]
  gateways: [igw]
  http:
  - route: [{destination: {host: svc}}]
    match: [{uri: {prefix: /a}, statPrefix: a}] #<-
"#,
        "spec.http[0].match[0].statPrefix",
        "not implemented",
    );
}

#[test]
fn kubectl_output_loads() {
    let c = run(r#"apiVersion: v1
kind: Service
metadata:
  name: kubectl
  namespace: default
  uid: 8d7c1e0a-0000-0000-0000-000000000000
  resourceVersion: "123"
  managedFields:
  - manager: kubectl
    operation: Update
  annotations: {kubectl.kubernetes.io/last-applied-configuration: "{}"}
spec:
  clusterIP: 10.96.0.10
  clusterIPs: [10.96.0.10]
  internalTrafficPolicy: Cluster
  ipFamilies: [IPv4]
  sessionAffinity: None
  selector: {app: svc}
  ports: [{name: http, port: 80, protocol: TCP, targetPort: 8080}]
status:
  loadBalancer: {}
"#);
    let errors: Vec<String> = diagnostics(&c)
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
}

#[test]
fn missing_api_version() {
    error(
        "kind: Gateway #<-\nmetadata: {name: g}\n",
        "apiVersion",
        "missing field `apiVersion`",
    );
}

#[test]
fn unsupported_version() {
    error(
        "apiVersion: networking.istio.io/v2 #<-\nkind: Gateway\nmetadata: {name: g}\n",
        "apiVersion",
        "not supported",
    );
}

#[test]
fn unknown_kind_is_skipped_with_a_warning() {
    warning(
        "apiVersion: apps/v1 #<-\nkind: Deployment\nmetadata: {name: d}\nspec: {replicas: 3}\n",
        "",
        "skipped: kind Deployment",
    );
}

#[test]
fn virtualservice_gateway_reference() {
    // Not bound to a Gateway that is not there; the rest keeps serving.
    not_served(
        r#"apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: v, namespace: default}
spec:
  hosts: ["*"]
  gateways:
  - default/nope #<-
  tcp:
  - route: [{destination: {host: svc}}]
"#,
        "spec.gateways[0]",
        "Gateway default/nope not found",
    );
}

#[test]
fn route_parent_gateway_missing() {
    for kind in ["TCPRoute", "UDPRoute"] {
        not_served(
            &format!(
                r#"apiVersion: gateway.networking.k8s.io/v1alpha2
kind: {kind}
metadata: {{name: r, namespace: default}}
spec:
  parentRefs:
  - name: nope #<-
  rules:
  - backendRefs: [{{name: svc, port: 80}}]
"#
            ),
            "spec.parentRefs[0].name",
            "Gateway default/nope not found",
        );
    }
}

#[test]
fn route_parent_section_name_missing() {
    not_served(
        r#"apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: r, namespace: default}
spec:
  parentRefs:
  - name: gw
    sectionName: udp #<-
  rules:
  - backendRefs: [{name: svc, port: 80}]
"#,
        "spec.parentRefs[0].sectionName",
        "no listener named `udp`",
    );
}

#[test]
fn route_parent_port_missing() {
    not_served(
        r#"apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: r, namespace: default}
spec:
  parentRefs:
  - name: gw
    port: 5001 #<-
  rules:
  - backendRefs: [{name: svc, port: 80}]
"#,
        "spec.parentRefs[0].port",
        "no listener on port 5001",
    );
}

#[test]
fn backend_service_missing_is_rejected_share() {
    warning(
        r#"apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: r, namespace: default}
spec:
  parentRefs: [{name: gw, sectionName: tcp}]
  rules:
  - backendRefs:
    - {name: svc, port: 80}
    - {name: ghost, port: 80} #<-
"#,
        "spec.rules[0].backendRefs[1].name",
        "Service default/ghost not found",
    );
}

#[test]
fn backend_cross_namespace_without_grant() {
    warning(
        r#"apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: r, namespace: default}
spec:
  parentRefs: [{name: gw, sectionName: tcp}]
  rules:
  - backendRefs:
    - {name: svc, namespace: other, port: 80} #<-
"#,
        "spec.rules[0].backendRefs[0].namespace",
        "not permitted by any ReferenceGrant",
    );
}

#[test]
fn subset_without_destination_rule() {
    warning(
        r#"apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: v, namespace: default}
spec:
  hosts: ["*"]
  gateways: [igw]
  tcp:
  - route:
    - destination:
        host: svc
        subset: v2 #<-
"#,
        "spec.tcp[0].route[0].destination.subset",
        "no DestinationRule defines subset `v2`",
    );
}

/// A certificateRef to no Secret leaves that listener out (not the configuration).
#[test]
fn certificate_ref_missing_secret() {
    not_served(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: t, namespace: default}
spec:
  gatewayClassName: sluice
  listeners:
  - name: term
    port: 9443
    protocol: TLS
    tls:
      certificateRefs:
      - name: missing #<-
"#,
        "spec.listeners[0].tls.certificateRefs[0].name",
        "Secret default/missing: not found",
    );
}

#[test]
fn certificate_ref_cross_namespace_needs_grant() {
    let d = not_served(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: t, namespace: default}
spec:
  gatewayClassName: sluice
  listeners:
  - name: term
    port: 9443
    protocol: TLS
    tls:
      certificateRefs:
      - name: cert
        namespace: other #<-
"#,
        "spec.listeners[0].tls.certificateRefs[0].namespace",
        "no ReferenceGrant in namespace other",
    );
    assert_eq!(d.reason, Some("RefNotPermitted"));
}

#[test]
fn certificate_ref_cross_namespace_with_grant_is_fine() {
    let c = run(r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: t, namespace: default}
spec:
  gatewayClassName: sluice
  listeners:
  - name: term
    port: 9443
    protocol: TLS
    tls:
      certificateRefs: [{name: cert, namespace: other}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: g, namespace: other}
spec:
  from: [{group: gateway.networking.k8s.io, kind: Gateway, namespace: default}]
  to: [{group: "", kind: Secret}]
"#);
    let errors: Vec<String> = diagnostics(&c)
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
}

#[test]
fn credential_name_missing_secret() {
    not_served(
        r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: g, namespace: default}
spec:
  servers:
  - port: {number: 9443, name: https, protocol: HTTPS}
    hosts: ["*"]
    tls:
      mode: SIMPLE
      credentialName: nope #<-
"#,
        "spec.servers[0].tls.credentialName",
        "Secret default/nope: not found",
    );
}

#[test]
fn simple_needs_certificate_and_key() {
    let case = r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: g, namespace: default}
spec:
  servers:
  - port: {number: 9443, name: https, protocol: HTTPS}
    hosts: ["*"]
    tls:
      mode: SIMPLE #<-
      privateKey: /etc/k.pem
"#;
    // Reported at the tls object (the missing field's nearest existing ancestor).
    let c = run(case);
    let c = c.expect_err("rejected");
    let d = c
        .errors()
        .find(|d| d.message.contains("needs serverCertificate"))
        .expect("error");
    assert_eq!(
        d.path.as_deref(),
        Some("spec.servers[0].tls.serverCertificate")
    );
    assert_eq!(d.pos.line, 8, "{d}");
}

#[test]
fn mutual_needs_ca() {
    let c = run(r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: g, namespace: default}
spec:
  servers:
  - port: {number: 9443, name: https, protocol: HTTPS}
    hosts: ["*"]
    tls:
      mode: MUTUAL
      serverCertificate: /etc/c.pem
      privateKey: /etc/k.pem
"#);
    let c = c.expect_err("rejected");
    let d = c
        .errors()
        .find(|d| d.message.contains("needs caCertificates"))
        .expect("error");
    assert_eq!(
        d.path.as_deref(),
        Some("spec.servers[0].tls.caCertificates")
    );
    assert_eq!(d.pos.line, 8);
}

/// Istio takes credentialName and ignores the files beside it: a warning.
#[test]
fn credential_name_wins_over_files() {
    warning(
        r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: g, namespace: default}
spec:
  servers:
  - port: {number: 9443, name: https, protocol: HTTPS}
    hosts: ["*"]
    tls:
      mode: SIMPLE
      credentialName: cert #<-
      serverCertificate: /etc/c.pem
"#,
        "spec.servers[0].tls.credentialName",
        "credentialName wins (as in Istio)",
    );
}

#[test]
fn istio_mutual_needs_no_certificates() {
    error(
        r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: g, namespace: default}
spec:
  servers:
  - port: {number: 9443, name: https, protocol: HTTPS}
    hosts: ["*"]
    tls:
      mode: ISTIO_MUTUAL #<-
      serverCertificate: /etc/c.pem
"#,
        "spec.servers[0].tls.mode",
        "ISTIO_MUTUAL",
    );
}

#[test]
fn istio_protocol_value() {
    error(
        r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: g, namespace: default}
spec:
  servers:
  - port:
      number: 21
      name: ftp
      protocol: FTP #<-
    hosts: ["*"]
"#,
        "spec.servers[0].port.protocol",
        "unknown protocol `FTP`",
    );
}

#[test]
fn gateway_api_protocol_value() {
    error(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: t, namespace: default}
spec:
  gatewayClassName: sluice
  listeners:
  - name: x
    port: 9000
    protocol: SCTP #<-
"#,
        "spec.listeners[0].protocol",
        "unknown protocol `SCTP`",
    );
}

#[test]
fn gateway_api_hostname_syntax() {
    for bad in [
        "Upper.example.com",
        "*.*.example.com",
        "10.0.0.1",
        "a..b",
        "-a.b",
    ] {
        error(
            &format!(
                r#"apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {{name: r, namespace: default}}
spec:
  parentRefs: [{{name: gw, sectionName: tls}}]
  hostnames:
  - "{bad}" #<-
  rules:
  - backendRefs: [{{name: svc, port: 80}}]
"#
            ),
            "spec.hostnames[0]",
            bad,
        );
    }
}

#[test]
fn istio_server_host_syntax() {
    error(
        r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: g, namespace: default}
spec:
  servers:
  - port: {number: 8080, name: http, protocol: HTTP}
    hosts:
    - "Bad_NS/foo.com" #<-
"#,
        "spec.servers[0].hosts[0]",
        "namespace `Bad_NS`",
    );
}

#[test]
fn cidr_with_host_bits_is_normalised() {
    warning(
        r#"apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: p, namespace: default}
spec:
  podSelector: {}
  ingress:
  - from:
    - ipBlock:
        cidr: 10.1.2.3/16 #<-
"#,
        "spec.ingress[0].from[0].ipBlock.cidr",
        "normalised to `10.1.0.0/16`",
    );
}

#[test]
fn cidr_garbage() {
    error(
        r#"apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: p, namespace: default}
spec:
  podSelector: {}
  ingress:
  - from:
    - ipBlock:
        cidr: 10.1.2/33 #<-
"#,
        "spec.ingress[0].from[0].ipBlock.cidr",
        "is not a CIDR",
    );
}

#[test]
fn except_outside_cidr() {
    error(
        r#"apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: p, namespace: default}
spec:
  podSelector: {}
  egress:
  - to:
    - ipBlock:
        cidr: 10.1.0.0/16
        except:
        - 10.2.0.0/24 #<-
"#,
        "spec.egress[0].to[0].ipBlock.except[0]",
        "is not inside cidr",
    );
}

#[test]
fn end_port_needs_numeric_port() {
    error(
        r#"apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: p, namespace: default}
spec:
  podSelector: {}
  ingress:
  - ports:
    - port: http
      endPort: 90 #<-
"#,
        "spec.ingress[0].ports[0].endPort",
        "needs a numeric port",
    );
}

#[test]
fn end_port_below_port() {
    error(
        r#"apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: p, namespace: default}
spec:
  podSelector: {}
  ingress:
  - ports:
    - port: 100
      endPort: 90 #<-
"#,
        "spec.ingress[0].ports[0].endPort",
        "must be >= port 100",
    );
}

#[test]
fn selector_in_needs_values() {
    error(
        r#"apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: p, namespace: default}
spec:
  podSelector:
    matchExpressions:
    - key: app #<-
      operator: In
"#,
        "spec.podSelector.matchExpressions[0].values",
        "needs at least one value",
    );
}

#[test]
fn selector_exists_takes_no_values() {
    error(
        r#"apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: p, namespace: default}
spec:
  podSelector: {}
  ingress:
  - from:
    - podSelector:
        matchExpressions:
        - key: app
          operator: Exists
          values: [x] #<-
"#,
        "spec.ingress[0].from[0].podSelector.matchExpressions[0].values",
        "takes no values",
    );
}

#[test]
fn selector_unknown_operator() {
    error(
        r#"apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: p, namespace: default}
spec:
  podSelector:
    matchExpressions:
    - key: app
      operator: Matches #<-
"#,
        "spec.podSelector.matchExpressions[0].operator",
        "unknown variant `Matches`",
    );
}

#[test]
fn duplicate_object_names() {
    error(
        r#"apiVersion: v1
kind: Service
metadata: {name: dup, namespace: default}
spec:
  ports: [{port: 81}]
---
apiVersion: v1
kind: Service
metadata: {name: dup, namespace: default} #<-
spec:
  ports: [{port: 82}]
"#,
        "metadata.name",
        "duplicate object: Service default/dup is already defined at case.yaml:1:1",
    );
}

#[test]
fn duplicate_listener_names() {
    error(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: t, namespace: default}
spec:
  gatewayClassName: sluice
  listeners:
  - {name: a, port: 7001, protocol: TCP}
  - {name: a, port: 7002, protocol: TCP} #<-
"#,
        "spec.listeners[1].name",
        "duplicate listener name `a`",
    );
}

#[test]
fn weight_out_of_range() {
    for w in ["1000001", "-1"] {
        error(
            &format!(
                r#"apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {{name: r, namespace: default}}
spec:
  parentRefs: [{{name: gw, sectionName: tcp}}]
  rules:
  - backendRefs:
    - name: svc
      port: 80
      weight: {w} #<-
"#
            ),
            "spec.rules[0].backendRefs[0].weight",
            "out of range 0..1000000",
        );
    }
}

#[test]
fn l4_routes_have_one_rule() {
    for (kind, section) in [("TCPRoute", "tcp"), ("UDPRoute", "dns")] {
        let d = error(
            &format!(
                r#"apiVersion: gateway.networking.k8s.io/v1alpha2
kind: {kind}
metadata: {{name: r, namespace: default}}
spec:
  parentRefs: [{{name: gw, sectionName: {section}}}]
  rules: #<-
  - backendRefs: [{{name: svc, port: 80}}]
  - backendRefs: [{{name: svc, port: 80}}]
"#
            ),
            "spec.rules",
            "exactly one rule",
        );
        assert!(
            d.message
                .contains(&format!("a {kind} has exactly one rule")),
            "{}",
            d.message
        );
    }
}

#[test]
fn tcproute_backend_ref_count() {
    let refs: String = (0..17).map(|_| "    - {name: svc, port: 80}\n").collect();
    error(
        &format!(
            "apiVersion: gateway.networking.k8s.io/v1alpha2\nkind: TCPRoute\nmetadata: {{name: r, namespace: default}}\nspec:\n  parentRefs: [{{name: gw, sectionName: tcp}}]\n  rules:\n  - backendRefs: #<-\n{refs}"
        ),
        "spec.rules[0].backendRefs",
        "1..16 backendRefs; found 17",
    );
}

#[test]
fn conflicting_listeners_in_one_gateway() {
    not_served(
        r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: g, namespace: default}
spec:
  servers:
  - port: {number: 7443, name: tcp, protocol: TCP}
    hosts: ["*"]
  - port: #<-
      number: 7443
      name: tls
      protocol: TLS
    hosts: ["*"]
    tls: {mode: PASSTHROUGH}
"#,
        "spec.servers[1].port",
        "port 7443 is already used by a TCP server",
    );
}

#[test]
fn conflicting_listeners_across_gateways() {
    // BASE's Gateway default/gw takes TCP 5000 and precedes default/zz: zz's TLS
    // listener on the same addresses and port is left out, the rest is served.
    not_served(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: zz, namespace: default}
spec:
  gatewayClassName: sluice
  listeners:
  - name: t
    port: 5000 #<-
    protocol: TLS
    tls: {mode: Passthrough}
"#,
        "spec.listeners[0].port",
        "port 5000 is taken by Gateway default/gw listeners[0] (tcp)",
    );
}

#[test]
fn appliance_rejects_unknown_fields() {
    error(
        r#"apiVersion: sluice.dev/v1alpha1
kind: Appliance
metadata: {name: a}
spec:
  cores: [0]
  portz: [] #<-
"#,
        "spec",
        "unknown field `portz`",
    );
}

#[test]
fn appliance_port_needs_one_backend() {
    error(
        r#"apiVersion: sluice.dev/v1alpha1
kind: Appliance
metadata: {name: a}
spec:
  ports:
  - name: p #<-
    tap: {name: sl9}
    dpdk: {devargs: net_null0}
"#,
        "spec.ports[0]",
        "exactly one of tap, dpdk, pcap",
    );
}

#[test]
fn appliance_address_needs_prefix() {
    error(
        r#"apiVersion: sluice.dev/v1alpha1
kind: Appliance
metadata: {name: a}
spec:
  ports:
  - name: p
    tap: {name: sl9}
    addresses:
    - 10.0.0.1 #<-
"#,
        "spec.ports[0].addresses[0]",
        "prefix length",
    );
}

#[test]
fn maglev_table_size_must_be_prime() {
    error(
        r#"apiVersion: sluice.dev/v1alpha1
kind: Appliance
metadata: {name: a}
spec:
  maglevTableSize: 65536 #<-
"#,
        "spec.maglevTableSize",
        "must be a prime",
    );
}

#[test]
fn snat_rest_is_bounded() {
    error(
        r#"apiVersion: sluice.dev/v1alpha1
kind: Appliance
metadata: {name: a}
spec:
  conntrack:
    snatRestSeconds: 7200 #<-
"#,
        "spec.conntrack.snatRestSeconds",
        "at most 3600",
    );
    warning(
        r#"apiVersion: sluice.dev/v1alpha1
kind: Appliance
metadata: {name: a}
spec:
  conntrack:
    snatRestSeconds: 5 #<-
"#,
        "spec.conntrack.snatRestSeconds",
        "TIME_WAIT",
    );
}

#[test]
fn per_source_limits_must_be_at_least_one_and_fit() {
    error(
        r#"apiVersion: sluice.dev/v1alpha1
kind: Appliance
metadata: {name: a}
spec:
  limits:
    newConnectionsPerSecondPerSource: 0 #<-
"#,
        "spec.limits.newConnectionsPerSecondPerSource",
        "at least 1",
    );
    error(
        r#"apiVersion: sluice.dev/v1alpha1
kind: Appliance
metadata: {name: a}
spec:
  limits:
    embryosPerSource: 70000 #<-
"#,
        "spec.limits.embryosPerSource",
        "at most 65535",
    );
}

#[test]
fn secret_bad_base64() {
    error(
        r#"apiVersion: v1
kind: Secret
metadata: {name: s, namespace: default}
data:
  tls.crt: "@@@not base64" #<-
"#,
        "data.tls.crt",
        "not valid base64",
    );
}

#[test]
fn ligato_unknown_enum() {
    let mut loaded = Loaded::default();
    load_str(
        "policy.json",
        "{\n  \"name\": \"p\",\n  \"namespace\": \"default\",\n  \"policyType\": \"SIDEWAYS\"\n}\n",
        &mut loaded,
    );
    let c = compile_loaded(loaded);
    let d = diagnostics(&c)
        .iter()
        .find(|d| d.is_error())
        .expect("an error");
    assert_eq!(d.path.as_deref(), Some("policyType"));
    assert_eq!(d.pos.line, 4);
    assert!(d.message.contains("SIDEWAYS"), "{d}");
}

#[test]
fn list_items_are_located() {
    error(
        r#"apiVersion: v1
kind: List
items:
- apiVersion: networking.k8s.io/v1
  kind: NetworkPolicy
  metadata: {name: p, namespace: default}
  spec:
    podSelector: {}
    policyTypes: [Sideways] #<-
"#,
        "items[0].spec.policyTypes[0]",
        "unknown variant `Sideways`",
    );
}

#[test]
fn passthrough_and_terminate_of_one_host_on_one_port() {
    error(
        r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: g, namespace: default}
spec:
  servers:
  - port: {number: 7443, name: pass, protocol: TLS}
    hosts: ["a.example.com"]
    tls: {mode: PASSTHROUGH}
  - port: {number: 7443, name: term, protocol: HTTPS}
    hosts: #<-
    - a.example.com
    tls: {mode: SIMPLE, serverCertificate: /c.pem, privateKey: /k.pem}
"#,
        "spec.servers[1].hosts",
        "host `a.example.com` is both passthrough and terminate on port 7443",
    );
}

#[test]
fn udproute_attaches_only_to_udp_listeners() {
    not_served(
        r#"apiVersion: gateway.networking.k8s.io/v1alpha2
kind: UDPRoute
metadata: {name: r, namespace: default}
spec:
  parentRefs:
  - {name: gw, sectionName: tcp} #<-
  rules:
  - backendRefs: [{name: svc, port: 80}]
"#,
        "spec.parentRefs[0]",
        "Gateway default/gw has no UDP listener this UDPRoute can attach to \
         (listener `tcp` is TCP and takes TCPRoutes)",
    );
}

#[test]
fn tcproute_attaches_only_to_tcp_listeners() {
    not_served(
        r#"apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: r, namespace: default}
spec:
  parentRefs:
  - {name: gw, port: 5353} #<-
  rules:
  - backendRefs: [{name: svc, port: 80}]
"#,
        "spec.parentRefs[0]",
        "Gateway default/gw has no TCP listener this TCPRoute can attach to \
         (listener `dns` is UDP and takes UDPRoutes)",
    );
}

#[test]
fn udproute_on_its_udp_listener_is_clean() {
    let c = run(r#"apiVersion: gateway.networking.k8s.io/v1alpha2
kind: UDPRoute
metadata: {name: r, namespace: default}
spec:
  parentRefs: [{name: gw, sectionName: dns}]
  rules:
  - backendRefs: [{name: svc, port: 80, weight: 2}]
"#);
    let diags: Vec<String> = diagnostics(&c).iter().map(|d| d.to_string()).collect();
    assert!(diags.is_empty(), "{diags:#?}");
    let ir = c.expect("compiles").ir;
    let l = ir
        .listeners
        .iter()
        .find(|l| l.port == 5353)
        .expect("UDP listener");
    assert_eq!(ir.routes[l.bindings[0].route].name, "UDPRoute default/r");
}

#[test]
fn udproute_weight_out_of_range() {
    error(
        r#"apiVersion: gateway.networking.k8s.io/v1alpha2
kind: UDPRoute
metadata: {name: r, namespace: default}
spec:
  parentRefs: [{name: gw, sectionName: dns}]
  rules:
  - backendRefs:
    - {name: svc, port: 80, weight: -1} #<-
"#,
        "spec.rules[0].backendRefs[0].weight",
        "weight -1 is out of range",
    );
}

#[test]
fn udproute_backend_filters_is_not_an_upstream_field() {
    // Upstream UDPRoute backendRefs are plain BackendRefs: no `filters`.
    error(
        r#"apiVersion: gateway.networking.k8s.io/v1alpha2
kind: UDPRoute
metadata: {name: r, namespace: default}
spec:
  parentRefs: [{name: gw, sectionName: dns}]
  rules:
  - backendRefs:
    - name: svc
      port: 80
      filters: [] #<-
"#,
        "spec.rules[0].backendRefs[0].filters",
        "unknown field `filters`",
    );
}

/// A Service with endpoints in namespace `other` and a ReferenceGrant there admitting `from_kind`s of
/// namespace `default`.
fn grant_in_other(from_kind: &str) -> String {
    format!(
        r#"---
apiVersion: v1
kind: Service
metadata: {{name: svc, namespace: other}}
spec: {{ports: [{{port: 80}}]}}
---
apiVersion: v1
kind: Endpoints
metadata: {{name: svc, namespace: other}}
subsets: [{{addresses: [{{ip: 10.2.0.1}}], ports: [{{port: 80}}]}}]
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {{name: g, namespace: other}}
spec:
  from: [{{group: gateway.networking.k8s.io, kind: {from_kind}, namespace: default}}]
  to: [{{group: "", kind: Service}}]
"#
    )
}

const UDPROUTE_TO_OTHER: &str = r#"apiVersion: gateway.networking.k8s.io/v1alpha2
kind: UDPRoute
metadata: {name: r, namespace: default}
spec:
  parentRefs: [{name: gw, sectionName: dns}]
  rules:
  - backendRefs:
    - {name: svc, namespace: other, port: 80} #<-
"#;

#[test]
fn udproute_cross_namespace_backend_needs_a_grant_from_udproute() {
    // A grant for TCPRoutes does not cover a UDPRoute.
    warning(
        &format!("{UDPROUTE_TO_OTHER}{}", grant_in_other("TCPRoute")),
        "spec.rules[0].backendRefs[0].namespace",
        "reference to Service other/svc is not permitted by any ReferenceGrant",
    );
}

#[test]
fn udproute_cross_namespace_backend_with_grant_is_fine() {
    let c = run(&format!(
        "{UDPROUTE_TO_OTHER}{}",
        grant_in_other("UDPRoute")
    ));
    let diags: Vec<String> = diagnostics(&c).iter().map(|d| d.to_string()).collect();
    assert!(diags.is_empty(), "{diags:#?}");
    let ir = c.expect("compiles").ir;
    let route = ir
        .routes
        .iter()
        .find(|r| r.name == "UDPRoute default/r")
        .expect("route");
    assert_eq!(route.backends[0].name, "other/svc:80");
    assert_eq!(
        route.backends[0].target,
        sluice_ctrl::compile::ir::BackendTarget::Endpoints(vec!["10.2.0.1:80"
            .parse()
            .expect("addr")])
    );
}

#[test]
fn tcp_and_udp_listeners_may_share_a_port() {
    let c = run(r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: dns, namespace: default}
spec:
  gatewayClassName: sluice
  listeners:
  - {name: udp, port: 53, protocol: UDP}
  - {name: tcp, port: 53, protocol: TCP}
"#);
    let errors: Vec<String> = diagnostics(&c)
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    // ... but two UDP listeners on one port still conflict: the later is left out.
    not_served(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: dns, namespace: default}
spec:
  gatewayClassName: sluice
  listeners:
  - {name: a, port: 53, protocol: UDP}
  - {name: b, port: 53, protocol: UDP} #<-
"#,
        "spec.listeners[1].hostname",
        "conflicting listeners on port 53: hostname `<any>` is used twice",
    );
}

#[test]
fn explicit_nulls_are_absent_fields() {
    let c = run(r#"apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: p, namespace: default}
spec:
  podSelector: {matchLabels: null, matchExpressions: null}
  ingress:
  - from:
    - podSelector: {matchLabels: null}
      namespaceSelector: null
    ports: null
  egress: null
"#);
    let errors: Vec<String> = diagnostics(&c)
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
}

#[test]
fn ip_block_except_must_be_a_strict_subset() {
    error(
        r#"apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: p, namespace: default}
spec:
  podSelector: {}
  ingress:
  - from:
    - ipBlock:
        cidr: 10.0.0.0/8
        except:
        - 10.0.0.0/8 #<-
"#,
        "spec.ingress[0].from[0].ipBlock.except[0]",
        "strict subset",
    );
}

#[test]
fn maglev_table_size_is_below_5000011() {
    error(
        r#"apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: d, namespace: default}
spec:
  host: svc
  trafficPolicy:
    loadBalancer:
      consistentHash:
        maglev:
          tableSize: 5000011 #<-
"#,
        "tableSize",
        "less than 5000011",
    );
}

#[test]
fn backends_without_ready_endpoints_are_warned_about() {
    warning(
        r#"apiVersion: v1
kind: Service
metadata: {name: empty, namespace: default}
spec: {selector: {app: nothing}, ports: [{port: 80}]}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: v, namespace: default}
spec: #<-
  hosts: ["*"]
  gateways: [igw]
  tcp:
  - route:
    - {destination: {host: svc}, weight: 1}
    - {destination: {host: empty}, weight: 1}
"#,
        "spec",
        "has no ready endpoints; its share of connections is rejected",
    );
}

#[test]
fn mesh_only_virtual_services_are_warned_about() {
    warning(
        r#"apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: v, namespace: default}
spec:
  hosts: [svc]
  gateways: [mesh] #<-
  tcp:
  - route: [{destination: {host: svc}}]
"#,
        "spec.gateways",
        "binds no gateway",
    );
}
