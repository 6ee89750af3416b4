//! Ports: packets in and out of NIC queues, TAP devices, pcap files and in-memory wires.
//!
//! A backend opens a device and splits it in two:
//!
//! - a [`Port`] (shared, `Arc`): name, MAC, queue count, link state, device counters;
//! - one [`Queue`] per queue pair (owned by the worker that polls it): burst rx and tx of
//!   owned [`Pkt`]s.
//!
//! Backends: `dpdk` (cargo feature `dpdk`: any PMD, by PCI address or vdev devargs),
//! [`tap`] (Linux `/dev/net/tun`, no DPDK), [`pcap`] (a capture file as rx, another as
//! tx) and [`mem`] (two connected ports in memory, for tests and benchmarks).
//!
//! TX contract: `tx_burst` takes packets from the front of the burst; what it does not take
//! stays in the burst, and the caller frees it and counts it as a drop. Nothing leaks.
//!
//! This module holds `unsafe` code (FFI, raw packet buffers, device I/O), as do
//! [`crate::mem`], [`crate::rcu`] and `dpdk-sys`; every block carries a `// SAFETY:`
//! comment.

pub mod mem;
pub mod pcap;
mod pkt;
pub mod tap;

#[cfg(feature = "dpdk")]
pub mod dpdk;

pub use pkt::{Burst, Pkt, Pool, BURST, DATA_ROOM, HEADROOM};

use crate::wire::MacAddr;
use std::sync::Arc;

/// Link state of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// Link up, with its speed in Mbit/s when the device knows it.
    Up {
        /// Speed in Mbit/s (0 = unknown).
        speed_mbps: u32,
    },
    /// Link down.
    Down,
}

/// Device counters of a port (what the device itself saw; the worker's counters say what
/// sluice did with the packets).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets the device dropped on receive (no buffer, queue full, ...).
    pub rx_missed: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Transmit errors.
    pub tx_errors: u64,
}

/// A device: what is shared between the workers polling its queues and the control thread.
pub trait Port: Send + Sync {
    /// The port's name (from the configuration).
    fn name(&self) -> &str;
    /// The MAC address sluice uses on this port.
    fn mac(&self) -> MacAddr;
    /// Number of rx/tx queue pairs.
    fn queues(&self) -> u16;
    /// Current link state.
    fn link(&self) -> LinkState;
    /// Device counters.
    fn stats(&self) -> PortStats;
}

/// One rx/tx queue pair of a port, polled by exactly one worker.
pub trait Queue: Send {
    /// Receives up to `out.room()` packets, appending them to `out`. Returns how many.
    fn rx_burst(&mut self, out: &mut Burst) -> usize;
    /// As [`Queue::rx_burst`], and also returns the bytes received (the worker's
    /// `rx_bytes`). The default adds up the new packets' lengths; a queue that walks its
    /// packets anyway (DPDK checks every mbuf's segment count) adds them up in that pass.
    #[inline]
    fn rx_burst_counted(&mut self, out: &mut Burst) -> (usize, u64) {
        let before = out.len();
        let n = self.rx_burst(out);
        let bytes = out.as_slice()[before..]
            .iter()
            .map(|p| p.len() as u64)
            .sum();
        (n, bytes)
    }
    /// Sends packets from the front of `pkts`, removing those the device took. Returns
    /// how many were taken; the rest stay in `pkts` for the caller to free and count.
    fn tx_burst(&mut self, pkts: &mut Burst) -> usize;
    /// As [`Queue::tx_burst`], and also returns the bytes of the packets taken (the
    /// worker's `tx_bytes`). The default adds up lengths before and after; DPDK adds them
    /// up in the pass that checks every packet is an mbuf.
    #[inline]
    fn tx_burst_counted(&mut self, pkts: &mut Burst) -> (usize, u64) {
        let len = |b: &Burst| b.as_slice().iter().map(|p| p.len() as u64).sum::<u64>();
        let before = len(pkts);
        let sent = self.tx_burst(pkts);
        (sent, before - len(pkts))
    }
    /// Packets the queue itself had to discard (foreign buffers it could not copy, ...),
    /// since the queue was opened.
    fn discarded(&self) -> u64 {
        0
    }
    /// Where fresh buffers for packets sent on this queue come from (the worker hands
    /// them to its stage for packets it makes up: ARP requests, ...). `None` (the
    /// default): the queue has no buffers of its own (in-memory ports).
    fn allocator(&self) -> Option<Allocator> {
        None
    }
}

/// A source of fresh packet buffers: a [`Pool`], or (DPDK) a port's mbuf mempool.
/// Cloning is cheap; allocation takes no lock and no heap memory.
#[derive(Clone, Debug)]
pub struct Allocator(AllocFrom);

#[derive(Clone, Debug)]
enum AllocFrom {
    Pool(Pool),
    #[cfg(feature = "dpdk")]
    Mbuf(dpdk::MbufAlloc),
}

impl Allocator {
    /// An empty packet (length 0, default headroom), or `None` if none is free.
    #[inline]
    pub fn alloc(&self) -> Option<Pkt> {
        match &self.0 {
            AllocFrom::Pool(p) => p.alloc(),
            #[cfg(feature = "dpdk")]
            AllocFrom::Mbuf(m) => m.alloc(),
        }
    }

    #[cfg(feature = "dpdk")]
    pub(crate) fn mbuf(m: dpdk::MbufAlloc) -> Allocator {
        Allocator(AllocFrom::Mbuf(m))
    }
}

impl From<Pool> for Allocator {
    fn from(p: Pool) -> Allocator {
        Allocator(AllocFrom::Pool(p))
    }
}

/// An opened device: the shared port and one queue per queue pair.
pub struct Opened {
    /// The port.
    pub port: Arc<dyn Port>,
    /// Its queues, index = queue id.
    pub queues: Vec<Box<dyn Queue>>,
}

impl core::fmt::Debug for Opened {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Opened")
            .field("port", &self.port.name())
            .field("queues", &self.queues.len())
            .finish()
    }
}

/// How to open a port (plain data; `sluice-ctrl` translates the Appliance manifest into it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortKind {
    /// A Linux TAP device of this name, created if absent.
    Tap {
        /// Interface name (at most 15 bytes).
        ifname: String,
    },
    /// A DPDK ethdev: a PCI address (`0000:3b:00.0`) or vdev devargs
    /// (`net_tap0,iface=x`, `net_ring0`, ...).
    Dpdk {
        /// Devargs.
        devargs: String,
    },
    /// A pcap file replayed as rx (once, then nothing) and a pcap file written from tx.
    Pcap {
        /// Capture to read (`None`: nothing is received).
        rx: Option<std::path::PathBuf>,
        /// Capture to write (`None`: sent packets are discarded after counting).
        tx: Option<std::path::PathBuf>,
    },
}

/// Errors opening or driving a port.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PortError {
    /// An OS call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// DPDK refused something.
    #[error("DPDK: {0}")]
    Dpdk(String),
    /// A setting that cannot work.
    #[error("{0}")]
    Config(String),
    /// The DPDK backend is not compiled in.
    #[error("port {0}: this build has no DPDK backend (rebuild with the `dpdk` feature)")]
    NoDpdk(String),
}

impl PortError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> PortError {
        PortError::Io {
            what: what.into(),
            source,
        }
    }
}

/// A locally administered unicast MAC derived from a name (stable across runs), for ports
/// whose device has no MAC of sluice's own (TAP, pcap, memory).
pub fn mac_from_name(name: &str) -> MacAddr {
    // FNV-1a, 64 bits.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let b = h.to_be_bytes();
    MacAddr([0x02, b[1], b[2], b[3], b[4], b[5]])
}
