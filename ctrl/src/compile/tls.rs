//! A terminating IR listener -> the [`TlsListener`] the terminate engine serves it with:
//! a rustls [`ServerConfig`] whose certificate resolver is an [`SniResolver`] over the
//! listener's members and their certificates ([`super::certs`]).
//!
//! The configuration, the same for every terminating listener but for what the manifest
//! says:
//! - TLS 1.2 and 1.3 (Istio `minProtocolVersion: TLSV1_3` or `maxProtocolVersion:
//!   TLSV1_2` narrow that), on rustls's aws-lc-rs provider ([`crypto`]: its RSA signs
//!   twice as fast as ring's, `perf/NOTES.md`) with its cipher suites (Istio
//!   `cipherSuites` keeps only the named TLS 1.2 suites; TLS 1.3 suites are not
//!   configurable, as in Envoy); the server follows the client's order of preference
//!   (`ignore_client_order` false);
//! - ALPN `http/1.1` on HTTP(S) listeners — never `h2`: the leg to the backend is
//!   HTTP/1.1 — and none on opaque TLS listeners;
//! - client certificates ([`client_verifier`]): none requested (Istio `SIMPLE`, Gateway
//!   API `Terminate`), or verified by rustls's WebPki verifier against the listener's CA
//!   certificates and CRLs (`MUTUAL`, `ISTIO_MUTUAL`, `frontendValidation`: required;
//!   `OPTIONAL_MUTUAL`: verified when presented), then held to the listener's pins
//!   ([`PinnedVerifier`]) when it has any;
//! - resumption by session tickets only, in TLS 1.2 and 1.3: no server-side session
//!   cache ([`NoServerSessionStorage`]; rustls's default cache is a mutex), two TLS 1.3
//!   tickets per handshake, sealed by the process-wide [`Ticketer`].
//!
//! ## Tickets without locks
//!
//! rustls's own ticketer rotates its keys under an `RwLock`, which every handshake on
//! every worker would take. [`Ticketer`] holds one ChaCha20-Poly1305 key, drawn from the
//! system's random source when the process first builds a terminating listener, and
//! never changed: sealing and opening a ticket read it and take no lock. One ticketer
//! serves every listener of every tables generation ([`ticketer`]), so tickets stay valid
//! across reloads. The key is **not rotated** while the process runs, so the forward
//! secrecy of resumed sessions ends with the process (a restart draws a new key and
//! invalidates every ticket); tickets say they live 6 hours ([`TICKET_LIFETIME`]),
//! a hint to clients.
//!
//! **Listeners that verify client certificates get a ticketer of their own**, made with
//! the listener's configuration (so in each tables generation). rustls does not check,
//! when a ticket is redeemed, that it came from a handshake with the same client
//! verification: with the shared key, a ticket from a `SIMPLE` listener (or from before
//! a CA or CRL change) would resume on a `MUTUAL` one without a client certificate. A
//! listener's own key opens only its own tickets, and a reload (a new CA, a new CRL)
//! ends them.

use std::sync::{Arc, OnceLock};

/// The crypto provider terminating listeners handshake and sign with.
pub use rustls::crypto::aws_lc_rs as crypto;

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{NoServerSessionStorage, ProducesTickets, WebPkiClientVerifier};
use rustls::{CipherSuite, ServerConfig, SupportedProtocolVersion};
use sluice_dataplane::tables::client_auth::{provider_sha256, PinnedVerifier};
use sluice_dataplane::tables::hosts::HostPattern;
use sluice_dataplane::tables::tls::{
    MemberCerts, ResolverError, ServedCert, SniResolver, TlsListener,
};

use super::certs::trust;
use super::ir::Listener;

/// The lifetime tickets announce, in seconds (6 hours).
pub const TICKET_LIFETIME: u32 = 6 * 3600;

/// Istio `cipherSuites` names (OpenSSL's) that sluice serves, with their rustls suite:
/// the ECDHE AEAD suites of TLS 1.2. The other names of the Istio list (CBC, static RSA,
/// 3DES) have no implementation in rustls; a server that names one is not served.
pub const CIPHER_SUITES: &[(&str, CipherSuite)] = &[
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "ECDHE-RSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-RSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "ECDHE-RSA-CHACHA20-POLY1305",
        CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
];

/// Why a terminating listener's TLS configuration could not be built.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The listener has no termination settings.
    #[error("a terminating listener without TLS settings")]
    NoSettings,
    /// A member hostname that is not a host pattern.
    #[error("hostname {0:?}: {1}")]
    Hostname(String, sluice_dataplane::tables::hosts::PatternError),
    /// The certificate resolver.
    #[error(transparent)]
    Resolver(#[from] ResolverError),
    /// A cipher suite name sluice does not serve (validation reports it first).
    #[error("cipher suite {0:?} is not served")]
    CipherSuite(String),
    /// rustls refused the configuration.
    #[error(transparent)]
    Rustls(#[from] rustls::Error),
    /// Client verification without loaded CA certificates (certificate loading reports
    /// why first).
    #[error("client certificate verification without CA certificates")]
    NoClientTrust,
    /// rustls refused the CA certificates or CRLs.
    #[error("client certificate verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    /// A pin that does not parse (validation reports it first).
    #[error(transparent)]
    Pin(#[from] trust::PinError),
}

/// Session tickets sealed with ChaCha20-Poly1305 under one key, without a lock (see the
/// [module docs](self)). A ticket is `nonce (12 bytes) || ciphertext || tag`.
pub struct Ticketer {
    key: LessSafeKey,
    rng: SystemRandom,
}

impl std::fmt::Debug for Ticketer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticketer")
            .field("lifetime", &TICKET_LIFETIME)
            .finish_non_exhaustive()
    }
}

/// Bound into every ticket's authentication, so that nothing else sealed under the key
/// opens as a ticket.
const TICKET_AAD: &[u8] = b"sluice session ticket v1";

impl Ticketer {
    /// A ticketer with a fresh random key; `None` when the system's random source fails.
    pub fn new() -> Option<Ticketer> {
        let rng = SystemRandom::new();
        let mut key = [0u8; 32];
        rng.fill(&mut key).ok()?;
        let key = UnboundKey::new(&CHACHA20_POLY1305, &key).ok()?;
        Some(Ticketer {
            key: LessSafeKey::new(key),
            rng,
        })
    }
}

impl ProducesTickets for Ticketer {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        TICKET_LIFETIME
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).ok()?;
        let mut out = Vec::with_capacity(NONCE_LEN + plain.len() + CHACHA20_POLY1305.tag_len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plain);
        let mut body = out.split_off(NONCE_LEN);
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(TICKET_AAD),
                &mut body,
            )
            .ok()?;
        out.extend_from_slice(&body);
        Some(out)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        if cipher.len() < NONCE_LEN + CHACHA20_POLY1305.tag_len() {
            return None;
        }
        let (nonce, sealed) = cipher.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut body = sealed.to_vec();
        let plain_len = self
            .key
            .open_in_place(nonce, Aad::from(TICKET_AAD), &mut body)
            .ok()?
            .len();
        body.truncate(plain_len);
        Some(body)
    }
}

/// No tickets: what a listener gets if the system's random source failed when the
/// ticketer was made (full handshakes only).
#[derive(Debug)]
struct NoTickets;

impl ProducesTickets for NoTickets {
    fn enabled(&self) -> bool {
        false
    }
    fn lifetime(&self) -> u32 {
        0
    }
    fn encrypt(&self, _: &[u8]) -> Option<Vec<u8>> {
        None
    }
    fn decrypt(&self, _: &[u8]) -> Option<Vec<u8>> {
        None
    }
}

/// The process-wide ticketer, made on first use: every terminating listener of every
/// tables generation seals and opens tickets with it.
pub fn ticketer() -> Arc<dyn ProducesTickets> {
    static TICKETER: OnceLock<Arc<dyn ProducesTickets>> = OnceLock::new();
    TICKETER
        .get_or_init(|| match Ticketer::new() {
            Some(t) => Arc::new(t),
            None => Arc::new(NoTickets),
        })
        .clone()
}

/// The certificate resolver of a terminating listener: its members in order, each with
/// its hostnames and certificates (SANs as names).
pub fn resolver(l: &Listener) -> Result<SniResolver, TlsError> {
    let mut members = Vec::with_capacity(l.members.len());
    for m in &l.members {
        let hostnames = m
            .hostnames
            .iter()
            .map(|h| HostPattern::parse(h).map_err(|e| TlsError::Hostname(h.clone(), e)))
            .collect::<Result<Vec<_>, _>>()?;
        let certs = m
            .certificates
            .iter()
            .map(|c| ServedCert {
                key: c.key.clone(),
                // A SAN that is no host pattern (an odd character) matches no SNI.
                names: c
                    .sans
                    .iter()
                    .filter_map(|s| HostPattern::parse(s).ok())
                    .collect(),
            })
            .collect();
        members.push(MemberCerts { hostnames, certs });
    }
    Ok(SniResolver::build(members)?)
}

/// The client certificate verifier of listener `l` (see the [module docs](self)): none,
/// WebPki over its members' CA certificates and CRLs (the members of one listener share
/// their client verification: `compile/merge.rs`), wrapped in a [`PinnedVerifier`] when
/// it has pins.
pub fn client_verifier(l: &Listener) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let t = l.tls.as_ref().ok_or(TlsError::NoSettings)?;
    let Some(c) = &t.client else {
        return Ok(WebPkiClientVerifier::no_client_auth());
    };
    let trust = l
        .members
        .first()
        .and_then(|m| m.client_trust.as_ref())
        .ok_or(TlsError::NoClientTrust)?;
    let webpki = trust::verifier(trust, c.optional)?;
    let pins = trust::pins(c)?;
    Ok(if pins.is_empty() {
        webpki
    } else {
        Arc::new(PinnedVerifier::new(webpki, pins, provider_sha256()))
    })
}

/// The TLS settings the terminate engine serves listener `l` with (see the
/// [module docs](self)).
pub fn listener_tls(l: &Listener) -> Result<Arc<TlsListener>, TlsError> {
    let t = l.tls.as_ref().ok_or(TlsError::NoSettings)?;
    let resolver = Arc::new(resolver(l)?);
    let mut provider = crypto::default_provider();
    if !t.cipher_suites.is_empty() {
        let mut wanted = Vec::new();
        for name in &t.cipher_suites {
            let (_, s) = CIPHER_SUITES
                .iter()
                .find(|(n, _)| n == name)
                .ok_or_else(|| TlsError::CipherSuite(name.clone()))?;
            wanted.push(*s);
        }
        provider
            .cipher_suites
            .retain(|s| s.tls13().is_some() || wanted.contains(&s.suite()));
    }
    let versions: &[&SupportedProtocolVersion] = match (t.min_tls13, t.max_tls12) {
        (true, _) => &[&rustls::version::TLS13],
        (false, true) => &[&rustls::version::TLS12],
        (false, false) => &[&rustls::version::TLS13, &rustls::version::TLS12],
    };
    let verifier = client_verifier(l)?;
    let own_tickets = verifier.offer_client_auth();
    let mut config = ServerConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(versions)?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(resolver);
    config.alpn_protocols = if t.http {
        vec![b"http/1.1".to_vec()]
    } else {
        Vec::new()
    };
    config.ignore_client_order = false;
    config.session_storage = Arc::new(NoServerSessionStorage {});
    config.ticketer = if own_tickets {
        match Ticketer::new() {
            Some(t) => Arc::new(t),
            None => Arc::new(NoTickets),
        }
    } else {
        ticketer()
    };
    config.send_tls13_tickets = 2;
    Ok(Arc::new(TlsListener {
        config: Arc::new(config),
        http: t.http,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tickets_round_trip_and_refuse_tampering() {
        let t = Ticketer::new().expect("random");
        let sealed = t.encrypt(b"session state").expect("sealed");
        assert_eq!(sealed.len(), NONCE_LEN + 13 + 16);
        assert_eq!(t.decrypt(&sealed).as_deref(), Some(&b"session state"[..]));
        // Fresh nonce each time.
        assert_ne!(t.encrypt(b"session state"), Some(sealed.clone()));
        let mut bad = sealed.clone();
        bad[NONCE_LEN + 2] ^= 1;
        assert_eq!(t.decrypt(&bad), None);
        assert_eq!(t.decrypt(&sealed[..10]), None);
        // Another key (another process) opens nothing.
        let other = Ticketer::new().expect("random");
        assert_eq!(other.decrypt(&sealed), None);
        assert_eq!(t.lifetime(), 21_600);
        // One ticketer for the process.
        assert!(Arc::ptr_eq(&ticketer(), &ticketer()));
    }
}
