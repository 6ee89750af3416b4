//! Guards for kernel resources the tests and benchmarks create: each cleans up on drop,
//! also when a test panics.

use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Runs a command, returning its output (panics if it cannot be started).
pub fn run(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"))
}

/// Runs a command and panics with its stderr unless it succeeds.
pub fn must(cmd: &str, args: &[&str]) -> String {
    let o = run(cmd, args);
    assert!(
        o.status.success(),
        "{cmd} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A name unique to this process and call (`prefix` + pid + counter) that fits an
/// interface name (15 bytes): keep `prefix` to 4 bytes or fewer.
pub fn unique_name(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let s = format!("{prefix}{:x}{n:x}", std::process::id() % 0xfffff);
    assert!(
        s.len() <= 15,
        "interface name {s:?} too long: shorten the prefix"
    );
    s
}

/// A fresh directory under the system temp dir, removed on drop.
#[derive(Debug)]
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    /// Creates `<tmp>/<prefix>-<pid>-<n>`.
    pub fn new(prefix: &str) -> TempDir {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("{prefix}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether the test can create network devices (root with CAP_NET_ADMIN and /dev/net/tun).
pub fn can_admin_net() -> bool {
    std::path::Path::new("/dev/net/tun").exists()
        && run("ip", &["link", "show"]).status.success()
        // SAFETY-free check: effective uid via `id -u`.
        && String::from_utf8_lossy(&run("id", &["-u"]).stdout).trim() == "0"
}

/// A network namespace, deleted on drop.
#[derive(Debug)]
pub struct Netns {
    /// Its name.
    pub name: String,
}

impl Netns {
    /// Creates a namespace with a unique name and its loopback up.
    pub fn new(prefix: &str) -> Netns {
        let name = unique_name(prefix);
        must("ip", &["netns", "add", &name]);
        let ns = Netns { name };
        ns.exec(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    /// Runs a command inside the namespace; panics on failure.
    pub fn exec(&self, args: &[&str]) -> String {
        let mut a = vec!["netns", "exec", &self.name];
        a.extend_from_slice(args);
        must("ip", &a)
    }

    /// Runs a command inside the namespace and returns its output whatever the status.
    pub fn try_exec(&self, args: &[&str]) -> Output {
        let mut a = vec!["netns", "exec", &self.name];
        a.extend_from_slice(args);
        run("ip", &a)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run("ip", &["netns", "del", &self.name]);
    }
}

/// A network device deleted on drop (if it still exists).
#[derive(Debug)]
pub struct LinkGuard {
    /// Interface name.
    pub name: String,
    /// Namespace it lives in, if moved.
    pub netns: Option<String>,
}

impl Drop for LinkGuard {
    fn drop(&mut self) {
        match &self.netns {
            Some(ns) => {
                let _ = run("ip", &["-n", ns, "link", "del", &self.name]);
            }
            None => {
                let _ = run("ip", &["link", "del", &self.name]);
            }
        }
    }
}

/// A child process killed and reaped on drop.
#[derive(Debug)]
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
