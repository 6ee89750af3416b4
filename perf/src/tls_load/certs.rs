//! The server certificates of the TLS benchmarks, made at run time with the `openssl`
//! command into a temporary directory (removed on drop): one self-signed certificate per
//! key type for [`super::SERVER_NAME`] (CN and SAN), `CA:FALSE`, `serverAuth`.
//!
//! Every contender serves the same files: nginx reads `<key>.crt` and `<key>.key`,
//! HAProxy `<key>.pem` (certificate then key, the `crt` format), sluice a
//! `kubernetes.io/tls` Secret made from the same two PEM texts. The load client pins the
//! certificate (see [`super::client`]).

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
    })
}
