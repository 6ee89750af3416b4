//! Real TLS and HTTP programs around sluice's delayed binding in kernel tests (used by
//! `tests/kernel_splice.rs`, on the topology of [`crate::kernel`]):
//!
//! - [`Certs`]: distinct self-signed certificates made with `openssl req -x509` at test
//!   time (CN and SAN `<name>.example.test`), and a bundle of all of them for clients.
//! - [`SServer`]: `openssl s_server -www` in a namespace (killed on drop).
//! - python3 scripts driven like [`crate::kernel::Py`]: [`TLS_SERVER`] (identifies itself
//!   by certificate and first line), [`TLS_CLIENT`] (parallel TLS connections, segment-wise
//!   replays), [`HTTP_SERVER`] (answers with its address, Host and path), [`SYN_FLOOD`] (a
//!   bounded raw-socket SYN flood).
//! - [`first_client_bytes`]: what a client sent first on the first connection of a pcap.
//! - [`subject_cn`]: the subject CN in `openssl s_client` or `curl -v` output.

use crate::sys::{must, ChildGuard, Netns, TempDir};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The TLS server (python3; protocol in its docstring).
pub const TLS_SERVER: &str = include_str!("py/tls_server.py");
/// The TLS client agent (python3; commands in its docstring).
pub const TLS_CLIENT: &str = include_str!("py/tls_client.py");
/// The HTTP server (python3; answers in its docstring).
pub const HTTP_SERVER: &str = include_str!("py/http_server.py");
/// The SYN flooder (python3; arguments in its docstring).
pub const SYN_FLOOD: &str = include_str!("py/syn_flood.py");

/// Panics, naming what is missing, unless every program in `names` runs (`scripts/setup`
/// installs them; a kernel test never skips silently).
pub fn require_programs(names: &[&str]) {
    for n in names {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {n}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            found,
            "kernel TLS tests need `{n}` (scripts/setup installs it)"
        );
    }
}

/// A certificate's key type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// ECDSA P-256.
    P256,
    /// RSA 2048 bits.
    Rsa2048,
}

/// Self-signed certificates, one per name, in a temporary directory (removed on drop).
#[derive(Debug)]
pub struct Certs {
    /// Holds `<name>.crt`, `<name>.key` and `bundle.pem`.
    pub dir: TempDir,
}

impl Certs {
    /// A P-256 key and a self-signed certificate for each of `names`, with subject CN and
    /// SAN `<name>.example.test`, and `bundle.pem` holding every certificate.
    pub fn new(names: &[&str]) -> Certs {
        let c = Certs::empty();
        for n in names {
            let host = format!("{n}.example.test");
            c.make(n, &host, &[&host], Key::P256);
        }
        c
    }

    /// No certificate yet (an empty bundle).
    pub fn empty() -> Certs {
        let c = Certs {
            dir: TempDir::new("sluice-certs"),
        };
        std::fs::write(c.bundle(), "").expect("write bundle");
        c
    }

    /// A self-signed certificate `name` (files `<name>.crt`, `<name>.key`) with subject
    /// CN `cn`, the DNS names `sans` and a `key`, added to the bundle. RSA keys are
    /// written in PKCS#1 (`-traditional`), P-256 keys in PKCS#8.
    pub fn make(&self, name: &str, cn: &str, sans: &[&str], key: Key) {
        let (crt, keyfile) = (self.crt(name), self.key(name));
        let san = sans
            .iter()
            .map(|s| format!("DNS:{s}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut args = vec!["req", "-x509", "-newkey"];
        match key {
            Key::P256 => args.extend(["ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]),
            Key::Rsa2048 => args.extend(["rsa:2048"]),
        }
        let subj = format!("/CN={cn}");
        let ext = format!("subjectAltName={san}");
        args.extend(["-nodes", "-days", "2", "-subj", &subj, "-addext", &ext]);
        args.extend(["-keyout", path_str(&keyfile), "-out", path_str(&crt)]);
        must("openssl", &args);
        if key == Key::Rsa2048 {
            must(
                "openssl",
                &[
                    "rsa",
                    "-in",
                    path_str(&keyfile),
                    "-traditional",
                    "-out",
                    path_str(&keyfile),
                ],
            );
        }
        let mut bundle = std::fs::read_to_string(self.bundle()).unwrap_or_default();
        bundle.push_str(&std::fs::read_to_string(&crt).expect("certificate written"));
        std::fs::write(self.bundle(), bundle).expect("write bundle");
    }

    /// The certificate of `name`.
    pub fn crt(&self, name: &str) -> PathBuf {
        self.dir.0.join(format!("{name}.crt"))
    }

    /// The key of `name`.
    pub fn key(&self, name: &str) -> PathBuf {
        self.dir.0.join(format!("{name}.key"))
    }

    /// Every certificate, for clients to verify against.
    pub fn bundle(&self) -> PathBuf {
        self.dir.0.join("bundle.pem")
    }

    /// The directory as a string (for scripts).
    pub fn dir_str(&self) -> &str {
        path_str(&self.dir.0)
    }
}

fn path_str(p: &std::path::Path) -> &str {
    p.to_str().expect("temp paths are UTF-8")
}

/// Waits until something in `ns` listens on TCP `addr:port`.
pub fn wait_listening(ns: &Netns, addr: &str, port: u16) {
    let want = format!("{addr}:{port}");
    let t = Instant::now();
    loop {
        let o = ns.try_exec(&["ss", "-Hltn"]);
        if String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .any(|w| w == want)
        {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "nothing listens on {want} in {}",
            ns.name
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `openssl s_server -www` on `addr:port` in a namespace, with `name`'s certificate:
/// answers `GET /` over TLS with its status page. Killed on drop.
#[derive(Debug)]
pub struct SServer(#[allow(dead_code)] ChildGuard);

impl SServer {
    /// Starts it and waits until it listens.
    pub fn start(ns: &Netns, addr: &str, port: u16, certs: &Certs, name: &str) -> SServer {
        let (crt, key) = (certs.crt(name), certs.key(name));
        let child = Command::new("ip")
            .args(["netns", "exec", &ns.name, "openssl", "s_server", "-quiet"])
            .args(["-accept", &format!("{addr}:{port}"), "-www"])
            .args(["-cert", path_str(&crt), "-key", path_str(&key)])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start openssl s_server");
        let s = SServer(ChildGuard(child));
        wait_listening(ns, addr, port);
        s
    }
}

/// The subject CN in `openssl s_client` (`subject=CN = x`) or `curl -v`
/// (`*  subject: CN=x`) output.
pub fn subject_cn(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let l = l.trim_start_matches(['*', ' ']);
        let rest = l
            .strip_prefix("subject=")
            .or_else(|| l.strip_prefix("subject:"))?;
        rest.split(',').find_map(|part| {
            let (k, v) = part.split_once('=')?;
            (k.trim() == "CN").then(|| v.trim().to_string())
        })
    })
}

/// Runs `openssl s_client -connect <to> -servername <sni>` in `ns` (stdin closed: it
/// handshakes and quits); returns the certificate's subject CN, or the output when no
/// certificate came back.
pub fn s_client(ns: &Netns, to: &str, sni: &str) -> Result<String, String> {
    let o = ns.try_exec(&[
        "timeout",
        "10",
        "openssl",
        "s_client",
        "-connect",
        to,
        "-servername",
        sni,
    ]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    subject_cn(&out).ok_or_else(|| format!("{out}{}", String::from_utf8_lossy(&o.stderr)))
}

/// A pcap's first TCP connection (the first SYN without ACK, IPv4 over Ethernet): the
/// bytes its client sent, in sequence order, before the server sent any data.
pub fn first_client_bytes(pcap: &[u8]) -> Vec<u8> {
    let magic = pcap.get(..4).expect("pcap header");
    let le = match magic {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        _ => panic!("not a pcap file: magic {magic:02x?}"),
    };
    let u32_at = |b: &[u8], i: usize| {
        let w = [b[i], b[i + 1], b[i + 2], b[i + 3]];
        if le {
            u32::from_le_bytes(w)
        } else {
            u32::from_be_bytes(w)
        }
    };
    assert_eq!(u32_at(pcap, 20), 1, "link type Ethernet");
    let be32 = |b: &[u8], i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let mut at = 24;
    // (client addr+port, server addr+port), next client sequence number.
    let mut conn: Option<([u8; 6], [u8; 6])> = None;
    let mut next = 0u32;
    let mut out = Vec::new();
    while at + 16 <= pcap.len() {
        let len = u32_at(pcap, at + 8) as usize;
        let frame = &pcap[at + 16..(at + 16 + len).min(pcap.len())];
        at += 16 + len;
        if frame.len() < 14 + 20 || frame[12..14] != [0x08, 0x00] {
            continue;
        }
        let ip = &frame[14..];
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]])).min(ip.len());
        if ip[9] != 6 || total < ihl + 20 {
            continue;
        }
        let tcp = &ip[ihl..total];
        let off = usize::from(tcp[12] >> 4) * 4;
        let flags = tcp[13];
        let (mut src, mut dst) = ([0u8; 6], [0u8; 6]);
        src[..4].copy_from_slice(&ip[12..16]);
        src[4..].copy_from_slice(&tcp[0..2]);
        dst[..4].copy_from_slice(&ip[16..20]);
        dst[4..].copy_from_slice(&tcp[2..4]);
        let payload = tcp.get(off..).unwrap_or(&[]);
        match conn {
            None if flags & 0x12 == 0x02 => {
                conn = Some((src, dst));
                next = be32(tcp, 4).wrapping_add(1);
            }
            Some((c, s)) if src == c && dst == s && !payload.is_empty() => {
                let seq = be32(tcp, 4);
                let skip = next.wrapping_sub(seq) as usize;
                if seq == next || (skip > 0 && skip < payload.len()) {
                    let skip = if seq == next { 0 } else { skip };
                    out.extend_from_slice(&payload[skip..]);
                    next = seq.wrapping_add(payload.len() as u32);
                }
            }
            Some((c, s)) if src == s && dst == c && !payload.is_empty() => break,
            _ => {}
        }
    }
    assert!(conn.is_some(), "no SYN in the pcap");
    out
}

/// The resident set size of this process, in bytes (`/proc/self/status` VmRSS).
pub fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .expect("VmRSS in /proc/self/status")
}

/// Runs `curl ARGS...` in `ns`; returns (exit code, stdout, stderr).
pub fn curl(ns: &Netns, args: &[&str]) -> (i32, String, String) {
    let mut a = vec!["curl", "--max-time", "10"];
    a.extend_from_slice(args);
    let o = ns.try_exec(&a);
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subject_cn_reads_openssl_and_curl() {
        assert_eq!(
            subject_cn("---\nsubject=CN = a.example.test\nissuer=CN = a.example.test\n"),
            Some("a.example.test".into())
        );
        assert_eq!(
            subject_cn("*  subject: O=x, CN=b.example.test\n*  start date"),
            Some("b.example.test".into())
        );
        assert_eq!(subject_cn("no certificate"), None);
    }
}
