#![no_main]
//! `inspect::classify` (TLS, then HTTP/1) on arbitrary bytes.

use libfuzzer_sys::fuzz_target;
use sluice_dataplane::inspect::{classify, Inspected};

mod common;

fn verdict(input: &[u8]) -> Result<String, usize> {
    match classify(input) {
        Inspected::NeedMore { at_least } => Err(at_least),
        other => {
            let _ = other.host();
            Ok(format!("{other:?}"))
        }
    }
}

fuzz_target!(|data: &[u8]| {
    common::check_prefixes(data, verdict);
});
