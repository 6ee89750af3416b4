//! The L4 load-balancing stage: connection tracking, NetworkPolicy on new flows, Maglev
//! backend choice and full NAT, in front of the [`Forwarder`].
//!
//! Per packet (one snapshot read per burst, see [`crate::rcu`]):
//!
//! 1. **Parse** ([`parse`](crate::pipeline::parse), once for the whole pipeline) Ethernet -> IPv4
//!    (no fragments) / IPv6 (TCP or UDP right after the fixed header) -> TCP/UDP ports.
//!    Anything else (ARP, ND, ICMP, IPv6 with extension headers) goes to the [`Forwarder`]
//!    unchanged, with its metadata; routed non-TCP/UDP traffic passes the policy tables
//!    first (stateless: protocol and addresses).
//! 2. **Flow hit** (either direction's 5-tuple): re-check policy if the snapshot
//!    generation moved on since the flow was admitted (a flow the new policy denies is
//!    closed), advance the TCP state and expiry, rewrite addresses and ports with
//!    incremental checksums (IPv4 header, TCP/UDP over the pseudo-header; IPv6 alike),
//!    then let the forwarder route it (TTL/hop limit, next hop, MACs).
//! 3. **New flow to a listener** (a bound listener address, or an any-address listener on
//!    one of sluice's addresses): the route's Maglev table picks a backend from the
//!    client-side 5-tuple ([`flow_hash`](crate::tables::maglev::flow_hash)); a *reject*
//!    slot answers TCP with RST and UDP with ICMP port unreachable; the policy tables must
//!    allow source -> backend; then the flow is created with a source NAT address (sluice's
//!    address of the backend's family on the port towards it) and port from this worker's
//!    range, or, for a transparent listener, with the client's own address. TCP flows
//!    start only on a SYN; other segments without a flow are dropped (`no_flow`).
//! 4. **New routed flow** (no listener, not addressed to sluice): policy source ->
//!    destination, then a flow without rewrite so that replies pass (Kubernetes: replies
//!    of an allowed connection are allowed).
//!
//! With policy tables of [`BalancerConfig::policy_bursts_from`] bytes and up (4 MiB by
//! default), the policy checks of 4 (and of 3 for listeners bound to addresses that are
//! not sluice's own) are made for the whole burst at once, before the
//! flow lookups, in one staged lookup whose cache misses overlap (`PolicyAhead`); a
//! packet uses that verdict only if its own check asks exactly the same question.
//!
//! ## Multi-core
//!
//! A flow lives in the table of the worker that received its first packet. Both
//! directions reach that worker because: the client side arrives by symmetric RSS (the
//! NIC's Toeplitz with the repeated `0x6d5a` key, the kernel's TAP queue choice, or the
//! in-memory port's symmetric hash all keep a 5-tuple on one queue, and routed flows'
//! two directions hash alike); the backend side of a NAT flow is addressed to a SNAT port
//! from the owner's own port range, so a worker that receives a reply for a port of
//! another worker's range hands the packet to that worker through the lock-free
//! [`Redirects`](crate::worker::Redirects) rings ([`Verdict::Redirect`]). This is the
//! software fallback DESIGN.md §3 names; it needs no NIC feature and works on TAP and
//! single-queue vdevs. (Choosing the SNAT port so that the reply's Toeplitz hash also lands
//! on the owner's queue would save the ring hop on NICs; it is not done yet.)
//!
//! Transparent listeners (no SNAT) keep the client address towards the backend, so the
//! backend's reply arrives as routed traffic by the symmetric hash of (backend, client):
//! with more than one worker that can be another worker than the client side's, which then
//! has no flow for it. Use one worker, or SNAT, for transparent listeners until rte_flow
//! steering lands.
//!
//! The listener addresses a generation serves on a port's network (the snapshot's
//! [`Addresses`](crate::tables::addresses::Addresses)) count as sluice's own for the
//! burst: the forwarder reads them from [`Ctx::served`], and worker 0 announces the new ones
//! at its quiescent point ([`crate::pipeline::announce`]).
//!
//! Nothing here allocates after [`Balancer::new`], takes a lock, or panics on input; every
//! packet that does not go out is counted under a [`DropReason`].
//!
//! The rooms: this file holds the configuration and the burst's passes; `flows` decides
//! one TCP/UDP packet (hit, miss, routed, reject), `ahead` makes the burst's policy
//! checks. NAT and the replies are [`nat`](crate::pipeline::nat) and [`reply`](crate::pipeline::reply),
//! delayed binding is [`crate::splice::engine`]. Measured with `bench_balance`
//! (established flows, new connections) and `bench_balance_policy` (burst policy checks);
//! history in `perf/NOTES.md`.

mod ahead;
mod flows;
#[cfg(test)]
mod tests;

use crate::flow::{FlowTable, SourceRates, Splice, Timeouts};
use crate::pipeline::announce::Announcer;
use crate::pipeline::forward::Forwarder;
use crate::pipeline::nat::SnatPorts;
use crate::pipeline::parse::{mac_word, parse, Found};
use crate::pipeline::stage::{Ctx, Stage, Verdict};
use crate::port::{Pkt, BURST};
use crate::rcu::Reader;
use crate::splice::engine::Splicer;
use crate::splice::SpliceConfig;
use crate::stats::{DropReason, Event};
use crate::tables::policy;
use crate::tables::snapshot::Snapshot;
use crate::terminate::{TerminateConfig, Terminator};
use ahead::{Ahead, PolicyAhead};
use flows::State;

/// A worker's balancer settings (plain data; `sluice-ctrl` fills it from the Appliance).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BalancerConfig {
    /// This worker's index.
    pub worker: usize,
    /// Number of workers (the SNAT port range is split among them).
    pub workers: usize,
    /// Flow table capacity (fixed; all memory allocated at start).
    pub flow_capacity: usize,
    /// Connection-tracking timeouts.
    pub timeouts: Timeouts,
    /// The SNAT port range, inclusive, split evenly among the workers.
    pub snat_ports: (u16, u16),
    /// New connections one source address may open per second on this worker (0: no
    /// limit; default 1000): [`crate::flow::sources`].
    pub new_flows_per_second_per_source: u32,
    /// Seconds a closed connection's SNAT tuple rests before it is handed out again
    /// ([`crate::pipeline::snat`]; default 60, Linux's TIME_WAIT).
    pub snat_rest_s: u32,
    /// Seeds the flow table's hash and the SNAT port cursor.
    pub seed: u64,
    /// Delayed binding (SNI/Host listeners): embryos, buffers, timers, cookie secret.
    pub splice: SpliceConfig,
    /// TLS termination: connection and memory caps, buffers, timeouts.
    pub terminate: TerminateConfig,
    /// Policy tables of this many bytes and up check a burst's new connections with one
    /// burst lookup ([`policy::PolicyTables::prefers_bursts`]); smaller ones, one
    /// lookup per connection. Default [`policy::BURST_MIN`].
    pub policy_bursts_from: usize,
}

impl Default for BalancerConfig {
    fn default() -> Self {
        BalancerConfig {
            worker: 0,
            workers: 1,
            flow_capacity: 1 << 20,
            timeouts: Timeouts::default(),
            snat_ports: (1024, 65535),
            snat_rest_s: crate::pipeline::snat::SNAT_REST_S,
            new_flows_per_second_per_source: 1000,
            seed: 0x5eed_5eed,
            splice: SpliceConfig::default(),
            terminate: TerminateConfig::default(),
            policy_bursts_from: policy::BURST_MIN,
        }
    }
}

/// How many packets ahead of the one being decided the burst's last pass moves a flow
/// entry from L2 (where the second pass prefetched it) into L1. Chosen with
/// `bench_balance --only-flows` (figures in `perf/NOTES.md`).
const L1_LEAD: usize = 2;

/// The load-balancing stage of one worker (see the [module docs](self)).
pub struct Balancer {
    state: State,
    snapshot: Reader<Snapshot>,
    /// The burst's parse results, reused from burst to burst: each burst overwrites the
    /// entries of its own packets and reads no others, so nothing is cleared.
    ahead: [Ahead; BURST],
    /// The burst's new connections' policy, decided ahead (big tables only).
    checks: PolicyAhead,
    /// [`BalancerConfig::policy_bursts_from`].
    policy_bursts_from: usize,
    /// The first worker's announcements of new served addresses (`None` on the others:
    /// worker 0 owns queue 0 of every port).
    announcer: Option<Announcer>,
}

impl std::fmt::Debug for Balancer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Balancer")
            .field("worker", &self.state.worker)
            .field("flows", &self.state.flows)
            .finish_non_exhaustive()
    }
}

impl Balancer {
    /// A balancer over a forwarder (ports, FIB, neighbours), reading its tables through
    /// `snapshot`. Allocates the flow table here.
    pub fn new(fwd: Forwarder, snapshot: Reader<Snapshot>, cfg: BalancerConfig) -> Balancer {
        let macs = fwd.config().ports.iter().map(|p| p.mac.0).collect();
        Balancer {
            state: State {
                flows: FlowTable::new(cfg.flow_capacity, cfg.timeouts, 0, cfg.seed),
                snat: SnatPorts::new(
                    cfg.snat_ports,
                    cfg.worker,
                    cfg.workers,
                    cfg.seed,
                    cfg.snat_rest_s,
                ),
                worker: cfg.worker as u32,
                sources: SourceRates::new(
                    cfg.new_flows_per_second_per_source,
                    cfg.seed.rotate_left(17),
                ),
                fwd,
                macs,
                splice: Splicer::new(cfg.splice.clone()),
                terminate: Terminator::new(cfg.terminate.clone()),
                early_drops_counted: 0,
            },
            snapshot,
            ahead: [Ahead::NONE; BURST],
            checks: PolicyAhead::new(),
            policy_bursts_from: cfg.policy_bursts_from,
            announcer: (cfg.worker == 0).then(Announcer::new),
        }
    }

    /// The worker's flow table.
    pub fn flows(&self) -> &FlowTable {
        &self.state.flows
    }

    /// Delayed-binding connections open now (between the cookie's return and the splice
    /// or sluice's own answer).
    pub fn embryos(&self) -> usize {
        self.state.splice.embryos().len()
    }

    /// Terminated connections open now (and the cap: [`Terminator::capacity`]).
    pub fn terminator(&self) -> &Terminator {
        &self.state.terminate
    }

    /// The forwarder behind the balancer.
    pub fn forwarder(&self) -> &Forwarder {
        &self.state.fwd
    }

    /// This worker's SNAT ports, inclusive.
    pub fn snat_ports(&self) -> (u16, u16) {
        self.state.snat.range()
    }
}

impl Stage for Balancer {
    fn process_burst(
        &mut self,
        in_port: usize,
        pkts: &mut [Pkt],
        verdicts: &mut [Verdict],
        ctx: &mut Ctx<'_>,
    ) {
        let (generation, snap) = self.snapshot.read();
        let generation = generation as u32;
        // The forwarder reads the generation's served addresses from the context.
        let ctx = &mut ctx.serving(&snap.addresses);
        let now_s = (ctx.now_ms / 1000) as u32;
        let st = &mut self.state;
        let n = pkts.len().min(verdicts.len()).min(BURST);
        let Some(mac) = st.macs.get(in_port).map(mac_word) else {
            verdicts[..n].fill(Verdict::Drop(DropReason::BadPort));
            return;
        };
        // Three passes over the burst so that the flow table's cache misses overlap
        // (as VPP and DPDK's hash library do): parse and hash every packet and prefetch
        // its index slot; read the index slots (now cached) and prefetch the flow entries
        // they point to (into L2: `FlowTable::prefetch_entry` says why); then look up
        // (both now cached, each entry moved into L1 a little ahead: `L1_LEAD`) and
        // decide. The lookup itself waits for the last pass, so a flow an earlier packet
        // of the burst created, removed or re-keyed is seen as it is now.
        let ahead = &mut self.ahead[..n];
        // `parse` writes the packet's fields straight into its entry: a returned `Meta`
        // (or one `*a = match ...` choosing between it and `NONE`) was copied through the
        // stack, and that copy waited on store forwarding.
        for (a, p) in ahead.iter_mut().zip(pkts[..n].iter()) {
            if parse(p.data(), mac, &mut a.meta) == Found::Transport {
                let h = match a.meta.tuple4() {
                    Some(k) => st.flows.hash4(&k),
                    None => st.flows.hash(&a.meta.tuple()),
                };
                st.flows.prefetch(h);
                a.hash = h;
            }
        }
        // The entries the second pass found (a hint, like the prefetch itself).
        let mut entries = [None; BURST];
        for (a, e) in ahead
            .iter()
            .zip(entries.iter_mut())
            .filter(|(a, _)| a.is_transport())
        {
            *e = st.flows.prefetch_entry(a.hash, a.meta.v6);
        }
        // Big policy tables: the new connections' checks in one burst lookup.
        let checked = if snap.policy.prefers_bursts(self.policy_bursts_from) {
            self.checks.decide(st, snap, ahead, &entries)
        } else {
            0
        };
        let checks = &self.checks;
        for (i, ((a, p), v)) in ahead
            .iter_mut()
            .zip(pkts.iter_mut())
            .zip(verdicts.iter_mut())
            .enumerate()
        {
            // The second pass left the entries in L2; move the one L1_LEAD packets on
            // into L1 while this one is decided.
            if let Some(&Some(id)) = entries.get(i + L1_LEAD) {
                st.flows.prefetch_flow(id);
            }
            *v = if a.is_transport() {
                let meta = &mut a.meta;
                let found = match meta.tuple4() {
                    Some(k) => st.flows.lookup4_hashed(&k, a.hash, now_s),
                    None => st.flows.lookup_hashed(&meta.tuple(), a.hash, now_s),
                };
                match found {
                    Some(hit) => st.hit(in_port, p, meta, hit, snap, generation, now_s, ctx),
                    None => {
                        let ahead = checks.get(checked, i);
                        let t = meta.tuple();
                        st.miss(in_port, p, meta, t, snap, generation, now_s, ctx, ahead)
                    }
                }
            } else {
                st.other(in_port, p, &a.meta, snap, ctx)
            };
        }
    }

    fn maintain(&mut self, ctx: &mut Ctx<'_>) {
        // The quiescent point: an idle worker still moves to the newest snapshot, so the
        // control thread can free the older ones (one load and one store).
        let (generation, snap) = self.snapshot.read();
        let ctx = &mut ctx.serving(&snap.addresses);
        // The first worker announces the addresses this generation newly serves.
        if let Some(a) = &mut self.announcer {
            a.maintain(self.state.fwd.config(), &snap.addresses, ctx);
        }
        // The forwarder's neighbour timers: parked packets, retries, failures.
        self.state.fwd.maintain(ctx);
        self.state
            .engine()
            .splice_timers(snap, generation as u32, ctx);
        self.state.terminator().timers(snap, generation as u32, ctx);
        let now_s = (ctx.now_ms / 1000) as u32;
        let embryos = self.state.splice.embryos_mut();
        let terminate = &mut self.state.terminate;
        let snat = &mut self.state.snat;
        let timeouts = *self.state.flows.timeouts();
        let expired = self.state.flows.expire(now_s, |f| {
            // (Only if the slot is still this flow's: an evicted embryo's slot may serve
            // another connection by now.)
            if matches!(f.splice.phase, Splice::EMBRYO | Splice::REPLAYING)
                && embryos.is_open(f.splice.value)
                && embryos.get(f.splice.value).client == f.orig()
            {
                embryos.close(f.splice.value);
            }
            if f.splice.phase == Splice::TERMINATED {
                terminate.flow_expired(f.splice.value, f.orig());
            }
            // A SNAT tuple rests from its connection's last packet.
            snat.rest_expired(f, &timeouts, now_s);
        });
        ctx.counters.events[Event::FlowExpired as usize] += expired as u64;
        ctx.counters.events[Event::HalfOpenEvicted as usize] += self.state.snat.take_evicted();
        let early = self.state.flows.stats().early_dropped;
        ctx.counters.events[Event::FlowEarlyDrop as usize] +=
            early - self.state.early_drops_counted;
        self.state.early_drops_counted = early;
        ctx.counters.flows = self.state.flows.len() as u64;
        ctx.counters.terminated = self.state.terminate.open() as u64;
    }
}
