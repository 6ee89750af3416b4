use std::collections::HashMap;
use std::net::SocketAddr;

use proptest::prelude::*;

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
fn a_flow_is_small() {
    assert!(
        std::mem::size_of::<Flow>() <= 128,
        "{}",
        std::mem::size_of::<Flow>()
    );
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
    assert_eq!(t.expire(3 + to.tcp_time_wait + 1, |f| gone.push(f.orig)), 1);
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

proptest! {
    /// Random inserts, removals, touches and clock steps against a HashMap model: the
    /// index always finds exactly the live flows, in the right direction.
    #[test]
    fn table_matches_a_model(ops in proptest::collection::vec((0u8..4, 0u16..48, 0u32..40), 1..400)) {
        let to = Timeouts { udp_unreplied: 20, udp_replied: 50, ..Timeouts::default() };
        let mut t = FlowTable::new(32, to, 0, 99);
        let mut model: HashMap<u16, (FlowId, u32)> = HashMap::new(); // key -> (id, expires)
        let mut now = 0u32;
        let tuples = |k: u16| nat(&format!("10.0.{}.{}:{}", k % 3, k, 1000 + k), "2.2.2.2:53", &format!("[fd00::{k:x}]:53"), &format!("[fd00::1]:{}", 2000 + k), 17);
        for (op, k, dt) in ops {
            let (o, r) = tuples(k);
            match op {
                0 => match t.insert(o, r, TcpState::UdpUnreplied, 1, now) {
                    Ok(id) => { prop_assert!(!model.contains_key(&k)); model.insert(k, (id, now + to.udp_unreplied)); }
                    Err(InsertError::Exists) => prop_assert!(model.contains_key(&k)),
                    Err(InsertError::Full) => prop_assert!(model.len() <= t.capacity()),
                },
                1 => if let Some((id, _)) = model.remove(&k) { t.remove(id); },
                2 => if let Some((id, exp)) = model.get_mut(&k) { t.on_packet(*id, Dir::Reply, None, now); *exp = now + to.udp_replied; },
                _ => {
                    now += dt;
                    let mut gone = Vec::new();
                    t.expire(now, |f| gone.push(f.orig));
                    for g in gone {
                        let key = model.iter().find(|(kk, _)| tuples(**kk).0 == g).map(|(kk, _)| *kk);
                        let key = key.expect("expired flow was live");
                        let (_, exp) = model.remove(&key).expect("live");
                        prop_assert!(exp <= now, "expired early: {} > {}", exp, now);
                    }
                    // Nothing overdue stays.
                    for (_, exp) in model.values() { prop_assert!(*exp > now, "overdue flow kept"); }
                }
            }
            prop_assert_eq!(t.len(), model.len());
            for kk in 0..48u16 {
                let (o, r) = tuples(kk);
                match model.get(&kk) {
                    Some((id, _)) => {
                        prop_assert_eq!(t.lookup(&o, now), Some((*id, Dir::Orig)));
                        prop_assert_eq!(t.lookup(&r, now), Some((*id, Dir::Reply)));
                    }
                    None => { prop_assert_eq!(t.lookup(&o, now), None); prop_assert_eq!(t.lookup(&r, now), None); }
                }
            }
        }
    }
}
