//! Gateway addresses served without `virtualAddresses` (issue #30, point 5), through
//! `sluice run` on two TAP ports with real clients:
//!
//! ```text
//!  client netns                  sluice run                         backend netns
//!  10.96.0.1/24 ── TAP ── edge 10.96.0.2/24 │ core 10.96.1.2/24 ── TAP ── 10.96.1.11/24
//!                        serves 10.96.0.20 (Gateway API)                  10.96.1.12/24
//!                               10.96.0.21 (Istio bind)            (python HTTP servers)
//! ```
//!
//! The client is on the addresses' own network and has no route through sluice: it
//! reaches them only because sluice answers ARP for them. `curl` through the Gateway API
//! TCP listener and the Istio HTTP server; `sluice ctl status` lists both with their
//! owners. A `ctl reload` adds 10.96.0.22 to the Gateway API Gateway: `curl` reaches it
//! within a second of the reload's answer, without a restart, and a raw socket in the
//! client namespace sees sluice's gratuitous ARPs for it (three, from the edge port's
//! MAC; none for the addresses that were already served). A reload that removes it
//! stops the ARP answers (asked from a raw socket), while 10.96.0.20 still answers.

use serde_json::Value;
use sluice_dataplane::port::mac_from_name;
use sluice_tests::kernel::Py;
use sluice_tests::kernel_tls::{require_programs, HTTP_SERVER};
use sluice_tests::sys::{can_admin_net, must, run, unique_name, ChildGuard, Netns, TempDir};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_sluice-run");
/// ARP through a raw socket (modes in its docstring).
const ARP_PROBE: &str = include_str!("../src/py/arp_probe.py");

const CLIENT: &str = "10.96.0.1";
const GW_A: &str = "10.96.0.20";
const GW_B: &str = "10.96.0.21";
const ADDED: &str = "10.96.0.22";
const BACKEND_A: &str = "10.96.1.11";
const BACKEND_B: &str = "10.96.1.12";

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn appliance(edge: &str, core: &str) -> String {
    format!(
        "apiVersion: sluice.dev/v1alpha1\nkind: Appliance\nmetadata: {{name: s}}\nspec:\n  cores: [0]\n  ports:\n  - {{name: edge, tap: {{name: {edge}}}, addresses: [10.96.0.2/24]}}\n  - {{name: core, tap: {{name: {core}}}, addresses: [10.96.1.2/24]}}\n  limits: {{flowsPerWorker: 4096}}\n"
    )
}

/// Gateway API `web/gw-a` on `addresses` (TCP 8000 to backend a) and Istio `web/gw-b`
/// bound to [`GW_B`] (HTTP 8000 to backend b by Host).
fn gateways(addresses: &[&str]) -> String {
    let addresses: Vec<String> = addresses
        .iter()
        .map(|a| format!("{{type: IPAddress, value: {a}}}"))
        .collect();
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{name: web}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw-a, namespace: web}}
spec:
  gatewayClassName: sluice
  addresses: [{addresses}]
  listeners: [{{name: tcp, port: 8000, protocol: TCP}}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {{name: a, namespace: web}}
spec:
  parentRefs: [{{name: gw-a}}]
  rules: [{{backendRefs: [{{name: a, port: 8000}}]}}]
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: gw-b, namespace: web}}
spec:
  servers:
  - port: {{number: 8000, name: http, protocol: HTTP}}
    bind: {GW_B}
    hosts: ["*"]
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: b, namespace: web}}
spec:
  hosts: [b.example.test]
  gateways: [gw-b]
  http: [{{route: [{{destination: {{host: b, port: {{number: 8000}}}}}}]}}]
---
apiVersion: v1
kind: Service
metadata: {{name: a, namespace: web}}
spec: {{selector: {{app: a}}, ports: [{{port: 8000}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: a-0, namespace: web, labels: {{app: a}}}}
status: {{podIP: {BACKEND_A}}}
---
apiVersion: v1
kind: Service
metadata: {{name: b, namespace: web}}
spec: {{selector: {{app: b}}, ports: [{{port: 8000}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: b-0, namespace: web, labels: {{app: b}}}}
status: {{podIP: {BACKEND_B}}}
"#,
        addresses = addresses.join(", ")
    )
}

/// `sluice run` on a configuration directory, stopped with SIGTERM on drop.
struct Sluice {
    child: ChildGuard,
    socket: PathBuf,
}

impl Sluice {
    fn ctl(&self, args: &[&str]) -> Output {
        sluice_tests::ctl::ctl(BIN, &self.socket, args)
    }

    fn json(&self, args: &[&str]) -> Value {
        sluice_tests::ctl::ctl_json(BIN, &self.socket, args)
    }

    fn announced(&self) -> u64 {
        self.json(&["stats", "--json"])["total"]["events"]["address_announced"]
            .as_u64()
            .unwrap_or(0)
    }

    /// SIGTERM, then stdout (asserting a clean exit).
    fn stop(mut self) -> String {
        must("kill", &["-TERM", &self.child.0.id().to_string()]);
        let t = Instant::now();
        let status = loop {
            if let Some(s) = self.child.0.try_wait().expect("wait") {
                break s;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "sluice did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let (mut out, mut err) = (String::new(), String::new());
        if let Some(mut o) = self.child.0.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        if let Some(mut e) = self.child.0.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        assert!(status.success(), "sluice exited with {status}: {err}");
        out
    }
}

fn link_exists(name: &str) -> bool {
    run("ip", &["link", "show", "dev", name]).status.success()
}

/// `curl` in `ns` with a one-second budget: the body, or `None`.
fn get(ns: &Netns, args: &[&str]) -> Option<String> {
    let mut a = vec!["curl", "-s", "--max-time", "1"];
    a.extend_from_slice(args);
    let o = ns.try_exec(&a);
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
}

/// Who answers ARP for `target` on `dev` in `ns` (asked from a raw socket): a MAC, or
/// "none".
fn arp_ask(ns: &Netns, dev: &str, target: &str) -> String {
    ns.exec(&["python3", "-c", ARP_PROBE, "ask", dev, CLIENT, target, "1"])
        .trim()
        .to_string()
}

fn write(p: &Path, text: &str) {
    std::fs::write(p, text).expect("write config");
}

#[test]
fn gateway_addresses_are_answered_announced_and_reloaded_live() {
    assert!(
        can_admin_net(),
        "TAP tests need root (CAP_NET_ADMIN), /dev/net/tun and iproute2; CI runs as root"
    );
    require_programs(&["curl", "python3"]);
    let dir = TempDir::new("sluice-served");
    let (edge, core) = (unique_name("sae"), unique_name("sai"));
    write(&dir.0.join("appliance.yaml"), &appliance(&edge, &core));
    let gw = dir.0.join("gateways.yaml");
    write(&gw, &gateways(&[GW_A]));
    let socket = dir.0.join("admin.sock");
    let child = Command::new(BIN)
        .arg("run")
        .arg("-c")
        .arg(&dir.0)
        .arg("--admin-socket")
        .arg(&socket)
        .arg("--quiet")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start sluice");
    let s = Sluice {
        child: ChildGuard(child),
        socket,
    };
    wait_for("the admin socket", Duration::from_secs(20), || {
        s.socket.exists()
    });
    wait_for("the TAP devices", Duration::from_secs(10), || {
        link_exists(&edge) && link_exists(&core)
    });
    let client = Netns::new("sac");
    let backend = Netns::new("sab");
    for (ns, dev, addrs) in [
        (&client, &edge, &[CLIENT][..]),
        (&backend, &core, &[BACKEND_A, BACKEND_B][..]),
    ] {
        must("ip", &["link", "set", dev, "netns", &ns.name]);
        for a in addrs {
            ns.exec(&["ip", "addr", "add", &format!("{a}/24"), "dev", dev]);
        }
        ns.exec(&["ip", "link", "set", dev, "up"]);
    }
    let mut servers = Py::start(&backend, HTTP_SERVER, &["8000", BACKEND_A, BACKEND_B]);
    assert_eq!(servers.line(Duration::from_secs(10)), "ready");
    let sluice_mac = mac_from_name(&edge).to_string();

    // Both Gateways' addresses answer on the client's own network: ARP, echo, and
    // connections through their listeners.
    let ping = client.try_exec(&["ping", "-c", "1", "-W", "2", GW_A]);
    assert!(
        ping.status.success(),
        "ping {GW_A}: {}",
        String::from_utf8_lossy(&ping.stdout)
    );
    let neigh = client.exec(&["ip", "neigh", "show", GW_A, "dev", &edge]);
    assert!(
        neigh.contains(&sluice_mac),
        "{GW_A} at sluice's MAC: {neigh}"
    );
    let body = get(&client, &[&format!("http://{GW_A}:8000/")]).expect("curl gw-a");
    assert!(body.starts_with(&format!("backend {BACKEND_A} ")), "{body}");
    let body = get(
        &client,
        &[
            "--resolve",
            &format!("b.example.test:8000:{GW_B}"),
            "http://b.example.test:8000/x",
        ],
    )
    .expect("curl gw-b");
    assert!(
        body.starts_with(&format!(
            "backend {BACKEND_B} host b.example.test:8000 path /x"
        )),
        "{body}"
    );
    let status = s.json(&["status", "--json"]);
    let served = &status["addresses"];
    assert_eq!(served[0]["address"], GW_A, "{status}");
    assert_eq!(served[0]["port"], "edge", "{status}");
    assert_eq!(served[0]["owners"][0], "Gateway web/gw-a", "{status}");
    assert_eq!(served[1]["address"], GW_B, "{status}");
    assert_eq!(
        served[1]["owners"][0], "Gateway.networking.istio.io web/gw-b",
        "{status}"
    );
    let human = String::from_utf8_lossy(&s.ctl(&["status"]).stdout).into_owned();
    assert!(
        human.contains(&format!("  {GW_A} on edge (Gateway web/gw-a)")),
        "{human}"
    );

    // The addresses served from the start were announced at start (three times each,
    // a second apart; before the test could listen).
    wait_for("the first announcements", Duration::from_secs(10), || {
        s.announced() == 6
    });

    // A reload adds an address: reachable at once, announced by gratuitous ARP.
    let mut watch = Py::start(&client, ARP_PROBE, &["watch", &edge, "5"]);
    assert_eq!(watch.line(Duration::from_secs(10)), "ready");
    let announced = s.announced();
    write(&gw, &gateways(&[GW_A, ADDED]));
    let t0 = Instant::now();
    let v = s.json(&["reload", "--json"]);
    assert_eq!(v["ok"], true, "{v}");
    let reloaded = Instant::now();
    let mut tries = 0;
    let body = loop {
        tries += 1;
        if let Some(b) = get(&client, &[&format!("http://{ADDED}:8000/")]) {
            break b;
        }
        assert!(
            reloaded.elapsed() < Duration::from_secs(10),
            "{ADDED} never answered"
        );
    };
    let took = reloaded.elapsed();
    assert!(body.starts_with(&format!("backend {BACKEND_A} ")), "{body}");
    assert!(
        took < Duration::from_secs(1),
        "{ADDED} answered {took:?} after the reload ({tries} tries; {:?} with the reload)",
        t0.elapsed()
    );
    eprintln!(
        "{ADDED} answered {took:?} after the reload returned ({:?} with it), try {tries}",
        t0.elapsed()
    );
    let mut garps = Vec::new();
    loop {
        let l = watch.line(Duration::from_secs(10));
        if l == "done" {
            break;
        }
        let f: Value = serde_json::from_str(&l).expect("a frame");
        if f["sender"] == f["target"] && f["src"] == sluice_mac.as_str() {
            garps.push(f);
        }
    }
    assert_eq!(
        garps.len(),
        3,
        "three gratuitous ARPs for {ADDED}: {garps:?}"
    );
    for f in &garps {
        assert_eq!(f["target"], ADDED, "only the new address: {f}");
        assert_eq!(
            (
                f["dst"].as_str(),
                f["op"].as_u64(),
                f["sha"].as_str(),
                f["tha"].as_str()
            ),
            (
                Some("ff:ff:ff:ff:ff:ff"),
                Some(1),
                Some(sluice_mac.as_str()),
                Some("00:00:00:00:00:00")
            ),
            "{f}"
        );
    }
    wait_for("address_announced counted", Duration::from_secs(10), || {
        s.announced() == announced + 3
    });

    // A reload that removes it: no more ARP answers for it; the others stay.
    write(&gw, &gateways(&[GW_A]));
    let v = s.json(&["reload", "--json"]);
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(arp_ask(&client, &edge, ADDED), "none");
    assert_eq!(arp_ask(&client, &edge, GW_A), sluice_mac);
    assert_eq!(arp_ask(&client, &edge, GW_B), sluice_mac);
    let status = s.json(&["status", "--json"]);
    assert_eq!(
        status["addresses"].as_array().map(Vec::len),
        Some(2),
        "{status}"
    );

    drop(watch);
    drop(servers);
    s.stop();
    assert!(!link_exists(&edge), "the TAP devices are gone with sluice");
}
