//! Mutual TLS through sluice with real clients, on the rig of `sluice_tests::tls_rig`
//! (client 10.77.0.1 -> VIP 10.77.0.10 on a TAP port; the python HTTP/1.1 servers on
//! backends a and b). An Istio Gateway terminates HTTPS with client certificates:
//!
//! - port 443, `MUTUAL`: the client CA from the `credentialName` Secret's `ca.crt`,
//!   `subjectAltNames: [spiffe://ks/client]`, `minProtocolVersion: TLSV1_3`;
//! - port 8443, `OPTIONAL_MUTUAL`, the same CA.
//!
//! `curl` with no certificate, with one from another CA, with one whose SAN is not listed,
//! with the right one (the backend sees `X-Forwarded-Client-Cert` in Envoy's format, and
//! not the one the client sent), and limited to TLS 1.2; `OPTIONAL_MUTUAL` with and
//! without a certificate. The PKI is made with `openssl` for the test.

use sluice_dataplane::stats::Event;
use sluice_tests::kernel::{Py, BACKENDS, VIP};
use sluice_tests::kernel_tls::{curl, require_programs, wait_listening, Certs, Key};
use sluice_tests::sys::must;
use sluice_tests::tls_rig::{inventory, Rig, HTTP_PORT};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The HTTP/1.1 backends (python; see the script's docstring).
const HTTP11_SERVER: &str = include_str!("../src/py/http11_server.py");
const HOST: &str = "www.example.test";
const SPIFFE: &str = "spiffe://ks/client";

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// A CA `name` (`<name>.crt`, `<name>.key`) in `dir`.
fn ca(dir: &Path, name: &str) -> PathBuf {
    let (crt, key) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    must(
        "openssl",
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            p(&key),
            "-out",
            p(&crt),
        ],
    );
    crt
}

/// A client certificate `name` with subject CN `name` and URI SAN `uri`, signed by CA
/// `by`: its certificate and key.
fn client(dir: &Path, name: &str, uri: &str, by: &str) -> (PathBuf, PathBuf) {
    let f = |ext: &str| dir.join(format!("{name}.{ext}"));
    let (crt, key, csr, ext) = (f("crt"), f("key"), f("csr"), f("ext"));
    must(
        "openssl",
        &[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            p(&key),
            "-out",
            p(&csr),
        ],
    );
    std::fs::write(
        &ext,
        format!(
            "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n\
             extendedKeyUsage=clientAuth\nsubjectAltName=URI:{uri}\n"
        ),
    )
    .expect("extensions");
    let (ca_crt, ca_key) = (dir.join(format!("{by}.crt")), dir.join(format!("{by}.key")));
    must(
        "openssl",
        &[
            "x509",
            "-req",
            "-days",
            "2",
            "-sha256",
            "-in",
            p(&csr),
            "-CA",
            p(&ca_crt),
            "-CAkey",
            p(&ca_key),
            "-CAcreateserial",
            "-extfile",
            p(&ext),
            "-out",
            p(&crt),
        ],
    );
    (crt, key)
}

/// The lower-case hex SHA-256 of a PEM certificate's DER (XFCC's `Hash`).
fn der_sha256(crt: &Path) -> String {
    let out = must(
        "openssl",
        &["x509", "-in", p(crt), "-noout", "-fingerprint", "-sha256"],
    );
    out.trim()
        .rsplit('=')
        .next()
        .unwrap_or("")
        .replace(':', "")
        .to_ascii_lowercase()
}

fn config(certs: &Certs, client_ca: &Path) -> String {
    let b64 = |path: &Path| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .encode(std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
    };
    format!(
        r#"{inv}---
apiVersion: v1
kind: Secret
metadata: {{name: www-cert, namespace: ks}}
data:
  tls.crt: {crt}
  tls.key: {key}
  ca.crt: {ca}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: web, namespace: ks}}
spec:
  servers:
  - port: {{number: 443, name: https-mutual, protocol: HTTPS}}
    hosts: [{HOST}]
    tls:
      mode: MUTUAL
      credentialName: www-cert
      subjectAltNames: [{SPIFFE}]
      minProtocolVersion: TLSV1_3
  - port: {{number: 8443, name: https-optional, protocol: HTTPS}}
    hosts: [{HOST}]
    tls: {{mode: OPTIONAL_MUTUAL, credentialName: www-cert}}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: www, namespace: ks}}
spec:
  hosts: [{HOST}]
  gateways: [web]
  http:
  - route: [{{destination: {{host: a, port: {{number: {HTTP_PORT}}}}}}}]
"#,
        inv = inventory(HTTP_PORT),
        crt = b64(&certs.crt("www")),
        key = b64(&certs.key("www")),
        ca = b64(client_ca),
    )
}

/// The HTTP/1.1 servers on backends a and b, once a listens.
fn http_servers(rig: &Rig) -> Py {
    let port = HTTP_PORT.to_string();
    let mut servers = Py::start(
        &rig.topo.backend,
        HTTP11_SERVER,
        &[&port, BACKENDS[0], BACKENDS[1]],
    );
    assert_eq!(servers.line(Duration::from_secs(10)), "ready");
    wait_listening(&rig.topo.backend, BACKENDS[0], HTTP_PORT);
    servers
}

#[test]
fn client_certificates_with_curl() {
    require_programs(&["curl", "openssl"]);
    let certs = Certs::empty();
    certs.make("www", HOST, &[HOST], Key::P256);
    let dir = certs.dir.0.clone();
    let client_ca = ca(&dir, "client-ca");
    ca(&dir, "other-ca");
    let good = client(&dir, "client", SPIFFE, "client-ca");
    let stranger = client(&dir, "stranger", SPIFFE, "other-ca");
    let unlisted = client(&dir, "unlisted", "spiffe://ks/other", "client-ca");

    let rig = Rig::start(&config(&certs, &client_ca));
    let servers = http_servers(&rig);

    let bundle = certs.bundle();
    let get = |port: u16, cert: Option<&(PathBuf, PathBuf)>, extra: &[&str]| {
        let resolve = format!("{HOST}:{port}:{VIP}");
        let url = format!("https://{HOST}:{port}/who");
        let mut args = vec!["-s", "--cacert", p(&bundle), "--resolve", &resolve];
        if let Some((crt, key)) = cert {
            args.extend(["--cert", p(crt), "--key", p(key)]);
        }
        args.extend(extra);
        args.push(&url);
        curl(&rig.topo.client, &args)
    };
    let hash = der_sha256(&good.0);
    let xfcc = format!("xfcc Hash={hash};Subject=\"CN=client\";URI={SPIFFE}");

    // MUTUAL: refused without a certificate, with another CA's, with a SAN not listed,
    // and below TLS 1.3.
    for (what, cert, extra) in [
        ("no certificate", None, &[][..]),
        ("another CA", Some(&stranger), &[][..]),
        ("a SAN not listed", Some(&unlisted), &[][..]),
        ("TLS 1.2", Some(&good), &["--tls-max", "1.2"][..]),
    ] {
        let (code, out, err) = get(443, cert, extra);
        assert_ne!(code, 0, "{what}: answered: {out}");
        assert!(!out.contains("backend"), "{what}: {out} {err}");
    }
    // The right certificate: the backend learns who it is, and only from sluice.
    let (code, out, err) = get(
        443,
        Some(&good),
        &["-H", "X-Forwarded-Client-Cert: By=forged"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with(&format!("backend {} host {HOST}", BACKENDS[0])),
        "{out}"
    );
    assert!(out.trim_end().ends_with(&xfcc), "{out}");
    assert!(!out.contains("forged"), "{out}");
    // OPTIONAL_MUTUAL: in without a certificate (no XFCC), verified with one.
    let (code, out, err) = get(8443, None, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("backend") && !out.contains("xfcc"), "{out}");
    let (code, out, err) = get(8443, Some(&good), &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.trim_end().ends_with(&xfcc), "{out}");
    let (code, out, _) = get(8443, Some(&stranger), &[]);
    assert_ne!(code, 0, "a certificate presented is verified: {out}");

    drop(servers);
    let c = rig.finish();
    assert_eq!(c.events_of(Event::TerminateHandshake), 3, "{c:?}");
    assert_eq!(c.events_of(Event::TlsClientCertMissing), 1, "{c:?}");
    assert_eq!(c.events_of(Event::TlsClientCertUntrusted), 2, "{c:?}");
    assert_eq!(c.events_of(Event::TlsClientCertPinMismatch), 1, "{c:?}");
    assert_eq!(c.events_of(Event::TlsVersionRefused), 1, "{c:?}");
}

/// CA rotation by reload: the Secret's `ca.crt` changes from one client CA to another;
/// the old CA's clients are refused from the next handshake on (no resumption across the
/// change: tickets of a verifying listener end with its generation), the new CA's are
/// let in.
#[test]
fn a_reload_rotates_the_client_ca() {
    require_programs(&["curl", "openssl"]);
    let certs = Certs::empty();
    certs.make("www", HOST, &[HOST], Key::P256);
    let dir = certs.dir.0.clone();
    let old_ca = ca(&dir, "old-ca");
    let new_ca = ca(&dir, "new-ca");
    let old_client = client(&dir, "old-client", SPIFFE, "old-ca");
    let new_client = client(&dir, "new-client", SPIFFE, "new-ca");

    let mut rig = Rig::start(&config(&certs, &old_ca));
    let servers = http_servers(&rig);
    let bundle = certs.bundle();
    let passes = |rig: &Rig, (crt, key): &(PathBuf, PathBuf)| {
        let resolve = format!("{HOST}:443:{VIP}");
        let url = format!("https://{HOST}/who");
        let args = [
            "-s",
            "--cacert",
            p(&bundle),
            "--resolve",
            &resolve,
            "--cert",
            p(crt),
            "--key",
            p(key),
            &url,
        ];
        let (code, out, _) = curl(&rig.topo.client, &args);
        code == 0 && out.contains("backend")
    };
    assert!(passes(&rig, &old_client), "the old CA's client, before");
    assert!(!passes(&rig, &new_client), "the new CA's client, before");
    rig.balance
        .reload(&config(&certs, &new_ca))
        .unwrap_or_else(|e| panic!("reload: {e:?}"));
    assert!(!passes(&rig, &old_client), "the old CA's client, after");
    assert!(passes(&rig, &new_client), "the new CA's client, after");
    drop(servers);
    let c = rig.finish();
    assert_eq!(c.events_of(Event::TerminateHandshake), 2, "{c:?}");
    assert_eq!(c.events_of(Event::TlsClientCertUntrusted), 2, "{c:?}");
}
