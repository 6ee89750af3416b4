//! Fixtures several test files build alike: the dual-stack addressing of the simulated
//! appliance (its `Appliance` manifest, its two links, host addresses) and the hand-made
//! frames of the port replay tests (an ARP request, ICMP echo requests).
//!
//! Addresses: the `outside` link is 10.77.0.0/24 and fd77::/64 (sluice .2 / ::2, the
//! client host .1 / ::1, virtual addresses .10 / ::10), the `inside` link 10.78.0.0/24 and
//! fd78::/64 (sluice .2 / ::2, backends from .11 / ::11).

use crate::sim::{Faults, LinkSpec, Sim};
use sluice_dataplane::pipeline::IfAddr;
use sluice_dataplane::wire::{arp, ethernet, icmpv4, ip_proto, ipv4, EtherType, MacAddr};
use smoltcp::wire::IpCidr;
use std::net::{IpAddr, Ipv4Addr};

/// The simulated appliance's manifests: its `Appliance` (ports `outside` and `inside`
/// with the addresses above, both virtual addresses) and the Namespace `sim` its other
/// objects live in.
pub const SIM_APPLIANCE: &str = r#"
apiVersion: sluice.dev/v1alpha1
kind: Appliance
metadata: {name: sim}
spec:
  cores: [0]
  ports:
  - {name: outside, tap: {name: simout}, addresses: [10.77.0.2/24, "fd77::2/64"]}
  - {name: inside, tap: {name: simin}, addresses: [10.78.0.2/24, "fd78::2/64"]}
  virtualAddresses: [10.77.0.10, "fd77::10"]
---
apiVersion: v1
kind: Namespace
metadata: {name: sim}
"#;

/// An address from text.
pub fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

/// A simulated host's address `s` on a `len`-bit prefix.
pub fn cidr(s: &str, len: u8) -> IpCidr {
    IpCidr::new(Sim::addr(ip(s)), len)
}

/// sluice's two links in [`SIM_APPLIANCE`]'s addressing, `outside` (towards host 0, the
/// client) and `inside` (towards host 1, the backends), each with its faults in both
/// directions.
pub fn links(outside: Faults, inside: Faults) -> Vec<LinkSpec> {
    let addrs = |a: &str, b: &str| {
        vec![
            IfAddr {
                addr: ip(a),
                prefix_len: 24,
            },
            IfAddr {
                addr: ip(b),
                prefix_len: 64,
            },
        ]
    };
    vec![
        LinkSpec {
            name: "outside".into(),
            addrs: addrs("10.77.0.2", "fd77::2"),
            host_faults: outside,
            sluice_faults: outside,
        },
        LinkSpec {
            name: "inside".into(),
            addrs: addrs("10.78.0.2", "fd78::2"),
            host_faults: inside,
            sluice_faults: inside,
        },
    ]
}

/// A broadcast ARP request from `peer` (`src`): who has `target`?
pub fn arp_request(peer: MacAddr, src: Ipv4Addr, target: Ipv4Addr) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 28];
    ethernet::Repr {
        dst_addr: MacAddr::BROADCAST,
        src_addr: peer,
        ethertype: EtherType::Arp,
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut f[..]));
    arp::Repr {
        operation: arp::Operation::Request,
        source_hardware_addr: peer,
        source_protocol_addr: src,
        target_hardware_addr: MacAddr::ZERO,
        target_protocol_addr: target,
    }
    .emit(&mut arp::Packet::new_unchecked(&mut f[14..]));
    f
}

/// An ICMP echo request `src -> dst` (`ident`, `seq`, carrying `data`) from `peer` to the
/// broadcast MAC (a test that does not know the device's MAC in advance).
pub fn echo_request(
    peer: MacAddr,
    (src, dst): (Ipv4Addr, Ipv4Addr),
    ident: u16,
    seq: u16,
    data: &[u8],
) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 20 + 8 + data.len()];
    ethernet::Repr {
        dst_addr: MacAddr::BROADCAST,
        src_addr: peer,
        ethertype: EtherType::Ipv4,
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut f[..]));
    let mut ip = ipv4::Packet::new_unchecked(&mut f[14..]);
    ipv4::Repr {
        src_addr: src,
        dst_addr: dst,
        protocol: ip_proto::ICMP,
        payload_len: 8 + data.len(),
        ttl: 64,
    }
    .emit(&mut ip);
    ip.payload_mut()[8..].copy_from_slice(data);
    icmpv4::Repr::EchoRequest {
        ident,
        seq_no: seq,
        data_len: data.len(),
    }
    .emit(&mut icmpv4::Packet::new_unchecked(ip.payload_mut()));
    f
}
