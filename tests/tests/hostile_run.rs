//! Hostile input against a live `sluice run` (TAP Appliance, as root): an alias bomb and
//! a symlink loop dropped into the watched configuration directory are rejected by the
//! reload while the running tables keep serving and memory stays bounded. sluice runs
//! under an address-space limit (`ulimit -v`), so a broken build fails the test instead
//! of eating the machine. The TAP device, the files and the process are cleaned up on
//! drop, also when a test fails.

use serde_json::Value;
use sluice_tests::sys::{can_admin_net, unique_name, ChildGuard, TempDir};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_sluice-run");

/// Address space `sluice run` gets (KiB, for `ulimit -v`): 2 GiB.
const ADDRESS_SPACE_KIB: u64 = 2 << 20;

/// Peak resident memory allowed to a small TAP instance after the hostile reloads.
const PEAK_RSS_KIB: u64 = 256 << 10;

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn appliance(tap: &str) -> String {
    format!(
        "apiVersion: sluice.dev/v1alpha1\nkind: Appliance\nmetadata: {{name: h}}\nspec:\n  cores: [0]\n  ports:\n  - name: edge\n    tap: {{name: {tap}}}\n    addresses: [10.98.0.2/24]\n  limits: {{flowsPerWorker: 1024}}\n"
    )
}

/// Nine levels of nine aliases (9^9 scalars expanded): "billion laughs".
const ALIAS_BOMB: &str = "a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
";

struct Sluice {
    child: ChildGuard,
    socket: PathBuf,
}

impl Sluice {
    /// `sluice run -c dir` under `ulimit -v`.
    fn start(dir: &Path, socket: &Path) -> Sluice {
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -v {ADDRESS_SPACE_KIB}; exec \"$@\""))
            .arg("sh")
            .arg(BIN)
            .args(["run", "--quiet", "-c"])
            .arg(dir)
            .arg("--admin-socket")
            .arg(socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start sluice");
        let mut s = Sluice {
            child: ChildGuard(child),
            socket: socket.to_path_buf(),
        };
        wait_for("the admin socket", Duration::from_secs(20), || {
            assert!(s.alive(), "sluice exited before serving");
            s.socket.exists()
        });
        s
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.0.try_wait(), Ok(None))
    }

    fn ctl(&self, args: &[&str]) -> Output {
        sluice_tests::ctl::ctl(BIN, &self.socket, args)
    }

    fn status(&self) -> Value {
        let o = self.ctl(&["status", "--json"]);
        serde_json::from_slice(&o.stdout).unwrap_or(Value::Null)
    }

    /// Waits for a rejected reload whose first error contains `needle`; returns status.
    fn wait_rejected(&mut self, needle: &str) -> Value {
        let mut v = Value::Null;
        wait_for(
            &format!("a reload rejected with {needle:?}"),
            Duration::from_secs(30),
            || {
                assert!(self.alive(), "sluice died");
                v = self.status();
                v["last_reload"]["ok"] == false
                    && v["last_reload"]["errors"].as_array().is_some_and(|e| {
                        e.iter()
                            .any(|e| e.as_str().is_some_and(|e| e.contains(needle)))
                    })
            },
        );
        v
    }

    /// Peak resident set (VmHWM), KiB.
    fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.0.id()))
            .expect("/proc/PID/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM")
    }
}

#[test]
fn hostile_files_in_the_watched_directory_are_rejected_while_serving() {
    assert!(
        can_admin_net(),
        "TAP tests need root (CAP_NET_ADMIN), /dev/net/tun and iproute2; CI runs as root"
    );
    let dir = TempDir::new("sluice-hostile-run");
    let conf = dir.0.join("conf");
    std::fs::create_dir_all(conf.join("d")).expect("mkdir");
    let tap = unique_name("slh");
    std::fs::write(conf.join("appliance.yaml"), appliance(&tap)).expect("write");
    let mut s = Sluice::start(&conf, &dir.0.join("admin.sock"));
    assert_eq!(s.status()["generation"], 1);

    // The alias bomb: rejected at its line, generation 1 keeps serving.
    let bomb = conf.join("bomb.yaml");
    std::fs::write(&bomb, ALIAS_BOMB).expect("write");
    let v = s.wait_rejected("MAX_ALIAS_NODES");
    assert_eq!(v["generation"], 1, "{v}");
    let e = v["last_reload"]["errors"][0].as_str().unwrap_or_default();
    assert!(e.starts_with(&format!("{}:6:8: ", bomb.display())), "{e}");
    let st: Value = serde_json::from_slice(&s.ctl(&["stats", "--json"]).stdout).expect("stats");
    assert_eq!(st["ports"][0]["name"], "edge", "{st}");

    // A symlink loop (`ln -s .. d/up`): the watch and the reload find it, once.
    std::fs::remove_file(&bomb).expect("rm");
    std::os::unix::fs::symlink("..", conf.join("d/up")).expect("ln -s .. d/up");
    let v = s.wait_rejected("symlink loop");
    assert_eq!(v["generation"], 1, "{v}");
    let e = v["last_reload"]["errors"][0].as_str().unwrap_or_default();
    assert!(
        e.starts_with(&format!("{}:1:1: ", conf.join("d/up").display())),
        "{e}"
    );

    // Removing the loop lets the next change through: the watch is not stuck.
    std::fs::remove_file(conf.join("d/up")).expect("rm");
    std::fs::write(
        conf.join("ns.yaml"),
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n",
    )
    .expect("write");
    wait_for("generation 2", Duration::from_secs(30), || {
        assert!(s.alive(), "sluice died");
        s.status()["generation"] == 2
    });
    let peak = s.peak_rss_kib();
    assert!(peak < PEAK_RSS_KIB, "peak RSS {peak} KiB");
}

/// `sluice run` of an Appliance the machine cannot serve stops before it starts anything
/// (no TAP device is created), with the error at the field, never a panic or an abort.
#[test]
fn appliance_values_the_machine_cannot_serve_stop_run_before_it_starts() {
    assert!(
        can_admin_net(),
        "TAP tests need root (CAP_NET_ADMIN), /dev/net/tun and iproute2; CI runs as root"
    );
    let dir = TempDir::new("sluice-hostile-appliance");
    for (i, (spec, field)) in [
        ("  cores: [0, 9999]\n", "spec.cores[1]: core 9999"),
        ("  cores: [0, 1023]\n", "spec.cores[1]: core 1023"),
        ("  cores: []\n", "spec.cores: cores is empty"),
        (
            "  limits: {flowsPerWorker: 1000000000000}\n",
            "spec.limits.flowsPerWorker: limits.flowsPerWorker 1000000000000",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let tap = unique_name("slq");
        let f = dir.0.join(format!("a{i}.yaml"));
        std::fs::write(
            &f,
            format!(
                "apiVersion: sluice.dev/v1alpha1\nkind: Appliance\nmetadata: {{name: m}}\nspec:\n{spec}  ports:\n  - name: p\n    tap: {{name: {tap}}}\n"
            ),
        )
        .expect("write");
        // `--duration` bounds a run that wrongly starts.
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -v {ADDRESS_SPACE_KIB}; exec \"$@\""))
            .arg("sh")
            .arg(BIN)
            .args(["run", "--quiet", "--duration", "3", "-c"])
            .arg(&f)
            .arg("--admin-socket")
            .arg(dir.0.join(format!("a{i}.sock")))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start sluice");
        // Bounded by `--duration`: the child is reaped here.
        let o = child.wait_with_output().expect("wait");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{spec}: {:?}: {err}", o.status);
        assert!(
            err.contains(&format!("{}:5:", f.display())) && err.contains(field),
            "{spec}: want {field:?} in {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
        assert!(
            !Command::new("ip")
                .args(["link", "show", "dev", &tap])
                .output()
                .expect("ip")
                .status
                .success(),
            "{spec}: nothing is started"
        );
    }
}

/// `sluice ctl ARGS` as user `nobody` (group `nogroup`, no others), with a copy of the
/// binary `nobody` can run.
fn ctl_as_nobody(bin: &Path, socket: &Path, args: &[&str]) -> Output {
    Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
        .arg(bin)
        .args(["ctl", "--socket"])
        .arg(socket)
        .args(args)
        .output()
        .expect("setpriv")
}

/// The admin socket is private whatever the umask: 0600, owner and root only (peer
/// credentials checked too, with a JSON error for anyone else); 0660 with
/// `spec.admin.group`; a regular file at its path stops sluice and is left intact.
#[test]
fn the_admin_socket_is_private_by_construction() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    assert!(
        can_admin_net(),
        "TAP tests need root (CAP_NET_ADMIN), /dev/net/tun and iproute2; CI runs as root"
    );
    let dir = TempDir::new("sluice-hostile-admin");
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let bin = dir.0.join("sluice-run");
    std::fs::copy(BIN, &bin).expect("copy the binary");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let start = |conf: &Path, socket: &Path| {
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "umask 000; ulimit -v {ADDRESS_SPACE_KIB}; exec \"$@\""
            ))
            .arg("sh")
            .arg(BIN)
            .args(["run", "--quiet", "-c"])
            .arg(conf)
            .arg("--admin-socket")
            .arg(socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start sluice")
    };
    let conf = dir.0.join("appliance.yaml");
    std::fs::write(&conf, appliance(&unique_name("sla"))).expect("write");
    let socket = dir.0.join("admin.sock");
    let mut s = Sluice {
        child: ChildGuard(start(&conf, &socket)),
        socket: socket.clone(),
    };
    wait_for("the admin socket", Duration::from_secs(20), || {
        assert!(s.alive(), "sluice exited before serving");
        socket.exists()
    });
    let mode = std::fs::metadata(&socket).expect("stat").mode() & 0o777;
    assert_eq!(mode, 0o600, "socket mode {mode:o} under umask 000");
    assert_eq!(s.status()["generation"], 1, "root is served");

    // `nobody` cannot connect at all (the mode), ...
    let o = ctl_as_nobody(&bin, &socket, &["status", "--json"]);
    assert!(
        !o.status.success(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("ermission denied"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // ... and with the mode loosened by hand, the peer check still refuses it.
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let o = ctl_as_nobody(&bin, &socket, &["status", "--json"]);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(!o.status.success(), "{out}");
    assert!(err.contains("permission denied: uid 65534"), "{err}");
    assert!(!out.contains("generation"), "{out}");
    assert_eq!(s.status()["admin"]["refused"], 1);

    // A regular file at the socket path: sluice refuses to start and leaves it be.
    let file = dir.0.join("not-a-socket");
    std::fs::write(&file, "keep me\n").expect("write");
    let o = start(&conf, &file).wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("exists and is not a socket"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&file).expect("still there"),
        "keep me\n"
    );
    drop(s);

    // With `spec.admin.group: nogroup`: 0660, group-owned, and nogroup's members served.
    std::fs::write(
        &conf,
        appliance(&unique_name("sla")).replace("  limits:", "  admin: {group: nogroup}\n  limits:"),
    )
    .expect("write");
    let socket = dir.0.join("group.sock");
    let mut s = Sluice {
        child: ChildGuard(start(&conf, &socket)),
        socket: socket.clone(),
    };
    wait_for("the admin socket", Duration::from_secs(20), || {
        assert!(s.alive(), "sluice exited before serving");
        socket.exists()
    });
    let m = std::fs::metadata(&socket).expect("stat");
    assert_eq!((m.mode() & 0o777, m.gid()), (0o660, 65534));
    let o = ctl_as_nobody(&bin, &socket, &["status", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(v["generation"], 1, "{v}");
}
