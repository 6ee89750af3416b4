//! Hostile TCP flags and checksums at the balancer stage: a SYN carrying FIN or RST
//! opens nothing (`tcp_bad_flags`), and a SYN to a delayed-binding listener gets a SYN
//! cookie only when its TCP checksum is right (`tcp_checksum`).

use sluice_dataplane::balancer::{Balancer, BalancerConfig};
use sluice_dataplane::pipeline::{Ctx, Stage, Verdict};
use sluice_dataplane::port::{Pkt, Pool};
use sluice_dataplane::rcu::Publisher;
use sluice_dataplane::stats::{Counters, DropReason, Event};
use sluice_dataplane::tables::snapshot::Snapshot;
use sluice_dataplane::wire::{ip_proto, tcp};
use sluice_tests::splice::{snapshot, CLIENT, VIP};
use sluice_tests::stage::{self, frame};

fn balancer(publisher: &mut Publisher<Snapshot>) -> Balancer {
    let cfg = BalancerConfig {
        flow_capacity: 64,
        ..BalancerConfig::default()
    };
    stage::balancer(publisher, &["10.78.0.11", CLIENT], cfg)
}

fn rx(b: &mut Balancer, pool: &Pool, f: &[u8], c: &mut Counters) -> Verdict {
    let mut pkts: Vec<Pkt> = vec![pool.alloc_copy(f).expect("buffer")];
    let mut v = [Verdict::Drop(DropReason::BadPort)];
    b.process_burst(0, &mut pkts, &mut v, &mut Ctx::new(0, c));
    v[0]
}

#[test]
fn syn_with_fin_or_rst_opens_nothing() {
    let mut publisher = Publisher::new(snapshot(), 3);
    let mut b = balancer(&mut publisher);
    let pool = Pool::new(8);
    let mut c = Counters::new(2);
    use tcp::flags::{FIN, RST, SYN};
    for (i, flags) in [SYN | FIN, SYN | RST, SYN | FIN | RST]
        .into_iter()
        .enumerate()
    {
        let f = frame(
            ip_proto::TCP,
            (CLIENT, 40_000 + i as u16),
            (VIP, 443),
            flags,
            b"",
        );
        assert_eq!(
            rx(&mut b, &pool, &f, &mut c),
            Verdict::Drop(DropReason::TcpBadFlags),
            "flags {flags:#x}"
        );
        // Routed traffic (no listener) alike.
        let f = frame(
            ip_proto::TCP,
            (CLIENT, 41_000 + i as u16),
            ("10.78.0.11", 22),
            flags,
            b"",
        );
        assert_eq!(
            rx(&mut b, &pool, &f, &mut c),
            Verdict::Drop(DropReason::TcpBadFlags),
            "routed, flags {flags:#x}"
        );
    }
    assert_eq!(c.events_of(Event::SynCookieSent), 0);
    assert_eq!(b.flows().len(), 0);
    // A plain SYN still gets its cookie.
    let f = frame(ip_proto::TCP, (CLIENT, 40_100), (VIP, 443), SYN, b"");
    assert_eq!(rx(&mut b, &pool, &f, &mut c), Verdict::Tx(0));
    assert_eq!(c.events_of(Event::SynCookieSent), 1);
}

#[test]
fn a_syn_with_a_bad_checksum_gets_no_cookie() {
    let mut publisher = Publisher::new(snapshot(), 3);
    let mut b = balancer(&mut publisher);
    let pool = Pool::new(8);
    let mut c = Counters::new(2);
    let good = frame(
        ip_proto::TCP,
        (CLIENT, 40_000),
        (VIP, 443),
        tcp::flags::SYN,
        b"",
    );
    let mut bad = good.clone();
    // The TCP checksum field (Ethernet 14 + IPv4 20 + 16).
    bad[50] ^= 0x5a;
    assert_eq!(
        rx(&mut b, &pool, &bad, &mut c),
        Verdict::Drop(DropReason::TcpChecksum)
    );
    assert_eq!(c.events_of(Event::SynCookieSent), 0);
    assert_eq!(rx(&mut b, &pool, &good, &mut c), Verdict::Tx(0));
    assert_eq!(c.events_of(Event::SynCookieSent), 1);
}
