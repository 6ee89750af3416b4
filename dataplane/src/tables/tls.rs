//! TLS termination settings of a listener, built by the control plane and read by the
//! terminate engine (`dataplane/src/terminate/`): the rustls server configuration (its
//! certificate resolver picks by SNI, ALPN, session tickets) and what follows the
//! handshake.
//!
//! ## Which certificate a handshake gets ([`SniResolver`])
//!
//! A terminating dataplane listener serves one or more *members* (gateway listeners or
//! servers merged onto one address and port, told apart by hostname), each with its own
//! certificates. A handshake picks in two steps, both with the host matcher's rule
//! ([`HostMatcher`]: exact, else the longest wildcard suffix, else the catch-all; ASCII
//! case ignored; no backtracking):
//!
//! 1. the SNI selects the member: the member with that exact hostname, else the one with
//!    the longest matching `*.suffix`, else the member without hostname (or `*`). No SNI
//!    selects the catch-all member. No member selected: no certificate, the handshake
//!    fails;
//! 2. among the member's certificates, the one with a subjectAltName dNSName equal to the
//!    SNI, else the one with the longest wildcard dNSName covering it (a wildcard covers
//!    exactly one label, as clients check: `*.example.com` covers `a.example.com`, not
//!    `a.b.example.com`), else the member's first certificate (its default). Without SNI,
//!    the default.
//!
//! A member selected by name never gives the handshake to a less specific member, even
//! when it has no certificate for the name: the client then gets the member's default
//! certificate (and checks it), never another listener's.
//!
//! A lookup takes no lock and allocates nothing: two host-matcher probes and a reference
//! count increment on the chosen key.

use std::fmt;
use std::sync::Arc;

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::hosts::{BuildError, HostMatcher, HostPattern, MatchKind};

/// What a terminating listener needs at handshake time.
#[derive(Debug)]
pub struct TlsListener {
    /// The rustls server configuration: certificates (resolved by SNI), protocol
    /// versions, ALPN, tickets. Shared by every connection the listener accepts in this
    /// tables generation; a connection keeps the one it started with across swaps.
    pub config: Arc<rustls::ServerConfig>,
    /// The decrypted stream is HTTP (routed by Host, and path) rather than opaque TCP
    /// (routed by SNI, or port).
    pub http: bool,
}

/// One certificate of a member: the key with its chain, and the names it is for.
#[derive(Clone)]
pub struct ServedCert {
    /// The chain (leaf first) and its signing key.
    pub key: Arc<CertifiedKey>,
    /// The leaf's subjectAltName dNSNames as patterns (exact or `*.suffix`).
    pub names: Vec<HostPattern>,
}

impl fmt::Debug for ServedCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServedCert")
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

/// One member of a terminating listener: the hostnames that select it and its
/// certificates, the first of which is its default.
#[derive(Clone, Debug)]
pub struct MemberCerts {
    /// Hostnames (exact or `*.suffix`); empty, or [`HostPattern::Any`], for the member
    /// that takes every name no other member has.
    pub hostnames: Vec<HostPattern>,
    /// Its certificates, the default first. A member without any gets no handshake.
    pub certs: Vec<ServedCert>,
}

/// How the certificate of a [`Choice`] was chosen among its member's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CertMatch {
    /// A subjectAltName equal to the SNI.
    Exact,
    /// The longest wildcard subjectAltName covering the SNI.
    Wildcard,
    /// No name matched (or no SNI): the member's first certificate.
    Default,
}

/// What a lookup chose: the member, its certificate and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    /// Index of the member (in the order given to [`SniResolver::build`]).
    pub member: usize,
    /// Index of the certificate in the member's list.
    pub cert: usize,
    /// How the certificate was chosen.
    pub by: CertMatch,
}

/// Why a resolver could not be built.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ResolverError {
    /// More members or certificates than a `u32` indexes.
    #[error("too many members or certificates on one listener")]
    TooMany,
    /// The host table refused the patterns.
    #[error("host patterns: {0}")]
    Hosts(#[from] BuildError),
}

/// One member, compiled.
struct Member {
    /// Its certificates' names -> certificate index (first certificate per name).
    names: HostMatcher,
    certs: Box<[Arc<CertifiedKey>]>,
}

/// Picks a certificate by SNI (see the [module docs](self)); the
/// [`ResolvesServerCert`] of a terminating listener's [`rustls::ServerConfig`].
pub struct SniResolver {
    /// Member hostnames -> member index.
    members: HostMatcher,
    /// The member without hostname, if any: the one a handshake without SNI gets.
    catch_all: Option<usize>,
    list: Box<[Member]>,
}

impl fmt::Debug for SniResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SniResolver")
            .field("members", &self.list.len())
            .field("catch_all", &self.catch_all)
            .finish_non_exhaustive()
    }
}

impl SniResolver {
    /// Compiles the members, in precedence order: a hostname two members give (which
    /// the control plane reports and leaves out) goes to the first, and so does the
    /// catch-all; a name two certificates of a member carry goes to the first of them.
    pub fn build(members: Vec<MemberCerts>) -> Result<SniResolver, ResolverError> {
        let mut hosts: Vec<(HostPattern, u32)> = Vec::new();
        let mut catch_all = None;
        let mut list = Vec::with_capacity(members.len());
        for (mi, m) in members.into_iter().enumerate() {
            let idx = u32::try_from(mi).map_err(|_| ResolverError::TooMany)?;
            let mut patterns = m.hostnames;
            if patterns.is_empty() {
                patterns.push(HostPattern::Any);
            }
            for p in patterns {
                if p == HostPattern::Any {
                    catch_all.get_or_insert(mi);
                }
                if !hosts.iter().any(|(q, _)| *q == p) {
                    hosts.push((p, idx));
                }
            }
            let mut names: Vec<(HostPattern, u32)> = Vec::new();
            for (ci, c) in m.certs.iter().enumerate() {
                let cidx = u32::try_from(ci).map_err(|_| ResolverError::TooMany)?;
                for n in &c.names {
                    // A certificate for every name (`*`) is no name at all: only the
                    // default answers names no certificate has.
                    if *n != HostPattern::Any && !names.iter().any(|(q, _)| q == n) {
                        names.push((n.clone(), cidx));
                    }
                }
            }
            list.push(Member {
                names: HostMatcher::build(names)?,
                certs: m.certs.into_iter().map(|c| c.key).collect(),
            });
        }
        Ok(SniResolver {
            members: HostMatcher::build(hosts)?,
            catch_all,
            list: list.into_boxed_slice(),
        })
    }

    /// What a handshake with this SNI (or none) gets, or `None` (no member takes the
    /// name, or the member has no certificate). No allocation, no lock.
    pub fn pick(&self, sni: Option<&[u8]>) -> Option<Choice> {
        let member = match sni {
            Some(name) => self.members.lookup(name)? as usize,
            None => self.catch_all?,
        };
        let m = self.list.get(member)?;
        if m.certs.is_empty() {
            return None;
        }
        let default = Choice {
            member,
            cert: 0,
            by: CertMatch::Default,
        };
        let Some(name) = sni else {
            return Some(default);
        };
        let Some(found) = m.names.find(name) else {
            return Some(default);
        };
        let by = match found.kind {
            MatchKind::Exact => CertMatch::Exact,
            // A wildcard dNSName covers one label only (RFC 6125 §6.4.3): a longer
            // name is not the certificate's, and no shorter wildcard covers it either.
            MatchKind::Wildcard { suffix_len } => {
                let label = name.len().saturating_sub(suffix_len + 1);
                if name[..label].contains(&b'.') {
                    return Some(default);
                }
                CertMatch::Wildcard
            }
            MatchKind::Any => return Some(default),
        };
        Some(Choice {
            member,
            cert: found.value as usize,
            by,
        })
    }

    /// The key of a [`Choice`] this resolver made.
    pub fn key(&self, c: Choice) -> Option<&Arc<CertifiedKey>> {
        self.list.get(c.member)?.certs.get(c.cert)
    }

    /// How many members the resolver serves.
    pub fn members(&self) -> usize {
        self.list.len()
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let sni = client_hello.server_name().map(str::as_bytes);
        self.pick(sni).and_then(|c| self.key(c)).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::CertificateDer;
    use rustls::sign::{Signer, SigningKey};
    use rustls::{SignatureAlgorithm, SignatureScheme};

    /// A key that cannot sign: the resolver only hands keys out.
    #[derive(Debug)]
    struct NoKey;

    impl SigningKey for NoKey {
        fn choose_scheme(&self, _: &[SignatureScheme]) -> Option<Box<dyn Signer>> {
            None
        }
        fn algorithm(&self) -> SignatureAlgorithm {
            SignatureAlgorithm::ECDSA
        }
    }

    /// A certificate whose "DER" is its label, for the given SAN patterns.
    fn cert(label: &str, sans: &[&str]) -> ServedCert {
        ServedCert {
            key: Arc::new(CertifiedKey::new(
                vec![CertificateDer::from(label.as_bytes().to_vec())],
                Arc::new(NoKey),
            )),
            names: sans
                .iter()
                .map(|s| HostPattern::parse(s).expect("pattern"))
                .collect(),
        }
    }

    fn member(hosts: &[&str], certs: Vec<ServedCert>) -> MemberCerts {
        MemberCerts {
            hostnames: hosts
                .iter()
                .map(|h| HostPattern::parse(h).expect("pattern"))
                .collect(),
            certs,
        }
    }

    /// The label of the certificate a handshake with `sni` gets.
    fn leaf(r: &SniResolver, sni: Option<&str>) -> Option<String> {
        let c = r.pick(sni.map(str::as_bytes))?;
        let k = r.key(c)?;
        Some(String::from_utf8_lossy(k.cert[0].as_ref()).into_owned())
    }

    fn resolver() -> SniResolver {
        SniResolver::build(vec![
            member(
                &["*.example.com"],
                vec![
                    cert("wild-default", &["*.example.com"]),
                    cert("api", &["api.example.com", "API2.example.com"]),
                    cert("deep", &["*.deep.example.com"]),
                ],
            ),
            member(
                &["shop.example.com"],
                vec![cert("shop", &["shop.example.com"])],
            ),
            member(&["bare.example.org"], vec![]),
            member(&[], vec![cert("catch-all", &["fallback.test"])]),
        ])
        .expect("builds")
    }

    #[test]
    fn exact_san_beats_wildcard_beats_default() {
        let r = resolver();
        assert_eq!(leaf(&r, Some("api.example.com")).as_deref(), Some("api"));
        assert_eq!(leaf(&r, Some("Api2.Example.COM")).as_deref(), Some("api"));
        assert_eq!(
            r.pick(Some(b"api.example.com")).map(|c| c.by),
            Some(CertMatch::Exact)
        );
        assert_eq!(
            leaf(&r, Some("x.deep.example.com")).as_deref(),
            Some("deep")
        );
        assert_eq!(
            r.pick(Some(b"x.deep.example.com")).map(|c| c.by),
            Some(CertMatch::Wildcard)
        );
        assert_eq!(
            leaf(&r, Some("www.example.com")).as_deref(),
            Some("wild-default")
        );
        // Two labels under the wildcard SAN: not the certificate's; the default.
        assert_eq!(
            r.pick(Some(b"a.b.example.com")),
            Some(Choice {
                member: 0,
                cert: 0,
                by: CertMatch::Default
            })
        );
    }

    #[test]
    fn the_member_is_chosen_first_exact_then_wildcard_then_catch_all() {
        let r = resolver();
        // The exact member wins over the wildcard member, whose certificates are not
        // looked at.
        assert_eq!(leaf(&r, Some("shop.example.com")).as_deref(), Some("shop"));
        // Names of no hostname go to the catch-all member, which answers with its
        // default even though its certificate is for another name.
        assert_eq!(leaf(&r, Some("unknown.test")).as_deref(), Some("catch-all"));
        assert_eq!(leaf(&r, None).as_deref(), Some("catch-all"));
        // A member without certificates: no handshake, never the catch-all's.
        assert_eq!(r.pick(Some(b"bare.example.org")), None);
        assert_eq!(r.members(), 4);
    }

    #[test]
    fn without_catch_all_unknown_names_and_no_sni_get_nothing() {
        let r = SniResolver::build(vec![member(
            &["a.example.com", "*.b.example.com"],
            vec![
                cert("a", &["a.example.com"]),
                cert("b", &["*.b.example.com"]),
            ],
        )])
        .expect("builds");
        assert_eq!(leaf(&r, Some("a.example.com")).as_deref(), Some("a"));
        assert_eq!(leaf(&r, Some("x.b.example.com")).as_deref(), Some("b"));
        assert_eq!(r.pick(Some(b"c.example.com")), None);
        assert_eq!(r.pick(Some(b"b.example.com")), None);
        assert_eq!(r.pick(None), None);
    }

    #[test]
    fn a_hostname_or_san_given_twice_goes_to_the_first() {
        let r = SniResolver::build(vec![
            member(&["a.example.com"], vec![cert("one", &["a.example.com"])]),
            member(
                &["a.example.com", "*"],
                vec![cert("two", &["a.example.com"])],
            ),
            member(&[], vec![cert("three", &[])]),
        ])
        .expect("builds");
        assert_eq!(leaf(&r, Some("a.example.com")).as_deref(), Some("one"));
        assert_eq!(leaf(&r, None).as_deref(), Some("two"));
        let r = SniResolver::build(vec![member(
            &[],
            vec![cert("x", &["n.test"]), cert("y", &["n.test", "m.test"])],
        )])
        .expect("builds");
        assert_eq!(leaf(&r, Some("n.test")).as_deref(), Some("x"));
        assert_eq!(leaf(&r, Some("m.test")).as_deref(), Some("y"));
    }
}
