//! The three things sluice reads from a leaf certificate — its validity (notBefore,
//! notAfter) and its subjectAltName dNSNames — with a bounded DER reader.
//!
//! Why not `x509-parser`: it brings `nom`, `asn1-rs`, `der-parser`, `oid-registry` and
//! `time` (a build on the shared two cores) for three fields of one structure, while
//! rustls (through webpki) already checks the certificate's structure where it matters,
//! at the client. The reader follows RFC 5280 §4.1 and never reads past its input: every
//! length is checked against what is left (the cursor pattern of rustls's `codec::Reader`),
//! and anything unexpected is a [`DerError`], never a panic.

use std::fmt;

/// Why a leaf certificate could not be read.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DerError {
    /// The input ends inside an element.
    #[error("truncated DER")]
    Truncated,
    /// An element has another tag than the structure has there; holds the field.
    #[error("unexpected DER at {0}")]
    Unexpected(&'static str),
    /// A length form DER does not allow (indefinite, or over 4 bytes).
    #[error("invalid DER length")]
    Length,
    /// A time that is not `YYMMDDHHMMSSZ` (UTCTime) or `YYYYMMDDHHMMSSZ`
    /// (GeneralizedTime).
    #[error("invalid time")]
    Time,
}

/// A point in time as seconds since 1970-01-01T00:00:00Z.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct UnixTime(pub i64);

impl fmt::Display for UnixTime {
    /// RFC 3339, UTC: `2001-01-01T00:00:00Z`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let days = self.0.div_euclid(86_400);
        let secs = self.0.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        )
    }
}

/// What sluice reads from a leaf certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leaf {
    /// Start of validity.
    pub not_before: UnixTime,
    /// End of validity.
    pub not_after: UnixTime,
    /// subjectAltName dNSNames, as written (wildcards included).
    pub dns_names: Vec<String>,
}

/// A cursor over DER elements that cannot over-read.
struct Der<'a> {
    rest: &'a [u8],
}

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const OID: u8 = 0x06;
const BOOLEAN: u8 = 0x01;
const OCTET_STRING: u8 = 0x04;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;
/// `[0] EXPLICIT` version.
const VERSION: u8 = 0xa0;
/// `[3] EXPLICIT` extensions.
const EXTENSIONS: u8 = 0xa3;
/// `dNSName [2] IMPLICIT IA5String` in GeneralName.
const DNS_NAME: u8 = 0x82;
/// id-ce-subjectAltName, 2.5.29.17.
const SAN_OID: &[u8] = &[0x55, 0x1d, 0x11];

impl<'a> Der<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Der { rest: bytes }
    }

    fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    /// The next element's tag and contents.
    fn any(&mut self) -> Result<(u8, &'a [u8]), DerError> {
        let (&tag, rest) = self.rest.split_first().ok_or(DerError::Truncated)?;
        let (&first, mut rest) = rest.split_first().ok_or(DerError::Truncated)?;
        let len = if first < 0x80 {
            usize::from(first)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 {
                return Err(DerError::Length);
            }
            if rest.len() < n {
                return Err(DerError::Truncated);
            }
            let (bytes, after) = rest.split_at(n);
            rest = after;
            bytes.iter().fold(0usize, |l, &b| (l << 8) | usize::from(b))
        };
        if rest.len() < len {
            return Err(DerError::Truncated);
        }
        let (content, after) = rest.split_at(len);
        self.rest = after;
        Ok((tag, content))
    }

    /// The next element, which must have tag `want` (`what` names it in errors).
    fn expect(&mut self, want: u8, what: &'static str) -> Result<&'a [u8], DerError> {
        match self.any()? {
            (tag, content) if tag == want => Ok(content),
            _ => Err(DerError::Unexpected(what)),
        }
    }

    /// The next element's tag, without consuming it.
    fn peek(&self) -> Option<u8> {
        self.rest.first().copied()
    }
}

/// Reads the validity and dNSNames of a DER certificate.
pub fn read_leaf(der: &[u8]) -> Result<Leaf, DerError> {
    let cert = Der::new(der).expect(SEQUENCE, "Certificate")?;
    let mut tbs = Der::new(Der::new(cert).expect(SEQUENCE, "tbsCertificate")?);
    if tbs.peek() == Some(VERSION) {
        tbs.any()?;
    }
    tbs.expect(INTEGER, "serialNumber")?;
    tbs.expect(SEQUENCE, "signature")?;
    tbs.expect(SEQUENCE, "issuer")?;
    let mut validity = Der::new(tbs.expect(SEQUENCE, "validity")?);
    let not_before = time(&mut validity)?;
    let not_after = time(&mut validity)?;
    tbs.expect(SEQUENCE, "subject")?;
    tbs.expect(SEQUENCE, "subjectPublicKeyInfo")?;
    let mut dns_names = Vec::new();
    while !tbs.is_empty() {
        let (tag, content) = tbs.any()?;
        if tag != EXTENSIONS {
            continue; // issuerUniqueID, subjectUniqueID
        }
        let mut exts = Der::new(Der::new(content).expect(SEQUENCE, "extensions")?);
        while !exts.is_empty() {
            let mut ext = Der::new(exts.expect(SEQUENCE, "extension")?);
            let oid = ext.expect(OID, "extnID")?;
            if ext.peek() == Some(BOOLEAN) {
                ext.any()?;
            }
            let value = ext.expect(OCTET_STRING, "extnValue")?;
            if oid != SAN_OID {
                continue;
            }
            let mut names = Der::new(Der::new(value).expect(SEQUENCE, "subjectAltName")?);
            while !names.is_empty() {
                let (tag, name) = names.any()?;
                if tag == DNS_NAME {
                    dns_names.push(String::from_utf8_lossy(name).into_owned());
                }
            }
        }
    }
    Ok(Leaf {
        not_before,
        not_after,
        dns_names,
    })
}

/// A `Time` (UTCTime or GeneralizedTime, UTC with seconds, as RFC 5280 requires).
fn time(d: &mut Der) -> Result<UnixTime, DerError> {
    let (tag, s) = d.any()?;
    let (year, rest) = match (tag, s.len()) {
        (UTC_TIME, 13) => {
            let yy = digits(&s[..2])?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &s[2..])
        }
        (GENERALIZED_TIME, 15) => (digits(&s[..4])?, &s[4..]),
        _ => return Err(DerError::Time),
    };
    if rest.get(10) != Some(&b'Z') {
        return Err(DerError::Time);
    }
    let field = |i: usize| digits(&rest[i..i + 2]);
    let (month, day, h, m, sec) = (field(0)?, field(2)?, field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || h > 23 || m > 59 || sec > 60 {
        return Err(DerError::Time);
    }
    let days = days_from_civil(year, month, day);
    Ok(UnixTime(days * 86_400 + h * 3600 + m * 60 + sec))
}

/// ASCII decimal digits as a number.
fn digits(s: &[u8]) -> Result<i64, DerError> {
    s.iter().try_fold(0i64, |n, &b| {
        if b.is_ascii_digit() {
            Ok(n * 10 + i64::from(b - b'0'))
        } else {
            Err(DerError::Time)
        }
    })
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day number (inverse of [`days_from_civil`]).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip() {
        for (s, t) in [
            ("1970-01-01T00:00:00Z", 0),
            ("2001-01-01T00:00:00Z", 978_307_200),
            ("2000-02-29T12:34:56Z", 951_827_696),
            ("2126-12-05T19:19:00Z", 4_952_171_940),
        ] {
            assert_eq!(UnixTime(t).to_string(), s);
        }
        let utc = [
            UTC_TIME, 13, b'0', b'1', b'0', b'1', b'0', b'1', b'0', b'0', b'0', b'0', b'0', b'0',
            b'Z',
        ];
        assert_eq!(time(&mut Der::new(&utc)), Ok(UnixTime(978_307_200)));
        let gen = *b"\x18\x0f21260101000000Z";
        assert_eq!(
            time(&mut Der::new(&gen)).map(|t| t.to_string()),
            Ok("2126-01-01T00:00:00Z".into())
        );
        let bad = *b"\x18\x0f2126010100000+Z";
        assert_eq!(time(&mut Der::new(&bad)), Err(DerError::Time));
    }

    #[test]
    fn truncated_and_garbage_input_is_an_error_not_a_panic() {
        assert_eq!(read_leaf(&[]), Err(DerError::Truncated));
        assert_eq!(
            read_leaf(&[0x30, 0x85, 1, 2, 3, 4, 5]),
            Err(DerError::Length)
        );
        assert_eq!(read_leaf(&[0x30, 0x82, 0xff]), Err(DerError::Truncated));
        assert_eq!(
            read_leaf(&[0x31, 0x00]),
            Err(DerError::Unexpected("Certificate"))
        );
        for n in 0..64u8 {
            let junk: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37) ^ 0x30).collect();
            let _ = read_leaf(&junk);
        }
    }
}
