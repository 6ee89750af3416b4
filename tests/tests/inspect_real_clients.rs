//! First-payload parsers against hellos and requests that real clients make at test time:
//! `openssl s_client`, `curl` and Python's `ssl` for TLS, `curl` for plain HTTP/1.1 (origin
//! and absolute form) and HTTP/2 prior knowledge.
//!
//! Each test opens a TCP listener on 127.0.0.1, starts the client against it, reads what
//! the client sends until `inspect::classify` has a verdict, closes the connection (the
//! TLS clients then fail their handshake, which is expected) and checks the verdict. The
//! tools are installed by `scripts/setup`; a missing tool fails the test.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sluice_dataplane::inspect::http::{HostSource, TargetForm};
use sluice_dataplane::inspect::name::Host;
use sluice_dataplane::inspect::tls::ServerName;
use sluice_dataplane::inspect::{classify, Inspected};

/// Safety net only (a stuck client must not hang the suite); nothing is timed.
const DEADLINE: Duration = Duration::from_secs(30);

/// A client process that is killed when the test is done with it.
struct Client(Child);

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(program: &str, args: &[String]) -> Client {
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program} (scripts/setup installs it): {e}"));
    Client(child)
}

fn accept(listener: &TcpListener, client: &mut Client) -> TcpStream {
    listener.set_nonblocking(true).unwrap();
    let start = Instant::now();
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).unwrap();
                return stream;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if let Ok(Some(status)) = client.0.try_wait() {
                    panic!("client exited ({status}) before connecting");
                }
                assert!(start.elapsed() < DEADLINE, "client never connected");
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

/// Reads from `stream` until `classify` gives a verdict; returns the bytes read.
fn read_first_bytes(stream: &mut TcpStream) -> Vec<u8> {
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Inspected::NeedMore { at_least } = classify(&buf) {
            assert!(at_least > buf.len());
            let n = stream.read(&mut chunk).expect("read from client");
            assert!(
                n > 0,
                "client closed after {} bytes without a verdict",
                buf.len()
            );
            buf.extend_from_slice(&chunk[..n]);
        } else {
            return buf;
        }
    }
}

/// Runs a client built from the listener's port; returns the first bytes it sent.
/// `reply` is written back before closing (for HTTP clients, to end them cleanly).
fn capture(program: &str, args: impl Fn(u16) -> Vec<String>, reply: &[u8]) -> Vec<u8> {
    capture_with_port(program, args, reply).0
}

/// [`capture`], also returning the listener's port.
fn capture_with_port(
    program: &str,
    args: impl Fn(u16) -> Vec<String>,
    reply: &[u8],
) -> (Vec<u8>, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut client = spawn(program, &args(port));
    let mut stream = accept(&listener, &mut client);
    let bytes = read_first_bytes(&mut stream);
    let _ = stream.write_all(reply);
    drop(stream);
    drop(client);
    (bytes, port)
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

struct Tls {
    server_name: ServerName,
    sni: Option<String>,
    alpn: Vec<String>,
    versions: Vec<u16>,
}

fn tls(bytes: &[u8]) -> Tls {
    match classify(bytes) {
        Inspected::Tls(h) => Tls {
            server_name: h.server_name,
            sni: h.routing_name().map(|n| n.to_string()),
            alpn: h
                .alpn
                .iter()
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect(),
            versions: h.supported_versions.as_slice().to_vec(),
        },
        other => panic!("expected a ClientHello, got {other:?}"),
    }
}

#[test]
fn openssl_s_client() {
    let bytes = capture(
        "openssl",
        |port| {
            args(&[
                "s_client",
                "-connect",
                &format!("127.0.0.1:{port}"),
                "-servername",
                "OpenSSL.Sluice.Test",
                "-alpn",
                "h2,http/1.1",
            ])
        },
        b"",
    );
    let h = tls(&bytes);
    assert_eq!(h.sni.as_deref(), Some("openssl.sluice.test"));
    assert_eq!(h.alpn, ["h2", "http/1.1"]);
    assert!(h.versions.contains(&0x0304), "OpenSSL 3 offers TLS 1.3");
}

#[test]
fn openssl_s_client_ip_literal_sni_is_not_a_routing_name() {
    let bytes = capture(
        "openssl",
        |port| {
            args(&[
                "s_client",
                "-connect",
                &format!("127.0.0.1:{port}"),
                "-servername",
                "192.0.2.10",
            ])
        },
        b"",
    );
    let h = tls(&bytes);
    assert_eq!(
        h.server_name,
        ServerName::IpLiteral("192.0.2.10".parse().unwrap())
    );
    assert_eq!(h.sni, None);
}

#[test]
fn curl_https_offers_h2_and_http11() {
    let bytes = capture(
        "curl",
        |port| {
            args(&[
                "-sk",
                "--max-time",
                "20",
                "--resolve",
                &format!("curl.sluice.test:{port}:127.0.0.1"),
                &format!("https://curl.sluice.test:{port}/"),
            ])
        },
        b"",
    );
    let h = tls(&bytes);
    assert_eq!(h.sni.as_deref(), Some("curl.sluice.test"));
    assert_eq!(h.alpn, ["h2", "http/1.1"]);
}

#[test]
fn curl_https_http11_only() {
    let bytes = capture(
        "curl",
        |port| {
            args(&[
                "-sk",
                "--http1.1",
                "--max-time",
                "20",
                "--resolve",
                &format!("h1.sluice.test:{port}:127.0.0.1"),
                &format!("https://h1.sluice.test:{port}/"),
            ])
        },
        b"",
    );
    let h = tls(&bytes);
    assert_eq!(h.sni.as_deref(), Some("h1.sluice.test"));
    assert_eq!(h.alpn, ["http/1.1"]);
}

#[test]
fn python_ssl_server_hostname() {
    let script = "import ssl, socket, sys\n\
                  ctx = ssl.create_default_context()\n\
                  ctx.set_alpn_protocols(['h2', 'http/1.1'])\n\
                  s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n\
                  try:\n    ctx.wrap_socket(s, server_hostname='Python.Sluice.Test')\n\
                  except Exception:\n    pass\n";
    let bytes = capture(
        "python3",
        |port| args(&["-c", script, &port.to_string()]),
        b"",
    );
    let h = tls(&bytes);
    assert_eq!(h.sni.as_deref(), Some("python.sluice.test"));
    assert_eq!(h.alpn, ["h2", "http/1.1"]);
    assert!(h.versions.contains(&0x0304));
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

#[test]
fn curl_plain_http_host_header() {
    let (bytes, port) = capture_with_port(
        "curl",
        |port| {
            args(&[
                "-s",
                "--max-time",
                "20",
                "--resolve",
                &format!("Plain.Sluice.Test:{port}:127.0.0.1"),
                &format!("http://Plain.Sluice.Test:{port}/some/path?q=1"),
            ])
        },
        OK,
    );
    match classify(&bytes) {
        Inspected::Http(h) => {
            assert_eq!(h.method, "GET");
            assert_eq!(h.path, "/some/path");
            assert_eq!(h.form, TargetForm::Origin);
            assert_eq!(h.routing_name().unwrap().as_str(), "plain.sluice.test");
            assert_eq!(h.host_source, Some(HostSource::Header));
            assert_eq!(
                h.port,
                Some(port),
                "curl sends the non-default port in Host"
            );
        }
        other => panic!("expected a request head, got {other:?}"),
    }
}

#[test]
fn curl_through_a_proxy_sends_absolute_form() {
    let bytes = capture(
        "curl",
        |port| {
            args(&[
                "-s",
                "--max-time",
                "20",
                "-x",
                &format!("http://127.0.0.1:{port}"),
                "http://proxied.sluice.test:8081/x",
            ])
        },
        OK,
    );
    match classify(&bytes) {
        Inspected::Http(h) => {
            assert_eq!(h.form, TargetForm::Absolute);
            assert_eq!(h.target, "http://proxied.sluice.test:8081/x");
            assert_eq!(h.path, "/x");
            assert_eq!(h.routing_name().unwrap().as_str(), "proxied.sluice.test");
            assert_eq!(h.port, Some(8081));
            assert_eq!(h.host_source, Some(HostSource::Target));
        }
        other => panic!("expected a request head, got {other:?}"),
    }
}

#[test]
fn curl_ipv6_literal_host() {
    let listener = match TcpListener::bind("[::1]:0") {
        Ok(l) => l,
        Err(e) => panic!("IPv6 loopback unavailable: {e}"),
    };
    let port = listener.local_addr().unwrap().port();
    let mut client = spawn(
        "curl",
        &args(&["-s", "--max-time", "20", &format!("http://[::1]:{port}/v6")]),
    );
    let mut stream = accept(&listener, &mut client);
    let bytes = read_first_bytes(&mut stream);
    let _ = stream.write_all(OK);
    match classify(&bytes) {
        Inspected::Http(h) => {
            assert_eq!(h.host, Some(Host::Ip("::1".parse().unwrap())));
            assert_eq!(h.port, Some(port));
            assert_eq!(h.routing_name(), None);
        }
        other => panic!("expected a request head, got {other:?}"),
    }
}

#[test]
fn curl_http2_prior_knowledge() {
    let bytes = capture(
        "curl",
        |port| {
            args(&[
                "-s",
                "--max-time",
                "20",
                "--http2-prior-knowledge",
                &format!("http://127.0.0.1:{port}/"),
            ])
        },
        b"",
    );
    assert_eq!(classify(&bytes), Inspected::H2Preface);
    assert_eq!(classify(&bytes).host(), None);
}
