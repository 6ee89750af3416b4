//! The admin socket's server side: one command line in, one JSON document out, each
//! connection on its own short-lived thread (at most [`MAX_CONNECTIONS`] at once).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
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
                .map(|(ip, mac)| json!({"ip": ip.to_string(), "mac": mac.to_string()}))
                .collect(),
        ),
        other => json!({"error": format!(
            "unknown command {other:?}; try stats, status, reload or neighbours"
        )}),
    }
}

fn handle(mut s: UnixStream, r: &Running, stop: &AtomicBool) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
    let mut line = String::new();
    {
        let mut rd = BufReader::new((&s).take(4096));
        if rd.read_line(&mut line).is_err() {
            return;
        }
    }
    let v = answer(&line, r, stop);
    let _ = writeln!(s, "{v}");
}

/// Serves the admin socket on a thread until `stop` is set; removes the socket file on
/// exit. A stale socket file from an earlier run is replaced.
pub fn serve(
    path: &Path,
    r: Arc<Running>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)?;
        }
    }
    if path.exists() && UnixStream::connect(path).is_err() {
        std::fs::remove_file(path)?;
    }
    let l = UnixListener::bind(path)?;
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
                        serve_one(s, &r, &stop, &busy);
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

/// Answers one connection on its own thread, or says the server is busy.
fn serve_one(mut s: UnixStream, r: &Arc<Running>, stop: &Arc<AtomicBool>, busy: &Arc<AtomicUsize>) {
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
            handle(s, &r, &stop);
            done.fetch_sub(1, Ordering::AcqRel);
        });
    if spawned.is_err() {
        busy.fetch_sub(1, Ordering::AcqRel);
    }
}
