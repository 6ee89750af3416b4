//! Client certificate verification (issue #33), control-plane side: Istio `MUTUAL`,
//! `OPTIONAL_MUTUAL` and `ISTIO_MUTUAL` servers and Gateway API `frontendValidation`
//! compiled into rustls server configurations, and real rustls handshakes against them
//! with client certificates from a test PKI made here with rcgen: none, another CA's,
//! revoked, expired, a SAN not listed, a wrong SPKI pin, the right ones. Bad CA files,
//! Secrets and CRLs leave their server out with the reason.

use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyIdMethod, KeyPair, KeyUsagePurpose, RevocationReason,
    RevokedCertParams, SanType, SerialNumber,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConnection};
use sluice_ctrl::compile::{build_paths, Built};
use sluice_dataplane::stats::Event;
use sluice_dataplane::tables::client_auth::{provider_sha256, Pins};
use sluice_dataplane::tables::listeners::proto;
use sluice_dataplane::terminate::identity;
use sluice_dataplane::terminate::refusal::refusal;

/// A CA: its certificate and key.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

/// A leaf: DER certificate and PKCS#8 key, with its key pair's SPKI.
struct Leaf {
    der: CertificateDer<'static>,
    pem: String,
    key: Vec<u8>,
    key_pem: String,
    spki: Vec<u8>,
}

fn ca(name: &str) -> Ca {
    let key = KeyPair::generate().expect("key");
    let mut p = CertificateParams::new(Vec::<String>::new()).expect("params");
    p.distinguished_name.push(DnType::CommonName, name);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = p.self_signed(&key).expect("ca");
    Ca { cert, key }
}

fn leaf(ca: &Ca, cn: &str, sans: Vec<SanType>, serial: u64, client: bool, expired: bool) -> Leaf {
    let key = KeyPair::generate().expect("key");
    let mut p = CertificateParams::new(Vec::<String>::new()).expect("params");
    p.distinguished_name.push(DnType::CommonName, cn);
    p.subject_alt_names = sans;
    p.serial_number = Some(SerialNumber::from(serial));
    p.extended_key_usages = vec![if client {
        ExtendedKeyUsagePurpose::ClientAuth
    } else {
        ExtendedKeyUsagePurpose::ServerAuth
    }];
    p.use_authority_key_identifier_extension = true;
    if expired {
        p.not_before = rcgen::date_time_ymd(2000, 1, 1);
        p.not_after = rcgen::date_time_ymd(2001, 1, 1);
    } else {
        p.not_before = rcgen::date_time_ymd(2020, 1, 1);
        p.not_after = rcgen::date_time_ymd(2120, 1, 1);
    }
    let cert = p.signed_by(&key, &ca.cert, &ca.key).expect("leaf");
    Leaf {
        der: cert.der().clone(),
        pem: cert.pem(),
        key: key.serialize_der(),
        key_pem: key.serialize_pem(),
        spki: key.public_key_der(),
    }
}

fn dns(n: &str) -> SanType {
    SanType::DnsName(n.try_into().expect("dns"))
}

fn uri(n: &str) -> SanType {
    SanType::URI(n.try_into().expect("uri"))
}

fn crl(ca: &Ca, revoked: &[u64]) -> String {
    CertificateRevocationListParams {
        this_update: rcgen::date_time_ymd(2020, 1, 1),
        next_update: rcgen::date_time_ymd(2120, 1, 1),
        crl_number: SerialNumber::from(1u64),
        issuing_distribution_point: None,
        revoked_certs: revoked
            .iter()
            .map(|s| RevokedCertParams {
                serial_number: SerialNumber::from(*s),
                revocation_time: rcgen::date_time_ymd(2021, 1, 1),
                reason_code: Some(RevocationReason::KeyCompromise),
                invalidity_date: None,
            })
            .collect(),
        key_identifier_method: KeyIdMethod::Sha256,
    }
    .signed_by(&ca.cert, &ca.key)
    .expect("crl")
    .pem()
    .expect("crl pem")
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn sha256(b: &[u8]) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA256, b)
        .as_ref()
        .to_vec()
}

fn b64(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// The test PKI: CA A (trusted) and B (not), a server certificate, clients.
struct Pki {
    a: Ca,
    server: Leaf,
    good: Leaf,
    revoked: Leaf,
    other_ca: Leaf,
    expired: Leaf,
    plain: Leaf,
    crl: String,
}

const SPIFFE: &str = "spiffe://cluster.local/ns/default/sa/client";

fn pki() -> Pki {
    let a = ca("sluice test CA A");
    let b = ca("sluice test CA B");
    let server = leaf(
        &a,
        "mtls.example.com",
        vec![dns("mtls.example.com")],
        1,
        false,
        false,
    );
    let good = leaf(
        &a,
        "client",
        vec![uri(SPIFFE), dns("client.example.com")],
        0x10,
        true,
        false,
    );
    let revoked = leaf(&a, "revoked", vec![uri(SPIFFE)], 0x20, true, false);
    let other_ca = leaf(&b, "stranger", vec![uri(SPIFFE)], 0x30, true, false);
    let expired = leaf(&a, "old", vec![uri(SPIFFE)], 0x40, true, true);
    let plain = leaf(
        &a,
        "plain",
        vec![dns("plain.example.com")],
        0x50,
        true,
        false,
    );
    let crl = crl(&a, &[0x20]);
    Pki {
        a,
        server,
        good,
        revoked,
        other_ca,
        expired,
        plain,
        crl,
    }
}

/// A scratch directory with the PKI's files: `ca.crt`, `ca.crl`, `server.crt`,
/// `server.key`, `bad.crl`.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str, pki: &Pki) -> Scratch {
        let dir = std::env::temp_dir().join(format!("sluice-mtls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        for (f, body) in [
            ("ca.crt", pki.a.cert.pem()),
            ("ca.crl", pki.crl.clone()),
            ("server.crt", pki.server.pem.clone()),
            ("server.key", pki.server.key_pem.clone()),
            (
                "bad.crl",
                "-----BEGIN X509 CRL-----\nMAMCAQA=\n-----END X509 CRL-----\n".into(),
            ),
        ] {
            std::fs::write(dir.join(f), body).expect("write");
        }
        Scratch(dir)
    }

    fn build(&self, manifest: &str) -> Built {
        let file = self.0.join("gw.yaml");
        std::fs::write(&file, format!("{manifest}{BACKEND}")).expect("write");
        build_paths(std::slice::from_ref(&file))
            .unwrap_or_else(|d| panic!("{:#?}", d.error_lines()))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
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

/// An Istio server on `port` of 10.77.0.50 with these TLS settings (YAML flow).
fn server(port: u16, tls: &str) -> String {
    format!(
        "  - port: {{number: {port}, name: p{port}, protocol: HTTPS}}\n    bind: 10.77.0.50\n    hosts: [\"*\"]\n    tls: {tls}\n"
    )
}

fn istio_gateway(servers: &[String]) -> String {
    format!(
        "---\napiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata: {{name: igw, namespace: default}}\nspec:\n  servers:\n{}",
        servers.concat()
    )
}

fn not_served(b: &Built) -> Vec<String> {
    b.not_served().map(ToString::to_string).collect()
}

fn server_config(b: &Built, dst: &str) -> Arc<rustls::ServerConfig> {
    let dst: std::net::SocketAddr = dst.parse().expect("dst");
    let l = b
        .snapshot
        .listeners
        .lookup(dst.ip(), dst.port(), proto::TCP)
        .unwrap_or_else(|| panic!("no listener at {dst}"));
    l.tls.as_ref().expect("terminating").config.clone()
}

/// A client trusting CA A, presenting `cert` (or none).
fn client(pki: &Pki, cert: Option<&Leaf>, tls13: bool) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots.add(pki.a.cert.der().clone()).expect("root");
    let versions: &[&'static rustls::SupportedProtocolVersion] = if tls13 {
        &[&rustls::version::TLS13]
    } else {
        &[&rustls::version::TLS12]
    };
    let b = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(versions)
        .expect("versions")
        .with_root_certificates(roots);
    let c = match cert {
        None => b.with_no_client_auth(),
        Some(l) => b
            .with_client_auth_cert(
                vec![l.der.clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(l.key.clone())),
            )
            .expect("client cert"),
    };
    Arc::new(c)
}

/// Moves bytes both ways until neither side has more to say; the server's error
/// first (it is the one that refuses).
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
            if let Err(e) = c.process_new_packets() {
                return Err(rustls::Error::General(format!("client: {e}")));
            }
        }
        if moved == 0 && !c.is_handshaking() && !s.is_handshaking() {
            return Ok(());
        }
    }
    Err(rustls::Error::General("handshake did not finish".into()))
}

/// A handshake: the server connection, or the server's error.
fn handshake(
    server: &Arc<rustls::ServerConfig>,
    client: &Arc<ClientConfig>,
) -> Result<ServerConnection, rustls::Error> {
    let name = ServerName::try_from("mtls.example.com").expect("name");
    let mut c = ClientConnection::new(client.clone(), name).expect("client");
    let mut s = ServerConnection::new(server.clone()).expect("server");
    pump(&mut c, &mut s)?;
    // TLS 1.3: the client finishes before the server has read its certificate; one
    // more round for the server's verdict.
    let mut buf = Vec::new();
    while c.wants_write() {
        c.write_tls(&mut buf).expect("client write");
    }
    let mut rd = &buf[..];
    while !rd.is_empty() {
        s.read_tls(&mut rd).expect("server read");
        s.process_new_packets()?;
    }
    Ok(s)
}

/// The refusal event of a handshake (None when it succeeded or is not a counted
/// reason), in both TLS versions — they must agree.
fn verdict(
    server: &Arc<rustls::ServerConfig>,
    pki: &Pki,
    cert: Option<&Leaf>,
) -> Result<(), Option<Event>> {
    let mut out = Vec::new();
    for tls13 in [true, false] {
        out.push(match handshake(server, &client(pki, cert, tls13)) {
            Ok(s) => {
                assert_eq!(
                    s.peer_certificates().map(|p| p[0].clone()),
                    cert.map(|l| l.der.clone()),
                    "the server saw the client's certificate"
                );
                Ok(())
            }
            Err(e) => Err(refusal(&e)),
        });
    }
    assert_eq!(out[0], out[1], "TLS 1.3 and 1.2 agree");
    out.remove(0)
}

#[test]
fn istio_mutual_and_optional_mutual_from_files_with_a_crl() {
    let pki = pki();
    let d = Scratch::new("files", &pki);
    let files = "serverCertificate: server.crt, privateKey: server.key";
    let b = d.build(&istio_gateway(&[
        server(
            443,
            &format!("{{mode: MUTUAL, {files}, caCertificates: ca.crt, caCrl: ca.crl}}"),
        ),
        server(
            444,
            &format!("{{mode: OPTIONAL_MUTUAL, {files}, caCertificates: ca.crt, caCrl: ca.crl}}"),
        ),
        server(445, &format!("{{mode: SIMPLE, {files}}}")),
    ]));
    assert_eq!(not_served(&b), Vec::<String>::new());
    let mutual = server_config(&b, "10.77.0.50:443");
    let optional = server_config(&b, "10.77.0.50:444");
    let simple = server_config(&b, "10.77.0.50:445");
    use Event::*;
    assert_eq!(
        verdict(&mutual, &pki, None),
        Err(Some(TlsClientCertMissing))
    );
    assert_eq!(verdict(&mutual, &pki, Some(&pki.good)), Ok(()));
    assert_eq!(
        verdict(&mutual, &pki, Some(&pki.other_ca)),
        Err(Some(TlsClientCertUntrusted))
    );
    assert_eq!(
        verdict(&mutual, &pki, Some(&pki.revoked)),
        Err(Some(TlsClientCertRevoked))
    );
    assert_eq!(
        verdict(&mutual, &pki, Some(&pki.expired)),
        Err(Some(TlsClientCertExpired))
    );
    // OPTIONAL_MUTUAL: no certificate is fine; a presented one is verified all the same.
    assert_eq!(verdict(&optional, &pki, None), Ok(()));
    assert_eq!(verdict(&optional, &pki, Some(&pki.good)), Ok(()));
    assert_eq!(
        verdict(&optional, &pki, Some(&pki.revoked)),
        Err(Some(TlsClientCertRevoked))
    );
    assert_eq!(
        verdict(&optional, &pki, Some(&pki.other_ca)),
        Err(Some(TlsClientCertUntrusted))
    );
    // SIMPLE asks for none: a client with one goes in without sending it.
    let s = handshake(&simple, &client(&pki, Some(&pki.good), true)).expect("simple");
    assert!(s.peer_certificates().is_none());
}

#[test]
fn pins_subject_alt_names_spki_and_hash() {
    let pki = pki();
    let d = Scratch::new("pins", &pki);
    let good_spki = b64(&sha256(&pki.good.spki));
    let good_hash_colons: String = sha256(pki.good.der.as_ref())
        .iter()
        .map(|x| format!("{x:02X}"))
        .collect::<Vec<_>>()
        .join(":");
    let wrong_spki = b64(&sha256(&pki.plain.spki));
    let other_spki = b64(&sha256(&pki.expired.spki));
    let m = "mode: MUTUAL, serverCertificate: server.crt, privateKey: server.key, caCertificates: ca.crt";
    let b = d.build(&istio_gateway(&[
        server(443, &format!("{{{m}, subjectAltNames: [\"{SPIFFE}\"]}}")),
        server(444, &format!("{{{m}, subjectAltNames: [\"CLIENT.example.com\"]}}")),
        server(445, &format!("{{{m}, verifyCertificateSpki: [\"{good_spki}\"]}}")),
        server(446, &format!("{{{m}, verifyCertificateSpki: [\"{wrong_spki}\"]}}")),
        // SPKI and hash OR'ed: the wrong SPKI, the right hash (colons, upper case).
        server(447, &format!("{{{m}, verifyCertificateSpki: [\"{other_spki}\"], verifyCertificateHash: [\"{good_hash_colons}\"]}}")),
        // The SAN is checked in addition to the digests.
        server(448, &format!("{{{m}, subjectAltNames: [\"nobody.example.com\"], verifyCertificateSpki: [\"{good_spki}\"]}}")),
        server(449, &format!("{{{m}, verifyCertificateSpki: [\"not base64!\"]}}")),
        server(450, &format!("{{{m}, verifyCertificateHash: [\"abcd\"]}}")),
    ]));
    let ns = not_served(&b);
    assert_eq!(ns.len(), 2, "{ns:#?}");
    assert!(
        ns[0].contains("spec.servers[6].tls.verifyCertificateSpki[0]")
            && ns[0].contains("not the base64"),
        "{ns:?}"
    );
    assert!(
        ns[1].contains("spec.servers[7].tls.verifyCertificateHash[0]")
            && ns[1].contains("64 hex digits"),
        "{ns:?}"
    );
    use Event::*;
    let cfg = |p: u16| server_config(&b, &format!("10.77.0.50:{p}"));
    // A URI SAN (spiffe) listed: the good client in, the plain one (DNS only) out.
    assert_eq!(verdict(&cfg(443), &pki, Some(&pki.good)), Ok(()));
    assert_eq!(
        verdict(&cfg(443), &pki, Some(&pki.plain)),
        Err(Some(TlsClientCertPinMismatch))
    );
    // A DNS SAN, compared ignoring case.
    assert_eq!(verdict(&cfg(444), &pki, Some(&pki.good)), Ok(()));
    assert_eq!(
        verdict(&cfg(444), &pki, Some(&pki.plain)),
        Err(Some(TlsClientCertPinMismatch))
    );
    assert_eq!(verdict(&cfg(445), &pki, Some(&pki.good)), Ok(()));
    assert_eq!(
        verdict(&cfg(445), &pki, Some(&pki.plain)),
        Err(Some(TlsClientCertPinMismatch))
    );
    assert_eq!(
        verdict(&cfg(446), &pki, Some(&pki.good)),
        Err(Some(TlsClientCertPinMismatch))
    );
    assert_eq!(verdict(&cfg(447), &pki, Some(&pki.good)), Ok(()));
    assert_eq!(
        verdict(&cfg(447), &pki, Some(&pki.plain)),
        Err(Some(TlsClientCertPinMismatch))
    );
    assert_eq!(
        verdict(&cfg(448), &pki, Some(&pki.good)),
        Err(Some(TlsClientCertPinMismatch))
    );
    // Trust comes first: another CA's certificate is untrusted, whatever its pins.
    assert_eq!(
        verdict(&cfg(443), &pki, Some(&pki.other_ca)),
        Err(Some(TlsClientCertUntrusted))
    );
    assert_eq!(
        verdict(&cfg(443), &pki, None),
        Err(Some(TlsClientCertMissing))
    );
}

#[test]
fn pins_check_each_format_directly() {
    let pki = pki();
    let h = provider_sha256();
    let spki: [u8; 32] = sha256(&pki.good.spki).try_into().expect("32");
    let cert: [u8; 32] = sha256(pki.good.der.as_ref()).try_into().expect("32");
    let der = pki.good.der.as_ref();
    assert!(Pins::default().check(der, h));
    assert!(Pins::new(&[], vec![spki], vec![]).check(der, h));
    assert!(!Pins::new(&[], vec![spki], vec![]).check(pki.plain.der.as_ref(), h));
    assert!(Pins::new(&[], vec![], vec![cert]).check(der, h));
    assert!(Pins::new(&[], vec![[0; 32]], vec![cert]).check(der, h));
    assert!(!Pins::new(&[], vec![[0; 32]], vec![[1; 32]]).check(der, h));
    assert!(Pins::new(&[SPIFFE.into()], vec![], vec![]).check(der, h));
    // URIs are compared exactly.
    assert!(!Pins::new(&[SPIFFE.to_uppercase()], vec![], vec![]).check(der, h));
    assert!(Pins::new(&["Client.Example.COM".into()], vec![], vec![]).check(der, h));
    assert!(!Pins::new(&["client.example.com".into()], vec![[0; 32]], vec![]).check(der, h));
    // IP SANs by address.
    let a = ca("ip CA");
    let ip = leaf(
        &a,
        "ip",
        vec![SanType::IpAddress("10.1.2.3".parse().expect("ip"))],
        9,
        true,
        false,
    );
    assert!(Pins::new(&["10.1.2.3".into()], vec![], vec![]).check(ip.der.as_ref(), h));
    assert!(!Pins::new(&["10.1.2.4".into()], vec![], vec![]).check(ip.der.as_ref(), h));
    // Pin strings: base64 SPKI, hex hash with or without colons, either case.
    use sluice_ctrl::compile::certs::trust::{parse_hash, parse_spki};
    assert_eq!(parse_spki(&b64(&spki)), Some(spki));
    assert_eq!(parse_spki(b64(&spki).trim_end_matches('=')), Some(spki));
    assert_eq!(parse_spki("AAAA"), None);
    assert_eq!(parse_hash(&hex(&cert)), Some(cert));
    assert_eq!(parse_hash(&hex(&cert).to_uppercase()), Some(cert));
    let colons: Vec<String> = cert.iter().map(|x| format!("{x:02x}")).collect();
    assert_eq!(parse_hash(&colons.join(":")), Some(cert));
    assert_eq!(parse_hash(&colons.join(":").to_uppercase()), Some(cert));
    assert_eq!(parse_hash(&hex(&cert)[2..]), None);
    assert_eq!(parse_hash(&format!("{}zz", &hex(&cert)[2..])), None);
}

#[test]
fn credential_name_secrets_carry_the_ca_and_crl_or_a_cacert_twin() {
    let pki = pki();
    let d = Scratch::new("secrets", &pki);
    let indent = |s: &str| -> String { s.lines().map(|l| format!("    {l}\n")).collect() };
    let tls_secret = |name: &str, extra: &str| {
        format!(
            "---\napiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: default}}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}{extra}",
            indent(&pki.server.pem),
            indent(&pki.server.key_pem)
        )
    };
    let with_ca = tls_secret(
        "with-ca",
        &format!(
            "  ca.crt: |\n{}  ca.crl: |\n{}",
            indent(&pki.a.cert.pem()),
            indent(&pki.crl)
        ),
    );
    let twin = tls_secret("twin", "");
    let twin_ca = format!(
        "---\napiVersion: v1\nkind: Secret\nmetadata: {{name: twin-cacert, namespace: default}}\ntype: Opaque\nstringData:\n  cacert: |\n{}",
        indent(&pki.a.cert.pem())
    );
    let bad_crl = tls_secret(
        "bad-crl",
        &format!(
            "  ca.crt: |\n{}  ca.crl: |\n    junk\n",
            indent(&pki.a.cert.pem())
        ),
    );
    let no_ca = tls_secret("no-ca", "");
    let b = d.build(&format!(
        "{with_ca}{twin}{twin_ca}{bad_crl}{no_ca}{}",
        istio_gateway(&[
            server(443, "{mode: MUTUAL, credentialName: with-ca}"),
            server(444, "{mode: MUTUAL, credentialName: twin}"),
            server(445, "{mode: MUTUAL, credentialName: bad-crl}"),
            server(446, "{mode: OPTIONAL_MUTUAL, credentialName: no-ca}"),
            server(447, "{mode: SIMPLE, credentialName: no-ca}"),
        ])
    ));
    let ns = not_served(&b);
    assert_eq!(ns.len(), 2, "{ns:#?}");
    assert!(
        ns[1].contains("spec.servers[3].tls.credentialName")
            && ns[1].contains("no `ca.crt` or `cacert` (in it or in Secret default/no-ca-cacert)"),
        "{ns:?}"
    );
    assert!(
        ns[0].contains("spec.servers[2].tls.credentialName")
            && ns[0].contains("Secret default/bad-crl")
            && ns[0].contains("CRL"),
        "{ns:?}"
    );
    use Event::*;
    let with_ca = server_config(&b, "10.77.0.50:443");
    assert_eq!(verdict(&with_ca, &pki, Some(&pki.good)), Ok(()));
    assert_eq!(
        verdict(&with_ca, &pki, Some(&pki.revoked)),
        Err(Some(TlsClientCertRevoked))
    );
    let twin = server_config(&b, "10.77.0.50:444");
    assert_eq!(verdict(&twin, &pki, Some(&pki.good)), Ok(()));
    // No CRL in the twin: the revoked certificate is not known to be revoked.
    assert_eq!(verdict(&twin, &pki, Some(&pki.revoked)), Ok(()));
    assert_eq!(verdict(&twin, &pki, None), Err(Some(TlsClientCertMissing)));
}

#[test]
fn bad_ca_files_and_crls_leave_the_server_out() {
    let pki = pki();
    let d = Scratch::new("bad", &pki);
    let files = "serverCertificate: server.crt, privateKey: server.key";
    let b = d.build(&istio_gateway(&[
        server(
            443,
            &format!("{{mode: MUTUAL, {files}, caCertificates: missing.crt}}"),
        ),
        server(
            444,
            &format!("{{mode: MUTUAL, {files}, caCertificates: server.key}}"),
        ),
        server(
            445,
            &format!("{{mode: MUTUAL, {files}, caCertificates: ca.crt, caCrl: bad.crl}}"),
        ),
        server(
            446,
            &format!("{{mode: MUTUAL, {files}, caCertificates: ca.crt, caCrl: nothere.crl}}"),
        ),
        server(
            447,
            &format!("{{mode: MUTUAL, {files}, caCertificates: ca.crt}}"),
        ),
    ]));
    let ns = not_served(&b);
    assert_eq!(ns.len(), 4, "{ns:#?}");
    assert!(
        ns[0].contains("servers[0].tls.caCertificates")
            && ns[0].contains("cannot read")
            && ns[0].contains("missing.crt"),
        "{ns:?}"
    );
    assert!(
        ns[1].contains("servers[1].tls.caCertificates") && ns[1].contains("no PEM CA certificate"),
        "{ns:?}"
    );
    assert!(
        ns[2].contains("servers[2].tls.caCrl") && ns[2].contains("bad.crl"),
        "{ns:?}"
    );
    assert!(
        ns[3].contains("servers[3].tls.caCrl") && ns[3].contains("nothere.crl"),
        "{ns:?}"
    );
    assert_eq!(
        verdict(&server_config(&b, "10.77.0.50:447"), &pki, Some(&pki.good)),
        Ok(())
    );
}

#[test]
fn istio_mutual_needs_the_appliance_setting() {
    let pki = pki();
    let d = Scratch::new("istio", &pki);
    let gw = istio_gateway(&[server(
        443,
        "{mode: ISTIO_MUTUAL, subjectAltNames: [\"spiffe://cluster.local/ns/default/sa/client\"]}",
    )]);
    let b = d.build(&gw);
    let ns = not_served(&b);
    assert_eq!(ns.len(), 1, "{ns:#?}");
    assert!(
        ns[0].contains("spec.servers[0].tls.mode")
            && ns[0].contains("spec.termination.istioMutual"),
        "{ns:?}"
    );
    let appliance = "---\napiVersion: sluice.dev/v1alpha1\nkind: Appliance\nmetadata: {name: a}\nspec:\n  ports: [{name: p, tap: {name: slm0}, addresses: [10.77.0.1/24]}]\n  termination:\n    istioMutual: {caCertificates: ca.crt, certificateChain: server.crt, privateKey: server.key, caCrl: ca.crl}\n";
    let b = d.build(&format!("{appliance}{gw}"));
    assert_eq!(not_served(&b), Vec::<String>::new());
    let cfg = server_config(&b, "10.77.0.50:443");
    use Event::*;
    assert_eq!(verdict(&cfg, &pki, Some(&pki.good)), Ok(()));
    assert_eq!(
        verdict(&cfg, &pki, Some(&pki.plain)),
        Err(Some(TlsClientCertPinMismatch))
    );
    assert_eq!(
        verdict(&cfg, &pki, Some(&pki.revoked)),
        Err(Some(TlsClientCertRevoked))
    );
    assert_eq!(verdict(&cfg, &pki, None), Err(Some(TlsClientCertMissing)));
}

#[test]
fn gateway_api_frontend_validation_from_config_maps() {
    let pki = pki();
    let d = Scratch::new("gwapi", &pki);
    let indent = |s: &str| -> String { s.lines().map(|l| format!("    {l}\n")).collect() };
    let secret = format!(
        "---\napiVersion: v1\nkind: Secret\nmetadata: {{name: cert, namespace: default}}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
        indent(&pki.server.pem),
        indent(&pki.server.key_pem)
    );
    let cm = |ns: &str, name: &str, key: &str| {
        format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}}}\ndata:\n  {key}: |\n{}",
            indent(&pki.a.cert.pem())
        )
    };
    let listener = |name: &str, port: u16, refs: &str| {
        format!(
            "  - name: {name}\n    port: {port}\n    protocol: HTTPS\n    tls:\n      certificateRefs: [{{name: cert}}]\n      frontendValidation: {{caCertificateRefs: [{refs}]}}\n"
        )
    };
    let manifest = format!(
        "{secret}{}{}{}---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: gw, namespace: default}}\nspec:\n  gatewayClassName: sluice\n  addresses: [{{value: 10.77.0.51}}]\n  listeners:\n{}{}{}{}{}",
        cm("default", "ca", "ca.crt"),
        cm("default", "wrong-key", "root.pem"),
        cm("other", "ca", "ca.crt"),
        listener("ok", 443, "{kind: ConfigMap, group: \"\", name: ca}"),
        listener("wrong-key", 444, "{kind: ConfigMap, group: \"\", name: wrong-key}"),
        listener("secret-kind", 445, "{kind: Secret, group: \"\", name: ca}"),
        listener("cross-ns", 446, "{kind: ConfigMap, group: \"\", name: ca, namespace: other}"),
        listener("missing", 447, "{kind: ConfigMap, group: \"\", name: nope}"),
    );
    let b = d.build(&manifest);
    let ns = not_served(&b);
    assert_eq!(ns.len(), 4, "{ns:#?}");
    assert!(
        ns[0].contains("listeners[1].tls.frontendValidation.caCertificateRefs[0].name")
            && ns[0].contains("has no `ca.crt`"),
        "{ns:?}"
    );
    assert!(
        ns[1].contains("listeners[2].tls.frontendValidation.caCertificateRefs[0].kind"),
        "{ns:?}"
    );
    assert!(
        ns[2].contains("listeners[3].tls.frontendValidation.caCertificateRefs[0].namespace")
            && ns[2].contains("ReferenceGrant"),
        "{ns:?}"
    );
    assert!(
        ns[3].contains("listeners[4]") && ns[3].contains("ConfigMap default/nope: not found"),
        "{ns:?}"
    );
    let cfg = server_config(&b, "10.77.0.51:443");
    use Event::*;
    assert_eq!(verdict(&cfg, &pki, Some(&pki.good)), Ok(()));
    assert_eq!(verdict(&cfg, &pki, None), Err(Some(TlsClientCertMissing)));
    assert_eq!(
        verdict(&cfg, &pki, Some(&pki.other_ca)),
        Err(Some(TlsClientCertUntrusted))
    );
    // The status says why.
    let status = b.status_json().to_string();
    assert!(status.contains("InvalidCACertificateRef"), "{status}");
    assert!(status.contains("InvalidCACertificateKind"), "{status}");
}

/// The forwarded identity of a verified client, from the server's connection.
#[test]
fn forwarded_client_cert_of_a_verified_client() {
    let pki = pki();
    let d = Scratch::new("xfcc", &pki);
    let b = d.build(&istio_gateway(&[server(
        443,
        "{mode: MUTUAL, serverCertificate: server.crt, privateKey: server.key, caCertificates: ca.crt}",
    )]));
    let cfg = server_config(&b, "10.77.0.50:443");
    let s = handshake(&cfg, &client(&pki, Some(&pki.good), true)).expect("handshake");
    let mut buf = [0u8; 1024];
    let n = identity::from_connection(&s, &mut buf).expect("xfcc");
    assert_eq!(
        std::str::from_utf8(&buf[..n]).expect("ascii"),
        format!(
            "Hash={};Subject=\"CN=client\";URI={SPIFFE};DNS=client.example.com",
            hex(&sha256(pki.good.der.as_ref()))
        )
    );
    let optional = d.build(&istio_gateway(&[server(
        443,
        "{mode: OPTIONAL_MUTUAL, serverCertificate: server.crt, privateKey: server.key, caCertificates: ca.crt}",
    )]));
    let s = handshake(
        &server_config(&optional, "10.77.0.50:443"),
        &client(&pki, None, true),
    )
    .expect("handshake");
    assert_eq!(
        identity::from_connection(&s, &mut buf),
        Err(identity::XfccError::NoCertificate)
    );
}

/// `configs/tls-termination/mutual.yaml`: both mutual listeners served, and a client
/// that trusts their certificates but has none of its own is refused for it.
#[test]
fn the_mutual_example_is_served() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../configs/tls-termination");
    let b = build_paths(std::slice::from_ref(&dir))
        .unwrap_or_else(|d| panic!("{:#?}", d.error_lines()));
    assert_eq!(not_served(&b), Vec::<String>::new());
    let mut roots = RootCertStore::empty();
    let ca = std::fs::read(dir.join("../../ctrl/tests/data/tls/ca.crt")).expect("ca");
    for c in rustls::pki_types::pem::PemObject::pem_slice_iter(&ca) {
        let c: CertificateDer<'static> = c.expect("pem");
        roots.add(c).expect("root");
    }
    let client = Arc::new(
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );
    for (dst, sni) in [
        ("10.77.0.51:8444", "rsa.example.com"),
        ("10.77.0.52:443", "ec.example.com"),
    ] {
        let cfg = server_config(&b, dst);
        let name = ServerName::try_from(sni).expect("name");
        let mut c = ClientConnection::new(client.clone(), name).expect("client");
        let mut s = ServerConnection::new(cfg).expect("server");
        let mut err = pump(&mut c, &mut s).err();
        if err.is_none() {
            let mut buf = Vec::new();
            while c.wants_write() {
                c.write_tls(&mut buf).expect("client write");
            }
            let mut rd = &buf[..];
            while !rd.is_empty() && err.is_none() {
                s.read_tls(&mut rd).expect("server read");
                err = s.process_new_packets().err();
            }
        }
        assert_eq!(
            err.as_ref().and_then(refusal),
            Some(Event::TlsClientCertMissing),
            "{dst}: {err:?}"
        );
    }
}

/// Servers sharing a port share one client verifier: their own `credentialName`
/// Secrets may carry the same CA (served together, the SNI picks the certificate); a
/// different CA, or other pins, leaves the later server out (`ProtocolConflict`).
#[test]
fn servers_sharing_a_port_share_the_client_verification() {
    let pki = pki();
    let other = ca("another CA");
    let d = Scratch::new("share", &pki);
    let indent = |s: &str| -> String { s.lines().map(|l| format!("    {l}\n")).collect() };
    let secret = |name: &str, ca: &str| {
        format!(
            "---\napiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: default}}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}  ca.crt: |\n{}",
            indent(&pki.server.pem),
            indent(&pki.server.key_pem),
            indent(ca)
        )
    };
    let host = |port: u16, host: &str, tls: &str| {
        format!(
            "  - port: {{number: {port}, name: {}, protocol: HTTPS}}\n    bind: 10.77.0.50\n    hosts: [\"{host}\"]\n    tls: {tls}\n",
            host.replace('.', "-")
        )
    };
    let b = d.build(&format!(
        "{}{}{}{}",
        secret("one", &pki.a.cert.pem()),
        secret("two", &pki.a.cert.pem()),
        secret("three", &other.cert.pem()),
        istio_gateway(&[
            host(
                443,
                "mtls.example.com",
                "{mode: MUTUAL, credentialName: one}"
            ),
            host(
                443,
                "two.example.com",
                "{mode: MUTUAL, credentialName: two}"
            ),
            host(
                443,
                "three.example.com",
                "{mode: MUTUAL, credentialName: three}"
            ),
            host(
                443,
                "four.example.com",
                "{mode: OPTIONAL_MUTUAL, credentialName: one}"
            ),
        ])
    ));
    let ns = not_served(&b);
    assert_eq!(ns.len(), 2, "{ns:#?}");
    assert!(ns.iter().all(|n| n.contains("ProtocolConflict")), "{ns:#?}");
    assert!(
        ns[0].contains("servers[2]") && ns[1].contains("servers[3]"),
        "{ns:#?}"
    );
    let cfg = server_config(&b, "10.77.0.50:443");
    assert_eq!(verdict(&cfg, &pki, Some(&pki.good)), Ok(()));
    assert_eq!(
        verdict(&cfg, &pki, None),
        Err(Some(Event::TlsClientCertMissing))
    );
}

/// `explain` names the client verification of a terminating listener.
#[test]
fn explain_shows_the_client_verification() {
    let pki = pki();
    let d = Scratch::new("explain", &pki);
    let b = d.build(&istio_gateway(&[
        server(
            443,
            &format!("{{mode: OPTIONAL_MUTUAL, serverCertificate: server.crt, privateKey: server.key, caCertificates: ca.crt, subjectAltNames: [\"{SPIFFE}\"]}}"),
        ),
        server(444, "{mode: SIMPLE, serverCertificate: server.crt, privateKey: server.key}"),
    ]));
    let q = |port: u16| sluice_ctrl::explain::Query {
        proto: sluice_ctrl::compile::ir::L4::Tcp,
        src: "198.51.100.1:40000".parse().expect("src"),
        dst: format!("10.77.0.50:{port}").parse().expect("dst"),
        sni: Some("mtls.example.com".into()),
        http_host: None,
        payload: None,
        http: Default::default(),
    };
    let v = sluice_ctrl::explain::explain(&b, &q(443));
    let c = &v["client_certificate"];
    assert_eq!(c["optional"], true, "{v}");
    assert_eq!(c["subject_alt_names"][0], SPIFFE, "{v}");
    assert!(
        c["trust"][0]
            .as_str()
            .is_some_and(|t| t.ends_with("ca.crt")),
        "{v}"
    );
    let v = sluice_ctrl::explain::explain(&b, &q(444));
    assert!(v["client_certificate"].is_null(), "{v}");
}
