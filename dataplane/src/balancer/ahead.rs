//! What the burst's first passes prepare for its decision pass: each packet's parsed
//! headers and flow hash ([`Ahead`]), and the new connections' policy checked a burst at
//! a time ([`PolicyAhead`], big policy tables only).

use super::flows::{Prechecked, State, Target};
use crate::flow::FlowId;
use crate::pipeline::parse::{Found, Meta};
use crate::port::BURST;
use crate::tables::policy::{self, Conn};
use crate::tables::snapshot::Snapshot;
use std::net::{IpAddr, Ipv4Addr};

/// A packet of the burst, parsed and hashed ahead of the decision pass (its key is
/// rebuilt from `meta` where needed: for IPv4 that is two words, cheaper than carrying it).
#[derive(Clone, Copy)]
pub(super) struct Ahead {
    /// The packet's headers, which every later pass and the forwarder read.
    pub(super) meta: Meta,
    /// The flow hash (valid when `meta.found` is [`Found::Transport`]).
    pub(super) hash: u64,
}

impl Ahead {
    pub(super) const NONE: Ahead = Ahead {
        meta: Meta::EMPTY,
        hash: 0,
    };

    /// Whether the packet is TCP/UDP to the balancer (its flow hash is valid).
    #[inline(always)]
    pub(super) fn is_transport(&self) -> bool {
        self.meta.found == Found::Transport
    }
}

/// New connections' policy checks made ahead, a burst at a time: the connections that
/// [`State::miss`] would check for the burst's packets whose flow the index did not show
/// and that are not addressed to sluice itself (routed traffic, and listeners bound to
/// other addresses),
/// and the verdicts of one [`policy::PolicyTables::verdicts`] call for them, whose
/// stages overlap the big tables' cache misses. Only a hint, like the flow prefetches:
/// a packet's check takes a verdict from here only for exactly the connection it asks
/// about (a flow an earlier packet of the burst created is found, and nothing is asked),
/// and otherwise asks the tables itself. Reused from burst to burst: a burst reads only
/// the entries its mask says it wrote.
pub(super) struct PolicyAhead {
    conns: [Conn; BURST],
    verdicts: [policy::Verdict; BURST],
    /// Per packet of the burst: its connection's index in `conns`.
    at: [u8; BURST],
    /// Per packet of the burst: where it goes ([`State::target`], which `miss` then
    /// need not work out again: listener lookup, Maglev pick).
    targets: [Target; BURST],
}

// The mask of packets with a decision is a `u32`.
const _: () = assert!(BURST <= 32);

impl PolicyAhead {
    const NONE: Conn = Conn {
        src: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        dst: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        proto: 0,
        dst_port: 0,
    };

    pub(super) fn new() -> PolicyAhead {
        PolicyAhead {
            conns: [Self::NONE; BURST],
            verdicts: [policy::Verdict::Allow; BURST],
            at: [0; BURST],
            targets: [Target::Routed; BURST],
        }
    }

    /// Decides the connections the packets of `ahead` without a flow in the index
    /// (`entries`, from [`FlowTable::prefetch_entry`]) would be checked for; returns the
    /// mask of the packets (bit `i` for `ahead[i]`) that got a decision.
    pub(super) fn decide(
        &mut self,
        st: &State,
        snap: &Snapshot,
        ahead: &[Ahead],
        entries: &[Option<FlowId>; BURST],
    ) -> u32 {
        let (mut mask, mut n) = (0u32, 0usize);
        let per_packet = self.at.iter_mut().zip(&mut self.targets);
        for (i, ((a, e), (at, target))) in ahead.iter().zip(entries).zip(per_packet).enumerate() {
            // Connections to sluice's own addresses (its virtual addresses) are left to
            // `miss`: their backends are few and cached, and with one end of the lookup
            // in cache the burst's stages cost more than they overlap (measured with
            // `bench_balance_policy`: `perf/NOTES.md`).
            if !a.is_transport()
                || e.is_some()
                || st.fwd.config().is_ours(a.meta.dst(), &snap.addresses)
            {
                continue;
            }
            *target = st.target(&a.meta, snap);
            let Some(conn) = State::checks(&a.meta, *target) else {
                continue;
            };
            if let Some(c) = self.conns.get_mut(n) {
                *c = conn;
                *at = n as u8;
                n += 1;
                mask |= 1 << i;
            }
        }
        if let (Some(conns), Some(out)) = (self.conns.get(..n), self.verdicts.get_mut(..n)) {
            snap.policy.verdicts(conns, out);
        }
        mask
    }

    /// What the pass found for packet `i` of the burst, if it checked it (per `mask`).
    #[inline]
    pub(super) fn get(&self, mask: u32, i: usize) -> Option<Prechecked> {
        if i >= BURST || (mask >> i) & 1 == 0 {
            return None;
        }
        let k = usize::from(*self.at.get(i)?);
        Some(Prechecked {
            target: *self.targets.get(i)?,
            conn: *self.conns.get(k)?,
            verdict: *self.verdicts.get(k)?,
        })
    }
}
