//! `sluice run` on TAP ports with the kernel on the other side: the test creates the peer
//! side (address, network namespace), pings sluice with the system `ping`, checks that
//! `ip neigh` shows sluice's MAC, reads the counters with `sluice ctl stats`, and stops
//! sluice with SIGTERM. Every device, namespace and process is cleaned up on drop.

use sluice_dataplane::port::mac_from_name;
use sluice_tests::sys::{can_admin_net, must, run, unique_name, ChildGuard, Netns, TempDir};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_sluice-run");

fn require_root() {
    assert!(
        can_admin_net(),
        "TAP tests need root (CAP_NET_ADMIN), /dev/net/tun and iproute2; CI runs as root"
    );
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

struct Sluice {
    child: ChildGuard,
    socket: PathBuf,
    _dir: TempDir,
}

fn start(config: Option<&str>) -> Sluice {
    let dir = TempDir::new("sluice-tap");
    let socket = dir.0.join("admin.sock");
    let mut cmd = Command::new(BIN);
    cmd.arg("run").arg("--admin-socket").arg(&socket);
    if let Some(c) = config {
        let f = dir.0.join("appliance.yaml");
        std::fs::write(&f, c).unwrap();
        cmd.arg("-c").arg(&f);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = ChildGuard(cmd.spawn().expect("start sluice"));
    let s = Sluice {
        child,
        socket,
        _dir: dir,
    };
    wait_for("the admin socket", Duration::from_secs(20), || {
        s.socket.exists()
    });
    s
}

impl Sluice {
    fn ctl_stats(&self) -> serde_json::Value {
        let o = Command::new(BIN)
            .args(["ctl", "--socket"])
            .arg(&self.socket)
            .args(["stats", "--json"])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "ctl: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice(&o.stdout).expect("ctl stats prints JSON")
    }

    /// SIGTERM, then the exit status and stdout.
    fn stop(mut self) -> String {
        must("kill", &["-TERM", &self.child.0.id().to_string()]);
        let t = Instant::now();
        let status = loop {
            if let Some(s) = self.child.0.try_wait().unwrap() {
                break s;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "sluice did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut out = String::new();
        if let Some(mut o) = self.child.0.stdout.take() {
            use std::io::Read;
            let _ = o.read_to_string(&mut out);
        }
        let mut err = String::new();
        if let Some(mut e) = self.child.0.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut err);
        }
        assert!(status.success(), "sluice exited with {status}: {err}");
        assert!(
            !self.socket.exists() || !Path::new(&self.socket).exists(),
            "admin socket removed"
        );
        out
    }
}

fn link_exists(name: &str) -> bool {
    run("ip", &["link", "show", "dev", name]).status.success()
}

#[test]
fn pings_sluice_on_a_tap_port_in_a_netns() {
    require_root();
    let tap = unique_name("slt");
    let cfg = format!(
        "apiVersion: sluice.dev/v1alpha1\nkind: Appliance\nmetadata: {{name: t}}\nspec:\n  cores: [0]\n  ports:\n  - name: edge\n    tap: {{name: {tap}}}\n    addresses: [10.99.0.2/24, \"fd99::2/64\"]\n"
    );
    let s = start(Some(&cfg));
    wait_for("the TAP device", Duration::from_secs(10), || {
        link_exists(&tap)
    });
    let ns = Netns::new("sltn");
    must("ip", &["link", "set", &tap, "netns", &ns.name]);
    ns.exec(&["ip", "addr", "add", "10.99.0.1/24", "dev", &tap]);
    ns.exec(&[
        "ip",
        "-6",
        "addr",
        "add",
        "fd99::1/64",
        "dev",
        &tap,
        "nodad",
    ]);
    ns.exec(&["ip", "link", "set", &tap, "up"]);

    let out = ns.try_exec(&["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.99.0.2"]);
    assert!(
        out.status.success(),
        "ping: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = ns.try_exec(&["ping", "-6", "-c", "3", "-i", "0.2", "-W", "2", "fd99::2"]);
    assert!(
        out.status.success(),
        "ping -6: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    let mac = mac_from_name(&tap).to_string();
    let neigh = ns.exec(&["ip", "neigh", "show", "10.99.0.2", "dev", &tap]);
    assert!(
        neigh.contains(&mac),
        "ip neigh shows sluice's MAC {mac}: {neigh}"
    );
    let neigh6 = ns.exec(&["ip", "-6", "neigh", "show", "fd99::2", "dev", &tap]);
    assert!(
        neigh6.contains(&mac),
        "ip -6 neigh shows sluice's MAC {mac}: {neigh6}"
    );

    // Counters are published every few hundred poll rounds: wait for them.
    let mut v = s.ctl_stats();
    wait_for("published counters", Duration::from_secs(10), || {
        v = s.ctl_stats();
        v["ports"][0]["workers"]["tx_packets"].as_u64().unwrap_or(0) >= 8
    });
    let p = &v["ports"][0];
    assert_eq!(p["name"], "edge");
    assert_eq!(p["mac"], mac.as_str());
    assert!(
        p["workers"]["rx_packets"].as_u64().unwrap() >= 8,
        "6 echo requests + ARP + NS: {v}"
    );
    assert!(p["device"]["rx_packets"].as_u64().unwrap() >= 8);
    let out = s.stop();
    assert!(out.contains("sluice: stopped"), "{out}");
    assert!(!link_exists(&tap), "the TAP device is gone with sluice");
}

#[test]
fn embedded_default_answers_ping_on_sl0() {
    require_root();
    assert!(
        !link_exists("sl0"),
        "sl0 already exists: is another sluice running?"
    );
    let s = start(None);
    wait_for("sl0", Duration::from_secs(10), || link_exists("sl0"));
    // sluice gives the kernel side 10.77.0.1/24 itself (embedded default).
    wait_for("the kernel side address", Duration::from_secs(10), || {
        String::from_utf8_lossy(&run("ip", &["-4", "addr", "show", "dev", "sl0"]).stdout)
            .contains("10.77.0.1/24")
    });
    let out = run(
        "ping",
        &["-c", "3", "-i", "0.2", "-W", "2", "-I", "sl0", "10.77.0.2"],
    );
    assert!(
        out.status.success(),
        "ping 10.77.0.2: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let human = Command::new(BIN)
        .args(["ctl", "--socket"])
        .arg(&s.socket)
        .arg("stats")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains("port sl0"), "{text}");
    let out = s.stop();
    assert!(out.contains("embedded default"), "{out}");
    assert!(!link_exists("sl0"));
}

/// `sluice run` with a pcap port: the capture's ARP request and pings are answered into
/// the output capture.
#[test]
fn run_replays_a_pcap_port() {
    use sluice_dataplane::port::pcap;
    use sluice_dataplane::wire::MacAddr;
    use sluice_tests::fixtures::{arp_request, echo_request};
    use std::net::Ipv4Addr;
    let dir = TempDir::new("sluice-pcap-run");
    let (inp, outp) = (dir.0.join("in.pcap"), dir.0.join("out.pcap"));
    let peer = MacAddr([0x02, 0, 0, 0, 0, 1]);
    let (us, them) = (Ipv4Addr::new(10, 9, 0, 1), Ipv4Addr::new(10, 9, 0, 2));
    let mut frames = vec![arp_request(peer, us, them)];
    for seq in 0..3u16 {
        frames.push(echo_request(peer, (us, them), 1, seq, &[0; 4]));
    }
    pcap::write_file(&inp, frames.iter().map(|f| &f[..])).unwrap();
    let cfg = format!(
        "apiVersion: sluice.dev/v1alpha1\nkind: Appliance\nmetadata: {{name: p}}\nspec:\n  cores: [0]\n  ports:\n  - name: cap\n    pcap: {{rx: {}, tx: {}}}\n    addresses: [10.9.0.2/24]\n",
        inp.display(),
        outp.display()
    );
    let cfgf = dir.0.join("appliance.yaml");
    std::fs::write(&cfgf, cfg).unwrap();
    let out = Command::new(BIN)
        .arg("run")
        .arg("-c")
        .arg(&cfgf)
        .arg("--admin-socket")
        .arg(dir.0.join("admin.sock"))
        .args(["--duration", "1", "--quiet"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = pcap::read_file(&outp).unwrap();
    assert_eq!(got.len(), 4, "ARP reply + 3 echo replies");
    assert_eq!(&got[0][12..14], &[0x08, 0x06]);
    assert_eq!(&got[0][20..22], &[0, 2], "ARP reply");
    for g in &got[1..] {
        assert_eq!(&g[..6], &peer.0, "back to the sender");
        assert_eq!(g[34], 0, "echo reply");
    }
}

/// `sluice run` with a DPDK port (a `net_tap` vdev, EAL arguments from the Appliance): the
/// kernel in a namespace pings sluice through it.
#[cfg(feature = "dpdk")]
#[test]
fn run_with_a_dpdk_net_tap_port() {
    require_root();
    let ifname = unique_name("slq");
    let cfg = format!(
        "apiVersion: sluice.dev/v1alpha1\nkind: Appliance\nmetadata: {{name: d}}\nspec:\n  cores: [1]\n  ports:\n  - name: vdev\n    dpdk: {{devargs: \"net_tap0,iface={ifname}\"}}\n    addresses: [10.98.0.2/24]\n  eal: [\"--no-huge\", \"--no-pci\", \"--no-shconf\", \"-m\", \"256\", \"-l\", \"0\", \"--file-prefix\", \"{ifname}\", \"--log-level\", \"lib.eal:error\"]\n"
    );
    let s = start(Some(&cfg));
    wait_for("the net_tap device", Duration::from_secs(10), || {
        link_exists(&ifname)
    });
    let ns = Netns::new("slqn");
    must("ip", &["link", "set", &ifname, "netns", &ns.name]);
    ns.exec(&["ip", "addr", "add", "10.98.0.1/24", "dev", &ifname]);
    ns.exec(&["ip", "link", "set", &ifname, "up"]);
    let out = ns.try_exec(&["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.98.0.2"]);
    // Give the device back before sluice closes it (net_tap deletes it by name).
    let _ = ns.try_exec(&["ip", "link", "set", &ifname, "netns", "1"]);
    assert!(
        out.status.success(),
        "ping through sluice's DPDK port: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let mut v = s.ctl_stats();
    wait_for("published counters", Duration::from_secs(10), || {
        v = s.ctl_stats();
        v["ports"][0]["workers"]["tx_packets"].as_u64().unwrap_or(0) >= 4
    });
    assert_eq!(v["workers"][0]["core"], 1);
    s.stop();
    let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/{ifname}"));
}

/// `sluice ctl neighbours` says where each entry came from: the Appliance's static
/// neighbour is `static`, a peer sluice learned from its ARP request (in a pcap port's
/// capture) is `learned`. (No root needed.)
#[test]
fn ctl_neighbours_marks_static_and_learned_entries() {
    use sluice_dataplane::port::pcap;
    use sluice_dataplane::wire::MacAddr;
    use sluice_tests::fixtures::arp_request;
    use std::net::Ipv4Addr;
    let dir = TempDir::new("sluice-neigh-run");
    let (inp, outp) = (dir.0.join("in.pcap"), dir.0.join("out.pcap"));
    let peer = MacAddr([0x02, 0, 0, 0, 0, 1]);
    let frames = [arp_request(
        peer,
        Ipv4Addr::new(10, 9, 0, 1),
        Ipv4Addr::new(10, 9, 0, 2),
    )];
    pcap::write_file(&inp, frames.iter().map(|f| &f[..])).unwrap();
    let cfg = format!(
        "apiVersion: sluice.dev/v1alpha1\nkind: Appliance\nmetadata: {{name: n}}\nspec:\n  cores: [0]\n  ports:\n  - name: cap\n    pcap: {{rx: {}, tx: {}}}\n    addresses: [10.9.0.2/24]\n  neighbours:\n  - {{ip: 10.9.0.5, mac: \"02:00:00:00:00:05\"}}\n",
        inp.display(),
        outp.display()
    );
    let cfgf = dir.0.join("appliance.yaml");
    std::fs::write(&cfgf, cfg).unwrap();
    let socket = dir.0.join("admin.sock");
    let _child = ChildGuard(
        Command::new(BIN)
            .arg("run")
            .arg("-c")
            .arg(&cfgf)
            .arg("--admin-socket")
            .arg(&socket)
            .args(["--duration", "60", "--quiet"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start sluice"),
    );
    wait_for("the admin socket", Duration::from_secs(20), || {
        socket.exists()
    });
    let neighbours = || -> serde_json::Value {
        let o = Command::new(BIN)
            .args(["ctl", "--socket"])
            .arg(&socket)
            .arg("neighbours")
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "ctl neighbours: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice(&o.stdout).expect("ctl neighbours prints JSON")
    };
    let mut v = neighbours();
    wait_for("the learned neighbour", Duration::from_secs(10), || {
        v = neighbours();
        v.as_array().is_some_and(|a| a.len() == 2)
    });
    let mut got: Vec<(String, String, String)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or("").to_string();
            (s("ip"), s("mac"), s("source"))
        })
        .collect();
    got.sort();
    let t = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
    assert_eq!(
        got,
        [
            t("10.9.0.1", "02:00:00:00:00:01", "learned"),
            t("10.9.0.5", "02:00:00:00:00:05", "static"),
        ],
        "{v}"
    );
}
