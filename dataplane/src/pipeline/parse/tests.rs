//! Parse tests: literal frames in, exact metadata out; the fixed IPv4 pass against the
//! views on mutated frames.

use super::*;
use proptest::prelude::*;

const PORT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x10];

/// TCP 10.0.0.1:1234 -> 10.0.0.2:80, SYN|ACK, seq 0x01020304, ack 0x0a0b0c0d, TTL 64, DF,
/// to the port's MAC; padded to 60 bytes.
fn tcp_v4() -> Vec<u8> {
    let mut f = vec![
        0x02, 0, 0, 0, 0, 0x10, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00, // ethernet
        0x45, 0x00, 0x00, 0x28, 0x12, 0x34, 0x40, 0x00, 0x40, 0x06, 0x14, 0x9a, // ipv4
        0x0a, 0x00, 0x00, 0x01, 0x0a, 0x00, 0x00, 0x02, //
        0x04, 0xd2, 0x00, 0x50, 0x01, 0x02, 0x03, 0x04, 0x0a, 0x0b, 0x0c, 0x0d, // tcp
        0x50, 0x12, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00,
    ];
    f.resize(60, 0);
    f
}

/// UDP [fd00::1]:5353 -> [fd00::2]:53, 4 bytes of payload, to the port's MAC.
fn udp_v6() -> Vec<u8> {
    let mut f = vec![
        0x02, 0, 0, 0, 0, 0x10, 0x02, 0, 0, 0, 0, 0x01, 0x86, 0xdd, // ethernet
        0x60, 0, 0, 0, 0x00, 0x0c, 17, 64, // ipv6: payload 12, UDP, hop limit 64
    ];
    f.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    f.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    f.extend_from_slice(&[0x14, 0xe9, 0x00, 0x35, 0x00, 0x0c, 0x00, 0x00, 1, 2, 3, 4]);
    f
}

fn parsed(f: &[u8]) -> (Found, Meta) {
    let mut m = Meta::EMPTY;
    let found = parse(f, mac_word(&PORT_MAC), &mut m);
    assert_eq!(found, m.found);
    (found, m)
}

#[test]
fn tcp_over_ipv4_in_one_pass() {
    let (found, m) = parsed(&tcp_v4());
    assert_eq!(found, Found::Transport);
    assert!(m.plain_v4 && !m.v6);
    assert_eq!((m.ttl, m.total, m.proto, m.l4), (64, 40, 6, 34));
    assert_eq!(
        (m.src, m.dst),
        ([0, 0, 0, 0x0a00_0001], [0, 0, 0, 0x0a00_0002])
    );
    assert_eq!((m.sport(), m.dport()), (1234, 80));
    assert_eq!(
        (m.seq(), m.ack(), m.flags, m.payload),
        (0x0102_0304, 0x0a0b_0c0d, 0x12, 0)
    );
    assert_eq!(m.src(), "10.0.0.1".parse::<IpAddr>().unwrap());
    // The forwarder's own parse fills the IP part alike, and nothing else.
    let mut ip = Meta::EMPTY;
    assert!(parse_ip(&tcp_v4(), mac_word(&PORT_MAC), &mut ip));
    assert_eq!(
        (ip.ttl, ip.total, ip.proto, ip.dst, ip.l4),
        (64, 40, 6, m.dst, 34)
    );
    assert_eq!((ip.found, ip.ports), (Found::Other, 0));
}

#[test]
fn udp_over_ipv6_through_the_view() {
    let (found, m) = parsed(&udp_v6());
    assert_eq!(found, Found::Transport);
    assert!(m.v6 && !m.plain_v4);
    assert_eq!(
        (m.proto, m.l4, m.sport(), m.dport(), m.payload),
        (17, 54, 5353, 53, 0)
    );
    assert_eq!(m.dst(), "fd00::2".parse::<IpAddr>().unwrap());
    assert_eq!(m.dst, [0xfd00_0000, 0, 0, 2]);
}

#[test]
fn what_is_not_tcp_or_udp_to_us() {
    let mac = mac_word(&PORT_MAC);
    // A bad header checksum: nothing for the fast path, the views decline too.
    let mut f = tcp_v4();
    f[25] ^= 1;
    let (found, m) = parsed(&f);
    assert_eq!((found, m.plain_v4), (Found::Other, false));
    // Another MAC.
    let mut f = tcp_v4();
    f[5] = 0x11;
    assert_eq!(parsed(&f).0, Found::Other);
    // A fragment (more fragments): dropped by the balancer, routable by the forwarder.
    let mut f = tcp_v4();
    f[20] = 0x20;
    ipv4::Packet::new_unchecked(&mut f[14..]).fill_checksum();
    let (found, m) = parsed(&f);
    assert_eq!((found, m.plain_v4, m.ttl), (Found::Fragment, true, 64));
    // ICMP: another IP protocol, with its addresses for the policy check.
    let mut f = tcp_v4();
    f[23] = ip_proto::ICMP;
    ipv4::Packet::new_unchecked(&mut f[14..]).fill_checksum();
    let (found, m) = parsed(&f);
    assert_eq!(
        (found, m.plain_v4, m.proto),
        (Found::OtherIp, true, ip_proto::ICMP)
    );
    assert_eq!(m.dst(), "10.0.0.2".parse::<IpAddr>().unwrap());
    // A TCP header that does not fit the datagram: the forwarder's still.
    let mut f = tcp_v4();
    f[46] = 0xf0;
    let (found, m) = parsed(&f);
    assert_eq!((found, m.plain_v4), (Found::Other, true));
    // ARP, and a runt.
    let mut f = tcp_v4();
    f[12..14].copy_from_slice(&[0x08, 0x06]);
    assert_eq!(parsed(&f).0, Found::Other);
    let mut m = Meta::EMPTY;
    assert_eq!(parse(&f[..20], mac, &mut m), Found::Other);
    // ICMPv6 (neighbour discovery) is the forwarder's.
    let mut f = udp_v6();
    f[20] = ip_proto::ICMPV6;
    assert_eq!(parsed(&f).0, Found::Other);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// The fixed IPv4 pass finds what the views find (the general path, which takes every
    /// frame the fixed pass declines), field for field; and never panics.
    #[test]
    fn fixed_pass_matches_the_views(udp in any::<bool>(),
                                    options in any::<bool>(),
                                    flips in prop::collection::vec((0usize..64, any::<u8>()), 0..3),
                                    fix_checksum in any::<bool>(),
                                    cut in 0usize..8) {
        let mut f = tcp_v4();
        if udp {
            f[23] = ip_proto::UDP;
        }
        if options {
            // An options word after the header: IHL 6, total length + 4.
            f.splice(34..34, [1u8, 1, 1, 1]);
            f[14] = 0x46;
            f[17] += 4;
        }
        for (at, x) in flips {
            if let Some(b) = f.get_mut(at) {
                *b ^= x;
            }
        }
        if fix_checksum && f.len() >= 34 && (f[14] & 0x0f) >= 5 {
            let hl = usize::from(f[14] & 0x0f) * 4;
            if f.len() >= 14 + hl {
                f[24] = 0;
                f[25] = 0;
                let c = !checksum::fold(
                    f[14..14 + hl].chunks(2).map(|w| u64::from(u16::from_be_bytes([w[0], w[1]]))).sum(),
                );
                f[24..26].copy_from_slice(&c.to_be_bytes());
            }
        }
        f.truncate(f.len() - cut);
        let mac = mac_word(&PORT_MAC);
        let mut fast = Meta::EMPTY;
        let found = parse(&f, mac, &mut fast);
        let mut views = Meta::EMPTY;
        let by_views = parse_general(&f, mac, &mut views);
        prop_assert_eq!(found, by_views);
        prop_assert_eq!(fast.found, views.found);
        if found != Found::Other {
            prop_assert_eq!((fast.v6, fast.proto, fast.src, fast.dst), (views.v6, views.proto, views.src, views.dst));
        }
        if found == Found::Transport {
            prop_assert_eq!((fast.l4, fast.ports, fast.flags, fast.seq_ack, fast.payload),
                            (views.l4, views.ports, views.flags, views.seq_ack, views.payload));
        }
        if fast.plain_v4 {
            prop_assert_eq!(fast.ttl, f[22]);
            prop_assert_eq!(usize::from(fast.total), usize::from(u16::from_be_bytes([f[16], f[17]])));
            prop_assert!(14 + usize::from(fast.total) <= f.len());
        }
    }
}
