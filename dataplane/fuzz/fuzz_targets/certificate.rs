#![no_main]
//! The certificate loader of terminating listeners (`sluice_ctrl::compile::certs`): the
//! bounded DER reader of the leaf (validity, subjectAltName dNSNames) on arbitrary bytes,
//! and `load_pem` on arbitrary PEM text split into a certificate and a key part, as a
//! Secret's `tls.crt` and `tls.key` or `serverCertificate`/`privateKey` files give them.
//!
//! Contract: no panic, no unbounded time or memory; a leaf read says why it failed; a
//! loaded certificate has a chain and its key matched it.

use libfuzzer_sys::fuzz_target;
use sluice_ctrl::compile::certs::{der::read_leaf, load_pem, now};

fuzz_target!(|data: &[u8]| {
    if let Err(e) = read_leaf(data) {
        assert!(!e.to_string().is_empty());
    }
    // The first byte says where the certificate part ends and the key part begins.
    let (cut, rest) = match data.split_first() {
        Some((c, r)) => (usize::from(*c) * r.len() / 256, r),
        None => (0, &[][..]),
    };
    let (crt, key) = rest.split_at(cut.min(rest.len()));
    if let Ok(c) = load_pem("fuzz".into(), crt, key, now()) {
        assert!(c.chain > 0);
    }
});
