//! Reloads of a running `sluice run` (DESIGN.md §4), on a TAP Appliance as root: the test
//! edits the configuration file (picked up by the file watch), sends SIGHUP, and asks
//! `sluice ctl reload`; `sluice ctl status` reports each new tables generation, a broken
//! file's errors (with file:line) while the previous generation keeps serving, and refuses
//! an Appliance change until restart; `sluice ctl stats` answers throughout. The TAP
//! device, the files and the process are cleaned up on drop.

use serde_json::Value;
use sluice_tests::sys::{can_admin_net, must, run, unique_name, ChildGuard, TempDir};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_sluice-run");

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn appliance(tap: &str, cores: &str) -> String {
    format!(
        "apiVersion: sluice.dev/v1alpha1\nkind: Appliance\nmetadata: {{name: r}}\nspec:\n  cores: {cores}\n  ports:\n  - name: edge\n    tap: {{name: {tap}}}\n    addresses: [10.97.0.2/24]\n  virtualAddresses: [10.97.0.10]\n  limits: {{flowsPerWorker: 1024}}\n"
    )
}

/// A TCP listener on `port` routed to one pod.
fn gateway(port: u32) -> String {
    format!(
        r#"apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  gatewayClassName: sluice
  listeners:
  - {{name: echo, port: {port}, protocol: TCP}}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {{name: echo, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - backendRefs: [{{name: echo, port: 7000}}]
---
apiVersion: v1
kind: Service
metadata: {{name: echo, namespace: default}}
spec:
  selector: {{app: echo}}
  ports: [{{port: 7000}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: echo-0, namespace: default, labels: {{app: echo}}}}
status: {{podIP: 10.97.0.1}}
"#
    )
}

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

    fn status(&self) -> Value {
        self.json(&["status", "--json"])
    }

    fn wait_generation(&self, generation: u64, trigger: &str) -> Value {
        let mut v = Value::Null;
        wait_for(
            &format!("generation {generation} by {trigger}"),
            Duration::from_secs(15),
            || {
                v = self.status();
                v["generation"] == generation
            },
        );
        assert_eq!(v["last_reload"]["trigger"], trigger, "{v}");
        assert_eq!(v["last_reload"]["ok"], true, "{v}");
        v
    }

    /// SIGTERM, then stdout and stderr.
    fn stop(mut self) -> (String, String) {
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
        (out, err)
    }
}

fn link_exists(name: &str) -> bool {
    run("ip", &["link", "show", "dev", name]).status.success()
}

fn write(p: &Path, text: &str) {
    std::fs::write(p, text).expect("write config");
}

#[test]
fn reloads_on_file_change_sighup_and_ctl() {
    assert!(
        can_admin_net(),
        "TAP tests need root (CAP_NET_ADMIN), /dev/net/tun and iproute2; CI runs as root"
    );
    let dir = TempDir::new("sluice-reload");
    let tap = unique_name("slr");
    let (app, gw) = (dir.0.join("appliance.yaml"), dir.0.join("gateway.yaml"));
    write(&app, &appliance(&tap, "[0]"));
    write(&gw, &gateway(7000));
    let socket = dir.0.join("admin.sock");
    let child = Command::new(BIN)
        .arg("run")
        .arg("-c")
        .arg(&dir.0)
        .arg("--admin-socket")
        .arg(&socket)
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

    // Generation 1, the whole directory watched, no reload yet.
    let v = s.status();
    assert_eq!(v["generation"], 1, "{v}");
    assert_eq!(v["config"][0], dir.0.display().to_string(), "{v}");
    assert!(v["last_reload"].is_null(), "{v}");
    assert_eq!(v["workers"][0]["flows"], 0, "{v}");
    assert!(v["uptime_s"].as_f64().is_some(), "{v}");

    // 1. The file watch: an edit publishes generation 2.
    write(&gw, &gateway(7001));
    s.wait_generation(2, "file");

    // 2. SIGHUP: generation 3.
    must("kill", &["-HUP", &s.child.0.id().to_string()]);
    s.wait_generation(3, "sighup");

    // 3. `ctl reload`, human and JSON.
    let o = s.ctl(&["reload"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}");
    assert!(text.contains("reload ok: tables generation 4"), "{text}");
    let v = s.json(&["reload", "--json"]);
    assert_eq!(
        (v["ok"].clone(), v["generation"].clone()),
        (true.into(), 5.into()),
        "{v}"
    );
    assert_eq!(v["errors"].as_array().map(Vec::len), Some(0), "{v}");
    assert_eq!(v["trigger"], "ctl");

    // 4. A broken file: rejected with file:line, generation 5 keeps serving.
    write(&gw, &gateway(70000));
    let o = s.ctl(&["reload", "--json"]);
    assert!(!o.status.success(), "a rejected reload exits non-zero");
    let v: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["generation"], 5, "{v}");
    let prefix = format!("{}:7:", gw.display());
    let errors: Vec<String> = v["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| e.as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with(&prefix) && e.contains("70000")),
        "errors name {prefix}: {errors:?}"
    );
    // The watch saw the same change; whichever ran, status shows the rejection.
    std::thread::sleep(Duration::from_millis(2500));
    let v = s.status();
    assert_eq!(v["generation"], 5, "{v}");
    assert_eq!(v["last_reload"]["ok"], false, "{v}");
    assert!(
        v["last_reload"]["errors"][0]
            .as_str()
            .is_some_and(|e| e.starts_with(&prefix)),
        "{v}"
    );
    assert!(v["reloads"]["failed"].as_u64() >= Some(1), "{v}");
    let human = String::from_utf8_lossy(&s.ctl(&["status"]).stdout).to_string();
    assert!(human.contains("tables generation 5"), "{human}");
    assert!(
        human.contains("rejected:") && human.contains(&prefix),
        "{human}"
    );

    // `ctl stats` keeps answering, with the generation, flows and events.
    let st = s.json(&["stats", "--json"]);
    assert_eq!(st["generation"], 5, "{st}");
    assert_eq!(st["ports"][0]["name"], "edge", "{st}");
    assert!(st["workers"][0]["flows"].is_u64(), "{st}");
    assert!(st["total"]["events"]["flow_created"].is_u64(), "{st}");

    // 5. An Appliance change (cores) is refused until restart, even with a good gateway.
    write(&gw, &gateway(7002));
    write(&app, &appliance(&tap, "[0, 1]"));
    let v = s.json(&["reload", "--json"]);
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["generation"], 5, "{v}");
    let e = v["errors"][0].as_str().unwrap_or_default();
    assert!(
        e.contains("spec.cores") && e.contains("restart sluice"),
        "{e}"
    );

    // Putting the Appliance back makes the gateway change go through (the file watch may
    // publish it first: then the explicit reload is generation 7).
    write(&app, &appliance(&tap, "[0]"));
    let v = s.json(&["reload", "--json"]);
    assert_eq!(v["ok"], true, "{v}");
    assert!(v["generation"].as_u64() >= Some(6), "{v}");

    let (out, err) = s.stop();
    assert!(
        out.contains("reload (file) ok: tables generation 2"),
        "{out}"
    );
    assert!(
        out.contains("reload (sighup) ok: tables generation 3"),
        "{out}"
    );
    assert!(out.contains("sluice: stopped"), "{out}");
    assert!(err.contains("reload (ctl) rejected"), "{err}");
    assert!(!link_exists(&tap), "the TAP device is gone with sluice");
}
