//! The `sluice` binary as a user runs it: exit codes, error format, explain's JSON.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("run sluice")
}

fn configs(rel: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../configs")
        .join(rel)
        .display()
        .to_string()
}

fn temp_file(name: &str, contents: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let p = dir.join(name);
    std::fs::write(&p, contents).expect("write");
    p
}

fn explain(args: &[&str]) -> Value {
    let out = sluice(&[&["explain"], args].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[test]
fn check_configs_succeeds_with_a_summary() {
    let out = sluice(&["check", "-c", &configs("demo")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("configuration OK"), "{stdout}");
    assert!(stdout.contains("listeners:"), "{stdout}");
    assert!(stdout.contains("Appliance 1"), "{stdout}");
}

/// The samples hold what sluice cannot serve (bookinfo's SIMPLE server whose certificate
/// files, /etc/certs/..., this machine does not have; its match by cookie header is
/// served since HTTP routing is per request):
/// `check` serves the rest, names each one with its field, and exits 1;
/// `--output json` gives the same as records.
#[test]
fn check_configs_names_what_is_not_served_and_exits_1() {
    let out = sluice(&["check", "-c", &configs("")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stdout.contains("configuration served in part"), "{stdout}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("not served"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(!stderr.contains("bookinfo-rule"), "{stderr}");
    assert!(
        stderr.contains("not served (InvalidCertificateRef): ")
            && stderr.contains(
                "spec.servers[1].tls.serverCertificate: cannot read /etc/certs/servercert.pem"
            ),
        "{stderr}"
    );
    let json = sluice(&["check", "-c", &configs(""), "--output", "json"]);
    assert_eq!(json.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(v["ok"], false);
    assert_eq!(v["not_served"], 1);
    let d = v["diagnostics"]
        .as_array()
        .expect("list")
        .iter()
        .find(|d| d["severity"] == "not-served")
        .expect("the gateway server");
    assert_eq!(d["field"], "spec.servers[1].tls.serverCertificate");
    assert!(d["file"].as_str().expect("file").ends_with("gateway.yaml"));
}

#[test]
fn check_reports_every_error_located_and_exits_1() {
    let bad = temp_file(
        "bad.yaml",
        b"apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {name: g, namespace: ns}\nspec:\n  servers:\n  - port: {number: 70000, name: p, protocol: TCPX}\n    hosts: [\"*\"]\n",
    );
    let out = sluice(&["check", "-c", &bad.display().to_string()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let file = bad.display().to_string();
    assert!(
        stderr.contains(&format!(
            "{file}:6:12: Gateway.networking.istio.io ns/g: spec.servers[0].port.number: port 70000 is out of range"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("spec.servers[0].port.protocol: unknown protocol `TCPX`"),
        "{stderr}"
    );
    assert!(stderr.contains("2 error(s)"), "{stderr}");
}

#[test]
fn check_reads_stdin() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["check", "-c", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n")
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("Namespace 1"));
}

#[test]
fn missing_file_is_an_error_not_a_panic() {
    let out = sluice(&["check", "-c", "/nonexistent/sluice.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/nonexistent/sluice.yaml:1:1: cannot read")
    );
}

#[test]
fn explain_tcp_route_lists_weighted_backends() {
    let v = explain(&[
        "-c",
        &configs("demo"),
        "--proto",
        "tcp",
        "--src",
        "10.77.0.1:40000",
        "--dst",
        "10.77.0.10:7000",
    ]);
    for key in [
        "verdict", "listener", "route", "backend", "policy", "inspect", "reason",
    ] {
        assert!(v.get(key).is_some(), "missing {key}: {v}");
    }
    assert_eq!(v["verdict"], "forward");
    assert_eq!(v["route"], "TCPRoute demo/echo");
    let backend = v["backend"].as_str().expect("a backend");
    assert!(
        ["10.78.0.11:7000", "10.78.0.12:7000"].contains(&backend),
        "{v}"
    );
    assert_eq!(v["backends"][0]["share"], 0.75);
    assert_eq!(v["backends"][1]["endpoints"][0], "10.78.0.12:7000");
}

#[test]
fn explain_udp_route_names_the_route_and_backend() {
    let args = |proto: &'static str, port: u16| {
        explain(&[
            "-c",
            &configs("gateway-api"),
            "--proto",
            proto,
            "--src",
            &format!("198.51.100.9:{port}"),
            "--dst",
            "10.77.0.30:53",
        ])
    };
    let mut seen = std::collections::BTreeSet::new();
    for port in 40000..40040 {
        let v = args("udp", port);
        assert_eq!(v["verdict"], "forward", "{v}");
        assert_eq!(v["connection"]["proto"], "udp", "{v}");
        assert_eq!(v["listener"]["protocol"], "udp", "{v}");
        assert_eq!(v["route"], "UDPRoute dns/dns", "{v}");
        assert_eq!(v["backends"][0]["share"], 0.9, "{v}");
        assert_eq!(v["backends"][1]["name"], "resolvers/unbound:53", "{v}");
        let backend = v["backend"].as_str().expect("a backend").to_string();
        assert!(
            ["10.93.0.2:5353", "10.93.0.3:5353", "10.94.0.2:53"].contains(&backend.as_str()),
            "{v}"
        );
        seen.insert(backend);
    }
    assert!(seen.len() >= 2, "flows spread over the backends: {seen:?}");
    // The same address and port over TCP: the Gateway has no TCP listener on 53.
    let v = args("tcp", 40000);
    assert_eq!(v["verdict"], "drop", "{v}");
    assert_eq!(v["listener"], Value::Null, "{v}");
}

#[test]
fn explain_sni_picks_the_route_and_rejects_unknown_names() {
    let base = [
        "-c",
        &configs("demo"),
        "--src",
        "10.77.0.1:40000",
        "--dst",
        "10.77.0.10:8443",
    ];
    let v = explain(&[&base[..], &["--sni", "Beta.Demo.Sluice.Dev"]].concat());
    assert_eq!(v["route"], "TLSRoute demo/beta");
    assert_eq!(v["backends"][0]["endpoints"][0], "10.78.0.22:8443");
    let v = explain(&[&base[..], &["--sni", "gamma.demo.sluice.dev"]].concat());
    assert_eq!(v["verdict"], "reject");
    assert_eq!(v["route"], Value::Null);
    let v = explain(&base);
    assert_eq!(v["verdict"], "reject", "no SNI and no catch-all");
}

#[test]
fn explain_parses_a_payload_file() {
    let req = temp_file(
        "req.http",
        b"GET /api/v1 HTTP/1.1\r\nHost: WWW.demo.sluice.dev:8080\r\nUser-Agent: t\r\n\r\n",
    );
    let v = explain(&[
        "-c",
        &configs("demo"),
        "--src",
        "10.77.0.1:40000",
        "--dst",
        "10.77.0.10:8080",
        "--payload-file",
        &req.display().to_string(),
    ]);
    assert_eq!(v["inspect"]["result"], "http");
    assert_eq!(v["inspect"]["http_host"], "www.demo.sluice.dev");
    assert_eq!(v["route"], "VirtualService demo/web http");
    assert_eq!(v["backends"][0]["name"], "demo/echo-a:7000", "{v}");
    let junk = temp_file("junk.bin", b"\x00\x01\x02SSH-2.0\r\n");
    let v = explain(&[
        "-c",
        &configs("demo"),
        "--src",
        "10.77.0.1:40000",
        "--dst",
        "10.77.0.10:8443",
        "--payload-file",
        &junk.display().to_string(),
    ]);
    assert_eq!(v["inspect"]["result"], "not-tls");
    assert_eq!(v["verdict"], "reject");
}

#[test]
fn explain_without_listener_drops() {
    let v = explain(&[
        "-c",
        &configs("demo"),
        "--proto",
        "udp",
        "--src",
        "10.77.0.1:40000",
        "--dst",
        "10.77.0.10:7000",
    ]);
    assert_eq!(v["verdict"], "drop");
    assert_eq!(v["listener"], Value::Null);
}

#[test]
fn tables_dump_and_route_filter() {
    let out = sluice(&[
        "tables",
        "-c",
        &configs("gateway-api"),
        "--route",
        "TCPRoute data/postgres",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let slots = v.as_array().expect("a list of slots");
    assert_eq!(slots.len(), 65537);
    let count = |s: &str| slots.iter().filter(|x| *x == s).count() as f64 / 65537.0;
    assert!((count("10.91.0.5:5432") - 0.70).abs() < 0.002);
    assert!((count("10.91.0.6:5432") - 0.15).abs() < 0.002);
    assert!((count("10.91.0.7:5432") - 0.15).abs() < 0.002);
    assert_eq!(
        count("reject"),
        0.0,
        "the weight-0 canary gets nothing, rejects nothing"
    );
    let out = sluice(&["tables", "-c", &configs("gateway-api"), "--route", "nope"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn every_command_has_help() {
    for cmd in [
        &["--help"][..],
        &["check", "--help"],
        &["explain", "--help"],
        &["tables", "--help"],
    ] {
        let out = sluice(cmd);
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stdout).contains("Usage"));
    }
}

#[test]
fn explain_backend_is_the_maglev_slot_of_the_flow_hash() {
    let out = sluice(&[
        "tables",
        "-c",
        &configs("demo"),
        "--route",
        "TCPRoute demo/echo",
    ]);
    assert!(out.status.success());
    let table: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let table = table.as_array().expect("slots");
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    for port in 40000..40064u16 {
        let src = format!("10.77.0.1:{port}");
        let v = explain(&[
            "-c",
            &configs("demo"),
            "--src",
            &src,
            "--dst",
            "10.77.0.10:7000",
        ]);
        let hash = sluice_dataplane::tables::maglev::flow_hash(
            src.parse().expect("src"),
            "10.77.0.10:7000".parse().expect("dst"),
            6,
        );
        let slot = &table[(hash % table.len() as u64) as usize];
        assert_eq!(&v["backend"], slot, "{v}");
        *seen
            .entry(slot.as_str().unwrap_or("").to_string())
            .or_default() += 1;
    }
    assert_eq!(seen.len(), 2, "both backends are used: {seen:?}");
}

#[test]
fn explain_rejects_the_share_of_an_invalid_backend() {
    // pg-canary has weight 0: never picked. Make a route with an invalid backend of
    // weight 80 next to a valid one of weight 20: about 80% of flows are rejected.
    let cfg = temp_file(
        "reject.yaml",
        br#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: g, namespace: default}
spec:
  gatewayClassName: sluice
  addresses: [{value: 10.77.0.11}]
  listeners: [{name: t, port: 9000, protocol: TCP}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: r, namespace: default}
spec:
  parentRefs: [{name: g}]
  rules:
  - backendRefs:
    - {name: ok, port: 9000, weight: 20}
    - {name: ghost, port: 9000, weight: 80}
---
apiVersion: v1
kind: Service
metadata: {name: ok, namespace: default}
spec: {selector: {app: ok}, ports: [{port: 9000}]}
---
apiVersion: v1
kind: Pod
metadata: {name: ok-0, namespace: default, labels: {app: ok}}
status: {podIP: 10.0.0.9}
"#,
    );
    let cfg = cfg.display().to_string();
    let mut rejected = 0;
    for port in 30000..30200u16 {
        let v = explain(&[
            "-c",
            &cfg,
            "--src",
            &format!("198.51.100.1:{port}"),
            "--dst",
            "10.77.0.11:9000",
        ]);
        match v["verdict"].as_str() {
            Some("reject") => {
                rejected += 1;
                assert_eq!(v["backend"], Value::Null);
            }
            Some("forward") => assert_eq!(v["backend"], "10.0.0.9:9000"),
            other => panic!("{other:?}: {v}"),
        }
    }
    let share = f64::from(rejected) / 200.0;
    assert!((0.7..=0.9).contains(&share), "rejected share {share}");
}

#[test]
fn auto_passthrough_routes_by_the_destination_in_the_sni() {
    let cfg = temp_file(
        "auto.yaml",
        br#"apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: east-west, namespace: istio-system}
spec:
  servers:
  - port: {number: 15443, name: tls, protocol: TLS}
    bind: 10.77.0.50
    hosts: ["*.local"]
    tls: {mode: AUTO_PASSTHROUGH}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: reviews, namespace: bookinfo}
spec:
  host: reviews
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
---
apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: bookinfo}
spec: {selector: {app: reviews}, ports: [{name: http, port: 9080}]}
---
apiVersion: v1
kind: Pod
metadata: {name: reviews-v1, namespace: bookinfo, labels: {app: reviews, version: v1}}
status: {podIP: 10.0.1.1}
---
apiVersion: v1
kind: Pod
metadata: {name: reviews-v2, namespace: bookinfo, labels: {app: reviews, version: v2}}
status: {podIP: 10.0.1.2}
"#,
    );
    let cfg = cfg.display().to_string();
    let go = |sni: &str| {
        explain(&[
            "-c",
            &cfg,
            "--src",
            "198.51.100.1:1234",
            "--dst",
            "10.77.0.50:15443",
            "--sni",
            sni,
        ])
    };
    let v = go("outbound_.9080_.v2_.reviews.bookinfo.svc.cluster.local");
    assert_eq!(v["verdict"], "forward", "{v}");
    assert_eq!(v["backend"], "10.0.1.2:9080");
    let v = go("outbound_.9080_._.reviews.bookinfo.svc.cluster.local");
    assert!(
        ["10.0.1.1:9080", "10.0.1.2:9080"].contains(&v["backend"].as_str().unwrap_or("")),
        "{v}"
    );
    let v = go("outbound_.9090_.v1_.reviews.bookinfo.svc.cluster.local");
    assert_eq!(v["verdict"], "reject");
    assert!(
        v["reason"]
            .as_str()
            .unwrap_or("")
            .contains("port 9090 subset v1"),
        "{v}"
    );
}

#[test]
fn a_closed_pipe_is_not_a_panic() {
    use std::io::Read;
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["tables", "-c", &configs("")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut first = [0u8; 1];
    child
        .stdout
        .take()
        .expect("stdout")
        .read_exact(&mut first)
        .expect("some output");
    // the reader is gone now (stdout dropped): the rest of the output hits a closed pipe
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.status.success(), "{:?} {stderr}", out.status);
}
