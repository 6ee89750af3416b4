//! The stage interface: a burst of received packets in, one [`Verdict`] per packet out.
//!
//! The worker does the I/O and counts the verdicts; a [`Stage`] only looks at and rewrites
//! packets, so the same code runs on DPDK, TAP, pcap and in-memory ports. What a stage
//! may use besides the packets comes in a [`Ctx`]: the clock, the worker's counters (its
//! HTTP rule counters among them), and [`StageIo`] for packets it makes up or sends late.

use crate::port::{Allocator, Pkt, BURST};
use crate::stats::{Counters, DropReason, RuleCounters, NO_RULE_COUNTERS};
use crate::tables::addresses::{self, Addresses};

/// What to do with one packet. Eight bytes, so it comes back from a stage in a register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Send it on this port (index in configuration order).
    Tx(u32),
    /// Hand it to this worker (the owner of its flow) through the redirect ring; it
    /// arrives there as if received on the same port.
    Redirect(u32),
    /// Drop it, counting the reason.
    Drop(DropReason),
    /// The stage kept the packet for later (parked until its next hop resolves) and left
    /// a spare buffer in its place, which the worker frees without counting anything. The
    /// packet leaves later through [`StageIo`], or is dropped and counted then.
    Kept,
}

impl Verdict {
    /// Send on port `port`.
    #[inline]
    pub const fn tx(port: usize) -> Verdict {
        Verdict::Tx(port as u32)
    }
}

/// What a stage may use besides the packets.
#[derive(Debug)]
pub struct Ctx<'a> {
    /// The listener addresses sluice serves in the tables generation being used (the
    /// snapshot's [`Addresses`]; none unless a stage that reads a snapshot sets them with
    /// [`Ctx::serving`]): the forwarder treats them as its own.
    pub served: &'a Addresses,
    /// Milliseconds on the worker's clock (real or virtual).
    pub now_ms: u64,
    /// The worker's counters (for packets replaced by a reply: the original is counted as
    /// dropped here, the reply goes out under its verdict).
    pub counters: &'a mut Counters,
    /// Fresh buffers and packets to send besides the verdicts (the worker's); `None`
    /// where the caller offers neither (the stage then makes do without).
    pub io: Option<&'a mut StageIo>,
    /// The worker's HTTP rule counters (requests and responses per rule slot); counts
    /// go nowhere unless the caller lends some ([`Ctx::with_rules`]).
    pub rules: &'a RuleCounters,
}

impl<'a> Ctx<'a> {
    /// A context without [`StageIo`].
    pub fn new(now_ms: u64, counters: &'a mut Counters) -> Ctx<'a> {
        Ctx {
            served: &addresses::NONE,
            now_ms,
            counters,
            io: None,
            rules: &NO_RULE_COUNTERS,
        }
    }

    /// A context with the worker's [`StageIo`].
    pub fn with_io(now_ms: u64, counters: &'a mut Counters, io: &'a mut StageIo) -> Ctx<'a> {
        Ctx {
            served: &addresses::NONE,
            now_ms,
            counters,
            io: Some(io),
            rules: &NO_RULE_COUNTERS,
        }
    }

    /// This context counting HTTP rules into `rules` (the worker's own).
    pub fn with_rules(self, rules: &'a RuleCounters) -> Ctx<'a> {
        Ctx { rules, ..self }
    }

    /// This context with `served` as the served addresses, for the length of one burst
    /// (or `maintain`) of the tables generation they belong to.
    #[inline]
    pub fn serving<'b>(&'b mut self, served: &'b Addresses) -> Ctx<'b> {
        Ctx {
            served,
            now_ms: self.now_ms,
            counters: &mut *self.counters,
            io: self.io.as_deref_mut(),
            rules: self.rules,
        }
    }
}

/// Packets a [`StageIo`] holds at most between two drains by the worker.
pub const EXTRA_TX: usize = 2 * BURST;

/// What a worker lends its stage beyond the burst: an allocator of fresh buffers, and a
/// fixed-capacity list of packets to send besides the verdicts (ARP requests, packets
/// released after resolution), which the worker moves into its tx buffers after each
/// burst (before the burst's own packets, which are newer) and after `maintain`.
/// Allocated once; no allocation per packet.
#[derive(Debug)]
pub struct StageIo {
    alloc: Option<Allocator>,
    tx: Vec<(u32, Pkt)>,
}

impl StageIo {
    /// An empty list, drawing fresh buffers from `alloc` (`None`: no buffers).
    pub fn new(alloc: Option<Allocator>) -> StageIo {
        StageIo {
            alloc,
            tx: Vec::with_capacity(EXTRA_TX),
        }
    }

    /// Replaces the allocator.
    pub fn set_allocator(&mut self, alloc: Option<Allocator>) {
        self.alloc = alloc;
    }

    /// Whether there is an allocator at all.
    #[inline]
    pub fn can_alloc(&self) -> bool {
        self.alloc.is_some()
    }

    /// A fresh empty buffer, or `None` (no allocator, or none free).
    #[inline]
    pub fn alloc(&self) -> Option<Pkt> {
        self.alloc.as_ref()?.alloc()
    }

    /// Queues `pkt` to be sent on `port`; gives it back when the list is full.
    #[inline]
    pub fn send(&mut self, port: usize, pkt: Pkt) -> Result<(), Pkt> {
        if self.tx.len() >= EXTRA_TX {
            return Err(pkt);
        }
        self.tx.push((port as u32, pkt));
        Ok(())
    }

    /// Room left in the list.
    #[inline]
    pub fn room(&self) -> usize {
        EXTRA_TX - self.tx.len().min(EXTRA_TX)
    }

    /// Packets queued.
    #[inline]
    pub fn len(&self) -> usize {
        self.tx.len()
    }

    /// Whether nothing is queued.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.tx.is_empty()
    }

    /// Takes every queued packet with its port, in the order queued.
    #[inline]
    pub fn drain(&mut self) -> std::vec::Drain<'_, (u32, Pkt)> {
        self.tx.drain(..)
    }
}

/// Sends a packet a stage made outside the burst (through [`StageIo`]) as `v` says, or
/// counts its drop.
pub fn dispatch(v: Verdict, p: Pkt, ctx: &mut Ctx<'_>) {
    match v {
        Verdict::Tx(port) => {
            if let Some(io) = ctx.io.as_mut() {
                if io.send(port as usize, p).is_err() {
                    ctx.counters.drop(DropReason::TxFull);
                }
            }
        }
        Verdict::Drop(r) => ctx.counters.drop(r),
        Verdict::Kept | Verdict::Redirect(_) => {}
    }
}

/// A packet-processing stage.
pub trait Stage: Send {
    /// Decides every packet of a burst received on `in_port`; `verdicts[i]` is the fate of
    /// `pkts[i]` (`verdicts` is at least as long as `pkts`).
    fn process_burst(
        &mut self,
        in_port: usize,
        pkts: &mut [Pkt],
        verdicts: &mut [Verdict],
        ctx: &mut Ctx<'_>,
    );

    /// Called once per poll round after the bursts (the quiescent point): timers and
    /// other housekeeping. The default does nothing.
    fn maintain(&mut self, _ctx: &mut Ctx<'_>) {}
}
