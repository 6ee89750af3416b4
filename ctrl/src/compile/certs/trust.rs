//! Client certificate trust: the CA certificates and revocation lists a terminating
//! listener verifies client certificates with, loaded and checked with the server
//! certificates ([`super::load`]), and the pins of [`ClientAuth`] parsed.
//!
//! Checks: a CA bundle holds at least one PEM certificate and each one is a usable trust
//! anchor (webpki reads its subject and key); a CRL is PEM (`X509 CRL`) that rustls's
//! WebPki verifier accepts (signature checked against the issuer when a client
//! certificate of that issuer comes). A failure leaves the listener out, with the file
//! or the Secret/ConfigMap named.

use std::sync::Arc;

use base64::Engine as _;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use sluice_dataplane::tables::client_auth::{Pins, Sha256};

use crate::compile::ir::ClientAuth;

/// The CA certificates and CRLs of a listener's client verification.
#[derive(Clone)]
pub struct ClientTrust {
    /// Where they came from (a file, `Secret ns/name`, `ConfigMap ns/name`).
    pub source: String,
    /// The CA certificates, as trust anchors.
    pub roots: Arc<RootCertStore>,
    /// The certificate revocation lists.
    pub crls: Vec<CertificateRevocationListDer<'static>>,
}

impl PartialEq for ClientTrust {
    /// The same source with the same CA certificates and CRLs.
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
            && self.crls == other.crls
            && self.roots.roots == other.roots.roots
    }
}

impl Eq for ClientTrust {}

impl std::fmt::Debug for ClientTrust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTrust")
            .field("source", &self.source)
            .field("roots", &self.roots.len())
            .field("crls", &self.crls.len())
            .finish()
    }
}

/// Why client trust could not be loaded.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// No PEM certificate in the CA bundle.
    #[error("no PEM CA certificate")]
    NoCertificate,
    /// The CA bundle is not PEM.
    #[error("CA certificates: not valid PEM: {0}")]
    Pem(String),
    /// A CA certificate webpki cannot use as a trust anchor.
    #[error("CA certificate {index} is not a usable trust anchor: {detail}")]
    Anchor {
        /// Its position in the bundle (0 = first).
        index: usize,
        /// webpki's word.
        detail: String,
    },
    /// The CRL is not PEM, or holds none.
    #[error("CRL: {0}")]
    Crl(String),
    /// rustls refused the CRL (or the CA certificates).
    #[error("rustls refuses the CA certificates or CRL: {0}")]
    Verifier(String),
}

/// Loads CA certificates (`ca_pem`) and, if given, CRLs (`crl_pem`, one or more PEM
/// `X509 CRL` blocks) from `source`.
pub fn load_trust(
    source: String,
    ca_pem: &[u8],
    crl_pem: Option<&[u8]>,
) -> Result<ClientTrust, TrustError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(ca_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TrustError::Pem(e.to_string()))?;
    if certs.is_empty() {
        return Err(TrustError::NoCertificate);
    }
    let mut roots = RootCertStore::empty();
    for (index, c) in certs.into_iter().enumerate() {
        roots.add(c).map_err(|e| TrustError::Anchor {
            index,
            detail: e.to_string(),
        })?;
    }
    let crls = match crl_pem {
        None => Vec::new(),
        Some(pem) => {
            let crls: Vec<CertificateRevocationListDer<'static>> =
                CertificateRevocationListDer::pem_slice_iter(pem)
                    .collect::<Result<_, _>>()
                    .map_err(|e| TrustError::Crl(format!("not valid PEM: {e}")))?;
            if crls.is_empty() {
                return Err(TrustError::Crl("no PEM `X509 CRL` block".into()));
            }
            crls
        }
    };
    let trust = ClientTrust {
        source,
        roots: Arc::new(roots),
        crls,
    };
    // The verifier parses the CRLs: a bad one is found here, not at the first handshake.
    verifier(&trust, false).map_err(|e| TrustError::Verifier(e.to_string()))?;
    Ok(trust)
}

/// rustls's WebPki client verifier over `trust` (aws-lc-rs provider): required, or
/// optional (`OPTIONAL_MUTUAL`: a client without a certificate is let in).
pub fn verifier(
    trust: &ClientTrust,
    optional: bool,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, rustls::server::VerifierBuilderError>
{
    let mut b = WebPkiClientVerifier::builder_with_provider(
        trust.roots.clone(),
        Arc::new(crate::compile::tls::crypto::default_provider()),
    )
    .with_crls(trust.crls.iter().cloned());
    if optional {
        b = b.allow_unauthenticated();
    }
    b.build()
}

/// Why a pin does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PinError {
    /// A `verifyCertificateSpki` entry that is not the base64 of 32 bytes.
    #[error("verifyCertificateSpki[{0}] `{1}`: not the base64 of a SHA-256 digest (32 bytes)")]
    Spki(usize, String),
    /// A `verifyCertificateHash` entry that is not 64 hex digits (colons allowed).
    #[error(
        "verifyCertificateHash[{0}] `{1}`: not a hex SHA-256 digest (64 hex digits, colons allowed)"
    )]
    Hash(usize, String),
}

/// An SPKI pin: base64 (standard alphabet, padded or not) of a SHA-256 digest.
pub fn parse_spki(s: &str) -> Option<Sha256> {
    let s = s.trim();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s)
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(s))
        .ok()?;
    bytes.try_into().ok()
}

/// A certificate hash pin: 64 hex digits, either case, with or without `:` between
/// bytes (`AB:CD:...` or `abcd...`).
pub fn parse_hash(s: &str) -> Option<Sha256> {
    let digits: Vec<u8> = s.trim().bytes().filter(|&b| b != b':').collect();
    if digits.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in digits.chunks(2).enumerate() {
        let hi = (pair[0] as char).to_digit(16)?;
        let lo = (pair[1] as char).to_digit(16)?;
        out[i] = u8::try_from(hi * 16 + lo).ok()?;
    }
    Some(out)
}

/// The pins of client verification `c`, or the first that does not parse.
pub fn pins(c: &ClientAuth) -> Result<Pins, PinError> {
    let spki = c
        .spki
        .iter()
        .enumerate()
        .map(|(i, s)| parse_spki(s).ok_or_else(|| PinError::Spki(i, s.clone())))
        .collect::<Result<Vec<_>, _>>()?;
    let hash = c
        .hash
        .iter()
        .enumerate()
        .map(|(i, s)| parse_hash(s).ok_or_else(|| PinError::Hash(i, s.clone())))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Pins::new(&c.subject_alt_names, spki, hash))
}
