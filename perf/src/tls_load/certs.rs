//! The server certificates of the TLS benchmarks, made at run time with the `openssl`
//! command into a temporary directory (removed on drop): one self-signed certificate per
//! key type for [`super::SERVER_NAME`] (CN and SAN), `CA:FALSE`, `serverAuth`.
//!
//! Every contender serves the same files: nginx reads `<key>.crt` and `<key>.key`,
//! HAProxy `<key>.pem` (certificate then key, the `crt` format), sluice a
//! `kubernetes.io/tls` Secret made from the same two PEM texts. The load client pins the
//! certificate (see [`super::client`]).
//!
//! With client authentication ([`Certs::with_client_auth`]): a client CA (self-signed,
//! `CA:TRUE`) and one client certificate it signs (ECDSA P-256, CN `bench-client`, SAN
//! `URI:spiffe://bench.example/client`, `clientAuth`): every contender requires and
//! verifies it against the CA (nginx `ssl_verify_client on`, HAProxy `verify required`,
//! sluice Istio `MUTUAL` / Gateway API `frontendValidation`), the client presents it.

use super::SERVER_NAME;
use crate::sni_load::proxy::WorkDir;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A server key type of the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyType {
    /// ECDSA on P-256 (signatures `ecdsa_secp256r1_sha256`).
    EcdsaP256,
    /// RSA 2048 bits (TLS 1.3 signs with `rsa_pss_rsae_sha256`).
    Rsa2048,
}

impl KeyType {
    /// Every key type, in report order.
    pub const ALL: [KeyType; 2] = [KeyType::EcdsaP256, KeyType::Rsa2048];

    /// Its name in the report and on the command line (`ecdsa`, `rsa`).
    pub fn name(self) -> &'static str {
        match self {
            KeyType::EcdsaP256 => "ecdsa",
            KeyType::Rsa2048 => "rsa",
        }
    }

    /// What it is, in words.
    pub fn describe(self) -> &'static str {
        match self {
            KeyType::EcdsaP256 => "ECDSA P-256",
            KeyType::Rsa2048 => "RSA 2048",
        }
    }

    /// `openssl req -newkey` arguments for a key of this type.
    fn newkey(self) -> [&'static str; 4] {
        match self {
            KeyType::EcdsaP256 => ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
            KeyType::Rsa2048 => ["-newkey", "rsa", "-pkeyopt", "rsa_keygen_bits:2048"],
        }
    }
}

/// One key type's files and texts.
#[derive(Debug, Clone)]
pub struct Cert {
    /// The key type.
    pub key_type: KeyType,
    /// The certificate, PEM.
    pub cert_file: PathBuf,
    /// The private key, PEM (PKCS#8).
    pub key_file: PathBuf,
    /// Certificate then key in one PEM file (HAProxy's `crt`).
    pub combined_file: PathBuf,
    /// The certificate's PEM text.
    pub cert_pem: String,
    /// The key's PEM text.
    pub key_pem: String,
    /// The certificate, DER (what the client pins).
    pub der: CertificateDer<'static>,
    /// Client authentication, when the run asks for it.
    pub client_auth: Option<ClientAuth>,
}

/// A client CA and the client certificate it signed.
#[derive(Debug, Clone)]
pub struct ClientAuth {
    /// The CA certificate, PEM (what the contenders trust).
    pub ca_file: PathBuf,
    /// The CA certificate's PEM text.
    pub ca_pem: String,
    /// The client's certificate, DER (what the client presents).
    pub cert_der: CertificateDer<'static>,
    /// The client's private key, PEM (PKCS#8).
    pub key_pem: String,
}

/// The certificates of a run, in a directory removed on drop.
#[derive(Debug)]
pub struct Certs {
    dir: WorkDir,
    /// One per key type asked for.
    pub certs: Vec<Cert>,
}

impl Certs {
    /// Makes a certificate of each of `types` with `openssl`.
    pub fn generate(types: &[KeyType]) -> Result<Certs, String> {
        let dir = WorkDir::new("certs")?;
        let certs = types
            .iter()
            .map(|t| generate_one(&dir.path, *t))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Certs { dir, certs })
    }

    /// The directory the files are in.
    pub fn dir(&self) -> &Path {
        &self.dir.path
    }

    /// Makes a client CA and a client certificate (see the module docs) and gives them
    /// to every certificate of the run: the contenders then require client certificates.
    pub fn with_client_auth(&mut self) -> Result<(), String> {
        let auth = generate_client_auth(&self.dir.path)?;
        for c in &mut self.certs {
            c.client_auth = Some(auth.clone());
        }
        Ok(())
    }

    /// The certificate of key type `t`.
    pub fn get(&self, t: KeyType) -> Option<&Cert> {
        self.certs.iter().find(|c| c.key_type == t)
    }
}

fn generate_one(dir: &Path, t: KeyType) -> Result<Cert, String> {
    let cert_file = dir.join(format!("{}.crt", t.name()));
    let key_file = dir.join(format!("{}.key", t.name()));
    let combined_file = dir.join(format!("{}.pem", t.name()));
    let o = Command::new("openssl")
        .args(["req", "-x509", "-new", "-nodes", "-days", "30", "-sha256"])
        .args(t.newkey())
        .arg("-keyout")
        .arg(&key_file)
        .arg("-out")
        .arg(&cert_file)
        .args(["-subj", &format!("/CN={SERVER_NAME}")])
        .args(["-addext", &format!("subjectAltName=DNS:{SERVER_NAME}")])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .args(["-addext", "keyUsage=critical,digitalSignature"])
        .args(["-addext", "extendedKeyUsage=serverAuth"])
        .output()
        .map_err(|e| format!("openssl: {e} (package openssl, scripts/setup)"))?;
    if !o.status.success() {
        return Err(format!(
            "openssl req ({}): {}",
            t.describe(),
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()));
    let cert_pem = read(&cert_file)?;
    let key_pem = read(&key_file)?;
    std::fs::write(&combined_file, format!("{cert_pem}{key_pem}"))
        .map_err(|e| format!("{}: {e}", combined_file.display()))?;
    let der = CertificateDer::from_pem_slice(cert_pem.as_bytes())
        .map_err(|e| format!("{}: {e:?}", cert_file.display()))?;
    Ok(Cert {
        key_type: t,
        cert_file,
        key_file,
        combined_file,
        cert_pem,
        key_pem,
        der,
        client_auth: None,
    })
}

/// Runs the `openssl` command `args` sets up; its failure in words (`what` it made).
fn openssl(what: &str, args: impl FnOnce(&mut Command) -> &mut Command) -> Result<(), String> {
    let mut c = Command::new("openssl");
    let o = args(&mut c)
        .output()
        .map_err(|e| format!("openssl: {e} (package openssl, scripts/setup)"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "openssl ({what}): {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ))
    }
}

fn generate_client_auth(dir: &Path) -> Result<ClientAuth, String> {
    const EC: [&str; 4] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"];
    let f = |n: &str| dir.join(n);
    let (ca_file, ca_key) = (f("client-ca.crt"), f("client-ca.key"));
    let (csr, crt, key, ext) = (
        f("client.csr"),
        f("client.crt"),
        f("client.key"),
        f("client.ext"),
    );
    openssl("client CA", |c| {
        c.args(["req", "-x509", "-new", "-nodes", "-days", "30"])
            .args(EC)
            .arg("-keyout")
            .arg(&ca_key)
            .arg("-out")
            .arg(&ca_file)
            .args(["-subj", "/CN=bench client CA"])
            .args(["-addext", "basicConstraints=critical,CA:TRUE"])
            .args(["-addext", "keyUsage=critical,keyCertSign,cRLSign"])
    })?;
    openssl("client key", |c| {
        c.args(["req", "-new", "-nodes"])
            .args(EC)
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&csr)
            .args(["-subj", "/CN=bench-client"])
    })?;
    std::fs::write(
        &ext,
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n\
         extendedKeyUsage=clientAuth\nsubjectAltName=URI:spiffe://bench.example/client\n",
    )
    .map_err(|e| format!("{}: {e}", ext.display()))?;
    openssl("client certificate", |c| {
        c.args(["x509", "-req", "-days", "30", "-sha256", "-in"])
            .arg(&csr)
            .arg("-CA")
            .arg(&ca_file)
            .arg("-CAkey")
            .arg(&ca_key)
            .arg("-CAcreateserial")
            .arg("-extfile")
            .arg(&ext)
            .arg("-out")
            .arg(&crt)
    })?;
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()));
    let ca_pem = read(&ca_file)?;
    let cert_der = CertificateDer::from_pem_slice(read(&crt)?.as_bytes())
        .map_err(|e| format!("{}: {e:?}", crt.display()))?;
    Ok(ClientAuth {
        ca_file,
        ca_pem,
        cert_der,
        key_pem: read(&key)?,
    })
}
