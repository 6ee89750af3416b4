//! Delayed binding under idle connections, in simulation (virtual clock): when every
//! embryo slot is held by connections that send nothing, the oldest gives way
//! (`embryo_evicted`), its client is told with a RST (from sluice's MAC to its own, at the
//! sequence numbers of the handshake it made with sluice), and a new legitimate handshake
//! is spliced; and one source cannot hold more than its share of embryos
//! (`source_embryo_limit`).

use sluice_dataplane::splice::SpliceConfig;
use sluice_dataplane::stats::{DropReason, Event};
use sluice_tests::hello;
use sluice_tests::raw::{check_checksums, flags, parse, syn_options, RawClient};
use sluice_tests::splice::{
    balancer_config, first_difference, ip, print_counters, World, CLIENT, RAW_PORTS, VIP,
};
use std::net::SocketAddr;

fn tls_vip() -> SocketAddr {
    SocketAddr::new(ip(VIP), 443)
}

/// A raw client on port `RAW_PORTS + k` towards the TLS listener.
fn raw_client(k: u16) -> RawClient {
    let isn = 0x2468_ace0_u32.wrapping_mul(u32::from(k) + 1) ^ 0x00f0_0f00;
    RawClient::new(
        0,
        SocketAddr::new(ip(CLIENT), RAW_PORTS + k),
        tls_vip(),
        isn,
    )
}

/// SYN, sluice's SYN-ACK, the third segment: an embryo opens (if there is room).
fn handshake(w: &mut World, c: &mut RawClient) {
    c.syn(&mut w.sim, syn_options(1460, Some(7), true));
    w.step();
    c.poll(&mut w.sim);
    c.ack(&mut w.sim);
    w.steps(2);
}

/// Steps until the client holds `want` bytes, acknowledging what comes, at most
/// `limit_ms`.
fn pump(w: &mut World, c: &mut RawClient, want: usize, limit_ms: u64) -> bool {
    for _ in 0..limit_ms {
        w.step();
        let before = c.received.len();
        c.poll(&mut w.sim);
        if c.received.len() != before {
            c.ack(&mut w.sim);
        }
        if c.received.len() >= want {
            return true;
        }
    }
    false
}

fn events(w: &World, e: Event) -> u64 {
    w.sim.worker.counters().events_of(e)
}

fn drops(w: &World, r: DropReason) -> u64 {
    w.sim.worker.counters().drops_of(r)
}

#[test]
fn a_full_embryo_table_gives_way_to_a_new_handshake() {
    let mut cfg = balancer_config(41);
    cfg.splice = SpliceConfig {
        embryos: 4,
        first_bytes_ms: 60_000,
        ..SpliceConfig::default()
    };
    let mut w = World::new(cfg, 2);
    // Four idle connections hold every slot.
    let mut idle: Vec<RawClient> = (0..4).map(raw_client).collect();
    for c in &mut idle {
        handshake(&mut w, c);
        w.steps(10);
    }
    assert_eq!(w.sim.worker.stage().embryos(), 4);
    // A legitimate client: handshake and ClientHello, echoed back through the splice.
    let hello = hello::client_hello(Some("a.example.test"), 200);
    let mut c = raw_client(10);
    handshake(&mut w, &mut c);
    c.data(&mut w.sim, 0, &hello);
    let echoed = pump(&mut w, &mut c, hello.len(), 5_000);
    print_counters(&w.sim);
    assert!(echoed, "the new handshake was not spliced");
    assert_eq!(first_difference(&c.received, &hello), None);
    assert_eq!(events(&w, Event::EmbryoEvicted), 1);
    assert_eq!(drops(&w, DropReason::EmbryoTableFull), 0);
    assert_eq!(events(&w, Event::Spliced), 1);
    // The oldest idle connection gave way; the other three still wait.
    assert_eq!(w.sim.worker.stage().embryos(), 3);
    // Its client got a RST: from sluice's MAC on the client's port to the client's, at
    // the sequence number after sluice's SYN-ACK, acknowledging the client's SYN (it sent
    // nothing after), valid checksums. The other idle clients got nothing.
    let host_mac = w.sim.hosts[0].mac.0;
    let sluice_mac = w.sim.sluice_macs[0];
    for (k, c) in idle.iter().enumerate() {
        let local = c.local;
        let frames = w.sim.hosts[0]
            .dev
            .take_diverted(|f| parse(f).is_some_and(|s| s.dst == local));
        if k > 0 {
            assert!(frames.is_empty(), "idle client {k} was sent {frames:?}");
            continue;
        }
        assert_eq!(
            frames.len(),
            1,
            "one RST for the evicted client: {frames:?}"
        );
        let f = &frames[0];
        assert_eq!(&f[..6], &host_mac, "to the client's MAC");
        assert_eq!(&f[6..12], &sluice_mac, "from sluice's port MAC");
        check_checksums(f).expect("checksums");
        let seg = parse(f).expect("a TCP segment");
        assert_eq!(seg.src, c.remote, "from the virtual address");
        assert_eq!(seg.flags, flags::RST | flags::ACK, "{seg:?}");
        let irs = c.irs.expect("the client saw sluice's SYN-ACK");
        assert_eq!(
            seg.seq,
            irs.wrapping_add(1),
            "sluice's next sequence number"
        );
        assert_eq!(
            seg.ack,
            c.isn.wrapping_add(1),
            "the client's next sequence number"
        );
    }
    assert_eq!(events(&w, Event::SpliceResetSent), 1);
}

#[test]
fn one_source_holds_at_most_its_share_of_embryos() {
    let mut cfg = balancer_config(43);
    cfg.splice = SpliceConfig {
        embryos: 16,
        embryos_per_source: 3,
        first_bytes_ms: 60_000,
        ..SpliceConfig::default()
    };
    let mut w = World::new(cfg, 2);
    let mut idle: Vec<RawClient> = (0..5).map(raw_client).collect();
    for c in &mut idle {
        handshake(&mut w, c);
        w.steps(10);
    }
    print_counters(&w.sim);
    assert_eq!(w.sim.worker.stage().embryos(), 3);
    assert_eq!(drops(&w, DropReason::SourceEmbryoLimit), 2);
    assert_eq!(events(&w, Event::EmbryoEvicted), 0);
}
