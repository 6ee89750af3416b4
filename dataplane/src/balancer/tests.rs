//! The balancer stage with the snapshot's served addresses: ARP/ND answered, echo
//! answered and neighbour claims refused for them while a generation serves them, not
//! after one that does not; and the first worker's announcements of new ones, byte for
//! byte, on the worker's clock.

use super::*;
use crate::pipeline::{ForwarderConfig, IfAddr, NeighbourCache, PortConf, StageIo};
use crate::port::Pool;
use crate::rcu::Publisher;
use crate::stats::Counters;
use crate::tables::addresses::Addresses;
use crate::tables::ipcache::IpCache;
use crate::tables::listeners::ListenerTable;
use crate::tables::policy::{DirTable, IdentityEntry, PolicyTables, NONE};
use crate::wire::{icmpv6, ip_proto, ipv6, MacAddr};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

const US0: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x10]);
const US1: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x11]);
const PEER: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);

fn ip(s: &str) -> IpAddr {
    s.parse().expect("literal address")
}

/// Port 0: 10.77.0.2/24 + fd77::2/64; port 1: 10.78.0.2/24. No virtual addresses.
fn conf() -> Arc<ForwarderConfig> {
    let port = |name: &str, mac, addrs: &[(&str, u8)]| PortConf {
        name: name.into(),
        mac,
        addrs: addrs
            .iter()
            .map(|&(a, prefix_len)| IfAddr {
                addr: ip(a),
                prefix_len,
            })
            .collect(),
    };
    Arc::new(
        ForwarderConfig::new(
            vec![
                port("p0", US0, &[("10.77.0.2", 24), ("fd77::2", 64)]),
                port("p1", US1, &[("10.78.0.2", 24)]),
            ],
            &[],
        )
        .expect("config"),
    )
}

/// Tables with no listener and no policy, serving `addrs` on their ports.
fn snapshot(addrs: &[(&str, u16)]) -> Snapshot {
    let policy = PolicyTables::new(
        IpCache::new([], []).expect("ipcache"),
        vec![IdentityEntry::world(NONE)],
        0,
        DirTable::new(0, []).expect("egress"),
        DirTable::new(0, []).expect("ingress"),
    )
    .expect("policy");
    Snapshot {
        listeners: ListenerTable::default(),
        policy,
        addresses: Addresses::new(addrs.iter().map(|&(a, p)| (ip(a), p))),
    }
}

/// Frames a stage sent through [`StageIo`], with their ports.
type Sent = Vec<(u32, Vec<u8>)>;

/// A balancer (worker `worker`) over [`conf`], its snapshot publisher, a pool and the
/// worker's [`StageIo`].
struct H {
    b: Balancer,
    publisher: Publisher<Snapshot>,
    pool: Pool,
    io: StageIo,
    c: Counters,
}

impl H {
    fn new(worker: usize, first: Snapshot) -> H {
        let publisher = Publisher::new(first, 1);
        let b = Balancer::new(
            Forwarder::new(conf(), Arc::new(NeighbourCache::new(64))),
            publisher.reader().expect("reader"),
            BalancerConfig {
                worker,
                workers: 2,
                flow_capacity: 64,
                ..BalancerConfig::default()
            },
        );
        let pool = Pool::new(256);
        H {
            b,
            publisher,
            io: StageIo::new(Some(pool.clone().into())),
            pool,
            c: Counters::new(2),
        }
    }

    /// One frame through the stage: its verdict and the bytes left in its slot.
    fn rx(&mut self, port: usize, frame: &[u8]) -> (Verdict, Vec<u8>) {
        let mut pkts = [self.pool.alloc_copy(frame).expect("buffer")];
        let mut v = [Verdict::Drop(DropReason::BadPort)];
        self.b.process_burst(
            port,
            &mut pkts,
            &mut v,
            &mut Ctx::with_io(0, &mut self.c, &mut self.io),
        );
        (v[0], pkts[0].data().to_vec())
    }

    /// `maintain` at `now`, and what it sent.
    fn maintain(&mut self, now: u64) -> Sent {
        self.b
            .maintain(&mut Ctx::with_io(now, &mut self.c, &mut self.io));
        self.io
            .drain()
            .map(|(port, p)| (port, p.data().to_vec()))
            .collect()
    }

    /// Publishes `next` as the successor of the current tables (as a reload does).
    fn publish(&mut self, mut next: Snapshot) {
        next.addresses.follow(&self.publisher.current().addresses);
        self.publisher.publish(next);
    }
}

/// ARP `op` from 10.77.0.1 (or `sender`) at [`PEER`] about `target`, to `dst`.
fn arp(dst: MacAddr, op: u8, sender: [u8; 4], target: [u8; 4]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&PEER.0);
    f.extend_from_slice(&[0x08, 0x06, 0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, op]);
    f.extend_from_slice(&PEER.0);
    f.extend_from_slice(&sender);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&target);
    f.resize(60, 0);
    f
}

/// An IPv6 frame from fd77::1 at [`PEER`] carrying the ICMPv6 message `m`.
fn icmp6(dst_mac: MacAddr, dst: &str, hop: u8, m: &icmpv6::Repr) -> Vec<u8> {
    let (s, d): (Ipv6Addr, Ipv6Addr) = ("fd77::1".parse().expect("s"), dst.parse().expect("d"));
    let mut f = Vec::new();
    f.extend_from_slice(&dst_mac.0);
    f.extend_from_slice(&PEER.0);
    f.extend_from_slice(&[0x86, 0xdd]);
    let mut b = vec![0u8; ipv6::HEADER_LEN + m.buffer_len()];
    let mut p = ipv6::Packet::new_unchecked(&mut b[..]);
    ipv6::Repr {
        src_addr: s,
        dst_addr: d,
        next_header: ip_proto::ICMPV6,
        payload_len: m.buffer_len(),
        hop_limit: hop,
    }
    .emit(&mut p);
    m.emit(&mut icmpv6::Packet::new_unchecked(p.payload_mut()), s, d);
    f.extend_from_slice(&b);
    f
}

/// An echo request from 10.77.0.1 to `dst` (IPv4 header checksum filled in).
fn echo_v4(dst: [u8; 4]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&US0.0);
    f.extend_from_slice(&PEER.0);
    f.extend_from_slice(&[0x08, 0x00]);
    let mut ip = vec![
        0x45, 0, 0, 28, 0, 1, 0, 0, 64, 1, 0, 0, 10, 77, 0, 1, dst[0], dst[1], dst[2], dst[3],
    ];
    let mut icmp = vec![8, 0, 0, 0, 0, 7, 0, 1];
    let sum = |b: &[u8]| {
        let mut s: u32 = b
            .chunks(2)
            .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
            .sum();
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    };
    let c = sum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let c = sum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&icmp);
    f
}

const SERVED: [u8; 4] = [10, 77, 0, 30];

/// A served address is answered on its port while a generation serves it: ARP (exact
/// reply), neighbour solicitation, echo; a claim to it by a neighbour is refused. After
/// a generation without it: none of that.
#[test]
fn served_addresses_are_answered_while_the_tables_serve_them() {
    let mut h = H::new(1, snapshot(&[("10.77.0.30", 0), ("fd77::30", 0)]));
    let served = snapshot(&[("10.77.0.30", 0), ("fd77::30", 0)]).addresses;
    let conf = h.b.forwarder().config();
    for (a, ours) in [
        ("10.77.0.2", true),
        ("10.78.0.2", true),
        ("fd77::2", true),
        ("10.77.0.30", true),
        ("fd77::30", true),
        ("10.77.0.255", false),
        ("10.77.0.31", false),
        ("fd77::31", false),
    ] {
        assert_eq!(conf.is_ours(ip(a), &served), ours, "{a}");
        assert!(!conf.is_ours(ip(a), &crate::tables::addresses::NONE) || !a.ends_with("30"));
    }
    let bcast = MacAddr::BROADCAST;
    let request = arp(bcast, 1, [10, 77, 0, 1], SERVED);
    let (v, out) = h.rx(0, &request);
    assert_eq!(v, Verdict::Tx(0));
    let expected = [
        0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x10, 0x08, 0x06, // eth back to the asker
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x02, // arp reply
        0x02, 0, 0, 0, 0, 0x10, 10, 77, 0, 30, // the served address at port 0's MAC
        0x02, 0, 0, 0, 0, 0x01, 10, 77, 0, 1, // to the asker
    ];
    assert_eq!(out, expected);
    // Not on the port whose network does not hold it.
    let (v, _) = h.rx(1, &request);
    assert_eq!(v, Verdict::Drop(DropReason::ArpNotForUs));
    // A neighbour claiming it (gratuitous ARP reply) is refused; a gratuitous request
    // is answered, asserting sluice's claim, and counted all the same.
    let (v, _) = h.rx(0, &arp(bcast, 2, SERVED, SERVED));
    assert_eq!(v, Verdict::Drop(DropReason::ArpSpoofed));
    let (v, _) = h.rx(0, &arp(bcast, 1, SERVED, SERVED));
    assert_eq!(v, Verdict::Tx(0));
    assert_eq!(h.c.drops_of(DropReason::ArpSpoofed), 1);
    assert_eq!(
        h.b.forwarder().neighbours().lookup(ip("10.77.0.30")),
        crate::pipeline::Neighbour::Unknown,
        "never learned"
    );
    // Echo to it is answered (from it).
    let (v, out) = h.rx(0, &echo_v4(SERVED));
    assert_eq!(v, Verdict::Tx(0));
    assert_eq!(
        (&out[26..30], &out[30..34], out[34]),
        (&SERVED[..], &[10, 77, 0, 1][..], 0)
    );
    // A neighbour solicitation for the IPv6 one, to its solicited-node group.
    let ns = icmpv6::Repr::NeighborSolicit {
        target: "fd77::30".parse().expect("target"),
        source_ll: Some(PEER),
    };
    let group = MacAddr([0x33, 0x33, 0xff, 0, 0, 0x30]);
    let (v, out) = h.rx(0, &icmp6(group, "ff02::1:ff00:30", 255, &ns));
    assert_eq!(v, Verdict::Tx(0));
    let p = ipv6::Packet::new_checked(&out[14..]).expect("ipv6");
    let na = icmpv6::Repr::parse(
        &icmpv6::Packet::new_checked(p.payload()).expect("icmpv6"),
        p.src_addr(),
        p.dst_addr(),
    )
    .expect("NA");
    assert_eq!(
        na,
        icmpv6::Repr::NeighborAdvert {
            flags: icmpv6::na_flags::SOLICITED | icmpv6::na_flags::OVERRIDE,
            target: "fd77::30".parse().expect("target"),
            target_ll: Some(US0),
        }
    );

    // A reload without them: no answer, and a claim is a neighbour's again.
    h.publish(snapshot(&[]));
    let (v, _) = h.rx(0, &request);
    assert_eq!(v, Verdict::Drop(DropReason::ArpNotForUs));
    let (v, _) = h.rx(0, &icmp6(group, "ff02::1:ff00:30", 255, &ns));
    assert_eq!(v, Verdict::Drop(DropReason::IpMulticast));
    // Sent to the address itself, both are routed to the neighbour that may have it now:
    // sluice asks for it instead of answering.
    let (v, out) = h.rx(0, &icmp6(US0, "fd77::30", 255, &ns));
    assert_eq!(v, Verdict::Tx(0));
    assert_eq!(
        out[54], 135,
        "a solicitation of sluice's own, not an advertisement"
    );
    let target: Ipv6Addr = "fd77::30".parse().expect("target");
    assert_eq!(
        out[62..78],
        target.octets(),
        "for the address it was sent to"
    );
    let (v, out) = h.rx(0, &echo_v4(SERVED));
    assert_eq!(v, Verdict::Tx(0));
    assert_eq!(
        (&out[12..14], out[21], &out[28..32], &out[38..42]),
        (&[0x08, 0x06][..], 1, &[10, 77, 0, 2][..], &SERVED[..]),
        "an ARP request from 10.77.0.2 for the address, not an echo reply"
    );
    drop(h.b);
    assert_eq!(h.pool.in_use(), 0);
}

/// The gratuitous ARP for 10.77.0.30 from port 0's MAC.
const GARP_30: [u8; 42] = [
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0x10, 0x08, 0x06, // broadcast
    0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, // ARP request (announcement)
    0x02, 0, 0, 0, 0, 0x10, 10, 77, 0, 30, // sender: the address at port 0's MAC
    0, 0, 0, 0, 0, 0, 10, 77, 0, 30, // target: the address itself, MAC zero
];

/// The unsolicited neighbour advertisement for fd77::30 from port 0's MAC.
const NA_30: [u8; 86] = [
    0x33, 0x33, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x10, 0x86, 0xdd, // to all-nodes
    0x60, 0, 0, 0, 0, 32, 58, 255, // IPv6, 32 bytes of ICMPv6, hop limit 255
    0xfd, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x30, // from fd77::30
    0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, // to ff02::1
    136, 0, 0x59, 0x40, // neighbour advertisement, checksum
    0x20, 0, 0, 0, // Override only
    0xfd, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x30, // target
    2, 1, 0x02, 0, 0, 0, 0, 0x10, // target link-layer address option
];

/// The first worker announces the addresses of the first generation at once, then twice
/// more a second apart; a reload that adds one announces only that one; other workers
/// announce nothing.
#[test]
fn new_served_addresses_are_announced_three_times() {
    let first = || snapshot(&[("10.77.0.30", 0), ("fd77::30", 0)]);
    let mut h = H::new(0, first());
    let sent = h.maintain(0);
    assert_eq!(sent, vec![(0, GARP_30.to_vec()), (0, NA_30.to_vec())]);
    assert_eq!(h.c.events_of(Event::AddressAnnounced), 2);
    assert!(h.maintain(999).is_empty(), "not before a second has passed");
    assert_eq!(h.maintain(1000).len(), 2);
    assert_eq!(h.maintain(2000).len(), 2);
    assert!(h.maintain(3000).is_empty(), "three times, then no more");
    assert_eq!(h.c.events_of(Event::AddressAnnounced), 6);

    // A reload adding 10.77.0.31 (and keeping the others): only it is new.
    h.publish(snapshot(&[
        ("10.77.0.30", 0),
        ("10.77.0.31", 0),
        ("fd77::30", 0),
    ]));
    let mut garp_31 = GARP_30;
    garp_31[31] = 31;
    garp_31[41] = 31;
    for now in [3500, 4500, 5500] {
        assert_eq!(h.maintain(now), vec![(0, garp_31.to_vec())], "at {now}");
    }
    assert!(h.maintain(6500).is_empty());
    // A reload that changes nothing announces nothing.
    h.publish(snapshot(&[
        ("10.77.0.30", 0),
        ("10.77.0.31", 0),
        ("fd77::30", 0),
    ]));
    assert!(h.maintain(7000).is_empty() && h.maintain(8000).is_empty());
    assert_eq!(h.c.events_of(Event::AddressAnnounced), 9);

    // Worker 1 answers for them but leaves the announcing to worker 0.
    let mut other = H::new(1, first());
    assert!(other.maintain(0).is_empty());
    assert_eq!(other.c.events_of(Event::AddressAnnounced), 0);
}

/// A reload during an announcement: the new address gets its own three announcements
/// on its own schedule; the ones under way are neither repeated nor delayed.
#[test]
fn a_reload_during_an_announcement_announces_only_the_new_address() {
    let mut h = H::new(0, snapshot(&[("10.77.0.30", 0), ("fd77::30", 0)]));
    assert_eq!(h.maintain(0).len(), 2);
    h.publish(snapshot(&[
        ("10.77.0.30", 0),
        ("10.77.0.31", 0),
        ("fd77::30", 0),
    ]));
    let mut garp_31 = GARP_30;
    garp_31[31] = 31;
    garp_31[41] = 31;
    let first = vec![(0, GARP_30.to_vec()), (0, NA_30.to_vec())];
    let new = vec![(0, garp_31.to_vec())];
    let sent: Vec<(u64, Sent)> = [500, 1000, 1500, 2000, 2500, 3000, 3500]
        .into_iter()
        .map(|now| (now, h.maintain(now)))
        .collect();
    assert_eq!(
        sent,
        vec![
            (500, new.clone()),
            (1000, first.clone()),
            (1500, new.clone()),
            (2000, first),
            (2500, new),
            (3000, vec![]),
            (3500, vec![]),
        ]
    );
}

/// More reloads bringing addresses in a few seconds than announcements can run side by
/// side (16): every address is still announced at least three times, those of the first
/// 15 reloads exactly three times.
#[test]
fn many_reloads_in_a_row_announce_every_address() {
    let names: Vec<String> = (40..60).map(|i| format!("10.77.0.{i}")).collect();
    let mut h = H::new(0, snapshot(&[]));
    let mut sent = Vec::new();
    for (i, _) in names.iter().enumerate() {
        let list: Vec<(&str, u16)> = names[..=i].iter().map(|a| (a.as_str(), 0)).collect();
        h.publish(snapshot(&list));
        sent.extend(h.maintain(i as u64 * 10));
    }
    for now in (1..10).map(|s| s * 1000) {
        sent.extend(h.maintain(now));
    }
    for i in 40..60u8 {
        let n = sent.iter().filter(|(_, f)| f[41] == i).count();
        assert!(n >= 3, "10.77.0.{i} announced {n} times");
        assert!(i >= 55 || n == 3, "10.77.0.{i} announced {n} times");
    }
}

/// With no room in [`StageIo`], the pass waits and resumes where it stopped.
#[test]
fn announcements_wait_for_room() {
    let many: Vec<String> = (10..200).map(|i| format!("10.77.0.{i}")).collect();
    let list: Vec<(&str, u16)> = many.iter().map(|a| (a.as_str(), 0)).collect();
    let mut h = H::new(0, snapshot(&list));
    let first = h.maintain(0);
    assert_eq!(
        first.len(),
        crate::pipeline::EXTRA_TX,
        "as many as StageIo holds"
    );
    let rest = h.maintain(1);
    let rest2 = h.maintain(2);
    assert_eq!(first.len() + rest.len() + rest2.len(), 190, "then the rest");
    let mut targets: Vec<u8> = first
        .iter()
        .chain(&rest)
        .chain(&rest2)
        .map(|(_, f)| f[41])
        .collect();
    targets.dedup();
    assert_eq!(
        targets,
        (10..200).collect::<Vec<u8>>(),
        "each once, in order"
    );
}

/// A neighbour that had the address before it was served (learned then, still cached as
/// reachable) gets none of its traffic once it is served: the fast path treats it as
/// sluice's own.
#[test]
fn a_cached_neighbour_of_a_newly_served_address_is_bypassed() {
    let mut h = H::new(1, snapshot(&[]));
    let now = 0;
    assert_eq!(
        h.b.forwarder()
            .neighbours()
            .claim(ip("10.77.0.30"), PEER, now, true),
        crate::pipeline::neigh::Claim::Learned
    );
    let (v, out) = h.rx(0, &echo_v4(SERVED));
    assert_eq!(
        (v, out[34]),
        (Verdict::Tx(0), 8),
        "forwarded to the neighbour"
    );
    h.publish(snapshot(&[("10.77.0.30", 0)]));
    let (v, out) = h.rx(0, &echo_v4(SERVED));
    assert_eq!((v, out[34]), (Verdict::Tx(0), 0), "answered by sluice");
    assert_eq!(&out[26..30], &SERVED[..]);
}
