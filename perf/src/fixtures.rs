//! Inputs several benchmarks build alike: test frames, the real ClientHello vectors and
//! their hex dumps. Manifest documents come from [`sluice_testkit::manifests`], shared
//! with the integration tests.

use sluice_dataplane::wire::{ethernet, ip_proto, ipv4, tcp, udp, EtherType, MacAddr};
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

/// A 60-byte UDP frame of flow `i` (IPv4, 18 bytes of zero payload):
/// `10.1.0.1:10000+i -> 192.168.0.(i % 250 + 1):9`, from `src` to `dst` (MACs). The
/// forwarding benchmarks route these.
pub fn udp_frame(dst: MacAddr, src: MacAddr, i: u16) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    ethernet::Repr {
        dst_addr: dst,
        src_addr: src,
        ethertype: EtherType::Ipv4,
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut f[..]));
    let (src_ip, dst_ip) = (
        Ipv4Addr::new(10, 1, 0, 1),
        Ipv4Addr::new(192, 168, 0, (i % 250) as u8 + 1),
    );
    let mut ip = ipv4::Packet::new_unchecked(&mut f[14..60]);
    ipv4::Repr {
        src_addr: src_ip,
        dst_addr: dst_ip,
        protocol: ip_proto::UDP,
        payload_len: 8 + 18,
        ttl: 64,
    }
    .emit(&mut ip);
    udp::Repr {
        src_port: 10_000 + i,
        dst_port: 9,
        payload_len: 18,
    }
    .emit(
        &mut udp::Packet::new_unchecked(ip.payload_mut()),
        IpAddr::V4(src_ip),
        IpAddr::V4(dst_ip),
    );
    f
}

/// The real ClientHellos directory: `$SLUICE_TESTDATA` if set, else `shared/testdata/tls`
/// beside the repository.
pub fn testdata_dir() -> PathBuf {
    match std::env::var_os("SLUICE_TESTDATA") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/testdata/tls"),
    }
}

/// The bytes of a hex dump (non-hex characters such as newlines are skipped).
pub fn unhex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text
        .bytes()
        .filter(u8::is_ascii_hexdigit)
        .map(|b| (b as char).to_digit(16).unwrap_or(0) as u8)
        .collect();
    digits.chunks_exact(2).map(|p| p[0] << 4 | p[1]).collect()
}

/// A 60-byte TCP segment with `flags` between the Ethernet addresses `(src, dst)`, from
/// `src` to `dst`.
pub fn tcp_frame(
    (src_mac, dst_mac): (MacAddr, MacAddr),
    (src, sport): (Ipv4Addr, u16),
    (dst, dport): (Ipv4Addr, u16),
    flags: u16,
    out: &mut [u8],
) {
    ethernet::Repr {
        dst_addr: dst_mac,
        src_addr: src_mac,
        ethertype: EtherType::Ipv4,
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut out[..]));
    let mut ip = ipv4::Packet::new_unchecked(&mut out[14..14 + 40]);
    ipv4::Repr {
        src_addr: src,
        dst_addr: dst,
        protocol: ip_proto::TCP,
        payload_len: 20,
        ttl: 64,
    }
    .emit(&mut ip);
    let syn = flags == tcp::flags::SYN;
    tcp::Repr {
        src_port: sport,
        dst_port: dport,
        seq_number: 1000 + u32::from(!syn),
        ack_number: if syn { 0 } else { 5000 },
        flags,
        window_len: 1000,
        payload_len: 0,
    }
    .emit(
        &mut tcp::Packet::new_unchecked(ip.payload_mut()),
        IpAddr::V4(src),
        IpAddr::V4(dst),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_frames_parse_with_valid_checksums() {
        let f = udp_frame(
            MacAddr([2, 0, 0, 0, 0, 2]),
            MacAddr([2, 0, 0, 0, 0, 1]),
            300,
        );
        assert_eq!(f.len(), 60);
        let ip = ipv4::Packet::new_checked(&f[14..]).expect("ipv4");
        assert!(ip.verify_checksum());
        assert_eq!(ip.dst_addr(), Ipv4Addr::new(192, 168, 0, 51));
        assert_eq!(unhex("0a ff\n10"), vec![0x0a, 0xff, 0x10]);
    }
}
