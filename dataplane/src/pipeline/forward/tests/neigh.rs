//! Neighbour resolution with parked packets: parking and release (ARP, NDP), retries and
//! failure on the virtual clock, overflow, stale probes, and no leak whatever happens.

use super::*;
use crate::pipeline::neigh::{Claim, NeighConfig, Probe, Solicit};
use crate::port::{mem, Burst};
use crate::worker::{Idle, Worker, WorkerConfig};

/// A forwarder over the usual two ports, with a [`StageIo`] drawing from its own pool.
struct H {
    fw: Forwarder,
    pool: Pool,
    io: StageIo,
    c: Counters,
}

impl H {
    fn new(cfg: NeighConfig) -> H {
        H::with_pool(cfg, Pool::new(256))
    }

    fn with_pool(cfg: NeighConfig, pool: Pool) -> H {
        let base = forwarder();
        let fw = Forwarder::new(
            base.conf.clone(),
            Arc::new(NeighbourCache::with_config(64, cfg)),
        );
        H {
            fw,
            io: StageIo::new(Some(pool.clone().into())),
            pool,
            c: Counters::new(2),
        }
    }

    /// One packet through `process`: its verdict and the bytes left in its slot.
    fn rx(&mut self, port: usize, frame: &[u8], now: u64) -> (Verdict, Vec<u8>) {
        let mut p = self.pool.alloc_copy(frame).unwrap();
        let v = self.fw.process(
            port,
            &mut p,
            &mut Ctx::with_io(now, &mut self.c, &mut self.io),
        );
        (v, p.data().to_vec())
    }

    fn maintain(&mut self, now: u64) {
        self.fw
            .maintain(&mut Ctx::with_io(now, &mut self.c, &mut self.io));
    }

    /// What the stage sent through StageIo (the buffers go back to the pool).
    fn out(&mut self) -> Vec<(u32, Vec<u8>)> {
        self.io
            .drain()
            .map(|(port, p)| (port, p.data().to_vec()))
            .collect()
    }
}

const BCAST_ARP_FOR_GW: [u8; 42] = [
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0x11, 0x08, 0x06, //
    0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, //
    0x02, 0, 0, 0, 0, 0x11, 10, 78, 0, 2, //
    0, 0, 0, 0, 0, 0, 10, 78, 0, 1,
];

/// UDP from 10.77.0.1 to `dst` carrying `id` (to tell packets apart).
fn udp_v4(dst: &str, id: u8) -> Vec<u8> {
    let mut u = vec![0u8; 8 + 4];
    u[8..].copy_from_slice(&[id; 4]);
    udp::Repr {
        src_port: 5000,
        dst_port: 7,
        payload_len: 4,
    }
    .emit(
        &mut udp::Packet::new_unchecked(&mut u[..]),
        ip("10.77.0.1"),
        ip(dst),
    );
    ipv4_frame(US0, "10.77.0.1", dst, 64, ip_proto::UDP, &u)
}

fn arp_reply_from_gw() -> Vec<u8> {
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
    reply
}

fn echo6(dst: &str, seq: u16) -> Vec<u8> {
    let echo = icmpv6::Repr::EchoRequest {
        ident: 9,
        seq_no: seq,
        data_len: 0,
    };
    ipv6_frame(
        US0,
        "fd77::1",
        dst,
        64,
        |b, s, d| echo.emit(&mut icmpv6::Packet::new_unchecked(b), s, d),
        echo.buffer_len(),
    )
}

fn na_from_gw6() -> Vec<u8> {
    let na = icmpv6::Repr::NeighborAdvert {
        flags: 0x60,
        target: "fd78::1".parse().unwrap(),
        target_ll: Some(GW1),
    };
    ipv6_frame(
        US1,
        "fd78::1",
        "fd78::2",
        255,
        |b, s, d| na.emit(&mut icmpv6::Packet::new_unchecked(b), s, d),
        na.buffer_len(),
    )
}

/// The forwarded form of a frame: MACs towards the gateway, TTL one less.
fn forwarded_v4(frame: &[u8]) -> Vec<u8> {
    let mut f = frame.to_vec();
    f[..6].copy_from_slice(&GW1.0);
    f[6..12].copy_from_slice(&US1.0);
    ipv4::Packet::new_unchecked(&mut f[14..]).decrement_ttl();
    f
}

#[test]
fn parks_v4_and_releases_in_order_when_the_arp_reply_comes() {
    let mut h = H::new(NeighConfig::default());
    let pkts: Vec<Vec<u8>> = (1..=3).map(|i| udp_v4("192.168.9.9", i)).collect();
    // The first packet is parked; its slot carries the broadcast ARP request.
    let (v, out) = h.rx(0, &pkts[0], 0);
    assert_eq!(v, Verdict::Tx(1));
    assert_eq!(out, BCAST_ARP_FOR_GW);
    // The next ones wait behind it without another request.
    for p in &pkts[1..] {
        assert_eq!(h.rx(0, p, 5).0, Verdict::Kept);
    }
    h.maintain(10);
    assert!(h.out().is_empty());
    assert_eq!(h.fw.parked(), 3);
    assert_eq!(h.pool.in_use(), 3);
    assert_eq!(
        h.rx(1, &arp_reply_from_gw(), 20).0,
        Verdict::Drop(DropReason::ArpReplyConsumed)
    );
    h.maintain(20);
    let sent = h.out();
    let expected: Vec<(u32, Vec<u8>)> = pkts.iter().map(|p| (1, forwarded_v4(p))).collect();
    assert_eq!(sent, expected);
    assert!(ipv4::Packet::new_checked(&sent[0].1[14..])
        .unwrap()
        .verify_checksum());
    assert_eq!(h.fw.parked(), 0);
    assert_eq!(h.c.events_of(Event::NeighbourParked), 3);
    assert_eq!(h.c.events_of(Event::NeighbourReleased), 3);
    assert_eq!(h.c.events_of(Event::NeighbourSolicited), 1);
    assert_eq!(
        h.c.total_drops(),
        0,
        "nothing dropped (verdicts are counted by the worker)"
    );
    // Later packets take the fast path again.
    assert_eq!(
        h.rx(0, &pkts[0], 30),
        (Verdict::Tx(1), forwarded_v4(&pkts[0]))
    );
    assert_eq!(h.pool.in_use(), 0);
}

#[test]
fn parked_packets_leave_before_a_newer_packet_to_the_same_next_hop() {
    let mut h = H::new(NeighConfig::default());
    let (a, b, c) = (
        udp_v4("192.168.9.9", 1),
        udp_v4("192.168.9.10", 2),
        udp_v4("192.168.9.11", 3),
    );
    assert_eq!(h.rx(0, &a, 0).0, Verdict::Tx(1));
    assert_eq!(h.rx(0, &b, 0).0, Verdict::Kept);
    // Another worker learns the gateway: this one has not run maintain yet.
    h.fw.neighbours().learn(ip("10.78.0.1"), GW1, 1);
    let (v, out) = h.rx(0, &c, 2);
    assert_eq!((v, out), (Verdict::Tx(1), forwarded_v4(&c)));
    // The parked ones went out first (the worker sends StageIo before the verdicts).
    assert_eq!(h.out(), vec![(1, forwarded_v4(&a)), (1, forwarded_v4(&b))]);
    assert_eq!(h.fw.parked(), 0);
    assert_eq!(h.pool.in_use(), 0);
}

#[test]
fn parks_v6_and_releases_when_the_advertisement_comes() {
    let mut h = H::new(NeighConfig::default());
    let pkts: Vec<Vec<u8>> = (1..=2).map(|i| echo6("2001:db8::1", i)).collect();
    let (v, out) = h.rx(0, &pkts[0], 0);
    assert_eq!(v, Verdict::Tx(1));
    let f = ethernet::Frame::new_checked(&out[..]).unwrap();
    assert_eq!(f.dst_addr(), MacAddr([0x33, 0x33, 0xff, 0, 0, 1]));
    let p = ipv6::Packet::new_checked(f.payload()).unwrap();
    assert_eq!(p.dst_addr(), "ff02::1:ff00:1".parse::<Ipv6Addr>().unwrap());
    assert_eq!(
        icmpv6::Repr::parse(
            &icmpv6::Packet::new_checked(p.payload()).unwrap(),
            p.src_addr(),
            p.dst_addr()
        )
        .unwrap(),
        icmpv6::Repr::NeighborSolicit {
            target: "fd78::1".parse().unwrap(),
            source_ll: Some(US1)
        }
    );
    assert_eq!(h.rx(0, &pkts[1], 1).0, Verdict::Kept);
    assert_eq!(
        h.rx(1, &na_from_gw6(), 2).0,
        Verdict::Drop(DropReason::NdAdvertConsumed)
    );
    h.maintain(2);
    let sent = h.out();
    assert_eq!(sent.len(), 2);
    for ((port, got), orig) in sent.iter().zip(&pkts) {
        assert_eq!(*port, 1);
        assert_eq!(&got[..12], &[&GW1.0[..], &US1.0[..]].concat()[..]);
        let ip6 = ipv6::Packet::new_checked(&got[14..]).unwrap();
        assert_eq!(ip6.hop_limit(), 63);
        assert_eq!(&got[22..], &orig[22..], "only the hop limit changed");
    }
    assert_eq!(h.pool.in_use(), 0);
}

/// An ARP request (broadcast or unicast) from us for the gateway?
fn is_request_for_gw(f: &[u8], dst: MacAddr) -> bool {
    let mut want = BCAST_ARP_FOR_GW.to_vec();
    want[..6].copy_from_slice(&dst.0);
    f == want
}

#[test]
fn retries_every_second_then_fails_with_host_unreachable() {
    let mut h = H::new(NeighConfig::default());
    let first = udp_v4("192.168.9.9", 1);
    assert_eq!(h.rx(0, &first, 0).0, Verdict::Tx(1));
    assert_eq!(h.rx(0, &udp_v4("192.168.9.9", 2), 100).0, Verdict::Kept);
    let mut requests = vec![0u64];
    for now in (0..=3000).step_by(250) {
        h.maintain(now);
        for (port, f) in h.out() {
            if port == 0 {
                assert_eq!(now, 3000, "the ICMP error, at failure");
                continue;
            }
            assert!(is_request_for_gw(&f, MacAddr::BROADCAST), "{f:?}");
            requests.push(now);
        }
        if now < 3000 {
            assert_eq!(h.fw.parked(), 2, "still waiting at {now}");
        }
    }
    assert_eq!(requests, vec![0, 1000, 2000], "three requests, 1 s apart");
    // At 3000 the third went unanswered for 1 s: both dropped, an ICMP error went back.
    assert_eq!(h.fw.parked(), 0);
    assert_eq!(h.c.drops_of(DropReason::NeighbourUnresolved), 2);
    assert_eq!(h.c.events_of(Event::NeighbourSolicited), 3);
    assert_eq!(
        h.fw.neighbours().lookup(ip("10.78.0.1")),
        Neighbour::Failed(3000)
    );
    h.maintain(3000);
    assert!(h.out().is_empty());
    assert_eq!(h.pool.in_use(), 0);

    // Hold-down: dropped at once, no request, nothing parked.
    let (v, _) = h.rx(0, &first, 3500);
    assert_eq!(v, Verdict::Drop(DropReason::NeighbourUnresolved));
    assert_eq!(h.fw.parked(), 0);
    // Then it starts over.
    let (v, out) = h.rx(0, &first, 4000);
    assert_eq!((v, out.as_slice()), (Verdict::Tx(1), &BCAST_ARP_FOR_GW[..]));
    assert_eq!(h.fw.parked(), 1);
}

#[test]
fn failure_sends_icmp_unreachable_for_the_first_packet() {
    let mut h = H::new(NeighConfig::default());
    let first = udp_v4("192.168.9.9", 1);
    h.rx(0, &first, 0);
    h.rx(0, &udp_v4("192.168.9.9", 2), 0);
    let mut icmp = Vec::new();
    for now in [1000, 2000, 3000] {
        h.maintain(now);
        icmp.extend(h.out().into_iter().filter(|(port, _)| *port == 0));
    }
    assert_eq!(icmp.len(), 1);
    let (_, f) = &icmp[0];
    let e = ethernet::Frame::new_checked(&f[..]).unwrap();
    assert_eq!((e.dst_addr(), e.src_addr()), (PEER, US0));
    let p = ipv4::Packet::new_checked(e.payload()).unwrap();
    assert!(p.verify_checksum());
    assert_eq!(p.src_addr(), "10.77.0.2".parse::<Ipv4Addr>().unwrap());
    assert_eq!(p.dst_addr(), "10.77.0.1".parse::<Ipv4Addr>().unwrap());
    let m = icmpv4::Packet::new_checked(p.payload()).unwrap();
    assert_eq!(
        icmpv4::Repr::parse(&m).unwrap(),
        icmpv4::Repr::DstUnreachable {
            code: 1,
            data_len: 28
        }
    );
    assert_eq!(m.data(), &first[14..14 + 28], "quotes the original header");

    // IPv6: address unreachable, and none at all when switched off.
    let mut h = H::new(NeighConfig::default());
    h.rx(0, &echo6("2001:db8::1", 1), 0);
    for now in [1000, 2000, 3000] {
        h.maintain(now);
    }
    let back: Vec<_> = h.out().into_iter().filter(|(p, _)| *p == 0).collect();
    assert_eq!(back.len(), 1);
    let p = ipv6::Packet::new_checked(&back[0].1[14..]).unwrap();
    let r = icmpv6::Repr::parse(
        &icmpv6::Packet::new_checked(p.payload()).unwrap(),
        p.src_addr(),
        p.dst_addr(),
    )
    .unwrap();
    assert!(matches!(r, icmpv6::Repr::DstUnreachable { code: 3, .. }));

    let mut h = H::new(NeighConfig {
        icmp_unreachable: false,
        ..NeighConfig::default()
    });
    h.rx(0, &first, 0);
    for now in [1000, 2000, 3000] {
        h.maintain(now);
    }
    assert!(h.out().iter().all(|(p, _)| *p == 1), "only requests");
    assert_eq!(h.c.drops_of(DropReason::NeighbourUnresolved), 1);
    assert_eq!(h.pool.in_use(), 0);
}

#[test]
fn retry_settings_are_honoured() {
    let mut h = H::new(NeighConfig {
        retrans_ms: 200,
        mcast_probes: 5,
        ..NeighConfig::default()
    });
    h.rx(0, &udp_v4("192.168.9.9", 1), 0);
    let mut at = vec![0];
    for now in (0..=1200).step_by(50) {
        h.maintain(now);
        at.extend(h.out().iter().filter(|(p, _)| *p == 1).map(|_| now));
    }
    assert_eq!(at, vec![0, 200, 400, 600, 800]);
    assert_eq!(h.c.drops_of(DropReason::NeighbourUnresolved), 1);
}

#[test]
fn overflow_drops_the_oldest_and_counts_it() {
    let mut h = H::new(NeighConfig::default());
    let pkts: Vec<Vec<u8>> = (0..10).map(|i| udp_v4("192.168.9.9", i)).collect();
    for p in &pkts {
        h.rx(0, p, 0);
    }
    assert_eq!(h.fw.parked(), 8);
    assert_eq!(h.c.drops_of(DropReason::NeighbourQueueFull), 2);
    h.fw.neighbours().learn(ip("10.78.0.1"), GW1, 1);
    h.maintain(1);
    let sent: Vec<Vec<u8>> = h.out().into_iter().map(|(_, f)| f).collect();
    let newest: Vec<Vec<u8>> = pkts[2..].iter().map(|p| forwarded_v4(p)).collect();
    assert_eq!(sent, newest, "the two oldest were dropped");

    // One next-hop slot: a second unresolved next hop cannot park.
    let mut h = H::new(NeighConfig {
        queue_hops: 1,
        queue_len: 2,
        ..NeighConfig::default()
    });
    assert_eq!(h.rx(0, &udp_v4("192.168.9.9", 1), 0).0, Verdict::Tx(1));
    // 10.77.0.50 is on port 0's network: its own next hop. Its request still goes out
    // (the packet becomes it), counted as a full queue.
    let (v, out) = h.rx(0, &udp_v4("10.77.0.50", 2), 0);
    assert_eq!(v, Verdict::Tx(0));
    assert_eq!(&out[12..14], &[0x08, 0x06]);
    assert_eq!(h.c.drops_of(DropReason::NeighbourQueueFull), 1);
    // While that request is pending, further packets to it are dropped the same way.
    assert_eq!(
        h.rx(0, &udp_v4("10.77.0.50", 3), 10).0,
        Verdict::Drop(DropReason::NeighbourQueueFull)
    );
    assert_eq!(h.fw.parked(), 1);
    drop(h.fw);
    drop(h.io);
    assert_eq!(h.pool.in_use(), 0);
}

#[test]
fn stale_entries_are_probed_by_unicast_then_deleted() {
    let mut h = H::new(NeighConfig::default());
    let p = udp_v4("192.168.9.9", 1);
    h.fw.neighbours().learn(ip("10.78.0.1"), GW1, 0);
    assert_eq!(h.rx(0, &p, 100), (Verdict::Tx(1), forwarded_v4(&p)));
    assert!(h.out().is_empty());
    // 30 s later the entry is stale: still used, and a unicast probe goes out.
    let mut probes = Vec::new();
    for now in (30_000..33_000).step_by(250) {
        assert_eq!(
            h.rx(0, &p, now),
            (Verdict::Tx(1), forwarded_v4(&p)),
            "{now}"
        );
        for (port, f) in h.out() {
            assert_eq!(port, 1);
            assert!(is_request_for_gw(&f, GW1), "unicast to the known MAC");
            probes.push(now);
        }
    }
    assert_eq!(probes, vec![30_000, 31_000, 32_000]);
    // Unanswered: the next use deletes it and resolution starts over, parking the packet.
    let (v, out) = h.rx(0, &p, 33_000);
    assert_eq!((v, out.as_slice()), (Verdict::Tx(1), &BCAST_ARP_FOR_GW[..]));
    assert_eq!(h.fw.parked(), 1);
    assert_eq!(
        h.fw.neighbours().lookup(ip("10.78.0.1")),
        Neighbour::Incomplete(33_000)
    );

    // An answer to a probe makes the entry reachable again: no more probes.
    let mut h = H::new(NeighConfig::default());
    h.fw.neighbours().learn(ip("10.78.0.1"), GW1, 0);
    h.rx(0, &p, 30_000);
    assert_eq!(h.out().len(), 1);
    h.rx(1, &arp_reply_from_gw(), 30_010);
    assert_eq!(
        h.fw.neighbours().lookup_at(ip("10.78.0.1"), 31_000),
        Neighbour::Reachable(GW1)
    );
    for now in (31_000..60_000).step_by(1000) {
        assert_eq!(h.rx(0, &p, now).0, Verdict::Tx(1));
    }
    assert!(h.out().is_empty());
    // And without StageIo (no buffers to probe with) a stale entry just keeps working.
    let mut c = Counters::new(2);
    let mut q = h.pool.alloc_copy(&p).unwrap();
    let v = h.fw.process(0, &mut q, &mut Ctx::new(90_000, &mut c));
    assert_eq!((v, q.data()), (Verdict::Tx(1), &forwarded_v4(&p)[..]));
}

#[test]
fn stale_ipv6_probe_is_a_unicast_solicitation() {
    let mut h = H::new(NeighConfig::default());
    h.fw.neighbours().learn(ip("fd78::1"), GW1, 0);
    let (v, _) = h.rx(0, &echo6("2001:db8::1", 1), 30_000);
    assert_eq!(v, Verdict::Tx(1));
    let out = h.out();
    assert_eq!(out.len(), 1);
    let f = ethernet::Frame::new_checked(&out[0].1[..]).unwrap();
    assert_eq!(f.dst_addr(), GW1);
    let p = ipv6::Packet::new_checked(f.payload()).unwrap();
    assert_eq!(p.dst_addr(), "fd78::1".parse::<Ipv6Addr>().unwrap());
    assert_eq!(p.hop_limit(), 255);
    assert!(matches!(
        icmpv6::Repr::parse(
            &icmpv6::Packet::new_checked(p.payload()).unwrap(),
            p.src_addr(),
            p.dst_addr()
        ),
        Ok(icmpv6::Repr::NeighborSolicit { .. })
    ));
}

#[test]
fn without_buffers_the_packet_becomes_the_request() {
    // An allocator whose pool is exhausted: the old behaviour.
    let empty = Pool::new(1);
    let _hold = empty.alloc().unwrap();
    let mut h = H::new(NeighConfig::default());
    h.io = StageIo::new(Some(empty.into()));
    let (v, out) = h.rx(0, &udp_v4("192.168.9.9", 1), 0);
    assert_eq!((v, out.as_slice()), (Verdict::Tx(1), &BCAST_ARP_FOR_GW[..]));
    assert_eq!(h.c.drops_of(DropReason::NeighbourUnresolved), 1);
    assert_eq!(h.fw.parked(), 0);
}

#[test]
fn a_clone_starts_with_an_empty_lot() {
    let mut h = H::new(NeighConfig::default());
    h.rx(0, &udp_v4("192.168.9.9", 1), 0);
    let c = h.fw.clone();
    assert_eq!((h.fw.parked(), c.parked()), (1, 0));
    drop(h.fw);
    assert_eq!(
        h.pool.in_use(),
        0,
        "parked buffers are freed with the forwarder"
    );
}

#[test]
fn worker_sends_requests_and_releases_parked_packets() {
    let pool = Pool::new(64);
    let (mut ext0, int0) = mem::pair("ext0", "int0", 1, 64);
    let (int1, mut ext1) = mem::pair("int1", "ext1", 1, 64);
    let queues = vec![
        int0.queues.into_iter().next().unwrap(),
        int1.queues.into_iter().next().unwrap(),
    ];
    let mut w = Worker::new(
        WorkerConfig {
            id: 0,
            core: None,
            idle: Idle::Spin,
        },
        queues,
        forwarder(),
    )
    .with_allocator(pool.clone().into());
    let pkts: Vec<Vec<u8>> = (1..=3).map(|i| udp_v4("192.168.9.9", i)).collect();
    let mut b = Burst::new();
    for p in &pkts {
        b.push(pool.alloc_copy(p).unwrap()).unwrap();
    }
    ext0.queues[0].tx_burst(&mut b);
    assert_eq!(w.poll_once(0), 3);
    let mut got = Burst::new();
    ext1.queues[0].rx_burst(&mut got);
    let frames: Vec<Vec<u8>> = got.drain().map(|p| p.data().to_vec()).collect();
    assert_eq!(frames, vec![BCAST_ARP_FOR_GW.to_vec()]);
    assert_eq!(w.stage().parked(), 3);
    assert_eq!(
        w.counters().total_drops(),
        0,
        "parked packets are not drops"
    );
    // The reply comes in on port 1; the same round releases the packets.
    b.push(pool.alloc_copy(&arp_reply_from_gw()).unwrap())
        .unwrap();
    ext1.queues[0].tx_burst(&mut b);
    w.poll_once(10);
    ext1.queues[0].rx_burst(&mut got);
    let frames: Vec<Vec<u8>> = got.drain().map(|p| p.data().to_vec()).collect();
    let expected: Vec<Vec<u8>> = pkts.iter().map(|p| forwarded_v4(p)).collect();
    assert_eq!(frames, expected);
    let c = w.counters().clone();
    assert_eq!(c.ports[1].tx_packets, 4);
    assert_eq!(c.events_of(Event::NeighbourReleased), 3);
    drop(w);
    drop((ext0, ext1));
    assert_eq!(pool.in_use(), 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Whatever mix of packets, answers and time: no panic, every buffer accounted for
    /// (in the lot or back in the pool), and none left once everything is dropped.
    #[test]
    fn parking_never_panics_or_leaks(
        ops in prop::collection::vec((0u8..8, 0u8..6, 0u64..700), 1..120),
        hops in 1usize..4,
        qlen in 1usize..4,
        pool_size in 8usize..40,
    ) {
        let pool = Pool::new(pool_size);
        let mut h = H::with_pool(
            NeighConfig { queue_hops: hops, queue_len: qlen, ..NeighConfig::default() },
            pool.clone(),
        );
        let dsts = ["192.168.9.9", "10.77.0.50", "10.77.0.51", "10.78.0.9"];
        let mut now = 0u64;
        for (op, which, dt) in ops {
            now += dt;
            let frame = match op {
                0..=2 => udp_v4(dsts[usize::from(which) % dsts.len()], which),
                3 => echo6(if which % 2 == 0 { "2001:db8::1" } else { "fd77::99" }, 1),
                4 => arp_reply_from_gw(),
                5 => na_from_gw6(),
                6 => {
                    // Another worker learns (or the entry ages out on its own).
                    h.fw.neighbours().learn(ip(dsts[usize::from(which) % dsts.len()]), GW1, now);
                    h.maintain(now);
                    let _ = h.out();
                    continue;
                }
                _ => {
                    h.maintain(now);
                    let _ = h.out();
                    continue;
                }
            };
            let Some(mut p) = pool.alloc_copy(&frame) else {
                // The pool is exhausted by parked packets: that is bounded.
                prop_assert!(h.fw.parked() <= hops * qlen);
                continue;
            };
            let _ = h.fw.process(0, &mut p, &mut Ctx::with_io(now, &mut h.c, &mut h.io));
            drop(p);
            let _ = h.out();
            prop_assert!(h.fw.parked() <= hops * qlen);
            prop_assert_eq!(pool.in_use(), h.fw.parked());
        }
        drop(h.fw);
        drop(h.io);
        prop_assert_eq!(pool.in_use(), 0);
    }
}

const EVIL: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0xee]);

/// An ARP frame from [`EVIL`] into `port`: `op` claiming that `sender` is at [`EVIL`],
/// to `target`.
fn arp_claim(dst_mac: MacAddr, op: arp::Operation, sender: &str, target: &str) -> Vec<u8> {
    let mut f = eth(dst_mac, EVIL, EtherType::Arp);
    let mut a = [0u8; 28];
    arp::Repr {
        operation: op,
        source_hardware_addr: EVIL,
        source_protocol_addr: sender.parse().unwrap(),
        target_hardware_addr: MacAddr::ZERO,
        target_protocol_addr: target.parse().unwrap(),
    }
    .emit(&mut arp::Packet::new_unchecked(&mut a[..]));
    f.extend_from_slice(&a);
    f
}

/// A neighbour advertisement to `dst` (sent to `dst_mac`) claiming that `target` is at
/// [`EVIL`], with `flags`.
fn na_claim(dst_mac: MacAddr, src: &str, dst: &str, target: &str, flags: u8) -> Vec<u8> {
    let na = icmpv6::Repr::NeighborAdvert {
        flags,
        target: target.parse().unwrap(),
        target_ll: Some(EVIL),
    };
    ipv6_frame(
        dst_mac,
        src,
        dst,
        255,
        |b, s, d| na.emit(&mut icmpv6::Packet::new_unchecked(b), s, d),
        na.buffer_len(),
    )
}

/// Port 0 is the client side, port 1 the backends' (10.78.0.0/24, fd78::/64). Claims
/// for the backend side's addresses arriving on the client port, claims for sluice's
/// own addresses, and unsolicited changes of a fresh entry's MAC are all refused and
/// counted; traffic to the backend side keeps its real next hop throughout.
#[test]
fn spoofed_neighbour_claims_are_refused_and_counted() {
    let mut h = H::new(NeighConfig::default());
    let p = udp_v4("192.168.9.9", 1);
    let p6 = echo6("2001:db8::1", 1);
    // Resolved the proper way: sluice asks on port 1, the gateway answers there.
    assert_eq!(h.rx(0, &p, 0).0, Verdict::Tx(1));
    assert_eq!(
        h.rx(1, &arp_reply_from_gw(), 10).0,
        Verdict::Drop(DropReason::ArpReplyConsumed)
    );
    assert_eq!(h.rx(0, &p6, 10).0, Verdict::Tx(1));
    assert_eq!(
        h.rx(1, &na_from_gw6(), 20).0,
        Verdict::Drop(DropReason::NdAdvertConsumed)
    );
    h.maintain(20);
    assert_eq!(h.out().len(), 2, "both parked packets released");
    let gw4 = ip("10.78.0.1");
    let gw6 = ip("fd78::1");
    let claims = [
        // An ARP reply to us on the client port, claiming the gateway.
        arp_claim(US0, arp::Operation::Reply, "10.78.0.1", "10.77.0.2"),
        // An ARP request to us on the client port, claiming the gateway as its sender.
        arp_claim(
            MacAddr::BROADCAST,
            arp::Operation::Request,
            "10.78.0.1",
            "10.77.0.2",
        ),
        // A gratuitous ARP on the client port.
        arp_claim(
            MacAddr::BROADCAST,
            arp::Operation::Request,
            "10.78.0.1",
            "10.78.0.1",
        ),
        // A solicited-looking NA on the client port.
        na_claim(US0, "fd77::1", "fd77::2", "fd78::1", 0x60),
        // An unsolicited NA to all nodes on the client port.
        na_claim(
            MacAddr::ipv6_multicast("ff02::1".parse().unwrap()),
            "fd77::1",
            "ff02::1",
            "fd78::1",
            0x20,
        ),
        // On the gateway's own port, but unasked while the entry is fresh.
        {
            let mut f = arp_claim(US1, arp::Operation::Reply, "10.78.0.1", "10.78.0.2");
            f[..6].copy_from_slice(&US1.0);
            f
        },
        na_claim(US1, "fd78::1", "fd78::2", "fd78::1", 0x20),
    ];
    for (i, f) in claims.iter().enumerate() {
        let port = if i >= 5 { 1 } else { 0 };
        let before = h.c.drops_of(DropReason::ArpSpoofed);
        let (v, _) = h.rx(port, f, 100 + i as u64);
        // Dropped as spoofed, or (a request for our address) answered and counted.
        let counted = h.c.drops_of(DropReason::ArpSpoofed) - before;
        match v {
            Verdict::Drop(r) => assert_eq!((r, counted), (DropReason::ArpSpoofed, 0), "claim {i}"),
            v => assert_eq!((v, i, counted), (Verdict::Tx(0), 1, 1), "claim {i}"),
        }
        assert_eq!(
            h.fw.neighbours().lookup(gw4),
            Neighbour::Reachable(GW1),
            "claim {i}"
        );
        assert_eq!(
            h.fw.neighbours().lookup(gw6),
            Neighbour::Reachable(GW1),
            "claim {i}"
        );
    }
    // Claims for sluice's own addresses are never learned.
    let own = [
        h.rx(
            0,
            &arp_claim(US0, arp::Operation::Reply, "10.77.0.2", "10.77.0.2"),
            200,
        ),
        h.rx(
            1,
            &arp_claim(US1, arp::Operation::Reply, "10.77.0.2", "10.78.0.2"),
            200,
        ),
        h.rx(
            0,
            &na_claim(US0, "fd77::1", "fd77::2", "fd77::2", 0x20),
            200,
        ),
    ];
    for (v, _) in own {
        assert_eq!(v, Verdict::Drop(DropReason::ArpSpoofed));
    }
    assert_eq!(
        h.fw.neighbours().lookup(ip("10.77.0.2")),
        Neighbour::Unknown
    );
    assert_eq!(h.fw.neighbours().lookup(ip("fd77::2")), Neighbour::Unknown);
    // Traffic to the backend side still reaches the real gateway.
    assert_eq!(h.rx(0, &p, 300), (Verdict::Tx(1), forwarded_v4(&p)));
    let (v, out) = h.rx(0, &p6, 300);
    assert_eq!(v, Verdict::Tx(1));
    assert_eq!(&out[..6], &GW1.0);
    assert_eq!(h.pool.in_use(), 0);
}

/// An address the cache resolved itself moves only by an answer to sluice's own request
/// or probe, and at most once per lock time; a static neighbour never moves.
#[test]
fn resolved_and_static_neighbours_keep_their_mac() {
    let mut h = H::new(NeighConfig::default());
    let n = h.fw.neighbours().clone();
    let gw4 = ip("10.78.0.1");
    // Learned unsolicited (the gateway's own request): refreshable, and once stale an
    // unsolicited claim on the right port may move it.
    let req = arp_claim(US1, arp::Operation::Request, "10.78.0.1", "10.78.0.2");
    assert_eq!(h.rx(1, &req, 0).0, Verdict::Tx(1));
    assert_eq!(n.lookup(gw4), Neighbour::Reachable(EVIL));
    assert_eq!(n.claim(gw4, GW1, 1000, false), Claim::Refused, "fresh");
    assert_eq!(n.claim(gw4, GW1, 40_000, false), Claim::Learned, "stale");
    assert_eq!(n.lookup(gw4), Neighbour::Reachable(GW1));
    assert_eq!(
        n.claim(gw4, EVIL, 40_500, true),
        Claim::Refused,
        "not asked"
    );
    // Stale with a probe out: an answer moves it (and marks it resolved), but not within
    // the lock time of the last change; an unsolicited claim never moves it once resolved.
    assert_eq!(n.probe(gw4, 80_000), Probe::Send(GW1));
    assert_eq!(n.claim(gw4, EVIL, 80_001, true), Claim::Learned);
    assert_eq!(n.lookup(gw4), Neighbour::Reachable(EVIL));
    assert_eq!(n.probe(gw4, 200_000), Probe::Send(EVIL));
    assert_eq!(
        n.claim(gw4, GW1, 200_000, true),
        Claim::Learned,
        "asked again"
    );
    assert_eq!(n.probe(gw4, 300_000), Probe::Send(GW1));
    n.learn(gw4, GW1, 300_000);
    assert_eq!(n.claim(gw4, EVIL, 300_100, false), Claim::Refused);
    assert_eq!(
        n.claim(gw4, EVIL, 400_000, false),
        Claim::Refused,
        "resolved"
    );
    // Lock time: even an answer to a probe does not move an entry within a second of its
    // last change.
    let quick = NeighbourCache::with_config(
        64,
        NeighConfig {
            reachable_ms: 100,
            ..NeighConfig::default()
        },
    );
    let b = ip("10.78.0.7");
    assert_eq!(quick.solicit(b, 0), Solicit::Send(1));
    assert_eq!(quick.claim(b, GW1, 10, true), Claim::Learned);
    assert_eq!(quick.probe(b, 110), Probe::Send(GW1));
    assert_eq!(quick.claim(b, EVIL, 111, true), Claim::Refused, "locked");
    assert_eq!(quick.probe(b, 1200), Probe::Send(GW1));
    assert_eq!(quick.claim(b, EVIL, 1201, true), Claim::Learned);
    assert_eq!(quick.lookup(b), Neighbour::Reachable(EVIL));

    // Static: never overwritten, never stale, never probed, never evicted.
    let s = ip("10.78.0.9");
    assert!(n.set_static(s, GW1));
    n.learn(s, EVIL, 5);
    assert_eq!(n.claim(s, EVIL, 10, true), Claim::Refused);
    assert_eq!(n.claim(s, GW1, 10, false), Claim::Learned);
    let spoof = arp_claim(US1, arp::Operation::Reply, "10.78.0.9", "10.78.0.2");
    assert_eq!(h.rx(1, &spoof, 20).0, Verdict::Drop(DropReason::ArpSpoofed));
    assert_eq!(n.lookup_at(s, 10_000_000), Neighbour::Reachable(GW1));
    assert_eq!(n.probe(s, 10_000_000), Probe::NotDue);
    let p = udp_v4("10.78.0.9", 1);
    let mut fwd = p.clone();
    fwd[..6].copy_from_slice(&GW1.0);
    fwd[6..12].copy_from_slice(&US1.0);
    ipv4::Packet::new_unchecked(&mut fwd[14..]).decrement_ttl();
    assert_eq!(h.rx(0, &p, 10_000_000), (Verdict::Tx(1), fwd));
    let small = NeighbourCache::new(8);
    assert!(small.set_static(s, GW1));
    for i in 0..64u8 {
        small.learn(IpAddr::from([10, 0, 0, i]), EVIL, u64::from(i));
    }
    assert_eq!(small.lookup(s), Neighbour::Reachable(GW1), "not evicted");
}
