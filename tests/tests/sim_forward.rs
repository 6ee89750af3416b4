//! Simulation: smoltcp hosts on in-memory wires around sluice's worker and forwarder, on a
//! virtual clock. ARP and NDP resolution, ping, and TCP transfers through sluice with
//! injected loss, duplication, reordering and corruption (byte-exact results).

use sluice_dataplane::pipeline::{IfAddr, Neighbour, Route};
use sluice_dataplane::stats::DropReason;
use sluice_dataplane::wire::MacAddr;
use sluice_tests::apps::{split_response, EchoServer, HttpServer, Pinger, TcpClient};
use sluice_tests::sim::{Faults, LinkSpec, Rng, Sim};
use smoltcp::wire::{IpAddress, IpCidr};
use std::net::IpAddr;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn cidr(s: &str) -> IpCidr {
    s.parse().unwrap()
}

/// Host A (10.77.0.1, fd77::1) — sluice port "a" (10.77.0.2, fd77::2) | sluice port "b"
/// (10.78.0.2, fd78::2) — host B (10.78.0.1, fd78::1).
fn two_links(faults: Faults, seed: u64) -> Sim {
    let links = [
        LinkSpec {
            name: "a".into(),
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
            host_faults: faults,
            sluice_faults: faults,
        },
        LinkSpec {
            name: "b".into(),
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
            host_faults: faults,
            sluice_faults: faults,
        },
    ];
    let hosts = [
        vec![cidr("10.77.0.1/24"), cidr("fd77::1/64")],
        vec![cidr("10.78.0.1/24"), cidr("fd78::1/64")],
    ];
    Sim::new(&links, &hosts, &[] as &[Route], seed)
}

#[test]
fn arp_resolution_and_ping_v4_v6() {
    let mut sim = two_links(Faults::NONE, 1);
    let mut ping = Pinger::new(&mut sim.hosts[0].sockets, 0x77);
    for seq in 0..3u16 {
        ping.send(
            &mut sim.hosts[0].sockets,
            Sim::addr(ip("10.77.0.1")),
            Sim::addr(ip("10.77.0.2")),
            seq,
        );
        ping.send(
            &mut sim.hosts[0].sockets,
            Sim::addr(ip("fd77::1")),
            Sim::addr(ip("fd77::2")),
            100 + seq,
        );
    }
    let ok = sim.run_until(5_000, |s| {
        ping.step(&mut s.hosts[0].sockets);
        ping.replies.len() >= 6
    });
    assert!(ok, "replies: {:?}", ping.replies);
    let mut r = ping.replies.clone();
    r.sort_unstable();
    assert_eq!(r, [0, 1, 2, 100, 101, 102]);
    // sluice learned host A's MAC from its ARP request and its neighbour solicitation.
    let host_mac = MacAddr(sim.hosts[0].mac.0);
    assert_eq!(
        sim.neighbours.lookup(ip("10.77.0.1")),
        Neighbour::Reachable(host_mac)
    );
    assert_eq!(
        sim.neighbours.lookup(ip("fd77::1")),
        Neighbour::Reachable(host_mac)
    );
    // And host A resolved sluice's MAC (its neighbour cache answered the pings' route).
    let c = sim.worker.counters();
    assert!(
        c.ports[0].tx_packets >= 8,
        "2 resolutions + 6 replies: {:?}",
        c.ports[0]
    );
    assert_eq!(
        c.total_drops(),
        c.drops_of(DropReason::IpMulticast)
            + c.drops_of(DropReason::IcmpUnhandled)
            + c.drops_of(DropReason::NdNotForUs),
        "{c:?}"
    );
}

fn transfer(sim: &mut Sim, remote: IpAddress, size: usize, seed: u64, limit_ms: u64) {
    let mut rng = Rng::new(seed);
    let data: Vec<u8> = (0..size).map(|_| rng.next_u64() as u8).collect();
    let mut server = EchoServer::new(&mut sim.hosts[1].sockets, 7);
    let h0 = &mut sim.hosts[0];
    let mut client = TcpClient::new(
        &mut h0.iface,
        &mut h0.sockets,
        remote,
        7,
        40_000,
        data.clone(),
        Some(size),
    );
    let ok = sim.run_until(limit_ms, |s| {
        server.step(&mut s.hosts[1].sockets);
        client.step(&mut s.hosts[0].sockets);
        client.done
    });
    assert!(
        ok,
        "transfer incomplete: {} of {size} bytes back after {} ms (state {})",
        client.received.len(),
        sim.now_ms,
        client.state(&sim.hosts[0].sockets)
    );
    assert_eq!(client.received.len(), size);
    assert!(client.received == data, "echoed bytes differ");
}

#[test]
fn tcp_echo_through_sluice_with_5_percent_loss() {
    let faults = Faults {
        drop: 0.05,
        ..Faults::NONE
    };
    let mut sim = two_links(faults, 42);
    transfer(&mut sim, Sim::addr(ip("10.78.0.1")), 200_000, 7, 120_000);
    let lost: u64 = sim.hosts.iter().map(|h| h.dev.fault_stats().dropped).sum();
    assert!(lost > 0, "the injector dropped packets");
    let c = sim.worker.counters();
    assert!(c.ports[1].tx_packets > 100 && c.ports[0].tx_packets > 100);
    assert!(c.drops_of(DropReason::TtlExceeded) == 0 && c.drops_of(DropReason::NoRoute) == 0);
}

#[test]
fn tcp_echo_v6_with_loss_duplication_reordering_and_corruption() {
    let faults = Faults {
        drop: 0.03,
        duplicate: 0.03,
        reorder: 0.05,
        corrupt: 0.02,
    };
    let mut sim = two_links(faults, 4242);
    transfer(&mut sim, Sim::addr(ip("fd78::1")), 100_000, 9, 120_000);
    let st: Vec<_> = sim.hosts.iter().map(|h| h.dev.fault_stats()).collect();
    assert!(st.iter().map(|s| s.duplicated).sum::<u64>() > 0);
    assert!(st.iter().map(|s| s.reordered).sum::<u64>() > 0);
    assert!(st.iter().map(|s| s.corrupted).sum::<u64>() > 0);
}

#[test]
fn http_get_through_sluice_with_loss() {
    let faults = Faults {
        drop: 0.05,
        ..Faults::NONE
    };
    let mut sim = two_links(faults, 99);
    let mut rng = Rng::new(5);
    let body: Vec<u8> = (0..150_000).map(|_| rng.next_u64() as u8).collect();
    let mut server = HttpServer::new(&mut sim.hosts[1].sockets, 80, body.clone());
    let h0 = &mut sim.hosts[0];
    let req = b"GET /blob HTTP/1.0\r\nHost: b.test\r\n\r\n".to_vec();
    let mut client = TcpClient::new(
        &mut h0.iface,
        &mut h0.sockets,
        Sim::addr(ip("10.78.0.1")),
        80,
        40_001,
        req,
        None,
    );
    let ok = sim.run_until(120_000, |s| {
        server.step(&mut s.hosts[1].sockets);
        client.step(&mut s.hosts[0].sockets);
        client.done
    });
    assert!(
        ok,
        "HTTP exchange incomplete: {} bytes",
        client.received.len()
    );
    let (head, got) = split_response(&client.received).expect("a response head");
    assert!(head.starts_with("HTTP/1.0 200 OK"), "{head}");
    assert!(head.contains("Content-Length: 150000"));
    assert!(got == &body[..], "body differs ({} bytes)", got.len());
    assert_eq!(server.requests.len(), 1);
    assert!(server.requests[0].starts_with("GET /blob HTTP/1.0"));
}

#[test]
fn same_seed_same_run() {
    let run = |seed| {
        let mut sim = two_links(
            Faults {
                drop: 0.05,
                reorder: 0.05,
                ..Faults::NONE
            },
            seed,
        );
        transfer(&mut sim, Sim::addr(ip("10.78.0.1")), 30_000, 1, 60_000);
        (sim.now_ms, sim.worker.counters().ports.clone())
    };
    assert_eq!(run(3), run(3), "the simulation is deterministic");
}
