//! Pinned run-to-completion workers.
//!
//! A worker owns one queue of every port (queue index = worker index) and a [`Stage`].
//! Each poll round it receives a burst of up to [`BURST`] packets from each port, hands the
//! burst to the stage, and moves each packet by its verdict into that port's tx buffer or
//! drops it under its reason. A tx buffer is flushed when full, at the end of a round that
//! did not saturate rx, and at the latest every [`FLUSH_US`] microseconds; what the device
//! does not take is freed and counted (`tx_full`).
//!
//! The stage also gets the worker's [`StageIo`]: fresh buffers (from the first queue
//! that has an allocator, or the one given to [`Worker::with_allocator`]) and a list of
//! packets it sends besides its verdicts (ARP requests, packets parked until their next
//! hop resolved). The worker moves that list into the tx buffers after each burst, before
//! the burst's own packets, and after the stage's `maintain`.
//!
//! Counters are plain integers owned by the worker and published to its
//! [`SharedCounters`] every [`PUBLISH_ROUNDS`] rounds and when it stops. No allocation,
//! lock or syscall happens per packet (TAP's read/write aside, which is the device).

use crate::mem;
use crate::pipeline::{Ctx, Stage, StageIo, Verdict};
use crate::port::{self, Allocator, Burst, Queue, BURST};
use crate::stats::{Counters, DropReason, Event, RuleCounters, SharedCounters, RULE_SLOTS};
use crossbeam_queue::ArrayQueue;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Publish counters every this many poll rounds.
pub const PUBLISH_ROUNDS: u64 = 256;
/// Longest time a packet waits in a tx buffer, in microseconds.
pub const FLUSH_US: u64 = 100;

/// What a worker does when there is nothing to receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idle {
    /// Busy-poll (DPDK ports: lowest latency, one core at 100%).
    Spin,
    /// After `after` empty rounds in a row, sleep, doubling from 1 µs up to `max`
    /// (TAP/pcap ports: the kernel is on the other side anyway).
    Sleep {
        /// Empty rounds before the first sleep.
        after: u32,
        /// Longest sleep.
        max: Duration,
    },
}

/// A worker's settings (plain data; `sluice-ctrl` fills it from the Appliance).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerConfig {
    /// Worker index (= the queue index it polls on every port).
    pub id: usize,
    /// CPU core to pin to (`None`: not pinned).
    pub core: Option<usize>,
    /// Idle policy.
    pub idle: Idle,
}

/// A worker: its queues, its stage, its tx buffers and counters.
pub struct Worker<S: Stage> {
    cfg: WorkerConfig,
    queues: Vec<Box<dyn Queue>>,
    stage: S,
    rx: Burst,
    tx: Vec<Burst>,
    verdicts: [Verdict; BURST],
    counters: Counters,
    shared: Arc<SharedCounters>,
    /// HTTP rule counters, lent to the stage in its [`Ctx`] and read by the control
    /// thread as they are.
    rules: Arc<RuleCounters>,
    rounds: u64,
    tsc_per_ms: u64,
    flush_ticks: u64,
    last_flush: u64,
    start_tsc: u64,
    /// The TSC at the end of the last poll round.
    round_end_tsc: u64,
    discarded_seen: u64,
    redirects: Option<Arc<Redirects>>,
    /// A redirected packet popped while grouping another port's: first of the next group.
    held: Option<(u32, port::Pkt)>,
    /// Buffers for the stage and the packets it sends besides its verdicts.
    io: StageIo,
}

/// Lock-free rings between workers, one per worker (many producers, one consumer): a
/// worker that receives a packet of a flow another worker owns (the NIC or kernel steered
/// it differently) hands it over with the port it came in on. Allocated once.
pub struct Redirects {
    rings: Box<[ArrayQueue<(u32, port::Pkt)>]>,
}

impl core::fmt::Debug for Redirects {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Redirects")
            .field("workers", &self.rings.len())
            .finish_non_exhaustive()
    }
}

impl Redirects {
    /// Rings for `workers` workers, `depth` packets each.
    pub fn new(workers: usize, depth: usize) -> Arc<Redirects> {
        Arc::new(Redirects {
            rings: (0..workers)
                .map(|_| ArrayQueue::new(depth.max(1)))
                .collect(),
        })
    }

    /// Packets waiting for worker `w`.
    pub fn pending(&self, w: usize) -> usize {
        self.rings.get(w).map_or(0, ArrayQueue::len)
    }
}

impl<S: Stage> core::fmt::Debug for Worker<S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Worker")
            .field("cfg", &self.cfg)
            .field("ports", &self.queues.len())
            .finish_non_exhaustive()
    }
}

impl<S: Stage> Worker<S> {
    /// A worker polling `queues` (index = port index as the stage knows it).
    pub fn new(cfg: WorkerConfig, queues: Vec<Box<dyn Queue>>, stage: S) -> Worker<S> {
        let n = queues.len();
        let alloc = queues.iter().find_map(|q| q.allocator());
        let hz = mem::tsc_hz();
        let now = mem::tsc();
        Worker {
            cfg,
            queues,
            stage,
            rx: Burst::new(),
            tx: (0..n).map(|_| Burst::new()).collect(),
            verdicts: [Verdict::Drop(DropReason::BadPort); BURST],
            counters: Counters::new(n),
            shared: Arc::new(SharedCounters::new(n)),
            rules: Arc::new(RuleCounters::new(RULE_SLOTS)),
            rounds: 0,
            tsc_per_ms: (hz / 1000).max(1),
            flush_ticks: (hz / 1_000_000).max(1) * FLUSH_US,
            last_flush: now,
            start_tsc: now,
            round_end_tsc: now,
            discarded_seen: 0,
            redirects: None,
            held: None,
            io: StageIo::new(alloc),
        }
    }

    /// Gives the stage fresh buffers from `alloc` (instead of the queues' own; needed
    /// with in-memory ports, which have none).
    pub fn with_allocator(mut self, alloc: Allocator) -> Worker<S> {
        self.io.set_allocator(Some(alloc));
        self
    }

    /// The counters this worker publishes.
    pub fn shared_counters(&self) -> Arc<SharedCounters> {
        self.shared.clone()
    }

    /// The worker's HTTP rule counters ([`RuleCounters`]: always current, nothing to
    /// publish).
    pub fn rule_counters(&self) -> Arc<RuleCounters> {
        self.rules.clone()
    }

    /// The worker's own (unpublished, current) counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The stage.
    pub fn stage(&self) -> &S {
        &self.stage
    }

    /// Milliseconds since the worker was created, on the TSC.
    pub fn now_ms(&self) -> u64 {
        self.ms_at(mem::tsc())
    }

    /// Milliseconds since the worker was created, at TSC reading `tsc`.
    fn ms_at(&self, tsc: u64) -> u64 {
        tsc.wrapping_sub(self.start_tsc) / self.tsc_per_ms
    }

    /// Hands this worker the rings through which workers pass each other the packets of
    /// flows they do not own (see [`Redirects`]).
    pub fn with_redirects(mut self, redirects: Arc<Redirects>) -> Worker<S> {
        self.redirects = Some(redirects);
        self
    }

    /// One poll round over every port at time `now_ms` (the worker's clock, or a virtual
    /// one in simulations): each port's rx burst, then what other workers redirected
    /// here, then the stage's timers. Returns the number of packets received.
    pub fn poll_once(&mut self, now_ms: u64) -> usize {
        self.poll_round(now_ms, mem::tsc())
    }

    /// [`Worker::poll_once`] for a round that started at TSC reading `t0` (its busy
    /// cycles count from there).
    #[inline]
    fn poll_round(&mut self, now_ms: u64, t0: u64) -> usize {
        let mut total = 0usize;
        let mut saturated = false;
        for pi in 0..self.queues.len() {
            let (n, bytes) = self.queues[pi].rx_burst_counted(&mut self.rx);
            if n == 0 {
                continue;
            }
            saturated |= n == BURST;
            total += n;
            let pc = &mut self.counters.ports[pi];
            pc.rx_packets += n as u64;
            pc.rx_bytes += bytes;
            self.handle_burst(pi, now_ms);
        }
        total += self.poll_redirects(now_ms);
        {
            let mut ctx =
                Ctx::with_io(now_ms, &mut self.counters, &mut self.io).with_rules(&self.rules);
            self.stage.maintain(&mut ctx);
        }
        self.move_extra();
        let now = mem::tsc();
        if !saturated || now.wrapping_sub(self.last_flush) >= self.flush_ticks {
            self.flush();
            self.last_flush = now;
        }
        // The flush check's clock read ends the round (one read fewer per round).
        self.round_end_tsc = now;
        if total == 0 {
            self.counters.empty_polls += 1;
        } else {
            self.counters.busy_polls += 1;
            self.counters.packets += total as u64;
            self.counters.busy_cycles += now.wrapping_sub(t0);
        }
        self.rounds += 1;
        if self.rounds.is_multiple_of(PUBLISH_ROUNDS) {
            self.publish();
        }
        total
    }

    /// Takes up to a burst from this worker's redirect ring, grouped by port (a packet of
    /// another port waits for the next group), and processes it. Returns how many.
    fn poll_redirects(&mut self, now_ms: u64) -> usize {
        let Some(r) = self.redirects.clone() else {
            return 0;
        };
        let Some(ring) = r.rings.get(self.cfg.id) else {
            return 0;
        };
        let mut total = 0;
        while total < BURST {
            let Some((port, first)) = self.held.take().or_else(|| ring.pop()) else {
                break;
            };
            let _ = self.rx.push(first);
            while !self.rx.is_full() {
                match ring.pop() {
                    Some((p, pkt)) if p == port => {
                        let _ = self.rx.push(pkt);
                    }
                    Some(other) => {
                        self.held = Some(other);
                        break;
                    }
                    None => break,
                }
            }
            let n = self.rx.len();
            total += n;
            for _ in 0..n {
                self.counters.event(Event::RedirectedIn);
            }
            self.handle_burst(port as usize, now_ms);
        }
        total
    }

    /// Runs the stage over the burst in `self.rx` (received on `pi`) and moves every
    /// packet by its verdict.
    fn handle_burst(&mut self, pi: usize, now_ms: u64) {
        let n = self.rx.len();
        let mut ctx =
            Ctx::with_io(now_ms, &mut self.counters, &mut self.io).with_rules(&self.rules);
        self.stage
            .process_burst(pi, self.rx.as_mut_slice(), &mut self.verdicts, &mut ctx);
        // What the stage sent besides its verdicts is older than the burst (released
        // parked packets) or about it (requests): it goes first.
        self.move_extra();
        let Self {
            rx,
            tx,
            verdicts,
            queues,
            counters,
            redirects,
            ..
        } = self;
        // The common case: the whole burst goes out of one port whose buffer is empty.
        // Swap the two buffers instead of moving packets one by one.
        if let Verdict::Tx(out) = verdicts[0] {
            let out = out as usize;
            // Compared without an early exit: a burst is short and usually uniform.
            if out < tx.len()
                && tx[out].is_empty()
                && verdicts[1..n]
                    .iter()
                    .fold(true, |same, v| same & (*v == verdicts[0]))
            {
                core::mem::swap(rx, &mut tx[out]);
                if tx[out].is_full() {
                    flush_port(&mut queues[out], &mut tx[out], out, counters);
                }
                return;
            }
        }
        for (p, v) in rx.drain().zip(verdicts.iter()) {
            match *v {
                Verdict::Tx(out) if (out as usize) < tx.len() => {
                    let out = out as usize;
                    if tx[out].is_full() {
                        flush_port(&mut queues[out], &mut tx[out], out, counters);
                    }
                    // Cannot fail: just flushed if it was full.
                    let _ = tx[out].push(p);
                }
                Verdict::Tx(_) => counters.drop(DropReason::BadPort),
                Verdict::Redirect(w) => {
                    match redirects.as_ref().and_then(|r| r.rings.get(w as usize)) {
                        Some(ring) => match ring.push((pi as u32, p)) {
                            Ok(()) => counters.event(Event::RedirectedOut),
                            Err(_) => counters.drop(DropReason::RedirectFull),
                        },
                        None => counters.drop(DropReason::BadPort),
                    }
                }
                Verdict::Drop(r) => counters.drop(r),
                // A spare buffer the stage left for a packet it kept.
                Verdict::Kept => drop(p),
            }
        }
    }

    /// Moves the packets the stage sent through [`StageIo`] into the tx buffers.
    fn move_extra(&mut self) {
        if self.io.is_empty() {
            return;
        }
        let Self {
            io,
            tx,
            queues,
            counters,
            ..
        } = self;
        for (out, p) in io.drain() {
            let out = out as usize;
            if out >= tx.len() {
                counters.drop(DropReason::BadPort);
                continue;
            }
            if tx[out].is_full() {
                flush_port(&mut queues[out], &mut tx[out], out, counters);
            }
            // Cannot fail: just flushed if it was full.
            let _ = tx[out].push(p);
        }
    }

    /// Sends every tx buffer now.
    pub fn flush(&mut self) {
        for (i, (q, b)) in self.queues.iter_mut().zip(self.tx.iter_mut()).enumerate() {
            if !b.is_empty() {
                flush_port(q, b, i, &mut self.counters);
            }
        }
    }

    /// Publishes the counters to the shared copy.
    pub fn publish(&mut self) {
        // Packets a queue discarded itself (foreign buffers it could not copy) are drops
        // too: fold them in as `tx_full`.
        let d: u64 = self.queues.iter().map(|q| q.discarded()).sum();
        if d > self.discarded_seen {
            self.counters
                .drop_n(DropReason::TxFull, d - self.discarded_seen);
            self.discarded_seen = d;
        }
        self.shared.publish(&self.counters);
    }

    /// Runs until `stop` is set: pins the thread, registers it with DPDK when the EAL is
    /// up, polls, and on stop flushes, publishes and returns its buffers (by dropping
    /// them). Returns the final counters.
    pub fn run(mut self, stop: &AtomicBool) -> Counters {
        if let Some(core) = self.cfg.core {
            // `core_affinity` indexes a fixed CPU set (`CPU_SETSIZE` bits) without a bound
            // check: a larger core number would panic the worker instead of failing.
            let pinned = core < libc::CPU_SETSIZE as usize
                && core_affinity::set_for_current(core_affinity::CoreId { id: core });
            if !pinned {
                eprintln!(
                    "sluice: worker {}: could not pin to core {core}",
                    self.cfg.id
                );
            }
        }
        #[cfg(feature = "dpdk")]
        let _lcore = match port::dpdk::eal() {
            Some(_) => {
                let g = port::dpdk::register_thread();
                if g.is_none() {
                    eprintln!(
                        "sluice: worker {}: rte_thread_register failed: mempool caches off",
                        self.cfg.id
                    );
                }
                g
            }
            None => None,
        };
        // The first round counts from here, not from the worker's creation.
        self.round_end_tsc = mem::tsc();
        let mut empty_run = 0u32;
        let mut sleep = Duration::from_micros(1);
        while !stop.load(Ordering::Relaxed) {
            // A busy loop takes its clock from the end of the round before (no time
            // passes between the two: one TSC read a round, not two); after an empty
            // round, which may have slept, from a fresh read.
            let t0 = if empty_run == 0 {
                self.round_end_tsc
            } else {
                mem::tsc()
            };
            if self.poll_round(self.ms_at(t0), t0) > 0 {
                empty_run = 0;
                sleep = Duration::from_micros(1);
                continue;
            }
            if let Idle::Sleep { after, max } = self.cfg.idle {
                empty_run = empty_run.saturating_add(1);
                if empty_run >= after {
                    std::thread::sleep(sleep);
                    sleep = (sleep * 2).min(max);
                }
            }
        }
        self.flush();
        self.publish();
        self.counters.clone()
    }
}

/// Sends a tx buffer and counts what the device took (packets and bytes); what it did
/// not take is dropped as `tx_full`.
#[inline]
fn flush_port(q: &mut Box<dyn Queue>, b: &mut Burst, port: usize, c: &mut Counters) {
    let (sent, bytes) = q.tx_burst_counted(b);
    c.ports[port].tx_packets += sent as u64;
    c.ports[port].tx_bytes += bytes;
    if !b.is_empty() {
        let left = b.clear();
        c.drop_n(DropReason::TxFull, left as u64);
    }
}

/// Starts `worker` on a new thread named `sluice-wN`; it runs until `stop` is set.
pub fn spawn<S: Stage + 'static>(
    worker: Worker<S>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<Counters>> {
    std::thread::Builder::new()
        .name(format!("sluice-w{}", worker.cfg.id))
        .spawn(move || worker.run(&stop))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::{mem, Pool};

    /// Sends every packet out of the other port (0 <-> 1), drops those starting with 0xdd.
    struct Cross;
    impl Stage for Cross {
        fn process_burst(
            &mut self,
            in_port: usize,
            pkts: &mut [port::Pkt],
            v: &mut [Verdict],
            _: &mut Ctx<'_>,
        ) {
            for (p, v) in pkts.iter().zip(v.iter_mut()) {
                *v = if p.data().first() == Some(&0xdd) {
                    Verdict::Drop(DropReason::NoRoute)
                } else {
                    Verdict::tx(1 - in_port)
                };
            }
        }
    }

    #[test]
    fn moves_counts_and_returns_every_buffer() {
        let pool = Pool::new(256);
        let (mut outside_a, inside_a) = mem::pair("ext-a", "a", 1, 64);
        let (inside_b, mut outside_b) = mem::pair("b", "ext-b", 1, 16);
        let queues = vec![
            inside_a.queues.into_iter().next().unwrap(),
            inside_b.queues.into_iter().next().unwrap(),
        ];
        let mut w = Worker::new(
            WorkerConfig {
                id: 0,
                core: None,
                idle: Idle::Spin,
            },
            queues,
            Cross,
        );
        let mut b = Burst::new();
        for i in 0..40u8 {
            let first = if i % 10 == 0 { 0xdd } else { i };
            b.push(pool.alloc_copy(&[first; 64]).unwrap())
                .unwrap_or_else(|_| panic!());
            if b.is_full() {
                outside_a.queues[0].tx_burst(&mut b);
            }
        }
        outside_a.queues[0].tx_burst(&mut b);
        assert!(b.is_empty());
        // Two rounds: 32 then 8 packets. The b-side ring holds only 16.
        assert_eq!(w.poll_once(0), 32);
        let mut got = Burst::new();
        let n1 = outside_b.queues[0].rx_burst(&mut got);
        got.clear();
        assert_eq!(w.poll_once(0), 8);
        let n2 = outside_b.queues[0].rx_burst(&mut got);
        got.clear();
        let c = w.counters().clone();
        assert_eq!(c.ports[0].rx_packets, 40);
        assert_eq!(c.ports[0].rx_bytes, 40 * 64);
        assert_eq!(c.drops_of(DropReason::NoRoute), 4);
        assert_eq!(c.ports[1].tx_packets as usize, n1 + n2);
        assert_eq!(
            c.ports[1].tx_bytes,
            c.ports[1].tx_packets * 64,
            "bytes of those sent"
        );
        assert_eq!(c.ports[1].tx_packets + c.drops_of(DropReason::TxFull), 36);
        assert!(
            c.drops_of(DropReason::TxFull) > 0,
            "a 16-deep ring cannot take 28 at once"
        );
        w.publish();
        assert_eq!(w.shared_counters().snapshot(), c);
        assert_eq!(w.poll_once(0), 0);
        assert_eq!(w.counters().empty_polls, 1);
        drop(w);
        assert_eq!(pool.in_use(), 0, "every buffer went back to the pool");
    }

    #[test]
    fn threaded_run_stops_cleanly() {
        let pool = Pool::new(64);
        let (mut ext, int) = mem::pair("ext", "int", 1, 64);
        let (int2, _ext2) = mem::pair("int2", "ext2", 1, 64);
        let queues = vec![
            int.queues.into_iter().next().unwrap(),
            int2.queues.into_iter().next().unwrap(),
        ];
        let w = Worker::new(
            WorkerConfig {
                id: 0,
                core: Some(0),
                idle: Idle::Sleep {
                    after: 10,
                    max: Duration::from_millis(1),
                },
            },
            queues,
            Cross,
        );
        let shared = w.shared_counters();
        let stop = Arc::new(AtomicBool::new(false));
        let h = spawn(w, stop.clone()).unwrap();
        let mut b = Burst::new();
        for _ in 0..10 {
            b.push(pool.alloc_copy(&[1; 60]).unwrap())
                .unwrap_or_else(|_| panic!());
        }
        ext.queues[0].tx_burst(&mut b);
        let t0 = std::time::Instant::now();
        while shared.snapshot().ports[0].rx_packets < 10 && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        stop.store(true, Ordering::Relaxed);
        let c = h.join().unwrap();
        assert_eq!(c.ports[0].rx_packets, 10);
        assert_eq!(c.ports[1].tx_packets, 10);
        assert_eq!(shared.snapshot(), c);
    }
}
