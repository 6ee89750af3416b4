//! In-memory wire: two connected ports, for tests, simulations and benchmarks.
//!
//! Each direction has one lock-free ring per queue. A packet sent on either end is steered
//! to the peer's rx queue by a symmetric flow hash (software RSS: both directions of a
//! flow land on the same queue index), so multi-queue behaviour can be tested without a NIC.

use super::{Burst, LinkState, Opened, Port, PortStats, Queue};
use crate::port::Pkt;
use crate::wire::MacAddr;
use crossbeam_queue::ArrayQueue;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

struct Counters {
    rx_packets: AtomicU64,
    rx_bytes: AtomicU64,
    tx_packets: AtomicU64,
    tx_bytes: AtomicU64,
}

struct End {
    name: String,
    mac: MacAddr,
    queues: u16,
    counters: Counters,
}

impl Port for End {
    fn name(&self) -> &str {
        &self.name
    }
    fn mac(&self) -> MacAddr {
        self.mac
    }
    fn queues(&self) -> u16 {
        self.queues
    }
    fn link(&self) -> LinkState {
        LinkState::Up { speed_mbps: 0 }
    }
    fn stats(&self) -> PortStats {
        PortStats {
            rx_packets: self.counters.rx_packets.load(Relaxed),
            rx_bytes: self.counters.rx_bytes.load(Relaxed),
            tx_packets: self.counters.tx_packets.load(Relaxed),
            tx_bytes: self.counters.tx_bytes.load(Relaxed),
            ..PortStats::default()
        }
    }
}

type Rings = Arc<Vec<ArrayQueue<Pkt>>>;

struct MemQueue {
    end: Arc<End>,
    rx: Rings,
    rx_idx: usize,
    tx: Rings,
}

impl Queue for MemQueue {
    fn rx_burst(&mut self, out: &mut Burst) -> usize {
        let ring = &self.rx[self.rx_idx];
        let (mut n, mut bytes) = (0usize, 0u64);
        while !out.is_full() {
            let Some(p) = ring.pop() else { break };
            bytes += p.len() as u64;
            // Cannot fail: the burst is not full.
            let _ = out.push(p);
            n += 1;
        }
        if n > 0 {
            self.end.counters.rx_packets.fetch_add(n as u64, Relaxed);
            self.end.counters.rx_bytes.fetch_add(bytes, Relaxed);
        }
        n
    }

    fn tx_burst(&mut self, pkts: &mut Burst) -> usize {
        let nq = self.tx.len();
        let mut sent = 0usize;
        let mut bytes = 0u64;
        // Send in order; stop at the first packet whose ring is full so the unsent ones
        // stay at the front of the burst.
        let mut rest = Burst::new();
        for p in pkts.drain() {
            if !rest.is_empty() {
                let _ = rest.push(p);
                continue;
            }
            let q = if nq == 1 {
                0
            } else {
                flow_hash(p.data()) as usize % nq
            };
            let len = p.len() as u64;
            match self.tx[q].push(p) {
                Ok(()) => {
                    sent += 1;
                    bytes += len;
                }
                Err(p) => {
                    let _ = rest.push(p);
                }
            }
        }
        for p in rest.drain() {
            let _ = pkts.push(p);
        }
        if sent > 0 {
            self.end.counters.tx_packets.fetch_add(sent as u64, Relaxed);
            self.end.counters.tx_bytes.fetch_add(bytes, Relaxed);
        }
        sent
    }
}

/// Two connected ports `a` and `b` with `queues` queue pairs each and rings of `depth`
/// packets per queue and direction. MACs derive from the names.
pub fn pair(a: &str, b: &str, queues: u16, depth: usize) -> (Opened, Opened) {
    let queues = queues.max(1);
    let rings =
        |n: u16| -> Rings { Arc::new((0..n).map(|_| ArrayQueue::new(depth.max(1))).collect()) };
    let a_to_b = rings(queues);
    let b_to_a = rings(queues);
    let end = |name: &str| {
        Arc::new(End {
            name: name.to_string(),
            mac: super::mac_from_name(name),
            queues,
            counters: Counters {
                rx_packets: AtomicU64::new(0),
                rx_bytes: AtomicU64::new(0),
                tx_packets: AtomicU64::new(0),
                tx_bytes: AtomicU64::new(0),
            },
        })
    };
    let (ea, eb) = (end(a), end(b));
    let open = |e: &Arc<End>, rx: &Rings, tx: &Rings| Opened {
        port: e.clone() as Arc<dyn Port>,
        queues: (0..usize::from(queues))
            .map(|i| {
                Box::new(MemQueue {
                    end: e.clone(),
                    rx: rx.clone(),
                    rx_idx: i,
                    tx: tx.clone(),
                }) as Box<dyn Queue>
            })
            .collect(),
    };
    (open(&ea, &b_to_a, &a_to_b), open(&eb, &a_to_b, &b_to_a))
}

/// A symmetric flow hash of an Ethernet frame: IPv4/IPv6 addresses and TCP/UDP ports of
/// both directions hash alike (XOR is order-free). Non-IP frames hash to 0.
pub fn flow_hash(frame: &[u8]) -> u32 {
    let Some(&[t0, t1]) = frame.get(12..14) else {
        return 0;
    };
    let l3 = &frame[14..];
    let (addrs, proto, l4): (u64, u8, &[u8]) = match u16::from_be_bytes([t0, t1]) {
        0x0800 => {
            let Some(h) = l3.get(..20) else { return 0 };
            let ihl = usize::from(h[0] & 0x0f) * 4;
            let s = u32::from_be_bytes([h[12], h[13], h[14], h[15]]);
            let d = u32::from_be_bytes([h[16], h[17], h[18], h[19]]);
            (u64::from(s ^ d), h[9], l3.get(ihl..).unwrap_or(&[]))
        }
        0x86dd => {
            let Some(h) = l3.get(..40) else { return 0 };
            let mut x = 0u64;
            for i in (8..40).step_by(8) {
                let mut w = [0u8; 8];
                w.copy_from_slice(&h[i..i + 8]);
                x ^= u64::from_be_bytes(w);
            }
            (x, h[6], &l3[40..])
        }
        _ => return 0,
    };
    let ports = match (proto, l4.get(..4)) {
        (6 | 17, Some(p)) => {
            u64::from(u16::from_be_bytes([p[0], p[1]]) ^ u16::from_be_bytes([p[2], p[3]]))
        }
        _ => 0,
    };
    let mut h = addrs ^ (ports << 48) ^ u64::from(proto);
    // murmur3 finaliser
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::Pool;

    fn frame(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8];
        f[12] = 0x08;
        f[14] = 0x45;
        f[14 + 9] = 17;
        f[26..30].copy_from_slice(&src);
        f[30..34].copy_from_slice(&dst);
        f[34..36].copy_from_slice(&sp.to_be_bytes());
        f[36..38].copy_from_slice(&dp.to_be_bytes());
        f
    }

    #[test]
    fn hash_is_symmetric() {
        let a = frame([10, 0, 0, 1], [10, 0, 0, 2], 1234, 80);
        let b = frame([10, 0, 0, 2], [10, 0, 0, 1], 80, 1234);
        assert_eq!(flow_hash(&a), flow_hash(&b));
        assert_ne!(
            flow_hash(&a),
            flow_hash(&frame([10, 0, 0, 1], [10, 0, 0, 2], 1235, 80))
        );
        assert_eq!(flow_hash(&[0u8; 5]), 0);
    }

    #[test]
    fn pair_moves_packets_and_keeps_unsent() {
        let pool = Pool::new(16);
        let (mut a, mut b) = pair("a", "b", 1, 2);
        let mut burst = Burst::new();
        for i in 0..3u8 {
            burst.push(pool.alloc_copy(&[i; 60]).unwrap()).unwrap();
        }
        assert_eq!(a.queues[0].tx_burst(&mut burst), 2, "ring depth 2");
        assert_eq!(burst.len(), 1);
        assert_eq!(
            burst.as_slice()[0].data()[0],
            2,
            "the unsent packet stays in order"
        );
        drop(burst);
        let mut got = Burst::new();
        assert_eq!(b.queues[0].rx_burst(&mut got), 2);
        assert_eq!(got.as_slice()[0].data()[0], 0);
        assert_eq!(got.as_slice()[1].data()[0], 1);
        assert_eq!(a.port.stats().tx_packets, 2);
        assert_eq!(b.port.stats().rx_bytes, 120);
        drop(got);
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn multi_queue_steers_flows_consistently() {
        let pool = Pool::new(64);
        let (mut a, mut b) = pair("a", "b", 2, 64);
        let mut burst = Burst::new();
        for port in 0..32u16 {
            burst
                .push(
                    pool.alloc_copy(&frame([10, 0, 0, 1], [10, 0, 0, 2], 1000 + port, 80))
                        .unwrap(),
                )
                .unwrap();
        }
        assert_eq!(a.queues[0].tx_burst(&mut burst), 32);
        let (mut q0, mut q1) = (Burst::new(), Burst::new());
        let n0 = b.queues[0].rx_burst(&mut q0);
        let n1 = b.queues[1].rx_burst(&mut q1);
        assert_eq!(n0 + n1, 32);
        assert!(n0 > 0 && n1 > 0, "both queues used: {n0} / {n1}");
        for p in q0.as_slice() {
            assert_eq!(flow_hash(p.data()) % 2, 0);
        }
    }
}
