//! The handshake's signature, side by side: rustls's aws-lc-rs provider (what sluice's
//! terminate engine signs with) and its ring provider against OpenSSL (`openssl speed`,
//! what nginx and HAProxy sign with here), for ECDSA P-256 and RSA-2048 — the part of a
//! full handshake's cost that the TCP and copy work cannot win back. Prints JSON on
//! stdout; figures are never asserted.
//!
//! Usage: `bench_tls_sign [--seconds S]` (default 2). Keys: the test fixtures in
//! `ctrl/tests/data/tls/` (`ec-pkcs8.key`, `rsa-pkcs1.key`).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::PrivateKeyDer;
use rustls::SignatureScheme;
use serde_json::json;
use std::time::{Duration, Instant};

fn fixture(name: &str) -> Vec<u8> {
    let p = format!(
        "{}/../ctrl/tests/data/tls/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// Which provider signs.
#[derive(Clone, Copy)]
enum Provider {
    Ring,
    AwsLc,
}

/// Signatures per second with `provider` for `key`, scheme `scheme`, over `secs`.
fn rate(provider: Provider, key: &[u8], scheme: SignatureScheme, secs: f64) -> f64 {
    let der = PrivateKeyDer::from_pem_slice(key).expect("PEM key");
    let key = match provider {
        Provider::Ring => rustls::crypto::ring::sign::any_supported_type(&der),
        Provider::AwsLc => rustls::crypto::aws_lc_rs::sign::any_supported_type(&der),
    }
    .expect("supported key");
    let signer = key.choose_scheme(&[scheme]).expect("scheme");
    let msg = [0x5au8; 130]; // about a TLS 1.3 CertificateVerify's input
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < Duration::from_secs_f64(secs) {
        for _ in 0..16 {
            std::hint::black_box(signer.sign(std::hint::black_box(&msg)).expect("sign"));
        }
        n += 16;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// OpenSSL's sign rates (`openssl speed -mr`), by algorithm name.
fn openssl_rates(secs: u32) -> (Option<f64>, Option<f64>) {
    let out = std::process::Command::new("openssl")
        .args([
            "speed",
            "-mr",
            "-seconds",
            &secs.to_string(),
            "rsa2048",
            "ecdsap256",
        ])
        .output();
    let Ok(out) = out else {
        return (None, None);
    };
    let text = String::from_utf8_lossy(&out.stdout);
    // Lines "+F2:<n>:<bits>:<sign/s>:<verify/s>" (RSA) and "+F4:..." (ECDSA), OpenSSL 3.
    let rate = |tag: &str, bits: &str| {
        text.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&tag) && f.get(2) == Some(&bits))
                .then(|| f.get(3)?.parse::<f64>().ok())
                .flatten()
                .filter(|r| *r > 0.0)
        })
    };
    (rate("+F2", "2048"), rate("+F4", "256"))
}

fn main() {
    let mut secs = 2.0f64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seconds" => secs = args.next().and_then(|s| s.parse().ok()).unwrap_or(secs),
            _ => {
                eprintln!("usage: bench_tls_sign [--seconds S]");
                std::process::exit(2);
            }
        }
    }
    let (ec, rsa) = (fixture("ec-pkcs8.key"), fixture("rsa-pkcs1.key"));
    let (ec_s, rsa_s) = (
        SignatureScheme::ECDSA_NISTP256_SHA256,
        SignatureScheme::RSA_PSS_SHA256,
    );
    let ecdsa_aws = rate(Provider::AwsLc, &ec, ec_s, secs);
    let ecdsa_ring = rate(Provider::Ring, &ec, ec_s, secs);
    let rsa_aws = rate(Provider::AwsLc, &rsa, rsa_s, secs);
    let rsa_ring = rate(Provider::Ring, &rsa, rsa_s, secs);
    let (o_rsa, o_ecdsa) = openssl_rates(secs.ceil() as u32);
    let ratio = |a: f64, b: Option<f64>| b.map(|b| (a / b * 1000.0).round() / 1000.0);
    let out = json!({
        "bench": "tls_sign",
        "what": "signatures per second on one core: rustls's aws-lc-rs and ring providers vs openssl speed",
        "ecdsa_p256": {"aws_lc_rs": ecdsa_aws.round(), "ring": ecdsa_ring.round(),
                       "openssl": o_ecdsa.map(f64::round),
                       "ratio_aws_lc_rs_openssl": ratio(ecdsa_aws, o_ecdsa),
                       "ratio_ring_openssl": ratio(ecdsa_ring, o_ecdsa)},
        "rsa_2048": {"aws_lc_rs": rsa_aws.round(), "ring": rsa_ring.round(),
                     "openssl": o_rsa.map(f64::round),
                     "ratio_aws_lc_rs_openssl": ratio(rsa_aws, o_rsa),
                     "ratio_ring_openssl": ratio(rsa_ring, o_rsa)},
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
}
