//! TLS termination through sluice with real programs, on the rig of
//! `sluice_tests::tls_rig` (client 10.77.0.1 -> VIP 10.77.0.10 on a TAP port; plain
//! backends 10.78.0.11, .12 behind the other): sluice holds the certificates (Kubernetes
//! `kubernetes.io/tls` Secrets), decrypts, and opens plain TCP connections to the
//! backends from its own address.
//!
//! - `openssl s_client -servername` for an exact name, a wildcard name and an unknown
//!   name receives the exact certificate, the wildcard one and the listener's default (a
//!   name two labels under the wildcard gets the default too);
//!   TLS 1.2 and 1.3 with ECDSA P-256 and RSA-2048 (PKCS#1) keys.
//! - `curl --cacert --resolve` over HTTPS (Istio SIMPLE, `credentialName`) to plain-HTTP
//!   backends that print what they received: Host and path intact, routed by path.
//! - 50 MB each way through one terminated connection, echoed byte for byte.
//! - Python `ssl` clients resume by ticket (TLS 1.3 and 1.2).
//! - The Secret rotated by a reload while a long transfer runs: the transfer finishes
//!   with the old certificate, new handshakes get the new one.
//! - `openssl s_client -cert` against `frontendValidation`: the CA's client in, clients
//!   without a certificate or of another CA refused and counted by reason.

use base64::Engine as _;
use sluice_dataplane::stats::Event;
use sluice_tests::kernel::{Py, BACKENDS, IDENTIFY_SERVER, PORT, VIP};
use sluice_tests::kernel_tls::{curl, subject_cn, wait_listening, Certs, Key};
use sluice_tests::sys::Netns;
use sluice_tests::tls_rig::{inventory, Rig, AGENT_LIMIT, HTTP_PORT};
use std::time::Duration;

/// A `kubernetes.io/tls` Secret `name` in namespace `ks` holding `certs`'s `file`
/// certificate and key.
fn secret(name: &str, certs: &Certs, file: &str) -> String {
    let b64 = |p: std::path::PathBuf| {
        base64::engine::general_purpose::STANDARD
            .encode(std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
    };
    format!(
        r#"---
apiVersion: v1
kind: Secret
metadata: {{name: {name}, namespace: ks}}
type: kubernetes.io/tls
data:
  tls.crt: {}
  tls.key: {}
"#,
        b64(certs.crt(file)),
        b64(certs.key(file))
    )
}

/// A Gateway API Gateway on the VIP with a TLS listener `tls` on 443 in Terminate mode
/// with `refs` (Secrets, in order: the first is the default), and a TLSRoute without
/// hostnames sending every name to backend `a` on [`PORT`] (the identify servers).
fn terminate_gateway(refs: &[&str]) -> String {
    let refs: Vec<String> = refs.iter().map(|r| format!("{{name: {r}}}")).collect();
    format!(
        r#"---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: ks}}
spec:
  gatewayClassName: sluice
  addresses: [{{type: IPAddress, value: {VIP}}}]
  listeners:
  - name: tls
    port: 443
    protocol: TLS
    tls: {{mode: Terminate, certificateRefs: [{refs}]}}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {{name: all, namespace: ks}}
spec:
  parentRefs: [{{name: gw, sectionName: tls}}]
  rules: [{{backendRefs: [{{name: a, port: {PORT}}}]}}]
"#,
        refs = refs.join(", ")
    )
}

/// `openssl s_client` from `ns` to VIP:443 naming `sni`, with `extra` arguments; the
/// subject CN of the certificate received and the protocol (`TLSv1.3`), or the output.
fn s_client(ns: &Netns, sni: &str, extra: &str) -> Result<(String, String), String> {
    let o = ns.try_exec(&[
        "sh",
        "-c",
        &format!(
            "timeout 10 openssl s_client -connect {VIP}:443 -servername {sni} {extra} </dev/null"
        ),
    ]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let cn = subject_cn(&text).ok_or_else(|| text.clone())?;
    // "New, TLSv1.3, Cipher is ..."
    let proto = text
        .lines()
        .find_map(|l| l.strip_prefix("New, "))
        .and_then(|l| l.split(',').next())
        .map(|p| p.trim().to_string())
        .ok_or_else(|| text.clone())?;
    Ok((cn, proto))
}

/// The identify servers on the backends, port [`PORT`].
fn identify_servers(rig: &Rig) -> Py {
    let port = PORT.to_string();
    let mut py = Py::start(
        &rig.topo.backend,
        IDENTIFY_SERVER,
        &[&port, BACKENDS[0], BACKENDS[1]],
    );
    assert_eq!(py.line(Duration::from_secs(10)), "ready");
    wait_listening(&rig.topo.backend, BACKENDS[0], PORT);
    py
}

#[test]
fn openssl_receives_the_certificate_its_sni_selects_over_tls12_and_tls13_with_both_key_types() {
    let certs = Certs::empty();
    certs.make(
        "default",
        "default.example.test",
        &["default.example.test"],
        Key::P256,
    );
    certs.make("exact", "a.example.test", &["a.example.test"], Key::Rsa2048);
    certs.make("wild", "wild.example.test", &["*.example.test"], Key::P256);
    let config = format!(
        "{}{}{}{}{}",
        inventory(PORT),
        secret("default-cert", &certs, "default"),
        secret("exact-cert", &certs, "exact"),
        secret("wild-cert", &certs, "wild"),
        terminate_gateway(&["default-cert", "exact-cert", "wild-cert"]),
    );
    let rig = Rig::start(&config);
    let _servers = identify_servers(&rig);
    let client = &rig.topo.client;
    for (sni, cn) in [
        ("a.example.test", "a.example.test"),
        ("A.Example.Test", "a.example.test"),
        ("b.example.test", "wild.example.test"),
        // A wildcard SAN covers one label (RFC 6125, as clients check it).
        ("x.y.example.test", "default.example.test"),
        ("unknown.other.test", "default.example.test"),
    ] {
        for (flag, proto) in [("-tls1_3", "TLSv1.3"), ("-tls1_2", "TLSv1.2")] {
            let got = s_client(client, sni, flag);
            assert_eq!(got, Ok((cn.to_string(), proto.to_string())), "{sni} {flag}");
        }
    }
    let c = rig.finish();
    assert_eq!(c.events_of(Event::TerminateHandshake), 10, "{c:?}");
}

#[test]
fn curl_over_https_reaches_plain_http_backends_with_the_request_intact() {
    let certs = Certs::empty();
    certs.make("www", "www.example.test", &["www.example.test"], Key::P256);
    let config = format!(
        "{}{}{}",
        inventory(HTTP_PORT),
        secret("www-cert", &certs, "www"),
        r#"---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: web, namespace: ks}
spec:
  servers:
  - port: {number: 443, name: https, protocol: HTTPS}
    hosts: [www.example.test]
    tls: {mode: SIMPLE, credentialName: www-cert}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: www, namespace: ks}
spec:
  hosts: [www.example.test]
  gateways: [web]
  http:
  - match: [{uri: {prefix: /api/}}]
    route: [{destination: {host: b, port: {number: 8080}}}]
  - route: [{destination: {host: a, port: {number: 8080}}}]
"#
    );
    let rig = Rig::start(&config);
    let servers = rig.http_servers();
    let ca = certs.bundle();
    for (path, backend) in [
        ("/index.html", BACKENDS[0]),
        ("/api/orders?id=7", BACKENDS[1]),
    ] {
        let (code, body, err) = curl(
            &rig.topo.client,
            &[
                "-s",
                "--cacert",
                ca.to_str().expect("path"),
                "--resolve",
                &format!("www.example.test:443:{VIP}"),
                &format!("https://www.example.test{path}"),
            ],
        );
        assert_eq!(code, 0, "curl https://www.example.test{path}: {err}");
        assert_eq!(
            body.trim(),
            format!("backend {backend} host www.example.test path {path}")
        );
    }
    drop(servers);
    let c = rig.finish();
    assert_eq!(c.events_of(Event::TerminateHandshake), 2, "{c:?}");
    assert_eq!(c.events_of(Event::TerminateBackendConnected), 2, "{c:?}");
}

#[test]
fn fifty_megabytes_each_way_and_resumed_handshakes() {
    const BYTES: u64 = 50_000_000;
    let certs = Certs::new(&["a"]);
    let config = format!(
        "{}{}{}",
        inventory(PORT),
        secret("a-cert", &certs, "a"),
        terminate_gateway(&["a-cert"]),
    );
    let rig = Rig::start(&config);
    let _servers = identify_servers(&rig);
    let mut agent = rig.tls_client(&certs);
    let v = agent.cmd(&format!("bulk 443 a.example.test {BYTES} 120"), AGENT_LIMIT);
    eprintln!("bulk: {v}");
    assert_eq!(v["error"], serde_json::Value::Null, "{v}");
    assert_eq!(v["cert"], "a.example.test", "{v}");
    assert_eq!(
        v["body"], BACKENDS[0],
        "the identify line of backend a: {v}"
    );
    assert_eq!(v["echoed"], BYTES, "{v}");
    assert_eq!(v["echo_ok"], true, "echoed byte for byte: {v}");
    let v = agent.cmd("resume 443 a.example.test 20", AGENT_LIMIT);
    eprintln!("resume: {v}");
    assert_eq!(v["error"], serde_json::Value::Null, "{v}");
    assert_eq!(v["first_reused"], false, "{v}");
    assert_eq!(v["second_reused"], true, "resumed by ticket: {v}");
    drop(agent);
    let c = rig.finish();
    assert_eq!(c.events_of(Event::TerminateResumed), 1, "{c:?}");
}

#[test]
fn a_rotated_secret_serves_new_handshakes_and_the_running_transfer_finishes() {
    const BYTES: u64 = 30_000_000;
    let certs = Certs::empty();
    certs.make("old", "a.example.test", &["a.example.test"], Key::P256);
    certs.make("new", "a.example.test", &["a.example.test"], Key::Rsa2048);
    let config = |file: &str| {
        format!(
            "{}{}{}",
            inventory(PORT),
            secret("a-cert", &certs, file),
            terminate_gateway(&["a-cert"]),
        )
    };
    let mut rig = Rig::start(&config("old"));
    let _servers = identify_servers(&rig);
    let fingerprint = |file: &str| {
        let out = sluice_tests::sys::must(
            "openssl",
            &[
                "x509",
                "-noout",
                "-fingerprint",
                "-sha256",
                "-in",
                certs.crt(file).to_str().expect("path"),
            ],
        );
        out.trim().to_string()
    };
    let served = |rig: &Rig| {
        let out = rig
            .topo
            .client
            .try_exec(&[
                "sh",
                "-c",
                &format!(
                    "timeout 10 openssl s_client -connect {VIP}:443 -servername a.example.test \
                     </dev/null 2>/dev/null | openssl x509 -noout -fingerprint -sha256"
                ),
            ])
            .stdout;
        String::from_utf8_lossy(&out).trim().to_string()
    };
    assert_eq!(served(&rig), fingerprint("old"));
    let mut agent = rig.tls_client(&certs);
    let cmd = format!("bulk 443 a.example.test {BYTES} 120");
    agent.send(&cmd);
    // The transfer is under way; the Secret changes.
    std::thread::sleep(Duration::from_millis(300));
    rig.balance.reload(&config("new")).expect("reload");
    assert_eq!(served(&rig), fingerprint("new"), "new handshakes");
    let v = agent.answer(&cmd, AGENT_LIMIT);
    eprintln!("bulk across the reload: {v}");
    assert_eq!(v["error"], serde_json::Value::Null, "{v}");
    assert_eq!(v["echo_ok"], true, "{v}");
    drop(agent);
    let c = rig.finish();
    assert_eq!(c.events_of(Event::TerminateHandshake), 3, "{c:?}");
}

/// Client certificates (issue #33) with `openssl s_client`: a Gateway API listener
/// with `frontendValidation` (a ConfigMap's `ca.crt`) lets in the client whose
/// certificate its CA signed and refuses, counted by reason, a client without one and a
/// client of another CA, in TLS 1.2 and 1.3.
#[test]
fn openssl_clients_with_and_without_certificates_meet_frontend_validation() {
    let certs = Certs::empty();
    certs.make("server", "a.example.test", &["a.example.test"], Key::P256);
    // The client PKI (rcgen), in the same scratch directory.
    let ca = |name: &str| {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        p.distinguished_name.push(rcgen::DnType::CommonName, name);
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        (p.self_signed(&key).expect("ca"), key)
    };
    let (trusted, trusted_key) = ca("client CA");
    let (other, other_key) = ca("other CA");
    let dir = std::path::PathBuf::from(certs.dir_str());
    for (name, ca, ca_key) in [
        ("good", &trusted, &trusted_key),
        ("stranger", &other, &other_key),
    ] {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        p.distinguished_name.push(rcgen::DnType::CommonName, name);
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let cert = p.signed_by(&key, ca, ca_key).expect("client");
        std::fs::write(dir.join(format!("{name}-client.crt")), cert.pem()).expect("write");
        std::fs::write(dir.join(format!("{name}-client.key")), key.serialize_pem()).expect("write");
    }
    let ca_pem: String = trusted
        .pem()
        .lines()
        .map(|l| format!("    {l}\n"))
        .collect();
    let config = format!(
        r#"{}{}---
apiVersion: v1
kind: ConfigMap
metadata: {{name: client-ca, namespace: ks}}
data:
  ca.crt: |
{ca_pem}---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: ks}}
spec:
  gatewayClassName: sluice
  addresses: [{{type: IPAddress, value: {VIP}}}]
  listeners:
  - name: tls
    port: 443
    protocol: TLS
    tls:
      mode: Terminate
      certificateRefs: [{{name: server-cert}}]
      frontendValidation:
        caCertificateRefs: [{{group: "", kind: ConfigMap, name: client-ca}}]
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata: {{name: all, namespace: ks}}
spec:
  parentRefs: [{{name: gw, sectionName: tls}}]
  rules: [{{backendRefs: [{{name: a, port: {PORT}}}]}}]
"#,
        inventory(PORT),
        secret("server-cert", &certs, "server"),
    );
    let rig = Rig::start(&config);
    let _servers = identify_servers(&rig);
    let client = &rig.topo.client;
    for flag in ["-tls1_3", "-tls1_2"] {
        for who in [None, Some("good"), Some("stranger")] {
            let cert = who.map_or(String::new(), |w| {
                format!(
                    "-cert {d}/{w}-client.crt -key {d}/{w}-client.key",
                    d = dir.display()
                )
            });
            // The verdict is read from sluice's counters: in TLS 1.3 the client
            // finishes before the server has seen its certificate.
            let _ = s_client(client, "a.example.test", &format!("{flag} {cert}"));
        }
    }
    let c = rig.finish();
    let seen: Vec<(&str, u64)> = [
        Event::TerminateHandshake,
        Event::TerminateTlsFailed,
        Event::TlsClientCertMissing,
        Event::TlsClientCertUntrusted,
        Event::TerminateAccepted,
    ]
    .iter()
    .map(|e| (e.name(), c.events_of(*e)))
    .collect();
    // Each refused connection counted once (rustls repeats its error on every later
    // read: the engine counts the first).
    assert_eq!(c.events_of(Event::TerminateHandshake), 2, "{seen:?}");
    assert_eq!(c.events_of(Event::TlsClientCertMissing), 2, "{seen:?}");
    assert_eq!(c.events_of(Event::TlsClientCertUntrusted), 2, "{seen:?}");
    assert_eq!(c.events_of(Event::TerminateTlsFailed), 4, "{seen:?}");
}
