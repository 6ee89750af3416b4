//! Deterministic simulation: smoltcp hosts and sluice's worker on in-memory wires, one
//! virtual clock, seeded faults.

use sluice_dataplane::pipeline::{
    Forwarder, ForwarderConfig, IfAddr, NeighbourCache, PortConf, Route, Stage,
};
use sluice_dataplane::port::{mem, Burst, Pkt, Pool, Queue};
use sluice_dataplane::worker::{Idle, Worker, WorkerConfig};
use smoltcp::iface::{Config, Interface, SocketSet};
use smoltcp::phy::{self, Device, DeviceCapabilities, Medium};
use smoltcp::time::Instant;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr};
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Decides about a frame on its way: `true` keeps it (it may have been changed), `false`
/// takes it (a host's [`WireDevice::set_divert`] and [`WireDevice::set_tx_hook`]).
pub type FrameHook = Box<dyn FnMut(&mut [u8]) -> bool + Send>;

/// A small, seeded PRNG (xorshift64*): the same seed gives the same run.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed (0 is mapped to a fixed non-zero state).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next_u64() >> 11) as f64 / ((1u64 << 53) as f64)) < p
    }
    /// A number below `n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// Fault probabilities, each per packet.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Faults {
    /// Lose the packet.
    pub drop: f64,
    /// Send it twice.
    pub duplicate: f64,
    /// Hold it back and send it after the next one.
    pub reorder: f64,
    /// Flip one random byte after the Ethernet header.
    pub corrupt: f64,
}

impl Faults {
    /// No faults.
    pub const NONE: Faults = Faults {
        drop: 0.0,
        duplicate: 0.0,
        reorder: 0.0,
        corrupt: 0.0,
    };
}

/// What the injector did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Packets seen.
    pub packets: u64,
    /// Lost.
    pub dropped: u64,
    /// Duplicated.
    pub duplicated: u64,
    /// Reordered.
    pub reordered: u64,
    /// Corrupted.
    pub corrupted: u64,
}

/// Applies [`Faults`] to packets on their way onto a wire.
#[derive(Debug)]
pub struct FaultInjector {
    rng: Rng,
    faults: Faults,
    held: Option<Pkt>,
    /// Counts of what happened.
    pub stats: FaultStats,
}

impl FaultInjector {
    /// An injector with its own seed.
    pub fn new(faults: Faults, seed: u64) -> FaultInjector {
        FaultInjector {
            rng: Rng::new(seed),
            faults,
            held: None,
            stats: FaultStats::default(),
        }
    }

    /// Passes one packet through the faults into `out` (0, 1 or 2 packets come out, and a
    /// held one may follow).
    pub fn apply(&mut self, mut pkt: Pkt, pool: &Pool, out: &mut VecDeque<Pkt>) {
        self.stats.packets += 1;
        let f = self.faults;
        if self.rng.chance(f.drop) {
            self.stats.dropped += 1;
            return;
        }
        if self.rng.chance(f.corrupt) && pkt.len() > 14 {
            let i = 14 + self.rng.below(pkt.len() - 14);
            pkt.data_mut()[i] ^= 1 << self.rng.below(8);
            self.stats.corrupted += 1;
        }
        let dup = if self.rng.chance(f.duplicate) {
            self.stats.duplicated += 1;
            pool.alloc_copy(pkt.data())
        } else {
            None
        };
        if self.held.is_none() && self.rng.chance(f.reorder) {
            self.stats.reordered += 1;
            self.held = Some(pkt);
        } else {
            out.push_back(pkt);
            if let Some(h) = self.held.take() {
                out.push_back(h);
            }
        }
        if let Some(d) = dup {
            out.push_back(d);
        }
    }

    /// Releases a held packet (end of a simulation step).
    pub fn release(&mut self, out: &mut VecDeque<Pkt>) {
        if let Some(h) = self.held.take() {
            out.push_back(h);
        }
    }
}

/// The transmit side of a [`WireDevice`].
pub struct TxSide {
    queue: Box<dyn Queue>,
    pool: Pool,
    faults: FaultInjector,
    out: VecDeque<Pkt>,
    hook: Option<FrameHook>,
}

impl TxSide {
    fn send(&mut self) {
        let mut b = Burst::new();
        while let Some(p) = self.out.pop_front() {
            if b.push(p).is_err() {
                break;
            }
            if b.is_full() {
                self.queue.tx_burst(&mut b);
                b.clear(); // a full ring loses packets, like a real link
            }
        }
        self.queue.tx_burst(&mut b);
    }
}

/// A smoltcp `phy::Device` over one end of an in-memory wire, with a fault injector on
/// everything it sends. Tests can see and change what the host sends
/// ([`WireDevice::set_tx_hook`]), take frames away from the host's stack before it sees
/// them ([`WireDevice::set_divert`], for hand-made peers such as
/// [`RawClient`](crate::raw::RawClient)) and put frames of their own on the wire
/// ([`WireDevice::inject`]).
pub struct WireDevice {
    rx_queue: VecDeque<Pkt>,
    rx_burst: Burst,
    tx: TxSide,
    divert: Option<FrameHook>,
    diverted: VecDeque<Pkt>,
}

impl WireDevice {
    /// A device sending and receiving on `queue`, drawing buffers from `pool`.
    pub fn new(queue: Box<dyn Queue>, pool: Pool, faults: FaultInjector) -> WireDevice {
        WireDevice {
            rx_queue: VecDeque::new(),
            rx_burst: Burst::new(),
            tx: TxSide {
                queue,
                pool,
                faults,
                out: VecDeque::new(),
                hook: None,
            },
            divert: None,
            diverted: VecDeque::new(),
        }
    }

    /// Frames arriving for the host for which `take` returns `false` are held aside
    /// ([`WireDevice::take_diverted`]) instead of reaching its stack; `None` removes it.
    pub fn set_divert(&mut self, take: Option<FrameHook>) {
        self.divert = take;
    }

    /// Every frame the host's stack sends passes `hook` first (before the faults): it may
    /// change the frame, or return `false` to lose it.
    pub fn set_tx_hook(&mut self, hook: Option<FrameHook>) {
        self.tx.hook = hook;
    }

    /// Sends `frame` as this host, through the faults.
    pub fn inject(&mut self, frame: &[u8]) {
        if let Some(p) = self.tx.pool.alloc_copy(frame) {
            let pool = self.tx.pool.clone();
            self.tx.faults.apply(p, &pool, &mut self.tx.out);
            self.tx.send();
        }
    }

    /// Moves what arrived on the wire into the stack's queue or the diverted frames.
    fn pull(&mut self) {
        loop {
            if self.tx.queue.rx_burst(&mut self.rx_burst) == 0 {
                return;
            }
            for mut p in self.rx_burst.drain() {
                let keep = match self.divert.as_mut() {
                    Some(keep) => keep(p.data_mut()),
                    None => true,
                };
                if keep {
                    self.rx_queue.push_back(p);
                } else {
                    self.diverted.push_back(p);
                }
            }
            if !self.rx_queue.is_empty() {
                return;
            }
        }
    }

    /// The diverted frames that `pick` selects, oldest first (the others stay).
    pub fn take_diverted(&mut self, mut pick: impl FnMut(&[u8]) -> bool) -> Vec<Vec<u8>> {
        self.pull();
        let mut out = Vec::new();
        self.diverted.retain(|p| {
            if pick(p.data()) {
                out.push(p.data().to_vec());
                false
            } else {
                true
            }
        });
        out
    }

    /// What the fault injector did so far.
    pub fn fault_stats(&self) -> FaultStats {
        self.tx.faults.stats
    }

    /// Ends a step: releases a held (reordered) packet and sends what is queued.
    pub fn end_step(&mut self) {
        self.tx.faults.release(&mut self.tx.out);
        self.tx.send();
    }
}

/// Receive token: an owned packet.
pub struct RxTok(Pkt);

impl phy::RxToken for RxTok {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        f(self.0.data())
    }
}

/// Transmit token: allocates a buffer, lets smoltcp fill it, sends it through the faults.
pub struct TxTok<'a>(&'a mut TxSide);

impl phy::TxToken for TxTok<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let side = self.0;
        match side.pool.alloc().filter(|p| len <= p.capacity()) {
            Some(mut p) => {
                let _ = p.set_len(len);
                let r = f(p.data_mut());
                let keep = match side.hook.as_mut() {
                    Some(h) => h(p.data_mut()),
                    None => true,
                };
                if keep {
                    let pool = side.pool.clone();
                    side.faults.apply(p, &pool, &mut side.out);
                    side.send();
                }
                r
            }
            _ => {
                // Out of buffers: the frame is lost, as on a real link.
                let mut scratch = vec![0u8; len];
                f(&mut scratch)
            }
        }
    }
}

impl Device for WireDevice {
    type RxToken<'a> = RxTok;
    type TxToken<'a> = TxTok<'a>;

    fn receive(&mut self, _t: Instant) -> Option<(RxTok, TxTok<'_>)> {
        if self.rx_queue.is_empty() {
            self.pull();
        }
        let p = self.rx_queue.pop_front()?;
        Some((RxTok(p), TxTok(&mut self.tx)))
    }

    fn transmit(&mut self, _t: Instant) -> Option<TxTok<'_>> {
        Some(TxTok(&mut self.tx))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut c = DeviceCapabilities::default();
        c.medium = Medium::Ethernet;
        c.max_transmission_unit = 1514;
        c.max_burst_size = Some(32);
        c
    }
}

/// A smoltcp host on a wire.
pub struct Host {
    /// Its interface.
    pub iface: Interface,
    /// Its device.
    pub dev: WireDevice,
    /// Its sockets.
    pub sockets: SocketSet<'static>,
    /// Its MAC.
    pub mac: EthernetAddress,
}

impl Host {
    /// A host with `addrs`, default gateways `gw4`/`gw6`, on `queue`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        mac: [u8; 6],
        addrs: &[IpCidr],
        gw4: Option<smoltcp::wire::Ipv4Address>,
        gw6: Option<smoltcp::wire::Ipv6Address>,
        queue: Box<dyn Queue>,
        pool: Pool,
        faults: FaultInjector,
        seed: u64,
    ) -> Host {
        let mut dev = WireDevice::new(queue, pool, faults);
        let mac = EthernetAddress(mac);
        let mut cfg = Config::new(HardwareAddress::Ethernet(mac));
        cfg.random_seed = seed;
        let mut iface = Interface::new(cfg, &mut dev, Instant::from_millis(0));
        iface.update_ip_addrs(|a| {
            for c in addrs {
                let _ = a.push(*c);
            }
        });
        if let Some(g) = gw4 {
            let _ = iface.routes_mut().add_default_ipv4_route(g);
        }
        if let Some(g) = gw6 {
            let _ = iface.routes_mut().add_default_ipv6_route(g);
        }
        Host {
            iface,
            dev,
            sockets: SocketSet::new(vec![]),
            mac,
        }
    }

    /// Polls the interface at `now_ms` and ends the device's step.
    pub fn poll(&mut self, now_ms: u64) {
        let now = Instant::from_millis(now_ms as i64);
        self.iface.poll(now, &mut self.dev, &mut self.sockets);
        self.dev.end_step();
    }
}

/// One side of the simulated appliance: a link between a host and a sluice port.
#[derive(Debug, Clone)]
pub struct LinkSpec {
    /// sluice's port name.
    pub name: String,
    /// sluice's addresses on the port.
    pub addrs: Vec<IfAddr>,
    /// Faults on packets the host sends.
    pub host_faults: Faults,
    /// Faults on packets sluice sends to the host.
    pub sluice_faults: Faults,
}

/// Frames sluice sent (before the faults), recorded while `on`.
#[derive(Debug, Default)]
pub struct Capture {
    /// Whether frames are recorded.
    pub on: bool,
    /// (link index, frame), in the order sluice sent them.
    pub frames: Vec<(usize, Vec<u8>)>,
}

/// A queue wrapper applying faults to what sluice sends on a link.
struct FaultyQueue {
    inner: Box<dyn Queue>,
    faults: FaultInjector,
    pool: Pool,
    out: VecDeque<Pkt>,
    link: usize,
    capture: Arc<Mutex<Capture>>,
}

impl Queue for FaultyQueue {
    fn rx_burst(&mut self, out: &mut Burst) -> usize {
        self.inner.rx_burst(out)
    }
    fn tx_burst(&mut self, pkts: &mut Burst) -> usize {
        let n = pkts.len();
        if let Ok(mut c) = self.capture.lock() {
            if c.on {
                for p in pkts.as_slice() {
                    c.frames.push((self.link, p.data().to_vec()));
                }
            }
        }
        for p in pkts.drain() {
            self.faults.apply(p, &self.pool, &mut self.out);
        }
        self.faults.release(&mut self.out);
        let mut b = Burst::new();
        while let Some(p) = self.out.pop_front() {
            if let Err(p) = b.push(p) {
                self.inner.tx_burst(&mut b);
                b.clear();
                let _ = b.push(p);
            }
        }
        self.inner.tx_burst(&mut b);
        n
    }
}

/// sluice (one worker with a stage: the forwarder unless built with [`Sim::build`])
/// between hosts, all on one virtual clock.
pub struct Sim<S: Stage = Forwarder> {
    /// Virtual time in ms.
    pub now_ms: u64,
    /// The hosts, one per link, in link order.
    pub hosts: Vec<Host>,
    /// sluice's worker.
    pub worker: Worker<S>,
    /// The shared neighbour cache of the forwarder.
    pub neighbours: Arc<NeighbourCache>,
    /// sluice's MAC per link.
    pub sluice_macs: Vec<[u8; 6]>,
    /// The pool every packet comes from.
    pub pool: Pool,
    /// What sluice sent, when switched on ([`Sim::capture`]).
    pub capture: Arc<Mutex<Capture>>,
}

impl Sim<Forwarder> {
    /// Builds a simulation: for each link a wire, a host (addresses `host_addrs[i]`,
    /// gateway = sluice's first address of the family on that link) and a sluice port;
    /// sluice runs the plain forwarder.
    pub fn new(links: &[LinkSpec], host_addrs: &[Vec<IpCidr>], routes: &[Route], seed: u64) -> Sim {
        Sim::build(links, host_addrs, routes, &[], seed, |fw| fw)
    }

    /// An address of sluice as a smoltcp address.
    pub fn addr(ip: IpAddr) -> IpAddress {
        match ip {
            IpAddr::V4(v) => IpAddress::Ipv4(v),
            IpAddr::V6(v) => IpAddress::Ipv6(v),
        }
    }
}

impl<S: Stage> Sim<S> {
    /// As [`Sim::new`], with virtual addresses and the stage made from the forwarder by
    /// `stage` (e.g. a `Balancer` around it).
    pub fn build(
        links: &[LinkSpec],
        host_addrs: &[Vec<IpCidr>],
        routes: &[Route],
        virtual_addrs: &[IpAddr],
        seed: u64,
        stage: impl FnOnce(Forwarder) -> S,
    ) -> Sim<S> {
        let pool = Pool::new(8192);
        let capture = Arc::new(Mutex::new(Capture::default()));
        let mut hosts = Vec::new();
        let mut queues: Vec<Box<dyn Queue>> = Vec::new();
        let mut ports = Vec::new();
        let mut macs = Vec::new();
        for (i, l) in links.iter().enumerate() {
            let (host_end, sluice_end) = mem::pair(&format!("host-{}", l.name), &l.name, 1, 1024);
            let gw4 = l.addrs.iter().find_map(|a| match a.addr {
                IpAddr::V4(v) => Some(v),
                IpAddr::V6(_) => None,
            });
            let gw6 = l.addrs.iter().find_map(|a| match a.addr {
                IpAddr::V6(v) => Some(v),
                IpAddr::V4(_) => None,
            });
            let hmac = [0x02, 0xaa, 0, 0, 0, i as u8 + 1];
            hosts.push(Host::new(
                hmac,
                &host_addrs[i],
                gw4,
                gw6,
                host_end.queues.into_iter().next().expect("one queue"),
                pool.clone(),
                FaultInjector::new(l.host_faults, seed ^ (i as u64 * 7919 + 1)),
                seed.wrapping_add(i as u64),
            ));
            let mac = sluice_end.port.mac();
            macs.push(mac.0);
            ports.push(PortConf {
                name: l.name.clone(),
                mac,
                addrs: l.addrs.clone(),
            });
            queues.push(Box::new(FaultyQueue {
                inner: sluice_end.queues.into_iter().next().expect("one queue"),
                faults: FaultInjector::new(l.sluice_faults, seed ^ (i as u64 * 104_729 + 3)),
                pool: pool.clone(),
                out: VecDeque::new(),
                link: i,
                capture: capture.clone(),
            }));
        }
        let conf = ForwarderConfig::with_virtual(ports, routes, virtual_addrs.to_vec())
            .expect("valid simulation config");
        let neighbours = Arc::new(NeighbourCache::new(1024));
        let fw = Forwarder::new(Arc::new(conf), neighbours.clone());
        let worker = Worker::new(
            WorkerConfig {
                id: 0,
                core: None,
                idle: Idle::Spin,
            },
            queues,
            stage(fw),
        )
        // Buffers for ARP/ND requests, so packets wait for their next hop.
        .with_allocator(pool.clone().into());
        Sim {
            now_ms: 0,
            hosts,
            worker,
            neighbours,
            sluice_macs: macs,
            pool,
            capture,
        }
    }

    /// One millisecond: every host polls, sluice polls until idle, hosts poll again.
    pub fn step(&mut self) {
        self.round();
        self.now_ms += 1;
    }

    /// One exchange without moving the clock: every host polls, sluice polls until idle,
    /// hosts poll again. (A smoltcp socket sends at most one segment per poll, so bulk
    /// transfers run several rounds per millisecond.)
    pub fn round(&mut self) {
        for h in &mut self.hosts {
            h.poll(self.now_ms);
        }
        while self.worker.poll_once(self.now_ms) > 0 {}
        self.worker.flush();
        for h in &mut self.hosts {
            h.poll(self.now_ms);
        }
    }

    /// Starts (`true`) or stops recording every frame sluice sends.
    pub fn capture(&mut self, on: bool) {
        if let Ok(mut c) = self.capture.lock() {
            c.on = on;
        }
    }

    /// The frames recorded so far (link index, frame), taken out of the record.
    pub fn captured(&mut self) -> Vec<(usize, Vec<u8>)> {
        self.capture
            .lock()
            .map(|mut c| std::mem::take(&mut c.frames))
            .unwrap_or_default()
    }

    /// Steps until `done` returns true or `limit_ms` of virtual time pass; returns whether
    /// `done` became true.
    pub fn run_until(&mut self, limit_ms: u64, mut done: impl FnMut(&mut Sim<S>) -> bool) -> bool {
        let end = self.now_ms + limit_ms;
        while self.now_ms < end {
            self.step();
            if done(self) {
                return true;
            }
        }
        false
    }
}
