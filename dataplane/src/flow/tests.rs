use std::collections::HashMap;
use std::net::SocketAddr;

use proptest::prelude::*;

use super::entry::{WideAddrs, NIL};
use super::table::{EMPTY_SLOT, REFILE_HORIZON, SLOTS_PER_FLOW};
use super::tuple::mapped;
use super::*;

fn sa(s: &str) -> SocketAddr {
    s.parse().expect("addr")
}

/// A FullNAT flow: client -> VIP, backend -> SNAT.
fn nat(client: &str, vip: &str, backend: &str, snat: &str, proto: u8) -> (Tuple, Tuple) {
    (
        Tuple::new(sa(client), sa(vip), proto),
        Tuple::new(sa(backend), sa(snat), proto),
    )
}

const SYN: TcpFlags = TcpFlags(TcpFlags::SYN);
const SYNACK: TcpFlags = TcpFlags(TcpFlags::SYN | TcpFlags::ACK);
const ACK: TcpFlags = TcpFlags(TcpFlags::ACK);
const FINACK: TcpFlags = TcpFlags(TcpFlags::FIN | TcpFlags::ACK);
const RST: TcpFlags = TcpFlags(TcpFlags::RST);

#[test]
fn syn_flags() {
    assert!(SYN.is_syn_only());
    assert!(!SYNACK.is_syn_only());
    assert!(!TcpFlags(TcpFlags::SYN | TcpFlags::RST).is_syn_only());
    // A retransmitted SYN keeps SYN_SENT; the backend's SYN-ACK moves on.
    assert_eq!(TcpState::SynSent.on_tcp(Dir::Orig, SYN), TcpState::SynSent);
    assert_eq!(
        TcpState::SynSent.on_tcp(Dir::Reply, SYNACK),
        TcpState::SynRecv
    );
}

#[test]
fn a_flow_is_one_cache_line_and_a_wide_record_half_of_one() {
    assert_eq!(std::mem::size_of::<Flow>(), 64);
    assert_eq!(std::mem::align_of::<Flow>(), 64);
    assert_eq!(std::mem::size_of::<WideAddrs>(), 32);
    assert_eq!(std::mem::align_of::<WideAddrs>(), 32);
    assert_eq!(std::mem::size_of::<Splice>(), 6);
}

/// Checks every structural invariant of the table: the index holds exactly the two keys
/// of every live flow, each reachable from its home slot through a gap-free run with
/// the right tag; every entry is on exactly one list (a wheel slot's or the free list);
/// free entries are dead; live entries are on the wheel.
fn check(t: &FlowTable) {
    let len = t.index.len();
    assert_eq!(len, t.capacity() * SLOTS_PER_FLOW);
    let mut keys = 0;
    for (i, &v) in t.index.iter().enumerate() {
        if v == EMPTY_SLOT {
            continue;
        }
        keys += 1;
        let (id, dir, key) = t.slot_tuple(v);
        assert!(
            t.flows[id as usize].live(),
            "slot {i}: dead flow {id} indexed"
        );
        let h = t.hash(&key);
        assert_eq!(v >> 32, FlowTable::tag(h), "slot {i}: tag");
        let home = t.home(h);
        assert!(home < len);
        let mut k = home;
        while k != i {
            assert_ne!(
                t.index[k], EMPTY_SLOT,
                "slot {i}: gap at {k} after home {home}"
            );
            k = t.next_slot(k);
        }
        assert_eq!(t.find(&key), Some((FlowId(id), dir)), "slot {i}");
    }
    assert_eq!(keys, 2 * t.len(), "two keys per live flow");
    // Lists: each entry exactly once.
    let mut seen = vec![0u8; t.capacity()];
    let mut on_wheel_live = 0;
    for &head in t.wheel.iter() {
        let mut id = head;
        while id != NIL {
            seen[id as usize] += 1;
            assert_eq!(seen[id as usize], 1, "entry {id} on two lists (or a loop)");
            on_wheel_live += usize::from(t.flows[id as usize].live());
            id = t.flows[id as usize].next();
        }
    }
    let mut id = t.free;
    while id != NIL {
        seen[id as usize] += 1;
        assert_eq!(
            seen[id as usize], 1,
            "free entry {id} also elsewhere (or a loop)"
        );
        assert!(
            !t.flows[id as usize].live(),
            "live entry {id} on the free list"
        );
        id = t.flows[id as usize].next();
    }
    assert!(seen.iter().all(|&n| n == 1), "an entry is on no list");
    assert_eq!(on_wheel_live, t.len());
    assert_eq!(t.iter().count(), t.len());
}

/// Flow `k` of a family of distinct UDP flows (FullNAT), in turn all IPv4 (narrow
/// entries), IPv4 to an IPv6 backend and all IPv6 (wide entries).
fn flow_k(k: u32) -> (Tuple, Tuple) {
    let (a, b) = ((k >> 8) as u8, k as u8);
    let (hi, lo) = (k >> 16, k & 0xffff);
    match k % 3 {
        0 => nat(
            &format!("10.{}.{a}.{b}:{}", k % 7, 1024 + k % 50_000),
            "2.2.2.2:53",
            &format!("10.78.{}.{}:53", (k % 65_000) >> 8, (k % 65_000) & 0xff),
            &format!("10.79.{}.{}:{}", hi as u8, k >> 24, k as u16),
            17,
        ),
        1 => nat(
            &format!("10.{}.{a}.{b}:{}", k % 7, 1024 + k % 50_000),
            "2.2.2.2:53",
            &format!("[fd00::{:x}]:53", k % 65_000),
            &format!("[fd00::1:{hi:x}]:{}", k as u16),
            17,
        ),
        _ => nat(
            &format!("[fd01::{hi:x}:{lo:x}]:{}", 1024 + k % 50_000),
            "[fd02::53]:53",
            &format!("[fd00::{:x}]:53", k % 65_000),
            &format!("[fd00::1:{hi:x}]:{}", k as u16),
            17,
        ),
    }
}

/// The IPv4 path of the table agrees with the general one: a [`Tuple4`] hashes and
/// finds what its IPv4-mapped [`Tuple`] does, and an IPv6 tuple has no IPv4 form.
fn assert_v4_path_agrees(t: &FlowTable, tu: &Tuple, now: u32) {
    match tu.to_v4() {
        Some(k) => {
            assert_eq!(k.to_tuple(), *tu);
            assert_eq!(t.hash4(&k), t.hash(tu));
            assert_eq!(
                t.lookup4_hashed(&k, t.hash4(&k), now),
                t.lookup(tu, now),
                "{tu:?}"
            );
        }
        None => assert!(tu.src[..12] != mapped(0)[..12] || tu.dst[..12] != mapped(0)[..12]),
    }
}

#[test]
fn ipv4_flows_are_narrow_and_the_others_wide_and_all_round_trip() {
    let mut t = FlowTable::new(64, Timeouts::default(), 0, 11);
    for k in 0..30u32 {
        let (o, r) = flow_k(k);
        let id = t.insert(o, r, TcpState::SynSent, 1, 0).expect("insert");
        let f = t.get(id);
        assert_eq!(f.is_wide(), k % 3 != 0, "flow {k}");
        assert_eq!(f.tuple4(Dir::Orig).is_some(), k % 3 == 0);
        assert_eq!((f.orig(), f.reply()), (o, r), "flow {k}");
        assert_eq!(f.rewrite(Dir::Orig), (r.destination(), r.source()));
        assert_eq!(f.rewrite(Dir::Reply), (o.destination(), o.source()));
        assert_eq!(f.backend(), r.source());
        if let Some(k4) = f.tuple4(Dir::Reply) {
            assert_eq!(k4.to_tuple(), r);
        }
        for (tu, dir) in [(o, Dir::Orig), (r, Dir::Reply)] {
            assert_eq!(t.lookup(&tu, 0), Some((id, dir)), "flow {k}");
            assert_v4_path_agrees(&t, &tu, 0);
            assert_eq!(t.lookup(&tu.reversed(), 0), None);
            assert_v4_path_agrees(&t, &tu.reversed(), 0);
        }
    }
    check(&t);
    // The same addresses under the other protocol, or one port off, are other flows.
    let (o, _) = flow_k(0);
    let k = o.to_v4().expect("IPv4");
    let other_proto = Tuple4 { proto: 6, ..k };
    assert_eq!(
        t.lookup4_hashed(&other_proto, t.hash4(&other_proto), 0),
        None
    );
    let other_port = Tuple4 {
        sport: k.sport + 1,
        ..k
    };
    assert_eq!(t.lookup4_hashed(&other_port, t.hash4(&other_port), 0), None);
    // The entry's own comparison (a lookup reaches it only on a tag match).
    let (id, _) = t.lookup(&o, 0).expect("flow 0");
    let f = &t.flows[id.0 as usize];
    assert!(f.narrow_matches(Dir::Orig, &k));
    assert!(!f.narrow_matches(Dir::Reply, &k));
    assert!(!f.narrow_matches(Dir::Orig, &other_proto));
    assert!(!f.narrow_matches(Dir::Orig, &other_port));
    let swapped = Tuple4 {
        src: k.dst,
        dst: k.src,
        ..k
    };
    assert!(!f.narrow_matches(Dir::Orig, &swapped));
    // A wide entry never matches narrowly (its IPv4 keys go through the mapped form).
    let (o1, _) = flow_k(1);
    let (id1, _) = t.lookup(&o1, 0).expect("flow 1");
    let k1 = o1.to_v4().expect("IPv4 client side");
    assert!(!t.flows[id1.0 as usize].narrow_matches(Dir::Orig, &k1));
    assert!(t.key4_matches(id1.0, Dir::Orig, &k1));
}

#[test]
fn rekeying_moves_a_flow_between_the_narrow_and_the_wide_form() {
    let to = Timeouts::default();
    let mut t = FlowTable::new(8, to, 0, 13);
    let client = Tuple::new(sa("198.51.100.7:40000"), sa("10.77.0.10:443"), 6);
    let id = t
        .insert(client, client.reversed(), TcpState::SynRecv, 1, 0)
        .expect("insert");
    assert!(!t.get(id).is_wide());
    let v6 = Tuple::new(sa("[fd78::11]:8443"), sa("[fd78::2]:2000"), 6);
    t.rekey_reply(id, v6, TcpState::SynSent, 1, |_| true)
        .expect("to wide");
    check(&t);
    assert!(t.get(id).is_wide());
    assert_eq!((t.get(id).orig(), t.get(id).reply()), (client, v6));
    assert_eq!(t.lookup(&client, 1), Some((id, Dir::Orig)));
    assert_v4_path_agrees(&t, &client, 1);
    assert_eq!(t.lookup(&v6, 1), Some((id, Dir::Reply)));
    assert_eq!(t.lookup(&client.reversed(), 1), None);
    let v4 = Tuple::new(sa("10.78.0.11:8443"), sa("10.78.0.2:2000"), 6);
    t.rekey_reply(id, v4, TcpState::SynSent, 2, |_| true)
        .expect("to narrow");
    check(&t);
    assert!(!t.get(id).is_wide());
    assert_eq!((t.get(id).orig(), t.get(id).reply()), (client, v4));
    assert_eq!(t.lookup(&v6, 2), None);
    assert_eq!(t.lookup(&v4, 2), Some((id, Dir::Reply)));
    assert_v4_path_agrees(&t, &v4, 2);
    t.remove(id);
    check(&t);
    assert_eq!(t.lookup(&client, 2), None);
}

proptest! {
    /// Any IPv4 tuple: its IPv4 form and its mapped form hash alike and convert back.
    #[test]
    fn tuple4_is_the_mapped_tuple(src in any::<u32>(), dst in any::<u32>(), sport in any::<u16>(), dport in any::<u16>(), proto in any::<u8>(), seed in any::<u64>()) {
        let k = Tuple4 { src, dst, sport, dport, proto };
        let tu = k.to_tuple();
        prop_assert_eq!(tu.to_v4(), Some(k));
        prop_assert_eq!(k.hash(seed), tu.hash(seed));
        let t6 = Tuple { src: [0xfd; 16], ..tu };
        prop_assert_eq!(t6.to_v4(), None);
    }
}

#[test]
fn memory_is_at_most_128_bytes_a_flow_at_every_capacity() {
    let mut worst = (0.0f64, 0);
    for cap in (1..=2000).chain([4093, 65_535, 65_537, 100_000, 131_071, 1 << 17]) {
        let t = FlowTable::new(cap, Timeouts::default(), 0, 1);
        assert_eq!(t.capacity(), cap);
        let per = t.memory_bytes() as f64 / cap as f64;
        assert!(
            t.memory_bytes() <= 128 * cap,
            "capacity {cap}: {per} bytes a flow"
        );
        if per > worst.0 {
            worst = (per, cap);
        }
    }
    // 64-byte entry, 32-byte wide record, 3 slots of 8 bytes, and the wheel (128 slots of
    // 4 bytes from 128 flows).
    let t = FlowTable::new(1000, Timeouts::default(), 0, 1);
    assert_eq!(t.memory_bytes(), 1000 * (64 + 32 + 24) + 512);
    let t = FlowTable::new(100_000, Timeouts::default(), 0, 1);
    assert_eq!(t.memory_bytes(), 100_000 * (64 + 32 + 24) + 512);
    assert!(worst.0 <= 128.0, "{worst:?}");
}

/// Fills a table of a non-power-of-two capacity, checks every flow in both directions,
/// refuses one more, removes every other flow, recycles and fills again.
fn fill_and_churn(cap: usize, checked: bool) {
    let to = Timeouts {
        udp_unreplied: 1000,
        ..Timeouts::default()
    };
    let mut t = FlowTable::new(cap, to, 0, 0x5eed ^ cap as u64);
    let mut ids = Vec::with_capacity(cap);
    for k in 0..cap as u32 {
        let (o, r) = flow_k(k);
        ids.push(t.insert(o, r, TcpState::UdpUnreplied, 1, 0).expect("room"));
    }
    assert_eq!(t.len(), cap);
    let (o, r) = flow_k(cap as u32);
    assert_eq!(
        t.insert(o, r, TcpState::UdpUnreplied, 1, 0),
        Err(InsertError::Full)
    );
    for (k, id) in ids.iter().enumerate() {
        let (o, r) = flow_k(k as u32);
        assert_eq!(t.lookup(&o, 0), Some((*id, Dir::Orig)), "flow {k}");
        assert_eq!(t.lookup(&r, 0), Some((*id, Dir::Reply)), "flow {k}");
        assert_eq!(t.lookup(&o.reversed(), 0), None);
    }
    if checked {
        check(&t);
    }
    for (k, id) in ids.iter().enumerate().step_by(2) {
        t.remove(*id);
        let (o, r) = flow_k(k as u32);
        assert_eq!(t.lookup(&o, 0), None);
        assert_eq!(t.lookup(&r, 0), None);
    }
    assert_eq!(t.len(), cap / 2);
    for (k, id) in ids.iter().enumerate().skip(1).step_by(2) {
        let (o, r) = flow_k(k as u32);
        assert_eq!(t.lookup(&o, 0), Some((*id, Dir::Orig)), "flow {k} kept");
        assert_eq!(t.lookup(&r, 0), Some((*id, Dir::Reply)), "flow {k} kept");
    }
    if checked {
        check(&t);
    }
    // Removed entries come back once the wheel has passed them; fill up again.
    t.expire(REFILE_HORIZON + 1, |_| {});
    for k in (0..cap as u32).step_by(2) {
        let (o, r) = flow_k(k + cap as u32 + 1);
        t.insert(o, r, TcpState::UdpUnreplied, 1, REFILE_HORIZON + 1)
            .expect("recycled");
    }
    assert_eq!(t.len(), cap);
    if checked {
        check(&t);
    }
}

#[test]
fn non_power_of_two_capacities() {
    for cap in [1, 2, 3, 5, 7, 1000] {
        fill_and_churn(cap, true);
    }
    fill_and_churn(100_000, false);
}

/// Flows both of whose keys have their home in `slot` of a table like `t`.
fn flows_homed_at(t: &FlowTable, slot: usize, n: usize) -> Vec<(Tuple, Tuple)> {
    (0..1_000_000u32)
        .map(flow_k)
        .filter(|(o, r)| t.home(t.hash(o)) == slot && t.home(t.hash(r)) == slot)
        .take(n)
        .collect()
}

#[test]
fn probe_runs_wrap_at_the_end_of_the_index_and_deletion_shifts_across_the_wrap() {
    // Capacity 3: 9 slots. Two flows whose four keys all have their home in the last
    // slot fill slots 8, 0, 1, 2.
    let mut t = FlowTable::new(3, Timeouts::default(), 0, 42);
    let last = t.index.len() - 1;
    assert_eq!(last, 8);
    let two = flows_homed_at(&t, last, 2);
    assert_eq!(two.len(), 2);
    let a = t
        .insert(two[0].0, two[0].1, TcpState::UdpUnreplied, 1, 0)
        .expect("a");
    let b = t
        .insert(two[1].0, two[1].1, TcpState::UdpUnreplied, 1, 0)
        .expect("b");
    for s in [last, 0, 1, 2] {
        assert_ne!(t.index[s], EMPTY_SLOT, "slot {s}");
    }
    assert_eq!(t.lookup(&two[1].1, 0), Some((b, Dir::Reply)));
    check(&t);
    // A third flow whose keys have their home in slot 1 lands behind the wrapped run.
    let homed_1 = flows_homed_at(&t, 1, 1);
    let c = t
        .insert(homed_1[0].0, homed_1[0].1, TcpState::UdpUnreplied, 1, 0)
        .expect("c");
    check(&t);
    // Removing the first flow (slots 8 and 0) pulls b's keys back across the wrap; c's
    // keys (home 1) may move back to slot 1 but never before it.
    t.remove(a);
    check(&t);
    assert_ne!(t.index[last], EMPTY_SLOT);
    assert_ne!(t.index[0], EMPTY_SLOT);
    assert_eq!(t.lookup(&two[1].0, 0), Some((b, Dir::Orig)));
    assert_eq!(t.lookup(&two[1].1, 0), Some((b, Dir::Reply)));
    assert_eq!(t.lookup(&homed_1[0].0, 0), Some((c, Dir::Orig)));
    assert_eq!(t.lookup(&homed_1[0].1, 0), Some((c, Dir::Reply)));
    assert_eq!(t.lookup(&two[0].0, 0), None);
    assert_eq!(t.index.iter().filter(|&&v| v != EMPTY_SLOT).count(), 4);
    t.remove(b);
    check(&t);
    // c's keys now sit in slots 1 and 2, the slots before them empty.
    assert_eq!(t.index[last], EMPTY_SLOT);
    assert_eq!(t.index[0], EMPTY_SLOT);
    assert_ne!(t.index[1], EMPTY_SLOT);
    assert_ne!(t.index[2], EMPTY_SLOT);
    t.remove(c);
    check(&t);
    assert!(t.index.iter().all(|&v| v == EMPTY_SLOT));
}

#[test]
fn hashed_lookup_and_prefetch() {
    let mut t = FlowTable::new(1000, Timeouts::default(), 0, 3);
    let mut ids = Vec::new();
    for k in 0..500 {
        let (o, r) = flow_k(k);
        ids.push(
            t.insert(o, r, TcpState::UdpUnreplied, 1, 0)
                .expect("insert"),
        );
    }
    for k in 0..600u32 {
        let (o, r) = flow_k(k);
        for (tu, dir) in [(o, Dir::Orig), (r, Dir::Reply)] {
            let h = t.hash(&tu);
            t.prefetch(h);
            let found = t.lookup_hashed(&tu, h, 0);
            assert_eq!(found, t.lookup(&tu, 0));
            assert_eq!(found, ids.get(k as usize).map(|id| (*id, dir)));
            if let Some((id, _)) = found {
                t.prefetch_flow(id);
            }
        }
    }
    // Any hash maps into the index (the ends of the range included).
    for h in [0, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX] {
        assert!(t.home(h) < t.index.len());
        t.prefetch(h);
    }
    assert_eq!(t.home(u64::MAX), t.index.len() - 1);
    crate::mem::prefetch_read(&[0u8; 300]);
}

#[test]
fn the_smallest_tables_still_expire_and_recycle() {
    let to = Timeouts::default();
    let mut t = FlowTable::new(1, to, 0, 5);
    assert_eq!(t.wheel.len(), 1);
    let (o, r) = flow_k(1);
    let id = t
        .insert(o, r, TcpState::UdpUnreplied, 1, 0)
        .expect("insert");
    let (o2, r2) = flow_k(2);
    assert_eq!(
        t.insert(o2, r2, TcpState::UdpUnreplied, 1, 0),
        Err(InsertError::Full)
    );
    // Touched every 10 s for 5 minutes: stays.
    let mut now = 0;
    while now < 300 {
        now += 10;
        t.on_packet(id, Dir::Reply, None, now);
        assert_eq!(t.expire(now, |_| {}), 0);
        check(&t);
    }
    assert_eq!(t.expire(now + to.udp_replied, |_| {}), 1);
    check(&t);
    assert!(t.is_empty());
    let now = now + to.udp_replied;
    let id = t
        .insert(o2, r2, TcpState::UdpUnreplied, 1, now)
        .expect("recycled");
    t.remove(id);
    check(&t);
    t.expire(now + 2, |_| {});
    check(&t);
    t.insert(o, r, TcpState::UdpUnreplied, 1, now + 2)
        .expect("recycled after removal");
    check(&t);
}

/// Delayed binding: the client's connection is tracked from sluice's handshake (reply =
/// the client tuple reversed), then gets its backend side in the same entry.
#[test]
fn rekeying_the_reply_keeps_the_entry() {
    let to = Timeouts::default();
    // One entry: a connection must not need a second one to get its backend.
    let mut t = FlowTable::new(1, to, 0, 9);
    let client = Tuple::new(sa("198.51.100.7:40000"), sa("10.77.0.10:443"), 6);
    let id = t
        .insert(client, client.reversed(), TcpState::SynRecv, 1, 0)
        .expect("insert");
    let (_, backend) = nat(
        "198.51.100.7:40000",
        "10.77.0.10:443",
        "10.78.0.11:8443",
        "10.78.0.2:2000",
        6,
    );
    t.rekey_reply(id, backend, TcpState::SynSent, 1, |_| true)
        .expect("rekey");
    check(&t);
    assert_eq!(t.len(), 1);
    assert_eq!(t.lookup(&client, 1), Some((id, Dir::Orig)));
    assert_eq!(t.lookup(&backend, 1), Some((id, Dir::Reply)));
    assert_eq!(t.lookup(&client.reversed(), 1), None);
    assert_eq!(t.get(id).state, TcpState::SynSent);
    assert_eq!(t.get(id).expires(), 1 + to.tcp_syn_sent);
    // Failover: another backend, and the same tuple again (only the state changes).
    let (_, other) = nat(
        "1.1.1.1:1",
        "2.2.2.2:2",
        "10.78.0.12:8443",
        "10.78.0.2:2001",
        6,
    );
    t.rekey_reply(id, other, TcpState::SynSent, 2, |_| true)
        .expect("rekey");
    t.rekey_reply(id, other, TcpState::SynSent, 2, |_| true)
        .expect("same");
    check(&t);
    assert_eq!(t.lookup(&backend, 2), None);
    assert_eq!(t.lookup(&other, 2), Some((id, Dir::Reply)));
    // Its own original tuple, or a tuple another live flow holds: refused, unchanged.
    assert_eq!(
        t.rekey_reply(id, client, TcpState::SynSent, 2, |_| true),
        Err(InsertError::Exists)
    );
    let mut t2 = FlowTable::new(4, to, 0, 9);
    let a = t2
        .insert(client, client.reversed(), TcpState::SynRecv, 1, 0)
        .expect("a");
    let (bo, br) = flow_k(3);
    let b = t2.insert(bo, br, TcpState::SynSent, 1, 0).expect("b");
    assert_eq!(
        t2.rekey_reply(a, br, TcpState::SynSent, 1, |_| true),
        Err(InsertError::Exists)
    );
    assert_eq!(t2.lookup(&client.reversed(), 1), Some((a, Dir::Reply)));
    // Once `b` has expired (not yet reaped by the wheel), its tuple can be taken.
    let late = 1 + to.tcp_syn_sent;
    t2.rekey_reply(a, br, TcpState::SynSent, late, |_| true)
        .expect("expired holder reaped");
    check(&t2);
    assert_eq!(t2.len(), 1);
    assert_eq!(t2.lookup(&br, late), Some((a, Dir::Reply)));
    assert_ne!(a, b);
    // The single entry of `t` still expires and comes back.
    let gone = t.expire(2 + to.tcp_syn_sent + 64, |_| {});
    assert_eq!(gone, 1);
    check(&t);
    t.insert(
        client,
        client.reversed(),
        TcpState::SynRecv,
        1,
        2 + to.tcp_syn_sent + 64,
    )
    .expect("recycled");
}

#[test]
fn both_directions_find_the_flow_and_rewrite() {
    let mut t = FlowTable::new(16, Timeouts::default(), 0, 7);
    let (o, r) = nat(
        "198.51.100.7:40000",
        "10.77.0.10:7000",
        "10.78.0.11:7000",
        "10.78.0.2:61000",
        6,
    );
    let id = t.insert(o, r, TcpState::SynSent, 1, 0).expect("insert");
    assert_eq!(t.lookup(&o, 0), Some((id, Dir::Orig)));
    assert_eq!(t.lookup(&r, 0), Some((id, Dir::Reply)));
    assert_eq!(t.lookup(&o.reversed(), 0), None);
    let f = t.get(id);
    assert_eq!(
        f.rewrite(Dir::Orig),
        (sa("10.78.0.2:61000"), sa("10.78.0.11:7000"))
    );
    assert_eq!(
        f.rewrite(Dir::Reply),
        (sa("10.77.0.10:7000"), sa("198.51.100.7:40000"))
    );
    assert_eq!(f.backend(), sa("10.78.0.11:7000"));
    assert_eq!(
        t.insert(o, r, TcpState::SynSent, 1, 0),
        Err(InsertError::Exists)
    );
}

#[test]
fn ipv6_tuples_round_trip() {
    let tu = Tuple::new(sa("[fd77::1]:1234"), sa("[fd77::10]:443"), 6);
    assert_eq!(tu.source(), sa("[fd77::1]:1234"));
    assert_eq!(tu.destination(), sa("[fd77::10]:443"));
    let v4 = Tuple::new(sa("1.2.3.4:5"), sa("5.6.7.8:9"), 17);
    assert_eq!(v4.source(), sa("1.2.3.4:5"));
}

#[test]
fn tcp_lifecycle_and_timeouts() {
    let to = Timeouts::default();
    let mut t = FlowTable::new(4, to, 0, 1);
    let (o, r) = nat(
        "1.1.1.1:1000",
        "2.2.2.2:80",
        "3.3.3.3:80",
        "4.4.4.4:2000",
        6,
    );
    let id = t.insert(o, r, TcpState::SynSent, 1, 0).expect("insert");
    assert_eq!(
        t.on_packet(id, Dir::Reply, Some(SYNACK), 1),
        TcpState::SynRecv
    );
    assert_eq!(
        t.on_packet(id, Dir::Orig, Some(ACK), 1),
        TcpState::Established
    );
    assert_eq!(t.get(id).expires(), 1 + to.tcp_established);
    assert_eq!(
        t.on_packet(id, Dir::Orig, Some(FINACK), 2),
        TcpState::FinWait
    );
    assert_eq!(
        t.on_packet(id, Dir::Reply, Some(FINACK), 2),
        TcpState::LastAck
    );
    assert_eq!(t.on_packet(id, Dir::Orig, Some(ACK), 3), TcpState::TimeWait);
    assert_eq!(t.get(id).expires(), 3 + to.tcp_time_wait);
    // TIME_WAIT lasts its timeout, then the flow goes.
    assert_eq!(t.expire(3 + to.tcp_time_wait - 1, |_| {}), 0);
    assert_eq!(t.len(), 1);
    let mut gone = Vec::new();
    assert_eq!(
        t.expire(3 + to.tcp_time_wait + 1, |f| gone.push(f.orig())),
        1
    );
    assert_eq!(gone, [o]);
    assert_eq!(t.lookup(&o, 0), None);
    assert_eq!(t.lookup(&r, 0), None);
    assert!(t.is_empty());
}

#[test]
fn rst_closes_quickly_and_backend_fin_first_works() {
    let to = Timeouts::default();
    let mut t = FlowTable::new(4, to, 0, 1);
    let (o, r) = nat(
        "1.1.1.1:1000",
        "2.2.2.2:80",
        "3.3.3.3:80",
        "4.4.4.4:2000",
        6,
    );
    let id = t.insert(o, r, TcpState::SynSent, 1, 0).expect("insert");
    t.on_packet(id, Dir::Reply, Some(SYNACK), 0);
    t.on_packet(id, Dir::Orig, Some(ACK), 0);
    assert_eq!(
        t.on_packet(id, Dir::Reply, Some(FINACK), 0),
        TcpState::CloseWait
    );
    assert_eq!(
        t.on_packet(id, Dir::Orig, Some(FINACK), 0),
        TcpState::LastAck
    );
    assert_eq!(t.on_packet(id, Dir::Reply, Some(RST), 5), TcpState::Close);
    assert_eq!(t.get(id).expires(), 5 + to.tcp_close);
    // Exact at lookup: matches during CLOSE, not after.
    assert_eq!(t.lookup(&o, 5 + to.tcp_close - 1), Some((id, Dir::Orig)));
    assert_eq!(t.lookup(&o, 5 + to.tcp_close), None);
    // The tuples can be reused at once; the wheel reaps the old entry.
    let id2 = t
        .insert(o, r, TcpState::SynSent, 2, 5 + to.tcp_close)
        .expect("reuse");
    assert_eq!(t.lookup(&r, 5 + to.tcp_close), Some((id2, Dir::Reply)));
    assert_eq!(t.len(), 1);
}

#[test]
fn udp_replied_gets_the_longer_timeout() {
    let to = Timeouts::default();
    let mut t = FlowTable::new(4, to, 0, 1);
    let (o, r) = nat(
        "1.1.1.1:53000",
        "2.2.2.2:53",
        "3.3.3.3:53",
        "4.4.4.4:2000",
        17,
    );
    let id = t
        .insert(o, r, TcpState::UdpUnreplied, 1, 0)
        .expect("insert");
    assert_eq!(t.get(id).expires(), to.udp_unreplied);
    assert_eq!(t.on_packet(id, Dir::Reply, None, 10), TcpState::UdpReplied);
    assert_eq!(t.get(id).expires(), 10 + to.udp_replied);
    assert_eq!(
        t.expire(to.udp_unreplied + 5, |_| {}),
        0,
        "refreshed by the reply"
    );
    assert_eq!(t.expire(10 + to.udp_replied + 1, |_| {}), 1);
}

#[test]
fn full_table_refuses_new_flows_and_keeps_old_ones() {
    let mut t = FlowTable::new(3, Timeouts::default(), 0, 1);
    let mut ids = Vec::new();
    for i in 0..3u16 {
        let (o, r) = nat(
            &format!("1.1.1.1:{}", 1000 + i),
            "2.2.2.2:80",
            "3.3.3.3:80",
            &format!("4.4.4.4:{}", 2000 + i),
            6,
        );
        ids.push((t.insert(o, r, TcpState::SynSent, 1, 0).expect("insert"), o));
    }
    let (o, r) = nat(
        "1.1.1.1:9999",
        "2.2.2.2:80",
        "3.3.3.3:80",
        "4.4.4.4:9999",
        6,
    );
    assert_eq!(
        t.insert(o, r, TcpState::SynSent, 1, 0),
        Err(InsertError::Full)
    );
    assert_eq!(t.stats().full, 1);
    for (id, o) in &ids {
        assert_eq!(t.lookup(o, 0), Some((*id, Dir::Orig)));
    }
    // A removed flow stops matching at once; its entry comes back within a minute.
    t.remove(ids[0].0);
    assert_eq!(t.lookup(&ids[0].1, 0), None);
    assert_eq!(t.len(), 2);
    t.expire(REFILE_HORIZON + 1, |_| {});
    assert!(t
        .insert(o, r, TcpState::SynSent, 1, REFILE_HORIZON + 1)
        .is_ok());
}

#[test]
fn long_timeouts_survive_many_wheel_turns() {
    let to = Timeouts::default();
    let mut t = FlowTable::new(4, to, 0, 1);
    let (o, r) = nat(
        "1.1.1.1:1000",
        "2.2.2.2:80",
        "3.3.3.3:80",
        "4.4.4.4:2000",
        6,
    );
    let id = t.insert(o, r, TcpState::SynSent, 1, 0).expect("insert");
    t.on_packet(id, Dir::Reply, Some(SYNACK), 0);
    t.on_packet(id, Dir::Orig, Some(ACK), 0);
    // An hour of wheel time in steps: the established flow (5 days) stays.
    let mut now = 0;
    while now < 3600 {
        now += 7;
        assert_eq!(t.expire(now, |_| {}), 0);
    }
    assert_eq!(t.lookup(&o, now), Some((id, Dir::Orig)));
    // After a long stall the wheel catches up, one turn per call (bounded work).
    let end = to.tcp_established + 10;
    assert_eq!(
        t.lookup(&o, end),
        None,
        "expired at lookup even before the wheel runs"
    );
    let mut n = 0;
    let mut calls = 0;
    while !t.is_empty() {
        n += t.expire(end, |_| {});
        calls += 1;
        assert!(calls < 10_000);
    }
    assert_eq!(n, 1);
    assert!(calls > 1);
}

/// Random inserts, removals, touches, clock steps and lookups of keys `0..keys` against
/// a HashMap model in a table of `cap` flows: the index always finds exactly the live
/// flows, in the right direction (with `checked`, every invariant after every step).
fn run_model(
    cap: usize,
    seed: u64,
    keys: u16,
    ops: Vec<(u8, u16, u32)>,
    checked: bool,
) -> Result<(), TestCaseError> {
    let to = Timeouts {
        udp_unreplied: 20,
        udp_replied: 50,
        ..Timeouts::default()
    };
    let mut t = FlowTable::new(cap, to, 0, seed);
    let mut model: HashMap<u16, (FlowId, u32)> = HashMap::new(); // key -> (id, expires)
    let mut now = 0u32;
    // All IPv4 (narrow entries), IPv4 to an IPv6 backend, all IPv6 (both wide).
    let tuples = |k: u16| match k % 3 {
        0 => nat(
            &format!("10.0.{}.{}:{}", k % 3, k, 1000 + k),
            "2.2.2.2:53",
            &format!("10.1.{}.{}:53", k >> 8, k & 0xff),
            &format!("10.2.0.1:{}", 2000 + k),
            17,
        ),
        1 => nat(
            &format!("10.0.{}.{}:{}", k % 3, k, 1000 + k),
            "2.2.2.2:53",
            &format!("[fd00::{k:x}]:53"),
            &format!("[fd00::1]:{}", 2000 + k),
            17,
        ),
        _ => nat(
            &format!("[fd01::{k:x}]:{}", 1000 + k),
            "[fd02::53]:53",
            &format!("[fd00::{k:x}]:53"),
            &format!("[fd00::1]:{}", 2000 + k),
            17,
        ),
    };
    for (op, k, dt) in ops {
        let k = k % keys;
        let (o, r) = tuples(k);
        match op {
            0 => match t.insert(o, r, TcpState::UdpUnreplied, 1, now) {
                Ok(id) => {
                    prop_assert!(!model.contains_key(&k));
                    model.insert(k, (id, now + to.udp_unreplied));
                }
                Err(InsertError::Exists) => prop_assert!(model.contains_key(&k)),
                Err(InsertError::Full) => prop_assert!(model.len() <= t.capacity()),
            },
            1 => {
                if let Some((id, _)) = model.remove(&k) {
                    t.remove(id);
                }
            }
            2 => {
                if let Some((id, exp)) = model.get_mut(&k) {
                    t.on_packet(*id, Dir::Reply, None, now);
                    *exp = now + to.udp_replied;
                }
            }
            _ => {
                now += dt;
                let mut gone = Vec::new();
                t.expire(now, |f| gone.push(f.orig()));
                for g in gone {
                    let key = model
                        .iter()
                        .find(|(kk, _)| tuples(**kk).0 == g)
                        .map(|(kk, _)| *kk);
                    let key = key.expect("expired flow was live");
                    let (_, exp) = model.remove(&key).expect("live");
                    prop_assert!(exp <= now, "expired early: {} > {}", exp, now);
                }
                // Nothing overdue stays.
                for (_, exp) in model.values() {
                    prop_assert!(*exp > now, "overdue flow kept");
                }
            }
        }
        prop_assert_eq!(t.len(), model.len());
        if checked {
            check(&t);
        }
        for kk in 0..keys {
            let (o, r) = tuples(kk);
            match model.get(&kk) {
                Some((id, _)) => {
                    prop_assert_eq!(t.lookup(&o, now), Some((*id, Dir::Orig)));
                    prop_assert_eq!(t.lookup(&r, now), Some((*id, Dir::Reply)));
                    prop_assert_eq!((t.get(*id).orig(), t.get(*id).reply()), (o, r));
                    assert_v4_path_agrees(&t, &o, now);
                    assert_v4_path_agrees(&t, &r, now);
                }
                None => {
                    prop_assert_eq!(t.lookup(&o, now), None);
                    prop_assert_eq!(t.lookup(&r, now), None);
                }
            }
        }
    }
    Ok(())
}

proptest! {
    /// The model at a power-of-two-free capacity of 32 flows and 48 keys.
    #[test]
    fn table_matches_a_model(ops in proptest::collection::vec((0u8..4, 0u16..48, 0u32..40), 1..400)) {
        run_model(32, 99, 48, ops, false)?;
    }

    /// The model at small odd capacities (index of 3 to 39 slots: every probe run is
    /// near the wrap), more keys than room, invariants checked after every step.
    #[test]
    fn small_odd_tables_match_a_model(
        cap in proptest::sample::select(vec![1usize, 3, 5, 7, 9, 11, 13]),
        seed in any::<u64>(),
        ops in proptest::collection::vec((0u8..4, 0u16..1000, 0u32..40), 1..300),
    ) {
        run_model(cap, seed, (2 * cap + 3) as u16, ops, true)?;
    }
}

/// Flow `k` of a family of TCP FullNAT flows (client port and SNAT port from `k`).
fn tcp_k(k: u16) -> (Tuple, Tuple) {
    nat(
        &format!("1.1.{}.{}:{}", k >> 8, k & 0xff, 1000 + k),
        "2.2.2.2:80",
        "3.3.3.3:80",
        &format!("4.4.4.4:{}", 2000 + k),
        6,
    )
}

/// Inserts flow `k` at `now` and completes its handshake.
fn established(t: &mut FlowTable, k: u16, now: u32) -> FlowId {
    let (o, r) = tcp_k(k);
    let id = t.insert(o, r, TcpState::SynSent, 1, now).expect("insert");
    t.on_packet(id, Dir::Reply, Some(SYNACK), now);
    t.on_packet(id, Dir::Orig, Some(ACK), now);
    id
}

#[test]
fn a_full_table_drops_the_oldest_half_open_flow_early_never_an_established_one() {
    let to = Timeouts::default();
    // At most 8 entries: the probes see every one.
    let mut t = FlowTable::new(8, to, 0, 3);
    let est: Vec<FlowId> = (0..4).map(|k| established(&mut t, k, 0)).collect();
    // Half-open flows whose last packets were at 1..=4 s.
    for k in 4..8u16 {
        let (o, r) = tcp_k(k);
        t.insert(o, r, TcpState::SynSent, 1, u32::from(k) - 3)
            .expect("insert");
    }
    let (o, r) = tcp_k(100);
    assert_eq!(
        t.insert(o, r, TcpState::SynSent, 1, 10),
        Err(InsertError::Full),
        "plain insert never drops"
    );
    let mut dropped = Vec::new();
    for k in 100..140u16 {
        let (o, r) = tcp_k(k);
        let now = 10 + u32::from(k - 100);
        t.insert_evicting(o, r, TcpState::SynSent, 1, now, |f| {
            dropped.push(f.orig());
            true
        })
        .expect("a half-open flow gives way");
        check(&t);
        assert_eq!(t.len(), 8);
    }
    // The oldest went first: flows 4, 5, 6, 7, then the new ones in order.
    let want: Vec<Tuple> = (4..8).chain(100..136).map(|k| tcp_k(k).0).collect();
    assert_eq!(dropped, want);
    assert_eq!(t.stats().early_dropped, 40);
    for (k, id) in est.iter().enumerate() {
        assert_eq!(t.lookup(&tcp_k(k as u16).0, 50), Some((*id, Dir::Orig)));
    }
    // Nothing but established flows: nothing to drop.
    for k in 136..140u16 {
        let id = t.lookup(&tcp_k(k).0, 50).expect("live").0;
        t.on_packet(id, Dir::Reply, Some(SYNACK), 50);
        t.on_packet(id, Dir::Orig, Some(ACK), 50);
    }
    let (o, r) = tcp_k(200);
    assert_eq!(
        t.insert_evicting(o, r, TcpState::SynSent, 1, 50, |_| -> bool {
            panic!("dropped")
        }),
        Err(InsertError::Full)
    );
    assert_eq!(t.stats().full, 2);
    // The reused entries stay on the wheel: they expire and recycle like any other.
    let mut now = 50;
    while now < 50 + to.tcp_established + 200 {
        now += 3600;
        t.expire(now, |_| {});
        check(&t);
    }
    while !t.is_empty() {
        t.expire(now, |_| {});
    }
    check(&t);
    for k in 300..308u16 {
        let (o, r) = tcp_k(k);
        t.insert(o, r, TcpState::SynSent, 1, now)
            .expect("every entry recycled");
    }
}

#[test]
fn early_drop_takes_removed_and_expired_entries_first() {
    let to = Timeouts::default();
    let mut t = FlowTable::new(8, to, 0, 4);
    let half: Vec<FlowId> = (0..4u16)
        .map(|k| {
            let (o, r) = tcp_k(k);
            t.insert(o, r, TcpState::SynSent, 1, 0).expect("insert")
        })
        .collect();
    let est: Vec<FlowId> = (4..7).map(|k| established(&mut t, k, 0)).collect();
    // A UDP flow whose timeout ran out without the wheel passing yet.
    let (uo, ur) = nat("5.5.5.5:53", "2.2.2.2:53", "3.3.3.3:53", "4.4.4.4:53", 17);
    t.insert(uo, ur, TcpState::UdpUnreplied, 1, 0).expect("udp");
    // A removed flow's entry waits for the wheel: taken without dropping anything.
    t.remove(est[2]);
    let (o, r) = tcp_k(10);
    t.insert_evicting(o, r, TcpState::SynSent, 1, 1, |_| -> bool {
        panic!("nothing to drop")
    })
    .expect("the removed entry");
    check(&t);
    // The expired UDP flow goes before any half-open one (its SNAT owner sees it).
    let late = to.udp_unreplied + 1;
    let (o, r) = tcp_k(11);
    let mut seen = Vec::new();
    t.insert_evicting(o, r, TcpState::SynSent, 1, late, |f| {
        seen.push(f.orig());
        true
    })
    .expect("the expired flow's entry");
    assert_eq!(seen, [uo]);
    for id in &half {
        assert!(
            t.get(*id).live(),
            "half-open flows kept while an expired one was there"
        );
    }
    check(&t);
}

#[test]
fn early_drop_looks_at_a_bounded_number_of_entries() {
    let mut t = FlowTable::new(64, Timeouts::default(), 0, 5);
    for k in 0..63 {
        established(&mut t, k, 0);
    }
    let (o, r) = tcp_k(63);
    t.insert(o, r, TcpState::SynSent, 1, 0)
        .expect("one half-open flow");
    let (mut taken, mut full) = (0, 0);
    for k in 100..300u16 {
        let (o, r) = tcp_k(k);
        match t.insert_evicting(o, r, TcpState::SynSent, 1, 1, |_| true) {
            Ok(_) => taken += 1,
            Err(InsertError::Full) => full += 1,
            Err(e) => panic!("{e:?}"),
        }
    }
    // 8 of 64 entries looked at: about one new flow in 8 finds the half-open one.
    assert!(taken > 0 && full > 0, "taken {taken}, full {full}");
    assert!(full > taken, "taken {taken}, full {full}");
    assert_eq!(t.stats().early_dropped, taken);
    check(&t);
}

#[test]
fn under_pressure_silent_half_open_flows_expire_after_seconds() {
    let to = Timeouts::default();
    // 90 % of 10: pressure from 9 live flows.
    let mut t = FlowTable::new(10, to, 0, 6);
    for k in 0..7 {
        established(&mut t, k, 0);
    }
    let (o, r) = tcp_k(7);
    let calm = t.insert(o, r, TcpState::SynSent, 1, 0).expect("insert");
    assert!(!t.under_pressure());
    let (o, r) = tcp_k(8);
    let silent = t.insert(o, r, TcpState::SynSent, 1, 1).expect("insert");
    assert!(t.under_pressure());
    let (o, r) = tcp_k(9);
    let answered = t.insert(o, r, TcpState::SynSent, 1, 1).expect("insert");
    // Timeouts are unchanged: lookups still see the flows' configured expiries.
    assert_eq!(t.get(silent).expires(), 1 + to.tcp_syn_sent);
    // The backend answers one (SYN_RECV at 3 s); the first one's client retransmits its
    // SYN at 3 s (filed before the pressure, for its configured expiry).
    t.on_packet(answered, Dir::Reply, Some(SYNACK), 3);
    t.on_packet(calm, Dir::Orig, Some(SYN), 3);
    let mut gone = Vec::new();
    t.expire(1 + PRESSURE_HALF_OPEN_S, |f| gone.push(f.orig()));
    assert_eq!(gone, [tcp_k(8).0], "silent for 5 s under pressure");
    assert!(t.under_pressure(), "9 of 10 live");
    gone.clear();
    t.expire(3 + PRESSURE_HALF_OPEN_S, |f| gone.push(f.orig()));
    gone.sort_by_key(|o| o.sport);
    assert_eq!(
        gone,
        [tcp_k(7).0, tcp_k(9).0],
        "5 s after their last packets"
    );
    assert!(!t.under_pressure(), "7 of 10 live");
    check(&t);
    // Out of pressure a half-open flow lives its configured timeout...
    let now = 3 + PRESSURE_HALF_OPEN_S;
    let (o, r) = tcp_k(10);
    t.insert(o, r, TcpState::SynSent, 1, now).expect("insert");
    assert_eq!(t.expire(now + 20, |_| {}), 0);
    // ... until pressure comes (established flows here, which never go early): then the
    // wheel catches it on its next round.
    established(&mut t, 11, now + 20);
    established(&mut t, 12, now + 20);
    assert!(t.under_pressure());
    gone.clear();
    t.expire(now + 40, |f| gone.push(f.orig()));
    assert_eq!(gone, [tcp_k(10).0]);
    assert_eq!(t.len(), 9, "the established flows stay");
    check(&t);
}

#[test]
fn expired_flows_reaped_by_inserts_and_rekeys_are_shown_first() {
    let to = Timeouts::default();
    let mut t = FlowTable::new(8, to, 0, 7);
    let (o, r) = tcp_k(1);
    t.insert(o, r, TcpState::UdpUnreplied, 1, 0)
        .expect("insert");
    let late = to.udp_unreplied + 1;
    // The same client tuple again, once the first flow has expired (the wheel has not
    // run): the old flow is shown before it is reaped.
    let (_, r2) = tcp_k(2);
    let mut seen = Vec::new();
    t.insert_evicting(o, r2, TcpState::SynSent, 1, late, |f| {
        seen.push(f.reply());
        true
    })
    .expect("insert over the expired flow");
    assert_eq!(seen, [r]);
    // Its owner may refuse the tuple (it rests): the insert fails, the flow is gone.
    let (o3, r3) = tcp_k(3);
    t.insert(o3, r3, TcpState::UdpUnreplied, 1, late)
        .expect("insert");
    let later = late + to.udp_unreplied + 1;
    let (o4, _) = tcp_k(4);
    assert_eq!(
        t.insert_evicting(o4, r3, TcpState::SynSent, 1, later, |f| {
            assert_eq!(f.orig(), o3);
            false
        }),
        Err(InsertError::Exists)
    );
    assert_eq!(t.lookup(&r3, 0), None, "reaped all the same");
    t.insert_evicting(o4, r3, TcpState::SynSent, 1, later, |_| -> bool {
        panic!("nothing expired holds it now")
    })
    .expect("free now");
    // A re-key onto an expired flow's reply tuple, likewise.
    let (o5, r5) = tcp_k(5);
    t.insert(o5, r5, TcpState::UdpUnreplied, 1, later)
        .expect("insert");
    let (o6, r6) = tcp_k(6);
    let id = t
        .insert(o6, r6, TcpState::SynRecv, 1, later)
        .expect("insert");
    let last = later + to.udp_unreplied + 1;
    assert_eq!(
        t.rekey_reply(id, r5, TcpState::SynSent, last, |_| false),
        Err(InsertError::Exists)
    );
    assert_eq!(t.get(id).reply(), r6, "unchanged");
    let (o7, r7) = tcp_k(7);
    t.insert(o7, r7, TcpState::UdpUnreplied, 1, later)
        .expect("insert");
    seen.clear();
    t.rekey_reply(id, r7, TcpState::SynSent, last, |f| {
        seen.push(f.orig());
        true
    })
    .expect("rekey over the expired flow");
    assert_eq!(seen, [o7]);
    assert_eq!(t.get(id).reply(), r7);
    check(&t);
}
