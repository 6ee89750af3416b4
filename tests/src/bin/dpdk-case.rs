//! One DPDK vdev test case per process (DPDK allows one EAL per process):
//! `dpdk-case <case> <workdir>`. Prints `PASS <details>` and exits 0, or panics.
//!
//! Cases: `ring` (net_ring burst I/O and loopback, multi-queue), `null` (net_null bursts
//! through the worker and forwarder), `pcap` (net_pcap replay in, capture out, compared with
//! the pipeline's reference output), `tap` (net_tap with the kernel on the other side:
//! the kernel pings sluice), `balance` (two net_tap ports around the balancer, real
//! kernel clients and servers in namespaces: see `sluice_tests::kernel`). Every case checks that the mbuf pools are whole again once
//! the ports are closed.

use sluice_dataplane::pipeline::{
    Ctx, Forwarder, ForwarderConfig, IfAddr, NeighbourCache, PortConf, Verdict,
};
use sluice_dataplane::port::{dpdk, pcap, Burst, Opened, Pool};
use sluice_dataplane::stats::{Counters, DropReason};
use sluice_dataplane::wire::{ethernet, EtherType, MacAddr};
use sluice_dataplane::worker::{Idle, Worker, WorkerConfig};
use sluice_tests::fixtures::{arp_request, echo_request};
use sluice_tests::kernel::{check_burst, manifests, Rig};
use sluice_tests::sys::{must, unique_name, Netns};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn eal(vdevs: &[String]) {
    let mut a: Vec<String> = [
        "--no-huge",
        "--no-pci",
        "--no-shconf",
        "-m",
        "256",
        "-l",
        "0",
        "--log-level",
        "lib.eal:error",
    ]
    .map(String::from)
    .to_vec();
    a.push("--file-prefix".into());
    a.push(format!("sluice-test-{}", std::process::id()));
    for v in vdevs {
        a.push("--vdev".into());
        a.push(v.clone());
    }
    dpdk::init(&a).expect("EAL init");
}

fn in_use() -> u64 {
    dpdk::eal().expect("EAL").mbufs_in_use()
}

fn frame(pool: &Pool, bytes: &[u8]) -> sluice_dataplane::port::Pkt {
    pool.alloc_copy(bytes).expect("pool")
}

/// net_ring: what is sent on a queue comes back on it (the vdev loops tx to rx), bytes
/// intact, on two queues.
fn ring() -> String {
    eal(&["net_ring0".into()]);
    let pool = Pool::new(256);
    let mut o = dpdk::open("r", "net_ring0", 2).expect("open net_ring0");
    let base = in_use();
    let mut moved = 0;
    for q in 0..2usize {
        for round in 0..50u32 {
            let mut b = Burst::new();
            for i in 0..32u32 {
                let mut bytes = vec![0u8; 64 + (i as usize % 7) * 100];
                bytes[..4].copy_from_slice(&(round * 32 + i).to_be_bytes());
                bytes[4] = q as u8;
                b.push(frame(&pool, &bytes))
                    .unwrap_or_else(|_| panic!("burst"));
            }
            let want: u64 = b.as_slice().iter().map(|p| p.len() as u64).sum();
            let (sent, sent_bytes) = o.queues[q].tx_burst_counted(&mut b);
            assert_eq!(sent, 32, "ring takes the whole burst");
            assert_eq!(sent_bytes, want, "bytes sent counted");
            let mut got = Burst::new();
            let (mut n, mut got_bytes) = (0, 0);
            while n < 32 {
                let (k, bytes) = o.queues[q].rx_burst_counted(&mut got);
                assert!(k > 0, "packets come back");
                n += k;
                got_bytes += bytes;
            }
            assert_eq!(got_bytes, want, "bytes received counted");
            for (i, p) in got.as_slice().iter().enumerate() {
                let d = p.data();
                assert_eq!(
                    u32::from_be_bytes([d[0], d[1], d[2], d[3]]),
                    round * 32 + i as u32
                );
                assert_eq!(d[4], q as u8);
                assert_eq!(d.len(), 64 + (i % 7) * 100);
            }
            moved += n;
        }
    }
    assert_eq!(
        pool.in_use(),
        0,
        "foreign buffers were copied into mbufs and freed"
    );
    let st = o.port.stats();
    assert_eq!(st.tx_packets, moved as u64);
    assert_eq!(in_use(), base, "every mbuf back in the pool");
    drop(o);
    assert_eq!(in_use(), 0);
    format!("net_ring moved {moved} packets on 2 queues")
}

/// net_null: the PMD makes packets on rx and swallows them on tx. The worker with the
/// forwarder receives bursts (zeroed frames: not for sluice) and drops every one under a
/// reason; then mbufs return to the pool.
fn null() -> String {
    eal(&["net_null0".into(), "net_null1".into()]);
    let a = dpdk::open("a", "net_null0", 1).expect("open net_null0");
    let b = dpdk::open("b", "net_null1", 1).expect("open net_null1");
    let conf = ForwarderConfig::new(
        vec![
            PortConf {
                name: "a".into(),
                mac: a.port.mac(),
                addrs: vec![IfAddr {
                    addr: "10.1.0.2".parse().unwrap(),
                    prefix_len: 24,
                }],
            },
            PortConf {
                name: "b".into(),
                mac: b.port.mac(),
                addrs: vec![IfAddr {
                    addr: "10.2.0.2".parse().unwrap(),
                    prefix_len: 24,
                }],
            },
        ],
        &[],
    )
    .unwrap();
    let fw = Forwarder::new(Arc::new(conf), Arc::new(NeighbourCache::new(64)));
    let queues = vec![
        a.queues.into_iter().next().unwrap(),
        b.queues.into_iter().next().unwrap(),
    ];
    let mut w = Worker::new(
        WorkerConfig {
            id: 0,
            core: None,
            idle: Idle::Spin,
        },
        queues,
        fw,
    );
    let mut total = 0;
    for _ in 0..200 {
        total += w.poll_once(0);
    }
    let c = w.counters().clone();
    assert_eq!(
        total,
        200 * 2 * 32,
        "net_null fills every burst on both ports"
    );
    assert_eq!(c.ports[0].rx_packets + c.ports[1].rx_packets, total as u64);
    assert_eq!(
        c.ports[0].rx_bytes + c.ports[1].rx_bytes,
        total as u64 * 64,
        "rx bytes counted while receiving (net_null's frames are 64 bytes)"
    );
    assert_eq!(
        c.total_drops(),
        total as u64,
        "every packet dropped under a reason: {c:?}"
    );
    drop(w);
    drop((a.port, b.port));
    assert_eq!(in_use(), 0, "every mbuf back in the pool");
    format!(
        "net_null: {total} packets, drops {:?}",
        DropReason::ALL
            .iter()
            .filter(|r| c.drops_of(**r) > 0)
            .map(|r| (r.name(), c.drops_of(*r)))
            .collect::<Vec<_>>()
    )
}

fn test_frames() -> Vec<Vec<u8>> {
    let peer = MacAddr([0x02, 0, 0, 0, 0, 1]);
    let (us, them) = (Ipv4Addr::new(10, 5, 0, 1), Ipv4Addr::new(10, 5, 0, 2));
    let mut out = Vec::new();
    // ARP: who has 10.5.0.2? tell 10.5.0.1.
    out.push(arp_request(peer, us, them));
    // Pings (broadcast MAC: the test does not know the vdev's MAC in advance).
    for seq in 0..5u16 {
        out.push(echo_request(peer, (us, them), 9, seq, &[seq as u8; 56]));
    }
    // Something to drop: an unknown EtherType.
    let mut f = vec![0u8; 60];
    ethernet::Repr {
        dst_addr: MacAddr::BROADCAST,
        src_addr: peer,
        ethertype: EtherType::Unknown(0x88b5),
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut f[..]));
    out.push(f);
    out
}

/// net_pcap: a capture replayed as rx, tx captured; the output equals the reference
/// pipeline's answers to the same frames.
fn pcap_case(dir: &Path) -> String {
    let (inp, outp) = (dir.join("in.pcap"), dir.join("out.pcap"));
    let frames = test_frames();
    pcap::write_file(&inp, frames.iter().map(|f| &f[..])).unwrap();
    eal(&[format!(
        "net_pcap0,rx_pcap={},tx_pcap={}",
        inp.display(),
        outp.display()
    )]);
    let o = dpdk::open("p", "net_pcap0", 1).expect("open net_pcap0");
    let mac = o.port.mac();
    let conf = Arc::new(
        ForwarderConfig::new(
            vec![PortConf {
                name: "p".into(),
                mac,
                addrs: vec![IfAddr {
                    addr: "10.5.0.2".parse().unwrap(),
                    prefix_len: 24,
                }],
            }],
            &[],
        )
        .unwrap(),
    );
    // Reference: the forwarder on plain buffers.
    let pool = Pool::new(64);
    let mut reference = Forwarder::new(conf.clone(), Arc::new(NeighbourCache::new(8)));
    let mut expected = Vec::new();
    let mut c = Counters::new(1);
    for f in &frames {
        let mut p = pool.alloc_copy(f).unwrap();
        if let Verdict::Tx(0) = reference.process(0, &mut p, &mut Ctx::new(0, &mut c)) {
            expected.push(p.data().to_vec());
        }
    }
    assert_eq!(expected.len(), 6, "ARP reply + 5 echo replies");
    let mut w = Worker::new(
        WorkerConfig {
            id: 0,
            core: None,
            idle: Idle::Spin,
        },
        o.queues,
        Forwarder::new(conf, Arc::new(NeighbourCache::new(8))),
    );
    let t = Instant::now();
    let mut got = 0;
    while got < frames.len() && t.elapsed() < Duration::from_secs(10) {
        got += w.poll_once(0);
    }
    w.flush();
    let c = w.counters().clone();
    assert_eq!(got, frames.len());
    assert_eq!(c.drops_of(DropReason::UnknownEtherType), 1);
    drop(w);
    drop(o.port); // closes the port: net_pcap flushes and closes the capture
    assert_eq!(in_use(), 0, "every mbuf back in the pool");
    let captured = pcap::read_file(&outp).unwrap();
    assert_eq!(
        captured, expected,
        "the capture equals the reference answers"
    );
    format!(
        "net_pcap: {} in, {} out, identical to the reference",
        frames.len(),
        captured.len()
    )
}

/// net_tap: the kernel (in a namespace) pings sluice through the TAP device DPDK made.
fn tap() -> String {
    let ifname = unique_name("sld");
    eal(&[format!("net_tap0,iface={ifname}")]);
    let o: Opened = dpdk::open("t", "net_tap0", 1).expect("open net_tap0");
    let mac = o.port.mac();
    let conf = Arc::new(
        ForwarderConfig::new(
            vec![PortConf {
                name: "t".into(),
                mac,
                addrs: vec![IfAddr {
                    addr: "10.6.0.2".parse().unwrap(),
                    prefix_len: 24,
                }],
            }],
            &[],
        )
        .unwrap(),
    );
    let w = Worker::new(
        WorkerConfig {
            id: 0,
            core: None,
            idle: Idle::Sleep {
                after: 100,
                max: Duration::from_micros(200),
            },
        },
        o.queues,
        Forwarder::new(conf, Arc::new(NeighbourCache::new(8))),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let h = sluice_dataplane::worker::spawn(w, stop.clone()).unwrap();
    let ns = Netns::new("sldn");
    must("ip", &["link", "set", &ifname, "netns", &ns.name]);
    ns.exec(&["ip", "addr", "add", "10.6.0.1/24", "dev", &ifname]);
    ns.exec(&["ip", "link", "set", &ifname, "up"]);
    let out = ns.try_exec(&["ping", "-c", "3", "-i", "0.2", "-W", "2", "10.6.0.2"]);
    let neigh = ns.exec(&["ip", "neigh", "show", "10.6.0.2", "dev", &ifname]);
    stop.store(true, Ordering::Relaxed);
    let c = h.join().unwrap();
    assert!(
        out.status.success(),
        "ping through net_tap: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        neigh.contains(&mac.to_string()),
        "ip neigh shows sluice's MAC {mac}: {neigh}"
    );
    assert!(
        c.ports[0].tx_packets >= 4,
        "ARP reply + 3 echo replies: {c:?}"
    );
    // Move the device back before DPDK closes it (net_tap deletes its interface by name).
    let _ = ns.try_exec(&["ip", "link", "set", &ifname, "netns", "1"]);
    drop(o.port);
    assert_eq!(in_use(), 0, "every mbuf back in the pool");
    format!(
        "net_tap: kernel pinged sluice, {} replies sent",
        c.ports[0].tx_packets
    )
}

/// Two net_tap ports around the balancer (one worker), the client and the backends in
/// namespaces: 200 kernel connections answered 3:1 through SNAT, every mbuf returned.
fn balance() -> String {
    let (out_if, in_if) = (unique_name("kdo"), unique_name("kdi"));
    eal(&[
        format!("net_tap0,iface={out_if}"),
        format!("net_tap1,iface={in_if}"),
    ]);
    let outside = dpdk::open("outside", "net_tap0", 1).expect("open net_tap0");
    let inside = dpdk::open("inside", "net_tap1", 1).expect("open net_tap1");
    let mut rig = Rig::start(
        outside,
        inside,
        (&out_if, &in_if),
        &manifests((3, 1), "10.77.0.0/24"),
    );
    let v = check_burst(&mut rig.agent, 200, 0.75, 0.08);
    let c = rig.finish();
    assert_eq!(in_use(), 0, "every mbuf back in the pool");
    format!(
        "net_tap balance: 200 connections answered {v}, {} flows",
        c.events_of(sluice_dataplane::stats::Event::FlowCreated)
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let case = args.get(1).map(String::as_str).unwrap_or("");
    let dir = PathBuf::from(args.get(2).cloned().unwrap_or_else(|| ".".into()));
    let msg = match case {
        "ring" => ring(),
        "null" => null(),
        "pcap" => pcap_case(&dir),
        "tap" => tap(),
        "balance" => balance(),
        other => {
            eprintln!("unknown case {other:?}: ring | null | pcap | tap | balance");
            std::process::exit(2);
        }
    };
    println!("PASS {msg}");
    let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/sluice-test-{}", std::process::id()));
}
