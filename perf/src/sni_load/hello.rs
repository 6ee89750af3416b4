//! ClientHellos with a chosen SNI, made from a real capture.
//!
//! The load client sends what a browser sends: the Firefox ClientHello of
//! `shared/testdata/tls/firefox-padding.hex` (cipher suites, key share, padding and all),
//! with its `server_name` replaced by the name a connection is routed on. [`with_sni`]
//! rewrites the extension and every length that encloses it (extension list, handshake
//! message, record); nothing else changes. Only a hello in one handshake record is
//! rewritten (every captured browser hello of the test data is).

use crate::fixtures::unhex;
use std::path::Path;

/// The capture the load client's hellos are made from.
pub const BASE_CAPTURE: &str = "firefox-padding.hex";

const RECORD_HEADER: usize = 5;
const HANDSHAKE_HEADER: usize = 4;
const EXT_SERVER_NAME: u16 = 0;

/// [`BASE_CAPTURE`] from `dir` with its SNI replaced by `sni`.
pub fn from_testdata(dir: &Path, sni: &str) -> Result<Vec<u8>, String> {
    let path = dir.join(BASE_CAPTURE);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    with_sni(&unhex(&text), sni)
}

/// A bounds-checked reader over a byte slice (every read says `None` rather than
/// reading past the end).
struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|s| usize::from(s[0]))
    }
    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|s| usize::from(u16::from_be_bytes([s[0], s[1]])))
    }
}

fn put_u16(out: &mut [u8], at: usize, v: usize) -> Result<(), String> {
    let v = u16::try_from(v).map_err(|_| format!("length {v} does not fit 16 bits"))?;
    out[at..at + 2].copy_from_slice(&v.to_be_bytes());
    Ok(())
}

/// `hello` (a TLS record holding one whole ClientHello, as captured) with its
/// `server_name` extension replaced by one naming `sni` (added last when it had none).
/// The extension list, handshake and record lengths are recomputed; bytes after the
/// record are dropped.
pub fn with_sni(hello: &[u8], sni: &str) -> Result<Vec<u8>, String> {
    let bad = |what: &str| format!("ClientHello: {what}");
    if sni.is_empty() || sni.len() > 253 || !sni.is_ascii() {
        return Err(bad("SNI must be 1..253 ASCII bytes"));
    }
    let mut c = Cursor { b: hello, at: 0 };
    let header = c
        .take(RECORD_HEADER)
        .ok_or_else(|| bad("short record header"))?;
    if header[0] != 22 {
        return Err(bad("not a handshake record"));
    }
    let record_len = usize::from(u16::from_be_bytes([header[3], header[4]]));
    let hs = c
        .take(HANDSHAKE_HEADER)
        .ok_or_else(|| bad("short handshake header"))?;
    if hs[0] != 1 {
        return Err(bad("not a ClientHello"));
    }
    let hs_len = usize::from(hs[1]) << 16 | usize::from(hs[2]) << 8 | usize::from(hs[3]);
    if HANDSHAKE_HEADER + hs_len > record_len || RECORD_HEADER + record_len > hello.len() {
        return Err(bad("the hello does not fit in its first record"));
    }
    let body_start = c.at;
    let body_end = body_start + hs_len;
    let mut b = Cursor {
        b: &hello[..body_end],
        at: body_start,
    };
    let short = || bad("truncated body");
    b.take(2 + 32).ok_or_else(short)?; // legacy_version, random
    let n = b.u8().ok_or_else(short)?;
    b.take(n).ok_or_else(short)?; // legacy_session_id
    let n = b.u16().ok_or_else(short)?;
    b.take(n).ok_or_else(short)?; // cipher_suites
    let n = b.u8().ok_or_else(short)?;
    b.take(n).ok_or_else(short)?; // legacy_compression_methods
    let ext_len_at = b.at;
    let ext_len = b.u16().ok_or_else(short)?;
    let ext_start = b.at;
    if ext_start + ext_len != body_end {
        return Err(bad("extensions do not end where the hello ends"));
    }
    // The new server_name extension: list length, host_name entry (type 0) of the name.
    let mut sni_ext = Vec::with_capacity(9 + sni.len());
    sni_ext.extend_from_slice(&EXT_SERVER_NAME.to_be_bytes());
    sni_ext.extend_from_slice(&((sni.len() + 5) as u16).to_be_bytes());
    sni_ext.extend_from_slice(&((sni.len() + 3) as u16).to_be_bytes());
    sni_ext.push(0);
    sni_ext.extend_from_slice(&(sni.len() as u16).to_be_bytes());
    sni_ext.extend_from_slice(sni.as_bytes());

    let mut exts = Vec::with_capacity(ext_len + sni_ext.len());
    let mut replaced = false;
    while b.at < body_end {
        let start = b.at;
        let ty = b.u16().ok_or_else(short)?;
        let len = b.u16().ok_or_else(short)?;
        b.take(len).ok_or_else(short)?;
        if ty == EXT_SERVER_NAME as usize {
            if replaced {
                return Err(bad("two server_name extensions"));
            }
            exts.extend_from_slice(&sni_ext);
            replaced = true;
        } else {
            exts.extend_from_slice(&hello[start..b.at]);
        }
    }
    if !replaced {
        exts.extend_from_slice(&sni_ext);
    }
    let mut out = hello[..ext_len_at + 2].to_vec();
    out.extend_from_slice(&exts);
    // Anything between the hello's end and the record's end stays (none in captures).
    out.extend_from_slice(&hello[body_end..RECORD_HEADER + record_len]);
    put_u16(&mut out, ext_len_at, exts.len())?;
    let new_hs_len = ext_len_at + 2 + exts.len() - body_start;
    let hs_bytes = u32::try_from(new_hs_len)
        .map_err(|_| bad("too long"))?
        .to_be_bytes();
    out[RECORD_HEADER + 1..RECORD_HEADER + 4].copy_from_slice(&hs_bytes[1..]);
    let new_record_len = out.len() - RECORD_HEADER;
    put_u16(&mut out, 3, new_record_len)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::testdata_dir;
    use sluice_dataplane::inspect::tls::{parse, Outcome};

    fn sni_of(hello: &[u8]) -> Option<String> {
        match parse(hello) {
            Outcome::Hello(h) => h.server_name.routing_name().map(|n| n.as_str().to_string()),
            other => panic!("not a hello: {other:?}"),
        }
    }

    /// A minimal TLS 1.2 ClientHello: one cipher suite, no extensions but server_name
    /// (`old.test`).
    fn tiny() -> Vec<u8> {
        let mut body = vec![0x03, 0x03];
        body.extend_from_slice(&[0x11; 32]);
        body.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0]);
        let name = b"old.test";
        let mut ext = vec![
            0,
            0,
            0,
            (name.len() + 5) as u8,
            0,
            (name.len() + 3) as u8,
            0,
        ];
        ext.extend_from_slice(&[0, name.len() as u8]);
        ext.extend_from_slice(name);
        body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
        body.extend_from_slice(&ext);
        let mut hs = vec![1, 0];
        hs.extend_from_slice(&(body.len() as u16).to_be_bytes());
        hs.extend_from_slice(&body);
        let mut rec = vec![22, 3, 1];
        rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
        rec.extend_from_slice(&hs);
        rec
    }

    #[test]
    fn rewrites_a_literal_hello() {
        let h = tiny();
        assert_eq!(sni_of(&h).as_deref(), Some("old.test"));
        let out = with_sni(&h, "a.example.test").expect("rewrite");
        assert_eq!(
            out.len(),
            h.len() + 6,
            "6 more name bytes, every length grows"
        );
        assert_eq!(sni_of(&out).as_deref(), Some("a.example.test"));
        assert_eq!(&out[..5], &[22, 3, 1, 0, (out.len() - 5) as u8]);
    }

    #[test]
    fn rejects_what_it_cannot_rewrite() {
        let h = tiny();
        assert!(with_sni(&h[..h.len() - 1], "a.test").is_err(), "truncated");
        assert!(with_sni(&h[..20], "a.test").is_err(), "truncated");
        assert!(with_sni(b"GET / HTTP/1.1\r\n\r\n", "a.test").is_err());
        assert!(with_sni(&h, "").is_err());
    }

    #[test]
    fn rewrites_the_firefox_capture() {
        let dir = testdata_dir();
        if !dir.join(BASE_CAPTURE).exists() {
            eprintln!("skipped: no {} in {}", BASE_CAPTURE, dir.display());
            return;
        }
        let orig = unhex(&std::fs::read_to_string(dir.join(BASE_CAPTURE)).expect("read"));
        assert_eq!(
            sni_of(&orig).as_deref(),
            Some("people-pa.clients6.google.com")
        );
        for name in ["a.example.test", "b.example.test"] {
            let h = from_testdata(&dir, name).expect("rewrite");
            assert_eq!(sni_of(&h).as_deref(), Some(name));
            // Shorter name, same everything else.
            assert_eq!(orig.len() - h.len(), 29 - name.len());
        }
    }
}
