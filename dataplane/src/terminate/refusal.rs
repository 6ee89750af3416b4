//! Why a TLS handshake was refused, from the rustls error, as a counter: every failure
//! counts `terminate_tls_failed`; the refusals below count their own event as well.
//!
//! | rustls error | event |
//! |---|---|
//! | `NoCertificatesPresented` | `tls_client_cert_missing` |
//! | `InvalidCertificate(Revoked)` | `tls_client_cert_revoked` |
//! | `InvalidCertificate(Expired…, NotValidYet…)` | `tls_client_cert_expired` |
//! | `InvalidCertificate(ApplicationVerificationFailure)` (sluice's pins: [`crate::tables::client_auth`]) | `tls_client_cert_pin_mismatch` |
//! | any other `InvalidCertificate` (unknown issuer, bad signature, bad encoding, key usage, unknown revocation status, ...) | `tls_client_cert_untrusted` |
//! | `PeerIncompatible(NoCipherSuitesInCommon)` | `tls_no_shared_suite` |
//! | `PeerIncompatible(` a TLS version the listener does not serve `)` | `tls_version_refused` |
//!
//! Anything else (protocol errors, no certificate for the name) counts only
//! `terminate_tls_failed`.

use crate::stats::Event;
use rustls::{CertificateError, Error, PeerIncompatible};

/// The refusal event of a failed handshake's error, if it is one of the counted reasons
/// (see the [module docs](self)).
pub fn refusal(e: &Error) -> Option<Event> {
    Some(match e {
        Error::NoCertificatesPresented => Event::TlsClientCertMissing,
        Error::InvalidCertificate(c) => match c {
            CertificateError::Revoked => Event::TlsClientCertRevoked,
            CertificateError::Expired
            | CertificateError::ExpiredContext { .. }
            | CertificateError::NotValidYet
            | CertificateError::NotValidYetContext { .. } => Event::TlsClientCertExpired,
            CertificateError::ApplicationVerificationFailure => Event::TlsClientCertPinMismatch,
            _ => Event::TlsClientCertUntrusted,
        },
        Error::PeerIncompatible(p) => match p {
            PeerIncompatible::NoCipherSuitesInCommon => Event::TlsNoSharedSuite,
            PeerIncompatible::Tls12NotOffered
            | PeerIncompatible::Tls12NotOfferedOrEnabled
            | PeerIncompatible::SupportedVersionsExtensionRequired
            | PeerIncompatible::ServerDoesNotSupportTls12Or13 => Event::TlsVersionRefused,
            _ => return None,
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::UnixTime;

    #[test]
    fn each_reason_has_its_event() {
        let cert = |c| Error::InvalidCertificate(c);
        let t = UnixTime::since_unix_epoch(std::time::Duration::from_secs(5));
        for (e, want) in [
            (
                Error::NoCertificatesPresented,
                Some(Event::TlsClientCertMissing),
            ),
            (
                cert(CertificateError::Revoked),
                Some(Event::TlsClientCertRevoked),
            ),
            (
                cert(CertificateError::Expired),
                Some(Event::TlsClientCertExpired),
            ),
            (
                cert(CertificateError::ExpiredContext {
                    time: t,
                    not_after: t,
                }),
                Some(Event::TlsClientCertExpired),
            ),
            (
                cert(CertificateError::NotValidYet),
                Some(Event::TlsClientCertExpired),
            ),
            (
                cert(CertificateError::ApplicationVerificationFailure),
                Some(Event::TlsClientCertPinMismatch),
            ),
            (
                cert(CertificateError::UnknownIssuer),
                Some(Event::TlsClientCertUntrusted),
            ),
            (
                cert(CertificateError::BadSignature),
                Some(Event::TlsClientCertUntrusted),
            ),
            (
                cert(CertificateError::BadEncoding),
                Some(Event::TlsClientCertUntrusted),
            ),
            (
                Error::PeerIncompatible(PeerIncompatible::NoCipherSuitesInCommon),
                Some(Event::TlsNoSharedSuite),
            ),
            (
                Error::PeerIncompatible(PeerIncompatible::Tls12NotOfferedOrEnabled),
                Some(Event::TlsVersionRefused),
            ),
            (
                Error::PeerIncompatible(PeerIncompatible::SupportedVersionsExtensionRequired),
                Some(Event::TlsVersionRefused),
            ),
            (
                Error::PeerIncompatible(PeerIncompatible::NoKxGroupsInCommon),
                None,
            ),
            (Error::DecryptError, None),
            (Error::General("x".into()), None),
        ] {
            assert_eq!(refusal(&e), want, "{e:?}");
        }
    }
}
