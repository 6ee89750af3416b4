//! TLS termination, control-plane side: certificates from Secrets and files loaded and
//! checked, bad ones reported not served (the Secret named) with the rest served, the
//! SNI choosing the certificate, and real rustls handshakes against the compiled
//! `TlsListener` configurations (fixtures: `tests/data/tls/`, see its README).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, HandshakeKind, RootCertStore, ServerConnection};
use serde_json::Value;
use sluice_ctrl::compile::{build, Built};
use sluice_ctrl::explain::{explain, Query};
use sluice_ctrl::load::{load_str, Loaded};
use sluice_dataplane::tables::listeners::proto;

fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/tls")
        .join(name)
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(fixture_path(name)).expect("fixture")
}

/// The PEM of a fixture indented as a YAML block scalar at `indent` spaces.
fn block(name: &str, indent: usize) -> String {
    let pad = " ".repeat(indent);
    fixture(name)
        .lines()
        .map(|l| format!("{pad}{l}\n"))
        .collect()
}

/// A `kubernetes.io/tls` Secret with a fixture certificate and key.
fn secret(ns: &str, name: &str, crt: &str, key: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {ns}}}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
        block(crt, 4),
        block(key, 4)
    )
}

const BACKEND: &str = r#"
---
apiVersion: v1
kind: Service
metadata: {name: app, namespace: default}
spec: {selector: {app: app}, ports: [{port: 8080}]}
---
apiVersion: v1
kind: Pod
metadata: {name: app-0, namespace: default, labels: {app: app}}
status: {podIP: 10.80.0.5}
"#;

fn built(text: &str) -> Built {
    let mut loaded = Loaded::default();
    load_str("tls.yaml", &format!("{text}{BACKEND}"), &mut loaded);
    build(loaded).unwrap_or_else(|d| panic!("rejected: {:#?}", d.error_lines()))
}

/// A Gateway API Gateway at `address` with listeners `(name, port, protocol, hostname,
/// certificateRefs as YAML flow)`.
fn gateway(
    name: &str,
    address: &str,
    listeners: &[(&str, u16, &str, Option<&str>, &str)],
) -> String {
    let mut s = format!(
        "---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  gatewayClassName: sluice\n  addresses: [{{value: {address}}}]\n  listeners:\n"
    );
    for (n, port, protocol, host, refs) in listeners {
        s.push_str(&format!(
            "  - name: {n}\n    port: {port}\n    protocol: {protocol}\n"
        ));
        if let Some(h) = host {
            s.push_str(&format!("    hostname: \"{h}\"\n"));
        }
        s.push_str(&format!("    tls: {{certificateRefs: {refs}}}\n"));
    }
    s
}

fn tcp_route(name: &str, gateway: &str, section: &str) -> String {
    format!(
        "---\napiVersion: gateway.networking.k8s.io/v1alpha2\nkind: TCPRoute\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  parentRefs: [{{name: {gateway}, sectionName: {section}}}]\n  rules: [{{backendRefs: [{{name: app, port: 8080}}]}}]\n"
    )
}

fn not_served(b: &Built) -> Vec<String> {
    b.not_served().map(ToString::to_string).collect()
}

/// The server configuration of the terminating listener at `dst`.
fn server_config(b: &Built, dst: &str) -> Arc<rustls::ServerConfig> {
    let dst: std::net::SocketAddr = dst.parse().expect("dst");
    let l = b
        .snapshot
        .listeners
        .lookup(dst.ip(), dst.port(), proto::TCP)
        .expect("listener");
    l.tls.as_ref().expect("terminating").config.clone()
}

fn client_config(versions: &[&'static rustls::SupportedProtocolVersion]) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(fixture_path("ca.crt")).expect("ca") {
        roots.add(c.expect("ca pem")).expect("root");
    }
    let mut c =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(versions)
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
    c.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(c)
}

/// Moves bytes both ways until neither side has more to say.
fn pump(c: &mut ClientConnection, s: &mut ServerConnection) -> Result<(), rustls::Error> {
    for _ in 0..20 {
        let mut buf = Vec::new();
        let mut moved = 0;
        while c.wants_write() {
            moved += c.write_tls(&mut buf).expect("client write");
        }
        let mut rd = &buf[..];
        while !rd.is_empty() {
            s.read_tls(&mut rd).expect("server read");
            s.process_new_packets()?;
        }
        let mut buf = Vec::new();
        while s.wants_write() {
            moved += s.write_tls(&mut buf).expect("server write");
        }
        let mut rd = &buf[..];
        while !rd.is_empty() {
            c.read_tls(&mut rd).expect("client read");
            c.process_new_packets()?;
        }
        if moved == 0 && !c.is_handshaking() && !s.is_handshaking() {
            return Ok(());
        }
    }
    Err(rustls::Error::General("handshake did not finish".into()))
}

/// A handshake with `sni`: the DER of the leaf the client received and the
/// connections, or the error one side raised.
fn handshake(
    server: &Arc<rustls::ServerConfig>,
    client: &Arc<ClientConfig>,
    sni: &str,
) -> Result<(Vec<u8>, ClientConnection, ServerConnection), rustls::Error> {
    let name = ServerName::try_from(sni.to_string()).expect("name");
    let mut c = ClientConnection::new(client.clone(), name).expect("client");
    let mut s = ServerConnection::new(server.clone()).expect("server");
    pump(&mut c, &mut s)?;
    let leaf = c
        .peer_certificates()
        .and_then(|p| p.first())
        .map(|d| d.as_ref().to_vec())
        .unwrap_or_default();
    Ok((leaf, c, s))
}

fn leaf_der(name: &str) -> Vec<u8> {
    CertificateDer::from_pem_file(fixture_path(name))
        .expect("pem")
        .as_ref()
        .to_vec()
}

/// Every key form loads (RSA PKCS#1 and PKCS#8, ECDSA SEC1 and PKCS#8), and `sluice
/// tables` shows each listener's certificate: source, SANs, notAfter, key type.
#[test]
fn every_key_form_loads_from_a_secret() {
    let forms = [
        ("rsa1", "rsa.crt", "rsa-pkcs1.key", "RSA"),
        ("rsa8", "rsa.crt", "rsa-pkcs8.key", "RSA"),
        ("ec1", "ec.crt", "ec-sec1.key", "ECDSA"),
        ("ec8", "ec.crt", "ec-pkcs8.key", "ECDSA"),
    ];
    let mut text = String::new();
    let mut listeners = Vec::new();
    for (i, (name, crt, key, _)) in forms.iter().enumerate() {
        text.push_str(&secret("default", name, crt, key));
        listeners.push((
            *name,
            9440 + i as u16,
            "TLS",
            None,
            format!("[{{name: {name}}}]"),
        ));
    }
    let l: Vec<(&str, u16, &str, Option<&str>, &str)> = listeners
        .iter()
        .map(|(n, p, pr, h, r)| (*n, *p, *pr, *h, r.as_str()))
        .collect();
    text.push_str(&gateway("gw", "10.77.0.40", &l));
    let b = built(&text);
    assert!(not_served(&b).is_empty(), "{:?}", not_served(&b));
    let tables = b.tables_json(None).expect("tables");
    for (i, (name, crt, _, kind)) in forms.iter().enumerate() {
        let l = tables["listeners"]
            .as_array()
            .expect("listeners")
            .iter()
            .find(|l| l["port"] == 9440 + i)
            .expect("listener");
        let c = &l["members"][0]["certificates"][0];
        assert_eq!(c["source"], format!("Secret default/{name}"));
        assert_eq!(c["keyType"], *kind);
        assert!(c["notAfter"].as_str().expect("notAfter") > "2120");
        let san = crt.trim_end_matches(".crt");
        assert_eq!(c["sans"][0], format!("{san}.example.com"));
        // And it serves: a handshake gets that leaf.
        let cfg = server_config(&b, &format!("10.77.0.40:{}", 9440 + i));
        let client = client_config(rustls::ALL_VERSIONS);
        let (leaf, ..) =
            handshake(&cfg, &client, &format!("{san}.example.com")).expect("handshake");
        assert_eq!(leaf, leaf_der(crt), "{name}");
    }
}

/// Each bad certificate leaves its listener out, with a message naming the Secret and
/// its place, and why; the good listener is served; status says ResolvedRefs=False
/// (InvalidCertificateRef) and Programmed=False.
#[test]
fn bad_certificates_are_not_served_and_the_rest_is() {
    let mut text = String::new();
    text.push_str(&secret("default", "good", "ec.crt", "ec-sec1.key"));
    text.push_str(&secret("default", "expired", "expired.crt", "expired.key"));
    text.push_str(&secret("default", "future", "future.crt", "future.key"));
    text.push_str(&secret(
        "default",
        "mismatch",
        "mismatch.crt",
        "mismatch.key",
    ));
    text.push_str("---\napiVersion: v1\nkind: Secret\nmetadata: {name: empty, namespace: default}\ntype: kubernetes.io/tls\nstringData: {tls.crt: \"\", tls.key: \"\"}\n");
    text.push_str("---\napiVersion: v1\nkind: Secret\nmetadata: {name: opaque, namespace: default}\ntype: Opaque\nstringData: {tls.crt: x, tls.key: y}\n");
    text.push_str("---\napiVersion: v1\nkind: Secret\nmetadata: {name: nokey, namespace: default}\ntype: kubernetes.io/tls\nstringData: {tls.crt: x}\n");
    text.push_str("---\napiVersion: v1\nkind: Secret\nmetadata: {name: garbage, namespace: default}\ntype: kubernetes.io/tls\nstringData: {tls.crt: \"-----BEGIN CERTIFICATE-----\\nMAMCAQA=\\n-----END CERTIFICATE-----\\n\", tls.key: y}\n");
    let cases = [
        (
            "expired",
            "certificate expired (notAfter 2001-01-01T00:00:00Z)",
        ),
        (
            "future",
            "certificate not yet valid (notBefore 2100-01-01T00:00:00Z)",
        ),
        ("mismatch", "the private key does not match the certificate"),
        ("empty", "no PEM certificate (an empty chain)"),
        ("opaque", "has type `Opaque`; kubernetes.io/tls is required"),
        ("nokey", "has no `tls.key`"),
        ("garbage", "leaf certificate does not parse"),
        ("missing", "Secret default/missing: not found"),
    ];
    let mut listeners = vec![("good", 9400u16, "HTTPS", None, "[{name: good}]".to_string())];
    for (i, (name, _)) in cases.iter().enumerate() {
        listeners.push((
            name,
            9401 + i as u16,
            "HTTPS",
            None,
            format!("[{{name: {name}}}]"),
        ));
    }
    let l: Vec<(&str, u16, &str, Option<&str>, &str)> = listeners
        .iter()
        .map(|(n, p, pr, h, r)| (*n, *p, *pr, *h, r.as_str()))
        .collect();
    text.push_str(&gateway("gw", "10.77.0.41", &l));
    let b = built(&text);
    let d = not_served(&b);
    assert_eq!(d.len(), cases.len(), "{d:#?}");
    for (i, (name, why)) in cases.iter().enumerate() {
        let line = d
            .iter()
            .find(|m| {
                m.contains(&format!(
                    "spec.listeners[{}].tls.certificateRefs[0].name",
                    i + 1
                ))
            })
            .unwrap_or_else(|| panic!("{name}: {d:#?}"));
        assert!(
            line.starts_with("not served (InvalidCertificateRef): tls.yaml:"),
            "{line}"
        );
        assert!(line.contains(why), "{name}: {line}");
        if *name != "missing" {
            // The Secret is named with its file and line.
            assert!(
                line.contains(&format!("Secret default/{name} (tls.yaml:")),
                "{line}"
            );
        }
        assert!(
            b.snapshot
                .listeners
                .lookup(
                    "10.77.0.41".parse().expect("ip"),
                    9401 + i as u16,
                    proto::TCP
                )
                .is_none(),
            "{name} is left out"
        );
    }
    // The good listener is served and terminates.
    let cfg = server_config(&b, "10.77.0.41:9400");
    let (leaf, c, _) =
        handshake(&cfg, &client_config(rustls::ALL_VERSIONS), "ec.example.com").expect("ok");
    assert_eq!(leaf, leaf_der("ec.crt"));
    // HTTPS: ALPN http/1.1, never h2, though the client prefers h2.
    assert_eq!(c.alpn_protocol(), Some(&b"http/1.1"[..]));
    // Status.
    let status = b.status_json();
    let gw = status
        .as_array()
        .expect("status")
        .iter()
        .find(|o| o["kind"] == "Gateway")
        .expect("gateway");
    let listeners = gw["status"]["listeners"].as_array().expect("listeners");
    let cond = |l: &Value, t: &str| {
        let c = l["conditions"]
            .as_array()
            .expect("conditions")
            .iter()
            .find(|c| c["type"] == t)
            .cloned()
            .expect("condition");
        (
            c["status"].as_str().unwrap_or("").to_string(),
            c["reason"].as_str().unwrap_or("").to_string(),
        )
    };
    assert_eq!(
        cond(&listeners[0], "Programmed"),
        ("True".into(), "Programmed".into())
    );
    for l in &listeners[1..] {
        assert_eq!(
            cond(l, "ResolvedRefs"),
            ("False".into(), "InvalidCertificateRef".into()),
            "{l}"
        );
        assert_eq!(
            cond(l, "Programmed"),
            ("False".into(), "Invalid".into()),
            "{l}"
        );
        assert_eq!(
            cond(l, "Accepted"),
            ("True".into(), "Accepted".into()),
            "{l}"
        );
    }
}

/// A Secret in another namespace: RefNotPermitted without a ReferenceGrant from Gateway
/// to Secret; served with one. Another kind of reference is InvalidCertificateRef.
#[test]
fn certificate_refs_across_namespaces_need_a_reference_grant() {
    let base = format!(
        "{}{}",
        secret("certs", "shared", "wildcard.crt", "wildcard.key"),
        gateway(
            "gw",
            "10.77.0.42",
            &[
                ("x", 9443, "TLS", None, "[{name: shared, namespace: certs}]"),
                ("k", 9444, "TLS", None, "[{name: shared, kind: ConfigMap}]"),
            ]
        ),
    );
    let b = built(&base);
    let d = not_served(&b);
    assert_eq!(d.len(), 2, "{d:#?}");
    assert!(d[0].starts_with("not served (RefNotPermitted)"), "{d:?}");
    assert!(
        d[0].contains("spec.listeners[0].tls.certificateRefs[0].namespace"),
        "{d:?}"
    );
    assert!(
        d[0].contains("Secret certs/shared: no ReferenceGrant in namespace certs"),
        "{d:?}"
    );
    assert!(
        d[1].starts_with("not served (InvalidCertificateRef)"),
        "{d:?}"
    );
    assert!(d[1].contains("kind ConfigMap is not supported"), "{d:?}");
    let status = b.status_json();
    let text = sluice_ctrl::compile::status::text(&status);
    assert!(
        text.contains("ResolvedRefs=False (RefNotPermitted)"),
        "{text}"
    );

    // A grant for another kind or namespace does not do.
    let wrong = format!("{base}---\napiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata: {{name: g, namespace: certs}}\nspec:\n  from: [{{group: gateway.networking.k8s.io, kind: Gateway, namespace: elsewhere}}]\n  to: [{{group: \"\", kind: Secret}}]\n");
    assert!(not_served(&built(&wrong))[0].contains("RefNotPermitted"));
    let granted = format!("{base}---\napiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata: {{name: g, namespace: certs}}\nspec:\n  from: [{{group: gateway.networking.k8s.io, kind: Gateway, namespace: default}}]\n  to: [{{group: \"\", kind: Secret, name: shared}}]\n");
    let b = built(&granted);
    let d = not_served(&b);
    assert_eq!(d.len(), 1, "only the ConfigMap listener: {d:#?}");
    let cfg = server_config(&b, "10.77.0.42:9443");
    let (leaf, ..) =
        handshake(&cfg, &client_config(rustls::ALL_VERSIONS), "a.example.com").expect("ok");
    assert_eq!(leaf, leaf_der("wildcard.crt"));
}

/// Several certificateRefs on one listener: the SNI picks the exact SAN, else the
/// wildcard SAN, else the first (default) certificate; real handshakes get those
/// leaves. A TCPRoute attaches to the terminating TLS listener.
#[test]
fn several_certificates_are_chosen_by_sni_in_real_handshakes() {
    let text = format!(
        "{}{}{}{}{}",
        secret("default", "rsa", "rsa.crt", "rsa-pkcs8.key"),
        secret("default", "wild", "wildcard.crt", "wildcard.key"),
        secret("default", "ec", "ec.crt", "ec-pkcs8.key"),
        gateway(
            "gw",
            "10.77.0.43",
            &[(
                "multi",
                8443,
                "TLS",
                Some("*.example.com"),
                "[{name: rsa}, {name: wild}, {name: ec}]"
            )]
        ),
        tcp_route("opaque", "gw", "multi"),
    );
    let b = built(&text);
    assert!(not_served(&b).is_empty(), "{:?}", not_served(&b));
    // The TCPRoute attached: the decrypted stream goes to app.
    let l = b
        .snapshot
        .listeners
        .lookup("10.77.0.43".parse().expect("ip"), 8443, proto::TCP)
        .expect("listener");
    let r = b
        .snapshot
        .listeners
        .route(l.route(b"ec.example.com").expect("route"))
        .expect("r");
    assert_eq!(&*r.name, "TCPRoute default/opaque");
    let cfg = server_config(&b, "10.77.0.43:8443");
    assert!(cfg.alpn_protocols.is_empty(), "no ALPN on opaque TLS");
    let client = client_config(rustls::ALL_VERSIONS);
    for (sni, want) in [
        ("ec.example.com", "ec.crt"),        // exact SAN of the third
        ("EC2.example.com", "ec.crt"),       // exact, case-insensitive
        ("rsa.example.com", "rsa.crt"),      // exact SAN of the first
        ("www.example.com", "wildcard.crt"), // the wildcard SAN
    ] {
        let (leaf, c, _) = handshake(&cfg, &client, sni).unwrap_or_else(|e| panic!("{sni}: {e}"));
        assert_eq!(leaf, leaf_der(want), "{sni}");
        assert_eq!(c.alpn_protocol(), None);
    }
    // Two labels under the wildcard: no SAN covers it; the default (rsa) is served and
    // the client refuses it.
    let e = handshake(&cfg, &client, "a.b.example.com").expect_err("refused");
    assert!(e.to_string().contains("certificate"), "{e}");
    // A name of no listener hostname: no certificate, the handshake fails.
    let e = handshake(&cfg, &client, "other.test").expect_err("no certificate");
    assert!(
        e.to_string()
            .contains("no server certificate chain resolved"),
        "{e:?}"
    );

    // explain says the same.
    let q = |sni: &str| Query {
        proto: sluice_ctrl::compile::ir::L4::Tcp,
        src: "198.51.100.1:40000".parse().expect("src"),
        dst: "10.77.0.43:8443".parse().expect("dst"),
        sni: Some(sni.into()),
        http_host: None,
        payload: None,
        http: Default::default(),
    };
    let v = explain(&b, &q("www.example.com"));
    assert_eq!(v["certificate"]["source"], "Secret default/wild", "{v}");
    assert_eq!(v["certificate"]["match"], "wildcard");
    assert_eq!(v["route"], "TCPRoute default/opaque");
    let v = explain(&b, &q("a.b.example.com"));
    assert_eq!(v["certificate"]["source"], "Secret default/rsa");
    assert_eq!(v["certificate"]["match"], "default");
    let v = explain(&b, &q("other.test"));
    assert_eq!(v["certificate"], Value::Null);
    assert_eq!(v["verdict"], "reject");
    assert!(
        v["reason"]
            .as_str()
            .expect("reason")
            .starts_with("TLS handshake fails: SNI `other.test` matches no hostname"),
        "{v}"
    );
}

/// A second handshake resumes with the ticket of the first, in TLS 1.3 and 1.2, and
/// across a rebuild of the configuration (one ticketer per process).
#[test]
fn resumption_by_session_tickets() {
    let text = format!(
        "{}{}",
        secret("default", "ec", "ec.crt", "ec-sec1.key"),
        gateway(
            "gw",
            "10.77.0.44",
            &[("t", 443, "HTTPS", None, "[{name: ec}]")]
        ),
    );
    let b = built(&text);
    let cfg = server_config(&b, "10.77.0.44:443");
    assert!(cfg.ticketer.enabled());
    for versions in [
        &[&rustls::version::TLS13][..],
        &[&rustls::version::TLS12][..],
    ] {
        let client = client_config(versions);
        let (_, c, _) = handshake(&cfg, &client, "ec.example.com").expect("first");
        assert_eq!(c.handshake_kind(), Some(HandshakeKind::Full));
        let (leaf, c, s) = handshake(&cfg, &client, "ec.example.com").expect("second");
        assert_eq!(
            c.handshake_kind(),
            Some(HandshakeKind::Resumed),
            "{versions:?}"
        );
        assert_eq!(s.handshake_kind(), Some(HandshakeKind::Resumed));
        assert_eq!(leaf, leaf_der("ec.crt"));
        // A reload builds new configurations with the same ticketer.
        let again = server_config(&built(&text), "10.77.0.44:443");
        let (_, c, _) = handshake(&again, &client, "ec.example.com").expect("after reload");
        assert_eq!(
            c.handshake_kind(),
            Some(HandshakeKind::Resumed),
            "{versions:?}"
        );
    }
}

/// Istio: SIMPLE with credentialName (generic Secret with `cert`/`key` too) and with
/// files (relative to the manifest's directory) is served; so is MUTUAL (#33);
/// credentialName beside files wins with a warning.
#[test]
fn istio_simple_is_served_from_secrets_and_files() {
    let dir = std::env::temp_dir().join(format!("sluice-tls-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("certs")).expect("dir");
    std::fs::copy(fixture_path("rsa.crt"), dir.join("certs/rsa.crt")).expect("copy");
    std::fs::copy(fixture_path("rsa-pkcs1.key"), dir.join("certs/rsa.key")).expect("copy");
    let generic = format!(
        "---\napiVersion: v1\nkind: Secret\nmetadata: {{name: generic, namespace: default}}\ntype: Opaque\nstringData:\n  cert: |\n{}  key: |\n{}",
        block("wildcard.crt", 4),
        block("wildcard.key", 4)
    );
    let manifest = format!(
        r#"{}{generic}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: igw, namespace: default}}
spec:
  servers:
  - port: {{number: 443, name: https, protocol: HTTPS}}
    bind: 10.77.0.45
    hosts: ["ec.example.com"]
    tls: {{mode: SIMPLE, credentialName: ec, serverCertificate: certs/rsa.crt, privateKey: certs/rsa.key}}
  - port: {{number: 443, name: files, protocol: HTTPS}}
    bind: 10.77.0.45
    hosts: ["rsa.example.com"]
    tls: {{mode: SIMPLE, serverCertificate: certs/rsa.crt, privateKey: certs/rsa.key}}
  - port: {{number: 443, name: generic, protocol: HTTPS}}
    bind: 10.77.0.45
    hosts: ["*.example.com"]
    tls: {{mode: SIMPLE, credentialName: generic}}
  - port: {{number: 8443, name: mutual, protocol: HTTPS}}
    bind: 10.77.0.45
    hosts: ["*"]
    tls: {{mode: MUTUAL, serverCertificate: certs/rsa.crt, privateKey: certs/rsa.key, caCertificates: certs/rsa.crt}}
  - port: {{number: 9443, name: nofile, protocol: TLS}}
    bind: 10.77.0.45
    hosts: ["*"]
    tls: {{mode: SIMPLE, serverCertificate: certs/none.crt, privateKey: certs/none.key}}
"#,
        secret("default", "ec", "ec.crt", "ec-sec1.key")
    );
    let file = dir.join("gw.yaml");
    std::fs::write(&file, format!("{manifest}{BACKEND}")).expect("write");
    let b = sluice_ctrl::compile::build_paths(std::slice::from_ref(&file))
        .unwrap_or_else(|d| panic!("{:#?}", d.error_lines()));
    let d = not_served(&b);
    // MUTUAL (with the leaf as its CA) is served (issue #33: `tests/mutual_tls.rs`).
    assert_eq!(d.len(), 1, "{d:#?}");
    assert!(
        d[0].contains("spec.servers[4].tls.serverCertificate"),
        "{d:?}"
    );
    assert!(
        d[0].contains(&format!(
            "cannot read {}",
            dir.join("certs/none.crt").display()
        )),
        "{d:?}"
    );
    let warned = b
        .warnings()
        .any(|w| w.message.contains("credentialName wins"));
    assert!(warned, "credentialName beside files warns");
    let cfg = server_config(&b, "10.77.0.45:443");
    let client = client_config(rustls::ALL_VERSIONS);
    for (sni, want) in [
        ("ec.example.com", "ec.crt"), // credentialName, not the files
        ("rsa.example.com", "rsa.crt"),
        ("x.example.com", "wildcard.crt"),
    ] {
        let (leaf, ..) = handshake(&cfg, &client, sni).unwrap_or_else(|e| panic!("{sni}: {e}"));
        assert_eq!(leaf, leaf_der(want), "{sni}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Istio protocol versions and cipher suites: TLSV1_3 minimum serves TLS 1.3 only; a
/// TLS 1.0 minimum or a suite rustls lacks leaves the server out.
#[test]
fn istio_versions_and_cipher_suites() {
    let text = format!(
        r#"{}
---
apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {{name: igw, namespace: default}}
spec:
  servers:
  - port: {{number: 443, name: v13, protocol: TLS}}
    bind: 10.77.0.46
    hosts: ["*"]
    tls: {{mode: SIMPLE, credentialName: ec, minProtocolVersion: TLSV1_3}}
  - port: {{number: 444, name: v12, protocol: TLS}}
    bind: 10.77.0.46
    hosts: ["*"]
    tls: {{mode: SIMPLE, credentialName: ec, maxProtocolVersion: TLSV1_2, cipherSuites: [ECDHE-ECDSA-CHACHA20-POLY1305]}}
  - port: {{number: 445, name: v10, protocol: TLS}}
    bind: 10.77.0.46
    hosts: ["*"]
    tls: {{mode: SIMPLE, credentialName: ec, minProtocolVersion: TLSV1_0}}
  - port: {{number: 446, name: cbc, protocol: TLS}}
    bind: 10.77.0.46
    hosts: ["*"]
    tls: {{mode: SIMPLE, credentialName: ec, cipherSuites: [AES128-SHA]}}
"#,
        secret("default", "ec", "ec.crt", "ec-sec1.key")
    );
    let b = built(&text);
    let d = not_served(&b);
    assert_eq!(d.len(), 2, "{d:#?}");
    assert!(d[0].contains("minProtocolVersion TLSV1_0"), "{d:?}");
    assert!(
        d[1].contains("cipher suite `AES128-SHA` is not served"),
        "{d:?}"
    );
    let v13 = server_config(&b, "10.77.0.46:443");
    let tls12 = client_config(&[&rustls::version::TLS12]);
    assert!(
        handshake(&v13, &tls12, "ec.example.com").is_err(),
        "TLS 1.2 refused"
    );
    let (_, c, _) =
        handshake(&v13, &client_config(rustls::ALL_VERSIONS), "ec.example.com").expect("1.3");
    assert_eq!(c.protocol_version(), Some(rustls::ProtocolVersion::TLSv1_3));
    let v12 = server_config(&b, "10.77.0.46:444");
    let (_, c, _) =
        handshake(&v12, &client_config(rustls::ALL_VERSIONS), "ec.example.com").expect("1.2");
    assert_eq!(c.protocol_version(), Some(rustls::ProtocolVersion::TLSv1_2));
    assert_eq!(
        c.negotiated_cipher_suite().map(|s| s.suite()),
        Some(rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256)
    );
}
