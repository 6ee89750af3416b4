#![no_main]
//! The TLS ClientHello parser on arbitrary bytes.

use libfuzzer_sys::fuzz_target;
use sluice_dataplane::inspect::tls;

mod common;

fn verdict(input: &[u8]) -> Result<String, usize> {
    match tls::parse(input) {
        tls::Outcome::NeedMore { at_least } => Err(at_least),
        tls::Outcome::Hello(h) => {
            // Touch everything a caller would.
            let alpn: Vec<&[u8]> = h.alpn.iter().collect();
            assert!(alpn.len() <= tls::MAX_ALPN_PROTOCOLS);
            assert!(alpn.iter().all(|p| !p.is_empty()));
            assert!(h.len <= input.len() && h.len <= tls::MAX_HELLO_LEN);
            if let Some(name) = h.routing_name() {
                assert!(!name.as_str().is_empty());
                assert!(!name.as_bytes().iter().any(u8::is_ascii_uppercase));
            }
            Ok(format!("{h:?}"))
        }
        other => Ok(format!("{other:?}")),
    }
}

fuzz_target!(|data: &[u8]| {
    common::check_prefixes(data, verdict);
});
