//! Client certificate pinning: a rustls [`ClientCertVerifier`] that lets rustls's WebPki
//! verifier check the chain (trust, validity, revocation) and then holds the end-entity
//! certificate to the listener's pins (Istio `subjectAltNames`, `verifyCertificateSpki`,
//! `verifyCertificateHash`).
//!
//! How pins combine, as Envoy (which Istio configures) checks them:
//! - `subjectAltNames`: some subjectAltName of the certificate equals some listed name
//!   (dNSName compared ignoring ASCII case; URI, such as `spiffe://...`, and rfc822Name
//!   exactly; iPAddress by address);
//! - `verifyCertificateSpki` and `verifyCertificateHash` form one list: the SHA-256 of
//!   the certificate's SubjectPublicKeyInfo equals an SPKI pin, *or* the SHA-256 of the
//!   whole DER certificate equals a hash pin;
//! - both, when both are given. An empty list checks nothing.
//!
//! A certificate that fails a pin is refused with
//! `rustls::Error::InvalidCertificate(CertificateError::ApplicationVerificationFailure)`
//! (counted `tls_client_cert_pin_mismatch` by the terminate engine). A certificate the
//! pins cannot read (a malformed extension WebPki let through) fails them too.
//!
//! Per handshake the pins cost what parsing needs and no more: the certificate is read
//! in place ([`super::x509`]), the two digests are computed on the stack, no lock is
//! taken and nothing is allocated beyond what the wrapped verifier does.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::hash::Hash;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};

use super::x509::{Leaf, San};

/// A SHA-256 digest.
pub type Sha256 = [u8; 32];

/// One accepted subjectAltName.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SanPin {
    /// The name as listed: matches a dNSName ignoring ASCII case, a URI or rfc822Name
    /// exactly.
    text: Box<[u8]>,
    /// The address, when the listed name is one: matches an iPAddress.
    ip: Option<IpAddr>,
}

/// The pins of a listener (see the [module docs](self)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pins {
    sans: Box<[SanPin]>,
    spki: Box<[Sha256]>,
    cert: Box<[Sha256]>,
}

impl Pins {
    /// Pins from the accepted subjectAltNames, SPKI digests and certificate digests.
    pub fn new(sans: &[String], spki: Vec<Sha256>, cert: Vec<Sha256>) -> Pins {
        Pins {
            sans: sans
                .iter()
                .map(|s| SanPin {
                    text: s.as_bytes().into(),
                    ip: s.parse().ok(),
                })
                .collect(),
            spki: spki.into(),
            cert: cert.into(),
        }
    }

    /// Whether there is nothing to check.
    pub fn is_empty(&self) -> bool {
        self.sans.is_empty() && self.spki.is_empty() && self.cert.is_empty()
    }

    /// Whether DER certificate `der` passes the pins; `sha256` hashes.
    pub fn check(&self, der: &[u8], sha256: &dyn Hash) -> bool {
        if self.is_empty() {
            return true;
        }
        let Ok(leaf) = Leaf::parse(der) else {
            return false;
        };
        if !self.sans.is_empty() && !leaf.sans().any(|s| self.san_listed(&s)) {
            return false;
        }
        if self.spki.is_empty() && self.cert.is_empty() {
            return true;
        }
        if !self.spki.is_empty() && self.spki.iter().any(|p| digest_is(sha256, leaf.spki, p)) {
            return true;
        }
        !self.cert.is_empty() && self.cert.iter().any(|p| digest_is(sha256, der, p))
    }

    fn san_listed(&self, san: &San<'_>) -> bool {
        self.sans.iter().any(|p| match san {
            San::Dns(n) => n.eq_ignore_ascii_case(&p.text),
            San::Uri(n) | San::Email(n) => **n == *p.text,
            San::Ip(_) => p.ip.is_some() && p.ip == san.ip(),
            San::Other => false,
        })
    }
}

/// Whether SHA-256 of `data` is `want`.
fn digest_is(sha256: &dyn Hash, data: &[u8], want: &Sha256) -> bool {
    sha256.hash(data).as_ref() == want.as_slice()
}

/// SHA-256 of `data` with hash provider `sha256`, on the stack.
pub fn sha256_of(sha256: &dyn Hash, data: &[u8]) -> Sha256 {
    let mut out = [0u8; 32];
    let h = sha256.hash(data);
    let n = h.as_ref().len().min(32);
    out[..n].copy_from_slice(&h.as_ref()[..n]);
    out
}

/// The SHA-256 of rustls's aws-lc-rs provider.
pub fn provider_sha256() -> &'static dyn Hash {
    match rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256 {
        rustls::SupportedCipherSuite::Tls13(s) => s.common.hash_provider,
        rustls::SupportedCipherSuite::Tls12(s) => s.common.hash_provider,
    }
}

/// A [`ClientCertVerifier`] that checks the chain with `inner` (rustls's WebPki
/// verifier) and then the end-entity certificate against [`Pins`].
pub struct PinnedVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    pins: Pins,
    sha256: &'static dyn Hash,
}

impl fmt::Debug for PinnedVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedVerifier")
            .field("inner", &self.inner)
            .field("pins", &self.pins)
            .finish_non_exhaustive()
    }
}

impl PinnedVerifier {
    /// Wraps `inner` with `pins`, hashing with `sha256`.
    pub fn new(inner: Arc<dyn ClientCertVerifier>, pins: Pins, sha256: &'static dyn Hash) -> Self {
        PinnedVerifier {
            inner,
            pins,
            sha256,
        }
    }
}

impl ClientCertVerifier for PinnedVerifier {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let ok = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        if self.pins.check(end_entity.as_ref(), self.sha256) {
            Ok(ok)
        } else {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::x509::skeleton::{cert, tlv};

    /// A skeleton certificate whose SPKI element is `tlv(0x30, [1, 2, 3])`.
    fn der(sans: &[(u8, &[u8])]) -> Vec<u8> {
        cert(&[], sans)
    }

    fn sha(b: &[u8]) -> Sha256 {
        sha256_of(provider_sha256(), b)
    }

    #[test]
    fn sans_spki_and_hash_combine_as_envoy_does() {
        let h = provider_sha256();
        let c = der(&[
            (0x82, b"Client.Example.com"),
            (0x86, b"spiffe://td/ns/a/sa/b"),
            (0x81, b"me@example.com"),
            (0x87, &[192, 0, 2, 7]),
        ]);
        let spki = sha(&tlv(0x30, &[1, 2, 3]));
        let hash = sha(&c);
        let pins = |sans: &[&str], s: Vec<Sha256>, h: Vec<Sha256>| {
            Pins::new(
                &sans.iter().map(|x| x.to_string()).collect::<Vec<_>>(),
                s,
                h,
            )
        };
        assert!(Pins::default().is_empty() && Pins::default().check(&c, h));
        // SANs: DNS ignoring case, URI and email exactly, IP by address.
        assert!(pins(&["client.example.COM"], vec![], vec![]).check(&c, h));
        assert!(pins(&["spiffe://td/ns/a/sa/b"], vec![], vec![]).check(&c, h));
        assert!(!pins(&["SPIFFE://td/ns/a/sa/b"], vec![], vec![]).check(&c, h));
        assert!(pins(&["me@example.com"], vec![], vec![]).check(&c, h));
        assert!(pins(&["192.0.2.7"], vec![], vec![]).check(&c, h));
        assert!(!pins(&["192.0.2.8", "other.example.com"], vec![], vec![]).check(&c, h));
        // SPKI or hash, either.
        assert!(pins(&[], vec![spki], vec![]).check(&c, h));
        assert!(pins(&[], vec![], vec![hash]).check(&c, h));
        assert!(pins(&[], vec![[0; 32]], vec![hash]).check(&c, h));
        assert!(pins(&[], vec![spki], vec![[0; 32]]).check(&c, h));
        assert!(!pins(&[], vec![[0; 32]], vec![[0; 32]]).check(&c, h));
        // And the SANs besides.
        assert!(pins(&["spiffe://td/ns/a/sa/b"], vec![spki], vec![]).check(&c, h));
        assert!(!pins(&["spiffe://td/ns/a/sa/x"], vec![spki], vec![hash]).check(&c, h));
        // A certificate the reader cannot walk fails any pin, passes none.
        assert!(!pins(&[], vec![spki], vec![]).check(&c[..c.len() - 1], h));
        assert!(Pins::default().check(b"junk", h));
    }

    #[test]
    fn sha256_is_sha256() {
        // FIPS 180-2 example: SHA-256("abc").
        assert_eq!(
            sha(b"abc"),
            [
                0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea, 0x41, 0x41, 0x40, 0xde, 0x5d, 0xae,
                0x22, 0x23, 0xb0, 0x03, 0x61, 0xa3, 0x96, 0x17, 0x7a, 0x9c, 0xb4, 0x10, 0xff, 0x61,
                0xf2, 0x00, 0x15, 0xad
            ]
        );
    }
}
