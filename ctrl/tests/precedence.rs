//! Precedence: where routes or VirtualServices compete for a hostname on a listener, the
//! oldest `creationTimestamp` wins, then `namespace/name` alphabetically; objects without
//! a timestamp come after those with one (Gateway API and Istio). The same configuration
//! in every file order gives the same tables.

use sluice_ctrl::compile::{build, Built};
use sluice_ctrl::load::{load_str, Loaded};

const GATEWAY: &str = r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: g, namespace: default}
spec:
  gatewayClassName: sluice
  addresses: [{value: 10.77.0.11}]
  listeners:
  - {name: tls, port: 443, protocol: TLS, tls: {mode: Passthrough}}
---
apiVersion: v1
kind: Service
metadata: {name: a, namespace: default}
spec: {selector: {app: a}, ports: [{port: 443}]}
---
apiVersion: v1
kind: Service
metadata: {name: b, namespace: default}
spec: {selector: {app: b}, ports: [{port: 443}]}
---
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: default, labels: {app: a}}
status: {podIP: 10.0.0.1}
---
apiVersion: v1
kind: Pod
metadata: {name: b, namespace: default, labels: {app: b}}
status: {podIP: 10.0.0.2}
"#;

/// A TLSRoute for `shop.example.com` to Service `svc`, created at `ts` (if any).
fn route(name: &str, ts: Option<&str>, svc: &str) -> String {
    let ts = ts
        .map(|t| format!(", creationTimestamp: \"{t}\""))
        .unwrap_or_default();
    format!(
        r#"apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {{name: {name}, namespace: default{ts}}}
spec:
  parentRefs: [{{name: g}}]
  hostnames: [shop.example.com]
  rules: [{{backendRefs: [{{name: {svc}, port: 443}}]}}]
"#
    )
}

/// Builds the documents as files in the given order.
fn build_files(files: &[String]) -> Built {
    let mut loaded = Loaded::default();
    for (i, f) in files.iter().enumerate() {
        load_str(&format!("f{i}.yaml"), f, &mut loaded);
    }
    build(loaded).unwrap_or_else(|d| panic!("{:#?}", d.error_lines()))
}

/// The route serving shop.example.com.
fn winner(b: &Built) -> String {
    let l = &b.ir.listeners[0];
    let bind = l
        .bindings
        .iter()
        .find(|x| x.host == "shop.example.com")
        .expect("bound");
    b.ir.routes[bind.route].name.clone()
}

/// Every permutation of `v`.
fn permutations(v: &[String]) -> Vec<Vec<String>> {
    if v.len() <= 1 {
        return vec![v.to_vec()];
    }
    let mut out = Vec::new();
    for i in 0..v.len() {
        let mut rest = v.to_vec();
        let x = rest.remove(i);
        for mut p in permutations(&rest) {
            p.insert(0, x.clone());
            out.push(p);
        }
    }
    out
}

#[test]
fn the_oldest_route_wins_in_every_file_order() {
    let files = vec![
        GATEWAY.to_string(),
        route("zeta", Some("2024-01-01T00:00:00Z"), "a"),
        route("alpha", Some("2024-06-01T00:00:00Z"), "b"),
        route("aaa-untimed", None, "b"),
    ];
    let mut tables = None;
    for p in permutations(&files) {
        let b = build_files(&p);
        assert_eq!(winner(&b), "TLSRoute default/zeta", "order {p:?}");
        // The losers are named, with the rule.
        let mut lost: Vec<String> = b
            .warnings()
            .filter(|d| d.message.contains("already taken by TLSRoute default/zeta"))
            .map(|d| d.object.clone().unwrap_or_default())
            .collect();
        lost.sort();
        assert_eq!(
            lost,
            ["TLSRoute default/aaa-untimed", "TLSRoute default/alpha"]
        );
        let t = b.tables_json(None).expect("tables");
        match &tables {
            None => tables = Some(t),
            Some(first) => assert_eq!(first, &t, "the same tables in every order"),
        }
    }
}

#[test]
fn equal_timestamps_fall_back_to_namespace_and_name() {
    let ts = Some("2024-01-01T00:00:00Z");
    for (x, y) in [("a-first", "b-second"), ("b-second", "a-first")] {
        let b = build_files(&[
            GATEWAY.to_string(),
            route(x, ts, if x == "a-first" { "a" } else { "b" }),
            route(y, ts, if y == "a-first" { "a" } else { "b" }),
        ]);
        assert_eq!(winner(&b), "TLSRoute default/a-first");
    }
    // Without any timestamp: by name alone.
    let b = build_files(&[
        GATEWAY.to_string(),
        route("m", None, "a"),
        route("c", None, "b"),
    ]);
    assert_eq!(winner(&b), "TLSRoute default/c");
}

#[test]
fn an_unparsable_timestamp_is_an_error() {
    let mut loaded = Loaded::default();
    load_str(
        "f.yaml",
        &format!("{GATEWAY}---\n{}", route("r", Some("yesterday"), "a")),
        &mut loaded,
    );
    let e = build(loaded).expect_err("rejected");
    assert!(
        e.error_lines()
            .iter()
            .any(|l| l.contains("metadata.creationTimestamp") && l.contains("RFC 3339")),
        "{:?}",
        e.error_lines()
    );
}

/// Istio: two VirtualServices for one host on one server; the older binds it in every
/// file order, and the other is warned about, naming the winner.
#[test]
fn the_oldest_virtual_service_takes_a_host() {
    let gw = r#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: ig, namespace: default}
spec:
  servers:
  - port: {number: 443, name: tls, protocol: TLS}
    bind: 10.77.0.13
    hosts: ["*.example.com"]
    tls: {mode: PASSTHROUGH}
"#
    .to_string();
    let vs = |name: &str, ts: &str, svc: &str| {
        format!(
            r#"apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: {name}, namespace: default, creationTimestamp: "{ts}"}}
spec:
  hosts: [shop.example.com]
  gateways: [ig]
  tls:
  - match: [{{sniHosts: [shop.example.com]}}]
    route: [{{destination: {{host: {svc}}}}}]
"#
        )
    };
    let files = vec![
        gw,
        GATEWAY.to_string(),
        vs("young", "2025-01-01T00:00:00Z", "a"),
        vs("old", "2023-01-01T00:00:00Z", "b"),
    ];
    for p in permutations(&files) {
        let b = build_files(&p);
        let l =
            b.ir.listeners
                .iter()
                .find(|l| l.port == 443 && l.name.contains("ig"))
                .expect("server");
        let bind = l
            .bindings
            .iter()
            .find(|x| x.host == "shop.example.com")
            .expect("bound");
        assert_eq!(
            b.ir.routes[bind.route].name,
            "VirtualService default/old tls[0]"
        );
        let lost: Vec<&str> = b
            .warnings()
            .filter(|d| {
                d.message
                    .contains("already bound by VirtualService default/old")
            })
            .filter_map(|d| d.object.as_deref())
            .collect();
        assert_eq!(lost, ["VirtualService default/young"]);
    }
}

/// `sluice explain` names the route that serves a name and the ones that lost it.
#[test]
fn explain_shows_the_winner_and_the_losers() {
    let dir = std::env::temp_dir().join(format!("sluice-prec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let files = [
        GATEWAY.to_string(),
        route("zeta", Some("2024-01-01T00:00:00Z"), "a"),
        route("alpha", Some("2024-06-01T00:00:00Z"), "b"),
    ];
    for (i, f) in files.iter().enumerate() {
        std::fs::write(dir.join(format!("{i}.yaml")), f).expect("write");
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["explain", "-c"])
        .arg(&dir)
        .args([
            "--src",
            "198.51.100.1:40000",
            "--dst",
            "10.77.0.11:443",
            "--sni",
            "shop.example.com",
        ])
        .output()
        .expect("sluice");
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["route"], "TLSRoute default/zeta");
    assert_eq!(
        v["precedence_losers"],
        serde_json::json!(["TLSRoute default/alpha"])
    );
}
