//! Memory of idle terminated connections: what a contender holds per connection, in its
//! own memory and in the kernel's.
//!
//! - **Process memory**: VmRSS (`/proc/PID/status`) of the contender's processes
//!   ([`crate::sni_load::Instance::rss_kib`]). For sluice, which runs in the benchmark's
//!   own process, that is the whole process: so the load client and the backend of the
//!   memory benchmark run in a helper process of their own ([`Helper`]), and the
//!   benchmark's process holds nothing per connection but sluice's state (its smoltcp
//!   sockets and their buffers included).
//! - **Kernel memory** of the contender's sockets (external contenders; sluice's TCP is
//!   in userspace): per socket, the slab objects a TCP socket held by an epoll loop uses
//!   (`TCP`, `sock_inode_cache`, `filp`, `dentry`, `eventpoll_epi`, `eventpoll_pwq`,
//!   object sizes from `/proc/slabinfo`: [`socket_struct_bytes`]) and the buffer memory
//!   charged to it (`ss -tm`: receive queue, write queue, forward allocation, options,
//!   backlog: [`ns_sockets`]), counted in the proxy namespace, where only the contender
//!   has sockets.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};

/// The slab caches a TCP socket of an epoll server allocates from, one object each.
pub const SOCKET_SLABS: [&str; 6] = [
    "TCP",
    "sock_inode_cache",
    "filp",
    "dentry",
    "eventpoll_epi",
    "eventpoll_pwq",
];

/// Bytes of slab objects per TCP socket: the object sizes of [`SOCKET_SLABS`] in
/// `/proc/slabinfo` (root), with the caches found.
pub fn socket_struct_bytes() -> Result<(u64, Vec<String>), String> {
    let text =
        std::fs::read_to_string("/proc/slabinfo").map_err(|e| format!("/proc/slabinfo: {e}"))?;
    let mut total = 0;
    let mut found = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() > 3 && SOCKET_SLABS.contains(&f[0]) {
            if let Ok(size) = f[3].parse::<u64>() {
                total += size;
                found.push(format!("{} {size}", f[0]));
            }
        }
    }
    Ok((total, found))
}

/// TCP sockets of a namespace and their buffer memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NsSockets {
    /// TCP sockets (every state but TIME-WAIT).
    pub sockets: u64,
    /// Bytes charged to them: `r + w + f + o + bl` of `ss -m`'s `skmem`.
    pub buffer_bytes: u64,
}

/// Parses `ss -tanmH` output (a line per socket, its `skmem` on the next).
pub fn parse_ss(text: &str) -> NsSockets {
    let mut n = NsSockets::default();
    for line in text.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("skmem:(") {
            let inner = rest.trim_end_matches(')');
            for item in inner.split(',') {
                let key: String = item
                    .chars()
                    .take_while(|c| c.is_ascii_alphabetic())
                    .collect();
                let val: u64 = item[key.len()..].parse().unwrap_or(0);
                if matches!(key.as_str(), "r" | "w" | "f" | "o" | "bl") {
                    n.buffer_bytes += val;
                }
            }
        } else if !t.is_empty() && !t.starts_with("TIME-WAIT") {
            // A socket in TIME-WAIT is a small `tw_sock` left by a closed connection,
            // not a connection.
            n.sockets += 1;
        }
    }
    n
}

/// The TCP sockets of namespace `ns` (`ss -tanmH` run in it).
pub fn ns_sockets(ns: &str) -> Result<NsSockets, String> {
    let out = crate::sni_load::net::ns_run(ns, &["ss", "-tanmH"])?;
    Ok(parse_ss(&out))
}

/// The benchmark's helper process: the load client and the backend, in the client and
/// backend namespaces, driven by one JSON command a line on its stdin, answering one
/// JSON line each on its stdout (see `bench_tls_memory --help`'s hidden `--helper`).
/// Killed on drop.
pub struct Helper {
    child: sluice_testkit::sys::ChildGuard,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Helper {
    /// Starts `program args...` (the benchmark itself in its helper role) and waits for
    /// its first line (`{"ready": true}` once its backend listens).
    pub fn spawn(program: &Path, args: &[String]) -> Result<Helper, String> {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("{}: {e}", program.display()))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("helper without pipes".into());
        };
        let mut h = Helper {
            child: sluice_testkit::sys::ChildGuard(child),
            stdin,
            stdout: BufReader::new(stdout),
        };
        let first = h.recv()?;
        if first["ready"] != json!(true) {
            return Err(format!("helper: {first}"));
        }
        Ok(h)
    }

    /// Sends one command.
    pub fn send(&mut self, cmd: &Value) -> Result<(), String> {
        writeln!(self.stdin, "{cmd}")
            .and_then(|_| self.stdin.flush())
            .map_err(|e| format!("helper: {e}"))
    }

    /// Reads one answer; an `error` field in it is an `Err`.
    pub fn recv(&mut self) -> Result<Value, String> {
        let mut line = String::new();
        let n = self
            .stdout
            .read_line(&mut line)
            .map_err(|e| format!("helper: {e}"))?;
        if n == 0 {
            let status = self.child.0.try_wait().ok().flatten();
            return Err(format!("helper exited ({status:?})"));
        }
        let v: Value =
            serde_json::from_str(&line).map_err(|e| format!("helper said {line:?}: {e}"))?;
        match v["error"].as_str() {
            Some(e) => Err(e.to_string()),
            None => Ok(v),
        }
    }

    /// [`Helper::send`] then [`Helper::recv`].
    pub fn call(&mut self, cmd: &Value) -> Result<Value, String> {
        self.send(cmd)?;
        self.recv()
    }

    /// Asks it to quit and waits for it (what it reports last).
    pub fn quit(mut self) -> Value {
        let last = self
            .call(&json!({"cmd": "quit"}))
            .unwrap_or_else(|e| json!({"error": e}));
        let _ = self.child.0.wait();
        last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ss_memory_of_each_socket() {
        let text = "LISTEN 0 4096 10.95.1.2:443 0.0.0.0:*\n\t skmem:(r0,rb131072,t0,tb16384,f0,w0,o0,bl0,d0)\nESTAB 0 0 10.95.1.2:443 10.95.1.1:40000\n\t skmem:(r0,rb131072,t0,tb87040,f4096,w0,o0,bl0,d0)\nESTAB 0 0 10.95.2.2:50000 10.95.2.11:8001\n\t skmem:(r768,rb131072,t0,tb87040,f3328,w0,o0,bl0,d0)\nTIME-WAIT 0 0 10.95.2.2:50001 10.95.2.11:8001\n";
        assert_eq!(
            parse_ss(text),
            NsSockets {
                sockets: 3,
                buffer_bytes: 4096 + 768 + 3328
            }
        );
    }
}
