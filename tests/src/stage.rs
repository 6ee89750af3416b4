//! The balancer stage alone, for tests that call `process_burst` directly: two ports
//! (outside 10.77.0.2/24 and fd77::2/64, inside 10.78.0.2/24 and fd78::2/64), the
//! virtual addresses 10.77.0.10 and fd77::10, and frames to feed it.

use sluice_dataplane::balancer::{Balancer, BalancerConfig};
use sluice_dataplane::pipeline::{Forwarder, ForwarderConfig, IfAddr, NeighbourCache, PortConf};
use sluice_dataplane::rcu::Publisher;
use sluice_dataplane::tables::snapshot::Snapshot;
use sluice_dataplane::wire::{ethernet, ip_proto, ipv4, ipv6, tcp, udp, EtherType, MacAddr};
use std::net::IpAddr;
use std::sync::Arc;

/// The outside port's MAC (frames from [`frame`] are addressed to it).
pub const OUT_MAC: MacAddr = MacAddr([0x02, 0x51, 0, 0, 0, 1]);
/// The inside port's MAC.
pub const IN_MAC: MacAddr = MacAddr([0x02, 0x51, 0, 0, 0, 2]);
/// Every neighbour's MAC, and the source of [`frame`]'s frames.
pub const PEER: MacAddr = MacAddr([0x02, 0xaa, 0, 0, 0, 1]);

/// A balancer on the two ports reading `publisher`'s tables, with `neighbours` (IP
/// addresses) resolved to [`PEER`].
pub fn balancer(
    publisher: &mut Publisher<Snapshot>,
    neighbours: &[&str],
    cfg: BalancerConfig,
) -> Balancer {
    let addr = |a: &str, l| IfAddr {
        addr: a.parse().expect("ip"),
        prefix_len: l,
    };
    let ports = vec![
        PortConf {
            name: "outside".into(),
            mac: OUT_MAC,
            addrs: vec![addr("10.77.0.2", 24), addr("fd77::2", 64)],
        },
        PortConf {
            name: "inside".into(),
            mac: IN_MAC,
            addrs: vec![addr("10.78.0.2", 24), addr("fd78::2", 64)],
        },
    ];
    let vips = vec![
        "10.77.0.10".parse().expect("ip"),
        "fd77::10".parse().expect("ip"),
    ];
    let conf = Arc::new(ForwarderConfig::with_virtual(ports, &[], vips).expect("config"));
    let neigh = Arc::new(NeighbourCache::new(256));
    for ip in neighbours {
        neigh.learn(ip.parse().expect("ip"), PEER, 0);
    }
    Balancer::new(
        Forwarder::new(conf, neigh),
        publisher.reader().expect("reader"),
        cfg,
    )
}

/// A TCP segment (`proto` TCP, with `flags`) or UDP datagram from `src:sport` to
/// `dst:dport` carrying `payload`, from [`PEER`] to the outside port, checksums valid.
/// Both addresses must be of one family.
pub fn frame(
    proto: u8,
    (src, sport): (&str, u16),
    (dst, dport): (&str, u16),
    flags: u16,
    payload: &[u8],
) -> Vec<u8> {
    let (src, dst): (IpAddr, IpAddr) = (src.parse().expect("ip"), dst.parse().expect("ip"));
    let l4 = if proto == ip_proto::TCP { 20 } else { 8 } + payload.len();
    let ip_len = if src.is_ipv6() { 40 } else { 20 };
    let mut f = vec![0u8; 14 + ip_len + l4];
    ethernet::Repr {
        dst_addr: OUT_MAC,
        src_addr: PEER,
        ethertype: if src.is_ipv6() {
            EtherType::Ipv6
        } else {
            EtherType::Ipv4
        },
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut f[..]));
    let seg = 14 + ip_len;
    f[seg + l4 - payload.len()..].copy_from_slice(payload);
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => ipv4::Repr {
            src_addr: s,
            dst_addr: d,
            protocol: proto,
            payload_len: l4,
            ttl: 64,
        }
        .emit(&mut ipv4::Packet::new_unchecked(&mut f[14..])),
        (IpAddr::V6(s), IpAddr::V6(d)) => ipv6::Repr {
            src_addr: s,
            dst_addr: d,
            next_header: proto,
            payload_len: l4,
            hop_limit: 64,
        }
        .emit(&mut ipv6::Packet::new_unchecked(&mut f[14..])),
        _ => panic!("frame: {src} and {dst} are of different families"),
    }
    if proto == ip_proto::TCP {
        tcp::Repr {
            src_port: sport,
            dst_port: dport,
            seq_number: 1,
            ack_number: 0,
            flags,
            window_len: 100,
            payload_len: payload.len(),
        }
        .emit(&mut tcp::Packet::new_unchecked(&mut f[seg..]), src, dst);
    } else {
        udp::Repr {
            src_port: sport,
            dst_port: dport,
            payload_len: payload.len(),
        }
        .emit(&mut udp::Packet::new_unchecked(&mut f[seg..]), src, dst);
    }
    f
}
