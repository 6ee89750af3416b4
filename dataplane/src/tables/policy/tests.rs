//! Tests of the policy tables: verdicts, bursts against single lookups, and the
//! tables against a naive reading of their entries.

use super::layout::{bloom_bit, bloom_bits, bloom_slot, candidates_in_order, pack, slot_home};
use super::*;
use proptest::prelude::*;

const ANY: u32 = 100;
const ANY_POD: u32 = 101;

fn pod(wl: u32, ns: u32, class: u32, egress: u32, ingress: u32, node: u32) -> IdentityEntry {
    IdentityEntry {
        peer: [wl, ns, class, ANY_POD, ANY],
        egress,
        ingress,
        runs_on: node,
        node_of: NONE,
    }
}

fn entry(profile: u32, kind: PeerKind, key: u32, proto: ProtoClass, r: &[(u16, u16)]) -> DirEntry {
    DirEntry {
        profile,
        kind,
        key,
        proto,
        ranges: r.iter().map(|&(lo, hi)| PortRange { lo, hi }).collect(),
    }
}

/// 10.0.0.1 = pod A (ns 10, ingress profile 0), 10.0.0.2 = pod B (ns 11, egress
/// profile 0), 10.0.0.3 = pod C (ns 10, ingress profile 1 = deny all), 192.168.0.1 =
/// the node of A and C; everything else is the world (class 50).
fn tables() -> PolicyTables {
    let ids = vec![
        IdentityEntry {
            peer: [NONE, NONE, 50, NONE, ANY],
            ..IdentityEntry::world(ANY)
        },
        pod(1, 10, 50, NONE, 0, 7),
        pod(2, 11, 50, 0, NONE, 8),
        pod(3, 10, 50, NONE, 1, 7),
        IdentityEntry {
            peer: [NONE, NONE, 50, NONE, ANY],
            node_of: 7,
            ..IdentityEntry::world(ANY)
        },
    ];
    let ipc = IpCache::new(
        [
            (0, 0, 0),
            (0x0a00_0001, 32, 1),
            (0x0a00_0002, 32, 2),
            (0x0a00_0003, 32, 3),
            (0xc0a8_0001, 32, 4),
        ],
        [(0, 0, 0)],
    )
    .expect("ipcache");
    // Ingress profile 0 (pod A): from namespace 11 on TCP 80-81 and 443; from the
    // world class on UDP 53. Profile 1 has no entries.
    let ingress = DirTable::new(
        2,
        [
            entry(
                0,
                PeerKind::Namespace,
                11,
                ProtoClass::Tcp,
                &[(443, 443), (80, 81)],
            ),
            entry(0, PeerKind::Class, 50, ProtoClass::Udp, &[(53, 53)]),
        ],
    )
    .expect("ingress");
    // Egress profile 0 (pod B): to workload 1 on every protocol and port.
    let egress = DirTable::new(
        1,
        ProtoClass::ALL
            .iter()
            .map(|&p| entry(0, PeerKind::Workload, 1, p, &[(0, 65535)])),
    )
    .expect("egress");
    PolicyTables::new(ipc, ids, 0, egress, ingress).expect("tables")
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

#[test]
fn verdicts_name_direction_and_reason() {
    let t = tables();
    let (a, b, c, node, world) = (
        ip("10.0.0.1"),
        ip("10.0.0.2"),
        ip("10.0.0.3"),
        ip("192.168.0.1"),
        ip("203.0.113.9"),
    );
    assert_eq!(t.verdict(b, a, 6, 80), Verdict::Allow);
    assert_eq!(t.verdict(b, a, 6, 81), Verdict::Allow);
    assert_eq!(t.verdict(b, a, 6, 443), Verdict::Allow);
    assert_eq!(
        t.verdict(b, a, 6, 82),
        Verdict::Deny {
            direction: Direction::Ingress,
            reason: DenyReason::PortNotAllowed
        }
    );
    assert_eq!(
        t.verdict(b, a, 17, 80),
        Verdict::Deny {
            direction: Direction::Ingress,
            reason: DenyReason::PortNotAllowed
        }
    );
    // B's egress allows only A.
    assert_eq!(
        t.verdict(b, c, 6, 80),
        Verdict::Deny {
            direction: Direction::Egress,
            reason: DenyReason::NoMatchingPeer
        }
    );
    // The world reaches A on UDP 53 through the class entry (pods are in the class
    // too: B reaches A on UDP 53 the same way).
    assert_eq!(t.verdict(world, a, 17, 53), Verdict::Allow);
    assert_eq!(t.verdict(b, a, 17, 53), Verdict::Allow);
    assert!(!t.verdict(world, a, 17, 54).is_allow());
    // C denies all ingress, except from its own node.
    assert_eq!(
        t.verdict(a, c, 6, 80),
        Verdict::Deny {
            direction: Direction::Ingress,
            reason: DenyReason::NoRules
        }
    );
    assert_eq!(t.verdict(node, c, 6, 80), Verdict::Allow);
    assert_eq!(t.decide(node, c, 6, 80).ingress, DirOutcome::OwnNode);
    // Non-isolated directions.
    assert_eq!(t.verdict(a, world, 1, 0), Verdict::Allow);
    assert_eq!(t.decide(a, b, 6, 1).ingress, DirOutcome::NotIsolated);
    // ICMP from B to A: B's egress allows every protocol towards A, A's ingress has
    // nothing for class Other.
    assert_eq!(
        t.verdict(b, a, 1, 0),
        Verdict::Deny {
            direction: Direction::Ingress,
            reason: DenyReason::PortNotAllowed
        }
    );
    // IPv6 falls to the default identity: not isolated.
    assert_eq!(t.verdict(ip("::1"), ip("::2"), 6, 80), Verdict::Allow);
    assert_eq!(
        t.verdict_v4(0x0a00_0002, 0x0a00_0001, 6, 80),
        Verdict::Allow
    );
}

#[test]
fn entries_round_trip_merged() {
    let t = tables();
    let e = t.ingress().entries();
    assert_eq!(
        e[0],
        (
            0,
            PeerKind::Namespace,
            11,
            ProtoClass::Tcp,
            vec![PortRange { lo: 80, hi: 81 }, PortRange::one(443)]
        )
    );
    assert_eq!(t.ingress().ranges(), 3);
    assert_eq!(t.egress().ranges(), 4);
}

#[test]
fn bad_tables_are_rejected() {
    assert_eq!(
        DirTable::new(1, [entry(1, PeerKind::Any, 1, ProtoClass::Tcp, &[(1, 1)])]),
        Err(PolicyError::UnknownProfile {
            profile: 1,
            profiles: 1
        })
    );
    assert_eq!(
        DirTable::new(
            1,
            [entry(0, PeerKind::Any, NONE, ProtoClass::Tcp, &[(1, 1)])]
        ),
        Err(PolicyError::ReservedKey)
    );
    let ipc = IpCache::new([(0, 0, 3)], []).expect("ipcache");
    let empty = || DirTable::new(0, []).expect("empty");
    assert!(matches!(
        PolicyTables::new(
            ipc.clone(),
            vec![IdentityEntry::world(1)],
            0,
            empty(),
            empty()
        ),
        Err(PolicyError::UnknownIdentity { id: 3, .. })
    ));
    let ids = vec![
        IdentityEntry {
            ingress: 0,
            ..IdentityEntry::world(1)
        };
        4
    ];
    assert!(matches!(
        PolicyTables::new(ipc, ids, 0, empty(), empty()),
        Err(PolicyError::IdentityProfile { id: 0, .. })
    ));
}

#[test]
fn bursts_answer_like_single_verdicts() {
    let t = tables();
    let addrs = [
        0x0a00_0001u32,
        0x0a00_0002,
        0x0a00_0003,
        0xc0a8_0001,
        0xcb00_7109,
    ];
    let mut conns = Vec::new();
    for &s in &addrs {
        for &d in &addrs {
            for (proto, port) in [(6, 80), (6, 82), (17, 53), (1, 0), (6, 443)] {
                conns.push(Conn4 {
                    src: s,
                    dst: d,
                    proto,
                    dst_port: port,
                });
            }
        }
    }
    // Not a multiple of the burst size, to cover the tail.
    conns.truncate(BATCH * 3 + 5);
    let mut out = vec![Verdict::Allow; conns.len()];
    t.verdicts_v4(&conns, &mut out);
    let mut denied = 0;
    for (c, v) in conns.iter().zip(&out) {
        assert_eq!(*v, t.verdict_v4(c.src, c.dst, c.proto, c.dst_port), "{c:?}");
        denied += usize::from(!v.is_allow());
    }
    assert!(denied > 0 && denied < conns.len());
    let six = [Conn6 {
        src: 1,
        dst: 2,
        proto: 6,
        dst_port: 80,
    }];
    let mut out6 = [Verdict::Deny {
        direction: Direction::Egress,
        reason: DenyReason::NoRules,
    }];
    t.verdicts_v6(&six, &mut out6);
    assert_eq!(out6[0], Verdict::Allow);
    // Mixed families, a short `out` (the rest of `conns` is ignored) and a long one
    // (the rest of `out` is left alone).
    let mixed: Vec<Conn> = conns
        .iter()
        .map(|c| Conn {
            src: IpAddr::V4(c.src.into()),
            dst: IpAddr::V4(c.dst.into()),
            proto: c.proto,
            dst_port: c.dst_port,
        })
        .chain([Conn {
            src: ip("::1"),
            dst: ip("10.0.0.1"),
            proto: 6,
            dst_port: 80,
        }])
        .collect();
    let sentinel = Verdict::Deny {
        direction: Direction::Egress,
        reason: DenyReason::NoRules,
    };
    let mut out = vec![sentinel; mixed.len() + 3];
    t.verdicts(&mixed, &mut out);
    for (c, v) in mixed.iter().zip(&out) {
        assert_eq!(*v, t.verdict(c.src, c.dst, c.proto, c.dst_port), "{c:?}");
    }
    assert_eq!(out[mixed.len()..], [sentinel; 3]);
    let mut short = vec![sentinel; BATCH + 1];
    t.verdicts(&mixed, &mut short);
    assert_eq!(short[..], out[..BATCH + 1]);
}

/// The workload filter: a table alone lets every namespace through; bundled with
/// the identities, a profile's workload entries pass only peers from the namespaces
/// of the groups they name, and verdicts stay exact.
#[test]
fn workload_filter_knows_namespaces() {
    // Workload 1 lives in namespace 10; namespace `other` hashes to another bit.
    let other = (11..)
        .find(|&n| bloom_slot(n) != bloom_slot(10))
        .expect("ns");
    let ingress = || {
        DirTable::new(
            1,
            [entry(
                0,
                PeerKind::Workload,
                1,
                ProtoClass::Tcp,
                &[(80, 80)],
            )],
        )
        .expect("ingress")
    };
    let peer = pod(1, other, 50, NONE, NONE, NONE);
    let bloom = bloom_bits(&peer.peer);
    let wl = 1 << (PEER_KINDS - 1 - PeerKind::Workload as usize);
    let alone = ingress();
    let info = &alone.profiles[0];
    assert_eq!(candidates_in_order(info, &bloom, bloom_slot(other)), wl);

    let ids = vec![
        IdentityEntry::world(ANY),
        pod(1, 10, 50, NONE, NONE, NONE),
        pod(2, other, 50, NONE, 0, NONE),
    ];
    let ipc = IpCache::new(
        [(0, 0, 0), (0x0a00_0001, 32, 1), (0x0a00_0002, 32, 2)],
        [(0, 0, 0)],
    )
    .expect("ipcache");
    let empty = DirTable::new(0, []).expect("egress");
    let t = PolicyTables::new(ipc, ids, 0, empty, ingress()).expect("tables");
    let info = &t.ingress.profiles[0];
    assert_eq!(info.wl_ns, bloom_bit(10));
    assert_eq!(candidates_in_order(info, &bloom, bloom_slot(10)), wl);
    assert_eq!(candidates_in_order(info, &bloom, bloom_slot(other)), 0);
    let (a, b) = (ip("10.0.0.1"), ip("10.0.0.2"));
    assert_eq!(t.verdict(a, b, 6, 80), Verdict::Allow);
    let denied = Verdict::Deny {
        direction: Direction::Ingress,
        reason: DenyReason::NoMatchingPeer,
    };
    assert_eq!(t.verdict(b, b, 6, 80), denied);
    let mut out = [Verdict::Allow; 2];
    let conns = [(a, b), (b, b)].map(|(src, dst)| Conn {
        src,
        dst,
        proto: 6,
        dst_port: 80,
    });
    t.verdicts(&conns, &mut out);
    assert_eq!(out, [Verdict::Allow, denied]);
}

/// A full table: probes that leave their home line, entries with further ranges,
/// spilled unions, Bloom filters that pass keys without entries; bursts agree with
/// single verdicts on all of it.
#[test]
fn bursts_agree_on_a_crowded_table() {
    const N: u32 = 3000;
    // Scattered keys (a multiplicative hash spreads consecutive ones too evenly to
    // ever fill a line).
    let mut x = 1u64;
    let keys: Vec<u32> = (0..N)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 40) as u32
        })
        .collect();
    // Identity i < N: a pod with workload key keys[i]; identity N: the destination,
    // whose ingress profile 0 allows every third key on TCP 80 and 1000-1001 and
    // every seventh on TCP 443 (more port ranges than fit inline).
    let mut ids: Vec<IdentityEntry> = keys
        .iter()
        .map(|&k| pod(k, 1 << 30, 1 << 30, NONE, NONE, NONE))
        .collect();
    ids.push(pod(NONE - 1, 1 << 30, 1 << 30, NONE, 0, NONE));
    let mut entries = Vec::new();
    for &k in keys.iter().step_by(3) {
        entries.push(entry(
            0,
            PeerKind::Workload,
            k,
            ProtoClass::Tcp,
            &[(80, 80), (1000, 1001)],
        ));
    }
    for &k in keys.iter().step_by(7) {
        entries.push(entry(
            0,
            PeerKind::Workload,
            k,
            ProtoClass::Tcp,
            &[(443, 443)],
        ));
    }
    let ingress = DirTable::new(1, entries).expect("ingress");
    let egress = DirTable::new(0, []).expect("egress");
    // Probes that end beyond their home line exist (else this test tests less).
    let beyond = keys
        .iter()
        .filter(|&&k| {
            let key = pack(0, PeerKind::Workload as u8, ProtoClass::Tcp as u8, k);
            ingress
                .line_allows(slot_home(key, ingress.shift), key, 80)
                .is_none()
        })
        .count();
    assert!(beyond > 0, "no probe leaves its home line");
    let ipc = IpCache::new(
        (0..=N).map(|i| (0x0a00_0000 + i, 32, i)).chain([(0, 0, 0)]),
        [],
    )
    .expect("ipcache");
    let t = PolicyTables::new(ipc, ids, 0, egress, ingress).expect("tables");
    let mut conns = Vec::new();
    for i in 0..N + 50 {
        for port in [80, 443, 1000, 1001, 1002, 22] {
            conns.push(Conn4 {
                src: 0x0a00_0000 + i,
                dst: 0x0a00_0000 + N,
                proto: 6,
                dst_port: port,
            });
        }
    }
    let mut out = vec![Verdict::Allow; conns.len()];
    t.verdicts_v4(&conns, &mut out);
    let mut allowed = 0;
    for (c, v) in conns.iter().zip(&out) {
        assert_eq!(*v, t.verdict_v4(c.src, c.dst, c.proto, c.dst_port), "{c:?}");
        allowed += usize::from(v.is_allow());
    }
    assert!(allowed > 1000 && allowed < conns.len() / 2, "{allowed}");
}

/// A random identity: peer keys from a small pool (or none), profiles, node facts.
fn arb_identity(eg: u32, ing: u32) -> impl Strategy<Value = IdentityEntry> {
    let key = || prop_oneof![1 => Just(NONE), 3 => 0u32..12];
    let profile = |n: u32| prop_oneof![1 => Just(NONE), 2 => 0..n];
    let node = || prop_oneof![2 => Just(NONE), 1 => 0u32..3];
    (
        [key(), key(), key(), key(), key()],
        profile(eg),
        profile(ing),
        node(),
        node(),
    )
        .prop_map(|(peer, egress, ingress, runs_on, node_of)| IdentityEntry {
            peer,
            egress,
            ingress,
            runs_on,
            node_of,
        })
}

/// Random entries of a table with `profiles` profiles: up to six ranges each around
/// a few ports, so that unions spill and ranges continue in `extra`.
fn arb_entries(profiles: u32) -> impl Strategy<Value = Vec<DirEntry>> {
    let range = (
        prop_oneof![Just(0u16), Just(53), Just(79), Just(443), 1000u16..1010],
        0u16..3,
    )
        .prop_map(|(lo, span)| PortRange {
            lo,
            hi: lo.saturating_add(span),
        });
    // Every port now and then: rules without ports, which the summary may answer.
    let range = prop_oneof![4 => range, 1 => Just(PortRange::ALL)];
    let entry = (
        0..profiles,
        0..PEER_KINDS,
        0u32..12,
        0..4usize,
        proptest::collection::vec(range, 1..6),
    )
        .prop_map(|(profile, kind, key, proto, ranges)| DirEntry {
            profile,
            kind: PeerKind::ALL[kind],
            key,
            proto: ProtoClass::ALL[proto],
            ranges,
        });
    proptest::collection::vec(entry, 0..40)
}

/// Random tables: 1-4 profiles per direction, up to 10 identities, IPv4 prefixes in
/// 10.0.0.0/24 and IPv6 ones in fd00::/120 (hosts and shorter), with or without a
/// default route.
fn arb_tables() -> impl Strategy<Value = PolicyTables> {
    (1u32..5, 1u32..5).prop_flat_map(|(pe, pi)| {
        (
            proptest::collection::vec(arb_identity(pe, pi), 1..10),
            arb_entries(pe),
            arb_entries(pi),
            proptest::collection::vec((0u32..256, 24u8..=32, 0u32..64), 0..12),
            proptest::collection::vec((0u128..256, 120u8..=128, 0u32..64), 0..12),
            any::<bool>(),
        )
            .prop_map(move |(ids, eg, ing, v4, v6, default_route)| {
                let n = ids.len() as u32;
                let mut v4: Vec<(u32, u8, u32)> = v4
                    .into_iter()
                    .map(|(a, l, v)| (0x0a00_0000 | a, l, v % n))
                    .collect();
                let mut v6: Vec<(u128, u8, u32)> = v6
                    .into_iter()
                    .map(|(a, l, v)| ((0xfd00u128 << 112) | a, l, v % n))
                    .collect();
                if default_route {
                    v4.push((0, 0, 0));
                    v6.push((0, 0, n - 1));
                }
                // Duplicates (after clearing host bits) are not a table's business.
                let host = |a: u128, l: u8, w: u32| {
                    let h = w - u32::from(l);
                    if h >= 128 {
                        0
                    } else {
                        (a >> h) << h
                    }
                };
                let mut seen = std::collections::BTreeSet::new();
                v4.retain(|&(a, l, _)| seen.insert((host(u128::from(a), l, 32), l)));
                seen.clear();
                v6.retain(|&(a, l, _)| seen.insert((host(a, l, 128), l)));
                let ipc = IpCache::new(v4, v6).expect("ipcache");
                let egress = DirTable::new(pe, eg).expect("egress");
                let ingress = DirTable::new(pi, ing).expect("ingress");
                PolicyTables::new(ipc, ids, 0, egress, ingress).expect("tables")
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The burst forms answer exactly like `verdict`, connection by connection, on
    /// random tables, in every family and in bursts of any length.
    #[test]
    fn random_bursts_match_single_verdicts(
        t in arb_tables(),
        raw in proptest::collection::vec(
            (0u32..300, 0u32..300, 0..5usize, prop_oneof![Just(0u16), Just(53), Just(80), Just(443), Just(1001), any::<u16>()]),
            0..100,
        ),
    ) {
        let proto = |i: usize| [6u8, 17, 132, 1, 47][i];
        let c4: Vec<Conn4> = raw.iter().map(|&(s, d, p, port)| Conn4 {
            src: 0x0a00_0000 + s,
            dst: 0x0a00_0000 + d,
            proto: proto(p),
            dst_port: port,
        }).collect();
        let c6: Vec<Conn6> = raw.iter().map(|&(s, d, p, port)| Conn6 {
            src: (0xfd00u128 << 112) + u128::from(s),
            dst: (0xfd00u128 << 112) + u128::from(d),
            proto: proto(p),
            dst_port: port,
        }).collect();
        // Mixed: alternate the families per connection (and mix them inside one).
        let mixed: Vec<Conn> = c4.iter().zip(&c6).enumerate().map(|(i, (a, b))| {
            let v4 = |x: u32| IpAddr::V4(x.into());
            let v6 = |x: u128| IpAddr::V6(x.into());
            let (src, dst) = match i % 3 {
                0 => (v4(a.src), v4(a.dst)),
                1 => (v6(b.src), v6(b.dst)),
                _ => (v4(a.src), v6(b.dst)),
            };
            Conn { src, dst, proto: a.proto, dst_port: a.dst_port }
        }).collect();
        let mut out = vec![Verdict::Allow; raw.len()];
        t.verdicts_v4(&c4, &mut out);
        for (c, v) in c4.iter().zip(&out) {
            prop_assert_eq!(*v, t.verdict_v4(c.src, c.dst, c.proto, c.dst_port), "{:?}", c);
        }
        t.verdicts_v6(&c6, &mut out);
        for (c, v) in c6.iter().zip(&out) {
            prop_assert_eq!(*v, t.verdict_v6(c.src, c.dst, c.proto, c.dst_port), "{:?}", c);
        }
        t.verdicts(&mixed, &mut out);
        for (c, v) in mixed.iter().zip(&out) {
            prop_assert_eq!(*v, t.verdict(c.src, c.dst, c.proto, c.dst_port), "{:?}", c);
            // And `verdict` is the scalar check, which `decide` reports per direction.
            prop_assert_eq!(*v, t.decide(c.src, c.dst, c.proto, c.dst_port).verdict());
        }
    }
}

/// What [`DirTable::check`] must answer, straight from the entries.
fn naive_check(
    entries: &[DirEntry],
    profile: u32,
    peer: &[u32; PEER_KINDS],
    proto: ProtoClass,
    port: u16,
) -> DirOutcome {
    let mine: Vec<&DirEntry> = entries
        .iter()
        .filter(|e| e.profile == profile && e.ranges.iter().any(|r| r.lo <= r.hi))
        .collect();
    if mine.is_empty() {
        return DirOutcome::Denied(DenyReason::NoRules);
    }
    let fits = |e: &&&DirEntry| e.proto == proto && e.ranges.iter().any(|r| r.contains(port));
    if !mine.iter().any(|e| fits(&e)) {
        return DirOutcome::Denied(DenyReason::PortNotAllowed);
    }
    if mine
        .iter()
        .any(|e| fits(&e) && peer[e.kind as usize] == e.key)
    {
        DirOutcome::Allowed
    } else {
        DirOutcome::Denied(DenyReason::NoMatchingPeer)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// `check` answers what the entries say, whatever the summary answers inline.
    #[test]
    fn checks_match_the_entries(
        profiles in 1u32..4,
        entries in arb_entries(3),
        probes in proptest::collection::vec(
            (
                0u32..4,
                proptest::collection::vec(prop_oneof![0u32..12, Just(NONE)], PEER_KINDS),
                0..4usize,
                prop_oneof![Just(0u16), Just(53), Just(80), Just(443), Just(1001), any::<u16>()],
            ),
            1..50,
        ),
    ) {
        let entries: Vec<DirEntry> =
            entries.into_iter().filter(|e| e.profile < profiles).collect();
        let t = DirTable::new(profiles, entries.clone()).expect("table");
        for (profile, peer, proto, port) in probes {
            let peer: [u32; PEER_KINDS] = [peer[0], peer[1], peer[2], peer[3], peer[4]];
            let proto = ProtoClass::ALL[proto];
            let profile = profile.min(profiles - 1);
            prop_assert_eq!(
                t.check(profile, &peer, proto, port),
                naive_check(&entries, profile, &peer, proto, port),
                "profile {} peer {:?} {:?} port {}", profile, peer, proto, port
            );
        }
    }
}

#[test]
fn merge_coalesces_adjacent_and_overlapping() {
    let mut r = vec![
        PortRange { lo: 10, hi: 20 },
        PortRange { lo: 21, hi: 25 },
        PortRange { lo: 5, hi: 12 },
        PortRange { lo: 100, hi: 100 },
        PortRange {
            lo: 65535,
            hi: 65535,
        },
        PortRange { lo: 0, hi: 0 },
    ];
    merge_ranges(&mut r);
    assert_eq!(
        r,
        vec![
            PortRange { lo: 0, hi: 0 },
            PortRange { lo: 5, hi: 25 },
            PortRange { lo: 100, hi: 100 },
            PortRange {
                lo: 65535,
                hi: 65535
            },
        ]
    );
}

#[test]
fn many_ranges_are_scanned_in_order() {
    let ranges: Vec<(u16, u16)> = (0..50).map(|i| (i * 100, i * 100 + 9)).collect();
    let t = DirTable::new(1, [entry(0, PeerKind::Any, 1, ProtoClass::Udp, &ranges)]).expect("t");
    let peer = [NONE, NONE, NONE, NONE, 1];
    for p in 0..6000u16 {
        let want = p < 5000 && p % 100 < 10;
        assert_eq!(
            t.check(0, &peer, ProtoClass::Udp, p).allows(),
            want,
            "port {p}"
        );
    }
    assert!(!t.check(0, &peer, ProtoClass::Tcp, 0).allows());
}
