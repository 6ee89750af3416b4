//! Real kernel clients and servers through sluice's L4 balancer, in the test process on
//! TAP ports: a client namespace (10.77.0.1) reaches the virtual address 10.77.0.10:7000,
//! and python servers on 10.78.0.11 and 10.78.0.12 in a backend namespace answer with
//! their own address and the peer they saw, then echo. Checks the 3:1 weights, the SNAT
//! address, NetworkPolicy denial and revocation after a swap, reloads that keep
//! established connections, a broken config rejected while the old tables serve, two
//! workers on a two-queue TAP, ARP claims for the backends' addresses sent from the
//! client side (refused and counted, traffic unaffected), and (feature `dpdk`) the same
//! over DPDK `net_tap` vdevs.
//! The topology is described in `sluice_tests::kernel`.

use sluice_dataplane::port::{tap, Opened, Pool};
use sluice_dataplane::stats::{Counters, DropReason, Event};
use sluice_tests::kernel::{
    check_burst, count, manifests, Py, Rig, ARP_SPOOF, BACKENDS, INSIDE, OUTSIDE,
};
use sluice_tests::sys::{can_admin_net, unique_name};
use std::time::Duration;

/// The client network: allowed by the policy.
const CLIENTS: &str = "10.77.0.0/24";
/// A network that excludes the client.
const OTHERS: &str = "10.99.0.0/24";
/// Longest wait for one agent command.
const AGENT_LIMIT: Duration = Duration::from_secs(60);

/// A rig on two TAP ports with `queues` queues (and as many workers) serving `config`,
/// with the pool the TAP queues draw from.
fn rig(queues: u16, config: &str) -> (Rig, Pool) {
    let (rig, pool, _) = rig_named(queues, config);
    (rig, pool)
}

/// [`rig`], and the name of the client namespace's device.
fn rig_named(queues: u16, config: &str) -> (Rig, Pool, String) {
    assert!(
        can_admin_net(),
        "kernel tests need root (CAP_NET_ADMIN), /dev/net/tun and iproute2; CI runs as root"
    );
    let pool = Pool::new(8192);
    let (out_if, in_if) = (unique_name("kbo"), unique_name("kbi"));
    let open = |name: &str, ifname: &str| -> Opened {
        tap::open(name, ifname, queues, &pool).unwrap_or_else(|e| panic!("TAP {ifname}: {e}"))
    };
    let (outside, inside) = (open("outside", &out_if), open("inside", &in_if));
    let rig = Rig::start(outside, inside, (&out_if, &in_if), config);
    (rig, pool, out_if)
}

/// Finishes the rig and checks that every buffer went back to the pool.
fn finish(rig: Rig, pool: &Pool) -> Counters {
    let c = rig.finish();
    assert_eq!(pool.in_use(), 0, "every buffer back in the pool");
    c
}

#[test]
fn two_hundred_connections_share_3_to_1_through_snat() {
    let (mut rig, pool) = rig(1, &manifests((3, 1), CLIENTS));
    let v = check_burst(&mut rig.agent, 200, 0.75, 0.08);
    eprintln!("200 connections: {v}");
    let c = finish(rig, &pool);
    assert!(c.events_of(Event::FlowCreated) >= 200, "{c:?}");
    assert_eq!(c.drops_of(DropReason::PolicyDenied), 0);
}

#[test]
fn policy_swap_denies_new_connections_and_revokes_established_ones() {
    let (mut rig, pool) = rig(1, &manifests((3, 1), CLIENTS));
    let a = &mut rig.agent;
    let v = a.cmd("open 5 2", AGENT_LIMIT);
    assert_eq!(count(&v, "ok", None), 5, "long-lived connections: {v}");
    let v = a.cmd("echo 2", AGENT_LIMIT);
    assert_eq!(count(&v, "alive", None), 5, "echo before the swap: {v}");

    rig.balance
        .reload(&manifests((3, 1), OTHERS))
        .expect("policy excluding the client compiles");
    let v = rig.agent.cmd("burst 10 10 1", AGENT_LIMIT);
    assert_eq!(count(&v, "ok", None), 0, "new connections denied: {v}");
    assert_eq!(
        count(&v, "errors", Some("timeout")),
        10,
        "they time out: {v}"
    );
    rig.balance.wait_counters("policy_denied", |c| {
        c.drops_of(DropReason::PolicyDenied) > 0
    });

    let v = rig.agent.cmd("echo 1", AGENT_LIMIT);
    assert_eq!(
        count(&v, "alive", None),
        0,
        "established connections revoked: {v}"
    );
    assert_eq!(
        count(&v, "errors", Some("reset")),
        5,
        "and told so (ECONNRESET), not left to time out: {v}"
    );
    rig.balance.wait_counters("policy_revoked", |c| {
        c.drops_of(DropReason::PolicyRevoked) > 0
    });

    // Allowed again: new connections pass.
    rig.balance
        .reload(&manifests((3, 1), CLIENTS))
        .expect("policy allowing the client compiles");
    let v = rig.agent.cmd("burst 10 10 2", AGENT_LIMIT);
    assert_eq!(count(&v, "ok", None), 10, "allowed again: {v}");
    let c = finish(rig, &pool);
    assert!(c.drops_of(DropReason::PolicyDenied) >= 10, "{c:?}");
    assert!(c.drops_of(DropReason::PolicyRevoked) >= 5, "{c:?}");
}

#[test]
fn ten_reloads_keep_twenty_established_connections() {
    let (mut rig, pool) = rig(1, &manifests((3, 1), CLIENTS));
    let v = rig.agent.cmd("open 20 2", AGENT_LIMIT);
    assert_eq!(count(&v, "ok", None), 20, "long-lived connections: {v}");
    for i in 0..10u32 {
        let g = rig
            .balance
            .reload(&manifests((3 + i, 1 + i % 3), CLIENTS))
            .expect("reload compiles");
        assert_eq!(g, 2 + u64::from(i), "generation");
        let v = rig.agent.cmd("echo 2", AGENT_LIMIT);
        assert_eq!(
            count(&v, "alive", None),
            20,
            "all connections echo after reload {i}: {v}"
        );
    }
    // Every flow re-checked its verdict once per generation it saw traffic in.
    rig.balance.wait_counters("policy rechecks", |c| {
        c.events_of(Event::PolicyRechecked) >= 200
    });
    let v = rig.agent.cmd("close", AGENT_LIMIT);
    assert_eq!(count(&v, "closed", None), 20);
    let c = finish(rig, &pool);
    assert_eq!(c.drops_of(DropReason::PolicyRevoked), 0, "{c:?}");
}

#[test]
fn broken_configs_are_rejected_and_the_old_tables_keep_serving() {
    let (mut rig, pool) = rig(1, &manifests((3, 1), CLIENTS));
    let v = rig.agent.cmd("burst 20 8 2", AGENT_LIMIT);
    assert_eq!(count(&v, "ok", None), 20, "before: {v}");
    let g = rig.balance.publisher.generation();
    let broken = [
        // A prefix length that does not exist.
        manifests((3, 1), "10.77.0.0/33"),
        // A negative weight.
        manifests((3, 1), CLIENTS).replace("weight: 3}", "weight: -3}"),
        // Not YAML.
        format!("{}\n  listeners: [{{", manifests((3, 1), CLIENTS)),
    ];
    for text in &broken {
        let errors = rig
            .balance
            .reload(text)
            .expect_err("a broken config is rejected");
        assert!(!errors.is_empty());
        eprintln!("rejected: {}", errors.join("; "));
    }
    assert_eq!(
        rig.balance.publisher.generation(),
        g,
        "nothing was published"
    );
    let v = rig.agent.cmd("burst 20 8 2", AGENT_LIMIT);
    assert_eq!(count(&v, "ok", None), 20, "the old tables serve: {v}");
    finish(rig, &pool);
}

#[test]
fn two_workers_on_two_tap_queues_answer_every_connection() {
    let (mut rig, pool) = rig(2, &manifests((3, 1), CLIENTS));
    let v = check_burst(&mut rig.agent, 200, 0.75, 0.08);
    eprintln!("two workers, 200 connections: {v}");
    rig.balance
        .wait_counters("flows counted", |c| c.events_of(Event::FlowCreated) >= 200);
    let per: Vec<u64> = rig
        .balance
        .worker_counters()
        .iter()
        .map(|c| c.events_of(Event::FlowCreated))
        .collect();
    // The kernel spreads new flows over the TAP queues by hash.
    assert!(
        per.iter().all(|&n| n > 0),
        "both workers own flows: {per:?}"
    );
    let c = finish(rig, &pool);
    eprintln!(
        "redirected {} / {}",
        c.events_of(Event::RedirectedOut),
        c.events_of(Event::RedirectedIn)
    );
    assert!(c.events_of(Event::FlowCreated) >= 200, "{c:?}");
    assert_eq!(
        c.events_of(Event::RedirectedOut),
        c.events_of(Event::RedirectedIn)
    );
}

/// Issue 29's spoofed-neighbour attack, live: the client namespace claims the backends'
/// addresses (and sluice's own inside address) with ARP while real connections run.
/// The kernel topology is IPv4 only, so no neighbour advertisements here; the forwarder's
/// stage test `spoofed_neighbour_claims_are_refused_and_counted` covers NDP.
#[test]
fn spoofed_arp_from_the_client_side_leaves_backend_traffic_alone() {
    const FAKE: &str = "02:66:66:66:66:66";
    const FRAMES: u64 = 1200;
    let (mut rig, pool, out_if) = rig_named(1, &manifests((3, 1), CLIENTS));
    // sluice's MAC on the client's link, as the client's kernel learned it.
    let neigh = rig
        .topo
        .client
        .exec(&["ip", "neigh", "show", OUTSIDE, "dev", &out_if]);
    let gw_mac = neigh
        .split_whitespace()
        .skip_while(|w| *w != "lladdr")
        .nth(1)
        .unwrap_or_else(|| panic!("sluice's MAC in {neigh:?}"))
        .to_string();
    let v = rig.agent.cmd("burst 20 8 2", AGENT_LIMIT);
    assert_eq!(count(&v, "ok", None), 20, "before: {v}");
    let before = rig.balance.counters().drops_of(DropReason::ArpSpoofed);
    // ARP replies, gratuitous requests and replies, and spoofed requests claiming both
    // backends and sluice's own inside address are at FAKE, from the client side: 400 a
    // second for 3 s, while 200 connections go through.
    let (frames, rate) = (FRAMES.to_string(), "400".to_string());
    let t = std::time::Instant::now();
    let mut spoof = Py::start(
        &rig.topo.client,
        ARP_SPOOF,
        &[
            &out_if,
            &frames,
            &rate,
            FAKE,
            &gw_mac,
            OUTSIDE,
            BACKENDS[0],
            BACKENDS[1],
            INSIDE,
        ],
    );
    assert_eq!(spoof.line(Duration::from_secs(10)), "started");
    let during = rig.agent.cmd("burst 200 8 2", AGENT_LIMIT);
    let during_done = t.elapsed();
    let report: serde_json::Value =
        serde_json::from_str(&spoof.line(Duration::from_secs(30))).expect("spoofer report");
    eprintln!("spoofer {report}; 200 connections {during} in {during_done:?}");
    assert_eq!(
        report["sent"], FRAMES,
        "every spoofed frame went out: {report}"
    );
    assert_eq!(
        count(&during, "ok", None),
        200,
        "during the spoofing: {during}"
    );
    assert!(
        during_done.as_secs_f64() < report["seconds"].as_f64().unwrap_or(0.0),
        "the connections ran while the spoofer did ({during_done:?}): {report}"
    );
    assert_eq!(count(&during, "peers", Some(INSIDE)), 200, "{during}");
    // After: the backends' entries kept their real MACs, connections still pass.
    for b in BACKENDS {
        let ip: std::net::IpAddr = b.parse().expect("ip");
        let e = rig
            .balance
            .neighbours
            .entries()
            .into_iter()
            .find(|e| e.ip == ip)
            .unwrap_or_else(|| panic!("{b} in the neighbour cache"));
        assert_ne!(e.mac.to_string(), FAKE, "{b} kept its MAC");
    }
    let after = check_burst(&mut rig.agent, 100, 0.75, 0.12);
    eprintln!("after: {after}");
    let c = rig.balance.wait_counters("arp_spoofed counted", |c| {
        c.drops_of(DropReason::ArpSpoofed) - before >= FRAMES
    });
    assert_eq!(
        c.drops_of(DropReason::ArpSpoofed) - before,
        FRAMES,
        "each spoofed claim refused and counted once"
    );
    drop(spoof);
    finish(rig, &pool);
}

/// The same topology over DPDK `net_tap` vdevs (EAL in a child process: one per process).
#[cfg(feature = "dpdk")]
#[test]
fn dpdk_net_tap_ports_answer_every_connection() {
    assert!(can_admin_net(), "net_tap needs root; CI runs as root");
    sluice_tests::sys::dpdk_case(
        env!("CARGO_BIN_EXE_dpdk-case"),
        "balance",
        Duration::from_secs(60),
    );
}
