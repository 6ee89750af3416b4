//! Certificates of terminating listeners: where they come from, how they are loaded and
//! checked, and what is reported when one is bad.
//!
//! Sources:
//! - Gateway API `tls.certificateRefs` (several per listener, the first the default):
//!   core Secrets (group `""`, kind `Secret`) of type `kubernetes.io/tls` with `tls.crt`
//!   and `tls.key`. Another kind is `InvalidCertificateRef`; a Secret in another
//!   namespace needs a ReferenceGrant in that namespace from `Gateway` (of the gateway's
//!   namespace) to `Secret`, else `RefNotPermitted`.
//! - Istio `credentialName`: a Secret in the Gateway's namespace, `kubernetes.io/tls`
//!   or generic with `tls.crt`/`tls.key` (or `cert`/`key`), as Istio reads it. It wins
//!   over `serverCertificate`/`privateKey` (validation warns when both are given).
//! - Istio `serverCertificate` + `privateKey`: PEM files, read when the configuration is
//!   built. A relative path is relative to the directory of the manifest file that names
//!   it (the working directory for stdin).
//!
//! Checks ([`load_pem`]): PEM certificates (leaf first; at least one), a PEM private key
//! (RSA or ECDSA, in PKCS#1, PKCS#8 or SEC1; Ed25519 in PKCS#8) that rustls's ring
//! provider can sign with, the key matching the leaf's public key, and the leaf valid
//! now (notBefore <= now <= notAfter).
//!
//! A listener (or Istio server) with any bad certificate is not served: a
//! [`NotServed`](crate::diag::Severity::NotServed) diagnostic at the reference names the
//! Secret (`Secret ns/name` with its file:line) or the file and says why; Gateway API
//! status shows `ResolvedRefs=False` (`InvalidCertificateRef` or `RefNotPermitted`) and
//! `Programmed=False`. Everything else is served.

pub mod der;
pub mod trust;

pub use trust::ClientTrust;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use serde::Serialize;

use crate::diag::Diagnostic;
use crate::load::Item;
use crate::model::core::SecretData;
use crate::model::gateway_api::{self as gw, GatewayTlsMode};
use crate::model::istio;
use crate::model::{Kind, Object};
use crate::validate::Index;

use super::ir::Ir;
use super::served::Exclusions;
use der::UnixTime;

/// `ResolvedRefs` reason: a certificateRef that is not a usable certificate.
pub const INVALID_CERTIFICATE_REF: &str = "InvalidCertificateRef";
/// `ResolvedRefs` reason: a cross-namespace reference no ReferenceGrant permits.
pub const REF_NOT_PERMITTED: &str = "RefNotPermitted";
/// `ResolvedRefs` reason: a `frontendValidation.caCertificateRefs` entry that does not
/// resolve to usable CA certificates.
pub const INVALID_CA_CERTIFICATE_REF: &str = "InvalidCACertificateRef";
/// `ResolvedRefs` reason: a `caCertificateRefs` entry of a kind sluice does not read.
pub const INVALID_CA_CERTIFICATE_KIND: &str = "InvalidCACertificateKind";

/// A certificate chain with its private key, loaded and checked.
#[derive(Clone, Serialize)]
pub struct Certificate {
    /// Where it came from: `Secret ns/name` or the file path of the certificate.
    pub source: String,
    /// The leaf's subjectAltName dNSNames, as written.
    pub sans: Vec<String>,
    /// Start of the leaf's validity (RFC 3339).
    #[serde(rename = "notBefore")]
    pub not_before: String,
    /// End of the leaf's validity (RFC 3339).
    #[serde(rename = "notAfter")]
    pub not_after: String,
    /// The key's algorithm: `RSA`, `ECDSA` or `Ed25519`.
    #[serde(rename = "keyType")]
    pub key_type: &'static str,
    /// Certificates in the chain (leaf included).
    pub chain: usize,
    /// The chain and the signing key rustls serves.
    #[serde(skip)]
    pub key: Arc<CertifiedKey>,
}

impl std::fmt::Debug for Certificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certificate")
            .field("source", &self.source)
            .field("sans", &self.sans)
            .field("not_after", &self.not_after)
            .field("key_type", &self.key_type)
            .finish_non_exhaustive()
    }
}

impl PartialEq for Certificate {
    /// The same source with the same chain (the key follows from the chain: it matches
    /// the leaf).
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source && self.key.cert == other.key.cert
    }
}

impl Eq for Certificate {}

/// Why a certificate could not be used.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// The Secret does not exist.
    #[error("not found")]
    SecretNotFound,
    /// The Secret has another type than the reference needs.
    #[error("has type `{0}`; kubernetes.io/tls is required")]
    SecretType(String),
    /// The Secret lacks an entry.
    #[error("has no `{0}`")]
    MissingEntry(&'static str),
    /// A certificate or key file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// No PEM certificate.
    #[error("no PEM certificate (an empty chain)")]
    NoCertificate,
    /// PEM that does not decode.
    #[error("{what}: not valid PEM: {detail}")]
    Pem {
        /// Certificate or key.
        what: &'static str,
        /// The decoder's word.
        detail: String,
    },
    /// No PEM private key.
    #[error("no PEM private key (PKCS#1, PKCS#8 or SEC1)")]
    NoKey,
    /// A key rustls cannot sign with.
    #[error("private key not usable: {0}")]
    Key(rustls::Error),
    /// The leaf does not parse.
    #[error("leaf certificate does not parse: {0}")]
    Leaf(#[from] der::DerError),
    /// The key is not the leaf's.
    #[error("the private key does not match the certificate")]
    Mismatch,
    /// The key cannot be compared with the leaf.
    #[error("cannot check the private key against the certificate: {0}")]
    Unchecked(rustls::Error),
    /// The leaf has expired.
    #[error("certificate expired (notAfter {0})")]
    Expired(String),
    /// The leaf is not valid yet.
    #[error("certificate not yet valid (notBefore {0})")]
    NotYetValid(String),
}

/// Seconds since the Unix epoch, now.
pub fn now() -> UnixTime {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    UnixTime(secs)
}

/// Loads and checks a PEM chain and key (see the [module docs](self)), valid at `now`.
pub fn load_pem(
    source: String,
    cert_pem: &[u8],
    key_pem: &[u8],
    now: UnixTime,
) -> Result<Certificate, CertError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| CertError::Pem {
            what: "certificate",
            detail: e.to_string(),
        })?;
    let leaf = chain.first().ok_or(CertError::NoCertificate)?;
    let info = der::read_leaf(leaf.as_ref())?;
    if now > info.not_after {
        return Err(CertError::Expired(info.not_after.to_string()));
    }
    if now < info.not_before {
        return Err(CertError::NotYetValid(info.not_before.to_string()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => CertError::NoKey,
        e => CertError::Pem {
            what: "private key",
            detail: e.to_string(),
        },
    })?;
    let signer =
        crate::compile::tls::crypto::sign::any_supported_type(&key).map_err(CertError::Key)?;
    let key_type = match signer.algorithm() {
        rustls::SignatureAlgorithm::RSA => "RSA",
        rustls::SignatureAlgorithm::ECDSA => "ECDSA",
        rustls::SignatureAlgorithm::ED25519 => "Ed25519",
        _ => "other",
    };
    let chain_len = chain.len();
    let certified = CertifiedKey::new(chain, signer);
    match certified.keys_match() {
        Ok(()) => {}
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            return Err(CertError::Mismatch)
        }
        Err(e) => return Err(CertError::Unchecked(e)),
    }
    Ok(Certificate {
        source,
        sans: info.dns_names,
        not_before: info.not_before.to_string(),
        not_after: info.not_after.to_string(),
        key_type,
        chain: chain_len,
        key: Arc::new(certified),
    })
}

/// The certificates of each terminating gateway listener (Gateway API) or server
/// (Istio) that loaded, by (gateway item, listener or server index), in reference order.
#[derive(Debug, Default)]
pub struct CertStore {
    by_listener: HashMap<(usize, usize), Vec<Arc<Certificate>>>,
    trust: HashMap<(usize, usize), Arc<ClientTrust>>,
}

impl CertStore {
    /// The certificates of listener (or server) `li` of gateway item `gi`.
    pub fn get(&self, gi: usize, li: usize) -> &[Arc<Certificate>] {
        self.by_listener.get(&(gi, li)).map_or(&[], Vec::as_slice)
    }

    /// Gives each member of each IR listener its certificates.
    pub fn attach(&self, ir: &mut Ir) {
        for l in &mut ir.listeners {
            for m in &mut l.members {
                m.certificates = self.get(m.source.0, m.source.1).to_vec();
                m.client_trust = self.trust.get(&m.source).cloned();
            }
        }
    }
}

/// Whether Gateway API listener `l` terminates TLS (HTTPS, or TLS in mode Terminate,
/// the default).
pub fn gateway_terminates(l: &gw::Listener) -> bool {
    match l.protocol.as_str() {
        "HTTPS" => true,
        "TLS" => l
            .tls
            .as_ref()
            .is_some_and(|t| t.mode == GatewayTlsMode::Terminate),
        _ => false,
    }
}

/// Whether Istio server `s` terminates TLS (`SIMPLE`, `MUTUAL`, `OPTIONAL_MUTUAL` or
/// `ISTIO_MUTUAL` on an HTTPS or TLS server).
pub fn istio_terminates(s: &istio::Server) -> bool {
    matches!(
        s.port.protocol.to_ascii_uppercase().as_str(),
        "HTTPS" | "TLS"
    ) && s.tls.as_ref().is_some_and(|t| {
        matches!(
            t.mode,
            istio::TlsMode::Simple
                | istio::TlsMode::Mutual
                | istio::TlsMode::OptionalMutual
                | istio::TlsMode::IstioMutual
        )
    })
}

/// A listener's certificates and client trust, or every reference of it that failed.
type Loaded = Result<(Vec<Arc<Certificate>>, Option<Arc<ClientTrust>>), Vec<Failure>>;

/// One reference's failure: the field, the condition reason and the message.
struct Failure {
    field: String,
    reason: &'static str,
    message: String,
}

/// Loads the certificates of every served terminating listener and server of `items`;
/// each one that fails is reported not served in `out` (the caller recomputes the
/// exclusions from it).
pub fn load(items: &[Item], excluded: &Exclusions, out: &mut Vec<Diagnostic>) -> CertStore {
    let index = Index::new(items);
    let now = now();
    let appliance = items
        .iter()
        .find(|it| matches!(it.object, Object::Appliance(_)));
    let mut loader = Loader {
        index: &index,
        now,
        secrets: HashMap::new(),
        appliance,
    };
    let mut store = CertStore::default();
    for (gi, it) in items.iter().enumerate() {
        let mut results: Vec<(usize, Loaded)> = Vec::new();
        match &it.object {
            Object::Gateway(g) => {
                for (li, l) in g.spec.listeners.iter().enumerate() {
                    if gateway_terminates(l) && !excluded.listener(gi, li) {
                        results.push((li, loader.gateway_listener(it, li, l)));
                    }
                }
            }
            Object::IstioGateway(g) => {
                for (si, s) in g.spec.servers.iter().enumerate() {
                    if istio_terminates(s) && !excluded.listener(gi, si) {
                        results.push((si, loader.istio_server(it, si, s)));
                    }
                }
            }
            _ => continue,
        }
        for (li, r) in results {
            match r {
                Ok((certs, trust)) => {
                    store.by_listener.insert((gi, li), certs);
                    if let Some(t) = trust {
                        store.trust.insert((gi, li), t);
                    }
                }
                Err(failures) => {
                    for f in failures {
                        it.reporter(out).not_served_because(
                            &it.path(&f.field),
                            f.reason,
                            f.message,
                        );
                    }
                }
            }
        }
    }
    store
}

/// Loads certificates, each Secret once.
struct Loader<'a> {
    index: &'a Index<'a>,
    now: UnixTime,
    /// (namespace, name, Istio rules) -> the Secret's certificate or why not.
    secrets: HashMap<(String, String, bool), Result<Arc<Certificate>, String>>,
    /// The Appliance (`spec.termination.istioMutual`), if any.
    appliance: Option<&'a Item>,
}

impl Loader<'_> {
    fn gateway_listener(&mut self, it: &Item, li: usize, l: &gw::Listener) -> Loaded {
        let gns = it.object.meta().namespace();
        let refs = l.tls.iter().flat_map(|t| t.certificate_refs.iter());
        let mut certs = Vec::new();
        let mut failures = Vec::new();
        for (j, c) in refs.enumerate() {
            let at = format!("spec.listeners[{li}].tls.certificateRefs[{j}]");
            let kind = c.kind.as_deref().unwrap_or("Secret");
            let group = c.group.as_deref().unwrap_or("");
            if kind != "Secret" || !group.is_empty() {
                failures.push(Failure {
                    field: format!("{at}.kind"),
                    reason: INVALID_CERTIFICATE_REF,
                    message: format!(
                        "certificateRef of kind {}{kind} is not supported (only core Secrets): \
                         this listener is not served",
                        if group.is_empty() {
                            String::new()
                        } else {
                            format!("{group}/")
                        }
                    ),
                });
                continue;
            }
            let cns = c.namespace.as_deref().unwrap_or(gns);
            if !self.index.grant_allows(
                ("gateway.networking.k8s.io", "Gateway", gns),
                ("", "Secret", cns, &c.name),
            ) {
                failures.push(Failure {
                    field: format!("{at}.namespace"),
                    reason: REF_NOT_PERMITTED,
                    message: format!(
                        "Secret {cns}/{}: no ReferenceGrant in namespace {cns} lets Gateways of \
                         namespace {gns} refer to it: this listener is not served",
                        c.name
                    ),
                });
                continue;
            }
            match self.secret(cns, &c.name, false) {
                Ok(cert) => certs.push(cert),
                Err(message) => failures.push(Failure {
                    field: format!("{at}.name"),
                    reason: INVALID_CERTIFICATE_REF,
                    message: format!("{message}: this listener is not served"),
                }),
            }
        }
        let trust = match l.tls.as_ref().and_then(|t| t.frontend_validation.as_ref()) {
            Some(v) => self.frontend_trust(gns, li, v, &mut failures),
            None => None,
        };
        if failures.is_empty() {
            Ok((certs, trust))
        } else {
            Err(failures)
        }
    }

    /// The CA certificates of a Gateway API listener's `frontendValidation`: each
    /// reference a core ConfigMap with `ca.crt` (cross-namespace with a ReferenceGrant),
    /// their certificates pooled. Failures are pushed to `failures`.
    fn frontend_trust(
        &self,
        gns: &str,
        li: usize,
        v: &gw::FrontendTlsValidation,
        failures: &mut Vec<Failure>,
    ) -> Option<Arc<ClientTrust>> {
        let at = format!("spec.listeners[{li}].tls.frontendValidation");
        if v.ca_certificate_refs.is_empty() {
            failures.push(Failure {
                field: format!("{at}.caCertificateRefs"),
                reason: INVALID_CA_CERTIFICATE_REF,
                message: "frontendValidation without caCertificateRefs: no CA to verify client \
                          certificates with: this listener is not served"
                    .into(),
            });
            return None;
        }
        let mut pem = Vec::new();
        let mut sources = Vec::new();
        for (j, r) in v.ca_certificate_refs.iter().enumerate() {
            let at = format!("{at}.caCertificateRefs[{j}]");
            if r.kind != "ConfigMap" || !r.group.is_empty() {
                failures.push(Failure {
                    field: format!("{at}.kind"),
                    reason: INVALID_CA_CERTIFICATE_KIND,
                    message: format!(
                        "caCertificateRef of kind {}{}: sluice reads core ConfigMaps (key \
                         `ca.crt`): this listener is not served",
                        if r.group.is_empty() {
                            String::new()
                        } else {
                            format!("{}/", r.group)
                        },
                        r.kind
                    ),
                });
                continue;
            }
            let ns = r.namespace.as_deref().unwrap_or(gns);
            if !self.index.grant_allows(
                ("gateway.networking.k8s.io", "Gateway", gns),
                ("", "ConfigMap", ns, &r.name),
            ) {
                failures.push(Failure {
                    field: format!("{at}.namespace"),
                    reason: REF_NOT_PERMITTED,
                    message: format!(
                        "ConfigMap {ns}/{}: no ReferenceGrant in namespace {ns} lets Gateways \
                         of namespace {gns} refer to it: this listener is not served",
                        r.name
                    ),
                });
                continue;
            }
            let source = format!("ConfigMap {ns}/{}", r.name);
            let entry = match self.index.get(Kind::ConfigMap, ns, &r.name) {
                Some(item) => {
                    let pos = item.origin.locate(&item.base);
                    match &item.object {
                        Object::ConfigMap(c) => c.spec.entries.get("ca.crt").ok_or_else(|| {
                            format!(
                                "{source} ({}:{}): has no `ca.crt`",
                                item.origin.file, pos.line
                            )
                        }),
                        _ => Err(format!("{source}: not found")),
                    }
                }
                None => Err(format!("{source}: not found")),
            };
            match entry {
                Ok(bytes) => {
                    pem.extend_from_slice(bytes);
                    pem.push(b'\n');
                    sources.push(source);
                }
                Err(m) => failures.push(Failure {
                    field: format!("{at}.name"),
                    reason: INVALID_CA_CERTIFICATE_REF,
                    message: format!("{m}: this listener is not served"),
                }),
            }
        }
        if !failures.is_empty() {
            return None;
        }
        let source = sources.join(", ");
        match trust::load_trust(source.clone(), &pem, None) {
            Ok(t) => Some(Arc::new(t)),
            Err(e) => {
                failures.push(Failure {
                    field: format!("{at}.caCertificateRefs"),
                    reason: INVALID_CA_CERTIFICATE_REF,
                    message: format!("{source}: {e}: this listener is not served"),
                });
                None
            }
        }
    }

    fn istio_server(&mut self, it: &Item, si: usize, s: &istio::Server) -> Loaded {
        let Some(tls) = &s.tls else {
            return Ok((Vec::new(), None));
        };
        let at = format!("spec.servers[{si}].tls");
        let fail = |field: &str, message: String| {
            Err(vec![Failure {
                field: format!("{at}.{field}"),
                reason: INVALID_CERTIFICATE_REF,
                message: format!("{message}: this server is not served"),
            }])
        };
        let mutual = matches!(
            tls.mode,
            istio::TlsMode::Mutual | istio::TlsMode::OptionalMutual
        );
        if tls.mode == istio::TlsMode::IstioMutual {
            return match self.istio_mutual() {
                Ok((c, t)) => Ok((vec![c], Some(t))),
                Err(m) => fail("mode", m),
            };
        }
        if let Some(cred) = &tls.credential_name {
            let ns = it.object.meta().namespace();
            let cert = match self.secret(ns, cred, true) {
                Ok(c) => c,
                Err(m) => return fail("credentialName", m),
            };
            if !mutual {
                return Ok((vec![cert], None));
            }
            return match self.secret_trust(ns, cred) {
                Ok(t) => Ok((vec![cert], Some(t))),
                Err(m) => fail("credentialName", m),
            };
        }
        let (Some(cert), Some(key)) = (&tls.server_certificate, &tls.private_key) else {
            return fail(
                "serverCertificate",
                "no certificate: neither credentialName nor serverCertificate and privateKey"
                    .into(),
            );
        };
        let base = manifest_dir(&it.origin.file);
        let cert = match self.files(&base, cert, key) {
            Ok(c) => c,
            Err(m) => return fail("serverCertificate", m),
        };
        if !mutual {
            return Ok((vec![cert], None));
        }
        let Some(ca) = &tls.ca_certificates else {
            return fail(
                "caCertificates",
                format!("mode {} without caCertificates", tls.mode.as_str()),
            );
        };
        match file_trust(&base, ca, tls.ca_crl.as_deref()) {
            Ok(t) => Ok((vec![cert], Some(Arc::new(t)))),
            Err((crl, m)) => fail(if crl { "caCrl" } else { "caCertificates" }, m),
        }
    }

    /// A certificate and key from PEM files (relative to `base`), or why not.
    fn files(&self, base: &Path, cert: &str, key: &str) -> Result<Arc<Certificate>, String> {
        let cert_path = base.join(cert);
        let key_path = base.join(key);
        let loaded = read(&cert_path).and_then(|c| {
            let k = read(&key_path)?;
            load_pem(cert_path.display().to_string(), &c, &k, self.now)
        });
        match loaded {
            Ok(c) => Ok(Arc::new(c)),
            Err(e @ CertError::Io { .. }) => Err(e.to_string()),
            Err(e) => Err(format!(
                "{} (key {}): {e}",
                cert_path.display(),
                key_path.display()
            )),
        }
    }

    /// The client CA certificates (and CRL) of Istio `credentialName` `ns/name`: its
    /// `ca.crt` or `cacert` (and `ca.crl` or `crl`), else those of Secret
    /// `<name>-cacert`, as Istio reads them.
    fn secret_trust(&self, ns: &str, name: &str) -> Result<Arc<ClientTrust>, String> {
        let entries = |n: &str| -> Option<(String, &SecretData)> {
            let item = self.index.get(Kind::Secret, ns, n)?;
            let pos = item.origin.locate(&item.base);
            match &item.object {
                Object::Secret(s) => Some((
                    format!("Secret {ns}/{n} ({}:{})", item.origin.file, pos.line),
                    &s.spec,
                )),
                _ => None,
            }
        };
        fn pick<'s>(s: &'s SecretData, keys: [&str; 2]) -> Option<&'s [u8]> {
            keys.iter()
                .find_map(|k| s.entries.get(*k).map(Vec::as_slice))
        }
        let cacert = format!("{name}-cacert");
        let found = entries(name)
            .and_then(|(src, s)| Some((src, pick(s, ["ca.crt", "cacert"])?, s)))
            .or_else(|| {
                entries(&cacert).and_then(|(src, s)| Some((src, pick(s, ["ca.crt", "cacert"])?, s)))
            });
        let Some((source, ca, s)) = found else {
            return Err(format!(
                "Secret {ns}/{name}: no `ca.crt` or `cacert` (in it or in Secret \
                 {ns}/{cacert}) to verify client certificates with"
            ));
        };
        let crl = pick(s, ["ca.crl", "crl"]);
        trust::load_trust(source.clone(), ca, crl)
            .map(Arc::new)
            .map_err(|e| format!("{source}: {e}"))
    }

    /// The Appliance's `spec.termination.istioMutual`: the gateway's certificate and the
    /// mesh's CA certificates (and CRL), or why not.
    fn istio_mutual(&self) -> Result<(Arc<Certificate>, Arc<ClientTrust>), String> {
        let found = self.appliance.and_then(|it| match &it.object {
            Object::Appliance(a) => a
                .spec
                .termination
                .as_ref()
                .and_then(|t| t.istio_mutual.as_ref())
                .map(|m| (it, m)),
            _ => None,
        });
        let Some((it, m)) = found else {
            return Err(
                "mode ISTIO_MUTUAL needs the mesh's root of trust and the gateway's \
                        certificate, which Istio's agent provisions: set \
                        spec.termination.istioMutual (caCertificates, certificateChain, \
                        privateKey) in the Appliance"
                    .into(),
            );
        };
        let base = manifest_dir(&it.origin.file);
        let at = "Appliance spec.termination.istioMutual";
        let cert = self
            .files(&base, &m.certificate_chain, &m.private_key)
            .map_err(|e| format!("{at}: {e}"))?;
        let trust = file_trust(&base, &m.ca_certificates, m.ca_crl.as_deref())
            .map_err(|(_, e)| format!("{at}: {e}"))?;
        Ok((cert, Arc::new(trust)))
    }

    /// The certificate of Secret `ns/name`, or a message naming it (with its file:line)
    /// and saying why not. `istio`: a generic Secret with `tls.crt`/`tls.key` or
    /// `cert`/`key` will do (Istio's credentialName), not only `kubernetes.io/tls`.
    fn secret(&mut self, ns: &str, name: &str, istio: bool) -> Result<Arc<Certificate>, String> {
        let key = (ns.to_string(), name.to_string(), istio);
        if let Some(r) = self.secrets.get(&key) {
            return r.clone();
        }
        let r = self.load_secret(ns, name, istio);
        self.secrets.insert(key, r.clone());
        r
    }

    fn load_secret(&self, ns: &str, name: &str, istio: bool) -> Result<Arc<Certificate>, String> {
        let source = format!("Secret {ns}/{name}");
        let Some(item) = self.index.get(Kind::Secret, ns, name) else {
            return Err(format!("{source}: {}", CertError::SecretNotFound));
        };
        let pos = item.origin.locate(&item.base);
        let named = format!("{source} ({}:{})", item.origin.file, pos.line);
        let Object::Secret(s) = &item.object else {
            return Err(format!("{named}: {}", CertError::SecretNotFound));
        };
        let (crt, key) = secret_entries(&s.spec, istio).map_err(|e| format!("{named}: {e}"))?;
        load_pem(source, crt, key, self.now)
            .map(Arc::new)
            .map_err(|e| format!("{named}: {e}"))
    }
}

/// The certificate and key entries of a Secret: `tls.crt`/`tls.key` of a
/// `kubernetes.io/tls` Secret; for Istio also of a generic one, or its `cert`/`key`.
fn secret_entries(s: &SecretData, istio: bool) -> Result<(&[u8], &[u8]), CertError> {
    let generic = istio && s.kind != "kubernetes.io/tls";
    if s.kind != "kubernetes.io/tls" && !istio {
        return Err(CertError::SecretType(s.kind.clone()));
    }
    let get = |k: &str| s.entries.get(k).map(Vec::as_slice);
    if generic && get("tls.crt").is_none() && get("cert").is_some() {
        let crt = get("cert").ok_or(CertError::MissingEntry("cert"))?;
        let key = get("key").ok_or(CertError::MissingEntry("key"))?;
        return Ok((crt, key));
    }
    let crt = get("tls.crt").ok_or(CertError::MissingEntry("tls.crt"))?;
    let key = get("tls.key").ok_or(CertError::MissingEntry("tls.key"))?;
    Ok((crt, key))
}

/// Reads a file for a certificate, key, CA bundle or CRL.
fn read(p: &Path) -> Result<Vec<u8>, CertError> {
    std::fs::read(p).map_err(|source| CertError::Io {
        path: p.display().to_string(),
        source,
    })
}

/// Client trust from a CA bundle file and an optional CRL file (relative to `base`);
/// the error says whether the CRL was at fault.
fn file_trust(base: &Path, ca: &str, crl: Option<&str>) -> Result<ClientTrust, (bool, String)> {
    let ca_path = base.join(ca);
    let ca_pem = read(&ca_path).map_err(|e| (false, e.to_string()))?;
    let crl_pem = match crl {
        Some(f) => {
            let p = base.join(f);
            Some(read(&p).map_err(|e| (true, e.to_string()))?)
        }
        None => None,
    };
    let source = ca_path.display().to_string();
    trust::load_trust(source.clone(), &ca_pem, crl_pem.as_deref()).map_err(|e| {
        let crl_fault = matches!(
            e,
            trust::TrustError::Crl(_) | trust::TrustError::Verifier(_)
        ) && crl.is_some();
        let what = match (crl_fault, crl) {
            (true, Some(f)) => format!("{} (CRL {})", source, base.join(f).display()),
            _ => source.clone(),
        };
        (crl_fault, format!("{what}: {e}"))
    })
}

/// The directory relative certificate paths of a manifest are relative to: the
/// manifest file's own (the working directory for stdin and in-memory sources).
pub fn manifest_dir(file: &str) -> PathBuf {
    let p = Path::new(file);
    match p.parent() {
        Some(d) if p.is_file() => d.to_path_buf(),
        _ => PathBuf::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/tls")
            .join(name);
        std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    fn load(crt: &str, key: &str) -> Result<Certificate, CertError> {
        load_pem(crt.into(), &fixture(crt), &fixture(key), now())
    }

    #[test]
    fn every_key_form_loads() {
        for (crt, key, kind, san) in [
            ("rsa.crt", "rsa-pkcs1.key", "RSA", "rsa.example.com"),
            ("rsa.crt", "rsa-pkcs8.key", "RSA", "rsa.example.com"),
            ("ec.crt", "ec-sec1.key", "ECDSA", "ec.example.com"),
            ("ec.crt", "ec-pkcs8.key", "ECDSA", "ec.example.com"),
            ("wildcard.crt", "wildcard.key", "ECDSA", "*.example.com"),
        ] {
            let c = load(crt, key).unwrap_or_else(|e| panic!("{crt} + {key}: {e}"));
            assert_eq!(c.key_type, kind, "{key}");
            assert_eq!(c.sans[0], san);
            assert_eq!(c.chain, 1);
            assert!(c.not_after.as_str() > "2120", "{}", c.not_after);
        }
        assert_eq!(
            load("ec.crt", "ec-sec1.key").expect("ec").sans,
            ["ec.example.com", "Ec2.Example.Com"]
        );
    }

    #[test]
    fn bad_certificates_say_why() {
        let err = |crt: &str, key: &str| load(crt, key).expect_err(crt).to_string();
        assert_eq!(
            err("expired.crt", "expired.key"),
            "certificate expired (notAfter 2001-01-01T00:00:00Z)"
        );
        assert_eq!(
            err("future.crt", "future.key"),
            "certificate not yet valid (notBefore 2100-01-01T00:00:00Z)"
        );
        assert_eq!(
            err("mismatch.crt", "mismatch.key"),
            "the private key does not match the certificate"
        );
        let e = load_pem("x".into(), b"", &fixture("ec-sec1.key"), now()).expect_err("empty");
        assert_eq!(e.to_string(), "no PEM certificate (an empty chain)");
        let e = load_pem("x".into(), &fixture("ec.crt"), b"junk", now()).expect_err("no key");
        assert_eq!(e.to_string(), "no PEM private key (PKCS#1, PKCS#8 or SEC1)");
        let garbage = b"-----BEGIN CERTIFICATE-----\nMAMCAQA=\n-----END CERTIFICATE-----\n";
        let e = load_pem("x".into(), garbage, &fixture("ec-sec1.key"), now()).expect_err("bad");
        assert!(
            e.to_string().starts_with("leaf certificate does not parse"),
            "{e}"
        );
        // The key of one fixture with the other's certificate, both ECDSA.
        let e = load_pem(
            "x".into(),
            &fixture("ec.crt"),
            &fixture("wildcard.key"),
            now(),
        )
        .expect_err("mismatch");
        assert!(matches!(e, CertError::Mismatch), "{e}");
    }
}
