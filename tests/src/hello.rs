//! TLS ClientHellos built for tests and benchmarks: a TLS 1.3-style hello with the SNI
//! (and padding) asked for, in one record or cut across several.

fn u16b(v: usize) -> [u8; 2] {
    (v as u16).to_be_bytes()
}

/// The handshake message (type 1, 24-bit length, body) of a ClientHello naming `sni`
/// (none: no server_name extension), with a padding extension of `pad` bytes.
pub fn message(sni: Option<&str>, pad: usize) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&[0x03, 0x03]); // legacy_version TLS 1.2
    body.extend((0..32u8).map(|i| i.wrapping_mul(37))); // random
    body.push(32); // legacy_session_id
    body.extend((0..32u8).map(|i| i ^ 0x5a));
    body.extend_from_slice(&u16b(6));
    body.extend_from_slice(&[0x13, 0x01, 0x13, 0x02, 0x13, 0x03]);
    body.extend_from_slice(&[1, 0]); // compression: null
    let mut ext = Vec::new();
    if let Some(name) = sni {
        let n = name.as_bytes();
        ext.extend_from_slice(&[0, 0]);
        ext.extend_from_slice(&u16b(n.len() + 5));
        ext.extend_from_slice(&u16b(n.len() + 3));
        ext.push(0);
        ext.extend_from_slice(&u16b(n.len()));
        ext.extend_from_slice(n);
    }
    // supported_versions: TLS 1.3, 1.2
    ext.extend_from_slice(&[0x00, 0x2b, 0x00, 0x05, 0x04, 0x03, 0x04, 0x03, 0x03]);
    // padding (RFC 7685)
    ext.extend_from_slice(&[0x00, 0x15]);
    ext.extend_from_slice(&u16b(pad));
    ext.extend(std::iter::repeat_n(0u8, pad));
    body.extend_from_slice(&u16b(ext.len()));
    body.extend_from_slice(&ext);
    let mut msg = vec![1u8];
    msg.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    msg.extend_from_slice(&body);
    msg
}

/// `msg` in TLS handshake records, cut at the given offsets of the message.
pub fn records(msg: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = 0;
    for &end in cuts.iter().chain(std::iter::once(&msg.len())) {
        let end = end.clamp(at, msg.len());
        if end == at && end != msg.len() {
            continue;
        }
        out.extend_from_slice(&[0x16, 0x03, 0x01]);
        out.extend_from_slice(&u16b(end - at));
        out.extend_from_slice(&msg[at..end]);
        at = end;
    }
    out
}

/// A ClientHello naming `sni` in one record.
pub fn client_hello(sni: Option<&str>, pad: usize) -> Vec<u8> {
    records(&message(sni, pad), &[])
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_dataplane::inspect::tls::{parse, Outcome};

    #[test]
    fn hellos_parse_with_their_sni() {
        for cuts in [&[][..], &[10, 100][..]] {
            let h = records(&message(Some("a.example.test"), 300), cuts);
            match parse(&h) {
                Outcome::Hello(hello) => assert_eq!(
                    hello.routing_name().map(|n| n.as_str().to_string()),
                    Some("a.example.test".to_string())
                ),
                other => panic!("{other:?}"),
            }
        }
        assert!(
            matches!(parse(&client_hello(None, 0)), Outcome::Hello(h) if h.routing_name().is_none())
        );
    }
}
