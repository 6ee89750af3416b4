//! L4 balancer benchmark, printed as JSON (never asserted).
//!
//! The [`Balancer`] stage (flow table, NAT with incremental checksums, Maglev, policy,
//! forwarder) in sluice's worker on one pinned core (core 1; the control thread is pinned
//! to core 0), with tables compiled from manifests like the integration tests do: a
//! Gateway on 10.77.0.10:7000 with a TCPRoute to a Service of 256 pods (Maglev 65537) and
//! a NetworkPolicy admitting 10.77.0.0/16 on TCP 7000.
//!
//! 1. **Established flows**: Mpps per core and TSC cycles per packet with 1k, 100k and 1M
//!    established flows (each flow's SYN first, then ACK segments of all flows in a
//!    shuffled order, forever; the original direction, client to virtual address), side
//!    by side with `dpdk-testpmd --forward-mode=macswap`. The flow table has the default
//!    capacity (1M flows per worker; at 1M flows it is full). The same run also measures,
//!    at every flow count, both directions (`both_directions`: the client ACKs plus, on
//!    the inside port, an ACK from each flow's backend to its SNAT port, learnt from the
//!    NATed SYNs; half the packets each) and a table only as big as the flows
//!    (`full_table`: capacity N, the index at its fullest).
//!    *Traffic source*: `net_pcap` with `infinite_rx=1` keeps the whole capture in mbufs
//!    of the port's pool (16383 mbufs under `-m 512` without hugepages), so a capture of
//!    100k or 1M distinct flows does not fit. The flow-count series therefore runs on an
//!    in-process replay queue that does what `infinite_rx` does (per packet: take a
//!    buffer from a pool and copy the next 60-byte frame of an in-memory capture) on the
//!    worker's own core, with a sink like `net_null` on the other port. The replay's own
//!    cost is counted in the balancer's figure and grows with the flow count (at 100k
//!    flows the capture is 6 MB, read cold, while testpmd replays 4000 frames that stay
//!    cached), so every flow count is measured from two sources that produce the same
//!    frames (checked when the source is built): `capture`, the next 60-byte frame of an
//!    in-memory capture per packet, and `template`, the way a traffic generator such as
//!    TRex makes many flows: one 60-byte template copied per packet, with the flow's
//!    source address and port written in from a compact tuple list (8 bytes per flow)
//!    and both checksums adjusted incrementally. For each source and flow count the same
//!    run also measures sluice's macswap stage on that replay (the harness alone; the
//!    balancer minus it is printed), and the balancer at 1k flows on the real vdevs
//!    (`net_pcap` infinite_rx -> `net_null`, the capture testpmd replays) ties the
//!    replay to the vdevs. Ratios: balancer / testpmd for every flow count and source
//!    (`goal: >= 0.5 at 100k`; both sources' ratios are printed), of whole runs and of
//!    their quiet windows (`_quiet`: each run's upper-quartile rate over 250 ms windows,
//!    testpmd's from `show port stats all`; see [`sluice_perf::WINDOW`] for why).
//! 2. **New connections per second per core**: SYNs from 2M distinct client 5-tuples
//!    (replayed; a SYN whose earlier flow is still alive would be a flow hit, which is why
//!    the rate is counted from `flow_created`), each creating a flow (listener, Maglev,
//!    policy, SNAT port, flow insert, NAT, forward). SYN_SENT times out after 1 s, so the
//!    table's timer wheel expires and recycles flows as fast as they are made (the cost is
//!    included). Goal: 200k/s per core (DPVS's per-worker figure).
//! 3. **Bytes per flow**: `FlowTable::memory_bytes() / capacity` (goal <= 128).
//! 4. **Swaps**: snapshot build time of a config with 10,000 extra TCP listeners and a
//!    route each to the 256-pod Service (the IR of the compiled manifests with its
//!    listener and route replicated, Maglev tables of `--swap-maglev` slots: 10k tables
//!    of 65537 slots would take 2.6 GB), and the compile time (manifests -> IR) of 1,000,
//!    5,000 and 10,000 generated listeners and TCPRoutes, with the growth of the time per
//!    route (1.0 is linear; `bench_compile` times each phase of a reload). Then, with 100k
//!    established flows at full rate through the worker, the control thread publishes the
//!    10k-route snapshots, then a freshly built base snapshot every `--swap-interval-ms`,
//!    timing `publish`, the wait until the worker has moved to the new generation
//!    (`oldest_in_use`, spinning) and the reclaim (freeing the old snapshot). Packets
//!    lost: received - sent - drops, plus every drop (none is expected: every flow stays
//!    allowed; its policy is re-checked once per swap).
//!
//! Usage: `bench_balance [--duration SECS] [--runs N] [--no-testpmd] [--quick]
//! [--swap-interval-ms MS] [--swap-maglev SLOTS] [--out FILE] [--only-flows N]
//! [--source capture|template] [--both-directions] [--capacity N] [--only-new-connections]`
//! (`--help` explains each; `--quick`: 1k and 100k flows only; `--only-flows N`: only
//! the balancer with N established flows on the replay, for `perf record`, from
//! `--source`, `capture` by default). Medians over `--runs` runs; each figure is added to
//! `--out` (if given) as soon as it is measured.

use clap::{Parser, ValueEnum};
use serde_json::{json, Value};
use sluice_ctrl::compile::ir::Ir;
use sluice_ctrl::compile::snapshot;
use sluice_dataplane::balancer::{Balancer, BalancerConfig};
use sluice_dataplane::flow::{FlowTable, Timeouts};
use sluice_dataplane::pipeline::{Forwarder, ForwarderConfig, IfAddr, NeighbourCache, PortConf};
use sluice_dataplane::port::{dpdk, pcap, Burst, Pool, Queue};
use sluice_dataplane::rcu::Publisher;
use sluice_dataplane::stats::{Counters, Event, SharedCounters};
use sluice_dataplane::tables::snapshot::Snapshot;
use sluice_dataplane::wire::{ethernet, ip_proto, ipv4, tcp, EtherType, MacAddr};
use sluice_dataplane::worker::{Idle, Worker, WorkerConfig};
use sluice_perf::report::{drops_json, Report};
use sluice_perf::stats::{median, Latencies};
use sluice_perf::{
    dpdk_cleanup, eal_args, measure_worker, ratio, summary, testpmd_run, MacSwap, Run, FWD_CORE,
};
use sluice_testkit::{config, manifests as docs};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SLUICE_MAC: MacAddr = MacAddr([0x02, 0x51, 0, 0, 0, 0x10]);
const INSIDE_MAC: MacAddr = MacAddr([0x02, 0x51, 0, 0, 0, 0x11]);
const CLIENT_MAC: MacAddr = MacAddr([0x02, 0xc1, 0, 0, 0, 1]);
const BACKEND_MAC: MacAddr = MacAddr([0x02, 0xbe, 0, 0, 0, 1]);
const VIP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 10);
const VIP_PORT: u16 = 7000;
const BACKENDS: usize = 256;
const FRAME: usize = 60;
const STRIDE: usize = 64;
/// Distinct SYNs replayed by the connection-rate test.
const NEW_CONN_FRAMES: usize = 2_000_000;

/// The L4 balancer: Mpps and cycles per packet with 1k/100k/1M established flows beside
/// `dpdk-testpmd` macswap, new connections per second per core, bytes per flow, and
/// snapshot build/publish latency with 10k routes under traffic. Prints JSON.
#[derive(Parser, Debug)]
#[command(name = "bench_balance")]
struct Opts {
    /// Seconds per run (at least 0.1; the swap test runs twice as long).
    #[arg(long, default_value_t = 2.0)]
    duration: f64,
    /// Runs per figure (at least 1); figures are their medians.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Leave out the dpdk-testpmd comparison.
    #[arg(long = "no-testpmd", action = clap::ArgAction::SetFalse)]
    testpmd: bool,
    /// 1k and 100k established flows only (not 1M).
    #[arg(long)]
    quick: bool,
    /// Milliseconds between snapshot swaps under traffic.
    #[arg(long, default_value_t = 50)]
    swap_interval_ms: u64,
    /// Maglev table size (slots) of the swap test's 10k routes.
    #[arg(long, default_value_t = 1021)]
    swap_maglev: u64,
    /// Also write the JSON to FILE, after every figure (then complete).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Only the balancer on the replay with N established flows (for profiling).
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "1000")]
    only_flows: Option<usize>,
    /// With `--only-flows`: the replay's source.
    #[arg(long, value_enum, default_value_t = SourceKind::Capture)]
    source: SourceKind,
    /// With `--only-flows`: the backends' replies too.
    #[arg(long = "both-directions")]
    both: bool,
    /// Only the new-connections figure (for profiling).
    #[arg(long = "only-new-connections")]
    only_new: bool,
    /// With `--only-flows`: the flow table's capacity (at least 1; default: the default
    /// capacity, or N flows if more).
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "1024")]
    capacity: Option<usize>,
}

fn opts() -> Opts {
    let mut o = Opts::parse();
    o.duration = o.duration.max(0.1);
    o.runs = o.runs.max(1);
    o.capacity = o.capacity.map(|c| c.max(1));
    o
}

fn backend_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 78, 1 + (i / 200) as u8, 10 + (i % 200) as u8)
}

/// The manifests: the listener the traffic uses, its 256 backends, a policy, and
/// `extra` more listeners with a TCPRoute each (for the swap test).
fn manifests(extra: usize, maglev: u64) -> String {
    let mut y = format!(
        r#"apiVersion: sluice.dev/v1alpha1
kind: Appliance
metadata: {{name: bench}}
spec:
  cores: [0]
  ports:
  - {{name: outside, tap: {{name: benchout}}, addresses: [10.77.0.2/16]}}
  - {{name: inside, tap: {{name: benchin}}, addresses: [10.78.0.2/16]}}
  virtualAddresses: [{VIP}]
  maglevTableSize: {maglev}
{namespace}{service}{policy}{gateway}"#,
        namespace = docs::namespace("b"),
        policy = docs::allow_from("b", "from-clients", "10.77.0.0/16", &[VIP_PORT]),
        gateway = docs::tcp_gateway("b", "echo", VIP, VIP_PORT, "pool"),
        service = docs::service("b", "pool", VIP_PORT),
    );
    for i in 0..BACKENDS {
        y.push_str(&docs::pod("b", &format!("p{i}"), "pool", backend_ip(i)));
    }
    if extra > 0 {
        y.push_str("---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: many, namespace: b}\nspec:\n  gatewayClassName: sluice\n  addresses: [{type: IPAddress, value: 10.77.0.11}]\n  listeners:\n");
        for i in 0..extra {
            y.push_str(&format!(
                "  - {{name: l{i}, port: {}, protocol: TCP}}\n",
                20_000 + i
            ));
        }
        for i in 0..extra {
            y.push_str(&format!(
                "---\napiVersion: gateway.networking.k8s.io/v1alpha2\nkind: TCPRoute\nmetadata: {{name: r{i}, namespace: b}}\nspec:\n  parentRefs: [{{name: many, sectionName: l{i}}}]\n  rules: [{{backendRefs: [{{name: pool, port: {VIP_PORT}}}]}}]\n"
            ));
        }
    }
    y
}

/// Manifests -> IR (the "compile" half of a reload).
fn compile(text: &str) -> Result<Ir, String> {
    config::try_ir("bench.yaml", text).map_err(|e| config::brief(&e))
}

fn build(ir: &Ir) -> Result<Snapshot, String> {
    snapshot::from_ir(ir).map_err(|e| e.to_string())
}

/// Frames of a fixed stride in one buffer (a capture in memory).
struct Frames {
    data: Vec<u8>,
}

impl Frames {
    fn len(&self) -> usize {
        self.data.len() / STRIDE
    }
    fn get(&self, i: usize) -> &[u8] {
        &self.data[i * STRIDE..i * STRIDE + FRAME]
    }
}

/// Client `i`'s address and port (50,000 ports per address from 10.77.1.1 on).
fn client(i: usize) -> (Ipv4Addr, u16) {
    let a = 0x0a4d_0101u32 + (i / 50_000) as u32;
    (Ipv4Addr::from(a), 10_000 + (i % 50_000) as u16)
}

/// A 60-byte TCP segment from client `i` to the VIP with `flags`.
fn segment(i: usize, flags: u16, out: &mut [u8]) {
    let (src, sport) = client(i);
    segment_from(src, sport, flags, out);
}

/// A 60-byte TCP segment from `src:sport` to the VIP with `flags`.
fn segment_from(src: Ipv4Addr, sport: u16, flags: u16, out: &mut [u8]) {
    let eth = (CLIENT_MAC, SLUICE_MAC);
    tcp_frame(eth, (src, sport), (VIP, VIP_PORT), flags, out);
}

/// A 60-byte TCP segment with `flags` between the Ethernet addresses `(src, dst)`, from
/// `src` to `dst`.
fn tcp_frame(
    (src_mac, dst_mac): (MacAddr, MacAddr),
    (src, sport): (Ipv4Addr, u16),
    (dst, dport): (Ipv4Addr, u16),
    flags: u16,
    out: &mut [u8],
) {
    ethernet::Repr {
        dst_addr: dst_mac,
        src_addr: src_mac,
        ethertype: EtherType::Ipv4,
    }
    .emit(&mut ethernet::Frame::new_unchecked(&mut out[..]));
    let mut ip = ipv4::Packet::new_unchecked(&mut out[14..14 + 40]);
    ipv4::Repr {
        src_addr: src,
        dst_addr: dst,
        protocol: ip_proto::TCP,
        payload_len: 20,
        ttl: 64,
    }
    .emit(&mut ip);
    let syn = flags == tcp::flags::SYN;
    tcp::Repr {
        src_port: sport,
        dst_port: dport,
        seq_number: 1000 + u32::from(!syn),
        ack_number: if syn { 0 } else { 5000 },
        flags,
        window_len: 1000,
        payload_len: 0,
    }
    .emit(
        &mut tcp::Packet::new_unchecked(ip.payload_mut()),
        IpAddr::V4(src),
        IpAddr::V4(dst),
    );
}

/// Segments of the clients in `order`.
fn frames(order: impl ExactSizeIterator<Item = usize>, flags: u16) -> Frames {
    let mut data = vec![0u8; order.len() * STRIDE];
    for (k, i) in order.enumerate() {
        segment(i, flags, &mut data[k * STRIDE..k * STRIDE + FRAME]);
    }
    Frames { data }
}

/// 0..n in a fixed pseudo-random order (Fisher-Yates over a xorshift).
fn shuffled(n: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

/// ACK segments of established flows, in the order they are replayed.
enum Source {
    /// A capture in memory: the next 60-byte frame is copied per packet (what
    /// `net_pcap`'s `infinite_rx` does; 60 bytes of capture per flow, so 6 MB at 100k
    /// flows and 60 MB at 1M, read cold).
    Capture(Frames),
    /// A traffic generator's way (TRex's field engine): one 60-byte template (the ACK
    /// of a client 0.0.0.0:0) copied per packet, then the flow's source address and port
    /// from a compact tuple list (8 bytes per flow) written into it, both checksums
    /// adjusted incrementally (RFC 1624). The frames are byte for byte those of
    /// [`Source::Capture`] (checked when the list is built).
    Template {
        frame: [u8; FRAME],
        /// Source address (high 32 bits) and port (low 16) of each flow in order.
        tuples: Vec<u64>,
    },
}

impl Source {
    /// The ACKs of clients `0..n` in the bench's shuffled order, as `kind`.
    fn acks(n: usize, kind: SourceKind) -> Source {
        match kind {
            SourceKind::Capture => {
                Source::Capture(frames(shuffled(n).into_iter(), tcp::flags::ACK))
            }
            SourceKind::Template => {
                let mut frame = [0u8; FRAME];
                segment_from(Ipv4Addr::UNSPECIFIED, 0, tcp::flags::ACK, &mut frame);
                let order = shuffled(n);
                let tuples: Vec<u64> = order
                    .iter()
                    .map(|&i| {
                        let (a, port) = client(i);
                        u64::from(u32::from(a)) << 32 | u64::from(port)
                    })
                    .collect();
                let s = Source::Template { frame, tuples };
                // The generated frames are the capture's.
                let (mut want, mut got) = ([0u8; FRAME], [0u8; FRAME]);
                for (k, &i) in order.iter().enumerate() {
                    segment(i, tcp::flags::ACK, &mut want);
                    s.frame(k, &mut got);
                    assert_eq!(want, got, "template frame {k} differs from the capture's");
                }
                s
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            Source::Capture(f) => f.len(),
            Source::Template { tuples, .. } => tuples.len(),
        }
    }

    /// Writes frame `k` of a template source into `out` (setup check only).
    fn frame(&self, k: usize, out: &mut [u8; FRAME]) {
        if let Source::Template { frame, tuples } = self {
            *out = *frame;
            stamp(out, tuples[k]);
        }
    }
}

/// Which [`Source`] the flow-count series replays.
#[derive(Clone, Copy, Debug, PartialEq, ValueEnum)]
enum SourceKind {
    Capture,
    Template,
}

impl SourceKind {
    fn name(self) -> &'static str {
        match self {
            SourceKind::Capture => "capture",
            SourceKind::Template => "template",
        }
    }
}

/// One's-complement sum of `x`'s two 16-bit halves added to `sum` (not folded).
#[inline(always)]
fn add32(sum: u32, x: u32) -> u32 {
    sum + (x >> 16) + (x & 0xffff)
}

#[inline(always)]
fn fold(mut s: u32) -> u16 {
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s as u16
}

/// Writes a flow's source address and port (`tuple`, as in [`Source::Template`]) into a
/// copy of the template (whose source is 0.0.0.0:0), adjusting the IPv4 and TCP
/// checksums: adding a field's words to the sum the checksum complements (RFC 1624,
/// eqn. 3, with the old value 0).
#[inline(always)]
fn stamp(d: &mut [u8], tuple: u64) {
    let Some(d) = d.get_mut(..FRAME) else {
        return;
    };
    let src = (tuple >> 32) as u32;
    let sport = tuple as u16;
    let ip_sum = add32(u32::from(!u16::from_be_bytes([d[24], d[25]])), src);
    let tcp_sum = add32(u32::from(!u16::from_be_bytes([d[50], d[51]])), src) + u32::from(sport);
    d[24..26].copy_from_slice(&(!fold(ip_sum)).to_be_bytes());
    d[26..30].copy_from_slice(&src.to_be_bytes());
    d[34..36].copy_from_slice(&sport.to_be_bytes());
    d[50..52].copy_from_slice(&(!fold(tcp_sum)).to_be_bytes());
}

/// An rx queue that plays `warmup` once, then `frames` forever: per packet a pool buffer
/// and the next frame of the [`Source`] (what `net_pcap`'s `infinite_rx` does, without
/// keeping the capture in the pool). Its tx side frees what it is given (like
/// `net_null`).
struct Replay {
    pool: Pool,
    warmup: Option<Arc<Frames>>,
    frames: Arc<Source>,
    pos: usize,
    warm_done: Arc<AtomicBool>,
}

impl Queue for Replay {
    fn rx_burst(&mut self, out: &mut Burst) -> usize {
        let mut n = 0;
        while !out.is_full() {
            let p = match &self.warmup {
                Some(w) if self.pos < w.len() => self.pool.alloc_copy(w.get(self.pos)),
                Some(_) => {
                    self.warmup = None;
                    self.pos = 0;
                    self.warm_done.store(true, Ordering::Release);
                    continue;
                }
                None => {
                    if self.pos >= self.frames.len() {
                        self.pos = 0;
                    }
                    match &*self.frames {
                        Source::Capture(f) => self.pool.alloc_copy(f.get(self.pos)),
                        Source::Template { frame, tuples } => {
                            self.pool.alloc_copy(frame).map(|mut p| {
                                stamp(p.data_mut(), tuples[self.pos]);
                                p
                            })
                        }
                    }
                }
            };
            let Some(p) = p else {
                break;
            };
            self.pos += 1;
            // Cannot fail: the burst is not full.
            let _ = out.push(p);
            n += 1;
        }
        n
    }

    fn tx_burst(&mut self, pkts: &mut Burst) -> usize {
        pkts.clear()
    }
}

/// The backends' side for traffic in both directions: records the first `flows`
/// segments sluice sends there (each flow's SYN, NATed: backend <- SNAT address and
/// port), then replays an ACK from each backend back to that SNAT port, the flows in a
/// shuffled order, forever (as [`Replay`] does on the client side); frees what it sends.
struct Backends {
    pool: Pool,
    flows: usize,
    /// The NATed SYNs' addresses and ports (SNAT address, SNAT port, backend, port).
    seen: Vec<(Ipv4Addr, u16, Ipv4Addr, u16)>,
    replies: Option<Frames>,
    pos: usize,
}

impl Backends {
    /// Replies of `flows` flows, in buffers from `pool` (the client side's: one pool
    /// cycles through fewer cold buffers than two).
    fn new(flows: usize, pool: Pool) -> Backends {
        Backends {
            pool,
            flows,
            seen: Vec::with_capacity(flows),
            replies: None,
            pos: 0,
        }
    }
}

impl Queue for Backends {
    fn rx_burst(&mut self, out: &mut Burst) -> usize {
        if self.replies.is_none() {
            if self.seen.len() < self.flows {
                return 0;
            }
            // Built once, on the worker, when the last SYN has gone out.
            let order = shuffled(self.flows);
            let mut data = vec![0u8; order.len() * STRIDE];
            for (k, &i) in order.iter().enumerate() {
                let (snat, snat_port, backend, port) = self.seen[i];
                let eth = (BACKEND_MAC, INSIDE_MAC);
                let out = &mut data[k * STRIDE..k * STRIDE + FRAME];
                tcp_frame(
                    eth,
                    (backend, port),
                    (snat, snat_port),
                    tcp::flags::ACK,
                    out,
                );
            }
            self.replies = Some(Frames { data });
        }
        let Some(f) = &self.replies else {
            return 0;
        };
        let mut n = 0;
        while !out.is_full() {
            if self.pos >= f.len() {
                self.pos = 0;
            }
            let Some(p) = self.pool.alloc_copy(f.get(self.pos)) else {
                break;
            };
            self.pos += 1;
            let _ = out.push(p);
            n += 1;
        }
        n
    }

    fn tx_burst(&mut self, pkts: &mut Burst) -> usize {
        for p in pkts.as_slice() {
            if self.seen.len() >= self.flows {
                break;
            }
            let d = p.data();
            if d.len() >= 14 + 40 && d[14 + 9] == ip_proto::TCP {
                let a = |i: usize| Ipv4Addr::new(d[i], d[i + 1], d[i + 2], d[i + 3]);
                let port = |i: usize| u16::from_be_bytes([d[i], d[i + 1]]);
                self.seen.push((a(14 + 12), port(34), a(14 + 16), port(36)));
            }
        }
        pkts.clear()
    }
}

/// A port that receives nothing and frees what it sends (`net_null,no-rx=1`).
struct Sink;

impl Queue for Sink {
    fn rx_burst(&mut self, _: &mut Burst) -> usize {
        0
    }
    fn tx_burst(&mut self, pkts: &mut Burst) -> usize {
        pkts.clear()
    }
}

fn forwarder(inside_mac: MacAddr) -> Result<Forwarder, String> {
    let addr = |a: &str, len: u8| {
        vec![IfAddr {
            addr: a.parse().unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            prefix_len: len,
        }]
    };
    let conf = ForwarderConfig::with_virtual(
        vec![
            PortConf {
                name: "outside".into(),
                mac: SLUICE_MAC,
                addrs: addr("10.77.0.2", 16),
            },
            PortConf {
                name: "inside".into(),
                mac: inside_mac,
                addrs: addr("10.78.0.2", 16),
            },
        ],
        &[],
        vec![IpAddr::V4(VIP)],
    )
    .map_err(|e| e.to_string())?;
    let neigh = Arc::new(NeighbourCache::new(16 * BACKENDS));
    for i in 0..BACKENDS {
        neigh.learn(IpAddr::V4(backend_ip(i)), BACKEND_MAC, 0);
    }
    // The clients' addresses (50,000 flows each), for replies in both directions.
    for i in (0..=1_000_000).step_by(50_000) {
        neigh.learn(IpAddr::V4(client(i).0), CLIENT_MAC, 0);
    }
    Ok(Forwarder::new(Arc::new(conf), neigh))
}

/// A running worker and what the control thread needs of it.
struct Running {
    shared: Arc<SharedCounters>,
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<Counters>,
}

impl Running {
    fn finish(self) -> Result<Counters, String> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .join()
            .map_err(|_| "worker panicked".to_string())
    }
}

fn start<S: sluice_dataplane::pipeline::Stage + 'static>(
    queues: Vec<Box<dyn Queue>>,
    stage: S,
) -> Result<Running, String> {
    let w = Worker::new(
        WorkerConfig {
            id: 0,
            core: Some(FWD_CORE),
            idle: Idle::Spin,
        },
        queues,
        stage,
    );
    let shared = w.shared_counters();
    let stop = Arc::new(AtomicBool::new(false));
    let handle = sluice_dataplane::worker::spawn(w, stop.clone()).map_err(|e| e.to_string())?;
    Ok(Running {
        shared,
        stop,
        handle,
    })
}

fn balancer(
    fwd: Forwarder,
    publisher: &Publisher<Snapshot>,
    capacity: usize,
    timeouts: Timeouts,
) -> Result<Balancer, String> {
    Ok(Balancer::new(
        fwd,
        publisher.reader().ok_or("no reader slot")?,
        BalancerConfig {
            flow_capacity: capacity,
            timeouts,
            // One load generator is one source: no per-source budget.
            new_flows_per_second_per_source: 0,
            ..BalancerConfig::default()
        },
    ))
}

/// Waits until the replay's warm-up has been played and the worker has published
/// `flows` created flows (at most `limit`).
fn wait_warm(r: &Running, done: &AtomicBool, flows: u64, limit: Duration) -> Result<(), String> {
    let t = Instant::now();
    loop {
        let c = r.shared.snapshot();
        if done.load(Ordering::Acquire) && c.events_of(Event::FlowCreated) >= flows {
            return Ok(());
        }
        if t.elapsed() > limit {
            return Err(format!(
                "warm-up: {} of {flows} flows after {:?} (drops: {})",
                c.events_of(Event::FlowCreated),
                limit,
                drops_json(&c)
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The flow table's capacity with `n` established flows: the default (1M flows per
/// worker, what a deployment runs unless it sets `flowsPerWorker`), or `n` if more.
fn established_capacity(n: usize) -> usize {
    BalancerConfig::default().flow_capacity.max(n)
}

/// A flow table only as big as `n` flows (at least 1024): full.
fn full_capacity(n: usize) -> usize {
    n.max(1024)
}

/// A worker running the balancer over the replay of `n` flows (SYNs first, then shuffled
/// ACKs), warmed up; `snap` is its first snapshot.
fn established(
    n: usize,
    snap: Snapshot,
    kind: SourceKind,
    both: bool,
    capacity: usize,
) -> Result<(Running, Publisher<Snapshot>), String> {
    let warm = Arc::new(frames(0..n, tcp::flags::SYN));
    let acks = Arc::new(Source::acks(n, kind));
    let publisher = Publisher::new(snap, 1);
    let stage = balancer(
        forwarder(INSIDE_MAC)?,
        &publisher,
        capacity,
        Timeouts::default(),
    )?;
    let done = Arc::new(AtomicBool::new(false));
    let pool = Pool::new(4096);
    let replay = Replay {
        pool: pool.clone(),
        warmup: Some(warm),
        frames: acks,
        pos: 0,
        warm_done: done.clone(),
    };
    let backends: Box<dyn Queue> = if both {
        Box::new(Backends::new(n, pool))
    } else {
        Box::new(Sink)
    };
    let r = start(vec![Box::new(replay), backends], stage)?;
    if let Err(e) = wait_warm(&r, &done, n as u64, Duration::from_secs(60)) {
        let _ = r.finish();
        return Err(e);
    }
    Ok((r, publisher))
}

fn established_run(
    n: usize,
    ir: &Ir,
    secs: f64,
    kind: SourceKind,
    both: bool,
    capacity: usize,
) -> Result<(Run, Value), String> {
    let (r, _publisher) = established(n, build(ir)?, kind, both, capacity)?;
    let run = measure_worker(&r.shared, 0, Duration::from_millis(200), secs);
    let c = r.finish()?;
    Ok((run, drops_json(&c)))
}

/// Sluice's macswap stage on the replay of `n` flows' ACKs: the harness's own cost.
fn macswap_replay_run(n: usize, secs: f64, kind: SourceKind) -> Result<Run, String> {
    let acks = Arc::new(Source::acks(n, kind));
    let replay = Replay {
        pool: Pool::new(4096),
        warmup: None,
        frames: acks,
        pos: 0,
        warm_done: Arc::new(AtomicBool::new(true)),
    };
    let r = start(vec![Box::new(replay), Box::new(Sink)], MacSwap)?;
    let run = measure_worker(&r.shared, 0, Duration::from_millis(200), secs);
    r.finish()?;
    Ok(run)
}

/// A [`summary`]'s median cycles per packet.
fn cycles(v: &Value) -> f64 {
    v["cycles_per_packet"].as_f64().unwrap_or(0.0)
}

fn vdevs(capture: &Path) -> [String; 2] {
    [
        format!("net_pcap0,rx_pcap={},infinite_rx=1", capture.display()),
        "net_null0,no-rx=1".to_string(),
    ]
}

/// The balancer on the real vdevs: the capture's first 1k frames are the SYNs (flows are
/// created on the first pass; later passes are flow hits).
fn vdev_run(capture: &Path, ir: &Ir, secs: f64) -> Result<(Run, Value), String> {
    let [v0, v1] = vdevs(capture);
    let a = dpdk::open("outside", &v0, 1).map_err(|e| e.to_string())?;
    let b = dpdk::open("inside", &v1, 1).map_err(|e| e.to_string())?;
    let publisher = Publisher::new(build(ir)?, 1);
    let stage = balancer(
        forwarder(b.port.mac())?,
        &publisher,
        4096,
        Timeouts::default(),
    )?;
    let mut queues = Vec::new();
    queues.extend(a.queues);
    queues.extend(b.queues);
    let r = start(queues, stage)?;
    let run = measure_worker(&r.shared, 0, Duration::from_millis(300), secs);
    let c = r.finish()?;
    drop((a.port, b.port));
    Ok((run, drops_json(&c)))
}

fn fig_established(o: &Opts, ir: &Ir, dir: &Path, report: &mut Report) {
    let capture = dir.join("balance-1k.pcap");
    let n = 1000;
    let mut cap = frames(0..n, tcp::flags::SYN).data;
    for _ in 0..3 {
        cap.extend(frames(shuffled(n).into_iter(), tcp::flags::ACK).data);
    }
    let cap = Frames { data: cap };
    let mut errors = vec![];
    let mut dpdk_ok = true;
    if let Err(e) = pcap::write_file(&capture, (0..cap.len()).map(|i| cap.get(i))) {
        errors.push(format!("capture: {e}"));
        dpdk_ok = false;
    }
    if dpdk_ok {
        if let Err(e) = dpdk::init(&eal_args()) {
            errors.push(format!("EAL: {e}"));
            dpdk_ok = false;
        }
    }
    let counts: &[usize] = if o.quick {
        &[1_000, 100_000]
    } else {
        &[1_000, 100_000, 1_000_000]
    };
    const KINDS: [SourceKind; 2] = [SourceKind::Capture, SourceKind::Template];
    // [source][flow count]
    // Each series: the runs and the last run's drops, per flow count.
    type Series = Vec<(Vec<Run>, Value)>;
    let series_of = || -> Series { vec![(vec![], json!({})); counts.len()] };
    let mut series: Vec<Series> = vec![series_of(); 2];
    let mut ms: Vec<Vec<Vec<Run>>> = vec![vec![vec![]; counts.len()]; 2];
    // Both directions (capture source): [flow count]
    let mut both = series_of();
    // A table only as big as the flows (capture source): [flow count]
    let mut full = series_of();
    let (mut tp, mut vd) = (vec![], vec![]);
    let mut vd_drops = json!({});
    for _ in 0..o.runs {
        for (k, &n) in counts.iter().enumerate() {
            // One balancer run into its series (the run and the last drops), or an error.
            let run =
                |what: &str, kind, both, cap, into: &mut (Vec<Run>, Value)| match established_run(
                    n, ir, o.duration, kind, both, cap,
                ) {
                    Ok((r, d)) => {
                        into.0.push(r);
                        into.1 = d;
                        None
                    }
                    Err(e) => Some(format!("balancer {n} flows, {what}: {e}")),
                };
            let cap = established_capacity(n);
            for (s, &kind) in KINDS.iter().enumerate() {
                errors.extend(run(kind.name(), kind, false, cap, &mut series[s][k]));
                match macswap_replay_run(n, o.duration, kind) {
                    Ok(r) => ms[s][k].push(r),
                    Err(e) => errors.push(format!("macswap replay {n} flows, {kind:?}: {e}")),
                }
            }
            let src = SourceKind::Capture;
            errors.extend(run("both directions", src, true, cap, &mut both[k]));
            let full_cap = full_capacity(n);
            errors.extend(run("full table", src, false, full_cap, &mut full[k]));
        }
        if dpdk_ok {
            match vdev_run(&capture, ir, o.duration) {
                Ok((r, d)) => {
                    vd.push(r);
                    vd_drops = d;
                }
                Err(e) => errors.push(format!("balancer on vdevs: {e}")),
            }
            if o.testpmd {
                match testpmd_run(&vdevs(&capture), o.duration) {
                    Ok(r) => tp.push(r),
                    Err(e) => errors.push(format!("testpmd: {e}")),
                }
            }
        }
    }
    let t_sum = summary(&tp);
    let mut by_source = serde_json::Map::new();
    // [source][whole runs, quiet windows]
    let mut at_100k = [[0.0; 2]; 2];
    for (s, kind) in KINDS.iter().enumerate() {
        let mut flows = serde_json::Map::new();
        for (k, &n) in counts.iter().enumerate() {
            let b = summary(&series[s][k].0);
            let m = summary(&ms[s][k]);
            flows.insert(
                n.to_string(),
                json!({
                    "balancer": b,
                    "ratio_to_testpmd": ratio(&b, &t_sum, "mpps_per_core"),
                    "ratio_to_testpmd_cpu_normalized": ratio(&b, &t_sum, "mpps_per_cpu_second"),
                    "ratio_to_testpmd_quiet": ratio(&b, &t_sum, "mpps_per_core_quiet"),
                    "sluice_macswap_stage_on_replay": m,
                    "balancer_minus_macswap_cycles_per_packet": cycles(&b) - cycles(&m),
                    "drops_last_run": series[s][k].1,
                }),
            );
        }
        let at = |key: &str| {
            flows
                .get("100000")
                .map_or(0.0, |v| v[key].as_f64().unwrap_or(0.0))
        };
        at_100k[s] = [at("ratio_to_testpmd"), at("ratio_to_testpmd_quiet")];
        by_source.insert(kind.name().to_string(), Value::Object(flows));
    }
    let series_json = |runs: &Series| {
        let mut m = serde_json::Map::new();
        for (k, &n) in counts.iter().enumerate() {
            let b = summary(&runs[k].0);
            m.insert(
                n.to_string(),
                json!({
                    "balancer": b,
                    "ratio_to_testpmd": ratio(&b, &t_sum, "mpps_per_core"),
                    "ratio_to_testpmd_quiet": ratio(&b, &t_sum, "mpps_per_core_quiet"),
                    "drops_last_run": runs[k].1,
                }),
            );
        }
        Value::Object(m)
    };
    let both_json = series_json(&both);
    let full_json = series_json(&full);
    let vd_sum = summary(&vd);
    report.set(
        "established_flows",
        json!({
            "setup": {
                "balancer_source": {
                    "capture": "in-process replay queue (pool buffer + copy of the next 60-byte frame of an in-memory capture per packet, like net_pcap infinite_rx; 60 bytes per flow, read cold at 100k and 1M flows) -> sink (like net_null)",
                    "template": "in-process replay queue (pool buffer + copy of one 60-byte template, then the flow's source address and port from an 8-byte-per-flow tuple list written in with incrementally adjusted checksums, like a TRex field engine; the same frames) -> sink (like net_null)",
                },
                "testpmd": "dpdk-testpmd --forward-mode=macswap, net_pcap infinite_rx (1k-flow capture, 4000 frames) -> net_null, one forwarding core",
                "forwarding_core": FWD_CORE,
                "duration_s": o.duration,
                "runs": o.runs,
                "traffic": "TCP ACK segments (60 bytes) of N established flows in a shuffled order, after each flow's SYN; NAT to 256 backends, NetworkPolicy on",
                "direction": "original (client -> virtual address) only; both_directions adds the replies",
                "flow_capacity": counts.iter().map(|&n| (n.to_string(), json!(established_capacity(n)))).collect::<serde_json::Map<_, _>>(),
            },
            "flows": by_source,
            "both_directions": {
                "traffic": "the capture source's client ACKs on the outside port and, on the inside port, an ACK from each flow's backend to its SNAT address and port (learnt from the NATed SYNs), the flows in a shuffled order: half the packets are replies, looked up through the index; packets are counted as they leave, by either port",
                "flows": both_json,
            },
            "full_table": {
                "traffic": "the capture source with a flow table only as big as the flows (capacity N, at least 1024): the index at its fullest (2/3), longer probe runs",
                "flow_capacity": counts.iter().map(|&n| (n.to_string(), json!(full_capacity(n)))).collect::<serde_json::Map<_, _>>(),
                "flows": full_json,
            },
            "testpmd_macswap": t_sum,
            "balancer_on_vdevs_1k_flows": {
                "run": vd_sum,
                "ratio_to_testpmd": ratio(&vd_sum, &t_sum, "mpps_per_core"),
                "drops_last_run": vd_drops,
            },
            "goal": "balancer >= 0.5x testpmd macswap at 100k flows",
            "ratio_to_testpmd_at_100k": {"capture": at_100k[0][0], "template": at_100k[1][0]},
            "ratio_to_testpmd_at_100k_quiet": {"capture": at_100k[0][1], "template": at_100k[1][1]},
            "quiet": "`_quiet` figures: per run, the upper quartile of the rates of its 250 ms windows (testpmd's from `show port stats all` every 250 ms), then the median over runs. This machine's memory system is disturbed from outside in phases (the same balancer process flips between about 205 and 285 cycles a packet at 100k flows; testpmd's cache-resident macswap stays within 103-111): whole-run figures measure how much of a run was disturbed, quiet ones the code",
            "errors": errors,
        }),
    );
}

fn fig_new_connections(o: &Opts, ir: &Ir, report: &mut Report) {
    let syns = Arc::new(Source::Capture(frames(
        shuffled(NEW_CONN_FRAMES).into_iter(),
        tcp::flags::SYN,
    )));
    let (mut rates, mut cpu_rates, mut cycles, mut errors) = (vec![], vec![], vec![], vec![]);
    let mut last = json!({});
    for _ in 0..o.runs {
        let res = (|| -> Result<(), String> {
            let publisher = Publisher::new(build(ir)?, 1);
            let timeouts = Timeouts {
                tcp_syn_sent: 1,
                ..Timeouts::default()
            };
            let stage = balancer(forwarder(INSIDE_MAC)?, &publisher, 1 << 22, timeouts)?;
            let replay = Replay {
                pool: Pool::new(4096),
                warmup: None,
                frames: syns.clone(),
                pos: 0,
                warm_done: Arc::new(AtomicBool::new(true)),
            };
            let r = start(vec![Box::new(replay), Box::new(Sink)], stage)?;
            std::thread::sleep(Duration::from_millis(300));
            let (c0, cpu0, t0) = (
                r.shared.snapshot(),
                sluice_perf::thread_cpu_ns("self", "sluice-w0"),
                Instant::now(),
            );
            std::thread::sleep(Duration::from_secs_f64(o.duration));
            let (c1, cpu1, wall) = (
                r.shared.snapshot(),
                sluice_perf::thread_cpu_ns("self", "sluice-w0"),
                t0.elapsed().as_secs_f64(),
            );
            let created =
                (c1.events_of(Event::FlowCreated) - c0.events_of(Event::FlowCreated)) as f64;
            let cpu_s = cpu0
                .zip(cpu1)
                .map_or(wall, |(a, b)| b.saturating_sub(a) as f64 / 1e9)
                .max(1e-9);
            rates.push(created / wall);
            cpu_rates.push(created / cpu_s);
            cycles.push(cpu_s * sluice_dataplane::mem::tsc_hz() as f64 / created.max(1.0));
            let c = r.finish()?;
            last = json!({
                "flows_created": c.events_of(Event::FlowCreated),
                "flows_expired": c.events_of(Event::FlowExpired),
                "flows_live_at_end": c.flows,
                "rx": c.ports[0].rx_packets,
                "tx": c.ports[1].tx_packets,
                "drops": drops_json(&c),
            });
            Ok(())
        })();
        if let Err(e) = res {
            errors.push(e);
        }
    }
    let rate = median(&rates);
    report.set(
        "new_connections",
        json!({
            "setup": {
                "traffic": "SYNs (60 bytes) from 2M distinct client 5-tuples, shuffled, replayed; SYN_SENT timeout 1 s so the timer wheel recycles flows; 256 backends (SNAT ports per backend), flow capacity 4M",
                "counted": "flow_created events in the window",
                "duration_s": o.duration,
                "runs": o.runs,
            },
            "per_second_per_core": rate,
            "per_cpu_second": median(&cpu_rates),
            "cycles_per_connection": median(&cycles),
            "runs_per_second": rates,
            "goal_per_second": 200_000,
            "ratio_to_goal": rate / 200_000.0,
            "last_run": last,
            "errors": errors,
        }),
    );
}

fn fig_bytes_per_flow(report: &mut Report) {
    let mut m = serde_json::Map::new();
    for cap in [1_000usize, 100_000, 1_000_000, 1 << 20, 1 << 22] {
        let t = FlowTable::new(cap, Timeouts::default(), 0, 1);
        m.insert(
            cap.to_string(),
            json!({
                "memory_bytes": t.memory_bytes(),
                "bytes_per_flow": t.memory_bytes() as f64 / t.capacity() as f64,
            }),
        );
    }
    report.set(
        "bytes_per_flow",
        json!({
            "by_capacity": m,
            "flow_entry_bytes": std::mem::size_of::<sluice_dataplane::flow::Flow>(),
            "goal": "<= 128",
        }),
    );
}

/// The base IR with `extra` more TCP listeners (ports 20000 on, on 10.77.0.11) and a
/// route each, copies of the benchmark's own listener and route.
fn replicate(base: &Ir, extra: usize) -> Ir {
    let mut ir = base.clone();
    let (Some(l0), Some(r0)) = (base.listeners.first(), base.routes.first()) else {
        return ir;
    };
    for i in 0..extra {
        let mut r = r0.clone();
        r.name = format!("TCPRoute b/r{i}");
        let idx = ir.routes.len();
        ir.routes.push(r);
        let mut l = l0.clone();
        l.name = format!("Gateway b/many/l{i}");
        l.addresses = vec![IpAddr::V4(Ipv4Addr::new(10, 77, 0, 11))];
        l.port = 20_000 + i as u16;
        for b in &mut l.bindings {
            b.route = idx;
        }
        ir.listeners.push(l);
    }
    ir
}

/// Publishes `snap` under traffic and times it: (publish µs, until the worker moved µs,
/// reclaim µs, whether the worker moved within 1 s).
fn swap_once(publisher: &mut Publisher<Snapshot>, snap: Snapshot) -> (f64, f64, f64, bool) {
    let t = Instant::now();
    let generation = publisher.publish(snap);
    let publish = t.elapsed().as_secs_f64() * 1e6;
    let t = Instant::now();
    let mut moved = true;
    while publisher.oldest_in_use() < generation {
        if t.elapsed() > Duration::from_secs(1) {
            moved = false;
            break;
        }
        std::hint::spin_loop();
    }
    let wait = t.elapsed().as_secs_f64() * 1e6;
    let t = Instant::now();
    publisher.reclaim();
    (publish, wait, t.elapsed().as_secs_f64() * 1e6, moved)
}

fn fig_swap(o: &Opts, base: &Ir, report: &mut Report) {
    const ROUTES: usize = 10_000;
    const COMPILE_ROUTES: [usize; 3] = [1_000, 5_000, 10_000];
    let mut errors = vec![];
    // Manifests -> IR at 1k, 5k and 10k extra routes, and how the time grows per route
    // (1.0: linear).
    let mut compile_s = vec![];
    for n in COMPILE_ROUTES {
        let text = manifests(n, o.swap_maglev);
        let t = Instant::now();
        match compile(&text) {
            Ok(_) => compile_s.push(t.elapsed().as_secs_f64()),
            Err(e) => {
                errors.push(format!("compile {n}: {e}"));
                compile_s.push(0.0);
            }
        }
    }
    let per_route = |i: usize| compile_s[i] / COMPILE_ROUTES[i] as f64;
    let growth = |i: usize| {
        if per_route(0) > 0.0 {
            per_route(i) / per_route(0)
        } else {
            0.0
        }
    };
    let mut big_base = base.clone();
    if let Some(a) = big_base.appliance.as_mut() {
        a.maglev_table_size = Some(o.swap_maglev);
    }
    for r in &mut big_base.routes {
        r.maglev_table_size = o.swap_maglev;
    }
    let big = replicate(&big_base, ROUTES);
    // Snapshots of the 10k-route config, built before the traffic starts.
    let (mut build_s, mut big_snaps) = (vec![], vec![]);
    for _ in 0..o.runs.min(3) {
        let t = Instant::now();
        match build(&big) {
            Ok(s) => {
                build_s.push(t.elapsed().as_secs_f64());
                big_snaps.push(s);
            }
            Err(e) => {
                errors.push(format!("build: {e}"));
                break;
            }
        }
    }
    let flows = 100_000;
    let (mut big_swaps, mut base_build_ms) = (vec![], vec![]);
    // Swap timings in ns.
    let (mut publish, mut until_moved, mut reclaim) =
        (Latencies::new(), Latencies::new(), Latencies::new());
    let mut traffic = json!({});
    let res = (|| -> Result<(), String> {
        let cap = established_capacity(flows);
        let (r, mut publisher) = established(flows, build(base)?, SourceKind::Capture, false, cap)?;
        std::thread::sleep(Duration::from_millis(200));
        let mut stuck = 0;
        // The 10k-route snapshots, one at a time.
        for s in big_snaps.drain(..) {
            let (p, w, c, moved) = swap_once(&mut publisher, s);
            stuck += u32::from(!moved);
            big_swaps.push(json!({"publish_us": p, "until_worker_moved_us": w, "reclaim_us": c}));
            std::thread::sleep(Duration::from_millis(100));
        }
        // Then a freshly built snapshot every interval at full rate.
        let c0 = r.shared.snapshot();
        let t0 = Instant::now();
        while t0.elapsed().as_secs_f64() < o.duration * 2.0 {
            let next = Instant::now() + Duration::from_millis(o.swap_interval_ms);
            let t = Instant::now();
            let snap = build(base)?;
            base_build_ms.push(t.elapsed().as_secs_f64() * 1e3);
            let (p, w, c, moved) = swap_once(&mut publisher, snap);
            stuck += u32::from(!moved);
            publish.record((p * 1e3) as u64);
            until_moved.record((w * 1e3) as u64);
            reclaim.record((c * 1e3) as u64);
            if let Some(d) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(d);
            }
        }
        let wall = t0.elapsed().as_secs_f64();
        let c1 = r.shared.snapshot();
        let c = r.finish()?;
        let rx: u64 = c.ports.iter().map(|p| p.rx_packets).sum();
        let tx: u64 = c.ports.iter().map(|p| p.tx_packets).sum();
        let dropped = c.total_drops();
        let window_tx = c1.ports[1].tx_packets - c0.ports[1].tx_packets;
        traffic = json!({
            "swaps": publish.len() as usize + big_swaps.len(),
            "worker_did_not_move_within_1s": stuck,
            "rx": rx,
            "tx": tx,
            "drops": drops_json(&c),
            "unaccounted": rx.saturating_sub(tx + dropped),
            "lost": rx.saturating_sub(tx + dropped) + dropped,
            "policy_rechecks": c.events_of(Event::PolicyRechecked),
            "mpps_while_swapping": window_tx as f64 / wall / 1e6,
        });
        Ok(())
    })();
    if let Err(e) = res {
        errors.push(e);
    }
    let us = |l: &Latencies, q: f64| l.quantile(q) as f64 / 1e3;
    report.set(
        "swap",
        json!({
            "setup": {
                "config_10k": format!("{ROUTES} extra TCP listeners with a route each to the 256-pod Service (IR replicated from the compiled manifests), Maglev tables of {} slots", o.swap_maglev),
                "compile": format!("manifests -> IR with {COMPILE_ROUTES:?} extra listeners and TCPRoutes (one Gateway, a sectionName per route); growth: time per route relative to 1k (1.0 = linear)"),
                "traffic": format!("{flows} established flows replayed at full rate on core {FWD_CORE}; first the 10k-route snapshots are published, then a freshly built base snapshot every {} ms for {} s, on core 0", o.swap_interval_ms, o.duration * 2.0),
                "lost": "rx - tx - drops, plus every drop (none is expected)",
            },
            "compile_1k_routes_s": compile_s[0],
            "compile_5k_routes_s": compile_s[1],
            "compile_10k_routes_s": compile_s[2],
            "compile_growth_per_route": {"5k_vs_1k": growth(1), "10k_vs_1k": growth(2)},
            "build_10k_routes_s": median(&build_s),
            "runs_build_10k_routes_s": build_s,
            "swaps_10k": big_swaps,
            "base_build_ms": median(&base_build_ms),
            "publish_us": {"median": us(&publish, 0.5), "max": us(&publish, 1.0)},
            "until_worker_moved_us": {"median": us(&until_moved, 0.5), "p99": us(&until_moved, 0.99), "max": us(&until_moved, 1.0)},
            "reclaim_us": {"median": us(&reclaim, 0.5), "max": us(&reclaim, 1.0)},
            "traffic": traffic,
            "goal": "0 packets lost",
            "errors": errors,
        }),
    );
}

fn main() {
    let o = opts();
    if !core_affinity::set_for_current(core_affinity::CoreId { id: 0 }) {
        eprintln!("bench_balance: could not pin the control thread to core 0");
    }
    let dir = std::env::temp_dir().join(format!("sluice-bench-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let mut report = Report::new(
        "bench_balance",
        json!({"bench": "balance", "tsc_hz": sluice_dataplane::mem::tsc_hz()}),
        o.out.clone(),
    );
    if let Some(n) = o.only_flows {
        let res = compile(&manifests(0, 65537))
            .and_then(|ir| {
                let cap = o.capacity.unwrap_or(established_capacity(n));
                established_run(n, &ir, o.duration, o.source, o.both, cap)
            })
            .map(|(run, drops)| json!({"flows": n, "balancer": summary(&[run]), "drops": drops}));
        match res {
            Ok(v) => report.set("only_flows", v),
            Err(e) => report.set("only_flows_error", json!(e)),
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&report.v).unwrap_or_default()
        );
        return;
    }
    if !o.only_new {
        fig_bytes_per_flow(&mut report);
    }
    match compile(&manifests(0, 65537)) {
        Ok(ir) if o.only_new => fig_new_connections(&o, &ir, &mut report),
        Ok(ir) => {
            fig_established(&o, &ir, &dir, &mut report);
            fig_new_connections(&o, &ir, &mut report);
            fig_swap(&o, &ir, &mut report);
        }
        Err(e) => report.set("config_error", json!(e)),
    }
    let _ = std::fs::remove_dir_all(&dir);
    dpdk_cleanup();
    report.finish();
}
