//! Pipeline tests: literal frames in, exact frames or drop reasons out.

use super::*;
use crate::pipeline::fib::{IfAddr, Route};
use crate::pipeline::neigh::NeighConfig;
use crate::pipeline::parse::{parse, Meta};
use crate::pipeline::stage::StageIo;
use crate::pipeline::PortConf;
use crate::port::Pool;
use crate::stats::{Counters, Event};
use crate::wire::{arp, icmpv4, icmpv6, tcp, udp};
use proptest::prelude::*;

mod neigh;

const US0: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x10]);
const US1: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x11]);
const PEER: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);
const GW1: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x21]);

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Port 0: 10.77.0.2/24 + fd77::2/64; port 1: 10.78.0.2/24 + fd78::2/64; default routes
/// via 10.78.0.1 and fd78::1.
fn forwarder() -> Forwarder {
    let ports = vec![
        PortConf {
            name: "p0".into(),
            mac: US0,
            addrs: vec![
                IfAddr {
                    addr: ip("10.77.0.2"),
                    prefix_len: 24,
                },
                IfAddr {
                    addr: ip("fd77::2"),
                    prefix_len: 64,
                },
            ],
        },
        PortConf {
            name: "p1".into(),
            mac: US1,
            addrs: vec![
                IfAddr {
                    addr: ip("10.78.0.2"),
                    prefix_len: 24,
                },
                IfAddr {
                    addr: ip("fd78::2"),
                    prefix_len: 64,
                },
            ],
        },
    ];
    let routes = [
        Route {
            to: ip("0.0.0.0"),
            prefix_len: 0,
            via: ip("10.78.0.1"),
        },
        Route {
            to: ip("::"),
            prefix_len: 0,
            via: ip("fd78::1"),
        },
    ];
    let conf = ForwarderConfig::new(ports, &routes).unwrap();
    Forwarder::new(Arc::new(conf), Arc::new(NeighbourCache::new(64)))
}

fn run(
    fw: &mut Forwarder,
    pool: &Pool,
    port: usize,
    frame: &[u8],
    now: u64,
) -> (Verdict, Vec<u8>, Counters) {
    let mut c = Counters::new(2);
    let mut p = pool.alloc_copy(frame).unwrap();
    let v = fw.process(port, &mut p, &mut Ctx::new(now, &mut c));
    (v, p.data().to_vec(), c)
}

/// The balancer's way into the forwarder: the frame parsed once (as the burst's first
/// pass does), then [`Forwarder::forward_parsed`].
fn forward_parsed(fw: &mut Forwarder, port: usize, p: &mut Pkt, ctx: &mut Ctx<'_>) -> Verdict {
    let mut meta = Meta::EMPTY;
    parse(
        p.data(),
        mac_word(&fw.config().ports[port].mac.0),
        &mut meta,
    );
    fw.forward_parsed(port, p, &meta, ctx)
}

/// A packet the balancer leaves to the forwarder: parsed once, then
/// [`Forwarder::process_parsed`].
fn process_parsed(fw: &mut Forwarder, port: usize, p: &mut Pkt, ctx: &mut Ctx<'_>) -> Verdict {
    let mut meta = Meta::EMPTY;
    parse(
        p.data(),
        mac_word(&fw.config().ports[port].mac.0),
        &mut meta,
    );
    fw.process_parsed(port, p, &meta, ctx)
}

// ARP request: who has 10.77.0.2? tell 10.77.0.1 (02:00:00:00:00:01). Padded to 60 bytes.
fn arp_request() -> Vec<u8> {
    let mut f = vec![
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x06, // eth
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, // arp request
        0x02, 0, 0, 0, 0, 0x01, 10, 77, 0, 1, // sender
        0, 0, 0, 0, 0, 0, 10, 77, 0, 2, // target
    ];
    f.resize(60, 0);
    f
}

#[test]
fn answers_arp_and_learns_the_sender() {
    let mut fw = forwarder();
    let pool = Pool::new(8);
    let (v, out, _) = run(&mut fw, &pool, 0, &arp_request(), 0);
    assert_eq!(v, Verdict::Tx(0));
    let expected = [
        0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x10, 0x08, 0x06, // eth back to the asker
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x02, // arp reply
        0x02, 0, 0, 0, 0, 0x10, 10, 77, 0, 2, // we are 10.77.0.2 at our MAC
        0x02, 0, 0, 0, 0, 0x01, 10, 77, 0, 1, // to the asker
    ];
    assert_eq!(out, expected);
    assert_eq!(
        fw.neighbours().lookup(ip("10.77.0.1")),
        Neighbour::Reachable(PEER)
    );
    // The same request on the other port is not for that port's addresses.
    let (v, _, _) = run(&mut fw, &pool, 1, &arp_request(), 0);
    assert_eq!(v, Verdict::Drop(DropReason::ArpNotForUs));
    assert_eq!(pool.in_use(), 0);
}

fn eth(dst: MacAddr, src: MacAddr, t: EtherType) -> Vec<u8> {
    let mut f = vec![0u8; 14];
    ethernet::Repr {
        dst_addr: dst,
        src_addr: src,
        ethertype: t,
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut f[..]));
    f
}

fn ipv4_frame(dst_mac: MacAddr, src: &str, dst: &str, ttl: u8, proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut f = eth(dst_mac, PEER, EtherType::Ipv4);
    let mut ipb = vec![0u8; 20 + l4.len()];
    let repr = ipv4::Repr {
        src_addr: src.parse().unwrap(),
        dst_addr: dst.parse().unwrap(),
        protocol: proto,
        payload_len: l4.len(),
        ttl,
    };
    let mut p = ipv4::Packet::new_unchecked(&mut ipb[..]);
    repr.emit(&mut p);
    p.payload_mut().copy_from_slice(l4);
    f.extend_from_slice(&ipb);
    f
}

fn echo_v4(ident: u16, seq: u16, data: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 8 + data.len()];
    b[8..].copy_from_slice(data);
    icmpv4::Repr::EchoRequest {
        ident,
        seq_no: seq,
        data_len: data.len(),
    }
    .emit(&mut icmpv4::Packet::new_unchecked(&mut b[..]));
    b
}

#[test]
fn answers_ping_v4() {
    let mut fw = forwarder();
    let pool = Pool::new(8);
    let req = ipv4_frame(
        US0,
        "10.77.0.1",
        "10.77.0.2",
        64,
        ip_proto::ICMP,
        &echo_v4(7, 1, b"ping"),
    );
    let (v, out, _) = run(&mut fw, &pool, 0, &req, 0);
    assert_eq!(v, Verdict::Tx(0));
    let f = ethernet::Frame::new_checked(&out[..]).unwrap();
    assert_eq!((f.dst_addr(), f.src_addr()), (PEER, US0));
    let p = ipv4::Packet::new_checked(f.payload()).unwrap();
    assert!(p.verify_checksum());
    assert_eq!(p.src_addr(), "10.77.0.2".parse::<Ipv4Addr>().unwrap());
    assert_eq!(p.dst_addr(), "10.77.0.1".parse::<Ipv4Addr>().unwrap());
    let r = icmpv4::Repr::parse(&icmpv4::Packet::new_checked(p.payload()).unwrap()).unwrap();
    assert_eq!(
        r,
        icmpv4::Repr::EchoReply {
            ident: 7,
            seq_no: 1,
            data_len: 4
        }
    );
    assert_eq!(&p.payload()[8..], b"ping");
    // A corrupted echo is dropped, not answered.
    let mut bad = req.clone();
    let n = bad.len();
    bad[n - 1] ^= 0xff;
    assert_eq!(
        run(&mut fw, &pool, 0, &bad, 0).0,
        Verdict::Drop(DropReason::IcmpMalformed)
    );
    // TCP to our address is not something this stage answers.
    let seg = tcp_segment();
    let t = ipv4_frame(US0, "10.77.0.1", "10.77.0.2", 64, ip_proto::TCP, &seg);
    assert_eq!(
        run(&mut fw, &pool, 0, &t, 0).0,
        Verdict::Drop(DropReason::LocalUnhandled)
    );
}

fn tcp_segment() -> Vec<u8> {
    let mut b = vec![0u8; 20];
    tcp::Repr {
        src_port: 40000,
        dst_port: 80,
        seq_number: 1,
        ack_number: 0,
        flags: tcp::flags::SYN,
        window_len: 1000,
        payload_len: 0,
    }
    .emit(
        &mut tcp::Packet::new_unchecked(&mut b[..]),
        ip("10.77.0.1"),
        ip("192.168.9.9"),
    );
    b
}

#[test]
fn forwards_v4_resolving_the_next_hop() {
    let mut fw = forwarder();
    let pool = Pool::new(8);
    let pkt = ipv4_frame(
        US0,
        "10.77.0.1",
        "192.168.9.9",
        64,
        ip_proto::TCP,
        &tcp_segment(),
    );
    // Unknown gateway: the packet becomes an ARP request on port 1.
    let (v, out, c) = run(&mut fw, &pool, 0, &pkt, 0);
    assert_eq!(v, Verdict::Tx(1));
    assert_eq!(c.drops_of(DropReason::NeighbourUnresolved), 1);
    let expected_arp = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0x11, 0x08, 0x06, //
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, //
        0x02, 0, 0, 0, 0, 0x11, 10, 78, 0, 2, //
        0, 0, 0, 0, 0, 0, 10, 78, 0, 1,
    ];
    assert_eq!(out, expected_arp);
    // While the request is pending, more packets are dropped without another request.
    let (v, _, _) = run(&mut fw, &pool, 0, &pkt, 10);
    assert_eq!(v, Verdict::Drop(DropReason::NeighbourUnresolved));
    // The gateway answers.
    let mut reply = eth(US1, GW1, EtherType::Arp);
    let mut a = [0u8; 28];
    arp::Repr {
        operation: arp::Operation::Reply,
        source_hardware_addr: GW1,
        source_protocol_addr: "10.78.0.1".parse().unwrap(),
        target_hardware_addr: US1,
        target_protocol_addr: "10.78.0.2".parse().unwrap(),
    }
    .emit(&mut arp::Packet::new_unchecked(&mut a[..]));
    reply.extend_from_slice(&a);
    assert_eq!(
        run(&mut fw, &pool, 1, &reply, 20).0,
        Verdict::Drop(DropReason::ArpReplyConsumed)
    );
    // Now it forwards: MACs rewritten, TTL 63, checksum still right, L4 untouched.
    let (v, out, _) = run(&mut fw, &pool, 0, &pkt, 30);
    assert_eq!(v, Verdict::Tx(1));
    assert_eq!(
        &out[..12],
        &[0x02, 0, 0, 0, 0, 0x21, 0x02, 0, 0, 0, 0, 0x11]
    );
    let p = ipv4::Packet::new_checked(&out[14..]).unwrap();
    assert_eq!(p.ttl(), 63);
    assert!(p.verify_checksum());
    assert_eq!(&out[34..], &pkt[34..]);
    assert_eq!(pool.in_use(), 0);
}

#[test]
fn ttl_exhausted_sends_time_exceeded_v4() {
    let mut fw = forwarder();
    let pool = Pool::new(8);
    let mut u = vec![0u8; 8 + 3];
    udp::Repr {
        src_port: 5000,
        dst_port: 33434,
        payload_len: 3,
    }
    .emit(
        &mut udp::Packet::new_unchecked(&mut u[..]),
        ip("10.77.0.1"),
        ip("192.168.9.9"),
    );
    let pkt = ipv4_frame(US0, "10.77.0.1", "192.168.9.9", 1, ip_proto::UDP, &u);
    let (v, out, c) = run(&mut fw, &pool, 0, &pkt, 0);
    assert_eq!(v, Verdict::Tx(0));
    assert_eq!(c.drops_of(DropReason::TtlExceeded), 1);
    let f = ethernet::Frame::new_checked(&out[..]).unwrap();
    assert_eq!(f.dst_addr(), PEER);
    let p = ipv4::Packet::new_checked(f.payload()).unwrap();
    assert_eq!(
        ipv4::Repr::parse(&p).unwrap().src_addr,
        "10.77.0.2".parse::<Ipv4Addr>().unwrap()
    );
    assert_eq!(p.dst_addr(), "10.77.0.1".parse::<Ipv4Addr>().unwrap());
    let icmp = icmpv4::Packet::new_checked(p.payload()).unwrap();
    assert_eq!(
        icmpv4::Repr::parse(&icmp).unwrap(),
        icmpv4::Repr::TimeExceeded {
            code: 0,
            data_len: 28
        }
    );
    // The quote is the original IP header + 8 bytes.
    assert_eq!(icmp.data(), &pkt[14..14 + 28]);
}

fn ipv6_frame(
    dst_mac: MacAddr,
    src: &str,
    dst: &str,
    hop: u8,
    icmp: impl Fn(&mut [u8], Ipv6Addr, Ipv6Addr),
    len: usize,
) -> Vec<u8> {
    let mut f = eth(dst_mac, PEER, EtherType::Ipv6);
    let (s, d): (Ipv6Addr, Ipv6Addr) = (src.parse().unwrap(), dst.parse().unwrap());
    let mut b = vec![0u8; 40 + len];
    let mut p = ipv6::Packet::new_unchecked(&mut b[..]);
    ipv6::Repr {
        src_addr: s,
        dst_addr: d,
        next_header: ip_proto::ICMPV6,
        payload_len: len,
        hop_limit: hop,
    }
    .emit(&mut p);
    icmp(p.payload_mut(), s, d);
    f.extend_from_slice(&b);
    f
}

#[test]
fn answers_neighbour_solicitation_and_ping_v6() {
    let mut fw = forwarder();
    let pool = Pool::new(8);
    let ns = icmpv6::Repr::NeighborSolicit {
        target: "fd77::2".parse().unwrap(),
        source_ll: Some(PEER),
    };
    let frame = ipv6_frame(
        MacAddr([0x33, 0x33, 0xff, 0, 0, 2]),
        "fd77::1",
        "ff02::1:ff00:2",
        255,
        |b, s, d| ns.emit(&mut icmpv6::Packet::new_unchecked(b), s, d),
        ns.buffer_len(),
    );
    let (v, out, _) = run(&mut fw, &pool, 0, &frame, 0);
    assert_eq!(v, Verdict::Tx(0));
    let f = ethernet::Frame::new_checked(&out[..]).unwrap();
    assert_eq!((f.dst_addr(), f.src_addr()), (PEER, US0));
    let p = ipv6::Packet::new_checked(f.payload()).unwrap();
    assert_eq!(p.hop_limit(), 255);
    let na = icmpv6::Repr::parse(
        &icmpv6::Packet::new_checked(p.payload()).unwrap(),
        p.src_addr(),
        p.dst_addr(),
    )
    .unwrap();
    assert_eq!(
        na,
        icmpv6::Repr::NeighborAdvert {
            flags: icmpv6::na_flags::SOLICITED | icmpv6::na_flags::OVERRIDE,
            target: "fd77::2".parse().unwrap(),
            target_ll: Some(US0),
        }
    );
    assert_eq!(
        fw.neighbours().lookup(ip("fd77::1")),
        Neighbour::Reachable(PEER)
    );
    // A solicitation with a hop limit below 255 came through a router: ignored.
    let off = ipv6_frame(
        MacAddr([0x33, 0x33, 0xff, 0, 0, 2]),
        "fd77::1",
        "ff02::1:ff00:2",
        254,
        |b, s, d| ns.emit(&mut icmpv6::Packet::new_unchecked(b), s, d),
        ns.buffer_len(),
    );
    assert_eq!(
        run(&mut fw, &pool, 0, &off, 0).0,
        Verdict::Drop(DropReason::NdNotForUs)
    );

    let echo = icmpv6::Repr::EchoRequest {
        ident: 3,
        seq_no: 4,
        data_len: 0,
    };
    let frame = ipv6_frame(
        US0,
        "fd77::1",
        "fd77::2",
        64,
        |b, s, d| echo.emit(&mut icmpv6::Packet::new_unchecked(b), s, d),
        echo.buffer_len(),
    );
    let (v, out, _) = run(&mut fw, &pool, 0, &frame, 0);
    assert_eq!(v, Verdict::Tx(0));
    let p = ipv6::Packet::new_checked(&out[14..]).unwrap();
    let r = icmpv6::Repr::parse(
        &icmpv6::Packet::new_checked(p.payload()).unwrap(),
        p.src_addr(),
        p.dst_addr(),
    )
    .unwrap();
    assert_eq!(
        r,
        icmpv6::Repr::EchoReply {
            ident: 3,
            seq_no: 4,
            data_len: 0
        }
    );
    assert_eq!(p.dst_addr(), "fd77::1".parse::<Ipv6Addr>().unwrap());
}

#[test]
fn forwards_v6_after_neighbour_discovery() {
    let mut fw = forwarder();
    let pool = Pool::new(8);
    let echo = icmpv6::Repr::EchoRequest {
        ident: 1,
        seq_no: 1,
        data_len: 0,
    };
    let pkt = ipv6_frame(
        US0,
        "fd77::1",
        "2001:db8::1",
        64,
        |b, s, d| echo.emit(&mut icmpv6::Packet::new_unchecked(b), s, d),
        echo.buffer_len(),
    );
    let (v, out, _) = run(&mut fw, &pool, 0, &pkt, 0);
    assert_eq!(v, Verdict::Tx(1));
    let f = ethernet::Frame::new_checked(&out[..]).unwrap();
    assert_eq!(f.dst_addr(), MacAddr([0x33, 0x33, 0xff, 0, 0, 1]));
    let p = ipv6::Packet::new_checked(f.payload()).unwrap();
    let ns = icmpv6::Repr::parse(
        &icmpv6::Packet::new_checked(p.payload()).unwrap(),
        p.src_addr(),
        p.dst_addr(),
    )
    .unwrap();
    assert_eq!(
        ns,
        icmpv6::Repr::NeighborSolicit {
            target: "fd78::1".parse().unwrap(),
            source_ll: Some(US1)
        }
    );
    // The router answers with an advertisement.
    let na = icmpv6::Repr::NeighborAdvert {
        flags: 0x60,
        target: "fd78::1".parse().unwrap(),
        target_ll: Some(GW1),
    };
    let adv = ipv6_frame(
        US1,
        "fd78::1",
        "fd78::2",
        255,
        |b, s, d| na.emit(&mut icmpv6::Packet::new_unchecked(b), s, d),
        na.buffer_len(),
    );
    assert_eq!(
        run(&mut fw, &pool, 1, &adv, 1).0,
        Verdict::Drop(DropReason::NdAdvertConsumed)
    );
    let (v, out, _) = run(&mut fw, &pool, 0, &pkt, 2);
    assert_eq!(v, Verdict::Tx(1));
    assert_eq!(&out[..6], &GW1.0);
    assert_eq!(
        ipv6::Packet::new_checked(&out[14..]).unwrap().hop_limit(),
        63
    );
    // Hop limit 1: time exceeded back to the sender.
    let dying = ipv6_frame(
        US0,
        "fd77::1",
        "2001:db8::1",
        1,
        |b, s, d| echo.emit(&mut icmpv6::Packet::new_unchecked(b), s, d),
        echo.buffer_len(),
    );
    let (v, out, _) = run(&mut fw, &pool, 0, &dying, 3);
    assert_eq!(v, Verdict::Tx(0));
    let p = ipv6::Packet::new_checked(&out[14..]).unwrap();
    let r = icmpv6::Repr::parse(
        &icmpv6::Packet::new_checked(p.payload()).unwrap(),
        p.src_addr(),
        p.dst_addr(),
    )
    .unwrap();
    assert_eq!(
        r,
        icmpv6::Repr::TimeExceeded {
            code: 0,
            data_len: dying.len() - 14
        }
    );
}

#[test]
fn drops_with_reasons() {
    let mut fw = forwarder();
    let pool = Pool::new(8);
    let other = MacAddr([0x02, 9, 9, 9, 9, 9]);
    let cases: Vec<(Vec<u8>, DropReason)> = vec![
        (vec![1, 2, 3], DropReason::EthTruncated),
        (
            ipv4_frame(other, "10.77.0.1", "10.77.0.2", 64, 1, &echo_v4(1, 1, b"")),
            DropReason::NotForUs,
        ),
        (eth(US0, PEER, EtherType::Vlan), DropReason::VlanUnsupported),
        (
            eth(US0, PEER, EtherType::Unknown(0x88cc)),
            DropReason::UnknownEtherType,
        ),
        (eth(US0, PEER, EtherType::Arp), DropReason::ArpMalformed),
        (eth(US0, PEER, EtherType::Ipv4), DropReason::Ipv4Malformed),
        (eth(US0, PEER, EtherType::Ipv6), DropReason::Ipv6Malformed),
        (
            ipv4_frame(US0, "10.77.0.1", "10.77.0.255", 64, 17, &[0; 8]),
            DropReason::IpMulticast,
        ),
        (
            ipv4_frame(US0, "10.77.0.1", "224.0.0.1", 64, 17, &[0; 8]),
            DropReason::IpMulticast,
        ),
    ];
    for (frame, reason) in cases {
        assert_eq!(
            run(&mut fw, &pool, 0, &frame, 0).0,
            Verdict::Drop(reason),
            "{reason}"
        );
    }
    let mut bad = ipv4_frame(US0, "10.77.0.1", "10.77.0.2", 64, 1, &echo_v4(1, 1, b""));
    bad[24] ^= 1;
    assert_eq!(
        run(&mut fw, &pool, 0, &bad, 0).0,
        Verdict::Drop(DropReason::Ipv4Checksum)
    );
    assert_eq!(
        run(&mut fw, &pool, 5, &arp_request(), 0).0,
        Verdict::Drop(DropReason::BadPort)
    );
    // No route without a default.
    let conf = ForwarderConfig::new(fw.conf.ports.clone(), &[]).unwrap();
    let mut bare = Forwarder::new(Arc::new(conf), Arc::new(NeighbourCache::new(8)));
    let pkt = ipv4_frame(
        US0,
        "10.77.0.1",
        "192.168.9.9",
        64,
        ip_proto::TCP,
        &tcp_segment(),
    );
    assert_eq!(
        run(&mut bare, &pool, 0, &pkt, 0).0,
        Verdict::Drop(DropReason::NoRoute)
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// No input panics: random bytes after a plausible Ethernet header of each type.
    #[test]
    fn never_panics(ethertype in prop::sample::select(vec![0x0800u16, 0x0806, 0x86dd, 0x8100, 0x1234]),
                    dst_ours in any::<bool>(),
                    body in prop::collection::vec(any::<u8>(), 0..200),
                    port in 0usize..3) {
        let mut fw = forwarder();
        let pool = Pool::new(2);
        let mut f = eth(if dst_ours { US0 } else { MacAddr::BROADCAST }, PEER, EtherType::from(ethertype));
        f.extend_from_slice(&body);
        // Also make version nibbles and lengths plausible half of the time.
        if body.len() > 40 && body[0] & 1 == 0 {
            let l3 = 14;
            if ethertype == 0x0800 { f[l3] = 0x45; f[l3 + 2] = 0; f[l3 + 3] = (body.len()).min(255) as u8; }
            if ethertype == 0x86dd { f[l3] = 0x60; f[l3 + 4] = 0; f[l3 + 5] = (body.len() - 40) as u8; }
        }
        let mut c = Counters::new(3);
        let mut p = pool.alloc_copy(&f).unwrap();
        let _ = fw.process(port, &mut p, &mut Ctx::new(0, &mut c));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// The IPv4 fast path decides exactly as the general path: same verdict, same bytes;
    /// so do the balancer's ways in, from the packet's parsed [`Meta`].
    #[test]
    fn fast_path_matches_general_path(dst in any::<[u8; 4]>(),
                                      ttl in 0u8..4,
                                      ours in any::<bool>(),
                                      pad in 0usize..8,
                                      corrupt in prop::option::of(14usize..34),
                                      ihl6 in any::<bool>()) {
        let mut fast = forwarder();
        fast.neighbours().learn(ip("10.78.0.1"), GW1, 0);
        fast.neighbours().learn(ip("10.77.0.1"), PEER, 0);
        let mut general = fast.clone();
        let pool = Pool::new(4);
        let d = Ipv4Addr::from(dst).to_string();
        let mut f = ipv4_frame(if ours { US0 } else { MacAddr([2, 9, 9, 9, 9, 9]) }, "10.77.0.1", &d, ttl, ip_proto::UDP, &[0u8; 12]);
        if ihl6 {
            // An options word after the header: IHL 6, fixed checksum.
            f.splice(34..34, [1u8, 1, 1, 1]);
            f[14] = 0x46;
            let tl = u16::from_be_bytes([f[16], f[17]]) + 4;
            f[16..18].copy_from_slice(&tl.to_be_bytes());
            ipv4::Packet::new_unchecked(&mut f[14..]).fill_checksum();
        }
        f.extend(std::iter::repeat_n(0u8, pad));
        if let Some(i) = corrupt {
            f[i] ^= 0x40;
        }
        let mut c = Counters::new(2);
        let mut p1 = pool.alloc_copy(&f).unwrap();
        let v1 = fast.process(0, &mut p1, &mut Ctx::new(0, &mut c));
        let mut p2 = pool.alloc_copy(&f).unwrap();
        let v2 = general.slow(0, &mut p2, &mut Ctx::new(0, &mut c));
        prop_assert_eq!(v1, v2);
        prop_assert_eq!(p1.data(), p2.data());
        for (way, go) in [("process_parsed", process_parsed as fn(&mut Forwarder, usize, &mut Pkt, &mut Ctx<'_>) -> Verdict), ("forward_parsed", forward_parsed)] {
            let mut parsed = fast.clone();
            let mut p3 = pool.alloc_copy(&f).unwrap();
            let v3 = go(&mut parsed, 0, &mut p3, &mut Ctx::new(0, &mut c));
            prop_assert_eq!(v3, v2, "{}", way);
            prop_assert_eq!(p3.data(), p2.data(), "{}", way);
        }
    }
}

/// `forward_parsed` (the balancer's entry point for rewritten packets) memoises next
/// hops; a neighbour whose MAC changes, or whose entry goes stale, is looked up again,
/// and whatever it declines gets the general path's answer.
#[test]
fn checked_v4_memo_follows_neighbour_changes() {
    let mut fw = forwarder();
    let pool = Pool::new(8);
    let gw = ip("10.78.0.1");
    let other = MacAddr([0x02, 0, 0, 0, 0, 0x22]);
    let send = |fw: &mut Forwarder, frame: &[u8], now: u64| {
        let mut c = Counters::new(2);
        let mut p = pool.alloc_copy(frame).unwrap();
        let v = forward_parsed(fw, 0, &mut p, &mut Ctx::new(now, &mut c));
        (v, p.data().to_vec(), c)
    };
    let pkt = ipv4_frame(
        US0,
        "10.77.0.1",
        "192.168.9.9",
        64,
        ip_proto::TCP,
        &tcp_segment(),
    );
    fw.neighbours().learn(gw, GW1, 0);
    // The same bytes as the general path's, through the memo from the second packet on.
    for now in [10, 20] {
        let (v, out, _) = send(&mut fw, &pkt, now);
        assert_eq!((v, out.clone()), {
            let (v2, out2, _) = run(&mut fw.clone(), &pool, 0, &pkt, now);
            (v2, out2)
        });
        assert_eq!(v, Verdict::Tx(1));
        assert_eq!(&out[..6], &GW1.0);
        let p = ipv4::Packet::new_checked(&out[14..]).unwrap();
        assert_eq!(p.ttl(), 63);
        assert!(p.verify_checksum());
    }
    // The gateway moves to another MAC: the next packet goes there, not to the memo's.
    fw.neighbours().learn(gw, other, 5000);
    let (v, out, _) = send(&mut fw, &pkt, 5001);
    assert_eq!(v, Verdict::Tx(1));
    assert_eq!(&out[..6], &other.0);
    // Past the reachable time the memo no longer answers; the general path uses the stale
    // entry (and probes it when it has buffers to send a probe with).
    let later = 5000 + NeighConfig::default().reachable_ms + 1;
    let (v, out, _) = send(&mut fw, &pkt, later);
    assert_eq!(v, Verdict::Tx(1));
    assert_eq!(&out[..6], &other.0);
    // What the entry point declines gets the general path's verdict: TTL 1 becomes an
    // ICMP time exceeded back out of the port it came in on.
    let dying = ipv4_frame(
        US0,
        "10.77.0.1",
        "192.168.9.9",
        1,
        ip_proto::TCP,
        &tcp_segment(),
    );
    let (v, out, c) = send(&mut fw, &dying, later);
    assert_eq!(v, Verdict::Tx(0));
    assert_eq!(c.drops_of(DropReason::TtlExceeded), 1);
    assert_eq!(out[14 + 9], ip_proto::ICMP);
    assert_eq!(pool.in_use(), 0);
}

/// The memo is keyed by destination (route and MAC together): two destinations sharing a
/// memo slot, one on the link of port 0 and one routed through port 1's gateway, each
/// keep their own port and MAC however they alternate, as the general path decides.
#[test]
fn checked_v4_memo_slot_shared_by_two_routes() {
    let mut fw = forwarder();
    let pool = Pool::new(8);
    let on_link = MacAddr([0x02, 0, 0, 0, 0, 0x09]);
    fw.neighbours().learn(ip("10.78.0.1"), GW1, 0);
    fw.neighbours().learn(ip("10.77.0.9"), on_link, 0);
    // 10.77.0.9 and 192.168.8.9 have the same low ten bits (0x009).
    let near = ipv4_frame(
        US0,
        "10.77.0.1",
        "10.77.0.9",
        64,
        ip_proto::TCP,
        &tcp_segment(),
    );
    let far = ipv4_frame(
        US0,
        "10.77.0.1",
        "192.168.8.9",
        64,
        ip_proto::TCP,
        &tcp_segment(),
    );
    for (i, (frame, port, mac)) in [(&near, 0, on_link), (&far, 1, GW1)]
        .into_iter()
        .cycle()
        .take(6)
        .enumerate()
    {
        let now = 10 + i as u64;
        let mut c = Counters::new(2);
        let mut p = pool.alloc_copy(frame).unwrap();
        let v = forward_parsed(&mut fw, 0, &mut p, &mut Ctx::new(now, &mut c));
        assert_eq!(v, Verdict::Tx(port), "packet {i}");
        assert_eq!(&p.data()[..6], &mac.0, "packet {i}");
        let (v2, out2, _) = run(&mut fw.clone(), &pool, 0, frame, now);
        assert_eq!((v, p.data().to_vec()), (v2, out2), "packet {i}");
    }
    assert_eq!(pool.in_use(), 0);
}
