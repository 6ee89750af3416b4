//! `sluice explain` and `sluice check` on NetworkPolicy, as a user runs them: the
//! policy object names the policy and rule that allowed each direction, or the direction
//! that denied; routed traffic to or from a workload is forwarded or dropped by policy;
//! a connection through a listener is checked client -> the Maglev-picked backend.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("run sluice")
}

fn netpol() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../configs/netpol")
        .display()
        .to_string()
}

fn explain(cfg: &str, proto: &str, src: &str, dst: &str) -> Value {
    let out = sluice(&[
        "explain", "-c", cfg, "--proto", proto, "--src", src, "--dst", dst,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn temp_file(name: &str, contents: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-policy-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let p = dir.join(name);
    std::fs::write(&p, contents).expect("write");
    p
}

#[test]
fn explain_names_the_allowing_policy_and_rule() {
    let v = explain(&netpol(), "tcp", "10.244.0.11:40000", "10.244.0.10:6379");
    assert_eq!(v["verdict"], "forward", "{v:#}");
    let p = &v["policy"];
    assert_eq!(p["verdict"], "allow");
    assert_eq!(p["ingress"]["policy"], "default/test-network-policy");
    assert_eq!(p["ingress"]["rule"], "ingress[0]");
    assert_eq!(p["ingress"]["outcome"], "allowed");
    assert_eq!(p["egress"]["outcome"], "not-isolated");
    assert!(p["reason"]
        .as_str()
        .is_some_and(|r| r.contains("allowed by default/test-network-policy ingress[0]")));
}

#[test]
fn explain_names_the_denying_direction() {
    // default/frontend-0 -> prod/web-0: web-0 is isolated and takes only the frontend
    // namespace (and the Ligato policy's sources).
    let v = explain(&netpol(), "tcp", "10.244.0.11:40000", "10.244.0.20:8080");
    assert_eq!(v["verdict"], "drop", "{v:#}");
    let p = &v["policy"];
    assert_eq!(p["verdict"], "deny");
    assert_eq!(p["ingress"]["outcome"], "denied");
    assert_eq!(p["ingress"]["deny_reason"], "no-rule-for-peer");
    let by = p["ingress"]["selected_by"].as_array().expect("list");
    assert!(by.iter().any(|x| x == "prod/web-from-frontends"), "{by:?}");
    assert!(p["reason"]
        .as_str()
        .is_some_and(|r| r.starts_with("denied at ingress of pod prod/web-0")));
    // Egress denial: redis may only reach 10.0.0.0/24 on TCP 5978.
    let v = explain(&netpol(), "udp", "10.244.0.10:5000", "8.8.8.8:53");
    assert_eq!(v["verdict"], "drop", "{v:#}");
    assert_eq!(v["policy"]["egress"]["outcome"], "denied");
    assert_eq!(v["policy"]["egress"]["deny_reason"], "port-not-allowed");
}

#[test]
fn explain_handles_external_addresses() {
    let v = explain(&netpol(), "tcp", "172.17.0.5:1000", "10.244.0.10:6379");
    assert_eq!(v["verdict"], "forward", "{v:#}");
    assert_eq!(v["policy"]["ingress"]["rule"], "ingress[0]");
    assert_eq!(v["policy"]["egress"]["outcome"], "not-isolated");
    let v = explain(&netpol(), "tcp", "172.17.1.5:1000", "10.244.0.10:6379");
    assert_eq!(v["verdict"], "drop", "{v:#}");
    let v = explain(&netpol(), "tcp", "10.244.0.10:1000", "10.0.0.7:5978");
    assert_eq!(v["verdict"], "forward", "{v:#}");
    assert_eq!(
        v["policy"]["egress"]["policy"],
        "default/test-network-policy"
    );
    assert_eq!(v["policy"]["egress"]["rule"], "egress[0]");
    // Neither end a workload: no listener, nothing to route to.
    let v = explain(&netpol(), "tcp", "198.51.100.1:1000", "203.0.113.1:80");
    assert_eq!(v["verdict"], "drop", "{v:#}");
    assert_eq!(v["policy"]["verdict"], "allow");
}

const GATEWAY: &str = r#"
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw, namespace: edge}
spec:
  servers:
  - port: {number: 5432, name: tcp-pg, protocol: TCP}
    bind: 10.77.0.10
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: pg, namespace: edge}
spec:
  hosts: ["*"]
  gateways: [gw]
  tcp:
  - route:
    - destination: {host: pg.db.svc.cluster.local, port: {number: 5432}}
---
apiVersion: v1
kind: Service
metadata: {name: pg, namespace: db}
spec: {selector: {app: pg}, ports: [{name: tcp-pg, port: 5432}]}
---
apiVersion: v1
kind: Pod
metadata: {name: pg-0, namespace: db, labels: {app: pg}}
spec: {containers: [{name: pg, ports: [{name: pg, containerPort: 5432}]}]}
status: {podIP: 10.9.0.5}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: pg-from-office, namespace: db}
spec:
  podSelector: {matchLabels: {app: pg}}
  ingress:
  - from: [{ipBlock: {cidr: 198.51.100.0/24}}]
    ports: [{port: pg}]
"#;

#[test]
fn explain_checks_client_to_picked_backend() {
    let cfg = temp_file("gw.yaml", GATEWAY).display().to_string();
    let v = explain(&cfg, "tcp", "198.51.100.7:40000", "10.77.0.10:5432");
    assert_eq!(v["backend"], "10.9.0.5:5432", "{v:#}");
    assert_eq!(v["verdict"], "forward", "{v:#}");
    assert_eq!(v["policy"]["ingress"]["policy"], "db/pg-from-office");
    let v = explain(&cfg, "tcp", "203.0.113.7:40000", "10.77.0.10:5432");
    assert_eq!(v["backend"], "10.9.0.5:5432", "{v:#}");
    assert_eq!(v["verdict"], "drop", "{v:#}");
    assert_eq!(v["policy"]["verdict"], "deny");
    assert!(v["reason"]
        .as_str()
        .is_some_and(|r| r.contains("dropped by NetworkPolicy")));
}

#[test]
fn check_summarises_policy_tables_and_rejects_over_caps() {
    let out = sluice(&["check", "-c", &netpol()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("policy: ") && stdout.contains("identities"),
        "{stdout}"
    );
    let limits = temp_file(
        "limits.yaml",
        "apiVersion: sluice.dev/v1alpha1\nkind: Appliance\nmetadata: {name: a}\nspec:\n  limits: {prefixes: 4}\n",
    );
    let out = sluice(&[
        "check",
        "-c",
        &netpol(),
        "-c",
        &limits.display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("spec.limits.prefixes") && stderr.contains("over the cap by"),
        "{stderr}"
    );
}
