//! The parts of a client's end-entity certificate that pinning and the forwarded
//! identity read — its subject, its SubjectPublicKeyInfo and its subjectAltNames — with
//! a bounded DER reader that borrows from the certificate and allocates nothing.
//!
//! The reader follows RFC 5280 §4.1 and never reads past its input: every length is
//! checked against what is left, and anything unexpected is an [`X509Error`], never a
//! panic. It checks no signature and no validity: by the time it runs, rustls's WebPki
//! verifier has accepted the chain.

use std::net::IpAddr;

/// Why a certificate could not be read.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum X509Error {
    /// The input ends inside an element.
    #[error("truncated DER")]
    Truncated,
    /// An element has another tag than the structure has there; holds the field.
    #[error("unexpected DER at {0}")]
    Unexpected(&'static str),
    /// A length form DER does not allow (indefinite, or over 4 bytes).
    #[error("invalid DER length")]
    Length,
}

/// A cursor over DER elements that cannot over-read.
#[derive(Clone, Copy)]
struct Der<'a> {
    rest: &'a [u8],
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const INTEGER: u8 = 0x02;
const OID: u8 = 0x06;
const BOOLEAN: u8 = 0x01;
const OCTET_STRING: u8 = 0x04;
/// `[0] EXPLICIT` version.
const VERSION: u8 = 0xa0;
/// `[3] EXPLICIT` extensions.
const EXTENSIONS: u8 = 0xa3;
/// id-ce-subjectAltName, 2.5.29.17.
const SAN_OID: &[u8] = &[0x55, 0x1d, 0x11];

impl<'a> Der<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Der { rest: bytes }
    }

    fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// The next element: its tag, its contents and the whole element (tag and length
    /// included).
    fn any(&mut self) -> Result<(u8, &'a [u8], &'a [u8]), X509Error> {
        let start = self.rest;
        let (&tag, rest) = start.split_first().ok_or(X509Error::Truncated)?;
        let (&first, mut rest) = rest.split_first().ok_or(X509Error::Truncated)?;
        let len = if first < 0x80 {
            usize::from(first)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 {
                return Err(X509Error::Length);
            }
            if rest.len() < n {
                return Err(X509Error::Truncated);
            }
            let (bytes, after) = rest.split_at(n);
            rest = after;
            bytes.iter().fold(0usize, |l, &b| (l << 8) | usize::from(b))
        };
        if rest.len() < len {
            return Err(X509Error::Truncated);
        }
        let (content, after) = rest.split_at(len);
        let whole = &start[..start.len() - after.len()];
        self.rest = after;
        Ok((tag, content, whole))
    }

    /// The next element's contents and the whole element, which must have tag `want`
    /// (`what` names it in errors).
    fn take(&mut self, want: u8, what: &'static str) -> Result<(&'a [u8], &'a [u8]), X509Error> {
        match self.any()? {
            (tag, content, whole) if tag == want => Ok((content, whole)),
            _ => Err(X509Error::Unexpected(what)),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.rest.first().copied()
    }
}

/// A certificate's subject, public key and subjectAltNames, borrowed from its DER.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leaf<'a> {
    /// The subject `Name`'s contents (its RDN `SET`s).
    pub subject: &'a [u8],
    /// The whole `SubjectPublicKeyInfo` element (what SPKI pins hash).
    pub spki: &'a [u8],
    /// The `GeneralNames` contents of the subjectAltName extension (empty without one).
    sans: &'a [u8],
}

/// One subjectAltName.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum San<'a> {
    /// `dNSName`, as written.
    Dns(&'a [u8]),
    /// `uniformResourceIdentifier` (such as `spiffe://...`).
    Uri(&'a [u8]),
    /// `rfc822Name`.
    Email(&'a [u8]),
    /// `iPAddress`: 4 or 16 bytes.
    Ip(&'a [u8]),
    /// Any other kind (otherName, directoryName, ...): matches nothing.
    Other,
}

impl San<'_> {
    /// The address of an `iPAddress` SAN.
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            San::Ip(b) => match b.len() {
                4 => <[u8; 4]>::try_from(*b).ok().map(IpAddr::from),
                16 => <[u8; 16]>::try_from(*b).ok().map(IpAddr::from),
                _ => None,
            },
            _ => None,
        }
    }
}

/// The subjectAltNames of a [`Leaf`], in certificate order. A malformed entry ends the
/// walk.
#[derive(Clone, Copy)]
pub struct Sans<'a> {
    der: Der<'a>,
}

impl<'a> Iterator for Sans<'a> {
    type Item = San<'a>;

    fn next(&mut self) -> Option<San<'a>> {
        if self.der.is_empty() {
            return None;
        }
        let Ok((tag, value, _)) = self.der.any() else {
            self.der = Der::new(&[]);
            return None;
        };
        Some(match tag {
            0x81 => San::Email(value),
            0x82 => San::Dns(value),
            0x86 => San::Uri(value),
            0x87 => San::Ip(value),
            _ => San::Other,
        })
    }
}

impl<'a> Leaf<'a> {
    /// Reads a DER certificate's subject, SubjectPublicKeyInfo and subjectAltNames.
    pub fn parse(der: &'a [u8]) -> Result<Leaf<'a>, X509Error> {
        let (cert, _) = Der::new(der).take(SEQUENCE, "Certificate")?;
        let (tbs, _) = Der::new(cert).take(SEQUENCE, "tbsCertificate")?;
        let mut tbs = Der::new(tbs);
        if tbs.peek() == Some(VERSION) {
            tbs.any()?;
        }
        tbs.take(INTEGER, "serialNumber")?;
        tbs.take(SEQUENCE, "signature")?;
        tbs.take(SEQUENCE, "issuer")?;
        tbs.take(SEQUENCE, "validity")?;
        let (subject, _) = tbs.take(SEQUENCE, "subject")?;
        let (_, spki) = tbs.take(SEQUENCE, "subjectPublicKeyInfo")?;
        let mut sans: &[u8] = &[];
        while !tbs.is_empty() {
            let (tag, content, _) = tbs.any()?;
            if tag != EXTENSIONS {
                continue; // issuerUniqueID, subjectUniqueID
            }
            let (exts, _) = Der::new(content).take(SEQUENCE, "extensions")?;
            let mut exts = Der::new(exts);
            while !exts.is_empty() {
                let (ext, _) = exts.take(SEQUENCE, "extension")?;
                let mut ext = Der::new(ext);
                let (oid, _) = ext.take(OID, "extnID")?;
                if ext.peek() == Some(BOOLEAN) {
                    ext.any()?;
                }
                let (value, _) = ext.take(OCTET_STRING, "extnValue")?;
                if oid == SAN_OID {
                    sans = Der::new(value).take(SEQUENCE, "subjectAltName")?.0;
                }
            }
        }
        Ok(Leaf {
            subject,
            spki,
            sans,
        })
    }

    /// The subjectAltNames, in certificate order.
    pub fn sans(&self) -> Sans<'a> {
        Sans {
            der: Der::new(self.sans),
        }
    }

    /// The subject's attributes in RFC 4514 order (the last RDN first), each with the
    /// index of its RDN (attributes of one multi-valued RDN share it). A malformed RDN
    /// ends the walk.
    pub fn subject_rfc4514_indexed(&self) -> SubjectAttrs<'a> {
        let mut rdns: [&'a [u8]; MAX_RDNS] = [&[]; MAX_RDNS];
        let mut n = 0;
        let mut d = Der::new(self.subject);
        while !d.is_empty() && n < MAX_RDNS {
            match d.take(SET, "RelativeDistinguishedName") {
                Ok((set, _)) => {
                    rdns[n] = set;
                    n += 1;
                }
                Err(_) => break,
            }
        }
        SubjectAttrs {
            rdns,
            left: n,
            current: Der::new(&[]),
        }
    }
}

/// RDNs read of a subject; more are ignored (real subjects have a handful).
const MAX_RDNS: usize = 16;

/// One attribute of a subject: the type's OID contents, the value's tag and contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr<'a> {
    /// The attribute type's OID contents (`55 04 03` for CN).
    pub oid: &'a [u8],
    /// The value's DER tag (UTF8String 0x0c, PrintableString 0x13, ...).
    pub tag: u8,
    /// The value's contents.
    pub value: &'a [u8],
}

/// A subject's attributes, the last RDN first (see [`Leaf::subject_rfc4514_indexed`]).
pub struct SubjectAttrs<'a> {
    rdns: [&'a [u8]; MAX_RDNS],
    left: usize,
    current: Der<'a>,
}

impl<'a> Iterator for SubjectAttrs<'a> {
    type Item = (usize, Attr<'a>);

    fn next(&mut self) -> Option<(usize, Attr<'a>)> {
        loop {
            if !self.current.is_empty() {
                let Ok((atv, _)) = self.current.take(SEQUENCE, "AttributeTypeAndValue") else {
                    self.current = Der::new(&[]);
                    continue;
                };
                let mut atv = Der::new(atv);
                let Ok((oid, _)) = atv.take(OID, "AttributeType") else {
                    continue;
                };
                let Ok((tag, value, _)) = atv.any() else {
                    continue;
                };
                return Some((self.left, Attr { oid, tag, value }));
            }
            if self.left == 0 {
                return None;
            }
            self.left -= 1;
            self.current = Der::new(self.rdns.get(self.left).copied().unwrap_or(&[]));
        }
    }
}

/// OpenSSL's short name of a subject attribute type (what `XN_FLAG_RFC2253` prints), for
/// the types certificates carry; `None` for others.
pub fn attr_name(oid: &[u8]) -> Option<&'static str> {
    Some(match oid {
        [0x55, 0x04, 0x03] => "CN",
        [0x55, 0x04, 0x04] => "SN",
        [0x55, 0x04, 0x05] => "serialNumber",
        [0x55, 0x04, 0x06] => "C",
        [0x55, 0x04, 0x07] => "L",
        [0x55, 0x04, 0x08] => "ST",
        [0x55, 0x04, 0x09] => "street",
        [0x55, 0x04, 0x0a] => "O",
        [0x55, 0x04, 0x0b] => "OU",
        [0x55, 0x04, 0x0c] => "title",
        [0x55, 0x04, 0x0f] => "businessCategory",
        [0x55, 0x04, 0x11] => "postalCode",
        [0x55, 0x04, 0x29] => "name",
        [0x55, 0x04, 0x2a] => "GN",
        [0x55, 0x04, 0x2b] => "initials",
        [0x55, 0x04, 0x2c] => "generationQualifier",
        [0x55, 0x04, 0x2e] => "dnQualifier",
        [0x55, 0x04, 0x41] => "pseudonym",
        [0x55, 0x04, 0x61] => "organizationIdentifier",
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19] => "DC",
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01] => "UID",
        [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01] => "emailAddress",
        _ => return None,
    })
}

/// Certificate skeletons for tests: the structure the readers walk, with no signature
/// or key worth the name.
#[cfg(test)]
pub(crate) mod skeleton {
    /// DER element.
    pub(crate) fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        if content.len() < 0x80 {
            v.push(content.len() as u8);
        } else {
            v.push(0x82);
            v.extend_from_slice(&(content.len() as u16).to_be_bytes());
        }
        v.extend_from_slice(content);
        v
    }

    pub(crate) fn atv(oid: &[u8], tag: u8, value: &[u8]) -> Vec<u8> {
        tlv(0x30, &[tlv(0x06, oid), tlv(tag, value)].concat())
    }

    /// A certificate skeleton with this subject (RDN SETs) and these GeneralNames.
    pub(crate) fn cert(rdns: &[Vec<u8>], sans: &[(u8, &[u8])]) -> Vec<u8> {
        let subject = tlv(0x30, &rdns.concat());
        let names: Vec<u8> = sans.iter().flat_map(|(t, v)| tlv(*t, v)).collect();
        let ext = tlv(
            0x30,
            &[
                tlv(0x06, &[0x55, 0x1d, 0x11]),
                tlv(0x04, &tlv(0x30, &names)),
            ]
            .concat(),
        );
        let tbs = [
            tlv(0xa0, &tlv(0x02, &[2])),
            tlv(0x02, &[1]),
            tlv(0x30, &[]),
            tlv(0x30, &[]),
            tlv(0x30, &[]),
            subject,
            tlv(0x30, &[1, 2, 3]),
            tlv(0xa3, &tlv(0x30, &ext)),
        ]
        .concat();
        tlv(
            0x30,
            &[tlv(0x30, &tbs), tlv(0x30, &[]), tlv(0x03, &[0])].concat(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncated_and_garbage_input_is_an_error_not_a_panic() {
        assert_eq!(Leaf::parse(&[]), Err(X509Error::Truncated));
        assert_eq!(
            Leaf::parse(&[0x30, 0x85, 1, 2, 3, 4, 5]),
            Err(X509Error::Length)
        );
        assert_eq!(Leaf::parse(&[0x30, 0x82, 0xff]), Err(X509Error::Truncated));
        assert_eq!(
            Leaf::parse(&[0x31, 0x00]),
            Err(X509Error::Unexpected("Certificate"))
        );
        for n in 0..64u8 {
            let junk: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37) ^ 0x30).collect();
            let _ = Leaf::parse(&junk);
        }
    }

    #[test]
    fn sans_walk_stops_at_a_bad_entry() {
        let leaf = Leaf {
            subject: &[],
            spki: &[],
            sans: &[
                0x82, 3, b'a', b'.', b'b', 0x86, 2, b'u', b':', 0x87, 4, 10, 0, 0, 1, 0xa0, 0,
                0x82, 9,
            ],
        };
        let got: Vec<San> = leaf.sans().collect();
        assert_eq!(
            got,
            [
                San::Dns(b"a.b"),
                San::Uri(b"u:"),
                San::Ip(&[10, 0, 0, 1]),
                San::Other
            ]
        );
        assert_eq!(got[2].ip(), Some(IpAddr::from([10, 0, 0, 1])));
    }
}
