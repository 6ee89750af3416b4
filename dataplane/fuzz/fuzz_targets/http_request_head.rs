#![no_main]
//! The HTTP/1 request-head parser on arbitrary bytes.

use libfuzzer_sys::fuzz_target;
use sluice_dataplane::inspect::http;

mod common;

fn verdict(input: &[u8]) -> Result<String, usize> {
    match http::parse(input) {
        http::Outcome::NeedMore { at_least } => Err(at_least),
        http::Outcome::Request(h) => {
            assert!(h.len <= input.len() && h.len <= http::MAX_HEAD_LEN);
            assert!(!h.method.is_empty());
            if let Some(name) = h.routing_name() {
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
