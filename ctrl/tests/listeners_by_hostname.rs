//! Listeners that share a port and protocol, told apart by hostname (Gateway API Core; the
//! usual passthrough Gateway), and Istio servers on one port told apart by `hosts`: the
//! name selects the listener first (exact hostname, then the longest wildcard suffix,
//! then the listener without hostname), then that listener's routes. The built tables
//! are checked against a two-step oracle written from the spec, name by name.

use std::process::Command;

use serde_json::Value;
use sluice_ctrl::compile::hostname::pattern_matches;
use sluice_ctrl::compile::{build, Built};
use sluice_ctrl::load::{load_str, Loaded};
use sluice_dataplane::tables::listeners::proto;

const CONFIG: &str = r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: g, namespace: default}
spec:
  gatewayClassName: sluice
  addresses: [{value: 10.77.0.11}]
  listeners:
  - {name: exact, port: 443, protocol: TLS, hostname: foo.example.com, tls: {mode: Passthrough}}
  - {name: wild, port: 443, protocol: TLS, hostname: "*.example.com", tls: {mode: Passthrough}}
  - {name: bwild, port: 443, protocol: TLS, hostname: "*.b.example.com", tls: {mode: Passthrough}}
  - {name: any, port: 443, protocol: TLS, tls: {mode: Passthrough}}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {name: r-exact, namespace: default}
spec:
  parentRefs: [{name: g, sectionName: exact}]
  rules: [{backendRefs: [{name: svc, port: 443}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {name: r-wild, namespace: default}
spec:
  parentRefs: [{name: g, sectionName: wild}]
  rules: [{backendRefs: [{name: svc, port: 443}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {name: r-bwild, namespace: default}
spec:
  parentRefs: [{name: g, sectionName: bwild}]
  hostnames: [x.b.example.com]
  rules: [{backendRefs: [{name: svc, port: 443}]}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {name: r-any, namespace: default}
spec:
  parentRefs: [{name: g, sectionName: any}]
  hostnames: [a.b.example.com, other.org, "*.example.com", foo.example.com]
  rules: [{backendRefs: [{name: svc, port: 443}]}]
---
apiVersion: v1
kind: Service
metadata: {name: svc, namespace: default}
spec: {selector: {app: a}, ports: [{port: 443}]}
---
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: default, labels: {app: a}}
status: {podIP: 10.0.0.1}
"#;

fn built(text: &str) -> Built {
    let mut loaded = Loaded::default();
    load_str("l.yaml", text, &mut loaded);
    build(loaded).unwrap_or_else(|d| panic!("{:#?}", d.error_lines()))
}

/// The spec's two steps: the listener whose hostname matches most specifically (none:
/// the one without hostname), then among its routes' hostnames (narrowed to the
/// listener's) the most specific match.
/// A listener for the oracle: its name, hostname, and its routes with their hostnames.
type OracleListener<'a> = (&'a str, Option<&'a str>, &'a [(&'a str, &'a [&'a str])]);

fn oracle(listeners: &[OracleListener], name: &str) -> Option<String> {
    let rank = |p: &str| match p {
        "*" => (2, 0),
        p if p.starts_with('*') => (1, usize::MAX - p.len()),
        p => (0, usize::MAX - p.len()),
    };
    let chosen = listeners
        .iter()
        .filter(|(_, h, _)| h.is_some_and(|h| pattern_matches(h, name)))
        .min_by_key(|(_, h, _)| rank(h.unwrap_or("*")))
        .or_else(|| listeners.iter().find(|(_, h, _)| h.is_none()))?;
    let (_, lh, routes) = chosen;
    routes
        .iter()
        .flat_map(|(r, hosts)| {
            let hosts: Vec<&str> = if hosts.is_empty() {
                vec![lh.unwrap_or("*")]
            } else {
                hosts.to_vec()
            };
            hosts.into_iter().map(move |h| (h, *r))
        })
        // A route hostname serves on this listener only inside the listener's hostname.
        .filter(|(h, _)| {
            lh.is_none_or(|l| h == &l || pattern_matches(l, h.trim_start_matches("*.")))
        })
        .filter(|(h, _)| pattern_matches(h, name))
        .min_by_key(|(h, _)| rank(h))
        .map(|(_, r)| format!("TLSRoute default/{r}"))
}

#[test]
fn the_name_selects_the_listener_then_its_route() {
    let b = built(CONFIG);
    assert_eq!(b.not_served().count(), 0);
    let listeners: &[OracleListener] = &[
        ("exact", Some("foo.example.com"), &[("r-exact", &[])]),
        ("wild", Some("*.example.com"), &[("r-wild", &[])]),
        (
            "bwild",
            Some("*.b.example.com"),
            &[("r-bwild", &["x.b.example.com"])],
        ),
        (
            "any",
            None,
            &[(
                "r-any",
                &[
                    "a.b.example.com",
                    "other.org",
                    "*.example.com",
                    "foo.example.com",
                ],
            )],
        ),
    ];
    let entry = b
        .snapshot
        .listeners
        .lookup("10.77.0.11".parse().expect("ip"), 443, proto::TCP)
        .expect("one listener for the four");
    let names = [
        "foo.example.com",
        "bar.example.com",
        "x.b.example.com",
        "y.b.example.com",
        "a.b.example.com",
        "deep.y.b.example.com",
        "other.org",
        "nothing.net",
        "example.com",
        "FOO.Example.com",
    ];
    for n in names {
        let want = oracle(listeners, &n.to_ascii_lowercase());
        let got = entry
            .route(n.as_bytes())
            .and_then(|i| b.snapshot.listeners.route(i))
            .map(|r| r.name.to_string());
        assert_eq!(got, want, "{n}");
    }
    // Spot checks of the oracle itself: the listener first, its routes second.
    assert_eq!(
        oracle(listeners, "a.b.example.com"),
        None,
        "bwild claims it"
    );
    assert_eq!(
        oracle(listeners, "foo.example.com").as_deref(),
        Some("TLSRoute default/r-exact")
    );
    assert_eq!(
        oracle(listeners, "other.org").as_deref(),
        Some("TLSRoute default/r-any")
    );
    // Every listener is Accepted and has its route.
    let status = b.status_json();
    let gw = &status.as_array().expect("list")[0];
    let attached: Vec<u64> = gw["status"]["listeners"]
        .as_array()
        .expect("listeners")
        .iter()
        .map(|l| l["attachedRoutes"].as_u64().unwrap_or(99))
        .collect();
    assert_eq!(attached, [1, 1, 1, 1]);
}

#[test]
fn the_same_hostname_twice_leaves_the_later_listener_out() {
    let text = CONFIG.replace(
        "  - {name: any, port: 443, protocol: TLS, tls: {mode: Passthrough}}",
        "  - {name: any, port: 443, protocol: TLS, tls: {mode: Passthrough}}\n  - {name: again, port: 443, protocol: TLS, hostname: foo.example.com, tls: {mode: Passthrough}}",
    );
    let b = built(&text);
    let d: Vec<String> = b.not_served().map(ToString::to_string).collect();
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(
        d[0].contains("not served (HostnameConflict)")
            && d[0].contains("spec.listeners[4].hostname"),
        "{d:?}"
    );
}

/// Two Istio TLS servers on one port, told apart by hosts.
#[test]
fn istio_servers_on_one_port_by_hosts() {
    let b = built(
        r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: ig, namespace: default}
spec:
  servers:
  - port: {number: 443, name: a, protocol: TLS}
    bind: 10.77.0.12
    hosts: [a.example.com]
    tls: {mode: PASSTHROUGH}
  - port: {number: 443, name: wild, protocol: TLS}
    bind: 10.77.0.12
    hosts: ["*.example.com"]
    tls: {mode: PASSTHROUGH}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: vs, namespace: default}
spec:
  hosts: ["*.example.com"]
  gateways: [ig]
  tls:
  - match: [{port: 443, sniHosts: [a.example.com]}]
    route: [{destination: {host: svc}}]
  - match: [{port: 443, sniHosts: ["*.example.com"]}]
    route: [{destination: {host: svc}}]
---
apiVersion: v1
kind: Service
metadata: {name: svc, namespace: default}
spec: {selector: {app: a}, ports: [{port: 443}]}
"#,
    );
    assert_eq!(b.not_served().count(), 0);
    let entry = b
        .snapshot
        .listeners
        .lookup("10.77.0.12".parse().expect("ip"), 443, proto::TCP)
        .expect("one listener for both servers");
    let route = |n: &str| {
        entry
            .route(n.as_bytes())
            .and_then(|i| b.snapshot.listeners.route(i))
            .map(|r| r.name.to_string())
    };
    assert_eq!(
        route("a.example.com").as_deref(),
        Some("VirtualService default/vs tls[0]")
    );
    assert_eq!(
        route("z.example.com").as_deref(),
        Some("VirtualService default/vs tls[1]")
    );
    assert_eq!(route("z.example.org"), None);
}

/// `sluice explain` names the listener the SNI selects among those sharing the port.
#[test]
fn explain_names_the_selected_listener() {
    let dir = std::env::temp_dir().join(format!("sluice-lbh-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let f = dir.join("c.yaml");
    std::fs::write(&f, CONFIG).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["explain", "-c"])
        .arg(&f)
        .args([
            "--src",
            "198.51.100.1:40000",
            "--dst",
            "10.77.0.11:443",
            "--sni",
            "bar.example.com",
        ])
        .output()
        .expect("sluice");
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        v["listener_selected"],
        "Gateway default/g listeners[1] (wild)"
    );
    assert_eq!(v["route"], "TLSRoute default/r-wild");
}
