//! The admin socket's server side: one command line in, one JSON document out, each
//! connection on its own short-lived thread (at most [`MAX_CONNECTIONS`] at once).
//!
//! The socket is private by construction, whatever the umask: it is bound under a
//! temporary name, given mode 0600 (0660 and the group's ownership with
//! `spec.admin.group`), and only then linked into place, so it is never reachable with
//! a wider mode. Each connecting peer's credentials (`SO_PEERCRED`) are checked too: uid
//! 0, sluice's own user, or (with a group) a process in that group; anyone else gets a
//! JSON error, is logged on stderr and counted (`admin.refused` in `ctl status`).
//! Something at the socket path that is not a socket is never removed: sluice refuses to
//! start; a stale socket (nothing listening) is replaced, a live one refused.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::instance::{status_json, ControlRequest, Running};

/// Connections served at once; more are answered with an error.
pub const MAX_CONNECTIONS: usize = 16;

/// Longest a `reload` request waits for the control thread.
pub const RELOAD_TIMEOUT: Duration = Duration::from_secs(120);

/// Asks the control thread to reload and waits for the outcome (giving up when sluice
/// stops or after [`RELOAD_TIMEOUT`]).
fn reload(r: &Running, stop: &AtomicBool) -> Value {
    let (tx, rx) = mpsc::channel();
    let sent = r
        .control
        .lock()
        .map_err(|_| ())
        .and_then(|c| c.send(ControlRequest::Reload(tx)).map_err(|_| ()));
    if sent.is_err() {
        return json!({"error": "sluice is stopping; no reload"});
    }
    let t = Instant::now();
    loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(o) => return o.to_json(),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return json!({"error": "sluice is stopping; no reload"})
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if stop.load(Ordering::Relaxed) {
                    return json!({"error": "sluice is stopping; no reload"});
                }
                if t.elapsed() >= RELOAD_TIMEOUT {
                    return json!({"error": format!(
                        "the reload did not finish within {} s; see `sluice ctl status` for its outcome",
                        RELOAD_TIMEOUT.as_secs()
                    )});
                }
            }
        }
    }
}

fn answer(cmd: &str, r: &Running, stop: &AtomicBool) -> Value {
    match cmd.trim() {
        "stats" => r.sample().to_json(),
        "status" => status_json(r),
        "reload" => reload(r, stop),
        "neighbours" => Value::Array(
            r.neighbours
                .entries()
                .into_iter()
                .map(|e| {
                    json!({
                        "ip": e.ip.to_string(),
                        "mac": e.mac.to_string(),
                        "source": e.source.name(),
                    })
                })
                .collect(),
        ),
        other => json!({"error": format!(
            "unknown command {other:?}; try stats, status, reload or neighbours"
        )}),
    }
}

/// Reads the command line and answers it (or, for a refused peer, its error: the line
/// is read first so that closing does not reset the connection before the answer).
fn handle(mut s: UnixStream, refused: Option<Value>, r: &Running, stop: &AtomicBool) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
    let mut line = String::new();
    {
        let mut rd = BufReader::new((&s).take(4096));
        if rd.read_line(&mut line).is_err() {
            return;
        }
    }
    let v = refused.unwrap_or_else(|| answer(&line, r, stop));
    let _ = writeln!(s, "{v}");
}

/// Who may use the admin socket, resolved before anything starts
/// ([`Access::resolve`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// sluice's own (effective) user.
    pub owner: u32,
    /// The admin group (`spec.admin.group`), if any.
    pub group: Option<u32>,
}

fn io_error(kind: std::io::ErrorKind, message: String) -> std::io::Error {
    std::io::Error::new(kind, message)
}

impl Access {
    /// Checks that `path` is free or a socket, and resolves `group` (a name in
    /// `/etc/group`, or a number).
    pub fn resolve(path: &Path, group: Option<&str>) -> std::io::Result<Access> {
        check_path(path)?;
        let group = group.map(resolve_group).transpose()?;
        Ok(Access {
            owner: rustix::process::geteuid().as_raw(),
            group,
        })
    }

    /// Whether a peer with these credentials may use the socket.
    fn allows(&self, uid: u32, gid: u32, pid: i32) -> bool {
        uid == 0
            || uid == self.owner
            || self
                .group
                .is_some_and(|g| gid == g || supplementary_groups(pid).contains(&g))
    }

    /// The socket's mode: 0600, or 0660 with a group.
    pub fn mode(&self) -> u32 {
        if self.group.is_some() {
            0o660
        } else {
            0o600
        }
    }
}

/// A group's id: a number, or a name looked up in `/etc/group`.
fn resolve_group(g: &str) -> std::io::Result<u32> {
    if let Ok(n) = g.parse() {
        return Ok(n);
    }
    let groups = std::fs::read_to_string("/etc/group")?;
    groups
        .lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let gid = f.nth(1)?.parse().ok()?;
            Some((name, gid))
        })
        .find(|(name, _)| *name == g)
        .map(|(_, gid)| gid)
        .ok_or_else(|| {
            io_error(
                std::io::ErrorKind::NotFound,
                format!("admin.group {g:?}: no such group in /etc/group"),
            )
        })
}

/// A process's supplementary groups (`Groups:` of `/proc/PID/status`); empty when it
/// cannot be read (the peer is gone: nothing to allow).
fn supplementary_groups(pid: i32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("Groups:")).map(|g| {
                g.split_whitespace()
                    .filter_map(|n| n.parse().ok())
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// `path` is free, or a stale socket (removed); anything else is an error and is left
/// as it is.
fn check_path(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if !m.file_type().is_socket() => Err(io_error(
            std::io::ErrorKind::AlreadyExists,
            "exists and is not a socket; not touching it (remove it or choose another admin.socket)".into(),
        )),
        Ok(_) if UnixStream::connect(path).is_ok() => Err(io_error(
            std::io::ErrorKind::AddrInUse,
            "another process serves this socket (is sluice already running?)".into(),
        )),
        Ok(_) => std::fs::remove_file(path),
    }
}

/// Binds the socket under a temporary name next to `path`, sets its mode and group,
/// then links it into place (a link never replaces what is there).
fn bind_private(path: &Path, access: &Access) -> std::io::Result<UnixListener> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp: PathBuf = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let l = UnixListener::bind(&tmp)?;
    let placed = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(access.mode()))
        .and_then(|()| match access.group {
            Some(g) => std::os::unix::fs::chown(&tmp, None, Some(g)),
            None => Ok(()),
        })
        .and_then(|()| {
            check_path(path)?;
            std::fs::hard_link(&tmp, path)
        });
    let _ = std::fs::remove_file(&tmp);
    placed.map(|()| l)
}

/// Serves the admin socket on a thread until `stop` is set; removes the socket file on
/// exit. A stale socket file from an earlier run is replaced; anything else at `path`
/// is an error (see the module docs).
pub fn serve(
    path: &Path,
    access: Access,
    r: Arc<Running>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)?;
        }
    }
    let l = bind_private(path, &access)?;
    l.set_nonblocking(true)?;
    let path = path.to_path_buf();
    let busy = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new()
        .name("sluice-admin".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((s, _)) => {
                        let _ = s.set_nonblocking(false);
                        let refused = refusal(&s, &access, &r);
                        serve_one(s, refused, &r, &stop, &busy);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
            let _ = std::fs::remove_file(&path);
        })
}

/// `None` when the peer may use the socket; else the JSON error it gets (it is logged
/// and counted here).
fn refusal(s: &UnixStream, access: &Access, r: &Running) -> Option<Value> {
    let (uid, gid, pid) = match rustix::net::sockopt::socket_peercred(s) {
        Ok(c) => (c.uid.as_raw(), c.gid.as_raw(), c.pid.as_raw_nonzero().get()),
        Err(_) => (u32::MAX, u32::MAX, 0),
    };
    if access.allows(uid, gid, pid) {
        return None;
    }
    let n = r.admin_refused.fetch_add(1, Ordering::Relaxed) + 1;
    eprintln!("sluice: admin socket: refused pid {pid} uid {uid} gid {gid} ({n} refused so far)");
    Some(json!({"error": format!(
        "permission denied: uid {uid} is not root, sluice's user{}",
        if access.group.is_some() { " or in the admin group" } else { "" }
    )}))
}

/// Answers one connection on its own thread, or says the server is busy.
fn serve_one(
    mut s: UnixStream,
    refused: Option<Value>,
    r: &Arc<Running>,
    stop: &Arc<AtomicBool>,
    busy: &Arc<AtomicUsize>,
) {
    if busy.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
        busy.fetch_sub(1, Ordering::AcqRel);
        let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
        let _ = writeln!(
            s,
            "{}",
            json!({"error": "the admin socket is busy; try again"})
        );
        return;
    }
    let (r, stop, done) = (Arc::clone(r), Arc::clone(stop), Arc::clone(busy));
    let spawned = std::thread::Builder::new()
        .name("sluice-admin-conn".into())
        .spawn(move || {
            handle(s, refused, &r, &stop);
            done.fetch_sub(1, Ordering::AcqRel);
        });
    if spawned.is_err() {
        busy.fetch_sub(1, Ordering::AcqRel);
    }
}
